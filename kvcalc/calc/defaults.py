"""Defaults of the memory plan and the roofline, as plain constants: the CLI's option
declarations read them (`kvcalc.cli.options`) without importing the arithmetic, so a command that
never plans (`kvcalc estimate MODEL`) does not pay for `memory_plan` or `roofline` at start-up.
`memory_plan` and `roofline` take theirs from here (one home each); the sources are cited there.
"""

#: CUDA context and runtime allocations outside the torch allocator, bytes (500 MiB; see
#: `memory_plan`: vLLM's profiler reports a few hundred MiB of "non-torch memory" on one GPU).
DEFAULT_CUDA_CONTEXT_BYTES = 500 * 2**20
#: fraction of GPU memory the engine may use (vLLM's `gpu_memory_utilization`, `vllm/config/cache.py`).
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
#: fraction of HBM bandwidth decode reaches (FlashInfer / FlashDecoding: 80-95%; see `roofline`).
DEFAULT_BW_EFFICIENCY = 0.8
#: fraction of dense peak FLOP/s reached (PaLM: 46.2% MFU; see `roofline`).
DEFAULT_FLOPS_EFFICIENCY = 0.5
