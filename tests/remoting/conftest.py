"""The JSON writers under test: orjson (a dependency, the fast path) and the stdlib fallback.

``mqcore.remoting.command`` writes a JSON header with orjson when it is importable and with
its own fastjson-shaped writer otherwise (and for the headers orjson cannot render the Java
way). With orjson installed the fallback would never write a plain header in the suite, so a
break there would pass: the codec tests take this fixture and run once per writer.
Module-scoped (and restored by hand, not by monkeypatch) so hypothesis tests can use it.
"""
from __future__ import annotations

import pytest

from mqcore import jsonutil
from mqcore.remoting import command


@pytest.fixture(scope="module", params=["orjson", "without-orjson"])
def json_writer(request):
    if request.param == "orjson":
        assert command._orjson is not None, "orjson is a dependency of mqcore (pyproject.toml): install it"
        yield request.param
        return
    saved = command._orjson, jsonutil._orjson
    command._orjson = jsonutil._orjson = None  # what an install without orjson imports
    try:
        yield request.param
    finally:
        command._orjson, jsonutil._orjson = saved
