"""The Python API's arguments (`kvcalc.estimate`, `kvcalc.capacity`, `kvcalc.plan`), checked in
one place before any work: every argument has a kind (`ARGUMENTS`), and `check_arguments`
returns the values as the request builders take them, or raises `KvcalcError` naming the
argument as the caller wrote it (`batch must be a whole number of sequences, not str '3'`).

The rules are the CLI's, so an API call and a command line refuse the same values in the same
words (only the name differs: `batch` for `--batch`):
- a count (`batch`, `tp`, `concurrency`, ...) is an int; a bool is not one (`True` is not 1
  sequence), nor a float or a str; its bounds are `units.BOUNDS`, checked by `units.check_bound`.
- a token count (`seq_len`, `max_model_len`) is an int or text the CLI takes (`'32k'`,
  `'8,192'`: `units.parse_count`), in every function alike; `seq_len` text is read as
  `--seq-len` is (`units.parse_counts`), so `'8,192'` (one number, or the list 8, 192?) is refused.
- a size (`kv_memory_bytes`) is an int of bytes or text (`'6.51GiB'`: `units.parse_size`); zero
  is refused as `--kv-memory 0` is.
- a target (`max_tpot_ms`, ...) is a positive finite int or float, not a bool.
- a name (`kv_dtype`, `engine`) is a str; a list of names (`gpus`, `kv_dtypes`) a comma-separated
  str or a list / tuple of str.
None passes wherever the function's default is None (the function decides what it means).

Imports nothing but `kvcalc.errors` and `kvcalc.units` (`import kvcalc` stays free: the API
functions import this module when called).
"""

from __future__ import annotations

import math
import os
from typing import Any, TypeGuard

from kvcalc.errors import OPTION_SAYS, KvcalcError

#: argument name -> its kind: what `check_arguments` accepts for it (see the module docstring)
ARGUMENTS: dict[str, str] = {
    "model": "model",
    "seq_len": "tokens",
    "max_model_len": "tokens",
    "batch": "count",
    "concurrency": "count",
    "tp": "count",
    "pp": "count",
    "dp": "count",
    "dp_attention": "count",
    "ep": "count",
    "dcp": "count",
    "quant_group_size": "count",
    "max_gpus": "count",
    "top": "count",
    "why_not": "count",
    "gpus_per_node": "count",
    "kv_memory_bytes": "bytes",
    "max_tpot_ms": "target",
    "min_tokens_per_s": "target",
    "max_ttft_s": "target",
    "kv_dtype": "name",
    "k_dtype": "name",
    "v_dtype": "name",
    "scale_dtype": "name",
    "engine": "name",
    "gpus": "names",
    "kv_dtypes": "names",
    "weight_dtypes": "names",
    "prices": "prices",
    "gpu": "gpu",
    "weight_dtype": "name",
    "input_len": "tokens",
    "output_len": "tokens",
    "request_rate": "target",
    "gpu_memory_utilization": "fraction",
    "bw_efficiency": "fraction",
    "flops_efficiency": "fraction",
    "cuda_context_bytes": "bytes0",
    "activation_reserve_bytes": "bytes0",
    # the tier below the GPU (issue 22): an `engines.offload_rules.OffloadSettings`, the share of
    # requests that find a shared prefix cached, the links a prefix load is timed over, and
    # plan's target of sessions kept warm
    "offload": "offload",
    "prefix_hit_rate": "fraction",
    "link": "names",
    "sessions": "count",
}

#: what a count counts, in the type error (`units.BOUNDS` has the unit of each bounded one)
_EXAMPLE = {"tokens": "8192 or '32k'", "bytes": "40 * 2**30 or '40GiB'"}


def _shown(value: object) -> str:
    """`str '3'`, `bool True`, `float 8192.5`: the type and a short repr, for a message."""
    from kvcalc.text import excerpt

    return f"{type(value).__name__} {excerpt(repr(value), 60)}"


def _refuse(name: str, words: str, value: object) -> KvcalcError:
    """`name <words>`: the argument is the option and the field (the API's names are the fields')."""
    return KvcalcError(words, option=name, field=name, value=value, form=OPTION_SAYS)


def _is_int(value: object) -> TypeGuard[int]:
    """An int and not a bool (`True` is an int to Python, never a count to kvcalc)."""
    return isinstance(value, int) and not isinstance(value, bool)


def check_argument(name: str, value: object) -> Any:  # Any: each name's own type (`ARGUMENTS`)
    """`value` as the request builders take it (a token count or size text parsed to an int),
    or raise `KvcalcError` (option `name`, the field it sets, value `value`) for a value of the
    wrong type or past its bound (`units.BOUNDS`). None passes."""
    try:
        return _check(name, ARGUMENTS[name], value)
    except KvcalcError as e:
        if e.field is None:  # units' parsers know flags' fields (`--seq-len`), not the API's names
            e.field = name
        raise


