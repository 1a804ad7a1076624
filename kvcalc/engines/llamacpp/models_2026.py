"""llama.cpp 0c1e570's caches for the 2026 sparse-attention architectures: the indexer caches.

Read from llama-cpp-python 0.3.36's `vendor/llama.cpp` (llama.cpp commit 0c1e570):

- DeepSeek-V3.2 (`deepseek32`) and GLM-5 (`glm-dsa`): `llama_model::create_memory`
  (`src/llama-model.cpp` 2397-2450) makes a `llama_kv_cache_dsa`
  (`src/llama-kv-cache-dsa.cpp` 14-53): a main `llama_kv_cache` over the trunk layers
  (filter_mla: il < n_layer, the NextN / MTP layers left to the draft context), holding the MLA
  latent as K and no V (`src/llama-kv-cache.cpp` 231: has_v = !is_mla), and an indexer
  `llama_kv_cache` built from a copy of the hparams with one KV head and n_embd_head_k_full =
  `indexer_head_size` ("DSA lightning indexer uses MQA with single key head"): one K row of
  indexer_head_size values per token in `-ctk`'s type, no V (the copy is still MLA), on the
  layers filter_lid keeps: every trunk layer of DeepSeek-V3.2, GLM-5's `is_indexer_full` layers
  (`src/models/glm-dsa.cpp` 58-64: the GGUF's `indexer_types`, GLM-5.2's default list when it
  has none). Both caches have kv_size = n_ctx_seq cells.
- MiniMax-M3 (`minimax-m3`): `create_memory` (`src/llama-model.cpp` 2375-2396) makes a
  `llama_kv_cache_msa` (`src/llama-kv-cache-msa.cpp` 13-50): the main K / V cache over every
  layer, and an indexer `llama_kv_cache` from a copy of the hparams with one KV head and
  n_embd_head_k_full = `indexer_head_size` on the layers il >= n_layer_dense_lead. The copy is
  not MLA, so each indexer layer allocates a K row of indexer_head_size values (`-ctk`) and a V
  row of one head of the model's value_length (`-ctv`): n_embd_head_v_full is left as it is.

Each class logs "<class>: creating main KV cache, size = %u cells" and "<class>: creating
indexer KV cache, size = %u cells" (`LLAMA_LOG_INFO("%s: ...", __func__, kv_size)`), each inner
`llama_kv_cache` its buffer and size lines (`common.cache_lines`).
"""

from __future__ import annotations

from kvcalc.calc.kv_cache import ENGINES_MODEL_TODAY, refuse_unmodelled_layers
from kvcalc.engines.llamacpp.common import GGML_NAMES, Caches, Layers, cache_lines
from kvcalc.formats import kv_format
from kvcalc.schema import ModelSpec

#: config model_type -> (llama.cpp class, llama.cpp architecture, the indexer cache keeps a V row)
INDEXER_CLASSES: dict[str, tuple[str, str, bool]] = {
    "deepseek_v32": ("llama_kv_cache_dsa", "deepseek32", False),
    "glm_moe_dsa": ("llama_kv_cache_dsa", "glm-dsa", False),
    "minimax_m3": ("llama_kv_cache_msa", "minimax-m3", True),
}
#: the layer features each class sizes (`kv_cache.layer_features`)
INDEXER_FEATURES = ENGINES_MODEL_TODAY | {"indexer", "indexer_kv", "partial_indexer"}


def indexer_class(model: ModelSpec) -> tuple[str, str, bool] | None:
    """(class, architecture, indexer V row) of a model llama.cpp gives an indexer cache; None
    for any other."""
    return INDEXER_CLASSES.get(model.model_type or "")


def check_indexer_model(model: ModelSpec) -> None:
    """Raise `KvcalcError` (field `model`) for a layer feature the indexer classes do not size."""
    refuse_unmodelled_layers(model, "llama.cpp", INDEXER_FEATURES)


def row_bytes(type_name: str, n_values: int, what: str, field: str) -> int:
    """ggml_row_size of `n_values` in the ggml type `type_name` (a `GGML_NAMES` value)."""
    names = {g: f for f, g in GGML_NAMES.items()}
    return kv_format(names[type_name]).bytes_for(n_values, what=what, field=field)


