"""mypy input (not collected by pytest): each kernel module satisfies its Protocol — the store
kernels StoreKernels, the column kernels ColumnKernels, the pipeline's PipelineKernels and the
client wire kernels WireClientKernels."""
from mqcore import _columns, _columns_py, _compat, _store, _store_py, _wire_client, _wire_client_py
from mqcore.kernel_api import ColumnKernels, StoreKernels, WireClientKernels

compiled: StoreKernels = _store
twin: StoreKernels = _store_py
chosen: StoreKernels = _compat.kernels
compiled_columns: ColumnKernels = _columns
twin_columns: ColumnKernels = _columns_py
chosen_columns: ColumnKernels = _compat.default_column_kernels()

# the broker pipeline's kernels satisfy PipelineKernels
from mqcore import _pipeline, _pipeline_py  # noqa: E402
from mqcore.kernel_api import PipelineKernels  # noqa: E402

pipeline_compiled: PipelineKernels = _pipeline
pipeline_twin: PipelineKernels = _pipeline_py
pipeline_chosen: PipelineKernels = _compat.pipeline_kernels

wire_compiled: WireClientKernels = _wire_client
wire_twin: WireClientKernels = _wire_client_py
wire_chosen: WireClientKernels = _compat.wire_client_kernels
