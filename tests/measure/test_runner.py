"""The stages of `kvcalc.measure.run` with exact numbers: the spread of known step times, the
comparison (bytes read, predicted, error, the whole-model scale), the workspace of a sliding
layer, the MLA latent's widths at the attention call, the request (torch-free, validated once),
and `Resources` freeing every tensor before the CUDA allocator is emptied. CPU only.

Models are hand-made ModelSpecs (not real models); the arithmetic is in the comments.
"""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
import weakref

import pytest
from pydantic import ValidationError

from kvcalc.formats import kv_format
from kvcalc.schema import ModelSpec

torch = pytest.importorskip("torch")
from kvcalc import measure as M  # noqa: E402
from kvcalc.measure import attention as measure_attention  # noqa: E402
from kvcalc.measure import device as measure_device  # noqa: E402
from kvcalc.measure import runner as measure_runner  # noqa: E402
from kvcalc.measure.timing import Probe, Timing  # noqa: E402

FP16 = kv_format("fp16")
#: 4 layers alternating sliding (window 8) and full; 2 KV heads x 16 x 2 B x 2 (K, V) = 128 B per
#: token per layer. At T = 32: a full layer 32 x 128 = 4,096 B, a sliding one 8 x 128 = 1,024 B;
#: the model 2 x 4,096 + 2 x 1,024 = 10,240 B.
MIX = ModelSpec(
    name="mix", n_layers=4, n_heads=4, n_kv_heads=2, head_dim=16, sliding_window=8, layer_pattern=["sliding", "full"]
)
#: ten timed steps, in ms, out of order
TEN_STEPS_S = [t * 1e-3 for t in (5, 1, 9, 3, 7, 2, 10, 4, 8, 6)]


def _request(**kw) -> M.MeasureRequest:
    base = dict(model=MIX, seq_len=32, batch=1, k_format=FP16, v_format=FP16, device="cpu")
    return M.MeasureRequest(**{**base, **kw})


def test_spread_of_ten_known_step_times():
    # sorted: 1, 2, ..., 10 ms. The percentile interpolates linearly at index i = (n - 1) p / 100:
    # p10: i = 9 x 0.10 = 0.9 -> s[0] + 0.9 (s[1] - s[0]) = 1 + 0.9 = 1.9 ms
    # p90: i = 9 x 0.90 = 8.1 -> s[8] + 0.1 (s[9] - s[8]) = 9 + 0.1 = 9.1 ms
    # median (p50): i = 4.5 -> (5 + 6) / 2 = 5.5 ms. min / max would be 1 / 10 ms.
    assert measure_device._pct(TEN_STEPS_S, 10) == pytest.approx(1.9e-3, rel=1e-12)
    assert measure_device._pct(TEN_STEPS_S, 90) == pytest.approx(9.1e-3, rel=1e-12)
    assert measure_device._pct(TEN_STEPS_S, 50) == pytest.approx(5.5e-3, rel=1e-12)
    assert statistics.median(TEN_STEPS_S) == pytest.approx(5.5e-3, rel=1e-12)
    assert measure_device._pct([4e-3], 90) == 4e-3  # one sample is every percentile


