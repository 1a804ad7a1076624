"""kvcalc measure: exact bytes per format, attention against a float64 reference, positions,
the refusal path, the JSON contract, and the message without torch. CPU only; GPU tests are
marked `gpu` and skipped without CUDA.

Tiny configs are built here as ModelSpec (hand-made, not real models); the byte arithmetic is
in the comments. Formats: kvcalc/formats.py (llama.cpp blocks from ggml-common.h).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from attention_reference import float64_attention
from typer.testing import CliRunner

from kvcalc.calc import kv_cache
from kvcalc.cli import app
from kvcalc.formats import kv_format
from kvcalc.schema import ModelSpec

torch = pytest.importorskip("torch")
from kvcalc import measure as M  # noqa: E402
from kvcalc.measure import cache as measure_cache  # noqa: E402
from kvcalc.measure import runner as measure_runner  # noqa: E402  (run looks its helpers up here)
from kvcalc.measure import timing as measure_timing  # noqa: E402  (the time stage looks layer_step up here)

TINY_YAML = str(Path(__file__).parents[1] / "data" / "tiny-gqa.yaml")
TINY_MLA = str(Path(__file__).parents[1] / "data" / "tiny-mla.yaml")
runner = CliRunner()

#: B=3 sequences, 2 KV heads, T=8 tokens, head_dim 64: K and V of (3, 2, 8, 64) each.
BYTES_MODEL = ModelSpec(name="tiny-bytes", n_layers=1, n_heads=4, n_kv_heads=2, head_dim=64)


def _spec(n_heads: int, n_kv: int, d: int = 16, **kw) -> ModelSpec:
    return ModelSpec(name="t", n_layers=kw.pop("n_layers", 1), n_heads=n_heads, n_kv_heads=n_kv, head_dim=d, **kw)


# ----- bytes -------------------------------------------------------------------------------

# bytes of one 64-value row (one token, one head) in each format:
#   plain: 64 x bytes; int4 (g32, fp16 scale): 2 blocks x (16 + 2) = 36; int4:g64:fp32: 32 + 4 = 36;
#   int8:g32:fp16: 2 x (32 + 2) = 68; int8:g32:fp8_e4m3: 2 x 33 = 66; int4:g16:bf16: 4 x (8 + 2) = 40;
#   llama.cpp: q8_0 2 x 34 = 68, q4_0 2 x 18 = 36, q4_1 2 x 20 = 40, q5_0 2 x 22 = 44, q5_1 2 x 24 = 48,
#   iq4_nl 2 x 18 = 36.
ROW_BYTES = {
    "fp32": 256,
    "fp16": 128,
    "bf16": 128,
    "fp8_e4m3": 64,
    "fp8_e5m2": 64,
    "int8": 64,
    "int4": 36,
    "int4:g64:fp32": 36,
    "int8:g32:fp16": 68,
    "int8:g32:fp8_e4m3": 66,
    "int4:g16:bf16": 40,
    "q8_0": 68,
    "q4_0": 36,
    "q4_1": 40,
    "q5_0": 44,
    "q5_1": 48,
    "iq4_nl": 36,
}


@pytest.mark.parametrize("name", list(ROW_BYTES))
def test_storage_bytes_equal_engine_for_every_dtype(name):
    fmt = kv_format(name)
    plan = M.make_plan(BYTES_MODEL, 8, 3, fmt, fmt, "cpu")
    st = M.allocate_layer(BYTES_MODEL.layers[0], plan, "cpu")
    # K and V: 2 x B 3 x H_kv 2 x T 8 rows = 96 rows
    assert plan.predicted_kv_bytes == 96 * ROW_BYTES[name]
    assert st.nbytes == plan.predicted_kv_bytes
    assert st.nbytes == kv_cache.kv_cache_bytes(BYTES_MODEL, 8, 3, name)
    assert st.k.parts[0].shape[:3] == (3, 2, 8)  # (B, H_kv, T, ...)
    if name not in ("q5_0", "q5_1"):
        deq = st.k.dequant(8, torch.float32)
        assert deq.shape == (3, 2, 8, 64)
        assert torch.isfinite(deq).all() and (deq != 0).any()


def test_sliding_and_mla_layers_allocate_what_the_engine_predicts():
    # sliding window 4 at T = 10: K and V of (2, 2, 4, 16) fp16 = 2 x 2 x 2 x 4 x 16 x 2 B = 1024 B
    sl = _spec(4, 2, sliding_window=4)
    plan = M.make_plan(sl, 10, 2, kv_format("fp16"), kv_format("fp16"), "cpu")
    st = M.allocate_layer(sl.layers[0], plan, "cpu")
    assert st.k.parts[0].shape == (2, 2, 4, 16)
    assert st.nbytes == plan.predicted_kv_bytes == 1024
    # MLA latent 32 + 16 = 48 at T = 10, B = 2, bf16: (2, 10, 48) x 2 B = 1920 B (no V)
    mla = ModelSpec(name="m", n_layers=1, n_heads=4, attention="mla", kv_lora_rank=32, qk_rope_head_dim=16)
    plan = M.make_plan(mla, 10, 2, kv_format("bf16"), kv_format("bf16"), "cpu")
    st = M.allocate_layer(mla.layers[0], plan, "cpu")
    assert st.k.parts[0].shape == (2, 10, 48) and st.v is None
    assert st.nbytes == plan.predicted_kv_bytes == 1920


def test_fill_is_random_and_finite():
    for dt in (torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16, torch.int8, torch.uint8):
        t = torch.empty(4096, dtype=dt)
        measure_cache._fill(t)
        f = t.float()
        assert torch.isfinite(f).all()
        assert (f != 0).float().mean() > 0.9  # never zeros (a few random zeros are fine)


def test_int4_packing_low_nibble_first():
    # one row of 32 values, group 32, fp16 scale 0.5; byte 0x21 -> values (1 - 8, 2 - 8) x 0.5
    s = M.Store.empty(kv_format("int4"), (1,), 1, 32, "cpu")
    s.parts[0].fill_(0x21)
    s.parts[1].fill_(0.5)
    out = s.dequant(1, torch.float32)[0, 0]
    assert out[:4].tolist() == [-3.5, -3.0, -3.5, -3.0]


@pytest.mark.parametrize(
    "name,expect",
    [
        # q8_0: fp16 scale 0.25, int8 values 4 -> 1.0 each
        ("q8_0", 1.0),
        # q4_0: scale 0.25, every byte 0x9A: low nibble 10 -> (10 - 8) x 0.25 = 0.5 (values 0..15),
        # high nibble 9 -> 0.25 (values 16..31)
        ("q4_0", None),
    ],
)
def test_ggml_block_dequant(name, expect):
    s = M.Store.empty(kv_format(name), (1,), 1, 32, "cpu")
    blk = s.parts[0][0, 0]
    scale = torch.tensor([0.25], dtype=torch.float16).view(torch.uint8)
    blk[:2] = scale
    blk[2:] = 4 if name == "q8_0" else 0x9A
    out = s.dequant(1, torch.float32)[0, 0]
    if name == "q8_0":
        assert out.tolist() == [1.0] * 32
    else:
        assert out.tolist() == [0.5] * 16 + [0.25] * 16


# ----- attention against float64 ----------------------------------------------------------


@pytest.mark.parametrize("backend", ["sdpa", "matmul"])
@pytest.mark.parametrize("hq,hkv", [(4, 4), (8, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
def test_attention_matches_float64(backend, hq, hkv):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, hq, 16, generator=g)
    k = torch.randn(2, hkv, 9, 16, generator=g)
    v = torch.randn(2, hkv, 9, 12, generator=g)
    out = M.attend(q, k, v, 0.25, backend)
    assert out.shape == (2, hq, 12)
    torch.testing.assert_close(out.double(), float64_attention(q, k, v, 0.25), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["sdpa", "matmul"])
def test_mla_absorbed_attention_matches_float64(backend):
    # latent 24 = kv_lora_rank 16 + rope 8; output over the first 16 values
    mla = ModelSpec(
        name="m", n_layers=1, n_heads=4, attention="mla", kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8
    )
    plan = M.make_plan(mla, 6, 2, kv_format("fp32"), kv_format("fp32"), "cpu")
    st = M.allocate_layer(mla.layers[0], plan, "cpu")
    q = torch.randn(2, 4, 24)
    scale = M.attention_scale(mla)
    assert scale == 1 / math.sqrt(16)  # qk_nope 8 + rope 8
    out = M.layer_step(st, q, 5, scale, backend, torch.float32, 16)
    lat = st.k.parts[0]
    ref = float64_attention(q, lat.unsqueeze(1), lat[..., :16].unsqueeze(1), scale)
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["sdpa", "matmul"])
@pytest.mark.parametrize("window,pos,slot,n", [(None, 5, 5, 6), (4, 6, 2, 4), (4, 2, 2, 3)])
def test_step_writes_at_position_and_never_reads_past_it(backend, window, pos, slot, n):
    # full layer, T = 10: token 5 goes to slot 5, reads 6; sliding window 4 (ring of 4):
    # token 6 goes to slot 6 mod 4 = 2, reads all 4; token 2 goes to slot 2, reads 3.
    spec = _spec(4, 2, sliding_window=window) if window else _spec(4, 2)
    plan = M.make_plan(spec, 10, 1, kv_format("fp32"), kv_format("fp32"), "cpu")
    st = M.allocate_layer(spec.layers[0], plan, "cpu")
    assert M.slot_and_len(pos, st.cache_len) == (slot, n)
    k, v = st.k.parts[0], st.v.parts[0]
    k[:, :, n:] = float("nan")  # poison everything the step must not read
    v[:, :, n:] = float("nan")
    q = torch.randn(1, 4, 16)
    out = M.layer_step(st, q, pos, 0.25, backend, torch.float32)
    assert torch.equal(k[:, :, slot], st.k_row.parts[0][:, :, 0])
    assert torch.equal(v[:, :, slot], st.v_row.parts[0][:, :, 0])
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), float64_attention(q, k[:, :, :n], v[:, :, :n], 0.25), rtol=1e-5, atol=1e-5)


def test_pick_layers_spreads_over_kinds():
    # 12 layers of (5 sliding, 1 full) -> sliding 0-4, 6-10; full 5, 11
    m = _spec(4, 2, n_layers=12, sliding_window=8, layer_pattern=["sliding"] * 5 + ["full"])
    assert M.pick_layers(m, 2) == (0, 5)  # one of each kind
    assert M.pick_layers(m, 3) == (0, 1, 5)  # then the kind furthest below its share (10/12)
    assert M.pick_layers(m, None) == tuple(range(12))


# ----- the command -------------------------------------------------------------------------


def _scripted_step_times(monkeypatch, times_s: list[float]) -> list[int]:
    """Make the time stage's clock return `times_s` in order (each step still runs); returns the
    list the fake appends to once per timed call."""
    it = iter(times_s)
    calls: list[int] = []

    def fake(device, fn):
        fn()
        calls.append(len(calls))
        return next(it)

    monkeypatch.setattr(measure_timing, "time_call_s", fake)
    return calls


def test_cli_json_keys_and_exact_bytes(monkeypatch):
    # the clock scripted: 2 warm-up steps of 100 ms (never counted), then 3, 1, 2 ms
    calls = _scripted_step_times(monkeypatch, [0.1, 0.1, 3e-3, 1e-3, 2e-3])
    # tiny-gqa: 2 layers x 2 (K, V) x 2 KV heads x 16 x 2 B (fp16) x 64 tokens = 16,384 B
    r = runner.invoke(app, ["measure", TINY_YAML, "--device", "cpu", "--steps", "3", "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    for key in (
        "predicted_kv_bytes",
        "measured_kv_bytes",
        "predicted_step_s",
        "measured_step_s_median",
        "measured_step_s_p10",
        "measured_step_s_p90",
        "achieved_bytes_per_s",
        "probe_bytes_per_s",
        "backend",
        "device",
        "model_kv_bytes",
        "error_percent",
        "fraction_of_probe",
    ):
        assert key in d
    assert d["predicted_kv_bytes"] == d["measured_kv_bytes"] == d["model_kv_bytes"] == 16384
    assert d["kv_bytes_equal"] is True
    assert (d["device"], d["backend"], d["steps"]) == ("cpu", "sdpa", 3)
    assert d["table_gpu"] is None and d["predicted_step_s_table"] is None
    # 5 steps end at the last position: tokens 59..63, 2 warm-up then 3 timed at 61..63, which
    # read 62..64 tokens x 256 B/token: mean 63 x 256 = 16,128 B
    assert d["bytes_read_per_step"] == 63 * 256
    # timed 3, 1, 2 ms sorted [1, 2, 3]: median 2 ms; percentiles interpolate at index (n - 1) p / 100:
    # p10 at 0.2 -> 1 + 0.2 x (2 - 1) = 1.2 ms, p90 at 1.8 -> 2 + 0.8 x (3 - 2) = 2.8 ms (min/max: 1, 3)
    assert len(calls) == 5
    assert d["measured_step_s_median"] == pytest.approx(2e-3, rel=1e-12)
    assert d["measured_step_s_p10"] == pytest.approx(1.2e-3, rel=1e-12)
    assert d["measured_step_s_p90"] == pytest.approx(2.8e-3, rel=1e-12)
    assert d["model_step_s_median"] == pytest.approx(2e-3, rel=1e-12)  # every layer measured: scale 1
    # 16,128 B read / 2 ms = 8,064,000 B/s
    assert d["achieved_bytes_per_s"] == pytest.approx(8.064e6, rel=1e-12)
    assert d["rss_delta_bytes"] is not None and d["rss_delta_bytes"] >= 0


def test_cli_layers_scale_and_quantized_mla_with_weights():
    # tiny-mla: latent 64 values in int4 (g32, fp16 scale) = 2 x 18 = 36 B per token per layer;
    # one layer x 32 tokens = 1,152 B measured, 4 layers = 4,608 B for the model (scale x 4)
    r = runner.invoke(
        app,
        [
            "measure",
            TINY_MLA,
            "--device",
            "cpu",
            "--steps",
            "2",
            "--layers",
            "1",
            "--kv-dtype",
            "int4",
            "--backend",
            "matmul",
            "--with-weights",
            "--format",
            "json",
        ],
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["layers_measured"], d["backend"], d["compute_dtype"]) == (1, "matmul", "float32")
    assert d["predicted_kv_bytes"] == d["measured_kv_bytes"] == 1152
    assert d["model_kv_bytes"] == 4608
    # weights per layer, fp32: q 64 x 4 x 64 + down 64 x 64 + out 4 x 32 x 64 + MLP 64 x 256 + 128 x 64
    # = 16,384 + 4,096 + 8,192 + 16,384 + 8,192 = 53,248 values x 4 B = 212,992 B
    assert d["weight_bytes"] == 212992
    assert d["model_step_s_median"] == pytest.approx(4 * d["measured_step_s_median"])
    assert any("dequantized per layer" in n for n in d["notes"])
    assert any("--layers 1" in n for n in d["notes"])


def test_cli_refuses_what_does_not_fit(monkeypatch):
    # per sequence: KV 16,384 B + scores/probs 2 x 4 heads x 64 x 4 B = 2,048 B -> 18,432 B
    monkeypatch.setattr(measure_runner, "free_memory_bytes", lambda device: 5 * 18432 + 100)
    r = runner.invoke(app, ["measure", TINY_YAML, "--device", "cpu", "--batch", "8"])
    assert r.exit_code == 2
    assert "largest --batch that fits is 5" in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1
    # below one sequence: one layer at batch 1 needs 8,192 + 2,048 = 10,240 B
    monkeypatch.setattr(measure_runner, "free_memory_bytes", lambda device: 10250)
    r = runner.invoke(app, ["measure", TINY_YAML, "--device", "cpu"])
    assert r.exit_code == 2 and "largest --layers that fits at --batch 1 is 1" in r.output


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--kv-dtype", "q5_0"], "use kvcalc estimate for q5_0"),
        (["--device", "cpu", "--cuda-graph"], "--cuda-graph needs CUDA"),
        (["--backend", "flash"], "--backend flash needs CUDA"),
        (["--backend", "nope"], "unknown backend 'nope'"),
    ],
)
def test_cli_bad_options_are_one_line(args, msg):
    r = runner.invoke(app, ["measure", TINY_YAML, "--device", "cpu", *args])
    assert r.exit_code == 2, r.output
    assert msg in r.output and "Traceback" not in r.output


def test_without_torch_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    r = runner.invoke(app, ["measure", TINY_YAML, "--device", "cpu"])
    assert r.exit_code == 2
    assert r.output.strip() == "error: this needs torch: pip install 'kvcalc[measure]'"


def test_cli_table_and_no_half_report_on_error(monkeypatch):
    r = runner.invoke(app, ["measure", TINY_YAML, "--device", "cpu", "--steps", "2"])
    assert r.exit_code == 0, r.output
    assert "16,384 B (16.38 KB, 16.00 KiB): equal" in r.stdout and "device cpu" in r.stdout

    def boom(*a, **k):
        raise RuntimeError("step failed")

    monkeypatch.setattr(measure_timing, "layer_step", boom)
    r = runner.invoke(app, ["measure", TINY_YAML, "--device", "cpu", "--steps", "2"])
    assert r.exit_code == 1 and r.stdout == ""  # one error line on stderr, no report
    assert "step failed" in r.stderr


def test_gpu_check_cpu_smoke(monkeypatch, tmp_path, capsys):
    """benchmarks/gpu_check.py in its CPU smoke mode: every point's bytes equal, a file written."""
    import importlib.util

    path = Path(__file__).parents[2] / "benchmarks" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setenv("KVCALC_GPU_CHECK_CPU", "1")
    monkeypatch.setattr(mod, "CPU_MODELS", [(TINY_YAML, None)])
    monkeypatch.setattr(mod, "CPU_BATCHES", [1, 2])
    assert mod.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count(" yes ") == 4  # 2 contexts x 2 batches
    (written,) = tmp_path.glob("cpu-*.txt")
    assert "tiny-gqa" in written.read_text()


