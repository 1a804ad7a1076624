"""vLLM 0.33's own planning for its packed KV-cache dtypes (issue 20 item 5), on a CPU.

Superseded by `vllm_grid.py` (every `CacheDType` x models x SM90 / SM100 with vLLM's own backend
selection and block alignment, in a fixture the plain test run compares); kept as the four-case
quick check it was.

For Llama-3.1-8B (32 layers, 8 KV heads of 128, bf16) and each dtype below, the per-layer specs
as vLLM 0.33's layers build them: `Attention.get_kv_cache_spec` (`model_executor/layers/attention/
attention.py` 611-675: a `FullAttentionSpec` of the config's block size), packed by the dtype's
backend (`customize_spec`: `TurboQuantAttentionBackend`, `TritonAttentionBackend`), the TurboQuant
boundary layers (`TurboQuantConfig.get_boundary_skip_layers`, 0, 1, 30, 31) left in bf16, and the
block size `Platform._align_heterogeneous_kv_block_size` sets (`engine_dtypes.skip_layer_block_alignment`:
48 for k8v4, 64 for 4bit_nc); then vLLM's `get_global_kv_cache_groups`, `get_kv_cache_configs`
and `get_kv_cache_capacity` with 16 GiB and max_model_len 32,768.

Run: /work/oracle/venv-vllm-0.33.0/bin/python tests/oracle/vllm_dtypes_033.py (prints one JSON
line per dtype). Last run, vLLM 0.33.0 (docs/engine-oracles.md): turboquant_k8v4 block 48, 5,936
blocks, 284,788 tokens; turboquant_4bit_nc block 64, 5,785, 370,240; int4_per_token_head block 16,
30,840, 493,440; nvfp4 (FlashInferBackend) block 16, page 16 x 36,864 = 589,824 B, 29,127 blocks,
466,032 tokens (tests/engines/test_vllm_2026.py pins the same).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

#: dtype -> (block size vLLM's alignment sets, boundary layers kept in bf16)
CASES = {
    "turboquant_k8v4": (48, {0, 1, 30, 31}),
    "turboquant_4bit_nc": (64, {0, 1, 30, 31}),
    "int4_per_token_head": (16, set()),
    "nvfp4": (16, set()),
}
GIB = 2**30


def run(name: str, block: int, skip: set[int], mem: int = 16 * GIB, max_model_len: int = 32_768) -> dict:
    import torch
    import vllm_harness as h
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype
    from vllm.v1 import kv_cache_interface as kvi
    from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend
    from vllm.v1.attention.backends.turboquant_attn import TurboQuantAttentionBackend
    from vllm.v1.core import kv_cache_planning as planning
    from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity

    cfg = h.make_vllm_config(
        max_model_len=max_model_len, block_size=block, kv_cache_dtype=name, model_dtype=torch.bfloat16, tp=1
    )

    class FlashInferNvfp4:
        """`FlashInferBackend.customize_spec` (`v1/attention/backends/flashinfer.py` 558-570), its
        lines as they are: the module itself needs the flashinfer package, absent from the CPU venv."""

        @staticmethod
        def customize_spec(spec):
            from dataclasses import replace

            from vllm.utils.torch_utils import get_dtype_size, nvfp4_kv_cache_full_dim

            hs_k = nvfp4_kv_cache_full_dim(spec.head_size)
            return replace(
                spec, num_head_slots=2 * spec.num_kv_heads, state_content_bytes=hs_k * get_dtype_size(spec.dtype)
            )

    backend = (
        TurboQuantAttentionBackend
        if name.startswith("turboquant")
        else FlashInferNvfp4
        if name.startswith("nvfp4")
        else TritonAttentionBackend
    )
    dtype = kv_cache_dtype_str_to_dtype(name, cfg.model_config)
    specs = {}
    for i in range(32):
        if i in skip:
            specs[f"l{i}"] = kvi.FullAttentionSpec(
                block_size=block, num_kv_heads=8, head_size=128, dtype=torch.bfloat16
            )
        else:
            specs[f"l{i}"] = backend.customize_spec(
                kvi.FullAttentionSpec(
                    block_size=block,
                    num_kv_heads=8,
                    head_size=128,
                    dtype=dtype,
                    kv_quant_mode=kvi.get_kv_quant_mode(name),
                )
            )
    groups = planning.get_global_kv_cache_groups(cfg, [specs])
    (config,) = planning.get_kv_cache_configs(cfg, [specs], [mem], groups)
    tokens, concurrency = get_kv_cache_capacity(cfg, config)
    return {
        "kv_cache_dtype": name,
        "block_size": block,
        "pages": sorted({s.page_size_bytes for s in specs.values()}),
        "groups": len(groups),
        "num_blocks": config.num_blocks,
        "tokens": tokens,
        "max_concurrency": concurrency,
    }


if __name__ == "__main__":
    for dtype, (block, skip) in CASES.items():
        print(json.dumps(run(dtype, block, skip)))
