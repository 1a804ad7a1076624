"""llama.cpp of the "KV self size" era (`--llamacpp-version legacy`): its own cache and refusals.

Delete this module and its line in `kvcalc.engines.llamacpp.versions.VERSION_MODULES` to drop it.

llama.cpp of 2024 to spring 2025 (the "KV self size" era, as in ollama's runner),
pinned to commit 7841fc7 (March 2025), the one llama-cpp-python 0.3.8 vendors and the legacy
oracle runs (docs/engine-oracles.md): n_ctx = GGML_PAD(n_ctx, flash_attn ? 256 : 32)
(`llama_kv_cache_get_padding`), one unified cache of n_ctx cells with every layer, sliding
ones full size (the SWA cache came with PR #13194, May 2025); MLA K and V expanded per head
(n_heads x (qk_nope_head_dim + qk_rope_head_dim) of K, n_heads x v_head_dim of V per layer:
before PR #12801); one slot unless `--parallel`; `-fa` a switch, off by default. Logs
"llama_kv_cache_init: kv_size = %d, offload = %d, type_k = '%s', type_v = '%s', n_layer = %d,
can_shift = %d" (can_shift 0 for DeepSeek-V2 (MLA) and recurrent models), "llama_kv_cache_init:
%10s KV buffer size = %8.2f MiB" per device and "llama_init_from_model: KV self size  = %7.2f
MiB, K (%s): %7.2f MiB, V (%s): %7.2f MiB" (two spaces before '='; builds before the January
2025 rename log it from llama_new_context_with_model, with the same figures). Found by the
oracle run, each in `tests/engines/test_llamacpp_legacy.py`: `-fa` is forced off for a model
whose K and V heads differ (the expanded DeepSeek cache: "flash_attn requires n_embd_head_k ==
n_embd_head_v - forcing off", `legacy_flash_attn`), so it pads to 32 and a quantized V is
refused; a pure recurrent model (Mamba) keeps its conv and SSM state as K and V of max(1,
n_seq_max) cells in f32. Refused (`refuse_legacy`): hybrid attention + recurrent models (no
such architecture yet) and DeepSeek GGUFs converted for the latent cache (no attn_kv_b).

The tool (`--llamacpp-tool`) changes nothing here: one cache for every sequence, no SWA cache.
"""

from __future__ import annotations

from kvcalc.engines.llamacpp.base import LlamacppRules
from kvcalc.engines.llamacpp.common import (
    QUANT_BLOCK,
    QUANTIZED,
    RECURRENT_BYTES,
    RECURRENT_TYPE,
    Caches,
    Context,
    Layers,
    cache_lines,
    head_sizes,
    mib_f32,
    pad,
    recurrent_r_s_values,
)
from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.schema import ModelSpec


def legacy_flash_attn(model: ModelSpec, flash_attn: bool) -> tuple[bool, str | None]:
    """(flash attention as legacy llama.cpp runs it, the warning it logs or None). 7841fc7's
    `llama_init_from_model` (`src/llama.cpp`) turns `-fa` off for a model whose K and V heads
    differ: "flash_attn requires n_embd_head_k == n_embd_head_v - forcing off", e.g. the expanded
    DeepSeek-V2 cache (K 128 + 64 = 192, V 128). Off, the context pads to 32 and a quantized V
    cache is refused (`check_refusals`). (It also forces it off for Grok, which kvcalc does not read.)"""
    if not flash_attn:
        return False, None
    if any(hk != hv for hk, hv in head_sizes(model, RULES.mla_cache(model))):
        return False, "llama_init_from_model: flash_attn requires n_embd_head_k == n_embd_head_v - forcing off"
    return True, None


