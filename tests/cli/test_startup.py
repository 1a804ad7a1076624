"""Start-up (issue 11 item 8): what `kvcalc estimate MODEL` loads and builds, read in a fresh
interpreter (`sys.modules` after the call), and flag sets that are values without dataclass
code generation (`kvcalc.cli.options.FlagSet`). (`AsGiven`, which built typer's per-option
converters only for typed values, cost 2% of start-up instructions with typer 0.29 and was
removed: issue 23 item 4, docs/benchmarks.md.)
The time itself is `benchmarks/bench_cli.py`'s to measure (README "Speed")."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated, ClassVar, Optional

import pytest
import typer

from kvcalc.cli.app import COMMANDS
from kvcalc.cli.options import FlagSet

ROOT = Path(__file__).resolve().parents[2]

#: every command module but estimate's (the table in `cli/app.py`, so a new command is covered)
OTHER_COMMAND_MODULES = {c.target.partition(":")[0] for c in COMMANDS} - {"kvcalc.cli.estimate"}
#: packages `kvcalc estimate` never needs: torch and matplotlib (`measure`, `--plot`), and the
#: readers of checkpoints and the Hub (a bundled name reads one YAML file)
HEAVY = {"torch", "matplotlib", "numpy", "huggingface_hub", "safetensors", "gguf"}

RUN = """
import json, sys
sys.argv = ["kvcalc", *json.loads(sys.argv[1])]
from kvcalc.cli import main
try:
    main()
except SystemExit:
    pass
print("\\nMODULES " + json.dumps(sorted(sys.modules)))
"""


def modules_after(*args: str) -> tuple[str, set[str]]:
    """(stdout before the module list, every module loaded) of `kvcalc ARGS` in a fresh process."""
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


def test_estimate_imports_no_other_command_and_nothing_heavy():
    text, mods = modules_after("estimate", "llama-3.1-8b")
    assert "17,179,869,184 B" in text  # 2 x 32 layers x 8 KV heads x 128 x 131,072 tokens x 2 B
    assert mods & OTHER_COMMAND_MODULES == set()
    assert "kvcalc.cli.plan" in OTHER_COMMAND_MODULES  # the table covers every command
    assert {m.split(".")[0] for m in mods} & HEAVY == set()
    # nor the models it never validates: GPU and deployment (kvcalc.schema_deploy, behind
    # `kvcalc.schema.__getattr__`) and compare's rows
    assert {"kvcalc.schema_deploy", "kvcalc.results.compare"} & mods == set()
    assert "kvcalc.schema" in mods


def test_gpu_and_deployment_models_load_on_first_use():
    # `from kvcalc.schema import GpuSpec` imports kvcalc.schema_deploy then, and only then
    text, mods = modules_after("estimate", "llama-3.1-8b", "-s", "8k", "--gpu", "h100-sxm", "-f", "json")
    assert json.loads(text)["kv_cache_bytes"] == 1_073_741_824  # 8,192 tokens x 131,072 B
    assert "kvcalc.schema_deploy" in mods


def test_typed_values_go_through_typers_converter():
    # --batch 2 is the int 2 (8,192 x 2 sequences x 131,072 B per token = 2,147,483,648 B)
    text, _ = modules_after("estimate", "llama-3.1-8b", "-s", "8k", "--batch", "2", "-f", "json")
    assert json.loads(text)["kv_cache_bytes"] == 2_147_483_648


# ----- FlagSet: an immutable value, as the frozen dataclass it replaced -----------------------


class G(FlagSet):
    """A two-option group, declared as the real ones are."""

    engine: ClassVar[str] = "x"
    a: Annotated[int, typer.Option("--a")] = 1
    b: Annotated[Optional[str], typer.Option("--b")] = None


def test_group_fields_defaults_and_keywords():
    assert G.option_names() == ("a", "b")  # declaration order; the ClassVar is no field
    g = G(b="x")
    assert (g.a, g.b, g.engine) == (1, "x", "x")
    assert g.asdict() == {"a": 1, "b": "x"}
    assert [p.name for p in G.parameters()] == ["a", "b"] and G.parameters()[0].default == 1
    with pytest.raises(TypeError, match="unexpected keyword argument 'c'"):
        G(c=1)


def test_group_is_an_immutable_value():
    g = G(a=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.a = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del g.b
    assert g == G(a=2) and g != G(a=3) and g != G()
    assert hash(g) == hash(G(a=2)) and len({g, G(a=2), G()}) == 2
    assert repr(g) == "G(a=2, b=None)"
    assert g.replace(b="y") == G(a=2, b="y") and g.b is None  # a copy; the original unchanged


def test_group_field_without_default_is_refused():
    with pytest.raises(TypeError, match="need a default: n"):

        class Bad(FlagSet):
            n: int
