"""Every choice-type option names itself in its error line and lists the choices (a user trial:
`--kv-dtype nope` answered "unknown dtype 'nope'; ..." without saying which option was wrong).
One line, exit 2; a close spelling is offered instead of the list."""

from __future__ import annotations

import pytest

from kvcalc.engines import ENGINES
from kvcalc.load.gpus import gpu_table


@pytest.mark.parametrize(
    "args, flag, head",
    [
        (
            ("estimate", "llama-3.1-8b", "--kv-dtype", "nope"),
            "--kv-dtype",
            "unknown dtype 'nope'; choose one of: bf16, ",
        ),
        (("estimate", "llama-3.1-8b", "--k-dtype", "nope"), "--k-dtype", "unknown dtype 'nope'; choose one of: bf16, "),
        (("estimate", "llama-3.1-8b", "--v-dtype", "nope"), "--v-dtype", "unknown dtype 'nope'; choose one of: bf16, "),
        (
            ("estimate", "llama-3.1-8b", "--kv-dtype", "int4", "--scale-dtype", "nope"),
            "--scale-dtype",
            "unknown dtype 'nope'; choose one of: bf16, ",
        ),
        (
            ("estimate", "llama-3.1-8b", "--gpu", "h100-sxm", "--weight-dtype", "nope"),
            "--weight-dtype",
            "unknown dtype 'nope'; choose one of: bf16, ",
        ),
        (("estimate", "llama-3.1-8b", "--gpu", "nope"), "--gpu", "unknown GPU 'nope'; choose one of: h200, h100-sxm, "),
        (
            ("capacity", "llama-3.1-8b", "--engine", "nope", "--kv-memory", "10GiB"),
            "--engine",
            "unknown engine 'nope'; choose one of: ideal, llamacpp, sglang, vllm",
        ),
        (
            ("capacity", "llama-3.1-8b", "--engine", "vllm", "--kv-memory", "10GiB", "--kv-dtype", "nope"),
            "--kv-dtype",
            "vLLM 0.33 has no 'nope' KV cache dtype; vLLM 0.33's --kv-cache-dtype takes auto, float16, ",
        ),
        (
            ("capacity", "llama-3.1-8b", "--engine", "vllm", "--kv-memory", "10GiB", "--k-dtype", "nope"),
            "--k-dtype",
            "vLLM 0.33 has no 'nope' KV cache dtype; vLLM 0.33's --kv-cache-dtype takes auto, float16, ",
        ),
        (
            ("plan", "llama-3.1-8b", "--seq-len", "8k", "--weight-dtype", "nope"),
            "--weight-dtype",
            "unknown dtype 'nope'; choose one of: bf16, ",
        ),
        (
            ("compare", "llama-3.1-8b", "--kv-dtype", "nope"),
            "--kv-dtype",
            "unknown dtype 'nope'; choose one of: bf16, ",
        ),
    ],
)
def test_choice_option_names_itself_and_lists_choices(cli, args, flag, head):
    r = cli(*args)
    assert r.exit_code == 2
    lines = r.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"error: {flag}: {head}"), lines[0]


def test_engine_and_gpu_lists_are_complete(cli):
    line = cli("capacity", "llama-3.1-8b", "--engine", "nope", "--kv-memory", "1GiB").stderr.strip()
    assert line.endswith("choose one of: " + ", ".join(sorted(ENGINES)))
    line = cli("estimate", "llama-3.1-8b", "--gpu", "nope").stderr.strip()
    assert all(name in line for name in gpu_table())


def test_close_spelling_is_offered_instead(cli):
    r = cli("estimate", "llama-3.1-8b", "--kv-dtype", "bf61")
    assert r.stderr.strip() == "error: --kv-dtype: unknown dtype 'bf61'; did you mean 'bf16', 'f16' or 'fp16'?"


def test_a_files_field_keeps_its_own_name(tmp_path):
    # the same unknown name in a deployment file names the file's field, not a CLI flag
    from kvcalc.errors import ConfigError
    from kvcalc.load.deployments import load_deployment

    p = tmp_path / "d.yaml"
    p.write_text("model: llama-3.1-8b\ngpu: nope\nmax_seq_len: 8192\n")
    with pytest.raises(ConfigError) as e:
        load_deployment(p)
    assert "--gpu" not in str(e.value) and "field 'gpu'" in str(e.value)
