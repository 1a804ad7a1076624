"""`kvcalc estimate`: exact KV bytes; with --gpu the memory plan and roofline; with --engine what
an engine allocates. Several contexts (`-s 8k,32k,128k`) print one compact row per context.

No `from __future__ import annotations`: typer reads the signature's annotations as objects,
without evaluating their text at every start-up."""

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from kvcalc.cli.options import (
    BatchOpt,
    FlagSet,
    FormatOpt,
    GpuPlanFlags,
    KvFormatFlags,
    KvMemoryFlags,
    LayoutFlags,
    ModelArg,
    ModelSourceFlags,
    MoeLayoutFlags,
    SeqLenOpt,
    SglangFlags,
    SpeculativeFlags,
    VllmFlags,
    check_positive,
    engine_gpu,
    engine_options,
    flag_sets,
    only,
    refuse_other_engines,
    refuse_typed,
    resolve_count,
    with_help,
)
from kvcalc.cli.output import check_format, emit, emit_parts, handle_errors, show_result
from kvcalc.errors import MESSAGE, KvcalcError

#: whole requests and calibration (issue 21): the engines' own names are --input-len / --output-len
#: (vLLM `vllm bench serve --random-input-len`, TensorRT-LLM `--input_len`, llama-bench -p / -n)
InputLenOpt = Annotated[
    Optional[int],
    typer.Option(
        "--input-len",
        help="Prompt tokens per request: with --output-len, whole-request TTFT, TPOT, end-to-end latency and throughput (needs --gpu).",
    ),
]
OutputLenOpt = Annotated[
    Optional[int], typer.Option("--output-len", help="Generated tokens per request (with --input-len).")
]
RequestRateOpt = Annotated[
    Optional[float],
    typer.Option(
        "--request-rate",
        help="Requests/s arriving at the layout: continuous batching by Little's law (with --input-len / --output-len).",
    ),
]
CalibrationOpt = Annotated[
    Optional[str],
    typer.Option(
        "--calibration",
        help="A calibration file from `kvcalc measure --calibrate`: its measured floor, bandwidth, FLOP/s and all-reduce latency replace the speed table's (needs --gpu).",
    ),
]


class RequestFlags(FlagSet):
    """Whole requests and calibration: --input-len, --output-len, --request-rate, --calibration."""

    input_len: InputLenOpt = None
    output_len: OutputLenOpt = None
    request_rate: RequestRateOpt = None
    calibration: CalibrationOpt = None


def whole_request_options(
    gpu: str | None, input_len: int | None, output_len: int | None, request_rate: float | None, calibration: str | None
) -> "Calibration | None":
    """Check the whole-request options and read --calibration (`load.speed.load_calibration`):
    the `calc.speed.Calibration`, or None. Raises `KvcalcError` naming the option."""
    import math

    for name, v in (("--input-len", input_len), ("--output-len", output_len)):
        if v is not None and v < 1:
            raise KvcalcError(f"must be at least 1, got {v}", option=name, value=v)
    if request_rate is not None:
        if not (math.isfinite(request_rate) and request_rate > 0):
            raise KvcalcError(f"must be a number > 0, got {request_rate}", option="--request-rate", value=request_rate)
        if input_len is None or output_len is None:
            raise KvcalcError("needs --input-len and --output-len", option="--request-rate")
    if (input_len is None) != (output_len is None):
        missing = "--input-len" if input_len is None else "--output-len"
        raise KvcalcError("whole requests need both --input-len and --output-len", option=missing)
    for name, given in (("--input-len", input_len), ("--calibration", calibration)):
        if given is not None and gpu is None:
            raise KvcalcError("needs --gpu (a GPU from `kvcalc gpus`): speed is modelled on a GPU", option=name)
    if calibration is None:
        return None
    from kvcalc.load.speed import load_calibration

    return load_calibration(calibration)


#: the tier below the GPU and a shared prefix: `kvcalc capacity`'s options (`KvMemoryFlags`), less
#: --kv-memory (estimate sizes the KV memory from --gpu's plan, or for the batch)
OFFLOAD_OPTIONS = tuple(n for n in KvMemoryFlags.option_names() if n != "kv_memory")
#: the options that ask for something on their own (the rest qualify them)
OFFLOAD_ASKING = (
    "kv_offloading_size",
    "lmcache_cpu_size",
    "lmcache_l1_size",
    "hicache_ratio",
    "hicache_size",
    "hicache_host_memory_fraction",
    "hierarchical_cache",
    "no_kv_offload",
    "host_memory",
    "shared_prefix",
)


