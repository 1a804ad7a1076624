"""The public Python API (`kvcalc.load_model`, `kvcalc.estimate`, `kvcalc.capacity`): exact
values, the same figures the CLI prints (one code path), and a free `import kvcalc`.

Golden numbers: meta-llama/Llama-3.1-70B config.json (80 layers, 8 KV heads, head_dim 128,
max_position_embeddings 131,072, bf16); the engine configs and logs of tests/engines.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kvcalc
from kvcalc.cli import app
from kvcalc.engines.profile import LlamacppOptions, SglangOptions, VllmOptions
from kvcalc.errors import KvcalcError, KvcalcWarning, UnknownNameError

ROOT = Path(__file__).parents[1]
CFG = Path(__file__).parent / "data" / "engine-configs"
GiB = 2**30


def test_import_kvcalc_imports_only_the_standard_library():
    code = (
        "import sys; before = set(sys.modules); import kvcalc; "
        "print(sorted(m for m in set(sys.modules) - before if m != 'kvcalc'))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    new = eval(out.stdout)  # noqa: S307 (our own print of a list of names)
    heavy = [m for m in new if m.split(".")[0] in ("kvcalc", "pydantic", "typer", "rich", "yaml", "torch", "typing")]
    assert heavy == []


def test_version_matches_pyproject():
    text = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{kvcalc.__version__}"' in text


def test_estimate_worked_example():
    # 2 (K and V) x 80 layers x 8 KV heads x 128 head_dim x 8192 tokens x 1 sequence x 2 B (fp16)
    e = kvcalc.estimate("llama-3.1-70b", seq_len=8192, kv_dtype="fp16")
    assert e.kv_cache_bytes == 2 * 80 * 8 * 128 * 8192 * 2 == 2_684_354_560
    assert e.kv_bytes_per_token == 2 * 80 * 8 * 128 * 2 == 327_680
    assert (e.seq_len, e.batch, e.kv_dtype) == (8192, 1, "fp16")


def test_estimate_defaults_batch_and_tp():
    # no seq_len: max_position_embeddings 131,072; no kv_dtype: the model's bf16 (2 B)
    e = kvcalc.estimate("llama-3.1-70b")
    assert (e.seq_len, e.kv_dtype) == (131_072, "bf16")
    assert e.kv_cache_bytes == 327_680 * 131_072 == 42_949_672_960
    # batch 4, tp 4: 8 KV heads / 4 = 2 per rank -> the fullest GPU holds a quarter
    # 327,680 B x 32,768 tokens x 4 sequences = 42,949,672,960 B; / 4 = 10,737,418,240 B per GPU
    e = kvcalc.estimate("llama-3.1-70b", seq_len="32k", batch=4, tp=4)
    assert e.kv_cache_bytes == 42_949_672_960
    assert e.kv_cache_bytes_per_gpu == 10_737_418_240


def test_estimate_takes_a_model_spec_and_int8_groups():
    spec = kvcalc.load_model("llama-3.1-70b")
    assert kvcalc.load_model(spec) is spec
    # int8 K and V in groups of 64 values with an fp16 scale each: 1 B + 2 B / 64 per value
    # = 2 x 80 x 8 x 128 x (1 + 2/64) B = 168,960 B per token
    e = kvcalc.estimate(spec, seq_len=1, kv_dtype="int8", quant_group_size=64, scale_dtype="fp16")
    assert e.kv_bytes_per_token == 2 * 80 * 8 * (128 + 128 // 64 * 2) == 168_960


def test_estimate_errors_are_kvcalc_errors():
    with pytest.raises(KvcalcError, match="^batch must be a positive integer, got 0$"):
        kvcalc.estimate("llama-3.1-70b", seq_len=8192, batch=0)
    with pytest.raises(UnknownNameError):
        kvcalc.estimate("no-such-model", seq_len=8192)
    with pytest.warns(KvcalcWarning, match="beyond llama-3.1-70b's max_position_embeddings"):
        kvcalc.estimate("llama-3.1-70b", seq_len=262_144)


def test_capacity_vllm_o03_as_tests_engines_pins_it():
    # tests/engines O03 (Qwen3-14B, vLLM V1): 6.51 GiB = 6,990,059,274 B // 65,536 B page // 40
    # layers = 2666 blocks x 16 = 42,656 tokens; 2666 / cdiv(32768, 16) = 1.30x
    r = kvcalc.capacity(CFG / "qwen3-14b.yaml", engine="vllm", kv_memory_bytes=6_990_059_274, max_model_len=32768)
    assert r.num_gpu_blocks == 2666 and r.kv_cache_tokens == 42_656
    # 0.33 (the default): the figures in one line (kv_cache_utils.update_kv_cache_capacity)
    assert r.log_lines == [
        "Available KV cache memory: 6.51 GiB",
        ("GPU KV cache size: 42,656 tokens, Maximum concurrency for 32,768 tokens per request: 1.30x"),
    ]
    assert r.kv_cache_dtype == "auto (bf16)"  # no kv_dtype: the engine's default, labelled as the CLI does


def test_capacity_vllm_options_object():
    # gemma-3-27b without the hybrid allocator: one group of 62 full-length layers;
    # page 2 x 16 x 16 x 128 x 2 = 131,072 B; 20 GiB // 131,072 // 62 = 2642 blocks x 16 = 42,272 tokens
    # 62 x 8,192 pages x 131,072 B = 62 GiB, printed by 0.33's format_gib: "62.0"
    with pytest.warns(KvcalcWarning, match=r"\(62\.0 GiB KV cache is needed"):
        r = kvcalc.capacity(
            CFG / "gemma-3-27b.yaml",
            engine="vllm",
            kv_memory_bytes=20 * GiB,
            max_model_len=131072,
            options=VllmOptions(hybrid_allocator=False),
        )
    assert r.num_gpu_blocks == 20 * GiB // 131_072 // 62 == 2642 and r.kv_cache_tokens == 42_272


def test_capacity_sglang_and_llamacpp():
    # SGLang, Qwen3-4B: cell 8 x 128 x 36 layers x 2 x 2 B = 147,456 B; 10 GiB // cell = 72,817;
    # page 16 rounds down to 72,816
    assert kvcalc.capacity(CFG / "qwen3-4b.yaml", engine="sglang", kv_memory_bytes=10 * GiB).kv_cache_tokens == 72_817
    r = kvcalc.capacity(
        CFG / "qwen3-4b.yaml", engine="sglang", kv_memory_bytes=10 * GiB, options=SglangOptions(page_size=16)
    )
    assert r.kv_cache_tokens == 72_816
    # llama.cpp -c 8192, f16: K = 8192 cells x 80 layers x 8 heads x 128 x 2 B = 1,342,177,280 B; V the same
    r = kvcalc.capacity("llama-3.1-70b", engine="llama.cpp", kv_memory_bytes=None, options=LlamacppOptions(n_ctx=8192))
    assert r.k_bytes == r.v_bytes == 8192 * 80 * 8 * 128 * 2 == 1_342_177_280
    assert r.kv_cache_dtype == "f16"


def test_capacity_ideal_is_memory_over_bytes_per_token():
    # 1 GiB // 327,680 B per token (llama-3.1-70b, bf16) = 3276 tokens
    r = kvcalc.capacity("llama-3.1-70b", kv_memory_bytes=GiB)
    assert r.kv_cache_tokens == GiB // 327_680 == 3276


def test_capacity_errors():
    with pytest.raises(KvcalcError, match="--engine sglang takes SglangOptions, not VllmOptions"):
        kvcalc.capacity("llama-3.1-70b", engine="sglang", kv_memory_bytes=GiB, options=VllmOptions())
    with pytest.raises(KvcalcError, match="--engine vllm needs --kv-memory"):
        kvcalc.capacity("llama-3.1-70b", engine="vllm", kv_memory_bytes=None)
    with pytest.raises(UnknownNameError):
        kvcalc.capacity("llama-3.1-70b", engine="trt", kv_memory_bytes=GiB)


def test_api_and_cli_give_the_same_result():
    # one code path: `kvcalc capacity -f json` is the API's EngineResult, key for key
    r = CliRunner().invoke(
        app,
        [
            "capacity",
            str(CFG / "qwen3-14b.yaml"),
            "-m",
            "6.51GiB",
            "-e",
            "vllm",
            "-L",
            "32768",
            "--concurrency",
            "2",
            "-f",
            "json",
        ],
    )
    assert r.exit_code == 0, r.output
    api = kvcalc.capacity(
        CFG / "qwen3-14b.yaml", engine="vllm", kv_memory_bytes=6_990_059_274, max_model_len=32768, concurrency=2
    )
    assert json.loads(r.stdout) == api.model_dump(mode="json")
    # 2 requests need 2 x cdiv(L, 16) <= 2666 blocks -> L <= 1333 x 16 = 21,328 (tests/engines)
    assert api.longest_context == 21_328


def test_capacity_takes_a_size_string_as_the_cli_does():
    # '40GiB' = 40 x 2^30 = 42,949,672,960 B; llama-3.1-70b in bf16 takes 2 x 80 x 8 x 128 x 2 =
    # 327,680 B per token, 5,242,880 B per 16-token block: 8,192 blocks = 131,072 tokens
    by_text = kvcalc.capacity("llama-3.1-70b", engine="vllm", kv_memory_bytes="40GiB", max_model_len=32768)
    by_int = kvcalc.capacity("llama-3.1-70b", engine="vllm", kv_memory_bytes=40 * 2**30, max_model_len=32768)
    assert by_text == by_int and by_text.kv_cache_tokens == 131_072
    with pytest.raises(
        KvcalcError, match=r"^kv_memory_bytes must be a whole number of bytes or a size .*, not list \[1\]$"
    ):
        kvcalc.capacity("llama-3.1-70b", engine="vllm", kv_memory_bytes=[1])
    with pytest.raises(KvcalcError, match="did you mean 6.5GiB"):
        kvcalc.capacity("llama-3.1-70b", engine="vllm", kv_memory_bytes="6.5")


# ----- the GPU fit and the speed figures (issue 23 friction 8) --------------------------------


@pytest.mark.parametrize(
    "kwargs,flags",
    [
        ({"gpu": "h100-sxm"}, ["--gpu", "h100-sxm"]),
        ({"gpu": "h100-sxm", "engine": "vllm"}, ["--gpu", "h100-sxm", "-e", "vllm"]),
        (
            {
                "gpu": "h200",
                "tp": 2,
                "weight_dtype": "fp8",
                "gpu_memory_utilization": 0.85,
                "bw_efficiency": 0.7,
                "cuda_context_bytes": "1GiB",
            },
            [
                "--gpu",
                "h200",
                "--tp",
                "2",
                "--weight-dtype",
                "fp8",
                "--gpu-memory-utilization",
                "0.85",
                "--bw-efficiency",
                "0.7",
                "--cuda-context",
                "1GiB",
            ],
        ),
        ({"engine": "sglang"}, ["-e", "sglang"]),
        (
            {"gpu": "h100-sxm", "input_len": "1k", "output_len": 512, "request_rate": 2.0},
            ["--gpu", "h100-sxm", "--input-len", "1024", "--output-len", "512", "--request-rate", "2"],
        ),
    ],
)
def test_estimate_with_a_gpu_gives_the_clis_figures(kwargs, flags):
    # `kvcalc.estimate(..., gpu=...)` was a TypeError; it now runs `kvcalc estimate --gpu`'s
    # request and returns every key the CLI's JSON holds (the KV keys, the plan, the engine)
    api = kvcalc.estimate("llama-3.1-8b", seq_len="32k", batch=8, **kwargs)
    # 2 x 32 layers x 8 KV heads x 128 x 2 B = 131,072 B per token x 32,768 x 8 = 34,359,738,368 B
    assert api.kv_cache_bytes == 34_359_738_368
    r = CliRunner().invoke(app, ["estimate", "llama-3.1-8b", "-s", "32k", "--batch", "8", *flags, "-f", "json"])
    assert r.exit_code == 0, r.output
    cli = json.loads(r.stdout)
    flat = api.model_dump(
        mode="json",
        exclude={"serving", "engine", "fit_hint", "request", "offload", "shared_prefix", "load_or_recompute"},
    )
    for part in (api.serving, api.request, api.engine):
        if part is not None:
            flat |= part.model_dump(mode="json")
    assert flat == cli


def test_estimate_gpu_fit_and_speed_are_there():
    e = kvcalc.estimate("llama-3.1-8b", seq_len="32k", batch=64, gpu="h100-sxm")
    # 64 sequences do not fit (13 do): no TPOT for a batch that does not fit, and the GPUs that would
    assert e.serving.fits is False and e.serving.max_batch == 13 and e.serving.tpot_s is None
    assert e.fit_hint is not None and e.fit_hint.smallest_fitting_count is not None
    e = kvcalc.estimate("llama-3.1-8b", seq_len="32k", batch=8, gpu="h100-sxm", engine="vllm")
    assert e.serving.fits and e.serving.tpot_s > 0 and e.serving.tokens_per_s > 0 and e.engine is not None
    # whole requests, as `--input-len 1k --output-len 1k`: the memory plan holds 2,048 tokens each
    e = kvcalc.estimate("llama-3.1-8b", batch=8, gpu="h100-sxm", input_len="1k", output_len="1k")
    assert e.seq_len == 2048 and e.request is not None and e.request.request_ttft_s > 0
    assert type(kvcalc.estimate("llama-3.1-8b", seq_len="32k")).__name__ == "KvEstimate"  # unchanged without one


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"bw_efficiency": 0.5}, "^bw_efficiency needs gpu: it sets the GPU's memory plan and roofline$"),
        ({"gpu": 3}, "^gpu must be a GPU name, a GPU file path or a GpuSpec, not int 3$"),
        ({"gpu": "h100-sxm", "gpu_memory_utilization": 1.5}, r"^gpu_memory_utilization must be in \(0, 1\], got 1.5$"),
        ({"gpu": "h100-sxm", "cuda_context_bytes": -1}, "^cuda_context_bytes must be a whole number of bytes >= 0"),
    ],
)
def test_estimate_gpu_arguments_are_checked(kwargs, message):
    with pytest.raises(KvcalcError, match=message):
        kvcalc.estimate("llama-3.1-8b", seq_len="8k", **kwargs)
