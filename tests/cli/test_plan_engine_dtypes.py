"""`kvcalc plan` / `sweep` / `check` with every KV cache dtype of the engine (issue 20 item 1),
`plan --dcp N` (item 2), and the refusals, each naming the engine version and what it takes.

Each `--kv-dtype` is parsed once, by the engine (`requests.plan_kv_picks`, the parse `kvcalc
capacity --engine vllm --kv-cache-dtype X` makes), and each layout is sized by vLLM's own blocks
(`engines.vllm.plan`, `VllmRules.resolve` with the dtype's options): a plan's max seqs is the
floor of the "Maximum concurrency" `kvcalc capacity --engine vllm` gives for the KV memory the
layout leaves (budget - weights - activation reserve - CUDA context).

Configs: configs/models/llama-3.1-8b.yaml (meta-llama/Llama-3.1-8B: 32 layers, 8 KV heads x 128,
bf16), deepseek-v3.yaml (61 MLA layers, latent 512 + 64), deepseek-v3.2.yaml (the same latent
plus a 128-value indexer key, sparse MLA). GPU rows: kvcalc/data/gpus.yaml (h200, b200).
"""

from __future__ import annotations

import pytest
import yaml

import kvcalc
from kvcalc.calc.memory_plan import GpuFit, Layout
from kvcalc.engines.vllm.options import VllmOptions
from kvcalc.errors import KvcalcError
from kvcalc.load.gpus import get_gpu
from kvcalc.load.models import load_model

B200 = VllmOptions(compute_capability="10.0", vendor="nvidia")
H200 = VllmOptions(compute_capability="9.0", vendor="nvidia")


def kv_memory(layout, model: str, gpu: str) -> int:
    """The KV memory a plan layout leaves vLLM on one GPU: budget - weights - (activation reserve
    + CUDA context), `calc.plan._Placed.kv_free`."""
    fixed = GpuFit(load_model(model), get_gpu(gpu), Layout(tp=layout.tp)).fixed_bytes
    return layout.budget_bytes_per_gpu - layout.weights_bytes_per_gpu - fixed


def test_nvfp4_llama_on_b200_is_vllms_own_figure():
    """vLLM 0.33.0 nvfp4 (vllm/utils/torch_utils.py nvfp4_kv_cache_full_dim): each K or V head row is
    head_dim / 2 B of fp4 + head_dim / 16 B of fp8 scales = 64 + 8 B; a token of Llama-3.1-8B is
    2 x 32 layers x 8 KV heads x (64 + 8) = 36,864 B (131,072 in bf16); a 16-token block 589,824 B.
    64 x 32,768 tokens on 1 B200 (tp 1, bf16 weights): 64 x 2,048 blocks x 589,824 =
    77,309,411,328 B. The layout leaves 173,039,262,105 (0.9 x B200) - 16,060,522,496 (weights)
    - 1,259,601,920 (735,313,920 activation reserve + 524,288,000 CUDA context) =
    155,719,137,689 B: 155,719,137,689 // 589,824 = 264,009 blocks, / 2,048 = 128.91x, so 128 seqs
    in both `plan` and `capacity --engine vllm`."""
    r = kvcalc.plan("llama-3.1-8b", seq_len="32k", concurrency=64, gpus="b200", kv_dtypes="nvfp4", weight_dtypes="bf16")
    top = r.layouts[0]
    assert (top.count, top.tp, top.kv_dtype) == (1, 1, "nvfp4")
    assert top.kv_cache_bytes_per_gpu == 64 * 32_768 * 36_864 == 64 * 2_048 * 589_824 == 77_309_411_328
    mem = kv_memory(top, "llama-3.1-8b", "b200")
    assert mem == 173_039_262_105 - 16_060_522_496 - 1_259_601_920 == 155_719_137_689
    cap = kvcalc.capacity(
        "llama-3.1-8b", engine="vllm", kv_memory_bytes=mem, max_model_len=32_768, kv_dtype="nvfp4", options=B200
    )
    assert cap.page_size_bytes == 16 * 36_864 == 589_824 and cap.num_gpu_blocks == 264_009
    assert cap.max_concurrency == 264_009 / 2_048
    assert top.max_concurrency == int(cap.max_concurrency) == 128
    assert " --kv-cache-dtype nvfp4 " in top.launch


