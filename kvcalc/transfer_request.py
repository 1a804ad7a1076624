"""`kvcalc transfer`'s one code path (beside `kvcalc.requests`): checks, the decode block size
from the vLLM profile, the per-pair bytes of `calc.transfer`, the link time and, with a GPU,
the prefill-to-decode GPU ratio from the roofline (`calc.memory_plan.GpuFit`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.errors import MESSAGE, KvcalcError

if TYPE_CHECKING:
    from kvcalc.formats import StorageFormat
    from kvcalc.load.links import LinkSpec
    from kvcalc.results.offload import TransferResult
    from kvcalc.schema import ModelSpec


def decode_block_size(model: ModelSpec, tokens: int, k: StorageFormat, v: StorageFormat, tp: int) -> int:
    """vLLM's block size for `model` at `tp` (`EngineProfile.capacity` on the memory one
    request needs): 16, or an MLA backend's own (64 for FLASHMLA on Hopper)."""
    from kvcalc.engines.profile import get_profile

    prof = get_profile("vllm")
    opts = prof.options(None)
    mem = prof.memory_for(model, tokens, 1, k, v, tp=tp, options=opts)
    return prof.capacity(model, mem, k, v, tp=tp, max_model_len=tokens, options=opts).block_size or 16


def run_transfer(
    model: ModelSpec,
    *,
    tokens: int,
    prefill_tp: int,
    decode_tp: int,
    link: LinkSpec,
    block_size: int | None = None,
    kv_dtype: str | None = None,
    k_dtype: str | None = None,
    v_dtype: str | None = None,
    gpu: str | None = None,
    output_tokens: int | None = None,
    decode_batch: int = 1,
    cached_tokens: int = 0,
) -> TransferResult:
    """The `TransferResult` of one request of `tokens` from `prefill_tp` to `decode_tp` ranks
    over `link` (a `LinkSpec`), `gpu` a GPU name or file; the decode side already holds a prefix of `cached_tokens`. Raises `KvcalcError` for a TP the model cannot split, layers
    whose transfer is not modelled, --output-tokens without --gpu."""
    from kvcalc.calc import transfer as T
    from kvcalc.calc.kv_cache import check_tp
    from kvcalc.requests import check_limits, kv_formats
    from kvcalc.results.offload import TransferPair, TransferResult

    check_limits([], [tokens])
    for flag, tp in (("--prefill-tp", prefill_tp), ("--decode-tp", decode_tp)):
        try:
            check_tp(model, tp)
        except KvcalcError as e:  # check_tp names --tp; here each side has its own flag
            raise KvcalcError(e.reason, option=flag, field=e.field, value=tp, fix=e.fix) from None
    if cached_tokens > tokens:
        raise KvcalcError(
            f"--decode-cached {cached_tokens:,} is more than the prompt's --tokens {tokens:,}: the decode side "
            "holds at most the prompt; give --decode-cached at most --tokens",
            option="--decode-cached",
            value=cached_tokens,
            form=MESSAGE,
        )
    k, v = kv_formats(model, kv_dtype, k_dtype, v_dtype)  # parsed once, here
    block = block_size or decode_block_size(model, tokens, k, v, decode_tp)
    pairs = T.pair_bytes(
        model, tokens, k, v, prefill_tp=prefill_tp, decode_tp=decode_tp, block_size=block, cached_tokens=cached_tokens
    )
    if cached_tokens:
        from kvcalc.calc.offload import reusable_prefix_tokens

        notes_cached = [
            f"the decode side already holds {reusable_prefix_tokens(cached_tokens, tokens, block):,} "
            f"tokens of the prompt (whole blocks of its {cached_tokens:,}): not moved"
        ]
    else:
        notes_cached = []
    per_decode = [sum(b for (_, j), (b, _, _) in pairs.items() if j == d) for d in range(decode_tp)]
    worst = max(per_decode)
    notes = [
        f"whole blocks of {block} tokens move (nixl/base_worker.py: one descriptor per region per block); "
        "each decode rank pulls over its own link, so the time is the largest decode rank's bytes / link rate",
        *notes_cached,
    ]
    if model.attention == "mla":
        notes.append("MLA: the latent is replicated on every rank, so each decode rank pulls all of it")
    pre_s = dec_s = ratio = None
    if output_tokens is not None and gpu is None:
        raise KvcalcError(
            "--output-tokens sizes the prefill:decode ratio with the roofline: give --gpu",
            option="--output-tokens",
            form=MESSAGE,
        )
    if gpu is not None and output_tokens is not None:
        from kvcalc.calc.memory_plan import GpuFit, Layout
        from kvcalc.load.gpus import get_gpu

        g = get_gpu(gpu)
        pre_s = GpuFit(model, g, Layout(tp=prefill_tp, k_dtype=k, v_dtype=v)).prefill(tokens).step_time_s
        step = (
            GpuFit(model, g, Layout(tp=decode_tp, k_dtype=k, v_dtype=v))
            .decode(tokens + output_tokens // 2, decode_batch)
            .step_time_s
        )
        dec_s = output_tokens * step
        ratio = T.prefill_decode_ratio(pre_s, prefill_tp, step, decode_tp, output_tokens, decode_batch)
        notes.append(
            f"decode timed at the mean context {tokens + output_tokens // 2:,} tokens, {decode_batch} "
            "request(s) per decode layout; prefill of one prompt per prefill layout"
        )
    return TransferResult(
        model=model.name,
        tokens=tokens,
        prefill_tp=prefill_tp,
        decode_tp=decode_tp,
        kv_dtype=k.name if k.name == v.name else f"{k.name}/{v.name}",
        request_bytes=sum(b for b, _, _ in pairs.values()),
        bytes_per_decode_rank=worst,
        pairs=[
            TransferPair(
                prefill_rank=i,
                decode_rank=j,
                kv_heads="latent" if model.attention == "mla" else str(h),
                bytes=b,
                regions=r,
            )
            for (i, j), (b, r, h) in pairs.items()
        ],
        prefill_block_size=block,
        decode_block_size=block,
        blocks_per_request=-(-tokens // block),
        regions_per_transfer=max(r for _, r, _ in pairs.values()),
        link=link.key,
        link_bytes_per_s=link.bytes_per_s,
        link_source=link.source,
        time_s=worst / link.bytes_per_s,
        prefill_s=pre_s,
        decode_s=dec_s,
        output_tokens=output_tokens,
        prefill_decode_ratio=ratio,
        notes=notes,
    )
