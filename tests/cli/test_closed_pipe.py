"""A reader that closes the pipe early (`kvcalc plan ... | head -1`) ends the run with no message
and exit 141 (128 + SIGPIPE, as a shell reports `cat` or `grep` stopped by `head`), for every
command and for `--help`, never "error: internal error: BrokenPipeError" and exit 1
(issue 11, user trial: `plan ... --top 100 | head -1` failed so about half the time).

The subprocess tests close the read end of the pipe before kvcalc starts, so that its first
write fails every time (with `head -1` the outcome depends on whether the output still fits in
the pipe's buffer when head exits)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvcalc.cli.output import CLOSED_PIPE_EXIT

ROOT = Path(__file__).resolve().parents[2]


def run_into_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """`python -m kvcalc ARGS` with stdout a pipe whose reader is already gone; stderr captured."""
    r, w = os.pipe()
    os.close(r)
    try:
        env = os.environ | {"PYTHONPATH": str(ROOT), "COLUMNS": "80"}
        proc = subprocess.run(
            [sys.executable, "-m", "kvcalc", *args],
            stdout=w,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=ROOT,
            env=env,
            check=False,
        )
    finally:
        os.close(w)
    return proc


def test_exit_status_is_128_plus_sigpipe():
    import signal

    assert CLOSED_PIPE_EXIT == 128 + signal.SIGPIPE == 141


@pytest.mark.parametrize(
    "args",
    [
        # the trial's command: 100 layouts, some 20 KB of table
        ("plan", "llama-3.1-70b", "-s", "32k", "--concurrency", "64", "--top", "100"),
        ("estimate", "llama-3.1-8b"),
        ("plan", "--help"),  # click's help, printed while the options are parsed
        ("--debug", "models"),  # --debug: still no traceback, a closed pipe is no bug
    ],
)
def test_closed_pipe_is_quiet_and_exits_141(args):
    proc = run_into_closed_pipe(*args)
    assert proc.returncode == CLOSED_PIPE_EXIT
    assert proc.stderr == ""  # no "internal error", no "Exception ignored ... BrokenPipeError"


def test_a_broken_pipe_inside_a_command_is_no_internal_error(cli, monkeypatch):
    from kvcalc.cli import output

    def closed(obj):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(output, "echo", closed)
    monkeypatch.setattr("kvcalc.cli.estimate.echo", closed, raising=False)
    r = cli("estimate", "llama-3.1-8b")
    assert r.exit_code == CLOSED_PIPE_EXIT
    assert "internal error" not in r.output


class _Closed:
    """A stream whose reader has gone: every flush fails as a closed pipe does; no descriptor."""

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")

    def fileno(self):
        raise OSError("no descriptor")


def test_last_flush_into_a_closed_pipe_exits_141(monkeypatch):
    # output still buffered when the command returns is written by the entry point's last flush
    from kvcalc.cli.output import flush_or_leave

    monkeypatch.setattr(sys, "stdout", _Closed())
    with pytest.raises(SystemExit) as e:
        flush_or_leave()
    assert e.value.code == CLOSED_PIPE_EXIT
