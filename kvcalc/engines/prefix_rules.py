"""A prefix every request shares (a system prompt), as each engine's prefix cache reuses it,
and whether a cached prefix loads back faster than it recomputes.

- vLLM 0.33 (`vllm/v1/core/kv_cache_manager.py` `get_computed_blocks`,
  `vllm/v1/core/kv_cache_utils.py` `resolve_kv_cache_block_sizes`): hits are whole blocks of
  the scheduler block (a hybrid Mamba model's aligned block, 784-7,808 tokens, as
  `EngineProfile.capacity` derives it: its `block_size`), up to the prompt's length - 1. A
  shared block is held once (ref-counted) by every request that hits it. A request's blocks are
  the engine's own count (`EngineProfile.memory_for` at a batch of 2, / 2 / block bytes), so
  sliding-window and Mamba groups keep what they keep; the blocks a prefix shares are
  blocks(N) - blocks(N - reusable).
- SGLang 0.5.23 (`managers/schedule_batch.py` `_compute_max_prefix_len`, `radix_cache.py`):
  the radix tree matches whole pages (`--page-size`, default 1) up to input_len - 1; pool
  tokens hold the prefix once.
- llama.cpp: each slot keeps its own cells (no shared storage of a prefix): refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from kvcalc.calc import offload as C
from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.results.engine import EngineResult
from kvcalc.results.offload import LoadRow, PrefixResult
from kvcalc.schema import ModelSpec

if TYPE_CHECKING:
    from kvcalc.engines.profile import AnyProfile, EngineOptions
    from kvcalc.formats import StorageFormat
    from kvcalc.load.links import LinkSpec


def _check(prefix_tokens: int, prompt_tokens: int, hit_rate: float) -> None:
    if prefix_tokens <= 0:
        raise KvcalcError(
            f"--shared-prefix must be a positive number of tokens, got {prefix_tokens}",
            option="--shared-prefix",
            value=prefix_tokens,
            form=MESSAGE,
        )
    if prefix_tokens > prompt_tokens:
        raise KvcalcError(
            f"--shared-prefix {prefix_tokens:,} is longer than the request ({prompt_tokens:,} tokens, --max-model-len)",
            option="--shared-prefix",
            value=prefix_tokens,
            form=MESSAGE,
        )
    if not 0 <= hit_rate <= 1:
        raise KvcalcError(
            f"--prefix-hit-rate is a fraction in [0, 1], got {hit_rate:g}",
            option="--prefix-hit-rate",
            value=hit_rate,
            form=MESSAGE,
        )


def shared_prefix(
    prof: AnyProfile,
    model: ModelSpec,
    gpu: EngineResult,
    k: StorageFormat,
    v: StorageFormat,
    *,
    tp: int,
    options: EngineOptions | None,
    prefix_tokens: int,
    prompt_tokens: int,
    hit_rate: float = 1.0,
    concurrency: int | None = None,
) -> PrefixResult:
    """The shared-prefix figures of `prof`'s engine (see the module docstring): reusable tokens,
    shared and own blocks, max concurrency with and without sharing, KV occupancy at
    `concurrency`, prefill saved per request (x `hit_rate`, the share of requests that find the
    prefix cached), and warnings (a prefix shorter than one block; tokens past the last whole
    block). Raises `KvcalcError` for engines without shared prefix storage, prefix caching turned
    off, or bad values."""
    from kvcalc.engines.offload_rules import vllm_blocks_per_request

    _check(prefix_tokens, prompt_tokens, hit_rate)
    warnings: list[str] = []
    name = prof.name
    if name == "vllm":
        if "V0" in gpu.engine_version:
            raise KvcalcError(
                "--shared-prefix is modelled for vLLM's V1 engine (0.11, 0.33)", option="--shared-prefix", form=MESSAGE
            )
        if getattr(options, "prefix_caching", None) is False:
            raise KvcalcError(
                "--shared-prefix with --no-enable-prefix-caching: vLLM reuses nothing",
                option="--shared-prefix",
                form=MESSAGE,
            )
        unit = gpu.block_size or 1
        usable = max(gpu.usable_blocks or 0, 0)
        reusable = C.reusable_prefix_tokens(prefix_tokens, prompt_tokens, unit)
        per_req = vllm_blocks_per_request(prof, model, prompt_tokens, gpu, k, v, tp=tp, options=options)
        rest = (
            vllm_blocks_per_request(prof, model, prompt_tokens - reusable, gpu, k, v, tp=tp, options=options)
            if reusable
            else per_req
        )
        shared = per_req - rest
        own = per_req - shared
        what = "blocks"
        unit_words = f"vLLM's block of {unit:,} tokens" + (
            " (this hybrid model's aligned block)"
            if any(layer.kind in ("mamba", "linear") for layer in model.layers)
            else ""
        )
    elif name == "sglang":
        # one MHA / MLA pool (sliding layers sized as full ones hold every token, as a full layer):
        # the radix tree's pages hold the prefix once; SGLang's SWA, NSA and Mamba pools are not modelled
        from kvcalc.engines import sglang as SG

        version = getattr(options, "version", None) or "current"
        kinds = {layer.kind for layer in model.layers} - {"mlp"}
        if (
            SG.uses_swa_pool(model, getattr(options, "hybrid_swa_memory", True), version)
            or SG.is_nsa(model)
            or not kinds <= {"full", "sliding", "mla"}
        ):
            raise KvcalcError(
                f"{model.name}: --shared-prefix is modelled for SGLang 0.5.23's one MHA or MLA pool (a sliding "
                "layer sized as a full one included), not its SWA, NSA or Mamba pools (radix_cache.py over "
                "mem_cache/swa_memory_pool.py, the sliding part of a prefix evicted on its own)",
                field="model",
                value=model.name,
                form=MESSAGE,
            )
        unit = gpu.block_size or getattr(options, "page_size", 1) or 1
        usable = gpu.kv_cache_tokens
        reusable = C.reusable_prefix_tokens(prefix_tokens, prompt_tokens, unit)
        per_req = C.cdiv(prompt_tokens, unit) * unit
        shared = reusable
        own = per_req - shared
        what = "tokens"
        unit_words = f"SGLang's page of {unit:,} token{'s' if unit > 1 else ''}"
    else:
        raise KvcalcError(
            f"--shared-prefix: {prof.display_name} keeps each sequence's own cells (no shared storage "
            "of a prefix is modelled); use --engine vllm or sglang",
            option="--shared-prefix",
            form=MESSAGE,
        )
    if prefix_tokens < unit:
        import warnings as w

        from kvcalc.errors import KvcalcWarning

        warnings.append(
            f"the shared prefix of {prefix_tokens:,} tokens is shorter than one block: {unit_words}; "
            "no request gets a prefix-cache hit"
        )
        w.warn(warnings[-1], KvcalcWarning, stacklevel=2)
    elif reusable < prefix_tokens:
        warnings.append(
            f"{prefix_tokens - reusable:,} tokens of the prefix past its last whole block ({unit_words}) "
            "are recomputed by every request"
        )
    conc = None if concurrency is None else (shared + concurrency * own) / usable if usable else None
    saved = hit_rate * reusable
    return PrefixResult(
        engine=name,
        prefix_tokens=prefix_tokens,
        prompt_tokens=prompt_tokens,
        reuse_unit_tokens=unit,
        reusable_tokens=reusable,
        hit_rate=hit_rate,
        shared_blocks=shared,
        own_blocks_per_request=own,
        blocks_per_request=per_req,
        usable_blocks=usable,
        unit=what,
        max_concurrency_shared=C.shared_concurrency(usable, shared, own) if own else 0,
        max_concurrency_unshared=usable // per_req if per_req else 0,
        concurrency=concurrency,
        kv_occupancy=conc,
        prefill_saved_tokens=saved,
        prefill_saved_fraction=saved / prompt_tokens,
        warnings=warnings,
    )


def bytes_per_token_per_rank(gpu: EngineResult) -> int:
    """KV bytes of one token on one rank, from the engine's block: block bytes / block size
    (vLLM); SGLang's pool bytes / tokens (one padding page left out) is its cell size."""
    if gpu.engine == "sglang":
        return gpu.engine_kv_bytes // (gpu.kv_cache_tokens + (gpu.block_size or 1))
    return (gpu.page_size_bytes or 0) // (gpu.block_size or 1)


