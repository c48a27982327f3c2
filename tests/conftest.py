"""Shared fixtures: every kernel test runs on both implementations.

The suite also fails loudly when the compiled extension did not load (unless
MQCORE_PURE_PYTHON forces the twin on purpose), so a broken build can never pass
as a slow green run.
"""
from __future__ import annotations

import os

import pytest

from mqcore import _compat, _store_py

IMPLS = {"python": _store_py}
try:
    from mqcore import _store as _store_c
    IMPLS["cython"] = _store_c
except ImportError as e:  # reported by test_extension_loaded
    _IMPORT_ERROR = e
else:
    _IMPORT_ERROR = None


def pytest_report_header(config):
    return "mqcore kernels: %s (compiled extension %s)" % (
        _compat.kernels.IMPLEMENTATION, "loaded" if _IMPORT_ERROR is None else "MISSING")


@pytest.fixture(params=["cython", "python"])
def kernels(request):
    """The Cython kernels and their pure-Python twin, one test run each."""
    if request.param not in IMPLS:
        pytest.fail("compiled extension mqcore._store did not load: %s" % _IMPORT_ERROR)
    return IMPLS[request.param]


@pytest.fixture
def both_kernels():
    if "cython" not in IMPLS:
        pytest.fail("compiled extension mqcore._store did not load: %s" % _IMPORT_ERROR)
    return IMPLS["cython"], IMPLS["python"]


def pure_python_forced() -> bool:
    return os.environ.get(_compat.PURE_PYTHON_ENV, "") not in ("", "0")
