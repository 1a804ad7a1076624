"""The roofline: decode and prefill time from bytes, FLOPs and a `GpuSpec` (pure arithmetic).

No I/O, no rich, no yaml, no torch. A step takes as long as the slower of reading its bytes and
doing its FLOPs (Williams, Waterman, Patterson 2009, "Roofline", CACM 52(4)), plus the
tensor-parallel all-reduces, which do not overlap with either:

    step_time_s = max(bytes / (hbm_bytes_per_s x bw_efficiency),
                      flops / (peak_flops_per_s x flops_efficiency)) + allreduce_time_s

Decode reads, per step, the weights it touches (every dense weight; for MoE the experts the batch
routes to) and the whole batch's KV cache; it does 2 FLOPs per weight per token plus the attention
over the cached tokens. Prefill of a P-token prompt does the same matmuls for P tokens plus the
attention, which grows with P^2 (causal: token i attends to min(i, window) tokens).

This is the bare roofline. What measured engines add on top of it -- a fixed time per step by
engine and backend, all-reduce latency, weight-format efficiency, prefill's memory + compute
crossover -- is the speed model of `calc.speed`, applied by `memory_plan.GpuFit` when its
`Layout.speed` is set (docs/speed-model.md).

Efficiency defaults are not 1.0:

- `DEFAULT_BW_EFFICIENCY = 0.8`: decode kernels reach 80-95% of HBM bandwidth at long context
  (FlashInfer, Ye et al. 2025, arXiv:2501.01005, section 4; FlashDecoding, Dao et al. 2023,
  crfm.stanford.edu/2023/10/12/flashdecoding.html); weight GEMVs at small batch sit at the low end.
- `DEFAULT_FLOPS_EFFICIENCY = 0.5`: large dense matmul workloads sustain about half the dense
  peak end to end (PaLM, Chowdhery et al. 2022, arXiv:2204.02311, Table 3: 46.2% MFU; Megatron-LM
  ~0.5, as llm-analysis' `FLOPS_EFFICIENCY` comment records).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.calc.defaults import DEFAULT_BW_EFFICIENCY, DEFAULT_FLOPS_EFFICIENCY  # the CLI reads them there
from kvcalc.schema import GpuSpec

#: bytes of one activation value moved by the TP all-reduce (bf16 / fp16 activations)
ACTIVATION_BYTES = 2
#: the link assumed for a GPU row that lists none: PCIe 4.0 x16, 16 GT/s x 16 lanes x 128/130
#: encoding = 31.5 GB/s each way, quoted as 64 GB/s bidirectional (PCI-SIG PCIe 4.0 base spec)
PCIE_GEN4_X16_BYTES_PER_S = 64_000_000_000


def memory_time_s(bytes_read: int | float, hbm_bytes_per_s: int | float, bw_efficiency: float = 1.0) -> float:
    """Seconds to read `bytes_read` bytes: bytes / (hbm_bytes_per_s x bw_efficiency)."""
    return bytes_read / (hbm_bytes_per_s * bw_efficiency)


def compute_time_s(flops: int | float, peak_flops_per_s: int | float, flops_efficiency: float = 1.0) -> float:
    """Seconds to do `flops` FLOPs: flops / (peak_flops_per_s x flops_efficiency)."""
    return flops / (peak_flops_per_s * flops_efficiency)


def allreduce_time_s(nbytes: int | float, tp: int, interconnect_bytes_per_s: int | float | None) -> float:
    """Ring all-reduce of `nbytes` over `tp` ranks: 2 (tp - 1) / tp x nbytes / one-direction
    bandwidth, where one direction is half the bidirectional figure vendors quote (the GPU
    table's `interconnect_bytes_per_s`). NCCL's bus-bandwidth definition
    (github.com/NVIDIA/nccl-tests `doc/PERFORMANCE.md`, "allReduce: busbw = algbw x 2(n-1)/n").
    0 when tp == 1; PCIe Gen4 x16 (64 GB/s) when the GPU lists no interconnect."""
    if tp <= 1:
        return 0.0
    bw = (interconnect_bytes_per_s or PCIE_GEN4_X16_BYTES_PER_S) / 2
    return 2 * (tp - 1) / tp * nbytes / bw


def tp_allreduce_bytes(n_layers: int, tokens: int, hidden_size: int, activation_bytes: int = ACTIVATION_BYTES) -> int:
    """Bytes all-reduced per forward under TP: 2 all-reduces per layer (after attention and after
    the MLP; Megatron-LM, Shoeybi et al. 2019, arXiv:1909.08053, section 3) of a
    (tokens, hidden) activation: 2 x n_layers x tokens x hidden x activation_bytes."""
    return 2 * n_layers * tokens * hidden_size * activation_bytes


def attended_pairs(prompt_len: int, window: int | None = None) -> int:
    """(query, key) pairs of causal attention over a `prompt_len`-token prompt: token i (1-based)
    attends to min(i, window) tokens; sum = P (P + 1) / 2 without a window, else
    w (w + 1) / 2 + (P - w) w once P > w."""
    p = prompt_len
    if window is None or p <= window:
        return p * (p + 1) // 2
    return window * (window + 1) // 2 + (p - window) * window


def expected_experts_touched(n_experts: int, k: int, tokens: int) -> float:
    """Distinct experts a batch of `tokens` tokens routes to, each picking k of E uniformly:
    E x (1 - (1 - k / E)^tokens). k at one token, E for large batches (the weights read per step
    grow with the batch for MoE)."""
    if n_experts == 0:
        return 0.0
    if k >= n_experts:
        return float(n_experts)
    return n_experts * (1.0 - (1.0 - k / n_experts) ** tokens)


#: weight formats whose GEMMs run on FP4 tensor cores where the GPU has them (Blackwell: NVFP4
#: and MXFP4 block-scaled MMA, NVIDIA Blackwell architecture technical brief, "Fifth-generation
#: Tensor Cores"; vLLM `quantization/modelopt.py` ModelOptNvFp4 and `mxfp4.py`, v0.33.0)
FP4_WEIGHT_FORMATS = ("nvfp4", "mxfp4")


def peak_flops_per_s(gpu: GpuSpec, weight_dtype: str) -> int:
    """The GPU's dense peak for the weight format: the FP4 peak for nvfp4 / mxfp4 weights where
    the GPU row gives `fp4_flops_per_s` (read with getattr: rows without the field have none),
    the fp8 peak for fp8 weights where the GPU has fp8 tensor cores, else bf16/fp16 (int8 / int4
    weights are dequantized to bf16 in the kernels vLLM uses for weight-only quantization:
    Marlin, AWQ; FP4 weights on a GPU without FP4 cores likewise, vLLM's Marlin MXFP4 fallback)."""
    fp4 = getattr(gpu, "fp4_flops_per_s", None)
    if weight_dtype in FP4_WEIGHT_FORMATS and fp4:
        return int(fp4)
    if weight_dtype.startswith("fp8") and gpu.fp8_flops_per_s:
        return gpu.fp8_flops_per_s
    return gpu.bf16_flops_per_s


@dataclass(frozen=True, slots=True)
class StepTime:
    """One step: its memory, compute and communication times, the total and what bounds it."""

    bytes_read: int
    flops: int
    memory_time_s: float
    compute_time_s: float
    comm_time_s: float
    #: the engine's fixed time per step (`calc.speed`; 0 for the bare roofline)
    floor_s: float = 0.0
    #: memory and compute overlap (decode: the larger counts) or add (prefill, `calc.speed`)
    overlap: bool = True
    #: the speed model's decode attention, timed on its own roofline after the weight GEMMs
    #: (`calc.speed.attention_time_s`; 0 for the bare roofline, where memory and compute hold it)
    attention_time_s: float = 0.0

    @property
    def step_time_s(self) -> float:
        """floor + max(memory, compute) + attention + communication (memory + compute when they
        do not overlap)."""
        work = (
            max(self.memory_time_s, self.compute_time_s) if self.overlap else self.memory_time_s + self.compute_time_s
        )
        return self.floor_s + work + self.attention_time_s + self.comm_time_s

    @property
    def bound(self) -> str:
        """'memory' or 'compute': the larger of the two roofline terms (the attention, which is
        read-bound in decode, counts on the memory side)."""
        return "memory" if self.memory_time_s + self.attention_time_s >= self.compute_time_s else "compute"


def step_time(
    bytes_read: int,
    flops: int,
    comm_bytes: int,
    gpu: GpuSpec,
    tp: int,
    peak: int,
    bw_efficiency: float = DEFAULT_BW_EFFICIENCY,
    flops_efficiency: float = DEFAULT_FLOPS_EFFICIENCY,
) -> StepTime:
    """The roofline time of one step on one GPU (bytes and FLOPs are that GPU's share)."""
    return StepTime(
        bytes_read=bytes_read,
        flops=flops,
        memory_time_s=memory_time_s(bytes_read, gpu.hbm_bytes_per_s, bw_efficiency),
        compute_time_s=compute_time_s(flops, peak, flops_efficiency),
        comm_time_s=allreduce_time_s(comm_bytes, tp, gpu.interconnect_bytes_per_s),
    )
