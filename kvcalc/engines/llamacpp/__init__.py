"""llama.cpp's KV cache: cells, streams, the SWA cache, the per-device split, recurrent state, the
tool's slot defaults, the refusals, and its log lines, per llama.cpp version.

| module | holds |
| --- | --- |
| `current` | llama.cpp as it is now (commit 0c1e570, b7000+ rules): its own rules |
| `legacy` | the "KV self size" era (commit 7841fc7, 2024 to spring 2025) |
| `base` | `LlamacppRules`, the interface each version implements, and the allocation they share |
| `common` | rows, cells, padding, the device split, recurrent state sizes, the checks |
| `options` | `LlamacppOptions`, the one typed options object |
| `versions` | the registry (`VERSION_MODULES`), `check_version`, `rules(version)` |

The version is chosen once, from `LlamacppOptions.version`: `allocate`, `capacity` and
`largest_ctx_size` hand the options to `rules(version)`. An old version is dropped by deleting
its module and its line in `VERSION_MODULES`.
"""

from __future__ import annotations

from kvcalc.engines.llamacpp.base import check_tool_and_flash_attn
from kvcalc.engines.llamacpp.common import (
    DEFAULT_N_BATCH,
    DEFAULT_N_UBATCH,
    DEFAULT_TOOL,
    FLASH_ATTN,
    GGML_NAMES,
    MLA_CACHES,
    N_CTX_PAD,
    QUANTIZED,
    SWA_FULL_REF,
    TOOLS,
    Context,
    check_tensor_split,
    default_kv_dtype,
    device_of_layers,
    expanded_mla_layer,
    f32,
    ggml_name,
    layer_k_v_bytes_per_cell,
    mib_f32,
    n_ctx_train,
    pad,
    recurrent_r_s_values,
)
from kvcalc.engines.llamacpp.current import CURRENT_COMMIT
from kvcalc.engines.llamacpp.options import LlamacppOptions
from kvcalc.engines.llamacpp.versions import CURRENT_VERSION, VERSION_MODULES, VERSIONS, check_version, rules
from kvcalc.formats import StorageFormat
from kvcalc.results import EngineResult
from kvcalc.schema import ModelSpec

__all__ = [
    "CURRENT_VERSION",
    "Context",
    "DEFAULT_N_BATCH",
    "DEFAULT_N_UBATCH",
    "DEFAULT_TOOL",
    "FLASH_ATTN",
    "GGML_NAMES",
    "LlamacppOptions",
    "MLA_CACHES",
    "N_CTX_PAD",
    "QUANTIZED",
    "SWA_FULL_REF",
    "TOOLS",
    "VERSION",
    "VERSIONS",
    "VERSION_MODULES",
    "allocate",
    "capacity",
    "check_tensor_split",
    "check_version",
    "default_kv_dtype",
    "device_of_layers",
    "expanded_mla_layer",
    "f32",
    "ggml_name",
    "largest_ctx_size",
    "layer_k_v_bytes_per_cell",
    "mib_f32",
    "n_ctx_train",
    "pad",
    "recurrent_r_s_values",
    "rules",
]

VERSION = (
    f"llama.cpp {CURRENT_COMMIT} (Oct 2026, as llama-cpp-python 0.3.36 vendors it; b7000+ rules; current) "
    "and the 2024-spring 2025 'KV self size' era (legacy)"
)


def _rules(o: LlamacppOptions):
    """The rules of `o.version`; an unknown version is refused after the tool and `-fa` value
    (the order llama.cpp's options are checked in)."""
    if o.version not in VERSION_MODULES:
        check_tool_and_flash_attn(o.tool, o.flash_attn)
    return rules(o.version)


def allocate(
    model: ModelSpec,
    n_ctx: int,
    k: StorageFormat,
    v: StorageFormat,
    *,
    max_model_len: int | None = None,
    concurrency: int | None = None,
    kv_memory_bytes: int | None = None,
    options: LlamacppOptions | None = None,
) -> EngineResult:
    """What llama.cpp allocates for `--ctx-size n_ctx` (0: the model's training context; ollama:
    n_ctx per sequence), with the lines it logs; `options` (None: `LlamacppOptions()`) pick the
    version and the flags (`options.n_ctx` is not read here). `parallel`, `unified`, `swa_full`
    and `flash_attn` left None take the tool's defaults (`LlamacppRules.resolve_context`);
    `n_batch` caps `n_ubatch`. `engine_kv_bytes` is the KV cache; `engine_state_bytes` the
    recurrent state of mamba / linear layers (current). Raises `KvcalcError` for bad options, KV
    types llama.cpp lacks and combinations it refuses (`check_refusals`), with the option's field
    (`n_ctx`, `parallel`, `n_gpu_layers`, `k_dtype`, `v_dtype`, ...)."""
    o = options or LlamacppOptions()
    return _rules(o).allocate(
        model,
        n_ctx,
        k,
        v,
        options=o,
        max_model_len=max_model_len,
        concurrency=concurrency,
        kv_memory_bytes=kv_memory_bytes,
    )


def largest_ctx_size(
    model: ModelSpec,
    kv_memory_bytes: int,
    k: StorageFormat,
    v: StorageFormat,
    *,
    options: LlamacppOptions | None = None,
) -> int:
    """The largest `--ctx-size` (a multiple of 256, ollama: per sequence) whose cache and
    recurrent state fit in `kv_memory_bytes` (summed over devices); 0 when not even 256 cells fit."""
    o = options or LlamacppOptions()
    return _rules(o).largest_ctx_size(model, kv_memory_bytes, k, v, options=o)


def capacity(
    model: ModelSpec,
    kv_memory_bytes: int,
    k: StorageFormat,
    v: StorageFormat,
    *,
    max_model_len: int | None = None,
    concurrency: int | None = None,
    options: LlamacppOptions | None = None,
) -> EngineResult:
    """The largest `--ctx-size` (`largest_ctx_size`) and what llama.cpp allocates for it.
    Raises `KvcalcError` when not even 256 cells fit."""
    o = options or LlamacppOptions()
    return _rules(o).capacity(
        model, kv_memory_bytes, k, v, options=o, max_model_len=max_model_len, concurrency=concurrency
    )
