"""Parsing numbers the user types: token counts (`32k` = 32,768) and sizes (`6.51GiB`, `80GB`).

GB = 10^9 bytes, GiB = 2^30 bytes; MB = 10^6, MiB = 2^20; KB = 10^3, KiB = 2^10; TB = 10^12,
TiB = 2^40; PB = 10^15, PiB = 2^50 (the bound of a device's memory, `MAX_DEVICE_BYTES`). Token counts
use the binary k that context lengths are named by (`32k` = 32,768, `128k` = 131,072).
`parse_size` is the one rule for every size, rate and FLOP/s figure, on the command line and in
GPU and deployment files alike (`kvcalc.schema` validates file fields through it).

`what` is the flag the text came from (`--seq-len`); a refused text raises `KvcalcError` with
`option=what`, the field that flag sets (`errors.FIELDS`) and `value` the text.

Also the one set of bounds (`BOUNDS`, checked by `check_bound`): every count and size a command,
a deployment file or the Python API takes is refused outside its bound, with the same words
wherever it came from (`MAX_GPUS`, `MAX_CONCURRENCY`, `MAX_SEQ_LEN`, `MAX_DEVICE_BYTES`,
`LLAMACPP_MAX_N_CTX`).
"""

from __future__ import annotations

import re
from decimal import Decimal, Overflow, localcontext
from typing import NamedTuple

from kvcalc.errors import OPTION, OPTION_SAYS, KvcalcError

#: the largest batch (sequences), context (tokens) and GPU count kvcalc sizes: beyond them the
#: sums lose meaning and printed figures turn to garbage (deployment files, --batch, --seq-len).
MAX_CONCURRENCY = 10_000_000
MAX_SEQ_LEN = 2**30
#: the most GPUs a deployment may name (count, tp, pp)
MAX_GPUS = 100_000
#: the largest memory one device (or one rank's KV pool) may be given: 2^50 B = 1 PiB, four
#: orders of magnitude above the largest GPU (a B300's 288 GB); --kv-memory, --cuda-context,
#: --activation-reserve, --swap-space
MAX_DEVICE_BYTES = 2**50
#: llama.cpp reads -c / --ctx-size into `common_params.n_ctx`, an `int32_t` (common/common.h;
#: parsed with std::stoi in common/arg.cpp), so it refuses a context past 2^31 - 1 tokens
LLAMACPP_MAX_N_CTX = 2**31 - 1
#: llama.cpp's other 32-bit counts (n_ubatch, n_gpu_layers: `int32_t` in common_params)
LLAMACPP_MAX_INT32 = 2**31 - 1
#: the most timed decode steps `measure` takes (ten seconds at a millisecond a step; a GPU run
#: needs 30)
MAX_STEPS = 10_000
#: the most GPUs `plan` searches up to (--max-gpus): the search grows with the count (every
#: bundled GPU up to 1,024 takes about 15 s on one core; 4,096 about a minute)
MAX_PLAN_GPUS = 1024


class Bound(NamedTuple):
    """The values one count or size may take: `low` <= value <= `high`, in `unit`; `why` says
    where the upper bound comes from (shown when it is passed); `low_words` replaces "must be a
    positive integer" when zero or -1 means something (`--why-not 0`, `--n-gpu-layers -1`).
    A NamedTuple, not a frozen dataclass: it is declared on every start-up, and a dataclass
    compiles its methods when declared."""

    low: int
    high: int
    unit: str
    why: str = "beyond what kvcalc sizes"
    low_words: str = ""


_TOKENS = Bound(1, MAX_SEQ_LEN, "tokens")
_SEQS = Bound(1, MAX_CONCURRENCY, "sequences")
_GPUS = Bound(1, MAX_GPUS, "GPUs")
_DEVICE_BYTES = Bound(0, MAX_DEVICE_BYTES, "B (1 PiB)", "beyond any device's memory")
_INT32 = "beyond llama.cpp's 32-bit int"

