"""Issue 20 item 1 / item 4 and issue 21 item 7: the Blackwell rack-scale and HGX rows
(kvcalc/data/gpus.yaml), their dense FP4 peaks (`GpuSpec.fp4_flops_per_s`), their NVLink domain
(`GpuSpec.nvlink_domain_gpus`) and what `kvcalc plan` does with a domain larger than a node.

Sources, as each row's `source` cites them: nvidia.com/en-us/data-center/hgx/ (HGX B200: FP4 144 |
72 PFLOPS sparse | dense for 8 GPUs; HGX B300: 144 | 105), nvidia.com/en-us/data-center/gb200-nvl72/
(FP4 1,440 PFLOPS sparse for 72 GPUs), nvidia.com/en-us/data-center/gb300-nvl72/ (FP4 1,440 | 1,080
PFLOPS; FP8 720, BF16 360 sparse; 576 TB/s; NVLink 130 TB/s), the RTX Blackwell whitepaper (RTX
5090 FP4 1,676 dense / 3,352 sparse).
"""

from __future__ import annotations

import pytest

from kvcalc.calc.plan import parallel_layouts
from kvcalc.load.gpus import get_gpu, gpu_for_device_name, gpu_table
from kvcalc.load.models import load_model
from kvcalc.schema import GpuSpec

P = 10**15


@pytest.mark.parametrize(
    "key, fp4, domain, cc, urls",
    [
        ("b200", 72 * P // 8, 8, "10.0", ["nvidia.com/en-us/data-center/hgx/", "144 | 72 PFLOPS"]),  # 9 PF
        ("b300", 105 * P // 8, 8, "10.3", ["nvidia.com/en-us/data-center/hgx/", "144 | 105 PFLOPS"]),  # 13.125 PF
        (
            "gb200",
            1_440 * P // 72 // 2,
            72,
            "10.0",
            ["nvidia.com/en-us/data-center/gb200-nvl72/", "FP4 1,440"],
        ),  # 10 PF
        ("gb300", 1_080 * P // 72, 72, "10.3", ["nvidia.com/en-us/data-center/gb300-nvl72/", "1,440 | 1,080"]),  # 15 PF
        ("rtx-5090", 1_676 * 10**12, None, "12.0", ["nvidia-rtx-blackwell-gpu-architecture.pdf"]),
    ],
)
def test_blackwell_rows(key, fp4, domain, cc, urls):
    g = get_gpu(key)
    assert (g.fp4_flops_per_s, g.nvlink_domain_gpus, g.compute_capability) == (fp4, domain, cc)
    assert all(u in g.source for u in urls)


def test_gb300_row():
    # NVL72 / 72: 576 TB/s -> 8 TB/s; 360 / 720 PFLOPS sparse -> 2.5 / 5 PF dense; NVLink 130 TB/s / 72 ~ 1.8 TB/s;
    # 288 GiB physical HBM3e per Blackwell Ultra GPU, as the b300 row
    g = get_gpu("gb300")
    assert (g.hbm_bytes_per_s, g.bf16_flops_per_s, g.fp8_flops_per_s) == (8 * 10**12, 2_500 * 10**12, 5 * P)
    assert (g.memory_bytes, g.interconnect_bytes_per_s) == (288 * 2**30, 1_800 * 10**9)
    assert g.memory_bytes == get_gpu("b300").memory_bytes and "not sourced" in g.memory_note


def test_fp4_only_on_blackwell():
    # FP4 tensor cores arrived with Blackwell (compute capability 10.x / 12.x); every older row has none
    for key, g in gpu_table().items():
        blackwell = g.compute_capability is not None and g.compute_capability.split(".")[0] in ("10", "12")
        assert (g.fp4_flops_per_s is not None) == blackwell, key
        assert g.source.startswith("http"), key
    # dense FP4 is twice dense FP8 on B200 and GB200, three times on Blackwell Ultra (B300, GB300)
    assert get_gpu("b200").fp4_flops_per_s == 2 * get_gpu("b200").fp8_flops_per_s
    assert get_gpu("gb300").fp4_flops_per_s == 3 * get_gpu("gb300").fp8_flops_per_s


@pytest.mark.parametrize(
    "name, key",
    [
        ("GB200_NVL72", "gb200"),
        ("gb300-nvl72", "gb300"),
        ("HGX B200", "b200"),
        ("hgx-b300", "b300"),
        ("DGX_B200", "b200"),
    ],
)
def test_system_names(name, key):
    assert get_gpu(name).key == key


@pytest.mark.parametrize(
    "device, key",
    [("NVIDIA GB200", "gb200"), ("NVIDIA GB300", "gb300"), ("NVIDIA B300 SXM6 AC", "b300"), ("NVIDIA B200", "b200")],
)
def test_device_names(device, key):
    g = gpu_for_device_name(device)
    assert g is not None and g.key == key


def test_user_file_fields(tmp_path):
    p = tmp_path / "my.yaml"
    p.write_text(
        "name: mine\nmemory_bytes: 80GiB\nhbm_bytes_per_s: 3TB/s\nbf16_flops_per_s: 1000TFLOPS\n"
        "fp4_flops_per_s: 9PFLOPS\nnvlink_domain_gpus: 36\nsource: https://example.com\n"
    )
    g = get_gpu(str(p))
    assert (g.fp4_flops_per_s, g.nvlink_domain_gpus) == (9 * P, 36)
    assert GpuSpec.model_fields["fp4_flops_per_s"].default is None


def test_tp_inside_an_nvlink_domain():
    # llama-3.1-70b: 64 query heads, 8 KV heads. Nodes of 8: tp stays <= 8 and divides 8 beyond a node.
    m = load_model("llama-3.1-70b")
    assert max(tp for tp, _, _ in parallel_layouts(m, 16, 8)) == 8
    # a 72-GPU NVLink domain (GB200 NVL72): tp 16 inside it is searched
    assert (16, 1, 1) in parallel_layouts(m, 16, 8, 72)
    # beyond the domain tp must divide it (no group straddles two racks): 144 GPUs, tp 16 does not divide 72
    assert all(72 % tp == 0 for tp, _, _ in parallel_layouts(m, 144, 8, 72))
