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

from kvcalc.engines.vllm import hybrid, v0_33_mla
from kvcalc.engines.vllm.common import ASSUMED_COMPUTE_CAPABILITY, Group, blocks_per_request, default_kv_dtype
from kvcalc.engines.vllm.v1 import V1Rules
from kvcalc.formats import StorageFormat
from kvcalc.schema import ModelSpec

if TYPE_CHECKING:
    from kvcalc.engines.vllm.options import VllmOptions

#: 0.33's "No available memory" start-up error (`vllm/v1/core/kv_cache_planning.py`
#: `_check_enough_kv_cache_memory`, lines 57-64): the flag's CPU clause and the guide's link.
NO_MEMORY = ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
             "when initializing the engine (this flag also controls CPU memory reservation on the CPU "
             "backend, despite its name). "
             "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
#: 0.33's start-up messages end with a pointer to the guide (`_check_enough_kv_cache_memory`).
SEE_GUIDE = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
#: model types whose attention is built without the cache config, so `--kv-cache-dtype` does not
#: reach their cache (`vllm/model_executor/models/falcon.py` `FalconAttention`).
OWN_DTYPE_MODEL_TYPES = frozenset({"falcon"})
#: the MLA backends `--attention-backend` may name, in the order kvcalc lists them.
MLA_BACKEND_NAMES = ("FLASHMLA", "CUTLASS_MLA", "FLASHINFER_MLA", "TRITON_MLA", "ROCM_AITER_MLA", "FLASH_ATTN_MLA",
                     "TOKENSPEED_MLA")
