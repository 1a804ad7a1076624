"""kvcalc's `--vllm-version 0.6` held against vLLM 0.6's own V0 sizing code (issue 10, item 4).

Needs vLLM 0.6.6.post1's Python code in a venv of its own (`tools/install_vllm_oracle.sh
0.6.6.post1`, then, from the repository root, `PYTHONPATH=$PWD
/work/oracle/venv-vllm-0.6.6.post1/bin/python -m pytest -m oracle tests/oracle/test_vllm06_oracle.py`).
Skipped with the reason where vllm 0.6 does not import (kvcalc's own venv, CI, a venv of another
vLLM). Each case of `vllm06_harness.grid` (12 models x 4 per-rank budgets x 4 max_model_len x tp
1 / 4 x KV dtype auto / fp8) runs vLLM's `CacheEngine.get_cache_block_size`,
`Worker.determine_num_available_blocks`, `GPUExecutor.initialize_cache` and
`raise_if_cache_size_invalid`, and kvcalc's `capacity(engine='vllm')` with version '0.6'; the GPU
and CPU block counts (vLLM's default 4 GiB swap beside kvcalc's default), the block bytes, the
logged lines and the refusals must agree. `vllm06_harness.refusal_checks` adds what vLLM 0.6.6
refuses before sizing: each bundled model's architecture in its `ModelRegistry`, block sizes
through its own CLI parser and CUDA `CacheConfig`, and the `--swap-space` default.
docs/engine-oracles.md has the last run.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import warnings
from pathlib import Path

import pytest

pytestmark = pytest.mark.oracle


def _vllm06_missing() -> str | None:
    """Why vLLM 0.6's sizing code cannot be driven here, or None."""
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (tools/install_vllm_oracle.sh 0.6.6.post1 installs it into its own venv)"
    installed = importlib.metadata.version("vllm")
    if not installed.startswith("0.6."):
        return (
            f"vllm {installed} is installed; this oracle drives vLLM 0.6.x (tools/install_vllm_oracle.sh 0.6.6.post1)"
        )
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import vllm06_harness  # noqa: F401
    except Exception as e:  # another vLLM, or vLLM 0.6 that does not import here: the reason, whole
        return f"vllm 0.6 does not import here: {type(e).__name__}: {e}"
    return None


_MISSING = _vllm06_missing()
if _MISSING:
    CASES: list = []
else:
    import vllm06_harness as harness

    CASES = harness.grid()


@pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")
def test_harness_drives_vllm_v0_sizing_code():
    """vLLM 0.6's own figures on cases worked by hand. Llama-3.1-8B, bf16, tp 1, 1 GiB, 4,096:
    block = 16 x 8 heads x 128 x 2 (K, V) x 32 layers x 2 B = 2,097,152 B; 2^30 // 2,097,152 =
    512 GPU blocks; 4 GiB swap // 2,097,152 = 2,048 CPU blocks; 512 x 16 / 4,096 = 2.00x.
    DeepSeek-V2-Lite, bf16, tp 1: 16 x 16 heads x 256 (get_head_size pads 192) x 2 x 27 x 2 B =
    7,077,888 B per block, not the latent's 16 x 576 x 27 x 2 = 497,664."""
    import kvcalc

    f = harness.run_vllm(
        kvcalc.load_model("llama-3.1-8b"), kv_memory_bytes=2**30, max_model_len=4096, tp=1, kv_cache_dtype="auto"
    )
    assert (f.block_bytes, f.num_blocks, f.cpu_blocks, f.refused) == (2_097_152, 512, 2048, None)
    assert f.lines[1:] == [
        "# GPU blocks: 512, # CPU blocks: 2048",
        "Maximum concurrency for 4096 tokens per request: 2.00x",
    ]
    f = harness.run_vllm(
        kvcalc.load_model("deepseek-v2-lite"), kv_memory_bytes=2**30, max_model_len=4096, tp=1, kv_cache_dtype="auto"
    )
    assert f.block_bytes == 7_077_888


@pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_kvcalc_matches_vllm_v0(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = harness.compare(case)
    assert outcome.status == "match", (
        f"{case.id}: {', '.join(outcome.differs)} differ\n  vLLM   {outcome.vllm}\n  kvcalc {outcome.kvcalc}"
    )


CHECKS = [] if _MISSING else harness.refusal_checks()


@pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")
@pytest.mark.parametrize("check", CHECKS, ids=[c.id for c in CHECKS])
def test_kvcalc_refuses_what_vllm_06_refuses(check):
    """Each bundled model's architecture in vLLM 0.6.6's registry, each block size through vLLM's
    parser and CUDA CacheConfig, and the swap-space default: kvcalc agrees (vLLM's text inside its
    message); Jamba and Kimi-K2 are the two kvcalc refuses on its own (not modelled for V0)."""
    assert check.status in ("match", "kvcalc-refuses"), f"{check.id}\n  vLLM   {check.vllm}\n  kvcalc {check.kvcalc}"
    if check.status == "kvcalc-refuses":
        assert check.id in ("arch-jamba-1.5-mini", "arch-kimi-k2")
