"""Exact weight bytes from a checkpoint's safetensors headers (`schema.CheckpointWeights`).

The safetensors format (huggingface/safetensors, README "Format"): 8 bytes, a little-endian
unsigned 64-bit header length N; N bytes of UTF-8 JSON mapping each tensor name to
`{"dtype", "shape", "data_offsets": [begin, end]}` (and an optional `__metadata__`); then the
data. `read_header` reads exactly those 8 + N bytes, never the data, and checks that each
tensor's byte range matches its shape and dtype. A local checkpoint folder (config.json plus
`*.safetensors`, or `model.safetensors.index.json` naming the shards) and a Hub id (the headers
fetched by `huggingface_hub`, `kvcalc.load.hub`) both arrive here as {file: {tensor: Tensor}}.

Tensor names map to the parts of `CheckpointWeights` (the transformers naming):
- `model.layers.{i}.` (also `model.language_model.layers.{i}.` and `language_model.model.layers.{i}.`
  of multimodal wrappers, `transformer.h.{i}.`, `backbone.layers.{i}.`, `gpt_neox.layers.{i}.`) ->
  layer i when i < n_layers; inside it `experts.` (`mlp.experts.{j}.`, `block_sparse_moe.experts.`,
  gpt-oss `mlp.experts.*_blocks`) -> the layer's routed-expert bytes (`shared_experts.` is not);
- `embed_tokens` / `wte` / `wpe` / `word_embeddings` / `embed_in` -> embedding;
- `lm_head` / `embed_out` and the final norm (`model.norm`, `transformer.ln_f`, `norm_f`) -> head;
- everything else (vision tower, projector, MTP layers past n_layers) -> other.

Parameters are the values stored: packed words are unpacked (int32 `qweight` / `qzeros` /
`weight_packed` hold 32 / bits values, uint8 mxfp4 / nf4 / nvfp4 bytes two 4-bit values, safetensors
`F4` two per byte); scales and zero points count as the parameters they are.
"""

from __future__ import annotations

import json
import os
import re
import stat
import struct
import warnings
from math import prod
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from kvcalc.errors import ConfigError, KvcalcWarning
from kvcalc.load.fields import ModelFields
from kvcalc.schema import CheckpointWeights, ModelSpec
from kvcalc.text import excerpt

if TYPE_CHECKING:
    from kvcalc.json_types import JsonObject
    from kvcalc.load.hf.quant import Quantization

#: safetensors refuses longer headers (safetensors `src/tensor.rs`, MAX_HEADER_SIZE = 100,000,000)
MAX_HEADER_BYTES = 100_000_000

#: safetensors dtype -> bits per element (safetensors `src/tensor.rs`, `Dtype` and its `bitsize`)
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}

#: safetensors dtype -> kvcalc format name, for the label
_DTYPE_NAMES = {
    "BF16": "bf16",
    "F16": "fp16",
    "F32": "fp32",
    "F8_E4M3": "fp8_e4m3",
    "F8_E5M2": "fp8_e5m2",
    "I8": "int8",
    "F4": "fp4",
    "F8_E8M0": "e8m0",
}

_PREFIX = r"(?:model\.language_model\.|language_model\.model\.|model\.|transformer\.|backbone\.|gpt_neox\.)?"
_LAYER = re.compile(_PREFIX + r"(?:layers|h)\.(\d+)\.(.+)$")
_EXPERT = re.compile(r"(?:^|\.)experts\.")
_EMBEDDING = re.compile(_PREFIX + r"(?:embed_tokens|wte|wpe|word_embeddings|embed_in)\.")
_HEAD = re.compile(r"(?:lm_head|embed_out)\.|" + _PREFIX + r"(?:norm|ln_f|norm_f|final_layernorm|final_layer_norm)\.")
#: int32 words of packed low-bit values (AWQ / GPTQ `qweight`, `qzeros`; compressed-tensors `weight_packed`)
_PACKED_I32 = (".qweight", ".qzeros", ".weight_packed", ".weight_zero_point")
#: uint8 bytes of two 4-bit values (gpt-oss `*_blocks`, bitsandbytes 4-bit `.weight`, nvfp4 `weight_packed`)
_PACKED_U8 = ("_blocks", ".weight", ".weight_packed")


class Tensor(NamedTuple):
    """One tensor as a header lists it: safetensors dtype, shape, bytes stored."""

    dtype: str
    shape: tuple[int, ...]
    nbytes: int


