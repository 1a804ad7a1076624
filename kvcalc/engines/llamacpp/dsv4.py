"""llama.cpp 0c1e570's DeepSeek-V4 memory: `llama_kv_cache_dsv4` (`src/llama-kv-cache-dsv4.cpp`).

Read from llama-cpp-python 0.3.36's `vendor/llama.cpp`. `llama_model::create_memory`
(`src/llama-model.cpp` 2620-2660) gives `deepseek4`'s main context a `llama_kv_cache_dsv4`
(constructor `src/llama-kv-cache-dsv4.cpp` 1210-1335); the converter (`conversion/deepseek.py`
527-690) writes num_hidden_layers blocks (the MTP block only with `--mtp`), `sliding_window`
as n_swa, `compress_ratios` and `index_head_dim`; `src/models/deepseek4.cpp` 64-70 makes every
layer SWA (`set_swa_pattern(0)`). Each K-only cache (`dsv4_make_k_only`: the hparams copy is made
MLA, so `llama_kv_cache` allocates no V, `src/llama-kv-cache.cpp` 231) has one stream per
sequence whatever `--kv-unified` says (`unified_raw` / `unified_compressed` false), with
kv_size = n_ctx_seq (the whole context when unified):

- raw: a `llama_kv_cache_iswa` of the 512-value K = V rows in `-ctk`'s type: a non-SWA cache
  of n_ctx_seq cells with no layer, and an SWA cache of GGML_PAD(min(n_ctx_seq, n_swa +
  n_ubatch), 256) cells (not unified: n_swa x 1), or n_ctx_seq with `--swa-full`;
- CSA: the ratio-4 layers' compressed rows, GGML_PAD(cdiv(n_ctx_seq, 4), 256) cells; the log
  line gives the unpadded cdiv (`dsv4_comp_size`, 28-30: at least 1);
- HCA: the ratio-128 layers', GGML_PAD(cdiv(n_ctx_seq, 128), 256) cells;
- lightning indexer: one head of `indexer_head_size` on the ratio-4 layers, CSA's cell count;
- three compressor states (`llama_dsv4_comp_state`, 893-1000): per layer a kv and a score
  tensor of f32 [n_embd_state, state_size, n_stream x (1 + n_rs_seq)]: CSA state 8 x 2 x
  n_embd_head_k, HCA 128 x n_embd_head_k, indexer 8 x 2 x indexer_head_size (n_rs_seq 0
  without a draft). kvcalc counts them as the per-sequence state (`engine_state_bytes`).

A compress ratio other than 0, 4 and 128 gets no compressed cache in llama.cpp
(`filter_csa` / `filter_hca` test `== 4` / `== 128`): kvcalc refuses such a config.
"""

from __future__ import annotations

from kvcalc.calc.kv_cache import ENGINES_MODEL_TODAY, refuse_unmodelled_layers
from kvcalc.engines.llamacpp.common import (
    N_CTX_PAD,
    RECURRENT_BYTES,
    SWA_FULL_REF,
    SWA_PAD,
    Caches,
    Layers,
    cache_lines,
    device_name,
    pad,
)
from kvcalc.engines.llamacpp.models_2026 import row_bytes
from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.schema import ModelSpec

#: `src/llama-kv-cache-dsv4.cpp` 18-19
DSV4_CSA_RATIO = 4
DSV4_HCA_RATIO = 128
#: the layer features `llama_kv_cache_dsv4` sizes
DSV4_FEATURES = ENGINES_MODEL_TODAY | {"compressed", "indexer", "partial_indexer", "v_is_k"}
CLS = "llama_kv_cache_dsv4"


def is_dsv4(model: ModelSpec) -> bool:
    """A DeepSeek-V4 config (`deepseek_v4`, llama.cpp `deepseek4`)."""
    return model.model_type == "deepseek_v4"


def check_dsv4_model(model: ModelSpec) -> None:
    """Raise `KvcalcError` (field `model`) for a layer feature or a compress ratio
    `llama_kv_cache_dsv4` does not size, or a layer that does not slide."""
    refuse_unmodelled_layers(model, "llama.cpp", DSV4_FEATURES)
    odd = sorted({x.compress_ratio for x in model.layers} - {0, DSV4_CSA_RATIO, DSV4_HCA_RATIO})
    if odd or any(x.kind != "sliding" for x in model.layers):
        raise KvcalcError(
            f"{model.name}: llama.cpp 0c1e570's llama_kv_cache_dsv4 takes compress ratios 0, 4 and 128 "
            f"on sliding layers (src/llama-kv-cache-dsv4.cpp 18-19); this config has "
            f"{odd or 'a layer that does not slide'}",
            field="model",
            value=model.name,
            form=MESSAGE,
        )


def _k_only(per_cell: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(k, 0) for k, _ in per_cell]


