"""kvcalc's vLLM native offload arithmetic held against vLLM 0.33.0's own code (issue 22, item 5).

Runs vLLM's `VllmConfig._post_init_kv_transfer_config` (`--kv-offloading-size` -> the connector's
`cpu_bytes_to_use`), `CPUOffloadingSpec.__init__` (chunks, padded chunk bytes, each rank's share)
and `CPUOffloadingInfo.from_config` (the tier's tokens at max_model_len), all on the CPU, and
compares each figure with `kvcalc capacity --engine vllm --kv-offloading-size S`'s offload result
for the same model, tp, size and blocks per chunk. Needs vLLM 0.33.0 in its own venv
(`tools/install_vllm_oracle.sh 0.33.0`); from the repository root:
`/work/oracle/venv-vllm-0.33.0/bin/python -m pytest -m oracle tests/oracle/test_offload_oracle.py`.
Skipped, with the reason, where vllm does not import.
"""

from __future__ import annotations

import importlib.util
import itertools
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.oracle

GiB = 1 << 30


def _missing() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (tools/install_vllm_oracle.sh 0.33.0 installs it into its own venv)"
    try:
        from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec  # noqa: F401
    except Exception as e:  # any import failure of vLLM's code is a reason to skip, given whole
        return f"vllm does not import on this machine: {type(e).__name__}: {e}"
    return None


_MISSING = _missing()
skip = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

#: (model, tp, max_model_len): a dense GQA model at tp 1 and 8, MLA at tp 1 and 8 (replicated)
MODELS = [
    ("llama-3.1-8b", 1, 32768),
    ("llama-3.1-70b", 8, 32768),
    ("qwen3-8b", 2, 8192),
    ("deepseek-v2-lite", 1, 16384),
    ("deepseek-v3", 8, 32768),
]
SIZES = [1, 1.1, 37.5, 100, 1600]
BLOCKS_PER_CHUNK = [1, 3, 16]


def vllm_cpu_bytes(size: float) -> int:
    """vLLM's own `_post_init_kv_transfer_config` on a stub config: the connector's cpu_bytes_to_use."""
    from vllm.config.vllm import VllmConfig

    stub = SimpleNamespace(
        cache_config=SimpleNamespace(kv_offloading_size=size, kv_offloading_backend="native"), kv_transfer_config=None
    )
    VllmConfig._post_init_kv_transfer_config(stub)
    assert stub.kv_transfer_config.kv_connector in ("OffloadingConnector", "SimpleCPUOffloadConnector")
    return int(stub.kv_transfer_config.kv_connector_extra_config["cpu_bytes_to_use"])


def vllm_spec(cpu_bytes: int, worker_bytes_per_block: int, tp: int, bpc: int, block: int, L: int, replicated: bool):
    """vLLM's `CPUOffloadingSpec` for one full-attention group (its shared-region check patched to
    CUDA's answer, so the replicated MLA layout is what a GPU node would take)."""
    from vllm.v1.kv_offload.config import (
        OffloadingCacheConfig,
        OffloadingConfig,
        OffloadingGroupConfig,
        OffloadingModelConfig,
        OffloadingParallelConfig,
    )
    from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec

    config = OffloadingConfig(
        groups=(OffloadingGroupConfig(tokens_per_block=block, layer_names=("l",), group_id=0),),
        worker_kv_bytes_per_block=worker_bytes_per_block,
        enable_kv_cache_events=False,
        extra_config={"cpu_bytes_to_use": cpu_bytes},
        engine_id="oracle",
        model=OffloadingModelConfig(name="m", dtype="bfloat16", max_model_len=L),
        cache=OffloadingCacheConfig(tokens_per_hash=block, blocks_per_chunk=bpc),
        parallel=OffloadingParallelConfig(
            rank=0,
            world_size=tp,
            tp_size=tp,
            pp_size=1,
            pcp_size=1,
            dcp_size=1,
            data_parallel_index=0,
            data_parallel_size=1,
            data_parallel_rank_local=None,
            is_parallelism_agnostic=False,
        ),
        replicated_layout=replicated,
    )
    original = CPUOffloadingSpec._uses_shared_region
    CPUOffloadingSpec._uses_shared_region = lambda self: True
    try:
        return CPUOffloadingSpec(config)
    finally:
        CPUOffloadingSpec._uses_shared_region = original


CASES = list(itertools.product(MODELS, SIZES, BLOCKS_PER_CHUNK))


@skip
@pytest.mark.parametrize("size", SIZES)
def test_kv_offloading_size_is_gib_for_all_ranks(size):
    from kvcalc.calc.offload import vllm_cpu_bytes_to_use

    assert vllm_cpu_bytes_to_use(size) == vllm_cpu_bytes(size)