def load_or_recompute(
    prefix: PrefixResult, bytes_per_token: int, links: list[LinkSpec], recompute_s: Callable[[int], float]
) -> list[LoadRow]:
    """One `LoadRow` per link: the reusable prefix's bytes on one rank over the link
    (`calc.offload.load_time_s`, each rank over its own link) against `recompute_s(p)`, the
    prefill model's marginal time for the last `p` tokens of the prompt; the break-even is the
    shortest whole-unit prefix that loads faster (every unit up to the prompt, in turn)."""
    unit = prefix.reuse_unit_tokens
    top = (prefix.prompt_tokens - 1) // unit
    rows = []
    cache: dict[int, float] = {}

    def recompute(p: int) -> float:
        if p not in cache:
            cache[p] = recompute_s(p)
        return cache[p]

    for link in links:
        nbytes = prefix.reusable_tokens * bytes_per_token
        load = C.load_time_s(nbytes, link.bytes_per_s)
        rec = recompute(prefix.reusable_tokens) if prefix.reusable_tokens else 0.0

        def loads_faster(n_units: int, rate: int = link.bytes_per_s) -> bool:
            p = n_units * unit
            return C.load_time_s(p * bytes_per_token, rate) < recompute(p)

        even = next((n * unit for n in range(1, top + 1) if loads_faster(n)), None)
        rows.append(
            LoadRow(
                link=link.key,
                link_bytes_per_s=link.bytes_per_s,
                source=link.source,
                prefix_bytes=nbytes,
                load_s=load,
                recompute_s=rec,
                faster="load"
                if prefix.reusable_tokens and load < rec
                else ("recompute" if prefix.reusable_tokens else "n/a"),
                break_even_tokens=even,
            )
        )
    return rows