def test_turboquant_k8v4_llama_on_h200_is_vllms_own_figure():
    """vLLM 0.33.0 turboquant_k8v4 (quantization/turboquant/config.py): a K+V slot of 128 + 68 =
    196 B a head; the first and last two layers stay bf16 (get_boundary_skip_layers). At tp 2 (4 KV
    heads a rank): 28 x 4 x 196 + 4 x 4 x 512 = 21,952 + 8,192 = 30,144 B a token; blocks of 48
    tokens (a packed page covers a skipped one): cdiv(32,768, 48) = 683 blocks = 32,784 tokens a
    request; 64 of them: 64 x 32,784 x 30,144 = 63,247,417,344 B. Max seqs 128 as capacity's
    floor for the same KV memory (87,558 blocks / 683 = 128.2x)."""
    r = kvcalc.plan(
        "llama-3.1-8b", seq_len="32k", concurrency=64, gpus="h200", kv_dtypes="turboquant_k8v4", weight_dtypes="bf16"
    )
    top = r.layouts[0]
    assert (top.count, top.tp, top.kv_dtype) == (2, 2, "turboquant_k8v4")
    assert top.kv_cache_bytes_per_gpu == 64 * 32_784 * 30_144 == 63_247_417_344
    cap = kvcalc.capacity(
        "llama-3.1-8b",
        engine="vllm",
        kv_memory_bytes=kv_memory(top, "llama-3.1-8b", "h200"),
        max_model_len=32_768,
        kv_dtype="turboquant_k8v4",
        tp=2,
        options=H200,
    )
    assert cap.num_gpu_blocks == 87_558 and top.max_concurrency == int(cap.max_concurrency) == 128
    assert " --kv-cache-dtype turboquant_k8v4 " in top.launch
    assert any(n.startswith("turboquant_k8v4: KV bytes per GPU and max seqs are the engine's") for n in r.notes)


def test_fp8_ds_mla_deepseek_v32_on_b200():
    """vLLM 0.33.0 fp8_ds_mla (mla_attention.py: 656 B a token) on FLASHMLA_SPARSE, 64-token blocks,
    beside the indexer key (128 fp8 values + 4 B scale = 132 B): 64 x 61 x (656 + 132) = 3,076,352 B
    a block of the pool. DP8 + EP8 on 8 B200: 8 sequences a rank x cdiv(32,768, 64) = 512 blocks:
    8 x 512 x 3,076,352 = 12,600,737,792 B. The launch line names the dtype and leaves the block to
    vLLM (the sparse backend's own)."""
    r = kvcalc.plan("deepseek-v3.2", seq_len="32k", concurrency=64, gpus="b200", kv_dtypes="fp8_ds_mla")
    top = r.layouts[0]
    assert (top.count, top.dp_attention, top.ep, top.kv_dtype) == (8, 8, 8, "fp8_ds_mla")
    assert top.kv_cache_bytes_per_gpu == 8 * 512 * 64 * 61 * (656 + 132) == 12_600_737_792
    assert top.launch.endswith("--kv-cache-dtype fp8_ds_mla --gpu-memory-utilization 0.9 --max-num-seqs 8")
    assert any("FLASHMLA_SPARSE (fp8 stored as fp8_ds_mla, 656 B a token)" in n for n in r.notes)


