"""GGUF files of the 2026 architectures: their metadata read into the same `ModelSpec` fields a
Hugging Face config.json of the model gives (`kvcalc.load.hf.families_2026`, `families_hybrid`),
as llama.cpp 0c1e570 (llama-cpp-python 0.3.36's `vendor/llama.cpp`) reads the file. Called by
`kvcalc.load.gguf.model_fields_from_gguf` for the architectures of `MODEL_TYPES`; that module adds
the name, source, file type and the weights of the tensor table.

Every block counts `{arch}.block_count` layers, of which the last `{arch}.nextn_predict_layers`
are NextN / MTP blocks (`llama_hparams::n_layer()` = n_layer_all - n_layer_nextn,
`src/llama-hparams.cpp` 348): the model's layers are the others (`n_layers`), the MTP blocks are
`n_mtp_layers`, and a per-layer array is read for the first n_layers entries. Per architecture
(`load_arch_hparams` in `src/models/<arch>.cpp`; the converter that writes the keys in
`conversion/<family>.py`):

- `gemma4` (Gemma-4; `src/models/gemma4.cpp` 4-30, `conversion/gemma.py` 671-733): the
  `attention.sliding_window_pattern` bool array says which layers slide (window
  `attention.sliding_window`); sliding layers have heads of `attention.key_length_swa`, full ones
  of `attention.key_length` (K = V sizes: llama.cpp refuses a file where they differ);
  `attention.head_count_kv` per layer (the converter writes num_key_value_heads on the sliding
  layers, num_global_key_value_heads on the full ones); the last `attention.shared_kv_layers`
  layers read an earlier layer's cache (`n_layer_kv_from_start`); experts beside a dense MLP
  (`expert_count`, `expert_feed_forward_length`: the dense MLP is counted as a shared expert, as
  the config reader does). K = V projection (`attention_k_eq_v`, weights only) is read from the
  tensor table: a full layer with `attn_k` and no `attn_v` / `attn_qkv`.
- `mimo2` (MiMo-V2-Flash; `src/models/mimo2.cpp` 3-20, `conversion/mimo.py` 159-190): the
  pattern array (1 sliding), `attention.head_count_kv` per layer (num_key_value_heads on full
  layers, swa_num_key_value_heads on sliding ones), `attention.key_length` / `value_length`;
  `attention.sliding_window` is the config's sliding_window, llama.cpp's n_swa, which is both
  the window (llama.cpp's mask keeps n_swa positions, the query's own included) and
  `gguf_sliding_window`. Attention sinks from the tensor table (`attn_sinks`).
- `deepseek32` (DeepSeek-V3.2), `glm-dsa` (GLM-5): MLA as `deepseek2` (a latent of
  `attention.kv_lora_rank` + `rope.dimension_count`; `key_length_mla` / `value_length_mla` the
  per-head sizes: a file without them is refused), the lightning indexer's key
  `attention.indexer.key_length` (one head). GLM-5 keeps the indexer on the layers
  `attention.indexer.types` marks (1 "full", 0 "shared"), and without the key on every layer when
  context_length < 1,048,576 (GLM-5 / 5.1) or on `GLM_5_2_DEFAULT_INDEXER_TYPES`
  (`src/models/glm-dsa.cpp` 6-27, 58-65).
- `deepseek4` (DeepSeek-V4; `src/models/deepseek4.cpp` load_arch_hparams): one KV head of
  `attention.key_length` (512: K = V rows), every layer sliding (`set_swa_pattern(0)`, window
  `attention.sliding_window`), `attention.compress_ratios` per layer (0, 4 or 128; at least
  block_count entries), the indexer key on the ratio-4 layers. NextN blocks count only when the
  tensor table holds `blk.{n_layer}.nextn.eh_proj.weight` (llama.cpp's probe).
- `kimi-k3` (Kimi-K3; `src/models/kimi-k3.cpp` load_arch_hparams): MLA latent on the layers with
  `attention.head_count_kv` > 0, Kimi Delta Attention where it is 0 (`is_recr`), its state
  sized by `attention.head_count` heads of `kda.head_dim` and `ssm.conv_kernel`
  (`src/llama-hparams.cpp` n_embd_r / n_embd_s for KDA).
- `minimax-m3` (MiniMax-M3; `src/models/minimax-m3.cpp` load_arch_hparams,
  `src/llama-kv-cache-msa.cpp` 13-50): GQA on every layer, the indexer key
  (`attention.indexer.key_length`) on the layers past `leading_dense_block_count`.
- `qwen35`, `qwen35moe` (Qwen3.5; `src/models/qwen35.cpp` load_arch_hparams): Gated DeltaNet
  layers where `attention.recurrent_layers` says so, else every layer but each
  `full_attention_interval`-th (default 4); the DeltaNet sizes as llama.cpp reads them:
  `ssm.group_count` key heads of `ssm.state_size`, `ssm.time_step_rank` value heads of
  `ssm.inner_size` / time_step_rank, `ssm.conv_kernel`.

Refused by name (`ConfigError` naming the file and key): a missing key llama.cpp requires, a
per-layer array of the wrong length, head counts that differ within one kind of layer, a
Gemma-4 K head size unlike its V size, an MLA file without `key_length_mla`, a compress ratio
other than 0, 4 and 128.
"""

