"""The launch lines, flag by flag (`kvcalc.engines.launch`).

Each expected line is written out whole from the engines' argument parsers (the module docstring
of `launch.py` names each source): vLLM's `vllm/engine/arg_utils.py`, SGLang's
`python/sglang/srt/server_args.py`, llama.cpp's `common/arg.cpp`. Each test changes one thing of
the plan (tp / pp / dp / nodes, the KV and weight formats, the split) and checks the flag it
controls appears, or does not, with its exact value. Refusals are checked as the one CLI line
(`str(err)`) and the field they name.
"""

from __future__ import annotations

import dataclasses

import pytest

from kvcalc.engines import launch, llamacpp
from kvcalc.engines.launch import LaunchSpec
from kvcalc.errors import KvcalcError
from kvcalc.schema import ModelSpec

# configs/models/llama-3.1-8b.yaml (huggingface.co/meta-llama/Llama-3.1-8B config.json), with its
# `source` line as the config file writes it
LLAMA_8B = ModelSpec(
    name="llama-3.1-8b",
    source="meta-llama/Llama-3.1-8B config.json (huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json)",
    n_layers=32,
    n_heads=32,
    n_kv_heads=8,
    hidden_size=4096,
    vocab_size=128256,
    intermediate_size=14336,
    max_position_embeddings=131072,
)
# llama-3.1-405b: 126 layers (huggingface.co/meta-llama/Llama-3.1-405B config.json), the one
# model past llama.cpp's -ngl 99
LLAMA_405B = ModelSpec(
    name="llama-3.1-405b",
    n_layers=126,
    n_heads=128,
    n_kv_heads=8,
    hidden_size=16384,
    vocab_size=128256,
    intermediate_size=53248,
)
FP32 = LLAMA_8B.model_copy(update={"dtype": "fp32"})
# an fp8 checkpoint (weights stored fp8, activations / KV bf16), e.g. a `-FP8` repository
FP8_CKPT = LLAMA_8B.model_copy(update={"weight_dtype": "fp8_e4m3"})


def spec(model: ModelSpec = LLAMA_8B, **kw) -> LaunchSpec:
    base = dict(
        model=model,
        tp=1,
        pp=1,
        dp=1,
        nodes=1,
        max_model_len=8192,
        max_num_seqs=64,
        k_dtype=model.dtype,
        v_dtype=model.dtype,
        weight_dtype=None,
        gpu_memory_utilization=0.9,
    )
    return LaunchSpec(**(base | kw))


def refusal(fn, *args) -> KvcalcError:
    with pytest.raises(KvcalcError) as e:
        fn(*args)
    return e.value


# ----- model_ref ------------------------------------------------------------------------------


def test_model_ref_is_the_hf_id_at_the_start_of_source():
    assert launch.model_ref(LLAMA_8B) == "meta-llama/Llama-3.1-8B"
    # the id alone, no file name after it
    assert launch.model_ref(LLAMA_8B.model_copy(update={"source": "Qwen/Qwen2.5-7B"})) == "Qwen/Qwen2.5-7B"


def test_model_ref_is_the_model_path_the_loader_set():
    # `model_path` (a Hub id input, a config.json's `_name_or_path` or its folder) wins over `source`
    m = LLAMA_8B.model_copy(update={"model_path": "/ckpt/llama-8b"})
    assert launch.model_ref(m) == "/ckpt/llama-8b"
    assert launch.vllm_line(spec(model=m)).startswith("vllm serve /ckpt/llama-8b --tensor-parallel-size 1 ")


@pytest.mark.parametrize(
    "source",
    [None, "a local config.json", "configs/model.yaml", "tests/x.json (HF config.json, model_type llama)"],
)
def test_model_ref_never_invents_a_name(source):
    # no Hub id and no checkpoint known: the placeholder, never the config's name (llama-3.1-405b)
    assert launch.model_ref(LLAMA_405B.model_copy(update={"source": source})) == "CHECKPOINT_DIR"


# ----- vLLM -----------------------------------------------------------------------------------


