"""`kvcalc.calc.plan`'s search-space helpers, exactly: the counts, the (tp, pp, dp) layouts at the
node and layer boundaries, the largest-remainder layer split (both repair loops), llama.cpp's
`-ts` values, the bisection of the why-not search, the KV label and the ranking key. Each
expectation is derived by hand in its comment."""

from __future__ import annotations

import pytest

from kvcalc.calc import plan as P
from kvcalc.errors import KvcalcError
from kvcalc.load.models import load_model
from kvcalc.schema import ModelSpec

# a small model for the layer boundaries: 4 layers, 8 query heads, 8 KV heads (so every tp in
# 1, 2, 4, 8 passes `check_tp`)
TINY = ModelSpec(
    name="tiny", n_layers=4, n_heads=8, n_kv_heads=8, hidden_size=512, vocab_size=1000, intermediate_size=1024
)


def with_layers(n: int) -> ModelSpec:
    """TINY with n layers (`layer_split` reads only n_layers)."""
    return TINY.model_copy(update={"n_layers": n})


# ----- counts ----------------------------------------------------------------------------------


def test_counts_start_at_one_even_without_a_minimum():
    # range(1, min(3, 8) + 1) = 1, 2, 3: there is no 0-GPU layout, whatever min_count lets through
    assert P.counts(3, min_count=0) == [1, 2, 3]
    assert P.counts(3, min_count=-5) == [1, 2, 3]


def test_counts_stop_at_max_gpus_between_two_nodes():
    # max 23: 1..8, then whole nodes 16 (24 > 23 is left out); max 24 takes the third node
    assert P.counts(23) == [1, 2, 3, 4, 5, 6, 7, 8, 16]
    assert P.counts(24) == [1, 2, 3, 4, 5, 6, 7, 8, 16, 24]
    # nodes of 4: 1..4, then 8, 12 up to 12
    assert P.counts(12, gpus_per_node=4) == [1, 2, 3, 4, 8, 12]
    assert P.counts(12, gpus_per_node=4, layer_split=True) == [1, 2, 3, 4]


def test_divisors():
    # 12 = 1 x 12 = 2 x 6 = 3 x 4; a prime has two; 1 has one
    assert P._divisors(12) == [1, 2, 3, 4, 6, 12]
    assert P._divisors(7) == [1, 7]
    assert P._divisors(1) == [1]


# ----- parallel layouts --------------------------------------------------------------------------


def test_parallel_layouts_keep_tp_inside_a_node():
    # llama-3.1-70b (64 query, 8 KV heads) on 12 GPUs in nodes of 6: 12 spans two nodes, so tp
    # must divide 6: tp 1 or 2 (tp 3 and 6 fail the 8 KV heads, tp 4 does not divide 6, tp 12 > 6).
    # tp 1: pp x dp = 12 -> pp in 1, 2, 3, 4, 6, 12; tp 2: pp x dp = 6 -> pp in 1, 2, 3, 6
    m = load_model("llama-3.1-70b")
    assert P.parallel_layouts(m, 12, gpus_per_node=6) == [
        (1, 1, 12),
        (1, 2, 6),
        (1, 3, 4),
        (1, 4, 3),
        (1, 6, 2),
        (1, 12, 1),
        (2, 1, 6),
        (2, 2, 3),
        (2, 3, 2),
        (2, 6, 1),
    ]


def test_parallel_layouts_skip_a_bad_tp_and_go_on():
    # 24 query and KV heads, 4 layers, 8 GPUs in nodes of 4 (two nodes): tp must divide 4 and 24:
    # tp 1 (pp x dp = 8: pp 1, 2, 4; pp 8 > 4 layers is left out), tp 2 (4: pp 1, 2, 4),
    # tp 4 (2: pp 1, 2); tp 8 > 4 is skipped
    m = TINY.model_copy(update={"n_heads": 24, "n_kv_heads": 24})
    assert P.parallel_layouts(m, 8, gpus_per_node=4) == [
        (1, 1, 8),
        (1, 2, 4),
        (1, 4, 2),
        (2, 1, 4),
        (2, 2, 2),
        (2, 4, 1),
        (4, 1, 2),
        (4, 2, 1),
    ]
    # 12 GPUs in nodes of 6: tp in 1, 2, 3, 6 (divisors of 12 that divide 6 and 24); tp 4
    # (6 % 4 = 2) is skipped but tp 6 after it is still found
    assert sorted({tp for tp, _, _ in P.parallel_layouts(m, 12, gpus_per_node=6)}) == [1, 2, 3, 6]
    # 24 query, 8 KV heads on 12 GPUs in one node of 12: tp 3 fails the KV heads (8 % 3, 3 % 8),
    # tp 4 after it passes; tp 6 and 12 fail again (8 % 6, 12 % 8) -> tp 1, 2, 4
    g = TINY.model_copy(update={"n_heads": 24, "n_kv_heads": 8})
    assert sorted({tp for tp, _, _ in P.parallel_layouts(g, 12, gpus_per_node=12)}) == [1, 2, 4]


