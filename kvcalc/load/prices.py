"""GPU prices for `kvcalc plan --prices FILE`: a YAML mapping of GPU key to dollars per GPU-hour.

```yaml
# my-prices.yaml: what we pay, per GPU-hour (our figures, 2026-11)
h100-sxm: 2.49
h200: 3.10
l40s: 0.99
```

kvcalc bundles no price: figures change by the week and by the buyer, so they come only from
the user. Each key must name a GPU kvcalc plans with (a row of `kvcalc gpus`, or the key of a
GPU file given with --gpu); each price must be a finite number >= 0 (0: hardware you own).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated

from pydantic import Field, RootModel

from kvcalc.errors import ConfigError, UnknownNameError
from kvcalc.load.models import user_path  # `~` expanded only when it names a home

#: dollars per GPU-hour: a finite number, not negative (strict: YAML `true` is no price)
Dollars = Annotated[float, Field(ge=0, le=1e6, allow_inf_nan=False, strict=True)]


class GpuPrices(RootModel[dict[str, Dollars]]):
    """GPU key -> dollars per GPU-hour."""


def check_prices(
    prices: Mapping[str, object], known: Iterable[str], *, path: str | None = None, lines: dict[str, int] | None = None
) -> dict[str, float]:
    """Validate `prices` (GPU key -> $ per GPU-hour): every key a known GPU (`UnknownNameError`
    with close matches, or a `ConfigError` naming the file and line), every price a number >= 0.
    Returns the prices with keys as the GPU table spells them (lower case)."""
    from kvcalc.load.files import build

    known = list(known)
    table = build(GpuPrices, prices, path, lines).root
    out = {}
    for key, dollars in table.items():
        k = str(key).strip().lower().replace(" ", "-").replace("_", "-")
        if k not in known:
            err = UnknownNameError("GPU", str(key), known, hint="a price file names GPUs of `kvcalc gpus`")
            if path is None:
                raise err
            raise ConfigError(err.message, path=path, field=str(key), line=(lines or {}).get(str(key)))
        out[k] = float(dollars)
    return out


def load_prices(path: str | Path, known: Iterable[str]) -> dict[str, float]:
    """The prices of a YAML (or JSON) file (`check_prices`). Raises `ConfigError` for a missing,
    unreadable or invalid file, naming the file, the line and the GPU."""
    from kvcalc.load.files import read_mapping

    p = user_path(path)
    data, lines = read_mapping(p, "prices")
    return check_prices(data, known, path=str(p), lines=lines)
