"""`kvcalc/units.py`: the one set of bounds (`bound_of`, `check_bound`) at each edge, with the
flag each refusal names and its field / value, and the strict size parser's messages (bare
prefixes, unitless figures, the 10^21 ceiling).

Bounds (units.py): MAX_CONCURRENCY = 10,000,000 sequences; MAX_GPUS = 100,000; MAX_PLAN_GPUS =
1,024; MAX_DEVICE_BYTES = 2^50 = 1,125,899,906,842,624 B; llama.cpp's int32 n_ctx: 2^31 - 1 =
2,147,483,647 (common/common.h `int32_t n_ctx`). MIN_UNITLESS_BYTES = 2^20.
"""

from __future__ import annotations

import pytest

from kvcalc.errors import KvcalcError
from kvcalc.units import BOUNDS, MAX_QUANTITY, bound_of, check_bound, parse_size


def refusal(fn, *args, **kwargs) -> KvcalcError:
    with pytest.raises(KvcalcError) as e:
        fn(*args, **kwargs)
    return e.value


# ----- bound_of -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, field",
    [
        ("dp", "dp"),
        ("--dp", "dp"),
        # a flag through errors.FIELDS: --ctx-size sets n_ctx, --ubatch-size n_ubatch, --gpus n_devices
        ("--ctx-size", "n_ctx"),
        ("--ubatch-size", "n_ubatch"),
        ("--gpus", "n_devices"),
        # a flag FIELDS does not know: the dashes dropped, the hyphens as underscores
        ("--max-gpus", "max_gpus"),
        ("--gpus-per-node", "gpus_per_node"),
        ("--why-not", "why_not"),
        # a parameter name: ctx_size is n_ctx
        ("ctx_size", "n_ctx"),
        ("kv_memory_bytes", "kv_memory_bytes"),
    ],
)
def test_bound_of(name, field):
    assert bound_of(name) == (field, BOUNDS[field])


@pytest.mark.parametrize("name", [None, "", "model", "--model", "-", "ctx-size-x"])
def test_no_bound(name):
    assert bound_of(name) is None
    # no bound: the value passes unchanged, whatever it is
    assert check_bound(name, -5) == -5


def test_none_passes():
    assert check_bound("batch", None) is None


# ----- check_bound at each edge ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name, low, high",
    [
        ("batch", 1, 10_000_000),
        ("--max-gpus", 1, 1024),
        ("n_ctx", 1, 2**31 - 1),
        ("kv_memory", 0, 2**50),
        ("why_not", 0, 1_000_000),
        ("n_gpu_layers", -1, 2**31 - 1),
        ("quant_group_size", 1, 2**20),
    ],
)
def test_both_ends_pass(name, low, high):
    assert check_bound(name, low) == low
    assert check_bound(name, high) == high


@pytest.mark.parametrize(
    "name, value, line, field",
    [
        ("batch", 0, "--batch must be a positive integer, got 0", "batch"),
        ("--batch", -3, "--batch must be a positive integer, got -3", "batch"),
        # low 0: "at least 0"
        ("kv_memory", -1, "--kv-memory must be at least 0, got -1", "kv_memory"),
        # a low bound with its own words
        ("why_not", -1, "--why-not must not be negative, got -1", "why_not"),
        ("n_gpu_layers", -2, "--n-gpu-layers must be -1 (all layers) or a count of layers, got -2", "n_gpu_layers"),
        # just past the high bound, with its reason and unit
        ("batch", 10_000_001, "--batch 10,000,001 is beyond what kvcalc sizes (at most 10,000,000 sequences)", "batch"),
        ("max_gpus", 1025, "--max-gpus 1,025 is beyond what plan searches (at most 1,024 GPUs)", "max_gpus"),
        (
            "gpus_per_node",
            100_001,
            "--gpus-per-node 100,001 is beyond what kvcalc sizes (at most 100,000 GPUs)",
            "gpus_per_node",
        ),
        (
            "--kv-memory",
            2**50 + 1,
            "--kv-memory 1,125,899,906,842,625 is beyond any device's memory (at most 1,125,899,906,842,624 B (1 PiB))",
            "kv_memory_bytes",
        ),
        (
            "ctx_size",
            2**31,
            "--ctx-size 2,147,483,648 is beyond llama.cpp's 32-bit int n_ctx (common_params.n_ctx is "
            "an int32_t: llama.cpp refuses -c past 2^31 - 1) (at most 2,147,483,647 tokens)",
            "n_ctx",
        ),
        (
            "n_ubatch",
            2**31,
            "--ubatch-size 2,147,483,648 is beyond llama.cpp's 32-bit int n_ubatch (at most 2,147,483,647 tokens)",
            "n_ubatch",
        ),
        (
            "quant_group_size",
            2**20 + 1,
            "--quant-group-size 1,048,577 is beyond any quantization group (at most 1,048,576 values)",
            "quant_group_size",
        ),
    ],
)
def test_refusals(name, value, line, field):
    e = refusal(check_bound, name, value)
    assert str(e) == line
    assert (e.field, e.value) == (field, value)
    assert e.option == line.split(" ")[0]