# ----- GPU ---------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
@pytest.mark.parametrize("dtype", ["bf16", "fp8", "int4", "q8_0"])
def test_gpu_allocator_bytes_equal(dtype):
    m = _spec(8, 2, d=128, n_layers=2)
    fmt = kv_format(dtype)
    r = M.run(M.MeasureRequest(model=m, seq_len=4096, batch=2, k_format=fmt, v_format=fmt, device="cuda", steps=30))
    assert r.measured_kv_bytes == r.predicted_kv_bytes
    assert r.allocator_requested_delta_bytes == r.predicted_kv_bytes
    assert r.allocator_allocated_delta_bytes == r.allocator_allocated_expected_bytes


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
@pytest.mark.parametrize("model", ["llama-3.1-8b", "deepseek-v2-lite", "gemma-3-4b"])  # GQA, MLA, sliding + global
def test_gpu_bundled_models_bytes_equal(model):
    """The models benchmarks/gpu_check.sh measures, two layers each: the engine's prediction is
    the tensors' storage, what the allocator was asked for, and its 512 B-rounded total."""
    from kvcalc.load.models import load_model

    fmt = kv_format("bf16")
    r = M.run(
        M.MeasureRequest(
            model=load_model(model), seq_len=4096, batch=2, k_format=fmt, v_format=fmt, device="cuda", layers=2
        )
    )
    assert r.measured_kv_bytes == r.predicted_kv_bytes
    assert r.allocator_requested_delta_bytes == r.predicted_kv_bytes
    assert r.allocator_allocated_delta_bytes == r.allocator_allocated_expected_bytes
