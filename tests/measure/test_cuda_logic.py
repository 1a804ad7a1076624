"""The CUDA-only decisions of `kvcalc measure`, checked on the CPU: the SDPA GQA path that never
expands the cache, flash-attn's view of the (B, H_kv, T, D) cache, the L2 size and the free-memory
margin, the refusal with a margin, and benchmarks/gpu_check.py's point selection, time budget and
recovery from a point that raises (a CUDA OOM on the GPU)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
from attention_reference import float64_attention

from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

torch = pytest.importorskip("torch")
from kvcalc import measure as M  # noqa: E402
from kvcalc.measure import attention as measure_attention  # noqa: E402
from kvcalc.measure import runner as measure_runner  # noqa: E402

GIB = 2**30
ROOT = Path(__file__).parents[2]
TINY_YAML = str(Path(__file__).parents[1] / "data" / "tiny-gqa.yaml")


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("hq,hkv,dv", [(8, 2, 16), (4, 1, 12)], ids=["gqa", "mqa-mla-like"])
def test_sdpa_grouped_path_matches_float64(monkeypatch, hq, hkv, dv):
    # the path CUDA takes when SDPA's flash kernel does not apply (fp32, D > 256, D_k != D_v)
    monkeypatch.setattr(measure_attention, "sdpa_gqa_native", lambda q, k, v: False)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, hq, 16, generator=g)
    k = torch.randn(2, hkv, 9, 16, generator=g)
    v = torch.randn(2, hkv, 9, dv, generator=g)
    out = M.attend(q, k, v, 0.25, "sdpa")
    assert out.shape == (2, hq, dv)
    torch.testing.assert_close(out.double(), float64_attention(q, k, v, 0.25), rtol=1e-5, atol=1e-5)


def _t(dtype, d, cuda=True):
    return SimpleNamespace(is_cuda=cuda, dtype=dtype, shape=(1, 1, 1, d))


@pytest.mark.parametrize(
    "dtype,dk,dv,cuda,native",
    [
        (torch.bfloat16, 128, 128, True, True),  # flash SDPA takes enable_gqa
        (torch.float16, 256, 256, True, True),
        (torch.float32, 128, 128, True, False),  # fp32 cache: math backend would repeat_interleave
        (torch.bfloat16, 576, 512, True, False),  # MLA latent 512 + 64 rope, V 512: no flash
        (torch.bfloat16, 320, 320, True, False),  # head dim over flash's 256
        (torch.float32, 576, 512, False, True),  # CPU: unchanged
    ],
)
def test_sdpa_gqa_native_decision(dtype, dk, dv, cuda, native):
    assert measure_attention.sdpa_gqa_native(_t(dtype, dk, cuda), _t(dtype, dk, cuda), _t(dtype, dv, cuda)) is native


def test_flash_view_is_a_view_of_the_cache():
    cache = torch.randn(2, 3, 10, 8)  # (B, H_kv, T, D)
    part = cache[:, :, :7, :]  # the n = 7 tokens a step reads
    x = measure_attention.flash_view(part)
    assert x.shape == (2, 7, 3, 8)  # (B, n, H_kv, D): flash_attn_func's k/v
    assert x.stride(-1) == 1  # flash_attn_func copies only when this is not 1
    assert x.data_ptr() == cache.data_ptr()  # no copy: the timing reads the cache itself
    torch.testing.assert_close(x[1, 4, 2], cache[1, 2, 4])


def test_l2_and_margin():
    # H100 SXM reports L2_cache_size = 50 MiB = 52,428,800 B; the table and 128 MiB are fallbacks
    assert measure_runner.l2_bytes(SimpleNamespace(L2_cache_size=52428800), 10) == 52428800
    assert measure_runner.l2_bytes(SimpleNamespace(), 60 * 2**20) == 60 * 2**20
    assert measure_runner.l2_bytes(SimpleNamespace(L2_cache_size=0), 0) == 128 * 2**20
    # 2% of an H200's 150,754,820,096 B (143,771 MiB) = 3,015,096,401 B > 1 GiB; an 8 GiB card: 1 GiB
    assert measure_runner.cuda_margin_bytes(143771 * 2**20) == 143771 * 2**20 // 50 == 3015096401
    assert measure_runner.cuda_margin_bytes(8 * GIB) == GIB


def test_check_fits_keeps_the_margin_free():
    spec = load_model(TINY_YAML)
    fp16 = kv_format("fp16")

    def make(batch=1, layers=None):
        return M.make_plan(spec, 64, batch, fp16, fp16, "cpu", layers)

    # one sequence: KV 64 x 256 B = 16,384 + scores/probs 2 x 4 heads x 64 x 4 B = 2,048 -> 18,432 B
    assert make(batch=1).needed_bytes == 18432
    M.check_fits(make(batch=8), 8 * 18432, "cpu", make)  # fits without a margin
    with pytest.raises(KvcalcError, match="largest --batch that fits is 7"):
        M.check_fits(make(batch=8), 8 * 18432, "cpu", make, margin_bytes=1)


def test_gpu_sweep_skips_what_cannot_fit_and_fits_the_budget():
    g = _gpu_check()
    fmt = kv_format("bf16")
    specs = [(load_model(n), layers) for n, layers in g.GPU_MODELS]
    free = 139 * GIB  # an H200 with its CUDA context
    points, skipped = g.select_points(
        specs,
        g.GPU_CONTEXTS,
        g.GPU_BATCHES,
        free,
        lambda s, T, B, layers: M.make_plan(s, T, B, fmt, fmt, "cuda", layers),
    )
    # llama-3.1-8b at 128k x 64: 32 layers x 2 x 8 heads x 128 x 2 B = 131,072 B/token
    # x 131,072 x 64 = 1,099,511,627,776 B = 1 TiB: skipped before any allocation
    assert "skip llama-3.1-8b T=131072 B=64: needs 1026.0 GiB, 139.0 GiB free" in skipped
    assert all(p[5] <= g.FIT_FRACTION * free for p in points)
    assert (specs[0][0], None, 131072, 1, 16 * GIB) == points[8][:5]  # 131,072 B x 131,072 = 16 GiB
    assert len(points) == 29 and len(skipped) == 7
    # KV bytes of the points, in units of 1,024 tokens (k) x batch: llama-3.1-8b (128 KiB/token)
    # 1k x 73 + 8k x 73 + 32k x 9 + 128k x 1 = 1,073k -> 137,344 MiB; qwen3-4b (36 layers, 144 KiB)
    # the same 1,073k -> 154,512 MiB; llama-3.1-70b at 8 layers (32 KiB) 1k x 73 + 8k x 73 +
    # 32k x 73 + 128k x 9 = 4,145k -> 132,640 MiB; sum 424,496 MiB = 445,116,317,696 B
    assert sum(p[4] for p in points) == 424496 * 2**20 == 445116317696
    # 29 points x 2 modes x 3 s overhead = 174 s, + 35 reads (5 warm-up + 30) x 2 modes at 4.8 TB/s
    est = g.estimate_s(points, 30, 2)
    assert est == pytest.approx(174 + 445116317696 * 70 / 4.8e12)
    assert est < 360  # under the whole check's budget (gpu_check_run.py TOTAL_BUDGET_S; the sweep gets what is left)


def test_gpu_check_survives_a_point_that_raises(monkeypatch, capsys):
    g = _gpu_check()
    monkeypatch.setenv("KVCALC_GPU_CHECK_CPU", "1")
    monkeypatch.setattr(g, "CPU_MODELS", [(TINY_YAML, None)])
    monkeypatch.setattr(g, "CPU_BATCHES", [1, 2])
    real = M.run

    def run(request, **k):
        if request.batch == 2 and request.seq_len == 64:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore text")
        return real(request, **k)

    monkeypatch.setattr(M, "run", run)
    assert g.main([]) == 1  # a failed point fails the check, and the sweep goes on
    out = capsys.readouterr().out
    assert out.count(" yes ") == 3
    assert "note: FAILED tiny-gqa T=64 B=2 eager: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n" in out