def test_option_given_names_the_refusal():
    e = refusal(check_bound, "steps", 10_001, option="--steps x")
    assert str(e) == "--steps x 10,001 is beyond what kvcalc sizes (at most 10,000 steps)"
    assert (e.field, e.option) == ("steps", "--steps x")
    e = refusal(check_bound, "steps", 0, option="steps:")
    assert str(e) == "steps: must be a positive integer, got 0"


# ----- parse_size's messages ------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, prefix",
    [
        ("24k", "K"),
        ("24K", "K"),
        ("24m", "M"),
        ("24g", "G"),
        ("24t", "T"),
        ("24ki", "K"),
        ("24Mi", "M"),
        ("24gi", "G"),
        ("24TI", "T"),
        ("6.5 G", "G"),
    ],
)
def test_bare_prefix_did_you_mean(text, prefix):
    number = text.rstrip("kKmMgGtTiI ")
    e = refusal(parse_size, text, "--kv-memory")
    assert str(e) == f"--kv-memory: '{text}' is not a size; did you mean {number}{prefix}B or {number}{prefix}iB?"
    assert (e.field, e.value) == ("kv_memory_bytes", text)


def test_bare_prefix_only_for_sizes():
    # a rate has no binary units: the plain message
    assert str(refusal(parse_size, "24G", "--bw", kind="bytes_per_s")) == (
        "--bw: '24G' is not a rate (write 3.35TB/s, 768GB/s or 768e9)"
    )
    # a bare prefix with no number, and an unknown unit
    assert str(refusal(parse_size, "G", None)) == "'G' is not a size (write 80GB, 6.51GiB or a byte count)"
    assert str(refusal(parse_size, "24x", None)) == "'24x' is not a size (write 80GB, 6.51GiB or a byte count)"
    assert str(refusal(parse_size, "24kx", None)) == "'24kx' is not a size (write 80GB, 6.51GiB or a byte count)"


def test_unitless_fix_at_1024():
    # under 1,024 a unit was surely left off: did you mean GiB; from 1,024 it may be meant as bytes
    assert str(refusal(parse_size, "1023", None)) == (
        "'1023' has no unit, so it would be 1,023 bytes; did you mean 1023GiB? (write 1023B for bytes)"
    )
    assert str(refusal(parse_size, "1024", None)) == (
        "'1024' has no unit, so it would be 1,024 bytes; write the unit (1024B for bytes)"
    )
    assert str(refusal(parse_size, "1025", None)) == (
        "'1025' has no unit, so it would be 1,025 bytes; write the unit (1025B for bytes)"
    )
    # a rate: always the did-you-mean
    assert str(refusal(parse_size, "2000", None, kind="bytes_per_s", hint_unit="GB/s")) == (
        "'2000' has no unit, so it would be 2,000 bytes/s; did you mean 2000GB/s?"
    )


