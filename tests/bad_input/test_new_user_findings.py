"""New-user findings: each mistake is refused on one line (exit 2) that names the field and the fix."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kvcalc
from kvcalc.cli import app
from kvcalc.errors import KvcalcError, KvcalcWarning, close_names

DATA = Path(__file__).parent.parent / "data"


def _run(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def _one_line(r, *words: str) -> str:
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1, r.output
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def test_hf_quant_config_is_not_a_config_json() -> None:
    # nvidia/DeepSeek-V4-Flash-NVFP4's hf_quant_config.json (producer + quantization only)
    _one_line(
        _run("estimate", DATA / "nvidia--DeepSeek-V4-Flash-NVFP4.hf_quant_config.json"),
        "hf_quant_config.json",
        "not a Hugging Face config.json",
        "config.json beside it",
    )


@pytest.mark.parametrize(
    "name,text,words",
    [
        ("foo.json", '{"foo": 1}', ("without model_type", "config.json beside it")),
        ("partial.yaml", "name: x\n", ("field 'n_layers': required field is missing (also n_heads)",)),
    ],
)
def test_not_a_model_file_one_line(tmp_path, name: str, text: str, words: tuple[str, ...]) -> None:
    p = tmp_path / name
    p.write_text(text)
    _one_line(_run("estimate", p), *words)


@pytest.mark.parametrize(
    "extra,flag",
    [
        (
            ("--engine", "vllm", "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "2"),
            "--speculative-algorithm",
        ),
        (
            (
                "--engine",
                "vllm",
                "-sc",
                '{"method":"mtp","num_speculative_tokens":2}',
                "--speculative-algorithm",
                "NEXTN",
                "--speculative-num-steps",
                "2",
            ),
            "--speculative-algorithm",
        ),
        (("--engine", "sglang", "-sc", '{"method":"mtp","num_speculative_tokens":2}'), "--speculative-config"),
    ],
)
def test_other_engines_speculative_flags_refused(extra: tuple[str, ...], flag: str) -> None:
    line = _one_line(_run("estimate", "deepseek-v3", "--gpu", "h200", "--tp", "8", *extra), flag)
    assert "--speculative-config" in line and "--speculative-algorithm" in line  # names the right one


def test_kv_offloading_size_beyond_bound() -> None:
    # 1e12 GiB = 1.07e21 B > 10^21 B, the bound every size has (units.MAX_QUANTITY)
    _one_line(
        _run("estimate", "llama-3.1-8b", "--engine", "vllm", "--gpu", "h200", "--kv-offloading-size", "1e12"),
        "--kv-offloading-size",
        "10^21",
    )


def test_calibration_folder_names_the_option(tmp_path) -> None:
    _one_line(_run("estimate", "llama-3.1-8b", "--gpu", "h200", "--calibration", tmp_path), "--calibration", "folder")


def test_cpu_calibration_for_a_gpu_warns(tmp_path) -> None:
    from kvcalc.load.speed import load_calibration

    p = tmp_path / "cal.yaml"
    p.write_text("kind: kvcalc-calibration\ngpu: h200\ndevice: CPU (cpu, torch 2.13.0)\nstep_floor_s: 0.466\n")
    with pytest.warns(KvcalcWarning, match="measured on the CPU .* not on the GPU h200"):
        load_calibration(p)
    p.write_text(
        "kind: kvcalc-calibration\ngpu: h200\ndevice: NVIDIA H200 (cuda, torch 2.13.0)\nstep_floor_s: 0.0004\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", KvcalcWarning)
        load_calibration(p)


@pytest.mark.parametrize("model", ["", "  "])
def test_empty_model_argument(model: str) -> None:
    _one_line(_run("estimate", model), "model argument is empty")


def test_api_model_none() -> None:
    with pytest.raises(KvcalcError, match="model must be a name or a path") as e:
        kvcalc.estimate(None)  # type: ignore[arg-type]
    assert e.value.field == "model"


def test_close_names_once_each() -> None:
    assert close_names("h900", ["h200", "H200", "h20"]) == ["h200", "h20"]


def test_expert_parallel_prefix_once() -> None:
    line = _one_line(_run("estimate", "llama-3.1-8b", "-ep", "--dp", "2"), "no routed experts")
    assert line.count("--enable-expert-parallel") == 1


@pytest.mark.parametrize(
    "args",
    [
        ("plan", "llama-3.1-8b", "--concurrency", "8,192"),
        ("plan", "llama-3.1-8b", "--concurrency=8,192"),
        ("estimate", "llama-3.1-8b", "--batch", "8,192"),
    ],
)
def test_whole_number_with_grouping(args: tuple[str, ...]) -> None:
    line = _one_line(_run(*args), "digit grouping", "(8192)")
    assert "Input should be" not in line


def test_api_seq_len_grouping_refused_as_the_cli() -> None:
    with pytest.raises(KvcalcError, match="reads as one number with digit grouping") as e:
        kvcalc.estimate("llama-3.1-8b", seq_len="8,192")
    assert e.value.field == "seq_len"
    # 2 x 32 layers x 8 KV heads x 128 head_dim x 2 B = 131,072 B/token; x 8,192 = 1,073,741,824 B
    assert kvcalc.estimate("llama-3.1-8b", seq_len="8k").kv_cache_bytes == 1_073_741_824


def test_empty_price_file_says_what_a_price_file_holds(tmp_path) -> None:
    p = tmp_path / "empty.yaml"
    p.write_text("")
    line = _one_line(_run("plan", "llama-3.1-8b", "--prices", p), "is empty", "h200: 3.5")
    assert "n_layers" not in line
