"""mypy input (not collected by pytest): both kernel modules satisfy the StoreKernels Protocol."""
from mqcore import _compat, _store, _store_py
from mqcore.kernel_api import StoreKernels

compiled: StoreKernels = _store
twin: StoreKernels = _store_py
chosen: StoreKernels = _compat.kernels
