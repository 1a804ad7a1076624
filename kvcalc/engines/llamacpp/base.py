"""The interface every llama.cpp version module implements (`LlamacppRules`), and the
allocation they share (`LlamacppRules.allocate`), calling each version's own rules where they
differ.

A version is one subclass in its own module (`current.Current`, `legacy.Legacy`), registered
in `kvcalc.engines.llamacpp.versions.VERSION_MODULES`; `kvcalc.engines.llamacpp.rules(version)`
gives its instance. The version is chosen once, from `LlamacppOptions.version`; nothing below
takes a version argument.

A cache larger than a given `--kv-memory` is allocated anyway by kvcalc, with a
`KvcalcWarning`: llama.cpp itself would fail to allocate the buffer on a device of that size.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import TYPE_CHECKING, ClassVar

from kvcalc.calc.kv_cache import refuse_indexer
from kvcalc.engines import SEARCH_LIMIT_TOKENS, longest_fitting
from kvcalc.engines.llamacpp.common import (
    FLASH_ATTN,
    N_CTX_PAD,
    TOOLS,
    Caches,
    Context,
    Layers,
    check_options,
    device_of_layers,
    expanded_mla_layer,
    fill,
    ggml_name,
    head_sizes,
    layer_k_v_bytes_per_cell,
    mib_f32,
    n_ctx_train,
    pad_v_rows,
    v_pad_line,
)
from kvcalc.errors import MESSAGE, OPTION, KvcalcError, KvcalcWarning, flag
from kvcalc.formats import StorageFormat
from kvcalc.results import DeviceBuffer, EngineResult
from kvcalc.schema import ModelSpec

if TYPE_CHECKING:
    from kvcalc.engines.llamacpp.options import LlamacppOptions


def check_tool_and_flash_attn(tool: str, flash_attn: bool | str | None) -> str | None:
    """`flash_attn` as llama.cpp's `-fa` value ('on', 'off', 'auto'; None: not given); raises
    `KvcalcError` (field `llamacpp_tool` / `flash_attn`) for an unknown tool or `-fa` value."""
    if tool not in TOOLS:
        raise KvcalcError(
            f"use one of {', '.join(TOOLS)}, not '{tool}'",
            option="--llamacpp-tool",
            field="llamacpp_tool",
            value=tool,
            form=OPTION,
        )
    fa = {True: "on", False: "off"}.get(flash_attn, flash_attn) if isinstance(flash_attn, bool) else flash_attn
    if fa is not None and fa not in FLASH_ATTN:
        raise KvcalcError(
            f"'{fa}' is not on, off or auto (llama.cpp's -fa values)",
            option="-fa",
            field="flash_attn",
            value=fa,
            form=OPTION,
        )
    return fa


class LlamacppRules:
    """One llama.cpp version's rules. Class attributes:

    - `version`: the `--llamacpp-version` value; the result's `engine_version` is
      "llama.cpp (<version>)";
    - `default_mla_cache`: how an MLA model's cache is laid out when the model does not say
      (`common.MLA_CACHES`);
    - `default_flash_attn`: `-fa` when not given;
    - `max_seq`: the most sequences llama.cpp takes (None: no limit);
    - `swa_cache`: models with sliding and full layers get a separate SWA cache;
    - `no_swa_cache_note`: why sliding layers get the full cache size when there is none.
    """

    version: ClassVar[str]
    default_mla_cache: ClassVar[str]
    default_flash_attn: ClassVar[str]
    max_seq: ClassVar[int | None] = None
    swa_cache: ClassVar[bool]
    no_swa_cache_note: ClassVar[str]

    # ----- what each version states -------------------------------------------------------

    def context(
        self, *, tool: str, parallel: int | None, unified: bool | None, swa_full: bool | None, flash_attn: str
    ) -> Context:
        """The options llama.cpp runs with, `flash_attn` being an `-fa` value."""
        raise NotImplementedError

    def check_refusals(self, model: ModelSpec, tk: str, tv: str, *, flash_attn: bool) -> None:
        """Raise `KvcalcError` where `llama_init_from_model` returns no context."""
        raise NotImplementedError

    def prepare(self, model: ModelSpec, flash_attn: bool, tv: str) -> tuple[bool, list[str]]:
        """(flash attention as llama.cpp runs it, notes), after refusing a model this version
        cannot load: `flash_attn` and no notes by default."""
        return flash_attn, []

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
        """The caches of one allocation of `requested` cells (`common.Caches`)."""
        raise NotImplementedError

    def recurrent(self, model: ModelSpec, dev: list[int], n_seq_max: int) -> tuple[list[str], int, list[str]]:
        """(lines, bytes, notes) of the recurrent memory beside the KV cache: none by default."""
        return [], 0, []

    def own_swa_cache(self, model: ModelSpec) -> bool:
        """True where the model's memory class keeps its own window-sized cache for an all-sliding
        model (llama.cpp 0c1e570's DeepSeek-V4); False by default."""
        return False

    # ----- shared -------------------------------------------------------------------------

    def mla_cache(self, model: ModelSpec) -> str:
        """How llama.cpp lays out an MLA model's cache: the model's own `mla_cache` when it states
        one (a GGUF tells: the files converted for the latent cache carry
        `deepseek2.attention.key_length_mla`), else `default_mla_cache`."""
        own = getattr(model, "mla_cache", None)
        return own if own is not None else self.default_mla_cache

    def head_sizes(self, model: ModelSpec) -> list[tuple[int, int]]:
        """`common.head_sizes` with this version's MLA layout (`mla_cache`)."""
        return head_sizes(model, self.mla_cache(model))

    def resolve_context(
        self,
        *,
        tool: str,
        parallel: int | None = None,
        unified: bool | None = None,
        swa_full: bool | None = None,
        flash_attn: bool | str | None = None,
    ) -> Context:
        """The options llama.cpp runs with: what was given, the rest from `tool`'s defaults
        (`context`). `flash_attn` None is `default_flash_attn`, True 'on', False 'off'. Raises
        `KvcalcError` (field `llamacpp_tool` / `flash_attn`) for an unknown tool or `-fa` value."""
        fa = check_tool_and_flash_attn(tool, flash_attn)
        return self.context(
            tool=tool, parallel=parallel, unified=unified, swa_full=swa_full, flash_attn=fa or self.default_flash_attn
        )

    def check_model(self, model: ModelSpec) -> None:
        """Raise `KvcalcError` (field `model`) for a model this version cannot size: by default
        DeepSeek-V3.2's indexer and the 2026 layer features (`kv_cache.refuse_indexer`)."""
        refuse_indexer(model, "llama.cpp")

    def allocate(
        self,
        model: ModelSpec,
        n_ctx: int,
        k: StorageFormat,
        v: StorageFormat,
        *,
        options: LlamacppOptions,
        max_model_len: int | None = None,
        concurrency: int | None = None,
        kv_memory_bytes: int | None = None,
    ) -> EngineResult:
        """`kvcalc.engines.llamacpp.allocate` in this version."""
        o = options
        ctx = self.resolve_context(
            tool=o.tool, parallel=o.parallel, unified=o.unified, swa_full=o.swa_full, flash_attn=o.flash_attn
        )
        check_options(
            n_ctx,
            parallel=ctx.parallel,
            n_ubatch=o.n_ubatch,
            n_batch=o.n_batch,
            n_gpu_layers=o.n_gpu_layers,
            n_devices=o.n_devices,
            max_seq=self.max_seq,
        )
        parallel = ctx.parallel
        self.check_model(model)
        tk, tv = ggml_name(k), ggml_name(v, field="v_dtype")
        notes: list[str] = list(ctx.notes)
        flash_on, more_notes = self.prepare(model, ctx.flash_attn, tv)
        notes += more_notes
        self.check_refusals(model, tk, tv, flash_attn=flash_on)
        requested = n_ctx * parallel if o.ollama else n_ctx
        if o.ollama:  # ollama hands llama.cpp n_ctx x parallel cells: llama.cpp's 32-bit bound applies to the product
            from kvcalc.units import check_bound

            check_bound("n_ctx", requested or None, option=f"{flag('n_ctx')} {n_ctx} x {flag('parallel')} {parallel} =")
            notes.append(
                f"ollama passes n_ctx x OLLAMA_NUM_PARALLEL = {n_ctx:,} x {parallel:,} = {requested:,} to llama.cpp"
            )
        if requested == 0:  # llama_context: n_ctx = params.n_ctx == 0 ? hparams.n_ctx_train : params.n_ctx
            requested = n_ctx_train(model)
            notes.append(
                f"-c 0: n_ctx = n_ctx_train = {requested:,} (the model's max_position_embeddings, "
                "the GGUF's context_length)"
            )
        # llama_context: n_batch = min(n_ctx, n_batch) (causal attention); n_ubatch = min(n_batch, n_ubatch)
        n_ubatch_eff = min(min(requested, o.n_batch), o.n_ubatch)
        mla = self.mla_cache(model)
        expanded = expanded_mla_layer(model) if mla == "expanded" and model.attention == "mla" else None
        att = [i for i, layer in enumerate(model.layers) if layer.caches_kv]
        if expanded is not None:
            notes.append(
                "MLA cached as K and V per head (llama.cpp before the latent cache of April 2025, "
                f"or a GGUF without key_length_mla): {model.n_heads} heads x "
                f"{expanded.head_dim_k} K + {expanded.head_dim_v} V values per layer"
            )
        per_cell = [
            layer_k_v_bytes_per_cell(expanded if expanded is not None and layer.kind == "mla" else layer, k, v)
            if layer.caches_kv
            else (0, 0)
            for layer in model.layers
        ]
        if not flash_on:  # V stored transposed: each layer's row padded to the widest ([TAG_V_CACHE_VARIABLE])
            per_cell = pad_v_rows(model, per_cell, v)
        tensor_split = list(o.tensor_split) if o.tensor_split else None
        dev = device_of_layers(model.n_layers, o.n_gpu_layers, tensor_split, o.n_devices)
        lay = Layers(att, per_cell, dev, tk, tv, v_pad_line(model, ctx.flash_attn))
        kinds = {model.layers[i].kind for i in att}
        iswa = self.swa_cache and "sliding" in kinds and len(kinds) > 1
        if "sliding" in kinds and not iswa and not self.own_swa_cache(model):
            notes.append("sliding-window layers get the full cache size " + self.no_swa_cache_note)
        c = self.caches(model, lay, requested, ctx, n_ubatch=n_ubatch_eff, iswa=iswa, flash_attn=flash_on)
        more, state, more_notes = self.recurrent(model, dev, parallel)
        c.lines += more
        notes += more_notes
        state_bytes = state if more else None
        devices = [
            DeviceBuffer(device=d, n_layers=c.buffers[d][0], kv_bytes=c.buffers[d][1])
            for d in sorted(c.buffers, key=lambda s: (s == "CPU", s))
        ]
        conc, longest = fill(c, max_model_len, concurrency, parallel, has_kv=bool(att))
        kv_bytes = c.k_bytes + c.v_bytes
        total = kv_bytes + (state_bytes or 0)
        if kv_memory_bytes is not None and total > kv_memory_bytes:
            fit = self.largest_ctx_size(
                model,
                kv_memory_bytes,
                k,
                v,
                options=dataclasses.replace(
                    o, parallel=parallel, unified=ctx.unified, flash_attn=ctx.flash_attn, swa_full=ctx.swa_full
                ),
            )
            what = "of KV cache" + (" and recurrent state" if state_bytes else "")
            msg = (
                f"{flag('n_ctx')} {n_ctx} allocates {mib_f32(total):.2f} MiB {what}, more than "
                f"{flag('kv_memory_bytes')} {mib_f32(kv_memory_bytes):.2f} MiB: llama.cpp would fail to allocate "
                "the KV buffer on a device that size; "
                + (f"the largest {flag('n_ctx')} that fits is {fit}" if fit else "not even 256 cells fit")
            )
            notes.append(msg)
            warnings.warn(msg, KvcalcWarning, stacklevel=3)  # at allocate's caller
        return EngineResult(
            engine="llamacpp",
            engine_version=f"llama.cpp ({self.version})",
            kv_memory_bytes=kv_memory_bytes,
            kv_cache_dtype=tk if tk == tv else f"{tk}/{tv}",
            kv_cache_tokens=c.n_seq_cells * c.n_stream,
            engine_kv_bytes=kv_bytes,
            engine_state_bytes=state_bytes,
            max_model_len=max_model_len,
            max_concurrency=conc,
            concurrency=concurrency,
            longest_context=longest,
            n_cells=c.n_seq_cells * c.n_stream,
            n_ctx=c.n_ctx,
            k_bytes=c.k_bytes,
            v_bytes=c.v_bytes,
            devices=devices,
            log_lines=c.lines,
            notes=notes,
        )

    def largest_ctx_size(
        self, model: ModelSpec, kv_memory_bytes: int, k: StorageFormat, v: StorageFormat, *, options: LlamacppOptions
    ) -> int:
        """The largest `--ctx-size` (a multiple of 256, ollama: per sequence) whose cache and
        recurrent state fit in `kv_memory_bytes` (summed over devices); 0 when not even 256 cells fit."""

        def fits(units: int) -> bool:
            r = self.allocate(model, units * N_CTX_PAD, k, v, options=options)
            return r.engine_kv_bytes + (r.engine_state_bytes or 0) <= kv_memory_bytes

        units = longest_fitting(fits, SEARCH_LIMIT_TOKENS // N_CTX_PAD)
        return (SEARCH_LIMIT_TOKENS // N_CTX_PAD if units is None else units) * N_CTX_PAD

    def capacity(
        self,
        model: ModelSpec,
        kv_memory_bytes: int,
        k: StorageFormat,
        v: StorageFormat,
        *,
        options: LlamacppOptions,
        max_model_len: int | None = None,
        concurrency: int | None = None,
    ) -> EngineResult:
        """The largest `--ctx-size` (`largest_ctx_size`) and what llama.cpp allocates for it.
        Raises `KvcalcError` when not even 256 cells fit."""
        n_ctx = self.largest_ctx_size(model, kv_memory_bytes, k, v, options=options)
        if n_ctx == 0:
            raise KvcalcError(
                f"{kv_memory_bytes:,} B does not hold even 256 cells of {model.name}'s cache",
                field="kv_memory_bytes",
                value=kv_memory_bytes,
                form=MESSAGE,
            )
        res = self.allocate(
            model,
            n_ctx,
            k,
            v,
            options=options,
            max_model_len=max_model_len,
            concurrency=concurrency,
            kv_memory_bytes=kv_memory_bytes,
        )
        return res.model_copy(
            update={"notes": res.notes + [f"largest --ctx-size that fits: {n_ctx:,} cells (-c {n_ctx})"]}
        )
