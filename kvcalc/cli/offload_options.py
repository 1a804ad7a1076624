"""`kvcalc capacity`'s options for KV beyond the GPU: the engines' offload flags (vLLM
`--kv-offloading-size` / `--kv-offloading-backend`, LMCache, SGLang `--hicache-*`, llama.cpp
`--no-kv-offload`), the host (`--host-memory`, `--gpus-per-node`) and a shared prefix
(`--shared-prefix`, `--prefix-hit-rate`, `--link`), and the code that turns them into results.

Each size flag takes a number in the unit the engine reads it in, as on the engine's own
command line: vLLM and LMCache GiB, SGLang GB (`engines.offload_rules.engine_number`).
"""

import dataclasses
from typing import Annotated, Any, Optional

import typer

from kvcalc.cli.options import OptionGroup


class OffloadOptions(OptionGroup):
    """The tier below the GPU and the host that holds it (see the module docstring)."""

    kv_offloading_size: Annotated[Optional[str], typer.Option("--kv-offloading-size", help="vLLM: CPU offload buffer in GiB (2^30 B) for ALL tensor-parallel ranks together, as vLLM reads it (100 = 100 GiB; '100GB' is refused with the GiB figure to pass).")] = None
    kv_offloading_backend: Annotated[str, typer.Option("--kv-offloading-backend", help="vLLM: native (CPU offload in vLLM) or lmcache (vLLM 0.33 starts LMCache's multi-process connector; size it with --lmcache-l1-size).")] = "native"
    blocks_per_chunk: Annotated[int, typer.Option("--offload-blocks-per-chunk", help="vLLM native offload: GPU blocks per CPU chunk (kv_connector_extra_config blocks_per_chunk).")] = 1
    lmcache_cpu_size: Annotated[Optional[str], typer.Option("--lmcache-cpu-size", help="LMCache in-process connector: LMCACHE_MAX_LOCAL_CPU_SIZE, GiB per tensor-parallel worker (LMCache logs it as 'GB').")] = None
    lmcache_l1_size: Annotated[Optional[str], typer.Option("--lmcache-l1-size", help="LMCache multi-process server: --l1-size-gb, GiB, one server per node.")] = None
    hicache_ratio: Annotated[Optional[float], typer.Option("--hicache-ratio", help="SGLang HiCache: host pool tokens per device pool token, per rank (SGLang's default 2.0, cut to fit the host when --host-memory is given).")] = None
    hicache_size: Annotated[Optional[str], typer.Option("--hicache-size", help="SGLang HiCache: host pool per rank in GB (10^9 B), a whole number; overrides --hicache-ratio.")] = None
    hicache_host_memory_fraction: Annotated[Optional[float], typer.Option("--hicache-host-memory-fraction", help="SGLang HiCache: share of the host (after a 10 GiB reserve) the pools may take when neither ratio nor size is given (default 0.8).")] = None
    hierarchical_cache: Annotated[bool, typer.Option("--enable-hierarchical-cache", help="SGLang HiCache with its defaults (ratio 2.0, cut to fit the host when --host-memory is given); implied by the --hicache-* options.")] = False
    no_kv_offload: Annotated[bool, typer.Option("--no-kv-offload", "-nkvo", help="llama.cpp: keep the KV cache in host memory.")] = False
    host_memory: Annotated[Optional[str], typer.Option("--host-memory", help="Host memory per node (2TB, 1.5TiB): pinned offload buffers are checked against it and refused when they exceed it.")] = None
    gpus_per_node: Annotated[int, typer.Option("--gpus-per-node", help="GPUs (ranks) per node, for host bytes per node.")] = 8
    shared_prefix: Annotated[Optional[str], typer.Option("--shared-prefix", help="Tokens every request shares (a system prompt, 12k): reusable whole blocks, footprint, concurrency, prefill saved.")] = None
    prefix_hit_rate: Annotated[float, typer.Option("--prefix-hit-rate", help="Share of requests that find the shared prefix cached (prefill saved).")] = 1.0
    link: Annotated[Optional[str], typer.Option("--link", help="Links to time a prefix load over (comma list of kvcalc/data/links.yaml keys: pcie5-x16, nvlink-c2c, nvme-gen5, rdma-400g ...). Default: every host, storage and network link. Needs --gpu (the prefill model).")] = None

    def settings(self) -> Any:
        """The `engines.offload_rules.OffloadSettings` of these options (--host-memory parsed)."""
        from kvcalc.engines.offload_rules import OffloadSettings
        from kvcalc.requests import check_positive
        from kvcalc.units import parse_size

        check_positive(gpus_per_node=self.gpus_per_node, blocks_per_chunk=self.blocks_per_chunk)
        host = parse_size(self.host_memory, "--host-memory") if self.host_memory else None
        return OffloadSettings(kv_offloading_size=self.kv_offloading_size,
                               kv_offloading_backend=self.kv_offloading_backend.strip().lower(),
                               blocks_per_chunk=self.blocks_per_chunk, lmcache_cpu_size=self.lmcache_cpu_size,
                               lmcache_l1_size=self.lmcache_l1_size, hicache_ratio=self.hicache_ratio,
                               hicache_size=self.hicache_size,
                               hicache_host_memory_fraction=self.hicache_host_memory_fraction,
                               hierarchical_cache=self.hierarchical_cache, no_kv_offload=self.no_kv_offload, host_memory_bytes=host,
                               gpus_per_node=self.gpus_per_node)


