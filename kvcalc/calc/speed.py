"""The speed model's terms beyond the bare roofline: each a small pure function (no I/O).

The roofline (`calc.roofline`) says how long a step's bytes and FLOPs take at the table's peaks.
Measured engines are slower, for reasons each of which is one term here, its constant kept in
`kvcalc/data/speed.yaml` with where it came from (`load.speed` reads it; `SpeedTerms` is what
one engine on one GPU gets):

    decode step = floor(engine, backend)
                + max(weight_bytes / (BW x eta_bw x eta_fmt(bits)), gemm_flops / (peak x eta_flops(class)))
                + max(kv_bytes / (BW x eta_bw), attention_flops / (bf16 peak x eta_flops(class)))
                + allreduce_calls x latency(tp, link) + allreduce_bytes / link_BW
    prefill     = floor + bytes / (BW x eta_bw x eta_fmt) + flops / (peak x eta_flops(class))
                + the same all-reduce terms

- `floor`: a fixed time per step (kernel launches, sampling, scheduling, host round trip) that
  does not shrink with the bytes: the intercept of t = floor + bytes / BW over rows that differ
  only in bytes (`fit_line`; Apple M2 Max tg128: about 5 ms at 95% of 400 GB/s).
- `latency(tp, link)`: one all-reduce's fixed cost, alpha_call + alpha_step x log2(tp) (a tree /
  recursive-doubling all-reduce takes log2(tp) steps; Thakur, Rabenseifner, Gropp 2005, "Optimization
  of Collective Communication Operations in MPICH", IJHPCA 19(1), the alpha term of section 4).
  Megatron tensor parallelism does 2 per layer (Shoeybi et al. 2019, arXiv:1909.08053, section 3).
- `eta_fmt(bits)`: the fraction of the achievable bandwidth a dequantizing GEMV reaches for weights
  of that width (8- and 4-bit kernels spend ALU time unpacking; gpt-fast's int8 / int4 rows on A100).
- `eta_flops(class)`: the fraction of dense peak prefill GEMMs reach, by GPU class (datacenter,
  consumer, apple).
- Decode times the weight GEMMs and the attention each on its own roofline and adds them
  (`attention_time_s`): they are separate kernels that run one after the other in every layer,
  so the KV read cannot hide under the GEMMs' math. At batch 1 both are read-bound and this is
  the bare sum of bytes; at a large batch the GEMMs turn compute-bound while attention still reads
  the whole batch's KV (TensorRT-LLM v0.9's static batches of 512 and 120 sequences).
- Prefill adds memory and compute time rather than taking the larger: a short prompt's GEMMs are
  too small to hide the weight stream behind the math (TensorRT-LLM's 128-token TTFT rows), and a
  long one is compute-bound either way, so the sum is the crossover with one formula.

Shapes: the KV cache of a step is (B, H_kv, T, D) per layer; weights are read once per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: the backends the floor is tabled for; `backend_of` maps a GPU row to one
BACKENDS = ("cuda", "rocm", "metal", "cpu")
#: GPU classes for the prefill compute efficiency
GPU_CLASSES = ("datacenter", "consumer", "apple")
#: weight widths the format efficiency is tabled for
WEIGHT_WIDTHS = (16, 8, 4)
#: interconnects the all-reduce latency is tabled for
LINKS = ("nvlink", "xgmi", "pcie")
#: PCIe x16 Gen5 bidirectional, the widest bus kvcalc's GPU table writes for a card without NVLink
#: (gpus.yaml header): anything faster is a GPU-to-GPU link
PCIE_MAX_BYTES_PER_S = 128_000_000_000


@dataclass(frozen=True, slots=True)
class SpeedTerms:
    """The constants one engine on one GPU runs with (from `speed.yaml`, then a calibration).

    `step_floor_s`: seconds per forward pass; `bw_efficiency`: fraction of the table's bandwidth
    reached by 16-bit reads; `format_efficiency`: the extra factor for 16-, 8- and 4-bit weights;
    `flops_efficiency`: fraction of dense peak; `allreduce_latency_s`: one all-reduce's fixed cost
    at this TP; `engine` / `backend` / `gpu_class` / `link`: what was looked up; `calibrated`:
    the fields a calibration file set (shown with the figures).
    """

    engine: str
    backend: str
    gpu_class: str
    link: str
    step_floor_s: float
    bw_efficiency: float
    format_efficiency: tuple[float, float, float]
    flops_efficiency: float
    allreduce_latency_s: float
    calibrated: tuple[str, ...] = ()

    def format_efficiency_at(self, bits: int) -> float:
        """The format factor for weights of `bits` bits per value (`weight_width` bucket)."""
        return self.format_efficiency[WEIGHT_WIDTHS.index(weight_width(bits))]

    def describe(self, bits: int = 16) -> str:
        """The terms in words, for the label every speed figure carries."""
        cal = f"; calibrated: {', '.join(self.calibrated)}" if self.calibrated else ""
        return (
            f"{self.engine} on {self.backend}: floor {self.step_floor_s * 1e3:.2f} ms/step, "
            f"bw eff {_frac(self.bw_efficiency)} x {weight_width(bits)}-bit weights "
            f"{_frac(self.format_efficiency_at(bits))}, FLOPs eff {_frac(self.flops_efficiency)}, "
            f"all-reduce {self.allreduce_latency_s * 1e6:.0f} us/call{cal}"
        )


def _frac(x: float) -> str:
    """A fraction as the label prints it: two decimals, three where the third is not 0 (0.82, 0.735)."""
    return f"{x:.2f}" if round(x, 2) == round(x, 3) else f"{x:.3f}"


def backend_of(vendor: str, name: str) -> str:
    """The engine backend a GPU row runs: NVIDIA -> cuda, AMD -> rocm, an Apple M-series row
    (vendor 'other', name 'Apple ...') -> metal, anything else -> cpu (llama.cpp's fallback)."""
    if vendor == "nvidia":
        return "cuda"
    if vendor == "amd":
        return "rocm"
    return "metal" if name.startswith("Apple") else "cpu"


def gpu_class_of(vendor: str, name: str) -> str:
    """'apple' for an Apple M-series row, 'consumer' for GeForce / RTX workstation cards (their
    GEMMs run near the table's FP32-accumulate peak, which is itself the limit), else 'datacenter'."""
    if name.startswith("Apple"):
        return "apple"
    if "GeForce" in name or " RTX " in f" {name} ":
        return "consumer"
    return "datacenter"


def link_of(vendor: str, interconnect_bytes_per_s: int | None) -> str:
    """'pcie' when the GPU row lists no link or one no faster than PCIe Gen5 x16 (128 GB/s
    bidirectional), else 'nvlink' (NVIDIA) or 'xgmi' (AMD)."""
    if not interconnect_bytes_per_s or interconnect_bytes_per_s <= PCIE_MAX_BYTES_PER_S:
        return "pcie"
    return "xgmi" if vendor == "amd" else "nvlink"


def weight_width(bits: int) -> int:
    """The format-efficiency bucket of a weight format of `bits` bits per value: 16 (16 bits and
    up), 8 (7-8 bits: int8, fp8, q8_0), else 4 (q4_0 .. q6_k, int4, nf4, mxfp4, nvfp4)."""
    if bits >= 16:
        return 16
    return 8 if bits >= 7 else 4


def allreduce_latency_s(tp: int, alpha_call_s: float, alpha_step_s: float) -> float:
    """The fixed cost of one all-reduce over `tp` ranks: alpha_call + alpha_step x log2(tp)
    seconds (0 for tp = 1). Thakur et al. 2005 (IJHPCA 19(1)) give log2(p) alpha for the
    recursive-doubling all-reduce NCCL's LL protocol approximates at small messages; gpt-fast's
    A100 TP rows (README, commit 0f925b5) fit alpha_call + alpha_step x log2(tp) at tp 2 / 4 / 8
    with per-call costs of about 19 / 25 / 29 us (`test_speed` pins the arithmetic)."""
    if tp <= 1:
        return 0.0
    return alpha_call_s + alpha_step_s * math.log2(tp)


def allreduce_calls(n_layers: int) -> int:
    """All-reduces per forward pass under Megatron tensor parallelism: 2 per layer (after the
    attention output projection and after the MLP down projection; arXiv:1909.08053 section 3)."""
    return 2 * n_layers


def decode_embedding_bytes(batch: int, vocab_size: int, embedding_bytes: int) -> int:
    """Bytes of the input embedding a decode step reads: only the batch's rows, one per sequence
    (an embedding lookup is a gather: `torch.nn.functional.embedding`, llama.cpp `ggml_get_rows`):
    ceil(min(B, vocab) / vocab x embedding_bytes). The output head is a GEMV over the whole
    (vocab, hidden) matrix and is read whole every step (not this function)."""
    if vocab_size <= 0 or embedding_bytes <= 0:
        return 0
    rows = min(batch, vocab_size)
    return -(-rows * embedding_bytes // vocab_size)


def attention_time_s(
    kv_bytes: int | float,
    attention_flops: int | float,
    hbm_bytes_per_s: int | float,
    bw_efficiency: float,
    bf16_flops_per_s: int | float,
    flops_efficiency: float,
) -> float:
    """Seconds of a decode step's attention, on its own roofline: max(KV bytes / (BW x eta_bw),
    attention FLOPs / (bf16 peak x eta_flops)). KV bytes: the batch's cache read once,
    (B, H_kv, T, D) per layer; FLOPs: 2 H (D_k + D_v) per cached token per sequence (in bf16:
    a quantized KV cache is dequantized in the kernel).

    Why apart from the weights: each layer runs its QKV projection, the attention kernel and its
    output projection one after the other (vLLM `vllm/model_executor/models/llama.py`
    `LlamaAttention.forward`: qkv_proj -> attn -> o_proj, v0.19; TensorRT-LLM v0.9's
    `gptAttentionPlugin` generation kernel, `cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention`),
    and one kernel's reads cannot overlap another kernel's math on the same stream. The roofline
    is per kernel and the step is the sum over kernels (Yuan et al. 2024, "LLM Inference
    Unveiled: Survey and Roofline Model Insights", arXiv:2402.16363, section 3: each operator on
    its own roofline, the layer's time their sum)."""
    return max(kv_bytes / (hbm_bytes_per_s * bw_efficiency), attention_flops / (bf16_flops_per_s * flops_efficiency))


def memory_time_s(parts: list[tuple[int | float, float]], hbm_bytes_per_s: int | float, bw_efficiency: float) -> float:
    """Seconds to read a step's bytes, given as (bytes, format factor) parts: sum of bytes /
    (BW x eta_bw x eta_fmt). KV and activations have factor 1; each weight part its format's
    (gpt-oss: bf16 attention and MXFP4 experts are two parts)."""
    bw = hbm_bytes_per_s * bw_efficiency
    return sum(b / (bw * f) for b, f in parts)


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares line y = a + b x through `points` (x, y): (a, b). With x = bytes read per
    step and y = seconds per step, a is the per-step floor and 1 / b the achieved bandwidth
    (`kvcalc measure` and the published rows both fit it). Raises ValueError for fewer than two
    distinct x."""
    n = len(points)
    xs = [p[0] for p in points]
    if n < 2 or max(xs) == min(xs):
        raise ValueError("a line needs two or more distinct x")
    mx = sum(xs) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in points)
    b = sxy / sxx
    return my - b * mx, b


@dataclass(frozen=True, slots=True)
class SpeedTable:
    """`kvcalc/data/speed.yaml` as read by `load.speed.speed_table`: values only (the sources
    stay in the file). `step_floor_s[engine][backend]`, `bw_efficiency[backend]`,
    `format_efficiency[backend][width]`, `flops_efficiency[gpu_class]`,
    `allreduce_latency_s[link]` = (alpha_call, alpha_step)."""

    step_floor_s: dict[str, dict[str, float]]
    bw_efficiency: dict[str, float]
    format_efficiency: dict[str, dict[int, float]]
    flops_efficiency: dict[str, float]
    allreduce_latency_s: dict[str, tuple[float, float]]


@dataclass(frozen=True, slots=True)
class Calibration:
    """What `kvcalc measure --calibrate` measured on one GPU: the per-step floor (s), the
    achieved read bandwidth (bytes/s), the achieved dense FLOP/s, one all-reduce's latency at
    `tp` ranks (s); None where it was not measured. `gpu`: the table key it was measured as."""

    gpu: str
    step_floor_s: float | None = None
    read_bytes_per_s: float | None = None
    flops_per_s: float | None = None
    allreduce_latency_s: float | None = None
    allreduce_tp: int | None = None


def floor_engine(engine: str, backend: str, table: SpeedTable) -> str:
    """The engine whose floor `engine` on `backend` gets: itself where the table has the pair,
    else 'ideal' (0 s) -- the label then says no floor was tabled for it."""
    return engine if backend in table.step_floor_s.get(engine, {}) else "ideal"


def resolve_terms(
    table: SpeedTable,
    *,
    engine: str,
    vendor: str,
    name: str,
    interconnect_bytes_per_s: int | None,
    hbm_bytes_per_s: int,
    bf16_flops_per_s: int,
    tp: int,
    calibration: Calibration | None = None,
) -> SpeedTerms:
    """The terms `engine` (kvcalc's canonical engine name, or a row's engine such as
    'tensorrt-llm') gets on a GPU (its table row's vendor, name, link, bandwidth and bf16 peak)
    at `tp` ranks: a table lookup, then the calibration's measured figures in place of the
    table's (floor as measured; bandwidth and FLOP/s as fractions of the table's peaks; the
    measured all-reduce latency, scaled by the log2(tp) law to this TP when measured at another)."""
    backend, cls, link = backend_of(vendor, name), gpu_class_of(vendor, name), link_of(vendor, interconnect_bytes_per_s)
    fe = floor_engine(engine, backend, table)
    floor = table.step_floor_s[fe][backend]
    bw = table.bw_efficiency[backend]
    fmt = table.format_efficiency[backend]
    fl = table.flops_efficiency[cls]
    a_call, a_step = table.allreduce_latency_s[link]
    ar = allreduce_latency_s(tp, a_call, a_step)
    done: list[str] = []
    cal = calibration
    if cal is not None and cal.step_floor_s is not None:
        floor = cal.step_floor_s
        done.append("floor")
    if cal is not None and cal.read_bytes_per_s is not None:
        bw = cal.read_bytes_per_s / hbm_bytes_per_s
        done.append("bandwidth")
    if cal is not None and cal.flops_per_s is not None:
        fl = cal.flops_per_s / bf16_flops_per_s
        done.append("FLOP/s")
    if cal is not None and cal.allreduce_latency_s is not None and cal.allreduce_tp and tp > 1:
        # measured at cal.allreduce_tp ranks: carried to this tp by the table's log2(tp) law
        at = allreduce_latency_s(cal.allreduce_tp, a_call, a_step)
        ar = cal.allreduce_latency_s * (ar / at if at else 1.0)
        done.append("all-reduce")
    return SpeedTerms(
        engine=fe if fe == engine else f"{engine} (no floor tabled)",
        backend=backend,
        gpu_class=cls,
        link=link,
        step_floor_s=floor,
        bw_efficiency=bw,
        format_efficiency=(fmt[16], fmt[8], fmt[4]),
        flops_efficiency=fl,
        allreduce_latency_s=ar,
        calibrated=tuple(done),
    )
