"""Parameter counts and weight bytes, derived from the architecture (pure arithmetic).

No I/O, no rich, no yaml, no torch. Counts are exact integers; bytes go through the one
format table, `kvcalc.formats.weight_format` / `StorageFormat.bytes_for` (weights and KV share it).

What is counted (the Hugging Face modelling files of each family are the source:
`transformers/models/llama/modeling_llama.py`, `mixtral`, `deepseek_v3`, `qwen3_moe`,
`jamba`, `qwen3_next`):

- embeddings `vocab x hidden`, and an untied LM head of the same size; the final norm `hidden`;
- per layer two norms (`2 x hidden`);
- standard attention: q `hidden x H x D_k`, k `hidden x H_kv x D_k`, v `hidden x H_kv x D_v`,
  o `H x D_v x hidden`; with `attention_bias`, q/k/v biases (`H x D_k + H_kv x (D_k + D_v)`);
- MLA (DeepSeek-V2/V3, arXiv:2405.04434): q_a `hidden x q_lora` + its norm + q_b
  `q_lora x H x (nope + rope)` (or one q `hidden x H x (nope + rope)` without q_lora_rank);
  kv_a `hidden x (kv_lora + rope)` + its norm `kv_lora`; kv_b `kv_lora x H x (nope + v)`;
  o `H x v x hidden`;
- dense MLP: gated (SwiGLU: gate, up, down) `3 x hidden x inter`, plain `2 x hidden x inter`;
- MoE: router `hidden x E`, E routed experts of `3 x hidden x moe_inter` each (k of them active
  per token), plus a shared expert `3 x hidden x shared_inter` always active;
- mamba (Mamba-1 as in Jamba; d_inner = expand x hidden, dt_rank default ceil(hidden / 16)):
  in_proj `hidden x 2 d_inner`, conv1d `d_inner x d_conv + d_inner`, x_proj
  `d_inner x (dt_rank + 2 d_state)`, dt_proj `dt_rank x d_inner + d_inner`, A_log
  `d_inner x d_state`, D `d_inner`, out_proj `d_inner x hidden`;
- Mamba-2 (`mamba_n_groups` set: Nemotron-H, Granite-4.0-H; transformers `MambaMixer2`), with
  d_inner = n_heads x head_dim, G groups, N = d_state: in_proj `hidden x (2 d_inner + 2 G N +
  n_heads)`, conv1d `(d_inner + 2 G N) x (d_conv + 1)` (weight and bias), dt_bias, A_log and D
  `n_heads` each, gated norm `d_inner` (none when `mamba_norm` is false: Falcon-H1's
  `mamba_rms_norm: false`), out_proj `d_inner x hidden`;
- hybrid (Falcon-H1, transformers `modeling_falcon_h1.py` FalconH1DecoderLayer / FalconH1Mixer,
  vLLM `falcon_h1.py` FalconH1ParallelHybrid): the attention block AND the Mamba-2 mixer above
  (d_inner = mamba_d_ssm = n_heads x head_dim), then the gated MLP, with two norms
  (`input_layernorm`, `pre_ff_layernorm`); the muP multipliers are constants, no parameters;
- separate blocks (a model with layers of kind `mlp`: Nemotron-H, `NemotronHBlock` in transformers'
  `modeling_nemotron_h.py` / vLLM `nemotron_h.py`): every layer is one norm (`hidden`) and ONE of a
  Mamba-2 mixer, an attention block or an MLP (relu2: up `hidden x inter` and down, no gate, the
  loader's `mlp_kind: plain`); no layer has both a mixer and an MLP. Nemotron-H-8B: 24 Mamba-2
  layers of 109,640,064, 4 attention layers of 41,947,136 and 24 MLP layers of 176,164,864, plus
  2 x 131,072 x 4,096 embeddings and head and the final norm: 8,100,852,736 ("8B"). MoE layers
  (Nemotron-H's `E`) are `_separate_moe_params` when every MLP block is MoE (Nemotron-3-Super:
  120,668,707,840, the card's 120B); a mix of dense and MoE blocks is refused (the loader leaves
  the width unset);
- linear attention (Gated DeltaNet, Qwen3-Next): in_proj_qkvz `hidden x (2 Hk Dk + 2 Hv Dv)`,
  in_proj_ba `hidden x 2 Hv`, conv1d `(2 Hk Dk + Hv Dv) x kernel`, dt_bias and A_log `Hv` each,
  gated norm `Dv`, out_proj `Hv Dv x hidden`.

- the 2026 architectures (vLLM 0.33.0 `vllm/models/*` and the reference code named at each function):
  DeepSeek-V4's compressed MQA (`_compressed_mqa_params`: grouped output projection, compressors,
  indexer), hyper-connections (`_hyper_connection_params`, and the head's), hash-routed layers
  (a `vocab x k` int64 table in place of the routing bias); Kimi Linear's KDA with its low-rank
  output gate (`linear_attention: kda_lowrank`); MiniMax-M3's indexer projections and
  per-head q / k norms (`qk_norm`); Kimi-K3's KDA (`linear_attention: kda`), latent MoE (routed
  experts `3 x latent x moe_inter` between a `hidden x latent` down and up projection and a norm),
  MLA output gate and attention residuals; a routing bias (`router_bias`) where the config has one.
  Totals against the model cards: DeepSeek-V4-Flash 284,334,567,511 (card 284B), DeepSeek-V4-Pro
  1,572,999,528,803 (card 1.6T), MiniMax-M3 426,174,572,928 (card ~428B with its vision tower);
  `tests/calc/test_weights_2026.py`.

Not counted (each well under 0.1% of the models tested): Qwen3's per-head q/k norms, Qwen3-Next's
attention output gate, shared-expert gates, DeepSeek-V3's router bias, Jamba's dt/B/C norms,
DeepSeek-V3's multi-token-prediction module (published 671B excludes it too).

Tensor parallel (one rank's share, as vLLM shards: `ColumnParallelLinear` / `RowParallelLinear`
split the head / intermediate dimension; `VocabParallelEmbedding` and `ParallelLMHead` split the
vocabulary; `ReplicatedLinear` keeps MLA's q_a / kv_a and the router whole; KV heads are
replicated when tp exceeds them): sharded dimensions are divided by tp, rounded up.

Weight formats: the linear (matrix) weights of the decoder layers are stored in the weight
format; embeddings, LM head, norms, routers and the small mamba / DeltaNet vectors stay in the
model's dtype, as fp8 and int4 (GPTQ / AWQ) checkpoints leave them (vLLM `fp8.py` and `awq.py`
quantize `LinearBase` layers only). Each part in the dtype its checkpoint stores it: the routed
experts in `expert_weight_dtype` (plus `expert_tensor_scale_bytes` per expert matrix: ModelOpt
NVFP4's fp32 weight_scale_2 and input_scale), a latent MoE's down / up projections in
`latent_weight_dtype` (Kimi-K3: MXFP4 with the experts), and the parameters an architecture keeps
in fp32 or int64 whatever the model's dtype (`LayerParams.fp32` / `.int64`: DeepSeek-V4's sinks,
hyper-connections, compressor ape and gate bias; its hash table) at 4 and 8 B. DeepSeek-V4-Flash:
156,015,698,140 B; its NVFP4 checkpoint 164,673,005,788 B; Kimi-K3 1,553,000,604,864 B
(`tests/calc/test_weights_2026.py`, `docs/models-2026.md`).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from kvcalc.errors import MESSAGE, KvcalcError, UncountedParamsError
from kvcalc.formats import StorageFormat, weight_format
from kvcalc.schema import ModelSpec

FormatLike = str | StorageFormat

#: bytes of one parameter the architecture keeps in fp32 (`LayerParams.fp32`) or int64 (`.int64`)
FP32_BYTES = 4
INT64_BYTES = 8


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, slots=True)
class LayerParams:
    """Parameters of one decoder layer on one TP rank, grouped by how the checkpoint stores them.

    `linear`: matrix weights always used (attention or mamba / DeltaNet mixer, dense MLP,
    shared expert) in the weight format; `other`: norms, router, biases and small vectors, in
    the model dtype; `fp32`: parameters the architecture keeps in fp32 whatever the model's dtype
    (DeepSeek-V4's hyper-connections, attention sinks, compressor position biases and routing
    bias); `int64`: int64 entries (DeepSeek-V4's hash-routing table); `latent_linear`: the
    latent MoE's down and up projections, always used, in the latent format
    (`ModelSpec.latent_weight_dtype`, else the weight format); `expert_linear`: one routed
    expert's matrices; `n_experts` routed experts, `n_active_experts` of them used per token
    (0 and 0 for a dense layer).
    """

    linear: int
    other: int
    expert_linear: int = 0
    n_experts: int = 0
    n_active_experts: int = 0
    fp32: int = 0
    int64: int = 0
    latent_linear: int = 0

    @property
    def dense(self) -> int:
        """Parameters every token touches: linear + other + fp32 + int64 + latent_linear."""
        return self.linear + self.other + self.fp32 + self.int64 + self.latent_linear

    @property
    def total(self) -> int:
        """dense + n_experts x expert_linear."""
        return self.dense + self.n_experts * self.expert_linear

    @property
    def active(self) -> int:
        """dense + n_active_experts x expert_linear (what one token touches)."""
        return self.dense + self.n_active_experts * self.expert_linear


@dataclass(frozen=True, slots=True)
class ModelParams:
    """Every parameter of a model on one TP rank: the layers, the embedding, the LM head (0
    when tied), the final norm (and the model dtype's parameters beside it) and `head_fp32`, the
    fp32 parameters beside the head (DeepSeek-V4's hyper-connection head)."""

    layers: tuple[LayerParams, ...]
    embedding: int
    lm_head: int
    final_norm: int
    head_fp32: int = 0

    @property
    def total(self) -> int:
        """All parameters on the rank."""
        return sum(x.total for x in self.layers) + self.embedding + self.lm_head + self.final_norm + self.head_fp32

    @property
    def active(self) -> int:
        """Parameters one token touches (active experts only)."""
        return sum(x.active for x in self.layers) + self.embedding + self.lm_head + self.final_norm + self.head_fp32


def is_moe_layer(model: ModelSpec, i: int) -> bool:
    """True when layer `i` (0-based) has routed experts: the model has `n_experts`, i is past
    `first_dense_layers` (DeepSeek `first_k_dense_replace`), and i % moe_layer_period ==
    moe_layer_offset % moe_layer_period (Jamba `expert_layer_period` / `expert_layer_offset`)."""
    if not model.n_experts:
        return False
    p = model.moe_layer_period
    return i >= model.first_dense_layers and i % p == model.moe_layer_offset % p


def _need(model: ModelSpec, *fields: str) -> tuple[int, ...]:
    """The config's sizes `fields`, in order, each known to be set (an int); raises
    `UncountedParamsError` naming every one that is missing."""
    values: list[int | None] = [getattr(model, f) for f in fields]
    missing = [f for f, v in zip(fields, values, strict=True) if v is None]
    if missing:
        raise UncountedParamsError(model.name, missing)
    return tuple(v for v in values if v is not None)


def _attention_params(model: ModelSpec, tp: int, i: int = 0) -> tuple[int, int]:
    """(linear, other) of layer `i`'s attention block on one rank, with the layer's own KV heads
    and head sizes (`LayerSpec`: Gemma-4's global layers, MiMo-V2-Flash's sliding ones): q
    `hidden x H x D_k`, k `hidden x H_kv x D_k`, v `hidden x H_kv x D_v` (none when V is
    projected by K's weights, `k_eq_v`: Gemma-4 `attention_k_eq_v`), o `H x D_v x hidden`; a
    layer that reads another's cache (`kv_source`) has no k and v (transformers
    `modeling_gemma4.py`: "Layers sharing kv states don't need any weight matrices"); attention
    sinks add one value per query head (`sink_heads`, MiMo-V2-Flash `sinks`)."""
    (d,) = _need(model, "hidden_size")
    h = _cdiv(model.n_heads, tp)
    if model.o_lora_rank is not None:  # DeepSeek-V4: its fp32 parameters with the model dtype's
        linear, other, fp32 = _compressed_mqa_params(model, tp, i)
        return linear, other + fp32
    if model.attention == "mla":
        nope, rope, lora = _need(model, "qk_nope_head_dim", "qk_rope_head_dim", "kv_lora_rank")
        v = model.v_head_dim or nope
        linear = other = 0
        if model.q_lora_rank:
            linear += d * model.q_lora_rank + model.q_lora_rank * h * (nope + rope)
            other += model.q_lora_rank  # q_a_layernorm
        else:
            linear += d * h * (nope + rope)
        linear += d * (lora + rope)  # kv_a_proj_with_mqa (replicated)
        other += lora  # kv_a_layernorm
        linear += lora * h * (nope + v)  # kv_b_proj
        linear += h * v * d  # o_proj
        if model.mla_output_gate:  # Kimi-K3: a sigmoid gate per head over the output, hidden -> H x v
            linear += d * h * v
        return linear, other
    layer = model.layers[i]
    dk, dv, kv = layer.head_dim_k, layer.head_dim_v, layer.n_kv_heads
    kvr = 0 if layer.kv_source is not None else max(1, kv // tp)
    kv_width = kvr * (dk + (0 if layer.k_eq_v else dv))
    linear = d * h * dk + d * kv_width + h * dv * d
    other = (h * dk + kv_width) if model.attention_bias else 0
    if model.qk_norm:  # one RMSNorm weight of head_dim for q and one for k, shared by the heads
        other += 2 * dk
    if layer.index_dim and layer.index_format == "kv":  # MiniMax-M3's indexer: index_q, index_k, their norms
        (ih,) = _need(model, "index_n_heads")
        ihr = max(1, ih // tp)  # sharded as the KV heads (vLLM MinimaxM3QKVParallelLinearWithIndexer)
        linear += d * ihr * layer.index_dim + d * layer.index_dim  # index_k: one head, replicated
        other += 2 * layer.index_dim
    return linear, other + (h if layer.sink_heads else 0)


def _compressor_params(d: int, ratio: int, head_dim: int) -> tuple[int, int]:
    """(bf16, fp32) parameters of one DeepSeek-V4 compressor (reference `inference/model.py`
    `Compressor`, vLLM 0.33.0 `models/deepseek_v4/compressor.py` DeepseekCompressor): with coff =
    2 when ratio is 4 (CSA overlaps two windows) else 1, wkv and wgate `hidden x coff D` each and
    the norm `D` in bf16 (the reference: "wkv and wgate in the checkpoint is stored in bf16", "rmsnorm
    in the checkpoint is stored in bf16"), and the position bias ape `ratio x coff D` in fp32
    (reference `nn.Parameter(..., dtype=torch.float32)`; the checkpoint's `attn.compressor.ape` is
    F32). Flash (hidden 4,096): (4, 512) = (8,389,120, 4,096); (128, 512) = (4,194,816, 65,536);
    (4, 128) = (2,097,280, 1,024)."""
    coff = 2 if ratio == 4 else 1
    return 2 * d * coff * head_dim + head_dim, ratio * coff * head_dim


def _compressed_mqa_params(model: ModelSpec, tp: int, i: int) -> tuple[int, int, int]:
    """(linear, other, fp32) of layer `i`'s DeepSeek-V4 attention on one rank (reference
    `inference/model.py` Attention / Indexer, vLLM 0.33.0 `models/deepseek_v4/attention.py`
    DeepseekV4Attention / DeepseekV4Indexer), D = head_dim (512), H heads, G = o_groups, each
    part in the dtype the checkpoint stores it:

    - linear (fp8 with 128 x 128 block scales): wq_a `hidden x q_lora` (replicated), wq_b
      `q_lora x H D`, wkv `hidden x D` (replicated, the one K = V head), the grouped output wo_a
      `(H D / G) x (G o_lora)` ("wo_a is FP8 in checkpoint") and wo_b `G o_lora x hidden`; a CSA
      layer's indexer wq_b `q_lora x index_n_heads x index_head_dim`;
    - other (bf16): q_norm `q_lora`, kv_norm `D`; each compressed layer's (ratio > 1) compressor
      wkv / wgate / norm (`_compressor_params`); a CSA layer's indexer weights_proj
      `hidden x index_n_heads` (reference `dtype=torch.bfloat16`) and its own compressor over
      index_head_dim;
    - fp32: attn_sink `H` (reference `dtype=torch.float32`; vLLM `make_attention_sink(...,
      torch.float32)`) and the compressors' ape.

    DeepSeek-V4-Flash layer 2 (ratio 4): linear 4096 x 1024 + 1024 x 32,768 + 4096 x 512 +
    4096 x 8192 + 8192 x 4096 + 1024 x 8192 = 115,343,360; other 1024 + 512 + 8,389,120 +
    262,144 + 2,097,280 = 10,750,080; fp32 64 + 4,096 + 1,024 = 5,184."""
    d, q_lora, groups, o_lora = _need(model, "hidden_size", "q_lora_rank", "o_groups", "o_lora_rank")
    layer = model.layers[i]
    hd = layer.head_dim_k
    h, g = _cdiv(model.n_heads, tp), _cdiv(groups, tp)
    linear = d * q_lora + q_lora * h * hd + d * hd + (model.n_heads * hd // groups) * g * o_lora + g * o_lora * d
    other, fp32 = q_lora + hd, h
    if layer.compress_ratio > 1:
        bf16, f32 = _compressor_params(d, layer.compress_ratio, hd)
        other, fp32 = other + bf16, fp32 + f32
    if layer.index_dim:
        (ih,) = _need(model, "index_n_heads")
        linear += q_lora * ih * layer.index_dim
        bf16, f32 = _compressor_params(d, layer.compress_ratio, layer.index_dim)
        other, fp32 = other + d * ih + bf16, fp32 + f32
    return linear, other, fp32


def mtp_compression_params(model: ModelSpec) -> tuple[int, int, int]:
    """(linear, other, fp32) that the model's last layer has and a DeepSeek-V4 MTP layer lacks: the
    last layer's compressor and indexer (`_compressed_mqa_params`'s compressed parts), (0, 0, 0) for
    other models. vLLM 0.33.0 `models/deepseek_v4/attention.py` DeepseekV4Attention: "MTP layer is
    not included in the compress ratio list", so a layer past num_hidden_layers gets compress_ratio 1
    (sliding window only; the published configs' extra compress_ratios entry, read by the reference
    MTPBlock, is 0 too). DeepSeek-V4-Flash (last layer CSA): linear 8,388,608 (indexer wq_b), other
    8,389,120 + 262,144 + 2,097,280 = 10,748,544, fp32 4,096 + 1,024 = 5,120."""
    if model.o_lora_rank is None:
        return 0, 0, 0
    last = model.n_layers - 1
    layer = model.layers[last]
    if layer.compress_ratio <= 1:
        return 0, 0, 0
    d, q_lora = _need(model, "hidden_size", "q_lora_rank")
    bf16, fp32 = _compressor_params(d, layer.compress_ratio, layer.head_dim_k)
    linear = 0
    if layer.index_dim:
        (ih,) = _need(model, "index_n_heads")
        linear = q_lora * ih * layer.index_dim
        i_bf16, i_fp32 = _compressor_params(d, layer.compress_ratio, layer.index_dim)
        bf16, fp32 = bf16 + d * ih + i_bf16, fp32 + i_fp32
    return linear, bf16, fp32


def _hyper_connection_params(model: ModelSpec) -> int:
    """DeepSeek-V4's hyper-connections of one layer, all fp32 (reference `inference/model.py`
    Block: `with set_dtype(torch.float32)`, hc_attn_fn / hc_ffn_fn / _base / _scale; the
    checkpoint's `layers.N.hc_attn_fn` is F32; vLLM 0.33.0 DeepseekV4DecoderLayer): for the
    attention and the FFN each, fn `(2 + m) m x m hidden`, base `(2 + m) m`, scale 3, with m =
    hc_mult. Flash (m 4, hidden 4,096): 2 x (24 x 16,384 + 24 + 3) = 786,486. 0 without hc_mult."""
    m = model.hc_mult
    if not m:
        return 0
    mix = (2 + m) * m
    return 2 * (mix * m * (model.hidden_size or 0) + mix + 3)


def _mlp_params(model: ModelSpec, inter: int, tp: int) -> int:
    """Matrices of one dense MLP (or one expert) of width `inter` on one rank."""
    n = 3 if model.mlp_kind == "gated" else 2
    (d,) = _need(model, "hidden_size")
    return n * d * _cdiv(inter, tp)


def _mamba2_params(model: ModelSpec, tp: int) -> tuple[int, int]:
    s, d_conv, n_heads, head_dim = _need(model, "mamba_d_state", "mamba_d_conv", "mamba_n_heads", "mamba_head_dim")
    d, g = _need(model, "hidden_size", "mamba_n_groups")
    h = _cdiv(n_heads, tp)
    di = h * head_dim
    conv = di + 2 * g * s
    linear = d * (2 * di + 2 * g * s + h) + di * d
    other = conv * (d_conv + 1) + 3 * h + (di if model.mamba_norm else 0)  # conv w+b, dt_bias, A_log, D, norm
    return linear, other


def _mamba_params(model: ModelSpec, tp: int) -> tuple[int, int]:
    if model.mamba_n_groups is not None:
        return _mamba2_params(model, tp)
    s, d_conv, expand = _need(model, "mamba_d_state", "mamba_d_conv", "mamba_expand")
    (d,) = _need(model, "hidden_size")
    di = _cdiv(expand * d, tp)
    r = model.mamba_dt_rank or ceil(d / 16)
    linear = d * 2 * di + di * (r + 2 * s) + r * di + di * d
    other = di * d_conv + di + di + di * s + di  # conv w+b, dt bias, A_log, D
    return linear, other


def _linear_attention_params(model: ModelSpec, tp: int) -> tuple[int, int]:
    n_k, n_v, dk, dv, conv_kernel = _need(
        model,
        "linear_num_key_heads",
        "linear_num_value_heads",
        "linear_key_head_dim",
        "linear_value_head_dim",
        "linear_conv_kernel_dim",
    )
    (d,) = _need(model, "hidden_size")
    hk, hv = _cdiv(n_k, tp), _cdiv(n_v, tp)
    if model.linear_attention == "kda":
        # Kimi-K3's KDA (vLLM 0.33.0 `models/kimi_k3/nvidia/kda.py` KimiK3DeltaAttention), P = H Dv:
        # in_proj_qkvgfab `hidden x (4 P + Dv + H)` (q, k, v, output gate, f_a replicated, beta),
        # f_b_proj `Dv x P`, o_proj `P x hidden`; dt_bias `P`, conv1d `3 P x kernel`, A_log `H`,
        # o_norm `Dv`
        p = hv * dv
        linear = d * (4 * p + dv + hv) + dv * p + p * d
        other = p + 3 * p * conv_kernel + hv + dv
        return linear, other
    if model.linear_attention == "kda_lowrank":
        # Kimi Linear's KDA with the low-rank output gate (vLLM 0.33.0
        # `model_executor/layers/mamba/gdn/kimi_gdn_linear_attn.py` KimiGatedDeltaNetAttention without
        # use_full_rank_gate), P = H Dv: in_proj_qkvgfab `hidden x (3 P + H + Dv)` (q, k, v, beta,
        # f_a replicated), f_b_proj `Dv x P`, g_a_proj `hidden x Dv` (replicated), g_b_proj `Dv x P`,
        # o_proj `P x hidden`; dt_bias `P`, conv1d `3 P x kernel`, A_log `H`, o_norm `Dv`
        p = hv * dv
        linear = d * (3 * p + hv + dv) + dv * p + d * dv + dv * p + p * d
        other = p + 3 * p * conv_kernel + hv + dv
        return linear, other
    linear = d * (2 * hk * dk + 2 * hv * dv) + d * 2 * hv + hv * dv * d
    other = (2 * hk * dk + hv * dv) * conv_kernel + 2 * hv + dv
    return linear, other


def layer_params(model: ModelSpec, i: int, tp: int = 1) -> LayerParams:
    """Parameters of layer `i` on one TP rank (see the module docstring for each term).

    Raises `KvcalcError` when the config lacks a size the layer needs.
    """
    (d,) = _need(model, "hidden_size")
    kinds = model.layer_kinds
    kind = kinds[i]
    if "mlp" in kinds:  # separate blocks (Nemotron-H): one norm and one part per layer
        return _separate_block_params(model, kind, tp, i)
    fp32 = int64 = latent = 0
    if kind == "mamba":
        linear, other = _mamba_params(model, tp)
    elif kind == "linear":
        linear, other = _linear_attention_params(model, tp)
    elif kind == "hybrid":  # Falcon-H1: attention and a Mamba-2 mixer on the same normed input
        linear, other = _attention_params(model, tp, i)
        m_linear, m_other = _mamba2_params(model, tp)
        linear, other = linear + m_linear, other + m_other
    elif model.o_lora_rank is not None:  # DeepSeek-V4's compressed MQA, with its fp32 parameters apart
        linear, other, fp32 = _compressed_mqa_params(model, tp, i)
    else:
        linear, other = _attention_params(model, tp, i)
    other += 2 * d  # input and post-attention (Falcon-H1: pre_ff) norms
    fp32 += _hyper_connection_params(model)
    if model.attention_residuals:  # Kimi-K3: two norms and two hidden x 1 projections (vLLM KimiDecoderLayer)
        other += 2 * d + 2 * d
    n_experts = model.n_experts
    if n_experts and is_moe_layer(model, i):  # is_moe_layer is False without n_experts
        moe_inter = model.moe_intermediate_size or model.intermediate_size
        if moe_inter is None:
            raise UncountedParamsError(model.name, ["moe_intermediate_size"])
        other += d * n_experts  # router (replicated)
        if i < model.n_hash_layers:
            # DeepSeek-V4 hash routing: a vocab x k expert table, no bias; the checkpoint stores
            # `ffn.gate.tid2eid` as I64 (the reference declares int32; vLLM 0.33.0 holds int32)
            int64 += (model.vocab_size or 0) * (model.n_experts_per_token or n_experts)
        elif model.router_bias and model.o_lora_rank is not None:
            fp32 += n_experts  # DeepSeek-V4's gate bias: fp32 (reference Gate `dtype=torch.float32`)
        elif model.router_bias:
            other += n_experts
        if model.shared_expert_intermediate_size:
            linear += _mlp_params(model, model.shared_expert_intermediate_size, tp)
        expert_width = d
        if model.moe_latent_size:  # Kimi-K3 latent MoE: down and up projections (replicated) and a norm
            expert_width = model.moe_latent_size
            latent = 2 * d * expert_width
            other += expert_width if model.moe_latent_norm else 0
        n = 3 if model.mlp_kind == "gated" else 2
        return LayerParams(
            linear=linear,
            other=other,
            expert_linear=n * expert_width * _cdiv(moe_inter, tp),
            n_experts=n_experts,
            n_active_experts=model.n_experts_per_token or n_experts,
            fp32=fp32,
            int64=int64,
            latent_linear=latent,
        )
    (inter,) = _need(model, "intermediate_size")
    return LayerParams(linear=linear + _mlp_params(model, inter, tp), other=other, fp32=fp32, int64=int64)


#: the fix for a model whose weights kvcalc does not count: n_params is a kvcalc YAML field (a
#: config.json has none), or the checkpoint's safetensors headers give the weights
GIVE_N_PARAMS = (
    "give n_params (and n_active_params) in a kvcalc YAML (`kvcalc import` writes one from the "
    "config.json), or put the checkpoint's *.safetensors files beside the config.json (their headers "
    "give the weights)"
)


def _separate_block_params(model: ModelSpec, kind: str, tp: int, i: int) -> LayerParams:
    """One layer of a model whose mixers and MLPs are layers of their own (Nemotron-H's
    `NemotronHBlock`: `norm` then one `mixer`): the norm (`hidden`) plus the Mamba-2 mixer, the
    attention block or the MLP (`intermediate_size`, plain relu2). Raises `KvcalcError` for MoE
    (routed experts, or MLP layers without a width: Nemotron-H's `E` layers)."""
    (d,) = _need(model, "hidden_size")
    inter = model.intermediate_size
    if kind == "mlp" and model.n_experts and is_moe_layer(model, i):
        return _separate_moe_params(model, tp)
    if kind == "mlp" and inter is None:
        raise KvcalcError(
            f"{model.name}: its MoE layers (Nemotron-H's 'E' blocks) are not counted by kvcalc's "
            f"parameter count; {GIVE_N_PARAMS}",
            field="model",
            value=model.name,
            form=MESSAGE,
        )
    if kind == "mlp" and inter is not None:  # an MLP layer without a width was refused above
        return LayerParams(linear=_mlp_params(model, inter, tp), other=d)
    if kind == "mamba":
        linear, other = _mamba_params(model, tp)
    elif kind == "linear":
        linear, other = _linear_attention_params(model, tp)
    else:
        linear, other = _attention_params(model, tp, i)
    return LayerParams(linear=linear, other=other + d)


def _separate_moe_params(model: ModelSpec, tp: int) -> LayerParams:
    """One MoE layer of a separate-block model (Nemotron-3's `E` blocks; vLLM 0.33.0
    `nemotron_h.py` NemotronHMoE): the norm `hidden`, the router `hidden x E` and its
    `e_score_correction_bias` `E`, the shared expert (relu2 up and down, `2 x hidden x shared`),
    with `moe_latent_size` the latent projections fc1 / fc2 `2 x hidden x latent` (replicated, no
    norm), and E routed experts of `2 x width x moe_inter` (width: the latent, else hidden).
    Nemotron-3-Super (hidden 4,096, 512 experts of 2,688 in a 1,024 latent, shared 5,376): linear
    2 x 4,096 x 5,376 + 2 x 4,096 x 1,024 = 52,428,800; other 4,096 + 2,097,152 + 512 =
    2,101,760; an expert 2 x 1,024 x 2,688 = 5,505,024."""
    d, n_experts, moe_inter = _need(model, "hidden_size", "n_experts", "moe_intermediate_size")
    width = model.moe_latent_size or d
    linear = (
        _mlp_params(model, model.shared_expert_intermediate_size, tp) if model.shared_expert_intermediate_size else 0
    )
    other = d + d * n_experts + (n_experts if model.router_bias else 0)
    latent = 0
    if model.moe_latent_size:
        latent = 2 * d * width
        other += width if model.moe_latent_norm else 0
    n = 3 if model.mlp_kind == "gated" else 2
    return LayerParams(
        linear=linear,
        other=other,
        expert_linear=n * width * _cdiv(moe_inter, tp),
        n_experts=n_experts,
        n_active_experts=model.n_experts_per_token or n_experts,
        latent_linear=latent,
    )


def model_params(model: ModelSpec, tp: int = 1) -> ModelParams:
    """Every parameter on one TP rank, derived from the architecture.

    Raises `KvcalcError` when the config lacks a size (hidden_size, vocab_size, ...).
    """
    d, vocab_size = _need(model, "hidden_size", "vocab_size")
    if model.weights_unknown:
        raise KvcalcError(
            f"{model.name}: {model.weights_unknown}; {GIVE_N_PARAMS}", field="model", value=model.name, form=MESSAGE
        )
    vocab = _cdiv(vocab_size, tp)
    cache: dict[tuple[object, ...], LayerParams] = {}
    layers = []
    specs = model.layers
    for i, kind in enumerate(model.layer_kinds):
        key = (kind, is_moe_layer(model, i), i < model.n_hash_layers, id(specs[i]))
        if key not in cache:
            cache[key] = layer_params(model, i, tp)
        layers.append(cache[key])
    return ModelParams(
        layers=tuple(layers),
        embedding=vocab * d,
        lm_head=0 if model.tie_word_embeddings else vocab * d,
        final_norm=d + (2 * d if model.attention_residuals else 0),
        head_fp32=hc_head_params(model),
    )


def hc_head_params(model: ModelSpec) -> int:
    """DeepSeek-V4's hyper-connection head beside the final norm, fp32 (reference
    `Transformer.hc_head_fn` / `_base` / `_scale` under `set_dtype(torch.float32)`): fn
    `m x m hidden`, base `m`, scale 1; Flash: 4 x 16,384 + 4 + 1 = 65,541. (Kimi-K3's output
    attention residual, a norm and a hidden x 1 projection, vLLM KimiLinearModel
    `output_attn_res_*`, is counted with the final norm in the model dtype.)"""
    m = model.hc_mult or 0
    return m * m * (model.hidden_size or 0) + m + 1 if m else 0


def can_derive(model: ModelSpec) -> bool:
    """True when the config sizes every parameter (else only explicit n_params can be used)."""
    try:
        model_params(model)
    except KvcalcError:
        return False
    return True


def param_counts(model: ModelSpec) -> tuple[int, int]:
    """(n_params, n_active_params) of the whole model: the config's explicit `n_params` /
    `n_active_params` when given (active defaults to the total), else derived.

    Llama-3.1-8B: 2 x 128256 x 4096 + 32 x 218,112,000 + 4096 = 8,030,261,248.
    Raises `KvcalcError` when neither is possible.
    """
    if model.checkpoint is not None:  # counted from the checkpoint's headers
        n = model.checkpoint.n_params
        if model.n_active_params or not model.n_experts:
            return n, model.n_active_params or n
        p = model_params(model)  # MoE: the routed experts a token skips, from the architecture
        return n, max(n - (p.total - p.active), 0)
    if model.n_params is not None:
        return model.n_params, model.n_active_params or model.n_params
    p = model_params(model)
    return p.total, (model.n_active_params or p.active)


def weights_source(model: ModelSpec, weight_dtype: FormatLike | None = None) -> str:
    """Where the weight bytes come from, in words: the checkpoint's headers (`model.checkpoint.source`)
    unless `weight_dtype` overrides the format, else `architecture` (counted from the config) or
    `n_params` (the config's explicit count, spread over the layers)."""
    if model.checkpoint is not None and weight_dtype is None:
        return model.checkpoint.source
    if model.n_params is not None and not can_derive(model):
        return "n_params"
    return "architecture"


def format_bytes(fmt: StorageFormat, n_values: int, fallback: StorageFormat) -> int:
    """Bytes of `n_values` values in `fmt`: whole blocks through `fmt.bytes_for`, and a
    remainder shorter than one block (only possible for explicit n_params) in `fallback`."""
    whole = n_values - n_values % fmt.block_values
    return fmt.bytes_for(whole, what="weight count", field="weight_dtype") + fallback.bytes_for(n_values - whole)


@dataclass(frozen=True, slots=True)
class WeightBytes:
    """Weight bytes of one model on one TP rank, split so PP stages and touched experts can be
    summed: per layer (always-used bytes, bytes of one routed expert, experts, active experts),
    plus the embedding (first stage) and the LM head and final norm (last stage)."""

    layer_dense_bytes: tuple[int, ...]
    layer_expert_bytes: tuple[int, ...]
    layer_n_experts: tuple[int, ...]
    layer_n_active_experts: tuple[int, ...]
    embedding_bytes: int
    head_bytes: int
    tied: bool

    def layer_bytes(self, i: int) -> int:
        """All bytes of layer i on the rank (every expert)."""
        return self.layer_dense_bytes[i] + self.layer_n_experts[i] * self.layer_expert_bytes[i]

    @property
    def total_bytes(self) -> int:
        """All weights on the rank over every layer (no PP split)."""
        return (
            sum(self.layer_bytes(i) for i in range(len(self.layer_dense_bytes)))
            + self.embedding_bytes
            + self.head_bytes
        )

    def stage_bytes(self, stages: list[range]) -> list[int]:
        """Bytes of each pipeline stage on one rank: its layers, the embedding on the first
        stage, the LM head and final norm on the last (a tied head is a second copy there when
        pp > 1, as vLLM's last stage builds its own `ParallelLMHead`)."""
        out = [sum(self.layer_bytes(i) for i in st) for st in stages]
        out[0] += self.embedding_bytes
        out[-1] += self.head_bytes
        if self.tied and len(stages) > 1:
            out[-1] += self.embedding_bytes
        return out


def weight_formats(model: ModelSpec, weight_dtype: FormatLike | None = None) -> tuple[StorageFormat, StorageFormat]:
    """(format of the decoder matrices, format of the routed experts): `weight_dtype` (the
    --weight-dtype override) for both when given; else the config's `weight_dtype` (the
    published checkpoint's format: DeepSeek-V3 / Kimi-K2 fp8) and `expert_weight_dtype`
    (gpt-oss: MXFP4 experts, bf16 attention), each defaulting to the model's dtype."""
    if weight_dtype is not None:
        wf = weight_format(weight_dtype)
        return wf, wf
    wf, ef = model.checkpoint_formats  # looked up once per model
    wf = weight_format(wf)
    return wf, weight_format(ef) if ef is not wf else wf


def latent_weight_format(model: ModelSpec, weight_dtype: FormatLike | None = None) -> StorageFormat:
    """The format of the latent MoE's down / up projections: `weight_dtype` (the --weight-dtype
    override) when given, else the config's `latent_weight_dtype` (Kimi-K3: MXFP4, quantized with
    the routed experts by its compressed-tensors config), else the decoder matrices' format."""
    if weight_dtype is None and model.latent_format is not None:
        return weight_format(model.latent_format)  # looked up once per model
    return weight_formats(model, weight_dtype)[0]


def weight_format_label(model: ModelSpec, weight_dtype: FormatLike | None = None) -> str:
    """The weight formats in words: `bf16`, or `bf16 + mxfp4 experts` when the experts differ."""
    if model.checkpoint is not None and weight_dtype is None:
        return f"{model.checkpoint.label} as stored"
    wf, ef = weight_formats(model, weight_dtype)
    return wf.name if wf == ef or not model.n_experts else f"{wf.name} + {ef.name} experts"


def checkpoint_weight_bytes(model: ModelSpec, tp: int = 1) -> WeightBytes:
    """Weight bytes on one TP rank from the checkpoint's own headers (`model.checkpoint`, exact
    for tp = 1). For tp > 1 each part is divided evenly, rounded up: a close upper estimate (norms
    and KV heads replicated across ranks are not added back). A layer's routed-expert bytes are
    split evenly over its `n_experts`, `n_experts_per_token` of them read per token.

    Raises `KvcalcError` when the model has no checkpoint figures.
    """
    ck = model.checkpoint
    if ck is None:
        raise KvcalcError(
            f"{model.name}: no checkpoint weight bytes (load it from a checkpoint folder, a Hub id or a GGUF file)",
            field="model",
            value=model.name,
            form=MESSAGE,
        )
    dense, expert, n_exp, n_act = [], [], [], []
    for i, (total, experts) in enumerate(zip(ck.layer_bytes, ck.layer_expert_bytes)):
        e = model.n_experts if experts and model.n_experts and is_moe_layer(model, i) else 0
        if e:
            dense.append(_cdiv(total - experts, tp))
            expert.append(_cdiv(_cdiv(experts, e), tp))
            n_exp.append(e)
            n_act.append(min(model.n_experts_per_token or e, e))
        else:  # a dense layer (or experts the architecture does not place): all always read
            dense.append(_cdiv(total, tp))
            expert.append(0)
            n_exp.append(0)
            n_act.append(0)
    return WeightBytes(
        layer_dense_bytes=tuple(dense),
        layer_expert_bytes=tuple(expert),
        layer_n_experts=tuple(n_exp),
        layer_n_active_experts=tuple(n_act),
        embedding_bytes=_cdiv(ck.embedding_bytes + ck.other_bytes, tp),
        head_bytes=_cdiv(ck.head_bytes, tp),
        tied=model.tie_word_embeddings,
    )


#: layer kinds without an attention block (no q / k / v / o, no KV scales)
_NO_ATTENTION = ("mamba", "linear", "mlp")


def linear_modules(model: ModelSpec, i: int) -> int | None:
    """How many linear modules (the checkpoint's own, unfused: q_proj, k_proj and v_proj apart)
    layer `i` stores outside its routed experts, each of which a ModelOpt FP8 / NVFP4 checkpoint
    gives its per-tensor scalars (`ModelSpec.linear_tensor_scale_bytes`); None when kvcalc does
    not know the module list (DeepSeek-V4's compressed MQA, linear attention, Falcon-H1's hybrid
    layers).

    Attention: q_proj (MLA: q_a_proj and q_b_proj with `q_lora_rank`), k_proj unless the layer
    reads another's cache (`kv_source`), v_proj unless also `k_eq_v`, o_proj; MLA
    kv_a_proj_with_mqa, kv_b_proj, o_proj, Kimi-K3's output gate; MiniMax-M3's index_q / index_k.
    Mamba-2 in_proj, out_proj (vLLM 0.33.0 `mamba_mixer2.py`); Mamba-1 in_proj, x_proj, dt_proj,
    out_proj. A dense MLP or shared expert: gate, up, down (2 when not gated); a latent MoE's two
    projections (Nemotron-3 fc1 / fc2_latent_proj, built with the quant config in vLLM 0.33.0
    `nemotron_h.py`) when they share the decoder matrices' format. The router (GateLinear) is
    built without it: none. The layer's geometry as in `layer_params`."""
    kind = model.layer_kinds[i]
    separate = "mlp" in model.layer_kinds  # Nemotron-H: each layer one mixer or one MLP
    moe = bool(model.n_experts) and is_moe_layer(model, i)
    mlp = 3 if model.mlp_kind == "gated" else 2
    if kind == "hybrid" or kind == "linear" or (model.o_lora_rank is not None and kind not in _NO_ATTENTION):
        return None
    n = 0
    if kind == "mamba":
        n = 2 if model.mamba_n_groups is not None else 4
    elif kind == "mla":
        n = (2 if model.q_lora_rank else 1) + 3 + (1 if model.mla_output_gate else 0)
    elif kind != "mlp":
        layer = model.layers[i]
        kv = 0 if layer.kv_source is not None else (1 if layer.k_eq_v else 2)
        n = 2 + kv + (2 if layer.index_dim and layer.index_format == "kv" else 0)
    if separate and kind != "mlp":
        return n
    if moe:
        n += mlp if model.shared_expert_intermediate_size else 0
        n += 2 if model.moe_latent_size and model.latent_weight_dtype is None else 0
    else:
        n += mlp
    return n


def tensor_scale_bytes(model: ModelSpec) -> int:
    """Bytes of the per-tensor scalars a ModelOpt checkpoint stores outside the routed experts:
    `linear_tensor_scale_bytes` x `linear_modules` of each layer + `kv_scale_bytes` per attention
    layer with its own k / v (vLLM 0.33.0 `modelopt.py`, `quantization/kv_cache.py`); a layer
    whose modules kvcalc does not list adds none (documented in docs/models-2026.md). Whole model
    (per-tensor scalars are replicated on every TP rank). Nemotron-3-Super-FP8 (40 Mamba-2, 8
    attention, 40 latent MoE layers): 40 x 2 + 8 x 4 + 40 x (2 + 2) = 272 modules x 8 B + 8 x 8 B
    = 2,240 B."""
    return sum(layer_tensor_scale_bytes(model, i) for i in range(model.n_layers))


def layer_tensor_scale_bytes(model: ModelSpec, i: int) -> int:
    """`tensor_scale_bytes` of layer `i` alone (the same on every TP rank)."""
    if not (model.linear_tensor_scale_bytes or model.kv_scale_bytes):
        return 0
    kind = model.layer_kinds[i]
    kv = model.kv_scale_bytes if kind not in _NO_ATTENTION and model.layers[i].kv_source is None else 0
    return model.linear_tensor_scale_bytes * (linear_modules(model, i) or 0) + kv


def weight_bytes(model: ModelSpec, weight_dtype: FormatLike | None = None, tp: int = 1) -> WeightBytes:
    """Weight bytes on one TP rank: decoder matrices in `weight_dtype` (default the config's
    `weight_dtype`, else the model's dtype; routed experts in `expert_weight_dtype` when the
    config gives one, see `weight_formats`), everything else in the model's dtype. With explicit
    `n_params` and no derivable architecture, the whole count is spread evenly over the layers
    in the decoder matrices' format.

    A model loaded from a checkpoint (`model.checkpoint`: safetensors headers, GGUF tensor
    table) and no `weight_dtype` override gives the stored bytes instead
    (`checkpoint_weight_bytes`).

    Per layer: `linear` in the weight format + `other` in the model's dtype + 4 B per `fp32` and
    8 B per `int64` parameter + `latent_linear` in `latent_weight_format`; per routed expert
    `expert_linear` in the experts' format + `expert_tensor_scale_bytes` per matrix (none under a
    `weight_dtype` override); each layer adds its ModelOpt per-tensor scalars
    (`layer_tensor_scale_bytes`, none under an override); the head adds its fp32 parameters
    (`ModelParams.head_fp32`).

    Raises `KvcalcError` when the count cannot be made or a matrix is not a whole number of
    quantization groups.
    """
    if model.checkpoint is not None and weight_dtype is None:
        return checkpoint_weight_bytes(model, tp)
    wf, ef = weight_formats(model, weight_dtype)
    base = weight_format(model.dtype_format, field=None)  # the model's own dtype: no option sets it
    n = model.n_layers
    if model.n_params is not None and not can_derive(model):
        total = _cdiv(model.n_params, tp)
        active = _cdiv(model.n_active_params or model.n_params, tp)
        per_layer_active, per_layer_rest = active // n, (total - active) // n
        dense = format_bytes(wf, per_layer_active, base)
        # the inactive remainder as one "expert" so that decode reads only the active part
        return WeightBytes(
            layer_dense_bytes=(dense,) * n,
            layer_expert_bytes=(format_bytes(wf, per_layer_rest, base),) * n,
            layer_n_experts=(1 if per_layer_rest else 0,) * n,
            layer_n_active_experts=(0,) * n,
            embedding_bytes=format_bytes(wf, total - per_layer_active * n - per_layer_rest * n, base),
            head_bytes=0,
            tied=False,
        )
    p = model_params(model, tp)
    lf = latent_weight_format(model, weight_dtype)
    expert_matrices = 3 if model.mlp_kind == "gated" else 2  # each carries `expert_tensor_scale_bytes`
    cache: dict[LayerParams, tuple[int, int]] = {}
    dense_b, expert_b = [], []
    for i, lp in enumerate(p.layers):
        if lp not in cache:
            cache[lp] = (
                wf.bytes_for(lp.linear, what="layer's weight matrices", field="weight_dtype")
                + base.bytes_for(lp.other)
                + FP32_BYTES * lp.fp32
                + INT64_BYTES * lp.int64
                + lf.bytes_for(lp.latent_linear, what="latent MoE projections", field="weight_dtype"),
                ef.bytes_for(lp.expert_linear, what="expert's weight matrices", field="weight_dtype")
                + (expert_matrices * model.expert_tensor_scale_bytes if lp.n_experts and weight_dtype is None else 0),
            )
        dense_b.append(cache[lp][0] + (layer_tensor_scale_bytes(model, i) if weight_dtype is None else 0))
        expert_b.append(cache[lp][1])
    return WeightBytes(
        layer_dense_bytes=tuple(dense_b),
        layer_expert_bytes=tuple(expert_b),
        layer_n_experts=tuple(lp.n_experts for lp in p.layers),
        layer_n_active_experts=tuple(lp.n_active_experts for lp in p.layers),
        embedding_bytes=base.bytes_for(p.embedding),
        head_bytes=base.bytes_for(p.lm_head + p.final_norm) + FP32_BYTES * p.head_fp32,
        tied=model.tie_word_embeddings,
    )


def mtp_params(model: ModelSpec) -> int:
    """Parameters of the model's multi-token-prediction layers (`n_mtp_layers`, the config's
    `num_nextn_predict_layers`), whole model, not in `param_counts`: engines load them only for
    speculative decoding (vLLM `deepseek_mtp.py`, `--speculative-config`). Each is, as DeepSeek-V3's
    (`modeling_deepseek.py` / vLLM `DeepSeekMultiTokenPredictorLayer`): enorm and hnorm (`hidden`
    each), eh_proj `2 hidden x hidden`, one decoder layer like the model's last, and the shared
    head's norm (`hidden`); the embedding and the LM head are the main model's (vLLM shares them;
    a checkpoint may store copies: DeepSeek-V3's 685B = 671B + 14B counts them). DeepSeek-V4's MTP
    block (reference `inference/model.py` MTPBlock) adds its hyper-connection head; its layer is
    the model's last without a compressor or indexer (`mtp_compression_params`: vLLM 0.33.0 builds
    it sliding-window only).

    Raises `KvcalcError` when the model's layers cannot be counted."""
    if not model.n_mtp_layers:
        return 0
    d = model.hidden_size or 0
    last = layer_params(model, model.n_layers - 1).total - sum(mtp_compression_params(model))
    m = model.hc_mult or 0  # DeepSeek-V4's MTPBlock has its own hyper-connection head
    return model.n_mtp_layers * (last + 2 * d * d + 3 * d + (m * m * d + m + 1 if m else 0))
