"""`kvcalc.schema_types`: the field types whose pydantic-core schema is given ready-made
(`CoreSchema`) validate, refuse and describe (JSON Schema) exactly as the annotations they stand
for, which pydantic builds from the constraints; and `kvcalc.schema` hands out the deployment
models that `kvcalc.schema_deploy` declares."""

from __future__ import annotations

from typing import Annotated, Optional

import pytest
from annotated_types import Ge, Gt, Le
from pydantic import Field, Strict, TypeAdapter, ValidationError
from pydantic import StrictBool as PydanticStrictBool

from kvcalc import schema_types as T

#: (ready-made type, the annotation it stands for)
PAIRS = [
    (T.Count, Annotated[int, Strict(), Gt(0), Le(2**40)]),
    (T.OptCount, Optional[Annotated[int, Strict(), Gt(0), Le(2**40)]]),
    (T.LayerCount, Annotated[int, Strict(), Gt(0), Le(100_000)]),
    (T.Count0, Annotated[int, Strict(), Ge(0), Le(2**40)]),
    (T.Quantity, Annotated[int, Strict(), Gt(0), Le(10**21)]),
    (T.OptQuantity, Optional[Annotated[int, Strict(), Gt(0), Le(10**21)]]),
    (T.Quantity0, Annotated[int, Strict(), Ge(0), Le(10**21)]),
    (T.Int0, Annotated[int, Field(strict=True, ge=0)]),
    (T.Int0List, list[Annotated[int, Field(strict=True, ge=0)]]),
    (T.OptStr, Optional[str]),
    (T.OptStrList, Optional[list[str]]),
    (T.StrictBool, PydanticStrictBool),
    (T.PositiveInt, Annotated[int, Field(gt=0)]),
    (T.OptInt, Optional[int]),
]

#: inputs on both sides of every bound, of every type a YAML or JSON file holds
SAMPLES = [None, 0, 1, -1, 2**40, 2**40 + 1, 100_000, 100_001, 10**21, 10**21 + 1, True, False, 1.0, 32.5, "8",
           "x", "", [], [0, 1], [1, -1], ["a"], ["a", 2], {}, b"1"]


def _outcome(adapter: TypeAdapter, value: object) -> tuple:
    try:
        return ("ok", adapter.validate_python(value))
    except ValidationError as e:
        return ("error", [(err["type"], err["loc"], err["msg"]) for err in e.errors(include_url=False)])


@pytest.mark.parametrize("mine,theirs", PAIRS, ids=[repr(p[1])[:60] for p in PAIRS])
def test_ready_made_schema_is_the_annotations_own(mine, theirs):
    a, b = TypeAdapter(mine), TypeAdapter(theirs)
    assert a.json_schema() == b.json_schema()
    for value in SAMPLES:
        assert _outcome(a, value) == _outcome(b, value), value


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
