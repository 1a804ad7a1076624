"""`--vllm-version 0.6` refuses what vLLM 0.6.6.post1 refuses, with vLLM's own text, and takes
vLLM 0.6's default swap space (issue 10: "the rest are refused with the engine's own reason").

Sources (vLLM 0.6.6.post1): `vllm/model_executor/models/registry.py` `_VLLM_MODELS` and
`_ModelRegistry._raise_for_unsupported`; `vllm/engine/arg_utils.py` `add_cli_args` (`--block-size`
choices 8, 16, 32, 64, 128; `swap_space: float = 4  # GiB`); `vllm/config.py`
`CacheConfig._verify_args` ("CUDA Paged Attention kernel only supports block sizes up to 32").
The oracle (tests/oracle/vllm06_harness.py) checks the same against vLLM's code.
"""

from __future__ import annotations

import pytest

from kvcalc.engines import vllm
from kvcalc.engines.profile import VllmOptions
from kvcalc.engines.vllm import v0_6
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.files import bundled
from kvcalc.load.models import load_model

BF16 = kv_format("bf16")
GiB = 2**30

#: bundled models whose architecture vLLM 0.6.6's registry lists (and kvcalc sizes for V0)
TAKEN = [
    "deepseek-r1",
    "deepseek-v2-lite",
    "deepseek-v3",
    "falcon-7b",
    "gemma-2-9b",
    "gpt2",
    "llama-2-70b",
    "llama-2-7b",
    "llama-3.1-405b",
    "llama-3.1-70b",
    "llama-3.1-8b",
    "llama-3.2-1b",
    "llama-3.2-3b",
    "llama-3.3-70b",
    "mistral-7b-v0.1",
    "mistral-nemo",
    "mistral-small-24b",
    "mixtral-8x7b",
    "phi-3-mini",
    "phi-4",
    "qwen2.5-72b",
    "qwen2.5-7b",
]
#: bundled models vLLM 0.6.6 cannot load: the architecture its registry lacks
NOT_IN_REGISTRY = {
    "falcon-h1-7b": "FalconH1ForCausalLM",
    "gemma-3-12b": "Gemma3ForCausalLM",
    "gemma-3-1b": "Gemma3ForCausalLM",
    "gemma-3-27b": "Gemma3ForCausalLM",
    "gemma-3-4b": "Gemma3ForCausalLM",
    "gpt-oss-120b": "GptOssForCausalLM",
    "gpt-oss-20b": "GptOssForCausalLM",
    "llama-4-scout": "Llama4ForCausalLM",
    "qwen3-14b": "Qwen3ForCausalLM",
    "qwen3-235b-a22b": "Qwen3MoeForCausalLM",
    "qwen3-30b-a3b": "Qwen3MoeForCausalLM",
    "qwen3-32b": "Qwen3ForCausalLM",
    "qwen3-4b": "Qwen3ForCausalLM",
    "qwen3-8b": "Qwen3ForCausalLM",
    "qwen3-next-80b-a3b": "Qwen3NextForCausalLM",
    # the 2026 families (architectures from their config.json, tests/data/hf-configs-2026/)
    "deepseek-v3.2": "DeepseekV32ForCausalLM",
    "deepseek-v4-flash": "DeepseekV4ForCausalLM",
    "gemma-4-26b-a4b": "Gemma4ForConditionalGeneration",
    "glm-5.2": "GlmMoeDsaForCausalLM",
    "mimo-v2-flash": "MiMoV2FlashForCausalLM",
    "minimax-m2.7": "MiniMaxM2ForCausalLM",
    "minimax-m3": "MiniMaxM3ForCausalLM",
    "nemotron-3-super-120b-a12b": "NemotronHForCausalLM",
    "qwen3-vl-8b": "Qwen3VLForConditionalGeneration",
    "qwen3.5-27b": "Qwen3_5ForCausalLM",
    "step-3.7-flash": "Step3p7FlashForCausalLM",
}
#: in the registry, but refused by kvcalc with its own reason: Jamba's Mamba state lives outside
#: V0's blocks; Kimi-K2 (model_type kimi_k2) is not padded to head size 256 by `get_head_size`
KVCALC_REFUSES = {
    "jamba-1.5-mini": "keeps Mamba state outside the KV blocks",
    "kimi-k2": "it pads the head of model_type deepseek_v2 / deepseek_v3 only",
    "kimi-k2.5": "it pads the head of model_type deepseek_v2 / deepseek_v3 only",
    "kimi-k3": "it pads the head of model_type deepseek_v2 / deepseek_v3 only",
}