#: model types whose SSM state 0.33 keeps in float32 (`NemotronHForCausalLMConfig`: the config's
#: mamba_ssm_cache_dtype, float32 by default) or Qwen3.5's mamba_ssm_dtype (float32).
FP32_SSM_MODEL_TYPES = frozenset({"nemotron_h"}) | hybrid.QWEN3_5_MODEL_TYPES
#: where 0.33 takes the fp32 SSM state from, per model type (`FP32_SSM_MODEL_TYPES`)
FP32_SSM_SOURCE = {"nemotron_h": "NemotronHForCausalLMConfig sets mamba_ssm_cache_dtype float32"} | {
    t: "Qwen3_5ForConditionalGenerationConfig takes the config's mamba_ssm_dtype, float32"
    for t in hybrid.QWEN3_5_MODEL_TYPES}
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

    def layer_formats(self, model: ModelSpec, k: StorageFormat,
                      v: StorageFormat) -> tuple[StorageFormat, StorageFormat, str | None]:
        """(K, V, note) as the model's layers cache them: the attention of the model types in
        `OWN_DTYPE_MODEL_TYPES` is built without the cache config, so a `--kv-cache-dtype` other
        than the model's dtype does not reach it (Falcon stays bf16 under fp8). Else `k`, `v`, None."""
        if model.model_type not in OWN_DTYPE_MODEL_TYPES:
            return k, v, None
        from kvcalc.formats import kv_format

        own = kv_format(default_kv_dtype(model)[0])
        if (k, v) == (own, own):
            return k, v, None
        return own, own, (f"vLLM 0.33 builds {model.model_type}'s attention without the cache config: its cache "
                          f"stays {own.name}, not {k.name if k == v else f'{k.name}/{v.name}'}")

    def select_block_size(self, model: ModelSpec, block_size: int | None, name: str | None,
                          compute_capability: str | None, vendor: str | None,
                          kv_cache_dtype: str | None) -> tuple[int, str | None]:
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
        return [f"GPU KV cache size: {tokens:,} tokens, "
                f"Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x"]

    def kv_cache_tokens(self, num_blocks: int, groups: list[Group], concurrency: float, max_model_len: int,
                        block_size: int) -> int:
        """int(max concurrency x max_model_len) (`kv_cache_utils.get_kv_cache_capacity`): the same
        as blocks x block size for one full-attention group whose L is a multiple of the block
        size; larger for sliding-window models, whose requests hold only their window."""
        return int(concurrency * max_model_len)

    def request_bytes(self, model: ModelSpec, groups: list[Group], layers_per_group: int, max_model_len: int,
                      block_size: int, page: int, in_flight: int) -> int:
        """`kv_cache_planning._max_memory_usage_bytes_from_groups`: bytes per block (page x layers
        per group, padding layers included) x the pages of all groups."""
        return page * layers_per_group * blocks_per_request(groups, max_model_len, block_size, in_flight)

    def too_small(self, L: int, needed: int, available: int, estimated: int) -> str:
        """`vllm/v1/core/kv_cache_planning.py` `_check_enough_kv_cache_memory`, lines 70-87:
        "model's", GiB by `format_gib`, the estimated length sentence ending in a space, the
        `gpu_memory_utilization` CPU clause, the guide's link."""
        est = (f"Based on the available memory, the estimated maximum model length is {estimated}. "
               if estimated > 0 else "")
        return (f"To serve at least one request with the model's max seq len ({L}), ({format_gib(needed)} GiB KV "
                f"cache is needed, which is larger than the available KV cache memory ({format_gib(available)} GiB). "
                f"{est}Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) "
                f"or decreasing `max_model_len` when initializing the engine. {SEE_GUIDE}")

    def mamba_state(self, model: ModelSpec, tp: int, model_dtype_bytes: int = 2,
                    model_dtype: str = "bf16") -> hybrid.MambaState:
        """`hybrid.mamba_state` with the SSM state in float32 for `FP32_SSM_MODEL_TYPES`.

        Qwen3.5 (3 x 8,192 conv values in bf16, 32 x 128 x 128 recurrent in fp32):
        3 x 8,192 x 2 + 524,288 x 4 = 2,146,304 B."""
        hybrid.check_linear_kind(model)
        return hybrid.mamba_state(model, tp, model_dtype_bytes, model_dtype,
                                  ssm_fp32=model.model_type in FP32_SSM_MODEL_TYPES)

    def state_dtype_note(self, model: ModelSpec, state: hybrid.MambaState, model_dtype: str, tp: int,
                         model_dtype_bytes: int) -> str:
        """The state's dtypes and page (`hybrid.state_text`); for a model type kept in fp32, why,
        and the page in the model's dtype (which vLLM 0.11 used), since the page (and so the
        attention block) differs: Nemotron-H-8B at tp 1, fp32 4,255,744 B (1,040-token blocks),
        bf16 2,158,592 B (528-token blocks)."""
        text = hybrid.state_text(state, model_dtype)
        source = FP32_SSM_SOURCE.get(model.model_type)
        if source is None:
            return text
        if model.model_type in hybrid.QWEN3_5_MODEL_TYPES:  # no Qwen3.5 in 0.11
            return text + f" (vLLM 0.33: {source})"
        other = hybrid.mamba_state(model, tp, model_dtype_bytes, model_dtype).page_size_bytes
        return text + f" (vLLM 0.33: {source}; 0.11 keeps it in {model_dtype}: {other:,} B)"

    def hybrid_alignment(self, model: ModelSpec, state: hybrid.MambaState, *, block_size: int,
                         prefix_caching: bool | None, compute_capability: str,
                         vendor: str | None) -> tuple[int, int, list[str], list[str]]:
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
        backends = ("ROCM_ATTN / ROCM_AITER_FA / TRITON_ATTN" if vendor == "amd"
                    else "FLASH_ATTN / FLASHINFER / TRITON_ATTN")
        notes = [f"the attention backend's smallest kernel block assumed {KERNEL_BLOCK} tokens ({backends})"]
        if not (prefix_caching is None or prefix_caching):
            return align, 1, [], notes
        checkpoint = 0
        if state.kind == "gdn" and gdn_flashinfer_prefill(model, compute_capability, vendor):
            align = lcm(align, FLASHINFER_GDN_CHECKPOINT_ALIGNMENT)
            checkpoint = 1
            notes.append(f"Gated DeltaNet prefill on FlashInfer (compute capability {compute_capability}): "
                         f"blocks aligned to its {FLASHINFER_GDN_CHECKPOINT_ALIGNMENT}-token checkpoints")
        elif state.kind == "gdn" and vendor == "amd":
            notes.append(f"Gated DeltaNet prefill on ROCm: {ROCM_GDN_PREFILL} (vLLM's FlashInfer prefill is "
                         "CUDA-only), neither of which keeps prefill checkpoints: no checkpoint block, no "
                         f"{FLASHINFER_GDN_CHECKPOINT_ALIGNMENT}-token alignment")
        elif state.kind == "mamba2":
            checkpoint = 1  # MambaMixer2.get_kv_cache_spec: num_prefill_checkpoint_blocks=1
        mamba_pages = 2 + checkpoint
        notes.append(f"prefix caching on (vLLM 0.33's default for hybrid models): Mamba cache mode 'align', "
                     f"{mamba_pages} Mamba pages per request")
        return align, mamba_pages, [], notes

    def hybrid_notes(self, blocks: hybrid.HybridBlocks, options: VllmOptions) -> list[str]:
        """A Gated-DeltaNet model's alignment depends on the GPU: say when Hopper was assumed."""
        if options.compute_capability is None and options.vendor != "amd" and blocks.state.kind == "gdn":
            return [f"GPU assumed Hopper (compute capability {ASSUMED_COMPUTE_CAPABILITY}): no GPU given"]
        return []


RULES = Vllm033()
