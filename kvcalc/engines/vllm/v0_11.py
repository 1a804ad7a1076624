"""vLLM 0.11 (V1 engine, the 0.10-0.11 line): the rules where it differs from the current release.

Delete this module and its line in `kvcalc.engines.vllm.versions.VERSION_MODULES` to drop 0.11. Sources
are vLLM 0.11.0's files:

- MLA backend and block size, `vllm/platforms/cuda.py` `CudaPlatform.check_and_update_config`:
  an MLA model's backend forces its block whatever `--block-size` says: FlashMLA (the default on
  Hopper, compute capability 9.x) 64 tokens, CUTLASS MLA (the default on Blackwell 10.x) 128,
  FlashInfer MLA 32 or 64 (else 64); Triton MLA (the default elsewhere) keeps `--block-size`; AMD
  (`vllm/platforms/rocm.py`): TRITON_MLA unless VLLM_ROCM_USE_AITER=1; ROCM_AITER_MLA needs block
  size 1.
- Groups: layers_per_group is the smaller layer count (no 1.5x rule). Tokens in flight:
  max_num_batched_tokens (`SlidingWindowSpec.max_memory_usage_bytes`). Chunked local attention:
  the hybrid allocator is off unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1
  (`VllmConfig.__post_init__`).
- "GPU KV cache size: N tokens", `_report_kv_cache_config` / `get_kv_cache_config_from_groups`:
  num_blocks // n_groups x the smallest group block size (a Mamba group's is max_model_len),
  logged on two lines with the concurrency; "Available KV cache memory" with `%.2f` ("40.00").
- Start-up check (`vllm/v1/core/kv_cache_utils.py` `check_enough_kv_cache_memory`): the whole
  budget, per real layer its group's pages x page, over the layers' own specs before the hybrid
  manager unifies them.
- Hybrid models (`HybridAttentionMambaModelConfig.verify_and_update_config`): attention blocks
  in multiples of 16, prefix caching off (`MambaModelConfig`), one Mamba page per request, the
  state in the model's dtype; no Qwen3.5.
"""

from __future__ import annotations

from kvcalc.engines.vllm import hybrid
from kvcalc.engines.vllm.common import (
    ASSUMED_COMPUTE_CAPABILITY,
    DEFAULT_BLOCK_SIZE,
    Group,
    kv_cache_groups,
    needed_bytes,
)
from kvcalc.engines.vllm.v1 import V1Rules
from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.schema import ModelSpec

#: MLA attention backends (`--attention-backend`, vLLM's `VLLM_ATTENTION_BACKEND`) -> the block
#: size they force (None: --block-size stands), `vllm/platforms/cuda.py` `check_and_update_config`.
MLA_BACKENDS: dict[str, int | None] = {
    "FLASHMLA": 64,
    "CUTLASS_MLA": 128,
    "FLASHINFER_MLA": 64,
    "TRITON_MLA": None,
    "ROCM_AITER_MLA": None,
}
#: block sizes FlashInfer MLA takes as given (others become 64).
FLASHINFER_MLA_BLOCK_SIZES = (32, 64)
#: the block granularity 0.11 rounds a hybrid model's attention block up to ("some attention
#: backends (e.g. FA) only support setting block size to multiple of 16").
BLOCK_MULTIPLE = 16