def test_compare_ten_steps_one_sliding_layer_of_four():
    # --layers 1 of MIX picks layer 0 (sliding; the first of the first kind): 1,024 B at T = 32
    rp = measure_runner.plan(_request(layers=1, steps=10))
    assert rp.sizing.layer_indices == (0,) and rp.warmup == 2
    assert (rp.sizing.predicted_kv_bytes, rp.sizing.model_kv_bytes) == (1024, 10240)
    # 12 steps end at token 31: 20..31, the 10 timed at 22..31 read 23..32 tokens; a window of 8
    # keeps 8 of them: 8 x 128 = 1,024 B every step
    timing = Timing(positions=list(range(22, 32)), times_s=TEN_STEPS_S)
    alloc = measure_runner.Allocation(1024, None, None, None, None, None, 0, 0)
    # a probe of 204,800 B/s reads 1,024 B in 5 ms
    res = measure_runner.compare(rp, Probe(2**20, 204800.0), alloc, timing)
    assert (res.bytes_read_per_step, res.measured_kv_bytes, res.kv_bytes_equal) == (1024, 1024, True)
    assert (res.steps, res.warmup_steps, res.layers_measured, res.layer_indices) == (10, 2, 1, [0])
    assert res.measured_step_s_median == pytest.approx(5.5e-3, rel=1e-12)
    assert res.measured_step_s_p10 == pytest.approx(1.9e-3, rel=1e-12)
    assert res.measured_step_s_p90 == pytest.approx(9.1e-3, rel=1e-12)
    assert res.predicted_step_s == pytest.approx(5e-3, rel=1e-12)
    # 100 x (5 - 5.5) / 5.5 = -100/11 %; achieved 1,024 B / 5.5 ms = 186,181.8 B/s = 10/11 of the probe
    assert res.error_percent == pytest.approx(-100 / 11, rel=1e-12)
    assert res.achieved_bytes_per_s == pytest.approx(1024 / 5.5e-3, rel=1e-12)
    assert res.fraction_of_probe == pytest.approx(10 / 11, rel=1e-12)
    # whole model: scaled by KV bytes 10,240 / 1,024 = 10 -> 55 ms (by layers, 4 / 1, it would be 22 ms)
    assert res.model_step_s_median == pytest.approx(55e-3, rel=1e-12)
    assert res.predicted_step_s_table is None and res.error_percent_table is None


def test_run_counts_only_timed_steps_and_scales_by_kv_bytes(monkeypatch):
    # the whole run on the CPU, its clock scripted: 2 warm-up steps of 1 s, then the ten steps
    clock = iter([1.0, 1.0, *TEN_STEPS_S])
    monkeypatch.setattr("kvcalc.measure.timing.time_call_s", lambda device, fn: (fn(), next(clock))[1])
    monkeypatch.setattr("kvcalc.measure.timing.probe_bandwidth", lambda device, free, progress: (2**20, 204800.0))
    res = M.run(_request(layers=1, steps=10))
    assert res.measured_step_s_median == pytest.approx(5.5e-3, rel=1e-12)
    assert res.measured_step_s_p10 == pytest.approx(1.9e-3, rel=1e-12)
    assert res.measured_step_s_p90 == pytest.approx(9.1e-3, rel=1e-12)
    assert res.model_step_s_median == pytest.approx(55e-3, rel=1e-12)  # as above: x 10
    assert res.error_percent == pytest.approx(-100 / 11, rel=1e-12)
    assert (res.measured_kv_bytes, res.bytes_read_per_step, res.probe_bytes) == (1024, 1024, 2**20)


@pytest.mark.parametrize(
    "layers,kv_dtype,workspace",
    [
        # scores and probabilities, fp32: 2 x B 1 x H_q 4 x T' x 4 B, T' the longest cached length:
        # one sliding layer, T' = window 8 -> 256 B
        (1, "fp16", 2 * 4 * 8 * 4),
        # a full layer too: T' = 32 -> 1,024 B
        (2, "fp16", 2 * 4 * 32 * 4),
        # int8 is dequantized (fp32 on the CPU), + one layer's K and V: B 1 x H_kv 2 x T' 8 x (16 + 16) x 4 B
        (1, "int8", 2 * 4 * 8 * 4 + 2 * 8 * 32 * 4),
    ],
)
def test_plan_workspace_uses_the_window(layers, kv_dtype, workspace):
    fmt = kv_format(kv_dtype)
    p = M.make_plan(MIX, 32, 1, fmt, fmt, "cpu", layers)
    assert p.workspace_bytes == workspace
    assert p.needed_bytes == p.predicted_kv_bytes + workspace


