"""Write the GGUF file the documentation's examples read, so that they run as shown without the
4.9 GB download:

    python tools/example_gguf.py [FOLDER]      (default: the current folder)

writes `Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf`: the metadata llama.cpp's converter writes for
meta-llama/Llama-3.1-8B-Instruct at file type Q4_K_M (32 layers, 32 heads on 8 KV heads, head size
4096 / 32 = 128, 131,072 tokens of context; `tests/load/gguf_files.py` `LLAMA_8B_KV`) and tiny
tensors (`tiny_layers`, `ENDS`), written with the `gguf` package's own `GGUFWriter`. Everything
kvcalc reads for the KV cache is the model's; the tensor table, and so any weight figure, is not.
The docs' examples (tests/test_readme.py) are run on this same file.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the file the examples name
NAME = "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"


def write_llama_8b(folder: Path, name: str = NAME) -> Path:
    """Write the example file into `folder`; returns its path. Needs the gguf package."""
    sys.path.insert(0, str(ROOT / "tests" / "load"))
    from gguf_files import ENDS, LLAMA_8B_KV, tiny_layers, write_gguf

    return write_gguf(folder / name, "llama", LLAMA_8B_KV, tiny_layers(32) + ENDS)


def main() -> None:
    try:
        import gguf  # noqa: F401
    except ImportError:
        sys.exit("tools/example_gguf.py needs the gguf package: pip install 'kvcalc[gguf]'")
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()
    path = write_llama_8b(folder)
    print(f"wrote {path.name} ({path.stat().st_size:,} B)")


if __name__ == "__main__":
    main()
