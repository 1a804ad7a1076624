"""`kvcalc import PATH [-o OUT.yaml]`: a Hugging Face config.json (or any model config kvcalc
reads) written out as a compact kvcalc model YAML.

The YAML holds only the fields that are set, `name` and `source` first, and loads back to the
same `ModelSpec` (the same layer kinds and bytes; tests/load/test_hf.py and
tests/bad_input/test_import_round_trip.py check every fixture and hostile strings): the text is
written by the YAML library, and parsed back and compared before it is printed or written
(`load.export.check_round_trip`), so an import round-trips or is refused. `-o` never replaces an
existing file without `--force` and writes atomically (`cli.output.write_atomic`). Warnings the
conversion raised (an unknown model_type read as a plain decoder) are printed as usual and also
written into the YAML's header comment, one escaped line each.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.cli.options import TrustPlainOpt
from kvcalc.cli.output import _err_console, check_target, echo, handle_errors, write_atomic
from kvcalc.errors import KvcalcError, KvcalcWarning


@handle_errors
def import_(
    path: Annotated[str, typer.Argument(help="A Hugging Face config.json (or a folder holding one).")],
    output: Annotated[
        Optional[str],
        typer.Option(
            "--output", "-o", help="Write the YAML here instead of stdout (an existing file only with --force)."
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the -o file if it exists.")] = False,
    trust_plain_decoder: TrustPlainOpt = False,
) -> None:
    """Convert a Hugging Face config.json into a kvcalc model YAML (stdout, or -o FILE)."""
    from kvcalc.load.export import check_round_trip, spec_to_yaml
    from kvcalc.load.models import load_model, user_path
    from kvcalc.text import escape_controls

    src = user_path(path)
    src = src / "config.json" if src.is_dir() else src
    if output is not None:
        if src.exists() and Path(output).exists() and Path(output).resolve() == src.resolve():
            raise KvcalcError("is the input file; write the YAML to another path", option="-o", value=output)
        check_target(output, "-o", force=force)  # before any work
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", KvcalcWarning)
        spec = load_model(path, trust_plain_decoder=trust_plain_decoder)
    for w in caught:  # shown on stderr as before (handle_errors prints KvcalcWarning lines)
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    text = spec_to_yaml(spec, [str(w.message) for w in caught if issubclass(w.category, KvcalcWarning)])
    check_round_trip(spec, text)
    if output is None:
        echo(text.rstrip("\n"))
        return
    write_atomic(output, text, option="-o", force=force)
    _err_console().print(escape_controls(f"wrote {output} ({spec.name}: {spec.n_layers} layers)"), markup=False)
