"""The GPU table: `kvcalc/data/gpus.yaml` (one row per GPU, each with its `source`), and a
user's own GPU from a YAML file with the same fields."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from kvcalc.errors import ConfigError, KvcalcError, UnknownNameError
from kvcalc.load.models import user_path  # `~` expanded only when it names a home
from kvcalc.schema import GpuSpec

if TYPE_CHECKING:
    from kvcalc.json_types import JsonObject


@cache
def gpu_table() -> dict[str, GpuSpec]:
    """Every bundled GPU by key (`h200`, `h100-sxm`, ...). Raises `ConfigError` if the table
    shipped with the package is invalid (a packaging bug)."""
    from kvcalc.load.files import build, read_mapping

    path = Path(__file__).parent.parent / "data" / "gpus.yaml"
    data, _ = read_mapping(path, "gpu")
    rows = data.get("gpus")
    if not isinstance(rows, dict):
        raise ConfigError("expected a mapping 'gpus:'", path=str(path))
    out = {}
    for key, row in rows.items():
        if not isinstance(row, dict):
            raise ConfigError(f"expected a mapping of fields under 'gpus.{key}'", path=str(path), field=f"gpus.{key}")
        out[key] = build(GpuSpec, {"key": key, **row}, f"{path} (gpus.{key})")
    return out


#: other names of a row: the system it ships in (a GB200 NVL72's GPU is the `gb200` row, an HGX
#: B200's the `b200` row)
GPU_ALIASES: dict[str, str] = {
    "gb200-nvl72": "gb200",
    "gb300-nvl72": "gb300",
    "hgx-b200": "b200",
    "b200-hgx": "b200",
    "dgx-b200": "b200",
    "hgx-b300": "b300",
    "b300-hgx": "b300",
    "dgx-b300": "b300",
}


def normalize_key(name: str) -> str:
    """A GPU name as the table spells its keys: lower case, spaces and underscores as hyphens
    (`H100_SXM` -> `h100-sxm`), a system's name as its GPU's row (`GB200_NVL72` -> `gb200`)."""
    key = name.strip().lower().replace(" ", "-").replace("_", "-")
    return GPU_ALIASES.get(key, key)


def gpu_from_mapping(data: JsonObject, path: Path, lines: dict[str, int] | None = None) -> GpuSpec:
    """A `GpuSpec` from one GPU file's mapping: `key` defaults to the file's stem; an optional
    `kind: gpu` marks the file as a GPU row (for `kvcalc check` folders) and is not a field.

    Raises `ConfigError` naming the file, the line and the field (an unknown field with its
    did-you-mean: `memory` -> `memory_bytes`), or for a `kind:` other than gpu."""
    from kvcalc.load.files import build

    data = dict(data)
    kind = data.pop("kind", "gpu")
    if str(kind).lower() != "gpu":
        raise ConfigError(
            f"kind '{kind}' is not a GPU (kind: gpu)", path=str(path), field="kind", line=(lines or {}).get("kind")
        )
    data = {"key": data.get("key", path.stem), **data}
    return build(GpuSpec, data, str(path), lines)


def load_gpu_file(path: Path) -> GpuSpec:
    """The GPU row in a YAML (or JSON) file (`gpu_from_mapping`). Raises `ConfigError`."""
    from kvcalc.load.files import read_mapping

    data, lines = read_mapping(path, "gpu")
    return gpu_from_mapping(data, path, lines)


def get_gpu(name: str, *, local: Mapping[str, GpuSpec | KvcalcError] | None = None) -> GpuSpec:
    """A GPU by key (case-insensitive; spaces and underscores read as hyphens) or by the path of
    a YAML file holding one row (`name`, `memory_bytes`, `hbm_bytes_per_s`, `bf16_flops_per_s`,
    `source`, ...). `local` holds GPUs defined beside a deployment (`kvcalc check` folders), by
    normalized key: they are looked up before the bundled table (a local row of the same key
    is the user's own figures for that GPU); an entry that is an error (an invalid GPU file)
    raises that error when named.

    Raises `UnknownNameError` listing the GPU family first (`h100` -> `h100-sxm`, `h100-pcie`,
    `h100-nvl`), or `ConfigError` for a bad file.
    """
    p = user_path(name)
    if p.suffix.lower() in (".yaml", ".yml") or p.is_file():
        return load_gpu_file(p)
    key = normalize_key(name)
    if local and key in local:
        hit = local[key]
        if isinstance(hit, KvcalcError):
            raise hit
        return hit
    table = gpu_table()
    if key in table:
        return table[key]
    names = [*(local or {}), *table]
    raise UnknownNameError(
        "GPU",
        name,
        names,
        field="gpu",
        hint=f"choose one of: {', '.join(names)} (`kvcalc gpus` describes them); or give a YAML file",
    )


def gpu_for_device_name(device_name: str) -> GpuSpec | None:
    """The table row for a name torch or nvidia-smi reports ("NVIDIA H200", "NVIDIA H100 80GB
    HBM3"), or None when no row matches well enough to trust."""
    n = device_name.lower()
    rules = [
        ("h200", "h200"),
        ("h100 nvl", "h100-nvl"),
        ("h100 pcie", "h100-pcie"),
        ("h100", "h100-sxm"),
        ("gb300", "gb300"),
        ("gb200", "gb200"),
        ("b300", "b300"),
        ("b200", "b200"),
        ("mi300x", "mi300x"),
        ("l40s", "l40s"),
        ("a10g", "a10g"),
        ("4090", "rtx-4090"),
        ("3090", "rtx-3090"),
    ]
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
