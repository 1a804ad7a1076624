"""vLLM 0.33, the current release (V1 engine): the rules that are its own.

The V1 arithmetic it shares with older V1 releases is `v1.V1Rules` (pages, groups, blocks,
the start-up check); the attention backend that sets an MLA model's block size is `v0_33_mla`.
Sources are vLLM 0.33.0's files:

- Each layer's own KV dtype: Falcon's attention is built without the cache config
  (`vllm/model_executor/models/falcon.py`), so `--kv-cache-dtype` does not reach it and its
  cache stays in the model's dtype (`OWN_DTYPE_MODEL_TYPES`).
- Groups (`_get_kv_cache_groups_uniform_page_size`): layers_per_group = the larger layer count
  when it is under 1.5x the smaller (`widen_groups`).
- Tokens in flight, `VllmConfig.max_in_flight_tokens` = max_concurrent_batches x
  max_num_batched_tokens: 2 batches with async scheduling (on by default in `vllm serve`), else 1.
  A sliding request holds cdiv(min(window - 1 + in_flight, L), block_size) + 1 pages
  (`SlidingWindowSpec.max_admission_blocks_per_request`).
- Chunked local attention stays in the hybrid allocator
  (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE on by default, `vllm/envs.py`).
- "GPU KV cache size: N tokens", `kv_cache_utils.get_kv_cache_capacity`: int(max concurrency x
  max_model_len), logged on one line with the concurrency (`update_kv_cache_capacity`);
  "Available KV cache memory" in `format_gib` ("40.0").
- Start-up check (`vllm/v1/core/kv_cache_planning.py` `get_kv_cache_configs`,
  `_max_memory_usage_bytes_from_groups`): the budget less one block of every group (the null
  block `BlockPool` holds back); one request costs bytes per block (page x layers per group,
  padding layers included) x its pages over all groups; the messages end with a link to the
  conserving-memory guide.
- Hybrid Mamba / Gated-DeltaNet models: `Platform._align_hybrid_block_size` aligns to
  max(16, block size), lcm 64 for a FlashInfer Gated-DeltaNet prefill with prefix caching;
  prefix caching is on by default for hybrid models, so a Mamba group holds 2 + checkpoint blocks
  per request ('align' mode, `MambaSpec.max_memory_usage_bytes`); Nemotron-H's and Qwen3.5's SSM
  state is float32 (`vllm/model_executor/models/config.py`).
"""

from __future__ import annotations

from math import lcm
from typing import TYPE_CHECKING

from kvcalc.calc.kv_cache import kv_heads_per_rank, refuse_hybrid_layers, refuse_unmodelled_layers
from kvcalc.engine_dtypes import VLLM_033_CACHE_DTYPES, VLLM_033_FORMAT_NAMES
from kvcalc.engines.vllm import hybrid, planning, v0_33_mla, v0_33_specs
from kvcalc.engines.vllm.common import ASSUMED_COMPUTE_CAPABILITY, Group, Resolved, blocks_per_request, default_kv_dtype
from kvcalc.engines.vllm.v1 import V1Rules
from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.formats import StorageFormat, kv_format
from kvcalc.schema import ModelSpec

if TYPE_CHECKING:
    from kvcalc.engines.vllm.options import VllmOptions

#: model types vLLM 0.33 gives an fp8 cache by default on SM10x (`model_executor/models/config.py`
#: GlmMoeDsaForCausalLM, the architecture of model_type glm_moe_dsa)
GLM5_FP8_ON_SM10 = frozenset({"glm_moe_dsa"})

