"""The field types and the base model of `kvcalc.schema` and `kvcalc.schema_deploy`: strict,
bounded counts and quantities, token counts that may be written `32k`, and `_Frozen`, the one base
of every model (frozen, `extra="forbid"`, built on first use). Import them from `kvcalc.schema`.

Annotations are objects, not text (no `from __future__ import annotations`), as in `kvcalc.schema`.
"""

from typing import Annotated, Optional

from annotated_types import Ge, Gt, Le  # pydantic's own constraint types (a dependency of pydantic)
from pydantic import BaseModel, BeforeValidator, ConfigDict, Strict, WithJsonSchema

from kvcalc.errors import KvcalcError
from kvcalc.units import parse_count


class _Frozen(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", defer_build=True
    )  # built on first use: a command pays only for the models it validates


#: a config count: a whole number > 0, strictly an int (a YAML `true`, `32.0` or `"8"` is refused)
#: and bounded so no typo can make the arithmetic hang or overflow.
Count = Annotated[int, Strict(), Gt(0), Le(2**40)]
#: a count, or None (not given)
OptCount = Optional[Count]
#: a layer count, bounded lower: the engine walks the layer list.
LayerCount = Annotated[int, Strict(), Gt(0), Le(100_000)]
#: a count that may be 0.
Count0 = Annotated[int, Strict(), Ge(0), Le(2**40)]
#: a large quantity in base units (parameters, bytes, bytes/s, FLOP/s), strictly an int.
Quantity = Annotated[int, Strict(), Gt(0), Le(10**21)]
OptQuantity = Optional[Quantity]
Quantity0 = Annotated[int, Strict(), Ge(0), Le(10**21)]
#: a strict int >= 0, unbounded (a checkpoint's byte counts, read from its headers)
Int0 = Annotated[int, Strict(), Ge(0)]
#: a list of such ints (one per layer)
Int0List = list[Int0]
#: an int > 0 (lax: pydantic's `PositiveInt`)
PositiveInt = Annotated[int, Gt(0)]
#: an int, or None (lax)
OptInt = Optional[int]
#: text, or None
OptStr = Optional[str]
#: a list of text, or None
OptStrList = Optional[list[str]]
#: true or false, strictly a bool (a YAML `1` or `"yes"` is refused): pydantic's `StrictBool`
StrictBool = Annotated[bool, Strict()]


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
_TOKENS_SCHEMA = WithJsonSchema(
    {"anyOf": [{"type": "integer", "exclusiveMinimum": 0}, {"type": "string", "pattern": r"^[0-9][0-9_,]*[kKmM]?$"}]}
)
Tokens = Annotated[int, BeforeValidator(_tokens), Strict(), Gt(0), Le(2**40), _TOKENS_SCHEMA]
