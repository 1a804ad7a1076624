"""Gated DeltaNet (Qwen3-Next) on an AMD GPU in vLLM 0.33: the prefill backend ROCm picks.

Source: vLLM 0.33.0 `model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py`
`_resolve_gdn_prefill_backend`: on ROCm ('auto') AITER FlyDSL on MI300 / MI350 with bf16 and linear
head dims 128 / 128 when AITER exports it, else Triton/FLA; FlashInfer only on CUDA. Only a
FlashInfer prefill sets `_checkpoint_alignment` (64) and `num_prefill_checkpoint_blocks=1`
(`QwenGatedDeltaNet.get_kv_cache_spec`), so on ROCm 'align' mode keeps 2 Mamba pages per request
and `Platform._align_hybrid_block_size` aligns to the kernel block, 16 (ROCM_ATTN 16/32,
ROCM_AITER_FA 16/32, TRITON_ATTN multiples of 16).
"""

from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engines import vllm
from kvcalc.engines.vllm import VllmOptions
from kvcalc.engines.vllm.v0_33 import gdn_flashinfer_prefill
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

GiB = 2**30
BF16 = kv_format("bf16")


def test_amd_gdn_prefill_is_not_flashinfer_and_says_so():
    m = load_model("qwen3-next-80b-a3b")
    assert gdn_flashinfer_prefill(m, "9.0") and not gdn_flashinfer_prefill(m, "9.0", "amd")
    r = vllm.capacity(m, 40 * GiB, BF16, BF16, max_model_len=32768, options=VllmOptions(version="0.33", vendor="amd"))
    # alignment 16 (no 64-token checkpoint): 16 x cdiv(1,097,728, 16 x 2,048 = 32,768) = 16 x 34 = 544
    # tokens; 12 layers per group x 544 x 2,048 B = 13,369,344 B per block;
    # 42,949,672,960 // 13,369,344 = 3,212 blocks
    assert r.block_size == 544 and r.page_size_bytes == 13_369_344 and r.num_gpu_blocks == 3212
    # a request: cdiv(32,768, 544) = 61 attention pages + 3 Mamba groups x 2 pages (no checkpoint) = 67
    assert r.max_concurrency == 3212 / 67  # 47.94x
    assert not any("Hopper" in n or "no GPU given" in n or "FlashInfer (compute" in n for n in r.notes)
    assert any(n.startswith("Gated DeltaNet prefill on ROCm: AITER FlyDSL or Triton/FLA") for n in r.notes)
    assert any("(ROCM_ATTN / ROCM_AITER_FA / TRITON_ATTN)" in n for n in r.notes)
    # no vendor and no compute capability: Hopper assumed (FlashInfer, 576 tokens), and said
    h = vllm.capacity(m, 40 * GiB, BF16, BF16, max_model_len=32768, options=VllmOptions(version="0.33"))
    assert h.block_size == 576 and any("no GPU given" in n for n in h.notes)


def test_capacity_on_mi300x_names_rocm_not_hopper():
    out = CliRunner().invoke(
        app,
        [
            "capacity",
            "qwen3-next-80b-a3b",
            "--engine",
            "vllm",
            "--gpu",
            "mi300x",
            "--kv-memory",
            "40GiB",
            "-L",
            "32768",
            "--format",
            "json",
        ],
    )
    assert out.exit_code == 0, out.output
    assert "no GPU given" not in out.output and "Hopper" not in out.output
    assert "Gated DeltaNet prefill on ROCm" in out.output
    assert '"block_size": 544' in out.output


def test_plan_on_mi300x_names_rocm_not_hopper():
    out = CliRunner().invoke(
        app,
        [
            "plan",
            "qwen3-next-80b-a3b",
            "--gpu",
            "mi300x",
            "--seq-len",
            "32k",
            "--concurrency",
            "8",
            "--max-gpus",
            "1",
            "--kv-dtype",
            "bf16",
            "--format",
            "json",
        ],
    )
    assert out.exit_code == 0, out.output
    assert "no GPU given" not in out.output and "Hopper" not in out.output
    assert "vllm on mi300x: Gated DeltaNet prefill on ROCm: AITER FlyDSL or Triton/FLA" in out.output
    assert "2 Mamba pages per request" in out.output
