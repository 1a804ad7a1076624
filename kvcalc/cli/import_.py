"""`kvcalc import PATH [-o OUT.yaml]`: a Hugging Face config.json (or any model config kvcalc
reads) written out as a compact kvcalc model YAML.

The YAML holds only the fields that are set, `name` and `source` first, and loads back to the
same `ModelSpec` (the same layer kinds and bytes; tests/test_hf.py checks every fixture). A
file is written to a temporary file beside the target and renamed over it, so an error never
leaves half a file. Warnings the conversion raised (an unknown model_type read as a plain
decoder) are printed as usual and also written into the YAML's header comment.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.cli.output import _err_console, echo, handle_errors, write_atomic
from kvcalc.errors import KvcalcError, KvcalcWarning

@handle_errors
def import_(
    path: Annotated[str, typer.Argument(help="A Hugging Face config.json (or a folder holding one).")],
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the YAML here instead of stdout.")] = None,
) -> None:
    """Convert a Hugging Face config.json into a kvcalc model YAML (stdout, or -o FILE)."""
    from kvcalc.load.export import spec_to_yaml
    from kvcalc.load.models import load_model

    src = Path(path).expanduser()
    src = src / "config.json" if src.is_dir() else src
    if output is not None and src.exists() and output.expanduser().resolve() == src.resolve():
        raise KvcalcError(f"-o {output}: is the input file; write the YAML to another path")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", KvcalcWarning)
        spec = load_model(path)
    for w in caught:  # shown on stderr as before (handle_errors prints KvcalcWarning lines)
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    text = spec_to_yaml(spec, [str(w.message) for w in caught if issubclass(w.category, KvcalcWarning)])
    if output is None:
        echo(text.rstrip("\n"))
        return
    write_atomic(output, text)
    _err_console().print(f"wrote {output} ({spec.name}: {spec.n_layers} layers)", markup=False)