def test_parallel_layouts_allow_one_stage_per_layer():
    # 4 GPUs on 4 layers: pp 4 (one layer per stage) is allowed, pp 8 on 8 GPUs is not
    assert (1, 4, 1) in P.parallel_layouts(TINY, 4)
    assert P.parallel_layouts(TINY, 8) == [
        (1, 1, 8),
        (1, 2, 4),
        (1, 4, 2),
        (2, 1, 4),
        (2, 2, 2),
        (2, 4, 1),
        (4, 1, 2),
        (4, 2, 1),
        (8, 1, 1),
    ]


# ----- the layer split -----------------------------------------------------------------------------


def test_layer_split_one_layer_per_device_at_the_limit():
    # as many devices as layers: one layer each (d = n is allowed; d = n + 1 is refused)
    assert P.layer_split(TINY, [10, 20, 30, 40]) == (1, 1, 1, 1)
    with pytest.raises(KvcalcError) as e:
        P.layer_split(TINY, [1] * 5)
    assert (e.value.message, e.value.field, e.value.value) == ("5 devices exceed the model's 4 layers", "pp", 5)


def test_layer_split_weighs_nonpositive_free_bytes_as_one():
    # free 1 and 3 bytes (a device with nothing free still counts 1): 64 x 1/4 = 16, 64 x 3/4 = 48
    m = with_layers(64)
    assert P.layer_split(m, [1, 3]) == (16, 48)
    # 0 and -5 bytes count as 1 each, like 1: 64 / 2 = 32 each
    assert P.layer_split(m, [0, -5]) == (32, 32)


def test_layer_split_gives_a_tiny_device_one_layer():
    # free 1 and 1000: 64 x 1/1001 = 0.064 -> at least 1; 64 x 1000/1001 = 63.94 -> 63; 1 + 63 = 64
    assert P.layer_split(with_layers(64), [1, 1000]) == (1, 63)


def test_layer_split_hands_out_the_remainder_in_turn():
    # 62 layers over 4 equal devices: 15.5 each -> 15 x 4 = 60; the 2 left go to the largest
    # remainders (all 0.5), ties by index: devices 0 and 1 -> (16, 16, 15, 15)
    assert P.layer_split(with_layers(62), [1, 1, 1, 1]) == (16, 16, 15, 15)


def test_layer_split_takes_back_from_the_fullest_device():
    # 7 layers over free 1, 1, 20, 20 (sum 42): exact 0.167, 0.167, 3.33, 3.33 -> at least 1:
    # [1, 1, 3, 3] = 8 > 7: one layer back from the fullest, the first of equals (device 2)
    assert P.layer_split(with_layers(7), [1, 1, 20, 20]) == (1, 1, 2, 3)
    # 6 layers over 1, 1, 1, 20, 20 (sum 43): exact 0.14 x 3, 2.79 x 2 -> [1, 1, 1, 2, 2] = 7 > 6:
    # device 3 (the first of the two with 2) gives one back
    assert P.layer_split(with_layers(6), [1, 1, 1, 20, 20]) == (1, 1, 1, 1, 2)


def test_tensor_split_adds_the_output_layer_to_the_last_device():
    # three devices with 10, 11, 12 layers: -ts 10,11,13 (the output layer on the last)
    assert P.tensor_split((10, 11, 12)) == [10, 11, 13]
    assert P.tensor_split((5,)) == [6]


# ----- the why-not bisection, labels, ranking ------------------------------------------------------


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 5, 6, 7, 9, 10])
def test_largest_finds_the_last_true(limit):
    # ok(x) = x <= limit over [1, 10]: the answer is limit
    assert P._largest(1, 10, lambda x: x <= limit) == limit


def test_largest_edges():
    assert P._largest(5, 5, lambda x: True) == 5  # one candidate that passes
    assert P._largest(5, 5, lambda x: False) == 0  # one that fails
    assert P._largest(6, 5, lambda x: True) == 0  # an empty range
    assert P._largest(1, 10, lambda x: True) == 10  # all pass
    assert P._largest(1, 10, lambda x: False) == 0  # none: 0, even though lo = 1


def test_kv_label():
    assert P._kv_label(("bf16", "bf16")) == "bf16"
    assert P._kv_label(("fp8_e4m3", "bf16")) == "fp8_e4m3/bf16"
    assert P._kv_label(("bf16", "fp8_e4m3")) == "bf16/fp8_e4m3"


def test_rank_key_treats_a_free_gpu_as_priced():
    # $0/hour is a known price: it ranks before an unpriced one and before $0.5/hour
    k = P.rank_key
    assert k(1, 0.0, 1.0, ()) < k(1, None, 1e6, ())
    assert k(1, 0.0, 1.0, ()) < k(1, 0.5, 1e6, ())
    assert k(2, 0.0, 5.0, ("a",)) == (2, False, 0.0, -5.0, 0.0, ("a",))
    assert k(2, None, 5.0, ("a",)) == (2, True, 0.0, -5.0, 0.0, ("a",))
    # whole requests: at equal tokens/s (a request rate every layout keeps up with) the shorter
    # end to end ranks first
    assert k(2, None, 5.0, ("z",), e2e_s=1.0) < k(2, None, 5.0, ("a",), e2e_s=2.0)


def test_layer_split_hands_out_three_remainders():
    # 8 layers over 5 equal devices: 1.6 each -> 1 x 5 = 5; the 3 left go to devices 0, 1, 2
    assert P.layer_split(with_layers(8), [1] * 5) == (2, 2, 2, 1, 1)
