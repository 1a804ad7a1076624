"""Parsing numbers the user types: token counts (`32k` = 32,768) and sizes (`6.51GiB`, `80GB`).

GB = 10^9 bytes, GiB = 2^30 bytes; MB = 10^6, MiB = 2^20; KB = 10^3, KiB = 2^10. Token counts
use the binary k that context lengths are named by (`32k` = 32,768, `128k` = 131,072).

`what` is the flag the text came from (`--seq-len`); a refused text raises `KvcalcError` with
`option=what`, the field that flag sets (`errors.FIELDS`) and `value` the text. Also the bounds
past which kvcalc refuses to size anything (`MAX_GPUS`, `MAX_CONCURRENCY`, `MAX_SEQ_LEN`).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from kvcalc.errors import OPTION, OPTION_SAYS, KvcalcError

#: the largest batch (sequences), context (tokens) and GPU count kvcalc sizes: beyond them the
#: sums lose meaning and printed figures turn to garbage (deployment files, --batch, --seq-len).
MAX_CONCURRENCY = 10_000_000
MAX_SEQ_LEN = 2**30
#: the most GPUs a deployment may name (count, tp, pp)
MAX_GPUS = 100_000

SIZE_UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


def parse_count(text: str | int, what: str = "--seq-len") -> int:
    """A positive count: `8192`, `32k` (x 1024), `1m` (x 1024^2), `8_192` or `8,192`.

    Raises `KvcalcError` for anything else, zero or negative.
    """
    if isinstance(text, int):
        n = text
    else:
        s = str(text).strip().lower().replace("_", "").replace(",", "")
        m = re.fullmatch(r"(-?\d+)([km]?)", s)
        if not m:
            raise KvcalcError(f"'{text}' is not a positive whole number (e.g. 16, 8192 or 32k)",
                              option=what, value=text, form=OPTION)
        n = int(m.group(1)) * {"": 1, "k": 1024, "m": 1024**2}[m.group(2)]
    if n <= 0:
        raise KvcalcError(f"must be a positive integer, got {text}", option=what, value=text, form=OPTION_SAYS)
    return n


def parse_counts(text: str, what: str = "--seq-len") -> list[int]:
    """A comma-separated list of counts: `1k,8k,32k` -> [1024, 8192, 32768]."""
    parts = str(text).split(",")
    if any(not p.strip() for p in parts):
        raise KvcalcError(f"'{text}' has an empty item; write values separated by single commas",
                          option=what, value=text, form=OPTION)
    out: list[int] = []
    for p in parts:
        n = parse_count(p, what)
        if n not in out:  # a repeated value is one point
            out.append(n)
    return out


def parse_size(text: str | int, what: str = "size") -> int:
    """Bytes from `6.51GiB`, `80GB`, `512MiB` or a plain byte count; floored to whole bytes.

    Raises `KvcalcError` for an unknown unit or a non-positive size.
    """
    if isinstance(text, int):
        n = text
    else:
        s = str(text).strip().replace("_", "").replace(",", "")
        m = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*([A-Za-z]*)", s)
        unit = m.group(2).lower() if m else None
        if not m or unit not in SIZE_UNITS:
            raise KvcalcError(f"'{text}' is not a size (write 80GB, 6.51GiB or a byte count)",
                              option=what, value=text, form=OPTION)
        try:
            n = int(Decimal(m.group(1)) * SIZE_UNITS[unit])
        except InvalidOperation:
            raise KvcalcError(f"'{text}' is not a size", option=what, value=text, form=OPTION) from None
    if n <= 0:
        raise KvcalcError(f"must be positive, got {text}", option=what, value=text, form=OPTION_SAYS)
    return n


#: a reserve written without a unit and below this is almost surely a unit left off (1.5 -> 1 B)
MIN_UNITLESS_RESERVE_BYTES = 2**20


def parse_reserve(text: str, what: str) -> int:
    """Bytes of a per-GPU reserve (--cuda-context, --activation-reserve): `0`, a size with a
    unit (`2GiB`, `512MiB`), or a whole byte count of at least 1 MiB. Raises `KvcalcError` for a
    unitless fraction (`1.5` would floor to 1 byte) or a unitless count under 1 MiB."""
    import re

    s = str(text).strip().replace("_", "").replace(",", "")
    if re.fullmatch(r"0*\.?0*", s) and s not in ("", "."):
        return 0
    if re.fullmatch(r"[0-9]*\.?[0-9]+", s):  # no unit: a byte count
        if not s.isdigit():
            raise KvcalcError(f"'{text}' has no unit and is not a whole number of bytes; "
                              f"write the unit, e.g. {s}GiB or {s}MiB", option=what, value=text, form=OPTION)
        if int(s) < MIN_UNITLESS_RESERVE_BYTES:
            raise KvcalcError(f"'{text}' has no unit, so it would be {int(s):,} bytes; "
                              f"write the unit, e.g. {s}GiB, {s}MiB or {s}B", option=what, value=text, form=OPTION)
    return parse_size(text, what)
