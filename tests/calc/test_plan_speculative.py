"""`kvcalc plan --speculative-config ...`: speculative decoding in each layout's memory, its TPOT at
the user's acceptance length, and the engine's flags on the launch lines.

DeepSeek-V3 (configs/models/deepseek-v3.yaml: num_nextn_predict_layers 1, 61 MLA layers of
512 + 64 = 576 values) on 8 H200, 64 x 32,768 tokens, fp8 KV and weights: DP8 + EP8, 8
sequences a rank. The MTP layer on a rank (tests/calc/test_parallel.py `test_mtp_memory_and_tpot`):
1,849,698,304 B of weights (eh_proj a bf16 nn.Linear, whole on every rank); its latent for 8 sequences of 32,768 positions: 8 x 32,768 x 576 =
150,994,944 B. No lookahead slot past the launch line's --max-model-len 32768
(`kv_cache_manager.py` `allocate_slots`: min(tokens + lookahead, max_model_len)).
"""

from __future__ import annotations

import json

import pytest

from kvcalc.calc import speculative
from kvcalc.calc.speculative import SpecDecode
from kvcalc.load.gpus import get_gpu
from kvcalc.load.models import load_model
from kvcalc.requests import PlanRequest, run_plan

MTP_WEIGHTS = 1_849_698_304
MTP_KV = 8 * 32_768 * 576  # = 150,994,944


def plan(spec=None, engine="vllm"):
    req = PlanRequest.build(
        load_model("deepseek-v3"), seq_len="32k", concurrency=64, gpus="h200", engine=engine, top=1, speculative=spec
    )
    return run_plan(req).layouts[0]


def dp8_ep8(spec=None):
    """Plan's DP8 + EP8 layout of 8 H200 (`calc.plan._Space.placements`), with `spec`."""
    from kvcalc.calc.plan import _Space

    req = PlanRequest.build(
        load_model("deepseek-v3"), seq_len="32k", concurrency=64, gpus="h200", kv_dtypes="fp8", speculative=spec
    )
    space = _Space(req.search)
    choice = req.search.gpus[0]
    for kv, w in space.formats(choice):
        for p in space.placements(choice, kv, w, [8]):
            if (p.tp, p.dpa, p.ep) == (1, 8, 8):
                return p
    raise AssertionError("no DP8 + EP8 layout")


def test_mtp_memory_counted():
    plain, mtp = dp8_ep8(), dp8_ep8(SpecDecode("mtp", 2))
    assert max(mtp.used(32_768, 64)) - max(plain.used(32_768, 64)) == MTP_WEIGHTS + MTP_KV == 2_000_693_248
    assert mtp.decode(32_768, 64) == plain.decode(32_768, 64)  # no acceptance length: the plain step


def test_tpot_at_the_users_acceptance_length():
    """TPOT = (verify step over k + 1 = 3 tokens + k = 2 draft steps) / 2.4
    (`speculative.spec_tpot_s`), on the layout's own planner (its speed terms)."""
    sd = SpecDecode("mtp", 2, accepted=2.4)
    p = dp8_ep8(sd)
    est = speculative.estimate(p.planner(get_gpu("h200")), sd, 32_768, 64)
    tpot, tok_s = p.decode(32_768, 64)
    assert tpot == pytest.approx((est.verify_step_s + 2 * est.draft_step_s) / 2.4, rel=1e-12)
    assert tok_s == pytest.approx(64 / tpot, rel=1e-12)
    assert plan(sd).tpot_ms < plan().tpot_ms  # the plan's first layout is timed the same way


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


@pytest.mark.parametrize(
    "args, line",
    [
        (["--accepted-len", "2"], "error: --accepted-len needs --speculative-config (or --speculative-algorithm)"),
        (["-sc", "{bad"], "error: --speculative-config must be JSON with method and num_speculative_tokens ("),
        (
            ["--speculative-algorithm", "FOO", "--speculative-num-steps", "2"],
            "error: --speculative-algorithm FOO: one of NEXTN, EAGLE, EAGLE3, STANDALONE, NGRAM",
        ),
        (["--speculative-algorithm", "EAGLE"], "error: --speculative-algorithm needs --speculative-num-steps"),
        # was "num_speculative_tokens must be at least 1": vLLM's JSON field, not the flag typed
        (
            ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "0"],
            "error: --speculative-num-steps must be at least 1, got 0",
        ),
    ],
)
def test_speculative_refusals_say_the_option_once(cli, args, line):
    """Each refusal is one line naming its option once (was `--accepted-len: --accepted-len needs ...`)."""
    r = cli("plan", "deepseek-v3", "--gpu", "h200", "--engine", "sglang", *args)
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.output
    assert r.stderr.startswith(line), r.stderr