#: the one set of bounds, by field (the standard names of `errors.OPTIONS`, and the names
#: `requests.check_positive` is called with): every entry point checks these (`check_bound`).
BOUNDS: dict[str, Bound] = {
    # contexts and token counts
    "seq_len": _TOKENS,
    "max_model_len": _TOKENS,
    "block_size": _TOKENS,
    "page_size": _TOKENS,
    "max_num_batched_tokens": _TOKENS,
    "layers": Bound(1, 100_000, "layers"),
    "n_ctx": Bound(
        1,
        LLAMACPP_MAX_N_CTX,
        "tokens",
        f"{_INT32} n_ctx (common_params.n_ctx is an int32_t: llama.cpp refuses -c past 2^31 - 1)",
    ),
    "ubatch_size": Bound(1, LLAMACPP_MAX_INT32, "tokens", f"{_INT32} n_ubatch"),
    "n_ubatch": Bound(1, LLAMACPP_MAX_INT32, "tokens", f"{_INT32} n_ubatch"),
    "batch_size": Bound(1, LLAMACPP_MAX_INT32, "tokens", f"{_INT32} n_batch"),
    "n_batch": Bound(1, LLAMACPP_MAX_INT32, "tokens", f"{_INT32} n_batch"),
    "n_gpu_layers": Bound(
        -1, LLAMACPP_MAX_INT32, "layers", f"{_INT32} n_gpu_layers", "must be -1 (all layers) or a count of layers"
    ),
    # sequences
    "batch": _SEQS,
    "concurrency": _SEQS,
    "parallel": _SEQS,
    # devices
    "tp": _GPUS,
    "pp": _GPUS,
    "dp": _GPUS,
    "dp_attention": _GPUS,
    "ep": _GPUS,
    "dcp": _GPUS,
    "count": _GPUS,
    "n_gpus": _GPUS,
    "gpus": _GPUS,
    "n_devices": _GPUS,
    "max_gpus": Bound(1, MAX_PLAN_GPUS, "GPUs", "beyond what plan searches"),
    "gpus_per_node": _GPUS,
    # sizes per device
    "kv_memory_bytes": _DEVICE_BYTES,
    "kv_memory": _DEVICE_BYTES,
    "cuda_context_bytes": _DEVICE_BYTES,
    "cuda_context": _DEVICE_BYTES,
    "activation_reserve_bytes": _DEVICE_BYTES,
    "activation_reserve": _DEVICE_BYTES,
    "swap_space_bytes": _DEVICE_BYTES,
    "swap_space": _DEVICE_BYTES,
    # the rest
    "steps": Bound(1, MAX_STEPS, "steps"),
    "top": Bound(1, 1_000_000, "rows"),
    "why_not": Bound(0, 1_000_000, "rows", low_words="must not be negative"),
    "quant_group_size": Bound(1, 2**20, "values", "beyond any quantization group"),
}


def bound_of(name: str | None) -> tuple[str, Bound] | None:
    """(field, bound) for a field name (`dp`), a flag (`--dp`, through `errors.FIELDS`) or a
    parameter name (`ctx_size`), or None when it has no bound."""
    from kvcalc.errors import FIELDS

    if not name:
        return None
    key = FIELDS.get(name, name).lstrip("-").replace("-", "_")
    key = {"ctx_size": "n_ctx"}.get(key, key)
    return (key, BOUNDS[key]) if key in BOUNDS else None


