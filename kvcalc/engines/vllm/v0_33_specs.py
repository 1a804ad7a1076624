"""vLLM 0.33's per-layer KV cache specs for the models whose layers do not share one page: the
2026 attention (issue 19), as vLLM 0.33.0's model classes build them on Hopper, and on Blackwell
(SM10x) where its backends differ (`SM10_FP8`: DeepSeek-V3.2 / GLM-5's fp8 cache on
FLASHINFER_MLA_SPARSE, GLM-5's fp8 default; DeepSeek-V4 keeps FlashMLA on both).

Each cached layer gives one or more `planning.LayerCache` rows (vLLM's `KVCacheSpec`s); the
groups, blocks and start-up check are `planning`'s. What each family's class builds (vLLM
0.33.0 files; docs/engine-rules-2026.md has the arithmetic):

- Per-layer geometry (Gemma-4 `gemma4.py` 365-587, MiMo-V2-Flash `mimo_v2.py` 219-440):
  full layers a `FullAttentionSpec`, sliding ones a `SlidingWindowSpec`, each with its own KV
  heads (max(1, heads // tp)) and K / V head sizes (`head_size_v`); block 16. A Gemma-4 K = V
  layer loads k_proj into both slots (K and V cached); a `num_kv_shared_layers` layer has no spec
  (`kv_sharing_target_layer_name`). MiMo's window is `sliding_window_size` (128): the spec's
  window, where transformers attends sliding_window_size + 1 tokens (kvcalc's layer window).
- Sparse MLA + DSA indexer (DeepSeek-V3.2 `deepseek_v32/attention.py` 50-230, GLM-5
  `glm_moe_dsa`): each layer's latent an `MLAAttentionSpec` of 576 values (bf16: 1,152 B;
  fp8 -> fp8_ds_mla: 656 B), each indexer layer's keys an `MLAAttentionSpec` of 132 B (128 fp8
  + one fp32 scale, `DeepseekV32IndexerCache`); block 64 (Hopper FLASH_ATTN_MLA_SPARSE for a
  16-bit cache, FLASHMLA_SPARSE for fp8: `vllm/platforms/cuda.py` `_get_backend_priorities`).
- DeepSeek-V4 (`deepseek_v4/attention.py` 280-420, 860-926; `compressor.py` 139-197,
  282-287; `v1/attention/backends/mla/sparse_swa.py` 76-150), FlashMLA on Hopper, whose
  fp8_ds_mla layout takes fp8 only (`_resolve_dsv4_kv_cache_dtype`, 94-129): 584 B an entry
  (448 fp8 NoPE + 128 bf16 RoPE + 8 scale), pages rounded up to 576 B. Every layer: its
  sliding-window latent (`SlidingWindowMLASpec`, block 64); a compressed layer (ratio r): its
  latent (`MLAAttentionSpec`, block 256, tokens_per_state r) and its compressor state
  (`CompressorStateCache`: 2 x coff x head_dim fp32, coff = 2 for r = 4 else 1, window coff x r,
  block 4 for r = 4, 8 for r = 128, aligned to 576 B); r = 4 adds the indexer's keys (132 B per
  entry, block 256, tokens_per_state 4) and its compressor state (2 x 2 x 128 fp32, window 8,
  block 4). The layout is BLHNC (block-outermost: the indexer backend declares it), so the
  groups are packed (`planning._packed_groups`).
"""

from __future__ import annotations

from kvcalc.calc.kv_cache import kv_heads_per_rank, layer_kv_bytes_per_token
from kvcalc.engines.vllm.planning import LayerCache
from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.formats import StorageFormat
from kvcalc.schema import ModelSpec

