"""Issue 12 item 1: every writer refuses to lose a file the user owns.

The writers: `kvcalc import -o`, `kvcalc sweep --plot`, `kvcalc plan --write-deployment` (all
through `kvcalc.cli.output.write_atomic`). Each is run against each kind of target a user can
name by mistake: an existing file (kept unless --force), a name ending in `/`, an existing folder,
a symbolic link (to a file, dangling: refused even with --force), a FIFO (refused, never opened:
a write to it would block), a folder that does not exist, and for --plot a name without its
type (once silently written as NAME.png). Each refusal: exit 2, one stderr line naming the
option and the path, nothing on stdout, the folder exactly as before (no temporary file).
"""

from __future__ import annotations

import os
import stat

import pytest

from tests.bad_input.harness import ROOT, refused, run_kvcalc, snapshot

HF = ROOT / "tests" / "data" / "hf"

#: (option, the command up to the option, a good file name for it)
WRITERS = {
    "-o": (["import", str(HF / "gpt2.json")], "model.yaml"),
    "--plot": (["sweep", "gpt2", "-s", "1k", "--batch", "1"], "sweep.png"),
    "--write-deployment": (
        ["plan", "llama-3.1-8b", "--seq-len", "8k", "--concurrency", "4", "--gpu", "h100-sxm"],
        "deployment.yaml",
    ),
}


def write(option: str, target: str, *extra: str):
    cmd, _ = WRITERS[option]
    return run_kvcalc(*cmd, option, target, *extra)


@pytest.fixture(params=list(WRITERS))
def option(request) -> str:
    return request.param


def test_an_existing_file_is_kept_without_force(option, tmp_path):
    target = tmp_path / WRITERS[option][1]
    target.write_bytes(b"the user's own file\n")
    before = snapshot(tmp_path)
    line = refused(write(option, str(target)))
    assert line == f"{option} {target}: the file exists; add --force to overwrite it"
    assert snapshot(tmp_path) == before


def test_a_trailing_slash_is_a_folder_name_not_a_file(option, tmp_path):
    # `-o newdir/` once wrote a file named `newdir` (typer's Path drops the slash)
    line = refused(write(option, f"{tmp_path / 'newdir'}/"), option, f"{tmp_path / 'newdir'}/")
    assert "folder" in line  # --plot: "is a folder" (kvcalc.report.plot), the others: "names a folder"
    assert snapshot(tmp_path) == {}


def test_an_existing_folder_is_refused_with_or_without_force(option, tmp_path):
    (tmp_path / "out.yaml").mkdir()
    (tmp_path / "out.yaml" / "keep").write_text("x")
    name = "out.png" if option == "--plot" else "out.yaml"
    if option == "--plot":
        (tmp_path / "out.yaml").rename(tmp_path / name)
    for extra in ((), ("--force",)):
        line = refused(write(option, str(tmp_path / name), *extra))
        assert line == f"{option} {tmp_path / name}: is a folder; give a file name"
    assert (tmp_path / name / "keep").read_text() == "x"


@pytest.mark.parametrize("dangling", [False, True], ids=["to-a-file", "dangling"])
def test_a_symbolic_link_is_refused_even_with_force(option, tmp_path, dangling):
    # `import -o` once replaced a link while `--plot` wrote through one: now neither, one rule
    real = tmp_path / "real.bin"
    if not dangling:
        real.write_bytes(b"the link's target\n")
    link = tmp_path / WRITERS[option][1]
    link.symlink_to(real)
    before = snapshot(tmp_path)
    for extra in ((), ("--force",)):
        line = refused(write(option, str(link), *extra))
        assert line.startswith(
            f"{option} {link}: is a symbolic link; kvcalc neither writes through a link nor replaces one"
        )
    assert snapshot(tmp_path) == before


def test_a_fifo_is_refused_without_blocking(option, tmp_path):
    fifo = tmp_path / WRITERS[option][1]
    os.mkfifo(fifo)
    for extra in ((), ("--force",)):
        line = refused(write(option, str(fifo), *extra))  # the harness's timeout bounds a hang
        assert line == f"{option} {fifo}: is a FIFO (named pipe); kvcalc writes only regular files"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_missing_folder_is_refused(option, tmp_path):
    target = tmp_path / "no" / WRITERS[option][1]
    line = refused(write(option, str(target)))
    assert line == f"{option} {target}: folder {tmp_path / 'no'} does not exist"
    assert snapshot(tmp_path) == {}


def test_plot_writes_only_the_name_typed(tmp_path):
    # `--plot photo` once replaced photo.png, a name the user never typed
    (tmp_path / "photo.png").write_bytes(b"a holiday picture")
    before = snapshot(tmp_path)
    line = refused(write("--plot", str(tmp_path / "photo")))
    assert line.startswith(f"--plot {tmp_path / 'photo'}: give the file type in the name (photo.png")
    assert snapshot(tmp_path) == before


def test_force_replaces_the_file_atomically_and_keeps_its_mode(tmp_path):
    pytest.importorskip("matplotlib")
    target = tmp_path / "sweep.png"
    target.write_bytes(b"an old picture")
    target.chmod(0o640)
    r = write("--plot", str(target), "--force")
    assert r.code == 0, r.stderr
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep.png"]  # no temporary file left


@pytest.mark.parametrize("option", ["-o", "--write-deployment"])
def test_a_new_file_is_written_with_the_usual_permissions(option, tmp_path):
    target = tmp_path / WRITERS[option][1]
    r = run_kvcalc(*WRITERS[option][0], option, str(target), env={})
    assert r.code == 0, r.stderr
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


# ----- the writer itself, in-process: what an interrupted or raced write leaves ----------------


def test_an_interrupted_write_leaves_the_old_file_whole(tmp_path, monkeypatch):
    from kvcalc.cli.output import write_atomic

    target = tmp_path / "model.yaml"
    target.write_text("old\n")

    def interrupted(fd):
        raise KeyboardInterrupt  # Ctrl-C in the middle of the write

    monkeypatch.setattr(os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, "new\n" * 1000, option="-o", force=True)
    assert snapshot(tmp_path) == {"model.yaml": b"old\n"}


def test_a_file_that_appears_during_the_write_is_not_replaced(tmp_path, monkeypatch):
    from kvcalc.cli.output import write_atomic
    from kvcalc.errors import KvcalcError

    target = tmp_path / "model.yaml"
    real_fsync = os.fsync

    def race(fd):  # another process creates the file after the check, before the move
        real_fsync(fd)
        target.write_text("theirs\n")

    monkeypatch.setattr(os, "fsync", race)
    with pytest.raises(KvcalcError) as e:
        write_atomic(target, "ours\n", option="-o")
    assert str(e.value) == f"-o {target}: the file exists; add --force to overwrite it"
    assert snapshot(tmp_path) == {"model.yaml": b"theirs\n"}
