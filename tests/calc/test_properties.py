"""Properties of the KV arithmetic (`kvcalc.calc.kv_cache`) over generated models and workloads.

Models: 1-8 layers; n_kv_heads 1-8 with n_heads a multiple of it; head_dim 1-256 (V head the
same or its own); optionally a sliding window over a repeating pattern; or MLA (a latent of
kv_lora_rank + qk_rope_head_dim). Runs derandomized (the "kvcalc" profile in tests/conftest.py),
100 examples each, no deadline.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.calc import kv_cache
from kvcalc.load.export import spec_to_yaml
from kvcalc.load.models import load_model
from kvcalc.schema import ModelSpec, Parallelism, Workload

#: element formats that fit any head size (block formats need whole blocks of 32)
DTYPES = ["bf16", "fp16", "fp32", "fp8", "fp8_e5m2", "int8"]
PROPS = settings(max_examples=100, deadline=None, derandomize=True)


@st.composite
def standard_models(draw, window: bool | None = None) -> ModelSpec:
    """A GQA / MQA / MHA model; `window` True forces a sliding window, False forbids one."""
    n_layers = draw(st.integers(1, 8))
    kv = draw(st.integers(1, 8))
    group = draw(st.integers(1, 4))
    kw: dict = dict(
        name="gen",
        n_layers=n_layers,
        n_heads=kv * group,
        n_kv_heads=kv,
        head_dim=draw(st.integers(1, 256)),
        dtype=draw(st.sampled_from(["bf16", "fp16", "fp32"])),
    )
    if draw(st.booleans()):
        kw["v_head_dim"] = draw(st.integers(1, 256))
    if window if window is not None else draw(st.booleans()):
        kw["sliding_window"] = draw(st.integers(1, 4096))
        if draw(st.booleans()):  # a local/global mix; else every layer slides
            # at most n_layers kinds: a longer pattern is refused (issue 12, item 8)
            kw["layer_pattern"] = draw(
                st.lists(st.sampled_from(["sliding", "full"]), min_size=1, max_size=min(6, n_layers))
            )
    return ModelSpec(**kw)


@st.composite
def mla_models(draw) -> ModelSpec:
    return ModelSpec(
        name="gen-mla",
        n_layers=draw(st.integers(1, 8)),
        n_heads=draw(st.integers(1, 16)),
        attention="mla",
        kv_lora_rank=draw(st.integers(1, 512)),
        qk_rope_head_dim=draw(st.integers(1, 64)),
    )


models = st.one_of(standard_models(), mla_models())
seq_lens = st.integers(1, 20_000)
batches = st.integers(1, 64)
dtypes = st.sampled_from(DTYPES)


def per_gpu(model: ModelSpec, seq_len: int, batch: int, dtype: str, tp: int = 1) -> int:
    est = kv_cache.estimate(
        model, Workload(seq_len=seq_len, batch=batch, k_dtype=dtype, v_dtype=dtype, parallel=Parallelism(tp=tp))
    )
    return est.kv_cache_bytes_per_gpu


@PROPS
@given(models, seq_lens, batches, dtypes)
def test_bytes_exactly_linear_in_batch(model, seq_len, batch, dtype):
    one = kv_cache.kv_cache_bytes(model, seq_len, 1, dtype)
    assert one > 0
    assert kv_cache.kv_cache_bytes(model, seq_len, batch, dtype) == batch * one
    assert kv_cache.kv_cache_bytes(model, seq_len, batch, dtype, window_aware=False) == batch * kv_cache.kv_cache_bytes(
        model, seq_len, 1, dtype, window_aware=False
    )


@PROPS
@given(models, seq_lens, st.integers(0, 5_000), batches, dtypes)
def test_monotone_non_decreasing_in_seq_len(model, seq_len, more, batch, dtype):
    assert kv_cache.kv_cache_bytes(model, seq_len, batch, dtype) <= kv_cache.kv_cache_bytes(
        model, seq_len + more, batch, dtype
    )
    # and one more token never adds more than kv_bytes_per_token per sequence
    grow = kv_cache.kv_cache_bytes(model, seq_len + 1, batch, dtype) - kv_cache.kv_cache_bytes(
        model, seq_len, batch, dtype
    )
    assert 0 <= grow <= batch * kv_cache.kv_bytes_per_token(model, dtype)


@PROPS
@given(standard_models(), seq_lens, batches, dtypes, st.data())
def test_tp_dividing_kv_heads_never_increases_per_gpu_bytes(model, seq_len, batch, dtype, data):
    kv = model.resolved_n_kv_heads
    tp = data.draw(st.sampled_from([d for d in range(1, kv + 1) if kv % d == 0]))
    one = per_gpu(model, seq_len, batch, dtype)
    split = per_gpu(model, seq_len, batch, dtype, tp)
    assert split <= one
    # heads split evenly: exactly a tp-th of the one-GPU cache
    assert split * tp == one


@PROPS
@given(mla_models(), seq_lens, batches, dtypes, st.data())
def test_mla_latent_is_replicated_under_tp(model, seq_len, batch, dtype, data):
    tp = data.draw(st.sampled_from([d for d in range(1, model.n_heads + 1) if model.n_heads % d == 0]))
    assert per_gpu(model, seq_len, batch, dtype, tp) == per_gpu(model, seq_len, batch, dtype)


@PROPS
@given(standard_models(window=True), seq_lens, batches, dtypes)
def test_a_window_never_increases_bytes(model, seq_len, batch, dtype):
    no_window = ModelSpec.model_validate({**model.model_dump(), "sliding_window": None, "layer_pattern": None})
    assert set(no_window.layer_kinds) == {"full"}
    windowed = kv_cache.kv_cache_bytes(model, seq_len, batch, dtype)
    plain = kv_cache.kv_cache_bytes(no_window, seq_len, batch, dtype)
    assert windowed <= plain
    # the no-window figure of the windowed model is the plain model's
    assert kv_cache.kv_cache_bytes(model, seq_len, batch, dtype, window_aware=False) == plain
    if model.sliding_window >= seq_len:  # a window no shorter than the context changes nothing
        assert windowed == plain
    elif "sliding" in model.layer_kinds:  # a sliding layer past its window saves exactly the overhang
        n_sliding = model.layer_kinds.count("sliding")
        per_layer = kv_cache.layer_kv_bytes_per_token(
            model.layers[model.layer_kinds.index("sliding")], *kv_cache.formats(dtype)
        )
        assert plain - windowed == n_sliding * per_layer * (seq_len - model.sliding_window) * batch > 0


@PROPS
@given(standard_models(window=True), st.integers(1, 4096), batches, dtypes)
def test_a_window_at_least_the_context_changes_nothing(model, seq_len, batch, dtype):
    wide = ModelSpec.model_validate({**model.model_dump(), "sliding_window": seq_len + model.sliding_window})
    no_window = ModelSpec.model_validate({**model.model_dump(), "sliding_window": None, "layer_pattern": None})
    assert kv_cache.kv_cache_bytes(wide, seq_len, batch, dtype) == kv_cache.kv_cache_bytes(
        no_window, seq_len, batch, dtype
    )


@PROPS
@given(models, seq_lens, batches, dtypes)
def test_import_then_estimate_equals_estimate(model, seq_len, batch, dtype):
    wl = Workload(seq_len=seq_len, batch=batch, k_dtype=dtype, v_dtype=dtype)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "m.yaml"
        p.write_text(spec_to_yaml(model))
        back = load_model(p)
    assert back.layer_kinds == model.layer_kinds
    assert kv_cache.estimate(back, wl) == kv_cache.estimate(model, wl)
