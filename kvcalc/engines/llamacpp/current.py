"""llama.cpp as it is now (`--llamacpp-version current`): the rules that are its own.

The llama.cpp that llama-cpp-python 0.3.36 vendors (commit 0c1e570, 2026-10-01),
the version the llama.cpp oracle (`tests/oracle`, docs/engine-oracles.md) builds and runs. Its
rules are those of PR #17046 (Nov 2025, b7000) on, but for what changed since b7000:
* the recurrent size line gained the rs_seq count and a P figure: "(%6u cells, %3d layers,
  %2u seqs %2u rs_seq), R (%s): %7.2f MiB, S (%s): %7.2f MiB, P (%s): %7.2f MiB" (b7000:
  "(%6u cells, %3d layers, %2u seqs), R ..., S ..."). n_rs_seq, recurrent snapshots kept for a
  draft model's rollback, multiplies the R and S rows by 1 + n_rs_seq; it is 0 unless a
  speculative draft (MTP, EAGLE3) asks for it, which kvcalc does not model; P, the per-layer
  embedding conv state, is 0 B for every model kvcalc reads;
* a quantized V cache with `-fa off` is refused as "quantized V cache requires flash_attn to be
  enabled" (b7000: "V cache quantization requires flash_attn"), and `-fa auto` turns flash
  attention on for it ("enabling flash_attn since it is required for quantized V cache");
* new refusal with flash attention on: a quantized K (V) type whose 32-value block does not
  divide a layer's head size ("K cache type %s with block size %u does not divide
  n_embd_head_k=%u"), e.g. q8_0 with Phi-2's heads of 80;
* llama-server and llama-cli fit unset options to free device memory (`--fit`, on by default,
  `common/common.h` `fit_params = true`): a `-c 0` may come out lower than n_ctx_train (not
  below `--fit-ctx`, 4096). kvcalc does not know the device's free memory and gives the context
  as asked (what `--fit off` does, or a context that fits).
* `src/llama-context.cpp` (`llama_context::llama_context`): n_ctx = n_ctx_train when `-c 0`
  (the GGUF's `context_length`, the config's max_position_embeddings); n_batch =
  min(n_ctx, n_batch) (causal attention), n_ubatch = min(n_batch, n_ubatch); then
  n_ctx = GGML_PAD(n_ctx, 256); with a unified cache (`--kv-unified`) one stream of n_ctx
  cells, otherwise n_seq_max (`--parallel`) streams of n_ctx_seq = GGML_PAD(n_ctx / n_seq_max,
  256) cells each (n_ctx becomes n_ctx_seq x n_seq_max).
* `src/llama-kv-cache-iswa.cpp` (`llama_kv_cache_iswa::llama_kv_cache_iswa`): models with
  sliding and full layers get two caches, the SWA one of GGML_PAD(min(n_ctx_seq, n_swa x
  (unified ? n_seq_max : 1) + n_ubatch), 256) cells ("the SWA cache is always padded to 256
  for performance", llama.cpp issue #17037), or n_ctx_seq with `--swa-full`.
* `src/llama-kv-cache.cpp` logs, per cache, "llama_kv_cache: %10s KV buffer size = %8.2f MiB"
  for each device and "llama_kv_cache: size = %7.2f MiB (%6u cells, %3d layers, %2u/%u seqs),
  K (%s): %7.2f MiB, V (%s): %7.2f MiB".
* Recurrent state (`src/llama-memory-recurrent.cpp`, made by `llama_model::create_memory` in
  `src/llama-model.cpp`, hybrids through `src/llama-memory-hybrid.cpp`, the attention cache
  first): Mamba / Mamba-2 / Gated-DeltaNet layers keep max(1, n_seq_max) cells of R (conv
  state, `hparams.n_embd_r()` values) and S (`hparams.n_embd_s()` values), both f32 whatever
  `-ctk` / `-ctv` say (`GGML_TYPE_F32` in `create_memory`), on the layer's device. Logs
  "llama_memory_recurrent: %10s RS buffer size = %8.2f MiB" per device and
  "llama_memory_recurrent: size = %7.2f MiB (%6u cells, %3d layers, %2u seqs %2u rs_seq), R (%s):
  %7.2f MiB, S (%s): %7.2f MiB, P (%s): %7.2f MiB", the layer count being the model's n_layer
  (every layer). Which layers go where is `create_memory`'s filter_attn / filter_recr per
  architecture: Falcon-H1 (`LLM_ARCH_FALCON_H1`, layer kind `hybrid`) puts every layer in both
  the KV cache and the recurrent memory; Nemotron-H attention where head_count_kv > 0 and
  feed_forward_length 0, recurrent where both are 0, its MLP layers in neither; Granite-4.0-H,
  Jamba and the Gated-DeltaNet hybrids recurrent iff the layer is (`hparams.is_recr`), the rest
  attention. kvcalc's layer kinds say the same: K and V for `LayerSpec.caches_kv`, R and S for
  `LayerSpec.keeps_state`. The tests/oracle grid holds every line and byte of this against the
  engine for Falcon-H1-7B, Nemotron-H-8B and Granite-4.0-H-Tiny (and Qwen3.5, Jamba, Mamba).
  `src/llama-hparams.cpp`: n_embd_r = (d_conv - 1) x (d_inner + 2 x n_group x d_state),
  n_embd_s = d_state x d_inner (Mamba-1: n_group 0; Gated DeltaNet: d_inner = value heads x
  value head dim, n_group = key heads, d_state = key head dim).
* MLA (DeepSeek, Kimi): since llama.cpp PR #12801 (April 2025) a GGUF converted for it
  (`deepseek2.attention.key_length_mla`) caches the latent (kv_lora_rank + qk_rope_head_dim)
  as K and no V (V is a view of K). An older GGUF still gets the expanded cache (below).
* Refusals, `llama_init_from_model` (`src/llama-context.cpp`), each with llama.cpp's message
  (`check_refusals`): "model does not support different K (%s) and V (%s) cache types" (an MLA
  model, latent cache); "quantized V cache requires flash_attn to be enabled" (a quantized V
  cache with `-fa off`); a quantized type whose block does not divide the head size (above);
  `llama_context` refuses n_seq_max > LLAMA_MAX_SEQ = 256 (`src/llama-cparams.h`).
  `-fa auto` (the default, `common/common.h` `flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO`)
  turns flash attention on where the backend supports it for every layer: kvcalc assumes it
  does (CUDA, Metal and the CPU backend do for the head sizes of the bundled models), so a
  quantized V cache passes with auto; on a backend without it llama.cpp refuses
  ("quantized V cache was requested, but this requires Flash Attention").

The tool that makes the context (`tool=`, current only) sets what the user left out:
- `llama-server` (the default: what users compare with): without `-np` it serves 4 slots sharing
  one unified cache ("n_parallel is set to auto, using n_parallel = 4 and kv_unified = true",
  `tools/server/server.cpp`; `common/arg.cpp` gives the server n_parallel = -1, auto); an
  explicit `-np N` gives N separate streams unless `-kvu` (`common/common.h`
  `bool kv_unified = false`).
- `llama-cli`: the `common_params` defaults: one sequence, kv_unified false, swa_full false.
- `library`: `llama_context_default_params()` (`src/llama-context.cpp`): n_seq_max 1,
  kv_unified false, swa_full true (the full-size SWA cache), flash_attn_type auto.

"""