from __future__ import annotations

from collections.abc import Callable
from types import EllipsisType
from typing import TYPE_CHECKING, overload

from kvcalc.load.fields import ModelFields
from kvcalc.load.hf.reader import compact_layers

if TYPE_CHECKING:
    from kvcalc.load.gguf import GgufHeader, _Meta

#: GGUF architecture -> the config model_type whose `ModelSpec` it gives (the engines key their
#: 2026 rules on it: `kvcalc.engines.llamacpp.models_2026`, `dsv4`)
MODEL_TYPES: dict[str, str] = {
    "gemma4": "gemma4_text",
    "mimo2": "mimo_v2_flash",
    "deepseek32": "deepseek_v32",
    "glm-dsa": "glm_moe_dsa",
    "deepseek4": "deepseek_v4",
    "kimi-k3": "kimi_linear",
    "minimax-m3": "minimax_m3",
    "qwen35": "qwen3_5_text",
    "qwen35moe": "qwen3_5_moe_text",
}

#: `src/models/glm-dsa.cpp` 6-27: GLM-5.2's indexer layers (1 "full"), read when the file has no
#: `attention.indexer.types` and context_length is 1,048,576 or more; 0 past the list
GLM_5_2_DEFAULT_INDEXER_TYPES = (1, 1) + (1, 0, 0, 0) * 19
#: `src/models/glm-dsa.cpp` 62: files with a shorter context are GLM-5 / 5.1 (every layer full)
GLM_PRE_5_2_CONTEXT = 1_048_576
#: `src/llama-kv-cache-dsv4.cpp` 18-19: the compress ratios llama.cpp gives a cache
DSV4_RATIOS = (0, 4, 128)


class _Layers:
    """The block counts of one file: `n_all` (block_count), `n` (the model's layers), `nextn`."""

    def __init__(self, m: _Meta, header: GgufHeader, arch: str, max_layers: int) -> None:
        self.n_all = m.count("block_count", maximum=max_layers)
        nextn = m.count("nextn_predict_layers", 0, minimum=0, maximum=self.n_all - 1)
        if arch == "deepseek4" and nextn:  # llama.cpp's probe: no MTP tensor, no NextN block
            probe = f"blk.{self.n_all - nextn}.nextn.eh_proj.weight"
            if probe not in {t.name for t in header.tensors}:
                nextn = 0
        self.nextn, self.n = nextn, self.n_all - nextn


@overload
def _per_layer(m: _Meta, name: str, lay: _Layers) -> list[int]: ...
@overload
def _per_layer(m: _Meta, name: str, lay: _Layers, default: list[int]) -> list[int]: ...
@overload
def _per_layer(m: _Meta, name: str, lay: _Layers, default: None) -> list[int] | None: ...
def _per_layer(m: _Meta, name: str, lay: _Layers, default: list[int] | None | EllipsisType = ...) -> list[int] | None:
    """`{arch}.name` for the model's layers: a number for every layer, or an array of block_count
    (or just the model's n) entries, of which the first n are read."""
    v = m.h.metadata.get(m.key(name))
    if isinstance(v, tuple) and len(v) == lay.n and lay.n != lay.n_all:
        return m.per_layer(name, lay.n)
    values = m.per_layer(name, lay.n_all) if default is ... else m.per_layer(name, lay.n_all, default)
    return None if values is None else values[: lay.n]


def _flags(m: _Meta, name: str, lay: _Layers, default: tuple[int, ...] | None = None) -> list[bool] | None:
    """A per-layer array of booleans (or 0 / 1) with at least the model's n entries, the first n
    read; `default` (padded with 0) when absent, None when absent without one."""
    v = m.h.metadata.get(m.key(name))
    if v is None:
        if default is None:
            return None
        v = tuple(default) + (0,) * max(lay.n - len(default), 0)
    if not isinstance(v, tuple) or any(type(x) not in (bool, int) or x not in (0, 1) for x in v):
        raise m.fail(name, "must be an array of booleans (or 0 / 1), one per layer")
    if len(v) < lay.n:
        raise m.fail(name, f"lists {len(v)} layers but the model has {lay.n}")
    return [bool(x) for x in v[: lay.n]]


