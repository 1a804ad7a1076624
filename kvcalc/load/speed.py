"""The speed model's constants (`kvcalc/data/speed.yaml`, each with its source) and a user's
calibration file (`kvcalc measure --calibrate`), read into `calc.speed.SpeedTable` /
`calc.speed.Calibration`. The only place these files are read."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from kvcalc.calc.speed import BACKENDS, GPU_CLASSES, LINKS, WEIGHT_WIDTHS, Calibration, SpeedTable
from kvcalc.errors import OPTION, ConfigError, KvcalcError

SPEED_PATH = Path(__file__).parent.parent / "data" / "speed.yaml"
#: the `kind:` a calibration file carries
CALIBRATION_KIND = "kvcalc-calibration"


def _value(node: object, where: str, path: Path) -> float:
    """A leaf {value, source}: its value, checked to be a finite number >= 0 with a source."""
    if not isinstance(node, dict) or set(node) != {"value", "source"} or not isinstance(node["source"], str):
        raise ConfigError(f"{where}: expected {{value, source}}", path=str(path), field=where)
    v = node["value"]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
        raise ConfigError(f"{where}: value must be a number >= 0, got {v!r}", path=str(path), field=where)
    return float(v)


# Any (here and below): speed.yaml's nested mappings, each value checked by `_value` as it is read
def _section(data: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    node = data.get(key)
    if not isinstance(node, dict):
        raise ConfigError(f"expected a mapping '{key}:'", path=str(path), field=key)
    return node


def parse_speed_table(data: dict[str, Any], path: Path = SPEED_PATH) -> SpeedTable:  # Any: as `_section`
    """A `SpeedTable` from the file's mapping; raises `ConfigError` naming the entry that is
    missing or malformed (every backend, width, class and link must be present)."""
    floors = {
        eng: {be: _value(v, f"step_floor_s.{eng}.{be}", path) for be, v in row.items()}
        for eng, row in _section(data, "step_floor_s", path).items()
    }
    if set(floors.get("ideal", {})) != set(BACKENDS):
        raise ConfigError(
            f"step_floor_s.ideal must give every backend {BACKENDS}", path=str(path), field="step_floor_s"
        )
    bw = {be: _value(_section(data, "bw_efficiency", path).get(be), f"bw_efficiency.{be}", path) for be in BACKENDS}
    fsec = _section(data, "format_efficiency", path)
    fmt = {
        be: {w: _value((fsec.get(be) or {}).get(w), f"format_efficiency.{be}.{w}", path) for w in WEIGHT_WIDTHS}
        for be in BACKENDS
    }
    fl = {
        c: _value(_section(data, "flops_efficiency", path).get(c), f"flops_efficiency.{c}", path) for c in GPU_CLASSES
    }
    asec = _section(data, "allreduce_latency_s", path)
    ar = {
        ln: (
            _value((asec.get(ln) or {}).get("alpha_call"), f"allreduce_latency_s.{ln}.alpha_call", path),
            _value((asec.get(ln) or {}).get("alpha_step"), f"allreduce_latency_s.{ln}.alpha_step", path),
        )
        for ln in LINKS
    }
    for name, table in (("bw_efficiency", bw), ("flops_efficiency", fl)):
        for k, v in table.items():
            if not 0 < v <= 1:
                raise ConfigError(f"{name}.{k} must be in (0, 1], got {v}", path=str(path), field=name)
    return SpeedTable(
        step_floor_s=floors, bw_efficiency=bw, format_efficiency=fmt, flops_efficiency=fl, allreduce_latency_s=ar
    )


@cache
def speed_table() -> SpeedTable:
    """The bundled `speed.yaml`. Raises `ConfigError` if it is invalid (a packaging bug)."""
    from kvcalc.load.files import read_mapping

    data, _ = read_mapping(SPEED_PATH, "config")
    return parse_speed_table(data)


def load_calibration(path: str | Path) -> Calibration:
    """A calibration file written by `kvcalc measure --calibrate`: `kind: kvcalc-calibration`,
    `gpu`, and any of `step_floor_s`, `read_bytes_per_s`, `flops_per_s`,
    `allreduce_latency_s` with `allreduce_tp`. Raises `ConfigError` naming the field."""
    from kvcalc.load.files import read_mapping
    from kvcalc.load.models import user_path

    p = user_path(str(path))
    if p.is_dir():
        raise KvcalcError(
            f"{p} is a folder, not a calibration file (kvcalc measure --calibrate FILE writes one)",
            option="--calibration",
            value=str(p),
            form=OPTION,
        )
    data, lines = read_mapping(p, "config")
    if data.get("kind") != CALIBRATION_KIND:
        raise ConfigError(
            f"not a calibration file (expected kind: {CALIBRATION_KIND})",
            path=str(p),
            field="kind",
            line=lines.get("kind"),
        )
    known = {
        "kind",
        "gpu",
        "measured",
        "device",
        "step_floor_s",
        "read_bytes_per_s",
        "flops_per_s",
        "allreduce_latency_s",
        "allreduce_tp",
        "source",
    }
    for k in data:
        if k not in known:
            raise ConfigError(f"unknown field '{k}'", path=str(p), field=k, line=lines.get(k))
    gpu = data.get("gpu")
    if not isinstance(gpu, str):
        raise ConfigError("expected 'gpu: KEY' (the GPU table key it was measured as)", path=str(p), field="gpu")
    device = data.get("device")
    if isinstance(device, str) and device.strip().upper().startswith("CPU"):
        import warnings

        from kvcalc.errors import KvcalcWarning

        warnings.warn(
            str(
                ConfigError(
                    f"measured on the CPU ({device.strip()}), not on the GPU {gpu}: its step floor and bandwidth are "
                    f"the CPU's, not the GPU's; measure on the {gpu} (kvcalc measure --device cuda --calibrate ...)",
                    path=str(p),
                    field="device",
                    line=lines.get("device"),
                )
            ),
            KvcalcWarning,
            stacklevel=2,
        )
    out: dict[str, Any] = {}  # Any: `Calibration`'s fields
    for k in ("step_floor_s", "read_bytes_per_s", "flops_per_s", "allreduce_latency_s"):
        v = data.get(k)
        if v is None:
            continue
        if isinstance(v, str):  # YAML 1.1 reads 2.9e12 (no "+" after the e) as text: take it as the number
            try:
                v = float(v)
            except ValueError:
                pass
        low = 0 if k == "step_floor_s" else 1e-300  # a floor may be 0; a rate may not
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not low <= v < float("inf"):
            raise ConfigError(
                f"{k} must be a number {'>=' if low == 0 else '>'} 0, got {v!r}",
                path=str(p),
                field=k,
                line=lines.get(k),
            )
        out[k] = float(v)
    tp = data.get("allreduce_tp")
    if tp is not None and (isinstance(tp, bool) or not isinstance(tp, int) or tp < 2):
        raise ConfigError(f"allreduce_tp must be an integer >= 2, got {tp!r}", path=str(p), field="allreduce_tp")
    return Calibration(gpu=gpu, allreduce_tp=tp, **out)
