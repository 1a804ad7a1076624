"""Storage formats travel as objects (issue 23, item 2): a format name is parsed where the request
is built, once, and everything below it (`Workload`, `memory_plan.Layout`, the plan's (K, V) pair,
`LaunchSpec`, the weight counts, the engine profiles) holds the `StorageFormat`; the name is used
for output only.

Counted by wrapping `formats.canonical_name` (every name lookup, alias or not, goes through it).
Before the change, `estimate llama-3.1-8b --gpu h100-sxm` parsed 11 names (K and V twice more in
`kv_cache.formats`, the weight format four times in `calc/weights.py`) and `plan llama-3.1-8b
-s 8k --concurrency 4 --gpu h100-sxm --engine vllm` 736 (240 KV, 480 weight, 16 in `vllm/plan.py`).
"""

from collections import Counter

import pytest

import kvcalc.formats as formats
from kvcalc.formats import StorageFormat


@pytest.fixture
def parses(monkeypatch) -> Counter:
    """name -> how many times it was parsed while the test ran."""
    seen: Counter = Counter()
    real = formats.canonical_name

    def counting(name, **kwargs):
        seen[name] += 1
        return real(name, **kwargs)

    monkeypatch.setattr(formats, "canonical_name", counting)
    return seen


# (command, the most parses): what the builder parses and nothing else
#  - estimate: the model file's dtype validator (bf16; 0 when the bundled model is already
#    loaded), the model's dtype once per model (`ModelSpec.dtype_format`: the builder's K and V,
#    `requests.kv_formats`, and the weight count's) = 2
#  - plan --engine vllm: the model file (<= 1), the KV list vLLM plans (fp8_e4m3 and bf16, one
#    parse each), the weight list (fp8_e4m3: 1), the model's dtype once (1) = 5
CASES = [
    (["estimate", "llama-3.1-8b", "--gpu", "h100-sxm"], 2),
    (["plan", "llama-3.1-8b", "-s", "8k", "--concurrency", "4", "--gpu", "h100-sxm", "--engine", "vllm"], 5),
]


@pytest.mark.parametrize(("args", "most"), CASES, ids=["estimate", "plan"])
def test_a_command_parses_each_format_name_once_in_its_builder(cli, parses, args, most):
    r = cli(*args)
    assert r.exit_code == 0, r.output
    total = sum(parses.values())
    assert total <= most, f"{total} parses: {dict(parses)}"
    assert total >= most - 1  # the builder's own parses are still counted (the counter works)


def test_the_workload_holds_formats_and_writes_their_names():
    from kvcalc.schema import Workload

    wl = Workload(seq_len=8, k_dtype="fp8", v_dtype="bf16")  # the Python API's text, looked up here
    assert isinstance(wl.k_dtype, StorageFormat) and wl.k_dtype.name == "fp8_e4m3"
    assert wl.model_dump()["k_dtype"] == "fp8_e4m3"
    assert wl.model_dump(mode="json")["v_dtype"] == "bf16"
    assert Workload(seq_len=8, k_dtype=wl.k_dtype, v_dtype=wl.v_dtype).k_dtype is wl.k_dtype  # not re-parsed


def test_a_layout_and_a_launch_spec_given_names_hold_formats(gqa_spec):
    from kvcalc.calc.memory_plan import Layout
    from kvcalc.engines.launch import LaunchSpec

    lay = Layout(k_dtype="fp8", v_dtype="q8_0", weight_dtype="int4")
    assert (lay.k_dtype.name, lay.v_dtype.name, lay.weight_dtype.name) == ("fp8_e4m3", "q8_0", "int4")
    spec = LaunchSpec(gqa_spec, 1, 1, 1, 1, 4096, 8, "fp16", "fp16", None, 0.9)
    assert isinstance(spec.k_dtype, StorageFormat) and spec.weight_dtype is None


def test_the_python_api_still_takes_format_names(parses):
    import kvcalc

    est = kvcalc.estimate("llama-3.1-8b", seq_len=8192, kv_dtype="fp8")
    # 32 layers x 8 KV heads x 128 x (K + V) x 1 B (fp8) = 65,536 B per token; x 8,192 tokens
    assert est.kv_cache_bytes == 32 * 8 * 128 * 2 * 8192
    assert est.kv_dtype == "fp8_e4m3"
    assert parses["fp8"] == 1  # K and V, one format, in the builder
