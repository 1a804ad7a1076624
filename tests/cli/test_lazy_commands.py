"""Start-up (issue 11 item 8): a command's module is imported only when that command runs or its
help is asked for (`kvcalc.cli.lazy`), `kvcalc --help` still lists every command with its
one-line help, and the option defaults live where reading them costs nothing.

Module sets are read in a fresh interpreter (`sys.modules` after the call), so what other tests
imported does not count."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app

ROOT = Path(__file__).resolve().parents[2]
COMMAND_MODULES = {
    "kvcalc.cli.estimate",
    "kvcalc.cli.models",
    "kvcalc.cli.compare",
    "kvcalc.cli.import_",
    "kvcalc.cli.measure",
    "kvcalc.cli.gpus",
    "kvcalc.cli.sweep",
    "kvcalc.cli.check",
    "kvcalc.cli.capacity",
}

RUN = """
import json, sys
sys.argv = ["kvcalc", *json.loads(sys.argv[1])]
from kvcalc.cli import main
try:
    main()
except SystemExit:
    pass
print("\\nMODULES " + json.dumps(sorted(m for m in sys.modules if m.startswith("kvcalc"))))
"""


def modules_after(*args: str) -> tuple[str, set[str]]:
    """(stdout before the module list, kvcalc modules loaded) of `kvcalc ARGS` in a fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", RUN, json.dumps(list(args))],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"},
    ).stdout
    text, _, mods = out.rpartition("\nMODULES ")
    return text, set(json.loads(mods))


def test_estimate_imports_its_own_command_module_only():
    text, mods = modules_after("estimate", "llama-3.1-8b", "-s", "8192", "-f", "json")
    assert json.loads(text)["kv_cache_bytes"] == 1_073_741_824  # 2 x 32 x 8 x 128 x 8192 x 2 B
    assert mods & COMMAND_MODULES == {"kvcalc.cli.estimate"}
    # nor the plan, the roofline or the engines: the options read their defaults from
    # kvcalc.calc.defaults / kvcalc.engines.defaults
    assert not mods & {
        "kvcalc.calc.memory_plan",
        "kvcalc.calc.roofline",
        "kvcalc.calc.weights",
        "kvcalc.engines.profile",
        "kvcalc.engines.vllm",
        "kvcalc.engines.sglang",
        "kvcalc.engines.llamacpp",
        "kvcalc.load.gpus",
        "kvcalc.measure",
    }


def test_help_lists_every_command_and_imports_none():
    text, mods = modules_after("--help")
    listed = [line.split()[0] for line in text.split("Commands:")[1].strip().splitlines()]
    assert listed == [
        "estimate",
        "models",
        "compare",
        "import",
        "measure",
        "gpus",
        "sweep",
        "check",
        "schema",
        "capacity",
        "plan",
        "transfer",
    ]
    assert "models    List the bundled model configs." in text
    assert not mods & COMMAND_MODULES


def test_a_command_help_imports_that_command_only():
    text, mods = modules_after("sweep", "--help")
    assert "--beyond-context" in text
    assert mods & COMMAND_MODULES == {"kvcalc.cli.sweep"}


def test_the_table_help_is_each_functions_docstring():
    # the one-line help `kvcalc --help` shows comes from the table; it must be the first
    # paragraph of the function's docstring, as typer would show it for an eager command
    from kvcalc.cli.app import COMMANDS

    for c in COMMANDS:
        module, _, attr = c.target.partition(":")
        fn = getattr(__import__(module, fromlist=[attr]), attr)
        first = inspect.getdoc(fn).split("\n\n")[0]
        assert c.help == " ".join(first.split()), c.name


def test_lazy_help_equals_eager_help():
    # the listing read from the table equals the listing built from every loaded command
    import typer.main
    from typer._click import Context

    for width in (60, 80, 120):
        group = typer.main.get_command(app)
        lazy = group.get_help(Context(group, info_name="kvcalc", terminal_width=width))
        assert not any(group.commands.is_loaded(n) for n in group.list_commands(None))
        for name in group.list_commands(None):
            group.commands[name]  # load every command
        eager = group.get_help(Context(group, info_name="kvcalc", terminal_width=width))
        assert eager == lazy and "capacity  What ENGINE makes of a KV memory budget" in eager


def test_a_misspelt_command_is_suggested():
    r = CliRunner().invoke(app, ["estimat", "llama-3.1-8b"])
    assert r.exit_code == 2 and "Did you mean 'estimate'?" in r.output


@pytest.mark.parametrize(
    "name",
    ["estimate", "models", "compare", "import", "measure", "gpus", "sweep", "check", "schema", "capacity", "plan"],
)
def test_every_command_loads_and_shows_its_help(name):
    r = CliRunner().invoke(app, [name, "--help"])
    assert r.exit_code == 0 and "Usage:" in r.output, r.output


def test_defaults_have_one_home():
    # the CLI's defaults are the plan's, the roofline's and the engines' own objects
    from kvcalc.calc import defaults, memory_plan, roofline
    from kvcalc.cli.options import LlamacppFlags, SglangFlags, VllmFlags
    from kvcalc.engines import llamacpp, sglang, vllm
    from kvcalc.engines.profile import LlamacppOptions, SglangOptions, VllmOptions

    assert (memory_plan.DEFAULT_CUDA_CONTEXT_BYTES, memory_plan.DEFAULT_GPU_MEMORY_UTILIZATION) == (500 * 2**20, 0.9)
    assert (roofline.DEFAULT_BW_EFFICIENCY, roofline.DEFAULT_FLOPS_EFFICIENCY) == (0.8, 0.5)
    assert memory_plan.DEFAULT_CUDA_CONTEXT_BYTES is defaults.DEFAULT_CUDA_CONTEXT_BYTES
    assert (
        vllm.DEFAULT_BLOCK_SIZE,
        vllm.DEFAULT_MAX_NUM_BATCHED_TOKENS,
        sglang.DEFAULT_PAGE_SIZE,
        llamacpp.DEFAULT_N_UBATCH,
    ) == (16, 8192, 1, 512)
    # flags left at their defaults give each engine's default options object
    assert VllmFlags().to_options() == VllmOptions()
    assert SglangFlags().to_options() == SglangOptions()
    assert LlamacppFlags().to_options() == LlamacppOptions()