def parse_header(header: object, where: str) -> dict[str, Tensor]:
    """{name: Tensor} from a parsed safetensors header (the JSON object), `__metadata__` left out.

    Raises `ConfigError` naming `where` (the file) and the tensor for an entry that is not a
    dtype, a shape of whole numbers and a byte range of exactly shape x dtype bytes."""
    if not isinstance(header, dict):
        raise ConfigError("the safetensors header is not a JSON object", path=where)
    out: dict[str, Tensor] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        problem = _entry_problem(entry)
        if problem:
            raise ConfigError(problem, path=where, field=str(name)[:120])
        shape, offsets = entry["shape"], entry["data_offsets"]
        nbytes = offsets[1] - offsets[0]
        expected = -(-prod(shape) * DTYPE_BITS[entry["dtype"]] // 8)
        if nbytes != expected:
            raise ConfigError(
                f"data_offsets hold {nbytes:,} B but shape {shape} of {entry['dtype']} is "
                f"{expected:,} B: the file is damaged",
                path=where,
                field=str(name)[:120],
            )
        out[name] = Tensor(entry["dtype"], tuple(shape), nbytes)
    return out


def _shown(value: object) -> str:
    """A header value for a message: JSON for a scalar or a short list of scalars (`[4096, "x"]`),
    else its JSON kind (`an object`); never more than 60 characters."""
    if value is None:
        return "missing"
    if isinstance(value, (str, int, float, bool)) or (
        isinstance(value, list) and len(value) <= 8 and all(isinstance(v, (str, int, float, bool)) for v in value)
    ):
        return excerpt(json.dumps(value), 60)
    return "a list" if isinstance(value, list) else "an object"


def _entry_problem(entry: object) -> str | None:
    """What is wrong with one tensor entry of a safetensors header, in words with the fix, or
    None: it must be an object with a `dtype` of `DTYPE_BITS` (safetensors `src/tensor.rs`
    `Dtype`), a `shape` of whole numbers >= 0 and `data_offsets` [begin, end], 0 <= begin <= end
    (safetensors README, "Format")."""
    if not isinstance(entry, dict):
        return (
            f"is {_shown(entry)}, not a tensor entry; a safetensors header maps each tensor to "
            '{"dtype", "shape", "data_offsets"}'
        )
    dtype = entry.get("dtype")
    if dtype is None:
        return f"has no dtype; give one of the safetensors dtypes: {', '.join(sorted(DTYPE_BITS))}"
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        return (
            f"'{excerpt(str(dtype), 40)}' is not a safetensors dtype; the known ones are: "
            f"{', '.join(sorted(DTYPE_BITS))}"
        )
    shape = entry.get("shape")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        return f"shape {_shown(shape)} is not a list of whole numbers (e.g. [4096, 4096])"
    offsets = entry.get("data_offsets")
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        and 0 <= offsets[0] <= offsets[1]
    ):
        return f"data_offsets {_shown(offsets)} is not [begin, end] with 0 <= begin <= end"
    return None


