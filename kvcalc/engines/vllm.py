"""vLLM's paged KV cache: blocks, pages, hybrid groups, and the lines vLLM logs.

Models three versions (`VERSIONS`; `--vllm-version`): vLLM 0.33 (the current release, V1
engine), vLLM 0.11 (V1, the 0.10-0.11 line) and the V0 engine of vLLM 0.6.x
(`vllm/worker/cache_engine.py`, `vllm/executor/gpu_executor.py`). One default everywhere: the
module's functions (`version=`) and `VllmOptions.version` (the CLI, `kvcalc.capacity`) model
`CURRENT_VERSION`, 0.33. Rules, each from its source (0.11 unless a version is named):

- Page (one block of one layer), `vllm/v1/kv_cache_interface.py` `AttentionSpec.page_size_bytes`
  / `FullAttentionSpec.real_page_size_bytes`: block_size x kv_heads_per_rank x (head_size +
  head_size_v) x element bytes (= 2 x block_size x heads x head_size x bytes when K and V heads
  match); `MLAAttentionSpec`: block_size x 1 x (kv_lora_rank + qk_rope_head_dim) x bytes, one latent.
  Per-token-head scales (`kv_cache_dtype` `int8_per_token_head` / `fp8_per_token_head`,
  `KVQuantMode.is_per_token_head`): + 2 x block_size x kv_heads x 4 bytes (fp32) per page.
  Plain `fp8` / `fp8_e4m3` / `fp8_e5m2` keep one per-tensor scale outside the pages: no extra bytes.
- Each layer's own KV dtype (0.33): Falcon's attention is built without the cache config
  (`vllm/model_executor/models/falcon.py`), so `--kv-cache-dtype` does not reach it and its
  cache stays in the model's dtype (`OWN_DTYPE_MODEL_TYPES`).
- Attention backend and block size (`attention_block_size`; without a GPU or backend kvcalc
  assumes Hopper and says so). 0.11, `vllm/platforms/cuda.py` `CudaPlatform.check_and_update_config`:
  an MLA model's backend forces its block whatever `--block-size` says: FlashMLA (the default on
  Hopper, compute capability 9.x) 64 tokens, CUTLASS MLA (the default on Blackwell 10.x) 128,
  FlashInfer MLA 32 or 64 (else 64); Triton MLA (the default elsewhere) keeps `--block-size`; AMD
  (`vllm/platforms/rocm.py`): TRITON_MLA unless VLLM_ROCM_USE_AITER=1; ROCM_AITER_MLA needs block
  size 1. 0.33, `CudaPlatform.get_attn_backend_cls` / `_get_backend_priorities` and
  `Platform.update_block_size_for_backend`: the first backend of the GPU's priority list that
  `validate_configuration` accepts (head size, KV dtype, a `--block-size` given, compute
  capability, `supports_combination`; `mla_backend_reasons`), at its `get_preferred_block_size`
  when no `--block-size` is given: Hopper FLASH_ATTN_MLA 16 (bf16/fp16 caches only), else FLASHMLA
  64 (fp8); Blackwell FLASHINFER_MLA 32 (qk_nope_head_dim 64 / 128 / 192), else CUTLASS_MLA 128;
  SM120 and ROCm TRITON_MLA 16. Non-MLA backends (FLASH_ATTN, FLASHINFER, TRITON_ATTN, ROCM_ATTN)
  all prefer 16, so the default stays; on CUDA a block size not a multiple of 16 finds none.
- Hybrid Mamba / Gated-DeltaNet models (Qwen3-Next, Qwen3.5 (0.33 only), Jamba, Nemotron-H,
  Granite-4.0-H; `kvcalc.engines.vllm_hybrid`): the state page (`MambaSpec.page_size_bytes`),
  the attention block raised until one page holds one state and the state padded to it (0.11
  `HybridAttentionMambaModelConfig.verify_and_update_config`: multiples of 16; 0.33
  `Platform._align_hybrid_block_size`: multiples of max(16, block size), lcm 64 for a FlashInfer
  Gated-DeltaNet prefill with prefix caching), each Mamba layer group a `Group('mamba')` holding 1
  page per request (0.11; 0.33 without prefix caching) or 2 + checkpoint blocks (0.33's default
  'align' mode, `MambaSpec.max_memory_usage_bytes`); mlp-only layers have no spec. 0.11 logs
  "GPU KV cache size" with the smallest group block size, a Mamba group's being max_model_len.
  V0 keeps the state outside the blocks: refused.
- Llama-4's chunked local attention (`ChunkedLocalAttentionSpec`; model types in
  `CHUNKED_LOCAL_MODEL_TYPES`, whose sliding layers are the chunked ones, window = chunk):
  cdiv(min(chunk + in_flight, L), block_size) pages, no straddle page; its own groups beside the
  full layers with the hybrid allocator, which 0.11 turns off for such models unless
  VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1 and 0.33 keeps on (`chunked_hybrid_allowed`);
  without it the chunked layers are full ones (`unify_hybrid_kv_cache_specs`).
- Blocks, `vllm/v1/core/kv_cache_utils.py` `get_num_blocks`: available // page // layers per group.
  All layers alike (`is_kv_cache_spec_uniform`): one group of every layer. Sliding + full with the
  hybrid allocator (`_get_kv_cache_groups_uniform_page_size`): layers_per_group (vLLM's `group_size`) = the smaller layer count
  (0.33: the larger one if it is under 1.5x the smaller; 0.11 has no such rule), each kind split into cdiv(n, layers_per_group)
  groups (padding layers waste memory). Without it (`--disable-hybrid-kv-cache-manager`,
  `unify_hybrid_kv_cache_specs`): sliding layers become full ones (blocks for every token).
- "GPU KV cache size: N tokens": 0.11 `_report_kv_cache_config`: num_blocks // n_groups x
  block_size; 0.33 `kv_cache_utils.get_kv_cache_capacity`: int(max concurrency x max_model_len)
  (the same for one full-attention group whose L is a multiple of the block size; larger for
  sliding-window models, whose requests hold only their window). Printed with thousands separators.
  0.33 logs it on one line with the concurrency ("GPU KV cache size: N tokens, Maximum concurrency
  for ...", `update_kv_cache_capacity`), 0.11 on two (`kv_figures_lines`); "Available KV cache
  memory" is `format_gib` in 0.33 ("40.0"), "%.2f" in 0.11 ("40.00") (`available_memory_line`).
- "Maximum concurrency for L tokens per request: X.XXx", `get_max_concurrency_for_kv_cache_config`:
  num_blocks / sum over groups of pages per request; a full group needs cdiv(L, block_size)
  pages (`FullAttentionSpec.max_memory_usage_bytes`), a sliding one cdiv(min(window - 1 +
  in_flight, L), block_size) + 1 (`SlidingWindowSpec.max_memory_usage_bytes`; 0.33
  `SlidingWindowSpec.max_admission_blocks_per_request`). in_flight is max_num_batched_tokens in
  0.11; in 0.33 `VllmConfig.max_in_flight_tokens` = max_concurrent_batches x
  max_num_batched_tokens, 2 batches with async scheduling (on by default in `vllm serve`), else 1.
- V0: `CacheEngine.get_cache_block_size` = block_size x sum over layers of (K + V) bytes per token
  (sliding layers full); GPU blocks = available // that, CPU blocks = swap_space // that;
  logs "# GPU blocks: N, # CPU blocks: M" (0.6.4+ prints "# CUDA blocks") and
  "Maximum concurrency for L tokens per request: X.XXx" = blocks x block_size / L. swap_space
  defaults to 4 GiB (`vllm/engine/arg_utils.py` `EngineArgs.swap_space`). 0.6.6 refuses, with its
  own text: block sizes other than 8 / 16 / 32 on CUDA (argparse choices 8-128,
  `CacheConfig._verify_args` "up to 32"), and models whose architecture its registry lacks
  (`V06_UNSUPPORTED_ARCHITECTURES`: Qwen3, Gemma-3, gpt-oss, Llama-4, Falcon-H1 ...).

- Block sizes, `vllm/config/cache.py` (0.11): `BlockSize = Literal[1, 8, 16, 32, 64, 128, 256]`
  (0.10 lacked 256); anything else is refused.
- max_model_len, `vllm/config/model.py` `_get_and_verify_max_len`: longer than the model's
  max_position_embeddings is refused ("User-specified max_model_len ... VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
  unless `VLLM_ALLOW_LONG_MAX_MODEL_LEN=1` (`allow_long_max_model_len`), which only warns. The
  longest context kvcalc reports never exceeds the model's limit (or the max_model_len allowed past it).
- Start-up checks, `vllm/v1/core/kv_cache_utils.py` `check_enough_kv_cache_memory`: available <= 0
  raises "No available memory for the cache blocks. ..."; less than one request of max_model_len
  needs (sum over layers of `max_memory_usage_bytes`, each layer's own spec before the hybrid
  manager's unification) raises "To serve at least one request with the models's max seq len (L),
  (X GiB KV cache is needed, ..." (texts byte for byte per version: `_too_small`). 0.33
  (`vllm/v1/core/kv_cache_planning.py` `get_kv_cache_configs`, `_max_memory_usage_bytes_from_groups`):
  the check and the estimated maximum length use the budget less one block of every group (the
  null block `BlockPool` holds back), and one request costs bytes per block (page x layers per
  group, padding layers included) x its pages over all groups. kvcalc raises the first, and the
  second when not one block fits; otherwise it warns (`KvcalcWarning`) and notes it, so the
  block figures stay readable. V0 (`vllm/worker/worker.py` `raise_if_cache_size_invalid`): 0 GPU
  blocks raise the same "No available memory" text; L > blocks x block_size warns.
- KV dtype `auto`, `vllm/config/model.py` `_resolve_auto_dtype` (0.10.1+): the model's dtype, but
  an fp32 checkpoint is served in the platform's first supported dtype (bf16 on compute
  capability >= 8.0, `vllm/platforms/cuda.py` `supported_dtypes`); V0 0.6.x
  `_get_and_verify_dtype`: fp32 -> fp16. Either way 2 bytes per value (`default_kv_dtype`).

What changed between the versions modelled: 0.6 -> 0.11, the V1 engine (pages per layer, hybrid
groups, the null block, the concurrency formula over groups); 0.11 -> 0.33, the token figure from
the concurrency, the sliding-window admission cap with async scheduling's two batches in flight,
the null block and padding layers in the start-up check, Falcon's cache dtype, the longer
start-up messages (a link to the conserving-memory guide), the 1.5x group-size rule, prefix caching
on for hybrid models ('align' Mamba pages, fp32 SSM state for Nemotron-H and Qwen3.5), the
hybrid block alignment moved to the platform, chunked local attention kept in the hybrid allocator,
the attention backend chosen from a priority list with the block size taking part (an MLA
model's block no longer forced: 16 on Hopper, 32 on Blackwell).

Tensor parallelism: each rank holds kv_heads_per_rank heads (MLA: the whole latent), and
`available` is one rank's memory; vLLM takes the smallest block count over ranks, which for equal
ranks is any rank's. Not modelled (refused with the reason): Mamba layers beside MLA or sliding
layers, attention-free Mamba models, linear attention other than Gated DeltaNet, hybrids in V0.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from dataclasses import field as dc_field

from kvcalc.calc.kv_cache import (
    check_tp,
    kv_heads_per_rank,
    layer_kv_bytes_per_token,
    refuse_hybrid_layers,
    refuse_indexer,
)
from kvcalc.engines import SEARCH_LIMIT_TOKENS, defaults, longest_fitting
from kvcalc.errors import MESSAGE, OPTION_SAYS, KvcalcError, KvcalcWarning, flag
from kvcalc.formats import StorageFormat
from kvcalc.results import EngineResult
from kvcalc.schema import LayerSpec, ModelSpec

#: the versions modelled, by `--vllm-version` value: V0 of 0.6.x, V1 of 0.11, V1 of 0.33.
VERSIONS = ("0.6", "0.11", "0.33")
#: the current vLLM release: what `VllmOptions` (the CLI, `kvcalc.capacity`) models by default.
CURRENT_VERSION = defaults.VLLM_VERSION
#: `--vllm-version` value -> the `engine_version` a result names.
VERSION_LABELS = {"0.6": "vLLM 0.6.x (V0 engine)", "0.11": "vLLM 0.11 (V1 engine)", "0.33": "vLLM 0.33 (V1 engine)"}
VERSION = "vLLM 0.33 (V1 engine) by default; vLLM 0.11 (V1) and 0.6.x (V0) with --vllm-version"
DEFAULT_BLOCK_SIZE = defaults.VLLM_BLOCK_SIZE
#: vLLM V1 default `max_num_batched_tokens` for `vllm serve` on a GPU under 70 GiB is 2048, on
#: larger ones 8192 (`vllm/engine/arg_utils.py` `_set_default_args`); it only matters for
#: sliding-window pages in the concurrency figure.
DEFAULT_MAX_NUM_BATCHED_TOKENS = defaults.VLLM_MAX_NUM_BATCHED_TOKENS
#: block sizes vLLM 0.11 accepts (`vllm/config/cache.py` `BlockSize`).
BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
#: vLLM's start-up error when the profiled KV memory is <= 0 (0.11 `vllm/v1/core/kv_cache_utils.py`
#: `check_enough_kv_cache_memory`; V0 `raise_if_cache_size_invalid`).
NO_MEMORY = ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
             "when initializing the engine.")
#: 0.33's text of the same error (`vllm/v1/core/kv_cache_planning.py` `_check_enough_kv_cache_memory`,
#: lines 57-64): the flag's CPU clause and the guide's link.
NO_MEMORY_033 = ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                 "when initializing the engine (this flag also controls CPU memory reservation on the CPU "
                 "backend, despite its name). "
                 "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
#: 0.33's start-up messages end with a pointer to the guide (`_check_enough_kv_cache_memory`).
SEE_GUIDE = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
#: model types whose attention is built without the cache config in 0.33, so `--kv-cache-dtype`
#: does not reach their cache (`vllm/model_executor/models/falcon.py` `FalconAttention`).
OWN_DTYPE_MODEL_TYPES = frozenset({"falcon"})
#: MLA attention backends (`--attention-backend`, vLLM's `VLLM_ATTENTION_BACKEND`) -> the block
#: size they force (None: --block-size stands), `vllm/platforms/cuda.py` `check_and_update_config`.
MLA_BACKENDS: dict[str, int | None] = {"FLASHMLA": 64, "CUTLASS_MLA": 128, "FLASHINFER_MLA": 64, "TRITON_MLA": None,
                                       "ROCM_AITER_MLA": None}
#: the MLA backends of AMD GPUs (`vllm/platforms/rocm.py`); TRITON_MLA runs on both vendors.
ROCM_MLA_BACKENDS = frozenset({"ROCM_AITER_MLA"})
#: block sizes FlashInfer MLA takes as given (others become 64).
FLASHINFER_MLA_BLOCK_SIZES = (32, 64)
#: attention backends of non-MLA models: none changes the block size kvcalc models.
OTHER_BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "TREE_ATTN")
#: the GPU kvcalc assumes for the MLA block size when neither --gpu nor --attention-backend is given.
ASSUMED_COMPUTE_CAPABILITY = "9.0"
#: vLLM's env var (and kvcalc's option) that lets max_model_len exceed the model's own limit.
ALLOW_LONG_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
#: `kv_cache_dtype` suffix whose pages carry fp32 scales per token and head.
PER_TOKEN_HEAD = "_per_token_head"
SCALE_BYTES = 4  # torch.float32


def default_kv_dtype(model: ModelSpec, v0: bool = False) -> tuple[str, str]:
    """(format name, label) of `--kv-cache-dtype auto`: the dtype vLLM serves the model in.

    The model's dtype, except fp32 checkpoints: bf16 in vLLM 0.10.1+ on compute capability >= 8.0
    (`vllm/config/model.py` `_resolve_auto_dtype` picks `current_platform.supported_dtypes[0]`),
    fp16 in V0 (0.6.x `vllm/config.py` `_get_and_verify_dtype`: "we use float16 for float32
    models"). gpt2 (fp32): 12 layers x 2 x 12 heads x 64 x 2 B = 36,864 B/token, not 73,728.
    """
    from kvcalc.formats import kv_format

    name = kv_format(model.dtype).name
    if name == "fp32":
        name = "fp16" if v0 else "bf16"
        return name, f"auto ({name}: fp32 checkpoint served in {name})"
    return name, f"auto ({name})"


#: vLLM 0.6.6's `--block-size` choices (`vllm/engine/arg_utils.py` `EngineArgs.add_cli_args`:
#: `choices=[8, 16, 32, 64, 128]`); argparse refuses any other before the engine starts.
V06_BLOCK_SIZE_CHOICES = (8, 16, 32, 64, 128)
#: vLLM 0.6.6 on CUDA: "CUDA Paged Attention kernel only supports block sizes up to 32"
#: (`vllm/config.py` `CacheConfig._verify_args`), so 64 and 128 are refused on NVIDIA GPUs.
V06_CUDA_MAX_BLOCK_SIZE = 32
#: vLLM 0.6.6's default `--swap-space` (`vllm/engine/arg_utils.py` `EngineArgs.swap_space: float =
#: 4  # GiB`; `CacheConfig.swap_space_bytes = swap_space * GiB_bytes`): CPU swap per GPU, bytes.
V06_SWAP_SPACE_BYTES = 4 * 2**30


def check_block_size(block_size: int, version: str = CURRENT_VERSION) -> None:
    """Raise `KvcalcError` (field `block_size`) unless `block_size` is one vLLM `version` accepts:
    0.11 / 0.33 `BLOCK_SIZES`; 0.6 (vLLM 0.6.6 on CUDA) 8, 16 or 32, refused with vLLM's own
    text: argparse's "invalid choice" outside `V06_BLOCK_SIZE_CHOICES`, `CacheConfig._verify_args`'s
    "CUDA Paged Attention kernel only supports block sizes up to 32" for 64 and 128."""
    if block_size <= 0:
        raise KvcalcError(f"must be a positive integer, got {block_size}", field="block_size", value=block_size,
                          form=OPTION_SAYS)
    if version == "0.6":
        if block_size not in V06_BLOCK_SIZE_CHOICES:  # Python 3.11 argparse `_check_value`
            raise KvcalcError(f"vLLM 0.6 refuses it: argument --block-size: invalid choice: {block_size} (choose from "
                              f"{', '.join(map(str, V06_BLOCK_SIZE_CHOICES))}) (vllm/engine/arg_utils.py)",
                              field="block_size", value=block_size)
        if block_size > V06_CUDA_MAX_BLOCK_SIZE:
            raise KvcalcError(f"vLLM 0.6 refuses it: CUDA Paged Attention kernel only supports block sizes up to "
                              f"{V06_CUDA_MAX_BLOCK_SIZE}. Got {block_size}. (vllm/config.py CacheConfig._verify_args)",
                              field="block_size", value=block_size)
        return
    if block_size not in BLOCK_SIZES:
        raise KvcalcError(f"vLLM accepts {', '.join(map(str, BLOCK_SIZES))} (vllm/config/cache.py BlockSize)",
                          field="block_size", value=block_size)


def needed_bytes(model: ModelSpec, groups: list[Group], max_model_len: int, block_size: int, page: int,
                 max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS) -> int:
    """KV bytes one request of `max_model_len` needs, as `check_enough_kv_cache_memory` sums them:
    per real layer (no padding layers) its group's pages x page."""
    return sum(g.n_layers * pages_per_request(g, max_model_len, block_size, max_num_batched_tokens) * page
               for g in groups)


def format_gib(n_bytes: int) -> str:
    """GiB as vLLM 0.33 prints them (`vllm/utils/mem_utils.py` `format_gib`:
    f"{round(b / GiB_bytes, 2)}"): 2**29 -> '0.5', 40 x 2**30 -> '40.0', 6.51 GiB -> '6.51'."""
    return f"{round(n_bytes / 2**30, 2)}"


def _too_small(L: int, needed: int, available: int, estimated: int, version: str = CURRENT_VERSION) -> str:
    """vLLM's message when one request of L does not fit, byte for byte per version.

    0.33 (`vllm/v1/core/kv_cache_planning.py` `_check_enough_kv_cache_memory`, lines 70-87):
    "model's", GiB by `format_gib`, the estimated length sentence ending in a space, the
    `gpu_memory_utilization` CPU clause, the guide's link. 0.11 (`vllm/v1/core/kv_cache_utils.py`
    `check_enough_kv_cache_memory`, lines 710-723): "models's", GiB to 2 places, then
    f"{estimated_msg} Try ...", so with no estimated length (estimated_msg "") two spaces: "GiB).  Try".
    """
    if version == "0.33":
        est = (f"Based on the available memory, the estimated maximum model length is {estimated}. "
               if estimated > 0 else "")
        return (f"To serve at least one request with the model's max seq len ({L}), ({format_gib(needed)} GiB KV "
                f"cache is needed, which is larger than the available KV cache memory ({format_gib(available)} GiB). "
                f"{est}Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) "
                f"or decreasing `max_model_len` when initializing the engine. {SEE_GUIDE}")
    est = f"Based on the available memory, the estimated maximum model length is {estimated}." if estimated > 0 else ""
    return (f"To serve at least one request with the models's max seq len ({L}), ({needed / 2**30:.2f} GiB KV "
            f"cache is needed, which is larger than the available KV cache memory ({available / 2**30:.2f} GiB). "
            f"{est} Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")


def no_memory_message(version: str = CURRENT_VERSION) -> str:
    """vLLM's "No available memory" start-up error in `version`: `NO_MEMORY_033` in 0.33, else `NO_MEMORY`."""
    return NO_MEMORY_033 if version == "0.33" else NO_MEMORY


def kv_figures_lines(tokens: int, max_model_len: int, concurrency: float, version: str = CURRENT_VERSION) -> list[str]:
    """The start-up lines vLLM logs with the KV cache figures, per version.

    0.33 (`vllm/v1/core/kv_cache_utils.py` `update_kv_cache_capacity`, lines 1136-1153): one line,
    "GPU KV cache size: N tokens, Maximum concurrency for L tokens per request: X.XXx".
    0.11 (`kv_cache_utils.get_kv_cache_config_from_groups`, lines 1087-1092): two lines,
    "GPU KV cache size: N tokens" and "Maximum concurrency for L tokens per request: X.XXx".
    N and L with thousands separators, X with `%.2f`.
    """
    size = f"GPU KV cache size: {tokens:,} tokens"
    conc = f"Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x"
    return [f"{size}, {conc}"] if version == "0.33" else [size, conc]


def available_memory_line(kv_memory_bytes: int, version: str = CURRENT_VERSION) -> str:
    """The worker's "Available KV cache memory" line: 0.33 `vllm/v1/worker/gpu_worker.py`
    `determine_available_memory` (line 772) prints `format_gib` ('40.0 GiB'); 0.11 (line 298) `%.2f` ('40.00 GiB')."""
    gib = format_gib(kv_memory_bytes) if version == "0.33" else f"{kv_memory_bytes / 2**30:.2f}"
    return f"Available KV cache memory: {gib} GiB"


def check_version(version: str) -> str:
    """`version` as one of `VERSIONS` ('0.33.0' and 'v0.11' are accepted); raises `KvcalcError`
    (field `vllm_version`) for any other."""
    text = str(version).strip().lower().removeprefix("v")
    for known in VERSIONS:
        if text == known or text.startswith(known + "."):
            return known
    raise KvcalcError(f"kvcalc models vLLM {', '.join(VERSIONS)} (0.6: the V0 engine)", field="vllm_version",
                      value=version)


def in_flight_tokens(version: str, max_num_batched_tokens: int, async_scheduling: bool = True) -> int:
    """Tokens scheduled but not yet settled, which a sliding-window request holds beyond its window.

    0.11: max_num_batched_tokens (`SlidingWindowSpec.max_memory_usage_bytes`). 0.33:
    `VllmConfig.max_in_flight_tokens` = max_concurrent_batches x max_num_batched_tokens, two
    batches with async scheduling (`vllm/config/vllm.py`; on by default in `vllm serve`), else one.
    """
    if version == "0.33" and async_scheduling:
        return 2 * max_num_batched_tokens
    return max_num_batched_tokens


#: vLLM 0.33's default block size (`vllm/config/cache.py` `CacheConfig.DEFAULT_BLOCK_SIZE`): the
#: size a backend's `get_preferred_block_size` starts from when `--block-size` is not given.
DEFAULT_BLOCK_SIZE_033 = 16
#: vLLM cache dtypes (`vllm/config/cache.py` `CacheDType`) the 0.33 backends list.
_UNQUANTIZED = ("auto", "float16", "bfloat16")
_FP8 = ("fp8", "fp8_e4m3")
#: head sizes of `MLACommonBackend.get_supported_head_sizes` (kv_lora_rank + qk_rope_head_dim)
MLA_HEAD_SIZES = (320, 512, 576)


@dataclass(frozen=True)
class MlaBackend:
    """One of vLLM 0.33's dense MLA attention backends as its selector sees it
    (`AttentionBackend.validate_configuration`): the cache dtypes it lists
    (`supported_kv_cache_dtypes`), its kernel block sizes (`get_supported_kernel_block_sizes`:
    fixed sizes, or every multiple of `multiple_of`), the compute capability majors it runs on
    (`supports_compute_capability`; None: any), its head sizes (`get_supported_head_sizes`; ():
    any) and the file it is in (under `vllm/v1/attention/backends/mla/`)."""

    kv_dtypes: tuple[str, ...]
    block_sizes: tuple[int, ...] = ()
    multiple_of: int | None = None
    cc_majors: tuple[int, ...] | None = None
    head_sizes: tuple[int, ...] = MLA_HEAD_SIZES
    source: str = ""

    def supports_block_size(self, block_size: int | None) -> bool:
        """`AttentionBackend.supports_block_size`: None (not given) or a multiple of one kernel
        block size (TRITON_MLA's override is the same test: a multiple of 16)."""
        if block_size is None:
            return True
        return any(block_size % s == 0 for s in (*self.block_sizes, *([self.multiple_of] if self.multiple_of else [])))

    def preferred_block_size(self, default: int = DEFAULT_BLOCK_SIZE_033) -> int:
        """`AttentionBackend.get_preferred_block_size`: `default` if supported, else the smallest
        kernel block size (FLASHMLA 64, FLASHINFER_MLA 32, CUTLASS_MLA 128)."""
        if self.supports_block_size(default):
            return default
        return min((*self.block_sizes, *([self.multiple_of] if self.multiple_of else [])))


#: vLLM 0.33's dense MLA backends, by `--attention-backend` name.
MLA_BACKENDS_033: dict[str, MlaBackend] = {
    "FLASH_ATTN_MLA": MlaBackend(_UNQUANTIZED, multiple_of=16, cc_majors=(9,), source="flashattn_mla.py"),
    "FLASHMLA": MlaBackend(_UNQUANTIZED + _FP8, block_sizes=(64,), cc_majors=(9, 10), source="flashmla.py"),
    "FLASHINFER_MLA": MlaBackend(_UNQUANTIZED + _FP8, block_sizes=(32, 64), cc_majors=(10,),
                                 source="flashinfer_mla.py"),
    "TOKENSPEED_MLA": MlaBackend(_FP8, block_sizes=(32, 64), cc_majors=(10,), source="tokenspeed_mla.py"),
    "CUTLASS_MLA": MlaBackend(_UNQUANTIZED + _FP8, block_sizes=(128,), cc_majors=(10,), source="cutlass_mla.py"),
    "TRITON_MLA": MlaBackend(_UNQUANTIZED + _FP8, multiple_of=16, head_sizes=(), source="triton_mla.py"),
    "ROCM_AITER_MLA": MlaBackend(_UNQUANTIZED + _FP8 + ("fp8_e5m2",), multiple_of=1, head_sizes=(),
                                 source="rocm_aiter_mla.py"),
}


def mla_backend_priorities(compute_capability: str | None, vendor: str | None = None) -> tuple[str, ...]:
    """vLLM 0.33's dense MLA backends in the order its selector tries them.

    NVIDIA, `vllm/platforms/cuda.py` `_get_backend_priorities` (use_mla): compute capability
    10.x: FLASHINFER_MLA, TOKENSPEED_MLA, CUTLASS_MLA, FLASH_ATTN_MLA, FLASHMLA, TRITON_MLA;
    12.x: TRITON_MLA; any other: FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA. The
    sparse backends at the end of each list refuse a dense model ("non-sparse not supported")
    and are left out. AMD, `vllm/platforms/rocm.py` `_get_backend_priorities`: TRITON_MLA
    (ROCM_AITER_MLA first only with VLLM_ROCM_USE_AITER=1, off by default).
    """
    if vendor == "amd":
        return ("TRITON_MLA",)
    major = int((compute_capability or ASSUMED_COMPUTE_CAPABILITY).split(".")[0])
    if major == 10:
        return ("FLASHINFER_MLA", "TOKENSPEED_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA")
    if major == 12:
        return ("TRITON_MLA",)
    return ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA")


def mla_backend_reasons(name: str, model: ModelSpec, kv_cache_dtype: str | None, block_size: int | None,
                        compute_capability: str | None, vendor: str | None = None) -> list[str]:
    """Why vLLM 0.33 finds MLA backend `name` invalid, in its own words and order ([] = valid):
    `AttentionBackend.validate_configuration` (head size, kv cache dtype, block size, compute
    capability) then the backend's `supports_combination`: FLASH_ATTN_MLA needs FA3 on sm90
    (`fa_utils.flash_attn_supports_mla`), FLASHMLA's dense kernel Hopper
    (`ops/flashmla.is_flashmla_dense_supported`), FLASHINFER_MLA qk_nope_head_dim in [64, 128,
    192], TOKENSPEED_MLA DeepSeek-R1's dims (128, 64, 128). Kernels are assumed present as in the
    official CUDA wheel (vllm 0.33.0: FA3, `_flashmla_C`, flashinfer-python and tokenspeed-mla
    are in it). `kv_cache_dtype` is vLLM's name ('auto', 'fp8', ...; None: not checked)."""
    b = MLA_BACKENDS_033[name]
    reasons = []
    head_size = model.resolved_head_dim
    if b.head_sizes and head_size not in b.head_sizes:
        reasons.append("head_size not supported")
    if kv_cache_dtype is not None and kv_cache_dtype not in b.kv_dtypes:
        reasons.append("kv_cache_dtype not supported")
    if not b.supports_block_size(block_size):
        reasons.append("block_size not supported")
    if vendor == "amd":
        return reasons
    major = int((compute_capability or ASSUMED_COMPUTE_CAPABILITY).split(".")[0])
    if b.cc_majors is not None and major not in b.cc_majors:
        reasons.append("compute capability not supported")
    if name == "FLASH_ATTN_MLA" and major != 9:
        reasons.append("FlashAttention MLA not supported on this device")
    elif name == "FLASHMLA" and major != 9:
        reasons.append("FlashMLA Dense is only supported on Hopper devices.")
    elif name == "FLASHINFER_MLA":
        nope = model.qk_nope_head_dim if model.qk_nope_head_dim is not None else 1  # getattr(..., 1)
        if nope not in (64, 128, 192):
            reasons.append(f"FlashInfer MLA kernel requires qk_nope_head_dim in [64, 128, 192], but got {nope}")
    elif name == "TOKENSPEED_MLA":
        dims = tuple(d or 0 for d in (model.qk_nope_head_dim, model.qk_rope_head_dim, model.v_head_dim))
        if dims != (128, 64, 128):
            reasons.append("tokenspeed_mla requires DeepSeek R1 MLA dimensions (qk_nope_head_dim=128, "
                           f"qk_rope_head_dim=64, v_head_dim=128), got ({dims[0]}, {dims[1]}, {dims[2]})")
    return reasons


def vllm_cache_dtype(model: ModelSpec, k: StorageFormat, per_token_head_scales: bool = False) -> str | None:
    """vLLM's `--kv-cache-dtype` name for a cache of format `k`, as its backends list them:
    'auto' for the dtype the model is served in, 'bfloat16' / 'float16', 'fp8' (e4m3),
    'fp8_e5m2', 'int8_per_token_head' / 'fp8_per_token_head'; None for a format vLLM has no name
    for (not checked against the backends)."""
    if per_token_head_scales:
        return f"{k.name.split('_')[0]}{PER_TOKEN_HEAD}"
    if k.name == default_kv_dtype(model)[0]:
        return "auto"
    return {"bf16": "bfloat16", "fp16": "float16", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8_e5m2"}.get(k.name)


def _cc_words(compute_capability: str | None, vendor: str | None) -> str:
    if vendor == "amd":
        return "ROCm (VLLM_ROCM_USE_AITER unset)"
    if compute_capability is None:
        return (f"compute capability {ASSUMED_COMPUTE_CAPABILITY} (Hopper), assumed: no NVIDIA GPU (compute "
                "capability) or attention backend given")
    return f"compute capability {compute_capability}"


def _select_033(model: ModelSpec, block_size: int | None, name: str | None, compute_capability: str | None,
                vendor: str | None, kv_cache_dtype: str | None) -> tuple[int, str | None]:
    """`attention_block_size` for vLLM 0.33 (the backend's name is checked by the caller)."""
    if not any(layer.kind == "mla" for layer in model.layers):
        if vendor != "amd" and block_size is not None and block_size % 16:
            raise KvcalcError(f"vLLM 0.33 finds no valid attention backend for block size {block_size} on CUDA: "
                              "FLASH_ATTN, FLASHINFER, TRITON_ATTN and FLEX_ATTENTION take multiples of 16 "
                              "(get_supported_kernel_block_sizes); give a multiple of 16", field="block_size",
                              value=block_size)
        return (block_size or DEFAULT_BLOCK_SIZE_033), None
    if name is not None:  # get_attn_backend_cls: the selected backend alone, refused if invalid
        reasons = mla_backend_reasons(name, model, kv_cache_dtype, block_size, compute_capability, vendor)
        if reasons:
            raise KvcalcError(f"vLLM 0.33: Selected backend {name} is not valid for this configuration. "
                              f"Reason: {reasons}", field="attention_backend", value=name)
        size = block_size or MLA_BACKENDS_033[name].preferred_block_size()
        how = f"keeps the --block-size {size} given" if block_size else f"sets block size {size}"
        return size, f"MLA attention backend {name} (the attention backend given) {how}"
    invalid: dict[str, list[str]] = {}
    for candidate in mla_backend_priorities(compute_capability, vendor):  # CudaPlatform.get_valid_backends
        reasons = mla_backend_reasons(candidate, model, kv_cache_dtype, block_size, compute_capability, vendor)
        if not reasons:
            break
        invalid[candidate] = reasons
    else:
        found = "; ".join(f"{n}: {', '.join(r)}" for n, r in invalid.items())
        raise KvcalcError(f"vLLM 0.33 finds no valid MLA attention backend on {_cc_words(compute_capability, vendor)} "
                          f"for kv_cache_dtype {kv_cache_dtype or 'auto'}, block_size {block_size}: {found}",
                          field="block_size" if block_size else "kv_dtype", value=block_size or kv_cache_dtype)
    where = f"vLLM 0.33's first valid MLA backend on {_cc_words(compute_capability, vendor)}"
    if invalid:
        where += "; passed over: " + "; ".join(f"{n} ({', '.join(r)})" for n, r in invalid.items())
    if block_size is None:  # Platform.update_block_size_for_backend, phase 1
        size = MLA_BACKENDS_033[candidate].preferred_block_size()
        return size, f"MLA attention backend {candidate} ({where}) sets block size {size}"
    note = f"MLA attention backend {candidate} ({where}) keeps the --block-size {block_size:,} given"
    precluded = [n for n, r in invalid.items() if r == ["block_size not supported"]]
    if precluded:  # CudaPlatform.get_attn_backend_cls's warning
        note += (f". vLLM warns: --block-size {block_size} precluded higher-priority backend(s) "
                 f"{', '.join(precluded)}. Using {candidate} instead, which may result in reduced performance. "
                 "Consider removing --block-size to auto-select the optimal block size.")
    return block_size, note


def attention_block_size(model: ModelSpec, block_size: int | None, backend: str | None = None,
                         compute_capability: str | None = None, vendor: str | None = None,
                         version: str = CURRENT_VERSION, kv_cache_dtype: str | None = "auto") -> tuple[int, str | None]:
    """(block size vLLM uses, a note naming the MLA backend and why, or None) for `model`.

    `block_size` is the `--block-size` given (None: not given, vLLM's default);
    `kv_cache_dtype` vLLM's name for the cache dtype (`vllm_cache_dtype`).

    vLLM 0.33 (`vllm/platforms/cuda.py` `CudaPlatform.get_attn_backend_cls`, `get_valid_backends`;
    `vllm/platforms/interface.py` `Platform.update_block_size_for_backend`): the first MLA
    backend of `mla_backend_priorities` that `mla_backend_reasons` finds valid, the block size
    given taking part (a backend that cannot run it is passed over, and vLLM warns when that
    precluded a higher-priority one); without `--block-size`, the backend's preferred size
    (`AttentionBackend.get_preferred_block_size` from 16: FLASH_ATTN_MLA and TRITON_MLA 16,
    FLASHMLA 64, FLASHINFER_MLA 32, CUTLASS_MLA 128). So an H100 serves DeepSeek with
    FLASH_ATTN_MLA and 16-token blocks, with FLASHMLA and 64 under `--kv-cache-dtype fp8`, a B200
    with FLASHINFER_MLA and 32. A backend given (`--attention-backend`) is checked alone and
    refused when invalid. Non-MLA models keep the size given, else 16 (FLASH_ATTN, FLASHINFER,
    TRITON_ATTN, ROCM_ATTN all prefer 16); on CUDA a size that is not a multiple of 16 finds no
    backend and is refused.

    vLLM 0.11 (`CudaPlatform.check_and_update_config`): an MLA model's attention backend forces
    its block size whatever `--block-size` says: FLASHMLA 64, CUTLASS_MLA 128, FLASHINFER_MLA 32
    or 64 (anything else becomes 64), TRITON_MLA keeps it. With no backend given, vLLM picks
    CUTLASS_MLA on Blackwell (compute capability 10.x), FLASHMLA on Hopper (9.x; FlashMLA needs
    sm90, `is_flashmla_supported`) and TRITON_MLA elsewhere. AMD (`vendor` 'amd',
    `RocmPlatform.get_attn_backend_cls`): TRITON_MLA unless AITER is on (`VLLM_ROCM_USE_AITER`,
    off by default), so `--block-size` stands; ROCM_AITER_MLA needs block size 1.

    With neither GPU nor backend, kvcalc assumes Hopper (`ASSUMED_COMPUTE_CAPABILITY`) and the
    note says so. Raises `KvcalcError` (field `attention_backend`) for an unknown backend, an MLA
    backend on a non-MLA model, one the GPU's vendor lacks or (0.33) one vLLM finds invalid, and
    (fields `block_size` / `kv_dtype`) where 0.33 finds no valid backend.
    """
    name = backend.strip().upper() if backend else None
    mla_names = (*MLA_BACKENDS, *(n for n in MLA_BACKENDS_033 if n not in MLA_BACKENDS)) if version == "0.33" \
        else tuple(MLA_BACKENDS)
    if name is not None and name not in mla_names and name not in OTHER_BACKENDS:
        raise KvcalcError(f"kvcalc knows the MLA backends {', '.join(mla_names)} and {', '.join(OTHER_BACKENDS)}",
                          field="attention_backend", value=backend)
    if not any(layer.kind == "mla" for layer in model.layers):
        if name in mla_names:
            raise KvcalcError(f"{name} is an MLA backend and {model.name} has no MLA layers", field="attention_backend",
                              value=backend)
        if version == "0.33":
            return _select_033(model, block_size, name, compute_capability, vendor, kv_cache_dtype)
        return block_size or DEFAULT_BLOCK_SIZE, None
    if name in OTHER_BACKENDS:
        raise KvcalcError(f"{model.name} uses MLA: give an MLA backend ({', '.join(mla_names)})",
                          field="attention_backend", value=backend)
    amd = vendor == "amd"
    if name is not None and (name in ROCM_MLA_BACKENDS) != amd and name != "TRITON_MLA":
        raise KvcalcError(f"{name} is {'a ROCm' if name in ROCM_MLA_BACKENDS else 'an NVIDIA'} backend and the GPU "
                          f"is {'AMD' if amd else 'NVIDIA'}", field="attention_backend", value=backend)
    if version == "0.33":
        return _select_033(model, block_size, name, compute_capability, vendor, kv_cache_dtype)
    given = block_size
    block_size = block_size or DEFAULT_BLOCK_SIZE
    if name is None and amd:
        name, why = "TRITON_MLA", "vLLM's default MLA backend on ROCm (VLLM_ROCM_USE_AITER unset)"
    elif name is None:
        cc = compute_capability or ASSUMED_COMPUTE_CAPABILITY
        major = int(cc.split(".")[0])
        name = "CUTLASS_MLA" if major == 10 else "FLASHMLA" if major == 9 else "TRITON_MLA"
        why = f"vLLM's default MLA backend on compute capability {cc}"
        if compute_capability is None:
            why += " (Hopper), assumed: no NVIDIA GPU (compute capability) or attention backend given"
    else:
        why = "the attention backend given"
    forced = MLA_BACKENDS[name]
    if name == "ROCM_AITER_MLA" and block_size != 1:
        raise KvcalcError(f"vLLM 0.11's ROCM_AITER_MLA does not support block size {block_size} (currently only "
                              "supports block size 1): give --block-size 1", field="block_size", value=block_size)
    if name == "FLASHINFER_MLA" and block_size in FLASHINFER_MLA_BLOCK_SIZES:
        forced = None
    if forced is None:
        return block_size, f"MLA attention backend {name} ({why}) keeps block size {block_size}"
    return forced, (f"MLA attention backend {name} ({why}) forces block size {forced}"
                    + ("" if block_size == forced else f", not the {given} asked for" if given is not None
                       else f", not vLLM's default {DEFAULT_BLOCK_SIZE}"))


def check_max_model_len(model: ModelSpec, max_model_len: int, allow_long: bool = False,
                        version: str = CURRENT_VERSION) -> str | None:
    """vLLM's verdict on a max_model_len past the model's max_position_embeddings
    (`vllm/config/model.py` `_get_and_verify_max_len`; V0 0.6.x `vllm/config.py`): raises
    `KvcalcError` (field `max_model_len`) with vLLM's message, or, with `allow_long`
    (`VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`), returns the warning vLLM logs. None when within the limit."""
    limit = model.context_limit  # derived as vLLM derives it: rope scaling included
    if limit is None or max_model_len <= limit:
        return None
    msg = (f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
           f"(max_position_embeddings={model.max_position_embeddings} or model_max_length=None in model's "
           f"config.json).")
    if allow_long:
        return f"{msg} Make sure the value is correct and within the model context size."
    if version == "0.6":
        tail = (" This may lead to incorrect model outputs or CUDA errors. To allow overriding this maximum, set the "
                f"env var {ALLOW_LONG_ENV}=1")
    else:
        tail = (f" To allow overriding this maximum, set the env var {ALLOW_LONG_ENV}=1. {ALLOW_LONG_ENV} must be "
                "used with extreme caution. If the model uses relative position encoding (RoPE), positions exceeding "
                "derived_max_model_len lead to nan. If the model uses absolute position encoding, positions exceeding "
                "derived_max_model_len will cause a CUDA array out-of-bounds error.")
    raise KvcalcError(f"vLLM refuses it: {msg}{tail} (kvcalc reads the env var, or {flag('allow_long_max_model_len')})",
                      field="max_model_len", value=max_model_len, form=MESSAGE)


def layer_formats(model: ModelSpec, k: StorageFormat, v: StorageFormat,
                  version: str = CURRENT_VERSION) -> tuple[StorageFormat, StorageFormat, str | None]:
    """(K, V, note) as the model's layers cache them: in 0.33 the attention of the model types in
    `OWN_DTYPE_MODEL_TYPES` is built without the cache config, so a `--kv-cache-dtype` other than
    the model's dtype does not reach it (Falcon stays bf16 under fp8). Else `k`, `v`, None."""
    if version != "0.33" or model.model_type not in OWN_DTYPE_MODEL_TYPES:
        return k, v, None
    from kvcalc.formats import kv_format

    own = kv_format(default_kv_dtype(model)[0])
    if (k, v) == (own, own):
        return k, v, None
    return own, own, (f"vLLM 0.33 builds {model.model_type}'s attention without the cache config: its cache stays "
                      f"{own.name}, not {k.name if k == v else f'{k.name}/{v.name}'}")


def split_kv_dtype(kv_cache_dtype: str) -> tuple[str, bool]:
    """('int8', True) for 'int8_per_token_head'; (name, False) otherwise."""
    name = kv_cache_dtype.strip().lower()
    if name.endswith(PER_TOKEN_HEAD):
        return name[: -len(PER_TOKEN_HEAD)], True
    return name, False


def page_size_bytes(layer: LayerSpec, k: StorageFormat, v: StorageFormat, block_size: int, tp: int = 1,
                    per_token_head_scales: bool = False) -> int:
    """One block of one layer on one TP rank, bytes: block_size x layer_kv_bytes_per_token,
    plus 2 x block_size x kv_heads_per_rank x 4 for per-token-head scales (not for MLA).

    Source: `vllm/v1/kv_cache_interface.py` `AttentionSpec.page_size_bytes`,
    `FullAttentionSpec.real_page_size_bytes`, `MLAAttentionSpec.real_page_size_bytes`.
    """
    page = block_size * layer_kv_bytes_per_token(layer, k, v, tp)
    if per_token_head_scales and layer.kind != "mla":
        page += 2 * block_size * kv_heads_per_rank(layer, tp) * SCALE_BYTES
    return page


@dataclass(frozen=True)
class Group:
    """One vLLM KV cache group: its kind ('full' / 'sliding' / 'mla' / 'chunked' / 'mamba'), its
    window (a sliding window, or a chunked group's attention_chunk_size), how many real layers it
    holds (the rest up to the group size are padding), and, for a Mamba group, the pages one
    request holds whatever its length (`mamba_pages`)."""

    kind: str
    window: int | None
    n_layers: int
    mamba_pages: int = 0


#: model types whose sliding layers are Llama-4's chunked local attention (`attention_chunk_size`,
#: which kvcalc's loaders write as the layers' window): vLLM `ChunkedLocalAttention`, whose spec is
#: `ChunkedLocalAttentionSpec` (`vllm/model_executor/models/llama4.py`: RoPE layers when
#: attention_chunk_size is set).
CHUNKED_LOCAL_MODEL_TYPES = frozenset({"llama4", "llama4_text"})
#: vLLM's env var that keeps the hybrid allocator on for chunked local attention (0.11: off by
#: default, `VllmConfig.__post_init__`; 0.33: on, `vllm/envs.py`).
CHUNKED_HYBRID_ENV = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"


def chunked_local(model: ModelSpec) -> bool:
    """True when `model`'s sliding layers are Llama-4 chunked local attention (`CHUNKED_LOCAL_MODEL_TYPES`)."""
    return model.model_type in CHUNKED_LOCAL_MODEL_TYPES and any(layer.kind == "sliding" for layer in model.layers)


def chunked_hybrid_allowed(version: str, allow: bool | None = None) -> bool:
    """`VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE` (`allow`; None: the version's
    default: off in 0.11, on in 0.33). Off, vLLM turns the hybrid allocator off for a model with
    chunked local attention ("There is a latency regression ...", `VllmConfig.__post_init__`)."""
    return (version == "0.33") if allow is None else allow


def kv_cache_groups(model: ModelSpec, hybrid_allocator: bool = True, version: str = CURRENT_VERSION,
                    mamba_pages: int = 1) -> tuple[list[Group], int]:
    """(groups, layers per group) as vLLM V1 builds them (`get_kv_cache_groups`).

    Uniform models: one group of every layer. Mixed kinds with the hybrid allocator
    (`_get_kv_cache_groups_uniform_page_size`): layers_per_group = the smallest kind's layer
    count (0.33 only: the largest when it is under 1.5 x the smallest, a rule 0.11 lacks), each
    kind in cdiv(n, layers_per_group) groups, layers i::n_groups. Kinds: full, sliding (per
    window), mla, chunked (Llama-4's chunked local attention, `ChunkedLocalAttentionSpec`),
    mamba (Mamba and Gated-DeltaNet layers, `MambaSpec`, holding `mamba_pages` pages per
    request); mlp layers have no cache. Without the hybrid allocator
    (`unify_hybrid_kv_cache_specs`) sliding and chunked layers become full ones; Mamba layers
    cannot: raises `KvcalcError` (field `hybrid_allocator`) with vLLM's message.
    """
    chunked = chunked_local(model)
    kinds: dict[tuple[str, int | None], int] = {}
    for layer in model.layers:
        if layer.kind == "mlp":
            continue
        kind: str = "mamba" if layer.kind in ("mamba", "linear") else layer.kind  # a group kind (+ 'chunked')
        window = layer.window if kind == "sliding" else None
        if kind == "sliding" and chunked:
            kind = "chunked"
        if kind in ("sliding", "chunked") and not hybrid_allocator:
            kind, window = "full", None
        kinds[(kind, window)] = kinds.get((kind, window), 0) + 1
    if ("mamba", None) in kinds and not hybrid_allocator:
        raise KvcalcError(f"{model.name} has Mamba / linear-attention layers: vLLM refuses it without the hybrid KV "
                          "cache manager (Hybrid KV cache manager is disabled but failed to convert the KV cache "
                          "specs to one unified type.)", field="hybrid_allocator", value=False, form=MESSAGE)
    pages = {"mamba": mamba_pages}
    if len(kinds) == 1:
        (kind, window), n = next(iter(kinds.items()))
        return [Group(kind, window, n, pages.get(kind, 0))], n
    counts = list(kinds.values())
    layers_per_group = min(counts)
    if version == "0.33" and max(counts) < min(counts) * 1.5:
        layers_per_group = max(counts)
    groups = []
    for (kind, window), n in kinds.items():
        n_groups = -(-n // layers_per_group)
        for i in range(n_groups):
            groups.append(Group(kind, window, len(range(i, n, n_groups)), pages.get(kind, 0)))
    return groups, layers_per_group


def pages_per_request(group: Group, max_model_len: int, block_size: int,
                      max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS) -> int:
    """Pages one request of `max_model_len` tokens needs in one group (`max_num_batched_tokens`:
    the tokens in flight, `in_flight_tokens`).

    full / mla: cdiv(L, block_size) (`FullAttentionSpec.max_memory_usage_bytes`);
    sliding: cdiv(min(window - 1 + in_flight, L), block_size) + 1
    (`SlidingWindowSpec.max_memory_usage_bytes`: the window may straddle a block boundary);
    chunked: cdiv(min(chunk + in_flight, L), block_size) (`ChunkedLocalAttentionSpec.max_memory_usage_bytes`:
    one chunk plus the tokens in flight, no straddle page); mamba: its fixed `mamba_pages`
    (`MambaSpec.max_memory_usage_bytes`).
    """
    if group.kind == "mamba":
        return group.mamba_pages
    if group.kind == "chunked" and group.window is not None:
        return -(-min(group.window + max_num_batched_tokens, max_model_len) // block_size)
    if group.kind == "sliding" and group.window is not None:
        tokens = min(group.window - 1 + max_num_batched_tokens, max_model_len)
        return -(-tokens // block_size) + 1
    return -(-max_model_len // block_size)


def blocks_per_request(groups: list[Group], max_model_len: int, block_size: int,
                       max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS) -> int:
    """cdiv(sum of max_memory_usage_bytes over groups, page) = sum of pages over groups
    (`get_max_concurrency_for_kv_cache_config`; every group has the same page size)."""
    return sum(pages_per_request(g, max_model_len, block_size, max_num_batched_tokens) for g in groups)


def _formats(model: ModelSpec, k: StorageFormat, v: StorageFormat) -> None:
    for field, f in (("k_dtype", k), ("v_dtype", v)):
        if f.block_values != 1:
            raise KvcalcError(f"vLLM has no '{f.name}' KV cache dtype; use auto, bfloat16, float16, fp8, "
                              "fp8_e5m2, int8_per_token_head or fp8_per_token_head",
                              field=field, value=f.name, form=MESSAGE)


def check_model(model: ModelSpec) -> None:
    """Raise `KvcalcError` (field `model`) for a model the profile cannot size at all: hybrid
    attention + Mamba-2 layers (`refuse_hybrid_layers`), DeepSeek-V3.2's indexer (`refuse_indexer`)."""
    refuse_hybrid_layers(model, "vLLM")
    refuse_indexer(model, "vLLM")


#: model types (a Hugging Face config's `model_type`, the text model's for a multimodal one, or a
#: GGUF file's `general.architecture`: what `ModelSpec.model_type` keeps) whose architecture vLLM
#: 0.6.6's model registry lacks (`vllm/model_executor/models/registry.py` `_VLLM_MODELS`), with the
#: architecture name a checkpoint of that type lists (`architectures[0]`; kvcalc keeps the type,
#: not the name, so a multimodal checkpoint's outer name, e.g. Gemma3ForConditionalGeneration, is
#: shown as its text model's). Types absent here are taken as served: the ones kvcalc bundles are
#: in the registry (LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM, Qwen2ForCausalLM,
#: Gemma2ForCausalLM, Phi3ForCausalLM, FalconForCausalLM, GPT2LMHeadModel, DeepseekV2ForCausalLM,
#: DeepseekV3ForCausalLM (Kimi-K2's too), JambaForCausalLM).
V06_UNSUPPORTED_ARCHITECTURES: dict[str, str] = {
    "qwen3": "Qwen3ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM", "qwen3moe": "Qwen3MoeForCausalLM",
    "qwen3_next": "Qwen3NextForCausalLM", "qwen3_5": "Qwen3_5ForCausalLM", "qwen3_5_text": "Qwen3_5ForCausalLM",
    "gemma3": "Gemma3ForCausalLM", "gemma3_text": "Gemma3ForCausalLM",
    "gpt_oss": "GptOssForCausalLM", "gpt-oss": "GptOssForCausalLM",
    "llama4": "Llama4ForCausalLM", "llama4_text": "Llama4ForCausalLM",
    "falcon_h1": "FalconH1ForCausalLM", "falcon-h1": "FalconH1ForCausalLM",
    "granitemoehybrid": "GraniteMoeHybridForCausalLM", "granitehybrid": "GraniteMoeHybridForCausalLM",
    "nemotron_h": "NemotronHForCausalLM", "mistral3": "Mistral3ForConditionalGeneration",
    "deepseek_v32": "DeepseekV32ForCausalLM", "glm4_moe": "Glm4MoeForCausalLM",
}


def check_v06_model(model: ModelSpec) -> None:
    """Raise `KvcalcError` (field `model`) for a model vLLM 0.6.6 cannot load: its `model_type` is
    in `V06_UNSUPPORTED_ARCHITECTURES`. The text is vLLM's own, `ModelRegistry._raise_for_unsupported`
    ("Model architectures [...] are not supported for now. Supported architectures: [...]", the
    list of ~150 names left out). A model without a model_type passes (nothing to key on)."""
    arch = V06_UNSUPPORTED_ARCHITECTURES.get((model.model_type or "").lower())
    if arch is not None:
        raise KvcalcError(f"{model.name}: vLLM 0.6 cannot load it: Model architectures ['{arch}'] are not supported "
                          "for now. (vllm/model_executor/models/registry.py; model_type "
                          f"{model.model_type}): use --vllm-version 0.11 or 0.33",
                          field="model", value=model.name, form=MESSAGE)
    if model.attention == "mla" and (model.model_type or "").lower() not in V0_MLA_MODEL_TYPES:
        raise KvcalcError(f"{model.name}: vLLM 0.6 has no MLA; it pads the head of model_type deepseek_v2 / "
                          f"deepseek_v3 only (ModelConfig.get_head_size), and model_type {model.model_type} would "
                          "get hidden_size // heads: not modelled for --vllm-version 0.6",
                          field="model", value=model.name, form=MESSAGE)


def _check(model: ModelSpec, k: StorageFormat, v: StorageFormat, tp: int, block_size: int | None,
           version: str = CURRENT_VERSION) -> None:
    """The checks `capacity` and `memory_for` share: the block size given (None: not given; first,
    as vLLM's argparse), the model vLLM 0.6 cannot load (`check_v06_model`), the TP degree, the
    model (`check_model`), the formats."""
    if block_size is not None:
        check_block_size(block_size, version)
    if version == "0.6":
        check_v06_model(model)
    check_tp(model, tp)
    check_model(model)
    _formats(model, k, v)


def _page(model: ModelSpec, k: StorageFormat, v: StorageFormat, block_size: int, tp: int, scales: bool) -> int:
    pages = {page_size_bytes(layer, k, v, block_size, tp, scales) for layer in model.layers if layer.caches_kv}
    if len(pages) != 1:  # vLLM `unify_kv_cache_spec_page_size` grows block sizes: not modelled
        raise KvcalcError(f"{model.name}: layers have different page sizes; not modelled by the vLLM profile",
                          field="model", value=model.name, form=MESSAGE)
    return pages.pop()


#: vLLM 0.6's head size for DeepSeek-V2/V3 (`vllm/config.py` `ModelConfig.get_head_size`)
V0_MLA_HEAD_SIZE = 256
#: the model types `ModelConfig.get_head_size` (0.6.6) pads to `V0_MLA_HEAD_SIZE`
V0_MLA_MODEL_TYPES = ("deepseek_v2", "deepseek_v3")


def v0_mla_page_bytes(model: ModelSpec, k: StorageFormat, v: StorageFormat, block_size: int, tp: int) -> int:
    """One block of one layer of a DeepSeek-V2/V3 (MLA) model in vLLM 0.6's V0 engine, bytes: MLA
    came to vLLM in 0.7, so 0.6 caches K and V per head like any model. `CacheEngine.
    get_cache_block_size`: block_size x num_kv_heads x head_size for K and again for V, where
    `ModelConfig.get_head_size` returns 256 for deepseek_v2 / deepseek_v3 ("FlashAttention
    supports only head_size 32, 64, 128, 256, we need to pad head_size 192 to 256") and
    `get_num_kv_heads` max(1, num_key_value_heads // tp), num_key_value_heads being the number of
    attention heads in DeepSeek's configs. DeepSeek-V3, bf16, tp 1: 16 x 128 x 256 x 2 x 2 B =
    2,097,152 B per layer, x 61 layers = 127,926,272 B per block (the latent: 16 x 576 x 2 x 61 =
    1,124,352 B)."""
    heads = max(1, model.n_heads // tp)
    values = block_size * heads * V0_MLA_HEAD_SIZE
    return k.bytes_for(values, what="K block", field="k_dtype") + v.bytes_for(values, what="V block", field="v_dtype")


def _no_memory(kv_memory_bytes: int, message: str) -> KvcalcError:
    """vLLM's start-up failure for `kv_memory_bytes` of KV memory (field `kv_memory_bytes`)."""
    return KvcalcError(f"vLLM would fail at start-up: {message}", field="kv_memory_bytes", value=kv_memory_bytes,
                       form=MESSAGE)


def _longest(fits, model: ModelSpec, max_model_len: int) -> int | None:
    """The longest context with `fits`, searched up to the model's limit (`context_limit`: its
    max_position_embeddings with rope scaling, or a max_model_len allowed past it): the limit itself
    when it fits. None when the model names no limit and nothing up to `SEARCH_LIMIT_TOKENS` fails
    (sliding windows)."""
    limit = model.context_limit
    if limit is None:
        return longest_fitting(fits, SEARCH_LIMIT_TOKENS)
    cap = max(limit, max_model_len)
    return longest_fitting(fits, cap) or (cap if fits(cap) else 0)


def _capacity_v0(model: ModelSpec, kv_memory_bytes: int, page: int, *, block_size: int, max_model_len: int,
                 concurrency: int | None, swap_space_bytes: int, dtype_name: str,
                 notes: list[str]) -> EngineResult:
    """V0 (0.6.x): block bytes = page x n_layers (`CacheEngine.get_cache_block_size`, sliding
    layers full); GPU blocks = available // block bytes, CPU blocks = swap // block bytes;
    concurrency = blocks x block_size / L. Raises when not one block fits
    (`raise_if_cache_size_invalid`); warns when L > blocks x block_size."""
    L = max_model_len
    # vllm/worker/worker.py determine_num_available_blocks (0.6.x) memory report, last clause
    lines = [f"the rest of the memory reserved for KV Cache is {kv_memory_bytes / 2**30:.2f}GiB."]
    if any(layer.kind == "sliding" for layer in model.layers):
        notes.append("V0 allocates sliding-window layers for the full length")
    block_bytes = page * model.n_layers  # CacheEngine.get_cache_block_size
    gpu_blocks = kv_memory_bytes // block_bytes
    cpu_blocks = swap_space_bytes // block_bytes
    if gpu_blocks <= 0:  # vllm/worker/worker.py raise_if_cache_size_invalid
        raise _no_memory(kv_memory_bytes, f"{kv_memory_bytes:,} B holds no block of {block_bytes:,} B: {NO_MEMORY}")
    if gpu_blocks * block_size < L:
        msg = (f"vLLM V0 would refuse to start: The model's max seq len ({L}) is larger than the maximum "
               f"number of tokens that can be stored in KV cache ({gpu_blocks * block_size}). Try increasing "
               "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
        notes.append(msg)
        warnings.warn(msg, KvcalcWarning, stacklevel=3)  # at capacity's caller
    conc = gpu_blocks * block_size / L
    lines += [f"# GPU blocks: {gpu_blocks}, # CPU blocks: {cpu_blocks}",
              f"Maximum concurrency for {L} tokens per request: {conc:.2f}x"]
    longest = None
    if concurrency:
        longest = _longest(lambda n: gpu_blocks * block_size / n >= concurrency, model, L)
    return EngineResult(
        engine="vllm", engine_version=VERSION_LABELS["0.6"], kv_memory_bytes=kv_memory_bytes,
        kv_cache_dtype=dtype_name, block_size=block_size, page_size_bytes=block_bytes,
        num_gpu_blocks=gpu_blocks, num_cpu_blocks=cpu_blocks, kv_cache_tokens=gpu_blocks * block_size,
        engine_kv_bytes=gpu_blocks * block_bytes, max_model_len=L, max_concurrency=conc,
        concurrency=concurrency, longest_context=longest, log_lines=lines, notes=notes)


def request_bytes(model: ModelSpec, groups: list[Group], layers_per_group: int, max_model_len: int, block_size: int,
                  page: int, in_flight: int, version: str = CURRENT_VERSION) -> int:
    """KV bytes one request of `max_model_len` needs in vLLM's start-up check.

    0.11 (`check_enough_kv_cache_memory`, `max_memory_usage_bytes`): per real layer its group's
    pages x page (`needed_bytes`). 0.33 (`kv_cache_planning._max_memory_usage_bytes_from_groups`):
    bytes per block (page x layers per group, padding layers included) x the pages of all groups.
    `in_flight`: tokens in flight (`in_flight_tokens`)."""
    if version == "0.33":
        return page * layers_per_group * blocks_per_request(groups, max_model_len, block_size, in_flight)
    return needed_bytes(model, groups, max_model_len, block_size, page, in_flight)


def _too_small_check(model: ModelSpec, groups: list[Group], layers_per_group: int, num_blocks: int,
                     kv_memory_bytes: int, page: int, *, block_size: int, max_model_len: int, in_flight: int,
                     version: str) -> list[str]:
    """`check_enough_kv_cache_memory`: raise when one request of L needs more than the memory
    and not one block fits; when blocks fit, warn and return the note (else no note). 0.33
    checks against the memory less one block of every group (`get_kv_cache_configs`: the null block).

    0.11 checks each worker's layer specs as the layers built them, before `get_kv_cache_groups`
    unifies them (`vllm/v1/core/kv_cache_utils.py` `get_kv_cache_configs`, lines 1241-1244 before
    1258; `unify_hybrid_kv_cache_specs` runs inside `get_kv_cache_groups`): with the hybrid KV cache
    manager off (Llama-4's chunked local attention by default, `--disable-hybrid-kv-cache-manager`)
    a chunked or sliding layer is counted by its window in the check and the estimated length,
    while its blocks are full ones. So the check's groups are the layers' own kinds
    (`kv_cache_groups` with the hybrid allocator on)."""
    L = max_model_len
    check = kv_memory_bytes - page * layers_per_group if version == "0.33" else kv_memory_bytes
    if version == "0.11":
        groups = kv_cache_groups(model, True, version, next((g.mamba_pages for g in groups if g.kind == "mamba"), 1))[0]

    def need(n: int) -> int:
        return request_bytes(model, groups, layers_per_group, n, block_size, page, in_flight, version)

    if need(L) <= check:
        return []
    if check <= 0:  # 0.33: the null block takes all there is (`_check_enough_kv_cache_memory`)
        raise _no_memory(kv_memory_bytes, no_memory_message(version))
    est = longest_fitting(lambda n: need(n) <= check, L)
    msg = _too_small(L, need(L), check, est or 0, version)
    if num_blocks == 0:
        raise _no_memory(kv_memory_bytes, msg)
    warnings.warn(f"vLLM would refuse to start: {msg}", KvcalcWarning, stacklevel=4)  # at capacity's caller
    return [f"vLLM refuses to start at this max_model_len: {msg}"]


def _capacity_v1(model: ModelSpec, kv_memory_bytes: int, r: _Resolved, *, max_model_len: int,
                 concurrency: int | None, in_flight: int, dtype_name: str, version: str) -> EngineResult:
    """V1: blocks = available // page // layers_per_group (`get_num_blocks`); concurrency =
    blocks / `blocks_per_request`; tokens = blocks // n_groups x the smallest group block size
    (0.11 `get_kv_cache_config_from_groups`: a Mamba group's block is max_model_len) or
    int(concurrency x L) (0.33 `get_kv_cache_capacity`)."""
    L, block_size, page, notes = max_model_len, r.block_size, r.page, r.notes
    # vllm/v1/worker/gpu_worker.py determine_available_memory
    lines = [*r.log_lines, available_memory_line(kv_memory_bytes, version)]
    groups, layers_per_group = kv_cache_groups(model, r.hybrid_allocator, version, r.mamba_pages)
    num_blocks = kv_memory_bytes // page // layers_per_group  # get_num_blocks
    notes += _too_small_check(model, groups, layers_per_group, num_blocks, kv_memory_bytes, page,
                              block_size=block_size, max_model_len=L, in_flight=in_flight, version=version)
    per_req = blocks_per_request(groups, L, block_size, in_flight)
    conc = num_blocks / per_req
    if version == "0.33":
        tokens = int(conc * L)  # kv_cache_utils.get_kv_cache_capacity
    else:
        min_block = min(block_size, L) if any(g.kind == "mamba" for g in groups) else block_size
        tokens = num_blocks // len(groups) * min_block  # get_kv_cache_config_from_groups
    lines += kv_figures_lines(tokens, L, conc, version)
    padding = len(groups) * layers_per_group - sum(g.n_layers for g in groups)
    if padding:
        notes.append(f"{len(groups)} KV cache groups of {layers_per_group} layers: {padding} padding layers")
    longest = None
    if concurrency:
        longest = _longest(lambda n: num_blocks >= concurrency * blocks_per_request(groups, n, block_size, in_flight),
                           model, L)
    return EngineResult(
        engine="vllm", engine_version=VERSION_LABELS[version], kv_memory_bytes=kv_memory_bytes,
        kv_cache_dtype=dtype_name, block_size=block_size, page_size_bytes=page * layers_per_group,
        num_gpu_blocks=num_blocks, usable_blocks=max(num_blocks - 1, 0), kv_cache_tokens=tokens,
        engine_kv_bytes=num_blocks * page * layers_per_group, max_model_len=L, max_concurrency=conc,
        concurrency=concurrency, longest_context=longest, log_lines=lines, notes=notes)


@dataclass
class _Resolved:
    """What `_resolve` settles for `capacity` and `memory_for`: the formats the layers cache in,
    the block size and page vLLM uses, the hybrid allocator as vLLM leaves it, the Mamba pages a
    request holds, the lines vLLM logs before the KV figures, and kvcalc's notes."""

    k: StorageFormat
    v: StorageFormat
    block_size: int
    page: int
    hybrid_allocator: bool
    mamba_pages: int = 1
    log_lines: list[str] = dc_field(default_factory=list)
    notes: list[str] = dc_field(default_factory=list)


def _hybrid_blocks(model: ModelSpec, k: StorageFormat, v: StorageFormat, *, block_size: int, tp: int, version: str,
                   prefix_caching: bool | None, compute_capability: str | None, scales: bool,
                   vendor: str | None = None):
    """`vllm_hybrid.align_block_size` for a model with Mamba / linear-attention layers beside
    full attention, on a GPU of `compute_capability` (None: Hopper assumed) and `vendor` ('amd':
    ROCm, whose Gated DeltaNet prefill is never FlashInfer's); refuses what kvcalc does not model
    (V0, MLA or sliding layers beside Mamba, attention-free models, per-token-head scales)."""
    from kvcalc.engines import vllm_hybrid
    from kvcalc.formats import kv_format

    kinds = {layer.kind for layer in model.layers} - {"mlp"}

    def refuse(why: str) -> KvcalcError:
        return KvcalcError(f"{model.name}: {why}", field="model", value=model.name, form=MESSAGE)

    if version == "0.6":
        raise refuse("vLLM 0.6 (V0) keeps Mamba state outside the KV blocks (MambaCacheManager, sized by "
                     "max_num_seqs); kvcalc models hybrid models for vLLM 0.11 and 0.33")
    if kinds & {"mla", "sliding"}:
        raise refuse("Mamba / linear-attention layers beside MLA or sliding-window layers are not modelled by "
                     "the vLLM profile")
    if "full" not in kinds:
        raise refuse("an attention-free model (only Mamba layers) is not modelled by the vLLM profile")
    if scales:
        raise refuse("per-token-head KV scales beside Mamba layers are not modelled by the vLLM profile")
    dtype_name = default_kv_dtype(model)[0]
    fmt = kv_format(dtype_name)
    attention = next(layer for layer in model.layers if layer.kind == "full")
    return vllm_hybrid.align_block_size(
        model, attention, k, v, block_size=block_size, tp=tp, version=version, prefix_caching=prefix_caching,
        compute_capability=compute_capability or ASSUMED_COMPUTE_CAPABILITY, model_dtype=fmt.name,
        model_dtype_bytes=fmt.block_bytes // fmt.block_values, vendor=vendor)


def _resolve(model: ModelSpec, k: StorageFormat, v: StorageFormat, *, tp: int, block_size: int | None, version: str,
             attention_backend: str | None, compute_capability: str | None, vendor: str | None,
             per_token_head_scales: bool, hybrid_allocator: bool, prefix_caching: bool | None,
             chunked_local_hybrid: bool | None) -> _Resolved:
    """The checks `capacity` and `memory_for` share, then (`_Resolved`): each layer's own KV
    dtype (`layer_formats`), the MLA backend's block size (V1, `attention_block_size`), a hybrid
    Mamba model's unified block and page (`vllm_hybrid.align_block_size`), the hybrid allocator
    vLLM leaves on (off for chunked local attention unless `chunked_hybrid_allowed`), the page.
    `block_size` None: `--block-size` not given (vLLM's default; 0.33: the backend's preferred)."""
    _check(model, k, v, tp, block_size, version)
    notes: list[str] = []
    k, v, dtype_note = layer_formats(model, k, v, version)
    if dtype_note:
        notes.append(dtype_note)
    scales = per_token_head_scales and not dtype_note
    if version != "0.6":
        block_size, block_note = attention_block_size(model, block_size, attention_backend, compute_capability,
                                                      vendor, version, vllm_cache_dtype(model, k, scales))
        if block_note:
            notes.append(block_note)
    block_size = block_size or DEFAULT_BLOCK_SIZE
    if version != "0.6" and chunked_local(model) and hybrid_allocator:
        hybrid_allocator = chunked_hybrid_allowed(version, chunked_local_hybrid)
        if not hybrid_allocator:
            notes.append(f"vLLM {version} turns the hybrid KV cache manager off for chunked local attention "
                         f"(latency regression) unless {CHUNKED_HYBRID_ENV}=1: chunked layers keep every token")
    if any(layer.kind in ("mamba", "linear") for layer in model.layers):
        hb = _hybrid_blocks(model, k, v, block_size=block_size, tp=tp, version=version,
                            prefix_caching=prefix_caching, compute_capability=compute_capability, scales=scales,
                            vendor=vendor)
        notes += hb.notes
        if compute_capability is None and vendor != "amd" and version == "0.33" and hb.state.kind == "gdn":
            notes.append(f"GPU assumed Hopper (compute capability {ASSUMED_COMPUTE_CAPABILITY}): no GPU given")
        return _Resolved(k, v, hb.block_size, hb.page_bytes, hybrid_allocator, hb.mamba_pages,
                         list(hb.log_lines), notes)
    if version == "0.6" and model.attention == "mla":
        page = v0_mla_page_bytes(model, k, v, block_size, tp)
        notes.append(f"vLLM 0.6 (V0, before MLA support in 0.7) caches K and V per head, {model.n_heads} heads "
                     f"({max(1, model.n_heads // tp)} per rank) padded to a head size of {V0_MLA_HEAD_SIZE}")
    else:
        page = _page(model, k, v, block_size, tp, scales)
    return _Resolved(k, v, block_size, page, hybrid_allocator, notes=notes)


def capacity(model: ModelSpec, kv_memory_bytes: int, k: StorageFormat, v: StorageFormat, *, tp: int = 1,
             block_size: int | None = None, max_model_len: int | None = None,
             concurrency: int | None = None, hybrid_allocator: bool = True,
             per_token_head_scales: bool = False, kv_cache_dtype: str | None = None,
             max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
             v0: bool = False, swap_space_bytes: int | None = None, version: str = CURRENT_VERSION,
             async_scheduling: bool = True, attention_backend: str | None = None,
             compute_capability: str | None = None, allow_long_max_model_len: bool = False,
             vendor: str | None = None, prefix_caching: bool | None = None,
             chunked_local_hybrid: bool | None = None) -> EngineResult:
    """vLLM's blocks, tokens and concurrency for `kv_memory_bytes` of KV memory on each rank.

    `version`: one of `VERSIONS` (`v0=True` is '0.6'). V1: page = `page_size_bytes`; blocks =
    available // page // layers_per_group; concurrency = blocks / `blocks_per_request`; tokens as
    the version logs them. V0: block bytes = page x n_layers; blocks = available // block bytes;
    concurrency = blocks x block_size / L. `attention_backend` / `compute_capability` ('9.0') /
    `vendor` ('nvidia', 'amd') pick an MLA model's block size (`attention_block_size`) and a
    Gated-DeltaNet model's alignment; `async_scheduling` doubles 0.33's tokens in flight
    (`in_flight_tokens`); `allow_long_max_model_len` is VLLM_ALLOW_LONG_MAX_MODEL_LEN=1;
    `prefix_caching` (None: the version's default) sets a hybrid Mamba model's cache mode
    (`vllm_hybrid`); `chunked_local_hybrid` is VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE
    (None: the version's default); `swap_space_bytes` is V0's CPU swap per GPU (None: vLLM 0.6's
    default, `V06_SWAP_SPACE_BYTES`). Raises `KvcalcError` for TP layouts vLLM refuses, block
    sizes and formats, a model vLLM 0.6 cannot load (`check_v06_model`), a max_model_len past the
    model's limit, no memory, hybrids kvcalc does not model.
    """
    version = "0.6" if v0 else check_version(version)
    asked = (k, v)
    r = _resolve(model, k, v, tp=tp, block_size=block_size, version=version, attention_backend=attention_backend,
                 compute_capability=compute_capability, vendor=vendor, per_token_head_scales=per_token_head_scales,
                 hybrid_allocator=hybrid_allocator, prefix_caching=prefix_caching,
                 chunked_local_hybrid=chunked_local_hybrid)
    k, v, notes = r.k, r.v, r.notes
    if (k, v) != asked:  # the layers cache in their own dtype: the label says what they hold
        kv_cache_dtype = None
    if max_num_batched_tokens <= 0:
        raise KvcalcError(f"must be a positive integer, got {max_num_batched_tokens}",
                          field="max_num_batched_tokens", value=max_num_batched_tokens, form=OPTION_SAYS)
    if kv_memory_bytes <= 0:
        raise _no_memory(kv_memory_bytes, no_memory_message(version))
    L = max_model_len or model.default_context
    if L is None:
        raise KvcalcError(f"{model.name} has no max_position_embeddings; give {flag('max_model_len')}",
                          field="max_model_len", form=MESSAGE)
    long_note = check_max_model_len(model, L, allow_long_max_model_len, version)
    if long_note:
        notes.append(f"vLLM warns: {long_note}")
    dtype_name = kv_cache_dtype or (k.name if k == v else f"{k.name}/{v.name}")
    if version == "0.6":
        swap = V06_SWAP_SPACE_BYTES if swap_space_bytes is None else swap_space_bytes
        return _capacity_v0(model, kv_memory_bytes, r.page, block_size=r.block_size, max_model_len=L,
                            concurrency=concurrency, swap_space_bytes=swap, dtype_name=dtype_name,
                            notes=notes)
    return _capacity_v1(model, kv_memory_bytes, r, max_model_len=L, concurrency=concurrency,
                        in_flight=in_flight_tokens(version, max_num_batched_tokens, async_scheduling),
                        dtype_name=dtype_name, version=version)


def memory_for(model: ModelSpec, seq_len: int, batch: int, k: StorageFormat, v: StorageFormat, *, tp: int = 1,
               block_size: int | None = None, hybrid_allocator: bool = True,
               per_token_head_scales: bool = False,
               max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS, v0: bool = False,
               version: str = CURRENT_VERSION, async_scheduling: bool = True,
               attention_backend: str | None = None, compute_capability: str | None = None,
               vendor: str | None = None, prefix_caching: bool | None = None,
               chunked_local_hybrid: bool | None = None) -> int:
    """KV memory one rank needs so that vLLM starts and fits `batch` requests of `seq_len` tokens
    (max concurrency >= batch): batch x blocks per request x page x group size (V0:
    batch x cdiv(seq_len, block_size) x block bytes). 0.33's start-up check holds back the null
    block, so one request needs its blocks + 1: max(batch x per request, per request + 1)
    blocks. Options as in `capacity`."""
    version = "0.6" if v0 else check_version(version)
    r = _resolve(model, k, v, tp=tp, block_size=block_size, version=version, attention_backend=attention_backend,
                 compute_capability=compute_capability, vendor=vendor, per_token_head_scales=per_token_head_scales,
                 hybrid_allocator=hybrid_allocator, prefix_caching=prefix_caching,
                 chunked_local_hybrid=chunked_local_hybrid)
    if version == "0.6":
        return batch * -(-seq_len // r.block_size) * r.page * model.n_layers
    groups, layers_per_group = kv_cache_groups(model, r.hybrid_allocator, version, r.mamba_pages)
    in_flight = in_flight_tokens(version, max_num_batched_tokens, async_scheduling)
    per_req = blocks_per_request(groups, seq_len, r.block_size, in_flight)
    blocks = max(batch * per_req, per_req + 1) if version == "0.33" else batch * per_req
    return blocks * r.page * layers_per_group
