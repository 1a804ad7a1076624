"""`kvcalc.calc.roofline`'s edges, exactly: the all-reduce fallback link, whole-number attention
pairs, the default efficiency, and the expected experts at 0 and 1 expert."""

from __future__ import annotations

from kvcalc.calc import roofline as R


def test_allreduce_without_a_link_uses_64_gb_per_s():
    # no interconnect: 64e9 B/s bidirectional (PCIe 5 x16), 32e9 one way; ring all-reduce over tp 2
    # moves 2 x (2 - 1) / 2 = 1 x the bytes: 64e9 B / 32e9 B/s = 2 s exactly
    assert R.allreduce_time_s(64_000_000_000, 2, None) == 2.0
    # tp 4: 2 x 3 / 4 = 1.5 x the bytes over 450e9 B/s (900 GB/s NVLink, one way)
    assert R.allreduce_time_s(900_000_000_000, 4, 900_000_000_000) == 3.0
    assert R.allreduce_time_s(1e9, 1, None) == 0.0


def test_attended_pairs_are_whole_numbers():
    # 4 tokens, causal: 1 + 2 + 3 + 4 = 10; window 2: 1 + 2 + 2 + 2 = 7 (= 2 x 3 / 2 + 2 x 2)
    assert R.attended_pairs(4) == 10 and type(R.attended_pairs(4)) is int
    assert R.attended_pairs(4, 2) == 7 and type(R.attended_pairs(4, 2)) is int
    assert R.attended_pairs(4, 4) == 10 and type(R.attended_pairs(4, 4)) is int


def test_compute_time_at_full_efficiency_by_default():
    # 1e15 FLOP at 5e14 FLOP/s, efficiency 1.0 unless given: 2 s; at 0.5: 4 s
    assert R.compute_time_s(1e15, 5e14) == 2.0
    assert R.compute_time_s(1e15, 5e14, 0.5) == 4.0


def test_expected_experts_at_zero_and_one_expert():
    # a dense model touches no expert; one expert with k = 1 is always touched
    assert R.expected_experts_touched(0, 2, 3) == 0.0
    assert R.expected_experts_touched(1, 1, 5) == 1.0
    # 8 experts, 2 per token, 1 token: 8 x (1 - 6/8) = 2
    assert R.expected_experts_touched(8, 2, 1) == 2.0