def refuse_legacy(model: ModelSpec) -> None:
    """Raise `KvcalcError` (field `llamacpp_version`) for what legacy llama.cpp (7841fc7) cannot
    load: hybrid attention + recurrent models (its only recurrent architectures are mamba, rwkv6
    and rwkv6qwen2, `llama_model_is_recurrent` in `src/llama-model.cpp`: Jamba, Falcon-H1,
    Nemotron-H, Granite-4.0-H, Qwen3-Next / Qwen3.5 came later), and a DeepSeek GGUF converted for
    the MLA latent cache (`mla_cache` 'latent' from the file's key_length_mla): since PR #12801
    convert_hf_to_gguf.py splits attn_kv_b into attn_k_b and attn_v_b, and 7841fc7 requires
    attn_kv_b (`llama_model::load_tensors`: "missing tensor 'blk.0.attn_kv_b.weight'")."""
    kinds = {layer.kind for layer in model.layers if layer.caches_kv}
    if kinds and any(layer.keeps_state for layer in model.layers):
        raise KvcalcError(
            f"{model.name} mixes attention and recurrent (mamba / linear) layers: llama.cpp of the "
            "'KV self size' era has no such architecture and fails to load it (\"unknown model "
            'architecture"); use --llamacpp-version current',
            field="llamacpp_version",
            value="legacy",
            form=MESSAGE,
        )
    if "mla" in kinds and getattr(model, "mla_cache", None) == "latent":
        raise KvcalcError(
            f"{model.name} is a GGUF converted for the MLA latent cache (key_length_mla, attn_k_b / "
            'attn_v_b): llama.cpp before PR #12801 (legacy) fails to load it ("missing tensor '
            "'blk.0.attn_kv_b.weight'\"); use --llamacpp-version current",
            field="llamacpp_version",
            value="legacy",
            form=MESSAGE,
        )


def legacy_caches(model: ModelSpec, lay: Layers, requested: int, parallel: int, flash_attn: bool) -> Caches:
    """The 'KV self size' era (llama.cpp 7841fc7, `src/llama.cpp` `llama_init_from_model`,
    `src/llama-kv-cache.cpp` `llama_kv_cache_init`): n_ctx = GGML_PAD(n_ctx, flash_attn ? 256 :
    32) (`llama_kv_cache_get_padding`); one unified cache of n_ctx cells holding every layer,
    sliding ones full size. A recurrent model (`llama_model_is_recurrent`: Mamba) keeps
    kv_size = max(1, n_seq_max) cells instead, K and V forced to f32 ("it's probably best to keep
    as much precision as possible for the states"), each layer's K row n_embd_k_gqa(il) +
    n_embd_k_s() = (d_conv - 1) x d_inner values and V row n_embd_v_s() = d_state x d_inner.
    can_shift = !recurrent && arch != LLM_ARCH_DEEPSEEK2 ("not supported due to MLA")."""
    buffers: dict[str, tuple[int, int]] = {}
    n_ctx = pad(requested, 256 if flash_attn else 32)
    recurrent = not lay.att and any(layer.keeps_state for layer in model.layers)
    cells = max(1, parallel) if recurrent else n_ctx
    layers = [i for i, layer in enumerate(model.layers) if layer.keeps_state] if recurrent else lay.att
    # every MLA model kvcalc reads is llama.cpp's deepseek2 architecture (DeepSeek-V2/V3/R1, Kimi-K2)
    can_shift = int(not recurrent and not any(layer.kind == "mla" for layer in model.layers))
    tk, tv = (RECURRENT_TYPE, RECURRENT_TYPE) if recurrent else (lay.tk, lay.tv)
    lines = [
        f"llama_kv_cache_init: kv_size = {cells}, offload = 1, type_k = '{tk}', type_v = '{tv}', "
        f"n_layer = {model.n_layers}, can_shift = {can_shift}"
    ]
    if recurrent:
        per_cell = list(lay.per_cell)
        for il in layers:
            r, s_values = recurrent_r_s_values(model, model.layers[il])
            per_cell[il] = (r * RECURRENT_BYTES, s_values * RECURRENT_BYTES)
    else:
        per_cell = lay.per_cell
    more, k_tot, v_tot = cache_lines(
        "llama_kv_cache_init",
        cells,
        1,
        parallel,
        layers,
        per_cell,
        lay.dev,
        tk,
        tv,
        buffers,
        cpu_last=True,
        size_line=False,
    )
    lines += more
    lines.append(
        f"llama_init_from_model: KV self size  = {mib_f32(k_tot + v_tot):7.2f} MiB, "
        f"K ({tk}): {mib_f32(k_tot):7.2f} MiB, V ({tv}): {mib_f32(v_tot):7.2f} MiB"
    )
    return Caches(lines, k_tot, v_tot, n_stream=1, n_seq_cells=cells, n_ctx=n_ctx, buffers=buffers)


