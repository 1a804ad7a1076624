"""vLLM's hybrid attention + Mamba / Gated-DeltaNet models: the state page and the block size.

vLLM V1 keeps a hybrid model's recurrent state in the same block pool as the attention KV
cache, one `MambaSpec` page per layer per request, and makes every page the same size: the
attention block size is raised until one attention page holds at least one Mamba state, and the
Mamba page is padded up to the attention page. This module sizes the state (`mamba_state`) and
the unified block (`align_block_size`), per version; `vllm.py` builds the groups on top.

Sources (0.11 = vLLM 0.11.0, 0.33 = vLLM 0.33.0):

- State shapes, `vllm/model_executor/layers/mamba/mamba_utils.py` `MambaStateShapeCalculator`
  (per tensor-parallel rank; `divide` refuses a dimension tp does not divide):
  Mamba-1 (Jamba, `mamba1_state_shape`): conv (d_conv - 1) x d_inner / tp, SSM d_inner / tp x
  d_state, d_inner = mamba_expand x hidden_size. Mamba-2 (Nemotron-H, Granite-4.0-H,
  `mamba2_state_shape`): n_groups grows to tp when tp does not divide it
  (`extra_groups_for_head_shards`); conv (d_conv - 1) x (d_inner + 2 x n_groups x d_state) / tp,
  SSM n_heads / tp x head_dim x d_state, d_inner = n_heads x head_dim. Gated DeltaNet
  (Qwen3-Next, Qwen3.5, `gated_delta_net_state_shape`): conv (kernel - 1) x (2 x key_heads x
  key_dim + value_heads x value_dim) / tp, recurrent value_heads / tp x key_dim x value_dim.
- State dtypes, `MambaStateDtypeCalculator`: the conv state in the model's dtype
  (`mamba_cache_dtype` auto); the SSM / recurrent state likewise, except in 0.33 where
  `NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype` makes Nemotron-H's float32 (its
  config's `mamba_ssm_cache_dtype`, float32 by default) and
  `Qwen3_5ForConditionalGenerationConfig` takes Qwen3.5's `mamba_ssm_dtype` (float32 in the
  published configs) (`vllm/model_executor/models/config.py`). 0.11: `gated_delta_net_state_dtype`
  is one dtype for both states; Qwen3.5 does not exist in 0.11 (no `Qwen3_5*` architecture).
- Page = sum over states of values x bytes (`vllm/v1/kv_cache_interface.py`
  `MambaSpec.page_size_bytes`; `page_size_padded` when padded).
- Block size, 0.11 `HybridAttentionMambaModelConfig.verify_and_update_config`
  (`vllm/model_executor/models/config.py`): attn_block = 16 x cdiv(mamba_page, 16 x page of
  one token); the block size becomes attn_block when `--block-size` is smaller; the Mamba page is
  padded to block x page of one token ("mamba_page_size_padded"). Prefix caching is switched
  off for hybrid models (`MambaModelConfig`): one Mamba page per request
  (`MambaSpec.max_memory_usage_bytes`), and the Mamba group's block size is max_model_len.
- Block size, 0.33 `Platform._align_hybrid_block_size` (`vllm/platforms/interface.py`): the
  alignment is max(the attention backend's smallest kernel block, `--block-size`), times (lcm)
  the Mamba layers' prefill-checkpoint alignment when prefix caching is on; attn_block =
  alignment x cdiv(mamba_page, alignment x page of one token). Prefix caching is on by default
  for hybrid models (`ModelConfig.is_prefix_caching_supported`), which sets `mamba_cache_mode`
  'align' (`MambaModelConfig.verify_and_update_config`): a request then holds
  2 + num_prefill_checkpoint_blocks Mamba pages (`MambaSpec.max_memory_usage_bytes`): Mamba-2
  layers declare one checkpoint block (`MambaMixer2.get_kv_cache_spec`), Gated DeltaNet one when
  FlashInfer runs its prefill (`QwenGatedDeltaNet.get_kv_cache_spec`, checkpoint alignment
  `FLASHINFER_GDN_CHECKPOINT_ALIGNMENT` 64 tokens, `_resolve_gdn_prefill_backend`: Hopper, or
  Blackwell with key_dim 128 on CUDA 13), Mamba-1 none. With prefix caching off
  ('none'): one page.

Assumed (and said in the result's notes): the attention backend's smallest kernel block is 16
tokens (FLASH_ATTN, FLASHINFER and TRITON_ATTN all take multiples of 16), and no speculative
decoding (which adds state blocks).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import lcm, prod

from kvcalc.calc.kv_cache import layer_kv_bytes_per_token
from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.formats import StorageFormat
from kvcalc.schema import ModelSpec

#: model types whose `linear` layers vLLM runs as Gated DeltaNet (`qwen_gdn_linear_attn.py`).
GDN_MODEL_TYPES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"})
#: Qwen3.5 model types: 0.33 only (0.11 has no Qwen3.5); the SSM state follows mamba_ssm_dtype.
QWEN3_5_MODEL_TYPES = frozenset({"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"})
#: model types whose SSM state 0.33 keeps in float32 (`NemotronHForCausalLMConfig`: the
#: config's mamba_ssm_cache_dtype, float32 by default) or Qwen3.5's mamba_ssm_dtype (float32).
FP32_SSM_MODEL_TYPES_033 = frozenset({"nemotron_h"}) | QWEN3_5_MODEL_TYPES
#: the block granularity 0.11 rounds the attention block up to ("some attention backends (e.g.
#: FA) only support setting block size to multiple of 16").
BLOCK_MULTIPLE_011 = 16
#: the smallest kernel block of the attention backends hybrid models run on (FLASH_ATTN,
#: TRITON_ATTN `MultipleOf(16)`, FLASHINFER 16): `get_supported_kernel_block_sizes`.
KERNEL_BLOCK_033 = 16
#: `vllm/v1/attention/backends/gdn_attn.py` FLASHINFER_GDN_CHECKPOINT_ALIGNMENT (tokens).
FLASHINFER_GDN_CHECKPOINT_ALIGNMENT = 64
FP32_BYTES = 4


@dataclass(frozen=True)
class MambaState:
    """One Mamba / Gated-DeltaNet layer's state as vLLM sizes it on one TP rank.

    `kind`: 'mamba1', 'mamba2' or 'gdn'; `shapes`: (conv state, SSM / recurrent state) shapes;
    `dtype_bytes`: bytes per value of each; `ssm_dtype`: the SSM state's dtype name.
    """

    kind: str
    shapes: tuple[tuple[int, ...], ...]
    dtype_bytes: tuple[int, ...]
    ssm_dtype: str

    @property
    def page_size_bytes(self) -> int:
        """sum over states of prod(shape) x bytes (`MambaSpec.page_size_bytes`, unpadded)."""
        return sum(prod(shape) * b for shape, b in zip(self.shapes, self.dtype_bytes))


def _divide(n: int, tp: int, what: str) -> int:
    """vLLM `vllm/distributed/utils.py` `divide` (asserts divisibility): refused here."""
    if n % tp:
        raise KvcalcError(f"vLLM splits the {what} ({n}) over tp ranks and {n} is not divisible by {tp}",
                          field="tp", value=tp)
    return n // tp


def _missing(model: ModelSpec, fields: tuple[str, ...]) -> None:
    gone = [f for f in fields if getattr(model, f) is None]
    if gone:
        raise KvcalcError(f"{model.name}: the vLLM profile sizes the recurrent state from {', '.join(gone)}, "
                          "which the config does not give", field="model", value=model.name, form=MESSAGE)


def mamba_state(model: ModelSpec, tp: int, version: str, model_dtype_bytes: int = 2,
                model_dtype: str = "bf16") -> MambaState:
    """The state of `model`'s Mamba / linear layers on one rank (`MambaState`), as `version`
    ('0.11' or '0.33') sizes it; `model_dtype_bytes` / `model_dtype`: the serving dtype.

    Qwen3-Next-80B-A3B at tp 1: conv 3 x (2 x 16 x 128 + 32 x 128) = 3 x 8,192 values, recurrent
    32 x 128 x 128 = 524,288 values, bf16: (24,576 + 524,288) x 2 = 1,097,728 B.
    Raises `KvcalcError` (field `model`) for linear layers vLLM does not run as Gated DeltaNet,
    a config without the state's sizes, Qwen3.5 in 0.11; (field `tp`) for a tp vLLM cannot split by.
    """
    kinds = {layer.kind for layer in model.layers if layer.kind in ("mamba", "linear")}
    if kinds == {"linear"} and model.model_type not in GDN_MODEL_TYPES:
        raise KvcalcError(f"{model.name}: kvcalc's vLLM profile knows the Gated DeltaNet state of Qwen3-Next / "
                          f"Qwen3.5, not model type {model.model_type}'s linear attention",
                          field="model", value=model.name, form=MESSAGE)
    if model.model_type in QWEN3_5_MODEL_TYPES and version == "0.11":
        raise KvcalcError(f"{model.name}: vLLM 0.11 has no Qwen3.5 model (Qwen3_5ForConditionalGeneration came "
                          "later); use --vllm-version 0.33", field="model", value=model.name, form=MESSAGE)
    ssm_fp32 = version == "0.33" and model.model_type in FP32_SSM_MODEL_TYPES_033
    ssm_bytes, ssm_dtype = (FP32_BYTES, "fp32") if ssm_fp32 else (model_dtype_bytes, model_dtype)
    if kinds == {"linear"}:
        _missing(model, ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                         "linear_value_head_dim", "linear_conv_kernel_dim"))
        hk, hv = model.linear_num_key_heads, model.linear_num_value_heads
        dk, dv = model.linear_key_head_dim, model.linear_value_head_dim
        conv_dim = 2 * hk * dk + hv * dv
        shapes: tuple[tuple[int, ...], ...] = ((model.linear_conv_kernel_dim - 1,
                                                _divide(conv_dim, tp, "Gated DeltaNet conv channels")),
                  (_divide(hv, tp, "linear value heads"), dv, dk))
        return MambaState("gdn", shapes, (model_dtype_bytes, ssm_bytes), ssm_dtype)
    if model.mamba_n_groups is not None:
        _missing(model, ("mamba_n_heads", "mamba_head_dim", "mamba_d_state", "mamba_d_conv"))
        heads, head_dim, d_state = model.mamba_n_heads, model.mamba_head_dim, model.mamba_d_state
        groups = model.mamba_n_groups + (0 if model.mamba_n_groups % tp == 0 else tp - model.mamba_n_groups)
        conv_dim = heads * head_dim + 2 * groups * d_state
        shapes = ((model.mamba_d_conv - 1, _divide(conv_dim, tp, "Mamba-2 conv channels")),
                  (_divide(heads, tp, "Mamba-2 heads"), head_dim, d_state))
        return MambaState("mamba2", shapes, (model_dtype_bytes, ssm_bytes), ssm_dtype)
    _missing(model, ("mamba_expand", "hidden_size", "mamba_d_state", "mamba_d_conv"))
    d_inner = _divide(model.mamba_expand * model.hidden_size, tp, "Mamba d_inner")
    shapes = ((model.mamba_d_conv - 1, d_inner), (d_inner, model.mamba_d_state))
    return MambaState("mamba1", shapes, (model_dtype_bytes, ssm_bytes), ssm_dtype)


#: where 0.33 takes the fp32 SSM state from, per model type (`FP32_SSM_MODEL_TYPES_033`)
FP32_SSM_SOURCE_033 = {"nemotron_h": "NemotronHForCausalLMConfig sets mamba_ssm_cache_dtype float32"} | {
    t: "Qwen3_5ForConditionalGenerationConfig takes the config's mamba_ssm_dtype, float32" for t in QWEN3_5_MODEL_TYPES}
#: the state kinds as the notes name them
#: what vLLM 0.33 runs a Gated DeltaNet prefill with on ROCm (`qwen_gdn_linear_attn.py`
#: `_resolve_gdn_prefill_backend`, `current_platform.is_rocm()` branch, gdn_prefill_backend 'auto'):
#: AITER FlyDSL on MI300 / MI350 (`on_mi3xx`: gfx942, gfx950) when AITER exports its FlyDSL
#: kernels and the model runs bf16 with linear head dims 128 / 128, else Triton/FLA. Neither is
#: FlashInfer, the only backend that declares prefill checkpoints (`_checkpoint_alignment` is
#: set for 'flashinfer' only), so the choice between them does not change the blocks.
ROCM_GDN_PREFILL = "AITER FlyDSL or Triton/FLA"

STATE_KIND_NAMES = {"mamba1": "Mamba", "mamba2": "Mamba-2", "gdn": "Gated DeltaNet"}


def state_dtype_note(model: ModelSpec, state: MambaState, version: str, model_dtype: str, tp: int,
                     model_dtype_bytes: int) -> str:
    """The note that says which dtype the state is in: the conv state in the model's dtype, the
    SSM / recurrent state in `state.ssm_dtype`, the page per layer and request; for a model type
    0.33 keeps in fp32 (Nemotron-H, Qwen3.5: `vllm/model_executor/models/config.py`), why, and the
    other version's page, since the page (and so the attention block) differs: Nemotron-H-8B at
    tp 1, 0.11 bf16 2,158,592 B (528-token blocks), 0.33 fp32 4,255,744 B (1,040-token blocks)."""
    text = (f"{STATE_KIND_NAMES[state.kind]} state per layer and request: conv state {model_dtype}, "
            f"{'recurrent' if state.kind == 'gdn' else 'SSM'} state {state.ssm_dtype}, {state.page_size_bytes:,} B")
    source = FP32_SSM_SOURCE_033.get(model.model_type or "")
    if source is None:
        return text
    if version == "0.33":
        if model.model_type in QWEN3_5_MODEL_TYPES:  # no Qwen3.5 in 0.11
            return text + f" (vLLM 0.33: {source})"
        other = mamba_state(model, tp, "0.11", model_dtype_bytes, model_dtype).page_size_bytes
        return text + f" (vLLM 0.33: {source}; 0.11 keeps it in {model_dtype}: {other:,} B)"
    other = mamba_state(model, tp, "0.33", model_dtype_bytes, model_dtype).page_size_bytes
    return text + f" (vLLM 0.11: the model's dtype; 0.33 keeps it in fp32, {other:,} B: {source})"


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


@dataclass(frozen=True)
class HybridBlocks:
    """What vLLM makes of a hybrid model's pages.

    - `block_size`: the attention block size (tokens); `page_bytes`: one attention page, which
      every Mamba page is padded to; `state`: the Mamba state (`page_size_bytes` unpadded).
    - `mamba_pages`: Mamba pages one request holds in each Mamba group (the Mamba group's own
      block size is max_model_len in 0.11 and 0.33 without prefix caching, `MambaSpec(block_size=
      max_model_len)`; the attention block size in 0.33's 'align' mode).
    - `log_lines`: what vLLM logs about it; `notes`: what kvcalc assumed.
    """

    block_size: int
    page_bytes: int
    state: MambaState
    mamba_pages: int
    log_lines: tuple[str, ...]
    notes: tuple[str, ...]


def align_block_size(model: ModelSpec, attention_layer: object, k: StorageFormat, v: StorageFormat, *,
                     block_size: int, tp: int, version: str, prefix_caching: bool | None,
                     compute_capability: str, model_dtype: str, model_dtype_bytes: int,
                     vendor: str | None = None) -> HybridBlocks:
    """The block size, page and Mamba pages per request of a hybrid model in `version`.

    Token page = `layer_kv_bytes_per_token(attention_layer)` (2 x kv heads per rank x head_dim x
    bytes); mamba_page = `mamba_state(...).page_size_bytes`. 0.11: alignment 16 and no prefix
    caching; 0.33: alignment = max(16, block_size), lcm'd with the prefill-checkpoint alignment
    (64 for a FlashInfer Gated DeltaNet: `gdn_flashinfer_prefill` on `compute_capability` and
    `vendor`; never on ROCm) when prefix caching is on (`prefix_caching` None: on).
    attn_block = alignment x cdiv(mamba_page, alignment x token page); the block size is
    max(block_size, attn_block); page = block size x token page.

    Qwen3-Next-80B-A3B, bf16, tp 1: token page 2 x 2 x 256 x 2 = 2,048 B; state 1,097,728 B;
    0.11: 16 x cdiv(1,097,728, 32,768) = 16 x 34 = 544 tokens, page 1,114,112 B (1.49% padding);
    0.33 on Hopper: 64 x cdiv(1,097,728, 131,072) = 64 x 9 = 576 tokens; 0.33 on ROCm (no
    FlashInfer prefill, no checkpoint block): 16 x 34 = 544 tokens, 2 Mamba pages per request.
    """
    token_page = layer_kv_bytes_per_token(attention_layer, k, v, tp)  # type: ignore[arg-type]
    state = mamba_state(model, tp, version, model_dtype_bytes, model_dtype)
    mamba_page = state.page_size_bytes
    notes = [state_dtype_note(model, state, version, model_dtype, tp, model_dtype_bytes)]
    if version == "0.11":
        if prefix_caching:
            raise KvcalcError("vLLM 0.11 switches prefix caching off for hybrid models (MambaModelConfig: "
                              "'not yet supported')", field="prefix_caching", value=prefix_caching)
        align = BLOCK_MULTIPLE_011
        mamba_pages = 1
        lines = ["Hybrid or mamba-based model detected: disabling prefix caching since it is not yet supported."]
    else:
        align_mode = prefix_caching is None or prefix_caching
        align = max(KERNEL_BLOCK_033, block_size)
        backends = "ROCM_ATTN / ROCM_AITER_FA / TRITON_ATTN" if vendor == "amd" else "FLASH_ATTN / FLASHINFER / TRITON_ATTN"
        notes.append(f"the attention backend's smallest kernel block assumed {KERNEL_BLOCK_033} tokens ({backends})")
        lines = []
        if align_mode:
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
        else:
            mamba_pages = 1
    attn_block = align * -(-mamba_page // (align * token_page))
    if block_size < attn_block:
        lines.append(f"Setting attention block size to {attn_block} tokens to ensure that attention page size is "
                     ">= mamba page size.")
        block_size = attn_block
    page = block_size * token_page
    if page != mamba_page:
        lines.append(f"Padding mamba page size by {100 * (page - mamba_page) / mamba_page:.2f}% to ensure that "
                     "mamba page size and attention page size are exactly equal.")
    return HybridBlocks(block_size=block_size, page_bytes=page, state=state, mamba_pages=mamba_pages, log_lines=tuple(lines), notes=tuple(notes))
