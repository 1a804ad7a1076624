"""`kvcalc plan` as arithmetic: search GPU x count x tp x pp x dp x KV format x weight format for
the layouts that fit a workload (`concurrency` sequences of `seq_len` tokens) and meet its targets,
rank them, and say for the nearest misses what failed, by how much, and what would fix it.

Pure (no I/O, no rich, no engine names): `kvcalc.requests.run_plan` loads the GPUs, resolves the
engine's formats and rules into a `PlanSearch`, calls `search`, and adds the launch lines.

Every figure comes from `memory_plan.GpuFit` (the memory plan, max batch, TPOT and TTFT with the
engine's speed terms, `PlanSearch.speed`), exactly as `kvcalc check` computes a deployment
(`calc.check`) and `kvcalc estimate` a layout: the fullest replica holds ceil(concurrency / dp)
sequences, all at `seq_len`; or, with `PlanSearch.requests`, whole requests timed by
`calc.request_speed` (`WholeRequests`). Nothing here re-derives a byte or a second.

The search space, per GPU type (`GpuChoice`):

- counts 1..min(max_gpus, gpus_per_node), then whole nodes (2 x, 3 x ... gpus_per_node) up to
  `max_gpus`; a fixed set of devices (`a+b`) is its own count;
- tp x pp x dp = count with tp dividing the heads as the engines require (`kv_cache.check_tp`),
  tp inside a node (tp <= gpus_per_node, and a divisor of it once the replica spans nodes), so
  beyond one node the extra GPUs are pipeline stages or replicas: vLLM's and SGLang's multi-node
  layout (TP over NVLink inside a node, PP over the network between nodes); a GPU whose row
  states a larger NVLink domain (`GpuSpec.nvlink_domain_gpus`: 72 in a GB200 / GB300 NVL72
  rack) keeps tp inside the domain instead, so TP can span its nodes;
- with `layer_split` (llama.cpp, which splits layers, not heads): tp = dp = 1, one pipeline stage
  per device of one node, the layers split in proportion to each device's free memory
  (budget - reserves), as llama.cpp's default `--tensor-split` does by each device's free memory;
- each (K, V) format x weight format the request lists; those in `fp8_only` only on GPUs with
  fp8 tensor cores (`GpuSpec.fp8_flops_per_s`).

Speed: a `GpuFit` depends on (tp, pp, formats, stage split) only, so it is built once for all
GPUs and counts and re-targeted per GPU / dp with `GpuFit.variant` (budget and peak change);
the memory test, which no GPU changes, is made once per (planner, batch) and compared with each
GPU's budget before any roofline is computed.

Ranking: fewest GPUs, then the lowest $/hour where a price is known (priced before unpriced),
then the most output tokens/s, then the names (so the order is total and repeatable).

The engine's own KV arithmetic: with `PlanSearch.engine_kv` (handed down by the engine layer,
e.g. vLLM's blocks, `kvcalc.engines.vllm.plan`), each layout's KV bytes and max concurrency on
each GPU come from an `EngineKv` built for that GPU (block size by attention backend, null
block, page unification, the version's concurrency rule) instead of the exact formula: the KV
memory a rank leaves the engine is budget - weights - activation reserve - CUDA context (what
`kvcalc capacity --kv-memory` takes), the engine's blocks hold any recurrent state, and the
roofline keeps the exact bytes read. A layout the engine's arithmetic does not cover (it raises
`KvcalcError`) keeps the exact formula, and the result's notes say so.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, cast

from kvcalc.calc import kv_cache
from kvcalc.calc.memory_plan import GpuFit, Layout, budget_bytes
from kvcalc.calc.request_speed import TOLERANCE, request_speed, spread_static
from kvcalc.calc.roofline import StepTime
from kvcalc.errors import MESSAGE, KvcalcError, UncountedParamsError
from kvcalc.formats import STORAGE_FORMATS, StorageFormat, kv_format, weight_format
from kvcalc.results import PlanLayout, PlanMiss, PlanResult
from kvcalc.schema import GpuSpec, ModelSpec

if TYPE_CHECKING:
    from kvcalc.calc.speculative import SpecDecode
    from kvcalc.calc.speed import SpeedTerms

GPUS_PER_NODE = 8
DEFAULT_MAX_GPUS = 32
DEFAULT_TOP = 10
DEFAULT_WHY_NOT = 5
#: how far "more GPUs" looks past --max-gpus when it explains a miss (32 nodes of 8)
FIX_SEARCH_MAX_GPUS = 256


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _gib(n: int | float) -> str:
    return f"{n / 2**30:,.1f} GiB"


class EngineKv(Protocol):
    """An engine's KV arithmetic for one layout (tp, pipeline stages, K / V formats) on one kind
    of GPU, as the engine layer builds it (`PlanSearch.engine_kv`).

    - `stage_bytes(seq_len, batch)`: the KV memory (bytes) each stage's rank must leave the
      engine so that it starts and admits `batch` requests of `seq_len` tokens.
    - `max_batch(seq_len, free_bytes)`: the requests of `seq_len` tokens the engine admits at
      once when stage s leaves it `free_bytes[s]` bytes (0: it would not start).
    - `notes`: what the engine assumed on this GPU (e.g. the attention backend that set the
      block size), shown once per note with the GPUs it applies to.
    """

    @property
    def notes(self) -> tuple[str, ...]: ...

    def stage_bytes(self, seq_len: int, batch: int) -> list[int]: ...

    def max_batch(self, seq_len: int, free_bytes: list[int]) -> int: ...


class KvPick(tuple[StorageFormat, StorageFormat]):
    """One KV cache format the search tries: (`k`, `v`), kvcalc formats (what the memory plan and
    the roofline read: the `StorageFormat`s the request builder parsed; a name given as text is
    looked up here, once; equal to and hashed as their names), and `engine_dtype`, the engine's own `--kv-cache-dtype` where the
    engine's parse of it says more than the two formats do (vLLM 0.33's `turboquant_k8v4`,
    `fp8_per_token_head`, `nvfp4_4over6`, `fp8_ds_mla`: its pages are the engine's, sized by its
    KV arithmetic, and the launch line states the name); None: `k` / `v` say it all, and the
    pick equals the plain pair (k, v)."""

    engine_dtype: str | None

    def __new__(cls, k: StorageFormat | str, v: StorageFormat | str, engine_dtype: str | None = None) -> KvPick:
        k = kv_format(k, field="k_dtype") if isinstance(k, str) else k
        v = kv_format(v, field="v_dtype") if isinstance(v, str) else v
        self = super().__new__(cls, (k, v))
        self.engine_dtype = engine_dtype
        return self

    @property
    def k(self) -> StorageFormat:
        return self[0]

    @property
    def v(self) -> StorageFormat:
        return self[1]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KvPick):
            return tuple(self) == tuple(other) and self.engine_dtype == other.engine_dtype
        return self.engine_dtype is None and tuple(self) == other

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return hash(tuple(self)) if self.engine_dtype is None else hash((*self, self.engine_dtype))

    def __repr__(self) -> str:
        return f"KvPick({str(self[0])!r}, {str(self[1])!r}, {self.engine_dtype!r})"


def engine_kv_for(engine_kv: Callable[..., EngineKv], gpu: GpuSpec, fit: GpuFit, pick: KvPick) -> EngineKv:
    """The engine's KV arithmetic (`EngineProfile.plan_engine_kv`) for `fit`'s layout on `gpu`
    with KV `pick`: its TP degree, pipeline stages and, above 1, its decode context parallel
    degree (vLLM's checks and backend under -dcp). The one call plan, check and estimate make.
    Raises `KvcalcError` where the engine refuses the layout or the dtype on this GPU."""
    lay = fit.layout
    extra = {"dcp": lay.dcp} if lay.dcp > 1 else {}
    return engine_kv(gpu, lay.tp, tuple(fit.stages), pick, **extra)


def kv_pick(kv: tuple[StorageFormat | str, ...]) -> KvPick:
    """`kv` ((K, V) or a `KvPick`) as a `KvPick`."""
    return kv if isinstance(kv, KvPick) else KvPick(kv[0], kv[1])


@dataclass(frozen=True)
class PlanTargets:
    """Service targets: the slowest time per output token (ms), the least total output
    tokens/s, the slowest time to the first token of one `seq_len`-token prompt (s)."""

    max_tpot_ms: float | None = None
    min_tokens_per_s: float | None = None
    max_ttft_s: float | None = None


@dataclass(frozen=True)
class WholeRequests:
    """Requests of `input_len` prompt and `output_len` generated tokens (`--input-len` /
    `--output-len`), and optionally `request_rate` requests/s over the layout (`--request-rate`):
    the layouts are timed and ranked on these (`calc.request_speed`) instead of every sequence
    at `seq_len`. Without a rate, `concurrency` requests run as static batches spread over the
    replicas (`request_speed.spread_static`): TPOT at the mean context I + O / 2 of the fullest
    replica's batch, output tokens/s with the prefill included, end to end = prefill + (O - 1)
    TPOT. With a rate, continuous batching by Little's law (`request_speed.request_speed`): TPOT
    at the average concurrency, tokens/s = rate x O, and a layout where the rate has no steady
    state misses. TTFT is one I-token prompt's prefill either way."""

    input_len: int
    output_len: int
    request_rate: float | None = None


@dataclass(frozen=True)
class GpuChoice:
    """One entry of the GPU search space: a GPU type whose count the search picks (`fixed`
    False, `devices` its one `GpuSpec`), or a fixed set of devices in one machine (`fixed` True,
    one `GpuSpec` per device; they may differ only under a layer split)."""

    devices: tuple[GpuSpec, ...]
    fixed: bool = False

    @property
    def key(self) -> str:
        """The GPU key, or the keys joined by '+' for a fixed set."""
        return "+".join(g.key for g in self.devices) if self.fixed else self.devices[0].key

    @property
    def mixed(self) -> bool:
        """A fixed set whose devices are not all the same GPU."""
        return len({g.key for g in self.devices}) > 1


@dataclass(frozen=True)
class PlanSearch:
    """What to search (all sizes in tokens, counts in GPUs or sequences).

    - `kv_dtypes`: (K format, V format) pairs or `KvPick`s (the engine's own dtype with them);
      `kv_refused`: (GPU key, `KvPick`) -> the engine's refusal of that dtype on that GPU (the
      pair is not tried there, and the notes say why); `weight_dtypes`: weight formats (None: the
      checkpoint's own); names in `fp8_only` are tried only on GPUs with fp8 tensor cores, in
      the KV list when `gate_kv` and in the weight list when `gate_weights` (the defaults are
      gated, formats the user names are tried everywhere).
    - `knobs`: a `Layout` whose utilization, reserves and efficiencies every layout keeps.
    - `layer_split`: the engine splits layers over the devices of one node (llama.cpp), not heads.
    - `prices`: GPU key -> $ per GPU-hour (the user's figures; a GPU without one ranks after
      the priced ones of its count).
    """

    model: ModelSpec
    seq_len: int
    concurrency: int
    gpus: tuple[GpuChoice, ...]
    kv_dtypes: tuple[tuple[StorageFormat, ...], ...]
    weight_dtypes: tuple[StorageFormat | None, ...]
    fp8_only: frozenset[str] = frozenset()
    gate_kv: bool = True
    gate_weights: bool = True
    targets: PlanTargets = PlanTargets()
    knobs: Layout = Layout()
    max_gpus: int = DEFAULT_MAX_GPUS
    gpus_per_node: int = GPUS_PER_NODE
    layer_split: bool = False
    prices: dict[str, float] = field(default_factory=dict)
    top: int = DEFAULT_TOP
    why_not: int = DEFAULT_WHY_NOT
    engine: str = "ideal"
    #: builds a layout's launch line from keywords (tp, pp, dp, nodes, max_model_len,
    #: max_num_seqs, k_dtype, v_dtype, weight_dtype, gpu_memory_utilization, tensor_split, gpu):
    #: the engine layer's, handed down so that calc/ imports no engine (None: no launch lines)
    launch: Callable[..., str | None] | None = None
    #: the engine's KV arithmetic per GPU: engine_kv(gpu, tp, stages (layer ranges), (K, V)) ->
    #: `EngineKv`, raising `KvcalcError` where it does not apply; handed down by the engine layer
    #: (None: the exact formula, `memory_plan.KvProfile`)
    engine_kv: Callable[..., EngineKv] | None = None
    #: the speed model's terms on a GPU at a TP (`calc.speed.SpeedTerms`): speed(gpu, tp), handed
    #: down by the request layer, which reads the speed table and a calibration (None: the bare
    #: roofline of `knobs`)
    speed: Callable[[GpuSpec, int], SpeedTerms] | None = None
    #: the engine shards positions by decode context parallel (vLLM's `-dcp`): an MLA model's
    #: TP layouts are also searched with dcp = tp (`dcp_sizes`)
    dcp: bool = False
    #: `--dcp N`: every layout is planned with decode context parallel N (tp a multiple of N),
    #: not only those the search would try (`dcp`); None: not pinned
    dcp_pin: int | None = None
    #: (GPU key, `KvPick`) -> why the engine refuses that KV dtype on that GPU
    kv_refused: dict[tuple[str, KvPick], str] = field(default_factory=dict)
    #: what the request layer says of the formats beside the result's own notes
    notes: tuple[str, ...] = ()
    #: speculative decoding (`calc.speculative.SpecDecode`; None: none): its draft weights, draft
    #: KV and extra state count in each layout's memory (`speculative.memory_parts`), and with the
    #: user's acceptance length its TPOT replaces the plain step (`speculative.estimate`)
    speculative: SpecDecode | None = None
    #: whole requests to time and rank on (None: every sequence at `seq_len`)
    requests: WholeRequests | None = None

    def __post_init__(self) -> None:
        # names given as text (a caller outside the request builder, a test) are looked up here,
        # once each (`KvPick`); the search itself only ever holds `StorageFormat`s
        if any(isinstance(f, str) for pair in self.kv_dtypes for f in pair):
            object.__setattr__(self, "kv_dtypes", tuple(kv_pick(kv) for kv in self.kv_dtypes))
        if any(isinstance(w, str) for w in self.weight_dtypes):
            ws = tuple(None if w is None else weight_format(w) for w in self.weight_dtypes)
            object.__setattr__(self, "weight_dtypes", ws)


# ----- the space -----------------------------------------------------------------------------


def counts(
    max_gpus: int, gpus_per_node: int = GPUS_PER_NODE, layer_split: bool = False, min_count: int = 1
) -> list[int]:
    """GPU counts searched: 1..min(max_gpus, gpus_per_node), then whole nodes up to max_gpus
    (none past one node under a layer split); only those >= `min_count`."""
    out = list(range(1, min(max_gpus, gpus_per_node) + 1))
    if not layer_split:
        out += list(range(2 * gpus_per_node, max_gpus + 1, gpus_per_node))
    return [n for n in out if n >= min_count]


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def parallel_layouts(
    model: ModelSpec, count: int, gpus_per_node: int = GPUS_PER_NODE, domain_gpus: int | None = None
) -> list[tuple[int, int, int]]:
    """(tp, pp, dp) with tp x pp x dp = count: tp one the engines accept for the model's heads
    (`kv_cache.check_tp`), at most the NVLink domain (`domain_gpus`, `GpuSpec.nvlink_domain_gpus`:
    72 in a GB200 / GB300 NVL72 rack) or `gpus_per_node`, whichever is larger, and dividing it
    once `count` spans more, so no TP group straddles two; pp at most the layers."""
    limit = max(gpus_per_node, domain_gpus or 0)
    out = []
    for tp in _divisors(count):
        if tp > limit or (count > limit and limit % tp):
            continue
        try:
            kv_cache.check_tp(model, tp)
        except KvcalcError:
            continue
        rest = count // tp
        for pp in _divisors(rest):
            if pp <= model.n_layers:
                out.append((tp, pp, rest // pp))
    return out


def moe_layouts(
    model: ModelSpec, count: int, gpus_per_node: int = GPUS_PER_NODE, domain_gpus: int | None = None
) -> list[tuple[int, int, int, int, int]]:
    """(tp, pp, dp_attention, ep, dp) layouts of `count` GPUs for an MoE model, as the engines
    serve them (`calc.parallel`): each (tp, pp, dp) of `parallel_layouts`, as it is (dp whole
    replicas, experts tensor-parallel: ep 1), with expert parallel over its tp (ep = tp), and,
    where dp > 1, pp = 1 and one engine's tp x dp GPUs fit the NVLink domain or node (the
    dispatch / combine all-to-all is timed over NVLink, `parallel.alltoall_bytes`), as attention
    data-parallel + expert parallel over them (dp_attention = dp, ep = tp x dp: vLLM
    `--data-parallel-size dp --enable-expert-parallel`). A dense model gets its plain layouts."""
    out = []
    limit = max(gpus_per_node, domain_gpus or 0)
    for tp, pp, dp in parallel_layouts(model, count, gpus_per_node, domain_gpus):
        out.append((tp, pp, 1, 1, dp))
        if not model.n_experts:
            continue
        if tp > 1:
            out.append((tp, pp, 1, tp, dp))
        if dp > 1 and pp == 1 and tp * dp <= limit:
            out.append((tp, pp, dp, tp * dp, 1))
    return out


def dcp_sizes(model: ModelSpec, tp: int, dp_attention: int = 1) -> list[int]:
    """The decode-context-parallel sizes searched beside dcp 1 for a (tp, dp_attention) layout:
    dcp = tp for an MLA model at tp > 1 without attention DP (its latent, copied on each of the tp
    ranks under TP, is then split by position: 1/tp of every sequence on each rank, vLLM 0.33.0
    `FullAttentionSpec.max_memory_usage_bytes`), where `parallel.check_layout` accepts it (no
    sliding-window or compressed cache); none otherwise. A GQA model's DCP needs tp above its KV
    heads (`parallel.check_gqa_dcp`), past the TP the search gives it, so it is not searched."""
    if tp == 1 or dp_attention > 1 or model.attention != "mla":
        return []
    from kvcalc.calc import parallel

    try:
        parallel.check_layout(model, tp, dcp=tp)
    except KvcalcError:
        return []
    return [tp]


def _takes_dcp(model: ModelSpec, tp: int, dp_attention: int, dcp: int) -> bool:
    """Whether a (tp, dp_attention) layout can run `--dcp dcp` (`plan --dcp`): dcp 1 always; else
    no attention DP beside it, and the tp rules `parallel.check_layout` holds (tp a multiple of
    dcp; GQA: tp above the KV heads, dcp <= tp // H_kv, vLLM 0.33.0 `vllm/config/model.py`). The
    layouts that break them are left out: only the others take the pinned dcp."""
    if dcp == 1:
        return True
    if dp_attention > 1 or tp % dcp:
        return False
    from kvcalc.calc import parallel

    try:
        parallel.check_layout(model, tp, dcp=dcp)
    except KvcalcError:
        return False
    return True


def layer_split(model: ModelSpec, free_bytes: list[int]) -> tuple[int, ...]:
    """Layers per device in proportion to each device's free bytes (largest remainder, each
    device at least one layer): what llama.cpp's default `--tensor-split` (each device's free
    memory, `src/llama-model.cpp` `load_tensors`) does. Raises `KvcalcError` (field `pp`) with
    more devices than layers."""
    n, d = model.n_layers, len(free_bytes)
    if d > n:
        raise KvcalcError(f"{d} devices exceed the model's {n} layers", field="pp", value=d)
    weights = [max(f, 1) for f in free_bytes]
    total = sum(weights)
    exact = [n * w / total for w in weights]
    out = [max(1, int(x)) for x in exact]
    order = sorted(range(d), key=lambda i: (-(exact[i] - int(exact[i])), i))
    i = 0
    while sum(out) < n:
        out[order[i % d]] += 1
        i += 1
    while sum(out) > n:
        j = max(range(d), key=lambda k: (out[k], -k))
        out[j] -= 1
    return tuple(out)


def tensor_split(stage_layers: tuple[int, ...]) -> list[int]:
    """llama.cpp `-ts` values that put exactly `stage_layers[d]` layers on device d with
    `-ngl` covering every layer: the layers per device, the output layer counted on the last.
    llama.cpp (`load_tensors`) puts layer il on device upper_bound(cumsum(ts) / sum(ts),
    il / (n_layer + 1)); with sum(ts) = n_layer + 1 that is the device whose cumulative count
    first exceeds il."""
    ts = list(stage_layers)
    ts[-1] += 1
    return ts


# ----- one layout ----------------------------------------------------------------------------


def _fitted(figure: float | None) -> float:
    """A speed figure of an `_Outcome` that is `ok`: `evaluate` sets TPOT and tokens/s on every
    layout whose memory fits, so it is a float there (the type says so; nothing is computed)."""
    return cast(float, figure)


@dataclass
class _Outcome:
    """The figures of one placed layout at (T, C)."""

    used: list[int]
    budgets: list[int]
    tpot_s: float | None = None
    tokens_per_s: float | None = None
    ttft_s: float | None = None
    #: end to end of one request (`WholeRequests` only)
    e2e_s: float | None = None
    #: sequences the fullest replica holds at a request rate (Little's law, rounded up) when
    #: more than ceil(concurrency / dp): what memory and the launch line's max sequences take
    rate_batch: int | None = None
    problems: list[str] = field(default_factory=list)
    score: float = 0.0

    @property
    def fits(self) -> bool:
        return all(u <= b for u, b in zip(self.used, self.budgets))

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def worst(self) -> int:
        """The stage with the least headroom."""
        return min(range(len(self.used)), key=lambda s: self.budgets[s] - self.used[s])


@dataclass(frozen=True)
class _Placed:
    """A layout placed on GPUs: `base` (the GPU-independent plan), `devices` (one GPU per
    pipeline stage under a layer split, else the one GPU type), `dp` replicas, and `ekv`, the
    engine's KV arithmetic on this GPU (None: the exact formula of `base`)."""

    choice: GpuChoice
    base: GpuFit
    devices: tuple[GpuSpec, ...]
    dp: int
    kv: KvPick
    weight: StorageFormat | None
    ekv: EngineKv | None = None
    #: `PlanSearch.speed` (None: the bare roofline)
    speed: Callable[[GpuSpec, int], SpeedTerms] | None = None
    #: `PlanSearch.speculative` (None: none)
    spec: SpecDecode | None = None
    #: `PlanSearch.requests`
    requests: WholeRequests | None = None

    @property
    def tp(self) -> int:
        return self.base.layout.tp

    @property
    def pp(self) -> int:
        return self.base.layout.pp

    @property
    def dpa(self) -> int:
        """Attention data-parallel ranks of one engine (`Layout.dp_attention`)."""
        return self.base.layout.dp_attention

    @property
    def ep(self) -> int:
        return self.base.layout.ep

    @property
    def dcp(self) -> int:
        """Decode context parallel (`Layout.dcp`): each of the tp ranks holds 1/dcp of the positions."""
        return self.base.layout.dcp

    def positions(self, seq_len: int) -> int:
        """The positions of one `seq_len`-token sequence one rank holds: cdiv(seq_len, dcp). The
        engine's KV arithmetic (`ekv`) takes them as the request's length: vLLM 0.33.0 sizes a
        `dcp_sharded` group at cdiv(max_model_len, dcp) (`FullAttentionSpec.max_memory_usage_bytes`),
        and a Mamba group's pages do not depend on the length (sliding-window and compressed
        caches, whose pages would, are refused under dcp by `parallel.check_layout`)."""
        return _cdiv(seq_len, self.dcp)

    @property
    def count(self) -> int:
        return self.tp * self.pp * self.dpa * self.dp

    @property
    def split(self) -> bool:
        """The stages sit on devices that may differ (a layer split over a device tuple)."""
        return len(self.devices) > 1

    def planner(self, gpu: GpuSpec) -> GpuFit:
        return self.base.variant(gpu=gpu, dp=self.dp, speed=self.speed(gpu, self.tp) if self.speed else None)

    def budgets(self) -> list[int]:
        """Each stage's budget (bytes): its device's under a split, else the GPU's."""
        util = self.base.layout.gpu_memory_utilization
        if self.split:
            return [budget_bytes(g.memory_bytes, util) for g in self.devices]
        return [budget_bytes(self.devices[0].memory_bytes, util)] * self.pp

    def kv_bytes(self, seq_len: int, batch: int) -> list[int]:
        """Each stage's KV bytes on one rank for `batch` sequences: the engine's (`ekv`), else
        the exact formula's."""
        batch = _cdiv(batch, self.dpa)  # one attention-DP rank's sequences
        if self.ekv is not None:
            return self.ekv.stage_bytes(self.positions(seq_len), batch)
        return self.base.kv.stage_bytes(seq_len, batch)

    def spec_bytes(self, seq_len: int, concurrency: int) -> int:
        """Bytes speculative decoding adds on a GPU of the last stage, which runs the drafter
        (`speculative.memory_parts` at the launch line's --max-model-len = seq_len, so no
        lookahead slot past it): draft weights + draft KV + extra recurrent state; 0 without."""
        if self.spec is None:
            return 0
        from kvcalc.calc import speculative

        return sum(speculative.memory_parts(self.base, self.spec, seq_len, _cdiv(concurrency, self.dp), seq_len))

    def used(self, seq_len: int, concurrency: int) -> list[int]:
        """Each stage's bytes with the fullest replica's ceil(concurrency / dp) sequences. With
        the engine's arithmetic: weights + the engine's KV memory for that batch (its blocks hold
        any recurrent state) + activation reserve + CUDA context. The last stage also holds what
        speculative decoding adds (`spec_bytes`)."""
        batch = _cdiv(concurrency, self.dp)
        if self.ekv is None:
            out = list(self.base.stage_used_bytes(seq_len, batch))
        else:
            b = self.base
            kv = self.ekv.stage_bytes(
                self.positions(seq_len), _cdiv(batch, self.dpa)
            )  # the fullest attention-DP rank's
            out = [w + k + b.fixed_bytes for w, k in zip(b.stage_weight_bytes, kv)]
        out[-1] += self.spec_bytes(seq_len, concurrency)
        return out

    def kv_free(self) -> list[int]:
        """The KV memory each stage's rank leaves the engine (bytes): budget - weights -
        activation reserve - CUDA context, vLLM's "Available KV cache memory" (what `kvcalc
        capacity --kv-memory` takes)."""
        b = self.base
        return [budget - w - b.fixed_bytes for budget, w in zip(self.budgets(), b.stage_weight_bytes)]

    def decode(self, seq_len: int, concurrency: int) -> tuple[float, float]:
        """(TPOT s, total output tokens/s). One GPU type: `GpuFit.split_decode`. A split over
        devices that differ: the token passes the stages in turn, so the step is the sum over
        stages of each stage's share of the bytes read (its weights and KV over all) times its
        device's whole-model roofline step (exact while decode is memory-bound)."""
        if not self.split or len({g.key for g in self.devices}) == 1:
            if self.spec is not None and self.spec.accepted is not None:  # the user's acceptance length
                from kvcalc.calc import speculative

                batch = _cdiv(concurrency, self.dp)
                est = speculative.estimate(self.planner(self.devices[0]), self.spec, seq_len, batch)
                # the layout fits by plan's memory test (`used`); estimate's own fit test is not asked
                k, accepted = self.spec.num_speculative_tokens, self.spec.accepted
                tpot = speculative.spec_tpot_s(est.verify_step_s, est.draft_step_s, k, accepted)
                return tpot, batch * self.dp / tpot
            step, tok = self.planner(self.devices[0]).split_decode(seq_len, concurrency)
            return step.step_time_s, tok
        b = self.base
        per_stage = [w + k for w, k in zip(b.stage_weight_bytes, b.kv.stage_bytes(seq_len, concurrency))]
        total = sum(per_stage)
        t = sum(
            part / total * self.planner(g).decode(seq_len, concurrency).step_time_s
            for part, g in zip(per_stage, self.devices)
        )
        return t, concurrency / t

    def prefill(self, seq_len: int, batch: int = 1) -> float:
        """TTFT (s) of `batch` `seq_len`-token prompts in one pass: `GpuFit.prefill`; under a
        split over devices that differ, each device's time weighted by its share of the layers."""
        if not self.split or len({g.key for g in self.devices}) == 1:
            return self.planner(self.devices[0]).prefill(seq_len, batch).step_time_s
        n = self.base.model.n_layers
        return sum(
            len(st) / n * self.planner(g).prefill(seq_len, batch).step_time_s
            for st, g in zip(self.base.stages, self.devices)
        )

    def steps(self) -> GpuFit | _SplitSteps:
        """What `calc.request_speed` times whole requests on: the planner on this GPU (the one
        `kvcalc estimate` builds for the same layout), or, under a split over devices that
        differ, `_SplitSteps`."""
        if not self.split or len({g.key for g in self.devices}) == 1:
            return self.planner(self.devices[0])
        return _SplitSteps(self)

    def max_concurrency(self, seq_len: int) -> int:
        """Sequences of `seq_len` tokens that fit over all replicas (with the engine's
        arithmetic: what it admits per replica, `EngineKv.max_batch`, x dp). With speculative
        decoding, the largest whole number n of sequences per attention-DP rank (n x dpa x dp
        in all) at most the plain figure's whose memory (`used`: the draft's weights, its KV
        per sequence, extra state, as `speculative.memory_parts` counts them for `kvcalc
        estimate`) fits every stage's budget: vLLM 0.33 profiles the drafter's weights before
        it sizes the KV pool and gives the draft's attention layers (the MTP layer's, an EAGLE
        head's) pages of the same pool (`vllm/v1/worker/gpu_model_runner.py`
        `get_kv_cache_spec`), so each sequence holds the target's and the draft's KV."""
        plain = self._plain_max_concurrency(seq_len)
        if self.spec is None or plain == 0:
            return plain
        unit = self.dpa * self.dp
        budgets = self.budgets()

        def fits(n: int) -> bool:
            return all(u <= b for u, b in zip(self.used(seq_len, n * unit), budgets))

        return _largest(1, plain // unit, fits) * unit

    def _plain_max_concurrency(self, seq_len: int) -> int:
        """`max_concurrency` without what speculative decoding adds."""
        if self.ekv is not None:
            return self.ekv.max_batch(self.positions(seq_len), self.kv_free()) * self.dpa * self.dp
        if not self.split:
            return self.planner(self.devices[0]).max_batch(seq_len) * self.dp
        return min(self.planner(g).max_batch(seq_len, stage=s) for s, g in enumerate(self.devices))

    def label(self) -> str:
        moe = (
            (f", dp-attention {self.dpa}" if self.dpa > 1 else "")
            + (f", ep {self.ep}" if self.ep > 1 else "")
            + (f", dcp {self.dcp}" if self.dcp > 1 else "")
        )
        return (
            f"{self.count} x {self.choice.key if self.choice.fixed else self.devices[0].key} "
            f"(tp {self.tp}, pp {self.pp}, dp {self.dp}{moe}; KV {_kv_label(self.kv)}, "
            f"weights {self.base.weight_dtype})"
        )


class _SplitSteps:
    """A layer split over devices that differ, as `calc.request_speed.Steps`: each step the
    `_Placed` figure (the stages' shares summed), the max batch what every device holds."""

    def __init__(self, placed: _Placed) -> None:
        self.placed, self.layout = placed, placed.base.layout

    def prefill(self, prompt_len: int, batch: int = 1) -> StepTime:
        return _seconds(self.placed.prefill(prompt_len, batch))

    def decode(self, seq_len: int, batch: int) -> StepTime:
        return _seconds(self.placed.decode(seq_len, batch)[0])

    def max_batch(self, seq_len: int) -> int:
        return self.placed.max_concurrency(seq_len)


def _seconds(t: float) -> StepTime:
    """A step of `t` seconds (for `_SplitSteps`: only its time is read)."""
    return StepTime(bytes_read=0, flops=0, memory_time_s=t, compute_time_s=0.0, comm_time_s=0.0)


def _kv_label(kv: tuple[StorageFormat, ...]) -> str:
    """The KV format as plan shows it: the engine's own dtype where it has one (`KvPick`), else
    the K format, or K/V where they differ."""
    pick = kv_pick(kv)
    if pick.engine_dtype:
        return pick.engine_dtype
    return str(pick.k) if pick.k == pick.v else f"{pick.k}/{pick.v}"


def evaluate(
    placed: _Placed,
    seq_len: int,
    concurrency: int,
    targets: PlanTargets,
    used: list[int] | None = None,
    with_ttft: bool = False,
) -> _Outcome:
    """Memory first (no roofline for a layout that does not fit), then the targets. `score` is
    the worst ratio of a figure to its limit (> 1 on a miss)."""
    out = _Outcome(used=used if used is not None else placed.used(seq_len, concurrency), budgets=placed.budgets())
    if not out.fits:
        s = out.worst
        out.problems.append(f"needs {_gib(out.used[s])} per GPU, budget {_gib(out.budgets[s])}")
        out.score = max(u / b for u, b in zip(out.used, out.budgets))
        return out
    t = targets
    ratios = [1.0]
    if placed.requests is not None:
        _whole(placed, placed.requests, seq_len, concurrency, out, ratios)
    else:
        out.tpot_s, out.tokens_per_s = placed.decode(seq_len, concurrency)
    if out.tpot_s is None or out.tokens_per_s is None:  # the rate has no steady state here
        out.score = max(ratios)
        return out
    tpot_ms = out.tpot_s * 1e3
    if t.max_tpot_ms is not None and tpot_ms > t.max_tpot_ms:
        out.problems.append(f"TPOT {tpot_ms:,.1f} ms > {t.max_tpot_ms:g} ms")
        ratios.append(tpot_ms / t.max_tpot_ms)
    if t.min_tokens_per_s is not None and out.tokens_per_s < t.min_tokens_per_s:
        out.problems.append(f"{out.tokens_per_s:,.0f} tokens/s < {t.min_tokens_per_s:g} tokens/s")
        ratios.append(t.min_tokens_per_s / out.tokens_per_s)
    if t.max_ttft_s is not None or with_ttft:
        if out.ttft_s is None:
            out.ttft_s = placed.prefill(seq_len)
        if t.max_ttft_s is not None and out.ttft_s > t.max_ttft_s:
            out.problems.append(f"TTFT {out.ttft_s:,.2f} s > {t.max_ttft_s:g} s")
            ratios.append(out.ttft_s / t.max_ttft_s)
    out.score = max(ratios)
    return out


def _whole(
    placed: _Placed, rq: WholeRequests, seq_len: int, concurrency: int, out: _Outcome, ratios: list[float]
) -> None:
    """Set `out`'s TTFT, TPOT, tokens/s and end to end for whole requests (`WholeRequests`): one
    I-token prompt's prefill; without a rate, `concurrency` requests as static batches over the
    replicas (`request_speed.spread_static`); with one, continuous batching at the rate
    (`request_speed.request_speed`), memory taken at the requests the rate holds in flight
    (Little's law) where they are more than `concurrency`. A rate with no steady state is a
    problem whose ratio is the output tokens/s the rate needs over what the replicas' largest
    batch at I + O tokens decodes."""
    steps = placed.steps()
    I, O = rq.input_len, rq.output_len  # noqa: E741  (I, O: input and output tokens)
    out.ttft_s = steps.prefill(I).step_time_s
    if rq.request_rate is None:
        st = spread_static(steps, I, O, concurrency)
        out.tpot_s, out.tokens_per_s, out.e2e_s = st.tpot_s, st.tokens_per_s, st.e2e_s
        return
    rs = request_speed(steps, I, O, 1, rq.request_rate)
    if rs.rate_sustainable and rs.rate_concurrency is not None:
        out.tpot_s, out.tokens_per_s, out.e2e_s = rs.rate_tpot_s, rs.rate_tokens_per_s, rs.rate_e2e_s
        b = max(1, math.ceil(rs.rate_concurrency - TOLERANCE))  # per replica, as `request_speed._at_rate`
        if b > _cdiv(concurrency, placed.dp):  # the rate holds more than --concurrency: size for it
            out.rate_batch = b
            out.used = placed.used(seq_len, b * placed.dp)
            if not out.fits:
                s_ = out.worst
                out.problems.append(
                    f"{b:,} requests in flight per replica at {rq.request_rate:g}/s need "
                    f"{_gib(out.used[s_])} per GPU, budget {_gib(out.budgets[s_])}"
                )
                ratios.append(max(u / bb for u, bb in zip(out.used, out.budgets)))
        return
    dp, cap = steps.layout.dp, steps.max_batch(I + O)
    can = dp * cap / steps.decode(I + O // 2, cap).step_time_s if cap else 0.0
    need = rq.request_rate * O
    out.problems.append(
        f"{rq.request_rate:g} requests/s has no steady state (needs {need:,.0f} output tokens/s, "
        f"{cap * dp:,} sequences of {I + O:,} tokens decode at most {can:,.0f})"
    )
    ratios.append(need / can if can else float("inf"))


# ----- the search ----------------------------------------------------------------------------


class _Space:
    """The search space of one request, with the GPU-independent planners cached."""

    def __init__(self, req: PlanSearch) -> None:
        self.req = req
        self.bases: dict[tuple, GpuFit | None] = {}
        self.skipped: dict[str, str] = {}
        self.used_cache: dict[tuple[int, int, int], list[int]] = {}
        self.engine_cache: dict[tuple[str, int], EngineKv | None] = {}
        #: (GPU key, planner id) of layouts the engine cannot size in its own dtype
        self.unsized: set[tuple[str, int]] = set()
        #: the engine's notes (and why its arithmetic was not applied) -> the GPU keys they concern
        self.engine_notes: dict[str, list[str]] = {}

    def _note(self, note: str, gpu: str) -> None:
        keys = self.engine_notes.setdefault(note, [])
        if gpu not in keys:
            keys.append(gpu)

    def engine(self, base: GpuFit, gpu: GpuSpec, kv: KvPick) -> EngineKv | None:
        """The engine's KV arithmetic for `base` on `gpu` in the formats `kv`
        (`PlanSearch.engine_kv`, given the layout's dcp where it is above 1), built once per
        (GPU, planner); None without one, or (noted) where it raises `KvcalcError`: the exact
        formula then sizes the layout -- except for an engine's own dtype (`KvPick.engine_dtype`),
        whose pages only the engine sizes, and a KV dtype the engine refuses on this GPU (an error
        on the KV formats): that layout is not planned (`unsized`)."""
        if self.req.engine_kv is None:
            return None
        key = (gpu.key, id(base))
        if key not in self.engine_cache:
            try:
                found = engine_kv_for(self.req.engine_kv, gpu, base, kv)
            except KvcalcError as e:
                self.engine_cache[key] = None
                if kv.engine_dtype or e.field in ("kv_dtype", "k_dtype", "v_dtype"):
                    # the engine's own dtype, or a dtype the engine refuses on this GPU (SGLang 0.5.23's
                    # nvfp4 before Blackwell): no launch line the engine would run
                    self.unsized.add(key)
                    self._note(f"{e.message}: not planned with {_kv_label(kv)}", gpu.key)
                else:
                    self._note(f"{e.message}: sized by the exact formula instead", gpu.key)
            else:
                for n in found.notes:
                    self._note(n, gpu.key)
                self.engine_cache[key] = found
        return self.engine_cache[key]

    def place(
        self,
        choice: GpuChoice,
        base: GpuFit,
        devices: tuple[GpuSpec, ...],
        dp: int,
        kv: tuple[StorageFormat, ...],
        weight: StorageFormat | None,
    ) -> _Placed:
        """A `_Placed` with the engine's arithmetic on its (first) device: engines that have
        one split heads, not layers, so a layout's devices are one GPU type."""
        pick = kv_pick(kv)
        return _Placed(
            choice,
            base,
            devices,
            dp,
            pick,
            weight,
            self.engine(base, devices[0], pick),
            self.req.speed,
            spec=self.req.speculative,
            requests=self.req.requests,
        )

    def base(
        self,
        tp: int,
        pp: int,
        kv: tuple[StorageFormat, ...],
        weight: StorageFormat | None,
        ref: GpuSpec,
        stage_layers: tuple[int, ...] | None = None,
        dpa: int = 1,
        ep: int = 1,
        dcp: int = 1,
    ) -> GpuFit | None:
        """The planner of (tp, pp, formats, split, attention DP, EP, DCP), built once; None (noted)
        when the formats do not fit the model (a block format over a head that is not a whole
        number of blocks)."""
        key = (tp, pp, kv, weight, stage_layers, dpa, ep, dcp)
        if key not in self.bases:
            lay = dataclasses.replace(
                self.req.knobs,
                tp=tp,
                pp=pp,
                dp=1,
                k_dtype=kv[0],
                v_dtype=kv[1],
                weight_dtype=weight,
                stage_layers=stage_layers,
                dp_attention=dpa,
                ep=ep,
                dcp=dcp,
            )
            try:
                self.bases[key] = GpuFit(self.req.model, ref, lay)
            except KvcalcError as e:
                if e.field == "tp" or isinstance(e, UncountedParamsError):  # the same for every layout
                    raise
                self.bases[key] = None
                self.skipped.setdefault(f"KV {_kv_label(kv)}, weights {weight or 'checkpoint'}", e.message)
        return self.bases[key]

    def formats(self, choice: GpuChoice) -> list[tuple[KvPick, StorageFormat | None]]:
        """The (KV, weight) pairs tried on `choice`: fp8-only names need fp8 on every device; a
        KV dtype the engine refuses on a device of `choice` (`PlanSearch.kv_refused`) is skipped,
        noted with the engine's words."""
        fp8 = all(g.fp8_flops_per_s for g in choice.devices)
        req = self.req
        kvs = []
        for kv in map(kv_pick, req.kv_dtypes):
            if not (fp8 or not req.gate_kv or not ({kv.k, kv.v} & req.fp8_only)):
                continue
            why = next((req.kv_refused[(g.key, kv)] for g in choice.devices if (g.key, kv) in req.kv_refused), None)
            if why is not None:
                self.skipped.setdefault(f"KV {_kv_label(kv)} on {choice.key}", why)
                continue
            kvs.append(kv)
        ws = [w for w in req.weight_dtypes if fp8 or not req.gate_weights or w not in req.fp8_only]
        return list(itertools.product(kvs, ws))

    def placements(
        self, choice: GpuChoice, kv: KvPick, weight: StorageFormat | None, count_list: list[int] | None = None
    ) -> list[_Placed]:
        """Every layout of `choice` in these formats, fewest GPUs first."""
        req = self.req
        ref = choice.devices[0]
        out: list[_Placed] = []
        if choice.fixed:
            n = len(choice.devices)
            if req.layer_split:
                return self._split(choice, choice.devices, kv, weight)
            return self._layouts(choice, n, kv, weight)
        ns = count_list if count_list is not None else counts(req.max_gpus, req.gpus_per_node, req.layer_split)
        if ref.interconnect_bytes_per_s is None:
            # a row without a link between devices (Apple's unified memory: one device per
            # machine) is searched alone: no tensor-parallel traffic could be charged for more
            ns = [n for n in ns if n == 1]
        for n in ns:
            if req.layer_split:
                out += self._split(choice, (ref,) * n, kv, weight)
                continue
            out += self._layouts(choice, n, kv, weight)
        return out

    def _sized(self, placed: _Placed) -> bool:
        """False for a layout in an engine's own dtype that the engine's arithmetic does not size
        (`engine`'s `unsized`): it is left out of the plan."""
        return (placed.devices[0].key, id(placed.base)) not in self.unsized

    def _layouts(self, choice: GpuChoice, n: int, kv: KvPick, weight: StorageFormat | None) -> list[_Placed]:
        """The head-splitting layouts of `n` GPUs of `choice` (`moe_layouts`), and, when none of
        them holds the workload, the same with the decode-context-parallel sizes the engine takes
        (`dcp_sizes`, when `PlanSearch.dcp`). Only then: DCP adds traffic the roofline does not
        charge (each decode step all-gathers the queries and reduces the partial attention outputs
        with their log-sum-exp over the dcp ranks, vLLM 0.33.0 `v1/attention/ops/dcp.py`
        `cp_lse_ag_out_rs`), so it is the answer for contexts too long for the GPUs any other
        way (attention data-parallel included), not for ones that fit."""
        req, model, ref = self.req, self.req.model, choice.devices[0]
        out: list[_Placed] = []
        shapes = moe_layouts(model, n, req.gpus_per_node, ref.nvlink_domain_gpus)
        pin = req.dcp_pin
        for tp, pp, dpa, ep, dp in shapes:
            if pin is not None and not _takes_dcp(model, tp, dpa, pin):
                continue
            b = self.base(tp, pp, kv, weight, ref, None, dpa, ep, pin or 1)
            if b is not None:
                out.append(self.place(choice, b, (ref,), dp, kv, weight))
        out = [p for p in out if self._sized(p)]
        if (
            pin is not None
            or not req.dcp
            or any(all(u <= cap for u, cap in zip(self.used(p), p.budgets())) for p in out)
        ):
            return out
        for tp, pp, dpa, ep, dp in shapes:
            if pp > nodes_of(n, req.gpus_per_node):  # no pipeline inside a node beside DCP
                continue
            for dcp in dcp_sizes(model, tp, dpa):
                b = self.base(tp, pp, kv, weight, ref, None, dpa, ep, dcp)
                if b is not None:
                    out.append(self.place(choice, b, (ref,), dp, kv, weight))
        return [p for p in out if self._sized(p)]

    def _split(
        self, choice: GpuChoice, devices: tuple[GpuSpec, ...], kv: KvPick, weight: StorageFormat | None
    ) -> list[_Placed]:
        """One layer-split layout over `devices` (tp = dp = 1, a stage per device)."""
        model = self.req.model
        if len(devices) > model.n_layers:
            return []
        if len(devices) == 1:
            b = self.base(1, 1, kv, weight, devices[0])
            return [] if b is None else [self.place(choice, b, devices, 1, kv, weight)]
        probe = self.base(1, 1, kv, weight, devices[0])
        if probe is None:
            return []
        util = self.req.knobs.gpu_memory_utilization
        free = [budget_bytes(g.memory_bytes, util) - probe.fixed_bytes for g in devices]
        stages = layer_split(model, free)
        b = self.base(1, len(devices), kv, weight, devices[0], stages)
        return [] if b is None else [self.place(choice, b, devices, 1, kv, weight)]

    def used(self, placed: _Placed) -> list[int]:
        """Stage bytes, cached per (planner, batch, engine arithmetic): only the engine's
        arithmetic (one per GPU architecture) depends on the GPU."""
        key = (id(placed.base), _cdiv(self.req.concurrency, placed.dp), id(placed.ekv))
        if key not in self.used_cache:
            self.used_cache[key] = placed.used(self.req.seq_len, self.req.concurrency)
        return self.used_cache[key]


def _price(req: PlanSearch, placed: _Placed) -> float | None:
    """$ per hour of the layout: the sum of its devices' prices (None when one has none)."""
    keys = [g.key for g in placed.choice.devices] if placed.choice.fixed else [placed.devices[0].key] * placed.count
    if any(k not in req.prices for k in keys):
        return None
    return sum(req.prices[k] for k in keys)


def rank_key(
    count: int, dollars_per_hour: float | None, tokens_per_s: float, names: tuple, e2e_s: float = 0.0
) -> tuple:
    """Fewest GPUs; then the lowest $/hour where known (priced before unpriced); then the most
    tokens/s (whole requests: output tokens/s with the prefill, `WholeRequests`); then the
    shortest end to end (whole requests; at a request rate every layout that keeps up makes the
    same tokens/s); then the names."""
    return (count, dollars_per_hour is None, dollars_per_hour or 0.0, -tokens_per_s, e2e_s, names)


def _names(p: _Placed) -> tuple:
    return (p.choice.key, p.tp, p.pp, p.dp, p.kv, p.weight or "", p.dpa, p.ep, p.dcp)


def nodes_of(count: int, gpus_per_node: int = GPUS_PER_NODE, domain_gpus: int | None = None) -> int:
    """Whole machines a layout of `count` GPUs occupies: ceil(count / gpus_per_node) (a GB200 /
    GB300 NVL72 rack's trays count as nodes of `gpus_per_node` too)."""
    return _cdiv(count, gpus_per_node)


def moe_rank_key(
    p: _Placed, gpus_per_node: int, dollars_per_hour: float | None, tokens_per_s: float, e2e_s: float = 0.0
) -> tuple:
    """How an MoE model's layouts rank: by the nodes they take (a multi-GPU MoE deployment rents
    whole 8-GPU machines), then without a pipeline inside a node before with one (a pipeline
    stage per GPU of one node leaves every GPU idle for pp - 1 of pp micro-steps at a decode
    batch the engines do not split; TP / EP over NVLink serves the same node without it), then
    counts that divide a node (1, 2, 4, 8 of 8) before those that do not, then fewest GPUs, the
    price, the most tokens/s, the shortest end to end (`rank_key`), the names."""
    nodes = nodes_of(p.count, gpus_per_node)
    piped = p.pp > nodes  # more stages than nodes: a pipeline inside a node
    # a part of a node that does not divide it (7 of 8 GPUs) leaves GPUs no other engine of the
    # same shape can use, and splits the experts unevenly (256 over 7: 37 on some, 36 on others)
    odd = p.count > 1 and (p.count % gpus_per_node if p.count > gpus_per_node else gpus_per_node % p.count) != 0
    return (
        nodes,
        piped,
        odd,
        p.count,
        dollars_per_hour is None,
        dollars_per_hour or 0.0,
        -tokens_per_s,
        e2e_s,
        _names(p),
    )


def why(p: _Placed, moe: bool) -> str | None:
    """A short reason for an MoE model's row (None for a dense model, whose layouts differ only in
    size): `own KV, EPn` (attention data-parallel: each rank holds only its sequences' cache, the
    experts divided over EP), `KV on all N` (TP: an MLA latent copied on each of N ranks),
    `N-stage pipe`, `N replicas`, `TPn`, `one GPU`; with decode context parallel `KV/N by pos`
    (each of N ranks holds 1/N of every sequence's positions, a dense model's too)."""
    if p.dcp > 1:
        return f"KV/{p.dcp} by pos"
    if not moe:
        return None
    if p.dpa > 1:
        return f"own KV, EP{p.ep}"
    if p.tp > 1 and p.base.model.attention_kind == "mla":
        return f"KV on all {p.tp}"
    if p.pp > 1:
        return f"{p.pp}-stage pipe"
    if p.dp > 1:
        return f"{p.dp} replicas"
    return f"TP{p.tp}" if p.tp > 1 else "one GPU"


def search(req: PlanSearch) -> PlanResult:
    """Search, rank and explain: the best `req.top` layouts that fit and meet every target
    (`PlanLayout`, launch lines not yet filled in; the best variant of each (GPU, count), so the
    list shows choices rather than one GPU's tp / dp / format variants; `n_qualifying` counts
    every variant), and, when none does, the nearest
    `req.why_not` misses (`PlanMiss`, one per GPU choice, with their fixes).

    Raises `KvcalcError` when the model cannot be sized at all (no weights derivable).
    """
    space = _Space(req)
    T, C, tg = req.seq_len, req.concurrency, req.targets
    found: list[tuple[tuple, _Placed, _Outcome]] = []
    nearest: dict[str, tuple[tuple, _Placed, _Outcome]] = {}
    points = 0
    moe = bool(req.model.n_experts) and not req.layer_split
    for choice in req.gpus:
        for kv, weight in space.formats(choice):
            for placed in space.placements(choice, kv, weight):
                points += 1
                out = evaluate(placed, T, C, tg, used=space.used(placed))
                if out.ok:
                    price = _price(req, placed)
                    key = (
                        moe_rank_key(placed, req.gpus_per_node, price, _fitted(out.tokens_per_s), out.e2e_s or 0.0)
                        if moe
                        else rank_key(placed.count, price, _fitted(out.tokens_per_s), _names(placed), out.e2e_s or 0.0)
                    )
                    found.append((key, placed, out))
                else:
                    key = (out.score, placed.count, _names(placed))
                    if choice.key not in nearest or key < nearest[choice.key][0]:
                        nearest[choice.key] = (key, placed, out)
    if points == 0 and req.dcp_pin is not None and req.dcp_pin > 1:
        h = req.model.resolved_n_kv_heads
        need = "" if req.model.attention == "mla" else f" and at least dcp x its {h} KV heads = {req.dcp_pin * h}"
        raise KvcalcError(
            f"--dcp {req.dcp_pin}: no layout within {req.max_gpus} GPUs ({req.gpus_per_node} a node) takes it: "
            f"vLLM's tp must be a multiple of dcp{need} (vLLM 0.33.0 vllm/config/parallel.py, vllm/config/model.py)",
            option="--dcp",
            value=req.dcp_pin,
            form=MESSAGE,
        )
    found.sort(key=lambda x: x[0])
    best: list[tuple[tuple, _Placed, _Outcome]] = []
    seen: set[tuple[str, int]] = set()
    for item in found:  # the table shows the best variant of each (GPU, count)
        if (item[1].choice.key, item[1].count) not in seen:
            seen.add((item[1].choice.key, item[1].count))
            best.append(item)
    layouts = [_layout(req, i + 1, placed, out, why(placed, moe)) for i, (_, placed, out) in enumerate(best[: req.top])]
    misses = []
    if not found:
        for _, placed, out in sorted(nearest.values(), key=lambda x: x[0])[: req.why_not]:
            fixes = _fixes(space, placed, out)
            misses.append(
                PlanMiss(
                    gpu=placed.choice.key,
                    count=placed.count,
                    tp=placed.tp,
                    pp=placed.pp,
                    dp=placed.dp,
                    kv_dtype=_kv_label(placed.kv),
                    weight_dtype=placed.base.weight_dtype,
                    score=out.score,
                    problems=out.problems,
                    fixes=fixes,
                    line=f"{placed.label()}: {'; '.join(out.problems)}"
                    + (
                        f"; fix: {', or '.join(fixes)}"
                        if fixes
                        else f"; no fix within {FIX_SEARCH_MAX_GPUS} GPUs, a shorter context or fewer sequences"
                    ),
                )
            )
    notes = [*req.notes, *(f"skipped {what}: {why}" for what, why in space.skipped.items())]
    notes += [f"{req.engine} on {', '.join(gpus)}: {note}" for note, gpus in space.engine_notes.items()]
    return PlanResult(
        model=req.model.name,
        source=req.model.source,
        engine=req.engine,
        seq_len=T,
        concurrency=C,
        input_len=req.requests.input_len if req.requests else None,
        output_len=req.requests.output_len if req.requests else None,
        request_rate=req.requests.request_rate if req.requests else None,
        max_tpot_ms=tg.max_tpot_ms,
        min_tokens_per_s=tg.min_tokens_per_s,
        max_ttft_s=tg.max_ttft_s,
        max_gpus=req.max_gpus,
        gpus_searched=[c.key for c in req.gpus],
        points_searched=points,
        n_qualifying=len(found),
        layouts=layouts,
        misses=misses,
        notes=notes,
    )


def _layout(req: PlanSearch, rank: int, placed: _Placed, out: _Outcome, reason: str | None = None) -> PlanLayout:
    T, C = req.seq_len, req.concurrency
    ttft = out.ttft_s if out.ttft_s is not None else placed.prefill(T)
    s = out.worst
    b = placed.base
    batch = out.rate_batch or _cdiv(C, placed.dp)  # the fullest replica's sequences
    kv_stage = placed.kv_bytes(T, batch)
    price = _price(req, placed)
    per_gpu = None if price is None else price / placed.count
    stages = list(b.layout.stage_layers) if b.layout.stage_layers else None
    ts = tensor_split(b.layout.stage_layers) if b.layout.stage_layers else None
    nodes = 1 if placed.choice.fixed else _cdiv(placed.count, req.gpus_per_node)
    line = None
    if req.launch is not None:
        extra: dict[str, int] = {"dp_attention": placed.dpa, "ep": placed.ep} if placed.dpa > 1 or placed.ep > 1 else {}
        if placed.dcp > 1:
            extra["dcp"] = placed.dcp
        kw: dict[str, str] = {"kv_cache_dtype": placed.kv.engine_dtype} if placed.kv.engine_dtype else {}
        line = req.launch(
            **kw,
            tp=placed.tp,
            pp=placed.pp,
            dp=placed.dp,
            nodes=nodes,
            max_model_len=T,
            max_num_seqs=batch,
            **extra,
            k_dtype=placed.kv.k,
            v_dtype=placed.kv.v,
            weight_dtype=placed.weight,
            gpu_memory_utilization=b.layout.gpu_memory_utilization,
            tensor_split=tuple(ts) if ts else None,
            gpu=placed.devices[0],
        )
    return PlanLayout(
        rank=rank,
        gpu=placed.choice.key,
        devices=[g.key for g in placed.devices],
        count=placed.count,
        tp=placed.tp,
        pp=placed.pp,
        dp=placed.dp,
        dp_attention=placed.dpa,
        ep=placed.ep,
        dcp=placed.dcp,
        why=reason,
        nodes=nodes,
        kv_dtype=_kv_label(placed.kv),
        kv_pick=(*map(str, kv_pick(placed.kv)), kv_pick(placed.kv).engine_dtype),  # names: the result's
        weight_dtype=b.weight_dtype,
        seq_len=T,
        concurrency=C,
        weights_bytes_per_gpu=b.stage_weight_bytes[s],
        kv_cache_bytes_per_gpu=kv_stage[s],
        memory_bytes_per_gpu=out.used[s],
        budget_bytes_per_gpu=out.budgets[s],
        headroom_bytes=out.budgets[s] - out.used[s],
        max_concurrency=placed.max_concurrency(T),
        tpot_ms=_fitted(out.tpot_s) * 1e3,
        tokens_per_s=_fitted(out.tokens_per_s),
        tokens_per_s_per_gpu=_fitted(out.tokens_per_s) / placed.count,
        ttft_s=ttft,
        e2e_s=out.e2e_s,
        speed_model=(
            placed.speed(placed.devices[0], placed.tp).describe(b.weight_bits) if placed.speed else "roofline"
        ),
        stage_layers=stages,
        tensor_split=ts,
        launch=line,
        price_per_gpu_hour=per_gpu,
        dollars_per_hour=price,
        dollars_per_million_tokens=None if price is None else price / (_fitted(out.tokens_per_s) * 3600) * 1e6,
    )


# ----- why not -------------------------------------------------------------------------------


def _largest(lo: int, hi: int, ok) -> int:
    """The largest x in [lo, hi] with ok(x) (ok monotone: true up to some x), or 0."""
    if hi < lo or not ok(lo):
        return 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _fixes(space: _Space, placed: _Placed, out: _Outcome) -> list[str]:
    """What would make this layout qualify, each checked: more GPUs (past --max-gpus, the
    same GPU and formats), an fp8 KV cache or fp8 weights on a GPU that has fp8, a shorter
    context, fewer sequences."""
    req, tg = space.req, space.req.targets
    T, C = req.seq_len, req.concurrency
    fixes: list[str] = []
    if not placed.choice.fixed and req.max_gpus < FIX_SEARCH_MAX_GPUS:
        more = counts(FIX_SEARCH_MAX_GPUS, req.gpus_per_node, req.layer_split, min_count=req.max_gpus + 1)
        best = None
        for p in space.placements(placed.choice, placed.kv, placed.weight, more):
            if best is not None and p.count > best[1].count:
                break
            o = evaluate(p, T, C, tg)
            if o.ok:
                key = rank_key(p.count, None, _fitted(o.tokens_per_s), _names(p))
                if best is None or key < best[0]:
                    best = (key, p)
        if best is not None:
            p = best[1]
            fixes.append(f"more GPUs: {p.count} x {p.devices[0].key} (tp {p.tp}, pp {p.pp}, dp {p.dp})")
    fp8 = all(g.fp8_flops_per_s for g in placed.choice.devices)
    fp8_f, q8_f = STORAGE_FORMATS["fp8_e4m3"], STORAGE_FORMATS["q8_0"]
    cheaper: list[tuple[str, KvPick, StorageFormat | None]] = []
    if fp8 and not req.layer_split:
        cheaper = [
            ("fp8 KV", KvPick(fp8_f, fp8_f), placed.weight),
            ("fp8 weights", placed.kv, fp8_f),
            ("fp8 KV and weights", KvPick(fp8_f, fp8_f), fp8_f),
        ]
    elif req.layer_split:
        cheaper = [("q8_0 KV", KvPick(q8_f, q8_f), placed.weight), ("q8_0 weights", placed.kv, q8_f)]
    for what, kv, w in cheaper:
        if (kv, w) == (placed.kv, placed.weight):
            continue
        b = space.base(
            placed.tp,
            placed.pp,
            kv,
            w,
            placed.devices[0],
            placed.base.layout.stage_layers,
            placed.dpa,
            placed.ep,
            placed.dcp,
        )
        if b is not None and evaluate(space.place(placed.choice, b, placed.devices, placed.dp, kv, w), T, C, tg).ok:
            fixes.append(f"{what} on the same {placed.count} GPU{'s' if placed.count > 1 else ''}")
            break
    # whole requests need their I + O tokens: no shorter context fixes them
    t = 0 if req.requests else _largest(1, T - 1, lambda x: evaluate(placed, x, C, tg).ok)
    if t:
        fixes.append(f"a context of at most {t:,} tokens")
    c = _largest(1, C - 1, lambda x: evaluate(placed, T, x, tg).ok)
    if c:
        fixes.append(f"at most {c:,} concurrent sequence{'s' if c > 1 else ''}")
    return fixes


def smallest_fitting(
    model: ModelSpec,
    gpu: GpuSpec,
    knobs: Layout,
    seq_len: int,
    concurrency: int,
    kv: tuple[StorageFormat | str, StorageFormat | str],
    weight: StorageFormat | str | None,
    limit: int = FIX_SEARCH_MAX_GPUS,
    gpus_per_node: int = GPUS_PER_NODE,
) -> tuple[int, int, int, int] | None:
    """(count, tp, pp, dp): the fewest GPUs of `gpu` on which `concurrency` sequences of `seq_len`
    tokens fit in these formats (the most tokens/s among layouts of that count), or None within
    `limit` GPUs. What `kvcalc estimate --gpu` names when its layout does not fit."""
    req = PlanSearch(
        model=model,
        seq_len=seq_len,
        concurrency=concurrency,
        gpus=(GpuChoice((gpu,)),),
        kv_dtypes=(kv_pick(kv),),
        weight_dtypes=(weight_format(weight) if isinstance(weight, str) else weight,),
        knobs=knobs,
        max_gpus=limit,
        gpus_per_node=gpus_per_node,
    )
    space = _Space(req)
    best = None
    for p in space.placements(req.gpus[0], kv_pick(req.kv_dtypes[0]), req.weight_dtypes[0]):  # as the search holds them
        if best is not None and p.count > best[1].count:
            break
        if p.dpa > 1 or p.ep > 1 or p.dcp > 1:  # the answer is (count, tp, pp, dp): plain layouts only
            continue
        o = evaluate(p, seq_len, concurrency, PlanTargets(), used=space.used(p))
        if o.ok:
            key = rank_key(p.count, None, _fitted(o.tokens_per_s), _names(p))
            if best is None or key < best[0]:
                best = (key, p)
    if best is None:
        return None
    p = best[1]
    return p.count, p.tp, p.pp, p.dp
