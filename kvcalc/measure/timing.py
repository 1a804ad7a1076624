"""The `time` stage of `kvcalc measure` (see `runner`): the bandwidth probe, the decode step
over every measured layer (attention only, or whole decoder layers with --with-weights), an
optional CUDA graph of it, warm-up and timed steps.

Shapes: queries (B, H_q, D_k), the hidden state (B, hidden); the caches as in `cache`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from kvcalc.measure.attention import attention_scale, layer_step
from kvcalc.measure.cache import LayerState
from kvcalc.measure.device import Progress, _sync, probe_bandwidth, time_call_s

if TYPE_CHECKING:
    from kvcalc.measure.runner import Allocation, MeasureSetup, Resources


@dataclass(frozen=True)
class Probe:
    """The bandwidth probe: bytes read per pass and the median bytes per second."""

    probe_bytes: int
    bytes_per_s: float


@dataclass(frozen=True)
class Timing:
    """The timed steps: each one's position (0-based token index) and seconds."""

    positions: list[int]
    times_s: list[float]


def probe(rp: MeasureSetup, progress: Progress | None) -> Probe:
    """The device's read bandwidth (`device.probe_bandwidth`), measured first, while the
    memory the cache will take is still free; its buffer is freed before it returns."""
    n, bps = probe_bandwidth(rp.device, rp.free_bytes, progress)
    if rp.device == "cpu":
        rp.notes.append(f"CPU probe: sum() over {n / 2**20:.0f} MiB (a GPU probe reads >= 2 GiB)")
    return Probe(n, bps)


def step_positions(seq_len: int, total_steps: int) -> list[int]:
    """The token index of each step (warm-up first): the last `total_steps` positions, ending
    at seq_len - 1, so each step reads as many tokens as the context allows; when seq_len <
    total_steps, 0, 1, ... wrapping around at seq_len."""
    return [(seq_len - total_steps + i) if seq_len >= total_steps else i % seq_len for i in range(total_steps)]


def time_steps(rp: MeasureSetup, res: Resources, alloc: Allocation, progress: Progress | None) -> Timing:
    """Warm-up, then the timed decode steps (progress per step), each one call of
    `res.step(pos)` (or the CUDA graph's replay) timed by `device.time_call_s`. On CUDA, a
    working set under 4 x L2 gets a 2 x L2 buffer written before each step (an L2 flush)."""
    r, device = rp.request, rp.device
    res.step = step = make_step(rp, res)
    total_steps = rp.warmup + rp.steps
    positions = step_positions(rp.seq_len, total_steps)
    if device == "cuda" and rp.sizing.predicted_kv_bytes + alloc.weight_bytes < 4 * rp.l2_bytes:
        res.tensors["flush"] = torch.empty(2 * rp.l2_bytes, dtype=torch.uint8, device=device)
        rp.notes.append(
            f"working set under 4 x L2: L2 flushed ({2 * rp.l2_bytes / 2**20:.0f} MiB write) before each timed step"
        )
    if r.cuda_graph:
        positions = [rp.seq_len - 1] * total_steps
        capture_graph(rp, res, step)
    times: list[float] = []
    for i, pos in enumerate(positions):
        if "flush" in res.tensors:
            res.tensors["flush"].zero_()
        dt = time_call_s(device, res.graph.replay if res.graph is not None else partial(step, pos))
        if i >= rp.warmup:
            times.append(dt)
        if progress:
            progress("decode steps", i + 1, total_steps)
    _sync(device)
    return Timing(positions[rp.warmup :], times)


def capture_graph(rp: MeasureSetup, res: Resources, step: Callable[[int], None]) -> None:
    """Capture one step at position seq_len - 1 into res.graph, after 3 warm-up steps on a side
    stream (lazy inits, kernel choice). The slot is a Python int inside the step: capture bakes
    it in, so every replay writes the same slot (seq_len - 1) % cache_len and reads the same
    length; the inputs q / x are static tensors."""
    pos = rp.seq_len - 1
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(pos)
    torch.cuda.current_stream().wait_stream(side)
    res.graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(res.graph):
        step(pos)
    rp.notes.append(
        "CUDA graph: one step at position seq_len - 1 captured and replayed; the position is "
        "baked into the graph, so every replay rewrites the same slot and reads every cached token"
    )


def make_step(rp: MeasureSetup, res: Resources) -> Callable[[int], None]:
    """One decode step over every measured layer at token `pos`: attention only (the random
    query res.tensors['q'] against each layer's cache), or with --with-weights whole decoder
    layers (QKV projection, attention, output projection, MLP; no norms, no RoPE) carrying the
    hidden state (B, hidden) from res.tensors['x'] through the layers. The function reads the
    tensors through `res` only, so clearing `res` frees them."""
    model, cd, be = rp.request.model, rp.sizing.compute_dtype, rp.backend
    batch, with_weights = rp.request.batch, rp.request.with_weights
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
            o = layer_step(
                st, q.view(batch, hq, dk), pos, scale, be, cd, r, kn.view(batch, hkv, dk), vn.view(batch, hkv, dv)
            )
        h = h + o.reshape(batch, -1) @ wo
        if len(mlp) == 2 and model.mlp_kind == "gated":
            g, u = (h @ mlp[0]).chunk(2, dim=-1)
            return h + (F.silu(g) * u) @ mlp[1]
        return h + F.gelu(h @ mlp[0]) @ mlp[1]

    def step(pos: int) -> None:
        h = res.tensors["x"]
        for st in res.states:
            if with_weights:
                h = layer_with_weights(st, h, pos)
            else:
                layer_step(st, res.tensors["q"], pos, scale, be, cd, r)

    return step
