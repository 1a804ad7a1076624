"""`calc.request_speed.spread_static`: whole requests as static batches spread over dp replicas,
on a stand-in plan whose step times are simple enough to sum by hand."""

from __future__ import annotations

import dataclasses

import pytest

from kvcalc.calc.memory_plan import Layout
from kvcalc.calc.request_speed import spread_static
from kvcalc.calc.roofline import StepTime


def _t(seconds: float) -> StepTime:
    return StepTime(bytes_read=0, flops=0, memory_time_s=seconds, compute_time_s=0.0, comm_time_s=0.0)


@dataclasses.dataclass
class _Steps:
    """decode(T, B) = 10 ms + 1 ms x B + 1 us x T; prefill(P, B) = 1 us x P x B; dp replicas."""

    layout: Layout

    def prefill(self, prompt_len: int, batch: int = 1) -> StepTime:
        return _t(1e-6 * prompt_len * batch)

    def decode(self, seq_len: int, batch: int) -> StepTime:
        return _t(0.010 + 0.001 * batch + 1e-6 * seq_len)

    def max_batch(self, seq_len: int) -> int:
        return 10**6


@pytest.mark.parametrize(
    "dp,conc,batch,tpot_s,e2e_s,tokens_per_s",
    [
        # dp 1, 4 requests of I 1,000 / O 101: mean context 1,000 + 50 = 1,050; TPOT = 10 + 4 +
        # 1.05 = 15.05 ms; E2E = prefill 4 x 1,000 us = 4 ms + 100 x 15.05 ms = 1.509 s;
        # 4 x 101 / 1.509 = 267.727... tokens/s
        (1, 4, 4, 0.01505, 1.509, 4 * 101 / 1.509),
        # dp 3, 7 requests: q, r = 2, 1 -> one replica of 3 (TPOT 14.05 ms, E2E 3 ms + 1.405 s =
        # 1.408 s) and two of 2 (TPOT 13.05 ms, E2E 2 ms + 1.305 s = 1.307 s):
        # 3 x 101 / 1.408 + 2 x 2 x 101 / 1.307
        (3, 7, 3, 0.01405, 1.408, 3 * 101 / 1.408 + 4 * 101 / 1.307),
        # dp 4, 2 requests: two replicas of 1 (TPOT 12.05 ms, E2E 1 ms + 1.205 s), two idle
        (4, 2, 1, 0.01205, 1.206, 2 * 101 / 1.206),
    ],
)
def test_spread_static_by_hand(dp, conc, batch, tpot_s, e2e_s, tokens_per_s) -> None:
    st = spread_static(_Steps(Layout(dp=dp)), 1000, 101, conc)
    assert st.batch == batch
    assert st.tpot_s == pytest.approx(tpot_s, rel=1e-12)
    assert st.e2e_s == pytest.approx(e2e_s, rel=1e-12)
    assert st.tokens_per_s == pytest.approx(tokens_per_s, rel=1e-12)


def test_spread_static_refuses_nothing_to_serve() -> None:
    with pytest.raises(ValueError):
        spread_static(_Steps(Layout()), 1000, 101, 0)
