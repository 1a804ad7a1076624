"""One request object per command, and the one code path that answers it.

The CLI (`kvcalc.cli`) and the Python API (`kvcalc.estimate`, `kvcalc.capacity`) both build an
`EstimateRequest` or a `CapacityRequest` here and call `run_estimate` / `run_capacity`; the sweep's
request is `kvcalc.calc.sweep.SweepRequest`. The request and result records are NamedTuples, not frozen
dataclasses: every command declares them at start-up, and a dataclass compiles its methods when
declared. This module sits above `calc/` and `engines/` and
below `cli/`: it checks values that are not yet typed (counts, names), loads nothing but the GPU
named in a request, and prints nothing. Errors are `KvcalcError`; a context beyond the model's
trained length is a `KvcalcWarning`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, NamedTuple

from kvcalc.errors import MESSAGE, OPTION, OPTION_SAYS, KvcalcError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from pathlib import Path

    from kvcalc.calc.memory_plan import GpuFit, Layout
    from kvcalc.calc.plan import EngineKv, GpuChoice, KvPick, PlanSearch, WholeRequests, _Placed
    from kvcalc.calc.speculative import SpecDecode
    from kvcalc.calc.speed import Calibration, SpeedTerms
    from kvcalc.engines.profile import AnyProfile, EngineOptions, KvChoice
    from kvcalc.formats import StorageFormat
    from kvcalc.results import (
        EngineResult,
        FitHint,
        KvEstimate,
        PlanResult,
        RequestEstimate,
        ServingEstimate,
        SpeculativeEstimate,
    )
    from kvcalc.schema import ModelSpec, Workload
    from kvcalc.schema_deploy import GpuSpec


# ----- the batch a flag names -------------------------------------------------------------


def replica_batch(batch: int, dp_attention: int, engine: str) -> int:
    """The sequences one replica (all `dp_attention` attention-DP ranks of one engine) holds,
    from the batch flag (`--batch` / `--max-num-seqs` / `--max-running-requests`) as the engine
    reads it:

    - vLLM 0.33.0: `--max-num-seqs` is per DP rank (`vllm/config/scheduler.py`
      `SchedulerConfig.max_num_seqs`; each DP rank is an engine core with its own scheduler), so
      the replica holds `batch x dp_attention` (plan prints `--max-num-seqs ceil(total / dpa)`);
      kvcalc's own `--batch` (`ideal`, llama.cpp) reads the same way.
    - SGLang 0.5.23: `--max-running-requests` is the engine's total; each attention-DP rank
      takes `max(1, total // attn_dp_size)` (`model_executor/pool_configurator.py`,
      `mem_cache/kv_cache_configurator.py`), so the replica holds `batch`.

    Without attention DP (`dp_attention` 1) both are the replica's. Units: sequences."""
    from kvcalc.engines import canonical

    if dp_attention == 1 or canonical(engine) == "sglang":
        return batch
    return batch * dp_attention


# ----- checks shared by every entry point -------------------------------------------------


def check_positive(**values: int | None) -> None:
    """Raise KvcalcError naming the first option that is not a positive integer, or that lies
    past its bound in `units.BOUNDS` (`units.check_bound`: the one set of bounds every entry point
    shares); None is skipped. The option is `--name` (`max_num_batched_tokens` ->
    `--max-num-batched-tokens`)."""
    from kvcalc.units import bound_of, check_bound

    for name, v in values.items():
        if v is None:
            continue
        flag = "--" + name.replace("_", "-")
        if bound_of(name) is not None:
            check_bound(name, v, option=flag)
        elif v <= 0:
            raise KvcalcError(f"{flag} must be a positive integer, got {v}")


def check_gpu_total(tp: int, pp: int, dp: int) -> None:
    """Raise KvcalcError when tp x pp x dp GPUs pass `units.MAX_GPUS` (each is bounded alone by
    `check_positive`; their product is the GPU count a layout needs)."""
    from kvcalc.units import MAX_GPUS

    if tp * pp * dp > MAX_GPUS:
        raise KvcalcError(
            f"--tp {tp} x --pp {pp} x --dp {dp} = {tp * pp * dp:,} GPUs is beyond what kvcalc sizes "
            f"(at most {MAX_GPUS:,} GPUs)",
            option="--dp",
            value=dp,
            form=MESSAGE,
        )


def resolve_seq_len(model: ModelSpec, seq_len: str | int | None) -> int:
    """`seq_len` (tokens; '32k' is parsed), or the context vLLM serves the model at by default
    (`ModelSpec.default_context`: max_position_embeddings, scaled by the config's rope_scaling as
    vLLM derives it); raises KvcalcError if neither."""
    from kvcalc.units import parse_count

    if seq_len is not None:
        return parse_count(seq_len, "--seq-len")
    if model.default_context is None:
        raise KvcalcError(f"{model.name} has no max_position_embeddings; give --seq-len")
    return model.default_context


def resolve_seq_lens(model: ModelSpec, seq_len: str | int | None) -> list[int]:
    """The contexts of `seq_len` in tokens, in the order given, repeats dropped ('8k,32k,128k' ->
    [8192, 32768, 131072]; one value -> a list of one), or [max_position_embeddings]; raises
    KvcalcError for a bad item or a model without max_position_embeddings when none is given."""
    from kvcalc.units import parse_counts

    if seq_len is None or isinstance(seq_len, int):
        return [resolve_seq_len(model, seq_len)]
    return parse_counts(seq_len, "--seq-len")


def shared_seq_len(models: list[ModelSpec], seq_len: str | int | None) -> int:
    """One context for several models (`kvcalc compare A B ...`): `seq_len` (tokens) when given,
    else the shortest default context among them (`ModelSpec.default_context`, so every model is
    within its limit). Raises KvcalcError when none is given and no model states its maximum."""
    if seq_len is not None:
        return resolve_seq_len(models[0], seq_len)
    known = [m.default_context for m in models if m.default_context]
    if not known:
        raise KvcalcError(f"none of {', '.join(m.name for m in models)} has max_position_embeddings; give --seq-len")
    return min(known)


def shared_kv_dtype(models: list[ModelSpec], kv_dtype: str | None) -> str:
    """One KV format name for several models: `kv_dtype` when given, else their common dtype.
    Raises KvcalcError when the models' dtypes differ (naming each) and none is given."""
    from kvcalc.formats import kv_format

    if kv_dtype is not None:
        return kv_format(kv_dtype).name
    names = {m.name: kv_format(m.dtype).name for m in models}
    if len(set(names.values())) > 1:
        raise KvcalcError(
            "the models' dtypes differ ("
            + ", ".join(f"{k}: {v}" for k, v in names.items())
            + "): give --kv-dtype to compare them in one format",
            option="--kv-dtype",
            form=MESSAGE,
        )
    return next(iter(names.values()))


def kv_format_names(
    model: ModelSpec,
    kv_dtype: str | None,
    k_dtype: str | None,
    v_dtype: str | None,
    quant_group_size: int | None = None,
    scale_dtype: str | None = None,
) -> tuple[str, str]:
    """(K format name, V format name) of `kv_formats`: the names, for output."""
    k, v = kv_formats(model, kv_dtype, k_dtype, v_dtype, quant_group_size, scale_dtype)
    return k.name, v.name


def kv_formats(
    model: ModelSpec,
    kv_dtype: str | None,
    k_dtype: str | None,
    v_dtype: str | None,
    quant_group_size: int | None = None,
    scale_dtype: str | None = None,
) -> tuple[StorageFormat, StorageFormat]:
    """(K format, V format), each parsed once, here; default the model's dtype. Group options are
    folded into the format (its name `int4:g64:fp32`) so results say what was used. Raises
    `KvcalcError` for an unknown format, a group option the format cannot take, or a `kv_dtype`
    that `k_dtype` and `v_dtype` together override (`formats.refuse_unused_kv_dtype`)."""
    from kvcalc.formats import kv_format, refuse_unused_kv_dtype

    refuse_unused_kv_dtype(kv_dtype, k_dtype, v_dtype)
    plain = quant_group_size is None and scale_dtype is None  # the model's own format needs no parse
    own: str | StorageFormat = model.dtype_format if plain else model.dtype
    base, base_field = (kv_dtype, "kv_dtype") if kv_dtype is not None else (own, None)
    k = kv_format(
        k_dtype if k_dtype is not None else base,
        quant_group_size,
        scale_dtype,
        field="k_dtype" if k_dtype is not None else base_field,
    )
    if k_dtype is None and v_dtype is None:  # one format for both: parsed once
        return k, k
    v = kv_format(
        v_dtype if v_dtype is not None else base,
        quant_group_size,
        scale_dtype,
        field="v_dtype" if v_dtype is not None else base_field,
    )
    return k, v