def offload_parts(opts: OffloadOptions, req: Any, res: Any, *, dp: int, gpu: Optional[str], layout: Any) -> list:
    """The (result, table) parts `kvcalc capacity` prints after the engine's own: the offload
    tier (when asked), the shared prefix (--shared-prefix) and, with --gpu, the load-or-recompute
    rows. `req`: the `CapacityRequest`; `res`: its `EngineResult`; `layout`: the GPU plan's
    `memory_plan.Layout` (for the prefill model). Raises `KvcalcError`."""
    from kvcalc.engines.profile import get_profile
    from kvcalc.errors import MESSAGE, KvcalcError
    from kvcalc.results.offload import OffloadPart, PrefixPart

    s = opts.settings()
    parts: list = []
    if opts.shared_prefix is not None:
        from kvcalc.units import parse_count

        s = dataclasses.replace(s, shared_prefix_tokens=parse_count(opts.shared_prefix, "--shared-prefix"))
    L = res.max_model_len or res.n_ctx or res.kv_cache_tokens
    prof = get_profile(req.engine)
    title_model = req.model.name
    if s.asked or s.host_memory_bytes is not None:
        if not s.asked and req.engine != "llamacpp":  # llama.cpp: the KV of the layers -ngl leaves on the CPU
            raise KvcalcError("--host-memory checks an offload tier: give the engine's offload flag "
                              "(--kv-offloading-size, --lmcache-cpu-size, --enable-hierarchical-cache / --hicache-ratio / "
                              "--hicache-size, --no-kv-offload)", option="--host-memory", form=MESSAGE)
        from kvcalc.engines.offload_rules import offload_for
        from kvcalc.report.offload import log_text, offload_table
        from kvcalc.results.offload import NoKeys

        cpu_lines = None
        if req.engine == "llamacpp":
            on_cpu = prof.capacity(req.model, req.kv_memory_bytes, req.k, req.v, tp=req.tp, max_model_len=L,
                                   options=dataclasses.replace(req.options, n_gpu_layers=0))
            cpu_lines = [line for line in on_cpu.log_lines if "KV buffer" in line]
        off = offload_for(req.engine, req.model, res, s, tp=req.tp, dp=dp, session_tokens=L, k=req.k, v=req.v,
                          options=req.options, cpu_lines=cpu_lines)
        parts.append((OffloadPart(offload=off), lambda: offload_table(off, f"KV beyond the GPU: {title_model} on {prof.display_name}")))
        if off.log_lines:
            parts.append((NoKeys(), lambda: log_text(off.engine, off.log_lines)))
    if opts.shared_prefix is not None:
        from kvcalc.engines.prefix_rules import shared_prefix
        from kvcalc.report.offload import prefix_table
        from kvcalc.units import parse_count

        P = parse_count(opts.shared_prefix, "--shared-prefix")
        pre = shared_prefix(prof, req.model, res, req.k, req.v, tp=req.tp, options=req.options, prefix_tokens=P,
                            prompt_tokens=L, hit_rate=opts.prefix_hit_rate, concurrency=req.concurrency)
        parts.append((PrefixPart(shared_prefix=pre), lambda: prefix_table(pre, f"Shared prefix of {P:,} tokens, requests of {L:,}")))
        if gpu is not None:
            parts.append(load_part(pre, res, req, gpu, layout, opts.link))
    elif opts.link is not None:
        raise KvcalcError("--link times a shared prefix's load: give --shared-prefix and --gpu", option="--link",
                          form=MESSAGE)
    return parts


def load_part(pre: Any, res: Any, req: Any, gpu: str, layout: Any, link: Optional[str]) -> tuple:
    """The load-or-recompute part: each link's time for the reusable prefix vs the prefill
    model's marginal time on `gpu` (`memory_plan.Planner.prefill`)."""
    from kvcalc.calc.memory_plan import Planner
    from kvcalc.engines.prefix_rules import bytes_per_token_per_rank, load_or_recompute
    from kvcalc.load.gpus import get_gpu
    from kvcalc.load.links import get_link, link_table
    from kvcalc.report.offload import load_table
    from kvcalc.results.offload import LoadRows

    if link:
        links = [get_link(n) for n in link.split(",") if n.strip()]
    else:
        links = [x for x in link_table().values() if x.kind in ("host", "storage", "network")]
    planner = Planner(req.model, get_gpu(gpu), layout)
    N = pre.prompt_tokens
    whole_s = planner.prefill(N).step_time_s

    def recompute(p: int) -> float:
        return whole_s - planner.prefill(N - p).step_time_s

    rows = load_or_recompute(pre, bytes_per_token_per_rank(res), links, recompute)
    out = LoadRows(load_or_recompute=rows)
    return out, lambda: load_table(rows, f"Load the {pre.reusable_tokens:,}-token prefix or recompute it ({gpu})")
