from mqcore import _compat

from tests.support.kernels import IMPORT_ERROR as _IMPORT_ERROR
from tests.support.kernels import pure_python_forced


def test_extension_loaded():
    """A silent fallback to the twin would hide a broken build: refuse it."""
    if pure_python_forced():
        assert _compat.kernels.IMPLEMENTATION == "python"
        assert _compat.default_column_kernels().IMPLEMENTATION == "python"
    else:
        assert _IMPORT_ERROR is None, _IMPORT_ERROR
        assert _compat.kernels.IMPLEMENTATION == "cython"
        assert _compat.default_column_kernels().IMPLEMENTATION == "cython"


def test_pipeline_extension_loaded():
    """The broker pipeline's kernels: the compiled module unless the twin is forced."""
    if pure_python_forced():
        assert _compat.pipeline_kernels.IMPLEMENTATION == "python"
    else:
        assert _compat.pipeline_kernels.IMPLEMENTATION == "cython"
