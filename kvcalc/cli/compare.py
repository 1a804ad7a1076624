"""`kvcalc compare`: a model as MHA, as its own GQA and as MQA, side by side."""

from __future__ import annotations

from kvcalc.cli.options import BatchOpt, FormatOpt, KvDtypeOpt, ModelArg, SeqLenOpt, check_positive, resolve_seq_len
from kvcalc.cli.output import emit, handle_errors

@handle_errors
def compare(
    model: ModelArg,
    seq_len: SeqLenOpt = None,
    batch: BatchOpt = 1,
    kv_dtype: KvDtypeOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """MODEL as MHA, as its own GQA, and as MQA, side by side, with each one's saving against MHA."""
    from kvcalc.calc import kv_cache
    from kvcalc.report import tables
    from kvcalc.formats import kv_format
    from kvcalc.load.models import load_model

    check_positive(batch=batch)
    spec = load_model(model)
    T = resolve_seq_len(spec, seq_len)
    dtype = kv_format(kv_dtype or spec.dtype).name
    rows = kv_cache.compare_attention(spec, T, batch, dtype)
    title = f"{spec.name}: {spec.n_heads} query heads, {T:,} tokens x batch {batch}, {dtype}"
    emit(rows, fmt, lambda: tables.rows_table(rows, [
        ("variant", "variant"), ("n_kv_heads", "KV heads"), ("kv_bytes_per_token", "B/token"),
        ("kv_cache_bytes", "KV cache"), ("reduction_vs_mha_percent", "saving vs MHA %")], title))
