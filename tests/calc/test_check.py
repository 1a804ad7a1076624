"""`kvcalc.calc.check.check`: one deployment against its GPU and targets, pure (no file read),
and the errors it raises carrying the field they are about."""

from __future__ import annotations

import pytest

from kvcalc.calc.check import check, layout, missed_targets
from kvcalc.errors import KvcalcError
from kvcalc.load.gpus import get_gpu
from kvcalc.load.models import load_model
from kvcalc.results import CheckRow
from kvcalc.schema import Deployment, Targets

LLAMA_8B = load_model("llama-3.1-8b")
H100 = get_gpu("h100-sxm")


def dep(**kw) -> Deployment:
    return Deployment(**{"model": "llama-3.1-8b", "gpu": "h100-sxm", "max_seq_len": 8192, **kw})


def test_llama_8b_on_one_h100() -> None:
    row = check(dep(targets={"max_tpot_ms": 5}), LLAMA_8B, H100, file="deploy/x.yaml")
    assert isinstance(row, CheckRow) and (row.file, row.name) == ("deploy/x.yaml", "x")
    # used = weights 2 x 8,030,261,248 = 16,060,522,496 + KV 8192 x 131,072 = 1,073,741,824
    #      + activation reserve 8192 x (2 x 4096 + 2 x 14,336) x 2 + 256 x 128,256 x 4 = 735,313,920
    #      + CUDA context 500 MiB = 524,288,000  -> 18,393,866,240 B
    assert row.memory_bytes_per_gpu == 18_393_866_240
    # budget = floor(81,559 MiB x 2^20 x 0.9) = floor(76,968,728,985.6)
    assert row.budget_bytes_per_gpu == 76_968_728_985
    assert row.headroom_bytes == 76_968_728_985 - 18_393_866_240
    # (76,968,728,985 - 16,060,522,496 - 735,313,920 - 524,288,000) // 1,073,741,824 = 55
    assert row.max_concurrency == 55
    # TPOT = (16,060,522,496 - 1,050,673,152 + 8,192 + 1,073,741,824) B / (3.35e12 B/s x 0.8) = 6.0013 ms
    # > 5 ms target (the 1,050,673,152 B embedding table, 128,256 x 4,096 x 2 B, is read as B rows of 8,192 B)
    assert row.tpot_ms == pytest.approx(6.0013, rel=1e-4)
    assert (row.fits, row.meets_targets, row.status) == (True, False, "misses target")
    assert row.problems == ["TPOT 6.00 ms > max_tpot_ms 5"]


def test_does_not_fit_names_the_largest_concurrency() -> None:
    # 64 sequences of 128k on one H100: 64 x 131,072 x 131,072 B = 1 TiB of KV
    row = check(dep(max_seq_len=131_072, concurrency=64, name="big"), LLAMA_8B, H100, file="x.yaml")
    assert row.name == "big" and row.status == "does not fit" and not row.fits
    # (76,968,728,985 - 17,320,124,416) // (131,072 x 131,072 = 17,179,869,184) = 3
    assert row.max_concurrency == 3
    assert row.problems[0].endswith("at most 3 sequences fit")


def test_layout_defaults_the_kv_format_to_the_models() -> None:
    lay = layout(dep(count=4, pp=2, weight_dtype="fp8"), LLAMA_8B)
    assert (lay.tp, lay.pp, lay.dp, lay.k_dtype, lay.weight_dtype) == (2, 2, 1, "bf16", "fp8_e4m3")


def test_missed_targets() -> None:
    assert missed_targets(None, 100.0, 1.0) == []
    t = Targets(max_tpot_ms=10, min_tokens_per_s=1000)
    assert missed_targets(t, 12.5, 800.0) == ["TPOT 12.50 ms > max_tpot_ms 10", "800 tokens/s < min_tokens_per_s 1000"]


@pytest.mark.parametrize(
    "kw,field,value",
    [
        ({"count": 3}, "tp", 3),  # tp = count 3: 32 heads % 3 != 0
        ({"count": 64, "pp": 64}, "pp", 64),  # 64 stages of 32 layers
        ({"kv_dtype": "int4:g256"}, "k_dtype", "int4:g256:fp16"),  # a 128-value head is half a group of 256
        ({"weight_dtype": "int4:g48"}, "weight_dtype", "int4:g48:fp16"),  # 218,103,808 % 48 = 16
    ],
)
def test_errors_carry_their_field(kw: dict, field: str, value) -> None:
    with pytest.raises(KvcalcError) as info:
        check(dep(**kw), LLAMA_8B, H100, file="x.yaml")
    assert (info.value.field, info.value.value) == (field, value)
