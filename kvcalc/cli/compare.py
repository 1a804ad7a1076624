"""`kvcalc compare`: a model as MHA, as its own GQA and as MQA, side by side; or several models,
each with its own attention and KV bytes, at one context, batch and KV dtype."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from kvcalc.cli.options import (
    BatchOpt,
    FormatOpt,
    PlainKvDtypeOpt,
    SeqLenOpt,
    TrustPlainOpt,
    check_positive,
    resolve_seq_len,
)
from kvcalc.cli.output import check_format, emit, handle_errors

ModelsArg = Annotated[
    list[str],
    typer.Argument(
        help="One or more models: bundled names (see `kvcalc models`), .yaml files, config.json files or .gguf files.",
        show_default=False,
    ),
]

if TYPE_CHECKING:
    from kvcalc.schema import ModelSpec


@handle_errors
def compare(
    models: ModelsArg,
    seq_len: SeqLenOpt = None,
    batch: BatchOpt = 1,
    kv_dtype: PlainKvDtypeOpt = None,
    trust_plain_decoder: TrustPlainOpt = False,
    fmt: FormatOpt = "table",
) -> None:
    """MODEL as MHA, as its own GQA, and as MQA, side by side, with each one's saving against MHA.

    With several models (MLA included), one row per model: its own attention and KV bytes at the
    same context (default: the shortest max_position_embeddings among them), batch and KV dtype
    (default: their common dtype)."""
    from kvcalc.calc import kv_cache
    from kvcalc.formats import kv_format
    from kvcalc.load.models import load_model
    from kvcalc.report import tables

    check_positive(batch=batch)
    specs = [load_model(m, trust_plain_decoder=trust_plain_decoder) for m in models]
    if len(specs) > 1:
        return compare_models(specs, seq_len, batch, kv_dtype, fmt)
    spec = specs[0]
    from kvcalc.requests import refuse_without_kv_layers

    refuse_without_kv_layers(spec, "comparing its KV heads (MHA / GQA / MQA)")
    T = resolve_seq_len(spec, seq_len)
    fmt_ = kv_format(kv_dtype or spec.dtype_format)  # parsed once: every variant reads the object
    dtype = fmt_.name
    rows = kv_cache.compare_attention(spec, T, batch, fmt_)
    title = f"{spec.name}: {spec.n_heads} query heads, {T:,} tokens x batch {batch}, {dtype}"
    emit(
        rows,
        fmt,
        lambda: tables.rows_table(
            rows,
            [
                ("variant", "variant"),
                ("n_kv_heads", "KV heads"),
                ("kv_bytes_per_token", "B/token"),
                ("kv_cache_bytes", "KV cache"),
                ("reduction_vs_mha_percent", "saving vs MHA %"),
            ],
            title,
        ),
    )


def compare_models(specs: list[ModelSpec], seq_len: str | None, batch: int, kv_dtype: str | None, fmt: str) -> None:
    """Several models side by side: one `KvEstimate` each (machine formats: a list of the usual
    `kvcalc estimate` objects), at one context (`requests.shared_seq_len`), batch and KV format
    (`requests.shared_kv_dtype`); the table says where the context came from."""
    from kvcalc.report.tables import compare_models_table
    from kvcalc.requests import EstimateRequest, run_estimate, shared_kv_dtype, shared_seq_len

    check_format(fmt)
    T = shared_seq_len(specs, seq_len)
    dtype = shared_kv_dtype(specs, kv_dtype)
    rows = [run_estimate(EstimateRequest.build(s, seq_len=T, batch=batch, kv_dtype=dtype)).kv for s in specs]
    where = "" if seq_len is not None else " (the models' shortest context)"
    title = f"KV cache at {T:,} tokens{where}, batch {batch}, {dtype}"
    emit(rows, fmt, lambda: compare_models_table(rows, title))