def indexer_row_bytes(model: ModelSpec, il: int, tk: str, tv: str, with_v: bool) -> tuple[int, int]:
    """(K, V) bytes of one indexer cell of layer `il`: ggml_row_size(type_k, 1 x
    indexer_head_size) and, for `llama_kv_cache_msa`, ggml_row_size(type_v, 1 x value_length);
    (0, 0) on a layer without an indexer (`LayerSpec.index_dim` 0)."""
    layer = model.layers[il]
    if not layer.index_dim:
        return 0, 0
    kb = row_bytes(tk, layer.index_dim, "indexer K row", "k_dtype")
    vb = row_bytes(tv, layer.head_dim_v, "indexer V row", "v_dtype") if with_v else 0
    return kb, vb


def indexer_caches(model: ModelSpec, lay: Layers, cells: int, n_stream: int, n_seq_max: int, n_ctx: int) -> Caches:
    """The main cache and the indexer cache of `llama_kv_cache_dsa` / `_msa`, each of `cells`
    cells per stream: the main one over the attention layers (`lay.att`), the indexer one over
    the layers with an indexer. K bytes = cells x n_stream x sum of K rows, V the same."""
    cls, _, with_v = INDEXER_CLASSES[model.model_type or ""]
    buffers: dict[str, tuple[int, int]] = {}
    lines = [f"{cls}: creating main KV cache, size = {cells} cells"]
    more, k_tot, v_tot = lay.lines("llama_kv_cache", cells, n_stream, n_seq_max, lay.att, buffers)
    lines += more
    idx = [i for i in lay.att if model.layers[i].index_dim]
    per_cell = [indexer_row_bytes(model, i, lay.tk, lay.tv, with_v) for i in range(len(model.layers))]
    lines.append(f"{cls}: creating indexer KV cache, size = {cells} cells")
    own: dict[str, tuple[int, int]] = {}
    more, k2, v2 = cache_lines(
        "llama_kv_cache", cells, n_stream, n_seq_max, idx, per_cell, lay.dev, lay.tk, lay.tv, own
    )
    lines += more
    for name, (_, b) in own.items():  # the indexer rows sit on their layers' devices: bytes, not more layers
        n, total = buffers.get(name, (0, 0))
        buffers[name] = (n, total + b)
    return Caches(lines, k_tot + k2, v_tot + v2, n_stream, cells, n_ctx, buffers)


# ----- Kimi-Linear / Kimi-K3: MLA layers beside KDA layers (llama_memory_hybrid) ---------------

#: model types llama.cpp serves as MLA + Kimi Delta Attention (`kimi-linear`, `kimi-k3`)
KDA_MODEL_TYPES = frozenset({"kimi_linear"})
#: the layer features the KDA hybrid sizes
KDA_FEATURES = ENGINES_MODEL_TODAY | {"linear_beside_mla"}


def is_kda_hybrid(model: ModelSpec) -> bool:
    """A Kimi-Linear / Kimi-K3 config with MLA and linear (KDA) layers. llama.cpp 0c1e570
    (`src/llama-arch.cpp` 1090-1106: `llm_arch_is_hybrid`) gives it a `llama_memory_hybrid`
    (`src/llama-model.cpp` 2740-2775; null filters, so `src/llama-memory-hybrid.cpp` 8-60 puts
    the layers with !is_recr(il) in the KV cache, the rest in the recurrent memory): the converter
    (`conversion/kimi_k3.py` 165-206) writes head_count_kv 1 on the full-attention layers and 0 on
    the KDA ones (`src/models/kimi-k3.cpp` 30-33: n_head_kv == 0 marks a KDA layer), key_length
    kv_lora_rank + qk_rope_head_dim (the latent, cached as K; MLA: no V)."""
    kinds = {layer.kind for layer in model.layers}
    return model.model_type in KDA_MODEL_TYPES and kinds == {"mla", "linear"}


def kda_r_s_values(model: ModelSpec) -> tuple[int, int]:
    """(n_embd_r, n_embd_s) of one KDA layer, `src/llama-hparams.cpp` 219-224 and 242-247:
    n_embd_r = 3 x (d_conv - 1) x n_head() x n_embd_head_kda (the Q, K and V short convolutions),
    n_embd_s = n_embd_head_kda^2 x n_head(), with n_head() the model's attention head count
    (layer 0's `head_count`, num_attention_heads), n_embd_head_kda `kda.head_dim`
    (linear_attn_config head_dim: `linear_key_head_dim`), d_conv `ssm.conv_kernel`
    (short_conv_kernel_size: `linear_conv_kernel_dim`; 3 when 0). Both in f32. (0, 0) when the
    config does not give them."""
    d, conv = model.linear_key_head_dim, model.linear_conv_kernel_dim
    if not d or not model.n_heads:
        return 0, 0
    return 3 * ((conv - 1) if conv else 3) * model.n_heads * d, d * d * model.n_heads