def _one(m: _Meta, name: str, values: list[int], what: str) -> int:
    """The one value `values` holds (layers of one kind); refused when they differ."""
    distinct = sorted(set(values))
    if len(distinct) != 1:
        raise m.fail(
            name,
            f"gives {what} {', '.join(map(str, distinct[:4]))}: kvcalc models one count per kind of layer",
        )
    return distinct[0]


def _names(header: GgufHeader) -> set[str]:
    return {t.name for t in header.tensors}


def _mla(m: _Meta) -> ModelFields:
    """MLA's fields as `deepseek2` files carry them since llama.cpp PR #12801 (the latent cache):
    kv_lora_rank, rope.dimension_count, key_length_mla (nope + rope), value_length_mla."""
    if not m.has("attention.key_length_mla"):
        raise m.fail(
            "attention.key_length_mla",
            "is missing: this file predates llama.cpp's MLA latent cache (PR #12801), which these "
            "architectures need; convert the model again with a current llama.cpp",
        )
    rope = m.count("rope.dimension_count")
    k_head = m.count("attention.key_length_mla")
    if k_head <= rope:
        raise m.fail("rope.dimension_count", f"({rope}) must be less than key_length_mla ({k_head})")
    return {
        "attention": "mla",
        "kv_lora_rank": m.count("attention.kv_lora_rank"),
        "qk_rope_head_dim": rope,
        "qk_nope_head_dim": k_head - rope,
        "v_head_dim": m.count("attention.value_length_mla"),
        "q_lora_rank": m.count("attention.q_lora_rank", None),
        "mla_cache": "latent",
    }


def _gemma4(m: _Meta, header: GgufHeader, lay: _Layers, f: ModelFields) -> None:
    slides = _flags(m, "attention.sliding_window_pattern", lay)
    if slides is None:
        raise m.fail("attention.sliding_window_pattern", "is missing; a gemma4 model needs it")
    k_full, v_full = m.count("attention.key_length"), m.count("attention.value_length")
    k_swa, v_swa = m.count("attention.key_length_swa"), m.count("attention.value_length_swa")
    if k_full != v_full or k_swa != v_swa:
        raise m.fail(
            "attention.value_length" if k_full != v_full else "attention.value_length_swa",
            'differs from the key length; llama.cpp refuses it ("Gemma 4 requires n_embd_head_k == n_embd_head_v")',
        )
    kv = _per_layer(m, "attention.head_count_kv", lay, None) or [f["n_heads"]] * lay.n
    kv_swa = _one(
        m, "attention.head_count_kv", [h for h, s in zip(kv, slides, strict=True) if s] or [0], "sliding-layer KV heads"
    )
    kv_full = _one(
        m,
        "attention.head_count_kv",
        [h for h, s in zip(kv, slides, strict=True) if not s] or [0],
        "full-layer KV heads",
    )
    names = _names(header)
    full_layers = [i for i, s in enumerate(slides) if not s]
    k_eq_v = bool(full_layers) and all(
        f"blk.{i}.attn_k.weight" in names and f"blk.{i}.attn_v.weight" not in names for i in full_layers
    )
    full: ModelFields = {"head_dim": k_full}
    if kv_full and kv_full != (kv_swa or kv_full):
        full["n_kv_heads"] = kv_full
    if k_eq_v:
        full["k_eq_v"] = True
    f.update(
        n_kv_heads=kv_swa or kv_full,
        head_dim=k_swa,
        kind_geometry={"full": full},
        n_kv_shared_layers=m.count("attention.shared_kv_layers", 0, minimum=0, maximum=lay.n),
    )
    if "sliding" in (kinds := ["sliding" if s else "full" for s in slides]):
        f["sliding_window"] = m.count("attention.sliding_window")
    f.update(compact_layers(kinds))
    if m.count("embedding_length_per_layer_input", 0, minimum=0):
        f["weights_unknown"] = (
            "Gemma-4's per-layer input embeddings (hidden_size_per_layer_input) are not counted by kvcalc"
        )
    if f.get("n_experts"):  # the dense MLP beside the experts, counted as a shared expert
        f["shared_expert_intermediate_size"] = f.pop("intermediate_size", None)


