"""`kvcalc/cli/options.py::resolve_count`: --count with the layout options (count = tp x pp x dp;
alone it sets tp; with tp / pp given the rest of the count becomes dp replicas)."""

from __future__ import annotations

import json
import re

import pytest

from kvcalc.cli.options import resolve_count
from kvcalc.errors import KvcalcError


@pytest.mark.parametrize(
    "count,tp,pp,dp,layout",
    [
        (None, 2, 1, 3, (2, 1, 3)),  # no --count: the options as given
        (4, 1, 1, 1, (4, 1, 1)),  # --count alone sets tp
        (8, 2, 1, 1, (2, 1, 4)),  # --count 8 --tp 2: 8 / 2 = 4 dp replicas
        (8, 2, 2, 1, (2, 2, 2)),  # --count 8 --tp 2 --pp 2: 8 / 4 = 2 replicas
        (12, 1, 3, 1, (1, 3, 4)),  # --count 12 --pp 3: 4 replicas
        (8, 2, 1, 4, (2, 1, 4)),  # all given and consistent: 2 x 1 x 4 = 8
    ],
)
def test_resolve_count(count, tp, pp, dp, layout):
    assert resolve_count(count, tp, pp, dp) == layout


@pytest.mark.parametrize(
    "count,tp,pp,dp,needle",
    [
        (6, 4, 1, 1, "--count 6 does not equal --tp 4 x --pp 1 x --dp 1"),  # 6 is no multiple of 4
        (8, 2, 1, 2, "--count 8 does not equal --tp 2 x --pp 1 x --dp 2"),  # dp given: no filling in
        (0, 1, 1, 1, "--count must be a positive integer, got 0"),
    ],
)
def test_resolve_count_refuses(count, tp, pp, dp, needle):
    with pytest.raises(KvcalcError, match=re.escape(needle)):
        resolve_count(count, tp, pp, dp)


def test_count_with_tp_makes_dp_replicas_through_the_cli(cli):
    # llama-3.1-8b (32 layers, 8 KV heads x 128, bf16): 131,072 B per token; tp 2 -> 65,536 B per
    # token per GPU x 8,192 tokens = 536,870,912 B per GPU; 8 GPUs = 2 tp x 4 dp replicas:
    # all GPUs 536,870,912 x 8 = 4,294,967,296 B
    r = cli("estimate", "llama-3.1-8b", "-s", "8k", "--count", "8", "--tp", "2", "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["tp"], d["pp"], d["dp"], d["n_gpus"]) == (2, 1, 4, 8)
    assert d["kv_cache_bytes_per_gpu"] == 536_870_912
    assert d["kv_cache_bytes_all_gpus"] == 4_294_967_296


@pytest.mark.parametrize(
    "args,layout",
    [
        (["--count", "8", "--dp-attention", "8", "--ep", "8"], (1, 8, 8)),  # was tp 8 x 8 ranks = 64 GPUs
        (["--count", "16", "--tp", "2", "--dp-attention", "8", "--ep", "16"], (2, 8, 16)),
    ],
)
def test_count_includes_the_attention_dp_ranks(cli, args, layout):
    """--count is every GPU: with --dp-attention D it sets tp from count / D, as the header's GPU count says."""
    r = cli("estimate", "deepseek-v3", "-s", "8k", "--gpu", "h200", *args, "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["tp"], d["dp_attention"], d["gpu_count"]) == layout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--count", "4", "--dp-attention", "8"], "--count 4 is every GPU, attention-DP ranks included"),
        (["--count", "16", "--tp", "4", "--dp-attention", "8"], "--count 16 does not equal --tp 4 x --pp 1 x --dp 1 x"),
    ],
)
def test_count_with_attention_dp_refusals(cli, args, needle):
    r = cli("estimate", "deepseek-v3", "-s", "8k", "--gpu", "h200", *args)
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.output
    assert needle in r.stderr
