"""The memory plan and capacity solves (kvcalc/plan.py): KV per GPU equals kv_cache.estimate's,
the budget arithmetic, max batch and max context (exact, including the sliding-window bend)."""

from __future__ import annotations

import pytest
from specs import DSV2_LITE, GEMMA3_27B, LLAMA_8B  # noqa: E402  (tests/calc/specs.py)

from kvcalc.calc import kv_cache
from kvcalc.calc.memory_plan import (
    DEFAULT_CUDA_CONTEXT_BYTES,
    GpuFit,
    KvProfile,
    Layout,
    activation_reserve_bytes,
    budget_bytes,
)
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.gpus import get_gpu
from kvcalc.schema import ModelSpec, Parallelism, Workload

H100 = get_gpu("h100-sxm")


@pytest.mark.parametrize("model", [LLAMA_8B, GEMMA3_27B, DSV2_LITE], ids=lambda m: m.name)
@pytest.mark.parametrize("tp,pp", [(1, 1), (2, 1), (1, 3), (16, 2)])
@pytest.mark.parametrize("seq_len", [1, 1000, 1024, 1025, 40_000])
def test_kv_profile_equals_engine_estimate(model: ModelSpec, tp: int, pp: int, seq_len: int) -> None:
    if model.n_heads % tp:
        pytest.skip("tp does not divide the heads")
    k = kv_format("fp8")
    est = kv_cache.estimate(
        model, Workload(seq_len=seq_len, batch=3, k_dtype="fp8", v_dtype="fp8", parallel=Parallelism(tp=tp, pp=pp))
    )
    prof = KvProfile.build(model, k, k, tp, pp)
    assert prof.per_gpu_bytes(seq_len, 3) == est.kv_cache_bytes_per_gpu
    assert sum(prof.stage_bytes(seq_len, 3)) * tp == est.kv_cache_bytes_all_gpus


def test_budget_and_fit_llama_8b() -> None:
    # budget: floor(85,520,809,984 x 0.9) = 76,968,728,985
    assert budget_bytes(H100.memory_bytes, 0.9) == 76_968_728_985
    # activation reserve: 8192 x (2 x 4096 + 2 x 14336) x 2 B + 256 x 128256 x 4 B = 735,313,920
    assert activation_reserve_bytes(LLAMA_8B) == 735_313_920
    p = GpuFit(LLAMA_8B, H100)
    fixed = 16_060_522_496 + 735_313_920 + DEFAULT_CUDA_CONTEXT_BYTES
    assert p.stage_used_bytes(32768, 1) == [fixed + 4_294_967_296]
    assert p.headroom_bytes(32768, 1) == 76_968_728_985 - fixed - 4_294_967_296
    # max batch at 32k: (76,968,728,985 - 17,320,124,416) // 4,294,967,296 = 13
    assert p.max_batch(32768) == 13
    assert p.headroom_bytes(32768, 13) >= 0 > p.headroom_bytes(32768, 14)


def test_max_seq_len_is_exact() -> None:
    p = GpuFit(LLAMA_8B, H100)
    # batch 32: (76,968,728,985 - 17,320,124,416) // (32 x 131,072 B/token) = 14,221 tokens
    t, capped = p.max_seq_len(32)
    assert (t, capped) == (14_221, False)
    assert p.headroom_bytes(t, 32) >= 0 > p.headroom_bytes(t + 1, 32)
    assert p.max_seq_len(1) == (131072, True)  # capped by max_position_embeddings


