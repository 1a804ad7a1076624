"""Options every command shares (declared once, as `Annotated` aliases) and the checks that turn
them into values: context length, KV formats, the parallel layout, the GPU plan's layout, and
refusing an option that would be ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Iterable, Optional

import typer

from kvcalc.errors import KvcalcError

# ----- shared options ---------------------------------------------------------------------

ModelArg = Annotated[str, typer.Argument(help="A bundled name (see `kvcalc models`), a .yaml file, or a config.json.")]

SeqLenOpt = Annotated[Optional[str], typer.Option("--seq-len", "-s", help="Tokens per sequence (8192 or 32k). Default: the model's max_position_embeddings.")]

BatchOpt = Annotated[int, typer.Option("--batch", "-b", help="Sequences in the batch (per DP replica).")]

KvDtypeOpt = Annotated[Optional[str], typer.Option("--kv-dtype", help="KV format for K and V: fp16, bf16, fp8, fp8_e5m2, int8, int4, q8_0, q4_0 ... Default: the model's dtype.")]

KDtypeOpt = Annotated[Optional[str], typer.Option("--k-dtype", help="K format, when it differs from V.")]

VDtypeOpt = Annotated[Optional[str], typer.Option("--v-dtype", help="V format, when it differs from K.")]

GroupOpt = Annotated[Optional[int], typer.Option("--quant-group-size", "--group-size", help="Values per scale of an int8/int4 KV cache (quantization group).")]

ScaleOpt = Annotated[Optional[str], typer.Option("--scale-dtype", help="Scale dtype of int8/int4 groups (fp16, bf16, fp32).")]

TpOpt = Annotated[int, typer.Option("--tp", help="Tensor-parallel ranks.")]

PpOpt = Annotated[int, typer.Option("--pp", help="Pipeline stages.")]

DpOpt = Annotated[int, typer.Option("--dp", help="Data-parallel replicas.")]

FormatOpt = Annotated[str, typer.Option("--format", "-f", help="table, json, yaml, csv or markdown.")]

GpuOpt = Annotated[Optional[str], typer.Option("--gpu", help="A GPU from `kvcalc gpus` (h100-sxm, h200 ...) or a GPU YAML file.")]

CountOpt = Annotated[Optional[int], typer.Option("--count", help="GPUs in all (= tp x pp x dp); alone, it sets --tp.")]

WeightDtypeOpt = Annotated[Optional[str], typer.Option("--weight-dtype", help="Weight format: bf16, fp16, fp8, int8, int4 (group scales: int4:g128). Default: the model's dtype.")]

UtilOpt = Annotated[float, typer.Option("--gpu-memory-utilization", help="Fraction of GPU memory the engine may use (vLLM default 0.9).")]

BwEffOpt = Annotated[float, typer.Option("--bw-efficiency", help="Fraction of HBM bandwidth decode reaches (default 0.8: FlashInfer / FlashDecoding reach 80-95%).")]

FlopsEffOpt = Annotated[float, typer.Option("--flops-efficiency", help="Fraction of dense peak FLOP/s reached (default 0.5: PaLM 46% MFU).")]

CudaCtxOpt = Annotated[Optional[str], typer.Option("--cuda-context", help="Memory outside the allocator per GPU (default 500MiB).")]

ActOpt = Annotated[Optional[str], typer.Option("--activation-reserve", help="Activation reserve per GPU, e.g. 2GiB (default: estimated from an 8192-token prefill chunk).")]

EngineOpt = Annotated[str, typer.Option("--engine", "-e", help="ideal (exact formula), vllm, sglang or llamacpp.")]

BlockSizeOpt = Annotated[int, typer.Option("--block-size", help="vLLM tokens per block.")]

PageSizeOpt = Annotated[int, typer.Option("--page-size", help="SGLang tokens per page.")]

ParallelOpt = Annotated[int, typer.Option("--parallel", "-np", help="llama.cpp sequences (n_seq_max); ollama: OLLAMA_NUM_PARALLEL.")]

DeviceOpt = Annotated[str, typer.Option("--device", help="auto (CUDA when present, else CPU), cuda or cpu.")]

LayersOpt = Annotated[Optional[int], typer.Option("--layers", help="Measure this many KV layers and scale to the whole model.")]

StepsOpt = Annotated[Optional[int], typer.Option("--steps", help="Timed decode steps (GPU: at least 30; CPU default 8).")]

BackendOpt = Annotated[str, typer.Option("--backend", help="auto (= sdpa), sdpa, matmul, or flash (flash-attn / FlashInfer).")]

WeightsOpt = Annotated[bool, typer.Option("--with-weights", help="Add random QKV, output and MLP weights: time whole decoder layers.")]

GraphOpt = Annotated[bool, typer.Option("--cuda-graph", help="Capture one step in a CUDA graph and replay it.")]


# ----- option checks ----------------------------------------------------------------------

def resolve_seq_len(model: Any, seq_len: str | None) -> int:
    """--seq-len parsed, or the model's max_position_embeddings; raises KvcalcError if neither."""
    from kvcalc.units import parse_count

    if seq_len is not None:
        return parse_count(seq_len, "--seq-len")
    if model.max_position_embeddings is None:
        raise KvcalcError(f"{model.name} has no max_position_embeddings; give --seq-len")
    return model.max_position_embeddings

