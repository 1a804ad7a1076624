"""Hugging Face `config.json` -> `ModelSpec`: one small mapping per `model_type` family.

Each family function reads the fields its transformers configuration class reads, with that
class's defaults where a published config relies on them, and returns `ModelSpec` fields. The
rules that change the KV cache, each from the transformers source named beside it:

- an explicit `head_dim` wins over hidden_size / num_attention_heads (Qwen3-4B: 128, not 80);
- `num_key_value_heads` absent or null means MHA (every `configuration_*.py`);
- `layer_types` wins; else the family's default pattern (gemma2: even layers slide; gemma3:
  every `sliding_window_pattern`-th layer is global; gpt_oss: even layers slide; qwen2/qwen3:
  layers >= `max_window_layers` slide when `use_sliding_window`; qwen3_next: every
  `full_attention_interval`-th layer is full, the rest linear attention; jamba: attention every
  `attn_layer_period` layers from `attn_layer_offset`, the rest mamba);
- `sliding_window: null` means no window; `use_sliding_window: false` means none either;
- falcon: `multi_query: true` means one KV head unless `new_decoder_architecture`
  (`modeling_falcon.py` FalconAttention); old RefinedWeb configs with `n_head_kv` (falcon-40b)
  are the new architecture (vLLM `RWConfig`); gpt_bigcode: `multi_query` (default true) means
  one KV head; chatglm: `multi_query_group_num` KV heads of `kv_channels`; mpt / dbrx: their
  nested `attn_config.kv_n_heads`;
- every number is checked before any arithmetic: a JSON integer (never a boolean, 32.0, NaN or
  "8"), in range; a bad one is one `ConfigError` naming the file and the config field;
- MLA (deepseek_v2, deepseek_v3, kimi_k2): one latent of kv_lora_rank + qk_rope_head_dim per
  token; `num_key_value_heads` is not used.

A config whose `model_type` is not in the table is refused (`ConfigError`), never guessed: when
it carries a field that can shape the cache and that a plain decoder does not read (head counts or
sizes under other names, windows, latent ranks, compression, an indexer, sharing, chunking, layer
lists), the error names those fields; when every such field is one a plain decoder reads, the
error says so, and the user may accept the guess knowingly (`--trust-plain-decoder`, or
`model_from_hf_config(..., trust_plain_decoder=True)`): the model is then read as a plain decoder,
a `KvcalcWarning` says it was a guess, and its `source` says so too. Nothing here reads files:
`kvcalc.load.models` passes the parsed dict.
"""

from __future__ import annotations

import re
import warnings
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING

from kvcalc.errors import ConfigError, KvcalcError, KvcalcWarning
from kvcalc.load.fields import ModelFields
from kvcalc.load.files import build
from kvcalc.load.hf.families import FAMILIES, TEXT_MODEL_TYPES
from kvcalc.load.hf.reader import _Cfg, _decoder, _kinds_from_layer_types, _set_kinds, _shown
from kvcalc.schema import ModelSpec

if TYPE_CHECKING:
    from kvcalc.json_types import JsonObject
    from kvcalc.load.hf.quant import Quantization