def check_bound(name: str | None, value: int | None, *, option: str | None = None) -> int | None:
    """`value` when it lies within the bound of `name` (`bound_of`; None, and a name without a
    bound, pass unchanged), else raise `KvcalcError` naming `option` (default `--name`, or the
    flag of the field): `--dp 100,001 is beyond what kvcalc sizes (at most 100,000)`,
    `--batch must be a positive integer, got 0`, `--ctx-size 2,147,483,648 is beyond llama.cpp's
    32-bit int n_ctx (...) (at most 2,147,483,647 tokens)`."""
    from kvcalc.errors import OPTIONS

    found = bound_of(name)
    if value is None or found is None:
        return value
    field, b = found
    flag = option or (
        name if name and name.startswith("-") else OPTIONS.get(field) or "--" + str(name).replace("_", "-")
    )
    if value < b.low:
        words = b.low_words or ("must be a positive integer" if b.low == 1 else f"must be at least {b.low:,}")
        raise KvcalcError(f"{words}, got {value}", option=flag, field=field, value=value, form=OPTION_SAYS)
    if value > b.high:
        raise KvcalcError(
            f"{value:,} is {b.why} (at most {b.high:,} {b.unit})",
            option=flag,
            field=field,
            value=value,
            form=OPTION_SAYS,
        )
    return value


SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "pb": 10**15,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "pib": 2**50,
}


def parse_count(text: str | int, what: str | None = "--seq-len") -> int:
    """A positive count: `8192`, `32k` (x 1024), `1m` (x 1024^2), `8_192` or `8,192`.

    Raises `KvcalcError` for anything else, zero or negative.
    """
    if isinstance(text, int):
        n = text
    else:
        s = str(text).strip().lower().replace("_", "").replace(",", "")
        m = re.fullmatch(r"(-?\d+)([km]?)", s)
        if not m:
            raise KvcalcError(
                f"'{text}' is not a positive whole number (e.g. 16, 8192 or 32k)", option=what, value=text, form=OPTION
            )
        n = int(m.group(1)) * {"": 1, "k": 1024, "m": 1024**2}[m.group(2)]
    if n <= 0:
        raise KvcalcError(f"must be a positive integer, got {text}", option=what, value=text, form=OPTION_SAYS)
    return check_bound(what, n, option=what)  # type: ignore[return-value]


def parse_counts(text: str, what: str = "--seq-len") -> list[int]:
    """A comma-separated list of counts: `1k,8k,32k` -> [1024, 8192, 32768].

    Raises `KvcalcError` (option `what`) for an empty item, a bad count, and for text that reads
    as one number with digit grouping as well as a list (`8,192`, `128,256,512`: no space, every
    item after the first three digits): kvcalc does not guess which was meant. `8192` or `8k` is
    one count; `128, 256, 512` (a space after each comma) is a list."""
    if re.fullmatch(r"[0-9]{1,3}(,[0-9]{3})+", str(text).strip()):
        raise KvcalcError(
            f"'{text}' reads as one number with digit grouping or as a list of {text.count(',') + 1}; "
            f"write one count without commas ({str(text).replace(',', '')} or with k) or a list with a "
            f"space after each comma ('{', '.join(str(text).split(','))}')",
            option=what,
            value=text,
            form=OPTION,
        )
    parts = str(text).split(",")
    if any(not p.strip() for p in parts):
        raise KvcalcError(
            f"'{text}' has an empty item; write values separated by single commas", option=what, value=text, form=OPTION
        )
    out: list[int] = []
    for p in parts:
        n = parse_count(p, what)
        if n not in out:  # a repeated value is one point
            out.append(n)
    return out


#: the largest size, rate or FLOP/s kvcalc reads (10^21: a zettabyte; every real GPU figure is far below)
MAX_QUANTITY = 10**21

#: a size written without a unit and below this is almost surely a unit left off (`--kv-memory 6`
#: would be 6 B): refused with a did-you-mean where memory is meant
MIN_UNITLESS_BYTES = 2**20

#: rate and FLOP/s units: decimal prefixes (vendors quote TB/s and TFLOPS in powers of ten)
RATE_UNITS: dict[str, int] = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15}
FLOPS_UNITS: dict[str, int] = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15}

