"""`kvcalc.calc.check` and `kvcalc.calc.sweep`, exactly: the whole "does not fit" line, the fit at
exactly the budget, the targets at their limits, dp and the utilization reaching the planner, and
the sweep without a GPU under tp x pp with different K and V formats.

llama-3.1-8b (configs/models/llama-3.1-8b.yaml) on the h100-sxm (85,520,809,984 B): weights bf16
16,060,522,496 B; reserves 735,313,920 + 524,288,000 = 1,259,601,920 B at tp 1; KV 131,072 B a
token in bf16 (32 layers x 2 x 8 heads x 128 x 2 B)."""

from __future__ import annotations

import pytest

from kvcalc.calc.check import check, missed_targets
from kvcalc.calc.memory_plan import Layout
from kvcalc.calc.sweep import SweepRequest, sweep_rows
from kvcalc.load.gpus import get_gpu
from kvcalc.load.models import load_model
from kvcalc.schema import Deployment, Targets

LLAMA_8B = load_model("llama-3.1-8b")
H100 = get_gpu("h100-sxm")


def dep(**kw) -> Deployment:
    return Deployment(**{"model": "llama-3.1-8b", "gpu": "h100-sxm", "max_seq_len": 8192, **kw})


def test_does_not_fit_line_in_full():
    # 64 x 128k at utilization 0.8: used 16,060,522,496 + 64 x 131,072 x 131,072 (= 1,099,511,627,776
    # = 1024 GiB) + 1,259,601,920 = 1,116,831,752,192 B = 1,040.13 GiB; budget floor(0.8 x
    # 85,520,809,984) = 68,416,647,987 B = 63.72 GiB; memory 85,520,809,984 B = 79.65 GiB;
    # (68,416,647,987 - 16,060,522,496 - 1,259,601,920) // 17,179,869,184 = 2 sequences
    row = check(dep(max_seq_len=131_072, concurrency=64, gpu_memory_utilization=0.8), LLAMA_8B, H100, file="x.yaml")
    assert row.memory_bytes_per_gpu == 1_116_831_752_192
    assert row.budget_bytes_per_gpu == 68_416_647_987
    assert row.problems == ["needs 1,040.13 GiB per GPU > budget 63.72 GiB (0.8 x 79.65 GiB); at most 2 sequences fit"]


def test_fits_at_exactly_the_budget():
    # one 8k sequence uses 16,060,522,496 + 1,073,741,824 + 1,259,601,920 = 18,393,866,240 B; a GPU
    # of exactly that many bytes at utilization 1.0 has that budget: it fits with 0 headroom; one
    # byte less does not
    used = 18_393_866_240
    exact = H100.model_copy(update={"memory_bytes": used})
    row = check(dep(gpu_memory_utilization=1.0), LLAMA_8B, exact, file="x.yaml")
    assert (row.memory_bytes_per_gpu, row.budget_bytes_per_gpu, row.headroom_bytes) == (used, used, 0)
    assert (row.fits, row.status, row.problems) == (True, "ok", [])
    short = check(
        dep(gpu_memory_utilization=1.0), LLAMA_8B, exact.model_copy(update={"memory_bytes": used - 1}), file="x.yaml"
    )
    assert (short.fits, short.status, short.headroom_bytes) == (False, "does not fit", -1)


def test_dp_replicas_split_the_sequences():
    # 2 GPUs at tp 1: dp 2, 8 sequences -> 4 per replica. Used 16,060,522,496 + 4 x 1,073,741,824
    # + 1,259,601,920 = 21,615,091,712 B; step (16,060,522,496 + 4,294,967,296) B / (3.35e12 x 0.8)
    # = 7.5953 ms, tokens/s over both replicas 8 / 7.5953 ms = 1,053.3; max sequences 2 x
    # (76,968,728,985 - 17,320,124,416) // 1,073,741,824 = 2 x 55 = 110
    row = check(dep(count=2, tp=1, concurrency=8), LLAMA_8B, H100, file="x.yaml")
    assert (row.tp, row.pp, row.dp) == (1, 1, 2)
    assert row.memory_bytes_per_gpu == 21_615_091_712
    # decode reads 4 embedding rows, not the table (the 1,050,673,152 B embedding table, 128,256 x 4,096 x 2 B, is read as B rows of 8,192 B)
    step_s = (16_060_522_496 - 1_050_673_152 + 4 * 8_192 + 4 * 1_073_741_824) / (3.35e12 * 0.8)
    assert row.tpot_ms == pytest.approx(step_s * 1e3, rel=1e-9)
    assert row.tokens_per_s == pytest.approx(8 / step_s, rel=1e-9)
    assert row.max_concurrency == 110


