"""mypy input (not collected by pytest): both kernel modules satisfy the StoreKernels Protocol."""
from mqcore import _compat, _store, _store_py
from mqcore.kernel_api import StoreKernels

compiled: StoreKernels = _store
twin: StoreKernels = _store_py
chosen: StoreKernels = _compat.kernels

# the broker pipeline's kernels satisfy PipelineKernels
from mqcore import _pipeline, _pipeline_py  # noqa: E402
from mqcore.kernel_api import PipelineKernels  # noqa: E402

pipeline_compiled: PipelineKernels = _pipeline
pipeline_twin: PipelineKernels = _pipeline_py
pipeline_chosen: PipelineKernels = _compat.pipeline_kernels
