"""GGUF files as model input: the architecture from the metadata, the exact weight bytes from the
tensor table. `model_from_gguf(path)` is the entry point (`kvcalc.load.models.load_model` calls it
for a `.gguf` path).

Only the header is read: the magic, the metadata key/value pairs and the tensor infos (name, ggml
type, shape, offset), never the tensor data. The file is memory-mapped and parsed front to back
with `struct`, touching only the header's pages. The `gguf` package (ggml-org's own Python
library, `pip install 'kvcalc[gguf]'`) supplies the format's tables: `GGUFValueType`,
`GGMLQuantizationType`, `GGML_QUANT_SIZES` ((values per block, bytes per block) of each ggml
type) and `LlamaFileType`. Its `GGUFReader` is not used: it builds a numpy view for every
element of every array (7 s for a 152k-token vocabulary on the build machine) and reshapes each
tensor's data, so it needs the data present.

Format (`gguf-py/gguf/constants.py`, llama.cpp `ggml/src/gguf.cpp`): "GGUF", a uint32 version
(2 or 3; a file written on the other byte order reads as a version whose low 16 bits are 0),
uint64 tensor count, uint64 key/value count; each key a string (uint64 length + UTF-8), a uint32
value type and the value (arrays: uint32 element type, uint64 count, elements); each tensor info
a name, a uint32 dimension count (at most 4), that many uint64 dimensions (ne[0], the row, first),
a uint32 ggml type and a uint64 offset from the data section, which starts at the next multiple
of `general.alignment` (default 32) after the infos. A tensor of N values of a type with (B, S)
holds N / B x S bytes (ne[0] is a whole number of blocks: ggml `ggml_row_size`).

The architecture is read as llama.cpp's `llama_model::load_hparams` (`src/llama-model.cpp`)
reads it: `{arch}.block_count`, `.embedding_length`, `.attention.head_count` and `.head_count_kv`
(a number or a per-layer array; 0 marks a layer without attention, as in Jamba), `.attention.
key_length` / `.value_length` (default embedding_length / head_count), `.context_length`,
`.feed_forward_length`, `.expert_count`, `.expert_used_count`, `.expert_feed_forward_length`,
`.vocab_size` (else the length of `tokenizer.ggml.tokens`). Which layers slide is llama.cpp's
per-architecture rule (`hparams.set_swa_pattern(n)`: layer il slides when il % n < n - 1), which
`.attention.sliding_window_pattern` overrides (a period, or a per-layer array of booleans):

- gemma2: period 2, window `.attention.sliding_window` (default 4096); gemma3: period 6;
  cohere2: period 4; gpt-oss: period 2; olmo2: period 4 when the file gives a window > 0;
- llama4: chunked attention over 8192 tokens on 3 of every 4 layers (the window is hard-coded;
  a file whose sliding_window is 0 has none), sized by llama.cpp's SWA cache like a window;
- phi3: llama.cpp disables Phi's sliding window ("Phi SWA is currently disabled"), so every layer
  is full; llama, qwen2, qwen3, starcoder2, mistral3 ... have no sliding layers in llama.cpp.

deepseek2 (MLA): `.attention.kv_lora_rank`, `.rope.dimension_count` (the RoPE part of the key),
`.attention.q_lora_rank` (absent in V2-Lite). Files converted since llama.cpp PR #12801 (April
2025) carry `.attention.key_length_mla` / `.value_length_mla` (the per-head sizes) and cache the
latent: key_length = kv_lora_rank + rope, one KV head (`src/models/deepseek2.cpp`, is_mla). Older
files lack them: llama.cpp then runs MHA and caches K of head_count x key_length and V of
head_count x value_length per token and layer; the ModelSpec is still MLA (the model's
architecture, what vLLM and SGLang cache), and a `KvcalcWarning` says that llama.cpp's own cache
for that file is larger.

Jamba (`jamba`): layers whose head_count_kv is 0 are Mamba-1 layers, sized by `.ssm.state_size`,
`.ssm.conv_kernel`, `.ssm.inner_size` (= expand x embedding_length) and `.ssm.time_step_rank`.
Falcon-H1 (`falcon-h1`): every layer attends and runs a Mamba-2 mixer (kind `hybrid`), sized by
`.ssm.inner_size` (d_inner), `.ssm.time_step_rank` (the Mamba-2 heads, as llama.cpp reads it),
`.ssm.group_count`, `.ssm.state_size` and `.ssm.conv_kernel`. The Mamba-2 hybrids Nemotron-H
(`nemotron_h`) and Granite-4.0-H (`granitehybrid`) have the same Mamba-2 keys and a per-layer
`.attention.head_count_kv` (the converter, `conversion/granite.py` `GraniteHybridModel`, writes
0 on every layer without attention). llama.cpp's layer rules (`src/models/granite-hybrid.cpp`,
`src/models/nemotron-h.cpp` load_arch_hparams; `llama_model::create_memory` filter_attn /
filter_recr): granitehybrid: a layer is Mamba-2 (recurrent) iff head_count_kv is 0, else
attention; nemotron_h: recurrent iff head_count_kv and the per-layer `.feed_forward_length` are
both 0, attention iff head_count_kv > 0 and feed_forward_length 0, and a layer with a
feed_forward_length (the "-" MLP layers) is in neither cache (kind `mlp`). Both converters write
context_length 2^20 (1,048,576: no RoPE) whatever the config's max_position_embeddings, so a GGUF's
`-c 0` is that. Nemotron-3 (`nemotron_h_moe`: MoE layers, an MTP block appended) is read by the same
rule and gives model_type nemotron_h. A file's last `.nextn_predict_layers` blocks are NextN / MTP
blocks (llama.cpp `llama_hparams::n_layer()` = block_count - nextn): they are `n_mtp_layers`, not
model layers, and a per-layer array of block_count entries is read for the model's layers.

The 2026 architectures (gemma4, mimo2, deepseek32, glm-dsa, deepseek4, kimi-k3, minimax-m3,
qwen35, qwen35moe) are read by `kvcalc.load.gguf_2026` into the ModelSpec their config.json gives
(per-layer heads and head sizes, SWA pattern, MLA, indexer, compress ratios, shared KV, KDA and
Gated-DeltaNet state), with the config's model_type.

Other Mamba-2 models (`.ssm.group_count`: mamba2 ...), pure
state-space models and architectures with per-layer head counts that differ between attention
layers (OpenELM) are refused in one line: kvcalc has no model of them yet.

Weights (`ModelSpec.checkpoint`): every tensor's bytes from its type and shape; `blk.{i}.` ->
layer i, of which `*_exps` tensors (ffn_gate_exps, ffn_up_exps, ffn_down_exps, ffn_gate_up_exps
and their biases) are the routed experts; `token_embd*` -> embedding; `output`, `output_norm` ->
head; the rest (rope_freqs, layers past block_count) -> other. The file type
(`general.file_type`) is named as llama.cpp's `llama_ftype` and llama-quantize name it (Q4_K_M,
Q8_0, BF16). Routed-expert placement (first dense layers, period) comes from which layers hold
`_exps` tensors. No output tensor means the head is tied to the embedding.
"""

