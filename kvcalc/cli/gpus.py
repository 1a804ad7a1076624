"""`kvcalc gpus`: the bundled GPU table."""

from __future__ import annotations

from kvcalc.cli.options import FormatOpt
from kvcalc.cli.output import echo, emit, handle_errors


@handle_errors
def gpus(fmt: FormatOpt = "table") -> None:
    """List the bundled GPUs: memory as the device reports it, HBM bandwidth, dense FLOP/s."""
    from kvcalc.load.gpus import gpu_table

    rows = list(gpu_table().values())
    if fmt != "table":
        emit(rows, fmt, lambda: None)
        return
    from kvcalc.report.tables import gpus_table

    echo(gpus_table(rows))