#: fields that change the cache in ways a plain decoder cannot express: an unknown model_type
#: carrying any of them fails rather than giving a wrong number.
#: Each changes the KV heads, the head size, which layers cache or what they cache:
#: multi_query (gpt_bigcode / falcon: one KV head), multi_query_attention and
#: multi_query_group_num (chatglm), kv_channels (chatglm's head size), n_kv_heads / kv_n_heads /
#: num_kv_groups / num_key_value_groups (other spellings of the KV heads, not read generically),
#: attn_config (MPT / DBRX nest theirs), cross_attention_layers (mllama: those layers cache the
#: image tokens, not the text), v_head_dim / qk_rope_head_dim / q_lora_rank (MLA-style heads),
#: num_kv_shared_layers (gemma3n: layers reuse another layer's cache), attention_chunk_size
#: (llama4 chunked attention), global_attn_every_n_layers / attention_types / attention_window /
#: local_attention / sliding_window_size (other window spellings), and the hybrid patterns.
_UNSIZABLE = (
    "kv_lora_rank",
    "attn_layer_period",
    "full_attention_interval",
    "sliding_window_pattern",
    "mamba_d_state",
    "ssm_state_size",
    "linear_num_key_heads",
    "interleaved_sliding_window",
    "attention_chunk_size",
    "no_rope_layers",
    "hybrid_override_pattern",
    "layers_block_type",
    "block_types",
    "attention_type",
    "attention_layers",
    "multi_query",
    "multi_query_attention",
    "multi_query_group_num",
    "kv_channels",
    "n_kv_heads",
    "kv_n_heads",
    "num_kv_groups",
    "num_key_value_groups",
    "attn_config",
    "cross_attention_layers",
    "v_head_dim",
    "qk_rope_head_dim",
    "q_lora_rank",
    "num_kv_shared_layers",
    "global_attn_every_n_layers",
    "attention_types",
    "attention_window",
    "local_attention",
    "sliding_window_size",
    "block_configs",
    "attn_type_list",
    "layer_block_types",
    # state-space models (transformers MambaConfig / Mamba2Config: state_size, conv_kernel,
    # n_groups; mamba_ssm's ssm_cfg / d_state): their layers keep a fixed state, no K and V
    "state_size",
    "conv_kernel",
    "n_groups",
    "ssm_cfg",
    "d_state",
    "time_step_rank",
)

#: why a field in _UNSIZABLE matters, for the error line.
_WHY = {
    "multi_query": "one KV head",
    "multi_query_group_num": "the KV heads",
    "kv_channels": "the head size",
    "cross_attention_layers": "those layers cache the image tokens, not the text",
    "attention_chunk_size": "chunked attention caches only the current chunk",
    "num_kv_shared_layers": "layers that reuse another layer's cache",
    "state_size": "state-space (Mamba) layers: a fixed state per sequence, no per-token cache",
    "n_groups": "Mamba-2 state groups",
    "conv_kernel": "a Mamba convolution state",
}

#: whether a config of an unmapped model_type whose cache-shaping fields a plain decoder all
#: reads may be read as one (a guess the user accepted: `--trust-plain-decoder`); set around a load
#: by `kvcalc.load.models.load_model(..., trust_plain_decoder=True)`, so every path to a config.json
#: (a file, a checkpoint folder, a Hub id) sees it
TRUST_PLAIN_DECODER: ContextVar[bool] = ContextVar("trust_plain_decoder", default=False)

#: the config keys a plain decoder reads (`_generic`), and those that never shape the cache
_PLAIN_READS = frozenset(
    {
        "num_hidden_layers",
        "n_layer",
        "num_layers",
        "num_attention_heads",
        "n_head",
        "num_heads",
        "hidden_size",
        "n_embd",
        "d_model",
        "num_key_value_heads",
        "num_kv_heads",
        "n_head_kv",
        "head_dim",
        "max_position_embeddings",
        "n_positions",
        "max_seq_len",
        "vocab_size",
        "intermediate_size",
        "tie_word_embeddings",
        "attention_bias",
        "layer_types",
        "sliding_window",
        "use_sliding_window",
        "rope_scaling",
        "rope_parameters",
        "torch_dtype",
        "dtype",
        "model_type",
        "_name_or_path",
        "quantization_config",
    }
)
_NEVER_CACHE = frozenset(
    {
        "attention_dropout",
        "attn_pdrop",
        "resid_pdrop",
        "embd_pdrop",
        "attn_logit_softcapping",
        "final_logit_softcapping",
        "_attn_implementation",
        "attn_implementation",
        "output_attentions",
        "use_cache",
        "max_window_layers",
        "num_key_value_groups_in_kernel",
        "attention_multiplier",
        "query_pre_attn_scalar",
        "attention_scale",
        "attn_scale",
        "use_qk_norm",
        "qk_layernorm",
        "num_beam_groups",
        "n_group",
        "topk_group",
        "num_expert_group",
        "decoder_sparse_step",
        "rope_local_base_freq",
    }
)
_OTHER_TOWERS = frozenset({"vision_config", "audio_config", "speech_config", "text_config", "vision_tower"})
#: words in a config key that mean it may shape the cache: head counts and sizes, windows, latent
#: ranks, compression, an indexer, sharing, chunking, per-layer lists, state-space and linear layers
_CACHE_WORDS = re.compile(
    r"head|kv|key_value|value|window|sliding|swa|lora|rank|compress|index|shar|chunk|"
    r"layer_type|pattern|attn|attention|state|conv|ssm|mamba|linear|sink|global|local|"
    r"mla|sparse|latent|group|block_type|hybrid|nope|rope_dim|cross"
)


