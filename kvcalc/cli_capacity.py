"""`kvcalc capacity`: what an engine makes of a KV memory budget, with the lines it logs.

`kvcalc capacity MODEL --kv-memory 6.51GiB --engine vllm --max-model-len 32768` prints vLLM's
"GPU KV cache size" and "Maximum concurrency" lines; `--engine sglang` SGLang's pool line;
`--engine llamacpp --ctx-size 32768` llama.cpp's buffer and size lines (or, given --kv-memory,
the largest --ctx-size that fits). Also `engine_part`, which `kvcalc estimate --engine` uses.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, Optional

import typer

from kvcalc.cli import (
    FormatOpt,
    KDtypeOpt,
    ModelArg,
    TpOpt,
    VDtypeOpt,
    app,
    check_format,
    check_positive,
    echo,
    emit_parts,
    handle_errors,
    refuse_typed,
)
from kvcalc.errors import KvcalcError

EngineOpt = Annotated[str, typer.Option("--engine", "-e", help="ideal (exact formula), vllm, sglang or llamacpp.")]
BlockSizeOpt = Annotated[int, typer.Option("--block-size", help="vLLM tokens per block.")]
PageSizeOpt = Annotated[int, typer.Option("--page-size", help="SGLang tokens per page.")]
ParallelOpt = Annotated[int, typer.Option("--parallel", "-np", help="llama.cpp sequences (n_seq_max); ollama: OLLAMA_NUM_PARALLEL.")]


def resolve_formats(spec: Any, engine: str, kv_dtype: str | None, k_dtype: str | None,
                    v_dtype: str | None, v0: bool = False) -> tuple[Any, Any, str, bool]:
    """(K format, V format, the dtype name as the engine spells it, per-token-head scales).

    No --kv-dtype (or 'auto') is the ENGINE's default, from its profile's `default_kv_dtype`:
    vLLM and SGLang serve the model's dtype (fp32 checkpoints downcast to 2 bytes), llama.cpp
    uses f16 whatever the model's dtype; the label says which was used. vLLM's
    `int8_per_token_head` / `fp8_per_token_head` are int8 / fp8 values plus fp32 scales per
    token and head."""
    from kvcalc.dtypes import kv_format
    from kvcalc.engines import profile

    mod = profile(engine)
    default, label = mod.default_kv_dtype(spec, v0=v0) if engine == "vllm" else mod.default_kv_dtype(spec)
    scales = False
    base = (kv_dtype or "auto").strip()
    shown = base
    if engine == "vllm":
        from kvcalc.engines.vllm import split_kv_dtype

        plain, scales = split_kv_dtype(base)
        if scales and plain not in ("int8", "fp8"):
            raise KvcalcError(f"--kv-dtype {base}: vLLM has int8_per_token_head and fp8_per_token_head only")
        base = plain
    if base.lower() == "auto":
        base, shown = default, label
    k = kv_format(k_dtype or base)
    v = kv_format(v_dtype or base)
    if k_dtype or v_dtype:
        shown = k.name if k == v else f"{k.name}/{v.name}"
    return k, v, shown, scales


def result_table(res: Any, title: str) -> Any:
    """The rich table of an `EngineResult` (the log lines are printed by `show_result`)."""
    from rich.table import Table

    from kvcalc.report import gib, mib, size

    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("engine", res.engine_version)
    if res.kv_memory_bytes is not None:
        t.add_row("KV memory", size(res.kv_memory_bytes))
    if res.kv_memory_basis:
        t.add_row("KV memory basis", res.kv_memory_basis)
    t.add_row("KV cache dtype", res.kv_cache_dtype)
    if res.n_ctx is not None:
        t.add_row("n_ctx (padded)", f"{res.n_ctx:,}")
        t.add_row("cells", f"{res.n_cells:,}")
    if res.num_gpu_blocks is not None:
        unit = "pages" if res.engine == "sglang" else "blocks"
        extra = f", {res.usable_blocks:,} usable (one null block)" if res.usable_blocks is not None else ""
        t.add_row(unit, f"{res.num_gpu_blocks:,} of {res.block_size} tokens, {res.page_size_bytes:,} B each{extra}")
    if res.num_cpu_blocks is not None:
        t.add_row("CPU (swap) blocks", f"{res.num_cpu_blocks:,}")
    t.add_row("KV cache tokens", f"{res.kv_cache_tokens:,}")
    t.add_row("allocated", size(res.engine_kv_bytes))
    if res.k_bytes is not None:
        t.add_row("K / V", f"{res.k_bytes:,} B ({mib(res.k_bytes)}) / {res.v_bytes:,} B ({mib(res.v_bytes)})")
    for d in res.devices or []:
        t.add_row(f"  {d.device}", f"{d.n_layers} layers, {d.kv_bytes:,} B ({mib(d.kv_bytes)}, {gib(d.kv_bytes)})")
    if res.max_concurrency is not None:
        t.add_row("max concurrency", f"{res.max_concurrency:.2f}x requests of {res.max_model_len:,} tokens")
    if res.concurrency:
        longest = ("no limit (sliding windows cap each request)" if res.longest_context is None
                   else f"{res.longest_context:,} tokens")
        t.add_row(f"longest context at {res.concurrency}x", longest)
    for n in res.notes:
        t.add_row("note", n)
    return t


def show_result(res: Any, title: str) -> str:
    """Print the table, then the engine's log lines as plain text (never wrapped or cropped, so
    they diff against the engine's log); returns '' for callers that echo a result."""
    echo(result_table(res, title))
    if res.log_lines and res.engine != "ideal":  # the exact formula is no engine: nothing to diff
        typer.echo(f"{res.engine} would log:")
        for line in res.log_lines:
            typer.echo(line)
    return ""


