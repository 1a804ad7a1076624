"""The llama.cpp versions kvcalc models: one line each in `VERSION_MODULES`, and `rules(version)`.

Dropping an old version is deleting its module and its line here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from kvcalc.errors import OPTION, KvcalcError

if TYPE_CHECKING:
    from kvcalc.engines.llamacpp.base import LlamacppRules

#: `--llamacpp-version` value -> the module of that version's rules (each has `RULES`, a `LlamacppRules`).
VERSION_MODULES: dict[str, str] = {
    "current": "kvcalc.engines.llamacpp.current",
    "legacy": "kvcalc.engines.llamacpp.legacy",
}
VERSIONS = tuple(VERSION_MODULES)
CURRENT_VERSION = "current"

#: version as given -> its rules object, once loaded (`rules` is called per plan layout)
_LOADED: dict[str, LlamacppRules] = {}


def check_version(version: str) -> str:
    """`version` when it is one of `VERSIONS`; raises `KvcalcError` (field `llamacpp_version`) otherwise."""
    if version not in VERSION_MODULES:
        raise KvcalcError(
            f"use one of {', '.join(VERSIONS)}, not '{version}'", field="llamacpp_version", value=version, form=OPTION
        )
    return version


def rules(version: str = CURRENT_VERSION) -> LlamacppRules:
    """The rules object of llama.cpp `version` (checked by `check_version`)."""
    found = _LOADED.get(version)
    if found is None:
        found = _LOADED[version] = importlib.import_module(VERSION_MODULES[check_version(version)]).RULES
    return found