from __future__ import annotations

import mmap
import stat
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar, Union, cast, overload

from kvcalc.errors import ConfigError, KvcalcWarning, MissingExtraError
from kvcalc.load.fields import ModelFields
from kvcalc.load.files import stat_path
from kvcalc.load.gguf_2026 import MODEL_TYPES as MODEL_TYPES_2026
from kvcalc.load.gguf_2026 import fields_2026
from kvcalc.load.hf.reader import compact_layers
from kvcalc.schema import ModelSpec
from kvcalc.text import excerpt

if TYPE_CHECKING:
    pass

#: at most this many dimensions per tensor (ggml GGML_MAX_DIMS).
MAX_DIMS = 4
#: the most layers a file may give (as `kvcalc.schema`'s LayerCount).
MAX_LAYERS = 100_000
#: the largest count a metadata number may be (as `kvcalc.schema`'s Count).
MAX_INT = 2**40
#: the most values one tensor may hold (ggml's int64 element count).
MAX_TENSOR_VALUES = 2**62


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table: `name`, its ggml type (`GGMLQuantizationType` value),
    `shape` in ggml order (ne[0], the row, first), `n_values` and `n_bytes` (values / block
    values x block bytes, `GGML_QUANT_SIZES`), `type_name` (`Q4_K`, `F32`, ...)."""

    name: str
    ggml_type: int
    type_name: str
    shape: tuple[int, ...]
    offset: int
    n_values: int
    n_bytes: int


@dataclass(frozen=True)
class StringArray:
    """A metadata array of strings, held as its length only (the vocabulary is not needed)."""

    count: int


#: one metadata value as the header holds it: a number, a string, an array of numbers, or an
#: array of strings held as its length
GgufValue = Union[int, float, bool, str, tuple[Union[int, float, bool], ...], StringArray]


@dataclass(frozen=True)
class GgufHeader:
    """What a GGUF file's header holds: `version`, `metadata` (key -> int, float, bool, str,
    tuple of numbers, or `StringArray`), the tensor table, where the data starts, the file size."""

    path: str
    version: int
    metadata: dict[str, GgufValue]
    tensors: tuple[TensorInfo, ...]
    data_offset: int
    file_bytes: int


def _gguf():
    """The `gguf` package's constants module; `MissingExtraError` when it is not installed."""
    try:
        from gguf import constants
    except ImportError:
        raise MissingExtraError("the gguf package to read .gguf files", "gguf") from None
    return constants


class _Cursor:
    """Reads the header's fields from the mapped file, each bounds-checked: a field that runs
    past the end is a truncated file, a count that cannot fit in the bytes left a corrupt one."""

    def __init__(self, buf: mmap.mmap | bytes, path: str, order: str) -> None:
        self.buf, self.path, self.order, self.pos, self.size = buf, path, order, 0, len(buf)

    def fail(self, what: str) -> ConfigError:
        return ConfigError(f"not a readable GGUF file: {what} (at byte {self.pos:,} of {self.size:,})", path=self.path)

    def take(self, fmt: str) -> tuple:
        n = struct.calcsize(fmt)
        if self.pos + n > self.size:
            raise self.fail("the header is truncated")
        out = struct.unpack_from(self.order + fmt, self.buf, self.pos)
        self.pos += n
        return out

    def u32(self) -> int:
        return self.take("I")[0]

    def u64(self) -> int:
        return self.take("Q")[0]

    def count(self, what: str, min_bytes: int) -> int:
        """A uint64 count of items of at least `min_bytes` each, refused when they cannot fit."""
        n = self.u64()
        if n * min_bytes > self.size - self.pos:
            raise self.fail(
                f"the header is truncated or corrupt: the {what} is {n:,}, more than the "
                f"{self.size - self.pos:,} B left can hold"
            )
        return n

    def string(self, what: str) -> str:
        n = self.count(f"length of the {what}", 1)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"a {what} is not UTF-8") from None

    def skip_string(self) -> None:
        n = self.count("length of a string in an array", 1)
        self.pos += n