def test_every_bundled_model_is_listed_once():
    listed = TAKEN + list(NOT_IN_REGISTRY) + list(KVCALC_REFUSES)
    assert sorted(listed) == sorted(bundled("models"))
    assert len(listed) == len(set(listed)) == 52


@pytest.mark.parametrize("name", TAKEN)
def test_v06_takes_the_models_its_registry_lists(name):
    # 40 GiB on one GPU, 1,024 tokens (gpt2's whole context)
    r = vllm.capacity(load_model(name), 40 * GiB, BF16, BF16, max_model_len=1024, options=VllmOptions(version="0.6"))
    assert r.engine_version == "vLLM 0.6.x (V0 engine)" and r.num_gpu_blocks > 0


@pytest.mark.parametrize("name", sorted(NOT_IN_REGISTRY))
def test_v06_refuses_with_the_registry_text(name):
    model = load_model(name)
    with pytest.raises(KvcalcError) as e:
        vllm.capacity(model, 40 * GiB, BF16, BF16, max_model_len=4096, options=VllmOptions(version="0.6"))
    assert str(e.value) == (
        f"{name}: vLLM 0.6 cannot load it: Model architectures ['{NOT_IN_REGISTRY[name]}'] are "
        "not supported for now. (vllm/model_executor/models/registry.py; model_type "
        f"{model.model_type}): use --vllm-version 0.11 or 0.33"
    )
    assert (e.value.field, e.value.value) == ("model", name)
    with pytest.raises(KvcalcError, match="are not supported for now"):
        vllm.memory_for(model, 4096, 1, BF16, BF16, options=VllmOptions(version="0.6"))
    # the same model in vLLM 0.11 is not refused for its architecture
    try:
        vllm.capacity(model, 40 * GiB, BF16, BF16, max_model_len=4096, options=VllmOptions(version="0.11"))
    except KvcalcError as other:
        assert "not supported for now" not in str(other)


@pytest.mark.parametrize("name", sorted(KVCALC_REFUSES))
def test_v06_refuses_what_kvcalc_does_not_model(name):
    with pytest.raises(KvcalcError, match=KVCALC_REFUSES[name]):
        vllm.capacity(load_model(name), 40 * GiB, BF16, BF16, max_model_len=4096, options=VllmOptions(version="0.6"))


@pytest.mark.parametrize("block_size", [8, 16, 32])
def test_v06_block_sizes_taken_on_cuda(block_size):
    # llama-3.1-8b: block = block_size x 32 layers x 8 heads x 128 x 2 (K, V) x 2 B = block_size x 131,072 B;
    # 1 GiB // that: 8 -> 1,048,576 B, 1,024 blocks; 16 -> 2,097,152 B, 512; 32 -> 4,194,304 B, 256
    r = vllm.capacity(
        load_model("llama-3.1-8b"),
        GiB,
        BF16,
        BF16,
        max_model_len=4096,
        options=VllmOptions(version="0.6", block_size=block_size),
    )
    assert (r.page_size_bytes, r.num_gpu_blocks) == {8: (1_048_576, 1024), 16: (2_097_152, 512), 32: (4_194_304, 256)}[
        block_size
    ]


@pytest.mark.parametrize("block_size", [64, 128])
def test_v06_refuses_blocks_above_32_on_cuda(block_size):
    with pytest.raises(KvcalcError) as e:
        vllm.capacity(
            load_model("llama-3.1-8b"), GiB, BF16, BF16, options=VllmOptions(version="0.6", block_size=block_size)
        )
    assert str(e.value) == (
        f"--block-size {block_size}: vLLM 0.6 refuses it: CUDA Paged Attention kernel only "
        f"supports block sizes up to 32. Got {block_size}. (vllm/config.py CacheConfig._verify_args)"
    )
    # vLLM 0.11 takes them (BlockSize = Literal[1, 8, 16, 32, 64, 128, 256])
    assert (
        vllm.capacity(
            load_model("llama-3.1-8b"), GiB, BF16, BF16, options=VllmOptions(version="0.11", block_size=block_size)
        ).block_size
        == block_size
    )


