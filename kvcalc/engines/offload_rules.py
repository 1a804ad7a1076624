"""Each engine's offload tier, as its own code sizes it: vLLM 0.33's native CPU offload
(`--kv-offloading-size`), the LMCache connector (`LMCACHE_MAX_LOCAL_CPU_SIZE` per worker, or the
multi-process server's `--l1-size-gb` per node), SGLang 0.5.23's HiCache (`--hicache-ratio`,
`--hicache-size`, `--hicache-host-memory-fraction`) and llama.cpp's host KV (`--no-kv-offload`).

Each rule starts from the engine's GPU result (`EngineResult` from `EngineProfile.capacity`:
its block size, block bytes, tokens) and adds the tier below it with the arithmetic of
`kvcalc.calc.offload`. The size flags are read in the engine's own unit: a value written with
the other unit (100GB where vLLM reads GiB) is refused with the number to pass instead.

Sources: see `kvcalc.calc.offload` (file and version per rule); llama.cpp: `src/llama-kv-cache.cpp`
(`offload` = `cparams.offload_kqv`: each layer's K and V buffers take the CPU buffer type unless
offloaded), `common/arg.cpp` (`-nkvo, --no-kv-offload`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from kvcalc.calc import offload as C
from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.results.engine import EngineResult
from kvcalc.results.offload import OffloadResult, OffloadTier
from kvcalc.schema import ModelSpec
from kvcalc.units import MAX_QUANTITY

if TYPE_CHECKING:
    from kvcalc.engines.profile import AnyProfile, EngineOptions
    from kvcalc.formats import StorageFormat

VLLM_BACKENDS = ("native", "lmcache")

#: vLLM 0.33 `vllm/v1/kv_offload/factory.py` `create_spec` (scheduler and each worker log it)
VLLM_SPEC_LINE = "Creating offloading spec with name: CPUOffloadingSpec"


@dataclass(frozen=True)
class OffloadSettings:
    """What the user asks of the tier below the GPU (`kvcalc capacity`'s offload options).

    - `kv_offloading_size`: vLLM `--kv-offloading-size` as typed (GiB, all ranks together);
      `kv_offloading_backend`: 'native' or 'lmcache'; `blocks_per_chunk`: the native
      connector's `kv_connector_extra_config` `blocks_per_chunk` (default 1).
    - `lmcache_cpu_size`: LMCache `max_local_cpu_size` (GiB, per TP worker; env
      `LMCACHE_MAX_LOCAL_CPU_SIZE`); `lmcache_l1_size`: the multi-process server's `--l1-size-gb`
      (GiB, one server per node: what vLLM 0.33's `--kv-offloading-backend lmcache` talks to).
    - `hicache_ratio`, `hicache_size` (GB, per rank), `hicache_host_memory_fraction`: SGLang;
      `hierarchical_cache`: `--enable-hierarchical-cache` alone (SGLang's defaults size the pool).
    - `no_kv_offload`: llama.cpp `--no-kv-offload`.
    - `host_memory_bytes`: host memory per node (`--host-memory`); `gpus_per_node`.
    - `shared_prefix_tokens`: a prefix every session shares (`--shared-prefix`): each tier holds
      its whole blocks once, so more sessions stay warm (`calc.offload.sessions_held`).
    """

    kv_offloading_size: str | None = None
    kv_offloading_backend: str = "native"
    blocks_per_chunk: int = 1
    lmcache_cpu_size: str | None = None
    lmcache_l1_size: str | None = None
    hicache_ratio: float | None = None
    hicache_size: str | None = None
    hicache_host_memory_fraction: float | None = None
    hierarchical_cache: bool = False
    no_kv_offload: bool = False
    host_memory_bytes: int | None = None
    gpus_per_node: int = 8
    shared_prefix_tokens: int = 0

    @property
    def asked(self) -> bool:
        """True when any tier below the GPU is asked for."""
        return (
            any(
                v is not None
                for v in (
                    self.kv_offloading_size,
                    self.lmcache_cpu_size,
                    self.lmcache_l1_size,
                    self.hicache_ratio,
                    self.hicache_size,
                    self.hicache_host_memory_fraction,
                )
            )
            or self.no_kv_offload
            or self.hierarchical_cache
        )


# ----- sizes in the engine's unit ---------------------------------------------------------

_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def size_figure(n_bytes: int) -> str:
    """`n_bytes` in both units, GiB first: '100.00 GiB (107.37 GB)'."""
    return f"{n_bytes / C.GIB:,.2f} GiB ({n_bytes / C.GB:,.2f} GB)"


def engine_number(text: str, flag: str, unit: str, engine: str, integer: bool = False) -> float:
    """The number a size flag holds, in the unit the engine reads it (`unit`: 'GiB' or 'GB').
    `100` and `100GiB` (where the engine reads GiB) are 100; a value in the other unit is
    refused with the figure to pass: vLLM reads `--kv-offloading-size 100GB` as 100 GiB
    (107.37 GB), so '100GB' is refused with 'pass 93.13'. Raises `KvcalcError` (option
    `flag`) for anything else, a non-positive value, or a fraction where the engine takes an int."""
    m = _NUMBER.match(str(text))
    if not m:
        raise KvcalcError(
            f"{flag} takes a number ({engine} reads it in {unit}), got '{text}'", option=flag, value=text, form=MESSAGE
        )
    try:
        value = Decimal(m.group(1))
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
        raise KvcalcError(f"{flag}: '{text}' is not a number", option=flag, value=text, form=MESSAGE) from None
    suffix = m.group(2)
    other = {"GiB": "GB", "GB": "GiB"}[unit]
    if suffix.lower() == other.lower() and suffix != unit:
        size = value * (C.GIB if other == "GiB" else C.GB)
        want = size / (C.GIB if unit == "GiB" else C.GB)
        shown = f"{int(want)}" if integer else f"{want:.2f}"
        raise KvcalcError(
            f"{engine} reads {flag} in {unit} ({'2^30' if unit == 'GiB' else '10^9'} bytes), not "
            f"{other}: {text} would allocate {value} {unit}; for {value} {other} pass {flag} {shown}",
            option=flag,
            value=text,
            form=MESSAGE,
        )
    if suffix and suffix.lower() != unit.lower():  # '100gib' is the engine's unit, as --kv-memory reads it
        raise KvcalcError(
            f"{flag} takes a number in {unit} ({engine}'s unit), got '{text}'", option=flag, value=text, form=MESSAGE
        )
    if value <= 0:
        raise KvcalcError(f"{flag} must be positive, got {text}", option=flag, value=text, form=MESSAGE)
    if integer and value != value.to_integral_value():
        raise KvcalcError(
            f"{engine} takes {flag} as a whole number of {unit}, got {text}", option=flag, value=text, form=MESSAGE
        )
    if value * (C.GIB if unit == "GiB" else C.GB) > MAX_QUANTITY:
        raise KvcalcError(
            f"{flag} {text} ({unit}) is beyond what kvcalc sizes (at most 10^21 bytes)",
            option=flag,
            value=text,
            form=MESSAGE,
        )
    return int(value) if integer else float(value)


def _shown(value: float) -> str:
    return f"{value:g}"


# ----- shared pieces ----------------------------------------------------------------------


def single_group(model: ModelSpec) -> bool:
    """True when every cached layer is full attention or MLA (one vLLM KV cache group, one
    SGLang MHA / MLA pool): the tiers' token counts are then exact."""
    kinds = {layer.kind for layer in model.layers} - {"mlp"}
    return bool(kinds) and kinds <= {"full", "mla"} and model.index_head_dim is None


def _ranks_per_node(tp: int, dp: int, gpus_per_node: int) -> int:
    return min(gpus_per_node, tp * dp)


def largest_fitting(host_bytes: int, copies_per_node: int, unit_bytes: int) -> str:
    """The largest size flag (in units of `unit_bytes`, floored to two decimals) whose
    `copies_per_node` allocations fit `host_bytes`: '1862.64' for 2 TB and one GiB-sized engine."""
    hundredths = host_bytes * 100 // (copies_per_node * unit_bytes)
    return f"{hundredths // 100}.{hundredths % 100:02d}"


def check_host(
    res: OffloadResult, lower: str, engine_words: str | None = None, largest: str | None = None
) -> OffloadResult:
    """`res` with `fits_host` set; raises `KvcalcError` (option --host-memory) with the figures
    when the host bytes per node exceed `res.host_memory_bytes` (the engine's own words
    first, when it has some; `lower`: the flag to lower; `largest`: the largest value that fits)."""
    if res.host_memory_bytes is None:
        return res
    fits = res.host_bytes_per_node <= res.host_memory_bytes
    if not fits:
        own = f"{engine_words}; " if engine_words else ""
        raise KvcalcError(
            f"{own}the {res.backend} tier {'takes' if res.engine == 'llamacpp' else 'pins'} "
            f"{size_figure(res.host_bytes_per_node)} of host memory per node "
            f"({res.ranks_per_node} rank{'s' if res.ranks_per_node > 1 else ''} x "
            f"{size_figure(res.host_bytes_per_rank)}), more than --host-memory "
            f"{size_figure(res.host_memory_bytes)}: lower {lower}" + (f" to at most {largest}" if largest else ""),
            option="--host-memory",
            value=res.host_memory_bytes,
            form=MESSAGE,
        )
    return res.model_copy(update={"fits_host": True})


def _gpu_tier(gpu: EngineResult, sessions: int | None) -> OffloadTier:
    return OffloadTier(
        tier="GPU", tokens_per_rank=gpu.kv_cache_tokens, bytes_per_rank=gpu.engine_kv_bytes, sessions=sessions
    )


def _warm(tiers: list[OffloadTier]) -> int | None:
    counts = [t.sessions for t in tiers if t.sessions is not None]
    return max(counts) if counts else None


INCLUSIVE_NOTE = (
    "the host tier holds copies of what the GPU holds (stores as blocks fill, write-through), so "
    "sessions kept warm are the larger tier's, not the sum; a shared prefix's whole blocks are held "
    "once in each tier"
)


# ----- vLLM native ------------------------------------------------------------------------


def vllm_groups(model: ModelSpec, options: EngineOptions | None) -> list[tuple[str, int | None]]:
    """(kind, window) of each vLLM KV cache group of `model` (the vLLM profile's own grouping,
    `vllm.rules(version).kv_cache_groups`). Raises `KvcalcError` for an indexer's group, whose
    offload chunks kvcalc does not model."""
    from kvcalc.engines import vllm as V

    if model.index_head_dim is not None:
        raise KvcalcError(
            f"{model.name}: the offload of an indexer's key cache (DSA) is not modelled",
            field="model",
            value=model.name,
            form=MESSAGE,
        )
    version = getattr(options, "version", None) or V.CURRENT_VERSION
    groups, _ = V.rules(version).kv_cache_groups(model, getattr(options, "hybrid_allocator", True))
    return [(g.kind, g.window) for g in groups]


def vllm_blocks_per_request(
    prof: AnyProfile,
    model: ModelSpec,
    tokens: int,
    gpu: EngineResult,
    k: StorageFormat,
    v: StorageFormat,
    *,
    tp: int,
    options: EngineOptions | None,
) -> int:
    """Blocks one request of `tokens` holds in vLLM (V1), from the profile's own sizing:
    `memory_for(tokens, batch=2)` = 2 x blocks x block bytes (`vllm.memory_for`: max(batch x
    per request, per request + 1) blocks, which is 2 x per request for a batch of 2)."""
    page = gpu.page_size_bytes or 0
    return prof.memory_for(model, tokens, 2, k, v, tp=tp, options=options) // (2 * page)


def vllm_gpu_sessions(
    model: ModelSpec,
    gpu: EngineResult,
    k: StorageFormat,
    v: StorageFormat,
    *,
    tp: int,
    options: EngineOptions | None,
    session_tokens: int,
    prefix_tokens: int,
) -> int:
    """Sessions of `session_tokens` the GPU's usable blocks hold, each taking the blocks the vLLM
    profile sizes for it (`vllm_blocks_per_request`: every group, sliding windows and
    Mamba pages included), a shared prefix's blocks held once."""
    from kvcalc.engines.profile import get_profile

    prof = get_profile("vllm")
    per = vllm_blocks_per_request(prof, model, session_tokens, gpu, k, v, tp=tp, options=options)
    reusable = C.reusable_prefix_tokens(prefix_tokens, session_tokens, gpu.block_size or 1)
    shared = (
        per - vllm_blocks_per_request(prof, model, session_tokens - reusable, gpu, k, v, tp=tp, options=options)
        if reusable
        else 0
    )
    return max((gpu.usable_blocks or 0) - shared, 0) // (per - shared)


def _refuse_empty_vllm_tier(
    s: OffloadSettings, size_gib: float, cpu_bytes: int, ch: C.VllmChunks, block_bytes: int
) -> None:
    """Refuse a vLLM native CPU tier that holds no chunk (`cpu/spec.py`: num_chunks =
    cpu_bytes // chunk bytes is 0): the chunk of `blocks_per_chunk` blocks is larger than the
    whole `--kv-offloading-size`. Names the flag to change and the figures. Raises `KvcalcError`."""
    per_block = block_bytes * ch.copies
    if s.blocks_per_chunk > 1:
        fit = cpu_bytes // per_block if per_block else 0
        while fit > 0 and C.round_up(per_block * fit, C.VLLM_CHUNK_ALIGNMENT_BYTES) > cpu_bytes:
            fit -= 1
        fix = f"pass --offload-blocks-per-chunk {fit} or less" if fit > 0 else "raise --kv-offloading-size"
        raise KvcalcError(
            f"--offload-blocks-per-chunk {s.blocks_per_chunk} makes one vLLM offload chunk of "
            f"{ch.bytes_per_chunk:,} B, more than --kv-offloading-size {_shown(size_gib)} ({cpu_bytes:,} B): "
            f"the CPU tier would hold 0 chunks; {fix}",
            option="--offload-blocks-per-chunk",
            value=s.blocks_per_chunk,
            form=MESSAGE,
        )
    need_gib = math.ceil(ch.bytes_per_chunk * 100 / C.GIB) / 100
    raise KvcalcError(
        f"--kv-offloading-size {_shown(size_gib)} ({cpu_bytes:,} B) is less than one vLLM offload chunk "
        f"of {ch.bytes_per_chunk:,} B: the CPU tier would hold 0 chunks; pass --kv-offloading-size "
        f"{need_gib:g} or more",
        option="--kv-offloading-size",
        value=s.kv_offloading_size,
        form=MESSAGE,
    )


def vllm_native(
    model: ModelSpec,
    gpu: EngineResult,
    s: OffloadSettings,
    *,
    tp: int,
    dp: int,
    session_tokens: int,
    k: StorageFormat,
    v: StorageFormat,
    options: EngineOptions | None = None,
) -> OffloadResult:
    """vLLM 0.33 `--kv-offloading-size S --kv-offloading-backend native`: S x 2^30 bytes for all
    ranks of one engine (`config/vllm.py`), cut into chunks of `blocks_per_chunk` blocks of every
    rank, each padded to 4 KiB (`cpu/spec.py`); tokens and sessions at `session_tokens` by
    `cpu/common.py` `_kv_cache_size_tokens` over the model's KV cache groups
    (`vllm_chunks_per_request`: sliding windows and Mamba state take what they keep). A
    replicated layout (MLA, tp > 1, one node) keeps one copy for all ranks. Raises `KvcalcError`
    for another vLLM version, an engine over more than one node, an indexer's group."""
    if "0.33" not in gpu.engine_version:
        raise KvcalcError(
            f"--kv-offloading-size is modelled for vLLM 0.33 (vllm/v1/kv_offload); this is {gpu.engine_version}",
            option="--kv-offloading-size",
            form=MESSAGE,
        )
    S = engine_number(s.kv_offloading_size or "", "--kv-offloading-size", "GiB", "vLLM")
    if tp > s.gpus_per_node:
        raise KvcalcError(
            f"tp {tp} spans more than one node of {s.gpus_per_node} GPUs: vLLM's shared offload region "
            "over nodes is not modelled",
            option="--tp",
            value=tp,
            form=MESSAGE,
        )
    groups = vllm_groups(model, options)
    cpu_bytes = C.vllm_cpu_bytes_to_use(S)
    replicated = model.attention == "mla" and tp > 1
    ch = C.vllm_chunks(cpu_bytes, gpu.page_size_bytes or 0, tp, s.blocks_per_chunk, replicated)
    if ch.num_chunks == 0:
        _refuse_empty_vllm_tier(s, S, cpu_bytes, ch, gpu.page_size_bytes or 0)
    block = gpu.block_size or 0
    chunk_tokens = block * s.blocks_per_chunk
    per_request = C.vllm_chunks_per_request(groups, session_tokens, chunk_tokens)
    at_len = C.vllm_cpu_tokens_at_len(ch.num_chunks, session_tokens, per_request)
    per_rank = ch.total_bytes // tp
    cpu = OffloadTier(
        tier="CPU",
        tokens_per_rank=at_len,
        bytes_per_rank=per_rank,
        sessions=C.sessions_held(
            ch.num_chunks,
            session_tokens,
            chunk_tokens,
            s.shared_prefix_tokens,
            per_session=per_request,
            sharing_groups=sum(1 for kind, _ in groups if kind in ("full", "mla")),
        ),
    )
    gpu_sessions = vllm_gpu_sessions(
        model, gpu, k, v, tp=tp, options=options, session_tokens=session_tokens, prefix_tokens=s.shared_prefix_tokens
    )
    tiers = [_gpu_tier(gpu, gpu_sessions), cpu]
    rpn = _ranks_per_node(tp, dp, s.gpus_per_node)
    notes = [
        f"--kv-offloading-size {_shown(S)} is {_shown(S)} GiB = {cpu_bytes:,} B for all {tp} rank"
        f"{'s' if tp > 1 else ''} together (vllm/config/vllm.py: x (1 << 30)); {ch.num_chunks:,} chunks of "
        f"{ch.bytes_per_chunk:,} B ({s.blocks_per_chunk} block{'s' if s.blocks_per_chunk > 1 else ''} of "
        f"{block} tokens x {ch.copies} rank cop{'ies' if ch.copies > 1 else 'y'}, padded to 4 KiB)",
        f"vLLM's CPU tier reports {at_len:,} tokens at max_model_len {session_tokens:,} "
        f"(kv_offload_config_info cpu_kv_cache_size_tokens): {per_request:,} chunks a request over "
        f"{len(groups)} KV cache group{'s' if len(groups) > 1 else ''}",
        INCLUSIVE_NOTE,
    ]
    if replicated:
        notes.append("MLA at tp > 1 on one node: one copy of the latent for every rank (replicated layout)")
    notes.append(
        "vLLM 0.33 offloads prompt blocks only (kv_offload/base.py offload_prompt_only, default true): a "
        "session's generated tokens reach the CPU tier when the next turn sends them as its prompt"
    )
    res = OffloadResult(
        engine="vllm",
        backend="vllm-native",
        flags=[f"--kv-offloading-size {_shown(S)}", "--kv-offloading-backend native"]
        + (
            [
                f'--kv-transfer-config \'{{"kv_connector":"OffloadingConnector","kv_role":"kv_both",'
                f'"kv_connector_extra_config":{{"cpu_bytes_to_use":{cpu_bytes},"blocks_per_chunk":'
                f"{s.blocks_per_chunk}}}}}'"
            ]
            if s.blocks_per_chunk != 1
            else []
        ),
        size_rule="GiB (2^30 B), all ranks of one engine together",
        tiers=tiers,
        host_bytes_per_rank=per_rank,
        host_bytes_per_node=per_rank * rpn,
        ranks_per_node=rpn,
        host_memory_bytes=s.host_memory_bytes,
        session_tokens=session_tokens,
        sessions_warm=_warm(tiers),
        chunk_tokens=chunk_tokens,
        num_chunks=ch.num_chunks,
        bytes_per_chunk=ch.bytes_per_chunk,
        log_lines=[VLLM_SPEC_LINE],
        notes=notes,
    )
    engines = max(rpn // tp, 1)
    return check_host(res, "--kv-offloading-size", largest=largest_fitting(s.host_memory_bytes or 0, engines, C.GIB))


# ----- LMCache ----------------------------------------------------------------------------


def lmcache(
    model: ModelSpec, gpu: EngineResult, s: OffloadSettings, *, tp: int, dp: int, session_tokens: int
) -> OffloadResult:
    """LMCache's CPU tier beside vLLM. In-process (`LMCacheConnectorV1`): each TP worker pins
    `int(max_local_cpu_size x 1024**3)` bytes (LMCache 0.5.6 `cache_engine.py`; per worker,
    LMCache/LMCache#2901), though its config log prints the value as "GB". Multi-process
    (`LMCacheMPConnector`, what vLLM 0.33's `--kv-offloading-backend lmcache` starts, without
    passing `--kv-offloading-size` on: `vllm/config/vllm.py`): one server per node with
    `--l1-size-gb` x 2^30 bytes for every engine on it. Tokens: whole 256-token chunks of the
    rank's bytes per token (the GPU block's bytes / block size). Raises `KvcalcError` for a
    model with several KV cache groups (bytes per token not one figure)."""
    if not single_group(model):
        raise KvcalcError(
            f"{model.name} has several KV cache groups (sliding-window, Mamba or indexer layers beside full "
            "attention): LMCache 0.5.6 stores each group as its own objects (lmcache/v1/multiprocess/group_view.py "
            "EngineGroupInfo, object_group_transfer.py: a sliding group keeps sub-chunks of its window, a Mamba "
            "group its state), whose bytes per 256-token chunk kvcalc does not model; vLLM's native offload "
            "(--kv-offloading-size) is modelled for these groups",
            field="model",
            value=model.name,
            form=MESSAGE,
        )
    block = gpu.block_size or 1
    per_token = (gpu.page_size_bytes or 0) // block
    chunk_bytes = C.LMCACHE_CHUNK_TOKENS * per_token
    rpn = _ranks_per_node(tp, dp, s.gpus_per_node)
    gpu_sessions = C.sessions_held(max(gpu.usable_blocks or 0, 0), session_tokens, block, s.shared_prefix_tokens)

    def held(chunks: int) -> int:
        return C.sessions_held(chunks, session_tokens, C.LMCACHE_CHUNK_TOKENS, s.shared_prefix_tokens)

    if s.lmcache_l1_size is not None:
        size = engine_number(s.lmcache_l1_size, "--lmcache-l1-size", "GiB", "LMCache")
        node_bytes = C.lmcache_cpu_bytes(size)
        engines = max(rpn // tp, 1)
        # the server stores each rank's slice of a chunk: one chunk of every rank of one engine
        chunks = node_bytes // (chunk_bytes * tp)
        per_rank = node_bytes // rpn
        tokens = chunks * C.LMCACHE_CHUNK_TOKENS
        tiers = [
            _gpu_tier(gpu, gpu_sessions),
            OffloadTier(tier="CPU", tokens_per_rank=tokens, bytes_per_rank=per_rank, sessions=held(chunks)),
        ]
        res = OffloadResult(
            engine="vllm",
            backend="lmcache-mp",
            flags=[
                f"python3 -m lmcache.v1.multiprocess.server --l1-size-gb {_shown(size)}",
                "vllm serve ... --kv-offloading-backend lmcache --kv-offloading-size 1 (the size is not "
                "passed on: the server's --l1-size-gb sizes the tier)",
            ],
            size_rule="GiB (2^30 B; the flag says gb), one server per node for every engine on it",
            tiers=tiers,
            host_bytes_per_rank=per_rank,
            host_bytes_per_node=node_bytes,
            ranks_per_node=rpn,
            host_memory_bytes=s.host_memory_bytes,
            session_tokens=session_tokens,
            sessions_warm=_warm(tiers),
            chunk_tokens=C.LMCACHE_CHUNK_TOKENS,
            num_chunks=chunks,
            bytes_per_chunk=chunk_bytes * tp,
            log_lines=[],
            notes=[
                f"--l1-size-gb {_shown(size)} = {node_bytes:,} B (int(x * (1 << 30)), "
                "lmcache/v1/distributed/config.py)"
                + (f"; {engines} engines on the node share it (figures for one)" if engines > 1 else ""),
                INCLUSIVE_NOTE,
            ],
        )
        return check_host(
            res,
            "the server's --l1-size-gb (--lmcache-l1-size)",
            largest=largest_fitting(s.host_memory_bytes or 0, 1, C.GIB),
        )
    size = engine_number(s.lmcache_cpu_size or "", "--lmcache-cpu-size", "GiB", "LMCache")
    per_rank = C.lmcache_cpu_bytes(size)
    chunks = per_rank // chunk_bytes
    tiers = [
        _gpu_tier(gpu, gpu_sessions),
        OffloadTier(
            tier="CPU", tokens_per_rank=chunks * C.LMCACHE_CHUNK_TOKENS, bytes_per_rank=per_rank, sessions=held(chunks)
        ),
    ]
    res = OffloadResult(
        engine="vllm",
        backend="lmcache",
        flags=[
            f"LMCACHE_MAX_LOCAL_CPU_SIZE={_shown(size)}",
            "LMCACHE_CHUNK_SIZE=256",
            "LMCACHE_LOCAL_CPU=True",
            'vllm serve ... --kv-transfer-config \'{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}\'',
        ],
        size_rule="GiB (2^30 B, though LMCache logs it as GB), per TP worker",
        tiers=tiers,
        host_bytes_per_rank=per_rank,
        host_bytes_per_node=per_rank * rpn,
        ranks_per_node=rpn,
        host_memory_bytes=s.host_memory_bytes,
        session_tokens=session_tokens,
        sessions_warm=_warm(tiers),
        chunk_tokens=C.LMCACHE_CHUNK_TOKENS,
        num_chunks=chunks,
        bytes_per_chunk=chunk_bytes,
        log_lines=[f"LMCache INFO: LMCache Configuration: {{... 'max_local_cpu_size': '{size} GB', ...}}"],
        notes=[
            f"max_local_cpu_size {_shown(size)} = {per_rank:,} B per TP worker (int(x * 1024**3), "
            "lmcache/v1/cache_engine.py); each of the "
            f"{tp} worker{'s' if tp > 1 else ''} pins its own",
            INCLUSIVE_NOTE,
        ],
    )
    return check_host(
        res,
        "LMCACHE_MAX_LOCAL_CPU_SIZE (--lmcache-cpu-size)",
        largest=largest_fitting(s.host_memory_bytes or 0, rpn, C.GIB),
    )


# ----- SGLang HiCache ---------------------------------------------------------------------


def sglang_pool_refusal(model: ModelSpec, options: EngineOptions | None = None) -> str | None:
    """Why SGLang 0.5.23's HiCache host pools for `model` are not sized here, or None when its
    device pool is one `MHATokenToKVPool` or `MLATokenToKVPool` (a sliding layer sized as full,
    `engines.sglang.uses_swa_pool` False): the one host pool `pool_host/mha.py` / `mla.py`.
    Not sized: the `SWAKVPool` of the architectures `is_hybrid_swa_model` lists (HiCache builds
    a host pool per device pool, `mem_cache/hybrid_cache/hybrid_pool_assembler.py`
    `build_hybrid_swa_stack`: --hicache-size split by the pools' device bytes,
    `_split_hicache_size`, or one unified page envelope on some layouts); NSA's
    (`pool_host/dsa.py`); Mamba / linear-attention state (`pool_host/mamba.py`
    `MambaPoolHost`, beside a KV host pool in `build_hybrid_*_stack`)."""
    from kvcalc.engines import sglang as SG

    version = getattr(options, "version", None) or "current"
    hybrid = getattr(options, "hybrid_swa_memory", True)
    kinds = {layer.kind for layer in model.layers} - {"mlp"}
    if SG.uses_swa_pool(model, hybrid, version):
        return (
            "SGLang 0.5.23 gives its sliding layers their own SWAKVPool, and HiCache then builds one host "
            "pool per device pool (mem_cache/hybrid_cache/hybrid_pool_assembler.py build_hybrid_swa_stack: "
            "--hicache-size split by the pools' device bytes, or one unified page envelope): not modelled; "
            "with --disable-hybrid-swa-memory (sliding layers sized as full, one MHA pool) it is"
        )
    if SG.is_nsa(model):
        return (
            "SGLang 0.5.23's HiCache host pool for NSA (the latent and the indexer's keys, "
            "mem_cache/pool_host/dsa.py) is not modelled"
        )
    if not kinds <= {"full", "sliding", "mla"}:
        return (
            "SGLang 0.5.23's HiCache keeps Mamba / linear-attention state in its own host pool "
            "(mem_cache/pool_host/mamba.py MambaPoolHost, state slots beside the KV host pool): not modelled"
        )
    return None


def sglang_hicache(
    model: ModelSpec,
    gpu: EngineResult,
    s: OffloadSettings,
    *,
    tp: int,
    dp: int,
    session_tokens: int,
    size_per_token: int,
    page_size: int,
    options: EngineOptions | None = None,
) -> OffloadResult:
    """SGLang 0.5.23 HiCache host pool per rank (`pool_host/base.py`): --hicache-size G (GB,
    decimal, per rank) or --hicache-ratio R x the device pool's tokens (default 2.0); with
    neither and --host-memory given, the ratio is cut to fit --hicache-host-memory-fraction
    (default 0.8) of the host after a 10 GiB reserve (`hicache_auto_size.py`). Host bytes =
    tokens x `size_per_token`; refused in SGLang's words when they exceed the per-rank budget
    ((host - 10 GiB) // ranks on the node). A model whose sliding layers SGLang sizes as full
    ones (one `MHATokenToKVPool`: every architecture `is_hybrid_swa_model` does not list, or
    `--disable-hybrid-swa-memory`) has the one MHA host pool (`pool_host/mha.py`), sized here.
    Raises `KvcalcError` for the pools kvcalc does not size here (`sglang_pool_refusal`)."""
    refusal = sglang_pool_refusal(model, options)
    if refusal:
        raise KvcalcError(f"{model.name}: {refusal}", field="model", value=model.name, form=MESSAGE)
    if s.hicache_ratio is not None and not (math.isfinite(s.hicache_ratio) and s.hicache_ratio > 0):
        raise KvcalcError(
            f"--hicache-ratio must be a positive number, got {s.hicache_ratio:g}",
            option="--hicache-ratio",
            value=s.hicache_ratio,
            form=MESSAGE,
        )
    fraction_given = s.hicache_host_memory_fraction
    if fraction_given is not None and not (math.isfinite(fraction_given) and 0 < fraction_given <= 1):
        raise KvcalcError(
            f"--hicache-host-memory-fraction must be in (0, 1], got {fraction_given:g}",
            option="--hicache-host-memory-fraction",
            value=fraction_given,
            form=MESSAGE,
        )
    if s.hicache_host_memory_fraction is not None and (s.hicache_ratio is not None or s.hicache_size):
        raise KvcalcError(
            "--hicache-host-memory-fraction applies only without --hicache-ratio and --hicache-size: "
            "SGLang drops it when either is given (arg_groups/hicache_hook.py)",
            option="--hicache-host-memory-fraction",
            form=MESSAGE,
        )
    size_gb = (
        int(engine_number(s.hicache_size, "--hicache-size", "GB", "SGLang", integer=True)) if s.hicache_size else 0
    )
    rpn = _ranks_per_node(tp, dp, s.gpus_per_node)
    device_tokens = gpu.kv_cache_tokens
    lines: list[str] = []
    notes: list[str] = []
    ratio = s.hicache_ratio
    auto = ratio is None and not size_gb
    flags = ["--enable-hierarchical-cache"]
    if auto and s.host_memory_bytes is not None:
        fraction = (
            C.SGLANG_DEFAULT_HOST_FRACTION if s.hicache_host_memory_fraction is None else s.hicache_host_memory_fraction
        )
        if not 0 < fraction <= 1:
            raise KvcalcError(
                "--hicache-host-memory-fraction must be in (0, 1].",
                option="--hicache-host-memory-fraction",
                value=fraction,
                form=MESSAGE,
            )
        try:
            ratio = C.sglang_auto_ratio(
                host_available_bytes=s.host_memory_bytes,
                ranks_per_host=rpn,
                device_bytes=gpu.engine_kv_bytes,
                fraction=fraction,
            )
        except ValueError as e:
            raise KvcalcError(
                f"SGLang refuses: {e}", option="--host-memory", value=s.host_memory_bytes, form=MESSAGE
            ) from None
        budget = int(C.sglang_host_budget_bytes(s.host_memory_bytes, rpn) * fraction)
        lines.append(
            f"HiCache auto-sizing: ratio {C.SGLANG_DEFAULT_HICACHE_RATIO:.3f} -> {ratio:.3f}; "
            f"{budget / 1024**3:.1f} GiB host memory per rank (fraction {fraction:.2f}, {rpn} ranks on "
            f"this host), host pools {gpu.engine_kv_bytes * ratio / 1024**3:.1f} GiB."
        )
        if s.hicache_host_memory_fraction is not None:
            flags.append(f"--hicache-host-memory-fraction {fraction:g}")
    elif auto:
        notes.append(
            "neither --hicache-ratio nor --hicache-size: SGLang starts from ratio 2.0 and cuts it to "
            "fit 0.8 of the host's free memory; give --host-memory to size that"
        )
    if size_gb:
        flags.append(f"--hicache-size {size_gb}")
    elif s.hicache_ratio is not None:
        flags.append(f"--hicache-ratio {s.hicache_ratio:g}")
    host_tokens = C.sglang_host_tokens(
        device_tokens=device_tokens,
        size_per_token=size_per_token,
        page_size=page_size,
        hicache_ratio=ratio,
        hicache_size_gb=size_gb,
    )
    per_rank = host_tokens * size_per_token
    if host_tokens <= device_tokens:
        lines.append(
            f"HiCache kv host pool ({host_tokens} tokens) is smaller than the device pool ({device_tokens} "
            "tokens);L2 cache effectiveness is reduced.Consider increasing --hicache-ratio (or "
            "--hicache-size) for higher L2 cache hit rate."
        )
    words = None
    if s.host_memory_bytes is not None:
        avail = C.sglang_host_budget_bytes(s.host_memory_bytes, rpn)
        if per_rank > avail:
            words = (
                f"SGLang refuses: Not enough host memory available. Requesting {per_rank / 1e9:.2f} GB but only "
                f"have {avail / 1e9:.2f} GB free. Please reduce the size of the hierarchical cache."
            )
    lines.append(f"Allocating kv hierarchical KV host pool: {host_tokens} tokens, {per_rank / 1e9:.2f} GB host memory.")
    tiers = [
        _gpu_tier(gpu, C.sessions_held(device_tokens // page_size, session_tokens, page_size, s.shared_prefix_tokens)),
        OffloadTier(
            tier="host",
            tokens_per_rank=host_tokens,
            bytes_per_rank=per_rank,
            sessions=C.sessions_held(host_tokens // page_size, session_tokens, page_size, s.shared_prefix_tokens),
        ),
    ]
    rule = "GB (10^9 B), per rank" if size_gb else f"ratio x the device pool's {device_tokens:,} tokens, per rank"
    notes += [
        f"host pool: {host_tokens:,} tokens x {size_per_token:,} B per token per rank (pool_host/mha.py "
        "get_size_per_token), one padding page added",
        INCLUSIVE_NOTE,
    ]
    res = OffloadResult(
        engine="sglang",
        backend="sglang-hicache",
        flags=flags,
        size_rule=rule,
        tiers=tiers,
        host_bytes_per_rank=per_rank,
        host_bytes_per_node=per_rank * rpn,
        ranks_per_node=rpn,
        host_memory_bytes=s.host_memory_bytes,
        session_tokens=session_tokens,
        sessions_warm=_warm(tiers),
        log_lines=lines,
        notes=notes,
    )
    if words:
        raise KvcalcError(
            f"{words} ({rpn} ranks x {size_figure(per_rank)} against (--host-memory "
            f"{size_figure(s.host_memory_bytes or 0)} - 10 GiB reserve) / {rpn})",
            option="--host-memory",
            value=s.host_memory_bytes,
            form=MESSAGE,
        )
    return check_host(res, "--hicache-ratio or --hicache-size")


# ----- llama.cpp --------------------------------------------------------------------------


def llamacpp_host(
    model: ModelSpec,
    gpu: EngineResult,
    cpu_lines: list[str],
    s: OffloadSettings,
    *,
    session_tokens: int,
    n_gpu_layers: int | None = None,
) -> OffloadResult:
    """llama.cpp `--no-kv-offload`: every layer's K and V buffers stay in host memory
    (`src/llama-kv-cache.cpp`: the CPU buffer type unless `offload_kqv`), the same bytes the GPU
    would hold; without it, the layers left on the CPU by --n-gpu-layers keep theirs there
    (`gpu.devices`). `cpu_lines`: llama.cpp's buffer lines with every layer's cache on the CPU."""
    if s.no_kv_offload:
        host = gpu.engine_kv_bytes
        lines = cpu_lines
        flags = ["--no-kv-offload"]
    else:
        host = sum(d.kv_bytes for d in (gpu.devices or []) if d.device == "CPU")
        lines = [line for line in gpu.log_lines if "CPU KV buffer" in line]
        flags = [
            f"--n-gpu-layers {'-1' if n_gpu_layers is None else n_gpu_layers} (layers left on the CPU keep "
            "their KV there)"
        ]
    on_gpu = gpu.engine_kv_bytes - host
    n_ctx = gpu.n_ctx or gpu.kv_cache_tokens
    tiers = [
        OffloadTier(
            tier="GPU",
            tokens_per_rank=n_ctx if on_gpu else 0,
            bytes_per_rank=on_gpu,
            sessions=n_ctx // session_tokens if on_gpu else 0,
        ),
        OffloadTier(
            tier="host",
            tokens_per_rank=n_ctx if host else 0,
            bytes_per_rank=host,
            sessions=n_ctx // session_tokens if host else 0,
        ),
    ]
    res = OffloadResult(
        engine="llamacpp",
        backend="llamacpp-host",
        flags=flags,
        size_rule="no size flag: the KV cache's own bytes",
        tiers=tiers,
        host_bytes_per_rank=host,
        host_bytes_per_node=host,
        ranks_per_node=1,
        host_memory_bytes=s.host_memory_bytes,
        session_tokens=session_tokens,
        sessions_warm=n_ctx // session_tokens,
        log_lines=lines,
        notes=[
            "llama.cpp's host KV is the cache itself, not a tier below the GPU: attention reads it from host "
            "memory each step (no copy back to the GPU)"
        ],
    )
    return check_host(
        res, "--ctx-size, or keep more layers on the GPU (--n-gpu-layers)" if not s.no_kv_offload else "--ctx-size"
    )


def offload_for(
    name: str,
    model: ModelSpec,
    gpu: EngineResult,
    s: OffloadSettings,
    *,
    tp: int,
    dp: int,
    session_tokens: int,
    k: StorageFormat,
    v: StorageFormat,
    options: EngineOptions | None = None,
    cpu_lines: list[str] | None = None,
) -> OffloadResult:
    """The offload result of engine `name` for the asked settings `s`; raises `KvcalcError`
    for flags of another engine and combinations the engine refuses."""
    vllm_flags = s.kv_offloading_size is not None or s.lmcache_cpu_size is not None or s.lmcache_l1_size is not None
    sglang_flags = (
        s.hicache_ratio is not None
        or s.hicache_size is not None
        or s.hicache_host_memory_fraction is not None
        or s.hierarchical_cache
    )
    for asked, engine, flag in (
        (vllm_flags, "vllm", "--kv-offloading-size / --lmcache-*"),
        (sglang_flags, "sglang", "--hicache-* / --enable-hierarchical-cache"),
        (s.no_kv_offload, "llamacpp", "--no-kv-offload"),
    ):
        if asked and name != engine:
            raise KvcalcError(
                f"{flag} is {engine}'s; --engine {name} has no such flag", option=flag.split()[0], form=MESSAGE
            )
    if name == "vllm":
        if s.kv_offloading_backend not in VLLM_BACKENDS:
            raise KvcalcError(
                f"--kv-offloading-backend is one of {', '.join(VLLM_BACKENDS)}, got '{s.kv_offloading_backend}'",
                option="--kv-offloading-backend",
                form=MESSAGE,
            )
        if s.lmcache_cpu_size is not None and s.lmcache_l1_size is not None:  # one was dropped silently
            raise KvcalcError(
                "--lmcache-cpu-size (LMCache inside vLLM, LMCACHE_MAX_LOCAL_CPU_SIZE) and --lmcache-l1-size "
                "(LMCache's multi-process server, --l1-size-gb) size two different deployments: give one",
                option="--lmcache-cpu-size",
                form=MESSAGE,
            )
        if s.kv_offloading_backend == "native" and s.kv_offloading_size is not None and s.lmcache_cpu_size:
            raise KvcalcError(
                "--kv-offloading-size sizes vLLM's native CPU offload and --lmcache-cpu-size an LMCache tier "
                "(each its own --kv-transfer-config): give one",
                option="--kv-offloading-size",
                form=MESSAGE,
            )
        if s.kv_offloading_backend == "lmcache" or s.lmcache_cpu_size or s.lmcache_l1_size:
            if s.kv_offloading_size is not None and s.lmcache_l1_size is None and s.lmcache_cpu_size is None:
                raise KvcalcError(
                    "vLLM 0.33 does not pass --kv-offloading-size to LMCache (vllm/config/vllm.py: the "
                    "LMCacheMPConnector's server sizes the tier): give --lmcache-l1-size (the server's "
                    "--l1-size-gb) or --lmcache-cpu-size (LMCACHE_MAX_LOCAL_CPU_SIZE)",
                    option="--kv-offloading-size",
                    form=MESSAGE,
                )
            return lmcache(model, gpu, s, tp=tp, dp=dp, session_tokens=session_tokens)
        return vllm_native(model, gpu, s, tp=tp, dp=dp, session_tokens=session_tokens, k=k, v=v, options=options)
    if name == "sglang":
        from kvcalc.engines.profile import get_profile

        mod = get_profile("sglang").module
        return sglang_hicache(
            model,
            gpu,
            s,
            tp=tp,
            dp=dp,
            session_tokens=session_tokens,
            size_per_token=mod.cell_size_bytes(model, k, v, tp),
            page_size=getattr(options, "page_size", 1),
            options=options,
        )
    if name == "llamacpp":
        return llamacpp_host(
            model,
            gpu,
            cpu_lines or [],
            s,
            session_tokens=session_tokens,
            n_gpu_layers=getattr(options, "n_gpu_layers", None),
        )
    raise KvcalcError(
        f"--engine {name} has no offload tier: use vllm, sglang or llamacpp", option="--engine", form=MESSAGE
    )


def replace(s: OffloadSettings, **changes: Any) -> OffloadSettings:  # Any: each field's own type
    """`dataclasses.replace` for `OffloadSettings`."""
    return dataclasses.replace(s, **changes)
