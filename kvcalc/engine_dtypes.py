"""The engines' KV-cache dtypes as typed tables: what each `--kv-cache-dtype` stores, per row.

Pure data and arithmetic (stdlib and `kvcalc.errors` only), for the engine profiles to call:

- vLLM 0.33 (`vllm/config/cache.py` `CacheDType`, 22 entries): `VLLM_033_CACHE_DTYPES`, one
  `VllmCacheDType` row each; `vllm_033_head_bytes` is the bytes one token of one KV head takes
  in one attention layer's page (K and V together, as the backend's `customize_spec` packs
  them), `vllm_033_mla_bytes` the bytes of one token's MLA latent row in one layer;
  `turboquant_skip_layers` the layers TurboQuant / UltraQuant leave at the model's dtype, and
  `skip_layer_block_alignment` how vLLM 0.33 then aligns the block size.
- SGLang 0.5.23 (`python/sglang/srt/arg_groups/fields/model.py` `--kv-cache-dtype` choices):
  `SGLANG_0523_KV_CACHE_DTYPES`; the pool arithmetic is in `kvcalc.engines.sglang`.

Every lookup that fails raises `KvcalcError` naming the engine version and what it accepts.

Shapes: a full-attention page is (block_size, H_kv, slot) per layer, slot = K and V of one
head for one token; an MLA page is (block_size, 1, latent row). All bytes are exact ints.

Sources (vllm==0.33.0 wheel): `vllm/config/cache.py` (CacheDType), `vllm/utils/torch_utils.py`
(STR_DTYPE_TO_TORCH_DTYPE, `nvfp4_kv_cache_full_dim`), `vllm/v1/kv_cache_interface.py`
(KVQuantMode, `AttentionSpec.page_size_bytes`), the backends' `supported_kv_cache_dtypes` and
`customize_spec` under `vllm/v1/attention/backends/`, `vllm/model_executor/layers/attention/
mla_attention.py` (`MLAAttention.get_kv_cache_spec`, `MLACommonBackend.customize_spec`),
`vllm/model_executor/layers/quantization/turboquant/config.py`, `vllm/v1/attention/ops/
ultraquant/format.py`, `vllm/v1/attention/ops/rocm_octave.py`, `vllm/engine/arg_utils.py`,
`vllm/platforms/interface.py` (`_align_heterogeneous_kv_block_size`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvcalc.errors import MESSAGE, KvcalcError

VLLM_VERSION = "vLLM 0.33"
SGLANG_VERSION = "SGLang 0.5.23"

#: how a vLLM cache dtype lays out one token: `plain` K then V values of `k_bits` / `v_bits`;
#: `per_token_head` values plus one fp32 scale per token, head and side (inline, TRITON_ATTN /
#: MLACommonBackend); `nvfp4` 2 x H_kv slots of packed fp4 + one fp8 e4m3 scale per 16 values
#: (FlashInfer); `packed_slot` one K+V slot per head (TurboQuant, UltraQuant, Octave);
#: `ds_mla` a fixed sparse-MLA row (FlashMLA sparse)
Layout = Literal["plain", "per_token_head", "nvfp4", "packed_slot", "ds_mla"]


@dataclass(frozen=True)
class VllmCacheDType:
    """One `--kv-cache-dtype` of vLLM 0.33.

    - `name`: vLLM's string; `quant_mode`: its `KVQuantMode` (`get_kv_quant_mode`).
    - `k_bits` / `v_bits`: bits of one stored K / V value (None: the model's dtype, `auto`).
    - `block_values` / `scale_bytes`: values sharing one scale and that scale's bytes (0: no
      per-block scale in the page; per-tensor scales live outside the cache).
    - `layout`: see `Layout`. `attention`: the layer kinds with a backend that lists it
      (`mha`: full / sliding attention, `mla`: dense MLA, `sparse_mla`: DeepSeek sparse MLA).
    - `backends`: the 0.33 backends whose `supported_kv_cache_dtypes` list it; `gpus`: the
      hardware those run on, in words. `skips_boundary_layers`: vLLM keeps the first and last
      attention layers at the model's dtype (`turboquant_skip_layers`).
    - `storage_format`: the kvcalc format (`kvcalc.formats`) that gives the same bytes per head
      row for `plain` / `nvfp4` layouts (None: no single format; use `vllm_033_head_bytes`).
    - `source`: the vLLM file the row is read from.
    """

    name: str
    quant_mode: str
    k_bits: int | None
    v_bits: int | None
    layout: Layout
    attention: tuple[str, ...]
    backends: tuple[str, ...]
    gpus: str
    source: str
    block_values: int = 1
    scale_bytes: int = 0
    skips_boundary_layers: bool = False
    storage_format: str | None = None


#: the MHA backends every unquantized and fp8 cache runs on, and ROCm's (each list in its file's order)
_MHA_CORE = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN")
_MHA_ROCM = ("ROCM_ATTN", "ROCM_AITER_FA", "ROCM_AITER_UNIFIED_ATTN", "ROCM_SEGMENTED_ATTN")
_UNQ_BACKENDS_MHA = (*_MHA_CORE, "FLEX_ATTENTION", *_MHA_ROCM)
_MLA_DENSE = ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "CUTLASS_MLA", "TRITON_MLA", "ROCM_AITER_MLA")
_FP8_MHA = (*_MHA_CORE, "CPU_ATTN", *_MHA_ROCM)
_FP8_MLA = ("FLASHMLA", "FLASHINFER_MLA", "TOKENSPEED_MLA", "CUTLASS_MLA", "TRITON_MLA", "ROCM_AITER_MLA")
_FP8_SPARSE = (
    "FLASHMLA_SPARSE (as fp8_ds_mla)",
    "FLASHINFER_MLA_SPARSE",
    "FLASHINFER_MLA_SPARSE_SM90",
    "ROCM_AITER_MLA_SPARSE",
)
_E5M2 = ("FLASHINFER", "TRITON_ATTN", "CPU_ATTN", "ROCM_ATTN", "ROCM_AITER_FA", "ROCM_AITER_UNIFIED_ATTN")
_PTH = ("TRITON_ATTN", "MLACommonBackend subclasses (inline scales)")
_TQ_SRC = "model_executor/layers/quantization/turboquant/config.py TQ_PRESETS; v1/attention/backends/turboquant_attn.py"
_OCT_SRC = "v1/attention/ops/rocm_octave.py OctaveFormat; v1/attention/backends/rocm_octave_attn.py"


def _row(
    name: str,
    mode: str,
    k: int | None,
    v: int | None,
    layout: Layout,
    attention: tuple[str, ...],
    backends: tuple[str, ...],
    gpus: str,
    source: str,
    **kw: object,
) -> VllmCacheDType:
    return VllmCacheDType(name, mode, k, v, layout, attention, backends, gpus, source, **kw)  # type: ignore[arg-type]


def _turboquant(name: str, k: int, v: int) -> VllmCacheDType:
    """A TurboQuant preset (`TQ_PRESETS`): a packed K+V slot per head, boundary layers kept."""
    return _row(
        name,
        name.upper(),
        k,
        v,
        "packed_slot",
        ("mha",),
        ("TURBOQUANT",),
        "CUDA, ROCm",
        _TQ_SRC,
        skips_boundary_layers=True,
    )


def _octave(name: str, k: int, v: int, block_values: int) -> VllmCacheDType:
    """An Octave preset (`OctaveFormat`): a packed K+V slot per head with 2 B scales, ROCm only."""
    return _row(
        name,
        name.upper(),
        k,
        v,
        "packed_slot",
        ("mha",),
        ("ROCM_OCTAVE",),
        "ROCm only",
        _OCT_SRC,
        block_values=block_values,
        scale_bytes=2,
    )


def _per_token_head(name: str, bits: int, source: str) -> VllmCacheDType:
    """A per-token-head preset: values plus one fp32 scale per token, head and side (inline)."""
    return _row(
        name, name.upper(), bits, bits, "per_token_head", ("mha", "mla"), _PTH, "CUDA, ROCm", source, scale_bytes=4
    )


def _nvfp4(name: str, source: str) -> VllmCacheDType:
    """An NVFP4 layout (FlashInfer): packed fp4 values and one fp8 scale per 16."""
    return _row(
        name,
        "NVFP4",
        4,
        4,
        "nvfp4",
        ("mha",),
        ("FLASHINFER",),
        "NVIDIA SM80-SM121 (FlashInfer)",
        source,
        block_values=16,
        scale_bytes=1,
        storage_format="nvfp4",
    )


_TRITON_PTH_SRC = "v1/attention/backends/triton_attn.py TritonAttentionBackend.customize_spec"

#: vLLM 0.33's `CacheDType`, in its order (`vllm/config/cache.py`).
VLLM_033_CACHE_DTYPES: dict[str, VllmCacheDType] = {
    r.name: r
    for r in [
        _row(
            "auto",
            "NONE",
            None,
            None,
            "plain",
            ("mha", "mla", "sparse_mla"),
            _UNQ_BACKENDS_MHA + _MLA_DENSE,
            "any",
            "config/cache.py: 'auto' uses the model's dtype",
        ),
        _row(
            "float16",
            "NONE",
            16,
            16,
            "plain",
            ("mha", "mla"),
            _UNQ_BACKENDS_MHA + _MLA_DENSE,
            "any",
            "utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE",
            storage_format="fp16",
        ),
        _row(
            "bfloat16",
            "NONE",
            16,
            16,
            "plain",
            ("mha", "mla", "sparse_mla"),
            _UNQ_BACKENDS_MHA + _MLA_DENSE,
            "any",
            "utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE",
            storage_format="bf16",
        ),
        _row(
            "fp8",
            "FP8_PER_TENSOR",
            8,
            8,
            "plain",
            ("mha", "mla", "sparse_mla"),
            _FP8_MHA + _FP8_MLA + _FP8_SPARSE,
            "CUDA, ROCm, CPU",
            "config/cache.py: fp8 (=fp8_e4m3); uint8 storage, per-tensor scale outside the cache",
            storage_format="fp8_e4m3",
        ),
        _row(
            "fp8_e4m3",
            "FP8_PER_TENSOR",
            8,
            8,
            "plain",
            ("mha", "mla", "sparse_mla"),
            _FP8_MHA + _FP8_MLA,
            "CUDA, ROCm, CPU",
            "utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE (uint8)",
            storage_format="fp8_e4m3",
        ),
        _row(
            "fp8_e5m2",
            "FP8_PER_TENSOR",
            8,
            8,
            "plain",
            ("mha", "mla"),
            _E5M2 + ("ROCM_AITER_MLA",),
            "CUDA 11.8+",
            "utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE (uint8)",
            storage_format="fp8_e5m2",
        ),
        _row(
            "fp8_inc",
            "FP8_PER_TENSOR",
            8,
            8,
            "plain",
            ("mha",),
            (),
            "Intel Gaudi (HPU) plugin only: no in-tree backend",
            "config/cache.py: 'Intel Gaudi (HPU) supports fp8 (using fp8_inc)'; torch.float8_e4m3fn",
            storage_format="fp8_e4m3",
        ),
        _row(
            "fp8_ds_mla",
            "FP8_PER_TENSOR",
            8,
            8,
            "ds_mla",
            ("sparse_mla",),
            ("FLASHMLA_SPARSE", "FLASHINFER_MLA_SPARSE_SM120"),
            "Hopper and Blackwell (FlashMLA sparse)",
            "model_executor/layers/attention/mla_attention.py state_content_bytes 656; "
            "v1/attention/backends/mla/flashmla_sparse.py layout note",
            block_values=128,
            scale_bytes=4,
        ),
        _row(
            "nvfp4_ds_mla",
            "NVFP4_DS_MLA",
            4,
            4,
            "ds_mla",
            ("sparse_mla",),
            ("FLASHMLA_SPARSE",),
            "SM100 only",
            "model_executor/layers/attention/mla_attention.py state_content_bytes 352; "
            "v1/attention/backends/mla/flashmla_sparse.py layout note",
            block_values=16,
            scale_bytes=1,
        ),
        _turboquant("turboquant_k8v4", 8, 4),
        _turboquant("turboquant_4bit_nc", 4, 4),
        _turboquant("turboquant_k3v4_nc", 3, 4),
        _turboquant("turboquant_3bit_nc", 3, 3),
        _octave("octave_k3v4", 3, 4, block_values=64),
        _octave("octave_k3v3", 3, 3, block_values=64),
        _octave("octave_k3v3_compact", 3, 3, block_values=1),
        _row(
            "ultraquant_4bit",
            "ULTRAQUANT_4BIT",
            4,
            4,
            "packed_slot",
            ("mha",),
            ("ULTRAQUANT",),
            "ROCm (FlyDSL / scaled MFMA)",
            "v1/attention/ops/ultraquant/format.py slot_size; v1/attention/backends/ultraquant_attn.py",
            block_values=32,
            scale_bytes=1,
            skips_boundary_layers=True,
        ),
        _per_token_head(
            "int4_per_token_head", 4, _TRITON_PTH_SRC + "; mla_attention.py MLACommonBackend.customize_spec"
        ),
        _per_token_head("int8_per_token_head", 8, _TRITON_PTH_SRC),
        _per_token_head("fp8_per_token_head", 8, _TRITON_PTH_SRC),
        _nvfp4(
            "nvfp4",
            "utils/torch_utils.py nvfp4_kv_cache_full_dim; v1/attention/backends/flashinfer.py "
            "FlashInferBackend.customize_spec",
        ),
        _nvfp4("nvfp4_4over6", "config/cache.py: the NVFP4 layout, max/6 or max/4 scales per 16 values; flashinfer.py"),
    ]
}

#: what `--kv-cache-dtype` names for kvcalc's formats (the profile's `vllm_cache_dtype` is the inverse)
VLLM_033_FORMAT_NAMES: dict[str, str] = {
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8_e5m2",
    "nvfp4": "nvfp4",
}

#: DeepSeek-V3.2's latent geometry, the only one `fp8_ds_mla` / `nvfp4_ds_mla` rows are laid out for
DS_MLA_KV_LORA_RANK = 512
DS_MLA_ROPE_DIM = 64
#: vLLM 0.33 `mla_attention.py`: `{"fp8_ds_mla": 656, "nvfp4_ds_mla": 352}`
DS_MLA_ROW_BYTES = {"fp8_ds_mla": 656, "nvfp4_ds_mla": 352}
#: TurboQuant / UltraQuant boundary protection (`TurboQuantConfig.get_boundary_skip_layers`, n=2)
BOUNDARY_SKIP_LAYERS = 2


def accepted(names: object) -> str:
    """`names` joined for an error line."""
    return ", ".join(str(n) for n in names)  # type: ignore[attr-defined]


def vllm_033_cache_dtype(name: str, *, field: str | None = "kv_dtype") -> VllmCacheDType:
    """The `VllmCacheDType` row of `name` (vLLM's spelling, case-insensitive).

    Raises `KvcalcError` (field `field`, value `name`) naming vLLM 0.33 and its list."""
    row = VLLM_033_CACHE_DTYPES.get(name.strip().lower())
    if row is None:
        raise KvcalcError(
            f"{VLLM_VERSION} has no '{name}' KV cache dtype; its --kv-cache-dtype accepts "
            f"{accepted(VLLM_033_CACHE_DTYPES)}",
            field=field,
            value=name,
            form=MESSAGE,
        )
    return row


def _refuse(row: VllmCacheDType, why: str, field: str | None) -> KvcalcError:
    return KvcalcError(f"{VLLM_VERSION} --kv-cache-dtype {row.name}: {why}", field=field, value=row.name, form=MESSAGE)


#: compute capability vLLM 0.33's profile in kvcalc assumes when no GPU is given (Hopper)
ASSUMED_CC = "9.0"


def vllm_033_check_device(
    name: str, compute_capability: str | None, vendor: str | None, *, field: str | None = "kv_dtype"
) -> None:
    """Refuse a `--kv-cache-dtype` no vLLM 0.33 backend takes on this GPU, as vLLM's backend
    selection does (`CudaPlatform.get_attn_backend_cls`: "No valid attention backend found ...
    kv_cache_dtype not supported"; held against it by `tests/oracle/vllm_grid.py`):

    - octave_k3v4 / octave_k3v3 / octave_k3v3_compact and ultraquant_4bit: ROCm backends only
      (`ROCM_OCTAVE`, `ULTRAQUANT`); no CUDA backend lists them;
    - nvfp4_4over6: FlashInfer on the SM100 family only (`v1/attention/backends/flashinfer.py`
      `supports_kv_cache_dtype`: on SM80 / SM90 / SM120 "The slot-mapping writer has no scale
      search", only nvfp4; on SM100 it needs TRTLLM attention, `supports_trtllm_attention`).

    `compute_capability` None: Hopper assumed (`ASSUMED_CC`); `vendor` None: NVIDIA. Raises
    `KvcalcError` naming vLLM 0.33, the device and what it accepts there."""
    row = vllm_033_cache_dtype(name, field=field)
    amd = vendor == "amd"
    cc = compute_capability or ASSUMED_CC
    device = (
        "ROCm" if amd else f"CUDA compute capability {cc}{'' if compute_capability else ' (assumed: no GPU given)'}"
    )
    if (row.name.startswith("octave_") or row.name == "ultraquant_4bit") and not amd:
        raise _refuse(
            row,
            f"no backend on {device}: it is {row.gpus} ({accepted(row.backends)}); on NVIDIA GPUs vLLM "
            "takes auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2, turboquant_*, int4/int8/fp8_per_token_head, nvfp4",
            field,
        )
    if row.name == "nvfp4_4over6":
        major = int(cc.split(".")[0])
        if amd or major != 10:
            raise _refuse(
                row,
                f"no backend on {device}: FlashInfer takes nvfp4_4over6 on the SM100 family (B200, B300, GB200) "
                "only; elsewhere it takes nvfp4 (flashinfer.py supports_kv_cache_dtype)",
                field,
            )


#: what vLLM 0.33's CUDA backend selection takes for an MLA model (`CudaPlatform.get_attn_backend_cls`
#: over FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA ... on SM90 and SM100, run by
#: `tests/oracle/vllm_grid.py`); sparse MLA (DeepSeek-V3.2 / GLM-5) adds fp8_ds_mla (FLASHMLA_SPARSE),
#: and nvfp4_ds_mla on the SM100 family
VLLM_033_CUDA_MLA_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3")
VLLM_033_CUDA_SPARSE_MLA_DTYPES = (*VLLM_033_CUDA_MLA_DTYPES, "fp8_ds_mla")


def vllm_033_check_mla(
    name: str, *, sparse: bool, compute_capability: str | None, field: str | None = "kv_dtype"
) -> None:
    """Refuse a `--kv-cache-dtype` no vLLM 0.33 CUDA MLA backend takes, for a model with MLA layers
    (`sparse`: DeepSeek sparse MLA), naming what vLLM takes there (`VLLM_033_CUDA_MLA_DTYPES`,
    `..._SPARSE_...`; nvfp4_ds_mla on SM100 for sparse MLA). The packed presets (TurboQuant,
    Octave, UltraQuant), nvfp4 / nvfp4_4over6 and fp8_inc have no MLA backend at all. Raises
    `KvcalcError` (field `field`)."""
    row = vllm_033_cache_dtype(name, field=field)
    cc = compute_capability or ASSUMED_CC
    takes = VLLM_033_CUDA_SPARSE_MLA_DTYPES if sparse else VLLM_033_CUDA_MLA_DTYPES
    if sparse and int(cc.split(".")[0]) == 10:
        takes = (*takes, "nvfp4_ds_mla")
    if row.name in takes:
        return
    kind = "sparse MLA" if sparse else "MLA"
    sm100 = ", and nvfp4_ds_mla on SM100 (FLASHMLA_SPARSE)" if sparse and "nvfp4_ds_mla" not in takes else ""
    raise _refuse(
        row,
        f"no {kind} attention backend takes it on CUDA compute capability {cc}; for {kind} models "
        f"vLLM 0.33 takes {accepted(takes)}{sm100}",
        field,
    )


def turboquant_slot_bytes(name: str, head_size: int) -> int:
    """Bytes of one TurboQuant K+V slot (one token, one head), vLLM 0.33
    `TurboQuantConfig.slot_size_aligned`: key = head_size (fp8 keys, k8v4) or
    ceil(head_size x k_bits / 8) + 2 (fp16 norm); value = ceil(head_size x v_bits / 8) + 4
    (fp16 scale and zero); the sum rounded up to an even number. head_size 128: k8v4 128 + 68 =
    196, 4bit_nc 66 + 68 = 134, k3v4_nc 50 + 68 = 118, 3bit_nc 50 + 52 = 102."""
    row = VLLM_033_CACHE_DTYPES[name]
    k_bits, v_bits = row.k_bits or 0, row.v_bits or 0
    key = head_size if k_bits == 8 else -(-head_size * k_bits // 8) + 2
    value = -(-head_size * v_bits // 8) + 4
    slot = key + value
    return slot + slot % 2


def octave_slot_bytes(name: str, head_size: int, rope_dim: int) -> int:
    """Bytes of one Octave K+V slot, vLLM 0.33 `rocm_octave.py` `OctaveFormat.slot_bytes`: K's
    rope dims in 4-bit codes and the rest in 3-bit (compact: every K dim 3-bit), V in v_bits,
    then fp16 scales (one per 64-dim Hadamard block of K, compact one, plus one for V), rounded
    up to 8 B (compact 4 B). head_size = rope_dim = 128: k3v4 64 + 64 + 3 x 2 = 134 -> 136;
    k3v3 64 + 48 + 6 = 118 -> 120; k3v3_compact 48 + 48 + 4 = 100."""
    compact = name.endswith("_compact")
    v_bits = VLLM_033_CACHE_DTYPES[name].v_bits or 0
    wide = 0 if compact else rope_dim
    raw = wide * 4 // 8 + (head_size - wide) * 3 // 8 + head_size * v_bits // 8
    raw += 2 * ((1 if compact else head_size // 64) + 1)
    align = 4 if compact else 8
    return -(-raw // align) * align


def vllm_033_head_bytes(
    name: str,
    head_size: int,
    head_size_v: int | None = None,
    *,
    model_dtype_bytes: int = 2,
    rope_dim: int | None = None,
    field: str | None = "kv_dtype",
) -> int:
    """Bytes one token of one KV head takes in one full / sliding attention layer's page, K and
    V together, under vLLM 0.33's `--kv-cache-dtype name` (page = block_size x H_kv x this; the
    state_content_bytes of `AttentionSpec`, per head slot):

    - plain (auto / float16 / bfloat16 / fp8*): (head_size + head_size_v) x element bytes
      (`auto`: `model_dtype_bytes`); Llama-3.1-8B bf16: 256 x 2 = 512 B;
    - per_token_head (TRITON_ATTN `customize_spec`): values + 2 x 4 B fp32 scales;
      int4: (head_size / 2 + head_size_v / 2) + 8 (128: 136 B), int8 / fp8: 256 + 8 = 264 B;
    - nvfp4 / nvfp4_4over6 (FlashInfer `customize_spec`, `nvfp4_kv_cache_full_dim`): 2 slots of
      head_size / 2 + head_size / 16 (fp4 values + one fp8 scale per 16): 2 x (64 + 8) = 144 B;
    - TurboQuant (`turboquant_slot_bytes`), UltraQuant (head_size / 2 + head_size / 32 per side:
      2 x (64 + 4) = 136 B), Octave (`octave_slot_bytes`; `rope_dim`: the model's rotary dims,
      default head_size as `partial_rotary_factor` 1.0): one packed K+V slot.

    Raises `KvcalcError` (field `field`) for an unknown name, an MLA-only row (fp8_ds_mla,
    nvfp4_ds_mla), K and V head sizes that differ where the layout takes one head size, or a
    head size the format does not divide into whole blocks."""
    row = vllm_033_cache_dtype(name, field=field)
    hv = head_size if head_size_v is None else head_size_v
    if row.layout == "ds_mla":
        raise _refuse(row, "a sparse-MLA latent row (DeepSeek-V3.2), not a K/V head; use vllm_033_mla_bytes", field)
    if row.layout == "plain":
        per_value = model_dtype_bytes if row.k_bits is None else row.k_bits // 8
        return (head_size + hv) * per_value
    if row.layout == "per_token_head":
        if row.k_bits == 4:
            if head_size % 2 or hv % 2:
                raise _refuse(row, f"packs two int4 values a byte; head sizes {head_size}/{hv} are not even", field)
            return head_size // 2 + hv // 2 + 2 * row.scale_bytes
        return head_size + hv + 2 * row.scale_bytes
    if head_size != hv:
        raise _refuse(row, f"takes one head size for K and V (K {head_size}, V {hv})", field)
    if row.layout == "nvfp4":
        if head_size % 16:
            raise _refuse(
                row, f"stores one fp8 scale per 16 values; head size {head_size} is not a multiple of 16", field
            )
        return 2 * (head_size // 2 + head_size // 16)
    if row.quant_mode.startswith("TURBOQUANT"):
        return turboquant_slot_bytes(row.name, head_size)
    if row.name == "ultraquant_4bit":
        if head_size % 32:
            raise _refuse(row, f"scales groups of 32 values; head size {head_size} is not a multiple of 32", field)
        return 2 * (head_size // 2 + head_size // 32)
    rope = head_size if rope_dim is None else rope_dim
    if head_size % 64 or rope % 64 or (row.name.endswith("_compact") and head_size & (head_size - 1)):
        raise _refuse(
            row,
            f"needs head size and rope dims in multiples of 64 (compact: a power of two), got {head_size} and {rope}",
            field,
        )
    return octave_slot_bytes(row.name, head_size, rope)


def vllm_033_mla_bytes(
    name: str, kv_lora_rank: int, qk_rope_head_dim: int, *, model_dtype_bytes: int = 2, field: str | None = "kv_dtype"
) -> int:
    """Bytes of one token's MLA latent row in one layer under vLLM 0.33's `--kv-cache-dtype name`
    (`MLAAttention.get_kv_cache_spec`, `MLACommonBackend.customize_spec`); D = kv_lora_rank +
    qk_rope_head_dim (DeepSeek-V3: 512 + 64 = 576):

    - plain: D x element bytes (bf16 1,152 B, fp8 576 B);
    - per_token_head: D (int4: D / 2) + 2 x 4 B (fp8 584 B, int4 296 B);
    - fp8_ds_mla: 656 B = 512 fp8 NoPE + 4 x 4 B fp32 scales (one per 128) + 64 x 2 B bf16 RoPE;
    - nvfp4_ds_mla: 352 B = 512 / 2 B e2m1 NoPE + 64 x 1 B fp8 RoPE + 512 / 16 x 1 B fp8 scales
      (`flashmla_sparse.py`'s layout note). Both are fixed rows for DeepSeek-V3.2's geometry.

    Raises `KvcalcError` for an unknown name, a K/V-only row (nvfp4, TurboQuant, ...), or a
    ds_mla row asked for another geometry."""
    row = vllm_033_cache_dtype(name, field=field)
    d = kv_lora_rank + qk_rope_head_dim
    if row.layout == "ds_mla":
        if (kv_lora_rank, qk_rope_head_dim) != (DS_MLA_KV_LORA_RANK, DS_MLA_ROPE_DIM):
            raise _refuse(
                row,
                f"is a fixed {DS_MLA_ROW_BYTES[row.name]} B row for kv_lora_rank 512 + rope 64, not "
                f"{kv_lora_rank} + {qk_rope_head_dim}",
                field,
            )
        if row.name == "fp8_ds_mla":  # 512 + 512 / 128 x 4 + 64 x 2
            return kv_lora_rank + kv_lora_rank // row.block_values * row.scale_bytes + qk_rope_head_dim * 2
        return kv_lora_rank // 2 + qk_rope_head_dim + kv_lora_rank // row.block_values * row.scale_bytes
    if "mla" not in row.attention:
        raise _refuse(row, f"has no MLA backend (its backends: {accepted(row.backends)})", field)
    if row.layout == "plain":
        return d * (model_dtype_bytes if row.k_bits is None else row.k_bits // 8)
    return (d // 2 if row.k_bits == 4 else d) + 2 * row.scale_bytes


def turboquant_skip_layers(n_layers: int, *, hybrid: bool = False, n: int = BOUNDARY_SKIP_LAYERS) -> tuple[int, ...]:
    """The layers TurboQuant and UltraQuant presets keep at the model's dtype (`auto`), vLLM 0.33
    `TurboQuantConfig.get_boundary_skip_layers` (applied in `engine/arg_utils.py` for
    `turboquant_*` and `ultraquant_4bit`): the first n and last n of `num_hidden_layers`, n =
    min(2, n_layers // 2); none on hybrid (attention + Mamba / linear-attention) models. A
    32-layer Llama: (0, 1, 30, 31). Every other layer stores the preset's packed slots; the
    skipped ones are padded to the quantized page (`skip_layer_block_alignment`)."""
    if hybrid or n <= 0 or n_layers <= 0:
        return ()
    n = min(n, n_layers // 2)
    return tuple(sorted(set(range(n)) | set(range(n_layers - n, n_layers))))


def skip_layer_block_alignment(
    primary_bytes_per_token: int,
    skip_bytes_per_token: int,
    block_size: int,
    smallest_kernel_block: int,
    mamba_page_bytes: int | None = None,
) -> tuple[int, int]:
    """(block_size, shared page bytes) when quantized layers share vLLM 0.33's block pool with
    layers skipped to the model's dtype (`Platform._align_heterogeneous_kv_block_size`): with
    P = the quantized layer's bytes per token (all heads), S = a skipped layer's (S >= P) and
    b = the backend's smallest kernel block, required = max(S x b, mamba page); the block grows
    to a = max(b, block_size) times cdiv(required, a x P) if that is larger, and every skipped
    layer's page is padded to block_size x P. S == P: nothing changes (page, block_size x P).

    Raises `KvcalcError` when S < P (vLLM asserts a skipped page is never smaller)."""
    if skip_bytes_per_token < primary_bytes_per_token:
        raise KvcalcError(
            f"a skipped layer's {skip_bytes_per_token} B a token is below the quantized layer's "
            f"{primary_bytes_per_token} B ({VLLM_VERSION} asserts it is not)",
            form=MESSAGE,
        )
    if skip_bytes_per_token == primary_bytes_per_token:
        return block_size, block_size * primary_bytes_per_token
    alignment = max(smallest_kernel_block, block_size)
    required = max(skip_bytes_per_token * smallest_kernel_block, mamba_page_bytes or 0)
    aligned = alignment * -(-required // (alignment * primary_bytes_per_token))
    block_size = max(block_size, aligned)
    return block_size, block_size * primary_bytes_per_token


# ----- SGLang 0.5.23 -------------------------------------------------------------------------


@dataclass(frozen=True)
class SglangKvDType:
    """One `--kv-cache-dtype` choice of SGLang 0.5.23: the kvcalc format its pool stores
    (`storage_format`; None for `auto`, the model's dtype), the GPUs it needs, its source."""

    name: str
    storage_format: str | None
    gpus: str
    source: str


_SG_SRC = "srt/arg_groups/fields/model.py kv_cache_dtype choices; srt/mem_cache/kv_cache_dtype.py"
#: SGLang 0.5.23's `--kv-cache-dtype` choices, in its order.
SGLANG_0523_KV_CACHE_DTYPES: dict[str, SglangKvDType] = {
    r.name: r
    for r in [
        SglangKvDType(
            "auto", None, "any", _SG_SRC + " (the model's dtype; an FP8 checkpoint's kv_cache_quant_algo: fp8)"
        ),
        SglangKvDType("fp8_e5m2", "fp8_e5m2", "CUDA 11.8+ (not CPU)", _SG_SRC),
        SglangKvDType("fp8_e4m3", "fp8_e4m3", "CUDA 11.8+, ROCm", _SG_SRC),
        SglangKvDType(
            "mxfp8",
            "mxfp8",
            "SM100+ (FA4; kv_cache_hook.handle_mxfp8_kv_cache_compatibility)",
            _SG_SRC + "; srt/model_executor/pool_configurator.py (+1 B scale per 32 values)",
        ),
        SglangKvDType("bf16", "bf16", "any", _SG_SRC),
        SglangKvDType("bfloat16", "bf16", "any", _SG_SRC),
        SglangKvDType(
            "nvfp4",
            "nvfp4",
            "SM100 or SM120 (kv_cache_hook.handle_kv4_compatibility)",
            "srt/layers/quantization/fp4_kv_cache_quant_method.py NVFP4KVCacheMethod.compute_cell_size",
        ),
        SglangKvDType(
            "fp4_mx_block16",
            "fp4_mx_block16",
            "CUDA 12.8+ with PyTorch 2.8+",
            "srt/layers/quantization/fp4_kv_cache_quant_method.py FP4MXBlock16KVCacheMethod.compute_cell_size",
        ),
    ]
}
