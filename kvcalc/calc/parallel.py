"""Parallel layouts of mixture-of-experts and MLA models: attention data-parallel (`dp_attention`),
expert parallel (`ep`) and decode context parallel (`dcp`), as the engines place them.

Three words, one meaning each (kvcalc's `dp` keeps its meaning: whole replicas, each a separate
engine with its own weights):

- `dp_attention`: attention data-parallel ranks inside ONE engine instance. Each rank runs the
  attention (and dense layers) of its own sequences, with `tp` ranks inside it; the MoE layers
  span all `tp x dp_attention` GPUs. vLLM: `--data-parallel-size N` (for an MoE model vLLM's DP
  is this: `vllm/model_executor/layers/fused_moe/config.py` (0.33.0)
  `FusedMoEParallelConfig.make` flattens the MoE layers' TP over DP, "There are actually
  dp_size * pcp_size * tp_size devices"). SGLang: `--enable-dp-attention --dp N` with `--tp` the
  total (attention TP = tp / dp inside each DP group, `python/sglang/srt/layers/dp_attention.py`
  (0.5.23) `compute_dp_attention_world_info`).
- `ep`: the routed experts divided over `ep` GPUs, each holding whole experts. vLLM:
  `--enable-expert-parallel`, and then ep = tp x dp_attention always ("ep_size = tp_size" after the
  flattening, `FusedMoEParallelConfig.make`); SGLang: `--ep-size N` (default 1), each EP group
  tensor-parallel inside over moe_tp = tp_total / ep (`server_args.py` `moe_tp_size`).
  Without EP the experts are tensor-parallel over all tp x dp_attention GPUs: the same bytes per
  GPU (kvcalc counts whole experts per rank under EP, slices of every expert without).
- `dcp`: vLLM's decode context parallel (`-dcp D`, `--decode-context-parallel-size`): D of the
  tp ranks (tp % D == 0, `vllm/config/parallel.py` (0.33.0)) each hold 1/D of every sequence's
  token positions of the caches whose spec is `dcp_sharded` (`vllm/v1/kv_cache_interface.py`:
  `AttentionSpec.dcp_sharded = True`, so full attention, MLA and the DSA indexer's key cache,
  an `MLAAttentionSpec`; `MambaSpec`: "Mamba state is replicated across DCP/PCP ranks, never
  sharded"); the block a request's table counts is `block_size x dcp` tokens
  (`kv_cache_utils.py` `resolve_dcp_kv_block_size`), so a request needs
  cdiv(max_len, block_size x dcp) blocks (`AttentionSpec.max_num_blocks_per_req`) and the worst
  case per rank is cdiv(max_model_len, dcp) tokens (`FullAttentionSpec.max_memory_usage_bytes`).
  Sliding-window groups are refused with dcp > 1: vLLM 0.33.0's `SlidingWindowManager` asserts
  "DCP not support sliding window attn now" (`v1/core/single_type_kv_cache_manager.py`).

Per GPU (one attention rank):

    weights = dense / attention / shared-expert bytes at tp (replicated across dp_attention ranks;
              vLLM's shared experts are a `DeepseekV2MLP` on the attention TP group,
              `models/deepseek_v2.py` (0.33.0))
            + ceil(E / ep) routed experts, each tensor-sliced by moe_tp = tp x dp_attention / ep
              (`fused_moe/expert_map_manager.py` `determine_expert_map`: E // ep per rank, the
              remainder one each on the first ranks; the fullest holds ceil(E / ep))
    KV      = its own ceil(B / dp_attention) sequences, heads split by tp as under plain TP
              (MLA's single latent is copied on each of the tp ranks but NOT across dp_attention
              ranks), tokens ceil(T / dcp) under dcp.

Pure: imports only the schema, formats and stdlib-level calc modules.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.calc.weights import WeightBytes, can_derive, weight_bytes
from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.formats import StorageFormat
from kvcalc.schema import ModelSpec


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class MoeLayout:
    """The attention-DP / EP / DCP part of a layout (all 1: plain TP)."""

    dp_attention: int = 1
    ep: int = 1
    dcp: int = 1

    @property
    def plain(self) -> bool:
        return self.dp_attention == 1 and self.ep == 1 and self.dcp == 1


def moe_tp(tp: int, dp_attention: int, ep: int) -> int:
    """The tensor-parallel size inside one expert: tp x dp_attention / ep (vLLM: 1 under EP, where
    ep = tp x dp_attention; tp x dp_attention without EP, `FusedMoEParallelConfig.make`)."""
    return tp * dp_attention // ep


def check_layout(model: ModelSpec, tp: int, dp_attention: int = 1, ep: int = 1, dcp: int = 1) -> None:
    """Refuse, with `KvcalcError` naming the field, what the engines refuse:

    - ep must divide tp x dp_attention (vLLM: ep is tp x dp_attention exactly; SGLang: ep divides
      its total tp, `server_args.py` "tp_size must be divisible by ep_size"); ep > 1 or
      dp_attention > 1 needs routed experts for ep (a dense model has nothing to divide) --
      attention DP on a dense model is refused too: vLLM runs it as `dp` replicas;
    - dcp must divide tp (`vllm/config/parallel.py` (0.33.0): "tp_size={tp} must be divisible by
      dcp_size={dcp}"), and a model with sliding-window layers is refused under dcp > 1
      (`SlidingWindowManager`: "DCP not support sliding window attn now").
    """
    for name, v in (("dp_attention", dp_attention), ("ep", ep), ("dcp", dcp)):
        if v < 1:
            raise KvcalcError(f"must be a positive count, got {v}", field=name, value=v)
    if (ep > 1 or dp_attention > 1) and not model.n_experts:
        f, v = ("ep", ep) if ep > 1 else ("dp_attention", dp_attention)
        raise KvcalcError(
            f"{model.name} has no routed experts: expert parallel and attention data-parallel "
            f"apply to MoE models (a dense model's data-parallel ranks are --dp replicas)",
            field=f,
            value=v,
            form=MESSAGE,
        )
    if (tp * dp_attention) % ep:
        raise KvcalcError(
            f"ep {ep} must divide tp x dp_attention = {tp * dp_attention} (the GPUs the MoE layers span)",
            field="ep",
            value=ep,
            form=MESSAGE,
        )
    if tp % dcp:
        raise KvcalcError(
            f"dcp {dcp} must divide tp {tp} (vLLM 0.33.0 vllm/config/parallel.py: DCP reuses the TP ranks)",
            field="dcp",
            value=dcp,
            form=MESSAGE,
        )
    if dcp > 1 and model.attention != "mla":
        check_gqa_dcp(model, tp, dcp)
    if dcp > 1 and any(layer.compress_ratio for layer in model.layers):
        raise KvcalcError(
            f"{model.name} has compressed caches (one entry per N tokens); how vLLM shards them by "
            f"position under DCP is not modelled by kvcalc",
            field="dcp",
            value=dcp,
            form=MESSAGE,
        )
    if dcp > 1 and any(layer.kind == "sliding" for layer in model.layers):
        raise KvcalcError(
            f"{model.name} has sliding-window layers, which vLLM 0.33.0 does not shard by "
            f"position (single_type_kv_cache_manager.py SlidingWindowManager: 'DCP not support "
            f"sliding window attn now')",
            field="dcp",
            value=dcp,
            form=MESSAGE,
        )


def check_gqa_dcp(model: ModelSpec, tp: int, dcp: int) -> None:
    """Refuse, with `KvcalcError` (field `dcp`), the DCP sizes vLLM 0.33.0 refuses for a model
    without MLA (`vllm/config/model.py` `verify_with_parallel_config`): DCP reuses the TP ranks
    that hold copies of a KV head, so tp must exceed the KV heads H_kv, dcp <= tp // H_kv, and
    the query heads per KV head must be divisible by dcp."""
    kv, per_kv = model.resolved_n_kv_heads, model.queries_per_kv_head
    why = None
    if tp <= kv:
        why = f"tp {tp} must be greater than the model's {kv} KV heads (DCP uses the ranks that copy a KV head)"
    elif dcp > tp // kv:
        why = f"dcp {dcp} exceeds tp // KV heads = {tp} // {kv} = {tp // kv}"
    elif per_kv % dcp:
        why = f"the {per_kv} query heads per KV head must be divisible by dcp {dcp}"
    if why:
        raise KvcalcError(
            f"{model.name} (GQA/MQA, no MLA): {why} (vLLM 0.33.0 vllm/config/model.py)",
            field="dcp",
            value=dcp,
            form=MESSAGE,
        )


def local_experts(n_experts: int, ep: int) -> int:
    """Routed experts on the fullest EP rank: ceil(E / ep) (vLLM `determine_expert_map`: E // ep
    each, the remainder E % ep one each on the first ranks)."""
    return _cdiv(n_experts, ep)


def rank_weight_bytes(
    model: ModelSpec, weight_dtype: StorageFormat | str | None, tp: int, dp_attention: int = 1, ep: int = 1
) -> WeightBytes:
    """Weight bytes on the fullest GPU of a (tp, dp_attention, ep) layout: every part but the
    routed experts as one TP rank of `tp` holds it (`weights.weight_bytes(model, w, tp)`: the
    attention, dense MLPs, shared experts, router, embedding and head), and per MoE layer
    ceil(E / ep) experts, each one a 1 / moe_tp slice (`weights.weight_bytes(model, w, moe_tp)`'s
    one-expert bytes). Equal to `weight_bytes(model, w, tp)` when dp_attention = ep = 1.

    The layout is taken as checked (`check_layout`, by `GpuFit` or where the request was built).
    Raises `KvcalcError` as `weights.weight_bytes` does."""
    base = weight_bytes(model, weight_dtype, tp)
    if dp_attention == 1 and ep == 1:
        return base
    if model.checkpoint is None and not can_derive(model):
        raise KvcalcError(
            f"{model.name}: its weights are a total (n_params), not experts kvcalc can place on "
            f"expert-parallel ranks; load the checkpoint's headers",
            field="ep",
            value=ep,
            form=MESSAGE,
        )
    experts = weight_bytes(model, weight_dtype, moe_tp(tp, dp_attention, ep))
    return WeightBytes(
        layer_dense_bytes=base.layer_dense_bytes,
        layer_expert_bytes=experts.layer_expert_bytes,
        layer_n_experts=tuple(local_experts(e, ep) if e else 0 for e in base.layer_n_experts),
        layer_n_active_experts=base.layer_n_active_experts,
        embedding_bytes=base.embedding_bytes,
        head_bytes=base.head_bytes,
        tied=base.tied,
    )


def rank_batch(batch: int, dp_attention: int) -> int:
    """Sequences on the fullest attention-DP rank of an engine serving `batch`: ceil(B / dp_attention)
    (each DP rank schedules its own requests; vLLM's DP coordinator and SGLang's DP controller
    balance them, so the fullest holds the ceiling)."""
    return _cdiv(batch, dp_attention)


def dcp_tokens(seq_len: int, dcp: int) -> int:
    """Token positions of one sequence on the fullest DCP rank: ceil(T / dcp) (vLLM
    `FullAttentionSpec.max_memory_usage_bytes`: max_model_len = cdiv(max_model_len, dcp_world_size)
    for a `dcp_sharded` spec; positions interleave over the ranks,
    `dcp_kv_cache_interleave_size` 1 by default)."""
    return _cdiv(seq_len, dcp)


def dcp_blocks_per_request(max_len: int, block_size: int, dcp: int = 1, sharded: bool = True) -> int:
    """Blocks of one request's table for a group: cdiv(max_len, block_size x dcp) for a
    `dcp_sharded` spec, cdiv(max_len, block_size) for one kept whole (vLLM 0.33.0
    `v1/kv_cache_interface.py` `AttentionSpec.max_num_blocks_per_req`; the manager's block is
    `block_size x dcp` tokens, `single_type_kv_cache_manager.py` line "self.block_size =
    kv_cache_spec.block_size * self.dcp_world_size"). Each block holds `block_size` tokens on
    each rank."""
    return _cdiv(max_len, block_size * (dcp if sharded else 1))


def alltoall_bytes(
    n_moe_layers: int, tokens: int, top_k: int, hidden_size: int, ep: int, activation_bytes: int = 2
) -> int:
    """Bytes one EP rank sends per forward: each MoE layer dispatches each of its `tokens` tokens'
    hidden state to its top_k experts and combines the results back, (ep - 1) / ep of them on
    other ranks: 2 x layers x tokens x k x hidden x activation_bytes x (ep - 1) / ep (bf16
    activations; DeepEP's fp8 dispatch would halve the first half). 0 when ep == 1."""
    if ep <= 1:
        return 0
    return 2 * n_moe_layers * tokens * top_k * hidden_size * activation_bytes * (ep - 1) // ep