#: vLLM 0.33's default block size (`CacheConfig.DEFAULT_BLOCK_SIZE`) for the FlashAttention /
#: FlashInfer / Triton backends, which prefer it.
BLOCK_SIZE = 16
#: sparse MLA backends' block (`flashattn_mla_sparse.py`, `flashmla_sparse.py`: 64 tokens).
SPARSE_MLA_BLOCK_SIZE = 64
#: DeepSeek-V3.2's indexer key: 128 fp8 values + one fp32 scale per 128 (`DeepseekV32IndexerCache`).
INDEX_SCALE_VALUES = 128
SCALE_BYTES = 4
#: the fp8_ds_mla latent row of DeepSeek-V3.2 / GLM-5 (`mla_attention.py`): 512 + 4 x 4 + 64 x 2
FP8_DS_MLA_ROW_BYTES = 656
#: ... and the nvfp4_ds_mla row (`mla_attention.py` 1386, SM100's FLASHMLA_SPARSE only):
#: 512 / 2 B e2m1 NoPE + 512 / 16 x 1 B fp8 scales + 64 x 1 B fp8 RoPE = 256 + 32 + 64 = 352
NVFP4_DS_MLA_ROW_BYTES = 352
#: DeepSeek-V4's fp8_ds_mla entry (`deepseek_v4/attention.py`): 448 fp8 + 64 x 2 bf16 + 8 scale
DSV4_ENTRY_BYTES = 584
DSV4_ALIGNMENT = 576
DSV4_SWA_BLOCK = 64
DSV4_BLOCK = 256
FP32_BYTES = 4
#: vLLM cache dtypes the sparse MLA backends take on Hopper: 16-bit (FLASH_ATTN_MLA_SPARSE),
#: fp8 as fp8_ds_mla (FLASHMLA_SPARSE, `_canonicalize_sparse_mla_kv_cache_dtype`).
SPARSE_16BIT = ("auto", "bfloat16", "float16")
SPARSE_FP8 = ("fp8", "fp8_ds_mla")
#: ... and plain fp8 latent rows on FLASHINFER_MLA_SPARSE_SM90 (`flashinfer_mla_sparse_sm90.py`
#: `supported_kv_cache_dtypes` auto / bfloat16 / fp8 / fp8_e4m3, kernel blocks MultipleOf(64)),
#: which the priority order reaches for fp8_e4m3 only: FLASHMLA_SPARSE lists fp8 but not fp8_e4m3
#: (vLLM 0.33's selection, run by `tests/oracle/vllm_grid.py`: 64 x 576 B pages)
SPARSE_FP8_SM90 = ("fp8_e4m3",)
#: model types whose `linear` layers vLLM 0.33 runs as Kimi Delta Attention
#: (`vllm/models/kimi_k3/nvidia/kda.py`, `kimi_linear.py`)
KDA_MODEL_TYPES = frozenset({"kimi_linear", "kimi_k3"})
#: `Platform._align_hybrid_block_size` (`vllm/platforms/interface.py` 1054-1060): an MLA hybrid's
#: block is a multiple of 128 (TRTLLM / FlashInfer MLA decode kernels), which the KDA prefill
#: checkpoint alignment (16, `kda.py` 486-525) divides.
MLA_HYBRID_ALIGNMENT = 128
#: Mamba pages a KDA layer holds per request with prefix caching ('align'): 2 + one prefill
#: checkpoint block (`MambaSpec.max_memory_usage_bytes`, `kda.py` 901-909).
KDA_MAMBA_PAGES = 3
#: model types whose spec window is the config's `sliding_window_size`, one less than the
#: tokens transformers attends (kvcalc's layer window): vLLM 0.33 `mimo_v2.py` 318.
WINDOW_IS_SIZE_MODEL_TYPES = frozenset({"mimo_v2_flash", "mimo_v2"})


def is_deepseek_v4(model: ModelSpec) -> bool:
    """A DeepSeek-V4 model: compressed layers, or sliding layers whose V is their K."""
    return any(x.compress_ratio > 1 or (x.v_is_k and x.kind == "sliding") for x in model.layers)


def is_kda_mla(model: ModelSpec) -> bool:
    """Kimi-K3 / Kimi-Linear: KDA linear-attention layers beside MLA layers."""
    kinds = {x.kind for x in model.layers}
    return "mla" in kinds and "linear" in kinds and model.model_type in KDA_MODEL_TYPES


def is_sparse_mla(model: ModelSpec) -> bool:
    """MLA layers with a DSA indexer (DeepSeek-V3.2, GLM-5): vLLM's sparse MLA backends."""
    return any(x.kind == "mla" for x in model.layers) and any(x.index_dim for x in model.layers)


