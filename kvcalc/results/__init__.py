"""The results every command returns: frozen pydantic v2 models, `extra="forbid"` (their JSON
keys are a public contract). Inputs live in `kvcalc.schema`; `calc/` and `engines/` fill these
in and `report/` formats them.

- `kv`: `KvEstimate` (a `KindBreakdown` per layer kind) for `kvcalc estimate`.
- `compare`: `CompareRow` (`kvcalc compare`).
- `serving`: `ServingEstimate` (`estimate --gpu`), `FitHint` (the smallest count that fits),
  `ServedEstimate` (the Python API's `estimate(..., gpu=...)`: the KV keys, the plan, the engine).
- `check`: `CheckRow` (`kvcalc check`).
- `engine`: `EngineResult`, `DeviceBuffer` (`kvcalc capacity`, `estimate --engine`).
- `plan`: `PlanLayout`, `PlanMiss`, `PlanResult` (`kvcalc plan`).

`from kvcalc.results import KvEstimate` imports only the module that defines it (module
`__getattr__`): a command builds the model classes it returns and no others, which keeps
`kvcalc estimate`'s start-up short.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from kvcalc.results.check import CheckRow
    from kvcalc.results.compare import CompareRow
    from kvcalc.results.engine import DeviceBuffer, EngineResult
    from kvcalc.results.kv import KindBreakdown, KvEstimate
    from kvcalc.results.offload import LoadRow, OffloadResult, OffloadTier, PrefixResult, TransferPair, TransferResult
    from kvcalc.results.plan import PlanLayout, PlanMiss, PlanResult
    from kvcalc.results.served import ServedEstimate
    from kvcalc.results.serving import FitHint, RequestEstimate, ServingEstimate
    from kvcalc.results.speculative import SpeculativeEstimate

#: result name -> the submodule that defines it
WHERE: dict[str, str] = {
    "KindBreakdown": "kv",
    "KvEstimate": "kv",
    "SpeculativeEstimate": "speculative",
    "CompareRow": "compare",
    "ServingEstimate": "serving",
    "FitHint": "serving",
    "ServedEstimate": "served",
    "RequestEstimate": "serving",
    "CheckRow": "check",
    "DeviceBuffer": "engine",
    "EngineResult": "engine",
    "PlanLayout": "plan",
    "PlanMiss": "plan",
    "PlanResult": "plan",
    "OffloadTier": "offload",
    "OffloadResult": "offload",
    "PrefixResult": "offload",
    "LoadRow": "offload",
    "TransferPair": "offload",
    "TransferResult": "offload",
}

__all__ = [
    "CheckRow",
    "CompareRow",
    "DeviceBuffer",
    "EngineResult",
    "FitHint",
    "KindBreakdown",
    "KvEstimate",
    "LoadRow",
    "OffloadResult",
    "OffloadTier",
    "PlanLayout",
    "PlanMiss",
    "PlanResult",
    "PrefixResult",
    "RequestEstimate",
    "ServedEstimate",
    "ServingEstimate",
    "SpeculativeEstimate",
    "TransferPair",
    "TransferResult",
]  # = sorted(WHERE)


def __getattr__(name: str) -> object:
    if name in WHERE:
        value = getattr(importlib.import_module(f"kvcalc.results.{WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'kvcalc.results' has no attribute {name!r}")