from __future__ import annotations

from kvcalc.calc.kv_cache import ENGINES_MODEL_TODAY, refuse_unmodelled_layers
from kvcalc.engines.llamacpp.base import LlamacppRules
from kvcalc.engines.llamacpp.common import (
    N_CTX_PAD,
    QUANT_BLOCK,
    QUANTIZED,
    RECURRENT_BYTES,
    RECURRENT_TYPE,
    SERVER_AUTO_PARALLEL,
    SWA_FULL_REF,
    SWA_PAD,
    Caches,
    Context,
    Layers,
    device_name,
    mib_f32,
    pad,
    recurrent_r_s_values,
)
from kvcalc.engines.llamacpp.dsv4 import check_dsv4_model, dsv4_caches, dsv4_state_lines, is_dsv4
from kvcalc.engines.llamacpp.models_2026 import (
    KDA_FEATURES,
    check_indexer_model,
    indexer_caches,
    indexer_class,
    is_kda_hybrid,
    kda_r_s_values,
)
from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.schema import ModelSpec

#: the llama.cpp commit "current" is held against (llama-cpp-python 0.3.36's vendor/llama.cpp)
CURRENT_COMMIT = "0c1e570"
#: src/llama-cparams.h `#define LLAMA_MAX_SEQ 256`; llama_context refuses more.
LLAMA_MAX_SEQ = 256