@pytest.mark.parametrize("block_size", [1, 4, 24, 256])
def test_v06_refuses_block_sizes_outside_argparse_choices(block_size):
    with pytest.raises(KvcalcError) as e:
        vllm.capacity(
            load_model("llama-3.1-8b"), GiB, BF16, BF16, options=VllmOptions(version="0.6", block_size=block_size)
        )
    assert str(e.value) == (
        f"--block-size {block_size}: vLLM 0.6 refuses it: argument --block-size: invalid choice: "
        f"{block_size} (choose from 8, 16, 32, 64, 128) (vllm/engine/arg_utils.py)"
    )
    assert e.value.field == "block_size"


def test_v06_block_size_refused_before_the_model():
    # vLLM's argparse runs before the model's config is read: the block size is named first
    with pytest.raises(KvcalcError, match="--block-size 64: vLLM 0.6 refuses it"):
        vllm.capacity(load_model("qwen3-8b"), GiB, BF16, BF16, options=VllmOptions(version="0.6", block_size=64))


def test_v06_default_swap_space_is_4_gib():
    # llama-3.1-8b, block 16: 2,097,152 B; vLLM 0.6's default swap 4 GiB // 2,097,152 = 2,048 CPU blocks
    llama = load_model("llama-3.1-8b")
    r = vllm.capacity(llama, GiB, BF16, BF16, max_model_len=4096, options=VllmOptions(version="0.6"))
    assert (r.num_gpu_blocks, r.num_cpu_blocks) == (512, 2048)
    assert r.log_lines[1] == "# GPU blocks: 512, # CPU blocks: 2048"
    assert VllmOptions(version="0.6").swap_space_bytes == 4 * GiB == v0_6.SWAP_SPACE_BYTES
    assert VllmOptions(version="0.6", swap_space_bytes=0).swap_space_bytes == 0
    assert VllmOptions().swap_space_bytes == 0  # V1 has no swap
    # deepseek-v3 per-head V0 block 127,926,272 B: 4 GiB // that = 33 CPU blocks (33 x 127,926,272 = 4,221,566,976)
    r = vllm.capacity(
        load_model("deepseek-v3"), 40 * GiB, BF16, BF16, max_model_len=4096, options=VllmOptions(version="0.6")
    )
    assert r.num_cpu_blocks == 33


def test_cli_swap_space_default_and_explicit(cli):
    args = ("capacity", "llama-3.1-8b", "-e", "vllm", "-m", "1GiB", "-L", "4096", "-f", "json")
    out = cli(*args, "--vllm-version", "0.6")
    assert out.exit_code == 0, out.output
    assert '"num_cpu_blocks": 2048' in out.stdout
    out = cli(*args, "--vllm-version", "0.6", "--swap-space", "0")
    assert '"num_cpu_blocks": 0' in out.stdout
    # 1 GiB of swap // 2,097,152 = 512
    assert '"num_cpu_blocks": 512' in cli(*args, "--vllm-v0", "--swap-space", "1GiB").stdout
    # V1 without --swap-space: no swap, not refused; with it: refused
    assert cli(*args).exit_code == 0
    res = cli(*args, "--swap-space", "4GiB")
    assert res.exit_code == 2 and res.stderr.startswith("error: --swap-space is vLLM V0's CPU swap")


def test_cli_refusals_one_line(cli):
    res = cli("capacity", "gpt-oss-20b", "-e", "vllm", "-m", "10GiB", "--vllm-version", "0.6")
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        "error: gpt-oss-20b: vLLM 0.6 cannot load it: Model architectures "
        "['GptOssForCausalLM'] are not supported for now. "
        "(vllm/model_executor/models/registry.py; model_type gpt_oss): use "
        "--vllm-version 0.11 or 0.33"
    )
    res = cli("capacity", "llama-3.1-8b", "-e", "vllm", "-m", "10GiB", "--vllm-version", "0.6", "--block-size", "128")
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        "error: --block-size 128: vLLM 0.6 refuses it: CUDA Paged Attention kernel only "
        "supports block sizes up to 32. Got 128. (vllm/config.py CacheConfig._verify_args)"
    )
