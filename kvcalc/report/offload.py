"""Tables of the KV-beyond-the-GPU results (`OffloadResult`, `PrefixResult`, `LoadRow`,
`TransferResult`): formatting only, every figure comes computed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

from kvcalc.report import gib, seconds, size
from kvcalc.report.widths import Cell, Col, grid, pairs_table

if TYPE_CHECKING:
    from rich.console import RenderableType

    from kvcalc.results import PlanResult
    from kvcalc.results.offload import (
        LoadRow,
        LoadRows,
        OffloadPart,
        OffloadResult,
        PrefixPart,
        PrefixResult,
        TransferResult,
    )


def _rate(bytes_per_s: int) -> str:
    return f"{bytes_per_s / 1e9:,.1f} GB/s"


def offload_table(r: OffloadResult, title: str, *, width: int | None = None) -> RenderableType:
    """The tiers (per rank), the host bytes and check, the flags, the notes (the engine's lines:
    `log_text`)."""
    from rich.console import Group

    tiers = grid(
        [Col("tier", "id", justify="left"), Col("tokens per rank"), Col("bytes per rank"), Col("sessions")],
        [
            [
                t.tier,
                f"{t.tokens_per_rank:,}",
                gib(t.bytes_per_rank),
                "n/a" if t.sessions is None else f"{t.sessions:,}",
            ]
            for t in r.tiers
        ],
        width=width,
        title=title,
        caption=f"sessions: of {r.session_tokens:,} tokens each" if r.session_tokens else None,
    )
    rows: list[tuple[str, Cell, str | None]] = [
        ("engine flags", "\n".join(r.flags), None),
        ("size read as", r.size_rule, None),
    ]
    if r.num_chunks is not None:
        rows.append(("chunks", f"{r.num_chunks:,} of {r.chunk_tokens:,} tokens, {r.bytes_per_chunk:,} B each", None))
    rows.append(("host per rank", size(r.host_bytes_per_rank), None))
    rows.append(
        (
            f"host per node ({r.ranks_per_node} rank{'s' if r.ranks_per_node > 1 else ''})",
            size(r.host_bytes_per_node),
            None,
        )
    )
    if r.host_memory_bytes is not None:
        rows.append(("--host-memory", f"{size(r.host_memory_bytes)}: fits", None))
    if r.sessions_warm is not None:
        rows.append(("sessions kept warm", f"{r.sessions_warm:,} of {r.session_tokens:,} tokens", "bold"))
    for n in r.notes:
        rows.append(("note", n, None))
    return Group(tiers, pairs_table(None, rows, width=width))


def log_text(engine: str, lines: list[str]) -> str:
    """The engine's own lines as plain text, never wrapped or cropped (they diff against its log)."""
    return f"{engine} would log:\n" + "\n".join(lines) if lines else ""


def prefix_table(p: PrefixResult, title: str, *, width: int | None = None) -> RenderableType:
    """The shared-prefix figures and warnings."""
    u = p.unit
    rows: list[tuple[str, Cell, str | None]] = [
        ("reuse unit", f"{p.reuse_unit_tokens:,} tokens", None),
        ("reusable", f"{p.reusable_tokens:,} of {p.prefix_tokens:,} prefix tokens", None),
        (f"shared {u}", f"{p.shared_blocks:,} (held once)", None),
        (f"own {u} per request", f"{p.own_blocks_per_request:,} of {p.blocks_per_request:,}", None),
        (f"usable {u}", f"{p.usable_blocks:,}", None),
        (
            "max concurrency",
            f"{p.max_concurrency_shared:,} requests shared, {p.max_concurrency_unshared:,} unshared",
            "bold",
        ),
    ]
    if p.kv_occupancy is not None:
        rows.append((f"KV occupancy at {p.concurrency}x", f"{p.kv_occupancy:.1%}", None))
    rows.append(
        (
            "prefill saved",
            f"{p.prefill_saved_tokens:,.0f} tokens per request ({p.prefill_saved_fraction:.1%};"
            f" hit rate {p.hit_rate:g})",
            None,
        )
    )
    for w in p.warnings:
        rows.append(("warning", w, "yellow"))
    return pairs_table(title, rows, width=width)


