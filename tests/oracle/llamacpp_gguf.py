"""Tiny GGUF files with real models' KV geometry, for the llama.cpp oracle (`tests/oracle/`).

A file holds the metadata llama.cpp's `llama_model::load_hparams` reads (layers, heads, key and
value lengths, the sliding window and its pattern, the context length, the MLA and SSM keys) and
the tensor table its `load_arch_tensors` asks for, with the shapes it checks. The tensor DATA is
left out: the file is truncated (`os.truncate`) to the length the table promises, which makes the
data section a hole of zeros that takes no disk, and llama.cpp maps the file (`load_mode` mmap)
without reading it. Widths that do not touch the KV cache are shrunk (feed-forward 64, vocabulary
64, 4 experts) so the compute graphs llama.cpp reserves stay small; everything the cache is sized
from is the real model's.

Which tensors an architecture needs is not written down here: `discover_tensors` asks llama.cpp
itself. It loads the file, reads the loader's error ("missing tensor 'blk.0.attn_q.weight'",
"tensor '...' has wrong shape; expected 2048, 512, got ..." in `src/llama-model-loader.cpp`),
adds or reshapes that tensor (for every layer of the same class at once) and loads again, until
the model loads. The writer uses the `gguf` package (`GGUFWriter`); shapes are given in ggml
order (ne[0], the row, first) and reversed for the writer, which takes numpy order.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: ggml type ids of the KV cache types the grid uses (ggml/include/ggml.h `enum ggml_type`)
GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}
#: the widths that do not size the KV cache, shrunk
SMALL_FF, SMALL_VOCAB, SMALL_EXPERTS = 64, 64, 4

MISSING = re.compile(r"missing tensor '([^']+)'|tensor '([^']+)' not found")
WRONG_SHAPE = re.compile(r"tensor '([^']+)' has wrong shape; expected ([-\d, ]+), got")


@dataclass
class Geometry:
    """One model's KV geometry as a GGUF states it.

    `arch`: `general.architecture`; `keys`: metadata without the `{arch}.` prefix (ints are
    written uint32, floats float32, bools bool, lists uint32 arrays or bool arrays);
    `layer_class(il)`: a label for the layers that carry the same tensors (a Mamba layer and an
    attention layer differ; `discover_tensors` copies a tensor learnt on one layer to the others
    of its class); `kvcalc`: how kvcalc gets the model (a bundled name, a path, or a callable
    returning a `ModelSpec`; None: from this very GGUF, through kvcalc's GGUF reader); `real`:
    the published model this geometry is taken from; `kv_widths`: (n_embd_k_gqa, n_embd_v_gqa)
    of an attention layer (values per cell; V 0 for the MLA latent); `state_widths`: (n_embd_r,
    n_embd_s, recurrent layers) of the Mamba / Gated-DeltaNet layers (`src/llama-hparams.cpp`);
    `optional_tensors(il)`: tensors of layer il (suffix -> ggml shape) the loader takes as
    optional (`TENSOR_NOT_REQUIRED`) but the graph needs: the loader's errors cannot teach them.
    """

    name: str
    arch: str
    n_layers: int
    keys: dict[str, Any]
    real: str
    layer_class: Callable[[int], str] = lambda il: "layer"
    kvcalc: Any = None
    kv_widths: tuple[int, int] = (0, 0)
    state_widths: tuple[int, int, int] = (0, 0, 0)
    optional_tensors: Callable[[int], dict[str, tuple[int, ...]]] = lambda il: {}
    general: dict[str, Any] = field(default_factory=dict)
    #: (K, V) values per cell of each `llama_kv_cache: size` line in order, for a case (None:
    #: `kv_widths` for every cache); the 2026 classes make several caches of different rows
    cache_widths: Callable[[dict], list[tuple[int, int]]] | None = None
    #: tensor name suffix -> "I32" for a tensor the graph reads as indices (DeepSeek-V4's hash
    #: routing `ffn_gate_tid2eid`: ggml_mul_mat_id takes I32 ids); every other tensor is F32
    tensor_types: dict[str, str] = field(default_factory=dict)

    def widths_for(self, case: dict, n_lines: int) -> list[tuple[int, int]]:
        """(K, V) widths of the `n_lines` cache size lines llama.cpp printed for `case`."""
        return self.cache_widths(case) if self.cache_widths else [self.kv_widths] * n_lines

    def all_widths(self) -> set[int]:
        """Every row width the oracle needs ggml_row_size of (cache rows and states)."""
        out = {*self.kv_widths, *self.state_widths[:2]}
        if self.cache_widths:
            for fa in ("on", "off"):
                out |= {w for pair in self.cache_widths({"flash_attn": fa}) for w in pair}
        return out


def _add_key(w: Any, key: str, value: Any) -> None:
    if isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, (list, tuple)):
        w.add_array(key, list(value))
    else:  # pragma: no cover - a geometry written wrong
        raise TypeError(f"{key}: {value!r}")


def write_gguf(path: Path, geo: Geometry, tensors: dict[str, tuple[int, ...]]) -> Path:
    """Write `geo`'s metadata and the tensor table `tensors` (name -> ggml shape, every tensor
    F32) to `path`, data left as a hole of the promised length. Returns `path`."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter

    w = GGUFWriter(path, geo.arch)
    w.add_string("general.name", geo.name)
    for k, v in geo.general.items():
        _add_key(w, k, v)
    w.add_uint32(f"{geo.arch}.block_count", geo.n_layers)
    w.add_uint32(f"{geo.arch}.vocab_size", SMALL_VOCAB)
    for k, v in geo.keys.items():
        _add_key(w, f"{geo.arch}.{k}", v)
    w.add_string("tokenizer.ggml.model", "none")  # llama-vocab.cpp: LLAMA_VOCAB_TYPE_NONE, vocab_size dummy tokens
    total = 0
    for name, shape in tensors.items():
        n_values = 1
        for d in shape:
            n_values *= d
        n_bytes = 4 * n_values
        i32 = geo.tensor_types.get(name.split(".", 2)[-1] if name.startswith("blk.") else name) == "I32"
        w.add_tensor_info(
            name,
            tuple(reversed(shape)),
            np.dtype(np.int32 if i32 else np.float32),
            n_bytes,
            raw_dtype=GGMLQuantizationType.I32 if i32 else GGMLQuantizationType.F32,
        )
        total += -(-n_bytes // w.data_alignment) * w.data_alignment
    w.write_header_to_file(path)
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    header_end = path.stat().st_size
    data_start = -(-header_end // w.data_alignment) * w.data_alignment
    os.truncate(path, data_start + total)  # a hole: no disk, reads as zeros
    return path


def _layer_of(name: str) -> int | None:
    parts = name.split(".")
    return int(parts[1]) if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit() else None


def discover_tensors(
    geo: Geometry, workdir: Path, try_load: Callable[[Path], tuple[bool, list[str]]], max_rounds: int = 400
) -> dict[str, tuple[int, ...]]:
    """The tensor table llama.cpp wants for `geo`, learnt from its loader's errors.

    `try_load(path)` loads the file with llama.cpp and returns (loaded, log lines). Each round
    adds the tensor the loader misses (as shape (1,)) or gives a tensor the shape it expects, and
    the same to every other layer of that layer's class. Raises `RuntimeError` with the loader's
    last lines when a round learns nothing (an error that is not about a tensor).
    """
    tensors = {
        f"blk.{il}.{suffix}": shape for il in range(geo.n_layers) for suffix, shape in geo.optional_tensors(il).items()
    }
    path = workdir / f"{geo.name}.gguf"
    for _ in range(max_rounds):
        write_gguf(path, geo, tensors)
        ok, lines = try_load(path)
        if ok:
            return tensors
        text = "\n".join(lines)
        shape_err = WRONG_SHAPE.search(text)
        missing = MISSING.search(text)
        if shape_err:
            name = shape_err.group(1)
            shape = tuple(int(x) for x in shape_err.group(2).split(","))
        elif missing:
            name, shape = missing.group(1) or missing.group(2), (1,)
        else:
            raise RuntimeError(
                f"{geo.name}: llama.cpp does not load the file and names no tensor:\n" + "\n".join(lines[-15:])
            )
        il = _layer_of(name)
        if il is None:
            tensors[name] = shape
            continue
        suffix = name.split(".", 2)[2]
        cls = geo.layer_class(il)
        for j in range(geo.n_layers):
            if geo.layer_class(j) == cls:
                tensors[f"blk.{j}.{suffix}"] = shape
    raise RuntimeError(f"{geo.name}: no loadable tensor table after {max_rounds} rounds")
