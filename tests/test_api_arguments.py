"""The Python API's arguments, checked in one place (`kvcalc.arguments`, trial item 4): every bad
type or value raises `KvcalcError` naming the argument (never a `TypeError`), a bool is not a
count, token counts take `'32k'` in every function, and the bounds and words are the CLI's.

Golden numbers: meta-llama/Llama-3.1-8B config.json (32 layers, 8 KV heads, head_dim 128,
bf16): 2 x 32 x 8 x 128 x 2 B = 131,072 B per token.
"""

from __future__ import annotations

import inspect
import math

import pytest
from typer.testing import CliRunner

import kvcalc
from kvcalc.arguments import ARGUMENTS, check_arguments
from kvcalc.cli import app
from kvcalc.errors import KvcalcError

M = "llama-3.1-8b"
GiB = 2**30


def refusal(fn, *args, **kwargs) -> KvcalcError:
    with pytest.raises(KvcalcError) as e:
        fn(*args, **kwargs)
    return e.value


def cli_error(*args: str) -> str:
    r = CliRunner().invoke(app, list(args))
    assert r.exit_code == 2, r.output
    return r.stderr.strip().removeprefix("error: ")


# ----- the cases the trial found ------------------------------------------------------------------


def test_batch_as_a_str_names_batch():
    e = refusal(kvcalc.estimate, M, batch="3")
    assert str(e) == "batch must be a whole number of sequences (an int), not str '3'"
    assert (e.field, e.value) == ("batch", "3")


def test_max_model_len_takes_32k_as_plan_and_estimate_take_seq_len():
    # the ideal engine: 1 GiB // 131,072 B per token = 8,192 tokens
    by_text = kvcalc.capacity(M, kv_memory_bytes=GiB, max_model_len="32k")
    by_int = kvcalc.capacity(M, kv_memory_bytes=GiB, max_model_len=32_768)
    assert by_text == by_int and by_text.kv_cache_tokens == GiB // 131_072 == 8192
    # estimate: 131,072 B x 32,768 tokens = 4,294,967,296 B
    assert (
        kvcalc.estimate(M, seq_len="32k").kv_cache_bytes
        == kvcalc.estimate(M, seq_len=32_768).kv_cache_bytes
        == 131_072 * 32_768
        == 4_294_967_296
    )


def test_seq_len_true_is_not_one_token():
    e = refusal(kvcalc.estimate, M, seq_len=True)
    assert str(e) == "seq_len must be a whole number of tokens (8192 or '32k'), not bool True"
    assert e.field == "seq_len"


@pytest.mark.parametrize(
    "fn, kwargs",
    [
        (kvcalc.estimate, dict(tp=True)),
        (kvcalc.estimate, dict(batch=False)),
        (kvcalc.estimate, dict(dp=True)),
        (kvcalc.capacity, dict(kv_memory_bytes=GiB, concurrency=True)),
        (kvcalc.capacity, dict(kv_memory_bytes=True)),
        (kvcalc.plan, dict(seq_len="1k", concurrency=True)),
        (kvcalc.plan, dict(seq_len="1k", max_tpot_ms=True)),
    ],
    ids=["tp", "batch", "dp", "concurrency", "kv_memory_bytes", "plan-concurrency", "target"],
)
def test_a_bool_is_never_a_number(fn, kwargs):
    name, value = next((k, v) for k, v in kwargs.items() if isinstance(v, bool))
    e = refusal(fn, M, **kwargs)
    assert str(e).startswith(f"{name} must be ") and str(e).endswith(f"not bool {value}"), str(e)


def test_kv_memory_zero_is_refused_as_the_cli_refuses_it():
    e = refusal(kvcalc.capacity, M, kv_memory_bytes=0)
    assert str(e) == "kv_memory_bytes must be positive, got 0"
    assert cli_error("capacity", M, "--kv-memory", "0") == "--kv-memory must be positive, got 0"
    assert str(refusal(kvcalc.capacity, M, kv_memory_bytes=-GiB)) == f"kv_memory_bytes must be positive, got {-GiB}"


# ----- the same bounds and words as the CLI, the argument named as written ---------------------------


