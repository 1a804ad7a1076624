"""The refusals of `kvcalc/engines/vllm.py` and `sglang.py` as data: each error's field, value and
CLI line (`str(err)`), side by side (K, then V), since `kvcalc check` and the CLI render an error
from its field and value, never from its words.

Models: configs/models/llama-3.1-8b.yaml (32 layers, 8 KV heads x 128: a bf16 vLLM block of 16
tokens is 32 x 16 x 4,096 = 2,097,152 B) and qwen3-next-80b-a3b (Gated DeltaNet linear-attention
layers beside full attention ones: no KV cache in those layers).
"""

from __future__ import annotations

import pytest

from kvcalc.engines import sglang, vllm
from kvcalc.engines.vllm import VllmOptions
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

BF16, Q8, Q4 = kv_format("bf16"), kv_format("q8_0"), kv_format("q4_0")


@pytest.fixture(scope="module")
def llama():
    return load_model("llama-3.1-8b")


@pytest.fixture(scope="module")
def qwen_next():
    return load_model("qwen3-next-80b-a3b")


def refusal(fn, *args, **kwargs) -> KvcalcError:
    with pytest.raises(KvcalcError) as e:
        fn(*args, **kwargs)
    return e.value


#: SGLang 0.5.23 --kv-cache-dtype choices (srt/arg_groups/fields/model.py), as kvcalc formats
SGLANG_TYPES = "its pool stores auto, bf16, fp16, fp8_e4m3, fp8_e5m2, mxfp8, nvfp4, fp4_mx_block16"
#: vLLM 0.33's CacheDType (vllm/config/cache.py) and what kvcalc sizes of it
VLLM_TYPES = (
    "vLLM 0.33's --kv-cache-dtype takes auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, "
    "fp8_ds_mla, nvfp4_ds_mla, turboquant_k8v4, turboquant_4bit_nc, turboquant_k3v4_nc, turboquant_3bit_nc, "
    "octave_k3v4, octave_k3v3, octave_k3v3_compact, ultraquant_4bit, int4_per_token_head, "
    "int8_per_token_head, fp8_per_token_head, nvfp4, nvfp4_4over6 (vllm/config/cache.py CacheDType); "
    "kvcalc sizes auto, bfloat16, float16, fp8, fp8_e5m2, int8_per_token_head, fp8_per_token_head and "
    "nvfp4 (fp8_ds_mla as sparse MLA's fp8)"
)


@pytest.mark.parametrize(
    "k, v, field, name", [(Q8, BF16, "k_dtype", "q8_0"), (BF16, Q4, "v_dtype", "q4_0"), (Q4, Q8, "k_dtype", "q4_0")]
)
def test_sglang_block_formats_refused_per_side(k, v, field, name):
    e = refusal(sglang.check_dtypes, k, v)
    # the message names its own subject: no flag before it
    assert str(e) == f"SGLang 0.5.23 has no '{name}' KV cache dtype; {SGLANG_TYPES}"
    assert (e.field, e.value, e.option) == (field, name, "--" + field.replace("_", "-"))


@pytest.mark.parametrize("k, v, field, name", [(Q8, BF16, "k_dtype", "q8_0"), (BF16, Q4, "v_dtype", "q4_0")])
def test_vllm_block_formats_refused_per_side(llama, k, v, field, name):
    e = refusal(vllm.capacity, llama, 2**30, k, v)
    assert str(e) == f"vLLM 0.33 has no '{name}' KV cache dtype; {VLLM_TYPES}"
    assert (e.field, e.value) == (field, name)


def test_linear_attention_refused_by_model(qwen_next):
    # SGLang 0.5.23 sizes its MambaPool (tests/engines/test_sglang_mamba.py); the older rows refuse
    e = refusal(sglang.capacity, qwen_next, 2**30, BF16, BF16, version="0.5.16")
    assert str(e) == (
        "qwen3-next-80b-a3b has mamba / linear-attention layers: " + sglang.MAMBA_POOL + "; the SGLang profile models "
        "attention layers only; use --engine ideal"
    )
    assert (e.field, e.value) == ("model", "qwen3-next-80b-a3b")
    e = refusal(sglang.memory_for, qwen_next, 1000, 1, BF16, BF16, version="0.5.16")
    assert (e.field, e.value) == ("model", "qwen3-next-80b-a3b")
    # vLLM unifies the pages (tests/engines/test_vllm_hybrid.py) but needs its hybrid allocator
    e = refusal(vllm.rules().kv_cache_groups, qwen_next, False)
    assert str(e).startswith(
        "qwen3-next-80b-a3b has Mamba / linear-attention layers: vLLM refuses it without the hybrid KV cache manager"
    )
    assert (e.field, e.value) == ("hybrid_allocator", False)
    # vLLM 0.6.6's registry has no Qwen3-Next: refused with its text (tests/engines/test_vllm06_refusals.py);
    # Jamba it has, but V0 keeps the Mamba state outside the blocks: refused with the reason
    e = refusal(vllm.capacity, qwen_next, 2**30, BF16, BF16, options=VllmOptions(version="0.6"))
    assert "Model architectures ['Qwen3NextForCausalLM'] are not supported for now." in str(e)
    e = refusal(vllm.capacity, load_model("jamba-1.5-mini"), 2**30, BF16, BF16, options=VllmOptions(version="0.6"))
    assert str(e).startswith("jamba-1.5-mini: vLLM 0.6 (V0) keeps Mamba state outside the KV blocks")
    assert (e.field, e.value) == ("model", "jamba-1.5-mini")


def test_vllm_v0_no_block_names_the_budget(llama):
    # 1,000 B is less than one V0 block (2,097,152 B)
    e = refusal(vllm.capacity, llama, 1000, BF16, BF16, options=VllmOptions(version="0.6"))
    assert str(e) == (
        "vLLM would fail at start-up: 1,000 B holds no block of 2,097,152 B: No available memory for "
        "the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
    )
    assert (e.field, e.value) == ("kv_memory_bytes", 1000)