def _mimo2(m: _Meta, header: GgufHeader, lay: _Layers, f: ModelFields) -> None:
    slides = _flags(m, "attention.sliding_window_pattern", lay)
    if slides is None:
        raise m.fail("attention.sliding_window_pattern", "is missing; a mimo2 model needs it")
    kv = _per_layer(m, "attention.head_count_kv", lay)
    kv_full = _one(
        m,
        "attention.head_count_kv",
        [h for h, s in zip(kv, slides, strict=True) if not s] or [0],
        "full-layer KV heads",
    )
    kv_swa = _one(
        m, "attention.head_count_kv", [h for h, s in zip(kv, slides, strict=True) if s] or [0], "sliding-layer KV heads"
    )
    window = m.count("attention.sliding_window")
    f.update(
        n_kv_heads=kv_full or kv_swa,
        head_dim=m.count("attention.key_length"),
        v_head_dim=m.count("attention.value_length"),
        sliding_window=window,
        gguf_sliding_window=window,
    )
    if kv_swa and kv_full and kv_swa != kv_full:
        f["kind_geometry"] = {"sliding": {"n_kv_heads": kv_swa}}
    f.update(compact_layers(["sliding" if s else "full" for s in slides]))
    names = _names(header)
    sinks = {("sliding" if s else "full") for i, s in enumerate(slides) if f"blk.{i}.attn_sinks.weight" in names}
    if sinks:
        f["attention_sinks"] = [k for k in ("sliding", "full") if k in sinks]


def _dsa(m: _Meta, header: GgufHeader, lay: _Layers, f: ModelFields, glm: bool) -> None:
    f.update(_mla(m))
    f["index_head_dim"] = m.count("attention.indexer.key_length")
    if glm:
        ctx = f.get("max_position_embeddings") or 0
        default = (1,) * lay.n if ctx < GLM_PRE_5_2_CONTEXT else GLM_5_2_DEFAULT_INDEXER_TYPES
        types = _flags(m, "attention.indexer.types", lay, default) or []
        if not all(types):
            f["index_layers"] = [int(t) for t in types]


def _deepseek4(m: _Meta, header: GgufHeader, lay: _Layers, f: ModelFields) -> None:
    raw = header.metadata.get(m.key("attention.compress_ratios"))
    if not isinstance(raw, tuple) or len(raw) < lay.n_all:
        raise m.fail(
            "attention.compress_ratios",
            'must be an array of at least block_count ratios (llama.cpp: "DeepSeek-V4 compress_ratios is '
            'shorter than block_count")',
        )
    ratios = list(raw[: lay.n])
    odd = sorted({r for r in ratios if type(r) is not int or r not in DSV4_RATIOS}, key=str)
    if odd:
        raise m.fail(
            "attention.compress_ratios",
            f"holds {odd[0]!r}: llama.cpp 0c1e570 caches ratios 0, 4 and 128 (src/llama-kv-cache-dsv4.cpp 18-19)",
        )
    kv = _one(m, "attention.head_count_kv", _per_layer(m, "attention.head_count_kv", lay), "KV heads")
    if kv != 1:
        raise m.fail("attention.head_count_kv", f"is {kv}; DeepSeek-V4 attends with one KV head")
    f.update(
        n_kv_heads=1,
        head_dim=m.count("attention.key_length"),
        q_lora_rank=m.count("attention.q_lora_rank"),
        index_head_dim=m.count("attention.indexer.key_length"),
        sliding_window=m.count("attention.sliding_window"),
        v_is_k=True,
        compress_ratios=ratios,
        index_layers=[int(r == 4) for r in ratios],
        weights_unknown="DeepSeek-V4's hyper-connections, grouped output projection, compressors and indexer "
        "are not counted by kvcalc",
    )


def _kimi_k3(m: _Meta, header: GgufHeader, lay: _Layers, f: ModelFields) -> None:
    f.update(_mla(m))
    kv = _per_layer(m, "attention.head_count_kv", lay)
    kinds = ["full" if h else "linear" for h in kv]
    dim = m.count("kda.head_dim")
    f.update(
        linear_num_key_heads=f["n_heads"],
        linear_num_value_heads=f["n_heads"],
        linear_key_head_dim=dim,
        linear_value_head_dim=dim,
        linear_conv_kernel_dim=m.count("ssm.conv_kernel"),
    )
    f.update(compact_layers(kinds))


