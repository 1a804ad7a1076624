"""`run`: `kvcalc measure` as named stages over one `MeasureRequest` (see the package docstring
for the flow): `plan` (options, the device, sizing and the free-memory check; nothing
allocated), `allocate` (the cache, its memory readings, step inputs and weights), the time
stage in `timing` (`probe`, run first while the cache's memory is still free, then
`time_steps`: warm-up and timed decode steps) and `compare` (predicted against measured: the
`MeasureResult`). Every tensor lives in one `Resources`, released when the stages end,
normally or not.

Sources: CUDA caching allocator: blocks rounded up to 512 B (c10/cuda/CUDACachingAllocator.cpp
`kMinBlockSize = 512`, `round_size`).
"""

from __future__ import annotations

import os
import platform
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from kvcalc.calc import kv_cache
from kvcalc.errors import KvcalcError
from kvcalc.measure.attention import resolve_backend
from kvcalc.measure.cache import GGML_DEQUANT, LayerState, allocate_layer, is_ggml
from kvcalc.measure.defaults import Announcement, budget_bytes, default_rule, default_seq_len, estimate_run_s
from kvcalc.measure.device import (
    Progress,
    _nvml_used,
    _pct,
    _rss,
    _sync,
    free_memory_bytes,
    resolve_device,
)
from kvcalc.measure.request import MeasureRequest
from kvcalc.measure.result import MeasureResult
from kvcalc.measure.sizing import Sizing, check_fits, make_plan, pick_layers, weight_shapes
from kvcalc.measure.timing import Probe, Timing, probe, time_steps
from kvcalc.schema import GpuSpec

GIB_BYTES = 2**30
#: CUDA caching allocator block granularity (CUDACachingAllocator.cpp kMinBlockSize).
CUDA_BLOCK_BYTES = 512
#: timed steps: at least this many on a GPU; the CPU default is smaller, for speed.
GPU_MIN_STEPS = 30
CPU_DEFAULT_STEPS = 8
#: untimed warm-up steps before the timed ones
GPU_WARMUP_STEPS = 5
CPU_WARMUP_STEPS = 2
#: free device memory kept back by the fit check: cuBLAS / SDPA workspaces, the CUDA graph's
#: private pool and allocator page granularity (expandable segments map 20 MiB pages).
CUDA_MARGIN_MIN_BYTES = 1 * 2**30


