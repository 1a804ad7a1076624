"""`Record`: the base of kvcalc's small immutable records (the request records of
`kvcalc.requests`, `units.Bound`, `report.layout.Col`, `cli.lazy.LazyCommand`, `cli.options.Only`).

A record is a `typing.NamedTuple` in all that kvcalc uses: a tuple subclass with no instance
`__dict__`, its fields declared as annotated class attributes (those with a value are defaults and
come last), built from positional or keyword arguments, read by name or index, unpacked,
compared and hashed as a tuple, shown as `Name(field=value, ...)`, with `_fields`,
`_field_defaults`, `_make`, `_replace` and `_asdict`.

Why not `typing.NamedTuple`: declaring one compiles and evaluates a `__new__` for its fields
(`collections.namedtuple` builds it from source text) and, under `from __future__ import
annotations`, compiles each field's annotation text; `kvcalc estimate` declares eight of them at
every start-up (about 0.7-1 M instructions each). The metaclass here does neither: one generic
`__new__`, written once, serves every record.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, ClassVar, get_origin

try:  # CPython's fast field getter, the one collections.namedtuple uses
    from _collections import _tuplegetter
except ImportError:  # pragma: no cover - other interpreters
    def _tuplegetter(index: int, doc: str | None) -> Any:
        return property(itemgetter(index), doc=doc)


def _is_class_var(annotation: Any) -> bool:
    """True for `ClassVar[...]` (an object, or the text a postponed annotation leaves)."""
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar", "typing.ClassVar"))
    return annotation is ClassVar or get_origin(annotation) is ClassVar


class _RecordMeta(type):
    """Reads the fields from the class body's annotations: adds `__slots__ = ()`, moves each
    default into `_field_defaults` and puts a getter by index in its place."""

    def __new__(mcls, name: str, bases: tuple[type, ...], ns: dict[str, Any], **kwargs: Any) -> Any:
        if ns.get("_root"):  # `Record` itself
            return super().__new__(mcls, name, bases, ns, **kwargs)
        if any(isinstance(b, _RecordMeta) and b._fields for b in bases):
            raise TypeError(f"{name}: a record with fields cannot be subclassed")
        fields = tuple(n for n, a in ns.get("__annotations__", {}).items() if not _is_class_var(a))
        defaults: dict[str, Any] = {}
        for i, field in enumerate(fields):
            if field.startswith("_"):
                raise ValueError(f"{name}: field names cannot start with an underscore: {field!r}")
            if field in ns:
                defaults[field] = ns[field]
            elif defaults:
                raise TypeError(f"{name}: non-default field {field!r} cannot follow default field(s) "
                                f"{', '.join(defaults)}")
            ns[field] = _tuplegetter(i, f"Alias for field number {i}")
        ns["__slots__"] = ()
        ns["_fields"] = fields
        ns["_field_defaults"] = defaults
        ns["__match_args__"] = fields
        return super().__new__(mcls, name, bases, ns, **kwargs)


class Record(tuple, metaclass=_RecordMeta):
    """Base of a record: `class Name(Record):` with annotated fields (see the module's doc)."""

    __slots__ = ()
    _root = True
    _fields: ClassVar[tuple[str, ...]] = ()
    _field_defaults: ClassVar[dict[str, Any]] = {}

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        fields = cls._fields
        n = len(args)
        if n == len(fields) and not kwargs:
            return tuple.__new__(cls, args)
        if n > len(fields):
            raise TypeError(f"{cls.__name__}() takes {len(fields)} positional arguments but {n} were given")
        values = list(args)
        for field in fields[n:]:
            if field in kwargs:
                values.append(kwargs.pop(field))
            elif field in cls._field_defaults:
                values.append(cls._field_defaults[field])
            else:
                raise TypeError(f"{cls.__name__}() missing required argument: {field!r}")
        if kwargs:
            name = next(iter(kwargs))
            if name in fields:
                raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
            raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {name!r}")
        return tuple.__new__(cls, values)

    @classmethod
    def _make(cls, iterable: Any) -> Any:
        """A record from a sequence of all its values, in field order."""
        values = tuple(iterable)
        if len(values) != len(cls._fields):
            raise TypeError(f"Expected {len(cls._fields)} arguments, got {len(values)}")
        return tuple.__new__(cls, values)

    def _replace(self, **changes: Any) -> Any:
        """A copy with the named fields changed."""
        unknown = [k for k in changes if k not in self._fields]
        if unknown:
            raise ValueError(f"Got unexpected field names: {unknown!r}")
        return tuple.__new__(type(self), [changes.get(f, v) for f, v in zip(self._fields, self)])

    def _asdict(self) -> dict[str, Any]:
        """The fields as a dict, in order."""
        return dict(zip(self._fields, self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{f}={v!r}' for f, v in zip(self._fields, self))})"

    def __getnewargs__(self) -> tuple[Any, ...]:
        return tuple(self)
