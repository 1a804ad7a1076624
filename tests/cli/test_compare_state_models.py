"""`kvcalc compare A B` with a model whose layers keep no per-token cache (all mamba): its row
says so instead of labelling it MHA with 0 B (found in the issue 12 review)."""

from __future__ import annotations


def test_a_mamba_only_model_is_labelled_by_its_state(cli, tmp_path):
    m = tmp_path / "pure-mamba.yaml"
    m.write_text(
        "name: pure-mamba\nsource: test\nn_layers: 4\nn_heads: 8\nhidden_size: 512\n"
        "layer_pattern: [mamba]\nmax_position_embeddings: 4096\n"
    )
    r = cli("compare", "llama-3.1-8b", str(m), "-s", "4k", env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if "pure-mamba" in line)
    assert "no KV cache (mamba state)" in row and "mha" not in row
    # llama-3.1-8b beside it: 32 layers x 2 x 8 KV heads x 128 x 2 B = 131,072 B per token
    assert "gqa 32q/8kv" in r.stdout and "131,072" in r.stdout
