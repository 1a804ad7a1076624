"""vLLM 0.33's sizing rules beside 0.11's (`kvcalc/engines/vllm.py`, issue #10 item 2), each
pinned by the figure vLLM's own sizing code printed for it, with the arithmetic.

Configs: configs/models/*.yaml (the published config.json values). Per layer per token in bf16:
DeepSeek-V2-Lite / V3 (MLA) 576 latent values x 2 B = 1,152 B; gpt-oss-20b 2 x 8 KV heads x 64
x 2 B = 2,048 B (12 sliding layers, window 128, + 12 full); gemma-3-27b 2 x 16 x 128 x 2 B =
8,192 B (52 sliding, window 1,024, + 10 full); llama-3.1-8b 2 x 8 x 128 x 2 B = 4,096 B (32 full
layers, max_position_embeddings 131,072); falcon-7b 2 x 1 x 64 x 2 B = 256 B (32 layers).
GiB = 2^30 B. The sources are cited in the module docstring of kvcalc/engines/vllm.py.
"""

from __future__ import annotations

import json
import warnings
from contextlib import contextmanager

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.engines import vllm
from kvcalc.engines.profile import VllmOptions, get_profile
from kvcalc.errors import KvcalcError, KvcalcWarning
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model
from kvcalc.units import parse_size

BF16, FP8 = kv_format("bf16"), kv_format("fp8")
GiB, MiB = 2**30, 2**20
runner = CliRunner()


@contextmanager
def no_warnings():
    """Turn warnings into errors (pytest's config ignores KvcalcWarning otherwise)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def quiet_capacity(*args, **kwargs):
    """`vllm.capacity` with its start-up warning (when one request does not fit) silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KvcalcWarning)
        return vllm.capacity(*args, **kwargs)