def recurrent_lines(model: ModelSpec, dev: list[int], n_seq_max: int) -> tuple[list[str], int, list[str]]:
    """`llama_memory_recurrent`'s lines for the layers that keep a state (`LayerSpec.keeps_state`:
    mamba, linear, and Falcon-H1's hybrid layers, which `llama_model::create_memory` puts in both
    the KV cache and the recurrent memory, `filter_recr` true for every layer): max(1, n_seq_max)
    cells of R and S in f32 per layer on the layer's device; (lines, bytes, notes). No lines when
    the model has no recurrent layer or the config does not size them."""
    rec = [i for i, layer in enumerate(model.layers) if layer.keeps_state]
    if not rec:
        return [], 0, []
    kda = is_kda_hybrid(model)  # Kimi-Linear / Kimi-K3: llama.cpp's own KDA sizes (models_2026)
    sized = [(i, *(kda_r_s_values(model) if kda else recurrent_r_s_values(model, model.layers[i]))) for i in rec]
    if any(r + s == 0 for _, r, s in sized):
        return [], 0, ["mamba / linear-attention layers: the config does not size their state; not counted"]
    cells = max(1, n_seq_max)
    own: dict[str, int] = {}
    r_tot = s_tot = 0
    for il, r, s in sized:
        rb, sb = r * cells * RECURRENT_BYTES, s * cells * RECURRENT_BYTES
        name = device_name(dev[il])
        own[name] = own.get(name, 0) + rb + sb
        r_tot += rb
        s_tot += sb
    lines = [
        f"llama_memory_recurrent: {name:>10} RS buffer size = {own[name] / 2**20:8.2f} MiB" for name in sorted(own)
    ]
    # n_rs_seq (recurrent snapshots for speculative rollback) is 0 unless a draft model asks for it
    lines.append(
        f"llama_memory_recurrent: size = {mib_f32(r_tot + s_tot):7.2f} MiB ({cells:6d} cells, "
        f"{model.n_layers:3d} layers, {n_seq_max:2d} seqs {0:2d} rs_seq), R ({RECURRENT_TYPE}): "
        f"{mib_f32(r_tot):7.2f} MiB, S ({RECURRENT_TYPE}): {mib_f32(s_tot):7.2f} MiB, "
        f"P ({RECURRENT_TYPE}): {mib_f32(0):7.2f} MiB"
    )
    return lines, r_tot + s_tot, []