def _check(name: str, kind: str, value: object) -> Any:  # Any: as check_argument
    from kvcalc.units import bound_of, check_bound, parse_count, parse_size

    if value is None:
        return None
    if kind == "tokens":
        if isinstance(value, str):
            if name == "seq_len":  # the CLI's --seq-len takes a list: '8,192' is refused there, so here
                from kvcalc.units import parse_counts

                parse_counts(value, name)
            return parse_count(value, name)
        if not _is_int(value):
            raise _refuse(name, f"must be a whole number of tokens ({_EXAMPLE[kind]}), not {_shown(value)}", value)
        return parse_count(value, name)
    if kind == "count":
        if not _is_int(value):
            unit = (bound_of(name) or (None, None))[1]
            what = unit.unit if unit is not None else "units"
            raise _refuse(name, f"must be a whole number of {what} (an int), not {_shown(value)}", value)
        return check_bound(name, value, option=name)
    if kind == "bytes":
        if isinstance(value, str):
            return parse_size(value, name)
        if not _is_int(value):
            raise _refuse(
                name, f"must be a whole number of bytes or a size ({_EXAMPLE[kind]}), not {_shown(value)}", value
            )
        if value <= 0:  # as `--kv-memory 0` (units.parse_size): an engine has no cache to size
            raise _refuse(name, f"must be positive, got {value}", value)
        return check_bound(name, value, option=name)
    if kind == "bytes0":  # a reserve: 0 is a real answer (`--cuda-context 0`)
        if isinstance(value, str):
            return parse_size(value, name, allow_zero=True, hint_unit="MiB")
        if not _is_int(value) or value < 0:
            raise _refuse(
                name, f"must be a whole number of bytes >= 0 or a size ('500MiB'), not {_shown(value)}", value
            )
        return check_bound(name, value, option=name) if bound_of(name) else value
    if kind == "fraction":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _refuse(name, f"must be a number in (0, 1], not {_shown(value)}", value)
        if not math.isfinite(value) or not 0 < value <= 1:
            raise _refuse(name, f"must be in (0, 1], got {value:g}", value)
        return float(value)
    if kind == "gpu":
        from kvcalc.schema import GpuSpec

        if not isinstance(value, (str, os.PathLike, GpuSpec)):
            raise _refuse(name, f"must be a GPU name, a GPU file path or a GpuSpec, not {_shown(value)}", value)
        return value if isinstance(value, GpuSpec) else str(value)
    if kind == "target":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise _refuse(name, f"must be a number, not {_shown(value)}", value)
        if not math.isfinite(value) or value <= 0:
            raise _refuse(name, f"must be a positive number, got {value:g}", value)
        return value
    if kind == "name":
        if not isinstance(value, str):
            raise _refuse(name, f"must be a name (a str), not {_shown(value)}", value)
        return value
    if kind == "names":
        items = value if isinstance(value, (list, tuple)) else [value]
        bad = next((v for v in items if not isinstance(v, str)), None) if items else None
        if bad is not None or (not isinstance(value, (str, list, tuple))):
            raise _refuse(
                name,
                f"must be a comma-separated str or a list of str, not {_shown(bad if bad is not None else value)}",
                value,
            )
        return value
    if kind == "prices":
        if not isinstance(value, (dict, str, os.PathLike)):
            raise _refuse(
                name, f"must be a dict (GPU -> dollars per GPU-hour) or a price file path, not {_shown(value)}", value
            )
        return value
    if kind == "offload":
        from kvcalc.engines.offload_rules import OffloadSettings

        if not isinstance(value, OffloadSettings):
            raise _refuse(name, f"must be a kvcalc.engines.offload_rules.OffloadSettings, not {_shown(value)}", value)
        return value
    if kind == "model":
        from kvcalc.schema import ModelSpec

        if not isinstance(value, (str, os.PathLike, ModelSpec)):
            raise _refuse(name, f"must be a model name, a path or a ModelSpec, not {_shown(value)}", value)
        return value
    raise AssertionError(f"unknown argument kind {kind!r}")  # ARGUMENTS names only the kinds above


def check_arguments(**values: object) -> dict[str, Any]:  # Any: keyword arguments of the builders
    """`check_argument` for each keyword, in the order given: {name: value as the builders take
    it}. Raises `KvcalcError` naming the first bad argument."""
    return {name: check_argument(name, value) for name, value in values.items()}
