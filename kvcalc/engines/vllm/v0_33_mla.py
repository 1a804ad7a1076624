"""vLLM 0.33's attention backends for MLA models, and the block size they set.

`vllm/platforms/cuda.py` `CudaPlatform.get_attn_backend_cls` / `_get_backend_priorities` and
`Platform.update_block_size_for_backend`: the first backend of the GPU's priority list that
`validate_configuration` accepts (head size, KV dtype, a `--block-size` given, compute
capability, `supports_combination`; `mla_backend_reasons`), at its `get_preferred_block_size`
when no `--block-size` is given: Hopper FLASH_ATTN_MLA 16 (bf16/fp16 caches only), else FLASHMLA
64 (fp8); Blackwell FLASHINFER_MLA 32 (qk_nope_head_dim 64 / 128 / 192), else CUTLASS_MLA 128;
SM120 and ROCm TRITON_MLA 16. Non-MLA backends (FLASH_ATTN, FLASHINFER, TRITON_ATTN, ROCM_ATTN)
all prefer 16, so the default stays; on CUDA a block size not a multiple of 16 finds none.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.engines.vllm.common import ASSUMED_COMPUTE_CAPABILITY
from kvcalc.errors import KvcalcError
from kvcalc.schema import ModelSpec

#: vLLM 0.33's default block size (`vllm/config/cache.py` `CacheConfig.DEFAULT_BLOCK_SIZE`): the
#: size a backend's `get_preferred_block_size` starts from when `--block-size` is not given.
DEFAULT_BLOCK_SIZE = 16
#: vLLM cache dtypes (`vllm/config/cache.py` `CacheDType`) the 0.33 backends list.
_UNQUANTIZED = ("auto", "float16", "bfloat16")
_FP8 = ("fp8", "fp8_e4m3")
#: head sizes of `MLACommonBackend.get_supported_head_sizes` (kv_lora_rank + qk_rope_head_dim)
MLA_HEAD_SIZES = (320, 512, 576)


@dataclass(frozen=True)
class MlaBackend:
    """One of vLLM 0.33's dense MLA attention backends as its selector sees it
    (`AttentionBackend.validate_configuration`): the cache dtypes it lists
    (`supported_kv_cache_dtypes`), its kernel block sizes (`get_supported_kernel_block_sizes`:
    fixed sizes, or every multiple of `multiple_of`), the compute capability majors it runs on
    (`supports_compute_capability`; None: any), its head sizes (`get_supported_head_sizes`; ():
    any) and the file it is in (under `vllm/v1/attention/backends/mla/`)."""

    kv_dtypes: tuple[str, ...]
    block_sizes: tuple[int, ...] = ()
    multiple_of: int | None = None
    cc_majors: tuple[int, ...] | None = None
    head_sizes: tuple[int, ...] = MLA_HEAD_SIZES
    source: str = ""

    def supports_block_size(self, block_size: int | None) -> bool:
        """`AttentionBackend.supports_block_size`: None (not given) or a multiple of one kernel
        block size (TRITON_MLA's override is the same test: a multiple of 16)."""
        if block_size is None:
            return True
        return any(block_size % s == 0 for s in (*self.block_sizes, *([self.multiple_of] if self.multiple_of else [])))

    def preferred_block_size(self, default: int = DEFAULT_BLOCK_SIZE) -> int:
        """`AttentionBackend.get_preferred_block_size`: `default` if supported, else the smallest
        kernel block size (FLASHMLA 64, FLASHINFER_MLA 32, CUTLASS_MLA 128)."""
        if self.supports_block_size(default):
            return default
        return min((*self.block_sizes, *([self.multiple_of] if self.multiple_of else [])))


#: vLLM 0.33's dense MLA backends, by `--attention-backend` name.
MLA_BACKENDS: dict[str, MlaBackend] = {
    "FLASH_ATTN_MLA": MlaBackend(_UNQUANTIZED, multiple_of=16, cc_majors=(9,), source="flashattn_mla.py"),
    "FLASHMLA": MlaBackend(_UNQUANTIZED + _FP8, block_sizes=(64,), cc_majors=(9, 10), source="flashmla.py"),
    "FLASHINFER_MLA": MlaBackend(
        _UNQUANTIZED + _FP8, block_sizes=(32, 64), cc_majors=(10,), source="flashinfer_mla.py"
    ),
    "TOKENSPEED_MLA": MlaBackend(_FP8, block_sizes=(32, 64), cc_majors=(10,), source="tokenspeed_mla.py"),
    "CUTLASS_MLA": MlaBackend(_UNQUANTIZED + _FP8, block_sizes=(128,), cc_majors=(10,), source="cutlass_mla.py"),
    "TRITON_MLA": MlaBackend(_UNQUANTIZED + _FP8, multiple_of=16, head_sizes=(), source="triton_mla.py"),
    "ROCM_AITER_MLA": MlaBackend(
        _UNQUANTIZED + _FP8 + ("fp8_e5m2",), multiple_of=1, head_sizes=(), source="rocm_aiter_mla.py"
    ),
}


def mla_backend_priorities(compute_capability: str | None, vendor: str | None = None) -> tuple[str, ...]:
    """vLLM 0.33's dense MLA backends in the order its selector tries them.

    NVIDIA, `vllm/platforms/cuda.py` `_get_backend_priorities` (use_mla): compute capability
    10.x: FLASHINFER_MLA, TOKENSPEED_MLA, CUTLASS_MLA, FLASH_ATTN_MLA, FLASHMLA, TRITON_MLA;
    12.x: TRITON_MLA; any other: FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA. The
    sparse backends at the end of each list refuse a dense model ("non-sparse not supported")
    and are left out. AMD, `vllm/platforms/rocm.py` `_get_backend_priorities`: TRITON_MLA
    (ROCM_AITER_MLA first only with VLLM_ROCM_USE_AITER=1, off by default).
    """
    if vendor == "amd":
        return ("TRITON_MLA",)
    major = int((compute_capability or ASSUMED_COMPUTE_CAPABILITY).split(".")[0])
    if major == 10:
        return ("FLASHINFER_MLA", "TOKENSPEED_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA")
    if major == 12:
        return ("TRITON_MLA",)
    return ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA")


def mla_backend_reasons(
    name: str,
    model: ModelSpec,
    kv_cache_dtype: str | None,
    block_size: int | None,
    compute_capability: str | None,
    vendor: str | None = None,
) -> list[str]:
    """Why vLLM 0.33 finds MLA backend `name` invalid, in its own words and order ([] = valid):
    `AttentionBackend.validate_configuration` (head size, kv cache dtype, block size, compute
    capability) then the backend's `supports_combination`: FLASH_ATTN_MLA needs FA3 on sm90
    (`fa_utils.flash_attn_supports_mla`), FLASHMLA's dense kernel Hopper
    (`ops/flashmla.is_flashmla_dense_supported`), FLASHINFER_MLA qk_nope_head_dim in [64, 128,
    192], TOKENSPEED_MLA DeepSeek-R1's dims (128, 64, 128). Kernels are assumed present as in the
    official CUDA wheel (vllm 0.33.0: FA3, `_flashmla_C`, flashinfer-python and tokenspeed-mla
    are in it). `kv_cache_dtype` is vLLM's name ('auto', 'fp8', ...; None: not checked)."""
    b = MLA_BACKENDS[name]
    reasons = []
    head_size = model.resolved_head_dim
    if b.head_sizes and head_size not in b.head_sizes:
        reasons.append("head_size not supported")
    if kv_cache_dtype is not None and kv_cache_dtype not in b.kv_dtypes:
        reasons.append("kv_cache_dtype not supported")
    if not b.supports_block_size(block_size):
        reasons.append("block_size not supported")
    if vendor == "amd":
        return reasons
    major = int((compute_capability or ASSUMED_COMPUTE_CAPABILITY).split(".")[0])
    if b.cc_majors is not None and major not in b.cc_majors:
        reasons.append("compute capability not supported")
    if name == "FLASH_ATTN_MLA" and major != 9:
        reasons.append("FlashAttention MLA not supported on this device")
    elif name == "FLASHMLA" and major != 9:
        reasons.append("FlashMLA Dense is only supported on Hopper devices.")
    elif name == "FLASHINFER_MLA":
        nope = model.qk_nope_head_dim if model.qk_nope_head_dim is not None else 1  # getattr(..., 1)
        if nope not in (64, 128, 192):
            reasons.append(f"FlashInfer MLA kernel requires qk_nope_head_dim in [64, 128, 192], but got {nope}")
    elif name == "TOKENSPEED_MLA":
        dims = tuple(d or 0 for d in (model.qk_nope_head_dim, model.qk_rope_head_dim, model.v_head_dim))
        if dims != (128, 64, 128):
            reasons.append(
                "tokenspeed_mla requires DeepSeek R1 MLA dimensions (qk_nope_head_dim=128, "
                f"qk_rope_head_dim=64, v_head_dim=128), got ({dims[0]}, {dims[1]}, {dims[2]})"
            )
    return reasons


def _cc_words(compute_capability: str | None, vendor: str | None) -> str:
    if vendor == "amd":
        return "ROCm (VLLM_ROCM_USE_AITER unset)"
    if compute_capability is None:
        return (
            f"compute capability {ASSUMED_COMPUTE_CAPABILITY} (Hopper), assumed: no NVIDIA GPU (compute "
            "capability) or attention backend given"
        )
    return f"compute capability {compute_capability}"


def latent_words(model: ModelSpec, kv_cache_dtype: str | None) -> str:
    """What a dense MLA backend stores, in words: one latent row of kv_lora_rank + qk_rope_head_dim
    values a token and layer (`MLAAttention.get_kv_cache_spec`: num_kv_heads 1, head_size 576 for
    DeepSeek-V3) in the cache dtype, `auto` the model's own: DeepSeek-V3 fp8 576 x 1 = 576 B, bf16
    576 x 2 = 1,152 B."""
    name = (kv_cache_dtype or "auto").strip().lower()
    one = 1 if name.startswith("fp8") else 2 if name in ("auto", "bfloat16", "float16", "bf16", "fp16") else None
    if name == "auto":
        name = f"auto ({model.dtype})"
        one = 4 if model.dtype == "fp32" else 2
    width = model.resolved_head_dim
    size = f", {width * one:,} B a token" if one is not None else ""
    return f"stores {name} latent rows ({width} values{size})"


def select_block_size(
    model: ModelSpec,
    block_size: int | None,
    name: str | None,
    compute_capability: str | None,
    vendor: str | None,
    kv_cache_dtype: str | None,
) -> tuple[int, str | None]:
    """(block size, note) for vLLM 0.33 (the backend's name is checked by the caller,
    `V1Rules.attention_block_size`).

    `vllm/platforms/cuda.py` `CudaPlatform.get_attn_backend_cls`, `get_valid_backends`;
    `vllm/platforms/interface.py` `Platform.update_block_size_for_backend`: the first MLA
    backend of `mla_backend_priorities` that `mla_backend_reasons` finds valid, the block size
    given taking part (a backend that cannot run it is passed over, and vLLM warns when that
    precluded a higher-priority one); without `--block-size`, the backend's preferred size
    (`AttentionBackend.get_preferred_block_size` from 16: FLASH_ATTN_MLA and TRITON_MLA 16,
    FLASHMLA 64, FLASHINFER_MLA 32, CUTLASS_MLA 128). So an H100 serves DeepSeek with
    FLASH_ATTN_MLA and 16-token blocks, with FLASHMLA and 64 under `--kv-cache-dtype fp8`, a B200
    with FLASHINFER_MLA and 32. A backend given (`--attention-backend`) is checked alone and
    refused when invalid. Non-MLA models keep the size given, else 16 (FLASH_ATTN, FLASHINFER,
    TRITON_ATTN, ROCM_ATTN all prefer 16); on CUDA a size that is not a multiple of 16 finds no
    backend and is refused (field `block_size`), as where no MLA backend is valid (fields
    `block_size` / `kv_dtype`). With neither GPU nor backend, kvcalc assumes Hopper
    (`ASSUMED_COMPUTE_CAPABILITY`) and the note says so.
    """
    if not any(layer.kind == "mla" for layer in model.layers):
        if vendor != "amd" and block_size is not None and block_size % 16:
            raise KvcalcError(
                f"vLLM 0.33 finds no valid attention backend for block size {block_size} on CUDA: "
                "FLASH_ATTN, FLASHINFER, TRITON_ATTN and FLEX_ATTENTION take multiples of 16 "
                "(get_supported_kernel_block_sizes); give a multiple of 16",
                field="block_size",
                value=block_size,
            )
        return (block_size or DEFAULT_BLOCK_SIZE), None
    if name is not None:  # get_attn_backend_cls: the selected backend alone, refused if invalid
        reasons = mla_backend_reasons(name, model, kv_cache_dtype, block_size, compute_capability, vendor)
        if reasons:
            raise KvcalcError(
                f"vLLM 0.33: Selected backend {name} is not valid for this configuration. Reason: {reasons}",
                field="attention_backend",
                value=name,
            )
        size = block_size or MLA_BACKENDS[name].preferred_block_size()
        how = f"keeps the --block-size {size} given" if block_size else f"sets block size {size}"
        return (
            size,
            f"MLA attention backend {name} (the attention backend given) {latent_words(model, kv_cache_dtype)}, {how}",
        )
    invalid: dict[str, list[str]] = {}
    for candidate in mla_backend_priorities(compute_capability, vendor):  # CudaPlatform.get_valid_backends
        reasons = mla_backend_reasons(candidate, model, kv_cache_dtype, block_size, compute_capability, vendor)
        if not reasons:
            break
        invalid[candidate] = reasons
    else:
        found = "; ".join(f"{n}: {', '.join(r)}" for n, r in invalid.items())
        raise KvcalcError(
            f"vLLM 0.33 finds no valid MLA attention backend on {_cc_words(compute_capability, vendor)} "
            f"for kv_cache_dtype {kv_cache_dtype or 'auto'}, block_size {block_size}: {found}",
            field="block_size" if block_size else "kv_dtype",
            value=block_size or kv_cache_dtype,
        )
    where = f"vLLM 0.33's first valid MLA backend on {_cc_words(compute_capability, vendor)}"
    if invalid:
        where += "; passed over: " + "; ".join(f"{n} ({', '.join(r)})" for n, r in invalid.items())
    if block_size is None:  # Platform.update_block_size_for_backend, phase 1
        size = MLA_BACKENDS[candidate].preferred_block_size()
        return (
            size,
            f"MLA attention backend {candidate} ({where}) {latent_words(model, kv_cache_dtype)}, sets block size {size}",
        )
    note = (
        f"MLA attention backend {candidate} ({where}) {latent_words(model, kv_cache_dtype)}, "
        f"keeps the --block-size {block_size:,} given"
    )
    precluded = [n for n, r in invalid.items() if r == ["block_size not supported"]]
    if precluded:  # CudaPlatform.get_attn_backend_cls's warning
        note += (
            f". vLLM warns: --block-size {block_size} precluded higher-priority backend(s) "
            f"{', '.join(precluded)}. Using {candidate} instead, which may result in reduced performance. "
            "Consider removing --block-size to auto-select the optimal block size."
        )
    return block_size, note
