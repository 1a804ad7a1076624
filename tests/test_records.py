"""`kvcalc.records.Record` behaves as the `typing.NamedTuple` it replaces: each case is run on a
record and on the same NamedTuple, and the two must agree (a record also allows a `ClassVar`
annotation, which is no field; a NamedTuple refuses one)."""

import copy
import pickle
from typing import Any, ClassVar, NamedTuple

import pytest

from kvcalc.records import Record
from kvcalc.requests import EstimateRequest
from kvcalc.units import BOUNDS, Bound


class Rec(Record):
    """doc kept"""

    low: int
    high: int
    unit: str = "tokens"
    why: Any = None
    kind: ClassVar[str] = "not a field"

    def span(self) -> int:
        return self.high - self.low


class Tup(NamedTuple):
    low: int
    high: int
    unit: str = "tokens"
    why: Any = None

    def span(self) -> int:
        return self.high - self.low


@pytest.mark.parametrize("args, kwargs", [((1, 9), {}), ((1, 9, "B"), {}), ((1,), {"high": 9, "why": "x"}),
                                          ((), {"low": 1, "high": 9, "unit": "GPUs", "why": 3}), ((1, 9, "B", 4), {})])
def test_same_values_as_a_named_tuple(args, kwargs):
    r, t = Rec(*args, **kwargs), Tup(*args, **kwargs)
    assert tuple(r) == tuple(t) and r == t and hash(r) == hash(t)
    assert (r.low, r.high, r.unit, r.why) == (t.low, t.high, t.unit, t.why)
    assert r[1] == t[1] and r[-1] == t[-1] and len(r) == len(t) == 4
    assert repr(r) == repr(t).replace("Tup(", "Rec(")
    assert r._asdict() == t._asdict()
    assert r._replace(unit="GiB", low=0) == t._replace(unit="GiB", low=0)
    assert type(r._replace(low=0)) is Rec
    assert r.span() == t.span() == 8


def test_fields_defaults_and_class_attributes():
    assert Rec._fields == Tup._fields == ("low", "high", "unit", "why")
    assert Rec._field_defaults == Tup._field_defaults == {"unit": "tokens", "why": None}
    assert Rec.__match_args__ == Tup.__match_args__
    assert Rec.kind == "not a field" and Rec.__doc__ == "doc kept"
    assert Rec._make([1, 2, "B", None]) == Tup._make([1, 2, "B", None])
    match Rec(1, 9):
        case Rec(low, high):
            assert (low, high) == (1, 9)


def test_immutable_without_an_instance_dict():
    r = Rec(1, 9)
    with pytest.raises(AttributeError):
        r.low = 2
    with pytest.raises(AttributeError):
        r.other = 2
    assert not hasattr(r, "__dict__")


@pytest.mark.parametrize("call, words", [
    (lambda c: c(1), "missing required argument: 'high'"),
    (lambda c: c(1, 2, "B", None, 5), "takes 4 positional arguments but 5 were given"),
    (lambda c: c(1, 2, nope=3), "unexpected keyword argument 'nope'"),
    (lambda c: c(1, 2, low=3), "multiple values for argument 'low'"),
])
def test_wrong_arguments_raise_type_error(call, words):
    with pytest.raises(TypeError, match=words):
        call(Rec)
    with pytest.raises(TypeError):
        call(Tup)


def test_make_and_replace_refuse_wrong_fields():
    with pytest.raises(TypeError, match="Expected 4 arguments, got 2"):
        Rec._make([1, 2])
    with pytest.raises(ValueError, match="unexpected field names: \\['nope'\\]"):
        Rec(1, 2)._replace(nope=1)


def test_declaration_errors():
    with pytest.raises(TypeError, match="non-default field 'b' cannot follow default field"):
        class Bad(Record):
            a: int = 1
            b: int
    with pytest.raises(ValueError, match="underscore"):
        class Under(Record):
            _a: int
    with pytest.raises(TypeError, match="cannot be subclassed"):
        class Sub(Rec):
            extra: int = 0


def test_copy_and_pickle_keep_the_record():
    r = Rec(1, 9, "B", ("why", 2))
    for other in (copy.copy(r), copy.deepcopy(r), pickle.loads(pickle.dumps(r))):
        assert other == r and type(other) is Rec


def test_kvcalc_records_in_use():
    # Bound(1, MAX_SEQ_LEN, "tokens"): defaults filled from the class body
    b = BOUNDS["seq_len"]
    assert isinstance(b, Bound) and isinstance(b, tuple)
    assert (b.low, b.unit, b.why, b.low_words) == (1, "tokens", "beyond what kvcalc sizes", "")
    req = EstimateRequest(model="m", workload="w")
    assert req == ("m", "w", None, None, "ideal", None, True)
    assert req._replace(engine="vllm").engine == "vllm"
