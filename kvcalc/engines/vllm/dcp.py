"""vLLM 0.33's decode context parallel (`--decode-context-parallel-size D`, `-dcp D`) in its KV
cache sizing: which layouts vLLM accepts, and how a request's blocks are counted.

What vLLM 0.33.0 does (the wheel's Python code; held against it by `tests/oracle/vllm_grid.py`):

- The D ranks of a DCP group are D of the tp ranks ("DCP reuses the TP ranks when PCP is
  disabled"): `vllm/config/parallel.py` `ParallelConfig` raises "tp_size={tp} must be divisible
  by dcp_size={dcp}." unless tp % D == 0.
- Each rank's pages are those of its tp rank (KV heads max(1, H_kv // tp), MLA's one latent), and
  its memory gives num_blocks as without DCP. A request of max_model_len L needs, in a
  `dcp_sharded` group (`AttentionSpec.dcp_sharded = True`: full attention and MLA, so DSA's
  indexer keys too), cdiv(cdiv(L, D), block_size) blocks on each rank
  (`v1/kv_cache_interface.py` `FullAttentionSpec.max_memory_usage_bytes`). That count drives
  the start-up check, the estimated maximum length, the maximum concurrency and "GPU KV cache
  size" (int(concurrency x L): the tokens the whole DCP group holds). Mamba state is not sharded.
- GQA / MQA models (`vllm/config/model.py` `ModelConfig.verify_with_parallel_config`): tp must
  exceed the model's KV heads; D at most tp // H_kv; the query heads per KV head divisible by D.
  MLA models take any D dividing tp.
- Sliding-window groups: `v1/core/single_type_kv_cache_manager.py` `SlidingWindowManager`
  asserts "DCP not support sliding window attn now." on the first prefix-cache lookup; kvcalc
  refuses them (as `calc/parallel.check_layout` does).

- The attention backend must support DCP (`AttentionBackend.validate_configuration`: "DCP not
  supported"; each impl's `supports_dcp`): TRITON_ATTN and TURBOQUANT do not, so
  `int4/int8/fp8_per_token_head` and the TurboQuant presets are refused under DCP; on Hopper's
  sparse MLA FLASH_ATTN_MLA_SPARSE and FLASHINFER_MLA_SPARSE_SM90 do not, so DeepSeek-V3.2 takes
  auto / bfloat16 (then on FLASHMLA_SPARSE, the same 16-bit pages) and fp8 / fp8_ds_mla, not
  float16 or fp8_e4m3 (vLLM's selection, run by `tests/oracle/vllm_grid.py`).

Not modelled (refused, naming why): DCP on vLLM 0.11 / 0.6, hybrid Mamba / linear-attention
models, DeepSeek-V4's compressed caches.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.schema import ModelSpec

_T = TypeVar("_T")

DCP_VERSION = "0.33"


def _refuse(message: str, dcp: int) -> KvcalcError:
    return KvcalcError(message, field="dcp", value=dcp, form=MESSAGE)


#: what vLLM 0.33's CUDA backends that support DCP take (`supports_dcp`; vllm_grid oracle)
DCP_MHA_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4", "nvfp4_4over6")
DCP_SPARSE_MLA_HOPPER_DTYPES = ("auto", "bfloat16", "fp8", "fp8_ds_mla")


def check_dcp(
    model: ModelSpec,
    tp: int,
    dcp: int,
    version: str,
    cache_dtype: str | None = None,
    compute_capability: str | None = None,
) -> None:
    """Refuse a decode context parallel layout vLLM refuses, with vLLM 0.33's text, or one kvcalc
    does not model; `cache_dtype`: the `--kv-cache-dtype` given (vLLM's name; None: auto), whose
    backend must support DCP. `dcp` 1: nothing to check. Raises `KvcalcError` (field `dcp`)."""
    if dcp == 1:
        return
    if dcp < 1:
        raise _refuse(f"dcp must be a positive integer, got {dcp}", dcp)
    if version != DCP_VERSION:
        raise _refuse(
            f"vLLM {version}: kvcalc models decode context parallel (dcp {dcp}) for vLLM {DCP_VERSION} only",
            dcp,
        )
    if tp % dcp:  # vllm/config/parallel.py ParallelConfig (pcp == 1)
        raise _refuse(f"vLLM {version} refuses: tp_size={tp} must be divisible by dcp_size={dcp}.", dcp)
    kinds = {layer.kind for layer in model.layers}
    if kinds & {"mamba", "linear"}:
        raise _refuse(
            f"{model.name}: decode context parallel beside Mamba / linear-attention state is not modelled "
            f"by kvcalc's vLLM {version} profile",
            dcp,
        )
    if any(layer.compress_ratio for layer in model.layers):
        raise _refuse(
            f"{model.name}: decode context parallel over compressed caches is not modelled by kvcalc's "
            f"vLLM {version} profile",
            dcp,
        )
    if "sliding" in kinds:
        raise _refuse(
            f'{model.name} has sliding-window layers: vLLM {version} asserts "DCP not support sliding '
            'window attn now." (v1/core/single_type_kv_cache_manager.py SlidingWindowManager)',
            dcp,
        )
    name = cache_dtype or "auto"
    sparse = any(layer.index_dim for layer in model.layers)
    hopper = (compute_capability or "9.0").split(".")[0] == "9"
    if "mla" not in kinds and name not in DCP_MHA_DTYPES:
        raise _refuse(
            f"vLLM {version} refuses --kv-cache-dtype {name} with decode context parallel: its backend "
            f"(TRITON_ATTN / TURBOQUANT) does not support DCP; under DCP it takes {', '.join(DCP_MHA_DTYPES)}",
            dcp,
        )
    if sparse and hopper and name not in DCP_SPARSE_MLA_HOPPER_DTYPES:
        raise _refuse(
            f"vLLM {version} refuses --kv-cache-dtype {name} for sparse MLA with decode context parallel "
            "on Hopper: FLASH_ATTN_MLA_SPARSE and FLASHINFER_MLA_SPARSE_SM90 do not support DCP; it takes "
            f"{', '.join(DCP_SPARSE_MLA_HOPPER_DTYPES)} (FLASHMLA_SPARSE)",
            dcp,
        )
    if "mla" in kinds:
        return
    kv_heads = model.resolved_n_kv_heads
    if tp <= kv_heads:  # vllm/config/model.py verify_with_parallel_config
        raise _refuse(
            f"vLLM {version} refuses: Decode context parallelism for GQA/MQA requires "
            f"`--tensor-parallel-size` ({tp}) to be greater than the model's total number of KV heads "
            f"({kv_heads}). Increase `--tensor-parallel-size` or set `--decode-context-parallel-size 1`.",
            dcp,
        )
    max_dcp = tp // kv_heads
    if dcp > max_dcp:
        raise _refuse(
            f"vLLM {version} refuses: `--decode-context-parallel-size` ({dcp}) exceeds the maximum "
            f"supported value ({max_dcp}) for `--tensor-parallel-size` ({tp}) and {kv_heads} model KV heads.",
            dcp,
        )
    q_per_kv = model.n_heads // kv_heads
    if q_per_kv % dcp:
        raise _refuse(
            f"vLLM {version} refuses: The model's number of query heads per KV head ({q_per_kv}) must be "
            f"divisible by `--decode-context-parallel-size` ({dcp}) for GQA/MQA.",
            dcp,
        )


def with_dcp(items: list[_T], dcp: int) -> list[_T]:
    """`items` (`common.Group`s or `planning.LayerCache`s) with their `dcp` set, so that a request's
    pages count cdiv(L, dcp) tokens in the full / MLA ones (`common.pages_per_request`,
    `planning.LayerCache.max_memory_usage_pages`); the same list when dcp is 1."""
    if dcp == 1:
        return items
    return [replace(x, dcp=dcp) for x in items]  # type: ignore[type-var]


def dcp_note(dcp: int, max_model_len: int, block_size: int, blocks_per_request: int) -> str:
    """The per-request limit vLLM 0.33 derives under DCP, in words: each rank holds cdiv(L, dcp)
    tokens of a request; the request's block table counts blocks of block_size x dcp tokens
    (`AttentionSpec.max_num_blocks_per_req`: cdiv(L, block_size x dcp)); `blocks_per_request`
    is what one request takes from a rank's pool. DeepSeek-V3 tp 8 dcp 8, L 32,768, block 64:
    4,096 tokens a rank, 64 blocks."""
    return (
        f"decode context parallel {dcp} (-dcp): a request of {max_model_len:,} tokens holds "
        f"{-(-max_model_len // dcp):,} on each rank, {blocks_per_request:,} blocks of {block_size} "
        f"({block_size * dcp} tokens a block across the {dcp} ranks)"
    )