#: what each kind of quantity is called in a message, its units, and the suffixes its units may carry
_KINDS: dict[str, tuple[str, dict[str, int], tuple[str, ...]]] = {
    "bytes": ("size", SIZE_UNITS, ("",)),
    "bytes_per_s": ("rate", RATE_UNITS, ("/s", "ps", "")),
    "flops_per_s": ("FLOP/s figure", FLOPS_UNITS, ("flop/s", "flops", "")),
}
_EXAMPLES = {
    "bytes": "80GB, 6.51GiB or a byte count",
    "bytes_per_s": "3.35TB/s, 768GB/s or 768e9",
    "flops_per_s": "989.4TFLOPS or 989.4e12",
}
_NUMBER = r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([-+]?[0-9]{1,4}))?"
_THOUSANDS = re.compile(r"[0-9]{1,3}(,[0-9]{3})+(\.[0-9]*)?")


def parse_size(
    text: object,
    what: str | None = "size",
    *,
    allow_zero: bool = False,
    min_unitless: int = MIN_UNITLESS_BYTES,
    hint_unit: str = "GiB",
    kind: str = "bytes",
) -> int:
    """The one rule for every size kvcalc reads (CLI options, GPU and deployment files): whole
    bytes (or bytes/s, FLOP/s with `kind`) from `24GiB`, `80GB`, `6.51GiB`, `1.5e9`, `512 MiB`,
    `1_000_000`, `1,048,576` or a YAML int / float.

    Parsed exactly with `Decimal` (never float: `2.01GB` is 2,010,000,000 B). A figure with a
    prefixed unit (KB ... PiB) is floored to whole bytes (`6.51GiB` = 6,990,059,274.24 ->
    6,990,059,274, as vLLM's two-decimal GiB figures need); one without a unit, or in plain
    bytes (`B`), must be a whole number (`1.5B` is refused, not 1 byte), and without a unit it
    must be at least `min_unitless` (1 MiB where memory is meant: `--kv-memory 6.5` is refused
    with "did you mean 6.5GiB?", `hint_unit` being the unit suggested); `0` passes when
    `allow_zero`. `kind` is 'bytes' (units `SIZE_UNITS`), 'bytes_per_s' (`RATE_UNITS`, written
    `3.35TB/s`, `768GB/s` or `768e9`) or 'flops_per_s' (`FLOPS_UNITS`: `989.4TFLOPS`, `989.4e12`).

    Raises `KvcalcError` (`option=what`, its message without the option in `.message`) for
    anything else (any other type included: a file's value arrives as whatever YAML made of it), a negative or zero size ("must be positive, got -1GiB": a size with a minus
    sign is a size, just not a positive one), or one past `MAX_QUANTITY`.
    """
    noun, units, suffixes = _KINDS[kind]
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        shown = str(text).lower() if isinstance(text, bool) else repr(text)  # YAML's true, not Python's True
        raise KvcalcError(f"{shown} is not a {noun} (write {_EXAMPLES[kind]})", option=what, value=text, form=OPTION)
    s = repr(text) if isinstance(text, float) else str(text)  # repr: the shortest decimal of a YAML float
    s = s.strip().replace("_", "")
    negative = s.startswith("-")  # -1GiB is a size, and not a positive one: said so once it reads as a size
    if negative:
        s = s[1:]
    if "," in s:  # thousands separators only: "1,5GiB" is not 15 GiB
        m = _THOUSANDS.match(s)
        if not m:
            raise KvcalcError(
                f"'{text}' is not a {noun} (commas may only group thousands: 1,048,576)",
                option=what,
                value=text,
                form=OPTION,
            )
        s = s[: m.end()].replace(",", "") + s[m.end() :]
    m = re.fullmatch(_NUMBER + r"\s*([A-Za-z/]*)", s)
    written = m.group(3) if m else ""
    unit = _unit(written.lower(), units, suffixes) if m else None
    if not m or unit is None:
        raise KvcalcError(
            _not_a(text, written if m else "", m.group(1) if m else "", noun, kind),
            option=what,
            value=text,
            form=OPTION,
        )
    # exactly: Decimal's default context keeps 28 significant digits and would round a longer
    # figure ('999999999999999999999TiB', a 30-digit byte count); scaleb and the product are
    # exact under a precision wider than the digits written plus the unit's
    with localcontext() as dec:
        dec.prec = len(m.group(1)) + 40
        dec.Emax, dec.Emin = 100_000, -100_000
        dec.traps[Overflow] = False  # a figure past 10^100,000 (100,002 digits) is Infinity: refused below
        number = Decimal(m.group(1)).scaleb(int(m.group(2) or 0))
        exact = number * units[unit] if number <= MAX_QUANTITY else number
    if negative and exact != 0:
        raise KvcalcError(f"must be positive, got {text}", option=what, value=text, form=OPTION_SAYS)
    if exact > MAX_QUANTITY:  # before any int(): 1e9999 must not build a 9,999-digit number
        raise KvcalcError(f"'{text}' is beyond what kvcalc sizes (at most 10^21)", option=what, value=text, form=OPTION)
    count = _COUNTED[kind]
    guess = f"{m.group(1)}{_exp(m)}{hint_unit}"  # the figure as written, with the unit it surely meant
    if units[unit] == 1 and exact != exact.to_integral_value():  # no unit, or plain bytes: a count
        raise KvcalcError(
            f"'{text}' {'has no unit and ' if not written else ''}is not a whole number of {count}; "
            f"did you mean {guess}?",
            option=what,
            value=text,
            form=OPTION,
        )
    n = int(exact)  # floors a fraction of a byte under a prefixed unit
    if n == 0 and allow_zero and number == 0:
        return 0
    if n <= 0:
        raise KvcalcError(f"must be positive, got {text}", option=what, value=text, form=OPTION_SAYS)
    if not written and n < min_unitless:
        raise KvcalcError(
            f"'{text}' has no unit, so it would be {n:,} {count}; {_fix(m, n, guess, kind)}",
            option=what,
            value=text,
            form=OPTION,
        )
    return check_bound(what, n, option=what)  # type: ignore[return-value]


