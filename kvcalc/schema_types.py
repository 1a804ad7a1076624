"""The field types and the base model of `kvcalc.schema` and `kvcalc.schema_deploy`: strict,
bounded counts and quantities, token counts that may be written `32k`, and `_Frozen`, the one base
of every model (frozen, `extra="forbid"`, built on first use). Import them from `kvcalc.schema`.

Annotations are objects, not text (no `from __future__ import annotations`), as in `kvcalc.schema`.
"""

from collections.abc import Callable
from typing import Annotated, Any, Optional

from annotated_types import Gt, Le  # pydantic's own constraint types (a dependency of pydantic)
from pydantic import BaseModel, BeforeValidator, ConfigDict, Strict, WithJsonSchema
from pydantic_core import core_schema as cs

from kvcalc.errors import KvcalcError
from kvcalc.units import parse_count


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built on first use: a command pays only for the models it validates


class CoreSchema:
    """A field type's pydantic-core schema, given ready-made: as an `Annotated` item it answers
    pydantic's `__get_pydantic_core_schema__` with `make()` without generating the type's schema
    from its annotation and constraints. The same validation, errors and JSON Schema as the
    annotation it stands for (`Annotated[int, Strict(), Gt(0), Le(2**40)] | None` is
    `cs.nullable_schema(cs.int_schema(strict=True, gt=0, le=2**40))`; a test compares the two),
    at about a third of the cost: `ModelSpec` has some fifty such fields and is built at every
    start-up that reads a model. `make` builds a new schema each time: pydantic may annotate
    the dict it gets."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], cs.CoreSchema]) -> None:
        self.make = make

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> cs.CoreSchema:
        return self.make()

    def __repr__(self) -> str:
        return f"CoreSchema({self.make()!r})"


def _int(*, ge: int | None = None, gt: int | None = None, le: int | None = None, optional: bool = False) -> Any:
    """A strict int field type bounded by `ge` / `gt` and `le`; `optional`: or None."""
    def base() -> Any:
        return cs.int_schema(strict=True, ge=ge, gt=gt, le=le)

    if optional:
        return Annotated[Optional[int], CoreSchema(lambda: cs.nullable_schema(base()))]
    return Annotated[int, CoreSchema(base)]


#: a config count: a whole number > 0, strictly an int (a YAML `true`, `32.0` or `"8"` is refused)
#: and bounded so no typo can make the arithmetic hang or overflow. As
#: `Annotated[int, Strict(), Gt(0), Le(2**40)]`, its schema given ready-made (`CoreSchema`).
Count = _int(gt=0, le=2**40)
#: a count, or None (not given)
OptCount = _int(gt=0, le=2**40, optional=True)
#: a layer count, bounded lower: the engine walks the layer list.
LayerCount = _int(gt=0, le=100_000)
#: a count that may be 0.
Count0 = _int(ge=0, le=2**40)
#: a large quantity in base units (parameters, bytes, bytes/s, FLOP/s), strictly an int.
Quantity = _int(gt=0, le=10**21)
OptQuantity = _int(gt=0, le=10**21, optional=True)
Quantity0 = _int(ge=0, le=10**21)
#: a strict int >= 0, unbounded (a checkpoint's byte counts, read from its headers)
Int0 = _int(ge=0)
#: a list of such ints (one per layer)
Int0List = Annotated[list[int], CoreSchema(lambda: cs.list_schema(cs.int_schema(strict=True, ge=0)))]
#: an int > 0 (lax: pydantic's `PositiveInt`, `Field(gt=0)`)
PositiveInt = Annotated[int, CoreSchema(lambda: cs.int_schema(gt=0))]
#: an int, or None (lax)
OptInt = Annotated[Optional[int], CoreSchema(lambda: cs.nullable_schema(cs.int_schema()))]
#: text, or None
OptStr = Annotated[Optional[str], CoreSchema(lambda: cs.nullable_schema(cs.str_schema()))]
#: a list of text, or None
OptStrList = Annotated[Optional[list[str]], CoreSchema(lambda: cs.nullable_schema(cs.list_schema(cs.str_schema())))]
#: true or false, strictly a bool (a YAML `1` or `"yes"` is refused): pydantic's `StrictBool`
StrictBool = Annotated[bool, CoreSchema(lambda: cs.bool_schema(strict=True))]


def _tokens(value: object) -> object:
    """A token count written as on the command line (`32k` = 32,768, `8,192`); ints and
    anything else go on to the strict int check unchanged (a YAML `true` or `32.5` is refused)."""
    if isinstance(value, str):
        try:
            return parse_count(value, None)
        except KvcalcError as e:  # -> pydantic ValueError: the loader names the file, line and field
            raise ValueError(e.message) from None
    return value


#: a token count that may be written `32k` (deployment `max_seq_len`, model `max_position_embeddings`)
_TOKENS_SCHEMA = WithJsonSchema({"anyOf": [{"type": "integer", "exclusiveMinimum": 0},
                                           {"type": "string", "pattern": r"^[0-9][0-9_,]*[kKmM]?$"}]})
Tokens = Annotated[int, BeforeValidator(_tokens), Strict(), Gt(0), Le(2**40), _TOKENS_SCHEMA]
