"""`run`: the orchestration of `kvcalc measure` (see the package docstring for the flow), and the
`MeasureResult` it returns.

Sources: CUDA caching allocator: blocks rounded up to 512 B (c10/cuda/CUDACachingAllocator.cpp
`kMinBlockSize = 512`, `round_size`).
"""

from __future__ import annotations

import os
import statistics

import torch
import torch.nn.functional as F

from kvcalc.calc import kv_cache
from kvcalc.formats import StorageFormat
from kvcalc.errors import KvcalcError
from kvcalc.measure.attention import attention_scale, layer_step, resolve_backend
from kvcalc.measure.cache import GGML_DEQUANT, LayerState, allocate_layer, is_ggml
from kvcalc.measure.device import (
    Progress,
    _nvml_used,
    _pct,
    _rss,
    _sync,
    free_memory_bytes,
    probe_bandwidth,
    resolve_device,
    time_call_s,
)
from kvcalc.measure.sizing import Plan, check_fits, make_plan, weight_shapes
from kvcalc.measure.result import MeasureResult
from kvcalc.schema import ModelSpec

#: CUDA caching allocator block granularity (CUDACachingAllocator.cpp kMinBlockSize).
CUDA_BLOCK_BYTES = 512
#: timed steps: at least this many on a GPU; the CPU default is smaller, for speed.
GPU_MIN_STEPS = 30
CPU_DEFAULT_STEPS = 8


