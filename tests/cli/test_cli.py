"""CLI tests through typer's CliRunner: the estimate contract, formats, and every bad input.

Golden numbers: meta-llama/Llama-3.1-70B config.json: 80 layers, 64 heads, 8 KV heads,
hidden 8192 -> head_dim 128.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kvcalc.cli import app

runner = CliRunner()

JSON_KEYS = [
    "model",
    "attention",
    "n_layers",
    "n_kv_heads",
    "head_dim",
    "seq_len",
    "batch",
    "kv_dtype",
    "kv_bytes_per_token",
    "kv_cache_bytes",
    "kv_bytes_per_token_per_gpu",
    "kv_cache_bytes_per_gpu",
    "kv_cache_bytes_no_window",
]


def run(*args: str):
    return runner.invoke(app, list(args))


def est_json(*args: str) -> dict:
    r = run("estimate", *args, "--format", "json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_worked_example_json():
    # 2 x 80 layers x 8 KV heads x 128 head_dim x 8192 tokens x 1 x 2 B (fp16) = 2,684,354,560 B
    d = est_json("llama-3.1-70b", "--seq-len", "8192", "--kv-dtype", "fp16")
    assert d["kv_cache_bytes"] == 2_684_354_560
    # one more token: 2 x 80 x 8 x 128 x 2 B = 327,680 B
    assert d["kv_bytes_per_token"] == 327_680
    assert isinstance(d["kv_cache_bytes"], int) and isinstance(d["kv_bytes_per_token"], int)
    assert (d["model"], d["attention"], d["n_layers"], d["n_kv_heads"], d["head_dim"]) == (
        "llama-3.1-70b",
        "gqa",
        80,
        8,
        128,
    )
    assert (d["seq_len"], d["batch"], d["kv_dtype"]) == (8192, 1, "fp16")


def test_json_has_every_contract_key():
    d = est_json("llama-3.1-70b", "--seq-len", "1024")
    assert set(JSON_KEYS) <= set(d)


def test_defaults_come_from_the_model():
    # no --seq-len: max_position_embeddings 131,072; no --kv-dtype: the model's bf16 (2 B)
    d = est_json("llama-3.1-70b")
    assert (d["seq_len"], d["batch"], d["kv_dtype"]) == (131_072, 1, "bf16")
    assert d["kv_cache_bytes"] == 327_680 * 131_072  # 42,949,672,960


def test_sixteen_users():
    # 16 x 32,768 x 327,680 B = 171,798,691,840 B ("over 170 GB" holds); at 32,000 tokens
    # 16 x 32,000 x 327,680 = 167,772,160,000 B, under 170 GB.
    assert (
        est_json("llama-3.1-70b", "-s", "32k", "--batch", "16", "--kv-dtype", "fp16")["kv_cache_bytes"]
        == 171_798_691_840
    )
    assert (
        est_json("llama-3.1-70b", "-s", "32000", "--batch", "16", "--kv-dtype", "fp16")["kv_cache_bytes"]
        == 167_772_160_000
    )


def test_bundled_names_case_insensitive():
    assert est_json("LLaMA-3.1-70B", "-s", "8192")["kv_cache_bytes"] == 2_684_354_560


def test_table_shows_formula_and_both_units():
    r = run("estimate", "llama-3.1-70b", "--seq-len", "8192", "--kv-dtype", "fp16")
    assert r.exit_code == 0
    out = " ".join(r.stdout.split())
    assert "2,684,354,560 B" in out
    assert "2.68 GB" in out and "2.50 GiB" in out
    assert "2 x 80 layers x 8 KV heads x 128 head_dim" in out


@pytest.mark.parametrize("fmt", ["yaml", "csv", "markdown"])
def test_machine_formats(fmt):
    r = run("estimate", "llama-3.1-70b", "-s", "8192", "--kv-dtype", "fp16", "-f", fmt)
    assert r.exit_code == 0, r.output
    if fmt == "yaml":
        assert yaml.safe_load(r.stdout)["kv_cache_bytes"] == 2_684_354_560
    elif fmt == "csv":
        row = next(csv.DictReader(io.StringIO(r.stdout)))
        assert row["kv_cache_bytes"] == "2684354560"
    else:
        assert "| kv_cache_bytes | 2684354560 |" in r.stdout


def test_models_lists_bundled():
    r = run("models", "-f", "json")
    assert r.exit_code == 0
    names = {m["name"] for m in json.loads(r.stdout)}
    assert {"llama-3.1-70b"} <= names


def test_compare_true_percentages():
    # Llama-3.1-70B: 64 query heads. GQA-8 saves 1 - 8/64 = 87.5%; MQA saves 1 - 1/64 = 98.4375%
    r = run("compare", "llama-3.1-70b", "-s", "8192", "-f", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [x["n_kv_heads"] for x in rows] == [64, 8, 1]
    assert [x["reduction_vs_mha_percent"] for x in rows] == [0.0, 87.5, 98.4375]
    # MHA: 2 x 80 x 64 x 128 x 8192 x 2 B = 21,474,836,480 B
    assert rows[0]["kv_cache_bytes"] == 21_474_836_480


# ----- bad input: one line, exit 2, the file and field named, no traceback ------------------


def write(tmp_path: Path, text: str, name: str = "m.yaml") -> str:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


GOOD = """\
name: tiny
n_layers: 2
n_heads: 4
n_kv_heads: 2
head_dim: 8
max_position_embeddings: 64
"""


def bad(args: list[str], *needles: str) -> str:
    r = runner.invoke(app, args)
    assert r.exit_code == 2, (r.exit_code, r.output)
    err = r.stderr
    assert "Traceback" not in r.output
    for n in needles:
        assert n in err, (n, err)
    return err


def test_good_tiny_yaml(tmp_path):
    # 2 x 2 layers x 2 KV heads x 8 x 64 tokens x 2 B = 2 x 2 x 2 x 8 x 64 x 2 = 8,192 B
    d = est_json(write(tmp_path, GOOD))
    assert d["kv_cache_bytes"] == 8_192


def test_missing_file(tmp_path):
    bad(["estimate", str(tmp_path / "nope.yaml")], "nope.yaml", "file not found")


def test_invalid_yaml_names_line(tmp_path):
    p = write(tmp_path, "name: x\nn_layers: [1, 2\nn_heads: 4\n")
    err = bad(["estimate", p], "m.yaml:", "invalid YAML")
    assert err.count("\n") == 1  # one line


def test_not_a_mapping(tmp_path):
    bad(["estimate", write(tmp_path, "- 1\n- 2\n")], "m.yaml", "mapping")


def test_unknown_field_did_you_mean(tmp_path):
    p = write(tmp_path, GOOD.replace("n_kv_heads: 2", "n_kv_head: 2"))
    bad(["estimate", p], "m.yaml:4", "n_kv_head", "did you mean 'n_kv_heads'")


def test_hf_field_name_hint(tmp_path):
    p = write(tmp_path, GOOD.replace("n_kv_heads: 2", "num_key_value_heads: 2"))
    bad(["estimate", p], "num_key_value_heads", "did you mean 'n_kv_heads'")


def test_wrong_type(tmp_path):
    bad(["estimate", write(tmp_path, GOOD.replace("n_layers: 2", "n_layers: two"))], "m.yaml:2", "field 'n_layers'")


@pytest.mark.parametrize("field,value", [("n_layers", 0), ("n_heads", -4), ("head_dim", 0)])
def test_zero_or_negative(tmp_path, field, value):
    text = "\n".join(f"{field}: {value}" if ln.startswith(field + ":") else ln for ln in GOOD.splitlines())
    bad(["estimate", write(tmp_path, text)], f"field '{field}'", "greater than 0")


def test_heads_not_divisible(tmp_path):
    bad(
        ["estimate", write(tmp_path, GOOD.replace("n_kv_heads: 2", "n_kv_heads: 3"))],
        "m.yaml",
        "n_heads (4) must be divisible by n_kv_heads (3)",
    )


def test_head_dim_not_derivable(tmp_path):
    bad(["estimate", write(tmp_path, GOOD.replace("head_dim: 8\n", ""))], "head_dim", "hidden_size")


def test_window_of_zero(tmp_path):
    bad(["estimate", write(tmp_path, GOOD + "sliding_window: 0\n")], "field 'sliding_window'", "greater than 0")


def test_sliding_kind_without_window(tmp_path):
    bad(["estimate", write(tmp_path, GOOD + "layer_pattern: [sliding, full]\n")], "sliding_window")


def test_layer_types_wrong_length(tmp_path):
    bad(["estimate", write(tmp_path, GOOD + "layer_types: [full]\n")], "layer_types lists 1 layers but n_layers is 2")


def test_missing_required_field(tmp_path):
    bad(
        ["estimate", write(tmp_path, GOOD.replace("n_heads: 4\n", "").replace("n_kv_heads: 2\n", ""))],
        "field 'n_heads'",
        "required field is missing",
    )


def test_unknown_bundled_name():
    bad(["estimate", "llama-3.1-7"], "unknown model 'llama-3.1-7'", "did you mean")


def test_unknown_dtype():
    bad(["estimate", "llama-3.1-70b", "--kv-dtype", "fp9"], "unknown dtype 'fp9'")


def test_unknown_model_dtype(tmp_path):
    bad(["estimate", write(tmp_path, GOOD + "dtype: fp12\n")], "field 'dtype'", "unknown dtype 'fp12'")


@pytest.mark.parametrize("value", ["0", "-5", "abc"])
def test_bad_seq_len(value):
    bad(["estimate", "llama-3.1-70b", "--seq-len", value], "--seq-len")


def test_bad_batch():
    bad(["estimate", "llama-3.1-70b", "--batch", "0"], "--batch must be a positive integer")


def test_tp_not_dividing_heads():
    bad(["estimate", "llama-3.1-70b", "--tp", "3"], "--tp 3")


def test_block_format_must_fit_head(tmp_path):
    # head_dim 8 is not a whole number of q8_0 blocks (32 values)
    bad(["estimate", write(tmp_path, GOOD), "--kv-dtype", "q8_0"], "q8_0 packs 32 values per block")


def test_unknown_format():
    bad(["estimate", "llama-3.1-70b", "-f", "xml"], "--format")


def test_debug_shows_traceback(tmp_path):
    r = runner.invoke(app, ["--debug", "estimate", str(tmp_path / "nope.yaml")])
    assert r.exit_code != 0 and r.exception is not None and not isinstance(r.exception, SystemExit)


def test_estimate_never_imports_torch():
    code = (
        "import sys\nfrom kvcalc.cli import main\nsys.argv=['kvcalc','estimate','llama-3.1-70b','-s','8192','-f','json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "bad=[m for m in ('torch','matplotlib') if m in sys.modules]\nprint('HEAVY', bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[2], check=True
    ).stdout
    assert "2684354560" in out
    assert out.strip().endswith("HEAVY []")


def test_python_dash_m(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "kvcalc", "estimate", "llama-3.1-70b", "-s", "8192", "--kv-dtype", "fp16", "-f", "json"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["kv_cache_bytes"] == 2_684_354_560


def test_console_script_debug_flag_anywhere(tmp_path):
    missing = str(tmp_path / "x.yaml")
    root = Path(__file__).parents[2]
    # without --debug: one red line, exit 2
    out = subprocess.run(
        [sys.executable, "-m", "kvcalc", "estimate", missing, "-s", "8"], capture_output=True, text=True, cwd=root
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr == f"error: {missing}: file not found\n"
    # --debug in the middle of the line (after the command and its argument, before an option):
    # main() lifts it out, so the same error comes out as a traceback ending in the ConfigError
    out = subprocess.run(
        [sys.executable, "-m", "kvcalc", "estimate", missing, "--debug", "-s", "8"],
        capture_output=True,
        text=True,
        cwd=root,
    )
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith("Traceback (most recent call last):")
    assert out.stderr.rstrip().endswith(f"kvcalc.errors.ConfigError: {missing}: file not found")


def test_duplicate_yaml_key_refused(tmp_path):
    # PyYAML would silently keep the last n_layers; we name both lines
    bad(
        ["estimate", write(tmp_path, GOOD + "n_layers: 3\n")],
        "m.yaml:7",
        "key 'n_layers' is given twice (first on line 2)",
    )


def test_duplicate_json_key_refused(tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"model_type": "llama", "num_hidden_layers": 2, "num_hidden_layers": 3}')
    bad(["estimate", str(p)], "config.json", "'num_hidden_layers' is given twice")


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--kv-dtype", "int4", "--group-size", "0"], "--quant-group-size must be a positive even integer, got 0"),
        (["--kv-dtype", "int4:gabc"], "group option 'gabc'"),
        (
            ["--kv-dtype", "fp16", "--group-size", "64"],
            "--quant-group-size applies to int8 and int4 only, not fp16; give --kv-dtype int8 or --kv-dtype int4",
        ),
    ],
)
def test_bad_group_options(args, needle):
    bad(["estimate", "llama-3.1-70b", "-s", "8k", *args], needle)


def test_group_size_option_is_exact():
    # int4, groups of 64 with an fp16 scale: a 128-value head = 2 x (32 + 2) = 68 B;
    # 2 x 80 layers x 8 KV heads x 68 B = 87,040 B per token
    d = est_json("llama-3.1-70b", "-s", "8k", "--kv-dtype", "int4", "--group-size", "64")
    assert (d["kv_dtype"], d["kv_bytes_per_token"]) == ("int4:g64:fp16", 87_040)


@pytest.mark.parametrize(
    "value,needle",
    [
        ("true", "valid integer"),
        ("32.0", "valid integer"),
        ('"8"', "valid integer"),
        ("99999999999999999999", "less than or equal to 100000"),
        ("10000000", "less than or equal to 100000"),
    ],
)
def test_counts_are_strict_bounded_ints(tmp_path, value, needle):
    # a YAML `true` or `"8"` must not become 1 or 8 layers; a typo'd huge count must not hang
    text = GOOD.replace("n_layers: 2", f"n_layers: {value}")
    bad(["estimate", write(tmp_path, text)], "m.yaml:2", "field 'n_layers'", needle)


def test_mla_with_sliding_window_refused(tmp_path):
    text = "name: x\nn_layers: 2\nn_heads: 4\nattention: mla\nkv_lora_rank: 512\nqk_rope_head_dim: 64\nsliding_window: 128\n"
    bad(["estimate", write(tmp_path, text), "-s", "8"], "sliding_window with attention: mla")


def test_utf8_bom_json(tmp_path):
    # 2 x 2 layers x 4 KV heads x (64 / 4 = 16) x 8 tokens x 2 B = 4,096 B
    p = tmp_path / "config.json"
    p.write_bytes(
        b'\xef\xbb\xbf{"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}'
    )
    assert est_json(str(p), "-s", "8")["kv_cache_bytes"] == 4_096


def test_folder_without_config(tmp_path, monkeypatch):
    (tmp_path / "somefolder").mkdir()
    monkeypatch.chdir(tmp_path)
    bad(["estimate", "somefolder"], "somefolder", "is a folder")


def test_empty_kv_dtype_refused():
    bad(["estimate", "llama-3.1-70b", "--kv-dtype", ""], "unknown dtype ''")


def test_markup_in_names_prints_literally(tmp_path):
    p = write(tmp_path, GOOD.replace("name: tiny", 'name: "[red]boom[/red]"'))
    r = run("estimate", p)
    assert r.exit_code == 0 and "[red]boom[/red]" in r.stdout


def test_breakdown_adds_up_to_the_fullest_gpu():
    # gemma-3-27b --pp 4 at 32k: the per-kind shares are taken on the fullest stage
    d = est_json("gemma-3-27b", "--pp", "4", "-s", "32k")
    assert sum(b["kv_cache_bytes_per_gpu"] for b in d["breakdown"]) == d["kv_cache_bytes_per_gpu"]


def test_small_sizes_use_small_units():
    assert report_size(20_480) == "20,480 B (20.48 KB, 20.00 KiB)"
    assert report_size(33_554_432) == "33,554,432 B (33.55 MB, 32.00 MiB)"


def report_size(n):
    from kvcalc.report import size

    return size(n)


@pytest.mark.parametrize(
    "args",
    [
        ["estimate", "llama-3.1-8b", "-s", "8k", "--gpu", "h100-sxm"],
        ["estimate", "llama-3.1-8b", "-s", "8k", "--engine", "vllm"],
        ["sweep", "llama-3.1-8b", "-s", "1k,8k", "--batch", "1,4", "--gpu", "h100-sxm"],
        ["check", "tests/data/deployments/misses-target.yaml", "tests/data/deployments/does-not-fit.yaml"],
        ["capacity", "llama-3.1-8b", "--engine", "sglang", "--kv-memory", "10GiB"],
        ["gpus"],
        ["models"],
        ["compare", "llama-3.1-8b", "-s", "8k"],
    ],
)
def test_tables_print_no_raw_markup(args, monkeypatch):
    # tables print with markup off (user strings print as typed), so styles must be rich Text
    monkeypatch.chdir(Path(__file__).parents[2])
    r = run(*args)
    assert r.exit_code in (0, 1), r.output
    assert "[/" not in r.stdout and "[green]" not in r.stdout and "[red]" not in r.stdout


def test_config_json_without_dtype_warns(tmp_path):
    # no torch_dtype: bf16 is assumed and said; 2 x 2 layers x 4 heads x 16 x 8 tokens x 2 B = 4,096 B
    p = tmp_path / "config.json"
    p.write_text('{"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}')
    r = run("estimate", str(p), "-s", "8", "-f", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["kv_cache_bytes"] == 4_096
    assert "warning:" in r.stderr and "no torch_dtype; assuming bf16" in r.stderr


@pytest.mark.parametrize(
    "args,needle",
    [
        (["estimate", "llama-3.1-8b", "-s", "8k", "--block-size", "32"], "--block-size applies to --engine vllm only"),
        (
            ["estimate", "llama-3.1-8b", "-s", "8k", "--engine", "vllm", "--page-size", "64"],
            "--page-size applies to --engine sglang only",
        ),
        (
            ["capacity", "llama-3.1-8b", "--engine", "vllm", "-m", "5GiB", "--ctx-size", "8k", "--swa-full"],
            "--ctx-size, --swa-full apply to --engine llamacpp only",
        ),
        (
            ["capacity", "llama-3.1-8b", "--engine", "llamacpp", "--ctx-size", "8k", "--vllm-v0"],
            "--vllm-v0 applies to --engine vllm only",
        ),
    ],
)
def test_options_of_another_engine_refused(args, needle):
    bad(args, needle)


def test_import_refuses_to_overwrite_its_input(tmp_path):
    p = tmp_path / "config.json"
    p.write_text((Path(__file__).parents[1] / "data" / "hf" / "gpt2.json").read_text())
    before = p.read_text()
    bad(["import", str(p), "-o", str(p)], "is the input file")
    assert p.read_text() == before


def test_empty_file_and_mla_with_heads(tmp_path):
    bad(["estimate", write(tmp_path, "")], "m.yaml", "is empty")
    text = "name: x\nn_layers: 2\nn_heads: 4\nn_kv_heads: 4\nattention: mla\nkv_lora_rank: 512\nqk_rope_head_dim: 64\n"
    bad(["estimate", write(tmp_path, text, "mla.yaml"), "-s", "8"], "n_kv_heads mean nothing with attention: mla")


def test_sweep_lists_refuse_empty_items_and_merge_repeats():
    bad(["sweep", "llama-3.1-8b", "-s", "1k,,2k"], "empty item")
    r = run("sweep", "llama-3.1-8b", "-s", "1k,1k", "--batch", "1,1", "-f", "json")
    assert r.exit_code == 0 and len(json.loads(r.stdout)) == 1
