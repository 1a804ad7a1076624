"""vLLM's options object (`VllmOptions`): the `vllm serve` flags kvcalc models, and the release."""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.engines import defaults
from kvcalc.engines.vllm.versions import check_version, rules


@dataclass(frozen=True)
class VllmOptions:
    """vLLM's cache options (`vllm serve` flags), as `vllm.capacity` / `vllm.memory_for` take them.

    - `version`: the vLLM release modelled (`vllm.VERSIONS`: '0.33', the current one, by default;
      '0.11'; '0.6', the V0 engine); `--vllm-version` ('0.33.0' and 'v0.11' are accepted and
      kept as '0.33' / '0.11'). The one place the version is chosen: `vllm.rules(version)`.
    - `block_size`: tokens per block (`--block-size`; `vllm.BLOCK_SIZES`); None: not given, so
      vLLM picks (16; in 0.33 an MLA model's backend prefers its own: FLASHMLA 64, FLASHINFER_MLA 32,
      CUTLASS_MLA 128); 0.11's MLA backend forces its own whatever is given (`attention_block_size`).
    - `hybrid_allocator`: False is `--disable-hybrid-kv-cache-manager` (sliding layers keep every token).
    - `max_num_batched_tokens`: sizes sliding-window pages in the concurrency figure.
    - `async_scheduling`: 0.33 keeps two batches in flight (`--async-scheduling`, on by default;
      False is `--no-async-scheduling`).
    - `attention_backend`: vLLM's `--attention-backend` / `VLLM_ATTENTION_BACKEND` (FLASHMLA,
      CUTLASS_MLA, FLASHINFER_MLA, TRITON_MLA ...); None: the GPU's default.
    - `compute_capability`: the GPU's ('9.0' for an H100; from `--gpu`); None: kvcalc assumes
      Hopper where it matters (an MLA model's block size) and says so in the notes.
    - `vendor`: the GPU's ('nvidia', 'amd'; from `--gpu`): AMD GPUs take ROCm's MLA backend.
    - `prefix_caching`: None is the version's default (0.33: on, so a hybrid Mamba model's cache
      mode is 'align'; 0.11: off for hybrid models); False is `--no-enable-prefix-caching`.
    - `chunked_local_hybrid`: `VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE` (None: the
      version's default, 0.11 off, 0.33 on): Llama-4's chunked layers keep one chunk, not every token.
    - `allow_long_max_model_len`: `VLLM_ALLOW_LONG_MAX_MODEL_LEN=1` (a max_model_len past the
      model's limit warns instead of being refused).
    - `swap_space_bytes`: V0's CPU swap space per GPU (`# CPU blocks`), bytes; None: the
      version's default (`VllmRules.default_swap_space_bytes`: 4 GiB for 0.6, vLLM's
      `EngineArgs.swap_space = 4`; 0 for V1).
    - `per_token_head_scales`: `int8_per_token_head` / `fp8_per_token_head` pages carry fp32
      scales per token and head (set from the KV dtype by `VllmProfile.kv_formats`).
    - `cache_dtype`: a vLLM 0.33 `--kv-cache-dtype` kvcalc has no storage format for, whose
      rows the release packs itself (TurboQuant / UltraQuant / Octave presets,
      `int4_per_token_head`; set by `VllmProfile.split_kv_dtype`); None: the K / V formats say it.
    - `dcp`: decode context parallel size (`--decode-context-parallel-size`, `-dcp`; 0.33 only):
      each of dcp of the tp ranks holds 1/dcp of every request's positions of the full / MLA
      caches (`kvcalc.engines.vllm.dcp`); 1: off.

    Raises `KvcalcError` (field `vllm_version`) for a version kvcalc does not model.
    """

    block_size: int | None = None
    hybrid_allocator: bool = True
    max_num_batched_tokens: int = defaults.VLLM_MAX_NUM_BATCHED_TOKENS
    swap_space_bytes: int | None = None
    per_token_head_scales: bool = False
    version: str = defaults.VLLM_VERSION
    async_scheduling: bool = True
    attention_backend: str | None = None
    compute_capability: str | None = None
    allow_long_max_model_len: bool = False
    vendor: str | None = None
    prefix_caching: bool | None = None
    chunked_local_hybrid: bool | None = None
    cache_dtype: str | None = None
    dcp: int = 1

    def __post_init__(self) -> None:
        version = check_version(self.version)
        object.__setattr__(self, "version", version)
        if self.swap_space_bytes is None:
            object.__setattr__(self, "swap_space_bytes", rules(version).default_swap_space_bytes)
