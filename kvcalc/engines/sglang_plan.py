"""SGLang's KV arithmetic for `kvcalc plan` and `kvcalc check` (`calc.plan.EngineKv`).

Each layout's KV bytes and max concurrency come from the same functions `kvcalc capacity
--engine sglang` uses (`sglang.capacity`, `sglang.memory_for`), on the rank's KV memory (budget
- weights - activation reserve - CUDA context, what `capacity --kv-memory` takes), so plan's
"max seqs" is capacity's figure per attention rank x attention-DP ranks x replicas:

- DeepSeek-V4 (SGLang 0.5.23 `DSV4PoolConfigurator`, `sglang_dsv4.pools`): the c128
  compressor-state reservation first, then the full / SWA / compressed pools on pages of 256;
  requests are capped by the smaller pool and by SGLang's request estimate.
- The mamba / linear-attention hybrids (`sglang_mamba`, SGLang 0.5.23 `MambaPool` and
  `resolve_max_num_reqs`): the state slots take their share first, and max_running_requests is
  capped by slots // 5 (3 + 2 tracking slots a request with the radix cache on); the context
  length SGLang estimates requests with is the launch line's --context-length (= plan's seq_len).
- Every other model: the token pool (`sglang.capacity`), with its NSA / SWA pools.

A pipeline split (pp > 1) is refused (`KvcalcError`, field `pp`): SGLang sizes each stage's pool
for its own layers, which kvcalc does not model; plan then keeps the exact formula and says so.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvcalc.engines import sglang, sglang_dsv4, sglang_mamba
from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.formats import StorageFormat, kv_format
from kvcalc.schema import GpuSpec, ModelSpec

if TYPE_CHECKING:
    from kvcalc.engines.profile import PoolKwargs, SglangOptions


@dataclass
class SglangPlanKv:
    """SGLang's pools for one layout (attention `tp`, one stage, K / V formats) on one kind of
    GPU (`pool_kwargs`: `SglangOptions.pool_kwargs` with the GPU's compute capability and
    vendor). `stage_bytes` and `max_batch` cache their answers: a search asks the same
    questions for many GPU counts."""

    model: ModelSpec
    tp: int
    k: StorageFormat
    v: StorageFormat
    pool_kwargs: PoolKwargs
    notes: tuple[str, ...] = ()
    _bytes: dict[tuple[int, int], int] = field(default_factory=dict, repr=False)
    _batch: dict[tuple[int, int], int] = field(default_factory=dict, repr=False)

    def capacity_batch(self, seq_len: int, kv_memory_bytes: int) -> int:
        """Requests of `seq_len` tokens `sglang.capacity` admits at once on `kv_memory_bytes`
        per rank: floor(max_concurrency); 0 where SGLang would not start."""
        key = (seq_len, kv_memory_bytes)
        if key not in self._batch:
            try:
                res = sglang.capacity(
                    self.model, kv_memory_bytes, self.k, self.v, tp=self.tp, max_model_len=seq_len, **self.pool_kwargs
                )
            except KvcalcError:
                self._batch[key] = 0
            else:
                self._batch[key] = math.floor(res.max_concurrency or 0)
        return self._batch[key]

    def stage_bytes(self, seq_len: int, batch: int) -> list[int]:
        """[the least KV memory per rank SGLang needs for `batch` requests of `seq_len` tokens]
        (`sglang.memory_for` at --context-length `seq_len`), bytes."""
        key = (seq_len, batch)
        if key not in self._bytes:
            self._bytes[key] = sglang.memory_for(
                self.model, seq_len, max(batch, 1), self.k, self.v, tp=self.tp, context_len=seq_len, **self.pool_kwargs
            )
        return [self._bytes[key]]

    def max_batch(self, seq_len: int, free_bytes: list[int]) -> int:
        """`capacity_batch` on the one stage's `free_bytes[0]`."""
        return self.capacity_batch(seq_len, free_bytes[0])


def plan_kv(
    model: ModelSpec, options: SglangOptions
) -> Callable[[GpuSpec, int, tuple[range, ...], tuple[StorageFormat, StorageFormat]], SglangPlanKv]:
    """The callable `calc.plan.PlanSearch.engine_kv` takes: (gpu, tp, stages, (K, V)) ->
    `SglangPlanKv`, one per (compute capability, vendor, tp, formats). `options`: a
    `profile.SglangOptions`; its compute capability and vendor become the GPU's, as `kvcalc
    capacity --gpu` sets them. Raises `KvcalcError` (field `pp`) for more than one stage."""
    cache: dict[tuple, SglangPlanKv] = {}

    def build(
        gpu: GpuSpec, tp: int, stages: tuple[range, ...], kv: tuple[StorageFormat, StorageFormat]
    ) -> SglangPlanKv:
        if len(stages) > 1:
            raise KvcalcError(
                "SGLang sizes each pipeline stage's pool for its own layers, which kvcalc does not model",
                field="pp",
                value=len(stages),
                form=MESSAGE,
            )
        key = (gpu.compute_capability, gpu.vendor, tp, kv)
        if key not in cache:
            o = dataclasses.replace(
                options,
                compute_capability=gpu.compute_capability,
                vendor=None if gpu.vendor == "other" else gpu.vendor,
            )
            k, v = kv_format(kv[0]), kv_format(kv[1])
            pool = o.pool_kwargs()
            sglang.capacity(model, 2**40, k, v, tp=tp, **pool)  # SGLang's refusals (tp, formats) up front
            notes: tuple[str, ...] = ()
            if o.version == "current" and sglang.uses_state_pool(model) and not sglang_dsv4.is_dsv4(model):
                notes = (
                    "SGLang splits each rank's budget between its state slots and its token pool "
                    f"(--mamba-full-memory-ratio {o.mamba.full_memory_ratio:g}) and caps max_running_requests "
                    f"at slots // {sglang_mamba.slots_per_request(o.mamba.disable_radix_cache)}",
                )
            elif o.version == "current" and sglang_dsv4.is_dsv4(model):
                notes = ("SGLang's DeepSeek-V4 pools: c128 compressor states reserved first, then pages of 256",)
            cache[key] = SglangPlanKv(model, tp, k, v, pool, notes)
        return cache[key]

    return build
