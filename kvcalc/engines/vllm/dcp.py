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

- Hybrid Mamba / linear-attention models: the attention groups are sharded, the state is kept
  whole on each rank (`check_dcp_model` quotes vLLM's code). DeepSeek-V4 is refused, as vLLM
  refuses it: its sliding-window specs assert at start-up.

Not modelled (refused, naming why): DCP on vLLM 0.11 / 0.6.
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
    _check_version(dcp, version)
    if tp % dcp:  # vllm/config/parallel.py ParallelConfig (pcp == 1)
        raise _refuse(f"vLLM {version} refuses: tp_size={tp} must be divisible by dcp_size={dcp}.", dcp)
    check_dcp_model(model, dcp, version, cache_dtype, compute_capability)
    if "mla" in {layer.kind for layer in model.layers}:
        return
    _check_gqa(model, tp, dcp, version)


def _check_version(dcp: int, version: str) -> None:
    if version != DCP_VERSION:
        raise _refuse(
            f"vLLM {version}: kvcalc models decode context parallel (dcp {dcp}) for vLLM {DCP_VERSION} only",
            dcp,
        )


def check_dcp_model(
    model: ModelSpec,
    dcp: int,
    version: str,
    cache_dtype: str | None = None,
    compute_capability: str | None = None,
    *,
    any_gpu: bool = False,
) -> None:
    """The part of `check_dcp` no tp changes: the release, the model's layers, the KV dtype's
    backend (`any_gpu`: leave out what depends on the GPU, Hopper's sparse MLA backends). What
    vLLM 0.33.0 does with each kind of layer under DCP:

    - full attention, MLA, DSA's indexer keys: sharded by position (`AttentionSpec.dcp_sharded`);
    - Mamba / linear-attention state: accepted and kept whole on every rank. `MambaSpec` is not
      `dcp_sharded` ("Mamba state is replicated across DCP/PCP ranks, never sharded",
      `v1/kv_cache_interface.py` `MambaSpec.max_num_blocks_per_req`); the hybrid coordinator
      takes it ("DCP with hybrid KV cache layouts only supports full-attention, Mamba, and
      replicated draft groups", `v1/core/kv_cache_coordinator.py` `HybridKVCacheCoordinator`), its
      manager runs with dcp 1 (`SingleTypeKVCacheManager.__init__`: "dcp_world_size if
      kv_cache_spec.dcp_sharded else 1"), and the Mamba mixers have no attention impl for
      `check_attention_cp_compatibility` (`v1/worker/cp_utils.py`) to refuse. Their pages count as
      without DCP (`common.pages_per_request`, `planning.LayerCache`);
    - sliding window (DeepSeek-V4's SWA cache and compressor state are `SlidingWindowMLASpec`,
      `models/deepseek_v4/compressor.py`, `v1/attention/backends/mla/sparse_swa.py`): refused, as
      vLLM does at start-up (`SlidingWindowSpec.max_memory_usage_bytes` asserts "DCP not support
      sliding window.") and on its first prefix-cache lookup (`SlidingWindowManager`).

    Raises `KvcalcError` (field `dcp`)."""
    if dcp == 1:
        return
    _check_version(dcp, version)
    kinds = {layer.kind for layer in model.layers}
    if any(layer.compress_ratio for layer in model.layers):
        raise _refuse(
            f"{model.name} (DeepSeek-V4's compressed and sliding-window caches): vLLM {version} refuses decode "
            "context parallel: its sliding-window specs (SlidingWindowMLASpec, models/deepseek_v4/compressor.py) "
            'assert "DCP not support sliding window." when the cache is sized (vLLM 0.33.0 '
            "v1/kv_cache_interface.py SlidingWindowSpec.max_memory_usage_bytes)",
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
    hopper = not any_gpu and (compute_capability or "9.0").split(".")[0] == "9"
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


def _check_gqa(model: ModelSpec, tp: int, dcp: int, version: str) -> None:
    """vLLM's GQA / MQA rules under DCP (`vllm/config/model.py` verify_with_parallel_config)."""
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