def read_header(path: Path) -> dict[str, Tensor]:
    """The tensors of one .safetensors file, from its header only: reads the 8-byte length and
    exactly that many bytes of JSON, never the tensor data.

    Raises `ConfigError` naming the file for one that is not a regular file (a FIFO, whose
    opening would block, a device, a folder), a short file, a length over `MAX_HEADER_BYTES`, or a
    header that is not valid JSON (nested past the decoder's recursion limit, an integer of more
    than 4,300 digits) or not a safetensors header, and for a file shorter than its header's
    tensor data (`check_data_size`)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise ConfigError(
                "is not a regular file; kvcalc reads safetensors headers only from regular files", path=str(path)
            )
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) < 8:
                raise ConfigError("too short for a safetensors file (no 8-byte header length)", path=str(path))
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES:
                raise ConfigError(
                    f"header length {n:,} B exceeds safetensors' limit of {MAX_HEADER_BYTES:,} B: "
                    "not a safetensors file",
                    path=str(path),
                )
            raw = f.read(n)
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror or e}", path=str(path)) from None
    if len(raw) < n:
        raise ConfigError(f"truncated: the header says {n:,} B, the file holds {len(raw):,}", path=str(path))
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:  # ValueError: JSONDecodeError, or an integer of > 4,300 digits
        raise ConfigError(
            f"the safetensors header is not valid JSON ({excerpt(str(e), 120)})", path=str(path)
        ) from None
    except RecursionError:
        raise ConfigError("the safetensors header is not valid JSON (nested too deep)", path=str(path)) from None
    tensors = parse_header(header, str(path))
    check_data_size(header, 8 + n, size, str(path))
    return tensors


# Any: a safetensors header as json.loads gives it, checked by `parse_header` first
def check_data_size(header: dict[str, Any], data_start: int, file_bytes: int, where: str) -> None:
    """Raise `ConfigError` naming `where` when the header places tensor data past the end of the
    file: the data begins at byte `data_start` (8 + header length) and each tensor's
    `data_offsets` count from there (safetensors README, "Format"), so the file must hold at
    least data_start + the largest end offset bytes. A download cut short passes every other
    check of the header; the safetensors loader itself refuses it (`MetadataIncompleteBuffer`).
    `header` has passed `parse_header`."""
    end = max((e["data_offsets"][1] for k, e in header.items() if k != "__metadata__"), default=0)
    if data_start + end > file_bytes:
        raise ConfigError(
            f"truncated: its header places tensor data up to byte {data_start + end:,} but the file "
            f"holds {file_bytes:,} B (an interrupted download?); fetch the file again",
            path=where,
        )


def local_headers(folder: Path) -> dict[str, dict[str, Tensor]] | None:
    """{file name: tensors} of the safetensors files in a checkpoint folder: the shards that
    `model.safetensors.index.json` names, else every `*.safetensors` file. None (after a
    `KvcalcWarning` when the index names missing shards) when there is nothing complete to read.

    Raises `ConfigError` for a malformed index or header."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        from kvcalc.load.files import parse_mapping, read_config_text

        # the bounded reader of every config: a regular file of at most MAX_FILE_BYTES["index"],
        # JSON nested at most MAX_DEPTH levels, one line for any problem
        data, _ = parse_mapping(read_config_text(index, "index"), str(index), json_text=True)
        weight_map = data.get("weight_map")
        shards = [v for v in weight_map.values() if isinstance(v, str)] if isinstance(weight_map, dict) else []
        if not isinstance(weight_map, dict) or len(shards) != len(weight_map):
            raise ConfigError("must map tensor names to shard files", path=str(index), field="weight_map")
        names = sorted(set(shards))
        outside = next((n for n in names if not _inside(folder, n)), None)
        if outside is not None:
            raise ConfigError(
                f"names shard file {excerpt(outside, 80, quote=True)} outside the checkpoint folder; "
                "shards must sit beside the index (a plain file name such as "
                "model-00001-of-00004.safetensors)",
                path=str(index),
                field="weight_map",
            )
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            warnings.warn(
                f"{folder}: {len(missing)} of {len(names)} safetensors shards are missing "
                f"({', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}); weights are counted from "
                "the architecture",
                KvcalcWarning,
                stacklevel=2,
            )
            return None
    else:
        names = sorted(p.name for p in folder.glob("*.safetensors"))
    if not names:
        return None
    return {n: read_header(folder / n) for n in names}


def _inside(folder: Path, name: str) -> bool:
    """True when `name` (a shard file of an index's weight_map) names a file in `folder` by a
    plain relative path: not absolute, no drive, no `..`, no backslash. transformers joins the
    names to the folder as given, so `../x.safetensors` or `/etc/...` would read files the
    checkpoint does not own. The test is on the name, not the resolved file: a Hugging Face cache
    snapshot's shards are symbolic links to `../../blobs/<hash>` and must still be read."""
    p = Path(name)
    return bool(name) and not p.is_absolute() and not p.drive and ".." not in p.parts and "\\" not in name