class Legacy(LlamacppRules):
    """llama.cpp 7841fc7 (March 2025)."""

    version = "legacy"
    default_mla_cache = "expanded"  # before llama.cpp PR #12801 (April 2025)
    default_flash_attn = "off"  # -fa a switch, off by default
    swa_cache = False
    no_swa_cache_note = "(before llama.cpp PR #13194)"

    def context(
        self, *, tool: str, parallel: int | None, unified: bool | None, swa_full: bool | None, flash_attn: str
    ) -> Context:
        """One cache for every sequence, no SWA cache: the tool changes nothing; one sequence
        unless `parallel`."""
        return Context(1 if parallel is None else parallel, True, bool(swa_full), flash_attn != "off", ())

    def prepare(self, model: ModelSpec, flash_attn: bool, tv: str) -> tuple[bool, list[str]]:
        """`refuse_legacy`, then `legacy_flash_attn`: forced off, a quantized V is refused."""
        refuse_legacy(model)
        flash_on, forced_off = legacy_flash_attn(model, flash_attn)
        if not forced_off:
            return flash_on, []
        if tv in QUANTIZED:
            raise KvcalcError(
                f'llama.cpp refuses it: "{forced_off}", then "llama_init_from_model: V cache '
                'quantization requires flash_attn"; use an f16 V cache',
                field="v_dtype",
                value=tv,
            )
        return flash_on, [forced_off.removeprefix("llama_init_from_model: ")]

    def check_refusals(self, model: ModelSpec, tk: str, tv: str, *, flash_attn: bool) -> None:
        """Raise `KvcalcError` (field `k_dtype` / `v_dtype`) where 7841fc7's `llama_init_from_model`
        returns no context, with llama.cpp's own message: a quantized V cache with flash attention
        off ("V cache quantization requires flash_attn"); whatever `-fa` says, a quantized type
        whose 32-value block does not divide a head size makes llama.cpp abort
        (`GGML_ASSERT(hparams.n_embd_head_k % ggml_blck_size(type_k) == 0)`)."""
        func = "llama_init_from_model"  # 7841fc7 logs from llama_init_from_model
        if tv in QUANTIZED and not flash_attn:
            raise KvcalcError(
                f'llama.cpp refuses it: "{func}: V cache quantization requires flash_attn"; add -fa '
                "on (or auto) or use an f16 V cache",
                field="v_dtype",
                value=tv,
            )
        for which, t in (("k", tk), ("v", tv)):
            bad = [hs[which == "v"] for hs in self.head_sizes(model) if hs[which == "v"] % QUANT_BLOCK]
            if t in QUANTIZED and bad:
                raise KvcalcError(
                    f'llama.cpp aborts: "GGML_ASSERT(hparams.n_embd_head_{which} % '
                    f'ggml_blck_size(type_{which}) == 0) failed" ({t} blocks of {QUANT_BLOCK} values, '
                    f"heads of {bad[0]}); use an f16 or bf16 {which.upper()} cache for {model.name}",
                    field=f"{which}_dtype",
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
        return legacy_caches(model, lay, requested, ctx.parallel, flash_attn)


RULES = Legacy()