@pytest.mark.parametrize(
    "name, fn, kwargs, cli",
    [
        ("batch", kvcalc.estimate, dict(batch=0), ["estimate", M, "--batch", "0"]),
        ("tp", kvcalc.estimate, dict(tp=0), ["estimate", M, "--tp", "0"]),
        ("seq_len", kvcalc.estimate, dict(seq_len=0), ["estimate", M, "--seq-len", "0"]),
        # MAX_SEQ_LEN = 2^30 tokens; 2^31 is past it
        ("seq_len", kvcalc.estimate, dict(seq_len=2**31), ["estimate", M, "--seq-len", str(2**31)]),
        # MAX_CONCURRENCY = 10,000,000 sequences
        ("batch", kvcalc.estimate, dict(batch=10_000_001), ["estimate", M, "--batch", "10000001"]),
        (
            "max_model_len",
            kvcalc.capacity,
            dict(kv_memory_bytes=GiB, max_model_len=2**31),
            ["capacity", M, "--kv-memory", "1GiB", "--max-model-len", str(2**31)],
        ),
        (
            "concurrency",
            kvcalc.capacity,
            dict(kv_memory_bytes=GiB, concurrency=0),
            ["capacity", M, "--kv-memory", "1GiB", "--concurrency", "0"],
        ),
        (
            "concurrency",
            kvcalc.plan,
            dict(seq_len="1k", concurrency=0),
            ["plan", M, "--seq-len", "1k", "--concurrency", "0"],
        ),
        # MAX_PLAN_GPUS = 1,024
        (
            "max_gpus",
            kvcalc.plan,
            dict(seq_len="1k", max_gpus=1025),
            ["plan", M, "--seq-len", "1k", "--max-gpus", "1025"],
        ),
    ],
    ids=[
        "batch-0",
        "tp-0",
        "seq_len-0",
        "seq_len-2^31",
        "batch-big",
        "max_model_len-2^31",
        "concurrency-0",
        "plan-concurrency-0",
        "max_gpus",
    ],
)
def test_api_bounds_are_the_clis(name, fn, kwargs, cli):
    e = refusal(fn, M, **kwargs)
    cli_line = cli_error(*cli)
    flag = "--" + name.replace("_", "-")
    # the same sentence, the flag replaced by the argument's name
    assert cli_line.startswith(flag + " ")
    assert str(e) == name + cli_line.removeprefix(flag), (str(e), cli_line)
    assert e.field == name


# ----- never a TypeError ---------------------------------------------------------------------------

#: values no argument takes: a bool (not a count, not a target), a negative float (not a count, a
#: size or a positive target), a list of an int (not a name list, a size or a count), an object
JUNK = [True, -1.5, [1], object()]

BASE = {
    kvcalc.estimate: {},
    kvcalc.capacity: {"kv_memory_bytes": GiB},
    kvcalc.plan: {"seq_len": "1k", "gpus": "h100-sxm", "max_gpus": 1},
}


@pytest.mark.parametrize("fn", list(BASE), ids=lambda f: f.__name__)
def test_every_argument_is_checked_in_one_place(fn):
    params = [p for p in inspect.signature(fn).parameters if p != "options"]
    assert set(params) <= set(ARGUMENTS), set(params) - set(ARGUMENTS)
    for name in params:
        for junk in JUNK:
            kwargs = {**BASE[fn], name: junk}
            model = kwargs.pop("model", M)
            with pytest.raises(KvcalcError) as e:  # a TypeError (or any other) fails the test
                fn(model, **kwargs)
            assert str(e.value).startswith(f"{name} must ") or str(e.value).startswith(f"{name}: "), (
                name,
                junk,
                str(e.value),
            )


def test_token_text_errors_name_the_argument_and_field():
    e = refusal(kvcalc.capacity, M, kv_memory_bytes=GiB, max_model_len="lots")
    assert str(e) == "max_model_len: 'lots' is not a positive whole number (e.g. 16, 8192 or 32k)"
    assert e.field == "max_model_len"
    e = refusal(kvcalc.capacity, M, kv_memory_bytes="6.5")
    assert str(e).startswith("kv_memory_bytes: '6.5' has no unit") and e.field == "kv_memory_bytes"


def test_targets_must_be_finite_and_positive():
    for bad in (0, -1, math.nan, math.inf):
        e = refusal(kvcalc.plan, M, seq_len="1k", gpus="h100-sxm", max_tpot_ms=bad)
        assert str(e) == f"max_tpot_ms must be a positive number, got {bad:g}"


def test_check_arguments_returns_what_the_builders_take():
    # '32k' = 32 x 1,024 tokens; '1GiB' = 2^30 B; a count, a name and None pass as given
    assert check_arguments(seq_len="32k", kv_memory_bytes="1GiB", batch=4, kv_dtype="fp8", tp=None) == {
        "seq_len": 32_768,
        "kv_memory_bytes": 2**30,
        "batch": 4,
        "kv_dtype": "fp8",
        "tp": None,
    }


def test_load_model_refuses_what_is_not_a_reference():
    assert str(refusal(kvcalc.load_model, 3)) == "model must be a model name, a path or a ModelSpec, not int 3"


@pytest.mark.parametrize("kwargs", [{"prefix_hit_rate": 0.5}, {"link": "pcie5-x16"}], ids=lambda k: next(iter(k)))
def test_prefix_and_link_without_offload_are_refused_not_ignored(kwargs):
    # They qualify the tier below the GPU (kvcalc.estimate's offload=); without it they would
    # change nothing, so the API refuses them by name, as the CLI refuses them without a tier.
    name = next(iter(kwargs))
    with pytest.raises(KvcalcError) as e:
        kvcalc.estimate("llama-3.1-8b", seq_len=1024, **kwargs)
    assert e.value.field == name
    assert "needs offload" in str(e.value)
