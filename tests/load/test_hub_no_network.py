"""No network: a Hub id fails in one line within seconds, not after huggingface_hub's ~24 s of
retries (a user trial), and the line says how to work offline.

The endpoint is a port nothing listens on (`HF_ENDPOINT=http://127.0.0.1:9`: the connection is
refused at once), set before the client is imported (it reads HF_ENDPOINT at import), in a fresh
process with an empty cache. No request leaves the machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytest.importorskip("huggingface_hub")


def run(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, float]:
    full = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    full.update(
        {
            "HF_ENDPOINT": "http://127.0.0.1:9",
            "HF_HUB_CACHE": str(tmp_path / "hub"),
            "KVCALC_CACHE": str(tmp_path / "kv"),
            "PYTHONPATH": str(ROOT),
            **env,
        }
    )
    start = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "kvcalc", *args], capture_output=True, text=True, env=full, timeout=60, check=False
    )
    return r, time.monotonic() - start


def test_refused_connection_fails_fast_in_one_line(tmp_path):
    r, took_s = run(tmp_path, "estimate", "acme/no-such-model")
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: cannot reach the Hugging Face Hub for acme/no-such-model (ConnectError)")
    assert "HF_HUB_OFFLINE=1 with the model in that cache, or give a local folder holding its config.json" in lines[0]
    # hf_hub_download alone retries for 1 + 2 + 4 + 8 + 8 = 23 s; the probe's refusal is immediate
    # (start-up included, a few seconds on a loaded machine)
    assert took_s < 10, took_s


def test_probe_timeout_follows_the_clients_setting(monkeypatch):
    from kvcalc.load import hub

    monkeypatch.delenv("HF_HUB_ETAG_TIMEOUT", raising=False)
    assert hub.probe_timeout_s() == hub.PROBE_TIMEOUT_S == 5
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "2")
    assert hub.probe_timeout_s() == 2.0
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "soon")  # the client ignores it too: the default
    assert hub.probe_timeout_s() == 5


def test_offline_mode_sends_no_probe(tmp_path):
    # HF_HUB_OFFLINE=1 with nothing cached: the offline line, at once, no request (the endpoint is never tried)
    r, _ = run(tmp_path, "estimate", "acme/no-such-model", HF_HUB_OFFLINE="1")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1
    assert "HF_HUB_OFFLINE is set" in r.stderr and "ConnectError" not in r.stderr
