"""The only place that picks the kernels: the store's (``mqcore._store``, twin
``mqcore._store_py``), the broker pipeline's (``mqcore._pipeline``, twin ``mqcore._pipeline_py``),
the client wire kernels (``mqcore._wire_client``, twin ``mqcore._wire_client_py``) and the column
kernels Spark uses (``mqcore._columns``, twin ``mqcore._columns_py``).

The Cython extensions are the default. Setting the environment
variable ``MQCORE_PURE_PYTHON=1`` forces the pure-Python twins on purpose (for
debugging and for the tests that compare both). If the extension is missing
without that variable, importing this module fails loudly (the column kernels: when
first asked for, so a broker never loads the Spark decoder): a silent fallback
would hide a broken build behind a 50x slower store.

Library code reaches the kernels through one accessor: a class or function that
needs them takes a ``kernels=`` argument (typed :class:`~mqcore.kernel_api.StoreKernels`)
and falls back to :func:`default_kernels` when it is None, so a test can hand in
either implementation. ``tests/test_layering.py`` checks that no library module binds
the chosen module at import time instead.
"""
from __future__ import annotations

import functools
import os

from mqcore.kernel_api import ColumnKernels, PipelineKernels, StoreKernels, WireClientKernels

PURE_PYTHON_ENV = "MQCORE_PURE_PYTHON"


def pure_python_forced() -> bool:
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def _not_built(module: str, e: ImportError) -> ImportError:
    return ImportError(
        f"mqcore's compiled extension mqcore.{module} did not load ({e}). Rebuild it with "
        f"'pip install .' (or 'python setup.py build_ext --inplace'), or set {PURE_PYTHON_ENV}=1 "
        "to run the pure-Python kernels on purpose.")


def _load() -> StoreKernels:
    if pure_python_forced():
        from mqcore import _store_py
        return _store_py
    try:
        from mqcore import _store
    except ImportError as e:  # pragma: no cover - exercised by a broken install
        raise _not_built("_store", e) from e
    return _store


def _load_wire_client() -> WireClientKernels:
    if pure_python_forced():
        from mqcore import _wire_client_py
        return _wire_client_py
    try:
        from mqcore import _wire_client
    except ImportError as e:  # pragma: no cover - exercised by a broken install
        raise _not_built("_wire_client", e) from e
    return _wire_client


#: the implementation chosen at import; read it through default_kernels() (tests and
#: benchmarks may import it directly)
kernels: StoreKernels = _load()
#: the client wire kernels chosen at import; read them through default_wire_client_kernels()
wire_client_kernels: WireClientKernels = _load_wire_client()


def default_kernels() -> StoreKernels:
    """The kernels to use when a caller did not inject any."""
    return kernels


def _load_pipeline() -> PipelineKernels:
    if pure_python_forced():
        from mqcore import _pipeline_py
        return _pipeline_py
    try:
        from mqcore import _pipeline
    except ImportError as e:  # pragma: no cover - exercised by a broken install
        raise _not_built("_pipeline", e) from e
    return _pipeline


#: the broker pipeline's kernels, chosen at import the same way (read through
#: default_pipeline_kernels())
pipeline_kernels: PipelineKernels = _load_pipeline()


def default_pipeline_kernels() -> PipelineKernels:
    """The broker pipeline kernels to use when a caller did not inject any."""
    return pipeline_kernels


@functools.cache  # chosen once, on first use: only Spark needs the column kernels
def default_column_kernels() -> ColumnKernels:
    """The column kernels (Spark's decoder) to use when a caller did not inject any."""
    if pure_python_forced():
        from mqcore import _columns_py
        return _columns_py
    try:
        from mqcore import _columns
    except ImportError as e:  # pragma: no cover - exercised by a broken install
        raise _not_built("_columns", e) from e
    return _columns


def default_wire_client_kernels() -> WireClientKernels:
    """The client wire kernels to use when a caller did not inject any."""
    return wire_client_kernels
