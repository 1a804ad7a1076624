"""`kvcalc.schema_types`: the field types of the config models take what a config may hold and
refuse the rest (strict ints: no YAML `true`, `32.0` or `"8"`; bounds on every count); and
`kvcalc.schema` hands out the deployment models that `kvcalc.schema_deploy` declares. (The
types were once given as hand-built pydantic-core schemas; they saved 0.7% of start-up
instructions and were removed, issue 23 item 4: docs/benchmarks.md.)"""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from kvcalc import schema_types as T

#: (type, values it takes, values it refuses)
CASES = [
    (T.Count, [1, 2**40], [0, -1, 2**40 + 1, True, 1.0, "8", None]),
    (T.OptCount, [None, 1, 2**40], [0, 2**40 + 1, True, 1.0, "8"]),
    (T.LayerCount, [1, 100_000], [0, 100_001, True, 1.0]),
    (T.Count0, [0, 2**40], [-1, 2**40 + 1, False, 0.0]),
    (T.Quantity, [1, 10**21], [0, 10**21 + 1, True, 1.5]),
    (T.OptQuantity, [None, 10**21], [0, 10**21 + 1]),
    (T.Quantity0, [0, 10**21], [-1, 10**21 + 1]),
    (T.Int0, [0, 10**30], [-1, True, "0"]),
    (T.Int0List, [[], [0, 1]], [[1, -1], ["a"], [True], None]),
    (T.OptStr, [None, "", "x"], [1, 1.5]),
    (T.OptStrList, [None, [], ["a"]], [["a", 2], "a"]),
    (T.StrictBool, [True, False], [1, 0, "true", None]),
    (T.PositiveInt, [1, "8", 2.0], [0, -1, "x"]),  # lax, as pydantic's PositiveInt
    (T.OptInt, [None, 0, -3], ["x", 1.5]),
]


@pytest.mark.parametrize("kind,good,bad", CASES, ids=[str(i) for i in range(len(CASES))])
def test_field_types_take_and_refuse(kind, good, bad):
    a = TypeAdapter(kind)
    for value in good:
        a.validate_python(value)
    for value in bad:
        with pytest.raises(ValidationError):
            a.validate_python(value)


def test_a_count_refuses_what_a_config_must_not_hold():
    count = TypeAdapter(T.Count)
    assert count.validate_python(8) == 8
    for bad in (0, True, 32.0, "8", 2**40 + 1):
        with pytest.raises(ValidationError):
            count.validate_python(bad)


def test_schema_hands_out_the_deployment_models():
    import kvcalc.schema as schema
    import kvcalc.schema_deploy as deploy

    for name in schema.DEPLOY_NAMES:
        assert getattr(schema, name) is getattr(deploy, name)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        schema.Nope  # noqa: B018
