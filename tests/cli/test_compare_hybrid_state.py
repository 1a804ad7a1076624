"""Issue #11 (trial): `kvcalc compare` showed hybrids as plain "gqa 12q/2kv" and left their fixed
state out (Jamba read as a 0.50 GiB model). The attention column now tags the layers that keep a
state, a state column gives it (per sequence x batch) and GiB is KV cache + state."""

from __future__ import annotations

import json

MODELS = ("llama-3.1-8b", "falcon-h1-7b", "qwen3-next-80b-a3b", "jamba-1.5-mini")

# State per sequence, 2 B values (bf16):
# falcon-h1-7b, 44 hybrid layers with a Mamba-2 mixer: d_inner 24 heads x 128 = 3,072; conv
#   (3,072 + 2 x 1 group x 256) x (4 - 1) = 10,752; SSM 3,072 x 256 = 786,432; 797,184 x 44 x 2
#   = 70,152,192 B. KV: 2 x 44 x 2 KV heads x 128 x 2 B = 45,056 B/token x 32,768 = 1,476,395,008.
# qwen3-next-80b-a3b, 36 Gated DeltaNet layers: conv (2 x 16 x 128 + 32 x 128) x 3 = 24,576;
#   recurrent 32 x 128 x 128 = 524,288; 548,864 x 36 x 2 = 39,518,208 B.
# jamba-1.5-mini, 28 Mamba layers: d_inner 2 x 4,096 = 8,192; conv 8,192 x 3 = 24,576; SSM
#   8,192 x 16 = 131,072; 155,648 x 28 x 2 = 8,716,288 B.
ROWS = [
    # model, attention, B/token, KV cache, state, GiB of KV + state
    ("llama-3.1-8b", "gqa 32q/8kv", "131,072", "4,294,967,296", "0", "4.00"),
    # (1,476,395,008 + 70,152,192) / 2^30 = 1.440
    ("falcon-h1-7b", "gqa 12q/2kv, +mamba2 state", "45,056", "1,476,395,008", "70,152,192", "1.44"),
    # (805,306,368 + 39,518,208) / 2^30 = 0.787
    ("qwen3-next-80b-a3b", "gqa 16q/2kv, +linear-attn state", "24,576", "805,306,368", "39,518,208", "0.79"),
    # (536,870,912 + 8,716,288) / 2^30 = 0.508: no longer 0.50
    ("jamba-1.5-mini", "gqa 32q/8kv, +mamba state", "16,384", "536,870,912", "8,716,288", "0.51"),
]


def test_hybrids_are_tagged_and_their_state_counted(cli):
    r = cli("compare", *MODELS, "-s", "32k", env={"COLUMNS": "140"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert [c.strip() for c in lines[2].strip("┃").split("┃")] == [
        "model",
        "attention",
        "B/token",
        "KV cache (B)",
        "state (B)",
        "GiB",
    ]
    body = [[c.strip() for c in line.strip("│").split("│")] for line in lines[4:8]]
    assert body == [list(row) for row in ROWS]


def test_at_80_columns_every_cell_whole(cli):
    r = cli("compare", *MODELS, "-s", "32k", env={"COLUMNS": "80"})
    assert r.exit_code == 0
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    for row in ROWS:
        for cell in row:
            assert cell in r.stdout


def test_state_scales_with_the_batch(cli):
    r = cli("compare", "llama-3.1-8b", "falcon-h1-7b", "-s", "32k", "--batch", "2", "-f", "json")
    rows = json.loads(r.stdout)
    assert rows[1]["state_bytes"] == 2 * 70_152_192
    r = cli("compare", "llama-3.1-8b", "falcon-h1-7b", "-s", "32k", "--batch", "2", env={"COLUMNS": "140"})
    # (2 x 1,476,395,008 + 2 x 70,152,192) / 2^30 = 2.88
    assert "│ 2,952,790,016 │ 140,304,384 │ 2.88 │" in r.stdout


def test_no_state_column_without_a_stateful_model(cli):
    r = cli("compare", "llama-3.1-8b", "qwen3-8b", "-s", "8k")
    assert r.exit_code == 0
    assert "state" not in r.stdout


def test_a_state_the_config_does_not_size_is_said(cli, tmp_path):
    m = tmp_path / "pure-mamba.yaml"  # no mamba_d_state / d_conv / expand: no state shape
    m.write_text(
        "name: pure-mamba\nsource: test\nn_layers: 4\nn_heads: 8\nhidden_size: 512\n"
        "layer_pattern: [mamba]\nmax_position_embeddings: 4096\n"
    )
    r = cli("compare", "llama-3.1-8b", str(m), "-s", "4k", env={"COLUMNS": "130"})
    assert r.exit_code == 0, r.output
    assert "│ pure-mamba   │ no KV cache (mamba state) │       0 │            0 │ not sized │ 0.00 │" in r.stdout
    assert "(not sized: the config gives no state shape; KV cache only)" in " ".join(r.stdout.split())
