"""Shared fixtures: every kernel test runs on both implementations.

The suite also fails loudly when the compiled extension did not load (unless
MQCORE_PURE_PYTHON forces the twin on purpose), so a broken build can never pass
as a slow green run.
"""
from __future__ import annotations

import pytest

from mqcore import _compat
from tests.support.kernels import COLUMN_IMPLS, IMPLS
from tests.support.kernels import IMPORT_ERROR as _IMPORT_ERROR


def pytest_report_header(config):
    return "mqcore kernels: %s (compiled extension %s)" % (
        _compat.kernels.IMPLEMENTATION, "loaded" if _IMPORT_ERROR is None else "MISSING")


@pytest.fixture(params=["cython", "python"])
def kernels(request):
    """The Cython kernels and their pure-Python twin, one test run each."""
    if request.param not in IMPLS:
        pytest.fail("compiled extension mqcore._store did not load: %s" % _IMPORT_ERROR)
    return IMPLS[request.param]


@pytest.fixture(params=["cython", "python"])
def column_kernels(request):
    """The column kernels (Spark's decoder), compiled and twin, one test run each."""
    if request.param not in COLUMN_IMPLS:
        pytest.fail("compiled extension mqcore._columns did not load: %s" % _IMPORT_ERROR)
    return COLUMN_IMPLS[request.param]


@pytest.fixture
def both_kernels():
    if "cython" not in IMPLS:
        pytest.fail("compiled extension mqcore._store did not load: %s" % _IMPORT_ERROR)
    return IMPLS["cython"], IMPLS["python"]