def test_vllm_line_whole():
    assert launch.vllm_line(spec(tp=2)) == (
        "vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 2 --pipeline-parallel-size 1 "
        "--max-model-len 8192 --kv-cache-dtype auto --gpu-memory-utilization 0.9 --max-num-seqs 64"
    )


def test_vllm_line_data_parallel_from_two():
    # dp 1 writes no --data-parallel-size; dp 2 (the first value that needs it) does
    assert "--data-parallel-size" not in launch.vllm_line(spec(dp=1))
    assert launch.vllm_line(spec(tp=4, pp=2, dp=2, gpu_memory_utilization=0.95, max_num_seqs=3)) == (
        "vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 4 --pipeline-parallel-size 2 "
        "--data-parallel-size 2 --max-model-len 8192 --kv-cache-dtype auto --gpu-memory-utilization 0.95 "
        "--max-num-seqs 3"
    )


def test_vllm_fp8_kv_and_weights():
    # fp8 e4m3 KV is vLLM's `fp8`; fp8 weights from a bf16 checkpoint: `--quantization fp8`
    line = launch.vllm_line(spec(k_dtype="fp8_e4m3", v_dtype="fp8_e4m3", weight_dtype="fp8_e4m3"))
    assert line.endswith("--kv-cache-dtype fp8 --gpu-memory-utilization 0.9 --max-num-seqs 64 --quantization fp8")
    # e5m2 keeps its own name
    line = launch.vllm_line(spec(k_dtype="fp8_e5m2", v_dtype="fp8_e5m2"))
    assert line.endswith("--kv-cache-dtype fp8_e5m2 --gpu-memory-utilization 0.9 --max-num-seqs 64")


def test_vllm_refusals_name_vllm():
    e = refusal(launch.vllm_line, spec(k_dtype="int8", v_dtype="int8"))
    # vLLM 0.33.0's names of kvcalc's formats (engine_dtypes.VLLM_033_FORMAT_NAMES)
    assert str(e) == "--k-dtype int8: vLLM 0.33 has no int8 KV cache (auto, fp8, fp8_e5m2, float16, bfloat16, nvfp4)"
    assert (e.field, e.value) == ("k_dtype", "int8")
    e = refusal(launch.vllm_line, spec(weight_dtype="int4"))
    assert str(e) == (
        "--weight-dtype int4: vLLM loads int4 weights from a checkpoint quantized offline "
        "(AWQ, GPTQ); kvcalc has no launch line for it: plan with --weight-dtype fp8 or the "
        "model's dtype"
    )
    assert (e.field, e.value) == ("weight_dtype", "int4")


# ----- the KV cache dtype (both engines) -----------------------------------------------------


def test_kv_cache_dtype_auto_for_the_models_dtype():
    assert launch._kv_cache_dtype(spec(), "vLLM", "fp8") == "auto"
    # an fp32 model: auto serves its KV in a 16-bit dtype, bf16 or fp16 alike
    assert launch._kv_cache_dtype(spec(FP32, k_dtype="bf16", v_dtype="bf16"), "vLLM", "fp8") == "auto"
    assert launch._kv_cache_dtype(spec(FP32, k_dtype="fp16", v_dtype="fp16"), "vLLM", "fp8") == "auto"
    # an fp32 model with an fp8 KV is still fp8, not auto
    assert launch._kv_cache_dtype(spec(FP32, k_dtype="fp8_e4m3", v_dtype="fp8_e4m3"), "vLLM", "fp8") == "fp8"
    assert (
        launch._kv_cache_dtype(spec(FP32, k_dtype="fp8_e5m2", v_dtype="fp8_e5m2"), "SGLang", "fp8_e4m3") == "fp8_e5m2"
    )


def test_kv_cache_dtype_other_16_bit_of_a_bf16_model_is_refused():
    # a bf16 model's KV in fp16: not auto (that is bf16), and no other --kv-cache-dtype value
    e = refusal(launch._kv_cache_dtype, spec(k_dtype="fp16", v_dtype="fp16"), "vLLM", "fp8")
    assert str(e) == "--k-dtype fp16: vLLM has no fp16 KV cache (auto, fp8, fp8_e5m2)"