def test_a_dtype_one_gpu_lacks_is_planned_on_the_other():
    """nvfp4_4over6: FlashInfer on the SM100 family only (flashinfer.py supports_kv_cache_dtype):
    planned on the B200, skipped on the H200 with vLLM's reason."""
    r = kvcalc.plan("llama-3.1-8b", seq_len="8k", concurrency=8, gpus="h200,b200", kv_dtypes="nvfp4_4over6")
    assert {lay.gpu for lay in r.layouts} == {"b200"}
    assert all(" --kv-cache-dtype nvfp4_4over6 " in lay.launch for lay in r.layouts)
    assert any(
        n.startswith("skipped KV nvfp4_4over6 on h200: vLLM 0.33 --kv-cache-dtype nvfp4_4over6") for n in r.notes
    )


@pytest.mark.parametrize(
    "kwargs,says",
    [
        # vLLM 0.33: fp8_ds_mla is sparse MLA's row (FLASHMLA_SPARSE); DeepSeek-V3 has none
        (
            {"model": "deepseek-v3", "kv_dtypes": "fp8_ds_mla", "gpus": "b200"},
            "deepseek-v3: vLLM 0.33 stores fp8_ds_mla rows only for sparse MLA",
        ),
        # refused on every GPU searched: vLLM's words on the first
        ({"kv_dtypes": "nvfp4_4over6", "gpus": "h200"}, "vLLM 0.33 --kv-cache-dtype nvfp4_4over6: no backend on CUDA"),
        # an engine without the dtype names its version and what it takes
        (
            {"kv_dtypes": "turboquant_k8v4", "engine": "sglang", "gpus": "h200"},
            "SGLang 0.5.23 has no 'turboquant_k8v4' KV cache dtype; its pool stores auto, bf16, fp16, fp8_e4m3, "
            "fp8_e5m2, mxfp8, nvfp4, fp4_mx_block16",
        ),
        (
            {"kv_dtypes": "nvfp4", "engine": "llamacpp", "gpus": "h200"},
            "llama.cpp 0c1e570 has no 'nvfp4' KV cache type; use one of f32, f16, bf16, q8_0",
        ),
        (
            {"kv_dtypes": "fp9", "gpus": "h200"},
            "vLLM 0.33 has no 'fp9' KV cache dtype; vLLM 0.33's --kv-cache-dtype takes",
        ),
        # the exact formula has no TurboQuant rows
        (
            {"kv_dtypes": "turboquant_k8v4", "engine": "ideal", "gpus": "h200"},
            "'turboquant_k8v4' is a vLLM 0.33 --kv-cache-dtype, sized by vLLM's rules only",
        ),
    ],
)
def test_plan_refuses_a_dtype_naming_the_engine(kwargs, says):
    model = kwargs.pop("model", "llama-3.1-8b")
    with pytest.raises(KvcalcError) as e:
        kvcalc.plan(model, seq_len="8k", concurrency=4, **kwargs)
    assert says in str(e.value)
    assert e.value.field == "kv_dtype"