def check_limits(batches: list[int], seq_lens: list[int]) -> None:
    """Raise `KvcalcError` for a batch or context past the bounds a deployment file accepts
    (`units.MAX_CONCURRENCY` sequences, `units.MAX_SEQ_LEN` tokens): beyond them the sums
    lose meaning and the printed figures turn to garbage."""
    from kvcalc.units import check_bound

    for what, values in (("--batch", batches), ("--seq-len", seq_lens)):
        for v in values:
            check_bound(what, v)


def warn_beyond_context(spec: ModelSpec, seq_lens: list[int]) -> list[int]:
    """Warn (one `KvcalcWarning`) when a context exceeds the model's context limit
    (`ModelSpec.context_limit`: max_position_embeddings, or as vLLM scales it by rope_scaling),
    naming the limit and how it was derived; returns the contexts beyond it."""
    cap = spec.context_limit
    beyond = sorted({t for t in seq_lens if cap and t > cap})
    if beyond:
        import warnings

        from kvcalc.errors import KvcalcWarning
        from kvcalc.text import LISTED_NUMBERS, number_list

        many = len(beyond) > 1
        them = "them" if many else "it"
        count = f"the {len(beyond):,} " if len(beyond) > LISTED_NUMBERS else ""  # the list says "..."
        warnings.warn(
            f"{count}context{'s' if many else ''} of {number_list(beyond)} tokens "
            f"{'are' if many else 'is'} beyond "
            f"{spec.name}'s {spec.context_limit_label}; the model was not trained for {them} "
            f"and engines refuse {them}",
            KvcalcWarning,
            stacklevel=3,
        )
    return beyond


def refuse_without_kv_layers(model: ModelSpec, what: str) -> None:
    """Raise `KvcalcError` (field `model`) when no layer of `model` caches K and V (every layer
    mamba / linear attention): `what` (a capacity in tokens, a comparison of KV heads) has no
    meaning for it. The message gives its fixed state per sequence instead
    (`kv_cache.state_bytes_per_seq`, in the model's dtype), or says the config does not size it."""
    if any(layer.caches_kv for layer in model.layers):
        return
    from kvcalc.calc.kv_cache import state_bytes_per_seq

    state = state_bytes_per_seq(model)
    shown = (
        f"its fixed state is {state:,} B per sequence, whatever the context"
        if state
        else "its fixed state per sequence is not sized by the config"
    )
    raise KvcalcError(
        f"{model.name} has no per-token KV cache (every layer is mamba / linear attention), so {what} "
        f"does not apply; {shown}",
        fix="kvcalc estimate shows it",
        field="model",
        value=model.name,
        form=MESSAGE,
    )


# ----- estimate ---------------------------------------------------------------------------


class EstimateRequest(NamedTuple):
    """`kvcalc estimate`: the KV cache of `workload` (a `schema.Workload`) on `model` (a
    `ModelSpec`); with `gpu` (a name from `kvcalc gpus`, a GPU YAML path or a `GpuSpec`) the memory
    plan and roofline, with the knobs of `layout` (a `memory_plan.Layout`: weight format,
    utilization, efficiencies, reserves; its tp / pp / dp and KV formats are the workload's); with `engine` (not 'ideal') what that engine allocates for the batch, with
    `engine_options` (its options object; None: the defaults). `kv_given`: the KV formats were
    chosen by the user; otherwise the engine part uses the engine's own default dtype."""

    model: ModelSpec
    workload: Workload
    gpu: str | GpuSpec | None = None
    layout: Layout | None = None
    engine: str = "ideal"
    engine_options: EngineOptions | None = None
    kv_given: bool = True
    #: `calc.speed.Calibration` from `--calibration FILE` (None: the table's constants)
    calibration: Calibration | None = None
    #: whole requests (`--input-len` / `--output-len`, `--request-rate`): None for none
    input_len: int | None = None
    output_len: int | None = None
    request_rate: float | None = None
    #: speculative decoding (`calc.speculative.SpecDecode`; None: none), sized with --gpu
    speculative: SpecDecode | None = None
    #: the KV dtype as the engine parsed it (`engines.profile.KvChoice`), with an engine and a
    #: dtype given: its formats, label and options (vLLM's TurboQuant presets and per-token-head
    #: scales fold into the options); None: the generic formats of `workload`
    kv: KvChoice | None = None

    @classmethod
    def build(
        cls,
        model: ModelSpec,
        *,
        seq_len: str | int | None = None,
        batch: int = 1,
        kv_dtype: str | None = None,
        k_dtype: str | None = None,
        v_dtype: str | None = None,
        quant_group_size: int | None = None,
        scale_dtype: str | None = None,
        tp: int = 1,
        pp: int = 1,
        dp: int = 1,
        warn: bool = True,
        dp_attention: int = 1,
        ep: int = 1,
        dcp: int = 1,
        **rest: Any,  # Any: the request's other fields, each its own type (pydantic checks them)
    ) -> EstimateRequest:
        """Check and resolve the values (the context defaults to the model's
        max_position_embeddings, the KV format to the model's dtype), warn for a context beyond
        the model's (unless `warn` is False), and build the `Workload`. `rest`: gpu, layout,
        engine, engine_options.

        The KV dtype is parsed once, here: with an engine (not 'ideal') against that engine's
        table (`EngineProfile.kv_formats`: vLLM 0.33's `turboquant_k8v4`, `fp8_per_token_head`,
        `fp8_ds_mla`, ...; a refusal names the engine version and what it accepts), into `kv`;
        otherwise against kvcalc's formats (`kv_formats`). The `Workload` carries the
        `StorageFormat` objects: nothing below parses a name again."""
        from kvcalc.calc.kv_cache import check_tp
        from kvcalc.schema import Parallelism, Workload

        check_positive(batch=batch, tp=tp, pp=pp, dp=dp, dp_attention=dp_attention, ep=ep, dcp=dcp)
        check_gpu_total(tp, pp, dp * dp_attention)
        engine = rest.get("engine", "ideal")
        if dcp > 1 or engine != "ideal":
            from kvcalc.engines import canonical

            if dcp > 1 and canonical(engine) not in ("ideal", "vllm"):
                # the engine first: another engine's --dcp is refused before vLLM's DCP rules
                refuse_dcp_engine(engine, dcp)
            if canonical(engine) != "ideal":  # the engine's options, once (`engine_for_batch` trusts them)
                from kvcalc.engines.profile import get_profile

                prof = get_profile(engine)
                opts = prof.options(rest.get("engine_options"))
                check_option_bounds(opts)
                prof.check_options(opts)
        T = resolve_seq_len(model, seq_len)
        kv_given = bool(kv_dtype or k_dtype or v_dtype or quant_group_size or scale_dtype)
        choice = None
        if kv_given and quant_group_size is None and scale_dtype is None:
            choice = engine_kv_choice(model, rest.get("engine", "ideal"), kv_dtype, k_dtype, v_dtype, rest)
        if choice is not None:
            k, v = choice.k, choice.v
        else:
            k, v = kv_formats(model, kv_dtype, k_dtype, v_dtype, quant_group_size, scale_dtype)
        check_limits([batch], [T])
        if warn:
            warn_beyond_context(model, [T])
        check_tp(model, tp)  # once, here: `kv_cache.estimate` and `GpuFit` trust the workload's layout
        if (dp_attention, ep, dcp) != (1, 1, 1):
            from kvcalc.calc.parallel import check_layout

            check_layout(model, tp, dp_attention, ep, dcp)
        speculative = rest.get("speculative")
        if rest.get("gpu") is None:  # both are sized on a GPU's memory plan and roofline
            if speculative is not None:
                raise KvcalcError(
                    "--speculative-config needs --gpu (the draft's weights and the step times are per GPU)",
                    option="--speculative-config",
                )
            if rest.get("input_len") is not None or rest.get("output_len") is not None:
                raise KvcalcError(
                    "--input-len / --output-len need --gpu (a GPU from `kvcalc gpus`)", option="--input-len"
                )
        if speculative is not None:  # once, here: `calc.speculative.estimate` trusts it
            speculative.check(model)
        if rest.get("layout") is not None:  # the memory plan's knobs, once: `GpuFit` trusts them
            rest["layout"].check()
        wl = Workload(
            seq_len=T,
            batch=batch,
            k_dtype=k,
            v_dtype=v,
            parallel=Parallelism(tp=tp, pp=pp, dp=dp, dp_attention=dp_attention, ep=ep, dcp=dcp),
        )
        return cls(model=model, workload=wl, kv_given=kv_given, kv=choice, **rest)

    @classmethod  # Any: `build`'s keyword arguments, forwarded
    def build_lengths(cls, model: ModelSpec, seq_lens: list[int], **kwargs: Any) -> list[EstimateRequest]:
        """One request per context of `seq_lens` (tokens), the other values as `build` takes
        them; contexts beyond the model's are named in one warning, not one per length."""
        check_limits([], seq_lens)
        warn_beyond_context(model, seq_lens)
        return [cls.build(model, seq_len=T, warn=False, **kwargs) for T in seq_lens]


