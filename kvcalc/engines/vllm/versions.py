"""The vLLM releases kvcalc models: one line each in `VERSION_MODULES`, and `rules(version)`.

Dropping an old release is deleting its module and its line here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from kvcalc.engines import defaults
from kvcalc.errors import KvcalcError

if TYPE_CHECKING:
    from kvcalc.engines.vllm.base import VllmRules

#: `--vllm-version` value -> the module of that release's rules (each has `RULES`, a `VllmRules`).
VERSION_MODULES: dict[str, str] = {
    "0.6": "kvcalc.engines.vllm.v0_6",
    "0.11": "kvcalc.engines.vllm.v0_11",
    "0.33": "kvcalc.engines.vllm.v0_33",
}
#: the versions modelled, by `--vllm-version` value: V0 of 0.6.x, V1 of 0.11, V1 of 0.33.
VERSIONS = tuple(VERSION_MODULES)
#: the current vLLM release: what `VllmOptions` (the CLI, `kvcalc.capacity`) models by default.
CURRENT_VERSION = defaults.VLLM_VERSION
VERSION = "vLLM 0.33 (V1 engine) by default; vLLM 0.11 (V1) and 0.6.x (V0) with --vllm-version"

#: version as given -> its rules object, once loaded (`rules` is called per plan layout)
_LOADED: dict[str, VllmRules] = {}


def check_version(version: str) -> str:
    """`version` as one of `VERSIONS` ('0.33.0' and 'v0.11' are accepted); raises `KvcalcError`
    (field `vllm_version`) for any other."""
    text = str(version).strip().lower().removeprefix("v")
    for known in VERSIONS:
        if text == known or text.startswith(known + "."):
            return known
    raise KvcalcError(
        f"kvcalc models vLLM {', '.join(VERSIONS)} (0.6: the V0 engine)", field="vllm_version", value=version
    )


def rules(version: str = CURRENT_VERSION) -> VllmRules:
    """The rules object of vLLM `version` (checked by `check_version`)."""
    found = _LOADED.get(version)
    if found is None:
        found = _LOADED[version] = importlib.import_module(VERSION_MODULES[check_version(version)]).RULES
    return found