def test_plan_dcp_pins_decode_context_parallel_and_round_trips(cli, tmp_path):
    """`plan --dcp 8`: every layout takes tp a multiple of 8 (vLLM 0.33.0 vllm/config/parallel.py).
    DeepSeek-V3 64 x 32k on H200: 8 x H200 tp 8 dcp 8, each rank cdiv(32,768, 8) = 4,096 positions of
    each sequence: 64 x 4,096 x 61 x 576 (fp8 latent) = 9,210,691,584 B. The launch line carries
    --decode-context-parallel-size 8 (vllm/engine/arg_utils.py); the deployment it writes holds
    `dcp: 8` and `kvcalc check` gives the plan's max seqs for it."""
    out = tmp_path / "dsv3.yaml"
    r = cli("plan", "deepseek-v3", "-s", "32k", "--concurrency", "64", "--gpu", "h200", "--dcp", "8", "--top", "1",
            "--write-deployment", str(out), "-f", "json")  # fmt: skip
    assert r.exit_code == 0, r.output
    top = kvcalc.plan("deepseek-v3", seq_len="32k", concurrency=64, gpus="h200", dcp=8, top=1).layouts[0]
    assert (top.count, top.tp, top.dcp, top.kv_dtype) == (8, 8, 8, "fp8_e4m3")
    assert top.kv_cache_bytes_per_gpu == 64 * 4_096 * 61 * 576 == 9_210_691_584
    assert top.launch == (
        "vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 --pipeline-parallel-size 1 "
        "--decode-context-parallel-size 8 --max-model-len 32768 --kv-cache-dtype fp8 "
        "--gpu-memory-utilization 0.9 --max-num-seqs 64 --block-size 64"
    )
    dep = yaml.safe_load(out.read_text())
    # the file records vLLM's own name, as the launch line states it (it said fp8_e4m3, kvcalc's
    # name, which vLLM parses as another entry: on sparse MLA another backend)
    assert (dep["tp"], dep["dcp"], dep["kv_dtype"], dep["engine"]) == (8, 8, "fp8", "vllm")
    c = cli("check", str(out), "-f", "json")
    assert c.exit_code == 0, c.output
    import json

    row = json.loads(c.stdout)["deployments"][0]
    assert row["status"] == "ok" and row["max_concurrency"] == top.max_concurrency == 345


@pytest.mark.parametrize(
    ("engine", "model", "gpu", "seq_len", "kv_dtype", "recorded", "seqs"),
    [
        # vLLM's own TurboQuant preset: no kvcalc format, parsed by the file's engine
        ("vllm", "llama-3.1-8b", "h200", "32k", "turboquant_k8v4", "turboquant_k8v4", None),
        # fp8_e4m3 on sparse MLA on Hopper picks FLASHINFER_MLA_SPARSE_SM90 (a plain fp8 latent,
        # 576 B a token a layer) where fp8 picks FLASHMLA_SPARSE (fp8_ds_mla, 656 B): 120 seqs
        # against fp8's 108 on 8x H200 tp2 dp-attn4 ep8 (vLLM 0.33.0 `flashmla_sparse.py`,
        # `flashinfer_mla_sparse_sm90.py`). The file said fp8_e4m3 for both, and check read it
        # as kvcalc's format (108) where plan said 120.
        ("vllm", "deepseek-v3.2", "h200", "32k", "fp8_e4m3", "fp8_e4m3", 120),
        ("vllm", "deepseek-v3.2", "h200", "32k", "fp8", "fp8", 108),
        # no --kv-dtype / auto: plan's fp8 default is vLLM's `fp8` (the launch line's name)
        ("vllm", "deepseek-v3.2", "h200", "32k", None, "fp8", 108),
        ("vllm", "deepseek-v3.2", "h200", "32k", "auto", "fp8", 108),
        ("vllm", "llama-3.1-8b", "h200", "32k", None, "fp8", 121),
        # SGLang and llama.cpp name the format as kvcalc does
        ("sglang", "llama-3.1-8b", "h200", "32k", "fp8", "fp8_e4m3", 121),
        ("sglang", "deepseek-v3", "h200", "32k", None, "fp8_e4m3", 148),
        ("llamacpp", "qwen3-32b", "l40s", "8k", "q8_0", "q8_0", 4),
    ],
)
def test_a_deployment_round_trips_through_check(cli, tmp_path, engine, model, gpu, seq_len, kv_dtype, recorded, seqs):
    """`--write-deployment` writes the engine's own `kv_dtype` (`EngineProfile.recorded_kv_dtype`,
    the launch line's name); `kvcalc check` parses it by the file's engine (plan's one parse,
    `requests.plan_kv_picks`) and gives plan's max seqs and bytes per GPU for the same layout."""
    out = tmp_path / "d.yaml"
    given = ("--kv-dtype", kv_dtype) if kv_dtype else ()
    r = cli("plan", model, "-s", seq_len, "--concurrency", "64" if engine != "llamacpp" else "4", "--gpu", gpu,
            "--engine", engine, *given, "--top", "1", "--write-deployment", str(out), "-f", "json")  # fmt: skip
    assert r.exit_code == 0, r.output
    import json

    top = json.loads(r.stdout)["layouts"][0]
    assert yaml.safe_load(out.read_text())["kv_dtype"] == recorded
    c = cli("check", str(out), "-f", "json")
    assert c.exit_code == 0, c.output
    row = json.loads(c.stdout)["deployments"][0]
    assert row["status"] == "ok"
    assert (row["max_concurrency"], row["memory_bytes_per_gpu"]) == (
        top["max_concurrency"],
        top["memory_bytes_per_gpu"],
    )
    assert row["kv_dtype"] == top["kv_dtype"]
    if seqs is not None:
        assert top["max_concurrency"] == seqs