def _minimax_m3(m: _Meta, header: GgufHeader, lay: _Layers, f: ModelFields) -> None:
    kv = _one(m, "attention.head_count_kv", _per_layer(m, "attention.head_count_kv", lay), "KV heads")
    k_len = m.count("attention.key_length")
    if m.count("attention.value_length", k_len) != k_len:
        raise m.fail("attention.value_length", "differs from key_length; kvcalc's MiniMax-M3 has K = V head sizes")
    lead = m.count("leading_dense_block_count", 0, minimum=0, maximum=lay.n)
    f.update(
        n_kv_heads=kv,
        head_dim=k_len,
        index_head_dim=m.count("attention.indexer.key_length"),
        index_layers=[int(i >= lead) for i in range(lay.n)],
        index_format="kv",
        first_dense_layers=lead,
        weights_unknown="MiniMax-M3's indexer projections and per-head norms are not counted by kvcalc",
    )


def _qwen35(m: _Meta, header: GgufHeader, lay: _Layers, f: ModelFields) -> None:
    recr = _flags(m, "attention.recurrent_layers", lay)
    if recr is None:
        every = m.count("full_attention_interval", 4)
        recr = [(i + 1) % every != 0 for i in range(lay.n)]
    kv = _one(
        m,
        "attention.head_count_kv",
        [h for h, r in zip(_per_layer(m, "attention.head_count_kv", lay), recr, strict=True) if not r] or [0],
        "KV heads",
    )
    inner, v_heads = m.count("ssm.inner_size"), m.count("ssm.time_step_rank")
    if inner % v_heads:
        raise m.fail("ssm.time_step_rank", f"({v_heads:,}, the value heads) does not divide ssm.inner_size ({inner:,})")
    k_len = m.count("attention.key_length", (f.get("hidden_size") or 0) // f["n_heads"] or None)
    f.update(
        n_kv_heads=kv or None,
        head_dim=k_len,
        linear_num_key_heads=m.count("ssm.group_count"),
        linear_num_value_heads=v_heads,
        linear_key_head_dim=m.count("ssm.state_size"),
        linear_value_head_dim=inner // v_heads,
        linear_conv_kernel_dim=m.count("ssm.conv_kernel"),
    )
    f.update(compact_layers(["linear" if r else "full" for r in recr]))


_BUILDERS = {
    "gemma4": _gemma4,
    "mimo2": _mimo2,
    "deepseek32": lambda m, h, lay, f: _dsa(m, h, lay, f, glm=False),
    "glm-dsa": lambda m, h, lay, f: _dsa(m, h, lay, f, glm=True),
    "deepseek4": _deepseek4,
    "kimi-k3": _kimi_k3,
    "minimax-m3": _minimax_m3,
    "qwen35": _qwen35,
    "qwen35moe": _qwen35,
}


def fields_2026(
    m: _Meta,
    header: GgufHeader,
    arch: str,
    max_layers: int,
    expert_fields: Callable[[_Meta, GgufHeader, str, ModelFields, int], None],
) -> ModelFields:
    """The `ModelSpec` fields (but name, source, dtype, checkpoint) of a file of one of the
    `MODEL_TYPES` architectures; `expert_fields` is `kvcalc.load.gguf._expert_fields` (passed in:
    that module imports this one). Raises `ConfigError` naming the file and the key."""
    lay = _Layers(m, header, arch, max_layers)
    heads = [h for h in _per_layer(m, "attention.head_count", lay) if h]
    f: ModelFields = {
        "model_type": MODEL_TYPES[arch],
        "n_layers": lay.n,
        "n_heads": _one(m, "attention.head_count", heads or [0], "query head counts"),
        "hidden_size": m.count("embedding_length"),
        "max_position_embeddings": m.count("context_length", None),
        "n_mtp_layers": lay.nextn,
    }
    if not f["n_heads"]:
        raise m.fail("attention.head_count", "is 0 for every layer; a model without attention heads")
    ff = sorted({w for w in _per_layer(m, "feed_forward_length", lay, None) or [] if w})
    if len(ff) == 1:  # MLP widths that differ per layer only size the weights, which the tensor table gives
        f["intermediate_size"] = ff[0]
    vocab = m.count("vocab_size", None)
    tokens = header.metadata.get("tokenizer.ggml.tokens")
    f["vocab_size"] = vocab or getattr(tokens, "count", None) or None
    names = _names(header)
    f["tie_word_embeddings"] = "output.weight" not in names
    expert_fields(m, header, arch, f, lay.n)
    if f.get("n_experts") and "first_dense_layers" not in f:
        lead = m.count("leading_dense_block_count", 0, minimum=0, maximum=lay.n)
        if lead:
            f["first_dense_layers"] = lead
    _BUILDERS[arch](m, header, lay, f)
    return f