#: --seq-len as every command declares it, taking several contexts here
if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import RenderableType

    from kvcalc.calc.speed import Calibration
    from kvcalc.engines.offload_rules import OffloadSettings
    from kvcalc.requests import EstimateRequest, EstimateResult
    from kvcalc.results import EngineResult
    from kvcalc.schema import ModelSpec

if TYPE_CHECKING:  # the option's type for type checkers (with_help builds the annotation at run time)
    SeqLensOpt = SeqLenOpt
else:
    SeqLensOpt = with_help(
        SeqLenOpt,
        "Tokens per sequence (8192 or 32k); several (8k,32k,128k) print one row "
        "each. Default: the model's max_position_embeddings (as vLLM scales it by rope_scaling).",
    )


@handle_errors
@flag_sets(order=("gpu", "count"))
def estimate(
    ctx: typer.Context,
    model: ModelArg,
    seq_len: SeqLensOpt = None,
    batch: BatchOpt = 1,
    kv: KvFormatFlags = KvFormatFlags(),
    layout: LayoutFlags = LayoutFlags(),
    moe: MoeLayoutFlags = MoeLayoutFlags(),
    speculative: SpeculativeFlags = SpeculativeFlags(),
    engine_name: Annotated[
        str,
        typer.Option(
            "--engine", "-e", help="Also show what an engine allocates and logs: ideal (none), vllm, sglang, llamacpp."
        ),
    ] = "ideal",
    vllm: Annotated[VllmFlags, only("block_size", block_size="vLLM tokens per block (--engine vllm).")] = VllmFlags(),
    sglang: Annotated[
        SglangFlags,
        only(
            "page_size",
            "mamba_full_memory_ratio",
            "max_mamba_cache_size",
            "mamba_ssm_dtype",
            "disable_radix_cache",
            page_size="SGLang tokens per page (--engine sglang).",
        ),
    ] = SglangFlags(),
    gpu: GpuPlanFlags = GpuPlanFlags(),
    whole: RequestFlags = RequestFlags(),
    offload: Annotated[KvMemoryFlags, only(*OFFLOAD_OPTIONS)] = KvMemoryFlags(),
    source: ModelSourceFlags = ModelSourceFlags(),
    fmt: FormatOpt = "table",
) -> None:
    """Exact KV-cache bytes for MODEL at a context length, batch, KV dtype and TP/PP layout;
    with --gpu, also weights, the memory plan, whether it fits, and roofline TPOT / TTFT.

    With --engine, what it allocates, and the tier below the GPU (--kv-offloading-size,
    --hicache-*, --lmcache-*, --host-memory) and a shared prefix (--shared-prefix)."""
    from kvcalc.load.models import naming_model_file
    from kvcalc.requests import EstimateRequest, replica_batch, resolve_seq_lens, run_estimate

    check_positive(batch=batch, tp=layout.tp, pp=layout.pp, dp=layout.dp)
    spec = source.load(model)
    gpu.refuse_without_gpu(ctx)  # GPU-only options without --gpu are refused, never ignored
    tp, pp, dp = resolve_estimate_layout(layout, moe, engine_name)
    par = moe.resolve(spec, tp, dp)  # attention DP / EP / DCP (`calc.parallel`)
    tp, dp, dpa, ep, dcp = par["tp"], par["dp"], par["dp_attention"], par["ep"], par["dcp"]
    batch = replica_batch(batch, dpa, engine_name)  # vLLM's --max-num-seqs is per DP rank, SGLang's total
    input_len, output_len, request_rate = whole.input_len, whole.output_len, whole.request_rate
    cal = whole_request_options(gpu.gpu, input_len, output_len, request_rate, whole.calibration)  # before their sum
    if seq_len is None and input_len is not None and output_len is not None:
        seq_len = str(input_len + output_len)  # the memory plan holds the whole request
    lengths = resolve_seq_lens(spec, seq_len)
    if input_len is not None and output_len is not None and input_len + output_len > min(lengths):
        raise KvcalcError(
            f"with --output-len {output_len:,} a request is {input_len + output_len:,} tokens, "
            f"past --seq-len {min(lengths):,} (an engine's max-model-len refuses such a request): "
            "raise --seq-len, or leave it out (it defaults to input + output)",
            option="--input-len",
            value=input_len,
        )
    settings = offload_settings(ctx, offload)
    if len(lengths) > 1:
        if settings is not None:
            raise KvcalcError(
                "the offload tier and --shared-prefix are for one workload: give one --seq-len (a session's context)",
                option="--seq-len",
                value=seq_len,
            )
        check_format(fmt)
        refuse_other_engines(ctx, engine_name)
        return estimate_lengths(
            spec,
            lengths,
            fmt,
            batch=batch,
            **kv.asdict(),
            tp=tp,
            pp=pp,
            dp=dp,
            gpu=gpu.gpu,
            engine=engine_name,
            dp_attention=dpa,
            ep=ep,
            dcp=dcp,
        )
    # in the order the request's arguments were always read: the draft, the layout, the GPU
    draft = speculative.resolve(source.load, engine_name)
    with naming_model_file(model):  # --weight-dtype is parsed here, once: a GGUF file type is named for the file
        gpu_layout = gpu.layout() if gpu.gpu is not None else None
    gpu_ref = engine_gpu(engine_name, (vllm, sglang), gpu.gpu)  # a GpuSpec once an engine's options read it
    req = EstimateRequest.build(
        spec,
        seq_len=lengths[0],
        batch=batch,
        **kv.asdict(),
        tp=tp,
        pp=pp,
        dp=dp,
        dp_attention=dpa,
        ep=ep,
        dcp=dcp,
        speculative=draft,
        gpu=gpu_ref,
        layout=gpu_layout,
        engine=engine_name,
        engine_options=engine_options(engine_name, (vllm, sglang), gpu=gpu_ref),
        input_len=input_len,
        output_len=output_len,
        request_rate=request_rate,
        calibration=cal,
    )
    check_format(fmt)
    refuse_other_engines(ctx, engine_name)
    with naming_model_file(model):  # a YAML or config.json that cannot size the weights is named
        res = run_estimate(req)
    parts = estimate_parts(res)
    if settings is not None:
        parts += offload_parts(settings, offload, req, res)
    emit_parts(parts, fmt)