def test_max_seq_len_bends_at_the_window() -> None:
    # Gemma-3-27B: past 1024 tokens only the 10 full layers grow (10 x 2 x 16 x 128 x 2 B = 81,920
    # B/token, not the 62-layer 507,904), so a linear solve from short contexts would be 6x off.
    p = GpuFit(GEMMA3_27B, H100, Layout(k_dtype="bf16"))
    b = 8
    t, capped = p.max_seq_len(b, cap=10**9)
    assert not capped and t > 1024
    assert p.headroom_bytes(t, b) >= 0 > p.headroom_bytes(t + 1, b)
    free = p.budget - max(p.stage_weight_bytes) - p.fixed_bytes
    # per layer 2 x 16 KV heads x 128 x 2 B = 8,192 B/token; for T > 1024:
    # KV(T) = b x (52 sliding x 8,192 x 1024 + 10 full x 8,192 x T)
    per_layer = 2 * 16 * 128 * 2
    assert t == (free // b - 52 * per_layer * 1024) // (10 * per_layer)
    # by hand: weights (bf16) per layer q, o 2 x 5376 x 4096 + k, v 2 x 5376 x 2048 + MLP 3 x 5376 x
    # 21504 + 2 norms x 5376 = 412,887,552 x 62 = 25,599,028,224; tied embedding 262,208 x 5376 =
    # 1,409,630,208; final norm 5,376 -> 27,008,663,808 params x 2 B = 54,017,327,616 B;
    # fixed = activations 8192 x (2 x 5376 + 2 x 21504) x 2 + 256 x 262,208 x 4 = 1,149,304,832
    # + 524,288,000 CUDA context = 1,673,592,832; free = 76,968,728,985 - 54,017,327,616
    # - 1,673,592,832 = 21,277,808,537; // 8 = 2,659,726,067; - 436,207,616 sliding = 2,223,518,451;
    # // 81,920 = 27,142 tokens
    assert (p.stage_weight_bytes, p.fixed_bytes, free) == ([54_017_327_616], 1_673_592_832, 21_277_808_537)
    assert t == 27_142


def test_does_not_fit_and_pipeline_stages() -> None:
    llama70 = ModelSpec(
        name="l70", n_layers=80, n_heads=64, n_kv_heads=8, hidden_size=8192, vocab_size=128256, intermediate_size=28672
    )
    p = GpuFit(llama70, H100)
    assert p.headroom_bytes(8192, 1) < 0 and p.max_batch(8192) == 0 and p.max_seq_len(1) == (0, False)
    # pp 2: each GPU holds 40 layers; the fullest stage is the last (head + final norm)
    p2 = GpuFit(llama70, H100, Layout(pp=2))
    assert p2.stage_weight_bytes[1] - p2.stage_weight_bytes[0] == 8192 * 2
    # per layer 855,654,400 params x 2 B = 1,711,308,800 B; 40 layers = 68,452,352,000 B per stage;
    # stage 0 + embedding 128,256 x 8,192 x 2 B = 2,101,346,304 -> 70,553,698,304 B;
    # stage 1 + head 2,101,346,304 + final norm 16,384 -> 70,553,714,688 B
    assert p2.stage_weight_bytes == [70_553_698_304, 70_553_714_688]
    # fixed: activation reserve 8192 x (2 x 8192 + 2 x 28672) x 2 B + 256 x 128,256 x 4 B
    # = 1,207,959,552 + 131,334,144 = 1,339,293,696, + CUDA context 524,288,000 = 1,863,581,696
    assert p2.fixed_bytes == 1_863_581_696
    # last stage: 76,968,728,985 - 70,553,714,688 - 1,863,581,696 = 4,551,432,601 B free;
    # KV per sequence of 8,192 tokens on 40 layers: 40 x 2 x 8 x 128 x 2 B x 8,192 = 1,342,177,280
    # -> 3 sequences (4,026,531,840 B), headroom 524,900,761 B
    assert p2.max_batch(8192) == 3
    assert p2.headroom_bytes(8192, 3) == 524_900_761


def test_layout_checks() -> None:
    with pytest.raises(KvcalcError, match="gpu-memory-utilization"):
        Layout(gpu_memory_utilization=1.2).check()  # where the request is built; GpuFit trusts it
    with pytest.raises(KvcalcError, match="tp 3"):
        GpuFit(LLAMA_8B, H100, Layout(tp=3))


def test_serving_refuses_a_kv_mismatch() -> None:
    p = GpuFit(LLAMA_8B, H100)
    assert p.serving(8192, 2, 2 * 8192 * 131_072).kv_cache_bytes_per_gpu == 2_147_483_648
    with pytest.raises(RuntimeError, match="KV per GPU 2147483648 != kv_cache.estimate 1"):
        p.serving(8192, 2, 1)