def _unconsumed_cache_fields(data: JsonObject) -> list[str]:
    """The keys of `data` (a config of an unmapped model_type) that may shape the cache and that
    a plain decoder does not read: any key with a cache word in its name (`_CACHE_WORDS`) that is
    neither read (`_PLAIN_READS`) nor known not to shape the cache (`_NEVER_CACHE`), and is set
    (not null, false, 0 or empty). Sub-configs of other towers (vision_config, audio_config) are
    not the text model's."""
    out = []
    for k, v in data.items():
        if k in _PLAIN_READS or k in _NEVER_CACHE or k in _OTHER_TOWERS:
            continue
        if v in (None, False, 0, [], {}, "") or not _CACHE_WORDS.search(k.lower()):
            continue
        out.append(k)
    return out


#: model_types that are state-space models whatever fields they carry (transformers `mamba`,
#: `mamba2`, `falcon_mamba`): refused by name, never read as attention layers
_STATE_SPACE_TYPES = ("mamba", "mamba2", "falcon_mamba")

#: weight dtype when the config names none: gpt2's and gpt_bigcode's checkpoints are fp32 (their
#: configs predate torch_dtype); the rest default bf16.
DEFAULT_DTYPE = {"gpt2": "fp32", "gpt_bigcode": "fp32"}


def _generic(c: _Cfg) -> ModelFields:
    """An unknown model_type as a plain decoder (LlamaConfig fields, old GPT-2 names too), only
    when the user accepted the guess (`TRUST_PLAIN_DECODER`) and every field that can shape the
    cache is one the plain reading consumes; warns that it is a guess. Raises `ConfigError`
    naming the fields a plain decoder would ignore, or, with none, saying how to accept the guess."""
    if c.model_type.lower() in _STATE_SPACE_TYPES:
        raise c.fail(
            f"model_type '{c.model_type}' is a state-space model: its layers keep a fixed state per "
            "sequence and no per-token KV cache, which kvcalc cannot size from this config; write a "
            "kvcalc YAML with mamba layers (see configs/models/)",
            field="model_type",
        )
    odd = [k + (f" ({_WHY[k]})" if k in _WHY else "") for k in _UNSIZABLE if c.data.get(k) not in (None, False, [], {})]
    window = c.count("sliding_window") if c.flag("use_sliding_window", default=True) else None
    if window and c.get("layer_types") is None:
        odd.append("sliding_window (which layers slide is family-specific)")
    listed = {k.split(" ", 1)[0] for k in odd}
    odd += [k for k in _unconsumed_cache_fields(c.data) if k not in listed]
    if odd:
        raise c.fail(
            f"model_type '{c.model_type}' is not one kvcalc maps, and its "
            f"{', '.join(odd)} cannot be sized without a mapping; write a kvcalc YAML "
            "(see configs/models/) or ask for the family to be added"
        )
    if not TRUST_PLAIN_DECODER.get():
        raise c.fail(
            f"model_type '{c.model_type}' is not one kvcalc maps; every field of it that shapes the cache is "
            "one a plain decoder reads (every layer full attention, explicit head_dim or hidden_size / "
            "num_attention_heads), but that is a guess: pass --trust-plain-decoder to accept it, or write "
            "a kvcalc YAML (see configs/models/)",
            field="model_type",
        )
    f = _decoder(
        c,
        layer_keys=("num_hidden_layers", "n_layer", "num_layers"),
        head_keys=("num_attention_heads", "n_head", "num_heads"),
        hidden_keys=("hidden_size", "n_embd", "d_model"),
        kv_keys=("num_key_value_heads", "num_kv_heads", "n_head_kv"),
    )
    if f["max_position_embeddings"] is None:
        f["max_position_embeddings"] = c.count("n_positions", "max_seq_len")
    c.check_missing()
    warnings.warn(
        f"{c.path or 'config'}: model_type '{c.model_type}' has no kvcalc mapping; read it "
        "as a plain decoder (every layer full attention, explicit head_dim or "
        "hidden_size / num_attention_heads): a guess, accepted by --trust-plain-decoder; check the "
        "result",
        KvcalcWarning,
        stacklevel=3,
    )
    kinds = _kinds_from_layer_types(c, f["n_layers"]) if c.get("layer_types") is not None else None
    return _set_kinds(c, f, kinds, window if kinds else None)