def resolve_kv_dtypes(model: Any, kv_dtype: str | None, k_dtype: str | None, v_dtype: str | None,
                      quant_group_size: int | None = None, scale_dtype: str | None = None) -> tuple[str, str]:
    """(K format name, V format name) from the options; default the model's dtype. Group
    options are folded into the name (`int4:g64:fp32`) so results say what was used."""
    from kvcalc.formats import kv_format

    base = kv_dtype if kv_dtype is not None else model.dtype
    k = kv_format(k_dtype if k_dtype is not None else base, quant_group_size, scale_dtype)
    v = kv_format(v_dtype if v_dtype is not None else base, quant_group_size, scale_dtype)
    return k.name, v.name

def typed_options(ctx: typer.Context) -> list[str]:
    """Parameters of the running command that the user typed (not left at their defaults)."""
    return [n for n in ctx.params if getattr(ctx.get_parameter_source(n), "name", "DEFAULT") != "DEFAULT"]

def flag_name(ctx: typer.Context, param: str) -> str:
    """The option as the user writes it (`--vllm-v0` for the parameter `v0`)."""
    for p in ctx.command.params:
        if p.name == param and getattr(p, "opts", None):
            return max(p.opts, key=len)
    return "--" + param.replace("_", "-")

def refuse_typed(ctx: typer.Context, params: Iterable[str], applies_to: str) -> None:
    """Raise `KvcalcError` when any of `params` was typed: an option that would be ignored is
    refused, never silently dropped ('--x applies to `applies_to`')."""
    typed = set(typed_options(ctx))
    given = [n for n in params if n in typed]
    if given:
        verb = "applies" if len(given) == 1 else "apply"
        raise KvcalcError(f"{', '.join(flag_name(ctx, n) for n in given)} {verb} to {applies_to}")

def check_positive(**values: int) -> None:
    """Raise KvcalcError naming the first option that is not a positive integer."""
    for name, v in values.items():
        if v is not None and v <= 0:
            raise KvcalcError(f"--{name.replace('_', '-')} must be a positive integer, got {v}")

def resolve_count(count: int | None, tp: int, pp: int, dp: int) -> tuple[int, int, int]:
    """(tp, pp, dp) from --count and the layout options: --count alone sets tp; with tp / pp
    given, the rest of the count becomes dp replicas. Raises `KvcalcError` when they disagree."""
    if count is None:
        return tp, pp, dp
    check_positive(count=count)
    if (tp, pp, dp) == (1, 1, 1):
        return count, 1, 1
    if count == tp * pp * dp:
        return tp, pp, dp
    if dp == 1 and count % (tp * pp) == 0:
        return tp, pp, count // (tp * pp)
    raise KvcalcError(f"--count {count} does not equal --tp {tp} x --pp {pp} x --dp {dp}; "
                      f"give a count that is a multiple of tp x pp")

#: options of `estimate` / `sweep` that mean something only with --gpu (--count does not: it
#: sets the layout, count = tp x pp x dp)
GPU_ONLY_OPTIONS = ("weight_dtype", "gpu_memory_utilization", "bw_efficiency", "flops_efficiency",
                    "cuda_context", "activation_reserve")