def cuda_block_bytes(t: torch.Tensor) -> int:
    """Bytes the CUDA caching allocator counts in memory_allocated for tensor `t`: its storage
    rounded up to a whole CUDA_BLOCK_BYTES (512 B) block (CUDACachingAllocator.cpp `round_size`)."""
    return -(-t.untyped_storage().nbytes() // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES


def l2_bytes(props: object, table_l2_bytes: int = 0) -> int:
    """L2 size for the flush buffer: the device's own `L2_cache_size` (torch
    `_CudaDeviceProperties`, from cudaDeviceProp.l2CacheSize), else the GPU table's `l2_bytes`,
    else 128 MiB (more than any current GPU's L2 but B200's, so a flush still evicts)."""
    return int(getattr(props, "L2_cache_size", 0) or table_l2_bytes or 128 * 2**20)


#: free device memory kept back by the fit check: cuBLAS / SDPA workspaces, the CUDA graph's
#: private pool and allocator page granularity (expandable segments map 20 MiB pages).
CUDA_MARGIN_MIN_BYTES = 1 * 2**30


def cuda_margin_bytes(total_bytes: int) -> int:
    """Bytes of free device memory the fit check leaves unused: max(1 GiB, 2% of total)."""
    return max(CUDA_MARGIN_MIN_BYTES, total_bytes // 50)


def run(model: ModelSpec, seq_len: int, batch: int, k_fmt: StorageFormat, v_fmt: StorageFormat, *,
        device: str = "auto", layers: int | None = None, steps: int | None = None,
        backend: str = "auto", with_weights: bool = False, cuda_graph: bool = False,
        progress: Progress | None = None) -> MeasureResult:
    """Allocate the cache of `model` at `seq_len` x `batch` as the engine predicts it, time
    decode steps, and compare (see the module docstring). Raises KvcalcError (before
    allocating) for a run that does not fit, an unsupported format or backend; frees every
    tensor on any error or Ctrl-C."""
    notes: list[str] = []
    requested = device
    device = resolve_device(device)
    notes.append(f"device {device}" + (" (auto: CUDA present)" if requested == "auto" and device == "cuda"
                                       else " (auto: no CUDA)" if requested == "auto" else ""))
    be = resolve_backend(backend, device)
    for f in {k_fmt.name: k_fmt, v_fmt.name: v_fmt}.values():
        if is_ggml(f) and f.name not in GGML_DEQUANT:
            raise KvcalcError(f"--kv-dtype {f.name}: measure allocates and times {', '.join(GGML_DEQUANT)} of the "
                              f"llama.cpp block formats; use kvcalc estimate for {f.name}'s bytes")
    if cuda_graph and device != "cuda":
        raise KvcalcError("--cuda-graph needs CUDA; drop it on the CPU")
    if be.startswith("flash") and (k_fmt.name != v_fmt.name or model.attention == "mla"):
        raise KvcalcError("--backend flash supports standard attention only; use sdpa for MLA")
    if steps is None:
        steps = GPU_MIN_STEPS if device == "cuda" else CPU_DEFAULT_STEPS
    if device == "cuda" and steps < GPU_MIN_STEPS:
        notes.append(f"--steps {steps} raised to {GPU_MIN_STEPS} (the GPU minimum)")
        steps = GPU_MIN_STEPS
    if device == "cpu":
        notes.append(f"CPU: {steps} timed steps (perf_counter); a GPU run uses at least {GPU_MIN_STEPS} with CUDA events")
    warmup = 5 if device == "cuda" else 2
    ctx_bytes = None
    gpu_row = None
    l2 = 0
    if device == "cuda":
        from kvcalc.load.gpus import gpu_for_device_name

        torch.cuda.init()
        torch.empty(1, device="cuda")
        torch.cuda.empty_cache()  # blocks cached by an earlier run in this process count as free
        free0, total = torch.cuda.mem_get_info()
        # device memory in use before any tensor of ours: the CUDA context (+ other processes)
        ctx_bytes = total - free0 - torch.cuda.memory_reserved()
        dev_name = torch.cuda.get_device_name()
        gpu_row = gpu_for_device_name(dev_name)
        l2 = l2_bytes(torch.cuda.get_device_properties(torch.cuda.current_device()),
                      gpu_row.l2_bytes if gpu_row else 0)
    else:
        import platform

        dev_name = platform.processor() or platform.machine() or "cpu"
        notes.append("CPU: no GPU table row; the prediction uses the bandwidth probed in this run only")

    def make(batch: int = batch, layers: int | None = layers) -> Plan:
        p = make_plan(model, seq_len, batch, k_fmt, v_fmt, device, layers, with_weights)
        if l2:  # the L2 flush buffer (2 x L2) may be needed beside the cache
            p = Plan(**{**p.__dict__, "workspace_bytes": p.workspace_bytes + 2 * l2})
        return p

    plan = make()
    free = free_memory_bytes(device)
    if free is None:
        notes.append("free memory unknown (no psutil, no /proc/meminfo): not checked before allocating")
    margin = cuda_margin_bytes(total) if device == "cuda" else 0
    check_fits(plan, free, device, make, margin_bytes=margin)

    if layers is not None and len(plan.layer_indices) < sum(x.caches_kv for x in model.layers):
        n_kv = sum(x.caches_kv for x in model.layers)
        notes.append(f"--layers {layers}: measured {len(plan.layer_indices)} of {n_kv} KV layers "
                     f"(indices {list(plan.layer_indices)}); model_step_s_median scales the median by "
                     f"model KV bytes / measured KV bytes = {plan.model_kv_bytes / plan.predicted_kv_bytes:.4g}")
    if any(not x.caches_kv for x in model.layers):
        notes.append("mamba/linear layers have no KV cache: not allocated, not timed")
    for f in {k_fmt.name: k_fmt, v_fmt.name: v_fmt}.values():
        if is_ggml(f):
            notes.append(f"{f.name}: allocated as raw uint8 llama.cpp blocks of the exact byte size "
                         f"({f.block_bytes} B / {f.block_values} values)")
    if plan.compute_dtype != (getattr(torch, k_fmt.torch_dtype) if k_fmt.torch_dtype and not k_fmt.quant_group_size else None):
        notes.append(f"{k_fmt.name}: dequantized per layer to {str(plan.compute_dtype).removeprefix('torch.')} "
                     f"then attended (the copy adds traffic not in bytes_read_per_step)")
    if be == "flashinfer":
        notes.append("flashinfer: single_decode_with_kv_cache once per batch row (B launches per layer), "
                     "HND views of the cache")
    if model.attention == "mla":
        notes.append("MLA: absorbed decode, q of width kv_lora_rank + rope against the latent as one shared "
                     "KV head; output over the first kv_lora_rank values")

    states: list[LayerState] = []
    extra: list[torch.Tensor] = []
    try:
        probe_n, probe_bps = probe_bandwidth(device, free, progress)
        if device == "cpu":
            notes.append(f"CPU probe: sum() over {probe_n / 2**20:.0f} MiB (a GPU probe reads >= 2 GiB)")
        # --- allocate, then read the allocator and the device
        _sync(device)
        if device == "cuda":
            torch.cuda.empty_cache()
            req0 = torch.cuda.memory_stats()["requested_bytes.all.current"]
            alloc0 = torch.cuda.memory_allocated()
            dev0 = torch.cuda.mem_get_info()[0]
            nvml0 = _nvml_used()
        rss0 = _rss() if device == "cpu" else None
        for i, li in enumerate(plan.layer_indices):
            states.append(allocate_layer(model.layers[li], plan, device))
            if progress:
                progress("allocate + fill KV", i + 1, len(plan.layer_indices))
        _sync(device)
        measured = sum(s.nbytes for s in states)
        req_d = alloc_d = alloc_exp = dev_d = nvml_d = rss_d = None
        # the row buffers (one token per layer) are allocated with the cache: count them apart
        row_tensors = [p for s in states for r in (s.k_row, s.v_row) if r is not None for p in r.parts]
        row_bytes = sum(p.untyped_storage().nbytes() for p in row_tensors)
        if device == "cuda":
            torch.cuda.empty_cache()
            req_d = torch.cuda.memory_stats()["requested_bytes.all.current"] - req0 - row_bytes
            alloc_d = torch.cuda.memory_allocated() - alloc0 - sum(cuda_block_bytes(p) for p in row_tensors)
            alloc_exp = sum(cuda_block_bytes(p) for s in states for p in s.tensors())
            dev_d = dev0 - torch.cuda.mem_get_info()[0]
            n1 = _nvml_used()
            nvml_d = None if nvml0 is None or n1 is None else n1 - nvml0
            if "expandable_segments:True" not in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
                notes.append("memory_allocated rounds each block to 512 B; set "
                             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before CUDA starts for exact segments")
        elif rss0 is not None:
            r1 = _rss()
            rss_d = r1 - rss0 if r1 is not None else None
        else:
            notes.append("RSS delta: n/a, pip install psutil")

        # --- weights and step inputs
        cd = plan.compute_dtype
        gen_q = torch.randn(batch, model.n_heads, model.resolved_head_dim, device=device).to(cd)
        x = torch.randn(batch, model.hidden_size or 1, device=device).to(cd)
        extra += [gen_q, x]
        wbytes = 0
        if with_weights:
            for st in states:
                st.weights = [torch.empty(a, b, dtype=cd, device=device).normal_(std=a ** -0.5)
                              for a, b in weight_shapes(model)]
                wbytes += sum(w.untyped_storage().nbytes() for w in st.weights)
            st = None
            notes.append("--with-weights: random QKV, output and MLP weights per layer; a whole decoder layer "
                         "is timed (no norms, no RoPE)")
        scale = attention_scale(model)
        r = model.kv_lora_rank or 0
        hq, dk = model.n_heads, model.resolved_head_dim
        hkv, dv = model.resolved_n_kv_heads, model.resolved_v_head_dim

        def layer_with_weights(st: LayerState, h: torch.Tensor, pos: int) -> torch.Tensor:
            if model.attention == "mla":
                wq, wdown, wo, *mlp = st.weights
                o = layer_step(st, (h @ wq).view(batch, hq, dk), pos, scale, be, cd, r, h @ wdown)
            else:
                wqkv, wo, *mlp = st.weights
                q, kn, vn = (h @ wqkv).split([hq * dk, hkv * dk, hkv * dv], dim=-1)
                o = layer_step(st, q.view(batch, hq, dk), pos, scale, be, cd, r,
                               kn.view(batch, hkv, dk), vn.view(batch, hkv, dv))
            h = h + o.reshape(batch, -1) @ wo
            if len(mlp) == 2 and model.mlp_kind == "gated":
                g, u = (h @ mlp[0]).chunk(2, dim=-1)
                return h + (F.silu(g) * u) @ mlp[1]
            return h + F.gelu(h @ mlp[0]) @ mlp[1]

        def step(pos: int) -> None:
            h = x
            for st in states:
                if with_weights:
                    h = layer_with_weights(st, h, pos)
                else:
                    layer_step(st, gen_q, pos, scale, be, cd, r)

        total_steps = warmup + steps
        positions = [(seq_len - total_steps + i) if seq_len >= total_steps else i % seq_len
                     for i in range(total_steps)]
        flush = None
        if device == "cuda" and plan.predicted_kv_bytes + wbytes < 4 * l2:
            flush = torch.empty(2 * l2, dtype=torch.uint8, device=device)
            extra.append(flush)
            notes.append(f"working set under 4 x L2: L2 flushed ({2 * l2 / 2**20:.0f} MiB write) before each timed step")
        graph = None
        if cuda_graph:
            positions = [seq_len - 1] * total_steps
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the default stream (lazy inits, kernel choice)
                for _ in range(3):
                    step(seq_len - 1)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step(seq_len - 1)
            # the slot is a Python int inside step(): capture bakes it in, so every replay writes the
            # same slot seq_len - 1 % cache_len and reads the same length; inputs gen_q / x are static
            notes.append("CUDA graph: one step at position seq_len - 1 captured and replayed; the position is "
                         "baked into the graph, so every replay rewrites the same slot and reads every cached token")
        times: list[float] = []
        for i, pos in enumerate(positions):
            if flush is not None:
                flush.zero_()
            dt = time_call_s(device, graph.replay if graph is not None else lambda: step(pos))
            if i >= warmup:
                times.append(dt)
            if progress:
                progress("decode steps", i + 1, total_steps)
        _sync(device)
    finally:
        # drop every reference to device memory (the closure cells of step() included) before
        # handing the cached blocks back, so the next run (gpu_check's sweep) sees them free
        states.clear()
        extra.clear()
        graph = flush = gen_q = x = row_tensors = None  # noqa: F841
        if device == "cuda":
            torch.cuda.empty_cache()

    # --- prediction against measurement (bytes read: the engine's bytes at each step's length)
    chosen = plan.layers
    timed = positions[warmup:]
    kv_read = round(statistics.fmean(kv_cache.layers_cache_bytes(chosen, min(p + 1, seq_len), batch, k_fmt, v_fmt)
                                     for p in timed))
    read = kv_read + wbytes
    med = statistics.median(times)
    from kvcalc.calc.roofline import memory_time_s  # the roofline's memory term, at full bandwidth

    pred = memory_time_s(read, probe_bps)
    table_bps = float(gpu_row.hbm_bytes_per_s) if gpu_row else None
    if device == "cuda" and gpu_row is None:
        notes.append(f"'{dev_name}' has no row in the GPU table: no table prediction")
    pred_t = memory_time_s(read, table_bps) if table_bps else None
    achieved = read / med
    scale_model = plan.model_kv_bytes / plan.predicted_kv_bytes
    return MeasureResult(
        model=model.name, device=device, device_name=dev_name, backend=be, kv_dtype=k_fmt.name if k_fmt == v_fmt
        else f"{k_fmt.name}/{v_fmt.name}", compute_dtype=str(plan.compute_dtype).removeprefix("torch."),
        seq_len=seq_len, batch=batch, n_layers=model.n_layers, layers_measured=len(plan.layer_indices),
        layer_indices=list(plan.layer_indices), steps=steps, warmup_steps=warmup, cuda_graph=cuda_graph,
        with_weights=with_weights, predicted_kv_bytes=plan.predicted_kv_bytes, measured_kv_bytes=measured,
        kv_bytes_equal=measured == plan.predicted_kv_bytes, model_kv_bytes=plan.model_kv_bytes,
        allocator_requested_delta_bytes=req_d, allocator_allocated_delta_bytes=alloc_d,
        allocator_allocated_expected_bytes=alloc_exp, device_used_delta_bytes=dev_d, nvml_used_delta_bytes=nvml_d,
        cuda_context_bytes=ctx_bytes, rss_delta_bytes=rss_d, weight_bytes=wbytes, bytes_read_per_step=read,
        predicted_step_s=pred, predicted_step_s_table=pred_t, measured_step_s_median=med,
        measured_step_s_p10=_pct(times, 10), measured_step_s_p90=_pct(times, 90),
        model_step_s_median=med * scale_model if not with_weights else med * len(
            [x for x in model.layers if x.caches_kv]) / len(plan.layer_indices),
        achieved_bytes_per_s=achieved, probe_bytes=probe_n, probe_bytes_per_s=probe_bps,
        table_gpu=gpu_row.key if gpu_row else None, table_bytes_per_s=table_bps,
        fraction_of_probe=achieved / probe_bps, fraction_of_table=achieved / table_bps if table_bps else None,
        error_percent=100 * (pred - med) / med, error_percent_table=100 * (pred_t - med) / med if pred_t else None,
        notes=notes,
    )