@skip
@pytest.mark.parametrize("model_tp_len, size, bpc", CASES, ids=[f"{m[0]}-tp{m[1]}-{s}GiB-bpc{b}" for m, s, b in CASES])
def test_native_offload_tier_matches_vllm(model_tp_len, size, bpc):
    import kvcalc
    from kvcalc.engines.offload_rules import OffloadSettings, vllm_native
    from kvcalc.engines.profile import get_profile

    name, tp, L = model_tp_len
    model = kvcalc.load_model(name)
    prof = get_profile("vllm")
    ch = prof.kv_formats(model)
    gpu = prof.capacity(model, 60 * GiB, ch.k, ch.v, tp=tp, max_model_len=L, options=ch.options)
    ours = vllm_native(
        model,
        gpu,
        OffloadSettings(kv_offloading_size=str(size), blocks_per_chunk=bpc),
        tp=tp,
        dp=1,
        session_tokens=L,
        k=ch.k,
        v=ch.v,
        options=ch.options,
    )
    spec = vllm_spec(
        vllm_cpu_bytes(size),
        gpu.page_size_bytes,
        tp,
        bpc,
        gpu.block_size,
        L,
        replicated=model.attention == "mla" and tp > 1,
    )
    assert ours.num_chunks == spec.num_chunks
    assert ours.bytes_per_chunk == spec.kv_bytes_per_chunk
    assert ours.host_bytes_per_rank * tp == spec.cpu_info.cpu_kv_cache_size_bytes  # the region, all ranks
    assert ours.chunk_tokens == gpu.block_size * spec.blocks_per_chunk
    note = next(n for n in ours.notes if n.startswith("vLLM's CPU tier reports"))
    assert f"reports {spec.cpu_info.cpu_kv_cache_size_tokens:,} tokens" in note


GROUPS = [  # (kvcalc groups, max_model_len, tokens per chunk)
    ([("full", None), ("sliding", 128)], 32768, 16),
    ([("full", None), ("sliding", 128)], 100, 16),
    ([("sliding", 4096), ("full", None)], 8192, 64),
    ([("sliding", 1000), ("full", None), ("full", None)], 5000, 48),
    ([("chunked", 8192), ("full", None)], 32768, 64),
    ([("mamba", None), ("full", None)], 32768, 576),
]


@skip
@pytest.mark.parametrize("groups, L, tpc", GROUPS)
def test_chunks_per_request_matches_vllm(groups, L, tpc):
    """vLLM's `get_sliding_window_size_in_chunks` on its own specs and `_kv_cache_size_tokens` over those
    groups, against `calc.offload.vllm_chunks_per_request` / `vllm_cpu_tokens_at_len`."""
    import torch
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.config import get_sliding_window_size_in_chunks
    from vllm.v1.kv_cache_interface import ChunkedLocalAttentionSpec, FullAttentionSpec, MambaSpec, SlidingWindowSpec
    from vllm.v1.kv_offload.config import (
        OffloadingCacheConfig,
        OffloadingConfig,
        OffloadingGroupConfig,
        OffloadingModelConfig,
        OffloadingParallelConfig,
    )
    from vllm.v1.kv_offload.cpu.common import _kv_cache_size_tokens

    from kvcalc.calc.offload import vllm_chunks_per_request, vllm_cpu_tokens_at_len

    attn = dict(block_size=tpc, num_kv_heads=8, head_size=64, dtype=torch.bfloat16)
    specs = {
        "full": lambda w: FullAttentionSpec(**attn),
        "sliding": lambda w: SlidingWindowSpec(**attn, sliding_window=w),
        "chunked": lambda w: ChunkedLocalAttentionSpec(**attn, attention_chunk_size=w),
        "mamba": lambda w: MambaSpec(block_size=tpc, shapes=((1,),), dtypes=(torch.bfloat16,)),
    }
    vgroups = tuple(
        OffloadingGroupConfig(
            tokens_per_block=tpc,
            layer_names=(f"l{i}",),
            group_id=i,
            sliding_window_size_in_chunks=get_sliding_window_size_in_chunks(specs[kind](w), tpc),
        )
        for i, (kind, w) in enumerate(groups)
    )
    config = OffloadingConfig(
        groups=vgroups,
        worker_kv_bytes_per_block=1,
        enable_kv_cache_events=False,
        extra_config={},
        engine_id="o",
        model=OffloadingModelConfig(name="m", dtype="bfloat16", max_model_len=L),
        cache=OffloadingCacheConfig(tokens_per_hash=tpc, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(
            rank=0,
            world_size=1,
            tp_size=1,
            pp_size=1,
            pcp_size=1,
            dcp_size=1,
            data_parallel_index=0,
            data_parallel_size=1,
            data_parallel_rank_local=None,
            is_parallelism_agnostic=False,
        ),
    )
    per = vllm_chunks_per_request(groups, L, tpc)
    for n in (1, 777, 10_000):
        assert vllm_cpu_tokens_at_len(n, L, per) == _kv_cache_size_tokens(config, n)