@pytest.mark.parametrize(
    "args,says",
    [
        (["deepseek-v3", "-e", "sglang"], "--dcp 2 with --engine sglang: decode context parallel is vLLM's"),
        # vLLM 0.33.0 v1/kv_cache_interface.py SlidingWindowSpec.max_memory_usage_bytes
        (["deepseek-v4-flash"], 'assert "DCP not support sliding window." when the cache is sized'),
        # TRITON_ATTN / TURBOQUANT: supports_dcp False (AttentionBackend.validate_configuration)
        (["llama-3.1-8b", "--kv-dtype", "turboquant_k8v4"], "with decode context parallel: its backend"),
        # GQA: tp >= dcp x KV heads = 16 past one node of 8 (vllm/config/model.py)
        (["llama-3.1-8b"], "--dcp 2: no layout within 32 GPUs (8 a node) takes it"),
    ],
)
def test_plan_dcp_refusals(cli, args, says):
    r = cli("plan", *args, "-s", "8k", "--gpu", "h200", "--dcp", "2")
    assert r.exit_code == 2, r.output
    assert says in " ".join(r.stderr.split())


def test_plan_dcp_on_a_hybrid_carries_it():
    """Qwen3-Next-80B-A3B (2 KV heads, Gated DeltaNet state): dcp 2 needs tp >= 4; the attention
    group is sharded, the state kept whole (vLLM 0.33.0, `engines.vllm.dcp.check_dcp_model`)."""
    r = kvcalc.plan("qwen3-next-80b-a3b", seq_len="128k", concurrency=16, gpus="h200", dcp=2, top=1)
    top = r.layouts[0]
    assert (top.tp, top.dcp) == (4, 2)
    assert " --decode-context-parallel-size 2 " in top.launch


def test_sweep_sizes_a_vllm_only_dtype_with_vllms_blocks(cli):
    """`sweep --engine vllm --kv-cache-dtype turboquant_k8v4 --gpu h200`: the KV column is vLLM's
    memory for the batch (tp 1: 28 x 8 x 196 + 4 x 8 x 512 = 60,288 B a token; 683 blocks of 48 a
    request at 32k): 32 x 32,784 x 60,288 = 63,247,417,344 B (58.90 GiB)."""
    r = cli("sweep", "llama-3.1-8b", "--engine", "vllm", "--kv-cache-dtype", "turboquant_k8v4", "--gpu", "h200",
            "-s", "32k", "--batch", "32", "-f", "json")  # fmt: skip
    assert r.exit_code == 0, r.output
    import json

    (row,) = json.loads(r.stdout)
    assert row["kv_cache_bytes_per_gpu"] == 32 * 32_784 * 60_288 == 63_247_417_344