def refuse_dcp_engine(engine: str, dcp: int) -> None:
    """Refuse `--dcp` with an engine other than vLLM (decode context parallel is vLLM's `-dcp`,
    `vllm/config/parallel.py` `decode_context_parallel_size`, vLLM 0.33). Raises `KvcalcError`."""
    raise KvcalcError(
        f"--dcp {dcp} with --engine {engine}: decode context parallel is vLLM's (-dcp); "
        f"kvcalc's own figure (without --engine) divides the positions by dcp",
        option="--dcp",
        value=dcp,
        form=MESSAGE,  # the message names --dcp and its value: not `--dcp 2: --dcp 2 with ...`
    )


def engine_kv_choice(
    model: ModelSpec,
    engine: str,
    kv_dtype: str | None,
    k_dtype: str | None,
    v_dtype: str | None,
    rest: dict[str, Any],  # Any: `build`'s other keyword arguments
) -> KvChoice | None:
    """The KV formats `engine` makes of the dtypes given (`EngineProfile.kv_formats`), its options
    (`rest["engine_options"]`, None: the defaults) with what the dtype implies folded in and
    written back to `rest`; None for the ideal engine (kvcalc's own formats)."""
    from kvcalc.engines import canonical
    from kvcalc.engines.profile import get_profile

    if canonical(engine) == "ideal":
        return None
    prof = get_profile(engine)
    choice = prof.kv_formats(model, kv_dtype, k_dtype, v_dtype, rest.get("engine_options"))
    rest["engine_options"] = choice.options
    return choice


class EstimateResult(NamedTuple):
    """The parts of an estimate: `kv` (`KvEstimate`), `serving` (`ServingEstimate`, with a GPU)
    on `gpu` (`GpuSpec`), `engine` (`EngineResult`, with an engine; None when it would not start)."""

    kv: KvEstimate
    serving: ServingEstimate | None = None
    gpu: GpuSpec | None = None
    engine: EngineResult | None = None
    fit_hint: FitHint | None = None
    request: RequestEstimate | None = None
    #: `SpeculativeEstimate` (with --gpu and a speculative config)
    speculative: SpeculativeEstimate | None = None


def speed_terms(
    gpu: GpuSpec, engine: str, tp: int, layout: Layout | None = None, calibration: Calibration | None = None
) -> SpeedTerms:
    """(`calc.speed.SpeedTerms`) the speed model's terms for `engine` on `gpu` at `tp` ranks:
    `kvcalc/data/speed.yaml`, then the calibration's measured figures; an efficiency typed on the
    command line (`layout` knobs off their defaults) replaces the table's. Raises `KvcalcError`
    when the calibration was measured on another GPU."""
    from kvcalc.calc import speed
    from kvcalc.calc.defaults import DEFAULT_BW_EFFICIENCY, DEFAULT_FLOPS_EFFICIENCY
    from kvcalc.engines import canonical
    from kvcalc.load.speed import speed_table

    if calibration is not None and calibration.gpu != gpu.key:
        raise KvcalcError(
            f"the calibration was measured as {calibration.gpu}, not {gpu.key}: give --gpu "
            f"{calibration.gpu} or measure this GPU",
            option="--calibration",
            value=calibration.gpu,
        )
    terms = speed.resolve_terms(
        speed_table(),
        engine=canonical(engine),
        vendor=gpu.vendor,
        name=gpu.name,
        interconnect_bytes_per_s=gpu.interconnect_bytes_per_s,
        hbm_bytes_per_s=gpu.hbm_bytes_per_s,
        bf16_flops_per_s=gpu.bf16_flops_per_s,
        tp=tp,
        calibration=calibration,
    )
    if layout is not None and layout.bw_efficiency != DEFAULT_BW_EFFICIENCY:
        terms = dataclasses.replace(
            terms, bw_efficiency=layout.bw_efficiency, calibrated=terms.calibrated + ("--bw-efficiency",)
        )
    if layout is not None and layout.flops_efficiency != DEFAULT_FLOPS_EFFICIENCY:
        terms = dataclasses.replace(
            terms, flops_efficiency=layout.flops_efficiency, calibrated=terms.calibrated + ("--flops-efficiency",)
        )
    return terms


def request_result(planner: GpuFit, req: EstimateRequest) -> RequestEstimate | None:
    """(`RequestEstimate`) the whole-request figures of `req` on `planner`, or None without
    --input-len / --output-len; None figures when the batch does not fit."""
    from kvcalc.calc.request_speed import request_speed
    from kvcalc.results import RequestEstimate

    if req.input_len is None and req.output_len is None:
        return None
    if req.input_len is None or req.output_len is None:
        missing = "--input-len" if req.input_len is None else "--output-len"
        raise KvcalcError("whole requests need both --input-len and --output-len", option=missing)
    B, I, O = req.workload.batch, req.input_len, req.output_len  # noqa: E741  (I, O: input and output tokens)
    fits = planner.headroom_bytes(I + O, B) >= 0
    rs = request_speed(planner, I, O, B, req.request_rate) if fits else None
    return RequestEstimate.build(rs, input_len=I, output_len=O, batch=B, fits=fits, request_rate=req.request_rate)


def run_estimate(req: EstimateRequest) -> EstimateResult:
    """KV bytes (`calc.kv_cache.estimate`), then the GPU plan (`calc.memory_plan.GpuFit.serving`
    at the estimate's (T, B)), then the engine's allocation (`engine_for_batch`)."""
    from kvcalc.calc import kv_cache
    from kvcalc.engines import canonical

    est = kv_cache.estimate(req.model, req.workload)
    serving = gpu = request = spec_res = None
    if req.gpu is not None:
        from kvcalc.calc.memory_plan import GpuFit, Layout
        from kvcalc.load.gpus import get_gpu

        gpu = get_gpu(req.gpu) if isinstance(req.gpu, str) else req.gpu
        par, wl = req.workload.parallel, req.workload
        layout = dataclasses.replace(
            req.layout if req.layout is not None else Layout(),
            tp=par.tp,
            pp=par.pp,
            dp=par.dp,
            k_dtype=wl.k_dtype,
            v_dtype=wl.v_dtype,
            dp_attention=par.dp_attention,
            ep=par.ep,
            dcp=par.dcp,
        )
        layout = dataclasses.replace(layout, speed=speed_terms(gpu, req.engine, par.tp, layout, req.calibration))
        planner = GpuFit(req.model, gpu, layout)
        serving = planner.serving(est.seq_len, est.batch, est.kv_cache_bytes_per_gpu)
        if canonical(req.engine) != "ideal":
            placed = engine_placed(req, gpu, planner)
            if placed is not None:  # the engine's pages, as plan / check / capacity size them
                serving = engine_serving(placed, serving, est.seq_len, est.batch)
                est = est.model_copy(update={"kv_dtype": engine_kv_label(placed)})
        request = request_result(planner, req)
        if req.speculative is not None:
            from kvcalc.calc import speculative as spec_calc

            spec_res = spec_calc.estimate(planner, req.speculative, est.seq_len, est.batch)
    hint = None
    if serving is not None and gpu is not None and not serving.fits:
        hint = fit_hint(req, gpu, layout, est)
    engine = None
    if canonical(req.engine) != "ideal":
        engine = engine_for_batch(req, serving)
    return EstimateResult(
        kv=est, serving=serving, gpu=gpu, engine=engine, fit_hint=hint, request=request, speculative=spec_res
    )


def gpu_free_options(parsed: EngineOptions, options: EngineOptions) -> EngineOptions:
    """`parsed` (the options an engine's KV dtype was parsed into on one GPU) with the GPU's
    fields (compute capability, vendor) of `options`: each layout's GPU sets them (`plan_kv`)."""
    return dataclasses.replace(parsed, **{f: getattr(options, f) for f in ("compute_capability", "vendor")})


