"""kvcalc's vLLM profile held against vLLM's own KV cache sizing code (issue 10, item 4).

Needs vLLM's Python code, installed into a venv of its own by `tools/install_vllm_oracle.sh`
(`tools/install_vllm_oracle.sh 0.33.0`, then, from the repository root,
`/work/oracle/venv-vllm-0.33.0/bin/python -m pytest tests/oracle/test_vllm_oracle.py -q`).
Skipped, with the reason, where vllm does not import (kvcalc's own venv, CI).

Each case (`vllm_harness.grid`: 15 models, the Mamba / Gated-DeltaNet hybrids included, x 6
per-rank budgets x 3 max_model_len x tp 1 / 4 x KV dtype auto / fp8) runs vLLM's engine-core KV
cache initialisation on the CPU and kvcalc's `capacity(engine='vllm')` for the same version, and
asserts the same block count, "GPU KV cache size" tokens, maximum concurrency, start-up refusal,
refusal text, estimated maximum model length and the start-up lines vLLM logs. Cases kvcalc
refuses on purpose are skipped with kvcalc's reason. `python tests/oracle/vllm_harness.py` prints
the same run as a summary (docs/engine-oracles.md, "vLLM", has the last one).
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import pytest

pytestmark = pytest.mark.oracle


def _vllm_missing() -> str | None:
    """Why vLLM's sizing code cannot be driven here, or None."""
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (tools/install_vllm_oracle.sh VERSION installs it into its own venv)"
    sys.path.insert(0, str(Path(__file__).parent))  # vllm_harness beside this file
    try:
        import vllm_harness  # noqa: F401
    except Exception as e:  # any import failure of vLLM's code is a reason to skip, given whole
        return f"vllm does not import on this machine: {type(e).__name__}: {e}"
    return None


_MISSING = _vllm_missing()
if _MISSING:
    CASES: list = []
else:
    import vllm_harness as harness

    CASES = harness.grid()


@pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")
def test_harness_drives_vllm_sizing_code():
    """The harness reaches vLLM's own figures, checked on a case worked by hand: Llama-3.1-8B,
    bf16, 1 GiB, max_model_len 4,096, tp 1. Page = 16 tokens x 8 heads x (128 + 128) x 2 B =
    65,536 B per layer; a block of the one group = 32 layers x 65,536 = 2,097,152 B;
    num_blocks = 2^30 // 2,097,152 = 512; one request = cdiv(4,096, 16) = 256 blocks;
    concurrency = 512 / 256 = 2.0; tokens (0.33: int(2.0 x 4,096); 0.11: 512 // 1 x 16) = 8,192."""
    import kvcalc

    figures = harness.run_vllm(
        kvcalc.load_model("llama-3.1-8b"), kv_memory_bytes=2**30, max_model_len=4096, tp=1, kv_cache_dtype="auto"
    )
    assert (figures.num_blocks, figures.tokens, figures.concurrency, figures.refused) == (512, 8192, 2.0, None)


@pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")
def test_vllm_refuses_one_request_less_one_byte():
    """vLLM's start-up check, driven: a budget one byte under one request (0.33: plus the null
    block) is refused with the estimated maximum length. Llama-3.1-8B at 4,096, bf16: one
    request = 256 blocks x 2,097,152 B = 536,870,912 B; 0.33 adds the null block (2,097,152 B)."""
    import kvcalc

    model = kvcalc.load_model("llama-3.1-8b")
    need = 256 * 2_097_152 + (2_097_152 if harness.KVCALC_VERSION != "0.11" else 0)
    ok = harness.run_vllm(model, kv_memory_bytes=need, max_model_len=4096, tp=1, kv_cache_dtype="auto")
    short = harness.run_vllm(model, kv_memory_bytes=need - 1, max_model_len=4096, tp=1, kv_cache_dtype="auto")
    assert ok.refused is None
    assert short.refused is not None and short.estimated_max_len == 4080  # 255 whole blocks of 16 tokens


@pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")
def test_harness_drives_vllm_hybrid_alignment():
    """vLLM's own hybrid code, driven: Qwen3-Next-80B-A3B, bf16, tp 1. State (vLLM's
    `MambaStateShapeCalculator.gated_delta_net_state_shape`): conv 3 x 8,192 + recurrent
    32 x 128 x 128 values x 2 B = 1,097,728 B; attention 2 x 2 heads x 256 x 2 B = 2,048 B per token.
    0.11 (`HybridAttentionMambaModelConfig`): 16 x cdiv(1,097,728, 16 x 2,048) = 16 x 34 = 544 tokens.
    0.33 (`_align_hybrid_block_size`, FlashInfer's 64-token GDN checkpoints on Hopper):
    64 x cdiv(1,097,728, 64 x 2,048) = 64 x 9 = 576 tokens."""
    model = harness.load("qwen3-next-80b-a3b")
    figures = harness.run_vllm(model, kv_memory_bytes=40 * 2**30, max_model_len=32768, tp=1, kv_cache_dtype="auto")
    expected = 544 if harness.KVCALC_VERSION == "0.11" else 576
    assert figures.extra["block_sizes"][0] == expected  # 0.11: the Mamba groups' own block is max_model_len
    assert (
        f"Setting attention block size to {expected} tokens to ensure that attention page size is >= mamba page size."
    ) in figures.lines


@pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_kvcalc_matches_vllm(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = harness.compare(case)
    if outcome.status == "refused":
        pytest.skip(f"kvcalc refuses on purpose: {outcome.reason[:300]}")
    assert outcome.status == "match", (
        f"{case.id}: {', '.join(outcome.differs)} differ\n  vLLM   {outcome.vllm}\n  kvcalc {outcome.kvcalc}"
    )