def _fix(m: re.Match, n: int, guess: str, kind: str) -> str:
    """The fix for a figure with no unit below the minimum: a small one lost its unit (`6` ->
    `6GiB`); a larger byte count may be meant as bytes (`1000000` -> `1000000B`)."""
    plain = f"{m.group(1)}{_exp(m)}B"
    if kind != "bytes":
        return f"did you mean {guess}?"
    if n < 1024:
        return f"did you mean {guess}? (write {plain} for bytes)"
    return f"write the unit ({plain} for bytes)"


#: what a plain figure of each kind counts, in messages
_COUNTED = {"bytes": "bytes", "bytes_per_s": "bytes/s", "flops_per_s": "FLOP/s"}


def _exp(m: re.Match) -> str:
    """The exponent part as written (`e9`), for a did-you-mean."""
    return f"e{m.group(2)}" if m.group(2) else ""


def _unit(written: str, units: dict[str, int], suffixes: tuple[str, ...]) -> str | None:
    """The key of `units` that `written` (lower case) names, with one of `suffixes` after it."""
    for suffix in suffixes:
        if written.endswith(suffix):
            base = written[: len(written) - len(suffix)]  # no suffix: the whole text
            if base in units:
                return base
    return None


def _not_a(text: object, written: str, number: str, noun: str, kind: str) -> str:
    """The message for text that is not a `noun`: a bare prefix (`24G`) gets a did-you-mean."""
    bare = written.lower()
    if kind == "bytes" and number and bare in ("k", "m", "g", "t", "p", "ki", "mi", "gi", "ti", "pi"):
        p = bare[0].upper()  # k, m, g, t, p -> KB / KiB, MB / MiB, ...
        return f"'{text}' is not a size; did you mean {number}{p}B or {number}{p}iB?"
    return f"'{text}' is not a {noun} (write {_EXAMPLES[kind]})"