def _values(name: str, t: Tensor, quant: Quantization | None) -> int:
    """Values a tensor holds: its elements, unpacked where words pack several values."""
    n = prod(t.shape)
    if quant is not None and quant.packed_bits and t.dtype in ("I32", "U32") and name.endswith(_PACKED_I32):
        return n * (32 // quant.packed_bits)
    if quant is not None and quant.u8_nibbles and t.dtype == "U8" and name.endswith(_PACKED_U8):
        return 2 * n
    return n  # safetensors F4 shapes count the 4-bit values themselves


def _label(by_dtype: dict[str, int], quant: Quantization | None) -> str:
    """The stored formats in words, largest first, each holding at least 1% of the bytes."""
    total = sum(by_dtype.values()) or 1
    names: list[str] = []
    for dtype, b in sorted(by_dtype.items(), key=lambda kv: -kv[1]):
        if b * 100 < total and names:
            continue
        if quant is not None and quant.packed_bits and dtype in ("I32", "U32"):
            name = f"int{quant.packed_bits}"
        elif quant is not None and quant.u8_nibbles and dtype == "U8":
            name = (quant.expert_weight_dtype or quant.weight_dtype or "4-bit").split(":")[0].removesuffix("_dq")
        else:
            name = _DTYPE_NAMES.get(dtype, dtype.lower())
        if name not in names:
            names.append(name)
    return " + ".join(names)


def checkpoint_weights(
    files: dict[str, dict[str, Tensor]],
    *,
    n_layers: int,
    quant: Quantization | None = None,
    source: str | None = None,
    where: str | None = None,
) -> CheckpointWeights | None:
    """`CheckpointWeights` of a model with `n_layers` decoder layers from its files' headers
    (see the module docstring for the name mapping). None, after a `KvcalcWarning`, when some
    decoder layer has no tensor (a config that does not match its files): the caller counts
    from the architecture then. `quant` says how packed tensors hold their values; `where` (the
    folder or Hub id) names the checkpoint in that warning."""
    layer_bytes = [0] * n_layers
    expert_bytes = [0] * n_layers
    embedding = head = other = n_params = 0
    by_dtype: dict[str, int] = {}
    for tensors in files.values():
        for name, t in tensors.items():
            n_params += _values(name, t, quant)
            by_dtype[t.dtype] = by_dtype.get(t.dtype, 0) + t.nbytes
            m = _LAYER.match(name)
            if m and int(m.group(1)) < n_layers:
                i = int(m.group(1))
                layer_bytes[i] += t.nbytes
                if _EXPERT.search(m.group(2)):
                    expert_bytes[i] += t.nbytes
            elif _EMBEDDING.match(name):
                embedding += t.nbytes
            elif _HEAD.match(name):
                head += t.nbytes
            else:
                other += t.nbytes
    empty = [i for i, b in enumerate(layer_bytes) if not b]
    if empty:
        from kvcalc.text import number_list

        warnings.warn(
            f"{where or source or 'checkpoint'}: no tensors for decoder layer{'s' if len(empty) > 1 else ''} "
            f"{number_list(empty, 5)} of {n_layers}; weights "
            "are counted from the architecture",
            KvcalcWarning,
            stacklevel=2,
        )
        return None
    k = len(files)
    return CheckpointWeights(
        source=source or f"safetensors headers of {k} file{'s' if k != 1 else ''}",
        label=_label(by_dtype, quant),
        n_params=n_params,
        layer_bytes=layer_bytes,
        layer_expert_bytes=expert_bytes,
        embedding_bytes=embedding,
        head_bytes=head,
        other_bytes=other,
        bytes_by_dtype=by_dtype,
    )


#: where a decoder layer's tensors live, by checkpoint layout (Hugging Face text models, multimodal
#: wrappers, DeepSeek's own names)
_LAYER_PREFIXES = (
    "model.layers.{i}.",
    "model.language_model.layers.{i}.",
    "language_model.model.layers.{i}.",
    "model.text_model.layers.{i}.",
    "layers.{i}.",
)


def check_projection_widths(fields: ModelFields, files: dict[str, dict[str, Tensor]], where: str | None) -> None:
    """Hold each decoder layer's K and V projection widths, read from the checkpoint's tensor
    shapes, against the geometry read from config.json (`fields`, a Hugging Face config's
    `ModelSpec` fields): for a layer with a cache of its own, `self_attn.k_proj.weight` has
    n_kv_heads x head_dim_k rows and `self_attn.v_proj.weight` n_kv_heads x head_dim_v (a
    `k_eq_v` layer has none: Gemma-4's global layers), and an MLA layer's
    `self_attn.kv_a_proj_with_mqa.weight` kv_lora_rank + qk_rope_head_dim rows (a Linear's weight
    is (out, in): its rows are its width). Only plain 2-D `.weight` tensors are read (a packed
    int4 `qweight` is not); a layer or tensor the files do not hold is not checked.

    Raises `ConfigError` naming the layer, the tensor, its width and the config's figure when
    they disagree: the config would size a cache the checkpoint does not have."""
    try:
        spec = ModelSpec.model_validate(fields)
    except ValueError:  # reported when the spec is built
        return
    tensors: dict[str, Tensor] = {}
    for shard in files.values():
        tensors.update(shard)
    for i, layer in enumerate(spec.layers):
        if not layer.caches_kv:
            continue
        if layer.kind == "mla":
            wanted = [("kv_a_proj_with_mqa", layer.head_dim_k, "kv_lora_rank + qk_rope_head_dim")]
        else:
            wanted = [("k_proj", layer.n_kv_heads * layer.head_dim_k, "n_kv_heads x head_dim")]
            if layer.head_dim_v and not layer.k_eq_v:
                wanted.append(("v_proj", layer.n_kv_heads * layer.head_dim_v, "n_kv_heads x v_head_dim"))
        for part, width, how in wanted:
            for prefix in _LAYER_PREFIXES:
                name = prefix.format(i=i) + f"self_attn.{part}.weight"
                t = tensors.get(name)
                if t is None:
                    continue
                if len(t.shape) == 2 and t.dtype not in ("I32", "U8", "I8") and t.shape[0] != width:
                    raise ConfigError(
                        f"layer {i}: the checkpoint's {name} is {t.shape[0]:,} wide ({t.shape[0]:,} x "
                        f"{t.shape[1]:,}), but config.json gives {width:,} ({how}); the config does not "
                        "describe this checkpoint",
                        path=where,
                        field=None,
                    )
                break


def attach_checkpoint(
    fields: ModelFields,
    config: JsonObject,
    files: dict[str, dict[str, Tensor]] | None,
    *,
    path: str | None = None,
    missing: str = "no safetensors files",
) -> ModelFields:
    """`fields` (a Hugging Face config's `ModelSpec` fields) with `checkpoint` set from the
    files' headers, and the `source` saying which count is used: `...; weights from safetensors
    headers of 4 files`, or `...; weights counted from the architecture (<missing>)`."""
    from kvcalc.load.hf.quant import read_quantization

    ck = None
    if files:
        with warnings.catch_warnings():  # the config's reader has already warned about its quantization
            warnings.simplefilter("ignore", KvcalcWarning)
            quant = read_quantization(
                config,
                dtype=fields["dtype"],
                n_layers=fields["n_layers"],
                moe=bool(fields.get("n_experts")),
                path=path,
                hidden_size=fields.get("hidden_size"),
            )
        where = str(Path(path).parent) if path and path.endswith("config.json") else path
        check_projection_widths(fields, files, where)
        ck = checkpoint_weights(files, n_layers=fields["n_layers"], quant=quant, source=None, where=where)
        missing = "the headers do not cover every layer" if ck is None else missing
    out = dict(fields)
    if ck is not None:
        out["checkpoint"] = ck
        out["source"] = f"{fields['source']}; weights from {ck.source}"
    else:
        out["source"] = f"{fields['source']}; weights counted from the architecture ({missing})"
    return out


def load_folder(folder: Path, config: JsonObject) -> ModelSpec:
    """A `ModelSpec` from a checkpoint folder: its Hugging Face config.json (`config`, parsed
    by the caller), with exact weight bytes from the safetensors headers beside it when there
    are any (`local_headers`).

    Raises `ConfigError` for a bad config.json, index or header."""
    from kvcalc.load.files import build
    from kvcalc.load.hf import model_fields_from_hf_config

    path = str(folder / "config.json")
    names: dict[str, str] = {}
    fields = model_fields_from_hf_config(
        config, path=path, hf_quant=read_hf_quant_beside(folder / "config.json"), names=names
    )
    return build(ModelSpec, attach_checkpoint(fields, config, local_headers(folder), path=path), path, names=names)


def hf_quant_config_path(config_path: Path) -> Path:
    """Where NVIDIA ModelOpt's `hf_quant_config.json` sits beside a config.json: in its folder
    (`hf_quant_config.json`), or, for a config saved under its model's name (`org--name.json`), as
    `org--name.hf_quant_config.json`."""
    if config_path.name.lower() == "config.json":
        return config_path.parent / "hf_quant_config.json"
    return config_path.with_name(config_path.stem + ".hf_quant_config.json")


def read_hf_quant_beside(config_path: Path) -> JsonObject | None:
    """The parsed `hf_quant_config.json` beside `config_path` (`hf_quant_config_path`), None when
    there is none. Raises `ConfigError` for a malformed one (the bounded reader of every config)."""
    from kvcalc.load.files import read_mapping

    p = hf_quant_config_path(config_path)
    if not p.is_file():
        return None
    data, _ = read_mapping(p, "model")
    return data