def dsv4_caches(
    model: ModelSpec, lay: Layers, cells: int, *, parallel: int, swa_full: bool, n_ubatch: int, n_ctx: int
) -> Caches:
    """The four K-only caches of `llama_kv_cache_dsv4` (module docstring), each with `parallel`
    streams; lines as llama.cpp logs them. K bytes = sum over caches of cells x streams x rows."""
    buffers: dict[str, tuple[int, int]] = {}
    k_cell = _k_only(lay.per_cell)
    n_swa = model.gguf_sliding_window or max(x.window or 0 for x in model.layers)
    size_swa = pad(min(cells, n_swa + n_ubatch), SWA_PAD)  # unified_raw = false: n_swa x 1
    lines = [f"{CLS}: creating DSV4 raw KV cache"]
    if swa_full:
        lines.append(f"llama_kv_cache_iswa: using full-size SWA cache (ref: {SWA_FULL_REF})")
        size_swa = cells
    lines.append(f"llama_kv_cache_iswa: creating non-SWA KV cache, size = {cells} cells")
    more, k_tot, _ = cache_lines(
        "llama_kv_cache", cells, parallel, parallel, [], k_cell, lay.dev, lay.tk, lay.tv, buffers
    )
    lines += more
    lines.append(f"llama_kv_cache_iswa: creating     SWA KV cache, size = {size_swa} cells")
    more, k, _ = cache_lines(
        "llama_kv_cache", size_swa, parallel, parallel, lay.att, k_cell, lay.dev, lay.tk, lay.tv, buffers
    )
    lines += more
    k_tot += k
    csa = [i for i in lay.att if model.layers[i].compress_ratio == DSV4_CSA_RATIO]
    hca = [i for i in lay.att if model.layers[i].compress_ratio == DSV4_HCA_RATIO]
    lid_row = row_bytes(lay.tk, model.index_head_dim or 0, "indexer K row", "k_dtype")
    lid_cell = [(lid_row, 0)] * len(model.layers)  # one head of indexer_head_size; only the CSA layers are in it
    for what, ratio, layers, rows in (
        ("CSA compressed", DSV4_CSA_RATIO, csa, k_cell),
        ("HCA compressed", DSV4_HCA_RATIO, hca, k_cell),
        ("lightning-indexer", DSV4_CSA_RATIO, csa, lid_cell),
    ):
        comp = max(1, -(-cells // ratio))
        lines.append(f"{CLS}: creating DSV4 {what} KV cache, size = {comp} cells")
        own: dict[str, tuple[int, int]] = {}
        more, k, _ = cache_lines(
            "llama_kv_cache", pad(comp, N_CTX_PAD), parallel, parallel, layers, rows, lay.dev, lay.tk, lay.tv, own
        )
        lines += more
        k_tot += k
        for name, (_, b) in own.items():  # the same layers again: bytes, not more layers
            n, total = buffers.get(name, (0, 0))
            buffers[name] = (n, total + b)
    return Caches(lines, k_tot, 0, parallel, cells, n_ctx, buffers)


def dsv4_state_lines(model: ModelSpec, dev: list[int], n_seq_max: int) -> tuple[list[str], int, list[str]]:
    """The three `llama_dsv4_comp_state`s: (lines, bytes, notes). Per layer 2 tensors (kv,
    score) of n_embd_state x state_size f32 values per stream, n_seq_max streams (n_rs_seq 0).
    n_embd_head_k() is layer 0's K head (512), indexer_head_size `index_head_dim`."""
    head = model.layers[0].head_dim_k
    idx = model.index_head_dim or 0
    states = (
        ("csa", DSV4_CSA_RATIO, 2 * DSV4_CSA_RATIO, 2 * head, DSV4_CSA_RATIO),
        ("hca", DSV4_HCA_RATIO, DSV4_HCA_RATIO, head, DSV4_HCA_RATIO),
        ("lid", DSV4_CSA_RATIO, 2 * DSV4_CSA_RATIO, 2 * idx, DSV4_CSA_RATIO),
    )
    titles = {"csa": "CSA compressor state", "hca": "HCA compressor state", "lid": "lightning-indexer compressor state"}
    lines: list[str] = []
    total = 0
    for name, ratio, state_size, n_embd_state, on in states:
        lines.append(f"{CLS}: creating DSV4 {titles[name]}")
        layers = [i for i, x in enumerate(model.layers) if x.compress_ratio == on]
        per_layer = 2 * n_embd_state * state_size * n_seq_max * RECURRENT_BYTES
        own: dict[str, int] = {}
        for il in layers:
            own[device_name(dev[il])] = own.get(device_name(dev[il]), 0) + per_layer
        lines += [
            f"llama_dsv4_comp_state: {d:>10} DSV4 {name} state buffer size = {own[d] / 2**20:8.2f} MiB"
            for d in sorted(own)
        ]
        size = per_layer * len(layers)
        lines.append(
            f"llama_dsv4_comp_state: {name} ratio = {ratio}, state = {state_size} x {n_embd_state}, "
            f"streams = {n_seq_max}, rs_seq = 0, layers = {len(layers)}, size = {size / 2**20:7.2f} MiB"
        )
        total += size
    return lines, total, []
