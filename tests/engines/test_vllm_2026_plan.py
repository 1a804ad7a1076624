"""`kvcalc plan --engine vllm` on the 2026 models: vLLM 0.33 sizes them by per-layer KV cache specs
(`v0_33_specs`, `planning`), and the plan's block arithmetic is the same as `vllm.memory_for` /
`vllm.capacity` (vLLM 0.33.0 `vllm/v1/core/kv_cache_planning.py` `get_kv_cache_configs`,
`kv_cache_utils.get_max_concurrency_for_kv_cache_config`). A model vLLM itself refuses at load
(MiniMax-M3's `minimax_m3` config) is refused with vLLM's reason."""

import pytest

from kvcalc.engines import vllm
from kvcalc.engines.vllm.options import VllmOptions
from kvcalc.engines.vllm.plan import VllmPlanKv, gpu_options, resolve
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.gpus import get_gpu
from kvcalc.load.models import load_model

T = 32_768
# (model, tp, kv dtype): one layout each, on an H200 (compute capability 9.0, Hopper's backends)
LAYOUTS = [
    ("deepseek-v4-flash", 2, "fp8"),
    ("deepseek-v3.2", 8, "fp8"),
    ("glm-5.2", 8, "bf16"),
    ("kimi-k3", 8, "bf16"),
    ("mimo-v2-flash", 4, "bf16"),
    ("gemma-4-26b-a4b", 1, "bf16"),
]


@pytest.mark.parametrize(("name", "tp", "dtype"), LAYOUTS)
def test_plan_blocks_are_memory_for(name, tp, dtype):
    # the KV memory a stage must leave for 4 requests is vllm.memory_for's, and exactly that memory
    # admits 4 requests (one byte less: 3), as vLLM's blocks = M // bytes per block,
    # requests = blocks // blocks per request
    model, gpu = load_model(name), get_gpu("h200")
    k = kv_format(dtype)
    kv = resolve(model, VllmOptions(), gpu, tp, dtype, dtype)
    assert kv.spec_groups is not None
    need = vllm.memory_for(model, T, 4, k, k, tp=tp, options=gpu_options(VllmOptions(), gpu))
    assert kv.stage_bytes(T, 4) == [need]
    assert kv.max_batch(T, [need]) == 4
    assert kv.max_batch(T, [need - 1]) == 3


def test_deepseek_v32_plan_by_hand():
    # DeepSeek-V3.2 in fp8 on Hopper (vLLM 0.33.0 FLASHMLA_SPARSE: fp8 stored as fp8_ds_mla, 656 B a
    # token, block 64; the indexer key 128 fp8 + 4 B scale = 132 B): one group of the 61 layers'
    # latent + indexer pages, 64 x (656 + 132) x 61 = 3,076,352 B a block; 32,768 tokens take
    # 32,768 / 64 = 512 blocks, so 4 requests need 4 x 512 x 3,076,352 = 6,300,368,896 B
    kv = resolve(load_model("deepseek-v3.2"), VllmOptions(), get_gpu("h200"), 8, "fp8", "fp8")
    assert (kv.block_size, kv.page_bytes) == (64, 3_076_352)
    assert kv.stage_bytes(T, 4) == [6_300_368_896]


def test_spec_model_over_pipeline_stages_refused():
    model = load_model("deepseek-v4-flash")
    whole = resolve(model, VllmOptions(), get_gpu("h200"), 2, "fp8", "fp8")
    with pytest.raises(KvcalcError, match="per-layer KV cache specs.*pipeline stages") as e:
        VllmPlanKv.on_stages(model, whole, (range(20), range(20, 43)))
    assert e.value.field == "pp"


@pytest.mark.parametrize("name", ["deepseek-v4-flash", "deepseek-v3.2", "glm-5.2", "kimi-k3", "mimo-v2-flash"])
def test_cli_plan_vllm_plans_the_2026_models(cli, name):
    r = cli("plan", name, "--engine", "vllm", "--gpu", "h200", "-s", "32k", "--concurrency", "8")
    assert r.exit_code == 0, r.output
    assert "vllm serve" in r.output


def test_cli_plan_vllm_refuses_what_vllm_refuses(cli):
    # vLLM 0.33 registers MiniMax-M3 as MiniMaxM3SparseForCausalLM with model_type minimax_m3_vl /
    # minimax_m3_text; the published config's minimax_m3 / MiniMaxM3ForCausalLM loads in neither registry
    r = cli("plan", "minimax-m3", "--engine", "vllm", "--gpu", "h200", "-s", "32k")
    assert r.exit_code == 2
    assert "vLLM 0.33 refuses this config.json at load" in r.output