def needs_specs(model: ModelSpec) -> bool:
    """Whether vLLM 0.33 gives `model`'s layers pages that differ (the spec planner's models):
    DeepSeek-V4, sparse MLA + indexer, attention layers whose heads or head sizes differ, or
    layers that share another's cache."""
    attn = [x for x in model.layers if x.kind in ("full", "sliding") and x.kv_source is None]
    return (
        is_deepseek_v4(model)
        or is_sparse_mla(model)
        or is_kda_mla(model)
        or len({(x.n_kv_heads, x.head_dim_k, x.head_dim_v) for x in attn}) > 1
        or any(x.kv_source is not None for x in model.layers)
    )


def _refuse(model: ModelSpec, why: str, field: str = "kv_dtype", value: object = None) -> KvcalcError:
    return KvcalcError(f"{model.name}: {why}", field=field, value=value, form=MESSAGE)


def dsv4_refusal(cache_dtype: str) -> str:
    """vLLM 0.33.0's refusal of a DeepSeek-V4 (`DeepseekV4ForCausalLM`) cache dtype that is not
    auto or fp8*, verbatim (`models/deepseek_v4/attention.py` 94-129 `_resolve_dsv4_kv_cache_dtype`,
    raised from `DeepseekV4Attention.__init__` 345), and where it comes from. The attention
    class `nvidia/model.py` `_select_dsv4_attn_cls` (537-569) picks without an
    `--attention-backend` is FlashMLA (`DeepseekV4FlashMLAAttention`) on SM90 and SM100 and
    FlashInfer's SM120 class on SM120, both `use_fp8_ds_mla_layout = True`, so every CUDA GPU
    refuses. This covers `nvfp4_ds_mla`: DeepSeek-V4-Flash's class never reads it; the NVFP4
    compressed records it names are `DeepseekV41ForCausalLM`'s (`models/deepseek_v41/attention.py`
    523-536, `sparse_mla.py` 281-289), a model kvcalc does not size."""
    return (
        f"vLLM 0.33 refuses it: DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got "
        f"{cache_dtype}. Please set `--kv-cache-dtype fp8` or select a backend that supports "
        "bfloat16 KV cache. (vLLM 0.33.0 models/deepseek_v4/attention.py "
        "`_resolve_dsv4_kv_cache_dtype`: DeepseekV4ForCausalLM's attention on SM90 / SM100 "
        "(FlashMLA) and SM120 keeps the fp8_ds_mla layout; it takes auto, fp8, fp8_e4m3, "
        "fp8_e5m2, fp8_ds_mla)"
    )


def deepseek_v4_specs(model: ModelSpec, cache_dtype: str) -> tuple[list[LayerCache], list[str]]:
    """(specs, config log lines) of a DeepSeek-V4 model (module docstring). `cache_dtype`:
    vLLM's `--kv-cache-dtype` name; auto and fp8* become fp8_ds_mla ("Using DeepSeek's
    fp8_ds_mla KV cache format."), anything else is refused with vLLM's text."""
    if cache_dtype not in ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla"):
        raise _refuse(model, dsv4_refusal(cache_dtype), value=cache_dtype)
    specs: list[LayerCache] = []
    for x in model.layers:
        if not x.caches_kv:
            continue
        specs.append(
            LayerCache(
                "SlidingWindowMLASpec",
                DSV4_SWA_BLOCK,
                DSV4_ENTRY_BYTES,
                cache="swa_cache",
                window=x.window,
                alignment=DSV4_ALIGNMENT,
            )
        )
        r = x.compress_ratio
        if r <= 1:
            continue
        if r not in (4, 128):
            raise _refuse(
                model,
                f"vLLM 0.33's DeepSeek-V4 compressor takes compress ratios 4 and 128, not {r}",
                field="model",
                value=model.name,
            )
        coff = 2 if r == 4 else 1
        head = x.compressed_dim or x.head_dim_k
        specs.append(
            LayerCache("MLAAttentionSpec", DSV4_BLOCK, DSV4_ENTRY_BYTES, tokens_per_state=r, alignment=DSV4_ALIGNMENT)
        )
        specs.append(
            LayerCache(
                "SlidingWindowMLASpec",
                4 if r == 4 else 8,
                2 * coff * head * FP32_BYTES,
                cache="state_cache",
                window=coff * r,
                alignment=DSV4_ALIGNMENT,
            )
        )
        if r == 4 and x.index_dim:
            idx = x.index_dim
            specs.append(
                LayerCache(
                    "MLAAttentionSpec",
                    DSV4_BLOCK,
                    idx + idx // INDEX_SCALE_VALUES * SCALE_BYTES,
                    cache="k_cache",
                    tokens_per_state=r,
                    alignment=DSV4_ALIGNMENT,
                )
            )
            specs.append(
                LayerCache(
                    "SlidingWindowMLASpec",
                    4,
                    2 * 2 * idx * FP32_BYTES,
                    cache="state_cache",
                    window=2 * r,
                    alignment=DSV4_ALIGNMENT,
                )
            )
    return specs, ["Using DeepSeek's fp8_ds_mla KV cache format."]


