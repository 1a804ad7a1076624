"""SGLang 0.5.23's fp4 and mxfp8 KV pools (`kvcalc/engines/sglang.py` `fp4_extras`, `RULES`).

Sources (sglang==0.5.23 wheel): srt/model_executor/pool_configurator.py `_compute_cell_size`
(MHA: `quant_method.compute_cell_size(n, head_dim, layers, kv_size)`; MLA fp4: cell // 2 +
(kv_lora_rank + qk_rope_head_dim) // 16 x layers; mxfp8: + n x (head_dim + v_head_dim) x layers
// 32); srt/layers/quantization/fp4_kv_cache_quant_method.py `NVFP4KVCacheMethod.compute_cell_size`
(fp4 = heads x head_dim / 2 x layers x 2; scales = heads x head_dim / 16 x layers x 2 per scale
layout; dequant workspace heads x head_dim x 2 x 1 B fp8 once), `FP4MXBlock16KVCacheMethod`;
srt/arg_groups/kv_cache_hook.py `handle_kv4_compatibility` ("--kv-cache-dtype=nvfp4 requires
Blackwell SM100 or SM120"), `handle_nvfp4_prefill_kv_dequant_dtype` (auto: native nvfp4 prefill
on SM100, an fp8_e4m3 workspace on flashinfer elsewhere), `handle_mxfp8_kv_cache_compatibility`.
Llama-3.1-8B: meta-llama/Llama-3.1-8B config.json (32 layers, 8 KV heads, head_dim 128).
"""

from __future__ import annotations

import pytest

from kvcalc.engines import sglang
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

NVFP4, MX16, MXFP8, FP8 = kv_format("nvfp4"), kv_format("fp4_mx_block16"), kv_format("mxfp8"), kv_format("fp8")
GiB = 2**30
B200 = sglang.PoolTarget(compute_capability="10.0")
RTX5090 = sglang.PoolTarget(compute_capability="12.0")
H100 = sglang.PoolTarget(compute_capability="9.0")


def llama():
    return load_model("llama-3.1-8b")


@pytest.mark.parametrize(
    "fmt, target, cell",
    [
        # SM100 native: fp4 8 x 64 x 32 x 2 = 32,768 + one scale layout 8 x 8 x 32 x 2 = 4,096 = 36,864
        (NVFP4, B200, 36_864),
        # SM120: fp8 prefill workspace + linear scales: 36,864 + 8 x 128 x 2 x 1 = 2,048 -> 38,912
        (NVFP4, RTX5090, 38_912),
        # fp4_mx_block16: one 1-byte scale per 16 values, no workspace: 36,864 on any GPU
        (MX16, H100, 36_864),
        (MX16, sglang.PoolTarget(), 36_864),
        # mxfp8: 8 x 256 x 32 = 65,536 + 65,536 // 32 = 2,048 -> 67,584 (= 32 x 8 x 2 x 128 x 33 / 32)
        (MXFP8, B200, 67_584),
    ],
)
def test_fp4_cells(fmt, target, cell):
    r = sglang.capacity(llama(), 10 * GiB, fmt, fmt, target=target)
    assert r.page_size_bytes == cell
    # 10 GiB = 10,737,418,240 B // cell, page 1
    assert r.kv_cache_tokens == 10 * GiB // cell
    assert r.engine_version == "SGLang 0.5.23"


def test_fp4_tokens_and_notes():
    # 10,737,418,240 // 36,864 = 291,271 tokens; // 38,912 = 275,941
    assert sglang.capacity(llama(), 10 * GiB, NVFP4, NVFP4, target=B200).kv_cache_tokens == 291_271
    r = sglang.capacity(llama(), 10 * GiB, NVFP4, NVFP4, target=RTX5090)
    assert r.kv_cache_tokens == 275_941
    assert (
        "nvfp4 on SM120: FP8 prefill from a dequant workspace (flashinfer) of 2,048 B a token, counted in the cell"
    ) in r.notes
    # memory_for: 4 x 1,000 tokens x 38,912 = 155,648,000 B
    assert sglang.memory_for(llama(), 1000, 4, NVFP4, NVFP4, target=RTX5090) == 155_648_000


def test_fp4_mla_cell():
    # DeepSeek-V3 (61 MLA layers, 512 + 64): 576 x 61 // 2 + 576 // 16 x 61 = 17,568 + 2,196 = 19,764 B,
    # = 61 x 576 / 16 x 9 with the format; no workspace on MLA, so no --gpu needed
    v3 = load_model("deepseek-v3")
    assert sglang.cell_size_bytes(v3, NVFP4, NVFP4) == 19_764
    assert sglang.capacity(v3, GiB, NVFP4, NVFP4).page_size_bytes == 19_764


@pytest.mark.parametrize(
    "fmt, target, message",
    [
        (
            NVFP4,
            H100,
            "SGLang 0.5.23: --kv-cache-dtype=nvfp4 requires Blackwell SM100 or SM120, not compute capability 9.0; "
            "use fp4_mx_block16 (or bf16, fp8_e4m3, fp8_e5m2)",
        ),
        (
            NVFP4,
            sglang.PoolTarget(),
            "SGLang 0.5.23: --kv-cache-dtype nvfp4 sizes its pool by the GPU (SM100: native "
            "layout; SM120: + an fp8 prefill workspace): give --gpu (b200, b300, gb200, rtx-5090, ...)",
        ),
        (
            MXFP8,
            H100,
            "SGLang 0.5.23: --kv-cache-dtype mxfp8 requires an SM100+ (Blackwell) GPU for the block-scaled "
            "operands used by the FA4 MXFP8 attention path (compute capability 9.0)",
        ),
    ],
)
def test_fp4_refusals_name_the_version(fmt, target, message):
    with pytest.raises(KvcalcError) as e:
        sglang.capacity(llama(), GiB, fmt, fmt, target=target)
    assert str(e.value) == message


@pytest.mark.parametrize(
    "version, label", [("0.5.16", "SGLang 0.5.16 (PR #11309 to 0.5.16)"), ("legacy", "SGLang 0.5.x before PR #11309")]
)
def test_older_versions_refuse_fp4_naming_what_they_store(version, label):
    # kvcalc models the fp4 pools of 0.5.23 only; the older lines store the plain dtypes
    with pytest.raises(KvcalcError) as e:
        sglang.capacity(llama(), GiB, NVFP4, NVFP4, version=version, target=B200)
    assert (
        str(e.value) == f"{label} has no 'nvfp4' KV cache dtype; its pool stores auto, bf16, fp16, fp8_e4m3, fp8_e5m2"
    )
    assert e.value.field == "k_dtype"


def test_fp4_through_the_cli(cli):
    # --gpu b200 with --kv-memory: the SM100 cell 36,864 B; 10 GiB -> 291,271 tokens
    r = cli(
        "capacity",
        "llama-3.1-8b",
        "--engine",
        "sglang",
        "--kv-dtype",
        "nvfp4",
        "-m",
        "10GiB",
        "--gpu",
        "b200",
        "-f",
        "json",
    )
    assert r.exit_code == 0, r.output
    import json

    assert json.loads(r.output)["kv_cache_tokens"] == 291_271
    r = cli("capacity", "llama-3.1-8b", "--engine", "sglang", "--kv-dtype", "nvfp4", "-m", "10GiB", "--gpu", "h100-sxm")
    assert r.exit_code == 2 and "requires Blackwell SM100 or SM120" in r.output
