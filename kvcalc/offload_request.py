"""A deployment's offload tier in `kvcalc check` (beside `kvcalc.requests`): the engine's KV
memory from the deployment's GPU plan (`requests.plan_kv_memory`), the engine's blocks
(`EngineProfile.capacity`), its offload tier (`engines.offload_rules.offload_for`); a tier the
host cannot hold is a problem of the row ("does not fit"), with the figures."""

from __future__ import annotations

from typing import Any

from kvcalc.errors import KvcalcError


def settings_of(spec: Any) -> Any:
    """The `OffloadSettings` of a deployment's `OffloadSpec` (sizes kept as the file gives them)."""
    from kvcalc.engines.offload_rules import OffloadSettings

    def text(v: Any) -> str | None:
        return None if v is None else str(v)

    return OffloadSettings(kv_offloading_size=text(spec.kv_offloading_size),
                           kv_offloading_backend=spec.kv_offloading_backend, blocks_per_chunk=spec.blocks_per_chunk,
                           lmcache_cpu_size=text(spec.lmcache_cpu_size), lmcache_l1_size=text(spec.lmcache_l1_size),
                           hicache_ratio=spec.hicache_ratio, hicache_size=text(spec.hicache_size),
                           hicache_host_memory_fraction=spec.hicache_host_memory_fraction,
                           host_memory_bytes=spec.host_memory, gpus_per_node=spec.gpus_per_node,
                           shared_prefix_tokens=spec.shared_prefix or 0)


def deployment_offload(dep: Any, model: Any, gpu: Any) -> Any:
    """The `OffloadResult` of `dep.offload` on `gpu` (a `GpuSpec`). Raises `KvcalcError`: the
    host refusal (option --host-memory) or the engine's refusal of the flags."""
    from kvcalc.calc.check import layout
    from kvcalc.engines.offload_rules import offload_for
    from kvcalc.engines.profile import get_profile
    from kvcalc.requests import CapacityRequest, plan_kv_memory, run_capacity

    spec = dep.offload
    if dep.pp > 1:
        raise KvcalcError("offload: the tier is modelled for pp 1 (one rank holds every layer)", field="offload",
                          value=dep.pp)
    prof = get_profile(spec.engine)
    mem, _ = plan_kv_memory(model, gpu, layout(dep, model), dep.max_seq_len, dep.batch_per_replica, spec.engine)
    options = None
    if spec.engine == "vllm":
        options = prof.options(None)
        import dataclasses

        options = dataclasses.replace(options, compute_capability=gpu.compute_capability,
                                      vendor=None if gpu.vendor == "other" else gpu.vendor)
    req = CapacityRequest.build(model, engine=spec.engine, kv_memory_bytes=mem, kv_dtype=dep.kv_dtype,
                                tp=dep.resolved_tp, max_model_len=dep.max_seq_len, options=options)
    res = run_capacity(req)
    return offload_for(req.engine, model, res, settings_of(spec), tp=dep.resolved_tp, dp=dep.dp,
                       session_tokens=dep.max_seq_len, k=req.k, v=req.v, options=req.options)


def check_offload(dep: Any, model: Any, gpu: Any, row: Any) -> Any:
    """`row` (a `CheckRow`) with the offload tier's host check: a tier the host memory cannot
    hold adds its refusal to `problems` and makes the status "does not fit". Other refusals
    (flags of another engine, sizes in the wrong unit) raise `KvcalcError` (field `offload`)."""
    try:
        deployment_offload(dep, model, gpu)
    except KvcalcError as e:
        if e.option != "--host-memory":
            raise KvcalcError(e.message, field="offload", value=e.value) from None
        return row.model_copy(update={"problems": [*row.problems, f"offload: {e.message}"], "status": "does not fit"})
    return row