#: GGUFValueType -> struct code of the scalar types (UINT8 .. FLOAT64; BOOL is one byte)
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9


def _value(cur: _Cursor, vtype: int, key: str) -> GgufValue:
    if vtype in _SCALAR:
        return cur.take(_SCALAR[vtype])[0]
    if vtype == _STRING:
        return cur.string(f"string value of {excerpt(key, 60)}")
    if vtype == _ARRAY:
        etype = cur.u32()
        if etype in _SCALAR:
            size = struct.calcsize(_SCALAR[etype])
            n = cur.count(f"length of array {excerpt(key, 60)}", size)
            return cur.take(f"{n}{_SCALAR[etype]}")
        if etype == _STRING:
            n = cur.count(f"length of array {excerpt(key, 60)}", 8)
            for _ in range(n):
                cur.skip_string()
            return StringArray(n)
        raise cur.fail(f"array {excerpt(key, 60)} has elements of type {etype}, which GGUF does not define here")
    raise cur.fail(f"key {excerpt(key, 60)} has value type {vtype}, which GGUF does not define")


def read_header(path: str | Path) -> GgufHeader:
    """The header of the GGUF file at `path`: metadata and tensor table, never the tensor data.

    Raises `ConfigError` naming the file: not found, not a regular file, empty, not GGUF (wrong
    magic), a version other than 2 or 3, truncated or corrupt (a count or string past the end, an
    unknown value or ggml type, a row that is not a whole number of blocks, a tensor past the end
    of the file, a name given twice); `MissingExtraError` without the `gguf` package.
    """
    p = str(path)
    st = stat_path(path)
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError("is not a regular file; kvcalc reads GGUF models only from regular files", path=p)
    if st.st_size == 0:
        raise ConfigError("not a GGUF file: it is empty", path=p)
    c = _gguf()
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(buf, p, c)
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror or e.__class__.__name__}", path=p) from None


