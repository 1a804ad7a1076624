"""vLLM 0.33 on Blackwell (SM10x, `--gpu b200`) for the sparse-MLA models, read from vLLM 0.33.0's
source (`pip download vllm==0.33.0`):

- `vllm/platforms/cuda.py` `_get_backend_priorities` (use_mla, major 10, lines 97-121): a quantized
  cache tries FLASHINFER_MLA_SPARSE first, then FLASHMLA_SPARSE; a 16-bit one
  FLASH_ATTN_MLA_SPARSE_FA4, FLASHINFER_MLA_SPARSE, FLASHMLA_SPARSE when a rank has 16 query heads or
  fewer, else FLASHMLA_SPARSE, FLASHINFER_MLA_SPARSE. FA4 (`flashattn_mla_sparse.py` 275-343) takes
  auto / bfloat16 and a rank's heads x dcp in (8, 16, 32, 64, 128) (no 128 under DCP);
  FLASHMLA_SPARSE (`flashmla_sparse.py` 147-155) auto, bfloat16, fp8 (as fp8_ds_mla), fp8_ds_mla,
  nvfp4_ds_mla (kept: 352 B rows): float16 falls to FLASHINFER_MLA_SPARSE.
- `v1/attention/backends/mla/flashinfer_mla_sparse.py` FlashInferMLASparseTRTLLMBackend: fp8 /
  fp8_e4m3 rows stored plain (576 B a token), fp8_ds_mla refused ("SM10 does not support
  fp8_ds_mla"), qk_nope_head_dim 128 or 192; kernel blocks a multiple of 32 (line 93), the
  indexer's 64 (`indexer.py` 285-286): block lcm(32, 64) = 64, as
  `Platform.update_block_size_for_backend` takes one block for every non-SSM layer's backend
  (`_find_non_ssm_backends`: the indexer cache `DeepseekV32IndexerCache` is such a layer). The
  vLLM grid oracle (`tests/oracle/vllm_grid.py`, fixture `vllm-0.33-grid.json`) runs this choice.
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
    # float16: FA4 and FLASHMLA_SPARSE do not list it -> FLASHINFER_MLA_SPARSE, the same 2 B rows
    ("deepseek-v3.2", "b200", "float16", 5_012_736, 10_710, "FLASHINFER_MLA_SPARSE"),
    # nvfp4_ds_mla: FlashInfer does not list it, FLASHMLA_SPARSE keeps it: 352 B rows
    # (256 e2m1 + 32 fp8 scales + 64 fp8 RoPE); 61 x 64 x (352 + 132) = 1,889,536 B a block;
    # 53,687,091,200 // 1,889,536 = 28,412 blocks
    ("deepseek-v3.2", "b200", "nvfp4_ds_mla", 1_889_536, 28_412, "FLASHMLA_SPARSE"),
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
    assert "backend FLASHMLA_SPARSE (bf16 rows of 1,152 B a token) on Blackwell" in " ".join(
        r.output.replace("│", " ").split()
    )


def test_deepseek_v4_same_on_blackwell(cli):
    h, b = (_capacity(cli, "deepseek-v4-flash", g, None) for g in ("h200", "b200"))
    assert (b["page_size_bytes"], b["num_gpu_blocks"]) == (h["page_size_bytes"], h["num_gpu_blocks"])


@pytest.mark.parametrize(
    ("gpu", "family", "other"),
    # b200: compute capability 10.0, h200: 9.0 (kvcalc/data GPU rows)
    [("b200", "Blackwell", "Hopper"), ("h200", "Hopper", "Blackwell")],
)
def test_deepseek_v4_note_names_the_gpu_family(cli, gpu, family, other):
    """The FlashMLA note names the family of the GPU given, never the other one."""
    notes = " ".join(_capacity(cli, "deepseek-v4-flash", gpu, None)["notes"])
    assert f"DeepSeek-V4 on {family}: FlashMLA" in notes
    assert other not in notes


def test_sm120_sparse_mla_refused():
    from kvcalc.engines import vllm
    from kvcalc.engines.vllm.options import VllmOptions
    from kvcalc.errors import KvcalcError
    from kvcalc.formats import kv_format
    from kvcalc.load.models import load_model

    k = kv_format("bf16")
    with pytest.raises(KvcalcError, match="FLASHINFER_MLA_SPARSE_SM120 on SM12x"):
        vllm.capacity(load_model("deepseek-v3.2"), 2**34, k, k, tp=8, options=VllmOptions(compute_capability="12.0"))


@pytest.mark.parametrize(
    ("dtype", "cc", "backend", "blocks"),
    [
        # vLLM grid oracle figures (`vllm-0.33-grid.json`, part dcp: tp 8, dcp 8, 16 GiB a rank):
        # 16 heads a rank x dcp 8 = 128 gathered heads, which FA4 takes only without DCP ->
        # FLASHINFER_MLA_SPARSE; 17,179,869,184 // (61 x 64 x 1,284 = 5,012,736) = 3,427 blocks
        ("auto", "10.0", "FLASHINFER_MLA_SPARSE", 3_427),
        # fp8: 17,179,869,184 // 2,764,032 = 6,215 blocks of 64 (the harness had 12,431 of 32 when it
        # left the indexer's backend out of the block choice)
        ("fp8", "10.0", "FLASHINFER_MLA_SPARSE", 6_215),
        # 17,179,869,184 // (61 x 64 x (352 + 132) = 1,889,536) = 9,092 blocks
        ("nvfp4_ds_mla", "10.0", "FLASHMLA_SPARSE", 9_092),
        # Hopper: FLASH_ATTN_MLA_SPARSE "does not support DCP for now" -> FLASHMLA_SPARSE, 3,427 blocks
        ("auto", "9.0", "FLASHMLA_SPARSE", 3_427),
    ],
)
def test_sparse_mla_backend_under_dcp(dtype, cc, backend, blocks):
    import kvcalc
    from kvcalc.engines.profile import VllmOptions
    from kvcalc.load.models import load_model

    r = kvcalc.capacity(
        load_model("deepseek-v3.2"),
        engine="vllm",
        kv_memory_bytes=16 * 2**30,
        max_model_len=32_768,
        kv_dtype=dtype,
        tp=8,
        options=VllmOptions(compute_capability=cc, dcp=8),
    )
    assert (r.block_size, r.num_gpu_blocks) == (64, blocks)
    assert any(f"sparse MLA attention backend {backend} " in n for n in r.notes), r.notes


def test_nvfp4_ds_mla_refused_off_sparse_mla_on_blackwell(cli):
    # DeepSeek-V3 (dense MLA): no SM100 MLA backend lists nvfp4_ds_mla (vLLM grid: "No valid attention backend")
    r = cli(
        "capacity", "deepseek-v3", "--engine", "vllm", "--gpu", "b200", "--kv-memory", MEM, "--kv-dtype", "nvfp4_ds_mla"
    )
    assert r.exit_code == 2
    assert "only for DeepSeek-V3.2 / GLM-5's sparse MLA" in " ".join(r.output.split())
