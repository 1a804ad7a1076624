"""`kvcalc plan --speculative-config ...`: speculative decoding in each layout's memory, its TPOT at
the user's acceptance length, and the engine's flags on the launch lines.

DeepSeek-V3 (configs/models/deepseek-v3.yaml: num_nextn_predict_layers 1, 61 MLA layers of
512 + 64 = 576 values) on 8 H200, 64 x 32,768 tokens, fp8 KV and weights: DP8 + EP8, 8
sequences a rank. The MTP layer on a rank (tests/calc/test_parallel.py `test_mtp_memory_and_tpot`):
1,746,937,856 B of weights; its latent for 8 sequences of 32,768 positions: 8 x 32,768 x 576 =
150,994,944 B. No lookahead slot past the launch line's --max-model-len 32768
(`kv_cache_manager.py` `allocate_slots`: min(tokens + lookahead, max_model_len)).
"""

from __future__ import annotations

import json

import pytest

from kvcalc.calc import speculative
from kvcalc.calc.memory_plan import Layout, Planner
from kvcalc.calc.speculative import SpecDecode
from kvcalc.load.gpus import get_gpu
from kvcalc.load.models import load_model
from kvcalc.requests import PlanRequest, run_plan

MTP_WEIGHTS = 1_746_937_856
MTP_KV = 8 * 32_768 * 576  # = 150,994,944


def plan(spec=None, engine="vllm"):
    req = PlanRequest.build(
        load_model("deepseek-v3"), seq_len="32k", concurrency=64, gpus="h200", engine=engine, top=1, speculative=spec
    )
    return run_plan(req).layouts[0]


def test_mtp_memory_counted():
    plain, mtp = plan(), plan(SpecDecode("mtp", 2))
    assert (mtp.count, mtp.dp_attention, mtp.ep) == (plain.count, plain.dp_attention, plain.ep) == (8, 8, 8)
    assert mtp.memory_bytes_per_gpu - plain.memory_bytes_per_gpu == MTP_WEIGHTS + MTP_KV == 1_897_932_800
    assert mtp.tpot_ms == plain.tpot_ms  # no acceptance length: the plain step, never an assumed one


def test_tpot_at_the_users_acceptance_length():
    """TPOT = (verify step over k + 1 = 3 tokens + k = 2 draft steps) / 2.4
    (`speculative.spec_tpot_s`), on the planned layout's own planner."""
    sd = SpecDecode("mtp", 2, accepted=2.4)
    top = plan(sd)
    p = Planner(
        load_model("deepseek-v3"),
        get_gpu("h200"),
        Layout(tp=1, dp_attention=8, ep=8, k_dtype="fp8_e4m3", v_dtype="fp8_e4m3", weight_dtype="fp8_e4m3"),
    )
    est = speculative.estimate(p, sd, 32_768, 64)
    assert est.tpot_s == pytest.approx((est.verify_step_s + 2 * est.draft_step_s) / 2.4)
    assert top.tpot_ms == pytest.approx(est.tpot_s * 1e3, rel=1e-9)
    assert top.tokens_per_s == pytest.approx(64 / est.tpot_s, rel=1e-9)


@pytest.mark.parametrize(
    "engine,flags",
    [
        # vLLM 0.33.0 vllm/config/speculative.py SpeculativeConfig
        ("vllm", """--speculative-config '{"method":"mtp","num_speculative_tokens":2}'"""),
        # SGLang 0.5.23 server_args.py: NEXTN, a chain of k steps verifying k + 1 tokens
        (
            "sglang",
            "--speculative-algorithm NEXTN --speculative-num-steps 2 --speculative-eagle-topk 1 "
            "--speculative-num-draft-tokens 3",
        ),
    ],
)
def test_launch_lines_carry_the_config(engine, flags):
    assert plan(SpecDecode("mtp", 2), engine).launch.endswith(flags)


def test_cli_options_mirror_estimate(cli):
    """`--speculative-algorithm NEXTN --speculative-num-steps 2 --accepted-len 2.4` (SGLang's
    words) is the same plan as vLLM's `-sc '{"method":"mtp","num_speculative_tokens":2}'`."""
    base = ["plan", "deepseek-v3", "-s", "32k", "--concurrency", "64", "--gpu", "h200", "--top", "1", "-f", "json"]
    a = cli(*base, "-sc", '{"method":"mtp","num_speculative_tokens":2}', "--accepted-len", "2.4")
    b = cli(*base, "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "2", "--accepted-len", "2.4")
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    la, lb = json.loads(a.stdout)["layouts"][0], json.loads(b.stdout)["layouts"][0]
    assert la["memory_bytes_per_gpu"] == lb["memory_bytes_per_gpu"] and la["tpot_ms"] == lb["tpot_ms"]
    r = cli(*base, "--accepted-len", "2.4")
    assert r.exit_code == 2 and "--accepted-len needs --speculative-config" in r.output