def cuda_block_bytes(t: torch.Tensor) -> int:
    """Bytes the CUDA caching allocator counts in memory_allocated for tensor `t`: its storage
    rounded up to a whole CUDA_BLOCK_BYTES (512 B) block (CUDACachingAllocator.cpp `round_size`)."""
    return -(-t.untyped_storage().nbytes() // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES


def l2_bytes(props: object, table_l2_bytes: int = 0) -> int:
    """L2 size for the flush buffer: the device's own `L2_cache_size` (torch
    `_CudaDeviceProperties`, from cudaDeviceProp.l2CacheSize), else the GPU table's `l2_bytes`,
    else 128 MiB (more than any current GPU's L2 but B200's, so a flush still evicts)."""
    return int(getattr(props, "L2_cache_size", 0) or table_l2_bytes or 128 * 2**20)


def cuda_margin_bytes(total_bytes: int) -> int:
    """Bytes of free device memory the fit check leaves unused: max(1 GiB, 2% of total)."""
    return max(CUDA_MARGIN_MIN_BYTES, total_bytes // 50)


def run(
    request: MeasureRequest, *, progress: Progress | None = None, announce: Callable[[Announcement], None] | None = None
) -> MeasureResult:
    """Allocate the cache of `request.model` at `seq_len` x `batch` as the engine predicts it,
    time decode steps, and compare (see the module docstring). `announce` is called once, after
    planning and before any tensor, with the bytes the run will allocate and its rough time
    (`announcement`); `progress(task, done, total)` per probe pass, per layer allocated and per
    decode step. Raises KvcalcError (before allocating) for a run that does not fit, an
    unsupported format, device or backend; frees every tensor on any error or Ctrl-C."""
    run_plan = plan(request)
    if announce is not None:
        announce(announcement(run_plan))
    try:
        with Resources(run_plan.device) as res:
            bandwidth = probe(run_plan, progress)  # first, while the cache's memory is still free
            alloc = allocate(run_plan, res, progress)
            timing = time_steps(run_plan, res, alloc, progress)
    except (MemoryError, RuntimeError) as e:  # torch.OutOfMemoryError is a RuntimeError
        if not is_out_of_memory(e):
            raise
        raise KvcalcError(out_of_memory_message(run_plan, e)) from None
    return compare(run_plan, bandwidth, alloc, timing)


def is_out_of_memory(e: BaseException) -> bool:
    """True for an allocation refused by the device or the OS: Python's `MemoryError`, torch's
    `OutOfMemoryError` (CUDA), or the CPU allocator's RuntimeError ("DefaultCPUAllocator: can't
    allocate memory", c10/core/impl/alloc_cpu.cpp; "not enough memory")."""
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        return True
    text = str(e).lower()
    return any(s in text for s in ("can't allocate memory", "out of memory", "not enough memory"))


def out_of_memory_message(rp: MeasureSetup, e: BaseException) -> str:
    """One line for an allocation that failed although the fit check passed: a limit the free
    memory reading did not show (another process, a container's limit, ulimit -v)."""
    first = (str(e).strip().splitlines() or [type(e).__name__])[0][:160]
    free = f"{rp.free_bytes / GIB_BYTES:.2f} GiB" if rp.free_bytes is not None else "an unknown amount"
    return (
        f"{rp.device} refused an allocation ({first}) although {free} looked free: another process or a "
        f"memory limit took it; use a smaller --seq-len, --batch or --layers"
    )


# ----- resources ---------------------------------------------------------------------------


class Resources:
    """Every tensor one run holds (the layers' caches and weights, the step inputs, the L2 flush
    buffer), the CUDA graph and the step function that closes over them. Stage functions keep
    tensors here, never in their own frames, so that `__exit__` (on success, an error or
    Ctrl-C) drops every reference before handing the allocator's cached blocks back
    (`torch.cuda.empty_cache()` on CUDA): the next run in this process (gpu_check's sweep) sees
    that memory free."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.states: list[LayerState] = []
        self.tensors: dict[str, torch.Tensor] = {}  # 'q' (B, H_q, D), 'x' (B, hidden), 'flush'
        self.graph: Any = None  # Any: a torch.cuda.CUDAGraph (torch is read untyped)
        self.step: Callable[[int], None] | None = None

    def __enter__(self) -> Resources:
        return self

    def __exit__(self, *exc: object) -> None:
        self.states.clear()
        self.tensors.clear()
        self.graph = self.step = None
        if self.device == "cuda":
            torch.cuda.empty_cache()


# ----- plan --------------------------------------------------------------------------------


@dataclass
class MeasureSetup:
    """What `plan` decided, before any tensor: the request, the resolved device and backend,
    the steps, the device's readings (CUDA context bytes, GPU table row, L2 bytes, free
    memory), the `Sizing`, and the notes so far (later stages append theirs)."""

    request: MeasureRequest
    device: str
    backend: str
    steps: int
    warmup: int
    device_name: str
    gpu_row: GpuSpec | None
    cuda_context_bytes: int | None
    l2_bytes: int
    free_bytes: int | None
    sizing: Sizing
    notes: list[str] = field(default_factory=list)

    @property
    def seq_len(self) -> int:
        """The context measured: the request's, or the default `plan` set in it (never None here)."""
        return cast(int, self.request.seq_len)


def plan(request: MeasureRequest) -> MeasureSetup:
    """Resolve the device and backend, refuse unsupported options, read the device, size the
    run (`sizing.make_plan`, plus a 2 x L2 flush buffer on CUDA) and refuse it (KvcalcError,
    naming the largest --batch or --layers that fits) when it needs more than the free memory
    less a margin (max(1 GiB, 2% of total) on CUDA, none on the CPU)."""
    r = request
    notes: list[str] = []
    device = resolve_device(r.device)
    notes.append(
        f"device {device}"
        + (
            " (auto: CUDA present)"
            if r.device == "auto" and device == "cuda"
            else " (auto: no CUDA)"
            if r.device == "auto"
            else ""
        )
    )
    backend = resolve_backend(r.backend, device)
    _check_options(r, device, backend)
    steps = r.steps
    if steps is None:
        steps = GPU_MIN_STEPS if device == "cuda" else CPU_DEFAULT_STEPS
    if device == "cuda" and steps < GPU_MIN_STEPS:
        notes.append(f"--steps {steps} raised to {GPU_MIN_STEPS} (the GPU minimum)")
        steps = GPU_MIN_STEPS
    if device == "cpu":
        notes.append(
            f"CPU: {steps} timed steps (perf_counter); a GPU run uses at least {GPU_MIN_STEPS} with CUDA events"
        )
    dev_name, gpu_row, ctx_bytes, l2, total = _read_device(device, notes)
    free = free_memory_bytes(device)
    if r.seq_len is None:
        r = _with_default_seq_len(r, device, free, notes)
    seq_len = cast(int, r.seq_len)  # given, or the default just set

    def make(batch: int = r.batch, layers: int | None = r.layers) -> Sizing:
        p = make_plan(r.model, seq_len, batch, r.k_format, r.v_format, device, layers, r.with_weights)
        if l2:  # the L2 flush buffer (2 x L2) may be needed beside the cache
            p = Sizing(**{**p.__dict__, "workspace_bytes": p.workspace_bytes + 2 * l2})
        return p

    sizing = make()
    if free is None:
        notes.append("free memory unknown (no psutil, no /proc/meminfo): not checked before allocating")
    check_fits(sizing, free, device, make, margin_bytes=cuda_margin_bytes(total) if device == "cuda" else 0)
    run_plan = MeasureSetup(
        r,
        device,
        backend,
        steps,
        GPU_WARMUP_STEPS if device == "cuda" else CPU_WARMUP_STEPS,
        dev_name,
        gpu_row,
        ctx_bytes,
        l2,
        free,
        sizing,
        notes,
    )
    notes += _plan_notes(run_plan)
    return run_plan


def _with_default_seq_len(r: MeasureRequest, device: str, free: int | None, notes: list[str]) -> MeasureRequest:
    """`r` with `seq_len` set by the default rule (`defaults.default_seq_len` over the layers
    that will be measured, against `defaults.budget_bytes` of this device), and a note saying so."""
    layers = [r.model.layers[i] for i in pick_layers(r.model, r.layers)]
    budget = budget_bytes(device, free)
    cap = r.model.context_limit
    T = default_seq_len(layers, cap, r.batch, r.k_format, r.v_format, budget)
    limit = (
        "2^17 (the model states no max_position_embeddings)"
        if not cap
        else f"{cap:,} (max_position_embeddings)"
        if cap == r.model.max_position_embeddings
        else f"{cap:,} ({r.model.context_limit_label})"
    )
    notes.append(
        f"--seq-len not given: {T:,} tokens, {default_rule(device, free)} ({budget:,} B); context "
        f"limit {limit}; give --seq-len for another size"
    )
    return r.model_copy(update={"seq_len": T})


def announcement(rp: MeasureSetup) -> Announcement:
    """What the planned run will allocate (KV cache of the measured layers; workspace, weights
    and the L2 flush buffer beside it) and its rough time (`defaults.estimate_run_s`; on a GPU
    with a table row, at half the row's bandwidth)."""
    r, p = rp.request, rp.sizing
    bw = float(rp.gpu_row.hbm_bytes_per_s) / 2 if rp.gpu_row else None
    est = estimate_run_s(
        p.predicted_kv_bytes,
        p.workspace_bytes + p.weight_bytes,
        rp.steps + rp.warmup,
        rp.device,
        str(p.compute_dtype).removeprefix("torch."),
        bw,
    )
    rule = next((n for n in rp.notes if n.startswith("--seq-len not given")), None)
    return Announcement(
        model=r.model.name,
        seq_len=rp.seq_len,
        batch=r.batch,
        device=rp.device,
        kv_bytes=p.predicted_kv_bytes,
        other_bytes=p.workspace_bytes + p.weight_bytes,
        estimated_s=est,
        seq_len_rule=rule,
    )


def _check_options(r: MeasureRequest, device: str, backend: str) -> None:
    """Refuse (KvcalcError) what this run cannot measure: llama.cpp formats it cannot
    dequantize, a CUDA graph off CUDA, the flash backends with mixed K/V formats or MLA."""
    for f in {r.k_format.name: r.k_format, r.v_format.name: r.v_format}.values():
        if is_ggml(f) and f.name not in GGML_DEQUANT:
            raise KvcalcError(
                f"--kv-dtype {f.name}: measure allocates and times {', '.join(GGML_DEQUANT)} of the "
                f"llama.cpp block formats; use kvcalc estimate for {f.name}'s bytes"
            )
    if r.cuda_graph and device != "cuda":
        raise KvcalcError("--cuda-graph needs CUDA; drop it on the CPU")
    if backend.startswith("flash") and (r.k_format.name != r.v_format.name or r.model.attention == "mla"):
        raise KvcalcError("--backend flash supports standard attention only; use sdpa for MLA")


def _read_device(device: str, notes: list[str]) -> tuple[str, GpuSpec | None, int | None, int, int]:
    """(device name, GPU table row, CUDA context bytes, L2 bytes, total bytes) before any tensor
    of ours. CUDA: starts the context, empties the allocator's cache (blocks cached by an earlier
    run in this process count as free), and reads the context as total - free - reserved (other
    processes included). CPU: the processor name, zeros and Nones."""
    if device != "cuda":
        notes.append("CPU: no GPU table row; the prediction uses the bandwidth probed in this run only")
        return platform.processor() or platform.machine() or "cpu", None, None, 0, 0
    from kvcalc.load.gpus import gpu_for_device_name

    torch.cuda.init()
    torch.empty(1, device="cuda")
    torch.cuda.empty_cache()
    free0, total = torch.cuda.mem_get_info()
    ctx_bytes = total - free0 - torch.cuda.memory_reserved()
    dev_name = torch.cuda.get_device_name()
    gpu_row = gpu_for_device_name(dev_name)
    l2 = l2_bytes(torch.cuda.get_device_properties(torch.cuda.current_device()), gpu_row.l2_bytes if gpu_row else 0)
    return dev_name, gpu_row, ctx_bytes, l2, total


def _plan_notes(rp: MeasureSetup) -> list[str]:
    """What the plan means for the numbers: the layers measured and the model scale factor,
    layers without a cache, llama.cpp blocks as raw bytes, dequantization, the backend's shape."""
    r, p, notes = rp.request, rp.sizing, []
    n_kv = sum(x.caches_kv for x in r.model.layers)
    if r.layers is not None and len(p.layer_indices) < n_kv:
        notes.append(
            f"--layers {r.layers}: measured {len(p.layer_indices)} of {n_kv} KV layers "
            f"(indices {list(p.layer_indices)}); model_step_s_median scales the median by "
            f"model KV bytes / measured KV bytes = {p.model_kv_bytes / p.predicted_kv_bytes:.4g}"
        )
    if any(not x.caches_kv for x in r.model.layers):
        notes.append("mamba/linear layers have no KV cache: not allocated, not timed")
    for f in {r.k_format.name: r.k_format, r.v_format.name: r.v_format}.values():
        if is_ggml(f):
            notes.append(
                f"{f.name}: allocated as raw uint8 llama.cpp blocks of the exact byte size "
                f"({f.block_bytes} B / {f.block_values} values)"
            )
    k = r.k_format
    if p.compute_dtype != (getattr(torch, k.torch_dtype) if k.torch_dtype and not k.quant_group_size else None):
        notes.append(
            f"{k.name}: dequantized per layer to {str(p.compute_dtype).removeprefix('torch.')} "
            f"then attended (the copy adds traffic not in bytes_read_per_step)"
        )
    if rp.backend == "flashinfer":
        notes.append(
            "flashinfer: single_decode_with_kv_cache once per batch row (B launches per layer), HND views of the cache"
        )
    if r.model.attention == "mla":
        notes.append(
            "MLA: absorbed decode, q of width kv_lora_rank + rope against the latent as one shared "
            "KV head; output over the first kv_lora_rank values"
        )
    return notes


# ----- allocate ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Allocation:
    """What allocating told us (numbers only, no tensor): the cache's storage bytes, the
    allocator / device / NVML / RSS deltas it caused (None where they do not apply), and the
    weight bytes."""

    measured_kv_bytes: int
    requested_delta_bytes: int | None
    allocated_delta_bytes: int | None
    allocated_expected_bytes: int | None
    device_delta_bytes: int | None
    nvml_delta_bytes: int | None
    rss_delta_bytes: int | None
    weight_bytes: int


def allocate(rp: MeasureSetup, res: Resources, progress: Progress | None) -> Allocation:
    """Allocate and fill each measured layer's cache into `res.states` (progress per layer),
    read what the allocator and the device say it cost (the one-token row buffers, allocated
    with the cache, counted apart), then the step inputs q (B, H_q, D) and x (B, hidden), and
    with --with-weights each layer's random weights (`sizing.weight_shapes`)."""
    device, p = rp.device, rp.sizing
    _sync(device)
    if device == "cuda":
        torch.cuda.empty_cache()
        before = (
            torch.cuda.memory_stats()["requested_bytes.all.current"],
            torch.cuda.memory_allocated(),
            torch.cuda.mem_get_info()[0],
            _nvml_used(),
        )
    rss0 = _rss() if device == "cpu" else None
    for i, li in enumerate(p.layer_indices):
        res.states.append(allocate_layer(rp.request.model.layers[li], p, device))
        if progress:
            progress("allocate + fill KV", i + 1, len(p.layer_indices))
    _sync(device)
    measured = sum(s.nbytes for s in res.states)
    req_d = alloc_d = alloc_exp = dev_d = nvml_d = rss_d = None
    if device == "cuda":
        req_d, alloc_d, alloc_exp, dev_d, nvml_d = _cuda_deltas(res.states, *before)
        if "expandable_segments:True" not in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
            rp.notes.append(
                "memory_allocated rounds each block to 512 B; set "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before CUDA starts for exact segments"
            )
    elif rss0 is not None:
        r1 = _rss()
        rss_d = r1 - rss0 if r1 is not None else None
    else:
        rp.notes.append("RSS delta: n/a, pip install psutil")
    wbytes = _allocate_inputs_and_weights(rp, res)
    return Allocation(measured, req_d, alloc_d, alloc_exp, dev_d, nvml_d, rss_d, wbytes)


def _cuda_deltas(
    states: list[LayerState], req0: int, alloc0: int, dev0: int, nvml0: int | None
) -> tuple[int, int, int, int, int | None]:
    """After allocating `states` on CUDA (the allocator's cache emptied first): the allocator's
    requested and allocated deltas less the row buffers, the allocated bytes expected (each
    cache tensor rounded to 512 B), the device's free-memory drop and NVML's used delta."""
    rows = [t for s in states for r in (s.k_row, s.v_row) if r is not None for t in r.parts]
    torch.cuda.empty_cache()
    req_d = (
        torch.cuda.memory_stats()["requested_bytes.all.current"]
        - req0
        - sum(t.untyped_storage().nbytes() for t in rows)
    )
    alloc_d = torch.cuda.memory_allocated() - alloc0 - sum(cuda_block_bytes(t) for t in rows)
    alloc_exp = sum(cuda_block_bytes(t) for s in states for t in s.tensors())
    dev_d = dev0 - torch.cuda.mem_get_info()[0]
    n1 = _nvml_used()
    return req_d, alloc_d, alloc_exp, dev_d, None if nvml0 is None or n1 is None else n1 - nvml0


def _allocate_inputs_and_weights(rp: MeasureSetup, res: Resources) -> int:
    """The step inputs in the compute dtype: res.tensors['q'] (B, H_q, D_k) random queries and
    res.tensors['x'] (B, hidden) the hidden state; with --with-weights each state's weights,
    std in^-0.5 (a note says what is timed). Returns the weight bytes (0 without weights)."""
    r, cd = rp.request, rp.sizing.compute_dtype
    res.tensors["q"] = torch.randn(r.batch, r.model.n_heads, r.model.resolved_head_dim, device=rp.device).to(cd)
    res.tensors["x"] = torch.randn(r.batch, r.model.hidden_size or 1, device=rp.device).to(cd)
    if not r.with_weights:
        return 0
    wbytes = 0
    for st in res.states:
        st.weights = [
            torch.empty(a, b, dtype=cd, device=rp.device).normal_(std=a**-0.5) for a, b in weight_shapes(r.model)
        ]
        wbytes += sum(w.untyped_storage().nbytes() for w in st.weights)
    rp.notes.append(
        "--with-weights: random QKV, output and MLP weights per layer; a whole decoder layer "
        "is timed (no norms, no RoPE)"
    )
    return wbytes


# ----- compare -----------------------------------------------------------------------------


def compare(rp: MeasureSetup, bandwidth: Probe, alloc: Allocation, timing: Timing) -> MeasureResult:
    """Predicted against measured. Bytes read per step = the engine's KV bytes of the measured
    layers at each timed step's length (pos + 1, at most seq_len), averaged over the timed
    steps and rounded, plus the weight bytes; predicted step time = bytes read / bandwidth
    (`calc.roofline.memory_time_s`: the probe's, and the GPU table's when the device has a row);
    measured = the median of the timed steps, with p10 / p90 (`device._pct`); the whole-model
    median scales it by model KV bytes / measured KV bytes (with weights: by caching layers /
    measured layers); error % = 100 x (predicted - measured) / measured."""
    from kvcalc.calc.roofline import memory_time_s  # the roofline's memory term, at full bandwidth

    r, p, notes = rp.request, rp.sizing, rp.notes
    kv_read = round(
        statistics.fmean(
            kv_cache.layers_cache_bytes(p.layers, min(pos + 1, rp.seq_len), r.batch, r.k_format, r.v_format)
            for pos in timing.positions
        )
    )
    read = kv_read + alloc.weight_bytes
    med = statistics.median(timing.times_s)
    pred = memory_time_s(read, bandwidth.bytes_per_s)
    table_bps = float(rp.gpu_row.hbm_bytes_per_s) if rp.gpu_row else None
    if rp.device == "cuda" and rp.gpu_row is None:
        notes.append(f"'{rp.device_name}' has no row in the GPU table: no table prediction")
    pred_t = memory_time_s(read, table_bps) if table_bps else None
    achieved = read / med
    n_caching = len([x for x in r.model.layers if x.caches_kv])
    model_med = (
        med * (p.model_kv_bytes / p.predicted_kv_bytes)
        if not r.with_weights
        else med * n_caching / len(p.layer_indices)
    )
    return MeasureResult(
        model=r.model.name,
        device=rp.device,
        device_name=rp.device_name,
        backend=rp.backend,
        kv_dtype=r.k_format.name if r.k_format == r.v_format else f"{r.k_format.name}/{r.v_format.name}",
        compute_dtype=str(p.compute_dtype).removeprefix("torch."),
        seq_len=rp.seq_len,
        batch=r.batch,
        n_layers=r.model.n_layers,
        layers_measured=len(p.layer_indices),
        layer_indices=list(p.layer_indices),
        steps=rp.steps,
        warmup_steps=rp.warmup,
        cuda_graph=r.cuda_graph,
        with_weights=r.with_weights,
        predicted_kv_bytes=p.predicted_kv_bytes,
        measured_kv_bytes=alloc.measured_kv_bytes,
        kv_bytes_equal=alloc.measured_kv_bytes == p.predicted_kv_bytes,
        model_kv_bytes=p.model_kv_bytes,
        allocator_requested_delta_bytes=alloc.requested_delta_bytes,
        allocator_allocated_delta_bytes=alloc.allocated_delta_bytes,
        allocator_allocated_expected_bytes=alloc.allocated_expected_bytes,
        device_used_delta_bytes=alloc.device_delta_bytes,
        nvml_used_delta_bytes=alloc.nvml_delta_bytes,
        cuda_context_bytes=rp.cuda_context_bytes,
        rss_delta_bytes=alloc.rss_delta_bytes,
        weight_bytes=alloc.weight_bytes,
        bytes_read_per_step=read,
        predicted_step_s=pred,
        predicted_step_s_table=pred_t,
        measured_step_s_median=med,
        measured_step_s_p10=_pct(timing.times_s, 10),
        measured_step_s_p90=_pct(timing.times_s, 90),
        model_step_s_median=model_med,
        achieved_bytes_per_s=achieved,
        probe_bytes=bandwidth.probe_bytes,
        probe_bytes_per_s=bandwidth.bytes_per_s,
        table_gpu=rp.gpu_row.key if rp.gpu_row else None,
        table_bytes_per_s=table_bps,
        fraction_of_probe=achieved / bandwidth.bytes_per_s,
        fraction_of_table=achieved / table_bps if table_bps else None,
        error_percent=100 * (pred - med) / med,
        error_percent_table=100 * (pred_t - med) / med if pred_t else None,
        notes=notes,
    )
