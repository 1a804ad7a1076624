"""`kvcalc check` as arithmetic: one deployment (a model on tp x pp x dp GPUs at a context and a
concurrency) against its GPU's memory budget and its service targets.

Pure (no I/O, no warnings, no CLI words): `kvcalc.load.deployments` reads the file, calls
`check`, and reports any `KvcalcError` raised here against the YAML line of the error's `field`
(`tp`, `pp`, `kv_dtype` / `k_dtype`, `weight_dtype`, `model`).

Per GPU (the fullest pipeline stage of one TP rank, `memory_plan.GpuFit`), with every sequence at
`max_seq_len` (the worst case) and the fullest replica holding ceil(concurrency / dp) of them:

    fits = weights + KV + state + reserves <= floor(memory x gpu_memory_utilization)
    (KV: the file's engine's, as `kvcalc plan` sizes it, else the exact formula)
    TPOT = the fullest replica's decode step (the speed model's, as `kvcalc plan` and
           `kvcalc estimate` time it); tokens/s over every replica (`GpuFit.split_decode`)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import PurePath
from typing import TYPE_CHECKING

from kvcalc.calc import kv_cache
from kvcalc.calc.memory_plan import GpuFit, Layout
from kvcalc.calc.speed import SpeedTerms
from kvcalc.errors import KvcalcError
from kvcalc.results import CheckRow
from kvcalc.schema import Deployment, GpuSpec, ModelSpec, Targets

if TYPE_CHECKING:
    from kvcalc.calc.plan import EngineKv, KvPick
    from kvcalc.calc.speculative import SpecDecode


def layout(dep: Deployment, model: ModelSpec, pick: KvPick | None = None) -> Layout:
    """The memory plan's layout of `dep`: tp (else count // pp) x pp x dp, its weight format,
    its KV format (`pick`'s K, as the engine parsed the file's dtype; else the file's, else the
    model's dtype; looked up once) and its `gpu_memory_utilization`."""
    from kvcalc.formats import kv_format, weight_format

    if pick is not None:
        k, v = pick.k, pick.v
    else:
        k = v = kv_format(dep.kv_dtype, field="k_dtype") if dep.kv_dtype else model.dtype_format
    return Layout(
        tp=dep.resolved_tp,
        pp=dep.pp,
        dp=dep.dp,
        dp_attention=dep.dp_attention,
        ep=dep.ep,
        dcp=dep.dcp,
        weight_dtype=weight_format(dep.weight_dtype) if dep.weight_dtype else None,
        k_dtype=k,
        v_dtype=v,
        gpu_memory_utilization=dep.gpu_memory_utilization,
    )


def missed_targets(targets: Targets | None, tpot_ms: float, tokens_per_s: float) -> list[str]:
    """One line per target missed: TPOT above `max_tpot_ms`, tokens/s below `min_tokens_per_s`."""
    t = targets or Targets()
    missed = []
    if t.max_tpot_ms is not None and tpot_ms > t.max_tpot_ms:
        missed.append(f"TPOT {tpot_ms:,.2f} ms > max_tpot_ms {t.max_tpot_ms:g}")
    if t.min_tokens_per_s is not None and tokens_per_s < t.min_tokens_per_s:
        missed.append(f"{tokens_per_s:,.0f} tokens/s < min_tokens_per_s {t.min_tokens_per_s:g}")
    return missed


def check(
    dep: Deployment,
    model: ModelSpec,
    gpu: GpuSpec,
    *,
    file: str,
    engine_kv: Callable[..., EngineKv] | None = None,
    engine: str = "ideal",
    speculative: SpecDecode | None = None,
    speed: SpeedTerms | None = None,
    kv: KvPick | None = None,
) -> CheckRow:
    """Plan and roofline one deployment: its memory per GPU against the budget (fits when
    used <= budget), the decode TPOT and total tokens/s at `max_seq_len` x `concurrency`, and
    its targets. `file` names the row (and, without a `name`, gives it its stem).

    `engine_kv`: the engine's KV arithmetic (`calc.plan.PlanSearch.engine_kv`, handed down by
    the engine layer for the file's `engine:`; None: the exact formula), applied exactly as
    `kvcalc plan` applies it (`calc.plan._Placed`), so a deployment that plan wrote checks to
    plan's figures (issue 23 friction 1). Where the engine's arithmetic does not cover the
    layout (it raises `KvcalcError`), the exact formula sizes it and the row's `notes` say so,
    as plan's notes do. `engine` names the engine in the row. `speculative`: the file's
    `calc.speculative.SpecDecode` (its memory and TPOT as plan counts them, `_Placed.spec_bytes`).
    `speed`: the speed model's terms
    for that engine on this GPU at this TP (`calc.speed`; what `kvcalc plan` and `kvcalc
    estimate` time the layout with; None: the bare roofline). `kv`: the file's `kv_dtype` as the
    engine parsed it where it is the engine's own (`calc.plan.KvPick`: its K / V formats for the
    memory plan, its name for `engine_kv`), as `kvcalc plan` sized it; None: the file's format.

    Raises `KvcalcError` with its `field` set: `tp` for a TP degree the engines refuse
    (`kv_cache.check_tp`), `pp` for more stages than layers, `k_dtype` / `weight_dtype` for a
    format that does not fit the heads or matrices, `model` for a config that cannot be sized.
    """
    from kvcalc.calc.plan import GpuChoice, _Placed, engine_kv_for

    kv_cache.check_tp(model, dep.resolved_tp)
    from kvcalc.calc.plan import KvPick

    lay = layout(dep, model, kv)
    base = GpuFit(model, gpu, dataclasses.replace(lay, dp=1, speed=speed))
    notes: list[str] = []
    ekv = None
    if engine_kv is not None:
        try:
            pick = (
                kv if kv is not None else KvPick(lay.k_dtype or model.dtype_format, lay.v_dtype or model.dtype_format)
            )
            ekv = engine_kv_for(engine_kv, gpu, base, pick)
        except KvcalcError as e:
            notes.append(f"{e.message}: sized by the exact formula instead")
        else:
            notes += list(ekv.notes)
    kv_dtypes = kv or KvPick(lay.k_dtype or model.dtype_format, lay.v_dtype or model.dtype_format)  # `layout` sets both
    placed = _Placed(GpuChoice((gpu,)), base, (gpu,), dep.dp, kv_dtypes, lay.weight_dtype, ekv, spec=speculative)
    planner = placed.planner(gpu)
    T = dep.max_seq_len
    used = max(placed.used(T, dep.concurrency))
    fits = used <= planner.budget
    tpot_ms = tok_s = None  # a deployment that does not fit gets no TPOT (issue 21 deliver 5)
    if fits:
        tpot_s, tok_s = placed.decode(T, dep.concurrency)
        tpot_ms = tpot_s * 1e3
    max_concurrency = placed.max_concurrency(T)
    problems = (
        []
        if fits
        else [
            f"needs {used / 2**30:,.2f} GiB per GPU > budget {planner.budget / 2**30:,.2f} GiB "
            f"({dep.gpu_memory_utilization:g} x {gpu.memory_bytes / 2**30:,.2f} GiB); "
            f"at most {max_concurrency} sequences fit"
        ]
    )
    missed = missed_targets(dep.targets, tpot_ms, tok_s) if tpot_ms is not None and tok_s is not None else []
    problems += missed
    status = "does not fit" if not fits else ("ok" if not missed else "misses target")
    t = dep.targets or Targets()
    return CheckRow(
        file=file,
        name=dep.name or PurePath(file).stem,
        model=model.name,
        gpu=gpu.key,
        count=dep.count,
        tp=dep.resolved_tp,
        pp=dep.pp,
        dp=dep.dp,
        dp_attention=dep.dp_attention,
        ep=dep.ep,
        kv_dtype=kv.engine_dtype or planner.kv_dtype if kv is not None else planner.kv_dtype,
        weight_dtype=planner.weight_dtype,
        max_seq_len=T,
        concurrency=dep.concurrency,
        memory_bytes_per_gpu=used,
        budget_bytes_per_gpu=planner.budget,
        headroom_bytes=planner.budget - used,
        fits=fits,
        max_concurrency=max_concurrency,
        tpot_ms=tpot_ms,
        tokens_per_s=tok_s,
        max_tpot_ms=t.max_tpot_ms,
        min_tokens_per_s=t.min_tokens_per_s,
        meets_targets=not missed,
        status=status,
        problems=problems,
        engine=engine,
        notes=notes,
        speed_model=speed.describe(planner.weight_bits) if speed is not None else "roofline",
    )