def current_caches(
    model: ModelSpec,
    lay: Layers,
    requested: int,
    *,
    parallel: int,
    unified: bool,
    iswa: bool,
    swa_full: bool,
    n_ubatch: int,
) -> Caches:
    """llama.cpp b7000+: n_ctx = GGML_PAD(n_ctx, 256); one stream of n_ctx cells (unified) or
    n_seq_max streams of GGML_PAD(n_ctx / n_seq_max, 256); with sliding and full layers a
    non-SWA cache and an SWA cache of GGML_PAD(min(cells, n_swa x (unified ? n_seq_max : 1) +
    n_ubatch), 256). A model without attention layers gets no KV cache (no lines)."""
    buffers: dict[str, tuple[int, int]] = {}
    n_ctx_pad = pad(requested, N_CTX_PAD)
    if unified:
        n_stream, cells = 1, n_ctx_pad
    else:
        # llama.cpp's "n_ctx_seq == 0" error cannot fire here: n_ctx_pad >= 256 and parallel <= 256
        # (`common.check_options`), so n_ctx_pad // parallel >= 1 and cells >= 256
        cells = pad(n_ctx_pad // parallel, N_CTX_PAD)
        n_stream, n_ctx_pad = parallel, cells * parallel
    if not lay.att:
        return Caches([], 0, 0, n_stream, cells, n_ctx_pad, buffers)
    if is_dsv4(model):  # llama_kv_cache_dsv4 (dsv4)
        return dsv4_caches(model, lay, cells, parallel=parallel, swa_full=swa_full, n_ubatch=n_ubatch, n_ctx=n_ctx_pad)
    if indexer_class(model) is not None:  # llama_kv_cache_dsa / _msa (models_2026)
        return indexer_caches(model, lay, cells, n_stream, parallel, n_ctx_pad)
    if not iswa:
        lines, k_tot, v_tot = lay.lines("llama_kv_cache", cells, n_stream, parallel, lay.att, buffers)
        return Caches(lines, k_tot, v_tot, n_stream, cells, n_ctx_pad, buffers)
    sliding = [i for i in lay.att if model.layers[i].kind == "sliding"]
    # n_swa: the GGUF's sliding_window (`ModelSpec.gguf_sliding_window` where it differs from the layers')
    window = model.gguf_sliding_window or max(model.layers[i].window or 0 for i in sliding)
    size_swa = pad(min(cells, window * (parallel if unified else 1) + n_ubatch), SWA_PAD)
    lines = []
    if swa_full:
        lines.append(f"llama_kv_cache_iswa: using full-size SWA cache (ref: {SWA_FULL_REF})")
        size_swa = cells
    base = [i for i in lay.att if model.layers[i].kind != "sliding"]
    lines.append(f"llama_kv_cache_iswa: creating non-SWA KV cache, size = {cells} cells")
    more, k_tot, v_tot = lay.lines("llama_kv_cache", cells, n_stream, parallel, base, buffers)
    lines += more
    lines.append(f"llama_kv_cache_iswa: creating     SWA KV cache, size = {size_swa} cells")
    more, k2, v2 = lay.lines("llama_kv_cache", size_swa, n_stream, parallel, sliding, buffers)
    lines += more
    return Caches(lines, k_tot + k2, v_tot + v2, n_stream, cells, n_ctx_pad, buffers)


#: config model types llama.cpp 0c1e570 has no architecture for, and its converter's words
#: (`convert_hf_to_gguf.py`: "Model ... is not supported"; a GGUF naming an architecture
#: `src/llama-arch.cpp` lacks fails with "unknown model architecture: '...'").
NO_ARCHITECTURE = {
    "step3p7": ("Step3p7FlashForCausalLM", "src/llama-arch.cpp has step35 (Step-3.5) and no Step-3.7"),
}
#: model types whose per-layer head geometry llama.cpp 0c1e570 sizes per layer
#: (`llama_kv_cache_iswa` with `n_embd_head_k_swa` / full and head_count_kv per layer,
#: `src/llama-model.cpp` 2776-2860, `src/llama-hparams.cpp` 140-166; Gemma-4's K = V layers
#: allocate both K and V rows). MiMo-V2 (`mimo2`, `src/models/mimo2.cpp` 3-23): the converter
#: (`conversion/mimo.py` 143-175) writes head_count_kv per layer (swa_num_key_value_heads on the
#: sliding ones), the config's sliding_window as n_swa and the sliding-window pattern; its 3 MTP
#: layers (NextN, appended as sliding layers) are filtered out of the main context (il < n_layer,
#: `src/llama-model.cpp` 2796-2803) and cached only in a draft (MTP) context, not modelled.
PER_LAYER_GEOMETRY_MODEL_TYPES = frozenset({"gemma4", "gemma4_text", "mimo_v2_flash"})


class Current(LlamacppRules):
    """llama.cpp b7000+ (commit 0c1e570)."""

    version = "current"
    default_mla_cache = "latent"  # since llama.cpp PR #12801 (April 2025)
    default_flash_attn = "auto"  # common/common.h flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO
    max_seq = LLAMA_MAX_SEQ
    swa_cache = True
    no_swa_cache_note = "(no full layers: no SWA cache)"

    def context(
        self, *, tool: str, parallel: int | None, unified: bool | None, swa_full: bool | None, flash_attn: str
    ) -> Context:
        """llama-server without `parallel`: 4 slots in one unified cache; with it: separate
        streams unless `unified`. llama-cli: 1 sequence, not unified. library: 1 sequence, not
        unified, `swa_full` on. `-fa` auto is on (kvcalc assumes the backend supports it)."""
        notes: list[str] = []
        if tool == "llama-server" and parallel is None:
            notes.append(
                f"llama-server without -np: {SERVER_AUTO_PARALLEL} slots sharing one unified cache "
                "(tools/server/server.cpp: n_parallel is set to auto, using n_parallel = 4 and "
                "kv_unified = true)"
            )
            parallel, unified = SERVER_AUTO_PARALLEL, True
        if swa_full is None:
            swa_full = tool == "library"  # llama_context_default_params: swa_full = true; common_params: false
        return Context(1 if parallel is None else parallel, bool(unified), swa_full, flash_attn != "off", tuple(notes))

    def check_model(self, model: ModelSpec) -> None:
        """Raise `KvcalcError` (field `model`) for a config llama.cpp 0c1e570 has no architecture
        for (`NO_ARCHITECTURE`, its own words), then the layers kvcalc's llama.cpp profile sizes:
        Gemma-4's per-layer heads and head sizes (`PER_LAYER_GEOMETRY_MODEL_TYPES`) and the
        indexer caches of DeepSeek-V3.2, GLM-5 and MiniMax-M3 (`llama_kv_cache_dsa`, `_msa`:
        `models_2026`) pass, MiMo-V2's per-layer geometry (n_swa: `gguf_sliding_window`) and the
        Kimi-Linear / Kimi-K3 hybrid (MLA latent + KDA state, `models_2026.is_kda_hybrid`) and
        DeepSeek-V4's `llama_kv_cache_dsv4` (`dsv4`)."""
        arch = NO_ARCHITECTURE.get(model.model_type or "")
        if arch is not None:
            raise KvcalcError(
                f"{model.name}: llama.cpp 0c1e570 has no architecture for it: convert_hf_to_gguf.py "
                f'says "Model {arch[0]} is not supported", and a GGUF of it fails with "unknown '
                f'model architecture" ({arch[1]})',
                field="model",
                value=model.name,
                form=MESSAGE,
            )
        if indexer_class(model) is not None:  # DeepSeek-V3.2, GLM-5, MiniMax-M3: models_2026
            check_indexer_model(model)
            return
        if is_dsv4(model):  # DeepSeek-V4: llama_kv_cache_dsv4 (dsv4)
            check_dsv4_model(model)
            return
        if is_kda_hybrid(model):  # Kimi-Linear, Kimi-K3: llama_memory_hybrid (MLA latent + KDA state)
            refuse_unmodelled_layers(model, "llama.cpp", KDA_FEATURES)
            return
        if model.model_type == "mimo_v2_flash" and model.gguf_sliding_window is None:
            raise KvcalcError(
                f"{model.name}: llama.cpp's converter writes the config's sliding_window as the GGUF's "
                "n_swa (conversion/mimo.py) and the config gives none, so llama.cpp's SWA cache size is "
                "not known; add sliding_window to the config",
                field="sliding_window",
                value=model.name,
                form=MESSAGE,
            )
        if model.model_type in PER_LAYER_GEOMETRY_MODEL_TYPES and model.index_head_dim is None:
            refuse_unmodelled_layers(model, "llama.cpp", ENGINES_MODEL_TODAY | {"kind_geometry", "kv_shared"})
            return
        super().check_model(model)

    def check_refusals(self, model: ModelSpec, tk: str, tv: str, *, flash_attn: bool) -> None:
        """Raise `KvcalcError` (field `k_dtype` / `v_dtype`) where `llama_init_from_model`
        (`src/llama-context.cpp`) returns no context, with llama.cpp's own message, in its order:

        - an MLA model with its latent cache and K and V of different types ("model does not
          support different K (%s) and V (%s) cache types");
        - a quantized V cache with flash attention off: "quantized V cache requires flash_attn to
          be enabled" (`-fa auto` turns it on instead: "enabling flash_attn since it is required
          for quantized V cache");
        - flash attention not off: a quantized K (V) type whose block (32 values) does not divide
          a layer's head size ("K cache type %s with block size %u does not divide
          n_embd_head_k=%u"; `head_sizes`), e.g. q8_0 with Phi-2's heads of 80.
        """
        func = "llama_init_from_model"
        # `model->hparams.is_mla() || model->arch == LLM_ARCH_DEEPSEEK4` (src/llama-context.cpp 3835)
        latent = (
            any(layer.kind == "mla" for layer in model.layers) and self.mla_cache(model) == "latent" or is_dsv4(model)
        )
        if latent and tk != tv:
            held = "K = V rows as K only" if is_dsv4(model) else "the MLA latent as K, V is a view of it"
            raise KvcalcError(
                f'llama.cpp refuses it: "{func}: model does not support different K ({tk}) and V '
                f'({tv}) cache types" ({model.name} caches {held}); '
                "give one type to -ctk and -ctv",
                field="v_dtype",
                value=tv,
            )
        if tv in QUANTIZED and not flash_attn:
            raise KvcalcError(
                f'llama.cpp refuses it: "{func}: quantized V cache requires flash_attn to be '
                'enabled"; add -fa on (or auto) or use an f16 V cache',
                field="v_dtype",
                value=tv,
            )
        if not flash_attn:
            return
        for which, t in (("K", tk), ("V", tv)):
            if t not in QUANTIZED:
                continue
            bad = [hs[which == "V"] for hs in self.head_sizes(model) if hs[which == "V"] % QUANT_BLOCK]
            if bad:
                raise KvcalcError(
                    f'llama.cpp refuses it: "{func}: {which} cache type {t} with block size '
                    f'{QUANT_BLOCK} does not divide n_embd_head_{which.lower()}={bad[0]}"; use an f16 '
                    f"or bf16 {which} cache for {model.name}",
                    field=f"{which.lower()}_dtype",
                    value=t,
                )

    def caches(
        self,
        model: ModelSpec,
        lay: Layers,
        requested: int,
        ctx: Context,
        *,
        n_ubatch: int,
        iswa: bool,
        flash_attn: bool,
    ) -> Caches:
        return current_caches(
            model,
            lay,
            requested,
            parallel=ctx.parallel,
            unified=ctx.unified,
            iswa=iswa,
            swa_full=ctx.swa_full,
            n_ubatch=n_ubatch,
        )

    def own_swa_cache(self, model: ModelSpec) -> bool:
        return is_dsv4(model)  # llama_kv_cache_dsv4's raw llama_kv_cache_iswa

    def recurrent(self, model: ModelSpec, dev: list[int], n_seq_max: int) -> tuple[list[str], int, list[str]]:
        if is_dsv4(model):  # the compressor states, f32, per sequence
            return dsv4_state_lines(model, dev, n_seq_max)
        return recurrent_lines(model, dev, n_seq_max)


RULES = Current()