def test_kv_cache_dtype_split_k_v_refused():
    e = refusal(launch._kv_cache_dtype, spec(k_dtype="bf16", v_dtype="fp8_e4m3"), "SGLang", "fp8_e4m3")
    assert str(e) == "--k-dtype: SGLang stores K and V in one format; plan with one --kv-dtype"
    assert (e.field, e.value) == ("k_dtype", None)


# ----- weights (both engines) ----------------------------------------------------------------


def test_quantization_flags():
    assert launch._quantization(spec(), "vLLM") == []
    # the checkpoint's own format: nothing to quantize (fp8 checkpoint, fp8 plan)
    assert launch._quantization(spec(FP8_CKPT, weight_dtype="fp8_e4m3"), "vLLM") == []
    assert launch._quantization(spec(weight_dtype="bf16"), "vLLM") == []
    assert launch._quantization(spec(weight_dtype="fp8_e5m2"), "vLLM") == ["--quantization", "fp8"]
    # a 16-bit dtype other than the checkpoint's: --dtype (vLLM's ModelConfig dtype names)
    assert launch._quantization(spec(FP32, weight_dtype="bf16"), "vLLM") == ["--dtype", "bfloat16"]
    assert launch._quantization(spec(FP32, weight_dtype="fp16"), "vLLM") == ["--dtype", "float16"]
    assert launch._quantization(spec(FP8_CKPT, weight_dtype="bf16"), "vLLM") == ["--dtype", "bfloat16"]
    assert launch._quantization(spec(weight_dtype="fp16"), "SGLang") == ["--dtype", "float16"]


def test_quantization_refuses_offline_formats():
    e = refusal(launch._quantization, spec(weight_dtype="q4_0"), "SGLang")
    assert str(e) == (
        "--weight-dtype q4_0: SGLang loads q4_0 weights from a checkpoint quantized offline "
        "(AWQ, GPTQ); kvcalc has no launch line for it: plan with --weight-dtype fp8 or the "
        "model's dtype"
    )
    assert (e.field, e.value) == ("weight_dtype", "q4_0")


# ----- SGLang ---------------------------------------------------------------------------------


def test_sglang_line_one_node():
    # pp 1, dp 1 and one node write none of --pp-size, --dp-size, --nnodes
    assert launch.sglang_line(spec(tp=2)) == (
        "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --tp-size 2 "
        "--context-length 8192 --kv-cache-dtype auto --mem-fraction-static 0.9 --max-running-requests 64"
    )


def test_sglang_line_each_parallel_flag_from_two():
    assert launch.sglang_line(spec(tp=8, pp=2)) == (
        "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --tp-size 8 --pp-size 2 "
        "--context-length 8192 --kv-cache-dtype auto --mem-fraction-static 0.9 --max-running-requests 64"
    )
    assert launch.sglang_line(spec(tp=8, dp=2)) == (
        "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --tp-size 8 --dp-size 2 "
        "--context-length 8192 --kv-cache-dtype auto --mem-fraction-static 0.9 --max-running-requests 64"
    )
    # 16 GPUs over 2 nodes of 8: the head node's line (rank 0)
    assert launch.sglang_line(
        spec(
            tp=8,
            pp=2,
            dp=3,
            nodes=2,
            k_dtype="fp8_e4m3",
            v_dtype="fp8_e4m3",
            weight_dtype="fp8_e4m3",
            gpu_memory_utilization=0.85,
        )
    ) == (
        "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --tp-size 8 --pp-size 2 "
        "--dp-size 3 --nnodes 2 --node-rank 0 --dist-init-addr HEAD_NODE_IP:5000 --context-length 8192 "
        "--kv-cache-dtype fp8_e4m3 --mem-fraction-static 0.85 --max-running-requests 64 --quantization fp8"
    )


def test_sglang_refusals_name_sglang():
    e = refusal(launch.sglang_line, spec(k_dtype="q8_0", v_dtype="q8_0"))
    # SGLang 0.5.23 --kv-cache-dtype choices (srt/arg_groups/fields/model.py), fp8 spelled fp8_e4m3
    assert str(e) == (
        "--k-dtype q8_0: SGLang 0.5.23 has no q8_0 KV cache (auto, fp8_e4m3, fp8_e5m2, mxfp8, nvfp4, fp4_mx_block16)"
    )
    e = refusal(launch.sglang_line, spec(weight_dtype="mxfp4"))
    assert str(e).startswith("--weight-dtype mxfp4: SGLang loads mxfp4 weights from a checkpoint quantized")