def load_table(rows: list[LoadRow], title: str, *, width: int | None = None) -> RenderableType:
    """One row per link: bytes, load time, recompute time, which is faster, break-even prefix."""
    return grid(
        [
            Col("link", "id", justify="left"),
            Col("GB/s one way", short="GB/s"),
            Col("load"),
            Col("recompute", short="recomp."),
            Col("faster", "id", justify="left"),
            Col("break-even tokens", short="break-even"),
        ],
        [
            [
                r.link,
                f"{r.link_bytes_per_s / 1e9:,.1f}",
                seconds(r.load_s),
                seconds(r.recompute_s),
                r.faster,
                "none" if r.break_even_tokens is None else f"{r.break_even_tokens:,}",
            ]
            for r in rows
        ],
        width=width,
        title=title,
        caption="load: the prefix's bytes on one rank over its own link at the datasheet peak; recompute: "
        "the prefill model's marginal time for those tokens",
    )


def transfer_table(t: TransferResult, title: str, *, width: int | None = None) -> RenderableType:
    """A prefill-to-decode transfer: totals, then bytes per rank pair."""
    from rich.console import Group

    rows: list[tuple[str, Cell, str | None]] = [
        ("request KV", size(t.request_bytes), None),
        ("per decode rank", size(t.bytes_per_decode_rank), None),
        ("decode blocks", f"{t.blocks_per_request:,} of {t.decode_block_size:,} tokens", None),
        ("regions per transfer", f"{t.regions_per_transfer:,}", None),
        ("link", f"{t.link}: {_rate(t.link_bytes_per_s)} one way ({t.link_source})", None),
        ("transfer time", seconds(t.time_s), "bold"),
    ]
    if t.prefill_decode_ratio is not None:
        rows.append(("prefill time", seconds(t.prefill_s), None))
        rows.append((f"decode time ({t.output_tokens:,} tokens)", seconds(t.decode_s), None))
        rows.append(("prefill : decode GPUs", f"{t.prefill_decode_ratio:.2f} : 1", "bold"))
    for n in t.notes:
        rows.append(("note", n, None))
    pairs = grid(
        [
            Col("prefill rank", short="P"),
            Col("decode rank", short="D"),
            Col("KV heads", "id"),
            Col("bytes"),
            Col("regions"),
        ],
        [[f"{p.prefill_rank}", f"{p.decode_rank}", p.kv_heads, f"{p.bytes:,}", f"{p.regions:,}"] for p in t.pairs],
        width=width,
    )
    return Group(pairs_table(title, rows, width=width), pairs)


def part_table(
    part: Union[OffloadPart, PrefixPart, LoadRows], title: str, *, width: int | None = None
) -> RenderableType:
    """The table of one part `kvcalc capacity` adds (`offload_request.capacity_extras`):
    `OffloadPart`, `PrefixPart` or `LoadRows`."""
    from kvcalc.results.offload import OffloadPart, PrefixPart

    if isinstance(part, OffloadPart):
        return offload_table(part.offload, title, width=width)
    if isinstance(part, PrefixPart):
        return prefix_table(part.shared_prefix, title, width=width)
    return load_table(part.load_or_recompute, title, width=width)


def plan_sessions_lines(res: PlanResult, width: int = 80) -> list[str]:
    """`kvcalc plan`'s table output with an offload tier: the sessions each layout keeps warm over
    the GPU and the tier (all replicas; each tier's per replica) and the host memory it pins per
    node, as plain lines under the table (a heading, then one line per layout; none without a
    tier). A line longer than `width` puts its host figures on a second, indented line, so no
    number is cut at 80 columns or in a pipe."""
    lines: list[str] = []
    for lay in res.layouts:
        o = lay.offload
        if o is None:
            continue
        if not lines:
            lines.append(f"sessions of {lay.seq_len:,} tokens kept warm (GPU, offload tier); host per node:")
        tiers = ", ".join(f"{t.tier} {t.sessions:,}" for t in o.tiers if t.sessions is not None)
        per = f" = {o.sessions_warm:,} x {lay.dp} replicas" if lay.dp > 1 and o.sessions_warm is not None else ""
        host = f"{o.host_bytes_per_node / 1e9:,.2f} GB"
        if o.host_memory_bytes is not None:
            host += f" of {o.host_memory_bytes / 1e9:,.2f} GB"
        head = f"  #{lay.rank}: {lay.sessions_warm or 0:,}{per} ({tiers})"
        one = f"{head}; host {host}"
        lines += [one] if len(one) <= width else [f"{head};", f"{' ' * (len(str(lay.rank)) + 5)}host {host}"]
    return lines
