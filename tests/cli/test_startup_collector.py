"""The cyclic garbage collector is paused for start-up only (`cli.app.main`,
`cli.output.resume_collector`): on again, with start-up's objects frozen, when the command runs
and after `main` ends (--help runs no command); a collector the caller turned off stays off."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: runs `main` in a fresh interpreter; prints, as JSON, whether the collector was on when the
#: command body ran (`load_model` is the first thing `estimate` calls), the frozen object
#: count then, and whether it is on after `main`
PROBE = """
import gc, io, contextlib, json, sys
mode, argv = sys.argv[1], sys.argv[2:]
if mode != "on":
    gc.disable()
import kvcalc.load.models as lm
seen = {}
real = lm.load_model
def probe(*a, **k):
    seen["in_command"] = gc.isenabled()
    seen["frozen"] = gc.get_freeze_count()
    return real(*a, **k)
lm.load_model = probe
from kvcalc.cli import main
sys.argv = ["kvcalc", *argv]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main(collector_paused=(mode == "paused"))
    except SystemExit as e:
        seen["exit"] = e.code
seen["after"] = gc.isenabled()
print(json.dumps(seen))
"""


def probe(mode: str, *argv: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode, *argv], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["on", "paused"])
def test_collector_on_and_start_up_frozen_when_the_command_runs(mode):
    # "on": the console script (main pauses it itself); "paused": python -m kvcalc
    seen = probe(mode, "estimate", "llama-3.1-8b", "-f", "json")
    assert seen["exit"] == 0 and seen["in_command"] is True and seen["after"] is True
    assert seen["frozen"] > 10_000  # modules, classes, the command: tens of thousands of objects


def test_collector_on_again_when_no_command_runs():
    seen = probe("paused", "--help")
    assert seen["exit"] == 0 and "in_command" not in seen and seen["after"] is True


def test_a_collector_the_caller_turned_off_stays_off():
    seen = probe("off", "estimate", "llama-3.1-8b", "-f", "json")
    assert seen["exit"] == 0 and seen["in_command"] is False and seen["after"] is False
    assert seen["frozen"] == 0


def test_python_m_kvcalc_output_unchanged():
    out = subprocess.run(
        [sys.executable, "-m", "kvcalc", "estimate", "llama-3.1-8b", "-f", "json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    # 2 x 32 layers x 8 KV heads x 128 head_dim x 131,072 tokens x 2 B = 17,179,869,184 B
    assert json.loads(out.stdout)["kv_cache_bytes"] == 17_179_869_184