def engine_part(spec: Any, seq_len: int, batch: int, k: str, v: str, tp: int, engine: str,
                block_size: int = 16, page_size: int = 1, parallel: int | None = None, *,
                kv_given: bool = True, plan: Any = None) -> tuple[Any, Callable[[], Any]] | None:
    """(EngineResult, table builder) for `estimate --engine`, or None when the engine would not start.

    `kv_given`: the user gave a KV dtype (`k`, `v` are used as they are); otherwise the engine's
    own default (llama.cpp: f16; vLLM / SGLang: the model's dtype, fp32 downcast).
    KV memory: with `plan` (the `ServingEstimate` of `estimate --gpu`), what the plan leaves for
    the KV cache on one GPU, as vLLM sizes it: budget - weights - state - activation reserve -
    CUDA context, i.e. the plan's `headroom_bytes + kv_cache_bytes_per_gpu` (the KV the engine
    then takes is all of it). Without a plan, the memory this batch needs ("sized for this batch").
    llama.cpp allocates n_ctx = T x B cells (--parallel B) either way.
    """
    import warnings

    from kvcalc.dtypes import kv_format
    from kvcalc.engines import canonical, profile
    from kvcalc.errors import KvcalcWarning

    name = canonical(engine)
    check_positive(block_size=block_size, page_size=page_size)
    if kv_given:
        kf, vf = kv_format(k), kv_format(v)
        shown = None
    else:
        kf, vf, shown, _ = resolve_formats(spec, name, None, None, None)
    mod = profile(name)
    if name in ("vllm", "sglang"):
        size_opt = dict(block_size=block_size) if name == "vllm" else dict(page_size=page_size)
        if name == "vllm":
            mod.check_block_size(block_size)
        if plan is not None:
            mem = plan.headroom_bytes + plan.kv_cache_bytes_per_gpu
            basis = (f"what the {plan.gpu} plan leaves for KV per GPU: {plan.gpu_memory_utilization:g} x GPU memory "
                     "- weights - activations - CUDA context"
                     + (" (vLLM's rule; SGLang's own budget comes from --mem-fraction-static)" if name == "sglang" else ""))
            if mem <= 0:
                warnings.warn(f"{name} would fail at start-up on {plan.gpu}: the plan leaves {mem:,} B for the KV "
                              f"cache: {mod.NO_MEMORY}", KvcalcWarning, stacklevel=2)
                return None
            title = f"{name}: what it allocates on {plan.gpu} (KV memory from the GPU plan)"
        else:
            mem = mod.memory_for(spec, seq_len, batch, kf, vf, tp=tp, **size_opt)
            basis = f"sized for this batch ({batch} x {seq_len:,} tokens), not a GPU's budget: give --gpu for that"
            title = f"{name}: sized for this batch ({batch} x {seq_len:,} tokens)"
        res = mod.capacity(spec, mem, kf, vf, tp=tp, max_model_len=seq_len, concurrency=batch,
                           kv_cache_dtype=shown, **size_opt)
    elif name == "llamacpp":
        if tp != 1:
            raise KvcalcError("llama.cpp splits layers, not heads: use --engine llamacpp with --tp 1")
        res = mod.allocate(spec, seq_len * batch, kf, vf, parallel=parallel or batch, max_model_len=seq_len,
                           concurrency=batch)
        basis = f"n_ctx = {batch} x {seq_len:,} tokens, --parallel {parallel or batch}"
        title = f"{name}: what it allocates for {batch} x {seq_len:,} tokens"
    else:
        raise KvcalcError("--engine ideal is estimate's own result")
    res = res.model_copy(update={"kv_memory_basis": basis})
    return res, lambda: show_result(res, title)


