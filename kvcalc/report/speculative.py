"""The table of a `SpeculativeEstimate` (`kvcalc estimate --speculative-config ... --gpu G`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.report import seconds, size
from kvcalc.report.widths import Cell, pairs_table

if TYPE_CHECKING:
    from kvcalc.results.speculative import SpeculativeEstimate


def speculative_table(r: SpeculativeEstimate, *, width: int | None = None):
    """Key/value rows: the draft's weights and KV, the lookahead slots' KV, the extra state
    blocks, memory with them (bytes, GB = 1e9, GiB = 2^30), the verify and draft steps, and TPOT
    and tokens/s at the user's acceptance length (or why there are none)."""
    k = r.num_speculative_tokens
    rows: list[tuple[str, Cell, str | None]] = [
        ("draft weights", size(r.draft_weight_bytes), None),
        ("draft KV", size(r.draft_kv_bytes), None),
        (f"lookahead KV ({r.lookahead_tokens} slots)", size(r.lookahead_kv_bytes), None),
        (f"state blocks (+{k} per seq)", size(r.state_extra_bytes), None),
        (
            "memory per GPU",
            f"{size(r.memory_bytes_per_gpu)} of {size(r.budget_bytes_per_gpu)}: "
            + ("fits" if r.fits else "does not fit"),
            None,
        ),
        (f"verify step ({k + 1} tokens/seq)", seconds(r.verify_step_s), None),
        ("draft step", seconds(r.draft_step_s), None),
    ]
    if r.tpot_s is None:
        rows.append(("TPOT", "give --accepted-len (mean tokens per verify step): kvcalc assumes none", None))
    else:
        rows += [
            (f"TPOT at {r.accepted:g} accepted", seconds(r.tpot_s), None),
            ("tokens/s", f"{r.tokens_per_s:,.1f}", None),
        ]
    rows += [("vLLM", f"--speculative-config '{r.vllm_config}'", None), ("SGLang", r.sglang_flags, None)]
    return pairs_table(f"Speculative decoding: {r.method}, {k} tokens (modelled)", rows, width=width)
