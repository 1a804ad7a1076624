"""The link table: `kvcalc/data/links.yaml` (PCIe, NVLink-C2C, NVMe, RDMA, NVLink rows, each
one direction, each with its `source`)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from kvcalc.errors import ConfigError, UnknownNameError
from kvcalc.schema import _Frozen


class LinkSpec(_Frozen):
    """One link: `bytes_per_s` one way (datasheet peak, decimal), `kind` (host, storage,
    network, gpu), the `source` of the figure."""

    key: str
    name: str
    kind: str
    bytes_per_s: int
    source: str


@cache
def link_table() -> dict[str, LinkSpec]:
    """Every bundled link by key. Raises `ConfigError` if the shipped table is invalid."""
    from kvcalc.load.files import build, read_mapping

    path = Path(__file__).parent.parent / "data" / "links.yaml"
    data, _ = read_mapping(path, "gpu")
    rows = data.get("links")
    if not isinstance(rows, dict):
        raise ConfigError("expected a mapping 'links:'", path=str(path))
    out = {}
    for key, row in rows.items():
        if not isinstance(row, dict):
            raise ConfigError(f"expected a mapping of fields under 'links.{key}'", path=str(path), field=f"links.{key}")
        out[key] = build(LinkSpec, {"key": key, **row}, f"{path} (links.{key})")
    return out


def get_link(name: str) -> LinkSpec:
    """The link `name` (case-insensitive; `_` or space for `-`). Raises `UnknownNameError`
    listing close matches."""
    table = link_table()
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    if key in table:
        return table[key]
    raise UnknownNameError("link", name, list(table))