def test_max_seqs_count_the_draft_kv():
    """Max seqs (`_Placed.max_concurrency`, the plan table's column) with MTP counts the MTP
    layer's weights and latent. vLLM 0.33 on a rank: 33,366,781,542 B of KV memory
    (`kv_free`: budget - weights - reserve); a sequence of 32,768 positions holds
    61 x 32,768 x 576 = 1,151,336,448 B -> 33,366,781,542 // 1,151,336,448 = 28 a rank, x 8 = 224.
    MTP: (33,366,781,542 - 1,849,698,304) // (1,151,336,448 + 32,768 x 576 = 1,170,210,816)
    = 31,517,083,238 // 1,170,210,816 = 26 a rank, x 8 = 208."""
    plain, mtp = dp8_ep8(), dp8_ep8(SpecDecode("mtp", 2))
    assert plain.kv_free() == [33_366_781_542]
    assert plain.max_concurrency(32_768) == 224
    assert mtp.max_concurrency(32_768) == 208
    budget = mtp.budgets()[0]
    assert max(mtp.used(32_768, 208)) <= budget < max(mtp.used(32_768, 216))


def test_plan_json_max_seqs_with_mtp(cli):
    """`kvcalc plan -f json`'s first layout of 8 H200 (fp8 KV), TP2 + DP-attention 4 + EP8: a rank
    leaves 42,705,006,182 B of KV memory; plain: // 1,151,336,448 = 37 a rank, x 4 = 148. MTP
    (its layer at tp 2: 1,741,694,976 B of weights, `mtp_weight_bytes`; latent 32,768 x 576 =
    18,874,368 B a sequence): (42,705,006,182 - 1,741,694,976) // 1,170,210,816 =
    40,963,311,206 // 1,170,210,816 = 35, x 4 = 140."""
    base = ["plan", "deepseek-v3", "-s", "32k", "--concurrency", "64", "--gpu", "h200", "--kv-dtype", "fp8"]
    base += ["--max-gpus", "8", "--top", "1", "-f", "json"]
    out = []
    for extra in ([], ["-sc", '{"method":"mtp","num_speculative_tokens":2}']):
        r = cli(*base, *extra)
        assert r.exit_code == 0, r.output
        lay = json.loads(r.stdout)["layouts"][0]
        out.append((lay["tp"], lay["dp_attention"], lay["ep"], lay["max_concurrency"]))
    assert out == [(2, 4, 8, 148), (2, 4, 8, 140)]


def test_deepseek_v32_mtp_memory():
    """DeepSeek-V3.2 (configs/models/deepseek-v3.2.yaml n_mtp_layers 1, config.json
    num_nextn_predict_layers 1) under DP8 + EP8, 64 x 32,768 tokens, k = 1, fp8 KV.
    KV: the MTP layer caches like the last layer (vLLM 0.33.0 deepseek_mtp.py: mtp_block is a
    DeepseekV2DecoderLayer, with the V3.2 indexer): latent 576 x 1 B + indexer key 128 x 1 B + one
    fp32 scale = 708 B a token, for 8 sequences of 32,768 + 1 lookahead slot: 8 x 32,769 x 708 =
    185,603,616 B. Weights: the last layer on this rank + eh_proj 2 x 7168 x 7168 bf16 =
    205,520,896 (an unquantized nn.Linear, whole on every rank) + 3 bf16 norms of 7168 = 43,008."""
    from kvcalc.calc import parallel
    from kvcalc.calc.memory_plan import GpuFit, Layout

    m = load_model("deepseek-v3.2")
    p = GpuFit(m, get_gpu("h200"), Layout(tp=1, dp_attention=8, ep=8, k_dtype="fp8_e4m3", v_dtype="fp8_e4m3"))
    est = speculative.estimate(p, SpecDecode("mtp", 1, 1.8), 32_768, 64)
    assert est.draft_kv_bytes == 8 * 32_769 * 708 == 185_603_616
    last = parallel.rank_weight_bytes(m, None, 1, 8, 8).layer_bytes(60)
    assert est.draft_weight_bytes == last + 205_520_896 + 43_008


@pytest.mark.parametrize("name", ["qwen3.5-27b", "nemotron-3-super-120b-a12b"])
def test_unsized_mtp_block_is_never_zero(name):
    """The hybrid models' MTP weights are refused, never counted as 0 or as the last layer."""
    from kvcalc.calc.weights import mtp_params
    from kvcalc.errors import KvcalcError

    m = load_model(name)
    assert m.n_mtp_layers == 1
    with pytest.raises(KvcalcError, match="MTP block cannot be sized"):
        mtp_params(m)
    with pytest.raises(KvcalcError, match="MTP block cannot be sized"):
        speculative.mtp_weight_bytes(m, None)
    with pytest.raises(KvcalcError, match="MTP block cannot be sized"):
        SpecDecode("mtp", 1).check(m)
