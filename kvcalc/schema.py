"""Pydantic v2 models of the inputs: a model as its layers, the workload; a GPU and a deployment
(`GpuSpec`, `Deployment`, `Targets`: declared in `kvcalc.schema_deploy`, handed out here by name).
The results every command returns are in `kvcalc.results`.

All models are frozen and refuse unknown fields (`extra="forbid"`); the loaders turn a refused
field into one line with a "did you mean" hint. Derived values (the resolved `head_dim`, the
attention kind, the group size, the layer list) are computed properties, never stored twice.

Tensor shapes use one notation throughout: `(B, H_kv, T, D)` = batch, KV heads, tokens, head dim.

Annotations here are objects, not text (no `from __future__ import annotations`): pydantic reads
a class's field types when the class is declared, at every start-up, and text it would have to
compile and evaluate, some eighty times. A name not yet defined goes in quotes (`-> "ModelSpec"`).
"""

from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import Field, PositiveInt, ValidationInfo, field_validator, model_validator

from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.formats import FormatField, StorageFormat
from kvcalc.schema_types import (  # noqa: F401  (the field types and the base model, shared with kvcalc.schema_deploy)
    Count,
    Count0,
    Int0,
    Int0List,
    LayerCount,
    OptCount,
    OptQuantity,
    OptStr,
    OptStrList,
    Quantity,
    Quantity0,
    StrictBool,
    Tokens,
    _Frozen,
)
from kvcalc.units import MAX_SEQ_LEN

TYPE_CHECKING = False  # typing.TYPE_CHECKING: for type checkers only
if TYPE_CHECKING:  # what `__getattr__` hands out, named for type checkers
    from kvcalc.schema_deploy import Deployment, GpuSpec, Targets  # noqa: F401

#: the names `kvcalc.schema_deploy` declares, handed out by `__getattr__` on first use
DEPLOY_NAMES = (
    "GpuSpec",
    "Deployment",
    "Targets",
    "GpuCount",
    "ContextTokens",
    "Positive",
    "MemoryBytes",
    "Bytes0",
    "BytesPerS",
    "FlopsPerS",
)


