"""`kvcalc plan --engine sglang` and `kvcalc capacity --engine sglang` on a model SGLang 0.5.23
serves with a `MambaPool` (Qwen3.5-27B, configs/models/qwen3.5-27b.yaml: 48 Gated DeltaNet
layers of 153,944,064 B of state a request, 16 full-attention layers of 4 KV heads x 256):
the budget splits by --mamba-full-memory-ratio 0.9 and max_running_requests is capped at
max_mamba_cache_size // 5 (`sglang_mamba.max_running_requests`; `kvcalc.engines.sglang_plan`).

On one H200 at tp 1 the plan leaves a rank (`_Placed.kv_free`) 81,377,225,318 B with bf16
weights, 105,224,464,998 B with fp8 weights. SGLang's split (`sglang_mamba.split_budget`):
  bf16: 81,377,225,318 / 2^30 x 0.9 / 1.9 x 2^30 = 38,547,106,729.6; K = int((that - 153,944,064)
        // 153,944,064) = 249 -> cap 249 // 5 = 49 (the pool's 654,467 tokens hold 159 of 4,096)
  fp8:  105,224,464,998 -> 49,843,167,630.6; K = 322 -> cap 64 (tokens for 413 at 32,768 B a token)
"""

from __future__ import annotations

import json

import pytest

from kvcalc.calc.plan import _Space
from kvcalc.load.models import load_model
from kvcalc.requests import PlanRequest


def _placed(weight):
    req = PlanRequest.build(load_model("qwen3.5-27b"), seq_len="4k", concurrency=8, gpus="h200", engine="sglang")
    space = _Space(req.search)
    choice = req.search.gpus[0]
    for kv, w in space.formats(choice):
        for p in space.placements(choice, kv, w, [1]):
            if w == weight and kv == ("bf16", "bf16"):
                return p
    raise AssertionError(f"no tp 1 layout with {weight} weights")


@pytest.mark.parametrize(("weight", "free", "cap"), [(None, 81_377_225_318, 49), ("fp8_e4m3", 105_224_464_998, 64)])
def test_plan_max_seqs_capped_by_state_slots(weight, free, cap):
    p = _placed(weight)
    assert p.kv_free() == [free]
    assert p.max_concurrency(4096) == cap
    # the memory SGLang needs for cap requests fits what the rank leaves; one more needs a 6th slot set
    assert p.ekv.stage_bytes(4096, cap)[0] <= free < p.ekv.stage_bytes(4096, cap + 1)[0]


def test_plan_json_first_layout(cli):
    r = cli(
        "plan", "qwen3.5-27b", "-s", "4k", "--concurrency", "8", "--engine", "sglang", "--gpu", "h200", "-f", "json"
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    top = d["layouts"][0]
    assert (top["count"], top["tp"], top["weight_dtype"], top["max_concurrency"]) == (1, 1, "fp8_e4m3", 64)
    assert any("caps max_running_requests at slots // 5" in n for n in d["notes"])


def test_capacity_reports_the_cap(cli):
    r = cli("capacity", "qwen3.5-27b", "-s", "4k", "--engine", "sglang", "--kv-memory", "81377225318", "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["kv_cache_tokens"] // 4096 == 159  # the tokens alone would hold 159
    assert d["max_concurrency"] == 49