def test_targets_met_exactly_are_not_missed():
    assert missed_targets(Targets(max_tpot_ms=5.0, min_tokens_per_s=200.0), 5.0, 200.0) == []
    assert missed_targets(Targets(max_tpot_ms=5.0), 5.000001, 1.0) == ["TPOT 5.00 ms > max_tpot_ms 5"]
    assert missed_targets(Targets(min_tokens_per_s=200.0), 1.0, 199.9) == ["200 tokens/s < min_tokens_per_s 200"]


# ----- sweep ------------------------------------------------------------------------------------------


def test_sweep_without_a_gpu_under_tp_and_pp():
    # tp 2, pp 2, K fp8 / V bf16, 2 x 8k: KV per GPU: 16 layers (a stage) x 4 heads (8 / tp 2) x 128
    # x (1 B K + 2 B V) = 24,576 B a token x 16,384 tokens = 402,653,184 B.
    # weights per GPU, the last stage: 16 layers x (218,103,808 x 2 B / 2 + 16,384 B of norms) =
    # 3,489,923,072 + LM head 128,256 x 4096 x 2 B / 2 = 525,336,576 + final norm 8,192 =
    # 4,015,267,840 B (the first stage has the embedding instead, without the final norm)
    rows = sweep_rows(SweepRequest(LLAMA_8B, (8192,), (2,), Layout(tp=2, pp=2, k_dtype="fp8", v_dtype="bf16")))
    assert rows == [
        {
            "seq_len": 8192,
            "batch": 2,
            "weights_bytes_per_gpu": 4_015_267_840,
            "kv_cache_bytes_per_gpu": 402_653_184,
            "memory_bytes_per_gpu": 4_015_267_840 + 402_653_184,
        }
    ]


def test_sweep_without_a_gpu_defaults_v_to_k():
    # K fp8 alone: V follows (1 B each): 32 layers x 8 heads x 128 x 2 x 1 B = 65,536 B a token
    rows = sweep_rows(SweepRequest(LLAMA_8B, (1024,), (1,), Layout(k_dtype="fp8")))
    assert rows[0]["kv_cache_bytes_per_gpu"] == 1024 * 65_536
    assert rows[0]["weights_bytes_per_gpu"] == 16_060_522_496


def test_sweep_without_a_gpu_uses_n_params_when_the_shapes_are_missing():
    # no intermediate_size: the matrices cannot be counted, so n_params x 2 B (bf16) is the weights
    m = LLAMA_8B.model_copy(update={"intermediate_size": None, "n_params": 8_000_000_000})
    rows = sweep_rows(SweepRequest(m, (1024,), (1,), Layout()))
    assert rows[0]["weights_bytes_per_gpu"] == 16_000_000_000
    assert rows[0]["memory_bytes_per_gpu"] == 16_000_000_000 + 1024 * 131_072
    # neither shapes nor n_params: KV only, weights 0
    bare = LLAMA_8B.model_copy(update={"intermediate_size": None, "n_params": None})
    rows = sweep_rows(SweepRequest(bare, (1024,), (1,), Layout()))
    assert rows[0]["weights_bytes_per_gpu"] == 0 and rows[0]["memory_bytes_per_gpu"] == 1024 * 131_072


def test_sweep_with_a_gpu_keeps_the_layout_and_reports_progress():
    # tp 2 on the h100: weights per GPU 8,030,527,488 B (see test_plan_layouts.py); KV 1 x
    # 1024 x 65,536 B (4 heads a rank); the progress wrapper sees every point, contexts fastest
    seen = []

    def progress(points):
        seen.extend(points)
        return points

    rows = sweep_rows(SweepRequest(LLAMA_8B, (1024, 2048), (1, 2), Layout(tp=2), H100), progress)
    assert seen == [(1024, 1), (2048, 1), (1024, 2), (2048, 2)]
    assert [(r["seq_len"], r["batch"]) for r in rows] == seen
    assert rows[0]["weights_bytes_per_gpu"] == 8_030_527_488
    assert rows[0]["kv_cache_bytes_per_gpu"] == 1024 * 65_536
    seen.clear()
    sweep_rows(SweepRequest(LLAMA_8B, (1024,), (3,), Layout()), progress)
    assert seen == [(1024, 3)]
