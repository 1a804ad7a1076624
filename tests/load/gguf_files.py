"""Tiny GGUF files for the tests, written with the `gguf` package's own `GGUFWriter` (real
metadata keys, real hyperparameters where a test says so, tiny tensors). Not a test module.

`write_gguf(path, arch, kv, tensors)`: `kv` maps a key without the `{arch}.` prefix (`block_count`,
`attention.head_count_kv`) or a full `general.` / `tokenizer.` key to its value, written with
the GGUF type the converters use (uint32 for counts, a uint32 array for per-layer lists, a bool
array for a per-layer sliding-window pattern); `tensors` lists (name, ggml type name, shape in
ggml order: row length first). Each tensor holds zeros of exactly its stored size.
"""

from __future__ import annotations

from pathlib import Path

try:
    import gguf
except ImportError:  # a test module that imports this file is skipped (tools/example_gguf.py says why)
    gguf = __import__("pytest").importorskip(
        "gguf", reason="the gguf package is not installed (pip install 'kvcalc[gguf]')"
    )
np = __import__("numpy")

T = gguf.GGMLQuantizationType


def stored_bytes(type_name: str, shape: tuple[int, ...]) -> int:
    """values / block values x block bytes (the package's GGML_QUANT_SIZES)."""
    block, size = gguf.GGML_QUANT_SIZES[T[type_name]]
    n = 1
    for d in shape:
        n *= d
    return n // block * size


def write_gguf(path: Path, arch: str, kv: dict, tensors: list[tuple[str, str, tuple[int, ...]]]) -> Path:
    """Write a GGUF file (see the module docstring); returns `path`."""
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in kv.items():
        full = key if key.startswith(("general.", "tokenizer.")) else f"{arch}.{key}"
        if isinstance(value, bool):
            w.add_bool(full, value)
        elif isinstance(value, int):
            w.add_uint32(full, value)
        elif isinstance(value, str):
            w.add_string(full, value)
        elif (
            isinstance(value, list)
            and value
            and isinstance(value[0], str)
            or isinstance(value, list)
            and value
            and isinstance(value[0], bool)
        ):
            w.add_array(full, value)
        elif isinstance(value, list):
            w.add_key_value(full, value, gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.UINT32)
        else:
            raise TypeError(f"{key}: {value!r}")
    for name, type_name, shape in tensors:
        qtype = T[type_name]
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        row_bytes = shape[0] // block * size
        byte_shape = tuple(reversed(shape[1:])) + (row_bytes,)
        w.add_tensor(name, np.zeros(byte_shape, dtype=np.uint8), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


#: Llama-3.1-8B's hyperparameters as llama.cpp's converter writes them (meta-llama/Llama-3.1-8B
#: config.json: 32 layers, hidden 4096, 32 heads, 8 KV heads, MLP 14336, vocab 128256, 131072
#: context); file type 15 = MOSTLY_Q4_K_M.
LLAMA_8B_KV = {
    "block_count": 32,
    "context_length": 131072,
    "embedding_length": 4096,
    "feed_forward_length": 14336,
    "attention.head_count": 32,
    "attention.head_count_kv": 8,
    "rope.dimension_count": 128,
    "vocab_size": 128256,
    "general.file_type": 15,
    "general.name": "Meta Llama 3.1 8B Instruct",
}


def tiny_layers(n_layers: int) -> list[tuple[str, str, tuple[int, ...]]]:
    """Two tiny tensors per layer: attn_q Q4_K of 256 x 2 (2 blocks x 144 = 288 B) and attn_norm
    F32 of 8 (32 B): 320 B and 520 values per layer."""
    out = []
    for i in range(n_layers):
        out += [(f"blk.{i}.attn_q.weight", "Q4_K", (256, 2)), (f"blk.{i}.attn_norm.weight", "F32", (8,))]
    return out


#: token_embd Q6_K 256 x 4 (4 x 210 = 840 B), output Q8_0 64 x 32 (2048 / 32 x 34 = 2,176 B),
#: output_norm F32 16 (64 B)
ENDS = [
    ("token_embd.weight", "Q6_K", (256, 4)),
    ("output.weight", "Q8_0", (64, 32)),
    ("output_norm.weight", "F32", (16,)),
]
