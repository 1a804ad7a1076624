"""KV-cache and weight storage formats, held as data.

Every format is a block: `block_values` values stored in `block_bytes` bytes. Plain types are
blocks of one value (fp16: 1 value in 2 bytes); quantized formats carry their scales inside
the block (llama.cpp q8_0: 32 int8 values + one fp16 scale = 34 bytes per 32 values; int4 with a
per-group fp16 scale: 32 values x 4 bits + 2 bytes = 18 bytes per 32 values). Totals stay exact
integers because a row (one token's K or V for one head, `head_dim` values) is always a whole
number of blocks: `bytes_for(n) = n // block_values * block_bytes`, and a row that is not a whole
number of blocks is refused, as llama.cpp refuses it (ggml.c `ggml_row_size` asserts
`ne % blck_size == 0`).

Sources: llama.cpp `ggml/src/ggml-common.h` (block_q8_0, block_q4_0, block_q4_1, block_q5_0,
block_q5_1, block_iq4_nl) and `ggml/src/ggml.c` type_traits; PyTorch float8 dtypes for fp8
(e4m3fn, e5m2); KIVI (Liu et al. 2024, arXiv:2402.02750) for group-wise int4/int8 KV with scales.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, PlainSerializer, ValidationInfo

from kvcalc.errors import MESSAGE, OPTION, OPTION_SAYS, KvcalcError, UnknownNameError

# field types whose core schema is given ready-made: the table below is built at every start-up
from kvcalc.schema_types import OptInt, OptStr, PositiveInt


class StorageFormat(BaseModel):
    """A storage format: `block_values` values cost `block_bytes` bytes.

    `name` is the canonical name; `torch_dtype` is the torch dtype name the values are stored
    in by `kvcalc measure` (None for llama.cpp block formats, which torch does not have);
    `quant_group_size` and `scale_bytes` are set for group-quantized formats (values sharing
    one scale). `kind` says what the format may store: `both` (KV cache and weights), `weight`
    (weights only, e.g. MXFP4, which no engine offers for its KV cache) or `kv` (the cache only).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    block_values: PositiveInt
    block_bytes: PositiveInt
    description: str = ""
    torch_dtype: OptStr = None
    bits: PositiveInt
    quant_group_size: OptInt = None
    scale_bytes: int = 0
    kind: Literal["kv", "weight", "both"] = "both"

    # A format travels as this object below the request builder; where a name is wanted (a table,
    # JSON, a launch line) it is the name: `str(fmt)` and `f"{fmt}"` give it, a format equals its
    # canonical name (`fmt == "fp8_e4m3"`; an alias such as "fp8" is not looked up), and it hashes
    # as its name (names are unique: group options are part of them, `int4:g64:fp32`).
    def __str__(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.name == other
        return super().__eq__(other)

    def __hash__(self) -> int:
        return hash(self.name)

    # ordered by name, as the names were (a plan's rank keys end in its formats)
    def __lt__(self, other: object) -> bool:
        return self.name < _name_of(other)

    def __gt__(self, other: object) -> bool:
        return self.name > _name_of(other)

    def __le__(self, other: object) -> bool:
        return self.name <= _name_of(other)

    def __ge__(self, other: object) -> bool:
        return self.name >= _name_of(other)

    def bytes_for(self, n_values: int, *, what: str = "row", field: str | None = None) -> int:
        """Exact bytes that `n_values` values take: n_values // block_values * block_bytes.

        Raises `KvcalcError` when `n_values` is not a whole number of blocks; its `field` is
        `field` (the caller's: `k_dtype`, `v_dtype`, `weight_dtype`), its `value` this format.
        """
        if n_values % self.block_values:
            other = "weight format" if field == "weight_dtype" else "KV dtype"
            raise KvcalcError(
                f"{self.name} packs {self.block_values} values per block; a {what} of {n_values} "
                "values is not a whole number of blocks",
                fix=f"use another {other}",
                field=field,
                value=self.name,
                form=MESSAGE,
            )
        return n_values // self.block_values * self.block_bytes


def _name_of(other: object) -> str:
    if isinstance(other, StorageFormat):
        return other.name
    if isinstance(other, str):
        return other
    raise TypeError(f"a StorageFormat orders against a format or a name, not {type(other).__name__}")


def _plain(name: str, nbytes: int, torch_dtype: str, description: str) -> StorageFormat:
    return StorageFormat(
        name=name, block_values=1, block_bytes=nbytes, torch_dtype=torch_dtype, bits=8 * nbytes, description=description
    )


def _ggml(name: str, block_bytes: int, bits: int, description: str) -> StorageFormat:
    return StorageFormat(name=name, block_values=32, block_bytes=block_bytes, bits=bits, description=description)


def _kquant(name: str, block_bytes: int, bits: int, description: str) -> StorageFormat:
    return StorageFormat(
        name=name,
        block_values=256,
        block_bytes=block_bytes,
        bits=bits,
        kind="weight",
        description="llama.cpp " + description,
    )


#: canonical formats; group-quantized int formats are built by `kv_format` from these defaults.
STORAGE_FORMATS: dict[str, StorageFormat] = {
    f.name: f
    for f in [
        _plain("fp32", 4, "float32", "IEEE float32"),
        _plain("fp16", 2, "float16", "IEEE float16"),
        _plain("bf16", 2, "bfloat16", "bfloat16"),
        _plain("fp8_e4m3", 1, "float8_e4m3fn", "fp8 e4m3 (vLLM/SGLang 'fp8'); per-tensor scale outside the cache"),
        _plain("fp8_e5m2", 1, "float8_e5m2", "fp8 e5m2; per-tensor scale outside the cache"),
        _plain("int8", 1, "int8", "int8, one per-tensor scale outside the cache (add --group-size for group scales)"),
        StorageFormat(
            name="int4",
            block_values=32,
            block_bytes=18,
            bits=4,
            torch_dtype="uint8",
            quant_group_size=32,
            scale_bytes=2,
            description="int4 packed two per byte, one fp16 scale per group of 32",
        ),
        _ggml("q8_0", 34, 8, "llama.cpp block_q8_0: fp16 scale + 32 x int8 = 34 B / 32 values"),
        _ggml("q4_0", 18, 4, "llama.cpp block_q4_0: fp16 scale + 32 x 4 bit = 18 B / 32 values"),
        _ggml("q4_1", 20, 4, "llama.cpp block_q4_1: fp16 scale + fp16 min + 32 x 4 bit = 20 B / 32 values"),
        _ggml("q5_0", 22, 5, "llama.cpp block_q5_0: fp16 scale + 32 high bits + 32 x 4 bit = 22 B / 32 values"),
        _ggml("q5_1", 24, 5, "llama.cpp block_q5_1: fp16 scale + fp16 min + 32 high bits + 32 x 4 bit = 24 B / 32"),
        _ggml("iq4_nl", 18, 4, "llama.cpp block_iq4_nl: fp16 scale + 32 x 4 bit non-linear = 18 B / 32 values"),
        # llama.cpp's super-block weight types (256 values per block; `ggml/src/ggml-common.h` block_q2_K ...
        # block_iq4_xs, block_tq1_0, block_tq2_0): weights only, as llama.cpp offers none of them for its cache
        # (`--cache-type-k` takes f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1)
        _kquant("q2_k", 84, 2, "block_q2_K: 16 B scales + 64 B 2-bit quants + fp16 d, dmin = 84 B / 256 values"),
        _kquant("q3_k", 110, 3, "block_q3_K: 32 B high bits + 64 B 2-bit quants + 12 B scales + fp16 d = 110 B / 256"),
        _kquant("q4_k", 144, 4, "block_q4_K: fp16 d, dmin + 12 B scales + 128 B 4-bit quants = 144 B / 256 values"),
        _kquant("q5_k", 176, 5, "block_q5_K: fp16 d, dmin + 12 B scales + 32 B high bits + 128 B = 176 B / 256 values"),
        _kquant("q6_k", 210, 6, "block_q6_K: 128 B low 4 bits + 64 B high 2 bits + 16 B scales + fp16 d = 210 B / 256"),
        _kquant("iq1_s", 50, 1, "block_iq1_s: fp16 d + 32 B quants + 16 B high bits = 50 B / 256 values"),
        _kquant("iq1_m", 56, 1, "block_iq1_m: 32 B quants + 16 B high bits + 8 B scales = 56 B / 256 values"),
        _kquant("iq2_xxs", 66, 2, "block_iq2_xxs: fp16 d + 64 B grid indices and signs = 66 B / 256 values"),
        _kquant("iq2_xs", 74, 2, "block_iq2_xs: fp16 d + 64 B quants + 8 B scales = 74 B / 256 values"),
        _kquant("iq2_s", 82, 2, "block_iq2_s: fp16 d + 64 B quants + 8 B high bits + 8 B scales = 82 B / 256 values"),
        _kquant("iq3_xxs", 98, 3, "block_iq3_xxs: fp16 d + 96 B quants, signs and scales = 98 B / 256 values"),
        _kquant(
            "iq3_s", 110, 3, "block_iq3_s: fp16 d + 64 + 8 + 32 B quants, high bits, signs + 4 B scales = 110 B / 256"
        ),
        _kquant(
            "iq4_xs", 136, 4, "block_iq4_xs: fp16 d + 2 + 4 B scales + 128 B 4-bit non-linear = 136 B / 256 values"
        ),
        _kquant("tq1_0", 54, 1, "block_tq1_0: 48 + 4 B ternary digits + fp16 d = 54 B / 256 values"),
        _kquant("tq2_0", 66, 2, "block_tq2_0: 64 B 2-bit ternary + fp16 d = 66 B / 256 values"),
        # OCP Microscaling Formats (MX) v1.0 spec, section 5: MXFP4 = 32 e2m1 values (4 bit) sharing one
        # e8m0 scale (8 bit): 16 + 1 = 17 B / 32 values; gpt-oss ships its MoE experts so (model card)
        StorageFormat(
            name="mxfp4",
            block_values=32,
            block_bytes=17,
            bits=4,
            quant_group_size=32,
            scale_bytes=1,
            kind="weight",
            description="OCP MXFP4 weights: 32 x e2m1 (4 bit) + one e8m0 scale = 17 B / 32 values",
        ),
        # bitsandbytes 4-bit (`BitsAndBytesConfig(load_in_4bit=True)`; bitsandbytes `functional.quantize_4bit`,
        # blocksize 64): 64 values packed two per byte + one fp32 absmax = 32 + 4 = 36 B / 64 values (nf4 and
        # bnb's fp4 cost the same). With double quantization (`bnb_4bit_use_double_quant`) the absmax is
        # itself stored as uint8 in blocks of 256 with one fp32 scale each: 256 x 64 = 16,384 values cost
        # 8,192 + 256 + 4 = 8,452 B. Per-tensor extras (the 16-entry quant_map, the quant_state) are not counted.
        StorageFormat(
            name="nf4",
            block_values=64,
            block_bytes=36,
            bits=4,
            quant_group_size=64,
            scale_bytes=4,
            kind="weight",
            description="bitsandbytes nf4 weights: 64 x 4 bit + one fp32 absmax = 36 B / 64 values",
        ),
        # NVFP4 (NVIDIA Blackwell; compressed-tensors `nvfp4-pack-quantized`, ModelOpt `NVFP4`): 16 e2m1 values
        # (4 bit) share one fp8 e4m3 scale: 8 + 1 = 9 B / 16 values (one fp32 global scale per tensor not counted).
        # Also a KV-cache format: vLLM 0.33 `--kv-cache-dtype nvfp4` (`vllm/utils/torch_utils.py`
        # nvfp4_kv_cache_full_dim: a K or V head row is head_dim / 2 + head_dim / 16 B) and SGLang 0.5.23's
        # (`fp4_kv_cache_quant_method.py` NVFP4KVCacheMethod); `kvcalc.engine_dtypes` has the engines' rules.
        StorageFormat(
            name="nvfp4",
            block_values=16,
            block_bytes=9,
            bits=4,
            quant_group_size=16,
            scale_bytes=1,
            kind="both",
            description="NVFP4: 16 x e2m1 (4 bit) + one fp8 e4m3 scale = 9 B / 16 values",
        ),
        # SGLang 0.5.23 `--kv-cache-dtype fp4_mx_block16` (FP4MXBlock16KVCacheMethod): e2m1 values with one
        # 1-byte scale per 16 (not OCP MXFP4, whose block is 32): 8 + 1 = 9 B / 16 values; a cache format only
        StorageFormat(
            name="fp4_mx_block16",
            block_values=16,
            block_bytes=9,
            bits=4,
            quant_group_size=16,
            scale_bytes=1,
            kind="kv",
            description="SGLang fp4_mx_block16 KV: 16 x e2m1 (4 bit) + one 1-byte scale = 9 B / 16 values",
        ),
        # OCP Microscaling Formats (MX) v1.0, section 5: MXFP8 = 32 fp8 (e4m3) values sharing one e8m0 scale:
        # 32 + 1 = 33 B / 32 values. Weights (vLLM `--quantization mxfp8`, ModelOpt MXFP8) and SGLang 0.5.23's
        # `--kv-cache-dtype mxfp8` (pool_configurator.py: cell += values / 32 scale bytes; FA4 on SM100+)
        StorageFormat(
            name="mxfp8",
            block_values=32,
            block_bytes=33,
            bits=8,
            quant_group_size=32,
            scale_bytes=1,
            kind="both",
            description="OCP MXFP8: 32 x fp8 e4m3 + one e8m0 scale = 33 B / 32 values",
        ),
        StorageFormat(
            name="nf4_dq",
            block_values=16384,
            block_bytes=8452,
            bits=4,
            quant_group_size=64,
            scale_bytes=1,
            kind="weight",
            description="bitsandbytes nf4, double-quantized absmax: 8,192 + 256 x 1 + 4 = 8,452 B / 16,384 values",
        ),
    ]
}

#: other spellings, including llama.cpp's type names (f32, f16) and torch's.
ALIASES: dict[str, str] = {
    "float32": "fp32",
    "f32": "fp32",
    "float": "fp32",
    "float16": "fp16",
    "f16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "fp8": "fp8_e4m3",
    "fp8e4m3": "fp8_e4m3",
    "e4m3": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",
    "fp8_e4m3fn": "fp8_e4m3",
    "fp8e5m2": "fp8_e5m2",
    "e5m2": "fp8_e5m2",
    "float8_e5m2": "fp8_e5m2",
    "uint4": "int4",
    "bnb_nf4": "nf4",
    "bnb_4bit": "nf4",
}

#: llama.cpp file types (`llama.h` llama_ftype, llama-quantize's names, lower case) that mix several
#: tensor types, chosen per tensor (`src/llama-quant.cpp` llama_tensor_get_type): a property of a GGUF
#: file, not a format; each maps to the per-tensor type it is named for, for the did-you-mean.
GGUF_FILE_TYPE_MIXES: dict[str, str] = {
    "q2_k_s": "q2_k",
    "q3_k_s": "q3_k",
    "q3_k_m": "q3_k",
    "q3_k_l": "q3_k",
    "q4_k_s": "q4_k",
    "q4_k_m": "q4_k",
    "q5_k_s": "q5_k",
    "q5_k_m": "q5_k",
    "iq2_m": "iq2_s",
    "iq3_xs": "iq3_s",
    "iq3_m": "iq3_s",
    "mxfp4_moe": "mxfp4",
}

#: the engines' `--quantization` methods that name no one format (vLLM
#: `vllm/model_executor/layers/quantization/__init__.py` QuantizationMethods, SGLang
#: `server_args.py` QUANTIZATION_CHOICES): the bits and group size are the checkpoint's
#: (its `quantization_config`), so a weight format is asked for instead, with the usual one.
#: `--quantization fp8` (and mxfp4, nvfp4) name a format and resolve as one.
QUANTIZATION_METHODS: dict[str, str] = {
    "awq": "int4:g128 (AWQ stores 4-bit weights, in groups of 128 in most checkpoints)",
    "awq_marlin": "int4:g128 (AWQ stores 4-bit weights, in groups of 128 in most checkpoints)",
    "gptq": "int4:g128 or int8 (GPTQ's bits and group are the checkpoint's)",
    "gptq_marlin": "int4:g128 or int8 (GPTQ's bits and group are the checkpoint's)",
    "marlin": "int4:g128 (Marlin kernels run 4-bit weights)",
    "bitsandbytes": "nf4 or int8 (the checkpoint's bitsandbytes mode)",
    "compressed_tensors": "fp8, int8 or int4:g128 (the checkpoint's scheme)",
    "modelopt": "fp8 (ModelOpt's FP8 checkpoints)",
    "modelopt_fp4": "nvfp4",
    "gguf": "q8_0 or q4_k (the GGUF's type; or give the .gguf file as the model)",
}

#: scale dtypes a group-quantized int format may use, with their bytes. `e8m0` (a power-of-two
#: exponent in one byte, torch.float8_e8m0fnu; the OCP MX scale) is a scale type only, never a
#: value format: DeepSeek-V4's fp8 block scales (vLLM 0.33.0 `models/deepseek_v4/quant_config.py`
#: `is_scale_e8m0`: "FP4 checkpoints store FP8 linear scales as e8m0fnu").
SCALE_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8_e4m3": 1, "e8m0": 1}

#: spellings of the scale-only type `e8m0` (DeepSeek's config writes `scale_fmt: ue8m0`)
SCALE_ALIASES: dict[str, str] = {"ue8m0": "e8m0", "fp8_e8m0": "e8m0", "float8_e8m0fnu": "e8m0", "e8m0fnu": "e8m0"}


def _scale_name(scale_dtype: str, field: str | None) -> str:
    """The canonical name of a scale dtype: `e8m0` and its spellings (`SCALE_ALIASES`), else a
    format name (`canonical_name`, which raises `UnknownNameError` naming `field`)."""
    key = _scale_key(scale_dtype)
    key = SCALE_ALIASES.get(key, key)
    return key if key == "e8m0" else canonical_name(scale_dtype, field=field)


class FileTypeMixError(KvcalcError):
    """A llama.cpp file type given as a format (`q4_K_M`: a mix of tensor types llama-quantize
    picks per tensor, `GGUF_FILE_TYPE_MIXES`): `name` as given, `near` the one type it is named
    for (`q4_k`), `field` the caller's (`weight_dtype`). The fix depends on the model: `on_gguf`
    words it for a model that is itself a GGUF file (its tensors are already counted as stored)."""

    def __init__(self, name: str, near: str, *, field: str | None = None, gguf_path: str | None = None) -> None:
        self.name, self.near, self.gguf_path = name, near, gguf_path
        if gguf_path is None:
            msg = (
                f"'{name}' is a llama.cpp file type, a mix of types llama-quantize picks per tensor, so a "
                f"property of a GGUF file rather than one format: give the .gguf file as the model to count "
                f"its tensors as stored, or did you mean {near} (every matrix in {near.upper()})?"
            )
        else:
            from kvcalc.errors import flag

            option = flag(field) if field else "--weight-dtype"
            msg = (
                f"'{name}' is a llama.cpp file type, not one format, and the model {gguf_path} is a GGUF file "
                f"whose tensors are already counted as stored: drop {option}, or give one format to count "
                f"the architecture in it instead (did you mean {near}, every matrix in {near.upper()}?)"
            )
        super().__init__(msg, field=field, value=name)

    def on_gguf(self, path: str) -> FileTypeMixError:
        """The same error for a model read from the GGUF file `path`."""
        return FileTypeMixError(self.name, self.near, field=self.field, gguf_path=path)


def canonical_name(name: str, *, field: str | None = None, kinds: tuple[str, ...] = ("kv", "weight", "both")) -> str:
    """The canonical format name for `name` (case-insensitive, aliases resolved).

    Raises `UnknownNameError` with close matches (its `field` is `field`), suggesting only
    formats of `kinds` (a KV dtype is never offered a weight-only format).
    """
    key = name.strip().lower().replace("-", "_")
    key = ALIASES.get(key, key)
    if key not in STORAGE_FORMATS and key in GGUF_FILE_TYPE_MIXES:
        near = GGUF_FILE_TYPE_MIXES[key]
        raise FileTypeMixError(name, near, field=field)
    if key not in STORAGE_FORMATS and key in QUANTIZATION_METHODS and "weight" in kinds:
        raise KvcalcError(
            f"'{name}' is a quantization method (vLLM / SGLang --quantization), not one format: "
            f"its bits come from the checkpoint; give the weight format, e.g. {QUANTIZATION_METHODS[key]}",
            field=field,
            value=name,
        )
    if key not in STORAGE_FORMATS:
        names = [n for n, f in STORAGE_FORMATS.items() if f.kind in kinds]
        names += [a for a, n in ALIASES.items() if STORAGE_FORMATS[n].kind in kinds]
        raise UnknownNameError("dtype", name, names, field=field)
    return key


def storage_format(
    name: str | StorageFormat,
    quant_group_size: int | None = None,
    scale_dtype: str | None = None,
    *,
    field: str | None = None,
    kinds: tuple[str, ...] = ("kv", "weight", "both"),
) -> StorageFormat:
    """Resolve a format name to a `StorageFormat`, whatever it may store (see `kv_format` and
    `weight_format` for the checked lookups).

    `name` may carry group options as `int4:g64` or `int4:g64:fp32` (group size, scale dtype).
    `quant_group_size` and `scale_dtype` apply to `int8` and `int4` only: int8 with group size G and
    a scale of S bytes costs G + S bytes per G values; int4 costs G/2 + S. Plain int8 has no
    group scales; int4 defaults to groups of 32 with an fp16 scale (18 B per 32 values).

    Raises `UnknownNameError` for an unknown name and `KvcalcError` for bad group options, each
    with `field` (the caller's: `kv_dtype`, `weight_dtype`) and `value` `name`.
    """
    if isinstance(name, StorageFormat):
        return name
    parts = name.split(":")
    base = canonical_name(parts[0], field=field, kinds=kinds)
    named_group: int | None = None
    named_scale: str | None = None
    named_block: int | None = None
    zero_point = False
    for extra in parts[1:]:
        e = extra.strip().lower()
        if e == "zp":
            zero_point = True
            continue
        if e.startswith("b") and e[1:].isdigit():
            named_block = int(e[1:])
            continue
        if e.startswith("g") and e[1:].lstrip("-").isdigit():
            if named_group is not None:  # `int4:g64:g128`: which one was meant?
                raise KvcalcError(
                    f"'{name}' names two group sizes (g{named_group} and {e}); give one",
                    field=field,
                    value=name,
                    form=MESSAGE,
                )
            named_group = int(e[1:])
        elif e.startswith("g") and e not in ALIASES and e not in STORAGE_FORMATS:
            raise KvcalcError(
                f"'{name}': group option '{extra}' is not a group size; write e.g. {parts[0]}:g64",
                field=field,
                value=name,
                form=MESSAGE,
            )
        elif e:
            if named_scale is not None:  # `int8:fp16:fp32`
                raise KvcalcError(
                    f"'{name}' names two scale dtypes ({named_scale} and {e}); give one",
                    field=field,
                    value=name,
                    form=MESSAGE,
                )
            named_scale = e
    # the separate options (--quant-group-size, --scale-dtype) the error lines name when the name did not carry them
    given = [
        o
        for o, v, named in (
            ("--quant-group-size", quant_group_size, named_group),
            ("--scale-dtype", scale_dtype, named_scale),
        )
        if v is not None and named is None
    ]
    # a name's options and the separate ones (--quant-group-size, --scale-dtype) must agree
    if named_group is not None:
        if quant_group_size is not None and quant_group_size != named_group:
            raise KvcalcError(
                f"'{name}' says group size {named_group} but --quant-group-size says {quant_group_size}; give one",
                field=field,
                value=name,
                form=MESSAGE,
            )
        quant_group_size = named_group
    if named_scale is not None:
        if scale_dtype is not None and _scale_key(scale_dtype) != _scale_key(named_scale):
            raise KvcalcError(
                f"'{name}' says scale dtype {named_scale} but --scale-dtype says {scale_dtype}; give one",
                field=field,
                value=name,
                form=MESSAGE,
            )
        scale_dtype = named_scale
    # an unknown scale dtype is the --scale-dtype option's unless the name itself carried it
    scale_field = field if named_scale is not None else "scale_dtype"
    if quant_group_size is not None:
        from kvcalc.units import BOUNDS

        b = BOUNDS["quant_group_size"]
        if quant_group_size > b.high:
            raise KvcalcError(
                f"'{name}': group size {quant_group_size:,} is {b.why} (at most {b.high:,} {b.unit})",
                field=field,
                value=name,
                form=MESSAGE,
            )
    fmt = STORAGE_FORMATS[base]
    if quant_group_size is None and scale_dtype is None and named_block is None and not zero_point:
        return fmt
    if base in ("fp8_e4m3", "fp8_e5m2"):
        return _fp8_scaled(name, fmt, quant_group_size, named_block, scale_dtype, zero_point, field, scale_field)
    if named_block is not None:
        raise KvcalcError(
            f"'{name}': square scale blocks (b{named_block}) apply to fp8 weights only",
            field=field,
            value=name,
            form=MESSAGE,
        )
    if base not in ("int8", "int4"):
        raise _group_options_refused(name, base, given, field, kinds)
    g = quant_group_size if quant_group_size is not None else (fmt.quant_group_size or 32)
    if g <= 0 or (base == "int4" and g % 2):
        words = f"must be a positive{' even' if base == 'int4' else ''} integer{' for int4' if g > 0 else ''}, got {g}"
        if named_group is None:  # --quant-group-size 0
            raise KvcalcError(words, option="--quant-group-size", field="quant_group_size", value=g, form=OPTION_SAYS)
        raise KvcalcError(f"'{name}': the group size {words}", field=field, value=name, form=MESSAGE)
    s_name = _scale_name(scale_dtype, scale_field) if scale_dtype else "fp16"
    if s_name not in SCALE_BYTES:
        raise UnknownNameError("scale dtype", scale_dtype or "", SCALE_BYTES, field=scale_field)
    s = SCALE_BYTES[s_name]
    value_bytes = g if base == "int8" else g // 2
    label = f"{base}:g{g}:{s_name}"
    if zero_point:
        # AWQ / GPTQ (vLLM `awq.py` / `gptq.py` create_weights): per group one scale (`scales`) and one
        # zero point of the value's bits, packed eight 4-bit (four 8-bit) to an int32 (`qzeros`):
        # int4 g128 fp16 = 64 + 2 + 0.5 B per 128 values, i.e. 133 B per two groups
        n_groups = 2 if base == "int4" else 1
        block_bytes = n_groups * (value_bytes + s) + n_groups * fmt.bits // 8
        return StorageFormat(
            name=label + ":zp",
            block_values=n_groups * g,
            block_bytes=block_bytes,
            bits=fmt.bits,
            quant_group_size=g,
            scale_bytes=s,
            kind="weight",
            description=f"{base}, one {s_name} scale and one {fmt.bits}-bit zero point per group of "
            f"{g}: {block_bytes} B / {n_groups * g} values",
        )
    return StorageFormat(
        name=label,
        block_values=g,
        block_bytes=value_bytes + s,
        bits=fmt.bits,
        torch_dtype=fmt.torch_dtype,
        quant_group_size=g,
        scale_bytes=s,
        description=f"{base}, one {s_name} scale per group of {g}: {value_bytes + s} B / {g} values",
    )


def _group_options_refused(
    name: str, base: str, given: list[str], field: str | None, kinds: tuple[str, ...]
) -> KvcalcError:
    """The error for group options on a format without group scales (`--quant-group-size 64`
    with the model's bf16): names the options given (or the name that carried them), the format
    and the fix, the dtype flag set to int8 or int4 (`--kv-dtype int4`; `--k-dtype` when the
    K side was named; with no flag the model's own dtype was used)."""
    from kvcalc.errors import flag

    dtype_flag = flag(field) if field else ("--kv-dtype" if "kv" in kinds else "--weight-dtype")
    what = " and ".join(given) if given else f"'{name}': group options"
    verb = "applies" if len(given) == 1 else "apply"
    source = f"{base} (the model's dtype)" if field is None else base
    return KvcalcError(
        f"{what} {verb} to int8 and int4 only, not {source}; give {dtype_flag} int8 or {dtype_flag} int4",
        field=field,
        value=name,
        form=MESSAGE,
    )


def _fp8_scaled(
    name: str,
    fmt: StorageFormat,
    group: int | None,
    block: int | None,
    scale_dtype: str | None,
    zero_point: bool,
    field: str | None,
    scale_field: str | None = None,
) -> StorageFormat:
    """fp8 weights with a scale per group of `group` values (`fp8_e4m3:g128`) or per square
    block of `block` x `block` values (`fp8_e4m3:b128`, DeepSeek-V3's `weight_block_size:
    [128, 128]`), the scale fp32 unless named. vLLM `quantization/fp8.py` `Fp8LinearMethod.
    create_weights`: `weight_scale_inv` of shape (ceil(out / 128), ceil(in / 128)), float32.
    A block counts block^2 values: exact for a matrix whose both sizes are multiples of the
    block (a partial block still costs a whole scale, which a count over values cannot see).

    Raises `KvcalcError` for both options, a zero point, or a size out of range."""
    if zero_point or (group is not None and block is not None):
        raise KvcalcError(
            f"'{name}': fp8 takes either a group (g128) or a square block (b128) of scales, without a zero point",
            field=field,
            value=name,
            form=MESSAGE,
        )
    from kvcalc.units import BOUNDS

    size = group if group is not None else block
    if size is None or size <= 0 or (block is not None and block * block > BOUNDS["quant_group_size"].high):
        raise KvcalcError(
            f"'{name}': give the scale group (g128) or block (b128) of fp8 weights",
            field=field,
            value=name,
            form=MESSAGE,
        )
    s_name = _scale_name(scale_dtype, scale_field) if scale_dtype else "fp32"
    if s_name not in SCALE_BYTES:
        raise UnknownNameError("scale dtype", scale_dtype or "", SCALE_BYTES, field=scale_field)
    s = SCALE_BYTES[s_name]
    values = size if group is not None else size * size
    shape = f"g{size}" if group is not None else f"b{size}"
    return StorageFormat(
        name=f"{fmt.name}:{shape}:{s_name}",
        block_values=values,
        block_bytes=values + s,
        bits=8,
        torch_dtype=fmt.torch_dtype,
        quant_group_size=values,
        scale_bytes=s,
        kind="weight",
        description=f"{fmt.name}, one {s_name} scale per "
        f"{'group of ' + str(size) if group is not None else f'{size} x {size} block'}: "
        f"{values + s} B / {values} values",
    )


def _scale_key(name: str) -> str:
    """A scale dtype name compared loosely (`float16` and `fp16` agree); unknown names as typed."""
    key = name.strip().lower().replace("-", "_")
    return ALIASES.get(key, key)


def refuse_unused_kv_dtype(
    kv_dtype: str | None, k_dtype: str | StorageFormat | None, v_dtype: str | StorageFormat | None
) -> None:
    """Raise `KvcalcError` (field `kv_dtype`) when `kv_dtype` (K and V's format; None or 'auto':
    not given) is given beside both `k_dtype` and `v_dtype`: it would set neither side and be
    ignored (`--kv-dtype fp8 -ctk fp16 -ctv fp16`), so which one was meant is not guessed.
    One side given (`--kv-dtype fp8 -ctk fp16`: K fp16, V fp8) is a real choice and passes."""
    if kv_dtype is None or k_dtype is None or v_dtype is None or str(kv_dtype).strip().lower() == "auto":
        return
    k_dtype = k_dtype.name if isinstance(k_dtype, StorageFormat) else k_dtype
    v_dtype = v_dtype.name if isinstance(v_dtype, StorageFormat) else v_dtype
    raise KvcalcError(
        f"--k-dtype (-ctk) {k_dtype} and --v-dtype (-ctv) {v_dtype} set both K and V, so it would "
        "be ignored; give --kv-dtype alone, or --k-dtype and --v-dtype",
        field="kv_dtype",
        value=kv_dtype,
    )


def kv_format(
    name: str | StorageFormat,
    quant_group_size: int | None = None,
    scale_dtype: str | None = None,
    *,
    field: str | None = "kv_dtype",
) -> StorageFormat:
    """`storage_format` for a KV cache: also raises `KvcalcError` for a weight-only format
    (MXFP4: an OCP microscaling weight format that vLLM, SGLang and llama.cpp do not offer as a
    cache type). Every error names `field` (`kv_dtype`, or `k_dtype` / `v_dtype`). Group options
    given beside an fp8 cache type (`--kv-dtype fp8 --quant-group-size 64`) are refused as for
    bf16: a cache keeps group scales only in int8 and int4 (fp8 with group scales is a weight
    format)."""
    if isinstance(name, str) and (quant_group_size is not None or scale_dtype is not None):
        base = canonical_name(name.split(":")[0], field=field, kinds=("kv", "both"))
        if base.startswith("fp8"):  # fp8 with group scales exists only as a weight format (`_fp8_scaled`)
            given = [
                o
                for o, v in (("--quant-group-size", quant_group_size), ("--scale-dtype", scale_dtype))
                if v is not None
            ]
            raise _group_options_refused(name, base, given, field, ("kv",))
    try:
        fmt = storage_format(name, quant_group_size, scale_dtype, field=field, kinds=("kv", "both"))
    except UnknownNameError:
        from kvcalc.engine_dtypes import VLLM_033_CACHE_DTYPES

        if isinstance(name, str) and name.strip().lower() in VLLM_033_CACHE_DTYPES:  # not "unknown": vLLM's own
            raise KvcalcError(
                f"'{name}' is a vLLM 0.33 --kv-cache-dtype, sized by vLLM's rules only",
                fix="use it with --engine vllm (`kvcalc estimate`, `capacity`, `plan`, `sweep --gpu`)",
                field=field,
                value=name,
                form=OPTION,
            ) from None
        raise
    if fmt.kind == "weight":
        raise KvcalcError(
            f"{fmt.name} is a weight format, not a KV-cache format; for the cache use one of "
            f"{', '.join(n for n, f in STORAGE_FORMATS.items() if f.kind != 'weight')}",
            field=field,
            value=fmt.name,
            form=MESSAGE,
        )
    return fmt


def weight_format(
    name: str | StorageFormat,
    quant_group_size: int | None = None,
    scale_dtype: str | None = None,
    *,
    field: str | None = "weight_dtype",
) -> StorageFormat:
    """`storage_format` for weights: also raises `KvcalcError` for a KV-only format. Every
    error names `field` (`weight_dtype`)."""
    fmt = storage_format(name, quant_group_size, scale_dtype, field=field, kinds=("weight", "both"))
    if fmt.kind == "kv":
        raise KvcalcError(
            f"{fmt.name} is a KV-cache format, not a weight format", field=field, value=fmt.name, form=MESSAGE
        )
    return fmt


def _looked_up(value: object, info: ValidationInfo) -> object:
    """A format field's value: a `StorageFormat` as it is; a name (the Python API's text, a
    test's) looked up here, once, its errors naming the field (`k_dtype`, `v_dtype`)."""
    return storage_format(value, field=info.field_name) if isinstance(value, str) else value


def _format_name(fmt: StorageFormat) -> str:
    return fmt.name


#: a format field of a pydantic model (`schema.Workload`): the `StorageFormat` itself, so the
#: layers below the request builder never parse a name again; a name given as text is looked up
#: at construction, and a dump writes the name.
FormatField = Annotated[StorageFormat, BeforeValidator(_looked_up), PlainSerializer(_format_name, return_type=str)]
