"""vLLM's paged KV cache: blocks, pages, hybrid groups, and the lines vLLM logs, per release.

One module per vLLM release modelled, registered in `VERSION_MODULES` (`--vllm-version`):

| module | holds |
| --- | --- |
| `v0_33` (+ `v0_33_mla`) | vLLM 0.33, the current release (`CURRENT_VERSION`): its own rules |
| `v0_11` | vLLM 0.11 (V1, the 0.10-0.11 line): where it differs |
| `v0_6` | the V0 engine of vLLM 0.6.x: its own block arithmetic and refusals |
| `base` | `VllmRules`, the interface each release implements; `V1Rules`, the V1 arithmetic |
| `common` | pages, groups, blocks per request, checks: what every release shares |
| `hybrid` | hybrid Mamba / Gated-DeltaNet state pages and the unified block |
| `plan` | vLLM's blocks per GPU for `kvcalc plan` |
| `options` | `VllmOptions`, the one typed options object |
| `versions` | the registry (`VERSION_MODULES`), `check_version`, `rules(version)` |

The release is chosen once, from `VllmOptions.version`: `rules(version)` is its rules object,
and `capacity` / `memory_for` hand the options to it. An old release is dropped by deleting its
module and its line in `VERSION_MODULES`.

What changed between the versions modelled: 0.6 -> 0.11, the V1 engine (pages per layer, hybrid
groups, the null block, the concurrency formula over groups); 0.11 -> 0.33, the token figure from
the concurrency, the sliding-window admission cap with async scheduling's two batches in flight,
the null block and padding layers in the start-up check, Falcon's cache dtype, the longer
start-up messages (a link to the conserving-memory guide), the 1.5x group-size rule, prefix caching
on for hybrid models ('align' Mamba pages, fp32 SSM state for Nemotron-H and Qwen3.5), the
hybrid block alignment moved to the platform, chunked local attention kept in the hybrid allocator,
the attention backend chosen from a priority list with the block size taking part (an MLA
model's block no longer forced: 16 on Hopper, 32 on Blackwell).

Not modelled (refused with the reason): Mamba layers beside MLA or sliding layers,
attention-free Mamba models, linear attention other than Gated DeltaNet, hybrids in V0.
"""

from __future__ import annotations

from kvcalc.engines.vllm.common import (
    BLOCK_SIZES,
    DEFAULT_BLOCK_SIZE,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    NO_MEMORY,
    Group,
    blocks_per_request,
    check_formats,
    check_model,
    default_kv_dtype,
    page_size_bytes,
    pages_per_request,
    split_kv_dtype,
    vllm_cache_dtype,
)
from kvcalc.engines.vllm.options import VllmOptions
from kvcalc.engines.vllm.versions import CURRENT_VERSION, VERSION, VERSION_MODULES, VERSIONS, check_version, rules
from kvcalc.formats import StorageFormat
from kvcalc.results import EngineResult
from kvcalc.schema import ModelSpec

__all__ = [
    "BLOCK_SIZES",
    "CURRENT_VERSION",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "Group",
    "NO_MEMORY",
    "VERSION",
    "VERSIONS",
    "VERSION_MODULES",
    "VllmOptions",
    "blocks_per_request",
    "capacity",
    "check_formats",
    "check_model",
    "check_version",
    "default_kv_dtype",
    "memory_for",
    "page_size_bytes",
    "pages_per_request",
    "rules",
    "split_kv_dtype",
    "vllm_cache_dtype",
]


def capacity(
    model: ModelSpec,
    kv_memory_bytes: int,
    k: StorageFormat,
    v: StorageFormat,
    *,
    tp: int = 1,
    max_model_len: int | None = None,
    concurrency: int | None = None,
    kv_cache_dtype: str | None = None,
    options: VllmOptions | None = None,
) -> EngineResult:
    """vLLM's blocks, tokens and concurrency for `kv_memory_bytes` of KV memory on each rank.

    `options` (None: `VllmOptions()`, the current release) picks the release (`rules`) and
    its flags. V1: page = `page_size_bytes`; blocks = available // page // layers_per_group;
    concurrency = blocks / `blocks_per_request`; tokens as the version logs them. V0: block bytes
    = page x n_layers; blocks = available // block bytes; concurrency = blocks x block_size / L.
    `max_model_len` None: the model's context; `concurrency`: the requests the longest context is
    searched for; `kv_cache_dtype`: the dtype's label as given. Raises `KvcalcError` for TP
    layouts vLLM refuses, block sizes and formats, a model the release cannot load, a
    max_model_len past the model's limit, no memory, hybrids kvcalc does not model.
    """
    o = options or VllmOptions()
    return rules(o.version).capacity(
        model,
        kv_memory_bytes,
        k,
        v,
        tp=tp,
        max_model_len=max_model_len,
        concurrency=concurrency,
        kv_cache_dtype=kv_cache_dtype,
        options=o,
    )


def memory_for(
    model: ModelSpec,
    seq_len: int,
    batch: int,
    k: StorageFormat,
    v: StorageFormat,
    *,
    tp: int = 1,
    options: VllmOptions | None = None,
) -> int:
    """KV memory one rank needs so that vLLM starts and fits `batch` requests of `seq_len` tokens
    (max concurrency >= batch): blocks x page x layers per group, blocks = batch x blocks per
    request (V0: cdiv(seq_len, block_size) blocks of every layer). 0.33's start-up check holds
    back the null block, so one request needs its blocks + 1: max(batch x per request, per
    request + 1) blocks. `options` as in `capacity`."""
    o = options or VllmOptions()
    return rules(o.version).memory_for(model, seq_len, batch, k, v, tp=tp, options=o)
