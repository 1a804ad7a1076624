"""vLLM 0.33 on Blackwell (SM10x, `--gpu b200`) for the sparse-MLA models, read from vLLM 0.33.0's
source (`pip download vllm==0.33.0`):

- `vllm/platforms/cuda.py` `_get_backend_priorities` (use_mla, major 10): a quantized cache tries
  FLASHINFER_MLA_SPARSE first, then FLASHMLA_SPARSE; a 16-bit one FLASH_ATTN_MLA_SPARSE_FA4 when a
  rank has 16 query heads or fewer, else FLASHMLA_SPARSE.
- `v1/attention/backends/mla/flashinfer_mla_sparse.py` FlashInferMLASparseTRTLLMBackend: fp8 /
  fp8_e4m3 rows stored plain (576 B a token), fp8_ds_mla refused ("SM10 does not support
  fp8_ds_mla"), qk_nope_head_dim 128 or 192; kernel blocks a multiple of 32, the indexer's 64:
  block 64 (`Platform._preferred_block_size_for_backends`, the lcm).
- `model_executor/models/config.py` GlmMoeDsaForCausalLM: auto becomes fp8_e4m3 on SM10x.
- `models/deepseek_v4/nvidia/model.py` `_select_dsv4_attn_cls`: FlashMLA on every CUDA arch but SM12x,
  so DeepSeek-V4 sizes as on Hopper.

Each figure: 50 GiB of KV memory per rank at tp 8 (53,687,091,200 B); blocks = memory // bytes a
block; tokens = blocks x 64.
"""

import json

import pytest

MEM = "50GiB"

# (model, gpu, --kv-dtype or None, bytes a block, blocks, the backend the note names)
CASES = [
    # DeepSeek-V3.2 fp8 on B200: FLASHINFER_MLA_SPARSE, 61 x 64 x (576 + 132) = 2,764,032 B a block;
    # 53,687,091,200 // 2,764,032 = 19,423 blocks (Hopper: fp8_ds_mla 656 B, 61 x 64 x 788 = 3,076,352)
    ("deepseek-v3.2", "b200", "fp8", 2_764_032, 19_423, "FLASHINFER_MLA_SPARSE"),
    ("deepseek-v3.2", "h200", "fp8", 3_076_352, 17_451, "FLASHMLA_SPARSE"),
    # fp8_ds_mla named: FlashInfer refuses it, FLASHMLA_SPARSE takes it (656 B rows) on Blackwell too
    ("deepseek-v3.2", "b200", "fp8_ds_mla", 3_076_352, 17_451, "FLASHMLA_SPARSE"),
    # bf16 (auto): 128 heads / tp 8 = 16 a rank -> FA4; 61 x 64 x (1,152 + 132) = 5,012,736 B, as on Hopper
    ("deepseek-v3.2", "b200", None, 5_012_736, 10_710, "FLASH_ATTN_MLA_SPARSE_FA4"),
    # GLM-5.2 auto on B200 -> fp8_e4m3 on FLASHINFER_MLA_SPARSE (qk_nope 192): 78 x 64 x 576 + 21 indexer
    # layers x 64 x 132 = 2,875,392 + 177,408 = 3,052,800 B; 17,586 blocks
    ("glm-5.2", "b200", None, 3_052_800, 17_586, "FLASHINFER_MLA_SPARSE"),
    # on Hopper auto stays bf16: 78 x 64 x 1,152 + 177,408 = 5,928,192 B
    ("glm-5.2", "h200", None, 5_928_192, 9_056, "FLASH_ATTN_MLA_SPARSE"),
]


def _capacity(cli, name, gpu, dtype):
    args = ["capacity", name, "--engine", "vllm", "--gpu", gpu, "--tp", "8", "--kv-memory", MEM, "-s", "32k"]
    r = cli(*args, *(["--kv-dtype", dtype] if dtype else []), "-f", "json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize(("name", "gpu", "dtype", "page", "blocks", "backend"), CASES)
def test_sparse_mla_on_each_gpu(cli, name, gpu, dtype, page, blocks, backend):
    d = _capacity(cli, name, gpu, dtype)
    assert (d["block_size"], d["page_size_bytes"], d["num_gpu_blocks"]) == (64, page, blocks)
    assert blocks == 53_687_091_200 // page
    assert d["kv_cache_tokens"] == blocks * 64
    r = cli(
        "capacity",
        name,
        "--engine",
        "vllm",
        "--gpu",
        gpu,
        "--tp",
        "8",
        "--kv-memory",
        MEM,
        "-s",
        "32k",
        *(["--kv-dtype", dtype] if dtype else []),
    )
    assert f"backend {backend} " in " ".join(r.output.split()).replace("│", "")


def test_glm5_fp8_default_logged_on_blackwell(cli):
    d = _capacity(cli, "glm-5.2", "b200", None)
    assert d["kv_cache_dtype"] == "fp8_e4m3"
    assert d["log_lines"][0] == "Using fp8 kv-cache for GlmMoeDsaForCausalLM on SM10x"


def test_fa4_only_up_to_16_heads_a_rank(cli):
    # tp 4: 32 heads a rank -> FLASHMLA_SPARSE (bf16, block 64: the same bytes)
    r = cli("capacity", "deepseek-v3.2", "--engine", "vllm", "--gpu", "b200", "--tp", "4", "--kv-memory", MEM)
    assert r.exit_code == 0, r.output
    assert "backend FLASHMLA_SPARSE on Blackwell" in " ".join(r.output.replace("│", " ").split())


def test_deepseek_v4_same_on_blackwell(cli):
    h, b = (_capacity(cli, "deepseek-v4-flash", g, None) for g in ("h200", "b200"))
    assert (b["page_size_bytes"], b["num_gpu_blocks"]) == (h["page_size_bytes"], h["num_gpu_blocks"])


def test_sm120_sparse_mla_refused():
    from kvcalc.engines import vllm
    from kvcalc.engines.vllm.options import VllmOptions
    from kvcalc.errors import KvcalcError
    from kvcalc.formats import kv_format
    from kvcalc.load.models import load_model

    k = kv_format("bf16")
    with pytest.raises(KvcalcError, match="FLASHINFER_MLA_SPARSE_SM120 on SM12x"):
        vllm.capacity(load_model("deepseek-v3.2"), 2**34, k, k, tp=8, options=VllmOptions(compute_capability="12.0"))
