"""Both kernel implementations for tests, and whether the compiled one loaded."""
from __future__ import annotations

import os

from mqcore import _columns_py, _compat, _store_py

IMPLS = {"python": _store_py}
COLUMN_IMPLS = {"python": _columns_py}
try:
    from mqcore import _columns as _columns_c
    from mqcore import _store as _store_c
    IMPLS["cython"] = _store_c
    COLUMN_IMPLS["cython"] = _columns_c
except ImportError as e:  # reported by test_extension_loaded
    IMPORT_ERROR: ImportError | None = e
else:
    IMPORT_ERROR = None


def pure_python_forced() -> bool:
    return os.environ.get(_compat.PURE_PYTHON_ENV, "") not in ("", "0")