def _parse(buf: mmap.mmap | bytes, p: str, c: ModuleType) -> GgufHeader:
    if bytes(buf[:4]) != b"GGUF":
        raise ConfigError(f"not a GGUF file: it starts with {bytes(buf[:4])!r}, not b'GGUF'", path=p)
    cur = _Cursor(buf, p, "<")
    cur.pos = 4
    version = cur.u32()
    if version & 0xFFFF == 0:  # written on the other byte order
        cur.order, version = ">", struct.unpack_from(">I", buf, 4)[0]
    if version not in (2, 3):
        raise ConfigError(
            f"GGUF version {version} cannot be read; kvcalc reads versions 2 and 3 (convert the "
            "model again with a current llama.cpp)",
            path=p,
        )
    n_tensors = cur.count("tensor count", 8 + 4 + 8 + 4 + 8)
    n_kv = cur.count("metadata key count", 8 + 4 + 1)
    meta: dict[str, GgufValue] = {}
    for _ in range(n_kv):
        key = cur.string("metadata key")
        if key in meta:
            raise cur.fail(f"metadata key {excerpt(key, 60)} is given twice")
        meta[key] = _value(cur, cur.u32(), key)
    sizes = c.GGML_QUANT_SIZES
    tensors: list[TensorInfo] = []
    names: set[str] = set()
    for _ in range(n_tensors):
        name = cur.string("tensor name")
        if name in names:
            raise cur.fail(f"tensor {excerpt(name, 60)} is given twice")
        names.add(name)
        n_dims = cur.u32()
        if not 1 <= n_dims <= MAX_DIMS:
            raise cur.fail(f"tensor {excerpt(name, 60)} has {n_dims} dimensions (1 to {MAX_DIMS})")
        shape = cur.take(f"{n_dims}Q")
        gtype, offset = cur.u32(), cur.u64()
        try:
            qtype = c.GGMLQuantizationType(gtype)
            block, type_size = sizes[qtype]
        except (ValueError, KeyError):
            raise cur.fail(
                f"tensor {excerpt(name, 60)} has ggml type {gtype}, unknown to the installed gguf "
                "package (pip install -U gguf)"
            ) from None
        n_values = 1
        for d in shape:
            n_values *= d
        if n_values == 0 or n_values > MAX_TENSOR_VALUES:
            raise cur.fail(f"tensor {excerpt(name, 60)} has shape {list(shape)}")
        if shape[0] % block:
            raise cur.fail(
                f"tensor {excerpt(name, 60)}: a row of {shape[0]:,} values is not a whole number of "
                f"{qtype.name} blocks of {block}"
            )
        tensors.append(
            TensorInfo(
                name=name,
                ggml_type=gtype,
                type_name=qtype.name,
                shape=tuple(shape),
                offset=offset,
                n_values=n_values,
                n_bytes=n_values // block * type_size,
            )
        )
    align = meta.get("general.alignment", 32)
    if type(align) is not int or align <= 0 or align & (align - 1):
        raise ConfigError(f"must be a power of two, got {excerpt(align)}", path=p, field="general.alignment")
    data_offset = -(-cur.pos // align) * align
    end = max((t.offset + t.n_bytes for t in tensors), default=0) + data_offset
    if tensors and end > cur.size:
        raise ConfigError(
            f"truncated: its tensor data ends at byte {end:,} but the file has {cur.size:,} B "
            "(an incomplete download?)",
            path=p,
        )
    return GgufHeader(
        path=p, version=version, metadata=meta, tensors=tuple(tensors), data_offset=data_offset, file_bytes=cur.size
    )


# ----- metadata -> ModelSpec fields -------------------------------------------------------------------

_MISSING = object()
#: the default a reader gives for an absent key
_D = TypeVar("_D")


class _Meta:
    """The metadata of one file, read as llama.cpp's `llama_model_loader::get_key` /
    `get_key_or_arr` read it; every number is checked (an integer, not a boolean or a float, in
    range) and a bad one is one `ConfigError` naming the file and the key."""

    def __init__(self, header: GgufHeader, arch: str) -> None:
        self.h, self.arch, self.path = header, arch, header.path
        #: block_count when the file appends NextN / MTP blocks (`nextn_predict_layers`): a
        #: per-layer array of that length is read for the model's layers, its first entries
        self.n_all: int | None = None

    def key(self, name: str) -> str:
        return f"{self.arch}.{name}"

    def has(self, name: str) -> bool:
        return self.key(name) in self.h.metadata

    def fail(self, name: str, message: str) -> ConfigError:
        return ConfigError(message, path=self.path, field=self.key(name))

    def _int(self, name: str, v: object, minimum: int, maximum: int) -> int:
        if type(v) is not int:
            shown = f"the string {excerpt(v, quote=True)}" if isinstance(v, str) else excerpt(v)
            raise self.fail(name, f"must be an integer, got {shown}")
        if not minimum <= v <= maximum:
            raise self.fail(name, f"must be from {minimum} to {maximum:,}, got {v:,}")
        return v

    @overload
    def count(self, name: str, *, minimum: int = 1, maximum: int = MAX_INT) -> int: ...
    @overload
    def count(self, name: str, default: _D, *, minimum: int = 1, maximum: int = MAX_INT) -> int | _D: ...
    def count(self, name: str, default: object = _MISSING, *, minimum: int = 1, maximum: int = MAX_INT) -> object:
        """The number under `{arch}.name`; `default` when absent (missing and no default: an error)."""
        v = self.h.metadata.get(self.key(name), _MISSING)
        if v is _MISSING:
            if default is _MISSING:
                raise self.fail(name, f"is missing; a {self.arch} model needs it")
            return default
        return self._int(name, v, minimum, maximum)

    @overload
    def per_layer(self, name: str, n_layers: int) -> list[int]: ...
    @overload
    def per_layer(self, name: str, n_layers: int, default: list[int]) -> list[int]: ...
    @overload
    def per_layer(self, name: str, n_layers: int, default: None) -> list[int] | None: ...
    def per_layer(self, name: str, n_layers: int, default: object = _MISSING) -> list[int] | None:
        """`{arch}.name` as one number per layer: a number repeated, or an array of n_layers
        numbers (each may be 0); `default` (a list or None) when absent."""
        v = self.h.metadata.get(self.key(name), _MISSING)
        if v is _MISSING:
            if default is _MISSING:
                raise self.fail(name, f"is missing; a {self.arch} model needs it")
            return cast("list[int] | None", default)  # (the overloads)
        if isinstance(v, tuple):
            if len(v) != n_layers and len(v) != (self.n_all or n_layers):
                raise self.fail(name, f"lists {len(v)} layers but block_count is {self.n_all or n_layers}")
            return [self._int(name, x, 0, MAX_INT) for x in v[:n_layers]]
        return [self._int(name, v, 0, MAX_INT)] * n_layers


def _uniform(m: _Meta, name: str, values: list[int], what: str) -> int | None:
    """The one non-zero value of a per-layer list (None when all are 0); a list whose non-zero
    values differ (OpenELM) cannot be expressed."""
    nonzero = sorted({v for v in values if v})
    if len(nonzero) > 1:
        raise m.fail(
            name,
            f"gives {what} that differ between layers ({', '.join(map(str, nonzero[:4]))}"
            f"{' ...' if len(nonzero) > 4 else ''}); kvcalc models one count for every attention layer, "
            "so this model cannot be sized yet",
        )
    return nonzero[0] if nonzero else None


@dataclass(frozen=True)
class _Arch:
    """How llama.cpp reads one GGUF architecture: its sliding-window rule (`swa_period`, the
    period of `set_swa_pattern`; `swa_window`, the window when the file gives none; `swa_if_key`:
    only when the file gives a window > 0), its MLP (`plain`: no gate) and its kind of attention."""

    swa_period: int | None = None
    swa_window: int | None = None
    swa_if_key: bool = False
    chunked: bool = False
    plain_mlp: bool = False
    mla: bool = False
    mamba: bool = False
    hybrid: bool = False
    #: Mamba-2 layers beside attention layers (ssm.group_count): "granite" (recurrent iff
    #: head_count_kv 0) or "nemotron" (recurrent iff head_count_kv and feed_forward_length 0)
    mamba2: str | None = None


#: the GGUF architectures kvcalc reads (`general.architecture`), with llama.cpp's rules
#: (`src/llama-model.cpp` load_hparams, `src/models/*.cpp`).
ARCHITECTURES: dict[str, _Arch] = {
    "llama": _Arch(),
    "mistral3": _Arch(),
    "granite": _Arch(),
    "qwen2": _Arch(),
    "qwen2moe": _Arch(),
    "qwen3": _Arch(),
    "qwen3moe": _Arch(),
    "phi3": _Arch(),
    "gemma": _Arch(),
    "gemma2": _Arch(swa_period=2, swa_window=4096),
    "gemma3": _Arch(swa_period=6),
    "cohere2": _Arch(swa_period=4),
    "gpt-oss": _Arch(swa_period=2),
    "olmo2": _Arch(swa_period=4, swa_if_key=True),
    "llama4": _Arch(swa_period=4, chunked=True),
    "falcon": _Arch(plain_mlp=True),
    "starcoder2": _Arch(plain_mlp=True),
    "deepseek2": _Arch(mla=True),
    "jamba": _Arch(mamba=True),
    "falcon-h1": _Arch(hybrid=True),
    "granitehybrid": _Arch(mamba2="granite"),
    "nemotron_h": _Arch(mamba2="nemotron", plain_mlp=True),
    # Nemotron-3 (MoE layers, an MTP block appended: `conversion/nemotron.py` NemotronHModel);
    # llama.cpp reads it as nemotron_h (`src/models/nemotron-h.cpp` load_arch_hparams)
    "nemotron_h_moe": _Arch(mamba2="nemotron", plain_mlp=True),
}
#: GGUF architectures whose ModelSpec is the config model_type's (the engines key on it)
MODEL_TYPE_OF_ARCH = {"nemotron_h_moe": "nemotron_h"}

#: llama4: `hparams.n_swa = 8192` (chunked attention's chunk, whatever the file says)
LLAMA4_CHUNK = 8192


def _swa_pattern(p: int, n_layers: int) -> list[bool]:
    """llama.cpp `llama_hparams::set_swa_pattern(p)`: layer il slides when p == 0 or il % p < p - 1."""
    return [p == 0 or il % p < p - 1 for il in range(n_layers)]


def _sliding(m: _Meta, a: _Arch, n_layers: int) -> tuple[list[bool], int | None]:
    """(which layers slide, the window) by llama.cpp's rule for the architecture."""
    none = [False] * n_layers
    if a.swa_period is None:
        return none, None
    window: int | None
    if a.chunked:  # llama4: a sliding_window of 0 in the file turns chunking off
        if m.has("attention.sliding_window") and m.count("attention.sliding_window", minimum=0) == 0:
            return none, None
        window = LLAMA4_CHUNK
    else:
        window = m.count("attention.sliding_window", a.swa_window, minimum=0)
        if window is None or window == 0:
            if a.swa_if_key or window == 0:
                return none, None
            raise m.fail("attention.sliding_window", f"is missing; a {m.arch} model needs it")
    pattern = m.h.metadata.get(m.key("attention.sliding_window_pattern"))
    if isinstance(pattern, tuple):
        if len(pattern) != n_layers:
            raise m.fail(
                "attention.sliding_window_pattern", f"lists {len(pattern)} layers but block_count is {n_layers}"
            )
        return [bool(x) for x in pattern], window
    period = (
        a.swa_period if pattern is None else m.count("attention.sliding_window_pattern", minimum=0, maximum=n_layers)
    )
    return _swa_pattern(period, n_layers), window


def _moe_placement(m: _Meta, moe_layers: list[int], n_layers: int) -> dict[str, int]:
    """first_dense_layers, moe_layer_period and moe_layer_offset that place experts on exactly
    `moe_layers` (the layers whose tensors include `_exps`); a warning when no period does."""
    if not moe_layers:
        return {}
    first, want = moe_layers[0], set(moe_layers)
    for period in range(1, n_layers + 1):
        if {i for i in range(first, n_layers) if i % period == first % period} == want:
            return {"first_dense_layers": first, "moe_layer_period": period, "moe_layer_offset": first % period}
    from kvcalc.text import number_list

    warnings.warn(
        f"{m.path}: routed experts sit on {len(moe_layers)} layers ({number_list(moe_layers, 8)}), "
        "which no first-dense-layers-and-period rule places; the weights are exact but decode reads "
        "every expert of those layers",
        KvcalcWarning,
        stacklevel=3,
    )
    return {}


def _file_type_label(header: GgufHeader, c: ModuleType) -> str:
    """`general.file_type` as llama.cpp's `llama_ftype` names it without LLAMA_FTYPE_MOSTLY_ (what
    llama-quantize takes: Q4_K_M, Q8_0, BF16; ALL_F32 is F32); a flagged guess says so; without
    the key, the type holding the most bytes, marked as such."""
    ft = header.metadata.get("general.file_type")
    if type(ft) is int:
        guessed = bool(ft & 1024)
        try:
            name = c.LlamaFileType(ft & ~1024).name
        except ValueError:
            return f"file type {ft}"
        name = "F32" if name == "ALL_F32" else name.removeprefix("MOSTLY_")
        return name + (" (guessed)" if guessed else "")
    by_type: dict[str, int] = {}
    for t in header.tensors:
        by_type[t.type_name] = by_type.get(t.type_name, 0) + t.n_bytes
    return f"mostly {max(by_type, key=by_type.__getitem__)}" if by_type else "no tensors"


def _is_expert(name: str) -> bool:
    """`blk.3.ffn_down_exps.weight` -> True: the routed experts (not `_shexp`, not the router)."""
    base = name.split(".")[2] if name.count(".") >= 2 else ""
    return base.endswith("_exps")


def checkpoint_from_header(header: GgufHeader, n_layers: int, label: str):
    """`CheckpointWeights` from the tensor table (see the module docstring for the grouping)."""
    from kvcalc.schema import CheckpointWeights

    layer = [0] * n_layers
    expert = [0] * n_layers
    emb = head = other = n_params = 0
    by_type: dict[str, int] = {}
    for t in header.tensors:
        n_params += t.n_values
        by_type[t.type_name] = by_type.get(t.type_name, 0) + t.n_bytes
        parts = t.name.split(".")
        if parts[0] == "blk" and len(parts) > 2 and parts[1].isdigit() and int(parts[1]) < n_layers:
            i = int(parts[1])
            layer[i] += t.n_bytes
            if _is_expert(t.name):
                expert[i] += t.n_bytes
        elif parts[0].startswith("token_embd"):
            emb += t.n_bytes
        elif parts[0] in ("output", "output_norm"):
            head += t.n_bytes
        else:
            other += t.n_bytes
    return CheckpointWeights(
        source="GGUF tensor table",
        label=label,
        n_params=n_params,
        layer_bytes=layer,
        layer_expert_bytes=expert,
        embedding_bytes=emb,
        head_bytes=head,
        other_bytes=other,
        bytes_by_dtype=dict(sorted(by_type.items())),
    )


def _attention_fields(m: _Meta, a: _Arch, f: ModelFields, hidden: int, n_heads: int, n_kv: int) -> bool:
    """Put the attention fields into `f`: MLA's latent (DeepSeek: `kv_lora_rank`, the rope and
    per-head sizes, which MLA cache llama.cpp keeps) or the heads' K / V sizes. Returns True for
    a DeepSeek file of the expanded layout (no `key_length_mla`: converted before llama.cpp PR
    #12801). Raises `ConfigError` naming the key."""
    legacy_mla = False
    if a.mla:
        rope = m.count("rope.dimension_count")
        lora = m.count("attention.kv_lora_rank")
        if m.has("attention.key_length_mla"):
            k_head, v_head = m.count("attention.key_length_mla"), m.count("attention.value_length_mla")
        else:  # the expanded layout of files converted before llama.cpp PR #12801
            legacy_mla = True
            k_head, v_head = m.count("attention.key_length"), m.count("attention.value_length")
        if k_head <= rope:
            raise m.fail("rope.dimension_count", f"({rope}) must be less than the key head size ({k_head})")
        f.update(
            attention="mla",
            kv_lora_rank=lora,
            qk_rope_head_dim=rope,
            qk_nope_head_dim=k_head - rope,
            v_head_dim=v_head,
            q_lora_rank=m.count("attention.q_lora_rank", None),
            mla_cache="expanded" if legacy_mla else "latent",
        )  # what llama.cpp caches for this file
    else:
        lengths = ("attention.key_length", "attention.value_length")
        if hidden % n_heads and not all(m.has(k) for k in lengths):
            # llama.cpp takes n_embd / n_head whole (src/llama-model.cpp `load_hparams`: n_embd_head_k =
            # n_embd / n_head()), a head size the file's tensors do not have: never a guess here
            missing = next(k for k in lengths if not m.has(k))
            raise m.fail(
                "embedding_length",
                f"({hidden:,}) is not divisible by {m.key('attention.head_count')} ({n_heads}) and the file "
                f"gives no {m.key(missing)}; convert the model again with a current llama.cpp, which writes the "
                "head size",
            )
        k_len = m.count("attention.key_length", hidden // n_heads or None)
        v_len = m.count("attention.value_length", hidden // n_heads or None)
        if k_len is None:
            raise m.fail("attention.key_length", "is missing, and embedding_length / head_count is 0")
        f.update(n_kv_heads=n_kv, head_dim=k_len)
        if v_len != k_len:
            f["v_head_dim"] = v_len
    return legacy_mla


def _expert_fields(m: _Meta, header: GgufHeader, arch: str, f: ModelFields, n_layers: int) -> None:
    """Put the routed and shared experts into `f`: counts and widths from the metadata, which
    layers hold them from the tensor table (`_exps` tensors). Raises `ConfigError` naming the key."""
    n_exp = m.count("expert_count", 0, minimum=0)
    if n_exp:
        f["n_experts"] = n_exp
        f["n_experts_per_token"] = m.count("expert_used_count")
        width = m.count("expert_feed_forward_length", None)
        if width is None:  # llama / mixtral files: the experts are feed_forward_length wide
            width = f.pop("intermediate_size", None)
        f["moe_intermediate_size"] = width
        shared = m.count("expert_shared_count", None, minimum=0)
        shared_width = m.count("expert_shared_feed_forward_length", None)
        if shared_width is not None:
            f["shared_expert_intermediate_size"] = (shared or 1) * shared_width
        elif shared and width:
            f["shared_expert_intermediate_size"] = shared * width
        elif arch == "llama4" and width:  # one shared expert as wide as a routed one
            f["shared_expert_intermediate_size"] = width
        moe = sorted(
            {
                int(t.name.split(".")[1])
                for t in header.tensors
                if t.name.startswith("blk.")
                and _is_expert(t.name)
                and t.name.split(".")[1].isdigit()
                and int(t.name.split(".")[1]) < n_layers
            }
        )
        f.update(_moe_placement(m, moe, n_layers))


def _mamba2_fields(m: _Meta, names: set[str]) -> ModelFields:
    """The Mamba-2 fields of a Falcon-H1, Nemotron-H or Granite-4.0-H file, as llama.cpp reads them
    (`src/models/falcon-h1.cpp`, `nemotron-h.cpp`, `granite-hybrid.cpp` load_arch_hparams /
    load_arch_tensors): ssm.inner_size = d_inner (Falcon-H1's mamba_d_ssm, Nemotron-H's
    mamba_num_heads x mamba_head_dim, Granite's mamba_expand x hidden), ssm.time_step_rank = the
    heads ("ssm_num_heads = hparams.ssm_dt_rank"), head_dim = d_inner / heads, ssm.group_count,
    ssm.state_size, ssm.conv_kernel; the gated norm when the file holds a layer's
    `ssm_norm.weight` (TENSOR_NOT_REQUIRED in falcon-h1.cpp)."""
    inner, heads = m.count("ssm.inner_size"), m.count("ssm.time_step_rank")
    if inner % heads:
        raise m.fail("ssm.time_step_rank", f"({heads:,}, the Mamba-2 heads) does not divide ssm.inner_size ({inner:,})")
    return {
        "mamba_n_heads": heads,
        "mamba_head_dim": inner // heads,
        "mamba_n_groups": m.count("ssm.group_count"),
        "mamba_d_state": m.count("ssm.state_size"),
        "mamba_d_conv": m.count("ssm.conv_kernel"),
        "mamba_norm": any(n.startswith("blk.") and n.endswith(".ssm_norm.weight") for n in names),
    }


def _mamba2_kinds(rule: str, kv: list[int], ff: list[int] | None, n_layers: int) -> list[str]:
    """Each layer's kind in a Mamba-2 hybrid, by llama.cpp's rule (`rule`, `_Arch.mamba2`):
    granite (`src/models/granite-hybrid.cpp`: "A layer is recurrent IFF the n_head_kv value is set
    to 0"): mamba where head_count_kv is 0, else full; nemotron (`src/models/nemotron-h.cpp`:
    is_recr = n_head_kv(il) == 0 && n_ff(il) == 0; `create_memory` filter_attn = !is_recr(il) &&
    n_ff(il) == 0): mamba where both are 0, full where head_count_kv > 0 and feed_forward_length
    0, mlp (in neither cache) where feed_forward_length > 0."""
    if rule == "granite":
        return ["full" if h else "mamba" for h in kv]
    widths = ff or [0] * n_layers
    return ["mlp" if w else ("full" if h else "mamba") for h, w in zip(kv, widths, strict=True)]


def model_fields_from_gguf(header: GgufHeader) -> ModelFields:
    """The `ModelSpec` fields of a GGUF file's header (name, source, architecture, checkpoint).

    Raises `ConfigError` naming the file and the key: no or an unknown `general.architecture`,
    a missing or bad number, per-layer head counts that differ, a Mamba-2 hybrid.
    """
    c = _gguf()
    p = header.path
    arch = header.metadata.get("general.architecture")
    if not isinstance(arch, str):
        raise ConfigError(
            "is missing or not a string; a GGUF model names its architecture there",
            path=p,
            field="general.architecture",
        )
    a = ARCHITECTURES.get(arch)
    m = _Meta(header, arch)
    if arch in MODEL_TYPES_2026:
        f26 = fields_2026(m, header, arch, MAX_LAYERS, _expert_fields)
        return _finish(header, c, arch, f26, legacy_mla=False)
    if m.has("ssm.group_count") and not (a is not None and (a.hybrid or a.mamba2)):
        raise m.fail(
            "ssm.group_count",
            "Mamba-2 layers (state groups) are not modelled by kvcalc yet; write a kvcalc YAML for this model",
        )
    if a is None:
        raise ConfigError(
            f"'{excerpt(arch, 40)}' is not a GGUF architecture kvcalc reads (it reads "
            f"{', '.join(sorted({*ARCHITECTURES, *MODEL_TYPES_2026}))}); write a kvcalc YAML for this model",
            path=p,
            field="general.architecture",
        )
    n_layers = m.count("block_count", maximum=MAX_LAYERS)
    nextn = m.count("nextn_predict_layers", 0, minimum=0, maximum=n_layers - 1)
    if nextn:  # llama_hparams::n_layer() = n_layer_all - n_layer_nextn (src/llama-hparams.cpp 348)
        m.n_all, n_layers = n_layers, n_layers - nextn
    hidden = m.count("embedding_length")
    heads = m.per_layer("attention.head_count", n_layers)
    n_heads = _uniform(m, "attention.head_count", heads, "query head counts")
    kv = m.per_layer("attention.head_count_kv", n_layers, default=heads)
    n_kv = _uniform(m, "attention.head_count_kv", kv, "KV head counts")
    if n_heads is None or n_kv is None:
        raise m.fail(
            "attention.head_count" if n_heads is None else "attention.head_count_kv",
            "is 0 for every layer: a model without attention (a pure state-space "
            "model) keeps no KV cache kvcalc can size; write a kvcalc YAML",
        )
    attends = [bool(h) for h in kv]
    if not all(attends) and not (a.mamba or a.mamba2):
        raise m.fail(
            "attention.head_count_kv",
            "is 0 for some layers, which a {arch} model does not have; "
            "kvcalc cannot tell what those layers keep".replace("{arch}", arch),
        )
    f: ModelFields = {
        "n_layers": n_layers,
        "n_heads": n_heads,
        "hidden_size": hidden,
        "max_position_embeddings": m.count("context_length", None),
    }
    ff = m.per_layer("feed_forward_length", n_layers, default=None)
    widths = sorted({w for w in ff or [] if w})
    if len(widths) == 1:  # MLP widths that differ per layer only size the weights, which the tensor table gives
        f["intermediate_size"] = widths[0]
    vocab = m.count("vocab_size", None)
    tokens = header.metadata.get("tokenizer.ggml.tokens")
    f["vocab_size"] = vocab or (tokens.count if isinstance(tokens, StringArray) and tokens.count else None)
    names = {t.name for t in header.tensors}
    f["tie_word_embeddings"] = "output.weight" not in names
    f["attention_bias"] = any(f"blk.0.attn_{x}.bias" in names for x in ("q", "k", "qkv"))
    if a.plain_mlp:
        f["mlp_kind"] = "plain"
    legacy_mla = _attention_fields(m, a, f, hidden, n_heads, n_kv)
    _expert_fields(m, header, arch, f, n_layers)  # which layers hold them comes from the tensor table
    # which layers slide, which are Mamba
    slides, window = _sliding(m, a, n_layers)
    kinds = ["mamba" if not att else ("sliding" if s else "full") for att, s in zip(attends, slides, strict=True)]
    if "sliding" in kinds:
        f["sliding_window"] = window
    f.update(compact_layers(kinds))  # the same shortest form config.json files get
    if a.mamba2:
        kinds = _mamba2_kinds(a.mamba2, kv, ff, n_layers)
        f.update(compact_layers(kinds))
        f.update(_mamba2_fields(m, names))
    elif a.hybrid:
        if not all(attends):
            raise m.fail("attention.head_count_kv", f"is 0 for some layers, but every {arch} layer attends")
        kinds = ["hybrid"] * n_layers
        f.update(compact_layers(kinds))
        f.update(_mamba2_fields(m, names))
    if "mamba" in kinds and not a.mamba2:  # Mamba-1 (jamba)
        inner = m.count("ssm.inner_size")
        if inner % hidden:
            raise m.fail(
                "ssm.inner_size",
                f"({inner:,}) is not a whole multiple of embedding_length ({hidden:,}); "
                "kvcalc sizes Mamba layers by expand = inner_size / embedding_length",
            )
        f.update(
            mamba_d_state=m.count("ssm.state_size"),
            mamba_d_conv=m.count("ssm.conv_kernel"),
            mamba_expand=inner // hidden,
            mamba_dt_rank=m.count("ssm.time_step_rank", None),
        )
    if nextn:
        f["n_mtp_layers"] = nextn
    f["model_type"] = MODEL_TYPE_OF_ARCH.get(arch, arch)
    return _finish(header, c, arch, f, legacy_mla=legacy_mla)


def _finish(header: GgufHeader, c: ModuleType, arch: str, f: ModelFields, *, legacy_mla: bool) -> ModelFields:
    """Name, source, dtype and the weights of the tensor table added to the architecture's fields."""
    p = header.path
    n_heads, n_layers = f["n_heads"], f["n_layers"]
    label = _file_type_label(header, c)
    ft = header.metadata.get("general.file_type")
    ft_name = label.split(" ")[0]
    f["dtype"] = {"F32": "fp32", "BF16": "bf16"}.get(ft_name, "fp16") if type(ft) is int else "fp16"
    if header.tensors:
        f["checkpoint"] = checkpoint_from_header(header, n_layers, label)
    else:  # a vocab-only file (llama.cpp's models/ggml-vocab-*.gguf): 0 B of weights would be a lie
        warnings.warn(
            f"{p}: the GGUF tensor table is empty (a vocab-only file?); weights are counted from the "
            f"architecture in {f['dtype']}",
            KvcalcWarning,
            stacklevel=3,
        )
    general = header.metadata.get("general.name")
    named = f", {excerpt(general, 60)}" if isinstance(general, str) and general.strip() else ""
    legacy = ", expanded MLA cache: full K and V (no key_length_mla)" if legacy_mla else ""
    stem = Path(p).name
    stem = stem[:-5] if stem.lower().endswith(".gguf") and len(stem) > 5 else stem
    out = {
        "name": stem,
        "source": f"{p} (GGUF v{header.version}, architecture {arch}{named}, {label}{legacy})",
        "model_type": f.pop("model_type"),
    }
    out.update(f)
    if legacy_mla:
        warnings.warn(
            f"{p}: this {arch} file predates llama.cpp's MLA cache (no {arch}.attention.key_length_mla): "
            f"llama.cpp caches full K and V for it ({n_heads} heads x {f['qk_nope_head_dim'] + f['qk_rope_head_dim']} "
            f"+ {f['v_head_dim']} values per token "
            "and layer, as `capacity --engine llamacpp` sizes it), far more than the latent other engines "
            "cache; convert it again with a current llama.cpp to get the latent cache",
            KvcalcWarning,
            stacklevel=3,
        )
    return {k: v for k, v in out.items() if v is not None}


def model_from_gguf(path: str | Path) -> ModelSpec:
    """A `ModelSpec` (with `checkpoint`: the stored weight bytes) from the GGUF file at `path`,
    reading only its header (`read_header`, `model_fields_from_gguf`).

    Raises `ConfigError` naming the file (and the metadata key) for an unreadable, truncated,
    corrupt or unsupported file; `MissingExtraError` without the `gguf` package.
    """
    from kvcalc.load.files import build

    header = read_header(path)
    fields = model_fields_from_gguf(header)
    return build(ModelSpec, fields, header.path, names=gguf_field_names(header))


#: kvcalc field -> the GGUF metadata key it is read from, under `{arch}.` (`model_fields_from_gguf`).
GGUF_KEYS: dict[str, str] = {
    "n_layers": "block_count",
    "n_heads": "attention.head_count",
    "n_kv_heads": "attention.head_count_kv",
    "hidden_size": "embedding_length",
    "head_dim": "attention.key_length",
}


def gguf_field_names(header: GgufHeader) -> dict[str, str]:
    """kvcalc field -> the file's metadata key (`llama.attention.head_count_kv`), so the schema's
    errors about a GGUF's geometry name the key the file holds (`kvcalc.load.files.build`)."""
    arch = header.metadata.get("general.architecture")
    return {f: f"{arch}.{k}" for f, k in GGUF_KEYS.items()} if isinstance(arch, str) else {}
