"""`kvcalc models`: the bundled model configs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.cli.options import FormatOpt
from kvcalc.cli.output import echo, emit, handle_errors

if TYPE_CHECKING:
    from kvcalc.report.tables import ModelRow


@handle_errors
def models(fmt: FormatOpt = "table") -> None:
    """List the bundled model configs."""
    from kvcalc.load.files import bundled
    from kvcalc.load.models import load_model_file
    from kvcalc.report import kinds_summary

    rows: list[ModelRow] = []
    for name, path in bundled("models").items():
        m = load_model_file(path)
        rows.append(
            {
                "name": name,
                "attention": m.attention_kind,
                "n_layers": m.n_layers,
                "n_heads": m.n_heads,
                "n_kv_heads": m.resolved_n_kv_heads,
                "head_dim": m.resolved_head_dim,
                "layers": kinds_summary(m.layer_kinds),
                "max_position_embeddings": m.max_position_embeddings,
                "source": m.source,
            }
        )
    if fmt != "table":
        emit(rows, fmt, lambda: None)
        return
    from kvcalc.report.tables import models_table

    echo(models_table(rows))
