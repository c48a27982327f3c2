"""mypy input (not collected by pytest): the kernel modules satisfy their Protocols."""
from mqcore import _compat, _store, _store_py, _wire_client, _wire_client_py
from mqcore.kernel_api import StoreKernels, WireClientKernels

compiled: StoreKernels = _store
twin: StoreKernels = _store_py
chosen: StoreKernels = _compat.kernels

wire_compiled: WireClientKernels = _wire_client
wire_twin: WireClientKernels = _wire_client_py
wire_chosen: WireClientKernels = _compat.wire_client_kernels