def __getattr__(name: str) -> Any:  # Any: the names above, each its own type
    """`GpuSpec`, `Deployment`, `Targets` and their field types, from `kvcalc.schema_deploy`:
    `from kvcalc.schema import GpuSpec` imports that module on first use only, so a call that
    reads no GPU or deployment (`kvcalc estimate MODEL`) never declares them."""
    if name in DEPLOY_NAMES:
        import kvcalc.schema_deploy as deploy

        value = getattr(deploy, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kvcalc.schema' has no attribute {name!r}")


#: the kinds a layer can be. full / sliding cache K and V per head; mla caches one latent
#: vector per token; mamba and linear (linear attention, Gated DeltaNet) keep a fixed
#: per-sequence state and no per-token cache; hybrid runs full attention and a Mamba-2 mixer side
#: by side (Falcon-H1's parallel hybrid; transformers `FalconH1Config.layers_block_type` calls every
#: layer "hybrid"): K and V per head AND the Mamba-2 state; mlp is a layer with no token mixer at
#: all (Nemotron-H's "-" and "E" layers): no cache, no state.
LayerKind = Literal["full", "sliding", "mla", "mamba", "linear", "hybrid", "mlp"]

#: spellings accepted in `layer_pattern` / `layer_types` (Hugging Face `layer_types` names too).
LAYER_KIND_ALIASES: dict[str, str] = {
    "full": "full",
    "full_attention": "full",
    "attention": "full",
    "global": "full",
    "attn": "full",
    "global_attention": "full",
    "sliding": "sliding",
    "sliding_attention": "sliding",
    "local": "sliding",
    "sliding_window": "sliding",
    "local_attention": "sliding",
    "swa": "sliding",
    "mamba": "mamba",
    "mamba2": "mamba",
    "ssm": "mamba",
    "linear": "linear",
    "linear_attention": "linear",
    "gated_deltanet": "linear",
    "deltanet": "linear",
    "none": "linear",
    "hybrid": "hybrid",
    "parallel_hybrid": "hybrid",
    "mlp": "mlp",
    "moe": "mlp",
}


#: the key of `model_validate(..., context=...)` under which a loader passes its file's own
#: names of the model's fields (`{"n_kv_heads": "num_key_value_heads"}`), so an error about a
#: value read from a file names the file's field (`kvcalc.load.files.build`'s `names`).
FILE_NAMES = "file_names"


def file_names(info: ValidationInfo) -> dict[str, str]:
    """The file's names of the fields (kvcalc field -> the file's key) a loader passed in the
    validation context (`FILE_NAMES`); {} for a kvcalc YAML or the Python API."""
    ctx = info.context if isinstance(info.context, dict) else {}
    names = ctx.get(FILE_NAMES)
    return names if isinstance(names, dict) else {}


def field_error(model: str, field: str, message: str, value: object = None) -> Exception:
    """A pydantic `ValidationError` located at `field` (its `loc`), for a model-level check: the
    loaders name the file's line and the field from this data, never from the wording
    (`load.files.validation_error` reads `loc`). Raise it from a `model_validator`."""
    from pydantic import ValidationError
    from pydantic_core import InitErrorDetails, PydanticCustomError

    return ValidationError.from_exception_data(
        model,
        [
            InitErrorDetails(
                type=PydanticCustomError("value_error", message.replace("{", "{{").replace("}", "}}")),
                loc=(field,),
                input=value,
            )
        ],
    )


class LayerSpec(_Frozen):
    """One decoder layer as the KV cache sees it (derived from `ModelSpec`, never written).

    - `full` / `sliding`: K of shape (B, n_kv_heads, T, head_dim_k) and V of shape
      (B, n_kv_heads, T, head_dim_v); a sliding layer keeps T = min(seq_len, window) tokens.
    - `mla`: one latent of shape (B, T, head_dim_k) with head_dim_k = kv_lora_rank +
      qk_rope_head_dim serving as both K and V (head_dim_v = 0, n_kv_heads = 1), replicated
      on every tensor-parallel rank (DeepSeek-V2, arXiv:2405.04434, section 2.1).
    - `mamba` / `linear`: no per-token cache; `state_values` values of fixed state per sequence
      (0 when the config does not give enough to size it). Kimi-K3's KDA layers are `linear`
      beside `mla` layers.
    - `hybrid` (Falcon-H1): a `full` layer's K and V per head AND a Mamba-2 mixer's
      `state_values` per sequence, both for every layer.
    - `mlp`: no token mixer: neither cache nor state.

    The 2026 attention, each as data on the layer (the engines build on these fields):

    - `n_kv_heads` / `head_dim_k` / `head_dim_v` are per layer, so a model's global and
      sliding layers may differ (Gemma-4: 2 KV heads of 512 on global layers, 8 of 256 on
      sliding ones; MiMo-V2-Flash: 4 of 192 / 128 global, 8 of 192 / 128 sliding).
    - `v_is_k`: the layer caches ONE tensor per token that is both K and V (DeepSeek-V4's
      shared-KV MQA: transformers `modeling_deepseek_v4.py` `DeepseekV4HCACache.update`,
      `self.values = self.keys`); head_dim_v is 0 and the bytes are counted once.
    - `k_eq_v`: K and V come from ONE projection (Gemma-4 global layers, `attention_k_eq_v`:
      no `v_proj`). The cache still holds K and V as two tensors, because K is normed with a
      learned scale and rotated while V is normed without a scale and not rotated
      (transformers `modeling_gemma4.py` `Gemma4TextAttention.forward`); vLLM's `gemma4.py`
      loads k_proj into both the K and V slots. It changes the weights, not the cache bytes.
    - `kv_source`: the index of the layer whose cache this layer reads (Gemma-3n / Gemma-4
      `num_kv_shared_layers`): the layer caches nothing of its own. None: it has its own.
    - `compress_ratio` / `compressed_dim`: beside its window the layer keeps ONE compressed
      entry of `compressed_dim` values per `compress_ratio` tokens (DeepSeek-V4
      `compress_ratios`: 4 = CSA, 128 = HCA), floor(T / ratio) entries, K = V. 0: none.
    - `index_dim` / `index_format`: the sparse-attention indexer's key cache beside the
      attention cache (DeepSeek-V3.2 / V4 lightning indexer, GLM-5 DSA, MiniMax-M3):
      `index_dim` values per entry, one entry per token, or per `compress_ratio` tokens on a
      compressed layer (DeepSeek-V4 CSA's indexer compresses over the same windows).
      `index_format` "fp8_scaled": fp8 values + one fp32 scale per 128 (DeepSeek's reference
      indexer); "kv": in the KV-cache format (MiniMax-M3's bf16 `index_k`).
    - `sink_heads`: per-head attention-sink logits (MiMo-V2-Flash's SWA layers, gpt-oss):
      parameters, one per query head, not a per-token cache; `weights` counts them.
    """

    kind: LayerKind
    n_kv_heads: int = 0
    head_dim_k: int = 0
    head_dim_v: int = 0
    window: int | None = None
    state_values: int = 0
    index_dim: int = 0
    index_format: Literal["fp8_scaled", "kv"] = "fp8_scaled"
    v_is_k: bool = False
    k_eq_v: bool = False
    kv_source: int | None = None
    compress_ratio: int = 0
    compressed_dim: int = 0
    sink_heads: int = 0

    @property
    def caches_kv(self) -> bool:
        """True for layers whose cache grows with the context (full, sliding, mla, hybrid) and
        that hold a cache of their own (not `kv_source`)."""
        return self.kind in ("full", "sliding", "mla", "hybrid") and self.kv_source is None

    @property
    def keeps_state(self) -> bool:
        """True for layers with a fixed per-sequence state (mamba, linear, hybrid)."""
        return self.kind in ("mamba", "linear", "hybrid")

    @property
    def features(self) -> frozenset[str]:
        """The 2026 cache features this layer has, by name (`kv_cache.LAYER_FEATURES` says what
        each means): an engine profile that does not model one of them refuses the model
        (`kv_cache.refuse_unmodelled_layers`)."""
        out = set()
        if self.v_is_k:
            out.add("v_is_k")
        if self.k_eq_v:
            out.add("k_eq_v")
        if self.kv_source is not None:
            out.add("kv_shared")
        if self.compress_ratio > 1:
            out.add("compressed")
        if self.index_dim:
            out.add("indexer" if self.index_format == "fp8_scaled" else "indexer_kv")
        if self.sink_heads:
            out.add("sinks")
        return frozenset(out)


class CheckpointWeights(_Frozen):
    """Weight bytes as a checkpoint stores them, read from its own files' headers (never the
    tensor data): the safetensors header of each shard (`safetensors` format: an 8-byte little
    endian length, then a JSON map name -> dtype, shape, data_offsets), or a GGUF file's tensor
    table (`gguf` package: name, ggml type, shape). Set by the loaders of local checkpoint folders,
    Hub ids and GGUF files; a `--weight-dtype` override ignores it and counts from the architecture.

    Bytes are exact and whole-model (every shard, no TP split):
    - `layer_bytes[i]`: every tensor of decoder layer i (`model.layers.{i}.` / `blk.{i}.`), its
      routed experts included; `layer_expert_bytes[i]` of them belong to routed experts (all of
      the layer's experts together; 0 for a dense layer). len == the model's n_layers.
    - `embedding_bytes`: the token embedding; `head_bytes`: the LM head and the final norm (0 for
      the head when tied); `other_bytes`: everything else the files hold (vision tower, MTP layers
      past n_layers, ...), loaded with the first stage.
    - `n_params`: values stored (packed int4/nf4 words unpacked to their values; scales and zero
      points counted as the parameters they are); `bytes_by_dtype`: stored type name (safetensors
      `BF16`, `F8_E4M3`, `I32`; GGUF `Q4_K`, `Q6_K`) -> bytes.
    - `source`: where the figures come from, in words (`safetensors headers of 4 files`,
      `GGUF tensor table`); `label`: the stored formats in words (`bf16`, `fp8 + bf16`, `Q4_K_M`).
    """

    source: str = Field(min_length=1)
    label: str = Field(min_length=1)
    n_params: Int0
    layer_bytes: Int0List
    layer_expert_bytes: Int0List
    embedding_bytes: Int0 = 0
    head_bytes: Int0 = 0
    other_bytes: Int0 = 0
    bytes_by_dtype: dict[str, int] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> "CheckpointWeights":
        if len(self.layer_expert_bytes) != len(self.layer_bytes):
            raise ValueError("layer_expert_bytes and layer_bytes must list the same layers")
        if any(e > t for e, t in zip(self.layer_expert_bytes, self.layer_bytes, strict=True)):
            raise ValueError("a layer's expert bytes exceed its bytes")
        return self

    @property
    def total_bytes(self) -> int:
        """Every byte of weight data the files hold."""
        return sum(self.layer_bytes) + self.embedding_bytes + self.head_bytes + self.other_bytes


#: rope types whose `factor` does not lengthen the context vLLM derives (`su` is longrope's old
#: name; llama3 configs already state the scaled max_position_embeddings).
ROPE_TYPES_UNSCALED = ("su", "longrope", "llama3")


class RopeScaling(_Frozen):
    """A config's `rope_scaling` (transformers v5: `rope_parameters`), as much as the context limit
    needs: `rope_type` (default, linear, dynamic, yarn, longrope, llama3, ...), its `factor`, and
    the `original_max_position_embeddings` YaRN scales from (for longrope: the config's top-level
    one, which vLLM takes as the default context)."""

    rope_type: str = Field(default="default", min_length=1)
    factor: Annotated[float, Field(strict=True, gt=0, le=2**20, allow_inf_nan=False)] | None = None
    original_max_position_embeddings: Tokens | None = None


class KindGeometry(_Frozen):
    """The K / V geometry of one layer kind where it differs from the model's counts
    (`ModelSpec.kind_geometry`): Gemma-4's global layers (`num_global_key_value_heads`,
    `global_head_dim`), MiMo-V2-Flash's sliding layers (`swa_num_key_value_heads`,
    `swa_head_dim`, `swa_v_head_dim`). A field left out keeps the model's value. `k_eq_v`: the
    kind's V comes from K's projection (Gemma-4 `attention_k_eq_v`, global layers only; see
    `LayerSpec.k_eq_v`: weights, not cache)."""

    n_kv_heads: OptCount = None
    head_dim: OptCount = None
    v_head_dim: OptCount = None
    k_eq_v: StrictBool = False


class ModelSpec(_Frozen):
    """A model architecture, as much of it as KV cache, weights and roofline need.

    A uniform model is its counts (`n_layers`, `n_heads`, `n_kv_heads`, `head_dim`); a mixed
    one adds `layer_pattern` (kinds that repeat over the layers: Gemma-3's five sliding layers
    then one full) or `layer_types` (one kind per layer, as Hugging Face writes it). With a
    `sliding_window` and neither, every layer slides (Mistral-7B-v0.1, as transformers does).

    Raises `pydantic.ValidationError` on bad values (the loaders turn it into `ConfigError`).
    """

    # identity
    name: str = Field(min_length=1)
    source: OptStr = None
    #: what an engine loads (`vllm serve MODEL`, SGLang `--model-path`): a Hugging Face Hub id
    #: (`org/name`) or a local checkpoint folder, as the loader knew it (`engines.launch.model_ref`)
    model_path: OptStr = None
    model_type: OptStr = None

    # attention
    n_layers: LayerCount
    n_heads: Count
    n_kv_heads: OptCount = None
    head_dim: OptCount = None
    v_head_dim: OptCount = None
    hidden_size: OptCount = None
    dtype: str = "bf16"
    max_position_embeddings: Tokens | None = None
    # the config's rope scaling: the longest context engines allow is derived from it (`context_limit`)
    rope_scaling: RopeScaling | None = None
    attention: Literal["standard", "mla"] = "standard"
    kv_lora_rank: OptCount = None
    qk_rope_head_dim: OptCount = None
    qk_nope_head_dim: OptCount = None
    q_lora_rank: OptCount = None
    # DeepSeek-V3.2 sparse attention: the indexer caches one key of index_head_dim per token per layer
    index_head_dim: OptCount = None
    # how llama.cpp caches MLA, where the file tells (a GGUF loader sets it): "latent" for a GGUF
    # converted for llama.cpp's latent cache (it carries deepseek2.attention.key_length_mla, April
    # 2025 on), "expanded" for an older one (K and V per head); None: the llama.cpp version decides
    mla_cache: Literal["latent", "expanded"] | None = None
    sliding_window: OptCount = None
    # the window llama.cpp's converter writes to the GGUF (`<arch>.attention.sliding_window`, n_swa) where it
    # is not `sliding_window`: MiMo-V2 writes the config's sliding_window (128; conversion/mimo.py 159) where its
    # layers attend sliding_window_size + 1 = 129 tokens. None: `sliding_window` (or not known, where it differs)
    gguf_sliding_window: OptCount = None
    layer_pattern: OptStrList = None
    layer_types: OptStrList = None

    # the 2026 attention, as data (each one a `LayerSpec` field; see there)
    # K / V heads and head sizes of the full or the sliding layers where they differ from the counts above
    kind_geometry: dict[Literal["full", "sliding"], KindGeometry] | None = None
    # every attention layer caches one tensor that is both K and V (DeepSeek-V4)
    v_is_k: StrictBool = False
    # the last n layers reuse the cache of the last earlier layer of their kind (Gemma-3n / Gemma-4)
    n_kv_shared_layers: Count0 = 0
    # per layer: 0 none, N > 1: one compressed entry per N tokens beside the window (DeepSeek-V4)
    compress_ratios: Int0List | None = None
    # per layer 1 / 0: which attention layers keep the indexer's key cache (None: every one)
    index_layers: Int0List | None = None
    # how the indexer keys are stored: fp8 + fp32 scale per 128 (DeepSeek) or the KV format (MiniMax-M3)
    index_format: Literal["fp8_scaled", "kv"] = "fp8_scaled"
    # layer kinds whose attention has per-head sink logits (parameters, no cache)
    attention_sinks: OptStrList = None
    # multi-token-prediction layers past n_layers (num_nextn_predict_layers): weights only;
    # no engine caches for them unless speculative decoding runs
    n_mtp_layers: Count0 = 0
    # why the architecture's parameters cannot be counted (a part kvcalc does not model); the
    # weights then need n_params, or a checkpoint's headers
    weights_unknown: OptStr = None
    # weights-only parts of the 2026 architectures (no cache; `calc/weights.py` counts each):
    # DeepSeek-V4's grouped low-rank output projection (o_groups groups of o_lora_rank), its
    # hyper-connections (hc_mult residual streams) and hash-routed first MoE layers (a vocab x k table)
    o_groups: OptCount = None
    o_lora_rank: OptCount = None
    hc_mult: OptCount = None
    n_hash_layers: Count0 = 0
    # the sparse-attention indexer's query heads (DeepSeek-V4 index_n_heads, MiniMax-M3 sparse_num_index_heads)
    index_n_heads: OptCount = None
    # a per-expert routing bias beside the router (noaux_tc e_score_correction_bias, MiniMax use_routing_bias)
    router_bias: StrictBool = False
    # per-head q and k RMSNorm weights of head_dim each (MiniMax-M3 qk_norm_type per_head)
    qk_norm: StrictBool = False
    # Kimi-K3: routed experts work in a latent width (routed_expert_hidden_size) between a down and an
    # up projection (with a norm); the MLA output gate (mla_use_output_gate); block attention
    # residuals (attn_res_block_size: two norms and two hidden x 1 projections per layer)
    moe_latent_size: OptCount = None
    # the latent MoE's RMSNorm over the latent (Kimi-K3 latent_moe_use_norm; Nemotron-3 has none)
    moe_latent_norm: StrictBool = False
    mla_output_gate: StrictBool = False
    attention_residuals: StrictBool = False
    # which linear attention the `linear` layers run: Gated DeltaNet (Qwen3-Next) or Kimi's KDA, with
    # Kimi-K3's full-rank output gate (`kda`) or Kimi Linear's low-rank one (`kda_lowrank`: g_a / g_b)
    linear_attention: Literal["gated_deltanet", "kda", "kda_lowrank"] = "gated_deltanet"

    # fixed per-sequence state of mamba / linear-attention layers
    mamba_d_state: OptCount = None
    mamba_d_conv: OptCount = None
    mamba_expand: OptCount = None
    mamba_dt_rank: OptCount = None
    # Mamba-2 (Nemotron-H, Granite-4.0-H): n_groups set means the mamba layers are Mamba-2, with
    # n_heads heads of head_dim (d_inner = n_heads x head_dim)
    mamba_n_groups: OptCount = None
    mamba_n_heads: OptCount = None
    mamba_head_dim: OptCount = None
    # Mamba-2's gated RMS norm over d_inner (a weight of d_inner values); Falcon-H1's mamba_rms_norm: false has none
    mamba_norm: StrictBool = True
    linear_num_key_heads: OptCount = None
    linear_num_value_heads: OptCount = None
    linear_key_head_dim: OptCount = None
    linear_value_head_dim: OptCount = None
    linear_conv_kernel_dim: OptCount = None

    # weights (parameter count)
    vocab_size: OptCount = None
    intermediate_size: OptCount = None
    mlp_kind: Literal["gated", "plain"] = "gated"
    tie_word_embeddings: StrictBool = False
    attention_bias: StrictBool = False
    n_experts: OptCount = None
    n_experts_per_token: OptCount = None
    moe_intermediate_size: OptCount = None
    shared_expert_intermediate_size: OptCount = None
    first_dense_layers: Count0 = 0
    moe_layer_period: Count = 1
    moe_layer_offset: Count0 = 0
    n_params: OptQuantity = None
    n_active_params: OptQuantity = None
    # storage format of the published checkpoint's decoder matrices (else `dtype`), and of its
    # routed experts when they differ (gpt-oss: MXFP4 experts, bf16 attention); --weight-dtype overrides
    weight_dtype: OptStr = None
    expert_weight_dtype: OptStr = None
    # the latent MoE's down / up projections (Kimi-K3 routed_expert_{down,up}_proj, Nemotron-3
    # fc1 / fc2_latent_proj) where the checkpoint stores them apart from the decoder matrices
    # (Kimi-K3: MXFP4 with the routed experts, its attention bf16); None: as `weight_dtype`
    latent_weight_dtype: OptStr = None
    # bytes of per-tensor scales each routed-expert matrix stores beside its format's block scales
    # (ModelOpt NVFP4: an fp32 weight_scale_2 and an fp32 input_scale, 8 B; 0: none counted)
    expert_tensor_scale_bytes: Count0 = 0
    # bytes of per-tensor scalars each quantized decoder matrix (one checkpoint module: q_proj,
    # k_proj, in_proj ...) stores beside its values (ModelOpt FP8: fp32 weight_scale and
    # input_scale; NVFP4: fp32 weight_scale_2 and input_scale: 8 B; 0: none counted)
    linear_tensor_scale_bytes: Count0 = 0
    # bytes of KV-cache scales each attention layer's checkpoint stores (ModelOpt
    # `kv_cache_quant_algo`: fp32 k_scale and v_scale, 8 B; 0: none)
    kv_scale_bytes: Count0 = 0
    # exact stored weight bytes from the checkpoint's own headers (safetensors / GGUF), when the
    # model came from a checkpoint; None: counted from the architecture
    checkpoint: CheckpointWeights | None = None

    @field_validator("layer_pattern", "layer_types")
    @classmethod
    def _kinds(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("must list at least one layer kind")
        out = []
        for k in v:
            key = str(k).strip().lower()
            if key not in LAYER_KIND_ALIASES:
                raise ValueError(f"unknown layer kind '{k}'; use full, sliding, mamba or linear")
            out.append(LAYER_KIND_ALIASES[key])
        return out

    @field_validator("weight_dtype", "expert_weight_dtype", "latent_weight_dtype")
    @classmethod
    def _weight_dtype(cls, v: str | None) -> str | None:
        from kvcalc.formats import weight_format

        try:
            return None if v is None else weight_format(v).name
        except Exception as e:  # UnknownNameError -> pydantic ValueError, with its hint (no CLI flag: a file's field)
            raise ValueError(getattr(e, "message", str(e))) from None

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, v: str) -> str:
        from kvcalc.formats import canonical_name

        try:
            return canonical_name(v)
        except Exception as e:  # UnknownNameError -> pydantic ValueError, with its hint (no CLI flag: a file's field)
            raise ValueError(getattr(e, "message", str(e))) from None

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> "ModelSpec":
        if (
            self.index_head_dim is not None
            and self.attention != "mla"
            and self.index_format != "kv"
            and self.compress_ratios is None
        ):
            raise field_error(
                "ModelSpec",
                "index_head_dim",
                "index_head_dim (DeepSeek-V3.2's indexer) needs "
                "attention: mla (or compress_ratios, or index_format: kv)",
            )
        self._check_2026(file_names(info))
        if self.mla_cache is not None and self.attention != "mla":
            raise field_error("ModelSpec", "mla_cache", "mla_cache (how llama.cpp caches MLA) needs attention: mla")
        if self.attention == "mla":
            missing = [f for f in ("kv_lora_rank", "qk_rope_head_dim") if getattr(self, f) is None]
            if missing:  # reported against the first field missing, as data
                raise field_error("ModelSpec", missing[0], f"attention: mla needs {' and '.join(missing)}")
            ignored = [f for f in ("n_kv_heads", "head_dim") if getattr(self, f) is not None]
            if ignored:
                raise ValueError(
                    f"{' and '.join(ignored)} mean nothing with attention: mla (the cache is one "
                    f"latent of kv_lora_rank + qk_rope_head_dim per token); remove {' and '.join(ignored)}"
                )
            kinds = set(self.layer_pattern or self.layer_types or [])
            if self.sliding_window is not None or "sliding" in kinds:
                raise ValueError(
                    "sliding_window with attention: mla is not supported (no published "
                    "model has sliding MLA layers); remove sliding_window"
                )
        else:
            self._check_heads(file_names(info))
        if self.layer_pattern is not None and self.layer_types is not None:
            raise ValueError("give layer_pattern or layer_types, not both")
        if self.layer_types is not None and len(self.layer_types) != self.n_layers:
            raise field_error(
                "ModelSpec",
                "layer_types",
                f"layer_types lists {len(self.layer_types)} layers but n_layers is {self.n_layers}",
            )
        if self.layer_pattern is not None and len(self.layer_pattern) > self.n_layers:
            # a pattern repeats over the layers: a longer one would be cut without a word
            raise field_error(
                "ModelSpec",
                "layer_pattern",
                f"layer_pattern lists {len(self.layer_pattern)} kinds but n_layers is {self.n_layers}; "
                f"a pattern repeats over the layers, so it cannot be longer (give layer_types for "
                f"one kind per layer)",
            )
        kinds = set(self.layer_pattern or self.layer_types or [])
        if "sliding" in kinds and self.sliding_window is None:
            raise ValueError("layers of kind 'sliding' need sliding_window")
        if self.n_experts_per_token and self.n_experts and self.n_experts_per_token > self.n_experts:
            raise ValueError("n_experts_per_token exceeds n_experts")
        limit = self.context_limit
        if self.rope_scaling is not None and limit is not None and not 1 <= limit <= MAX_SEQ_LEN:
            # a factor that leaves no token (int(131,072 x 1e-300) = 0) or a limit past every bound
            # would otherwise surface as a bad --seq-len the user never gave
            how = self.context_limit_label.removesuffix(")").split(" = ", 1)[-1]  # "linear factor 1e+06 x ..."
            raise field_error(
                "ModelSpec",
                "rope_scaling",
                f"makes the longest context {limit:,} tokens ({how}); kvcalc sizes 1 to "
                f"{MAX_SEQ_LEN:,} tokens: check its factor",
            )
        if self.checkpoint is not None and len(self.checkpoint.layer_bytes) != self.n_layers:
            raise field_error(
                "ModelSpec",
                "checkpoint",
                f"the checkpoint's tensors cover {len(self.checkpoint.layer_bytes)} layers "
                f"but n_layers is {self.n_layers}",
            )
        return self

    def _check_heads(self, name: dict[str, str]) -> None:
        """The attention geometry of a per-head model: KV heads at most the query heads and
        dividing them, a head size given or derivable. Each error is located at, and names, the
        field as the file it came from spells it (`name`: kvcalc field -> the file's key, from
        `file_names`), so a config.json's error says `num_key_value_heads`, a GGUF's
        `llama.attention.head_count_kv`, a kvcalc YAML's `n_kv_heads`."""

        def n(field: str) -> str:
            return name.get(field, field)

        kv, heads = self.n_kv_heads or self.n_heads, self.n_heads
        if kv > heads:
            raise field_error(
                "ModelSpec",
                n("n_kv_heads"),
                f"{n('n_kv_heads')} ({kv}) exceeds {n('n_heads')} ({heads}); each KV head serves one or "
                f"more query heads, so give at most {heads} (are the two fields swapped?)",
                kv,
            )
        if heads % kv:
            raise field_error(
                "ModelSpec",
                n("n_kv_heads"),
                f"{n('n_heads')} ({heads}) must be divisible by {n('n_kv_heads')} ({kv}); give a "
                f"{n('n_kv_heads')} that divides {heads}",
                kv,
            )
        if self.head_dim is None and self.hidden_size is None:
            raise field_error(
                "ModelSpec",
                n("head_dim"),
                f"give {n('head_dim')}, or {n('hidden_size')} to derive it as {n('hidden_size')} // {n('n_heads')}",
            )
        if self.head_dim is None and self.hidden_size is not None and self.hidden_size % heads:
            raise field_error(
                "ModelSpec",
                n("hidden_size"),
                f"{n('hidden_size')} ({self.hidden_size}) is not divisible by {n('n_heads')} ({heads}); "
                f"give {n('head_dim')}",
                self.hidden_size,
            )

    def _check_2026(self, names: dict[str, str]) -> None:
        """The per-layer lists and the 2026 fields agree with the layer count and each other; a
        layer kind's own KV heads (`kind_geometry`) are named as the file names them (`names`:
        `kind_geometry.full.n_kv_heads` -> Gemma-4's `num_global_key_value_heads`)."""
        for name in ("compress_ratios", "index_layers"):
            v = getattr(self, name)
            if v is not None and len(v) != self.n_layers:
                raise field_error("ModelSpec", name, f"{name} lists {len(v)} layers but n_layers is {self.n_layers}")
        if self.index_layers is not None:
            if self.index_head_dim is None:
                raise field_error("ModelSpec", "index_layers", "index_layers needs index_head_dim")
            if any(x not in (0, 1) for x in self.index_layers):
                raise field_error("ModelSpec", "index_layers", "index_layers lists 1 (an indexer) or 0 per layer")
        if self.compress_ratios is not None and any(r == 1 for r in self.compress_ratios):
            raise field_error(
                "ModelSpec", "compress_ratios", "a compress ratio is 0 (none) or above 1 (tokens per compressed entry)"
            )
        if self.n_kv_shared_layers >= self.n_layers:
            raise field_error(
                "ModelSpec",
                "n_kv_shared_layers",
                f"n_kv_shared_layers ({self.n_kv_shared_layers}) "
                f"must leave at least one of the {self.n_layers} layers with a cache of its own",
            )
        if self.v_is_k and (self.attention == "mla" or self.v_head_dim is not None):
            raise field_error(
                "ModelSpec",
                "v_is_k",
                "v_is_k (one cached tensor that is K and V) takes no "
                "v_head_dim and no attention: mla (whose latent is already both)",
            )
        for kind, g in (self.kind_geometry or {}).items():
            if self.attention == "mla":
                raise field_error("ModelSpec", "kind_geometry", "kind_geometry needs per-head attention, not mla")
            kv = g.n_kv_heads or self.n_kv_heads or self.n_heads
            field = names.get(f"kind_geometry.{kind}.n_kv_heads", "kind_geometry")
            heads = names.get("n_heads", "n_heads")
            what = field if field != "kind_geometry" else f"the {kind} layers' n_kv_heads"
            if kv > self.n_heads:
                raise field_error(
                    "ModelSpec",
                    field,
                    f"{what} ({kv}) exceeds {heads} ({self.n_heads}); each KV head serves one or more "
                    f"query heads, so give at most {self.n_heads}",
                    kv,
                )
            if self.n_heads % kv:
                raise field_error(
                    "ModelSpec",
                    field,
                    f"{heads} ({self.n_heads}) must be divisible by {what} ({kv})",
                    kv,
                )
        for k in self.attention_sinks or []:
            if LAYER_KIND_ALIASES.get(str(k).strip().lower()) not in ("full", "sliding"):
                raise field_error(
                    "ModelSpec", "attention_sinks", f"attention_sinks lists layer kinds (full, sliding), got '{k}'"
                )

    # ----- derived -------------------------------------------------------------------------

    @property
    def context_limit(self) -> int | None:
        """The longest context (tokens) vLLM allows for this config, as its
        `_get_and_verify_max_len` derives it (vllm/config/model.py, vLLM 0.11; vllm/config.py
        `_get_and_verify_max_len` since 0.6 has the same rule): max_position_embeddings, except
        that a rope_scaling whose type is not su / longrope / llama3 multiplies it by `factor`
        (1 when absent), YaRN starting from its original_max_position_embeddings when given;
        gemma3 configs are never scaled ("Gemma3's max_model_len (128K) is already scaled").
        Qwen3-4B with YaRN factor 4 over 32,768: int(32,768 x 4.0) = 131,072, not its 40,960.
        None when the config states no context at all."""
        base, r = self.max_position_embeddings, self.rope_scaling
        if r is None or r.rope_type in ROPE_TYPES_UNSCALED or "gemma3" in (self.model_type or ""):
            return base
        if r.rope_type == "yarn" and r.original_max_position_embeddings is not None:
            base = r.original_max_position_embeddings
        if base is None:
            return None
        return int(base * (r.factor if r.factor is not None else 1.0))

    @property
    def default_context(self) -> int | None:
        """The context vLLM serves when no --max-model-len is given (tokens): `context_limit`,
        except longrope, where vLLM defaults to original_max_position_embeddings "to avoid
        performance degradation for shorter sequences" (same function)."""
        r = self.rope_scaling
        if r is not None and r.rope_type in ("longrope", "su") and r.original_max_position_embeddings:
            return min(r.original_max_position_embeddings, self.context_limit or r.original_max_position_embeddings)
        return self.context_limit

    @property
    def context_limit_label(self) -> str:
        """The limit in words for messages: "max_position_embeddings (40,960)" when no rope
        scaling changes it, else "context limit (131,072 = yarn factor 4 x
        original_max_position_embeddings 32,768)"."""
        cap, r = self.context_limit, self.rope_scaling
        if cap is None:
            return "max_position_embeddings (none)"
        if cap == self.max_position_embeddings or r is None:
            return f"max_position_embeddings ({cap:,})"
        factor = f"{r.factor:g}" if r.factor is not None else "1"
        if r.rope_type == "yarn" and r.original_max_position_embeddings is not None:
            base = f"original_max_position_embeddings {r.original_max_position_embeddings:,}"
        else:
            base = f"max_position_embeddings {self.max_position_embeddings:,}"
        return f"context limit ({cap:,} = {r.rope_type} factor {factor} x {base})"

    @property
    def resolved_n_kv_heads(self) -> int:
        """KV heads per attention layer: `n_kv_heads`, else `n_heads` (MHA); 1 for MLA's latent."""
        if self.attention == "mla":
            return 1
        return self.n_kv_heads or self.n_heads

    @property
    def resolved_head_dim(self) -> int:
        """K head size: explicit `head_dim`, else hidden_size // n_heads; MLA: the latent width
        kv_lora_rank + qk_rope_head_dim."""
        if self.attention == "mla":
            lora, rope = self.kv_lora_rank, self.qk_rope_head_dim
            if lora is None or rope is None:  # the validator refuses MLA without them
                raise KvcalcError(
                    f"{self.name}: attention: mla needs kv_lora_rank and qk_rope_head_dim",
                    field="kv_lora_rank",
                    form=MESSAGE,
                )
            return lora + rope
        if self.head_dim is not None:
            return self.head_dim
        if self.hidden_size is None:  # the validator refuses a model with neither
            raise KvcalcError(
                f"{self.name}: give head_dim, or hidden_size to derive it as hidden_size // n_heads",
                field="head_dim",
                form=MESSAGE,
            )
        return self.hidden_size // self.n_heads

    @property
    def resolved_v_head_dim(self) -> int:
        """V head size as cached: `v_head_dim` if given, else the K head size; 0 for MLA."""
        if self.attention == "mla":
            return 0
        return self.v_head_dim or self.resolved_head_dim

    @property
    def attention_kind(self) -> str:
        """'mla', or by the KV-head count: 'mha' (= n_heads), 'mqa' (1), else 'gqa'."""
        if self.attention == "mla":
            return "mla"
        kv = self.resolved_n_kv_heads
        if kv == self.n_heads:
            return "mha"
        return "mqa" if kv == 1 else "gqa"

    @property
    def queries_per_kv_head(self) -> int:
        """Query heads per KV head (transformers' `num_key_value_groups`) (n_heads // n_kv_heads); n_heads for MLA's one latent."""
        return self.n_heads // self.resolved_n_kv_heads

    @property
    def layer_kinds(self) -> list[str]:
        """The kind of each layer, in order (length n_layers)."""
        if self.layer_types is not None:
            kinds = list(self.layer_types)
        elif self.layer_pattern is not None:
            p = self.layer_pattern
            kinds = [p[i % len(p)] for i in range(self.n_layers)]
        elif self.sliding_window is not None:
            kinds = ["sliding"] * self.n_layers
        else:
            kinds = ["full"] * self.n_layers
        if self.attention == "mla":
            kinds = ["mla" if k in ("full", "sliding") else k for k in kinds]
        return kinds

    @cached_property
    def dtype_format(self) -> StorageFormat:
        """The model's `dtype` as a `StorageFormat`, looked up once per model (the validator
        above has checked the name)."""
        from kvcalc.formats import storage_format

        return storage_format(self.dtype, field=None)

    @cached_property
    def checkpoint_formats(self) -> tuple[StorageFormat, StorageFormat]:
        """(decoder matrices, routed experts) as the config stores them: `weight_dtype` and
        `expert_weight_dtype`, each defaulting to the model's dtype; looked up once per model."""
        from kvcalc.formats import storage_format

        wf = storage_format(self.weight_dtype, field="weight_dtype") if self.weight_dtype else self.dtype_format
        ef = storage_format(self.expert_weight_dtype, field="weight_dtype") if self.expert_weight_dtype else wf
        return wf, ef

    @cached_property
    def latent_format(self) -> StorageFormat | None:
        """`latent_weight_dtype` as a `StorageFormat` (None when not given), looked up once per model."""
        from kvcalc.formats import storage_format

        return storage_format(self.latent_weight_dtype, field="weight_dtype") if self.latent_weight_dtype else None

    @cached_property
    def layers(self) -> tuple[LayerSpec, ...]:
        """The layer list (length n_layers), derived from the counts, the pattern and the 2026
        per-layer fields (`kind_geometry`, `v_is_k`, `n_kv_shared_layers`, `compress_ratios`,
        `index_layers`, `attention_sinks`)."""
        kinds = self.layer_kinds
        made: dict[tuple[object, ...], LayerSpec] = {}
        sinks = {LAYER_KIND_ALIASES[str(k).strip().lower()] for k in self.attention_sinks or []}
        first_shared = self.n_layers - self.n_kv_shared_layers
        out = []
        for i, kind in enumerate(kinds):
            ratio = self.compress_ratios[i] if self.compress_ratios is not None else 0
            indexed = (
                self.index_head_dim is not None
                and kind in ("mla", "full", "sliding")
                and (self.index_layers[i] if self.index_layers is not None else 1)
            )
            source = None
            if i >= first_shared and kind in ("full", "sliding", "mla"):
                earlier = [j for j in range(first_shared) if kinds[j] == kind]
                source = earlier[-1] if earlier else None
            key = (kind, ratio, indexed, source)
            if key not in made:
                made[key] = self._layer(kind, ratio, bool(indexed), source, kind in sinks)
            out.append(made[key])
        return tuple(out)

    def _layer(self, kind: str, ratio: int, indexed: bool, source: int | None, sinks: bool) -> LayerSpec:
        """One layer of `kind` with the model's geometry (its kind's where `kind_geometry` says)."""
        if kind in ("mamba", "linear"):
            return LayerSpec(kind=kind, state_values=self._state_values(kind))
        if kind == "mlp":
            return LayerSpec(kind="mlp")
        index = dict(index_dim=self.index_head_dim or 0, index_format=self.index_format) if indexed else {}
        if kind == "mla":
            return LayerSpec(
                kind="mla", n_kv_heads=1, head_dim_k=self.resolved_head_dim, head_dim_v=0, kv_source=source, **index
            )
        geo_kind: Literal["full", "sliding"] | None = (
            "full" if kind == "full" else "sliding" if kind == "sliding" else None
        )
        g = (self.kind_geometry or {}).get(geo_kind) if geo_kind is not None else None
        kv = (g.n_kv_heads if g and g.n_kv_heads else None) or self.resolved_n_kv_heads
        dk = (g.head_dim if g and g.head_dim else None) or self.resolved_head_dim
        dv = (
            0
            if self.v_is_k
            else (g.v_head_dim if g and g.v_head_dim else None)
            or (dk if g and g.head_dim else self.resolved_v_head_dim)
        )
        extra = dict(
            v_is_k=self.v_is_k, k_eq_v=bool(g and g.k_eq_v), kv_source=source, sink_heads=self.n_heads if sinks else 0
        )
        if ratio > 1:
            extra.update(compress_ratio=ratio, compressed_dim=dk)  # DeepSeek-V4: entries of head_dim
        if kind == "hybrid":
            return LayerSpec(
                kind="hybrid",
                n_kv_heads=kv,
                head_dim_k=dk,
                head_dim_v=dv,
                state_values=self._state_values("mamba"),
                **extra,
                **index,
            )
        return LayerSpec(
            kind=kind,
            n_kv_heads=kv,
            head_dim_k=dk,
            head_dim_v=dv,
            window=self.sliding_window if kind == "sliding" else None,
            **extra,
            **index,
        )

    def _state_values(self, kind: str) -> int:
        """Fixed state values per sequence of one mamba or linear layer (0 when unknown).

        mamba (Mamba-1, as in Jamba; vLLM `mamba_utils.py` MambaStateShapeCalculator):
        d_inner = expand x hidden; conv state d_inner x (d_conv - 1) + SSM state d_inner x d_state.
        Mamba-2 (`mamba_n_groups` set; `MambaStateShapeCalculator.mamba2_state_shape` at tp 1):
        d_inner = n_heads x head_dim; conv state (d_inner + 2 x n_groups x d_state) x (d_conv - 1)
        + SSM state n_heads x head_dim x d_state.
        linear (Gated DeltaNet, Qwen3-Next; vLLM `gdn_attn` state shapes): conv state
        (2 x key_heads x key_dim + value_heads x value_dim) x (kernel - 1) + recurrent state
        value_heads x key_dim x value_dim.
        """
        s, d_conv = self.mamba_d_state, self.mamba_d_conv
        if kind == "mamba" and self.mamba_n_groups is not None:
            h, hd = self.mamba_n_heads, self.mamba_head_dim
            if s is None or d_conv is None or h is None or hd is None:
                return 0
            d_inner = h * hd
            conv_dim = d_inner + 2 * self.mamba_n_groups * s
            return conv_dim * (d_conv - 1) + d_inner * s
        if kind == "mamba":
            expand, hidden = self.mamba_expand, self.hidden_size
            if s is None or d_conv is None or expand is None or hidden is None:
                return 0
            d_inner = expand * hidden
            return d_inner * (d_conv - 1) + d_inner * s
        hk, hv = self.linear_num_key_heads, self.linear_num_value_heads
        dk, dv, kernel = self.linear_key_head_dim, self.linear_value_head_dim, self.linear_conv_kernel_dim
        if hk is None or hv is None or dk is None or dv is None or kernel is None:
            return 0
        conv_dim = 2 * hk * dk + hv * dv
        return conv_dim * (kernel - 1) + hv * dk * dv


class Parallelism(_Frozen):
    """How the model is split: `tp` ranks share each layer's heads, `pp` stages split the
    layers, `dp` whole replicas each serve their own batch; inside a replica (`calc.parallel`)
    `dp_attention` ranks each hold their own sequences, `ep` GPUs divide the routed experts and
    `dcp` of the tp ranks divide each sequence's token positions."""

    tp: PositiveInt = 1
    pp: PositiveInt = 1
    dp: PositiveInt = 1
    dp_attention: PositiveInt = 1
    ep: PositiveInt = 1
    dcp: PositiveInt = 1

    @property
    def n_gpus(self) -> int:
        """tp x pp x dp_attention x dp."""
        return self.tp * self.pp * self.dp_attention * self.dp


class Workload(_Frozen):
    """What the cache must hold: `seq_len` tokens for each of `batch` sequences (per DP
    replica), K and V in these formats (`StorageFormat`s, resolved once by the request builder;
    a name given as text is looked up at construction, group options as in `formats.kv_format`)."""

    seq_len: PositiveInt
    batch: PositiveInt = 1
    k_dtype: FormatField
    v_dtype: FormatField
    parallel: Parallelism = Parallelism()
