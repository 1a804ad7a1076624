"""Whole requests: TTFT, TPOT, end-to-end latency and throughput for given input and output
lengths, from a `memory_plan.GpuFit`'s steps (pure arithmetic, no I/O).

A request of I input and O output tokens costs one prefill of I tokens (its first output token
comes out of it) and O - 1 decode steps, the cache growing from I + 1 to I + O - 1 tokens:

    TTFT = prefill(I)          TPOT = decode(I + O / 2)          E2E = TTFT + (O - 1) x TPOT

Decode time is linear in the cached tokens (the KV read, the attention FLOPs) except where a
sliding window caps it or the step turns compute-bound, so the step at the mean context I + O / 2
stands for the mean step (exact for the linear part). Two ways to serve many requests:

- a static batch of B (TensorRT-LLM's `gptSessionBenchmark`, llama.cpp's `llama-batched-bench`):
  all B prompts prefilled in one pass, then O - 1 decode steps of B sequences;
  output tokens/s = B x O / (prefill(I, B) + (O - 1) x decode(I + O / 2, B)).
- continuous batching at a request rate lambda (vLLM, SGLang): by Little's law
  (Little 1961, Operations Research 9(3)) the average number of requests in the system is
  L = lambda x E2E; each decode step then holds about L sequences, so E2E = TTFT + (O - 1) x
  TPOT(L), solved as a fixed point. The average KV held is L x (I + O / 2) tokens of cache.
  The rate is sustainable while the decode steps keep up: lambda x O <= L / TPOT(L) tokens/s
  and L sequences fit; past that the queue grows without bound and there is no steady state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from kvcalc.calc.memory_plan import Layout
from kvcalc.calc.roofline import StepTime

#: fixed-point iterations for the concurrency under continuous batching (it converges in a few;
#: the bound only stops a pathological oscillation)
MAX_ITERATIONS = 200
#: the fixed point's relative tolerance, and the slack when L is rounded up to whole sequences
#: (float noise must not make 3.0000000001 requests 4 sequences)
TOLERANCE = 1e-9


@dataclass(frozen=True, slots=True)
class RequestSpeed:
    """One request shape's figures on one layout (seconds, tokens/s); see the module docstring.

    `static_*` are for a static batch of `batch` per replica; `rate_*` for continuous batching at
    `request_rate` requests/s over the whole layout (None without a rate). Per-GPU throughput
    divides by every GPU of the layout (tp x pp x dp); per-user is one sequence's 1 / TPOT.
    """

    input_len: int
    output_len: int
    batch: int
    ttft_s: float
    tpot_s: float
    e2e_s: float
    static_ttft_s: float
    static_tpot_s: float
    static_e2e_s: float
    static_tokens_per_s: float
    static_tokens_per_s_per_gpu: float
    tokens_per_s_per_user: float
    request_rate: float | None = None
    rate_sustainable: bool | None = None
    rate_concurrency: float | None = None
    rate_kv_tokens: float | None = None
    rate_e2e_s: float | None = None
    rate_tpot_s: float | None = None
    rate_tokens_per_s: float | None = None
    rate_tokens_per_s_per_gpu: float | None = None


class Steps(Protocol):
    """What the arithmetic here needs of a plan: a `memory_plan.GpuFit`, or `calc.plan`'s
    stand-in for a layer split over devices that differ (each step the sum of the devices')."""

    layout: Layout

    def prefill(self, prompt_len: int, batch: int = 1) -> StepTime: ...

    def decode(self, seq_len: int, batch: int) -> StepTime: ...

    def max_batch(self, seq_len: int) -> int: ...


@dataclass(frozen=True, slots=True)
class StaticSpread:
    """`concurrency` requests served as static batches over the layout's dp replicas
    (`spread_static`): the fullest replica's TPOT (s, decode at the mean context) and end to end
    (s, its batch's prefill + O - 1 decode steps), and the total output tokens/s of all
    replicas (prefill included)."""

    batch: int
    tpot_s: float
    e2e_s: float
    tokens_per_s: float


def spread_static(steps: Steps, input_len: int, output_len: int, concurrency: int) -> StaticSpread:
    """`concurrency` requests of `input_len` / `output_len` tokens spread over the dp replicas as
    evenly as they go (q, r = divmod(concurrency, dp): r replicas run a static batch of q + 1,
    dp - r of q, idle when q = 0; as `GpuFit.split_decode` spreads decode), each replica
    B x O / (prefill(I, B) + (O - 1) x decode(I + O / 2, B)) output tokens/s. The fullest
    replica's TPOT is what `kvcalc estimate --batch q+1 --input-len I --output-len O` prints
    as the static batch's TPOT. Raises ValueError for lengths or concurrency < 1."""
    if input_len < 1 or output_len < 1 or concurrency < 1:
        raise ValueError("input_len, output_len and concurrency must be >= 1")
    dp = steps.layout.dp
    q, r = divmod(concurrency, dp)
    full = q + 1 if r else q
    ctx = mean_context(input_len, output_len)

    def run(b: int) -> tuple[float, float]:
        tpot = steps.decode(ctx, b).step_time_s
        return tpot, steps.prefill(input_len, b).step_time_s + max(output_len - 1, 0) * tpot

    tpot, e2e = run(full)
    tok_s = (r if r else dp) * full * output_len / e2e
    if r and q:
        tok_s += (dp - r) * q * output_len / run(q)[1]
    return StaticSpread(batch=full, tpot_s=tpot, e2e_s=e2e, tokens_per_s=tok_s)


def mean_context(input_len: int, output_len: int) -> int:
    """Tokens cached at the mean decode step: I + O // 2."""
    return input_len + output_len // 2


def static_run_s(planner: Steps, input_len: int, output_len: int, batch: int) -> tuple[float, float]:
    """(prefill seconds of `batch` prompts in one pass, seconds of the O - 1 decode steps of
    `batch` sequences at the mean context) for one replica."""
    pre = planner.prefill(input_len, batch).step_time_s
    dec = planner.decode(mean_context(input_len, output_len), batch).step_time_s
    return pre, max(output_len - 1, 0) * dec


def request_speed(
    planner: Steps, input_len: int, output_len: int, batch: int = 1, request_rate: float | None = None
) -> RequestSpeed:
    """The figures of `input_len` / `output_len` requests: one alone (TTFT, TPOT, E2E), a static
    batch of `batch` per replica, and, with `request_rate` (requests/s over the layout, spread
    evenly on its dp replicas), continuous batching by Little's law. Raises ValueError for
    input_len < 1, output_len < 1 or batch < 1 (the CLI checks them first)."""
    if input_len < 1 or output_len < 1 or batch < 1:
        raise ValueError("input_len, output_len and batch must be >= 1")
    lay = planner.layout
    gpus = lay.tp * lay.pp * lay.dp
    ctx = mean_context(input_len, output_len)
    ttft = planner.prefill(input_len).step_time_s
    tpot = planner.decode(ctx, 1).step_time_s
    pre_b, dec_b = static_run_s(planner, input_len, output_len, batch)
    static_tpot = planner.decode(ctx, batch).step_time_s
    static_tok_s = lay.dp * batch * output_len / (pre_b + dec_b)
    out: dict[str, Any] = dict(  # Any: `RequestSpeed`'s fields, counts and seconds
        input_len=input_len,
        output_len=output_len,
        batch=batch,
        ttft_s=ttft,
        tpot_s=tpot,
        e2e_s=ttft + (output_len - 1) * tpot,
        static_ttft_s=pre_b,
        static_tpot_s=static_tpot,
        static_e2e_s=pre_b + dec_b,
        static_tokens_per_s=static_tok_s,
        static_tokens_per_s_per_gpu=static_tok_s / gpus,
        tokens_per_s_per_user=1 / tpot,
    )
    if request_rate is not None:
        out.update(_at_rate(planner, input_len, output_len, request_rate / lay.dp, ttft, gpus, lay.dp))
    return RequestSpeed(**out)


def _at_rate(
    planner: Steps, input_len: int, output_len: int, rate_per_replica: float, ttft: float, gpus: int, dp: int
) -> dict[str, object]:
    """Continuous batching on one replica at `rate_per_replica` requests/s: the fixed point of
    L = lambda x (TTFT + (O - 1) x TPOT(ceil(L))), iterated from L = lambda x TTFT (TPOT grows
    with L, so the iterates rise to the fixed point when there is one). No steady state -- all
    the `rate_*` figures None, `rate_sustainable` False -- when ceil(L) sequences no longer fit
    at the longest context I + O (`GpuFit.max_batch`) or the iterates do not settle. Prefill
    steps taking turns with decode steps are not modelled (their time is in TTFT only)."""
    ctx, cap = mean_context(input_len, output_len), planner.max_batch(input_len + output_len)
    conc, tpot, settled = rate_per_replica * ttft, 0.0, False
    for _ in range(MAX_ITERATIONS):
        b = max(1, math.ceil(conc - TOLERANCE))
        if b > cap:
            break
        tpot = planner.decode(ctx, b).step_time_s
        new = rate_per_replica * (ttft + (output_len - 1) * tpot)
        if abs(new - conc) <= TOLERANCE * max(1.0, new):
            conc, settled = new, math.ceil(new - TOLERANCE) <= cap
            break
        conc = new
    none: dict[str, object] = dict(request_rate=rate_per_replica * dp, rate_sustainable=False)
    if not settled:
        return none
    tok_s = dp * rate_per_replica * output_len
    return dict(
        request_rate=rate_per_replica * dp,
        rate_sustainable=True,
        rate_concurrency=conc,
        rate_kv_tokens=conc * ctx,
        rate_e2e_s=ttft + (output_len - 1) * tpot,
        rate_tpot_s=tpot,
        rate_tokens_per_s=tok_s,
        rate_tokens_per_s_per_gpu=tok_s / gpus,
    )
