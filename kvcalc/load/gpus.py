"""The GPU table: `kvcalc/data/gpus.yaml` (one row per GPU, each with its `source`), and a
user's own GPU from a YAML file with the same fields."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from kvcalc.errors import ConfigError, UnknownNameError
from kvcalc.schema import GpuSpec


@cache
def gpu_table() -> dict[str, GpuSpec]:
    """Every bundled GPU by key (`h200`, `h100-sxm`, ...). Raises `ConfigError` if the table
    shipped with the package is invalid (a packaging bug)."""
    from kvcalc.load.files import build, read_mapping

    path = Path(__file__).parent.parent / "data" / "gpus.yaml"
    data, _ = read_mapping(path)
    rows = data.get("gpus")
    if not isinstance(rows, dict):
        raise ConfigError("expected a mapping 'gpus:'", path=str(path))
    return {key: build(GpuSpec, {"key": key, **row}, f"{path} (gpus.{key})") for key, row in rows.items()}


def get_gpu(name: str) -> GpuSpec:
    """A GPU by bundled key (case-insensitive; spaces and underscores read as hyphens) or by
    the path of a YAML file holding one row (`name`, `memory_bytes`, `hbm_bytes_per_s`,
    `bf16_flops_per_s`, `source`, ...).

    Raises `UnknownNameError` with close matches, or `ConfigError` for a bad file.
    """
    from kvcalc.load.files import build, read_mapping

    p = Path(name).expanduser()
    if p.suffix.lower() in (".yaml", ".yml") or p.is_file():
        data, lines = read_mapping(p)
        data = {"key": data.get("key", p.stem), **data}
        return build(GpuSpec, data, str(p), lines)
    key = name.strip().lower().replace(" ", "-").replace("_", "-")
    table = gpu_table()
    if key in table:
        return table[key]
    raise UnknownNameError("GPU", name, table, hint="`kvcalc gpus` lists them; or give a YAML file")


def gpu_for_device_name(device_name: str) -> GpuSpec | None:
    """The table row for a name torch or nvidia-smi reports ("NVIDIA H200", "NVIDIA H100 80GB
    HBM3"), or None when no row matches well enough to trust."""
    n = device_name.lower()
    rules = [("h200", "h200"), ("h100 nvl", "h100-nvl"), ("h100 pcie", "h100-pcie"),
             ("h100", "h100-sxm"), ("b200", "b200"), ("mi300x", "mi300x"), ("l40s", "l40s"),
             ("a10g", "a10g"), ("4090", "rtx-4090"), ("3090", "rtx-3090")]
    for needle, key in rules:
        if needle in n:
            return gpu_table()[key]
    if "a100" in n:
        big = "80gb" in n.replace(" ", "")
        pcie = "pcie" in n
        key = ("a100-80gb" if big else "a100-40gb") + ("-pcie" if pcie else ("-sxm" if big else ""))
        return gpu_table().get(key)
    if n.strip().endswith(" l4") or n.strip() == "l4":
        return gpu_table()["l4"]
    return None