# ----- entry point -------------------------------------------------------------------------


def _dtype(data: JsonObject, outer: JsonObject, model_type: str, path: str | None) -> str:
    """`torch_dtype` or `dtype` (the text config's, else the top level's) as a kvcalc format
    name; bf16 when absent, except the families in DEFAULT_DTYPE."""
    from kvcalc.errors import UnknownNameError
    from kvcalc.formats import canonical_name

    for d in (data, outer):
        for key in ("torch_dtype", "dtype"):
            v = d.get(key)
            if v is not None and not isinstance(v, str):
                raise ConfigError(
                    f'must be a dtype name such as "bfloat16", got {_shown(v)}',
                    path=path,
                    field=key if d is outer or data is outer else f"text_config.{key}",
                )
            if isinstance(v, str) and v != "auto":
                try:
                    return canonical_name(v.removeprefix("torch."))
                except UnknownNameError as e:
                    raise ConfigError(str(e), path=path, field=key) from None
    if model_type not in DEFAULT_DTYPE:
        import warnings

        from kvcalc.errors import KvcalcWarning

        warnings.warn(
            f"{path or 'config'}: no torch_dtype; assuming bf16, as most published checkpoints "
            "are (give --kv-dtype, or add dtype to the YAML, if yours differs)",
            KvcalcWarning,
            stacklevel=2,
        )
    return DEFAULT_DTYPE.get(model_type, "bf16")


def _name(data: JsonObject, outer: JsonObject, path: str | None, model_type: str) -> str:
    """`_name_or_path`'s last part, else the file's folder (for config.json) or stem; lower case."""
    for d in (outer, data):
        v = d.get("_name_or_path")
        if isinstance(v, str) and v.strip().strip("/"):
            return v.strip().rstrip("/").replace("\\", "/").split("/")[-1].lower()
    if path:
        p = Path(path)
        stem = p.parent.name if p.stem.lower() == "config" and p.parent.name else p.stem
        if stem:
            return stem.lower()
    return model_type.lower() or "model"


#: a Hugging Face Hub id as `_name_or_path` writes it: `org/name`, no more parts, not a path
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]*[A-Za-z0-9_]$")


def _model_path(data: JsonObject, outer: JsonObject, path: str | None) -> str | None:
    """What an engine loads for this config.json (`ModelSpec.model_path`): its `_name_or_path`
    where that is a Hub id (`org/name`, not a local path: `/models/x`, `./x`, `x/config.json`),
    else the folder that holds the file (absolute: the checkpoint folder an engine reads the
    config.json and weights from); None for a dict read without a path."""
    for d in (outer, data):
        v = d.get("_name_or_path")
        if isinstance(v, str) and _HUB_ID.match(v.strip()) and not v.strip().lower().endswith(_FILE_ENDINGS):
            return v.strip()
    if path:
        return str(Path(path).expanduser().resolve().parent)
    return None


#: the endings of a file, not a Hub repository, in `_name_or_path`
_FILE_ENDINGS = (".json", ".yaml", ".yml", ".gguf", ".safetensors", ".bin")


#: transformers v5 `rope_parameters` may be one dict per layer type (`ALLOWED_LAYER_TYPES`)
_ROPE_LAYER_KEYS = (
    "full_attention",
    "sliding_attention",
    "chunked_attention",
    "linear_attention",
    "compressed_sparse_attention",
    "heavily_compressed_attention",
)


