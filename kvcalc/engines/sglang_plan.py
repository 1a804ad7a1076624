"""`kvcalc plan --engine sglang`'s per-GPU arithmetic for the models SGLang 0.5.23 serves with a
`MambaPool` of state slots beside its token pool (`sglang.uses_state_pool`: Qwen3-Next / Qwen3.5,
Nemotron-H, Kimi-Linear): the static budget splits by `--mamba-full-memory-ratio` before any
request is admitted, and `max_running_requests` is capped at max_mamba_cache_size // 5 (3 slots
a request + 2 tracking slots of the default `extra_buffer` strategy; SGLang 0.5.23
`python/sglang/srt/model_executor/model_runner.py` / `server_args.py`, `sglang_mamba`), so the
exact formula's per-sequence state would admit far more sequences than SGLang does.

- `stage_bytes(T, b)`: the least static budget per rank whose split holds b x pages(T) tokens and
  admits b requests at --context-length T (`sglang_mamba.least_budget`; plan's launch line
  sets --context-length T).
- `max_batch(T, free)`: the requests of T tokens SGLang admits from `free` bytes a rank:
  floor(min(tokens // pages(T), max_running_requests)) (`sglang.capacity`'s `max_concurrency`,
  what `kvcalc capacity --engine sglang` reports); 0 where SGLang would not start.

Other models keep the exact formula (no `EngineKv`). One pipeline stage only: SGLang's pools of
a stage under pp are not modelled here (the plan notes it and sizes those layouts by the exact
formula).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvcalc.engines import sglang, sglang_mamba
from kvcalc.errors import KvcalcError
from kvcalc.formats import StorageFormat, kv_format
from kvcalc.schema import GpuSpec, ModelSpec


@dataclass(frozen=True)
class SglangStatePlanKv:
    """SGLang's split budget for one (tp, K / V formats) of a state-pool model (module doc)."""

    model: ModelSpec
    k: StorageFormat
    v: StorageFormat
    tp: int
    pool: dict[str, Any]
    notes: tuple[str, ...] = ()

    def stage_bytes(self, seq_len: int, batch: int) -> list[int]:
        """[the least static budget per rank for `batch` requests of `seq_len` tokens] (bytes)."""
        if batch <= 0:
            return [0]
        page = self.pool["page_size"]
        row, extra, _ = sglang.pool_layout(
            self.model,
            self.k,
            self.v,
            self.tp,
            self.pool["version"],
            self.pool["target"],
            self.pool["hybrid_swa_memory"],
        )
        cell = sglang.cell_size_bytes(
            self.model, self.k, self.v, self.tp, self.pool["version"], row=row, extra_bytes=extra
        )
        return [
            sglang_mamba.least_budget(
                self.model,
                tp=self.tp,
                cell_bytes=cell,
                page_size=page,
                need_tokens=batch * -(-seq_len // page) * page,
                need_requests=batch,
                context_len=seq_len,
            )
        ]

    def max_batch(self, seq_len: int, free_bytes: list[int]) -> int:
        """Requests of `seq_len` tokens SGLang admits from `free_bytes[0]` bytes (0: it would not start)."""
        try:
            r = sglang.capacity(
                self.model, free_bytes[0], self.k, self.v, tp=self.tp, max_model_len=seq_len, **self.pool
            )
        except KvcalcError:
            return 0
        return int(r.max_concurrency or 0)


def plan_kv(
    model: ModelSpec, pool: dict[str, Any]
) -> Callable[[GpuSpec, int, tuple[range, ...], tuple[str, str]], SglangStatePlanKv] | None:
    """The callable `calc.plan.PlanSearch.engine_kv` takes for a state-pool model under SGLang's
    current rules, else None (the exact formula sizes every layout)."""
    if pool.get("version") != "current" or not sglang.uses_state_pool(model):
        return None

    def build(gpu: GpuSpec, tp: int, stages: tuple[range, ...], kv: tuple[str, str]) -> SglangStatePlanKv:
        if len(stages) > 1:
            raise KvcalcError(
                "pp > 1: SGLang's state and token pools of a pipeline stage are not modelled",
                field="pp",
                value=len(stages),
            )
        k, v = kv_format(kv[0]), kv_format(kv[1])
        sglang.capacity(model, 2**40, k, v, tp=tp, **pool)  # SGLang's refusals (tp, formats) up front
        note = (
            "SGLang splits each rank's budget between its state slots and its token pool "
            "(--mamba-full-memory-ratio 0.9) and caps max_running_requests at slots // 5"
        )
        return SglangStatePlanKv(model, k, v, tp, pool, (note,))

    return build