def run_json(*args: str) -> dict:
    res = runner.invoke(app, [*args, "-f", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def run_err(*args: str) -> str:
    res = runner.invoke(app, list(args))
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


# ----- the MLA block size the attention backend forces (vllm/platforms/cuda.py) --------------


def test_deepseek_v2_lite_flashmla_on_hopper_uses_64_token_blocks():
    # vLLM 0.11 CudaPlatform.check_and_update_config: FlashMLA (Hopper's default MLA backend) forces
    # block 64. page = 64 x 1,152 B = 73,728 B; 1 GiB // 73,728 // 27 layers = 14,563 // 27 = 539
    # blocks; tokens 539 // 1 group x 64 = 34,496, not 2,157 blocks / 34,512 tokens of 16. (0.33 picks
    # FLASH_ATTN_MLA and keeps 16: tests/engines/test_vllm_backends.py.)
    r = quiet_capacity(
        load_model("deepseek-v2-lite"), GiB, BF16, BF16, options=VllmOptions(version="0.11", compute_capability="9.0")
    )
    assert (r.block_size, r.num_gpu_blocks, r.kv_cache_tokens) == (64, 539, 34_496)
    assert r.page_size_bytes == 27 * 73_728 == 1_990_656
    # 0.33 logs the figures in one line (update_kv_cache_capacity), 0.11 in two (lines 1087-1092)
    assert r.log_lines[1].startswith("GPU KV cache size: 34,496 tokens")
    assert r.notes[0] == (
        "MLA attention backend FLASHMLA (vLLM's default MLA backend on compute capability 9.0) "
        "stores auto (bf16) latent rows (576 values, 1,152 B a token), "  # issue 20: the format it stores
        "forces block size 64, not vLLM's default 16"
    )  # no --block-size given


def test_mla_block_size_per_gpu_and_backend():
    # vLLM 0.11's rule (CudaPlatform.check_and_update_config); 0.33's: tests/engines/test_vllm_backends.py
    m = load_model("deepseek-v2-lite")
    # Blackwell (10.0): CUTLASS MLA forces 128: page 147,456 B; 1 GiB // 147,456 = 7,281; // 27 = 269
    # blocks -> 269 x 128 = 34,432 tokens
    r = quiet_capacity(m, GiB, BF16, BF16, options=VllmOptions(version="0.11", compute_capability="10.0"))
    assert (r.block_size, r.num_gpu_blocks, r.kv_cache_tokens) == (128, 269, 34_432)
    # Ampere (8.0): Triton MLA keeps --block-size 16: page 18,432 B; 1 GiB // 18,432 // 27 = 58,254 // 27
    # = 2,157 blocks -> 34,512 tokens
    r = quiet_capacity(m, GiB, BF16, BF16, options=VllmOptions(version="0.11", compute_capability="8.0"))
    assert (r.block_size, r.num_gpu_blocks, r.kv_cache_tokens) == (16, 2157, 34_512)
    # no GPU, no backend: Hopper is assumed, and said
    r = quiet_capacity(m, GiB, BF16, BF16, options=VllmOptions(version="0.11"))
    assert (
        r.block_size == 64
        and "(Hopper), assumed: no NVIDIA GPU (compute capability) or attention backend given" in r.notes[0]
    )
    # an explicit backend wins over the GPU; FlashInfer MLA keeps 32 or 64, else 64
    assert vllm.rules("0.11").attention_block_size(m, 16, "cutlass_mla", "9.0")[0] == 128
    assert vllm.rules("0.11").attention_block_size(m, 32, "FLASHINFER_MLA")[0] == 32
    assert vllm.rules("0.11").attention_block_size(m, 128, "FLASHINFER_MLA")[0] == 64
    assert vllm.rules("0.11").attention_block_size(m, 128, "TRITON_MLA", "9.0") == (
        128,
        "MLA attention backend TRITON_MLA (the attention backend given) stores auto (bf16) latent rows "
        "(576 values, 1,152 B a token), keeps block size 128",
    )
    # non-MLA models keep their block size under any GPU; an MLA backend for them is refused
    llama = load_model("llama-3.1-8b")
    assert vllm.rules().attention_block_size(llama, 16, None, "10.0") == (16, None)
    with pytest.raises(KvcalcError, match="FLASHMLA is an MLA backend and llama-3.1-8b has no MLA layers"):
        vllm.rules().attention_block_size(llama, 16, "FLASHMLA")
    with pytest.raises(KvcalcError, match="deepseek-v2-lite uses MLA: give an MLA backend"):
        vllm.rules().attention_block_size(m, 16, "FLASH_ATTN")
    with pytest.raises(KvcalcError, match="kvcalc knows the MLA backends"):
        vllm.rules("0.11").attention_block_size(m, 16, "XFORMERS_MLA")


def test_mla_block_size_from_the_cli_gpu():
    # --gpu b200 (compute capability 10.0 in kvcalc/data/gpus.yaml): 0.11's 128-token blocks as above;
    # 0.33's FLASHINFER_MLA 32: page 32 x 1,152 x 27 = 995,328 B; 1 GiB // 995,328 = 1,078 blocks; tokens
    # int(1,078 / (163,840 / 32 = 5,120) x 163,840) = 34,496
    out = run_json(
        "capacity", "deepseek-v2-lite", "-e", "vllm", "-m", "1GiB", "--gpu", "b200", "--vllm-version", "0.11"
    )
    assert (out["block_size"], out["num_gpu_blocks"], out["kv_cache_tokens"]) == (128, 269, 34_432)
    out = run_json("capacity", "deepseek-v2-lite", "-e", "vllm", "-m", "1GiB", "--gpu", "b200")
    assert (out["block_size"], out["num_gpu_blocks"], out["kv_cache_tokens"]) == (32, 1078, 34_496)
    assert out["engine_version"] == "vLLM 0.33 (V1 engine)"
    out = run_json("capacity", "deepseek-v2-lite", "-e", "vllm", "-m", "1GiB", "--attention-backend", "TRITON_MLA")
    assert (out["block_size"], out["num_gpu_blocks"]) == (16, 2157)
    # --gpu beside --kv-memory now picks SGLang's backends too (its sparse-MLA rows, fp4 pools); llama.cpp has none
    assert run_err("capacity", "qwen3-4b", "-e", "llamacpp", "-m", "1GiB", "--gpu", "h100-sxm").startswith(
        "error: --gpu h100-sxm: --gpu applies to --engine vllm and sglang (it picks their attention backends"
    )


# ----- 0.33's token figure and sliding-window admission ------------------------------------


def test_gpt_oss_20b_token_figure_is_concurrency_times_length_in_033():
    # 6.51 GiB = 6,990,059,274 B (units.parse_size). page 16 x 2,048 = 32,768 B; 12 sliding + 12 full:
    # 2 groups of 12 layers; blocks = 6,990,059,274 // 32,768 // 12 = 213,319 // 12 = 17,776.
    # 0.33: a sliding request holds cdiv(min(127 + 2 x 8,192, 131,072), 16) + 1 = 1,032 + 1 = 1,033
    # pages (async scheduling: two batches of 8,192 in flight), a full one 131,072 / 16 = 8,192:
    # concurrency 17,776 / 9,225 = 1.92694; tokens int(1.92694 x 131,072) = int(252,567.57) = 252,567
    # (kv_cache_utils.get_kv_cache_capacity). 0.11: 17,776 // 2 groups x 16 = 142,208.
    mem = parse_size("6.51GiB")
    assert mem == 6_990_059_274
    m = load_model("gpt-oss-20b")
    with no_warnings():
        r = vllm.capacity(m, mem, BF16, BF16, max_model_len=131_072, options=VllmOptions(version="0.33"))
    assert (r.num_gpu_blocks, r.kv_cache_tokens) == (17_776, 252_567)
    assert r.max_concurrency == pytest.approx(17_776 / 9_225)
    # one line in 0.33: vllm/v1/core/kv_cache_utils.py update_kv_cache_capacity, lines 1147-1153
    assert r.log_lines == [
        "Available KV cache memory: 6.51 GiB",
        ("GPU KV cache size: 252,567 tokens, Maximum concurrency for 131,072 tokens per request: 1.93x"),
    ]
    old = vllm.capacity(m, mem, BF16, BF16, max_model_len=131_072, options=VllmOptions(version="0.11"))
    # 0.11: one batch in flight: cdiv(127 + 8,192, 16) + 1 = 521 pages -> 17,776 / 8,713
    assert old.kv_cache_tokens == 142_208 and old.max_concurrency == pytest.approx(17_776 / 8_713)


def test_gemma_3_27b_sliding_admission_with_two_batches_in_flight():
    # 40 GiB // 131,072 // 10 layers per group = 32,768 blocks; 7 groups (6 sliding, 1 full).
    # 0.33 (SlidingWindowSpec.max_admission_blocks_per_request): cdiv(min(1,023 + 2 x 8,192, 32,768), 16)
    # + 1 = cdiv(17,407, 16) + 1 = 1,088 + 1 = 1,089 pages per sliding group; full 2,048:
    # 6 x 1,089 + 2,048 = 8,582 -> 32,768 / 8,582 = 3.8182. 0.11: cdiv(9,215, 16) + 1 = 577:
    # 6 x 577 + 2,048 = 5,510 -> 5.9470.
    m = load_model("gemma-3-27b")
    r = vllm.capacity(m, 40 * GiB, BF16, BF16, max_model_len=32_768, options=VllmOptions(version="0.33"))
    assert round(r.max_concurrency, 4) == 3.8182 and r.max_concurrency == pytest.approx(32_768 / 8_582)
    # tokens: int(32,768 / 8,582 x 32,768) = int(125,115.6) = 125,115
    assert r.kv_cache_tokens == 125_115
    old = vllm.capacity(m, 40 * GiB, BF16, BF16, max_model_len=32_768, options=VllmOptions(version="0.11"))
    assert round(old.max_concurrency, 4) == 5.9470
    # --no-async-scheduling: one batch in flight, as 0.11
    sync = vllm.capacity(
        m, 40 * GiB, BF16, BF16, max_model_len=32_768, options=VllmOptions(version="0.33", async_scheduling=False)
    )
    assert sync.max_concurrency == old.max_concurrency
    assert vllm.rules("0.33").in_flight_tokens(8192) == 16_384 and vllm.rules("0.11").in_flight_tokens(8192) == 8192


# ----- the null block and the padding layers in 0.33's start-up check ----------------------


def test_deepseek_v3_estimate_reserves_the_null_block():
    # At block size 16 (Triton MLA, e.g. an A100): page 16 x 1,152 = 18,432 B; 61 layers: 1,124,352 B
    # per block. 0.11 estimates with all of 1 GiB: 1,073,741,824 // 1,124,352 = 954 blocks -> 15,264
    # tokens; 0.33 (kv_cache_planning.get_kv_cache_configs) with 1 GiB - 1,124,352 = 1,072,617,472:
    # 953 blocks -> 15,248 tokens.
    m = load_model("deepseek-v3")
    new = quiet_capacity(m, GiB, BF16, BF16, options=VllmOptions(version="0.33", compute_capability="8.0"))
    old = quiet_capacity(m, GiB, BF16, BF16, options=VllmOptions(version="0.11", compute_capability="8.0"))
    assert "the estimated maximum model length is 15248. " in new.notes[1]
    assert "the estimated maximum model length is 15264. " in old.notes[1]
    # the blocks themselves are allocated from the whole budget in both: 954
    assert new.num_gpu_blocks == old.num_gpu_blocks == 954


def test_a_budget_of_exactly_one_request_is_refused_in_033():
    # llama-3.1-8b at 1,024 tokens: 64 blocks x 32 layers x 65,536 B = 128 MiB per request.
    # 0.11 starts on 128 MiB; 0.33 checks 128 MiB - 2 MiB (the null block of 32 layers) = 126 MiB
    # < 128 MiB: refused, the estimate 126 MiB / 2 MiB = 63 blocks = 1,008 tokens.
    m = load_model("llama-3.1-8b")
    with no_warnings():
        vllm.capacity(m, 128 * MiB, BF16, BF16, max_model_len=1024, options=VllmOptions(version="0.11"))
    with pytest.warns(KvcalcWarning, match=r"estimated maximum model length is 1008\. .* See https://docs"):
        r = vllm.capacity(m, 128 * MiB, BF16, BF16, max_model_len=1024, options=VllmOptions(version="0.33"))
    assert r.notes[0].startswith("vLLM refuses to start at this max_model_len")
    # memory_for gives the block more: 65 x 2 MiB = 130 MiB, on which 0.33 starts
    assert vllm.memory_for(m, 1024, 1, BF16, BF16, options=VllmOptions(version="0.33")) == 130 * MiB
    with no_warnings():
        vllm.capacity(m, 130 * MiB, BF16, BF16, max_model_len=1024, options=VllmOptions(version="0.33"))


def test_gemma_padding_layers_count_when_one_request_is_sized():
    # 52 sliding layers in cdiv(52, 10) = 6 groups of 9, 9, 9, 9, 8, 8 (8 padding layers) + 10 full.
    # 0.33 (_max_memory_usage_bytes_from_groups): bytes per block x pages = 10 x 131,072 x (6 x 1,089
    # + 2,048) = 1,310,720 x 8,582 = 11,248,599,040 B. 0.11's sum over real layers at the same
    # 16,384 in flight: (52 x 1,089 + 10 x 2,048) x 131,072 = 77,108 x 131,072 = 10,106,699,776 B;
    # the difference is the padding: 8 x 1,089 x 131,072 = 1,141,899,264 B.
    m = load_model("gemma-3-27b")
    groups, per_group = vllm.rules().kv_cache_groups(m)
    args = (m, groups, per_group, 32_768, 16, 131_072, 16_384)
    assert vllm.rules("0.33").request_bytes(*args) == 11_248_599_040
    assert vllm.rules("0.11").request_bytes(*args) == 10_106_699_776
    # one more block for the null block: 8,583 x 1,310,720 = 11,249,909,760 B is the least that starts
    need = vllm.memory_for(m, 32_768, 1, BF16, BF16, options=VllmOptions(version="0.33"))
    assert need == 11_249_909_760
    with no_warnings():
        vllm.capacity(m, need, BF16, BF16, max_model_len=32_768, options=VllmOptions(version="0.33"))
    with pytest.warns(KvcalcWarning, match=r"\(10\.48 GiB KV cache is needed"):
        vllm.capacity(m, need - 1, BF16, BF16, max_model_len=32_768, options=VllmOptions(version="0.33"))


# ----- each layer's own KV dtype --------------------------------------------------------------


def test_falcon_cache_stays_bf16_under_fp8_in_033():
    # falcon-7b: 1 KV head x 64 (4,544 / 71): bf16 page 16 x 256 = 4,096 B; 1 GiB // 4,096 // 32 =
    # 8,192 blocks = 131,072 tokens; L = 2,048 -> 8,192 / 128 = 64.00x. 0.11 honours fp8: page 2,048 B,
    # 16,384 blocks, 262,144 tokens.
    m = load_model("falcon-7b")
    r = vllm.capacity(m, GiB, FP8, FP8, kv_cache_dtype="fp8", options=VllmOptions(version="0.33"))
    assert (r.page_size_bytes, r.num_gpu_blocks, r.kv_cache_tokens, r.kv_cache_dtype) == (
        32 * 4096,
        8192,
        131_072,
        "bf16",
    )
    assert r.notes == [
        ("vLLM 0.33 builds falcon's attention without the cache config: its cache stays bf16, not fp8_e4m3")
    ]
    old = vllm.capacity(m, GiB, FP8, FP8, options=VllmOptions(version="0.11"))
    assert (old.num_gpu_blocks, old.kv_cache_tokens) == (16_384, 262_144)
    # other models take fp8 in 0.33: llama-3.1-8b page 16 x 2,048 B
    assert (
        vllm.capacity(
            load_model("llama-3.1-8b"), GiB, FP8, FP8, max_model_len=8192, options=VllmOptions(version="0.33")
        ).page_size_bytes
        == 32 * 16 * 2048
    )


# ----- max_model_len past the model's limit ---------------------------------------------------


def test_max_model_len_past_the_model_is_refused_unless_allowed():
    # vllm/config/model.py _get_and_verify_max_len: llama-3.1-8b's max_position_embeddings is 131,072
    m = load_model("llama-3.1-8b")
    with pytest.raises(KvcalcError) as e:
        vllm.capacity(m, 64 * GiB, BF16, BF16, max_model_len=200_000, options=VllmOptions(version="0.33"))
    assert e.value.field == "max_model_len"
    assert (
        "User-specified max_model_len (200000) is greater than the derived max_model_len "
        "(max_position_embeddings=131072 or model_max_length=None in model's config.json). To allow overriding "
        "this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
    ) in str(e.value)
    r = vllm.capacity(
        m,
        64 * GiB,
        BF16,
        BF16,
        max_model_len=200_000,
        options=VllmOptions(version="0.33", allow_long_max_model_len=True),
    )
    assert r.max_model_len == 200_000 and r.notes[0].startswith("vLLM warns: User-specified max_model_len (200000)")
    # V0 0.6.x words it its own way
    with pytest.raises(KvcalcError, match=r"This may lead to incorrect model outputs or CUDA errors\. To allow"):
        vllm.capacity(m, 64 * GiB, BF16, BF16, max_model_len=200_000, options=VllmOptions(version="0.6"))


def test_longest_context_never_exceeds_the_model_limit():
    # 55 GiB // (16 x 4,096 x 32 = 2 MiB) = 28,160 blocks = 450,560 tokens; one request of the model's
    # 131,072 tokens fits, so the longest context at concurrency 1 is the model's limit, not 450,560
    m = load_model("llama-3.1-8b")
    r = vllm.capacity(
        m, 55 * GiB, BF16, BF16, max_model_len=131_072, concurrency=1, options=VllmOptions(version="0.33")
    )
    assert (r.kv_cache_tokens, r.longest_context) == (450_560, 131_072)
    # at 4 requests the blocks bind first: 4 x cdiv(n, 16) <= 28,160 -> n <= 112,640
    r = vllm.capacity(
        m, 55 * GiB, BF16, BF16, max_model_len=131_072, concurrency=4, options=VllmOptions(version="0.33")
    )
    assert r.longest_context == 112_640


def test_cli_max_model_len_env_var(monkeypatch):
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    args = ("capacity", "llama-3.1-8b", "-e", "vllm", "-m", "64GiB", "-L", "200000")
    assert run_err(*args).startswith("error: vLLM refuses it: User-specified max_model_len (200000)")
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    assert run_json(*args)["max_model_len"] == 200_000
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN")
    assert run_json(*args, "--allow-long-max-model-len")["max_model_len"] == 200_000


# ----- --vllm-version ---------------------------------------------------------------------------


def test_cli_vllm_version_selects_the_rules_and_is_named():
    base = ("capacity", "gpt-oss-20b", "-e", "vllm", "-m", "6.51GiB")
    new, old = run_json(*base), run_json(*base, "--vllm-version", "0.11")
    assert (new["engine_version"], new["kv_cache_tokens"]) == ("vLLM 0.33 (V1 engine)", 252_567)
    assert (old["engine_version"], old["kv_cache_tokens"]) == ("vLLM 0.11 (V1 engine)", 142_208)
    v0 = run_json("capacity", "llama-3.1-8b", "-e", "vllm", "-m", "1GiB", "-L", "8192", "--vllm-version", "0.6")
    assert v0["engine_version"] == "vLLM 0.6.x (V0 engine)" and v0["log_lines"][1].startswith("# GPU blocks: 512")
    assert run_err("capacity", "llama-3.1-8b", "-e", "vllm", "-m", "1GiB", "--vllm-version", "0.7") == (
        "error: --vllm-version 0.7: kvcalc models vLLM 0.6, 0.11, 0.33 (0.6: the V0 engine)"
    )
    assert run_err(
        "capacity", "llama-3.1-8b", "-e", "vllm", "-m", "1GiB", "--vllm-v0", "--vllm-version", "0.11"
    ).startswith("error: --vllm-v0: --vllm-v0 is --vllm-version 0.6")


def test_options_default_to_the_current_release():
    assert VllmOptions().version == vllm.CURRENT_VERSION == "0.33"
    assert VllmOptions(version="0.6.6").version == "0.6"
    assert VllmOptions(version="v0.11.2").version == "0.11"
    r = get_profile("vllm").capacity(load_model("gpt-oss-20b"), 6_990_059_274, BF16, BF16)
    assert r.engine_version == "vLLM 0.33 (V1 engine)" and r.kv_cache_tokens == 252_567


def test_estimate_passes_its_gpu_to_vllm():
    # estimate --engine vllm --gpu b200: the plan's GPU (compute capability 10.0) gives 0.33's
    # FLASHINFER_MLA 32-token blocks; without --gpu, Hopper's FLASH_ATTN_MLA 16 is assumed. Sized for
    # 1 x 4,096 tokens: 4,096 / 16 = 256 pages (+ 1: 0.33's null block) at 16 x 1,152 x 27 = 497,664 B
    out = run_json("estimate", "deepseek-v2-lite", "-s", "4096", "--engine", "vllm", "--gpu", "b200")
    assert out["block_size"] == 32
    out = run_json("estimate", "deepseek-v2-lite", "-s", "4096", "--engine", "vllm")
    assert out["block_size"] == 16 and out["kv_memory_bytes"] == (4096 // 16 + 1) * 16 * 1152 * 27 == 127_899_648