#: Blackwell (SM10x): vLLM 0.33.0 `vllm/platforms/cuda.py` `_get_backend_priorities` (use_mla,
#: major 10): a quantized cache tries FLASHINFER_MLA_SPARSE then FLASHMLA_SPARSE; a 16-bit one
#: FLASH_ATTN_MLA_SPARSE_FA4 first when the rank has 16 query heads or fewer, else FLASHMLA_SPARSE.
#: FLASHINFER_MLA_SPARSE (`flashinfer_mla_sparse.py` FlashInferMLASparseTRTLLMBackend) takes auto,
#: float16, bfloat16, fp8, fp8_e4m3, not fp8_ds_mla ("SM10 does not support fp8_ds_mla"), and only
#: qk_nope_head_dim 128 or 192: its fp8 rows are plain fp8, 576 B a token. Its kernel block is a
#: multiple of 32 and the indexer's (`indexer.py` DeepseekV32IndexerBackend) is 64: the block every
#: backend takes is lcm(32, 64) = 64 (`Platform._preferred_block_size_for_backends`).
SM10_FP8 = ("fp8", "fp8_e4m3")
FLASHINFER_SPARSE_NOPE = (128, 192)
FA4_MAX_HEADS = 16
#: FLASH_ATTN_MLA_SPARSE_FA4 (`flashattn_mla_sparse.py` 275-343): cache dtypes auto / bfloat16 only
#: (float16 falls to FLASHINFER_MLA_SPARSE: FLASHMLA_SPARSE does not list it either), and the
#: gathered query heads (a rank's heads x dcp) in (8, 16, 32, 64, 128), without 128 under DCP
FA4_CACHE_DTYPES = ("auto", "bfloat16")
FA4_HEADS = (8, 16, 32, 64, 128)
FA4_HEADS_DCP = (8, 16, 32, 64)


def sm10_16bit_backend(model: ModelSpec, cache_dtype: str, *, tp: int, dcp: int = 1) -> str:
    """The sparse MLA backend vLLM 0.33.0 picks on SM10x for a 16-bit cache (`cache_dtype` auto,
    bfloat16 or float16), each row 2 B a value, block 64 whichever (`platforms/cuda.py` 97-121:
    FA4, FLASHINFER_MLA_SPARSE, FLASHMLA_SPARSE when a rank has <= 16 query heads, else
    FLASHMLA_SPARSE, FLASHINFER_MLA_SPARSE; each backend's `supported_kv_cache_dtypes` and
    `supports_combination`). Raises `KvcalcError` (field `kv_dtype`) where none takes it."""
    heads = model.n_heads // tp
    flashinfer = (model.qk_nope_head_dim or 0) in FLASHINFER_SPARSE_NOPE
    fa4 = (
        cache_dtype in FA4_CACHE_DTYPES
        and (model.kv_lora_rank, model.qk_rope_head_dim) == (512, 64)
        and heads * dcp in (FA4_HEADS_DCP if dcp > 1 else FA4_HEADS)
    )
    flashmla = cache_dtype in FA4_CACHE_DTYPES
    order = (
        [("FLASH_ATTN_MLA_SPARSE_FA4", fa4), ("FLASHINFER_MLA_SPARSE", flashinfer), ("FLASHMLA_SPARSE", flashmla)]
        if heads <= FA4_MAX_HEADS
        else [("FLASHMLA_SPARSE", flashmla), ("FLASHINFER_MLA_SPARSE", flashinfer)]
    )
    for name, ok in order:
        if ok:
            return name
    raise _refuse(
        model,
        f"vLLM 0.33's sparse MLA backends on Blackwell take {cache_dtype} only on FLASHINFER_MLA_SPARSE "
        f"(qk_nope_head_dim 128 or 192, this model {model.qk_nope_head_dim})",
        value=cache_dtype,
    )


