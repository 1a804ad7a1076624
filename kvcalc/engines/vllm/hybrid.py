"""vLLM's hybrid attention + Mamba / Gated-DeltaNet models: the state page and the unified block.

vLLM V1 keeps a hybrid model's recurrent state in the same block pool as the attention KV
cache, one `MambaSpec` page per layer per request, and makes every page the same size: the
attention block size is raised until one attention page holds at least one Mamba state, and the
Mamba page is padded up to the attention page. This module sizes the state (`mamba_state`) and
unifies the pages (`unify_pages`); each V1 version module states its own alignment and state
dtypes (`V1Rules.hybrid_alignment`, `V1Rules.mamba_state`), and `v1.V1Rules` builds the
groups on top.

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
  (`mamba_cache_dtype` auto); the SSM / recurrent state likewise unless the version keeps it in
  float32 (`ssm_fp32`; 0.33's model configs, `v0_33`).
- Page = sum over states of values x bytes (`vllm/v1/kv_cache_interface.py`
  `MambaSpec.page_size_bytes`; `page_size_padded` when padded).
- Unified block (0.11 `HybridAttentionMambaModelConfig.verify_and_update_config`, 0.33
  `Platform._align_hybrid_block_size`): attn_block = alignment x cdiv(mamba_page, alignment x
  page of one token); the block size becomes attn_block when `--block-size` is smaller; the
  Mamba page is padded to block x page of one token ("mamba_page_size_padded").

Assumed (and said in the result's notes): no speculative decoding (which adds state blocks).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.schema import ModelSpec

#: model types whose `linear` layers vLLM runs as Gated DeltaNet (`qwen_gdn_linear_attn.py`).
GDN_MODEL_TYPES = frozenset({"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"})
#: Qwen3.5 model types (vLLM 0.33's `Qwen3_5ForConditionalGeneration`; 0.11 has none).
QWEN3_5_MODEL_TYPES = frozenset({"qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"})
FP32_BYTES = 4
#: the state kinds as the notes name them
STATE_KIND_NAMES = {"mamba1": "Mamba", "mamba2": "Mamba-2", "gdn": "Gated DeltaNet"}


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
        raise KvcalcError(
            f"vLLM splits the {what} ({n}) over tp ranks and {n} is not divisible by {tp}", field="tp", value=tp
        )
    return n // tp


def _missing(model: ModelSpec, fields: tuple[str, ...]) -> tuple[int, ...]:
    """The config's sizes `fields`, in order, each known to be set; raises `KvcalcError` (field
    `model`) naming every one the config does not give."""
    values: list[int | None] = [getattr(model, f) for f in fields]
    gone = [f for f, v in zip(fields, values, strict=True) if v is None]
    if gone:
        raise KvcalcError(
            f"{model.name}: the vLLM profile sizes the recurrent state from {', '.join(gone)}, "
            "which the config does not give",
            field="model",
            value=model.name,
            form=MESSAGE,
        )
    return tuple(v for v in values if v is not None)


def check_linear_kind(model: ModelSpec) -> None:
    """Raise `KvcalcError` (field `model`) for linear layers vLLM does not run as Gated DeltaNet."""
    kinds = {layer.kind for layer in model.layers if layer.kind in ("mamba", "linear")}
    if kinds == {"linear"} and model.model_type not in GDN_MODEL_TYPES:
        raise KvcalcError(
            f"{model.name}: kvcalc's vLLM profile knows the Gated DeltaNet state of Qwen3-Next / "
            f"Qwen3.5, not model type {model.model_type}'s linear attention",
            field="model",
            value=model.name,
            form=MESSAGE,
        )


def mamba_state(
    model: ModelSpec,
    tp: int,
    model_dtype_bytes: int = 2,
    model_dtype: str = "bf16",
    *,
    ssm_fp32: bool = False,
    kda: bool = False,
) -> MambaState:
    """The state of `model`'s Mamba / linear layers on one rank (`MambaState`);
    `model_dtype_bytes` / `model_dtype`: the serving dtype; `ssm_fp32`: the SSM / recurrent state
    in float32 (a version's rule, `V1Rules.mamba_state`), else in the serving dtype.

    Qwen3-Next-80B-A3B at tp 1: conv 3 x (2 x 16 x 128 + 32 x 128) = 3 x 8,192 values, recurrent
    32 x 128 x 128 = 524,288 values, bf16: (24,576 + 524,288) x 2 = 1,097,728 B.
    Raises `KvcalcError` (field `model`) for linear layers vLLM does not run as Gated DeltaNet,
    a config without the state's sizes; (field `tp`) for a tp vLLM cannot split by.
    """
    if not kda:  # Kimi Delta Attention's state has Gated DeltaNet's shapes (`kda.py` 571-591)
        check_linear_kind(model)
    kinds = {layer.kind for layer in model.layers if layer.kind in ("mamba", "linear")}
    ssm_bytes, ssm_dtype = (FP32_BYTES, "fp32") if ssm_fp32 else (model_dtype_bytes, model_dtype)
    if kinds == {"linear"}:
        hk, hv, dk, dv, kernel = _missing(
            model,
            (
                "linear_num_key_heads",
                "linear_num_value_heads",
                "linear_key_head_dim",
                "linear_value_head_dim",
                "linear_conv_kernel_dim",
            ),
        )
        conv_dim = 2 * hk * dk + hv * dv
        shapes: tuple[tuple[int, ...], ...] = (
            (kernel - 1, _divide(conv_dim, tp, "Gated DeltaNet conv channels")),
            (_divide(hv, tp, "linear value heads"), dv, dk),
        )
        return MambaState("gdn", shapes, (model_dtype_bytes, ssm_bytes), ssm_dtype)
    n_groups = model.mamba_n_groups
    if n_groups is not None:
        heads, head_dim, d_state, d_conv = _missing(
            model, ("mamba_n_heads", "mamba_head_dim", "mamba_d_state", "mamba_d_conv")
        )
        groups = n_groups + (0 if n_groups % tp == 0 else tp - n_groups)
        conv_dim = heads * head_dim + 2 * groups * d_state
        shapes = (
            (d_conv - 1, _divide(conv_dim, tp, "Mamba-2 conv channels")),
            (_divide(heads, tp, "Mamba-2 heads"), head_dim, d_state),
        )
        return MambaState("mamba2", shapes, (model_dtype_bytes, ssm_bytes), ssm_dtype)
    expand, hidden, d_state, d_conv = _missing(model, ("mamba_expand", "hidden_size", "mamba_d_state", "mamba_d_conv"))
    d_inner = _divide(expand * hidden, tp, "Mamba d_inner")
    shapes = ((d_conv - 1, d_inner), (d_inner, d_state))
    return MambaState("mamba1", shapes, (model_dtype_bytes, ssm_bytes), ssm_dtype)


def state_text(state: MambaState, model_dtype: str) -> str:
    """ "<kind> state per layer and request: conv state <dtype>, SSM state <dtype>, N B" (the
    start of each version's `state_dtype_note`)."""
    return (
        f"{STATE_KIND_NAMES[state.kind]} state per layer and request: conv state {model_dtype}, "
        f"{'recurrent' if state.kind == 'gdn' else 'SSM'} state {state.ssm_dtype}, {state.page_size_bytes:,} B"
    )


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


def unify_pages(
    token_page: int,
    state: MambaState,
    *,
    block_size: int,
    align: int,
    mamba_pages: int,
    log_lines: list[str],
    notes: list[str],
) -> HybridBlocks:
    """attn_block = align x cdiv(mamba_page, align x token_page); the block size is
    max(block_size, attn_block); page = block size x token_page, the Mamba page padded to it,
    with the lines vLLM logs for each step (0.11 `HybridAttentionMambaModelConfig`, 0.33
    `Platform._align_hybrid_block_size`).

    Qwen3-Next-80B-A3B, bf16, tp 1: token page 2 x 2 x 256 x 2 = 2,048 B; state 1,097,728 B;
    align 16: 16 x cdiv(1,097,728, 32,768) = 16 x 34 = 544 tokens, page 1,114,112 B (1.49% padding).
    """
    mamba_page = state.page_size_bytes
    lines = list(log_lines)
    attn_block = align * -(-mamba_page // (align * token_page))
    if block_size < attn_block:
        lines.append(
            f"Setting attention block size to {attn_block} tokens to ensure that attention page size is "
            ">= mamba page size."
        )
        block_size = attn_block
    page = block_size * token_page
    if page != mamba_page:
        lines.append(
            f"Padding mamba page size by {100 * (page - mamba_page) / mamba_page:.2f}% to ensure that "
            "mamba page size and attention page size are exactly equal."
        )
    return HybridBlocks(
        block_size=block_size,
        page_bytes=page,
        state=state,
        mamba_pages=mamba_pages,
        log_lines=tuple(lines),
        notes=tuple(notes),
    )
