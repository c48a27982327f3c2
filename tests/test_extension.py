from mqcore import _compat

from tests.conftest import _IMPORT_ERROR, pure_python_forced


def test_extension_loaded():
    """A silent fallback to the twin would hide a broken build: refuse it."""
    if pure_python_forced():
        assert _compat.kernels.IMPLEMENTATION == "python"
    else:
        assert _IMPORT_ERROR is None, _IMPORT_ERROR
        assert _compat.kernels.IMPLEMENTATION == "cython"
