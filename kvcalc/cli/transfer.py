"""`kvcalc transfer`: the KV bytes one request moves from a prefill layout to a decode layout.

`kvcalc transfer llama-3.1-70b --tokens 8k --prefill-tp 4 --decode-tp 8 --link rdma-400g`
prints the bytes per (prefill rank, decode rank) pair, the regions the transfer touches, the
time over the link, and with `--gpu` and `--output-tokens` the prefill-to-decode GPU ratio.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvcalc.cli.options import (
    PLAIN_KV_DTYPE_HELP,
    FlagSet,
    FormatOpt,
    KvFormatFlags,
    ModelArg,
    RevisionOpt,
    flag_sets,
    only,
)
from kvcalc.cli.output import check_format, emit, handle_errors


class LayoutPair(FlagSet):
    """The two layouts and what moves between them: tensor-parallel ranks on each side, the link,
    the decode side's block size and what it already holds."""

    prefill_tp: Annotated[int, typer.Option("--prefill-tp", help="Tensor-parallel ranks of the prefill layout.")] = 1
    decode_tp: Annotated[int, typer.Option("--decode-tp", help="Tensor-parallel ranks of the decode layout.")] = 1
    link: Annotated[
        str,
        typer.Option(
            "--link",
            help="The link between the layouts (kvcalc/data/links.yaml: rdma-400g, rdma-200g, nvlink4, nvlink5, pcie5-x16 ...).",
        ),
    ] = "rdma-400g"  # noqa: E501
    block_size: Annotated[
        Optional[int],
        typer.Option(
            "--block-size",
            help="Decode-side block size in tokens (default: vLLM's for this model, as kvcalc's vLLM profile derives it).",
        ),
    ] = None  # noqa: E501
    decode_cached: Annotated[
        Optional[str],
        typer.Option(
            "--decode-cached",
            help="Tokens of the prompt the decode side already holds (its prefix cache): their whole blocks are not moved.",
        ),
    ] = None  # noqa: E501


class RatioFlags(FlagSet):
    """The prefill:decode GPU ratio: the GPU both layouts run on, the output per request, the
    requests a decode layout runs at once."""

    gpu: Annotated[
        Optional[str],
        typer.Option(
            "--gpu",
            help="GPU of both layouts: times prefill and decode with the roofline for the prefill:decode GPU ratio.",
        ),
    ] = None  # noqa: E501
    output_tokens: Annotated[
        Optional[str],
        typer.Option("--output-tokens", help="Output tokens per request (with --gpu: the prefill:decode ratio)."),
    ] = None  # noqa: E501
    decode_batch: Annotated[
        int, typer.Option("--decode-batch", help="Requests each decode layout runs at once (with --output-tokens).")
    ] = 1  # noqa: E501


#: the request's prompt: the KV the prefill side hands over
TokensOpt = Annotated[
    str,
    typer.Option(
        "--tokens", "-t", help="Prompt tokens of the request (8192 or 8k): the KV the prefill side hands over."
    ),
]  # noqa: E501


@handle_errors
@flag_sets()
def transfer(
    model: ModelArg,
    tokens: TokensOpt,
    pair: LayoutPair = LayoutPair(),
    ratio: RatioFlags = RatioFlags(),
    kv: Annotated[
        KvFormatFlags, only("kv_dtype", "k_dtype", "v_dtype", kv_dtype=PLAIN_KV_DTYPE_HELP)
    ] = KvFormatFlags(),
    revision: RevisionOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """The KV bytes one request moves from prefill to decode ranks, per rank pair, over a link; the prefill:decode GPU ratio."""  # noqa: E501
    from kvcalc.load.links import get_link
    from kvcalc.load.models import load_model
    from kvcalc.report.offload import transfer_table
    from kvcalc.requests import check_positive
    from kvcalc.transfer_request import run_transfer
    from kvcalc.units import check_bound, parse_count

    check_format(fmt)
    for flag, tp in (("--prefill-tp", pair.prefill_tp), ("--decode-tp", pair.decode_tp)):
        check_bound("tp", tp, option=flag)  # the --tp bounds, each side's flag named
    check_positive(block_size=pair.block_size, decode_batch=ratio.decode_batch)
    spec = load_model(model, revision)
    N = parse_count(tokens, "--tokens")
    out = parse_count(ratio.output_tokens, "--output-tokens") if ratio.output_tokens else None
    cached = parse_count(pair.decode_cached, "--decode-cached") if pair.decode_cached else 0
    res = run_transfer(
        spec,
        tokens=N,
        prefill_tp=pair.prefill_tp,
        decode_tp=pair.decode_tp,
        link=get_link(pair.link),
        block_size=pair.block_size,
        kv_dtype=kv.kv_dtype,
        k_dtype=kv.k_dtype,
        v_dtype=kv.v_dtype,
        gpu=ratio.gpu,
        output_tokens=out,
        decode_batch=ratio.decode_batch,
        cached_tokens=cached,
    )
    title = f"Prefill -> decode: {spec.name}, {N:,} tokens, tp {pair.prefill_tp} -> tp {pair.decode_tp}"
    emit(res, fmt, lambda: transfer_table(res, title))
