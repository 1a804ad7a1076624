"""JSON values as kvcalc reads and writes them (config files, the machine output formats): one
alias in place of `Any` wherever a value is whatever a JSON / YAML document may hold."""

from __future__ import annotations

from typing import Union

#: a leaf of a JSON document
JsonScalar = Union[str, int, float, bool, None]
#: any JSON value: a leaf, a list of values, an object of values
JsonValue = Union[JsonScalar, list["JsonValue"], dict[str, "JsonValue"]]
#: a JSON object (a config.json, a YAML mapping, one result as the machine formats print it)
JsonObject = dict[str, JsonValue]