def _rope_scaling(c: _Cfg, outer: JsonObject) -> ModelFields | None:
    """`rope_parameters` (transformers v5) or `rope_scaling` as `RopeScaling` fields, normalised
    as vLLM's `patch_rope_parameters` does (`type` -> `rope_type`, `su` -> `longrope`, `mrope` ->
    `default`); a per-layer-type dict gives the entry that scales (vLLM assumes they agree).
    longrope takes the config's top-level original_max_position_embeddings (Phi-3), which vLLM
    serves by default. None when the config has neither or a plain default rope."""
    key = "rope_parameters" if c.data.get("rope_parameters") is not None else "rope_scaling"
    raw = c.mapping(key)
    if not raw:
        return None
    entries = [raw]
    if all(k in _ROPE_LAYER_KEYS for k in raw):
        entries = [v for v in raw.values() if isinstance(v, dict)] or [{}]
    chosen = entries[0]
    for e in entries:
        t = e.get("rope_type", e.get("type"))
        if t not in (None, "default", "su", "longrope", "llama3"):
            chosen = e
            break
    rope_type = chosen.get("rope_type", chosen.get("type", "default"))
    if not isinstance(rope_type, str) or not rope_type:
        raise c.fail(f'rope_type must be a name such as "yarn", got {_shown(rope_type)}', key)
    rope_type = {"su": "longrope", "mrope": "default"}.get(rope_type, rope_type)
    factor = chosen.get("factor")
    if factor is not None and (
        isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 2**20
    ):  # an int or a float (JSON's numbers), not true / false
        raise c.fail(f"factor must be a positive number such as 4.0, got {_shown(factor)}", key)
    orig = chosen.get("original_max_position_embeddings")
    if rope_type == "longrope" and orig is None:
        orig = c.data.get("original_max_position_embeddings", outer.get("original_max_position_embeddings"))
    if orig is not None:
        orig = c.check_int(
            f"{key}.original_max_position_embeddings"
            if "original_max_position_embeddings" in chosen
            else "original_max_position_embeddings",
            orig,
        )
    if rope_type == "default" and factor is None:
        return None
    return {
        "rope_type": rope_type,
        "factor": None if factor is None else float(factor),
        "original_max_position_embeddings": orig,
    }


def _model_type(data: JsonObject, path: str | None, field: str) -> str:
    """`model_type` as a string ('' when absent or null); anything else is refused."""
    v = data.get("model_type")
    if v is None:
        return ""
    if not isinstance(v, str):
        raise ConfigError(f'must be a string such as "llama", got {_shown(v)}', path=path, field=field)
    return v