class Vllm011(V1Rules):
    """vLLM 0.11 (V1 engine)."""

    version = "0.11"
    label = "vLLM 0.11 (V1 engine)"
    chunked_hybrid_default = False
    mla_backend_names = tuple(MLA_BACKENDS)

    def select_block_size(
        self,
        model: ModelSpec,
        block_size: int | None,
        name: str | None,
        compute_capability: str | None,
        vendor: str | None,
        kv_cache_dtype: str | None,
    ) -> tuple[int, str | None]:
        """`CudaPlatform.check_and_update_config`: an MLA model's attention backend forces its
        block size whatever `--block-size` says: FLASHMLA 64, CUTLASS_MLA 128, FLASHINFER_MLA 32
        or 64 (anything else becomes 64), TRITON_MLA keeps it. With no backend given, vLLM picks
        CUTLASS_MLA on Blackwell (compute capability 10.x), FLASHMLA on Hopper (9.x; FlashMLA needs
        sm90, `is_flashmla_supported`) and TRITON_MLA elsewhere. AMD (`vendor` 'amd',
        `RocmPlatform.get_attn_backend_cls`): TRITON_MLA unless AITER is on (`VLLM_ROCM_USE_AITER`,
        off by default), so `--block-size` stands; ROCM_AITER_MLA needs block size 1 (else
        `KvcalcError`, field `block_size`). Non-MLA models keep the size given, else 16."""
        if not any(layer.kind == "mla" for layer in model.layers):
            return block_size or DEFAULT_BLOCK_SIZE, None
        from kvcalc.engines.vllm.v0_33_mla import latent_words

        stores = latent_words(model, kv_cache_dtype)  # what the backend stores (issue 20)
        given = block_size
        block_size = block_size or DEFAULT_BLOCK_SIZE
        if name is None and vendor == "amd":
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
            raise KvcalcError(
                f"vLLM 0.11's ROCM_AITER_MLA does not support block size {block_size} (currently only "
                "supports block size 1): give --block-size 1",
                field="block_size",
                value=block_size,
            )
        if name == "FLASHINFER_MLA" and block_size in FLASHINFER_MLA_BLOCK_SIZES:
            forced = None
        if forced is None:
            return block_size, f"MLA attention backend {name} ({why}) {stores}, keeps block size {block_size}"
        return forced, (
            f"MLA attention backend {name} ({why}) {stores}, forces block size {forced}"
            + (
                ""
                if block_size == forced
                else f", not the {given} asked for"
                if given is not None
                else f", not vLLM's default {DEFAULT_BLOCK_SIZE}"
            )
        )

    def available_memory_line(self, kv_memory_bytes: int) -> str:
        """`vllm/v1/worker/gpu_worker.py` `determine_available_memory` (line 298): `%.2f` ('40.00 GiB')."""
        return f"Available KV cache memory: {kv_memory_bytes / 2**30:.2f} GiB"

    def kv_figures_lines(self, tokens: int, max_model_len: int, concurrency: float) -> list[str]:
        """Two lines (`kv_cache_utils.get_kv_cache_config_from_groups`, lines 1087-1092):
        "GPU KV cache size: N tokens" and "Maximum concurrency for L tokens per request: X.XXx"."""
        return [
            f"GPU KV cache size: {tokens:,} tokens",
            f"Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x",
        ]

    def kv_cache_tokens(
        self, num_blocks: int, groups: list[Group], concurrency: float, max_model_len: int, block_size: int
    ) -> int:
        """num_blocks // n_groups x the smallest group block size (`get_kv_cache_config_from_groups`;
        a Mamba group's block is max_model_len)."""
        min_block = min(block_size, max_model_len) if any(g.kind == "mamba" for g in groups) else block_size
        return num_blocks // len(groups) * min_block

    def request_bytes(
        self,
        model: ModelSpec,
        groups: list[Group],
        layers_per_group: int,
        max_model_len: int,
        block_size: int,
        page: int,
        in_flight: int,
    ) -> int:
        """`check_enough_kv_cache_memory`, `max_memory_usage_bytes`: per real layer its group's
        pages x page (`common.needed_bytes`)."""
        return needed_bytes(model, groups, max_model_len, block_size, page, in_flight)

    def check_groups(self, model: ModelSpec, groups: list[Group]) -> list[Group]:
        """0.11 checks each worker's layer specs as the layers built them, before
        `get_kv_cache_groups` unifies them (`vllm/v1/core/kv_cache_utils.py` `get_kv_cache_configs`,
        lines 1241-1244 before 1258; `unify_hybrid_kv_cache_specs` runs inside
        `get_kv_cache_groups`): with the hybrid KV cache manager off (Llama-4's chunked local
        attention by default, `--disable-hybrid-kv-cache-manager`) a chunked or sliding layer is
        counted by its window in the check and the estimated length, while its blocks are full
        ones. So the check's groups are the layers' own kinds (the hybrid allocator on)."""
        mamba_pages = next((g.mamba_pages for g in groups if g.kind == "mamba"), 1)
        return kv_cache_groups(model, True, mamba_pages)[0]

    def too_small(self, L: int, needed: int, available: int, estimated: int) -> str:
        """`vllm/v1/core/kv_cache_utils.py` `check_enough_kv_cache_memory`, lines 710-723:
        "models's", GiB to 2 places, then f"{estimated_msg} Try ...", so with no estimated length
        (estimated_msg "") two spaces: "GiB).  Try"."""
        est = (
            f"Based on the available memory, the estimated maximum model length is {estimated}."
            if estimated > 0
            else ""
        )
        return (
            f"To serve at least one request with the models's max seq len ({L}), ({needed / 2**30:.2f} GiB KV "
            f"cache is needed, which is larger than the available KV cache memory ({available / 2**30:.2f} GiB). "
            f"{est} Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
            "engine."
        )

    def mamba_state(
        self, model: ModelSpec, tp: int, model_dtype_bytes: int = 2, model_dtype: str = "bf16"
    ) -> hybrid.MambaState:
        """`hybrid.mamba_state` in the model's dtype (`gated_delta_net_state_dtype` is one dtype
        for both states); raises `KvcalcError` (field `model`) for Qwen3.5, which 0.11 lacks."""
        hybrid.check_linear_kind(model)
        if model.model_type in hybrid.QWEN3_5_MODEL_TYPES:
            raise KvcalcError(
                f"{model.name}: vLLM 0.11 has no Qwen3.5 model (Qwen3_5ForConditionalGeneration came "
                "later); use --vllm-version 0.33",
                field="model",
                value=model.name,
                form=MESSAGE,
            )
        return hybrid.mamba_state(model, tp, model_dtype_bytes, model_dtype)

    def state_dtype_note(
        self, model: ModelSpec, state: hybrid.MambaState, model_dtype: str, tp: int, model_dtype_bytes: int
    ) -> str:
        """The state's dtypes and page (`hybrid.state_text`); for a model type the current release
        keeps in fp32 (Nemotron-H), its page there: Nemotron-H-8B at tp 1, 0.11 bf16 2,158,592 B
        (528-token blocks), 0.33 fp32 4,255,744 B (1,040-token blocks)."""
        from kvcalc.engines.vllm.v0_33 import FP32_SSM_SOURCE

        text = hybrid.state_text(state, model_dtype)
        source = FP32_SSM_SOURCE.get(model.model_type or "")
        if source is None:
            return text
        other = hybrid.mamba_state(model, tp, model_dtype_bytes, model_dtype, ssm_fp32=True).page_size_bytes
        return text + f" (vLLM 0.11: the model's dtype; 0.33 keeps it in fp32, {other:,} B: {source})"

    def hybrid_alignment(
        self,
        model: ModelSpec,
        state: hybrid.MambaState,
        *,
        block_size: int,
        prefix_caching: bool | None,
        compute_capability: str,
        vendor: str | None,
    ) -> tuple[int, int, list[str], list[str]]:
        """`HybridAttentionMambaModelConfig.verify_and_update_config`
        (`vllm/model_executor/models/config.py`): attn_block = 16 x cdiv(mamba_page, 16 x page of
        one token). Prefix caching is switched off for hybrid models (`MambaModelConfig`; asked
        for, `KvcalcError` field `prefix_caching`): one Mamba page per request
        (`MambaSpec.max_memory_usage_bytes`), the Mamba group's block size max_model_len.
        Qwen3-Next-80B-A3B, bf16, tp 1: 16 x cdiv(1,097,728, 32,768) = 544 tokens."""
        if prefix_caching:
            raise KvcalcError(
                "vLLM 0.11 switches prefix caching off for hybrid models (MambaModelConfig: 'not yet supported')",
                field="prefix_caching",
                value=prefix_caching,
            )
        return (
            BLOCK_MULTIPLE,
            1,
            ["Hybrid or mamba-based model detected: disabling prefix caching since it is not yet supported."],
            [],
        )


RULES = Vllm011()