#: 0.33's "No available memory" start-up error (`vllm/v1/core/kv_cache_planning.py`
#: `_check_enough_kv_cache_memory`, lines 57-64): the flag's CPU clause and the guide's link.
NO_MEMORY = (
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
    "when initializing the engine (this flag also controls CPU memory reservation on the CPU "
    "backend, despite its name). "
    "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)
#: 0.33's start-up messages end with a pointer to the guide (`_check_enough_kv_cache_memory`).
SEE_GUIDE = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
#: model types whose attention is built without the cache config, so `--kv-cache-dtype` does not
#: reach their cache (`vllm/model_executor/models/falcon.py` `FalconAttention`).
OWN_DTYPE_MODEL_TYPES = frozenset({"falcon"})
#: model types vLLM 0.33 refuses at load (neither registry has them), and why
UNREGISTERED_MODEL_TYPES = {
    "minimax_m3": (
        "architecture MiniMaxM3ForCausalLM / model_type 'minimax_m3' is in neither vLLM 0.33's model "
        "registry nor its config registry (vLLM 0.33 has MiniMaxM3SparseForCausalLM, model_type "
        "minimax_m3_vl / minimax_m3_text)"
    ),
    "step3p7": (
        "architecture Step3p7FlashForCausalLM is not in vLLM 0.33's model registry (vLLM 0.33 has "
        "Step3p7ForConditionalGeneration, whose text model Step3p5ForCausalLM reads num_attention_groups, "
        "which this config does not give)"
    ),
}
#: the refusal's tail: 0.33's `--kv-cache-dtype` list and the part kvcalc sizes
VLLM_033_TAKES = (
    f"vLLM 0.33's --kv-cache-dtype takes {', '.join(VLLM_033_CACHE_DTYPES)} (vllm/config/cache.py "
    "CacheDType); kvcalc sizes auto, bfloat16, float16, fp8, fp8_e5m2, int8_per_token_head, "
    "fp8_per_token_head and nvfp4 (fp8_ds_mla as sparse MLA's fp8)"
)
#: the 2026 layer features vLLM 0.33's profile sizes (`kv_cache.LAYER_FEATURES`)
SPEC_FEATURES = frozenset(
    {
        "sinks",
        "k_eq_v",
        "kv_shared",
        "kind_geometry",
        "v_is_k",
        "compressed",
        "indexer",
        "partial_indexer",
        "linear_beside_mla",
    }
)
#: the MLA backends `--attention-backend` may name, in the order kvcalc lists them.
MLA_BACKEND_NAMES = (
    "FLASHMLA",
    "CUTLASS_MLA",
    "FLASHINFER_MLA",
    "TRITON_MLA",
    "ROCM_AITER_MLA",
    "FLASH_ATTN_MLA",
    "TOKENSPEED_MLA",
)
#: model types whose SSM state 0.33 keeps in float32 (`NemotronHForCausalLMConfig`: the config's
#: mamba_ssm_cache_dtype, float32 by default) or Qwen3.5's mamba_ssm_dtype (float32).
FP32_SSM_MODEL_TYPES = frozenset({"nemotron_h"}) | hybrid.QWEN3_5_MODEL_TYPES
#: where 0.33 takes the fp32 SSM state from, per model type (`FP32_SSM_MODEL_TYPES`)
FP32_SSM_SOURCE = {"nemotron_h": "NemotronHForCausalLMConfig sets mamba_ssm_cache_dtype float32"} | {
    t: "Qwen3_5ForConditionalGenerationConfig takes the config's mamba_ssm_dtype, float32"
    for t in hybrid.QWEN3_5_MODEL_TYPES
}
#: the smallest kernel block of the attention backends hybrid models run on (FLASH_ATTN,
#: TRITON_ATTN `MultipleOf(16)`, FLASHINFER 16): `get_supported_kernel_block_sizes`.
KERNEL_BLOCK = 16
#: `vllm/v1/attention/backends/gdn_attn.py` FLASHINFER_GDN_CHECKPOINT_ALIGNMENT (tokens).
FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64
#: what vLLM 0.33 runs a Gated DeltaNet prefill with on ROCm (`qwen_gdn_linear_attn.py`
#: `_resolve_gdn_prefill_backend`, `current_platform.is_rocm()` branch, gdn_prefill_backend 'auto'):
#: AITER FlyDSL on MI300 / MI350 (`on_mi3xx`: gfx942, gfx950) when AITER exports its FlyDSL
#: kernels and the model runs bf16 with linear head dims 128 / 128, else Triton/FLA. Neither is
#: FlashInfer, the only backend that declares prefill checkpoints (`_checkpoint_alignment` is
#: set for 'flashinfer' only), so the choice between them does not change the blocks.
ROCM_GDN_PREFILL = "AITER FlyDSL or Triton/FLA"


def format_gib(n_bytes: int) -> str:
    """GiB as vLLM 0.33 prints them (`vllm/utils/mem_utils.py` `format_gib`:
    f"{round(b / GiB_bytes, 2)}"): 2**29 -> '0.5', 40 x 2**30 -> '40.0', 6.51 GiB -> '6.51'."""
    return f"{round(n_bytes / 2**30, 2)}"


def gdn_flashinfer_prefill(model: ModelSpec, compute_capability: str, vendor: str | None = None) -> bool:
    """Whether 0.33 runs a Gated DeltaNet prefill with FlashInfer
    (`qwen_gdn_linear_attn.py` `_resolve_gdn_prefill_backend`): on CUDA only, Hopper (9.x), or
    Blackwell (10.x, 12.x) with linear_key_head_dim 128 (kvcalc assumes vLLM's CUDA 13 build
    there). `vendor` 'amd' (ROCm): never; vLLM picks AITER FlyDSL or Triton/FLA there
    (`ROCM_GDN_PREFILL`)."""
    if vendor == "amd":
        return False
    major = int(compute_capability.split(".")[0])
    return major == 9 or (major in (10, 12) and model.linear_key_head_dim == 128)


class Vllm033(V1Rules):
    """vLLM 0.33 (V1 engine), the current release."""

    version = "0.33"
    label = "vLLM 0.33 (V1 engine)"
    no_memory = NO_MEMORY
    null_block = True
    async_scheduling = True
    chunked_hybrid_default = True
    widen_groups = True
    mla_backend_names = MLA_BACKEND_NAMES

    def layer_formats(
        self, model: ModelSpec, k: StorageFormat, v: StorageFormat
    ) -> tuple[StorageFormat, StorageFormat, str | None]:
        """(K, V, note) as the model's layers cache them: the attention of the model types in
        `OWN_DTYPE_MODEL_TYPES` is built without the cache config, so a `--kv-cache-dtype` other
        than the model's dtype does not reach it (Falcon stays bf16 under fp8). Else `k`, `v`, None."""
        if model.model_type not in OWN_DTYPE_MODEL_TYPES:
            return k, v, None
        from kvcalc.formats import kv_format

        own = kv_format(default_kv_dtype(model)[0])
        if (k, v) == (own, own):
            return k, v, None
        return (
            own,
            own,
            (
                f"vLLM 0.33 builds {model.model_type}'s attention without the cache config: its cache "
                f"stays {own.name}, not {k.name if k == v else f'{k.name}/{v.name}'}"
            ),
        )

    def select_block_size(
        self,
        model: ModelSpec,
        block_size: int | None,
        name: str | None,
        compute_capability: str | None,
        vendor: str | None,
        kv_cache_dtype: str | None,
    ) -> tuple[int, str | None]:
        """`v0_33_mla.select_block_size`: the backend's choice from the GPU's priority list."""
        return v0_33_mla.select_block_size(model, block_size, name, compute_capability, vendor, kv_cache_dtype)

    def in_flight_tokens(self, max_num_batched_tokens: int, async_scheduling: bool = True) -> int:
        """`VllmConfig.max_in_flight_tokens` = max_concurrent_batches x max_num_batched_tokens,
        two batches with async scheduling (`vllm/config/vllm.py`; on by default in `vllm serve`), else one."""
        return 2 * max_num_batched_tokens if async_scheduling else max_num_batched_tokens

    def available_memory_line(self, kv_memory_bytes: int) -> str:
        """`vllm/v1/worker/gpu_worker.py` `determine_available_memory` (line 772): `format_gib` ('40.0 GiB')."""
        return f"Available KV cache memory: {format_gib(kv_memory_bytes)} GiB"

    def kv_figures_lines(self, tokens: int, max_model_len: int, concurrency: float) -> list[str]:
        """One line (`vllm/v1/core/kv_cache_utils.py` `update_kv_cache_capacity`, lines 1136-1153):
        "GPU KV cache size: N tokens, Maximum concurrency for L tokens per request: X.XXx", N and
        L with thousands separators, X with `%.2f`."""
        return [
            f"GPU KV cache size: {tokens:,} tokens, "
            f"Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x"
        ]

    def kv_cache_tokens(
        self, num_blocks: int, groups: list[Group], concurrency: float, max_model_len: int, block_size: int
    ) -> int:
        """int(max concurrency x max_model_len) (`kv_cache_utils.get_kv_cache_capacity`): the same
        as blocks x block size for one full-attention group whose L is a multiple of the block
        size; larger for sliding-window models, whose requests hold only their window."""
        return int(concurrency * max_model_len)

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
        """`kv_cache_planning._max_memory_usage_bytes_from_groups`: bytes per block (page x layers
        per group, padding layers included) x the pages of all groups."""
        return page * layers_per_group * blocks_per_request(groups, max_model_len, block_size, in_flight)

    def too_small(self, L: int, needed: int, available: int, estimated: int) -> str:
        """`vllm/v1/core/kv_cache_planning.py` `_check_enough_kv_cache_memory`, lines 70-87:
        "model's", GiB by `format_gib`, the estimated length sentence ending in a space, the
        `gpu_memory_utilization` CPU clause, the guide's link."""
        est = (
            f"Based on the available memory, the estimated maximum model length is {estimated}. "
            if estimated > 0
            else ""
        )
        return (
            f"To serve at least one request with the model's max seq len ({L}), ({format_gib(needed)} GiB KV "
            f"cache is needed, which is larger than the available KV cache memory ({format_gib(available)} GiB). "
            f"{est}Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) "
            f"or decreasing `max_model_len` when initializing the engine. {SEE_GUIDE}"
        )

    def mamba_state(
        self, model: ModelSpec, tp: int, model_dtype_bytes: int = 2, model_dtype: str = "bf16"
    ) -> hybrid.MambaState:
        """`hybrid.mamba_state` with the SSM state in float32 for `FP32_SSM_MODEL_TYPES`.

        Qwen3.5 (3 x 8,192 conv values in bf16, 32 x 128 x 128 recurrent in fp32):
        3 x 8,192 x 2 + 524,288 x 4 = 2,146,304 B."""
        hybrid.check_linear_kind(model)
        return hybrid.mamba_state(
            model, tp, model_dtype_bytes, model_dtype, ssm_fp32=model.model_type in FP32_SSM_MODEL_TYPES
        )

    def state_dtype_note(
        self, model: ModelSpec, state: hybrid.MambaState, model_dtype: str, tp: int, model_dtype_bytes: int
    ) -> str:
        """The state's dtypes and page (`hybrid.state_text`); for a model type kept in fp32, why,
        and the page in the model's dtype (which vLLM 0.11 used), since the page (and so the
        attention block) differs: Nemotron-H-8B at tp 1, fp32 4,255,744 B (1,040-token blocks),
        bf16 2,158,592 B (528-token blocks)."""
        text = hybrid.state_text(state, model_dtype)
        source = FP32_SSM_SOURCE.get(model.model_type or "")
        if source is None:
            return text
        if model.model_type in hybrid.QWEN3_5_MODEL_TYPES:  # no Qwen3.5 in 0.11
            return text + f" (vLLM 0.33: {source})"
        other = hybrid.mamba_state(model, tp, model_dtype_bytes, model_dtype).page_size_bytes
        return text + f" (vLLM 0.33: {source}; 0.11 keeps it in {model_dtype}: {other:,} B)"

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
        """`Platform._align_hybrid_block_size` (`vllm/platforms/interface.py`): alignment =
        max(`KERNEL_BLOCK`, block_size), lcm'd with the prefill-checkpoint alignment (64 for a
        FlashInfer Gated DeltaNet: `gdn_flashinfer_prefill`; never on ROCm) when prefix caching
        is on (`prefix_caching` None: on, `ModelConfig.is_prefix_caching_supported`), which sets
        `mamba_cache_mode` 'align' (`MambaModelConfig.verify_and_update_config`): a request holds
        2 + num_prefill_checkpoint_blocks Mamba pages (`MambaSpec.max_memory_usage_bytes`):
        Mamba-2 layers declare one checkpoint block (`MambaMixer2.get_kv_cache_spec`), Gated
        DeltaNet one when FlashInfer runs its prefill (`QwenGatedDeltaNet.get_kv_cache_spec`),
        Mamba-1 none. Prefix caching off ('none'): one page.

        Qwen3-Next-80B-A3B, bf16, tp 1 (token page 2,048 B, state 1,097,728 B) on Hopper:
        64 x cdiv(1,097,728, 131,072) = 64 x 9 = 576 tokens; on ROCm (no FlashInfer prefill, no
        checkpoint block): 16 x 34 = 544 tokens, 2 Mamba pages per request."""
        align = max(KERNEL_BLOCK, block_size)
        backends = (
            "ROCM_ATTN / ROCM_AITER_FA / TRITON_ATTN" if vendor == "amd" else "FLASH_ATTN / FLASHINFER / TRITON_ATTN"
        )
        notes = [f"the attention backend's smallest kernel block assumed {KERNEL_BLOCK} tokens ({backends})"]
        if not (prefix_caching is None or prefix_caching):
            return align, 1, [], notes
        checkpoint = 0
        if state.kind == "gdn" and gdn_flashinfer_prefill(model, compute_capability, vendor):
            align = lcm(align, FLASHINFER_GDN_CHECKPOINT_ALIGNMENT)
            checkpoint = 1
            notes.append(
                f"Gated DeltaNet prefill on FlashInfer (compute capability {compute_capability}): "
                f"blocks aligned to its {FLASHINFER_GDN_CHECKPOINT_ALIGNMENT}-token checkpoints"
            )
        elif state.kind == "gdn" and vendor == "amd":
            notes.append(
                f"Gated DeltaNet prefill on ROCm: {ROCM_GDN_PREFILL} (vLLM's FlashInfer prefill is "
                "CUDA-only), neither of which keeps prefill checkpoints: no checkpoint block, no "
                f"{FLASHINFER_GDN_CHECKPOINT_ALIGNMENT}-token alignment"
            )
        elif state.kind == "mamba2":
            checkpoint = 1  # MambaMixer2.get_kv_cache_spec: num_prefill_checkpoint_blocks=1
        mamba_pages = 2 + checkpoint
        notes.append(
            f"prefix caching on (vLLM 0.33's default for hybrid models): Mamba cache mode 'align', "
            f"{mamba_pages} Mamba pages per request"
        )
        return align, mamba_pages, [], notes

    def hybrid_notes(self, blocks: hybrid.HybridBlocks, options: VllmOptions) -> list[str]:
        """A Gated-DeltaNet model's alignment depends on the GPU: say when Hopper was assumed."""
        if options.compute_capability is None and options.vendor != "amd" and blocks.state.kind == "gdn":
            return [f"GPU assumed Hopper (compute capability {ASSUMED_COMPUTE_CAPABILITY}): no GPU given"]
        return []

    def check_formats(self, model: ModelSpec, k: StorageFormat, v: StorageFormat) -> None:
        """vLLM 0.33's `CacheDType` (`engine_dtypes.VLLM_033_CACHE_DTYPES`): a kvcalc format
        whose vLLM name is in it (`VLLM_033_FORMAT_NAMES`: nvfp4 beside the 16-bit and fp8
        ones) passes where a backend takes it for the model's layers (nvfp4: FlashInfer, full /
        sliding attention only); any other block-quantized format is refused, naming 0.33's
        list and what kvcalc sizes of it.

        nvfp4 per K or V head row: head/2 B of fp4 + head/16 B of fp8 scales
        (`nvfp4_kv_cache_full_dim`): Llama-3.1-8B 2 x 32 x 8 x (64 + 8) = 36,864 B a token."""
        for field, f in (("k_dtype", k), ("v_dtype", v)):
            if f.block_values == 1:
                continue
            name = VLLM_033_FORMAT_NAMES.get(f.name)
            row = VLLM_033_CACHE_DTYPES.get(name or "")
            if row is None:
                raise KvcalcError(
                    f"vLLM 0.33 has no '{f.name}' KV cache dtype; {VLLM_033_TAKES}",
                    field=field,
                    value=f.name,
                    form=MESSAGE,
                )
            if any(layer.kind in ("mla", "hybrid") for layer in model.layers) or v0_33_specs.needs_specs(model):
                mla = ", ".join(n for n, r in VLLM_033_CACHE_DTYPES.items() if "mla" in r.attention)
                raise KvcalcError(
                    f"vLLM 0.33's {name} KV cache is for full / sliding attention layers "
                    f"({', '.join(row.backends)}); kvcalc sizes it for models of those only, and "
                    f"{model.name} has MLA, hybrid or per-layer-geometry layers (vLLM 0.33's MLA "
                    f"backends take {mla})",
                    field=field,
                    value=f.name,
                    form=MESSAGE,
                )

    # ----- the 2026 models: per-layer specs (`v0_33_specs`, `planning`) ---------------------

    def check_loadable(self, model: ModelSpec) -> None:
        """Raise `KvcalcError` (field `model`) for a config vLLM 0.33 refuses at load: its
        architecture and model type in neither the model registry
        (`vllm/model_executor/models/registry.py`) nor the config registry
        (`vllm/transformers_utils/config.py`) (`UNREGISTERED_MODEL_TYPES`)."""
        why = UNREGISTERED_MODEL_TYPES.get(model.model_type or "")
        if why:
            raise KvcalcError(
                f"{model.name}: vLLM 0.33 refuses this config.json at load: {why}",
                field="model",
                value=model.name,
                form=MESSAGE,
            )

    def check_features(self, model: ModelSpec) -> None:
        """The 2026 attention vLLM 0.33 sizes (`SPEC_FEATURES`: per-layer geometry, K = V, shared
        KV, DeepSeek-V4's compressed caches, the DSA indexer on all or some layers, KDA beside
        MLA) passes; any other feature (MiniMax-M3's KV-format indexer) is refused."""
        if any(layer.kind == "hybrid" for layer in model.layers):
            refuse_hybrid_layers(model, "vLLM")
        refuse_unmodelled_layers(model, "vLLM 0.33", SPEC_FEATURES)

    def spec_resolve(
        self, model: ModelSpec, k: StorageFormat, v: StorageFormat, *, tp: int, options: VllmOptions, label: str | None
    ) -> Resolved | None:
        """Per-layer specs (`v0_33_specs`) for a model whose layers do not share one page
        (`v0_33_specs.needs_specs`); the pool's bytes per block is `planning.bytes_per_block`
        of `planning.kv_cache_groups`. `label` names the `--kv-cache-dtype` given (None or
        'auto (...)': auto). Hopper's backends; a `--block-size` given is refused for these
        models (the sparse MLA and DeepSeek-V4 backends fix it; kvcalc does not model the rest)."""
        hybrid = any(x.kind in ("mamba", "linear") for x in model.layers)
        packed = options.cache_dtype or (
            f"{'fp8' if k.name.startswith('fp8') else 'int8'}_per_token_head" if options.per_token_head_scales else None
        )
        if hybrid and packed is not None and (packed.startswith("turboquant_") or packed.endswith("_per_token_head")):
            return self._packed_hybrid(model, k, v, packed, tp=tp, options=options)
        if options.cache_dtype is not None:
            specs, note = v0_33_specs.packed_specs(model, k, options.cache_dtype, tp=tp)
            groups = planning.kv_cache_groups(specs)
            return Resolved(
                k, v, specs[0].block_size, planning.bytes_per_block(groups), True, 1, [], [note], specs=specs
            )
        if not v0_33_specs.needs_specs(model):
            return None
        if options.block_size is not None:
            raise KvcalcError(
                f"{model.name}: kvcalc's vLLM 0.33 profile sizes this model at the backends' own block "
                "sizes; --block-size is not modelled for it",
                field="block_size",
                value=options.block_size,
            )
        if options.per_token_head_scales:
            raise KvcalcError(
                f"{model.name}: per-token-head KV scales are not modelled by kvcalc's vLLM 0.33 profile "
                "for per-layer geometry, sparse MLA or DeepSeek-V4",
                field="kv_dtype",
                value=label,
                form=MESSAGE,
            )
        if label is None and k == v and k.name != self.default_kv_dtype(model)[0]:
            # no label (`kvcalc estimate --kv-dtype fp8`): the format still names vLLM's dtype;
            # reading it as auto put an fp8 cache on the 16-bit sparse MLA backend (576 B rows)
            cache_dtype = VLLM_033_FORMAT_NAMES.get(k.name, k.name)
        elif label is None or label.startswith("auto"):
            cache_dtype = "auto"
        elif label.strip().lower() == "fp8_ds_mla":  # named apart: on Blackwell it picks FLASHMLA_SPARSE
            cache_dtype = "fp8_ds_mla"
        else:
            # a vLLM name as given: fp8_e4m3 is not fp8 on sparse MLA (FLASHINFER_MLA_SPARSE_SM90)
            cache_dtype = (
                label
                if label in VLLM_033_CACHE_DTYPES
                else VLLM_033_FORMAT_NAMES.get(k.name, k.name)
                if k == v
                else label
            )
        notes: list[str] = []
        lines: list[str] = []
        outermost = False
        major = v0_33_specs.cc_major(options.compute_capability)
        if major == 10 and cache_dtype == "auto" and model.model_type in GLM5_FP8_ON_SM10:
            # vLLM 0.33.0 `model_executor/models/config.py` GlmMoeDsaForCausalLM.verify_and_update_config:
            # auto on SM10x becomes fp8_e4m3 ("Using fp8 kv-cache for GlmMoeDsaForCausalLM on SM10x")
            cache_dtype = "fp8_e4m3"
            k = v = kv_format("fp8_e4m3")
            lines.append("Using fp8 kv-cache for GlmMoeDsaForCausalLM on SM10x")
        if v0_33_specs.is_deepseek_v4(model):
            if major not in (9, 10):
                raise KvcalcError(
                    f"{model.name}: vLLM 0.33 runs DeepSeek-V4 on SM12x with FlashInfer "
                    "(`_select_dsv4_attn_cls`), which kvcalc does not model; its FlashMLA path (9.x, 10.x) is",
                    field="gpu",
                    value=options.compute_capability,
                )
            specs, more = v0_33_specs.deepseek_v4_specs(model, cache_dtype or "auto")
            lines += more
            outermost = True
            notes.append(
                f"DeepSeek-V4 on {'Blackwell' if major == 10 else 'Hopper'}: FlashMLA (vLLM 0.33 "
                "`_select_dsv4_attn_cls`: FlashMLA on every CUDA arch but SM12x), fp8_ds_mla (584 B an entry, "
                "pages aligned to 576 B), KV cache layout BLHNC, packed groups"
            )
            block_size = v0_33_specs.DSV4_SWA_BLOCK
        elif v0_33_specs.is_kda_mla(model):
            specs, block_size, lines, note = v0_33_specs.kda_mla_specs(model, k, tp=tp)
            notes.append(note)
        elif v0_33_specs.is_sparse_mla(model):
            specs, note = v0_33_specs.sparse_mla_specs(
                model, k, cache_dtype or "auto", major=major, tp=tp, dcp=options.dcp
            )
            notes.append(note)
            block_size = v0_33_specs.SPARSE_MLA_BLOCK_SIZE
        else:
            specs = v0_33_specs.attention_specs(model, k, v, tp=tp, block_size=None)
            block_size = min(s.block_size for s in specs)
        groups = planning.kv_cache_groups(specs, block_outermost=outermost)
        page = planning.bytes_per_block(groups)
        if options.compute_capability is None:
            notes.append(f"GPU assumed Hopper (compute capability {ASSUMED_COMPUTE_CAPABILITY}): no GPU given")
        return Resolved(k, v, block_size, page, True, 1, lines, notes, specs=specs, block_outermost=outermost)

    def _packed_hybrid(
        self, model: ModelSpec, k: StorageFormat, v: StorageFormat, name: str, *, tp: int, options: VllmOptions
    ) -> Resolved:
        """A packed `--kv-cache-dtype` (`int4/int8/fp8_per_token_head`, the TurboQuant presets) on
        a hybrid attention + Mamba / Gated-DeltaNet model: the attention page of one token is
        the backend's packing (`customize_spec`, `engine_dtypes.vllm_033_head_bytes`: TRITON_ATTN
        heads x (values + 2 x 4 B scales), TURBOQUANT heads x its slot), which
        `Platform._align_hybrid_block_size` aligns the block to (`attn_page_size_1_token =
        backend_cls.customize_spec(attn_spec).page_size_bytes`), then the hybrid rules as for any
        dtype (`_hybrid_blocks`). TurboQuant keeps no boundary layers on hybrids
        (`TurboQuantConfig.get_boundary_skip_layers`: "boundary protection is disabled"). Qwen3.5-27B,
        tp 1 (Gated DeltaNet page 3,207,168 B, 64-token alignment): int4 4 x (128 + 128 + 8) = 1,056
        B a token, block 64 x cdiv(3,207,168, 64 x 1,056) = 3,072; turboquant_k8v4 4 x 388 = 1,552,
        block 2,112; int8 4 x 520 = 2,080, block 1,600 (`tests/oracle/vllm_grid.py`, vLLM's own code)."""
        from kvcalc.engine_dtypes import vllm_033_head_bytes

        attention = next(x for x in model.layers if x.kind == "full")
        if any(x.kind not in ("full", "mamba", "linear", "mlp") for x in model.layers):
            raise KvcalcError(
                f"{model.name}: kvcalc's vLLM 0.33 profile sizes {name} on hybrids of full "
                "attention and Mamba / linear layers only",
                field="kv_dtype",
                value=name,
                form=MESSAGE,
            )
        token_page = kv_heads_per_rank(attention, tp) * vllm_033_head_bytes(
            name, attention.head_dim_k, attention.head_dim_v
        )
        hb = self._hybrid_blocks(
            model,
            k,
            v,
            block_size=options.block_size or 16,
            tp=tp,
            options=options,
            scales=False,
            token_page=token_page,
        )
        backend = (
            "TURBOQUANT" if name.startswith("turboquant_") else "TRITON_ATTN: values + fp32 scales per token and head"
        )
        notes = [
            f"{name}: {token_page:,} B a token per attention layer ({backend})",
            *hb.notes,
            *self.hybrid_notes(hb, options),
        ]
        return Resolved(
            k, v, hb.block_size, hb.page_bytes, options.hybrid_allocator, hb.mamba_pages, list(hb.log_lines), notes
        )


RULES = Vllm033()
