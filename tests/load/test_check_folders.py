"""Issue 11, item 5: a `kvcalc check` folder holds deployments and the GPU files they use. A file is
a deployment only if it has deployment keys (or `kind: deployment`); GPU rows beside them are
loaded as GPUs, usable by name, and a GPU file's misspelt field gets its did-you-mean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcalc.errors import ConfigError
from kvcalc.load.deployments import check_paths, file_kind

# 48 GiB, 960 GB/s, 150 TFLOPS: a made-up workstation card
GPU = (
    "name: Lab card 48GB\nmemory_bytes: 51_539_607_552\nhbm_bytes_per_s: 960_000_000_000\n"
    "bf16_flops_per_s: 150_000_000_000_000\nsource: lab measurement\n"
)
DEPLOY = "name: {name}\nmodel: llama-3.1-8b\ngpu: {gpu}\nmax_seq_len: 8192\nconcurrency: 2\n"


def folder(tmp_path: Path, **files: str) -> Path:
    for name, text in files.items():
        (tmp_path / f"{name}.yaml").write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    "data,kind",
    [
        ({"model": "x", "gpu": "h200", "max_seq_len": 1}, "deployment"),
        ({"name": "typo", "model": "x", "concurency": 8}, "deployment"),  # one deployment key is enough
        ({"name": "g", "memory_bytes": 1, "hbm_bytes_per_s": 1}, "gpu"),
        ({"name": "g", "memory": "24GiB", "source": "x"}, "gpu"),  # a misspelt GPU field still marks a GPU
        ({"name": "m", "n_layers": 2, "n_heads": 4}, "model"),
        ({"kind": "GPU", "name": "g"}, "gpu"),  # kind: wins, case-insensitive
        ({"kind": "deployment", "name": "d"}, "deployment"),
        ({"owner": "me"}, None),
    ],
)
def test_file_kind(data, kind) -> None:
    assert file_kind(data, Path("f.yaml")) == kind


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown kind 'gpus'; use one of: deployment, gpu, model"):
        file_kind({"kind": "gpus"}, Path("f.yaml"), {"kind": 1})


def test_gpu_files_load_and_are_named_by_the_folder(tmp_path, cli) -> None:
    d = folder(
        tmp_path,
        **{
            "lab-card": GPU,
            "deploy": DEPLOY.format(name="on-lab", gpu="lab-card"),
            "deploy2": "kind: deployment\n" + DEPLOY.format(name="on-h200", gpu="h200"),
        },
    )
    rows, errors = check_paths([str(d)])
    assert errors == []
    assert [(r.name, r.gpu) for r in rows] == [("on-lab", "lab-card"), ("on-h200", "h200")]
    # the lab card's budget: 0.9 x 51,539,607,552 B = 46,385,646,796 B (floor)
    assert rows[0].budget_bytes_per_gpu == 46_385_646_796
    r = cli("check", str(d), "--format", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["errors"] == []


def test_a_named_deployment_sees_its_folders_gpus(tmp_path) -> None:
    d = folder(tmp_path, **{"lab-card": GPU, "deploy": DEPLOY.format(name="on-lab", gpu="Lab_Card")})
    rows, errors = check_paths([str(d / "deploy.yaml")])
    assert errors == [] and rows[0].gpu == "lab-card"


def test_gpu_file_field_error_suggests_the_field(tmp_path, cli) -> None:
    bad = GPU.replace("memory_bytes: 51_539_607_552", "memory: 51_539_607_552")
    d = folder(tmp_path, **{"lab-card": bad, "deploy": DEPLOY.format(name="on-lab", gpu="lab-card")})
    r = cli("check", str(d))
    assert r.exit_code == 2
    assert f"{d / 'lab-card.yaml'}:2: field 'memory': unknown field; did you mean 'memory_bytes'?" in r.stderr
    # the deployment that names it is reported against its gpu: line (line 3), with the GPU file's error
    assert f"{d / 'deploy.yaml'}:3: field 'gpu': " in r.stderr


@pytest.mark.parametrize(
    "field,hint",
    [
        ("memory", "memory_bytes"),  # memory_note is closer by difflib: the unit suffix wins
        ("hbm", "hbm_bytes_per_s"),
        ("bandwidth", "hbm_bytes_per_s"),
        ("bf16_flops", "bf16_flops_per_s"),
        ("tflops", "bf16_flops_per_s"),
        ("interconnect", "interconnect_bytes_per_s"),
        ("l2", "l2_bytes"),
    ],
)
def test_gpu_yaml_field_hints(tmp_path, field, hint) -> None:
    from kvcalc.load.gpus import get_gpu

    p = tmp_path / "g.yaml"
    p.write_text(GPU + f"{field}: 1\n")
    with pytest.raises(ConfigError, match=f"field '{field}': unknown field; did you mean '{hint}'\\?"):
        get_gpu(str(p))


def test_other_files_in_a_folder_are_skipped_with_a_warning(tmp_path, cli) -> None:
    d = folder(tmp_path, notes="owner: me\n", deploy=DEPLOY.format(name="on-h200", gpu="h200"))
    r = cli("check", str(d))
    assert r.exit_code == 0
    assert "notes.yaml: neither a deployment" in r.stderr and "skipped" in r.stderr
    # named on its own, the same file is checked as a deployment (and is invalid): one line, its
    # first problem in the file (line 1's unknown key, before the missing model, which has no line)
    r = cli("check", str(d / "notes.yaml"))
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1
    assert "notes.yaml:1: field 'owner': unknown field" in r.stderr


def test_a_folder_of_gpus_only_is_an_error(tmp_path, cli) -> None:
    d = folder(tmp_path, **{"lab-card": GPU})
    r = cli("check", str(d))
    assert r.exit_code == 2 and "holds no deployment file" in r.stderr


def test_a_gpu_key_defined_twice(tmp_path, cli) -> None:
    d = folder(tmp_path, a=GPU + "key: lab\n", b=GPU + "key: lab\n", deploy=DEPLOY.format(name="x", gpu="lab"))
    r = cli("check", str(d))
    assert r.exit_code == 2 and "GPU 'lab' is defined twice" in r.stderr
