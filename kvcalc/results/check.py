"""`CheckRow`: one deployment of `kvcalc check` (`calc.check.check`).

Frozen pydantic models, `extra="forbid"`: their JSON keys are a public contract."""

from __future__ import annotations

from typing import Literal

from kvcalc.schema import _Frozen  # frozen, extra="forbid": the one base of every model


class CheckRow(_Frozen):
    """One checked deployment: its memory per GPU against the budget, the roofline decode at
    its worst case (every sequence at max_seq_len; the speed model `speed_model` names), and what, if anything, fails."""

    file: str
    name: str
    model: str
    gpu: str
    count: int
    tp: int
    pp: int
    dp: int
    kv_dtype: str
    weight_dtype: str
    max_seq_len: int
    concurrency: int
    memory_bytes_per_gpu: int
    budget_bytes_per_gpu: int
    headroom_bytes: int
    fits: bool
    max_concurrency: int
    #: None when the deployment does not fit (a batch that does not fit has no decode step)
    tpot_ms: float | None
    tokens_per_s: float | None
    max_tpot_ms: float | None
    min_tokens_per_s: float | None
    meets_targets: bool
    status: Literal["ok", "does not fit", "misses target"]
    problems: list[str]
    #: attention-DP ranks and expert-parallel size of the layout (as `PlanLayout`'s)
    dp_attention: int = 1
    ep: int = 1
    #: the engine whose KV arithmetic sized it (the file's `engine:`; "ideal": the exact formula)
    engine: str = "ideal"
    #: what the engine assumed, or why its arithmetic was not applied (as `kvcalc plan`'s notes)
    notes: list[str] = []
    #: the speed model's terms TPOT and tokens/s were modelled with (`calc.speed.SpeedTerms.describe`;
    #: "roofline": the bare roofline), as `kvcalc plan` and `kvcalc estimate` label them
    speed_model: str = "roofline"