def _split(text: str | None) -> list[float] | None:
    if not text:
        return None
    try:
        return [float(x) for x in text.replace("/", ",").split(",") if x.strip()]
    except ValueError:
        raise KvcalcError(f"--tensor-split: '{text}' is not a list of numbers (write 63,37)") from None


#: options that mean something to one engine only; typed with another engine they are refused
ENGINE_ONLY_OPTIONS: dict[str, tuple[str, ...]] = {
    "vllm": ("block_size", "disable_hybrid", "max_num_batched_tokens", "v0", "swap_space"),
    "sglang": ("page_size",),
    "llamacpp": ("ctx_size", "parallel", "kv_unified", "swa_full", "flash_attn", "llamacpp_version",
                 "n_gpu_layers", "gpus", "tensor_split", "ubatch_size", "ollama"),
}


@app.command()
@handle_errors
def capacity(
    ctx: typer.Context,
    model: ModelArg,
    kv_memory: Annotated[Optional[str], typer.Option("--kv-memory", "-m", help="KV memory per GPU rank: 6.51GiB, 80GB or bytes (vLLM: 'Available KV cache memory'; SGLang: the static pool budget).")] = None,
    engine: EngineOpt = "ideal",
    max_model_len: Annotated[Optional[str], typer.Option("--max-model-len", "-L", help="Tokens per request for the concurrency figure (8192 or 32k). Default: the model's max_position_embeddings.")] = None,
    concurrency: Annotated[Optional[int], typer.Option("--concurrency", "-c", help="Also find the longest context that fits this many requests at once.")] = None,
    tp: TpOpt = 1,
    kv_dtype: Annotated[Optional[str], typer.Option("--kv-dtype", help="auto (the engine's default: the model's dtype, fp32 served as 16-bit; llama.cpp f16), bf16, fp16, fp8, fp8_e5m2; vLLM int8_per_token_head / fp8_per_token_head; llama.cpp f16, q8_0, q4_0 ...")] = None,
    k_dtype: KDtypeOpt = None,
    v_dtype: VDtypeOpt = None,
    block_size: BlockSizeOpt = 16,
    page_size: PageSizeOpt = 1,
    disable_hybrid: Annotated[bool, typer.Option("--disable-hybrid-kv-cache-manager", help="vLLM: sliding-window layers keep every token (no hybrid allocator).")] = False,
    max_num_batched_tokens: Annotated[int, typer.Option("--max-num-batched-tokens", help="vLLM: sizes sliding-window pages in the concurrency figure.")] = 8192,
    v0: Annotated[bool, typer.Option("--vllm-v0", help="vLLM's V0 engine (0.6.x): '# GPU blocks' lines.")] = False,
    swap_space: Annotated[str, typer.Option("--swap-space", help="vLLM V0 CPU swap space per GPU (4GiB).")] = "0",
    ctx_size: Annotated[Optional[str], typer.Option("--ctx-size", help="llama.cpp -c: n_ctx (ollama: per sequence).")] = None,
    parallel: ParallelOpt = 1,
    kv_unified: Annotated[bool, typer.Option("--kv-unified/--no-kv-unified", help="llama.cpp: one stream shared by all sequences, or one per sequence.")] = True,
    swa_full: Annotated[bool, typer.Option("--swa-full", help="llama.cpp: full-size cache for sliding-window layers.")] = False,
    flash_attn: Annotated[bool, typer.Option("--flash-attn", help="llama.cpp legacy: pad n_ctx to 256 (else 32).")] = False,
    llamacpp_version: Annotated[str, typer.Option("--llamacpp-version", help="current (b7000+, 'llama_kv_cache: size = ...') or legacy ('KV self size').")] = "current",
    n_gpu_layers: Annotated[Optional[int], typer.Option("--n-gpu-layers", "-ngl", help="llama.cpp layers offloaded (default, or -1: all).")] = None,
    gpus: Annotated[Optional[int], typer.Option("--gpus", help="llama.cpp devices the layers are split over (default: the --tensor-split count, else 1).")] = None,
    tensor_split: Annotated[Optional[str], typer.Option("--tensor-split", "-ts", help="llama.cpp share of each device, e.g. 63,37 (default even).")] = None,
    ubatch_size: Annotated[int, typer.Option("--ubatch-size", help="llama.cpp n_ubatch (sizes the SWA cache).")] = 512,
    ollama: Annotated[bool, typer.Option("--ollama", help="ollama's runner: n_ctx x --parallel cells, legacy log lines.")] = False,
    fmt: FormatOpt = "table",
) -> None:
    """What ENGINE makes of a KV memory budget: tokens, blocks, concurrency, and its own log lines."""
    from kvcalc.engines import canonical, profile
    from kvcalc.loaders import load_model
    from kvcalc.units import parse_count, parse_size

    check_positive(tp=tp, block_size=block_size, page_size=page_size, parallel=parallel,
                   concurrency=concurrency, ubatch_size=ubatch_size, gpus=gpus,
                   max_num_batched_tokens=max_num_batched_tokens)
    check_format(fmt)
    name = canonical(engine)
    for owner, params in ENGINE_ONLY_OPTIONS.items():
        if owner != name:
            refuse_typed(ctx, params, f"--engine {owner} only")
    spec = load_model(model)
    L = parse_count(max_model_len, "--max-model-len") if max_model_len else None
    mem = parse_size(kv_memory, "--kv-memory") if kv_memory else None
    if swap_space != "0" and not (name == "vllm" and v0):
        raise KvcalcError("--swap-space is vLLM V0's CPU swap (# CPU blocks); V1 and the other engines have none: "
                          "add --engine vllm --vllm-v0, or drop --swap-space")
    k, v, shown, scales = resolve_formats(spec, name, kv_dtype, k_dtype, v_dtype, v0=v0)
    mod = profile(name)
    if name == "llamacpp":
        if tp != 1:
            raise KvcalcError("llama.cpp splits layers over devices, not heads: drop --tp, use --gpus / --tensor-split")
        split = _split(tensor_split)
        opts = dict(parallel=parallel, unified=kv_unified, version="legacy" if ollama else llamacpp_version,
                    flash_attn=flash_attn, swa_full=swa_full, n_ubatch=ubatch_size, n_gpu_layers=n_gpu_layers,
                    n_devices=gpus or (len(split) if split else 1), tensor_split=split, ollama=ollama,
                    max_model_len=L, concurrency=concurrency)
        if ctx_size:
            res = mod.allocate(spec, parse_count(ctx_size, "--ctx-size"), k, v, kv_memory_bytes=mem, **opts)
        elif mem:
            res = mod.capacity(spec, mem, k, v, **opts)
        else:
            raise KvcalcError("give --ctx-size (llama.cpp's -c) or --kv-memory")
    else:
        if mem is None:
            raise KvcalcError(f"--engine {name} needs --kv-memory (the KV memory of one GPU rank, e.g. 6.51GiB)")
        if name == "vllm":
            res = mod.capacity(spec, mem, k, v, tp=tp, block_size=block_size, max_model_len=L,
                               concurrency=concurrency, hybrid_allocator=not disable_hybrid,
                               per_token_head_scales=scales, kv_cache_dtype=shown,
                               max_num_batched_tokens=max_num_batched_tokens, v0=v0,
                               swap_space_bytes=parse_size(swap_space, "--swap-space") if swap_space != "0" else 0)
        elif name == "sglang":
            res = mod.capacity(spec, mem, k, v, tp=tp, page_size=page_size, max_model_len=L,
                               concurrency=concurrency, kv_cache_dtype=shown)
        else:
            res = mod.capacity(spec, mem, k, v, tp=tp, max_model_len=L, concurrency=concurrency)
            res = res.model_copy(update={"kv_cache_dtype": shown})
    title = f"KV capacity: {spec.name} on {name}" + (f", tp {tp}" if tp > 1 else "")
    if fmt == "table":
        show_result(res, title)
        return
    emit_parts([(res, lambda: None)], fmt)
