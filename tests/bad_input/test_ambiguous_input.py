"""Issue 12, items 8 and 11: refuse what cannot be meant, and name the right field.

Each case runs the CLI in a subprocess bounded by `timeout=` and asserts exit 2, ONE `error:` line
naming the file / option / field, nothing on stdout under `--format json`, and no file changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvcalc.errors import KvcalcError

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80"}
    env.pop("KVCALC_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "kvcalc", *args], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


def refused(tmp_path: Path, *args: str) -> str:
    """Run in `tmp_path`; assert exit 2, one `error:` line, empty stdout, no file changed; the line."""
    before = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.rglob("*") if p.is_file()}
    proc = run_cli(*args, "-f", "json", cwd=tmp_path)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert proc.stdout == ""
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in tmp_path.rglob("*") if p.is_file()} == before
    return lines[0]


# ----- item 8: refuse what cannot be meant --------------------------------------------------


@pytest.mark.parametrize(
    "args, expected",
    [
        (("--kv-dtype", "int8:fp16:fp32"), "error: 'int8:fp16:fp32' names two scale dtypes (fp16 and fp32); give one"),
        (("--kv-dtype", "int4:g64:g128"), "error: 'int4:g64:g128' names two group sizes (g64 and g128); give one"),
        (
            ("--kv-dtype", "int4:g64", "--quant-group-size", "128"),
            "error: 'int4:g64' says group size 64 but --quant-group-size says 128; give one",
        ),
        (
            ("--kv-dtype", "int8:fp32", "--scale-dtype", "fp16"),
            "error: 'int8:fp32' says scale dtype fp32 but --scale-dtype says fp16; give one",
        ),
        (
            ("--weight-dtype", "int4:g32:g128", "--gpu", "h100-sxm"),
            "error: 'int4:g32:g128' names two group sizes (g32 and g128); give one",
        ),
    ],
)
def test_a_format_name_with_two_options_is_refused(tmp_path: Path, args: tuple[str, ...], expected: str) -> None:
    assert refused(tmp_path, "estimate", "llama-3.1-8b", *args) == expected


def test_the_same_option_twice_in_agreement_is_accepted() -> None:
    from kvcalc.formats import kv_format

    # int4 in groups of 64 with an fp32 scale: 64 / 2 + 4 = 36 B per 64 values
    f = kv_format("int4:g64:fp32", 64, "float32")
    assert (f.name, f.block_bytes, f.block_values) == ("int4:g64:fp32", 36, 64)


def test_a_layer_pattern_longer_than_the_layers(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(
        "name: t\nsource: test\nn_layers: 2\nn_heads: 8\nhead_dim: 64\n"
        "sliding_window: 16\nlayer_pattern: [sliding, sliding, full]\n"
    )
    line = refused(tmp_path, "estimate", "m.yaml", "-s", "100")
    assert line.startswith("error: m.yaml:7: field 'layer_pattern': layer_pattern lists 3 kinds but n_layers is 2")


def test_a_jamba_offset_not_below_its_period(tmp_path: Path) -> None:
    cfg = {
        "model_type": "jamba",
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "hidden_size": 4096,
        "attn_layer_period": 8,
        "attn_layer_offset": 8,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    line = refused(tmp_path, "estimate", "config.json", "-s", "1k")
    assert line == (
        "error: config.json: field 'attn_layer_offset': 8 is not below attn_layer_period (8): layer i is "
        "attention when i % 8 == 8, so no layer would be; give an offset from 0 to 7"
    )


#: transformers' Mamba2Config defaults (configuration_mamba2.py): 64 layers, 128 heads of 64
MAMBA2 = {
    "num_heads": 128,
    "head_dim": 64,
    "hidden_size": 4096,
    "state_size": 128,
    "num_hidden_layers": 64,
    "n_groups": 8,
    "conv_kernel": 4,
    "expand": 2,
    "vocab_size": 32768,
}


@pytest.mark.parametrize("model_type", ["mamba2", "mamba", "some_new_ssm"])
def test_a_mamba2_config_is_never_read_as_attention_layers(tmp_path: Path, model_type: str) -> None:
    # before: the generic fallback read it as 64 attention layers of 128 heads
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type, **MAMBA2}))
    line = refused(tmp_path, "estimate", "config.json", "-s", "1k")
    assert line.startswith("error: config.json: ") and "state" in line, line


@pytest.mark.parametrize("split", ["nan,1", "inf,1", "1,-inf", "-1,2"])
def test_a_tensor_split_share_that_is_not_finite_and_non_negative(tmp_path: Path, split: str) -> None:
    line = refused(
        tmp_path,
        "capacity",
        "llama-3.1-8b",
        "--engine",
        "llamacpp",
        "-c",
        "8192",
        "--gpus",
        "2",
        "--tensor-split",
        split,
    )
    assert line == f"error: --tensor-split {split}: every share must be a finite number >= 0 (write 63,37)"


def test_a_tensor_split_from_the_api_is_checked_too() -> None:
    import kvcalc
    from kvcalc.engines.profile import LlamacppOptions

    with pytest.raises(KvcalcError, match=r"share nan is not a finite number") as e:
        kvcalc.capacity(
            "llama-3.1-8b",
            engine="llamacpp",
            kv_memory_bytes=None,
            options=LlamacppOptions(n_ctx=8192, n_devices=2, tensor_split=(float("nan"), 1.0)),
        )
    assert e.value.field == "tensor_split"


PURE_MAMBA = (
    "name: pure-mamba\nsource: test\nn_layers: 4\nn_heads: 8\nhidden_size: 512\nlayer_pattern: [mamba]\n"
    "mamba_d_state: 16\nmamba_d_conv: 4\nmamba_expand: 2\nmax_position_embeddings: 4096\n"
)
#: 4 layers x (1,024 x 3 conv + 1,024 x 16 ssm) values x 2 B = 155,648 B of state per sequence
PURE_MAMBA_STATE_BYTES = 4 * (1024 * 3 + 1024 * 16) * 2


@pytest.mark.parametrize("engine,extra", [("llamacpp", ("-c", "4096")), ("vllm", ("--kv-memory", "10GiB"))])
def test_capacity_of_a_model_without_a_per_token_cache_on_an_engine(tmp_path: Path, engine: str, extra) -> None:
    # before: 4,096 cells of 0 B (llama.cpp); an engine's allocation of state alone is not modelled
    (tmp_path / "pm.yaml").write_text(PURE_MAMBA)
    line = refused(tmp_path, "capacity", "pm.yaml", "--engine", engine, *extra)
    assert line == (
        "error: pure-mamba has no per-token KV cache (every layer is mamba / linear attention), so a "
        "capacity in tokens does not apply; its fixed state is 155,648 B per sequence, whatever the "
        f"context; kvcalc does not model how {engine} allocates a model with "
        "state alone: --engine ideal with --kv-memory gives how many sequences' state fits"
    )


@pytest.mark.parametrize("concurrency,fits", [(None, None), (68_985, True), (68_986, False)])
def test_capacity_of_a_model_without_a_per_token_cache_is_its_sequences(tmp_path: Path, concurrency, fits) -> None:
    # issue 23 item 7: before, refused; now the sequences whose state fits, at any context:
    # 10 GiB = 10,737,418,240 B // 155,648 B = 68,985 sequences (10,737,377,280 B of state)
    (tmp_path / "pm.yaml").write_text(PURE_MAMBA)
    more = () if concurrency is None else ("--concurrency", str(concurrency))
    r = run_cli("capacity", "pm.yaml", "--kv-memory", "10GiB", *more, "-f", "json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert 10 * 2**30 // PURE_MAMBA_STATE_BYTES == 68_985
    assert (d["max_concurrency"], d["engine_state_bytes"], d["kv_cache_tokens"]) == (68_985.0, 68_985 * 155_648, 0)
    assert d["notes"][0] == (
        "68,985 sequences of 155,648 B of state each fit in 10,737,418,240 B, at any context "
        "(no per-token KV cache: every layer is mamba / linear attention)"
    )
    if fits is not None:
        assert d["longest_context"] == (None if fits else 0)


# ----- item 11: the right field named --------------------------------------------------------


def test_missing_head_dim_and_hidden_size_names_head_dim(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text("name: t\nsource: test\nn_layers: 4\nn_heads: 8\nn_kv_heads: 2\n")
    assert refused(tmp_path, "estimate", "m.yaml", "-s", "100") == (
        "error: m.yaml: field 'head_dim': give head_dim, or hidden_size to derive it as hidden_size // n_heads"
    )


def test_mla_without_qk_rope_head_dim_names_it(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(
        "name: t\nsource: test\nn_layers: 4\nn_heads: 8\nattention: mla\nkv_lora_rank: 64\n"
    )
    assert refused(tmp_path, "estimate", "m.yaml", "-s", "100") == (
        "error: m.yaml: field 'qk_rope_head_dim': attention: mla needs qk_rope_head_dim"
    )


def test_the_field_is_data_not_wording() -> None:
    from pydantic import ValidationError

    from kvcalc.schema import ModelSpec

    with pytest.raises(ValidationError) as e:
        ModelSpec(name="t", n_layers=4, n_heads=8)
    assert [err["loc"] for err in e.value.errors()] == [("head_dim",)]


def test_check_names_pp_and_its_line_and_prints_errors_on_stderr_under_json(tmp_path: Path) -> None:
    (tmp_path / "d.yaml").write_text("model: llama-3.1-8b\ngpu: h100-sxm\ncount: 64\npp: 64\nmax_seq_len: 8k\n")
    proc = run_cli("check", "d.yaml", "-f", "json", cwd=tmp_path)
    assert proc.returncode == 2
    report = json.loads(proc.stdout)  # valid JSON on stdout
    # Llama-3.1-8B has 32 layers: pp 64 is reported against pp, on line 4 where pp is written
    assert report["errors"] == ["d.yaml:4: field 'pp': 64 exceeds the model's 32 layers"]
    assert proc.stderr.splitlines() == ["error: d.yaml:4: field 'pp': 64 exceeds the model's 32 layers"]
