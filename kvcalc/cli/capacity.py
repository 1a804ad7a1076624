"""`kvcalc capacity`: what an engine makes of a KV memory budget, with the lines it logs.

`kvcalc capacity MODEL --kv-memory 6.51GiB --engine vllm --max-model-len 32768` prints vLLM's
"GPU KV cache size" and "Maximum concurrency" lines; `--engine sglang` SGLang's pool line;
`--engine llamacpp --ctx-size 32768` llama.cpp's buffer and size lines (or, given --kv-memory,
the largest --ctx-size that fits).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvcalc.cli.options import (ENGINE_ONLY_OPTIONS, BlockSizeOpt, EngineOpt, FormatOpt, KDtypeOpt, ModelArg,
                                PageSizeOpt, ParallelOpt, TpOpt, VDtypeOpt, _split, check_positive, refuse_typed,
                                resolve_formats)
from kvcalc.cli.output import check_format, emit_parts, handle_errors, show_result
from kvcalc.errors import KvcalcError

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
    from kvcalc.load.models import load_model
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