def engine_placed(req: EstimateRequest, gpu: GpuSpec, planner: GpuFit) -> _Placed | None:
    """The estimate's layout on `gpu` with the engine's own KV arithmetic
    (`EngineProfile.plan_engine_kv`: vLLM 0.33's blocks and pages, SGLang 0.5.23's pools), built
    exactly as `kvcalc plan` and `kvcalc check` build it (`calc.plan._Placed`; the KV dtype as
    the engine parsed it, with its own name, `plan_kv_picks`), so that estimate's memory plan is
    plan's (issue 23: one code path). None where the engine has no such arithmetic or it does not
    cover the layout (the exact formula sizes it then, as plan falls back)."""
    from kvcalc.calc.plan import GpuChoice, KvPick, _Placed, engine_kv_for
    from kvcalc.engines.profile import get_profile

    prof = get_profile(req.engine)
    opts = prof.options(req.engine_options)
    par = req.workload.parallel
    kv_options: dict[str, EngineOptions] = {}
    if req.kv is not None:
        own = prof.engine_kv_dtype(req.kv, gpu_engine_options(opts, gpu))
        pick = KvPick(req.kv.k, req.kv.v, own)
        if own is not None:  # the GPU's fields are the layout's (`plan_kv_picks`)
            kv_options[own] = gpu_free_options(req.kv.options, opts)
    else:
        pick = KvPick(req.workload.k_dtype, req.workload.v_dtype)
    engine_kv = prof.plan_engine_kv(req.model, opts, kv_options)
    if engine_kv is None:
        return None
    try:
        ekv = engine_kv_for(engine_kv, gpu, planner, pick)
    except KvcalcError:
        return None
    return _Placed(GpuChoice((gpu,)), planner, (gpu,), par.dp, pick, planner.layout.weight_dtype, ekv)


def engine_kv_label(placed: _Placed) -> str:
    """The KV dtype as plan shows it for `placed` (`calc.plan._kv_label`)."""
    from kvcalc.calc.plan import _kv_label

    return _kv_label(placed.kv)


def engine_serving(placed: _Placed, serving: ServingEstimate, seq_len: int, batch: int) -> ServingEstimate:
    """`serving` (the exact formula's plan) with the engine's memory figures, as `kvcalc plan`
    reports the layout (`calc.plan._Placed`): KV bytes per GPU the engine must be left for
    `batch` sequences per replica of `seq_len` tokens (its pages hold any recurrent state, so no
    separate state), memory per GPU (weights + that KV + activation reserve + CUDA context), and
    the max batch per replica, the engine's max concurrency floor (`EngineKv.max_batch` x
    dp-attention ranks). TPOT / tokens/s are plan's too (`GpuFit.split_decode` on the same
    formats), so they stay; a batch that no longer fits gets none."""
    dp = placed.dp
    kv_stage = placed.kv_bytes(seq_len, batch)
    used_stage = placed.used(seq_len, batch * dp)
    s = max(range(len(used_stage)), key=used_stage.__getitem__)
    used = used_stage[s]
    budget = serving.budget_bytes_per_gpu
    fits = used <= budget
    speed: dict[str, float | str | None] = {}
    if not fits:
        speed = dict.fromkeys(("tpot_s", "tokens_per_s_per_seq", "tokens_per_s", "ttft_s", "prefill_bound"))
    elif serving.tpot_s is None:  # the engine's pages fit where the exact formula's did not
        b = placed.base
        dec, pre = b.decode(seq_len, batch), b.prefill(seq_len)
        tpot = dec.step_time_s
        speed = {
            "tpot_s": tpot,
            "tokens_per_s_per_seq": 1 / tpot,
            "tokens_per_s": batch * dp / tpot,
            "ttft_s": pre.step_time_s,
            "prefill_bound": pre.bound,
        }
    return serving.model_copy(
        update={
            "kv_cache_bytes_per_gpu": kv_stage[s],
            "state_bytes_per_gpu": 0,
            "memory_bytes_per_gpu": used,
            "headroom_bytes": budget - used,
            "fits": fits,
            "max_batch": placed.max_concurrency(seq_len) // dp,
            **engine_max_seq_len(placed, batch),
            **speed,
        }
    )


def engine_max_seq_len(placed: _Placed, batch: int) -> dict[str, int | bool]:
    """`max_seq_len` / `max_seq_len_capped` of `ServingEstimate` with the engine's pages: the
    longest context whose `batch` sequences per replica fit every stage's budget
    (`_Placed.used`, as plan counts memory), capped at the model's context limit
    (`ModelSpec.context_limit`, else 2^30, as `GpuFit.max_seq_len`); binary search, exact
    because the engine's KV bytes never shrink as the context grows."""
    from kvcalc.calc.plan import _largest

    budgets = placed.budgets()
    hi = placed.base.model.context_limit or 2**30

    def fits(seq_len: int) -> bool:
        return all(u <= b for u, b in zip(placed.used(seq_len, batch * placed.dp), budgets, strict=True))

    if fits(hi):
        return {"max_seq_len": hi, "max_seq_len_capped": True}
    return {"max_seq_len": _largest(1, hi, fits), "max_seq_len_capped": False}


def fit_hint(req: EstimateRequest, gpu: GpuSpec, layout: Layout, est: KvEstimate) -> FitHint:
    """(`FitHint`) the fewest GPUs of `gpu` that fit the estimate's batch x dp sequences of its
    context in its formats (`calc.plan.smallest_fitting`, up to `FIX_SEARCH_MAX_GPUS`)."""
    from kvcalc.calc.plan import FIX_SEARCH_MAX_GPUS, smallest_fitting
    from kvcalc.results import FitHint

    found = smallest_fitting(
        req.model,
        gpu,
        layout,
        est.seq_len,
        est.batch * est.dp,
        (req.workload.k_dtype, req.workload.v_dtype),  # the layout's, as `run_estimate` copied them
        layout.weight_dtype,
    )
    text = None
    if found is not None:
        n, tp, pp, dp = found
        text = f"{n} x {gpu.key} (tp {tp}, pp {pp}, dp {dp})"
    return FitHint(
        smallest_fitting_count=None if found is None else found[0],
        smallest_fitting_layout=text,
        smallest_fitting_limit=FIX_SEARCH_MAX_GPUS,
    )


