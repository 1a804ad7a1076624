"""Issue 12 item 2: only regular files are read, and only so much.

Every reader of a user's file (`kvcalc.load.files.read_config_text`): a model YAML, a Hugging
Face config.json (estimate and import), a GPU file (`--gpu FILE`), a deployment (`kvcalc check`),
a price file (`plan --prices`). Each is handed a FIFO (once blocked forever), `/dev/zero` (once
read until memory ran out), a socket, a folder, and a file one byte past its bound (a sparse
file: refused from its size, before a byte is read). Each refusal: exit 2 within the harness's
time bound, one stderr line naming the file, stdout empty (or valid JSON).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.bad_input.harness import ROOT, refused, run_kvcalc

#: kind -> (the command with {} where the file goes, the file's name, its bound in bytes)
READERS = {
    "model": (["estimate", "{}", "-s", "1k", "-f", "json"], "model.yaml", 4 * 2**20),
    "config.json": (["estimate", "{}", "-s", "1k", "-f", "json"], "config.json", 4 * 2**20),
    "import": (["import", "{}"], "config.json", 4 * 2**20),
    "gpu": (["estimate", "gpt2", "-s", "1k", "--gpu", "{}", "-f", "json"], "my-gpu.yaml", 2**20),
    # `kvcalc check` reads a file before it knows its kind (a deployment, a GPU row or a model):
    # the largest bound, "config"
    "deployment": (["check", "{}"], "deployment.yaml", 4 * 2**20),
    "prices": (
        [
            "plan",
            "llama-3.1-8b",
            "--seq-len",
            "8k",
            "--concurrency",
            "4",
            "--gpu",
            "h100-sxm",
            "--prices",
            "{}",
            "-f",
            "json",
        ],
        "prices.yaml",
        2**20,
    ),
}


def read(kind: str, path: str | Path):
    cmd = [str(path) if a == "{}" else a for a in READERS[kind][0]]
    return run_kvcalc(*cmd)


@pytest.fixture(params=list(READERS))
def kind(request) -> str:
    return request.param


def test_a_fifo_is_refused_before_it_is_opened(kind, tmp_path):
    fifo = tmp_path / READERS[kind][1]
    os.mkfifo(fifo)
    line = refused(read(kind, fifo), str(fifo), json_out=True)
    assert line.endswith(": is a FIFO (named pipe), not a regular file; kvcalc reads configs only from regular files")


def test_dev_zero_is_refused_before_it_is_read(kind):
    line = refused(read(kind, "/dev/zero"), "/dev/zero", json_out=True)
    if kind == "gpu":  # --gpu takes a file only when it is one (kvcalc.load.gpus): else it is a GPU name
        # the option named and its choices listed (a user trial: choice errors named neither)
        assert line.startswith("--gpu: unknown GPU '/dev/zero'; choose one of: h200, h100-sxm, ")
        assert line.endswith("(`kvcalc gpus` describes them); or give a YAML file")
        return
    assert line == (
        "/dev/zero: is a character device, not a regular file; kvcalc reads configs only from regular files"
    )


def test_a_socket_is_refused(kind, tmp_path):
    path = tmp_path / READERS[kind][1]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.bind(str(path))
        line = refused(read(kind, path), str(path), json_out=True)
        assert "is a socket, not a regular file" in line
    finally:
        s.close()


def test_a_file_past_its_bound_is_refused_unread(kind, tmp_path):
    name, limit = READERS[kind][1], READERS[kind][2]
    path = tmp_path / name
    with open(path, "wb") as f:
        f.truncate(limit + 1)  # sparse: the size alone must refuse it
    line = refused(read(kind, path), str(path), json_out=True)
    what = {
        "model": "model config",
        "config.json": "model config",
        "import": "model config",
        "gpu": "gpu file",
        "deployment": "config",
        "prices": "price file",
    }[kind]
    assert line == f"{path}: is {limit + 1:,} B; a {what} is at most {limit:,} B ({limit // 2**20} MiB)"


@pytest.mark.parametrize("kind", ["gpu", "prices"])
def test_a_folder_is_refused(kind, tmp_path):
    folder = tmp_path / "rows.yaml"
    folder.mkdir()
    line = refused(read(kind, folder), str(folder), json_out=True)
    assert "is a folder" in line


# ----- the bounds themselves, in-process ---------------------------------------------------


def test_the_bounds_are_the_documented_ones():
    from kvcalc.load.files import MAX_FILE_BYTES

    # README "Guarantees": a model config at most 4 MiB, a GPU, deployment or price file 1 MiB;
    # a file of a kind not known before reading (a `kvcalc check` folder) the largest config bound;
    # a safetensors index (one line per tensor) 64 MiB
    assert MAX_FILE_BYTES == {
        "model": 4_194_304,
        "gpu": 1_048_576,
        "deployment": 1_048_576,
        "prices": 1_048_576,
        "config": 4_194_304,
        "index": 67_108_864,
    }


def test_a_file_at_its_bound_is_read_and_one_byte_more_is_not(tmp_path):
    from kvcalc.errors import ConfigError
    from kvcalc.load.files import read_config_text

    path = tmp_path / "gpu.yaml"
    path.write_bytes(b"# " + b"x" * (2**20 - 3) + b"\n")  # 1,048,576 B exactly
    assert len(read_config_text(path, "gpu")) == 2**20
    path.write_bytes(b"# " + b"x" * (2**20 - 2) + b"\n")  # 1,048,577 B
    with pytest.raises(ConfigError) as e:
        read_config_text(path, "gpu")
    assert str(e.value) == f"{path}: is 1,048,577 B; a gpu file is at most 1,048,576 B (1 MiB)"


def test_a_proc_file_that_says_zero_bytes_is_read_only_up_to_the_bound(tmp_path, monkeypatch):
    from kvcalc.errors import ConfigError
    from kvcalc.load import files

    proc = Path("/proc/self/maps")  # a regular file of st_size 0 that holds more
    if not proc.exists():
        pytest.skip("no /proc")
    monkeypatch.setitem(files.MAX_FILE_BYTES, "gpu", 16)
    with pytest.raises(ConfigError) as e:
        files.read_config_text(proc, "gpu")
    assert str(e.value) == "/proc/self/maps: holds more than 16 B; a gpu file is at most 0 MiB"


def test_a_regular_file_behind_a_symlink_is_read(tmp_path):
    # reading follows a link to a regular file (only writers refuse links)
    real = tmp_path / "real.yaml"
    real.write_text((ROOT / "tests" / "data" / "tiny-gqa.yaml").read_text())
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    r = run_kvcalc("estimate", str(link), "-s", "1k", "-f", "json")
    assert r.code == 0, r.stderr