# ----- llama.cpp ------------------------------------------------------------------------------


def cpp(s: LaunchSpec) -> str:
    return launch.llamacpp_line(s, llamacpp.ggml_name)


def test_llamacpp_line_whole():
    # -c = 8192 tokens x 4 slots = 32,768; -ngl max(99, 32 + 1) = 99; f16 cache, no -fa
    assert cpp(spec(max_num_seqs=4, k_dtype="fp16", v_dtype="fp16")) == (
        "llama-server -m llama-3.1-8b-BF16.gguf -c 32768 -np 4 -ctk f16 -ctv f16 -ngl 99"
    )


def test_llamacpp_ngl_covers_every_layer_and_the_output():
    # 126 layers + the output layer: -ngl 127
    assert cpp(spec(LLAMA_405B, max_num_seqs=1)).endswith("-ctk bf16 -ctv bf16 -ngl 127")
    # 98 layers + 1 = 99 = the floor; 99 layers + 1 = 100
    for n_layers, ngl in ((98, 99), (99, 100)):
        m = LLAMA_405B.model_copy(update={"n_layers": n_layers})
        assert cpp(spec(m)).endswith(f"-ngl {ngl}")


def test_llamacpp_tensor_split_and_flash_attention():
    # two devices split 3:1: -ts 3,1; a q8_0 V cache needs -fa on; the weights' GGUF is Q8_0
    assert cpp(spec(max_num_seqs=2, k_dtype="q8_0", v_dtype="q8_0", weight_dtype="q8_0", tensor_split=(3, 1))) == (
        "llama-server -m llama-3.1-8b-Q8_0.gguf -c 16384 -np 2 -ctk q8_0 -ctv q8_0 -ngl 99 -ts 3,1 -fa on"
    )
    # one device: no -ts
    assert "-ts" not in cpp(spec(tensor_split=(1,)))
    # a quantized K with a 16-bit V needs no flash attention; each unquantized V type writes no -fa
    for v, name in (("fp32", "f32"), ("fp16", "f16"), ("bf16", "bf16")):
        assert cpp(spec(k_dtype="q4_0", v_dtype=v)).endswith(f"-ctk q4_0 -ctv {name} -ngl 99")
    assert cpp(spec(k_dtype="fp16", v_dtype="q4_0")).endswith("-ctk f16 -ctv q4_0 -ngl 99 -fa on")


def test_llamacpp_refuses_tp_and_dp():
    for kw in (dict(tp=2), dict(dp=2)):
        e = refusal(cpp, spec(**kw))
        assert str(e) == "--tp: llama.cpp splits layers over devices, not heads: plan it with tp 1"
        assert e.field == "tp"


def test_llamacpp_refusal_names_the_side():
    # llama.cpp has no fp8 cache type: the error names the K or the V side
    e = refusal(cpp, spec(k_dtype="fp8_e4m3", v_dtype="fp16"))
    assert (e.field, e.option, e.value) == ("k_dtype", "--k-dtype", "fp8_e4m3")
    e = refusal(cpp, spec(k_dtype="fp16", v_dtype="fp8_e4m3"))
    assert (e.field, e.option, e.value) == ("v_dtype", "--v-dtype", "fp8_e4m3")
    assert str(e) == (
        "--v-dtype: llama.cpp 0c1e570 has no 'fp8_e4m3' KV cache type; use one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
        "q5_1, iq4_nl"
    )


def test_launch_spec_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec().tp = 2  # type: ignore[misc]


def test_llamacpp_cache_type_refusal_names_the_current_release():
    """The refusal names the llama.cpp release whose cache-type list it gives (issue 20)."""
    from kvcalc.engines.llamacpp.common import KV_TYPES_COMMIT
    from kvcalc.engines.llamacpp.current import CURRENT_COMMIT

    assert KV_TYPES_COMMIT == CURRENT_COMMIT == "0c1e570"
