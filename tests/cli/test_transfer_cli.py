"""`kvcalc transfer`: one request's KV from a prefill layout to a decode layout (TP mismatch),
regions per transfer, time over a links.yaml row, the prefill:decode GPU ratio."""

from __future__ import annotations

import json


def test_transfer_tp_mismatch_70b(cli):
    """Llama-3.1-70B (80 layers, 8 KV heads of 128, bf16): 327,680 B per token; 8,192 tokens = 2,684,354,560 B.
    Prefill tp 2 (4 heads a rank) -> decode tp 8 (1 head a rank): decode rank j pulls its head from prefill
    rank j // 4: 80 x 8,192 x 512 B = 335,544,320 B each; regions 80 layers x (K, V) x 512 blocks = 81,920.
    Over RDMA 400 Gb/s (50 GB/s one way): 335,544,320 / 5e10 = 6.711 ms."""
    r = cli("transfer", "llama-3.1-70b", "--tokens", "8192", "--prefill-tp", "2", "--decode-tp", "8", "-f", "json")
    assert r.exit_code == 0, r.output
    t = json.loads(r.stdout)
    assert t["request_bytes"] == 2_684_354_560 and t["bytes_per_decode_rank"] == 335_544_320
    assert [(p["prefill_rank"], p["decode_rank"], p["bytes"], p["regions"]) for p in t["pairs"]] == [
        (j // 4, j, 335_544_320, 81_920) for j in range(8)
    ]
    assert t["decode_block_size"] == 16 and t["blocks_per_request"] == 512
    assert t["time_s"] == 335_544_320 / 50e9 and t["link"] == "rdma-400g"


def test_transfer_decode_narrower_than_prefill(cli):
    """Prefill tp 8 -> decode tp 2 (Llama-3.1-8B, 8 KV heads, 131,072 B per token): each decode rank pulls one
    head from each of 4 prefill ranks: 32 layers x 8,192 x 512 B = 134,217,728 B a pair, 536,870,912 a decode rank."""
    r = cli(
        "transfer",
        "llama-3.1-8b",
        "--tokens",
        "8k",
        "--prefill-tp",
        "8",
        "--decode-tp",
        "2",
        "--link",
        "nvlink4",
        "-f",
        "json",
    )
    t = json.loads(r.stdout)
    assert [(p["prefill_rank"], p["decode_rank"]) for p in t["pairs"]] == [(i, i // 4) for i in range(8)]
    assert {p["bytes"] for p in t["pairs"]} == {134_217_728}
    assert t["bytes_per_decode_rank"] == 536_870_912 and t["time_s"] == 536_870_912 / 450e9


def test_transfer_ratio_and_refusals(cli):
    r = cli(
        "transfer",
        "llama-3.1-8b",
        "--tokens",
        "8k",
        "--gpu",
        "h100-sxm",
        "--output-tokens",
        "1k",
        "--decode-batch",
        "32",
        "-f",
        "json",
    )
    t = json.loads(r.stdout)
    # ratio = (P_tp x t_prefill) / (D_tp x output x t_step / batch), both from the roofline on one H100
    step = t["decode_s"] / 1024
    assert t["prefill_decode_ratio"] == t["prefill_s"] / (1024 * step / 32)
    bad = cli("transfer", "llama-3.1-8b", "--tokens", "8k", "--output-tokens", "1k")
    assert bad.exit_code == 2 and "give --gpu" in bad.stderr
    assert "unknown link" in cli("transfer", "llama-3.1-8b", "--tokens", "8k", "--link", "pcie9").stderr
    assert cli("transfer", "llama-3.1-8b", "--tokens", "8k", "--decode-tp", "3").exit_code == 2
    table = cli("transfer", "llama-3.1-70b", "--tokens", "8k", "--prefill-tp", "2", "--decode-tp", "8")
    assert table.exit_code == 0 and "81,920" in table.stdout
    assert all(len(line) <= 80 for line in table.stdout.splitlines())


def test_transfer_tp_refusals_name_each_side_flag(cli):
    """A bad --prefill-tp / --decode-tp is refused naming that flag (was `--tp 3: ...`)."""
    for flag in ("--prefill-tp", "--decode-tp"):
        for value, words in (
            ("3", f"error: {flag} 3: llama-3.1-8b has 32 attention heads, not divisible by 3"),
            ("0", f"error: {flag} must be a positive integer, got 0"),
            ("999999999", f"error: {flag} 999,999,999 is beyond what kvcalc sizes"),
        ):
            r = cli("transfer", "llama-3.1-8b", "--tokens", "8k", flag, value)
            assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.output
            assert r.stderr.startswith(words), r.stderr


def test_transfer_decode_cached_beyond_the_prompt_is_refused(cli):
    """--decode-cached past --tokens was taken (capped silently); the decode side holds at most the prompt."""
    r = cli("transfer", "llama-3.1-8b", "--tokens", "8k", "--decode-cached", "9k")
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.output
    assert "--decode-cached 9,216 is more than the prompt's --tokens 8,192" in r.stderr
    assert cli("transfer", "llama-3.1-8b", "--tokens", "8k", "--decode-cached", "8k").exit_code == 0