def model_fields_from_hf_config(
    data: JsonObject,
    path: str | None = None,
    *,
    trust_plain_decoder: bool | None = None,
    hf_quant: JsonObject | None = None,
    names: dict[str, str] | None = None,
) -> ModelFields:
    """The `ModelSpec` fields (name and source first, only those set) for a Hugging Face
    config dict. A multimodal config's `text_config` is read as the model; its dtype and name
    fall back to the top level. `names`, when given, is filled with the config's own key of
    each geometry field (`{"n_kv_heads": "num_key_value_heads"}`, `text_config.` first for a
    multimodal config), for `kvcalc.load.files.build(..., names=names)`.

    Raises `ConfigError` naming the file and the missing or unsizable fields; warns
    (`KvcalcWarning`) for an unknown model_type read as a plain decoder.
    """
    outer = data
    top_type = _model_type(data, path, "model_type")
    text = data.get("text_config")
    if text is not None and not isinstance(text, dict):
        raise ConfigError(
            f"must be a JSON object (the text model's config), got {_shown(text)}", path=path, field="text_config"
        )
    if text is not None:
        data = text
        model_type = _model_type(text, path, "text_config.model_type") or TEXT_MODEL_TYPES.get(top_type, top_type)
    else:
        model_type = top_type
    c = _Cfg(data, path, model_type or "(none)")
    fn = FAMILIES.get(model_type, _generic)
    if trust_plain_decoder is None:
        fields = fn(c)
    else:
        token = TRUST_PLAIN_DECODER.set(trust_plain_decoder)
        try:
            fields = fn(c)
        finally:
            TRUST_PLAIN_DECODER.reset(token)
    fields.setdefault("rope_scaling", _rope_scaling(c, outer))
    c.check_missing()
    if names is not None:
        names.update(c.file_names("text_config." if text is not None else ""))
    shown_type = model_type if model_type == top_type or not top_type else f"{top_type} > {model_type}"
    out: ModelFields = {
        "name": _name(data, outer, path, model_type),
        "model_path": _model_path(data, outer, path),
        "source": f"{path or '<dict>'} (HF config.json, model_type {shown_type or 'none'}"
        + ("; read as a plain decoder: a guess, --trust-plain-decoder)" if fn is _generic else ")"),
        "model_type": model_type or None,
        "dtype": _dtype(data, outer, model_type, path),
    }
    out.update(fields)
    if "quantization_config" in outer or "quantization_config" in data:  # the checkpoint's own weight format
        from kvcalc.load.hf.quant import read_quantization

        quant = read_quantization(
            outer,
            dtype=out["dtype"],
            n_layers=out.get("n_layers") or 1,
            moe=bool(out.get("n_experts")),
            path=path,
            hidden_size=out.get("hidden_size"),
            latent=bool(out.get("moe_latent_size")),
        )
        if quant is not None:
            out.update(quant.fields())
            _check_scale_groups(out, quant, path)
    if hf_quant is not None:  # ModelOpt's hf_quant_config.json beside config.json: its formats win
        from kvcalc.load.hf.quant import read_hf_quant_config

        modelopt = read_hf_quant_config(
            hf_quant, n_layers=out.get("n_layers") or 1, moe=bool(out.get("n_experts")), path=path
        )
        if modelopt is not None:
            out.update(modelopt.fields())
            out["source"] = out["source"][:-1] + "; weight formats from hf_quant_config.json)"
    return {k: v for k, v in out.items() if v is not None}


def _check_scale_groups(fields: ModelFields, quant: Quantization, path: str | None) -> None:
    """Raise `ConfigError` naming the file and the quantization field (`quant.field`: the fp8
    `weight_block_size`, a GPTQ / AWQ `group_size`, the compressed-tensors `config_groups`) when the
    architecture's decoder matrices are not whole groups or blocks of it (a [100, 100] block over
    4,096-wide matrices), so the problem is reported here, against the config, rather than later
    by the weight count without a file. Configs kvcalc cannot count from the architecture (their
    fields are checked when they are built) pass."""
    from kvcalc.calc.weights import weight_bytes

    try:
        spec = ModelSpec.model_validate({k: v for k, v in fields.items() if v is not None})
        weight_bytes(spec)
    except KvcalcError as e:
        if e.field == "weight_dtype":
            raise ConfigError(
                f"{e.reason}: this weight format comes from the checkpoint's quantization_config; check its "
                "group or block size",
                path=path,
                field=quant.field,
            ) from None
    except ValueError:  # pydantic's ValidationError: reported when the spec is built
        pass


def model_from_hf_config(
    data: JsonObject,
    path: str | None = None,
    *,
    trust_plain_decoder: bool | None = None,
    hf_quant: JsonObject | None = None,
) -> ModelSpec:
    """A `ModelSpec` from a Hugging Face config.json dict (see `model_fields_from_hf_config`;
    `trust_plain_decoder`: accept an unmapped model_type read as a plain decoder, None: as the
    current load says, `TRUST_PLAIN_DECODER`).

    Raises `ConfigError` (file and field named) for a missing field, an unsizable feature, an
    unmapped model_type or a value the schema refuses.
    """
    names: dict[str, str] = {}
    fields = model_fields_from_hf_config(
        data, path, trust_plain_decoder=trust_plain_decoder, hf_quant=hf_quant, names=names
    )
    return build(ModelSpec, fields, path, names=names)


# ----- kvcalc YAML out ---------------------------------------------------------------------

#: header of a converted file; `{source}` is filled in.