def resolve_estimate_layout(layout: LayoutFlags, moe: MoeLayoutFlags, engine_name: str) -> tuple[int, int, int]:
    """(tp, pp, dp) of estimate's layout options: --count is every GPU, attention-DP ranks
    included; alone it sets tp, refused for an engine that splits layers (`refuse_count_as_tp`).
    Raises `KvcalcError` naming --count."""
    if layout.count is not None and moe.dp_attention > 1:  # --count is every GPU: dp-attention ranks included
        check_positive(count=layout.count)
        if layout.count % moe.dp_attention:
            d = moe.dp_attention
            raise KvcalcError(
                f"--count {layout.count} is every GPU, attention-DP ranks included: it must be a multiple of "
                f"--dp-attention {d} (e.g. --count {d * max(1, layout.count // d)})",
                option="--count",
                value=layout.count,
                form=MESSAGE,
            )
        try:
            tp, pp, dp = resolve_count(layout.count // moe.dp_attention, layout.tp, layout.pp, layout.dp)
        except KvcalcError:  # its message names count / dp-attention, not the --count typed
            raise KvcalcError(
                f"--count {layout.count} does not equal --tp {layout.tp} x --pp {layout.pp} x --dp {layout.dp} x "
                f"--dp-attention {moe.dp_attention}; give a count that is a multiple of tp x pp x dp-attention",
                option="--count",
                value=layout.count,
                form=MESSAGE,
            ) from None
    else:
        tp, pp, dp = layout.resolve()  # count = tp x pp x dp; alone it sets tp
    if layout.count is not None and layout.tp == 1 and tp > 1:
        refuse_count_as_tp(engine_name, layout.count, tp)
    return tp, pp, dp


def refuse_count_as_tp(engine_name: str, count: int, tp: int) -> None:
    """Refuse `--count N` alone (it sets tp N) for an engine that splits layers, not heads
    (llama.cpp: `--split-mode layer`, `common/arg.cpp`), naming --count and the --pp to give
    instead. Raises `KvcalcError`."""
    from kvcalc.engines import canonical
    from kvcalc.engines.profile import get_profile

    if canonical(engine_name) == "ideal":
        return
    prof = get_profile(engine_name)
    if prof.splits_heads:
        return
    raise KvcalcError(
        f"--count {count} alone sets --tp {tp}, but {prof.display_name} splits layers, not heads: "
        f"pass --pp {tp} (with --count {count}) to split the layers over {tp} GPUs",
        option="--count",
        value=count,
        form=MESSAGE,
    )


def offload_settings(ctx: typer.Context, offload: KvMemoryFlags) -> "OffloadSettings | None":
    """The `OffloadSettings` of the offload options, or None when none asks for anything (then
    the options that only qualify one, --gpus-per-node, --prefix-hit-rate, --link ..., are
    refused if typed, never ignored)."""
    from kvcalc.cli.options import typed_options

    typed = set(typed_options(ctx))
    if not typed & set(OFFLOAD_ASKING):
        refuse_typed(
            ctx,
            [n for n in OFFLOAD_OPTIONS if n not in OFFLOAD_ASKING],
            "an offload tier (--kv-offloading-size, --lmcache-*, --hicache-*, --no-kv-offload, --host-memory) "
            "or --shared-prefix, with --engine",
        )
        return None
    return offload.settings()


def offload_parts(
    settings: "OffloadSettings", offload: KvMemoryFlags, req: "EstimateRequest", res: "EstimateResult"
) -> "list[tuple[BaseModel, Callable[[], RenderableType | None]]]":
    """(result, table) of the tier below the GPU, its log lines, the shared prefix and the
    load-or-recompute rows: `kvcalc capacity`'s parts (`offload_request.estimate_extras`) from
    the estimate's engine result at its --seq-len."""
    from functools import partial

    from kvcalc.offload_request import estimate_extras
    from kvcalc.report.offload import log_text, part_table
    from kvcalc.results.offload import NoKeys

    parts: list[tuple[BaseModel, Callable[[], RenderableType | None]]] = []
    for part, title in estimate_extras(settings, req, res, hit_rate=offload.prefix_hit_rate, link=offload.link):
        parts.append((part, partial(part_table, part, title)))
        off = getattr(part, "offload", None)
        if off is not None and off.log_lines:
            parts.append((NoKeys(), partial(log_text, off.engine, off.log_lines)))
    return parts


# Any: `EstimateRequest.build_lengths`' keyword arguments, forwarded
def estimate_lengths(
    spec: "ModelSpec", lengths: list[int], fmt: str, *, gpu: str | None, engine: str, **kw: Any
) -> None:
    """Several contexts: one `KvEstimate` per length (machine formats: a list of the usual
    objects), shown as one compact table. --gpu and --engine are refused: their tables are per
    workload, and `kvcalc sweep` is the grid of contexts on a GPU."""
    from kvcalc.engines import canonical
    from kvcalc.errors import MESSAGE
    from kvcalc.report.tables import kv_lengths_table
    from kvcalc.requests import EstimateRequest, run_estimate

    shown = ",".join(str(T) for T in lengths)
    if gpu is not None:
        raise KvcalcError(
            f"--gpu with several --seq-len values: use `kvcalc sweep {spec.name} --seq-len {shown} "
            f"--batch {kw['batch']} --gpu {gpu}` for the grid, or give one --seq-len",
            option="--gpu",
            form=MESSAGE,
        )
    if canonical(engine) != "ideal":
        raise KvcalcError(
            f"--engine {engine} with several --seq-len values: give one --seq-len "
            f"(an engine's table is for one workload)",
            option="--engine",
            form=MESSAGE,
        )
    rows = [run_estimate(req).kv for req in EstimateRequest.build_lengths(spec, lengths, **kw)]
    emit(rows, fmt, lambda: kv_lengths_table(rows))


def estimate_parts(res: "EstimateResult") -> "list[tuple[BaseModel, Callable[[], RenderableType | None]]]":
    """(result model, table builder) for each part of an `EstimateResult`: the KV estimate, the
    GPU plan (with --gpu), the engine's allocation (with --engine); their keys sit side by side
    in the machine formats."""
    from kvcalc.report import tables

    # the parts as locals: a lambda does not keep the narrowing of `res.serving is not None`
    kv, serving, gpu, request, spec, hint, engine = (
        res.kv,
        res.serving,
        res.gpu,
        res.request,
        res.speculative,
        res.fit_hint,
        res.engine,
    )
    parts: list[tuple[BaseModel, Callable[[], RenderableType | None]]] = [(kv, lambda: tables.kv_table(kv))]
    if serving is not None and gpu is not None:  # a plan always comes with its GPU
        parts.append((serving, lambda: tables.serving_table(serving, gpu, kv)))
        if request is not None:
            parts.append((request, lambda: tables.request_table(request, serving)))
    if spec is not None:
        from kvcalc.report.speculative import speculative_table

        parts.append((spec, lambda: speculative_table(spec)))
    if hint is not None:
        parts.append((hint, lambda: tables.fit_hint_line(hint, kv)))
    if engine is not None:
        parts.append((engine, lambda: show_result(engine, engine_title(res, engine))))
    return parts


def engine_title(res: "EstimateResult", engine: "EngineResult") -> str:
    """The engine table's title (of `engine`, `res.engine`): where its KV memory came from."""
    from kvcalc.engines.profile import get_profile

    name, T, B = engine.engine, res.kv.seq_len, res.kv.batch
    if get_profile(name).allocates_cells:
        return f"{name}: what it allocates for {B} x {T:,} tokens"
    if res.serving is not None:
        return f"{name}: what it allocates on {res.serving.gpu} (KV memory from the GPU plan)"
    return f"{name}: sized for this batch ({B} x {T:,} tokens)"