def cc_major(compute_capability: str | None) -> int:
    """The major of a compute capability ('10.0' -> 10); None: Hopper's 9 (kvcalc's assumption
    without --gpu, `common.ASSUMED_COMPUTE_CAPABILITY`)."""
    return int(str(compute_capability or "9.0").split(".")[0])


def sparse_mla_specs(
    model: ModelSpec, k: StorageFormat, cache_dtype: str, *, major: int = 9, tp: int = 1, dcp: int = 1
) -> tuple[list[LayerCache], str]:
    """(specs, note) of DeepSeek-V3.2 / GLM-5 (module docstring): per MLA layer its latent, per
    indexer layer its keys, block 64. `major`: the GPU's compute capability major (9 Hopper, 10
    Blackwell: `SM10_FP8`'s rules); `tp` gives the query heads a rank has (FA4's limit). Raises
    `KvcalcError` (field `kv_dtype`) for a dtype no sparse backend takes, and for a GPU whose
    sparse backends kvcalc does not model (SM12x: FLASHINFER_MLA_SPARSE_SM120)."""
    arch = {9: "Hopper", 10: "Blackwell"}.get(major)
    if arch is None:
        raise _refuse(
            model,
            f"vLLM 0.33's sparse MLA backend on compute capability {major}.x (FLASHINFER_MLA_SPARSE_SM120 on "
            "SM12x) is not modelled by kvcalc; its Hopper (9.x) and Blackwell (10.x) rules are",
            field="gpu",
            value=major,
        )
    if major == 10 and cache_dtype in SM10_FP8 and (model.qk_nope_head_dim or 0) in FLASHINFER_SPARSE_NOPE:
        backend = f"FLASHINFER_MLA_SPARSE (fp8 rows of {k.bytes_for(576):,} B a token)"
        latent = None
    elif major == 10 and cache_dtype in SPARSE_16BIT:
        backend = (
            sm10_16bit_backend(model, cache_dtype, tp=tp, dcp=dcp)
            + f" ({k.name} rows of {k.bytes_for(576):,} B a token)"
        )
        latent = None
    elif major == 10 and cache_dtype == "nvfp4_ds_mla":
        # quantized: FLASHINFER_MLA_SPARSE first, which does not list it; FLASHMLA_SPARSE keeps the
        # name (`_canonicalize_sparse_mla_kv_cache_dtype`, mla_attention.py 359-368), kernel block
        # 64 on SM100 (`flashmla_sparse.py` 158-165)
        backend = f"FLASHMLA_SPARSE (nvfp4_ds_mla, {NVFP4_DS_MLA_ROW_BYTES} B a token)"
        latent = NVFP4_DS_MLA_ROW_BYTES
    elif cache_dtype in SPARSE_16BIT:
        # FLASH_ATTN_MLA_SPARSE "does not support DCP for now" (`flashattn_mla_sparse.py` 108-111):
        # under DCP the next in line, FLASHMLA_SPARSE (auto / bfloat16; float16 is refused by DCP's check)
        backend = (
            "FLASHMLA_SPARSE" if dcp > 1 else "FLASH_ATTN_MLA_SPARSE"
        ) + f" ({k.name} rows of {k.bytes_for(576):,} B a token)"
        latent = None
    elif cache_dtype in SPARSE_FP8:
        backend = "FLASHMLA_SPARSE (fp8 stored as fp8_ds_mla, 656 B a token)"
        latent = FP8_DS_MLA_ROW_BYTES
    elif major == 9 and cache_dtype in SPARSE_FP8_SM90:
        backend = "FLASHINFER_MLA_SPARSE_SM90 (plain fp8 latent, 1 B a value)"
        latent = None
    elif major == 10:
        raise _refuse(
            model,
            f"vLLM 0.33's sparse MLA backends on Blackwell take {', '.join(SPARSE_16BIT)}, "
            f"{', '.join(SM10_FP8)} (FLASHINFER_MLA_SPARSE, qk_nope_head_dim 128 or 192), "
            f"{', '.join(SPARSE_FP8)} and nvfp4_ds_mla (FLASHMLA_SPARSE), not {cache_dtype}",
            value=cache_dtype,
        )
    else:
        raise _refuse(
            model,
            f"vLLM 0.33's sparse MLA backends on Hopper take {', '.join(SPARSE_16BIT)} "
            f"(FLASH_ATTN_MLA_SPARSE), {', '.join(SPARSE_FP8)} (FLASHMLA_SPARSE) and "
            f"{', '.join(SPARSE_FP8_SM90)} (FLASHINFER_MLA_SPARSE_SM90), not {cache_dtype}",
            value=cache_dtype,
        )
    specs = []
    for x in model.layers:
        if not x.caches_kv:
            continue
        row = latent if latent is not None else layer_kv_bytes_per_token(x.model_copy(update={"index_dim": 0}), k, k)
        specs.append(LayerCache("MLAAttentionSpec", SPARSE_MLA_BLOCK_SIZE, row, tag=cache_dtype))
        if x.index_dim:
            idx = x.index_dim
            specs.append(
                LayerCache(
                    "MLAAttentionSpec",
                    SPARSE_MLA_BLOCK_SIZE,
                    idx + idx // INDEX_SCALE_VALUES * SCALE_BYTES,
                    cache="k_cache",
                )
            )
    return specs, f"sparse MLA attention backend {backend} on {arch} sets block size {SPARSE_MLA_BLOCK_SIZE}"


