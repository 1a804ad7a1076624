"""The engines' numeric option defaults, as plain constants: the CLI's option declarations read
them (`kvcalc.cli.options`) without importing the engine modules, so a command that uses no
engine does not pay for `vllm`, `sglang`, `llamacpp` or `profile` at start-up. Each engine module
takes its default from here under its own name (`vllm.DEFAULT_BLOCK_SIZE`, ...), where its source
is cited.
"""

#: the vLLM release modelled by default (`--vllm-version`; `kvcalc/engines/vllm/__init__.py` VERSION_MODULES).
VLLM_VERSION = "0.33"
#: vLLM tokens per block (`--block-size`, `vllm/config/cache.py`).
VLLM_BLOCK_SIZE = 16
#: vLLM V1 `max_num_batched_tokens` on a GPU of 70 GiB or more (`vllm/engine/arg_utils.py`).
VLLM_MAX_NUM_BATCHED_TOKENS = 8192
#: SGLang tokens per page (`--page-size`).
SGLANG_PAGE_SIZE = 1
#: SGLang `--swa-full-tokens-ratio`: SWA-pool tokens per full-pool token (`server_args.py`).
SGLANG_SWA_FULL_TOKENS_RATIO = 0.8
#: llama.cpp `n_ubatch` (`-ub`, `common/common.h`).
LLAMACPP_N_UBATCH = 512
#: llama.cpp `n_batch` (`-b`, `common/common.h`), the cap on n_ubatch.
LLAMACPP_N_BATCH = 2048
