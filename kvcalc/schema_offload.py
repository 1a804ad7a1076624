"""`OffloadSpec`: a deployment's tier below the GPU (`offload:` in a deployment file, checked by
`kvcalc check` through `kvcalc.offload_request.check_offload`).

Each size is written as the engine's own flag takes it, in the engine's unit: vLLM
`kv_offloading_size` and LMCache sizes in GiB, SGLang `hicache_size` in GB (a value written with
the other unit is refused with the figure to write instead, `engines.offload_rules.engine_number`).
`host_memory` is a size with its unit (`2TB`, `1.5TiB`), per node.
"""

from typing import Annotated, Literal

from pydantic import Field

from kvcalc.schema_deploy import ContextTokens, MemoryBytes
from kvcalc.schema_types import _Frozen

#: a size as the engine's flag takes it: 1600, 37.5 or '1600GiB' (its own unit)
EngineSize = int | float | str


class OffloadSpec(_Frozen):
    """The engine's offload flags and the host that holds them.

    - `engine`: vllm or sglang (the engine that serves the deployment).
    - vLLM: `kv_offloading_size` (GiB, all ranks of one engine together),
      `kv_offloading_backend` (native, lmcache), `blocks_per_chunk`; LMCache:
      `lmcache_cpu_size` (GiB per TP worker) or `lmcache_l1_size` (GiB, one server per node).
    - SGLang: `hicache_ratio`, `hicache_size` (GB per rank), `hicache_host_memory_fraction`.
    - `host_memory` per node, `gpus_per_node`; `shared_prefix`: tokens every session shares.
    """

    engine: Literal["vllm", "sglang"]
    kv_offloading_size: EngineSize | None = None
    kv_offloading_backend: Literal["native", "lmcache"] = "native"
    blocks_per_chunk: Annotated[int, Field(strict=True, gt=0, le=1 << 20)] = 1
    lmcache_cpu_size: EngineSize | None = None
    lmcache_l1_size: EngineSize | None = None
    hicache_ratio: Annotated[float, Field(strict=True, gt=0, le=1e6, allow_inf_nan=False)] | None = None
    hicache_size: EngineSize | None = None
    hicache_host_memory_fraction: Annotated[float, Field(strict=True, gt=0, le=1, allow_inf_nan=False)] | None = None
    host_memory: MemoryBytes | None = None
    gpus_per_node: Annotated[int, Field(strict=True, gt=0, le=1024)] = 8
    shared_prefix: ContextTokens | None = None