def attention_specs(
    model: ModelSpec, k: StorageFormat, v: StorageFormat, *, tp: int, block_size: int | None
) -> list[LayerCache]:
    """Full and sliding layers with their own heads and head sizes (module docstring); layers
    that read another layer's cache (`kv_source`) have none."""
    offset = 1 if model.model_type in WINDOW_IS_SIZE_MODEL_TYPES else 0
    specs = []
    for x in model.layers:
        if not x.caches_kv:
            continue
        if x.kind not in ("full", "sliding"):
            raise _refuse(
                model,
                f"the vLLM 0.33 profile does not size {x.kind} layers beside per-layer geometry",
                field="model",
                value=model.name,
            )
        entry = layer_kv_bytes_per_token(x, k, v, tp)
        if x.kind == "sliding":
            specs.append(
                LayerCache("SlidingWindowSpec", block_size or BLOCK_SIZE, entry, window=(x.window or 0) - offset)
            )
        else:
            specs.append(LayerCache("FullAttentionSpec", block_size or BLOCK_SIZE, entry))
    return specs


def kda_mla_specs(model: ModelSpec, k: StorageFormat, *, tp: int) -> tuple[list[LayerCache], int, list[str], str]:
    """(specs, block size, log lines, note) of Kimi-K3: 24 dense MLA layers (Hopper
    FLASH_ATTN_MLA for a 16-bit cache, FlashMLA for fp8: 1,152 / 576 B a token) beside KDA
    layers whose state (`hybrid.mamba_state`: conv (kernel - 1) x 3 x heads x head_dim / tp in
    the model's dtype, recurrent heads / tp x 128 x 128 fp32, `kda.py` 571-591) fills one
    `MambaSpec` page. The block: 128 x cdiv(state, 128 x token page)
    (`Platform._align_hybrid_block_size`); every page is block x token page, the state padded to
    it; a KDA layer holds `KDA_MAMBA_PAGES` pages per request.

    Kimi-K3, bf16, tp 1: state 3 x 36,864 x 2 + 96 x 128 x 128 x 4 = 6,512,640 B; block 128 x
    cdiv(6,512,640, 147,456) = 5,760 tokens; page 5,760 x 1,152 = 6,635,520 B."""
    from kvcalc.engines.vllm import hybrid

    mla = next(x for x in model.layers if x.kind == "mla")
    token_page = layer_kv_bytes_per_token(mla, k, k, tp)
    state = hybrid.mamba_state(model, tp, 2, "bf16", ssm_fp32=True, kda=True)
    align = MLA_HYBRID_ALIGNMENT
    block = align * -(-state.page_size_bytes // (align * token_page))
    page = block * token_page
    specs = []
    for x in model.layers:
        if x.kind == "mla":
            specs.append(LayerCache("MLAAttentionSpec", block, token_page))
        elif x.kind == "linear":
            specs.append(
                LayerCache("MambaSpec", block, state.page_size_bytes, page_padded=page, mamba_pages=KDA_MAMBA_PAGES)
            )
    lines = [
        f"Setting attention block size to {block} tokens to ensure that attention page size is >= mamba page size."
    ]
    if page != state.page_size_bytes:
        pad = 100 * (page - state.page_size_bytes) / state.page_size_bytes
        lines.append(
            f"Padding mamba page size by {pad:.2f}% to ensure that mamba page size and attention page size "
            "are exactly equal."
        )
    note = (
        f"KDA state per layer and request: conv state bf16, recurrent state fp32, {state.page_size_bytes:,} B; "
        f"MLA hybrid block aligned to {align} tokens; prefix caching on ('align'): {KDA_MAMBA_PAGES} Mamba pages "
        "per request"
    )
    return specs, block, lines, note


def packed_specs(model: ModelSpec, k: StorageFormat, cache_dtype: str, *, tp: int) -> tuple[list[LayerCache], str]:
    """(specs, note) of a uniform full-attention model under a vLLM 0.33 dtype kvcalc has no
    storage format for (`engine_dtypes.vllm_033_head_bytes`): TurboQuant / UltraQuant / Octave
    pack one K+V slot per head (their backend's `customize_spec`), `int4_per_token_head` int4
    values + two fp32 scales per head (TRITON_ATTN). TurboQuant and UltraQuant keep the first and
    last two layers at the model's dtype (`turboquant_skip_layers`, `engine/arg_utils.py`
    2345-2350); the block then grows until a packed page covers a skipped layer's page at the
    smallest kernel block (`Platform._align_heterogeneous_kv_block_size`,
    `engine_dtypes.skip_layer_block_alignment`; TurboQuant's kernel blocks 16 / 32 / 64 / 128).
    Every layer is a `FullAttentionSpec` of that block (`Attention.get_kv_cache_spec`: the full
    branch pads nothing), so the layers form one `UniformTypeKVCacheSpecs` group whose block is
    the sum of their pages.

    Llama-3.1-8B, turboquant_k8v4: packed 8 x 196 = 1,568 B a token, skipped 8 x 512 = 4,096;
    block 16 x cdiv(4,096 x 16, 16 x 1,568) = 48; a block of the pool 28 x 48 x 1,568 +
    4 x 48 x 4,096 = 2,893,824 B. Raises `KvcalcError` for MLA, sliding or per-layer-geometry
    models and Mamba hybrids (not modelled with these dtypes)."""
    from kvcalc.engine_dtypes import (
        VLLM_033_CACHE_DTYPES,
        skip_layer_block_alignment,
        turboquant_skip_layers,
        vllm_033_head_bytes,
    )

    row = VLLM_033_CACHE_DTYPES[cache_dtype]
    cached = [x for x in model.layers if x.kind != "mlp"]
    if any(x.kind != "full" for x in cached) or needs_specs(model):
        raise _refuse(
            model,
            f"kvcalc's vLLM 0.33 profile sizes {cache_dtype} for models whose every layer is full "
            "attention of one geometry (not MLA, sliding-window or Mamba / linear layers)",
            value=cache_dtype,
        )
    layer = cached[0]
    heads = kv_heads_per_rank(layer, tp)
    packed = heads * vllm_033_head_bytes(
        cache_dtype, layer.head_dim_k, layer.head_dim_v, model_dtype_bytes=k.block_bytes // k.block_values
    )
    skip = set(turboquant_skip_layers(model.n_layers)) if row.skips_boundary_layers else set()
    full = layer_kv_bytes_per_token(layer, k, k, tp)
    block = BLOCK_SIZE
    if skip:
        block, _ = skip_layer_block_alignment(packed, full, BLOCK_SIZE, BLOCK_SIZE)
    specs = [
        LayerCache("FullAttentionSpec", block, full if i in skip else packed, tag="skip" if i in skip else "")
        for i, x in enumerate(model.layers)
        if x.kind == "full"
    ]
    note = f"{cache_dtype}: {packed:,} B a token per layer ({', '.join(row.backends)})"
    if skip:
        note += (
            f"; layers {', '.join(map(str, sorted(skip)))} kept in {k.name} ({full:,} B a token); block "
            f"{block} tokens so a packed page covers a skipped one"
        )
    return specs, note