def test_mla_step_reads_the_latent_as_k_and_its_first_rank_values_as_v(monkeypatch):
    # MLA, kv_lora_rank 32 + rope 16 = a latent of 48 values per token (fp32: 192 B); T = 10, B = 2:
    # (2, 10, 48) x 4 B = 3,840 B. Each step: q (B, H_q 4, 48) against K = the latent (B, 1, n, 48)
    # and V = its first 32 values (B, 1, n, 32); scale 1 / sqrt(qk_nope 8 + rope 16) = 1 / sqrt(24)
    mla = ModelSpec(
        name="m", n_layers=1, n_heads=4, attention="mla", kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=8
    )
    seen = []
    real = measure_attention.attend

    def spy(q, k, v, scale, backend):
        seen.append((tuple(q.shape), tuple(k.shape), tuple(v.shape), scale))
        return real(q, k, v, scale, backend)

    monkeypatch.setattr(measure_attention, "attend", spy)
    fp32 = kv_format("fp32")
    res = M.run(
        M.MeasureRequest(
            model=mla, seq_len=10, batch=2, k_format=fp32, v_format=fp32, device="cpu", steps=1, backend="matmul"
        )
    )
    assert res.measured_kv_bytes == res.predicted_kv_bytes == 3840
    # 3 steps (2 warm-up) end at token 9: 7, 8, 9 read 8, 9, 10 tokens
    assert seen == [((2, 4, 48), (2, 1, n, 48), (2, 1, n, 32), 1 / math.sqrt(24)) for n in (8, 9, 10)]


def test_request_is_torch_free_and_validated():
    code = (
        "import sys\nfrom kvcalc.measure.request import MeasureRequest\nimport kvcalc.measure\n"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    with pytest.raises(ValidationError):
        _request(batch=0)
    with pytest.raises(ValidationError):
        _request(steps=0)
    with pytest.raises(ValidationError):
        _request(kv_dtype="fp16")  # extra fields are refused
    r = _request()
    with pytest.raises(ValidationError):
        r.batch = 2  # frozen
    assert (r.layers, r.steps, r.backend, r.with_weights, r.cuda_graph) == (None, None, "auto", False, False)


def _layer_tensors(res: measure_runner.Resources) -> list[weakref.ref]:
    """Fill `res` as the stages do (one layer's cache with weights, the step inputs, a step
    function closing over `res`) and return weak references to every tensor in it."""
    plan = M.make_plan(MIX, 8, 1, FP16, FP16, "cpu")
    st = M.allocate_layer(MIX.layers[0], plan, "cpu")
    st.weights = [torch.zeros(4, 4)]
    res.states.append(st)
    res.tensors.update(q=torch.zeros(1, 4, 16), x=torch.zeros(1, 1))
    res.step = lambda pos: res.states and res.tensors
    parts = [*st.tensors(), *st.k_row.parts, *st.v_row.parts, *st.weights, *res.tensors.values()]
    return [weakref.ref(t) for t in parts]


@pytest.mark.parametrize("fail", [False, True], ids=["returns", "raises"])
def test_resources_free_every_tensor_before_emptying_the_cuda_cache(monkeypatch, fail):
    # device "cuda" with CPU tensors and a fake empty_cache that records what was still alive
    alive_at_empty: list[list[bool]] = []
    refs: list[weakref.ref] = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: alive_at_empty.append([r() is not None for r in refs]))
    try:
        with measure_runner.Resources("cuda") as res:
            refs += _layer_tensors(res)
            assert len(refs) == 2 + 2 + 1 + 2 and all(r() is not None for r in refs)  # K, V, rows, weight, q, x
            if fail:
                raise KeyboardInterrupt
    except KeyboardInterrupt:
        assert fail
    assert alive_at_empty == [[False] * 7]  # emptied once, after every reference was dropped
    assert res.graph is None and res.step is None


def test_run_leaves_no_tensor_behind(monkeypatch):
    # every cache tensor run allocated is freed by the time it returns (no gc needed: no cycles)
    refs: list[weakref.ref] = []
    real = measure_runner.allocate_layer

    def spy(*a, **k):
        st = real(*a, **k)
        refs.extend(weakref.ref(t) for t in [*st.tensors(), *st.k_row.parts, *st.v_row.parts])
        return st

    monkeypatch.setattr(measure_runner, "allocate_layer", spy)
    M.run(_request(steps=1, with_weights=False))
    assert len(refs) == 4 * 4 and all(r() is None for r in refs)  # 4 layers x K, V, K row, V row
