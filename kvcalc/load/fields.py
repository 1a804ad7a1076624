"""`ModelFields`: a model's fields as the loaders gather them (`kvcalc.load.hf` from a
config.json, `kvcalc.load.gguf` from a GGUF header), before `ModelSpec` validates them."""

from __future__ import annotations

from typing import Any

#: the keyword arguments of `ModelSpec` a loader gathers, one key per field it read. Any: each
#: field has its own type (counts, flags, lists of kinds, the checkpoint), and `ModelSpec` checks
#: every one once, at the boundary; a TypedDict would refuse the families' `f.update(k=v, ...)`
ModelFields = dict[str, Any]
