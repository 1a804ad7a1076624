"""`kvcalc capacity`: what an engine makes of a KV memory budget, with the lines it logs.

`kvcalc capacity MODEL --kv-memory 6.51GiB --engine vllm --max-model-len 32768` prints vLLM's
"GPU KV cache size" and "Maximum concurrency" lines; `--engine sglang` SGLang's pool line;
`--engine llamacpp --ctx-size 32768` llama.cpp's buffer and size lines (or, given --kv-memory,
the largest --ctx-size that fits).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, ClassVar, Optional

import typer

from kvcalc.calc.defaults import DEFAULT_BW_EFFICIENCY, DEFAULT_FLOPS_EFFICIENCY, DEFAULT_GPU_MEMORY_UTILIZATION
from kvcalc.cli.options import (
    EngineOpt,
    FlagSet,
    FormatOpt,
    GpuOpt,
    KvFormatFlags,
    KvMemoryFlags,
    LayoutFlags,
    LlamacppFlags,
    ModelArg,
    MoeLayoutFlags,
    RevisionOpt,
    SglangFlags,
    TrustPlainOpt,
    UtilOpt,
    VllmFlags,
    WeightDtypeOpt,
    check_positive,
    engine_gpu,
    engine_options,
    flag_sets,
    gpu_object,
    make_layout,
    only,
    refuse_other_engines,
    refuse_typed,
    with_help,
)
from kvcalc.cli.output import check_format, emit_parts, handle_errors, show_result

if TYPE_CHECKING:
    from collections.abc import Callable

    from pydantic import BaseModel
    from rich.console import RenderableType

    from kvcalc.calc.memory_plan import Layout
    from kvcalc.engines.profile import EngineOptions
    from kvcalc.requests import CapacityRequest
    from kvcalc.results import EngineResult
    from kvcalc.schema import ModelSpec
    from kvcalc.schema_deploy import GpuSpec

KV_DTYPE_HELP = (
    "auto (the engine's default: the model's dtype, fp32 served as 16-bit; llama.cpp f16), bf16, fp16, "
    "fp8, fp8_e5m2; vLLM int8_per_token_head / fp8_per_token_head; llama.cpp f16, q8_0, q4_0 ..."
)

#: --gpu as every command declares it, with capacity's meaning: vLLM's GPU
if TYPE_CHECKING:  # the option's type for type checkers (with_help builds the annotation at run time)
    CapacityGpuOpt = GpuOpt
else:
    CapacityGpuOpt = with_help(
        GpuOpt,
        "The GPU (`kvcalc gpus`, or a GPU YAML file). vLLM: its compute capability picks the "
        "attention backend (an MLA model's block size). vLLM and SGLang without --kv-memory: the "
        "KV memory is what its plan leaves (as `estimate --gpu --engine` sizes it).",
    )

#: the GPU plan's knobs capacity takes: they size the KV memory from --gpu's plan (vLLM / SGLang,
#: without --kv-memory), as the launch line's --gpu-memory-utilization / --quantization do
PLAN_KNOBS = ("weight_dtype", "gpu_memory_utilization")


if TYPE_CHECKING:  # the option's type for type checkers (with_help builds the annotation at run time)
    CapacityWeightOpt = WeightDtypeOpt
else:
    CapacityWeightOpt = with_help(
        WeightDtypeOpt,
        "Weight format of --gpu's plan (vLLM / SGLang --quantization fp8): "
        "with --gpu and no --kv-memory. Default: the model's dtype.",
    )
if TYPE_CHECKING:  # the option's type for type checkers (with_help builds the annotation at run time)
    CapacityUtilOpt = UtilOpt
else:
    CapacityUtilOpt = with_help(
        UtilOpt,
        "Fraction of --gpu's memory the engine may use (SGLang --mem-fraction-static): "
        "with --gpu and no --kv-memory, the KV memory is what it leaves.",
    )


class SourceFlags(FlagSet):
    """Where the figures come from besides the model: the GPU (--gpu: vLLM's compute capability,
    which picks the attention backend; without --kv-memory, the KV memory its plan leaves, with
    the plan's --weight-dtype and --gpu-memory-utilization) and the Hub revision of a Hub-id model."""

    panel: ClassVar[Optional[str]] = "GPU and model source"

    gpu: CapacityGpuOpt = None
    revision: RevisionOpt = None
    trust_plain_decoder: TrustPlainOpt = False
    weight_dtype: CapacityWeightOpt = None
    gpu_memory_utilization: CapacityUtilOpt = DEFAULT_GPU_MEMORY_UTILIZATION

    def layout(self, tp: int) -> Layout:
        """The `memory_plan.Layout` of --gpu's plan at `tp` ranks (the other knobs: defaults)."""
        return make_layout(
            tp,
            1,
            1,
            self.weight_dtype,
            None,
            None,
            self.gpu_memory_utilization,
            DEFAULT_BW_EFFICIENCY,
            DEFAULT_FLOPS_EFFICIENCY,
            None,
            None,
        )


class RequestFlags(FlagSet):
    """The requests a capacity figure is for: their context (--max-model-len, or --seq-len /
    --context-length as estimate and SGLang name it) and how many at once (--concurrency, vLLM's
    --max-num-seqs). `-c` is llama.cpp's --ctx-size (`LlamacppFlags`), as a pasted llama.cpp line
    means it, and nothing else: with another engine it is refused like every llama.cpp option."""

    panel: ClassVar[Optional[str]] = "Requests"

    max_model_len: Annotated[
        Optional[str],
        typer.Option(
            "--max-model-len",
            "-L",
            "--seq-len",
            "-s",
            "--context-length",
            help="Tokens per request for the concurrency figure (8192 or 32k; also --seq-len, SGLang --context-length). Default: the model's max_position_embeddings (as vLLM scales it by rope_scaling).",
        ),
    ] = None
    concurrency: Annotated[
        Optional[int],
        typer.Option(
            "--concurrency",
            "--max-num-seqs",
            "--max-running-requests",
            help="Also find the longest context that fits this many requests at once (vLLM --max-num-seqs, SGLang --max-running-requests; not -c: llama.cpp's --ctx-size).",
        ),
    ] = None


@handle_errors
@flag_sets(order=("block_size", "page_size"))
def capacity(
    ctx: typer.Context,
    model: ModelArg,
    memory: KvMemoryFlags = KvMemoryFlags(),
    engine: EngineOpt = "ideal",
    requests: RequestFlags = RequestFlags(),
    layout: Annotated[
        LayoutFlags,
        only(
            "tp",
            "pp",
            "dp",
            dp="Data-parallel replicas: each has its own KV memory and requests, so the figures are per replica (as vLLM logs them).",
            pp="Pipeline stages: 1 only (capacity figures one GPU rank holding every layer; `kvcalc estimate --pp N --gpu G` plans stages).",
        ),
    ] = LayoutFlags(),
    moe: MoeLayoutFlags = MoeLayoutFlags(),
    kv: Annotated[KvFormatFlags, only("kv_dtype", "k_dtype", "v_dtype", kv_dtype=KV_DTYPE_HELP)] = KvFormatFlags(),
    vllm: VllmFlags = VllmFlags(),
    sglang: SglangFlags = SglangFlags(),
    llamacpp: LlamacppFlags = LlamacppFlags(),
    source: SourceFlags = SourceFlags(),
    fmt: FormatOpt = "table",
) -> None:
    """What ENGINE makes of a KV memory budget: tokens, blocks, concurrency, and its own log lines."""
    from kvcalc.engines import canonical
    from kvcalc.errors import KvcalcError
    from kvcalc.load.models import load_model
    from kvcalc.requests import CapacityRequest, run_capacity
    from kvcalc.units import parse_count, parse_size

    name = canonical(engine)
    kv_memory = memory.kv_memory
    concurrency = requests.concurrency
    check_positive(
        tp=layout.tp,
        pp=layout.pp,
        dp=layout.dp,
        block_size=vllm.block_size,
        page_size=sglang.page_size,
        parallel=llamacpp.parallel,
        concurrency=concurrency,
        ubatch_size=llamacpp.ubatch_size,
        batch_size=llamacpp.batch_size,
        gpus=llamacpp.gpus,
        max_num_batched_tokens=vllm.max_num_batched_tokens,
    )
    check_format(fmt)
    refuse_other_engines(ctx, name)
    from_plan = check_sources(ctx, name, layout, source, kv_memory, llamacpp.ctx_size)
    spec = load_model(model, source.revision, trust_plain_decoder=source.trust_plain_decoder)
    par = moe.resolve(spec, layout.tp, layout.dp)  # attention DP / EP (`calc.parallel`)
    dcp = par["dcp"]
    if dcp > 1 and name != "vllm":
        raise KvcalcError(
            f"--dcp is vLLM's decode context parallel (-dcp, --decode-context-parallel-size); "
            f"--engine {name} has none modelled: give --engine vllm, or size it with "
            "`kvcalc estimate --dcp D --gpu G`",
            option="--dcp",
            value=dcp,
        )
    tp, dpa = par["tp"], par["dp_attention"]
    L = parse_count(requests.max_model_len, "--max-model-len") if requests.max_model_len else None
    mem = parse_size(kv_memory, "--kv-memory") if kv_memory else None
    # from_plan implies --gpu (`check_sources`); the GPU, once looked up, travels on as its object
    gpu_ref, mem, basis = (
        plan_memory(spec, source.gpu, source, par, L, concurrency, name)
        if from_plan and source.gpu is not None
        else (source.gpu, mem, None)
    )
    gpu_ref = engine_gpu(name, (vllm, sglang, llamacpp), gpu_ref)  # where the engine's options read it
    options = with_dcp(engine_options(name, (vllm, sglang, llamacpp), gpu=gpu_ref), dcp)
    req = CapacityRequest.build(
        spec,
        engine=name,
        kv_memory_bytes=mem,
        kv_dtype=kv.kv_dtype,
        k_dtype=kv.k_dtype,
        v_dtype=kv.v_dtype,
        tp=tp,
        max_model_len=L,
        concurrency=concurrency,
        options=options,
    )
    res = run_capacity(req)
    if basis is not None:
        res = res.model_copy(update={"kv_memory_basis": basis})
    extra = beyond_the_gpu(memory, req, res, dp=par["dp"], gpu=gpu_ref, layout=source.layout(tp))
    title = (
        f"KV capacity: {spec.name} on {name}"
        + (f", tp {tp}" if tp > 1 else "")
        + (f", dcp {dcp}" if dcp > 1 else "")
        + (f", per attention-DP rank of {dpa} (ep {par['ep']})" if dpa > 1 else "")
        + (f", per replica of dp {par['dp']}" if par["dp"] > 1 else "")
    )
    if fmt == "table":
        show_result(res, title)
        emit_parts(extra, fmt)
        return
    emit_parts([(res, lambda: None), *extra], fmt)


def plan_memory(
    spec: ModelSpec,
    gpu_name: str,
    source: SourceFlags,
    par: dict[str, int],
    seq_len: int | None,
    concurrency: int | None,
    engine: str,
) -> tuple[GpuSpec, int, str]:
    """(--gpu's `GpuSpec`, the KV memory its plan leaves one rank, the basis line) for the layout
    `par` (`MoeLayoutFlags.resolve`: tp, attention DP, EP, DCP) (`requests.plan_kv_memory`)."""
    import dataclasses

    from kvcalc.requests import plan_kv_memory

    lay = dataclasses.replace(source.layout(par["tp"]), dp_attention=par["dp_attention"], ep=par["ep"], dcp=par["dcp"])
    gpu = gpu_object(gpu_name)
    mem, basis = plan_kv_memory(spec, gpu, lay, seq_len, concurrency, engine)
    return gpu, mem, basis


def with_dcp(options: EngineOptions | None, dcp: int) -> EngineOptions | None:
    """vLLM's options with `dcp` (`VllmOptions.dcp`, `-dcp`); `options` as they are at dcp 1."""
    if dcp == 1:
        return options
    import dataclasses
    from typing import cast

    from kvcalc.engines.vllm import VllmOptions

    return dataclasses.replace(cast(VllmOptions, options or VllmOptions()), dcp=dcp)  # -dcp is vLLM's


def beyond_the_gpu(
    memory: KvMemoryFlags,
    req: CapacityRequest,
    res: EngineResult,
    *,
    dp: int,
    gpu: str | GpuSpec | None,
    layout: Layout,
) -> list[tuple[BaseModel, Callable[[], RenderableType | None]]]:
    """The (result, table) parts after the engine's own: the offload tier, its log lines as plain
    text, the shared prefix, loading it back or recomputing it (`offload_request.capacity_extras`)."""
    from kvcalc.offload_request import capacity_extras
    from kvcalc.report.offload import log_text, part_table
    from kvcalc.results.offload import NoKeys, OffloadPart

    parts: list = []
    for part, title in capacity_extras(
        memory.settings(), req, res, hit_rate=memory.prefix_hit_rate, link=memory.link, dp=dp, gpu=gpu, layout=layout
    ):
        parts.append((part, lambda p=part, t=title: part_table(p, t)))
        if isinstance(part, OffloadPart) and part.offload.log_lines:
            parts.append((NoKeys(), lambda p=part: log_text(p.offload.engine, p.offload.log_lines)))
    return parts


def check_sources(
    ctx: typer.Context,
    name: str,
    layout: LayoutFlags,
    source: SourceFlags,
    kv_memory: str | None,
    ctx_size: str | None = None,
) -> bool:
    """True when the KV memory comes from --gpu's plan (--gpu and no --kv-memory: vLLM, SGLang,
    and llama.cpp without --ctx-size, which then answers how many requests of --max-model-len
    fit in what the GPU leaves after the weights: issue 23 friction 4). Raises `KvcalcError` for
    --pp above 1 (capacity figures one rank holding every layer), --gpu where it would mean
    nothing, and the plan's knobs (--weight-dtype, --gpu-memory-utilization) outside a plan:
    they would be ignored."""
    from kvcalc.errors import KvcalcError

    if layout.pp > 1:
        raise KvcalcError(
            f"capacity figures one GPU rank that holds every layer; {layout.pp} pipeline stages are not "
            "modelled: give --pp 1, or plan the stages with `kvcalc estimate MODEL --pp N --gpu G --engine E`",
            option="--pp",
            value=str(layout.pp),
        )
    from_plan = (
        source.gpu is not None
        and kv_memory is None
        and (name in ("vllm", "sglang") or (name == "llamacpp" and ctx_size is None))
    )
    if source.gpu is not None and name not in ("vllm", "sglang") and not from_plan:
        why = (
            (
                "drop --gpu, or --kv-memory and --ctx-size (--gpu with neither: the requests of --max-model-len that "
                "fit in what the GPU leaves)"
            )
            if name == "llamacpp"
            else "drop --gpu"
        )
        raise KvcalcError(
            "--gpu applies to --engine vllm and sglang (it picks their attention backends and so the "
            "cache rows), and to llamacpp without --kv-memory and --ctx-size (the KV memory is then what "
            f"the GPU's plan leaves); --engine {name}: {why}",
            option="--gpu",
            value=source.gpu,
        )
    if not from_plan:
        refuse_typed(
            ctx,
            PLAN_KNOBS,
            "--engine vllm, sglang or llamacpp with --gpu and no --kv-memory (the KV memory is then "
            "what the GPU's plan leaves; --kv-memory is already the KV memory)",
        )
    return from_plan
