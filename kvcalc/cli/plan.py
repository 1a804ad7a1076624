"""`kvcalc plan`: from a model and a workload to the GPUs, the layout and the command that serve it.

`kvcalc plan MODEL --seq-len 32k --concurrency 64 --max-tpot-ms 50` searches every GPU of the table
(or `--gpu`), counts up to `--max-gpus`, tensor / pipeline / data parallel layouts and formats
(`kvcalc.calc.plan`), prints the best layouts and the top one's launch line, and, when nothing
qualifies, the nearest misses with what would fix them (exit 1). `--write-deployment FILE` writes
the top layout as a deployment that `kvcalc check` passes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

import typer

from kvcalc.cli.options import (
    GpuPlanFlags,
    KvMemoryFlags,
    ModelArg,
    RevisionOpt,
    SeqLenOpt,
    SpeculativeFlags,
    TrustPlainOpt,
    VllmFlags,
    auto_is_default,
    engine_key,
    engine_options,
    flag_sets,
    only,
    refuse_typed,
)
from kvcalc.cli.output import check_format, echo, handle_errors
from kvcalc.errors import KvcalcError

if TYPE_CHECKING:
    from kvcalc.calc.speculative import SpecDecode
    from kvcalc.calc.speed import Calibration
    from kvcalc.engines.offload_rules import OffloadSettings
    from kvcalc.json_types import JsonObject
    from kvcalc.requests import PlanRequest
    from kvcalc.results import PlanLayout, PlanResult

KNOBS = ("gpu_memory_utilization", "bw_efficiency", "flops_efficiency", "cuda_context", "activation_reserve")

#: vLLM's options that change what plan finds (`vllm.plan.plan_kv`'s blocks per GPU) and that the
#: launch line then states (`vllm.plan.launch_block_size`, `launch_flags`). SGLang's and
#: llama.cpp's options are not taken: plan sizes SGLang's pools at SGLang's defaults
#: (`sglang_plan.plan_kv`) and llama.cpp by the exact formula (`EngineProfile.plan_engine_kv` is
#: None), so --page-size or --llamacpp-version would not reach the plan.
#: the tier below the GPU (`kvcalc capacity`'s options, `KvMemoryFlags`): --gpus-per-node is
#: plan's own; the KV memory is each layout's, and a prefix's load time is capacity's / estimate's
OFFLOAD_PLAN_OPTIONS = tuple(
    n for n in KvMemoryFlags.option_names() if n not in ("kv_memory", "gpus_per_node", "link", "prefix_hit_rate")
)

VLLM_PLAN_FLAGS = (
    "vllm_version",
    "v0",
    "block_size",
    "attention_backend",
    "disable_hybrid",
    "max_num_batched_tokens",
    "async_scheduling",
    "prefix_caching",
)


@handle_errors
@flag_sets()
def plan(
    ctx: typer.Context,
    model: ModelArg,
    seq_len: SeqLenOpt = None,
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency",
            "--max-num-seqs",
            "--max-running-requests",
            help="Sequences served at once, all at --seq-len (vLLM --max-num-seqs, SGLang --max-running-requests; not -c: llama.cpp's --ctx-size).",
        ),
    ] = 1,
    max_tpot_ms: Annotated[
        Optional[float], typer.Option("--max-tpot-ms", help="Target: the slowest time per output token, ms.")
    ] = None,
    min_tokens_per_s: Annotated[
        Optional[float], typer.Option("--min-tokens-per-s", help="Target: the least total output tokens/s.")
    ] = None,
    max_ttft_s: Annotated[
        Optional[float],
        typer.Option("--max-ttft-s", help="Target: the slowest first token of one --seq-len prompt, s."),
    ] = None,
    gpus: Annotated[
        Optional[str],
        typer.Option(
            "--gpu", help="GPUs to search: h100-sxm,h200,l40s (default all; a+b: a fixed set of devices, llama.cpp)."
        ),
    ] = None,
    max_gpus: Annotated[
        int,
        typer.Option(
            "--max-gpus",
            help="Most GPUs in a layout; above --gpus-per-node, whole nodes (pipeline stages or replicas across nodes, TP inside one).",
        ),
    ] = 32,
    gpus_per_node: Annotated[
        int, typer.Option("--gpus-per-node", help="GPUs in one node (TP stays inside a node).")
    ] = 8,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            "-e",
            help="vllm, sglang, llamacpp (layers split over one node's devices) or ideal (no launch line).",
        ),
    ] = "vllm",
    kv_dtypes: Annotated[
        Optional[str],
        typer.Option(
            "--kv-dtype",
            "--kv-cache-dtype",
            callback=auto_is_default,
            help="KV formats to choose from, a comma list (vLLM / SGLang --kv-cache-dtype; default, or auto: the model's dtype, then fp8 where the GPU has it; llama.cpp f16,q8_0).",
        ),
    ] = None,
    weight_dtypes: Annotated[
        Optional[str],
        typer.Option(
            "--weight-dtype",
            "--quantization",
            help="Weight formats to choose from, a comma list (vLLM / SGLang --quantization fp8; default: the checkpoint's, then fp8 where the GPU has it; llama.cpp q8_0).",
        ),
    ] = None,
    dcp: Annotated[
        Optional[int],
        typer.Option(
            "--dcp",
            "--decode-context-parallel-size",
            "-dcp",
            help="vLLM decode context parallel for every layout: dcp of the tp ranks each hold 1/dcp of every sequence's positions (tp a multiple of dcp); the launch lines carry it. Default: tried only where nothing else fits (MLA models).",
        ),
    ] = None,
    prices: Annotated[
        Optional[str],
        typer.Option(
            "--prices", help="YAML of gpu: dollars per GPU-hour (your figures); ranks by cost after the GPU count."
        ),
    ] = None,
    top: Annotated[int, typer.Option("--top", help="Layouts shown.")] = 10,
    why_not: Annotated[int, typer.Option("--why-not", help="Nearest misses explained when nothing qualifies.")] = 5,
    write_deployment: Annotated[
        Optional[str],
        typer.Option(
            "--write-deployment",
            help="Write the top layout as a deployment YAML for `kvcalc check` (an existing file only with --force).",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the --write-deployment file.")] = False,
    knobs: Annotated[GpuPlanFlags, only(*KNOBS)] = GpuPlanFlags(),
    vllm: Annotated[
        VllmFlags,
        only(
            *VLLM_PLAN_FLAGS,
            attention_backend="vLLM attention backend (VLLM_ATTENTION_BACKEND): FLASHMLA, CUTLASS_MLA, FLASHINFER_MLA, TRITON_MLA set an MLA model's block size. Default: each planned GPU's own.",
        ),
    ] = VllmFlags(),
    speculative: Annotated[
        SpeculativeFlags,
        only(
            "speculative_config",
            "speculative_algorithm",
            "speculative_num_steps",
            "speculative_draft_model_path",
            "accepted_len",
            speculative_config="vLLM's speculative config as JSON: method (mtp, eagle, eagle3, draft_model, ngram), num_speculative_tokens, model (the draft). Each layout's memory counts the draft's weights and KV; the launch lines carry it (vLLM --speculative-config, SGLang --speculative-algorithm ...); TPOT with --accepted-len.",
            accepted_len="Mean tokens one verify step emits (bonus token included, 1..k+1): your measured figure; with it each layout's TPOT and tokens/s are speculative decoding's.",
        ),
    ] = SpeculativeFlags(),
    calibration: Annotated[
        Optional[str],
        typer.Option(
            "--calibration",
            help="A calibration file from `kvcalc measure --calibrate`: its measured floor, bandwidth, FLOP/s and all-reduce latency replace the speed table's on its GPU (the table's on the others); the output names them.",
        ),
    ] = None,
    input_len: Annotated[
        Optional[int],
        typer.Option(
            "--input-len",
            help="Prompt tokens per request: with --output-len, time and rank the layouts on whole requests (TTFT of the prompt, TPOT at the mean context, output tokens/s with the prefill, end to end); --seq-len defaults to their sum.",
        ),
    ] = None,
    output_len: Annotated[
        Optional[int], typer.Option("--output-len", help="Generated tokens per request (with --input-len).")
    ] = None,
    request_rate: Annotated[
        Optional[float],
        typer.Option(
            "--request-rate",
            help="Requests/s arriving at the layout (with --input-len / --output-len): continuous batching by Little's law instead of static batches of --concurrency; a layout that cannot keep up misses.",
        ),
    ] = None,
    offload: Annotated[KvMemoryFlags, only(*OFFLOAD_PLAN_OPTIONS)] = KvMemoryFlags(),
    sessions: Annotated[
        Optional[int],
        typer.Option(
            "--sessions",
            help="Target: sessions of --seq-len tokens kept warm over the GPU and the offload tier, all replicas (needs an offload flag: --kv-offloading-size, --lmcache-*, --hicache-*).",
        ),
    ] = None,
    revision: RevisionOpt = None,
    trust_plain_decoder: TrustPlainOpt = False,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, json, yaml or markdown.")] = "table",
) -> None:
    """The GPUs, layout and engine command that serve CONCURRENCY sequences of SEQ_LEN tokens
    within the targets: fewest GPUs first, then the lowest cost (--prices), then the most tokens/s."""
    from kvcalc.load.models import load_model, naming_model_file
    from kvcalc.requests import PlanRequest, run_plan

    if fmt not in ("table", "json", "yaml", "markdown"):
        check_format(fmt)
        raise KvcalcError(f"--format: kvcalc plan prints table, json, yaml or markdown, not {fmt}")
    if write_deployment is not None:
        from kvcalc.cli.output import check_target

        check_target(write_deployment, "--write-deployment", force=force)  # before any work
    if engine_key(engine) != VllmFlags.engine:  # --block-size with --engine sglang: refused, not ignored
        refuse_typed(ctx, VLLM_PLAN_FLAGS, "--engine vllm only")
    settings = plan_offload_settings(offload, sessions, gpus_per_node)
    options = engine_options(engine, (vllm,))  # each GPU's compute capability and vendor replace these
    spec, sd = load_model(model, revision, trust_plain_decoder=trust_plain_decoder), speculative.resolve(load_model)
    with naming_model_file(model):  # a YAML or config.json that cannot size the weights is named
        req = PlanRequest.build(
            spec,
            seq_len=seq_len,
            concurrency=concurrency,
            gpus=gpus,
            max_gpus=max_gpus,
            engine=engine,
            kv_dtypes=kv_dtypes,
            weight_dtypes=weight_dtypes,
            max_tpot_ms=max_tpot_ms,
            min_tokens_per_s=min_tokens_per_s,
            max_ttft_s=max_ttft_s,
            prices=prices,
            knobs=knobs.layout(),
            top=top,
            why_not=why_not,
            gpus_per_node=gpus_per_node,
            engine_options=options,
            calibration=_calibration(calibration),
            speculative=sd,
            input_len=input_len,
            output_len=output_len,
            request_rate=request_rate,
            dcp=dcp,
        )
        if settings is None:
            res = run_plan(req)
        else:
            from kvcalc.offload_request import plan_with_offload

            res = plan_with_offload(req, settings, sessions)
    if write_deployment is not None and res.layouts:
        text = deployment_text(res, res.layouts[0], model, req, settings)
        from kvcalc.cli.output import write_atomic

        write_atomic(write_deployment, text, option="--write-deployment", force=force)
    show(res, fmt)
    if write_deployment is not None and res.layouts and fmt == "table":
        echo(f"wrote {write_deployment} (check it with: kvcalc check {write_deployment})")
    if not res.layouts:
        raise typer.Exit(1)


def plan_offload_settings(offload: KvMemoryFlags, sessions: int | None, gpus_per_node: int) -> OffloadSettings | None:
    """The `OffloadSettings` plan counts (None when no tier is asked). Raises `KvcalcError` for
    --sessions below 1 or without a tier, and for --host-memory or --shared-prefix alone (they
    qualify a tier)."""
    from kvcalc.engines.offload_rules import replace

    s = replace(offload.settings(), gpus_per_node=gpus_per_node)
    if sessions is not None and sessions < 1:
        raise KvcalcError(f"must be at least 1, got {sessions}", option="--sessions", value=sessions)
    if not s.asked:
        for name, given in (
            ("--sessions", sessions is not None),
            ("--host-memory", s.host_memory_bytes is not None),
            ("--shared-prefix", bool(s.shared_prefix_tokens)),
        ):
            if given:
                raise KvcalcError(
                    "plan counts sessions kept warm over an offload tier: give the engine's flag "
                    "(--kv-offloading-size, --lmcache-cpu-size, --lmcache-l1-size, --enable-hierarchical-cache, "
                    "--hicache-ratio, --hicache-size)",
                    option=name,
                )
        return None
    return s


def show(res: PlanResult, fmt: str) -> None:
    """Print the result: the table, the top layout's launch line (plain text: it must copy as
    one line), and the nearest misses when nothing qualifies; or a machine format."""
    if fmt == "markdown":
        from kvcalc.report.tables import plan_markdown

        echo(plan_markdown(res))
        return
    if fmt != "table":
        from kvcalc import report

        echo(report.machine(res, fmt))
        return
    from kvcalc.report.tables import plan_table, plan_title

    if res.layouts:
        echo(plan_table(res))
        top = res.layouts[0]
        from kvcalc.report.offload import plan_sessions_lines

        for line in plan_sessions_lines(res):
            echo(line)
        if top.launch:
            echo(f"launch #1 ({res.engine}):")
            echo(top.launch)
    else:
        echo(plan_title(res))
        if res.n_qualifying and not res.misses:  # `offload_request.plan_with_offload` dropped them all
            echo(f"{res.n_qualifying:,} layouts meet the targets, but none with the offload tier (the notes say why):")
        else:
            echo(f"nothing fits and meets the targets within {res.max_gpus} GPUs; the nearest misses:")
        for m in res.misses:
            echo(f"  {m.line}")
    from kvcalc.cli.output import console
    from kvcalc.report.widths import wrap_line

    width = console().width
    for n in res.notes:  # at the terminal's width, continuation lines indented (no figure split)
        for i, line in enumerate(wrap_line(f"note: {n}", width - 2)):
            echo(line if i == 0 else f"  {line}")


def deployment_text(
    res: PlanResult, layout: PlanLayout, model_arg: str, req: PlanRequest, offload: OffloadSettings | None = None
) -> str:
    """The top layout as a deployment YAML (`kvcalc.schema.Deployment`) with the engine and the
    options plan sized it with (`engine:`, `engine_options:`), checked with `calc.check.check`
    under that engine before it is written: `kvcalc check` passes it with plan's figures. Raises `KvcalcError` for
    a layout a deployment cannot state (devices that differ) or one the check would fail
    (a llama.cpp layer split that vLLM's split of the layers does not fit). `offload`: the
    `OffloadSettings` plan counted (written as the file's `offload:`)."""
    import yaml

    from kvcalc.calc.check import check
    from kvcalc.load.deployments import engine_kv_of, recorded_options
    from kvcalc.load.gpus import get_gpu
    from kvcalc.schema import Deployment

    if len(set(layout.devices)) > 1:
        raise KvcalcError(f"--write-deployment: a deployment names one GPU type, not {layout.gpu}")
    from kvcalc.engines.profile import get_profile
    from kvcalc.load.models import user_path

    prof = get_profile(res.engine)
    spec = req.search.model
    p = user_path(model_arg)
    model_ref = str(p.resolve()) if p.exists() else model_arg
    data: JsonObject = {
        "name": f"{res.model}-{layout.count}x{layout.devices[0]}",
        "description": f"kvcalc plan: {res.concurrency} x {res.seq_len:,} tokens on {res.engine}",
        "model": model_ref,
        "gpu": layout.devices[0],
        "count": layout.count,
        "tp": layout.tp,
        "pp": layout.pp,
        "kv_dtype": layout.kv_dtype
        if layout.kv_pick is None
        else prof.recorded_kv_dtype(spec, req.options, layout.kv_pick),
    }
    # attention DP / EP (`calc.parallel`)
    data |= {"dp_attention": layout.dp_attention, "ep": layout.ep} if layout.dp_attention * layout.ep > 1 else {}
    data |= {"dcp": layout.dcp} if layout.dcp > 1 else {}  # vLLM's -dcp
    if " + " not in layout.weight_dtype:
        data["weight_dtype"] = layout.weight_dtype
    data |= {
        "max_seq_len": res.seq_len,
        "concurrency": res.concurrency,
        "gpu_memory_utilization": req.search.knobs.gpu_memory_utilization,
        "engine": res.engine,
    }
    data |= _offload_key(offload, res.engine)
    options = recorded_options(req.options)
    if options:
        data["engine_options"] = options
    targets: JsonObject = {
        k: v for k, v in (("max_tpot_ms", res.max_tpot_ms), ("min_tokens_per_s", res.min_tokens_per_s)) if v is not None
    }
    if targets:
        data["targets"] = targets
    sd = req.search.speculative
    data |= speculative_entry(sd)
    dep = Deployment.model_validate(data)
    gpu = get_gpu(layout.devices[0])
    engine, engine_kv, kv = engine_kv_of(
        dep, spec, gpu=gpu
    )  # as `kvcalc check` will read the file (issue 23 friction 1)
    row = check(dep, spec, gpu, file="plan", engine_kv=engine_kv, engine=engine, speculative=sd, kv=kv)
    if row.status != "ok":
        raise KvcalcError(
            f"--write-deployment: kvcalc check would not pass this layout ({'; '.join(row.problems)}); not written"
        )
    if row.max_concurrency != layout.max_concurrency:  # one parse, one KV arithmetic: never expected
        raise KvcalcError(
            f"--write-deployment: kvcalc check would read this file as {row.max_concurrency} sequences "
            f"with KV {row.kv_dtype}, plan sized {layout.max_concurrency} with {layout.kv_dtype}; not written"
        )
    head = deployment_head(res, layout, req)
    return "\n".join(head) + "\n" + yaml.safe_dump(data, sort_keys=False, width=1000)


def deployment_head(res: PlanResult, layout: PlanLayout, req: PlanRequest) -> list[str]:
    """The comment lines above a written deployment: what wrote it, the launch line, the knobs
    planned with that `kvcalc check` does not take, a TTFT target it does not check."""
    from kvcalc import __version__
    from kvcalc.load.export import comment_line

    launch = f"# launch ({res.engine}): {comment_line(layout.launch, 2000)}" if layout.launch else None
    head = [
        f"# written by kvcalc {__version__} plan: layout #1 of {res.n_qualifying:,} that qualify",
        launch or f"# engine: {res.engine}",
    ]
    from kvcalc.calc.memory_plan import Layout

    knobs, plain = req.search.knobs, Layout()
    changed = [
        f"{k} {getattr(knobs, k)}"
        for k in ("bw_efficiency", "flops_efficiency", "cuda_context_bytes", "activation_reserve_bytes")
        if getattr(knobs, k) != getattr(plain, k)
    ]
    if changed:
        head.append(f"# planned with {', '.join(changed)}; kvcalc check uses its defaults (it passes with them too)")
    if res.max_ttft_s is not None:
        head.append(
            f"# target max_ttft_s {res.max_ttft_s:g} (TTFT {layout.ttft_s:.2f} s): kvcalc check does not check TTFT"
        )
    return head


def speculative_entry(sd: SpecDecode | None) -> JsonObject:
    """A deployment's `speculative:` (`schema_deploy.SpeculativeSpec`, as
    `load.deployments.speculative_of` reads it) from plan's `calc.speculative.SpecDecode`; {}
    without one."""
    if sd is None:
        return {}
    pairs = (
        ("method", sd.method),
        ("num_speculative_tokens", sd.num_speculative_tokens),
        ("model", sd.draft_ref),
        ("accepted", sd.accepted),
    )
    return {"speculative": {k: v for k, v in pairs if v is not None}}


def _offload_key(offload: OffloadSettings | None, engine: str) -> JsonObject:
    """{'offload': ...}: the tier below the GPU plan counted (`OffloadSettings`, or None: {}), as
    the deployment's `offload:` writes the engine's flags (`kvcalc check` checks its host)."""
    if offload is None:
        return {}
    from kvcalc.offload_request import spec_data

    return {"offload": spec_data(offload, engine)}


def _calibration(path: str | None) -> Calibration | None:
    """--calibration read (`load.speed.load_calibration`), or None."""
    if path is None:
        return None
    from kvcalc.load.speed import load_calibration

    return load_calibration(path)