def test_non_text_refused_as_data():
    e = refusal(parse_size, True, "--kv-memory")
    assert str(e) == "--kv-memory: true is not a size (write 80GB, 6.51GiB or a byte count)"
    assert (e.option, e.value) == ("--kv-memory", True)
    e = refusal(parse_size, [1], "--kv-memory")
    assert str(e) == "--kv-memory: [1] is not a size (write 80GB, 6.51GiB or a byte count)"


def test_the_ceiling():
    # exactly 10^21 passes (no unit, or plain bytes); one unit step above is refused
    assert parse_size("1e21") == MAX_QUANTITY == 10**21
    assert parse_size("1000000000000000000000B") == 10**21
    e = refusal(parse_size, "1e21KB", "--peak")
    assert str(e) == "--peak: '1e21KB' is beyond what kvcalc sizes (at most 10^21)"
    assert e.value == "1e21KB"
    # 10^21 + 1 B
    assert str(refusal(parse_size, "1000000000000000000001", None)) == (
        "'1000000000000000000001' is beyond what kvcalc sizes (at most 10^21)"
    )
    # 10^18 KB = 10^21 B: at the ceiling
    assert parse_size("1e18KB") == 10**21


def test_parse_size_checks_the_bound_of_its_flag():
    # 2^50 B passes --kv-memory; 2^50 + 1 does not (units.MAX_DEVICE_BYTES)
    assert parse_size("1024TiB", "--kv-memory") == 2**50  # 2^10 x 2^40
    e = refusal(parse_size, "1125899906842625B", "--kv-memory")
    assert str(e) == (
        "--kv-memory 1,125,899,906,842,625 is beyond any device's memory (at most 1,125,899,906,842,624 B (1 PiB))"
    )


def test_a_flag_errors_do_not_know_keeps_its_name():
    # --max-gpus is not in errors.OPTIONS: the flag as given names the refusal
    assert str(refusal(check_bound, "--max-gpus", 1025)) == (
        "--max-gpus 1,025 is beyond what plan searches (at most 1,024 GPUs)"
    )
    assert str(refusal(check_bound, "--top", 0)) == "--top must be a positive integer, got 0"


def test_parse_count_checks_its_bound():
    # 1025m tokens = 1,025 x 2^20 = 1,074,790,400 > MAX_SEQ_LEN = 2^30 = 1,073,741,824
    from kvcalc.units import parse_count

    assert parse_count("1024m") == 2**30
    e = refusal(parse_count, "1025m", "--seq-len")
    assert str(e) == "--seq-len 1,074,790,400 is beyond what kvcalc sizes (at most 1,073,741,824 tokens)"
    # 10,000,001 sequences > MAX_CONCURRENCY
    assert str(refusal(parse_count, "10000001", "--batch")) == (
        "--batch 10,000,001 is beyond what kvcalc sizes (at most 10,000,000 sequences)"
    )


def test_parse_size_shows_what_is_not_text():
    # YAML's null is shown as Python writes it (repr), a YAML bool lower-case
    assert str(refusal(parse_size, None, "--kv-memory")) == (
        "--kv-memory: None is not a size (write 80GB, 6.51GiB or a byte count)"
    )
    assert str(refusal(parse_size, False, None)) == "false is not a size (write 80GB, 6.51GiB or a byte count)"


def test_commas_only_group_thousands():
    e = refusal(parse_size, "1,5GiB", "--kv-memory")
    assert str(e) == "--kv-memory: '1,5GiB' is not a size (commas may only group thousands: 1,048,576)"
    assert (e.field, e.value) == ("kv_memory_bytes", "1,5GiB")


@pytest.mark.parametrize("text", ["9" * 100_002, "9" * 100_010 + "e9999", "9" * 99_995 + "TiB"])
def test_a_figure_past_the_decimal_range_is_refused(text):
    # 100,002 digits pass Decimal's Emax (10^100,000) used by parse_size: it was a decimal.Overflow
    # traceback; now Infinity, past 10^21 like any figure that large. 99,995 nines x 2^40 passes it
    # only in the product.
    e = refusal(parse_size, text, "--kv-memory")
    assert str(e) == f"--kv-memory: '{text}' is beyond what kvcalc sizes (at most 10^21)"