def engine_for_batch(req: EstimateRequest, plan: ServingEstimate | None = None) -> EngineResult | None:
    """(`EngineResult`) what `req.engine` allocates for the request's batch, or None (with a
    `KvcalcWarning`) when it would not start.

    KV memory: with `plan` (a `ServingEstimate`), what the plan leaves for the KV cache on one
    GPU, as vLLM sizes it: budget - weights - state - activation reserve - CUDA context, i.e.
    `headroom_bytes + kv_cache_bytes_per_gpu` (the KV the engine then takes is all of it).
    Without a plan, the memory this batch needs ("sized for this batch"). An engine that
    allocates cells (llama.cpp) gets n_ctx = T x B cells, --parallel B, either way.
    """
    import warnings

    from kvcalc.engines.profile import get_profile
    from kvcalc.errors import KvcalcWarning
    from kvcalc.formats import kv_format

    prof = get_profile(req.engine)
    opts = prof.options(req.engine_options)  # checked where the request was built (`EstimateRequest.build`)
    T, B, tp = req.workload.seq_len, req.workload.batch, req.workload.parallel.tp
    par = req.workload.parallel
    if par.dcp > 1:  # vLLM's blocks at cdiv(T, dcp) positions (`VllmOptions.dcp`); the builder refused other engines
        opts = dataclasses.replace(opts, dcp=par.dcp)
    B = -(-B // par.dp_attention)  # each attention-DP rank is an engine core with its own requests
    if req.kv is not None:  # parsed once, by the engine, when the request was built
        k, v, shown = req.kv.k, req.kv.v, req.kv.label
    elif req.kv_given:
        k, v, shown = kv_format(req.workload.k_dtype), kv_format(req.workload.v_dtype), None
    else:
        choice = prof.kv_formats(req.model, options=opts)
        k, v, shown, opts = choice.k, choice.v, choice.label, choice.options
    mem = None
    if prof.allocates_cells:
        if tp != 1 and not prof.splits_heads:
            raise KvcalcError(
                f"--tp {tp}: {prof.display_name} splits layers, not heads; give --tp 1 "
                f"(--pp {tp} splits the layers over {tp} GPUs)",
                option="--tp",
                value=tp,
                form=MESSAGE,
            )
        basis = f"n_ctx = {B} x {T:,} tokens, --parallel {B}"
    elif plan is not None:
        mem = plan.headroom_bytes + plan.kv_cache_bytes_per_gpu
        basis = (
            f"what the {plan.gpu} plan leaves for KV per GPU: {plan.gpu_memory_utilization:g} x GPU memory "
            "- weights - activations - CUDA context" + prof.plan_budget_note
        )
        if mem <= 0:
            warnings.warn(
                f"{prof.name} would fail at start-up on {plan.gpu}: the plan leaves {mem:,} B "
                f"({mem / 1e9:.2f} GB, {mem / 2**30:.2f} GiB) for the KV cache: {prof.no_memory}",
                KvcalcWarning,
                stacklevel=2,
            )
            return None
    else:
        basis = f"sized for this batch ({B} x {T:,} tokens), not a GPU's budget: give --gpu for that"
    res = prof.for_batch(req.model, T, B, k, v, tp=tp, options=opts, kv_cache_dtype=shown, kv_memory_bytes=mem)
    return res.model_copy(update={"kv_memory_basis": basis})


# ----- capacity ---------------------------------------------------------------------------


class CapacityRequest(NamedTuple):
    """`kvcalc capacity`: what `engine` makes of `kv_memory_bytes` of KV memory per GPU rank
    (None: llama.cpp's `options.n_ctx` alone), with K / V formats `k`, `v` labelled `label`, at
    `tp` ranks; concurrency at `max_model_len` tokens (None: the model's) and the longest
    context that fits `concurrency` requests. `options`: the engine's options object."""

    model: ModelSpec
    engine: str
    kv_memory_bytes: int | None
    k: StorageFormat
    v: StorageFormat
    label: str
    options: EngineOptions
    tp: int = 1
    max_model_len: int | None = None
    concurrency: int | None = None

    @classmethod
    def build(
        cls,
        model: ModelSpec,
        *,
        engine: str = "ideal",
        kv_memory_bytes: int | None = None,
        kv_dtype: str | None = None,
        k_dtype: str | StorageFormat | None = None,
        v_dtype: str | StorageFormat | None = None,
        tp: int = 1,
        max_model_len: int | None = None,
        concurrency: int | None = None,
        options: EngineOptions | None = None,
    ) -> CapacityRequest:
        """Resolve the engine (name or alias) and its KV formats: no `kv_dtype` (or 'auto') is
        the engine's default dtype (`EngineProfile.kv_formats`). Raises `KvcalcError` for an
        unknown engine or format, options of another engine, or a `kv_dtype` that `k_dtype` and
        `v_dtype` together override (`formats.refuse_unused_kv_dtype`)."""
        from kvcalc.engines.profile import get_profile
        from kvcalc.formats import refuse_unused_kv_dtype
        from kvcalc.units import check_bound

        check_positive(tp=tp, max_model_len=max_model_len, concurrency=concurrency)
        check_bound("kv_memory_bytes", kv_memory_bytes)
        refuse_unused_kv_dtype(kv_dtype, k_dtype, v_dtype)
        prof = get_profile(engine)
        check_option_bounds(prof.options(options))
        choice = prof.kv_formats(model, kv_dtype, k_dtype, v_dtype, options)
        return cls(
            model=model,
            engine=prof.name,
            kv_memory_bytes=kv_memory_bytes,
            k=choice.k,
            v=choice.v,
            label=choice.label,
            options=choice.options,
            tp=tp,
            max_model_len=max_model_len,
            concurrency=concurrency,
        )


def plan_kv_memory(
    model: ModelSpec, gpu: str | GpuSpec, layout: Layout, seq_len: int | None, concurrency: int | None, engine: str
) -> tuple[int, str]:
    """(KV memory per GPU rank in bytes, where it came from) as `engine_for_batch` sizes an engine
    on a GPU plan: util x GPU memory - weights - state - activation reserve - CUDA context, i.e.
    `headroom_bytes + kv_cache_bytes_per_gpu` of `GpuFit.serving` (vLLM's "Available KV cache
    memory", `vllm/v1/worker/gpu_worker.py` determine_available_memory; SGLang's static pool,
    `--mem-fraction-static`). `gpu`: a name, GPU file or `GpuSpec`; `layout`: a
    `memory_plan.Layout` (tp, weight format, utilization); the state of `concurrency` (default 1)
    sequences of `seq_len` tokens (default the model's) is set aside, as `estimate` does.
    Raises `KvcalcError` when the plan leaves nothing (the engine would fail at start-up)."""
    from kvcalc.calc.memory_plan import GpuFit
    from kvcalc.engines.profile import get_profile
    from kvcalc.load.gpus import get_gpu

    spec = get_gpu(gpu) if isinstance(gpu, str) else gpu
    layout.check()  # `capacity --gpu`'s knobs, once: `GpuFit` trusts them
    T = resolve_seq_len(model, seq_len)
    B = concurrency or 1
    planner = GpuFit(model, spec, layout)
    # `concurrency` is one GPU rank's (vLLM's --max-num-seqs is per attention-DP rank): the
    # replica holds dp_attention times as many
    mem = planner.headroom_bytes(T, B * planner.dpa) + planner.kv.per_gpu_bytes(T, B)
    prof = get_profile(engine)
    if mem <= 0:
        raise KvcalcError(
            f"{prof.name} would fail at start-up on {spec.key}: the plan leaves {mem:,} B "
            f"({mem / 1e9:.2f} GB, {mem / 2**30:.2f} GiB) for the KV cache: {prof.no_memory}"
        )
    basis = (
        f"what the {spec.key} plan leaves for KV per GPU: {layout.gpu_memory_utilization:g} x GPU memory "
        "- weights - activations - CUDA context" + prof.plan_budget_note
    )
    return mem, basis


def run_capacity(req: CapacityRequest) -> EngineResult:
    """The engine's `EngineResult` for the request (`EngineProfile.capacity`). For an engine that
    allocates its whole context up front (llama.cpp: n_ctx cells), given the KV memory and a
    request length but neither --ctx-size nor --parallel, the answer is the requests that fit
    (`requests_that_fit`), not one large context."""
    from kvcalc.engines.profile import get_profile

    if req.engine == "ideal" and req.kv_memory_bytes and not any(layer.caches_kv for layer in req.model.layers):
        from kvcalc.calc.kv_cache import state_bytes_per_seq

        state = state_bytes_per_seq(req.model)
        if state:
            return state_capacity(req, state)
    try:
        refuse_without_kv_layers(req.model, "a capacity in tokens")
    except KvcalcError as e:
        if req.engine == "ideal" or not state_bytes_known(req.model):
            raise
        raise KvcalcError(
            e.reason,
            fix=f"kvcalc does not model how {req.engine} allocates a model with state alone: --engine ideal "
            "with --kv-memory gives how many sequences' state fits",
            field=e.field,
            value=e.value,
            form=e.form,
        ) from None
    prof = get_profile(req.engine)
    if (
        prof.allocates_cells
        and req.kv_memory_bytes
        and req.max_model_len
        and req.concurrency is None
        and getattr(req.options, "n_ctx", None) is None
        and getattr(req.options, "parallel", None) is None
    ):
        found = requests_that_fit(prof, req)
        if found is not None:
            return found
    return prof.capacity(
        req.model,
        req.kv_memory_bytes,
        req.k,
        req.v,
        tp=req.tp,
        max_model_len=req.max_model_len,
        concurrency=req.concurrency,
        options=req.options,
        kv_cache_dtype=req.label,
    )


def state_bytes_known(model: ModelSpec) -> bool:
    """Whether the config sizes the fixed per-sequence state (`kv_cache.state_bytes_per_seq`)."""
    from kvcalc.calc.kv_cache import state_bytes_per_seq

    return bool(state_bytes_per_seq(model))


def state_capacity(req: CapacityRequest, state_bytes: int) -> EngineResult:
    """The exact formula's capacity of a model with no per-token KV cache (every layer mamba or
    linear attention): each sequence holds `state_bytes` of fixed state whatever its context
    (`kv_cache.state_bytes_per_seq`, in the model's dtype), so N = floor(kv_memory_bytes /
    state_bytes) sequences of any length fit, and `concurrency` requests fit at every context
    when N >= concurrency (issue 23 item 7). One rank holds the whole state (--tp 1): how an
    engine splits a recurrent state over ranks is its own rule. Raises `KvcalcError` for tp > 1."""
    from kvcalc.engines.ideal import VERSION
    from kvcalc.results import EngineResult

    if req.tp != 1:
        raise KvcalcError(
            f"{req.model.name} keeps only fixed per-sequence state; its capacity is figured for one "
            "rank that holds the whole state: give --tp 1",
            option="--tp",
            value=str(req.tp),
        )
    mem = req.kv_memory_bytes
    if mem is None:  # the caller (`capacity`) comes here only with a KV memory
        raise KvcalcError(
            "the number of sequences that fit needs the KV memory: give --kv-memory", field="kv_memory_bytes"
        )
    n = mem // state_bytes
    L = req.max_model_len or req.model.default_context
    line = (
        f"{n:,} sequences of {state_bytes:,} B of state each fit in {mem:,} B, at any context "
        "(no per-token KV cache: every layer is mamba / linear attention)"
    )
    c = req.concurrency
    fits = None if c is None else c <= n
    notes = (
        []
        if c is None
        else [
            f"{c:,} requests fit at every context"
            if fits
            else f"{c:,} requests do not fit at any context: their state needs {c * state_bytes:,} B"
        ]
    )
    return EngineResult(
        engine="ideal",
        engine_version=VERSION,
        kv_memory_bytes=mem,
        kv_cache_dtype=req.label,
        page_size_bytes=state_bytes,
        kv_cache_tokens=0,
        engine_kv_bytes=n * state_bytes,
        engine_state_bytes=n * state_bytes,
        max_model_len=L,
        max_concurrency=float(n),
        concurrency=req.concurrency,
        longest_context=0 if fits is False else None,
        log_lines=[line],
        notes=[line, *notes],
    )


def requests_that_fit(prof: AnyProfile, req: CapacityRequest) -> EngineResult | None:
    """The most requests N of `req.max_model_len` = L tokens that llama.cpp serves from
    `req.kv_memory_bytes`, by its own allocation rule: `llama-server -c N*L -np N` allocates
    N*L cells (n_ctx, padded) up front, one stream of n_ctx / N per slot, and that allocation
    (`EngineProfile.for_batch`: `llamacpp.allocate`) must fit the memory. The largest such N by
    bisection (the allocation grows with N); None when not even one request fits (the caller
    then gives the largest --ctx-size that fits). The result is that allocation, with a note
    naming N and the flags."""
    from kvcalc.engines import longest_fitting

    L, mem = req.max_model_len, req.kv_memory_bytes
    if L is None or mem is None:  # the caller (`capacity`) comes here only with both
        raise KvcalcError(
            "the number of requests that fit needs --max-model-len and --kv-memory",
            field="max_model_len" if L is None else "kv_memory_bytes",
        )

    def alloc(n: int) -> EngineResult:
        return prof.for_batch(req.model, L, n, req.k, req.v, tp=req.tp, options=req.options, kv_cache_dtype=req.label)

    refused: dict[int, str] = {}

    def fits(n: int) -> bool:
        try:
            return alloc(n).engine_kv_bytes <= mem
        except KvcalcError as e:  # more slots than the engine takes (llama.cpp: n_seq_max <= 256)
            refused[n] = e.message
            return False

    # an upper bound: every cell costs at least one byte, so N*L cells never exceed mem bytes
    hi = max(1, min(mem // L, 1 << 20))
    n = longest_fitting(fits, hi)
    n = hi if n is None else n
    if n < 1:
        return None
    res = alloc(n)
    note = (
        f"{n:,} requests of {L:,} tokens fit: {prof.display_name} allocates the whole context up front, "
        f"-c {n * L} -np {n} ({n * L:,} cells, {n:,} slots of {L:,})"
    )
    if n + 1 in refused:
        note += f"; more slots are refused ({refused[n + 1]})"
    return res.model_copy(update={"notes": [*res.notes, note], "kv_memory_bytes": mem})


# ----- plan -------------------------------------------------------------------------------


def _names(value: str | Iterable[str] | None, option: str) -> list[str] | None:
    """A comma list (or a list of names) as names; None for None, an empty list or 'all'.
    Raises `KvcalcError` naming `option` for an empty item (`h100-sxm,,h200`, `h100-sxm,`, '';
    for --gpu also an empty device of `a+b`),
    as `units.parse_counts` refuses `8k,,32k`: a stray comma is no request for every GPU."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else [str(v) for v in value]
    parts = [p for v in items for p in v.split("+")] if option == "--gpu" else items  # a+b: devices of one layout
    if isinstance(value, str) and not value.strip():
        raise KvcalcError(
            f"is empty; give names separated by commas, or leave {option} out for the default",
            option=option,
            form=OPTION_SAYS,
        )
    if any(not p.strip() for p in parts):
        from kvcalc.text import excerpt

        raise KvcalcError(
            f"'{excerpt(value if isinstance(value, str) else ','.join(items))}' has an empty item; "
            "write values separated by single commas",
            option=option,
            form=OPTION,
        )
    items = [v.strip() for v in items]
    return None if not items or [v.lower() for v in items] == ["all"] else items


def check_targets(**targets: float | None) -> None:
    """Raise `KvcalcError` naming the first target that is not a positive finite number."""
    import math

    for name, v in targets.items():
        if v is not None and (not math.isfinite(v) or v <= 0):
            raise KvcalcError(f"--{name.replace('_', '-')} must be a positive number, got {v:g}")


class PlanRequest(NamedTuple):
    """`kvcalc plan`: the layouts that serve `search.concurrency` sequences of `search.seq_len`
    tokens of a model within its targets (`search`: a `calc.plan.PlanSearch`, engine rules and
    formats resolved), launched by `engine`."""

    search: PlanSearch
    engine: str
    #: the engine's options object the search used (what `--write-deployment` records)
    options: EngineOptions | None = None

    @classmethod
    def build(
        cls,
        model: ModelSpec,
        *,
        seq_len: str | int | None = None,
        concurrency: int = 1,
        gpus: str | Iterable[str] | None = None,
        max_gpus: int | None = None,
        engine: str = "vllm",
        kv_dtypes: str | Iterable[str] | None = None,
        weight_dtypes: str | Iterable[str] | None = None,
        max_tpot_ms: float | None = None,
        min_tokens_per_s: float | None = None,
        max_ttft_s: float | None = None,
        prices: str | Path | dict[str, float] | None = None,
        knobs: Layout | None = None,
        top: int | None = None,
        why_not: int | None = None,
        gpus_per_node: int | None = None,
        engine_options: EngineOptions | None = None,
        calibration: Calibration | None = None,
        speculative: SpecDecode | None = None,
        input_len: int | None = None,
        output_len: int | None = None,
        request_rate: float | None = None,
        dcp: int | None = None,
    ) -> PlanRequest:
        """Check and resolve: the context (default the model's), positive counts and targets,
        the GPUs (a comma list or list of names / GPU files, `a+b` a fixed set of devices in one
        machine, None or 'all' every row of the table), the formats (comma lists; None: the
        engine's defaults, `EngineProfile.plan_formats`), `prices` (a mapping or a price file),
        `engine_options` (the engine's options object, e.g. `VllmOptions(version='0.11')`; None:
        its defaults; each GPU's compute capability and vendor replace the options' own).
        The layouts are timed with the speed model's terms for the engine (`speed_terms`, as
        `kvcalc estimate --engine E` times them): the speed table's, and with `calibration` (a
        `calc.speed.Calibration`) its measured figures on its own GPU.
        `input_len` / `output_len` (and `request_rate`, requests/s): time and rank on whole
        requests (`calc.plan.WholeRequests`); the context defaults to input_len + output_len and
        may not be shorter.
        Each `--kv-dtype` name is parsed once, here, by the engine (`plan_kv_picks`: vLLM 0.33's
        whole `CacheDType`, SGLang's fp4 types, llama.cpp's; a name the engine lacks is refused
        naming the engine version and what it takes), and each weight format is tried on the
        engine's launch line, so a format the engine lacks is refused before the search. `dcp`:
        vLLM's decode context parallel pinned for every layout (`--dcp N`, `check_plan_dcp`).
        The engine's own KV arithmetic per GPU (`EngineProfile.plan_engine_kv`: vLLM's blocks, with
        the options each of its own dtypes was parsed into) sizes each layout where it has one.
        Raises `KvcalcError`."""
        from kvcalc.calc import plan as P
        from kvcalc.calc.memory_plan import Layout
        from kvcalc.engines.launch import LaunchSpec
        from kvcalc.engines.profile import get_profile
        from kvcalc.formats import kv_format, weight_format
        from kvcalc.load.gpus import get_gpu, gpu_table

        max_gpus = P.DEFAULT_MAX_GPUS if max_gpus is None else max_gpus
        top = P.DEFAULT_TOP if top is None else top
        why_not = P.DEFAULT_WHY_NOT if why_not is None else why_not
        node = P.GPUS_PER_NODE if gpus_per_node is None else gpus_per_node
        check_positive(concurrency=concurrency, max_gpus=max_gpus, top=top, gpus_per_node=node, why_not=why_not)
        check_targets(max_tpot_ms=max_tpot_ms, min_tokens_per_s=min_tokens_per_s, max_ttft_s=max_ttft_s)
        whole = _whole_requests(input_len, output_len, request_rate)
        T = resolve_seq_len(
            model, seq_len if seq_len is not None or whole is None else whole.input_len + whole.output_len
        )
        if whole is not None and whole.input_len + whole.output_len > T:
            raise KvcalcError(
                f"--seq-len {T:,} is shorter than --input-len + --output-len "
                f"({whole.input_len + whole.output_len:,}): leave it out or give at least that",
                option="--seq-len",
                value=T,
            )
        check_limits([concurrency], [T])
        warn_beyond_context(model, [T])
        prof = get_profile(engine)
        opts = prof.options(engine_options)
        refuse_engine_model(prof, model, opts)
        check_option_bounds(opts)
        prof.check_options(opts)
        knobs = knobs if knobs is not None else Layout()
        knobs.check()  # once, here: the search's `GpuFit`s trust them

        choices, table = [], gpu_table()
        for name in _names(gpus, "--gpu") or list(table):
            parts = [p.strip() for p in name.split("+")]
            devices = tuple(get_gpu(p) for p in parts if p)
            fixed = len(devices) > 1
            if fixed and not prof.plan_layer_split and len({g.key for g in devices}) > 1:
                raise KvcalcError(
                    f"--gpu {name}: {prof.display_name} needs identical GPUs in a layout; "
                    "a set of different GPUs is for --engine llamacpp (it splits layers)"
                )
            if fixed and len(devices) > node:
                raise KvcalcError(f"--gpu {name}: {len(devices)} devices exceed one node of {node}")
            choices.append(P.GpuChoice(devices, fixed))
        if not choices:
            raise KvcalcError("--gpu: no GPU to search")

        kv_default, w_default, fp8_only = prof.plan_formats(model)
        typed = _names(kv_dtypes, "--kv-dtype")
        if typed:
            kvs, kv_options, kv_refused = plan_kv_picks(prof, model, opts, typed, choices)
        else:
            kvs, kv_options, kv_refused = (
                tuple(P.KvPick(f, f) for f in map(kv_format, kv_default)),  # each parsed once
                {},
                {},
            )
        if dcp is not None:
            check_plan_dcp(prof, model, opts, dcp, kvs)
        ws = tuple(
            None if n is None else weight_format(n) for n in (_names(weight_dtypes, "--weight-dtype") or w_default)
        )
        kvs, ws = tuple(dict.fromkeys(kvs)), tuple(dict.fromkeys(ws))

        if speculative is not None:  # carried on the launch lines (`calc.speculative.SpecDecode`)
            speculative.check(model)

        def launch(gpu: GpuSpec | None = None, **kw: Any) -> str | None:  # Any: LaunchSpec's fields
            return prof.launch_line(
                LaunchSpec(
                    model=model,
                    **kw,
                    speculative=speculative,
                    **prof.launch_extras(model, opts, gpu, kw.get("k_dtype"), kw.get("kv_cache_dtype")),
                )
            )

        for kv, w in ((kv, w) for kv in kvs for w in ws):  # refuse what the engine cannot run
            try:
                launch(
                    tp=1,
                    pp=1,
                    dp=1,
                    nodes=1,
                    max_model_len=T,
                    max_num_seqs=concurrency,
                    k_dtype=kv.k,
                    v_dtype=kv.v,
                    kv_cache_dtype=kv.engine_dtype,
                    weight_dtype=w,
                    gpu_memory_utilization=knobs.gpu_memory_utilization,
                    tensor_split=None,
                )
            except KvcalcError as e:  # plan's K and V are both its one --kv-dtype: name that, not --k-dtype
                if e.field not in ("k_dtype", "v_dtype"):
                    raise
                raise KvcalcError(e.message, field="kv_dtype", value=e.value, form=e.form) from None

        if prices is not None and not isinstance(prices, dict):
            from kvcalc.load.prices import load_prices

            prices = load_prices(prices, [*table, *(g.key for c in choices for g in c.devices)])
        elif prices is not None:
            from kvcalc.load.prices import check_prices

            prices = check_prices(prices, [*table, *(g.key for c in choices for g in c.devices)])
        engine_kv = prof.plan_engine_kv(model, opts, kv_options)
        if typed and engine_kv is not None:
            kv_refused = probe_kv_refusals(engine_kv, model, choices, kvs, kv_refused)
        search = P.PlanSearch(
            model=model,
            seq_len=T,
            concurrency=concurrency,
            gpus=tuple(choices),
            kv_dtypes=kvs,
            weight_dtypes=ws,
            fp8_only=fp8_only,
            gate_kv=not typed,
            kv_refused=kv_refused,
            notes=_packed_notes(model, kvs),
            dcp_pin=dcp,
            gate_weights=not _names(weight_dtypes, "--weight-dtype"),
            targets=P.PlanTargets(max_tpot_ms, min_tokens_per_s, max_ttft_s),
            knobs=knobs,
            max_gpus=max_gpus,
            gpus_per_node=node,
            layer_split=prof.plan_layer_split,
            prices=prices or {},
            top=top,
            why_not=why_not,
            engine=prof.name,
            launch=launch,
            engine_kv=engine_kv,
            dcp=prof.name == "vllm" and getattr(opts, "version", None) == "0.33",  # vLLM's -dcp (`calc.parallel`)
            speculative=speculative,
            speed=_plan_speed(prof.name, knobs, calibration),
            requests=whole,
        )
        return cls(search=search, engine=prof.name, options=opts)


def gpu_engine_options(options: EngineOptions, gpu: GpuSpec) -> EngineOptions:
    """`options` with `gpu`'s compute capability and vendor where the options object has them
    (vLLM's, SGLang's: `vllm.plan.gpu_options`, as `kvcalc capacity --gpu` sets them)."""
    from kvcalc.engines.profile import SglangOptions
    from kvcalc.engines.vllm.options import VllmOptions

    if not isinstance(options, (VllmOptions, SglangOptions)):
        return options
    vendor = None if gpu.vendor == "other" else gpu.vendor
    return dataclasses.replace(options, compute_capability=gpu.compute_capability, vendor=vendor)


def plan_kv_picks(
    prof: AnyProfile, model: ModelSpec, options: EngineOptions, names: list[str], choices: list[GpuChoice]
) -> tuple[tuple[KvPick, ...], dict[str, EngineOptions], dict[tuple[str, KvPick], str]]:
    """The one parse of plan's `--kv-dtype` names: each name by the engine
    (`EngineProfile.kv_formats`, as `kvcalc capacity --engine E --kv-cache-dtype X --gpu G` parses
    it) on each GPU architecture searched (compute capability, vendor: vLLM 0.33 takes
    `nvfp4_4over6` and `nvfp4_ds_mla` on SM100 only, an MLA model's dtypes per backend), or by
    kvcalc's formats for the exact formula (`--engine ideal`). Returns the `calc.plan.KvPick`s (K,
    V and the engine's own name where the formats do not say it, `EngineProfile.engine_kv_dtype`),
    the options each engine name was parsed into (by name: `EngineProfile.plan_engine_kv`), and
    the (GPU key, pick) pairs the engine refuses, with its words. Raises `KvcalcError` (field
    `kv_dtype`) for a name refused on every GPU searched: the engine's own refusal, which names
    its version and what it accepts."""
    from kvcalc.calc.plan import KvPick
    from kvcalc.formats import kv_format

    picks: list[KvPick] = []
    kv_options: dict[str, EngineOptions] = {}
    refused: dict[tuple[str, KvPick], str] = {}
    gpus = {g.key: g for c in choices for g in c.devices}
    for name in names:
        if prof.name == "ideal":
            f = kv_format(name)  # parsed once: the pick holds the format
            picks.append(KvPick(f, f))
            continue
        found: dict[str, KvChoice | KvcalcError] = {}
        for key, g in gpus.items():
            on_gpu = gpu_engine_options(options, g)
            try:
                found[key] = prof.kv_formats(model, name, options=on_gpu)
            except KvcalcError as e:
                found[key] = e
        ok = [(k, c) for k, c in found.items() if not isinstance(c, KvcalcError)]
        if not ok:  # the engine's own refusal; plan's K and V are its one --kv-dtype
            first = next(c for c in found.values() if isinstance(c, KvcalcError))
            if first.field == "kv_dtype":
                raise first
            raise KvcalcError(first.reason, fix=first.fix, field="kv_dtype", value=first.value or name)
        key, choice = ok[0]
        own = prof.engine_kv_dtype(choice, gpu_engine_options(options, gpus[key]))
        pick = KvPick(choice.k, choice.v, own)  # the engine's parse, as objects
        if own is not None:
            kv_options[own] = gpu_free_options(choice.options, options)
        for k, c in found.items():
            if isinstance(c, KvcalcError):
                refused[(k, pick)] = c.message
        picks.append(pick)
    return tuple(dict.fromkeys(picks)), kv_options, refused


def probe_kv_refusals(
    engine_kv: Callable[..., EngineKv],
    model: ModelSpec,
    choices: list[GpuChoice],
    kvs: tuple[KvPick, ...],
    refused: dict[tuple[str, KvPick], str],
) -> dict[tuple[str, KvPick], str]:
    """`refused` with the (GPU key, pick) pairs whose dtype the engine's KV arithmetic refuses on
    that GPU (an error on the KV formats, at tp 1 on one stage: SGLang 0.5.23's nvfp4 needs
    SM100 / SM120, which its pool sizing checks, not its dtype parse), so that no layout on that
    GPU gets a launch line the engine would refuse. Raises the engine's `KvcalcError` (field
    `kv_dtype`) for a pick no GPU searched takes."""
    out = dict(refused)
    stages = (range(model.n_layers),)
    gpus = {g.key: g for c in choices for g in c.devices}
    for kv in kvs:
        first = None
        for key, g in gpus.items():
            if (key, kv) in out:
                continue
            try:
                engine_kv(g, 1, stages, kv)
            except KvcalcError as e:
                if e.field in ("kv_dtype", "k_dtype", "v_dtype"):
                    out[(key, kv)] = e.message
                    first = first or e
        if first is not None and all((k, kv) in out for k in gpus):
            raise KvcalcError(first.reason, fix=first.fix, field="kv_dtype", value=first.value)
    return out


def _packed_notes(model: ModelSpec, kvs: tuple[KvPick, ...]) -> tuple[str, ...]:
    """One note per engine dtype that no kvcalc format stores and that the search's formats stand
    in for at the model's dtype (vLLM 0.33's TurboQuant presets, `int4_per_token_head`): its
    memory and max seqs are the engine's pages, its TPOT reads the cache at the stand-in's bytes."""
    from kvcalc.formats import kv_format

    out = []
    for kv in kvs:
        if not kv.engine_dtype or kv.k != model.dtype:
            continue
        try:
            kv_format(kv.engine_dtype)
        except KvcalcError:
            out.append(
                f"{kv.engine_dtype}: KV bytes per GPU and max seqs are the engine's packed pages; TPOT and "
                f"tokens/s read the cache at {kv.k} (kvcalc's roofline has no format for its rows: an upper bound)"
            )
    return tuple(out)


def check_plan_dcp(
    prof: AnyProfile, model: ModelSpec, options: EngineOptions, dcp: int, kvs: tuple[KvPick, ...]
) -> None:
    """Refuse `--dcp N` where no layout can take it, before the search: an engine other than vLLM
    0.33 (`refuse_dcp_engine`; plan's search over engines is vLLM's by default), and what vLLM
    refuses whatever the tp (`vllm.dcp.check_dcp_model`: the model's layers, the KV dtype's
    backend). The tp-dependent rules (tp % N, GQA's tp > KV heads) leave out the layouts that
    break them (`calc.plan._Space._layouts`). Raises `KvcalcError` (option `--dcp`)."""
    from kvcalc.units import check_bound

    check_bound("dcp", dcp, option="--dcp")
    if dcp == 1:
        return
    version = getattr(options, "version", None)
    if prof.name != "vllm" or version is None:
        refuse_dcp_engine(prof.name, dcp)
    from kvcalc.engines.vllm.dcp import check_dcp_model

    for kv in kvs:
        try:
            check_dcp_model(model, dcp, str(version), kv.engine_dtype or _vllm_name(kv.k.name, model), any_gpu=True)
        except KvcalcError as e:
            raise KvcalcError(e.message, option="--dcp", value=dcp, form=MESSAGE) from None


def _vllm_name(k: str, model: ModelSpec) -> str:
    """vLLM's `--kv-cache-dtype` for kvcalc's format `k` (`engine_dtypes.VLLM_033_FORMAT_NAMES`;
    the model's own dtype: auto)."""
    from kvcalc.engine_dtypes import VLLM_033_FORMAT_NAMES

    return "auto" if k == model.dtype else VLLM_033_FORMAT_NAMES.get(k, k)


def _whole_requests(input_len: int | None, output_len: int | None, request_rate: float | None) -> WholeRequests | None:
    """(`calc.plan.WholeRequests`) plan's --input-len / --output-len / --request-rate, checked
    as `estimate` checks them (`cli.estimate.whole_request_options`'s rules), or None when
    neither length is given. Raises `KvcalcError` naming the option."""
    import math

    from kvcalc.calc.plan import WholeRequests

    for name, v in (("--input-len", input_len), ("--output-len", output_len)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise KvcalcError(f"must be an integer of at least 1, got {v}", option=name, value=v)
    if request_rate is not None:
        if isinstance(request_rate, bool) or not (math.isfinite(request_rate) and request_rate > 0):
            raise KvcalcError(f"must be a number > 0, got {request_rate}", option="--request-rate", value=request_rate)
        if input_len is None or output_len is None:
            raise KvcalcError("needs --input-len and --output-len", option="--request-rate")
    if input_len is None and output_len is None:
        return None
    if input_len is None or output_len is None:
        missing = "--input-len" if input_len is None else "--output-len"
        raise KvcalcError("whole requests need both --input-len and --output-len", option=missing)
    from kvcalc.units import check_bound

    check_bound("seq_len", input_len, option="--input-len")
    check_bound("seq_len", output_len, option="--output-len")
    return WholeRequests(input_len, output_len, request_rate)


def _plan_speed(engine: str, knobs: Layout, calibration: Calibration | None) -> Callable[[GpuSpec, int], SpeedTerms]:
    """speed(gpu, tp) -> `SpeedTerms` for `calc.plan.PlanSearch.speed`, cached: the calibration
    (None: none) on the GPU it was measured on, the speed table on the others -- the terms
    `kvcalc estimate --engine E --gpu G --tp T` uses, so plan's TPOT equals estimate's."""
    cache: dict[tuple[str, int], SpeedTerms] = {}

    def speed(gpu: GpuSpec, tp: int) -> SpeedTerms:
        key = (gpu.key, tp)
        if key not in cache:
            cal = calibration if calibration is not None and calibration.gpu == gpu.key else None
            cache[key] = speed_terms(gpu, engine, tp, knobs, cal)
        return cache[key]

    return speed


def refuse_engine_model(prof: AnyProfile, model: ModelSpec, options: EngineOptions | None = None) -> None:
    """Raise `KvcalcError` (field `model`) when the engine profile `prof` refuses `model` outright
    (`EngineProfile.check_model`), as `capacity` does: no launch line is planned for an engine
    kvcalc cannot size the model on. vLLM: the release's own refusals (`VllmRules.check_loadable`,
    `check_features`), as `capacity --engine vllm` makes them (vLLM 0.33 sizes DeepSeek-V4's
    compressed caches, `v0_33_specs`). The message names the engines that do size it."""
    from kvcalc.engines.profile import get_profile

    try:
        from kvcalc.engines.vllm.options import VllmOptions

        if prof.name == "vllm" and isinstance(options, VllmOptions):
            from kvcalc.engines import vllm

            rules = vllm.rules(options.version)
            rules.check_loadable(model)
            rules.check_features(model)
        else:
            prof.check_model(model)
    except KvcalcError as e:
        others = []
        for name in ("ideal", "llamacpp"):
            if name == prof.name:
                continue
            try:
                get_profile(name).check_model(model)
            except KvcalcError:
                continue
            others.append(name)
        size = " or ".join(f"--engine {n}" for n in others)
        raise KvcalcError(
            f"{e.reason}: no {prof.display_name} layout to plan",
            fix=f"{size} size{'s' if len(others) == 1 else ''} it",
            field="model",
            value=model.name,
        ) from None


def run_plan(req: PlanRequest) -> PlanResult:
    """The `PlanResult` of the request (`calc.plan.search`), launch lines filled in."""
    from kvcalc.calc.plan import search

    return search(req.search)


def check_option_bounds(options: EngineOptions | None) -> None:
    """Raise `KvcalcError` for an engine option (`VllmOptions`, `SglangOptions`, `LlamacppOptions`,
    from the CLI or the Python API alike) past its upper bound in `units.BOUNDS` (n_ctx: llama.cpp's
    32-bit int; block and page sizes, tokens per step: `units.MAX_SEQ_LEN`; devices:
    `units.MAX_GPUS`); values below their bound are left to the engine, which refuses them in its
    own words. A NaN or inf `tensor_split` share is refused here too."""
    from kvcalc.units import bound_of, check_bound

    if options is None or not dataclasses.is_dataclass(options):
        return
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        found = bound_of(f.name)
        if found is not None and isinstance(value, int) and not isinstance(value, bool) and value > found[1].high:
            check_bound(f.name, value)
    split = getattr(options, "tensor_split", None)
    if split is not None:
        from kvcalc.engines.llamacpp import check_tensor_split

        check_tensor_split(split, len(split))
