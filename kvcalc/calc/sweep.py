"""The sweep: memory, fit, TPOT and tokens/s over a grid of (context, batch) points.

Pure arithmetic on `memory_plan.GpuFit` (with a GPU) or `memory_plan.KvProfile` and
`weights.weight_bytes` (without one); no I/O, no printing. A caller that wants a progress bar
passes `progress`, a function that wraps the iterable of points (the CLI passes rich's `track`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from kvcalc.calc import kv_cache
from kvcalc.calc.memory_plan import GpuFit, KvProfile, Layout
from kvcalc.calc.weights import can_derive, weight_bytes
from kvcalc.schema import GpuSpec, ModelSpec

if TYPE_CHECKING:
    from kvcalc.calc.plan import EngineKv


@dataclass(frozen=True)
class SweepRequest:
    """`kvcalc sweep`: `model` at every (T, B) of `seq_lens` (tokens) x `batches` (sequences per
    DP replica), placed by `layout`, on `gpu` (None: KV and weights only, no plan)."""

    model: ModelSpec
    seq_lens: tuple[int, ...]
    batches: tuple[int, ...]
    layout: Layout
    gpu: GpuSpec | None = None
    #: the engine's KV arithmetic on `gpu` (`calc.plan.EngineKv`, the one `kvcalc plan` sizes a
    #: layout with) for a KV dtype only the engine sizes (vLLM 0.33's TurboQuant presets,
    #: `*_per_token_head`, `fp8_ds_mla` ...): each point's KV per GPU is the engine's memory for
    #: its batch, `EngineKv.stage_bytes`; None: the exact formula
    engine_kv: EngineKv | None = None

    @property
    def points(self) -> list[tuple[int, int]]:
        """(T, B) for each batch, contexts fastest: the rows' order."""
        return [(T, B) for B in self.batches for T in self.seq_lens]


def within_context(seq_lens: Sequence[int], limit: int | None) -> tuple[list[int], list[int]]:
    """(kept, dropped): the contexts of `seq_lens` (tokens, order kept) at most `limit` (a model's
    context limit, `ModelSpec.context_limit`; None keeps all) and those beyond it. A sweep's grid stops at the
    model's context unless asked (`kvcalc sweep --beyond-context`)."""
    if limit is None:
        return list(seq_lens), []
    return [T for T in seq_lens if limit >= T], [T for T in seq_lens if limit < T]


class _SweepPoint(TypedDict):
    seq_len: int
    batch: int
    weights_bytes_per_gpu: int
    kv_cache_bytes_per_gpu: int
    memory_bytes_per_gpu: int


class SweepRow(_SweepPoint, total=False):
    """One (seq_len, batch) point of `kvcalc sweep` (tokens, sequences, bytes per GPU); the keys
    below are there with a GPU only (TPOT in s, None where the point does not fit)."""

    budget_bytes_per_gpu: int
    fits: bool
    tpot_s: float | None
    tokens_per_s: float | None


def sweep_rows(
    req: SweepRequest, progress: Callable[[list[tuple[int, int]]], Iterable[tuple[int, int]]] | None = None
) -> list[SweepRow]:
    """One row per (seq_len, batch): KV and weights per GPU (bytes), and with a GPU the memory
    per GPU, the budget, fit, TPOT (s) and tokens/s (`memory_plan.GpuFit.point`). Without a
    GPU, memory is weights + KV only. TPOT and tokens/s are None where the point does not fit. Raises `KvcalcError` for a layout the engines refuse."""
    points = req.points
    it: Iterable[tuple[int, int]] = progress(points) if progress is not None else points
    spec, layout = req.model, req.layout
    rows: list[SweepRow] = []
    if req.gpu is not None:
        p = GpuFit(spec, req.gpu, layout)
        for T, B in it:
            used, fits, tpot, tok = p.point(T, B)
            kv = p.kv.per_gpu_bytes(T, B)
            if req.engine_kv is not None:  # weights + the engine's KV memory + reserves, as plan counts it
                stages = req.engine_kv.stage_bytes(T, B)
                kv = max(stages)
                used = max(w + k + p.fixed_bytes for w, k in zip(p.stage_weight_bytes, stages))
                fits = used <= p.budget
            rows.append(
                {
                    "seq_len": T,
                    "batch": B,
                    "weights_bytes_per_gpu": max(p.stage_weight_bytes),
                    "kv_cache_bytes_per_gpu": kv,
                    "memory_bytes_per_gpu": used,
                    "budget_bytes_per_gpu": p.budget,
                    "fits": fits,
                    # no speed for a batch that does not fit
                    "tpot_s": tpot if fits else None,
                    "tokens_per_s": tok if fits else None,
                }
            )
        return rows
    kv_cache.check_tp(spec, layout.tp)
    k, v = kv_cache.formats(layout.k_dtype or spec.dtype_format, layout.v_dtype)
    prof = KvProfile.build(spec, k, v, layout.tp, layout.pp)
    w = 0
    if spec.n_params is not None or can_derive(spec):
        w = max(
            weight_bytes(spec, layout.weight_dtype, layout.tp).stage_bytes(kv_cache.pp_stages(spec.n_layers, layout.pp))
        )
    for T, B in it:
        kv = prof.per_gpu_bytes(T, B)
        rows.append(
            {
                "seq_len": T,
                "batch": B,
                "weights_bytes_per_gpu": w,
                "kv_cache_bytes_per_gpu": kv,
                "memory_bytes_per_gpu": w + kv,
            }
        )
    return rows
