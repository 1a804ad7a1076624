"""`kvcalc.calc.memory_plan`'s stage split and KV profile defaults, exactly: `Layout.stages` with
explicit counts (the ranges, a one-layer stage, and the refusal with its whole message, field and
value) and `KvProfile.build` at its default tp 1 and pp 1."""

from __future__ import annotations

import pytest

from kvcalc.calc import kv_cache
from kvcalc.calc.memory_plan import KvProfile, Layout
from kvcalc.errors import KvcalcError
from kvcalc.load.models import load_model


def test_explicit_stage_layers_become_consecutive_ranges():
    # 3 + 5 + 24 = 32 layers: 0..2, 3..7, 8..31
    lay = Layout(pp=3, stage_layers=(3, 5, 24))
    assert lay.stages(32) == [range(3), range(3, 8), range(8, 32)]
    # a stage of one layer is allowed
    assert Layout(pp=2, stage_layers=(1, 31)).stages(32) == [range(1), range(1, 32)]
    # without counts: vLLM's split (kv_cache.pp_stages)
    assert Layout(pp=2).stages(32) == kv_cache.pp_stages(32, 2) == [range(16), range(16, 32)]


@pytest.mark.parametrize("counts", [(16, 16, 0), (20, 13), (32,), (0, 32)])
def test_bad_stage_layers_are_refused_with_the_whole_message(counts):
    # pp 2 on 32 layers: three counts, a sum of 33, one count, a zero count
    lay = Layout(pp=2, stage_layers=counts)
    with pytest.raises(KvcalcError) as e:
        lay.stages(32)
    assert e.value.message == f"stage layers {list(counts)} must be 2 positive counts summing to 32"
    assert (e.value.field, e.value.value) == ("pp", 2)


def test_one_wrong_condition_is_enough():
    # two counts summing to 32 but one is 0: only the "positive" condition fails
    with pytest.raises(KvcalcError):
        Layout(pp=2, stage_layers=(32, 0)).stages(32)
    # right length and all positive, wrong sum: only the sum fails
    with pytest.raises(KvcalcError):
        Layout(pp=2, stage_layers=(16, 17)).stages(32)
    # right sum and positive, wrong length
    with pytest.raises(KvcalcError):
        Layout(pp=3, stage_layers=(16, 16)).stages(32)


def test_kv_profile_defaults_to_one_rank_and_one_stage():
    # llama-3.1-8b in bf16: one group of 32 layers x 2 x 8 heads x 128 x 2 B = 4,096 B a layer-token
    # each -> 131,072 B a token, no window, one stage
    m = load_model("llama-3.1-8b")
    k, v = kv_cache.formats("bf16", None)
    prof = KvProfile.build(m, k, v)
    # (bytes a token, window, compressed entry bytes, compress ratio, fixed bytes a sequence): no
    # compressed cache, no compressor state
    assert prof.stages == (((131_072, None, 0, 1, 0),),)
    assert prof.per_gpu_bytes(1000, 2) == 2 * 1000 * 131_072
