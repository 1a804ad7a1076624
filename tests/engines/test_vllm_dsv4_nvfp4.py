"""DeepSeek-V4 under vLLM 0.33 with an fp4 cache (issue 20 item 4): what vLLM 0.33.0's own code
does with `--kv-cache-dtype nvfp4_ds_mla` and `nvfp4` on DeepSeek-V4-Flash, and that kvcalc's
plan and capacity say the same.

- nvfp4_ds_mla: `DeepseekV4ForCausalLM` (`model_executor/models/registry.py` 99; V4-Flash's
  config.json names it) picks its attention class in `models/deepseek_v4/nvidia/model.py`
  `_select_dsv4_attn_cls` 537-569: FlashMLA on SM90 and SM100, FlashInfer's SM120 class on
  SM120, both `use_fp8_ds_mla_layout = True`, so layer 0's `DeepseekV4Attention.__init__` (345)
  raises from `_resolve_dsv4_kv_cache_dtype` (`models/deepseek_v4/attention.py` 94-129):
  "DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got nvfp4_ds_mla ...". The
  nvfp4_ds_mla records vLLM 0.33 does store for a V4-class model are DeepSeek-V4.1's
  (`DeepseekV41ForCausalLM`, `models/deepseek_v41/attention.py` 523-536). vLLM's own code gave
  that text on this host (tests/oracle/vllm_2026.py, cases deepseek-v4-flash*-nvfp4_ds_mla in
  tests/oracle/fixtures/vllm-0.33-2026.json).
- nvfp4 / nvfp4_4over6: `VllmConfig.validate_nvfp4_kv_cache_with_mla` (`config/vllm.py`
  3421-3437) refuses any "nvfp4*" dtype but the "_ds_mla" layouts on a `use_mla` model
  (DeepSeek-V4 is one: `transformers_utils/model_arch_config_convertor.py` 294-327).
"""

from __future__ import annotations

import pytest

DSV4_TEXT = (
    "DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got nvfp4_ds_mla. Please set "
    "`--kv-cache-dtype fp8` or select a backend that supports bfloat16 KV cache."
)
MLA_NVFP4_TEXT = (
    "nvfp4 KV cache is not supported with MLA (Multi-head Latent Attention) backends. Please use a "
    "different --kv-cache-dtype (e.g., 'fp8', 'auto', or 'nvfp4_ds_mla' with a sparse MLA backend) "
    "for MLA models such as DeepSeek."
)

PLAN = ["--concurrency", "64", "--engine", "vllm", "-s", "32k"]
CAPACITY = ["--engine", "vllm", "-m", "80GiB", "-s", "32k"]


def _error(r) -> str:
    assert r.exit_code == 2, r.output
    return " ".join(r.output.split())


@pytest.mark.parametrize("gpu", ["b200", "h100-sxm", "rtx-5090"])  # SM100, SM90, SM120
@pytest.mark.parametrize("command", ["plan", "capacity"])
def test_nvfp4_ds_mla_on_deepseek_v4_quotes_vllm(cli, command, gpu):
    args = PLAN if command == "plan" else CAPACITY
    line = _error(cli(command, "deepseek-v4-flash", "--gpu", gpu, "--kv-dtype", "nvfp4_ds_mla", *args))
    assert DSV4_TEXT in line
    assert "vLLM 0.33.0 models/deepseek_v4/attention.py `_resolve_dsv4_kv_cache_dtype`" in line


def test_plan_and_capacity_refuse_alike(cli):
    """The brief's plan line and `capacity --engine vllm` give one refusal, word for word."""
    plan = _error(cli("plan", "deepseek-v4-flash", "--gpu", "b200", "--kv-dtype", "nvfp4_ds_mla", *PLAN))
    cap = _error(cli("capacity", "deepseek-v4-flash", "--gpu", "b200", "--kv-dtype", "nvfp4_ds_mla", *CAPACITY))
    assert plan == cap


def test_flashinfer_dsv4_backend_does_not_list_nvfp4_ds_mla(cli):
    """`--attention-backend FLASHINFER_MLA_SPARSE_DSV4` on SM100 picks the plain-row class
    (`nvidia/model.py` 556-559), whose backend lists auto, bfloat16, fp8, fp8_e4m3, fp8_ds_mla
    (`nvidia/flashinfer_sparse.py` 111-117)."""
    line = _error(
        cli(
            "capacity",
            "deepseek-v4-flash",
            "--gpu",
            "b200",
            "--kv-dtype",
            "nvfp4_ds_mla",
            "--attention-backend",
            "FLASHINFER_MLA_SPARSE_DSV4",
            *CAPACITY,
        )
    )
    assert "FLASHINFER_MLA_SPARSE_DSV4 backend takes auto, bfloat16, fp8, fp8_e4m3 and fp8_ds_mla" in line


@pytest.mark.parametrize("gpu", ["b200", "h100-sxm"])  # SM100, SM90: not SM120
def test_flashinfer_dsv4_backend_plain_rows_are_refused(cli, gpu):
    """`--attention-backend FLASHINFER_MLA_SPARSE_DSV4` off SM120 makes vLLM 0.33.0 store plain
    bf16 / per-tensor fp8 rows (`nvidia/model.py` `_select_dsv4_attn_cls` 556-559), not the
    fp8_ds_mla layout kvcalc sizes: refused on the flag, never sized as FlashMLA's pages."""
    r = cli(
        "capacity", "deepseek-v4-flash", "--gpu", gpu, "--attention-backend", "FLASHINFER_MLA_SPARSE_DSV4", *CAPACITY
    )
    line = _error(r)
    assert line.startswith("error: --attention-backend FLASHINFER_MLA_SPARSE_DSV4:")
    assert "plain-row cache" in line and "leave --attention-backend unset" in line
    # without the flag the same command sizes FlashMLA's fp8_ds_mla pages
    assert cli("capacity", "deepseek-v4-flash", "--gpu", gpu, *CAPACITY).exit_code == 0


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v3", "deepseek-v3.2"])
@pytest.mark.parametrize("dtype", ["nvfp4", "nvfp4_4over6"])
@pytest.mark.parametrize("gpu", ["b200", "h100-sxm"])
def test_nvfp4_on_mla_quotes_vllm_config_check(cli, model, dtype, gpu):
    line = _error(cli("plan", model, "--gpu", gpu, "--kv-dtype", dtype, *PLAN))
    assert MLA_NVFP4_TEXT in line
    assert "vLLM 0.33.0 config/vllm.py validate_nvfp4_kv_cache_with_mla" in line


def test_fp8_plan_kv_equals_capacity(cli):
    """With the cache vLLM does take (fp8 -> fp8_ds_mla), plan's per-GPU KV is what `capacity
    --engine vllm` keeps of that budget: whole pools of 1,002,240 B (the packed groups' block),
    as many as vLLM's `get_kv_cache_configs` makes of it."""
    import json

    r = cli("plan", "deepseek-v4-flash", "--gpu", "b200", "--kv-dtype", "fp8", *PLAN, "-f", "json")
    layout = json.loads(r.stdout)["layouts"][0]
    kv = layout["kv_cache_bytes_per_gpu"]
    r = cli(
        "capacity",
        "deepseek-v4-flash",
        "--gpu",
        "b200",
        "--kv-dtype",
        "fp8",
        "-m",
        str(kv),
        "--engine",
        "vllm",
        "-s",
        "32k",
        "-f",
        "json",
    )
    cap = json.loads(r.stdout)
    assert cap["page_size_bytes"] == 1_002_240
    assert cap["engine_kv_bytes"] == kv == cap["num_gpu_blocks"] * 1_002_240
