"""Ctrl-C in any command exits 130 with one line, never click's "Aborted!" and exit 1
(issue 12 item 6; `kvcalc measure`'s own handler is tested in tests/bad_input/test_measure_interrupts.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# the estimate command, with its computation replaced by one that interrupts itself (SIGINT to
# this very process) and would then run for a minute: only the handler can end it in time
SCRIPT = """
import os, signal, sys, time
import kvcalc.requests as requests
def interrupted(req):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(60)
requests.run_estimate = interrupted
sys.argv = ["kvcalc", "estimate", "llama-3.1-8b"]
from kvcalc.cli import main
main()
"""


def test_ctrl_c_exits_130_with_one_line():
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert r.returncode == 130
    assert r.stdout == ""
    assert r.stderr.strip().splitlines() == ["error: interrupted (Ctrl-C)"]