def check_gpu_only_options(ctx: typer.Context, gpu: str | None, allowed: tuple[str, ...] = ()) -> None:
    """Raise `KvcalcError` naming --gpu when an option that needs a GPU was typed without one.
    typer fills in defaults, so the click context's parameter source says which were typed.
    `allowed` lists those the command uses without a GPU (sweep's --weight-dtype)."""
    if gpu is not None:
        return
    typed = set(typed_options(ctx))
    given = [n for n in GPU_ONLY_OPTIONS if n not in allowed and n in typed]
    if given:
        opts = ", ".join("--" + n.replace("_", "-") for n in given)
        raise KvcalcError(f"{opts} {'needs' if len(given) == 1 else 'need'} --gpu (a GPU from `kvcalc gpus`); "
                          f"without it there is no memory plan or roofline to apply {'it' if len(given) == 1 else 'them'} to")

def check_limits(batches: list[int], seq_lens: list[int]) -> None:
    """Raise `KvcalcError` for a batch or context past the bounds a deployment file accepts
    (`units.MAX_CONCURRENCY` sequences, `units.MAX_SEQ_LEN` tokens): beyond them the sums
    lose meaning and the printed figures turn to garbage."""
    from kvcalc.units import MAX_CONCURRENCY, MAX_SEQ_LEN

    for what, values, cap in (("--batch", batches, MAX_CONCURRENCY), ("--seq-len", seq_lens, MAX_SEQ_LEN)):
        big = [v for v in values if v > cap]
        if big:
            raise KvcalcError(f"{what} {big[0]:,} is beyond what kvcalc sizes (at most {cap:,})")

def warn_beyond_context(spec: Any, seq_lens: list[int]) -> list[int]:
    """Warn (one `KvcalcWarning` line) when a context exceeds the model's
    max_position_embeddings, naming the maximum; returns the contexts beyond it."""
    cap = spec.max_position_embeddings
    beyond = sorted({t for t in seq_lens if cap and t > cap})
    if beyond:
        import warnings

        from kvcalc.errors import KvcalcWarning

        shown = ", ".join(f"{t:,}" for t in beyond[:4]) + (", ..." if len(beyond) > 4 else "")
        many = len(beyond) > 1
        warnings.warn(f"context{'s' if many else ''} of {shown} tokens {'are' if many else 'is'} beyond "
                      f"{spec.name}'s max_position_embeddings "
                      f"({cap:,}); the model was not trained for it and engines refuse it",
                      KvcalcWarning, stacklevel=2)
    return beyond

def make_layout(tp: int, pp: int, dp: int, weight_dtype: str | None, k_dtype: str | None, v_dtype: str | None,
                gpu_memory_utilization: float, bw_efficiency: float, flops_efficiency: float,
                cuda_context: str | None, activation_reserve: str | None):
    """A `plan.Layout` from CLI options (sizes parsed with `units.parse_size`)."""
    from kvcalc.calc.memory_plan import DEFAULT_CUDA_CONTEXT_BYTES, Layout
    from kvcalc.units import parse_reserve

    ctx = DEFAULT_CUDA_CONTEXT_BYTES if cuda_context is None else parse_reserve(cuda_context, "--cuda-context")
    act = None if activation_reserve is None else parse_reserve(activation_reserve, "--activation-reserve")
    return Layout(tp=tp, pp=pp, dp=dp, weight_dtype=weight_dtype, k_dtype=k_dtype, v_dtype=v_dtype,
                  gpu_memory_utilization=gpu_memory_utilization, cuda_context_bytes=ctx,
                  activation_reserve_bytes=act, bw_efficiency=bw_efficiency, flops_efficiency=flops_efficiency)

def resolve_formats(spec: Any, engine: str, kv_dtype: str | None, k_dtype: str | None,
                    v_dtype: str | None, v0: bool = False) -> tuple[Any, Any, str, bool]:
    """(K format, V format, the dtype name as the engine spells it, per-token-head scales).

    No --kv-dtype (or 'auto') is the ENGINE's default, from its profile's `default_kv_dtype`:
    vLLM and SGLang serve the model's dtype (fp32 checkpoints downcast to 2 bytes), llama.cpp
    uses f16 whatever the model's dtype; the label says which was used. vLLM's
    `int8_per_token_head` / `fp8_per_token_head` are int8 / fp8 values plus fp32 scales per
    token and head."""
    from kvcalc.formats import kv_format
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