def test_sglang_fp4_types_reach_plan():
    """SGLang 0.5.23's fp4 KV types (srt/arg_groups/fields/model.py): nvfp4 needs SM100 / SM120
    (kv_cache_hook.handle_kv4_compatibility), so on H200 + B200 it is planned on the B200 and the
    H200 is skipped with SGLang's words; fp4_mx_block16 runs on both. The launch lines name them."""
    r = kvcalc.plan("llama-3.1-8b", seq_len="32k", concurrency=8, gpus="h200,b200", engine="sglang", kv_dtypes="nvfp4")
    assert {lay.gpu for lay in r.layouts} == {"b200"}
    assert " --kv-cache-dtype nvfp4 " in r.layouts[0].launch
    assert any(
        n.startswith("skipped KV nvfp4 on h200: SGLang 0.5.23: --kv-cache-dtype=nvfp4 requires") for n in r.notes
    )
    r = kvcalc.plan(
        "llama-3.1-8b", seq_len="32k", concurrency=8, gpus="h200", engine="sglang", kv_dtypes="fp4_mx_block16"
    )
    assert " --kv-cache-dtype fp4_mx_block16 " in r.layouts[0].launch
    with pytest.raises(KvcalcError, match="SGLang 0.5.23: --kv-cache-dtype=nvfp4 requires Blackwell SM100 or SM120"):
        kvcalc.plan("llama-3.1-8b", seq_len="32k", concurrency=8, gpus="h200", engine="sglang", kv_dtypes="nvfp4")


def test_check_names_the_engines_dtype(cli, tmp_path):
    """A deployment of vLLM's own dtype checks under that name (not the bf16 its formats stand in
    with), and without `engine:` it is refused pointing at vLLM."""
    f = tmp_path / "tq.yaml"
    body = "model: llama-3.1-8b\ngpu: h200\ncount: 1\nkv_dtype: turboquant_k8v4\nmax_seq_len: 32768\nconcurrency: 8\n"
    f.write_text(body)
    r = cli("check", str(f))
    assert r.exit_code == 2 and "'turboquant_k8v4' is a vLLM 0.33 --kv-cache-dtype" in r.stderr
    f.write_text(body + "engine: vllm\n")
    r = cli("check", str(f), "-f", "json")
    assert r.exit_code == 0, r.output
    import json

    assert json.loads(r.stdout)["deployments"][0]["kv_dtype"] == "turboquant_k8v4"


@pytest.mark.parametrize(
    ("kv_dtype", "seqs", "backend"),
    [
        # the file's spelling reaches vLLM's parse (`Deployment.kv_dtype_given`); the format name
        # kvcalc keeps (`Deployment.kv_dtype`) is fp8_e4m3 for all three
        ("fp8", 108, "FLASHMLA_SPARSE"),
        (" FP8_E4M3", 120, "FLASHINFER_MLA_SPARSE_SM90"),
        ("fp8_ds_mla", 108, "FLASHMLA_SPARSE"),
    ],
)
def test_check_parses_a_hand_written_kv_dtype_as_vllm_does(cli, tmp_path, kv_dtype, seqs, backend):
    """A hand-written DeepSeek-V3.2 file, 8x H200 tp2 dp-attn4 ep8 at 64 x 32k under vLLM 0.33:
    `fp8` and `fp8_ds_mla` are FLASHMLA_SPARSE (656 B rows), `fp8_e4m3` FLASHINFER_MLA_SPARSE_SM90
    (576 B), as `kvcalc plan --kv-dtype` sizes them (108 and 120 sequences, the round trip above)."""
    out = tmp_path / "d.yaml"
    out.write_text(
        "model: deepseek-v3.2\ngpu: h200\ncount: 8\ntp: 2\npp: 1\ndp_attention: 4\nep: 8\n"
        f"kv_dtype: '{kv_dtype}'\nweight_dtype: fp8_e4m3:b128:fp32\nmax_seq_len: 32768\nconcurrency: 64\n"
        "engine: vllm\n"
    )
    c = cli("check", str(out), "-f", "json")
    assert c.exit_code == 0, c.output
    import json

    row = json.loads(c.stdout)["deployments"][0]
    assert row["max_concurrency"] == seqs
    assert any(backend + " (" in n for n in row["notes"]), row["notes"]
