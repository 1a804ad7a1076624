"""The GPU table (kvcalc/data/gpus.yaml via kvcalc/gpus.py) and `kvcalc gpus`."""

from __future__ import annotations

import json

import pytest

from kvcalc.errors import ConfigError, UnknownNameError
from kvcalc.load.gpus import get_gpu, gpu_for_device_name, gpu_table

REQUIRED = [
    "h200",
    "h100-sxm",
    "h100-pcie",
    "h100-nvl",
    "a100-80gb-sxm",
    "a100-80gb-pcie",
    "a100-40gb",
    "l40s",
    "l4",
    "a10g",
    "rtx-4090",
    "rtx-3090",
    "mi300x",
    "b200",
]


def test_required_rows_with_sources() -> None:
    t = gpu_table()
    assert set(REQUIRED) <= set(t)
    for g in t.values():
        assert g.source.startswith("http") and g.memory_note


@pytest.mark.parametrize(
    "key,mib,hbm",
    [
        ("h200", 143_771, 4_800_000_000_000),  # nvidia-smi 143771 MiB, not "141 GB"
        ("h100-sxm", 81_559, 3_350_000_000_000),
        ("a100-80gb-sxm", 81_920, 2_039_000_000_000),
    ],
)
def test_memory_as_the_device_reports_it(key: str, mib: int, hbm: int) -> None:
    g = get_gpu(key)
    assert g.memory_bytes == mib * 2**20 and g.hbm_bytes_per_s == hbm


def test_dense_not_sparse_flops() -> None:
    # Hopper whitepaper: 989.4 dense bf16 TFLOPS (1,979 with 2:4 sparsity)
    assert get_gpu("h100-sxm").bf16_flops_per_s == 989_400_000_000_000


def test_lookup_spellings_and_suggestion() -> None:
    assert get_gpu("H100_SXM").key == "h100-sxm" and get_gpu("RTX 4090").key == "rtx-4090"
    with pytest.raises(UnknownNameError, match="h100-sxm"):
        get_gpu("h100-smx")


def test_user_gpu_yaml(tmp_path) -> None:
    p = tmp_path / "mygpu.yaml"
    p.write_text(
        "name: My GPU\nmemory_bytes: 1000B\nhbm_bytes_per_s: 10B/s\nbf16_flops_per_s: 100FLOPS\n"
        "source: lab measurement\n"
    )
    g = get_gpu(str(p))  # toy figures, written with their units (a bare 1000 would be refused)
    assert (g.key, g.memory_bytes, g.hbm_bytes_per_s, g.bf16_flops_per_s) == ("mygpu", 1000, 10, 100)
    p.write_text("name: My GPU\nmemory_byte: 1000\n")
    with pytest.raises(ConfigError, match="memory_byte"):
        get_gpu(str(p))


@pytest.mark.parametrize(
    "device,key",
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA L4", "l4"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ],
)
def test_device_names(device: str, key: str) -> None:
    assert gpu_for_device_name(device).key == key


def test_gpus_command(cli) -> None:
    r = cli("gpus", "--format", "json")
    assert r.exit_code == 0
    rows = json.loads(r.stdout)
    assert {x["key"] for x in rows} >= set(REQUIRED)
    t = cli("gpus", env={"COLUMNS": "160"})
    assert "GiB" in t.output and "GB" in t.output and "h200" in t.output and "140.4" in t.output
