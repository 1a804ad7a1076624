"""The memory plan of one GPU and the capacity solves, plus the roofline of a whole layout.

Pure arithmetic on the schema (no I/O, no rich, no yaml, no torch). Per GPU (the fullest
pipeline stage of one tensor-parallel rank):

    used_bytes = weights (this rank's share of this stage) + KV cache (this rank, this stage)
               + fixed SSM / linear-attention state + activation reserve + CUDA context
    budget_bytes = floor(memory_bytes x gpu_memory_utilization)
    fits = used_bytes <= budget_bytes on every stage; headroom_bytes = min(budget - used)

as vLLM budgets it (`vllm/v1/worker/gpu_worker.py` `determine_available_memory`: the KV cache
gets `total x gpu_memory_utilization` minus weights, the profiled activation peak and
non-torch memory; `gpu_memory_utilization` defaults to 0.9 in `vllm/config/cache.py`).

KV bytes come from the engine only: `KvProfile` groups each stage's layers by the engine's
`layer_kv_bytes_per_token` and window, and sums bytes x `tokens_cached` (min(T, window) for a
sliding layer), which is `kv_cache.estimate(...).kv_cache_bytes_per_gpu` exactly (a test holds
the two equal); grouping is what makes a 100,000-point sweep take well under a second.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

from kvcalc.calc import kv_cache, parallel, roofline
from kvcalc.calc import speed as speed_terms

#: DEFAULT_CUDA_CONTEXT_BYTES (500 MiB, in `calc.defaults` so the CLI reads it without this
#: module): CUDA context and runtime allocations outside the torch allocator (cuBLAS workspaces,
#: NCCL buffers, CUDA graphs); vLLM's profiler reports this "non-torch memory" at a few hundred
#: MiB on one GPU (`vllm/utils/mem_utils.py` `memory_profiling`); settable.
#: DEFAULT_GPU_MEMORY_UTILIZATION: 0.9, vLLM's default.
from kvcalc.calc.defaults import DEFAULT_CUDA_CONTEXT_BYTES, DEFAULT_GPU_MEMORY_UTILIZATION  # noqa: E402,F401
from kvcalc.calc.weights import (
    WeightBytes,
    can_derive,
    model_params,
    param_counts,
    weight_format_label,
    weight_formats,
    weights_source,
)
from kvcalc.errors import MESSAGE, OPTION_SAYS, KvcalcError
from kvcalc.formats import STORAGE_FORMATS, StorageFormat, kv_format, weight_format
from kvcalc.results import ServingEstimate  # the result `GpuFit.serving` returns
from kvcalc.schema import GpuSpec, ModelSpec

#: tokens of one prefill chunk in vLLM's profiling run (`max_num_batched_tokens`; V1 defaults to
#: 8192 for the OpenAI server on large GPUs, `vllm/engine/arg_utils.py` `_set_default_args`)
DEFAULT_PREFILL_CHUNK_TOKENS = 8192
#: sequences sampled at once in the profiling run (`max_num_seqs` default 256)
DEFAULT_MAX_NUM_SEQS = 256


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def budget_bytes(memory_bytes: int, gpu_memory_utilization: float) -> int:
    """floor(memory_bytes x gpu_memory_utilization): what the engine lets itself use."""
    return int(memory_bytes * gpu_memory_utilization)


def activation_reserve_bytes(
    model: ModelSpec,
    tp: int = 1,
    chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
) -> int:
    """An estimate of the activation peak of a prefill chunk, which the engine keeps free:

        chunk_tokens x (2 x hidden + widest per-rank intermediate) x 2 B   (bf16 activations)
      + max_num_seqs x vocab / tp x 4 B                                     (fp32 logits)

    where the widest intermediate is max(2 x dense intermediate, 2 x (k x moe_intermediate +
    shared)) / tp (gate and up outputs live together). An approximation of vLLM's profiled peak,
    not a measurement: set it with `activation_reserve_bytes` when you have measured yours.
    """
    hidden = model.hidden_size or model.n_heads * model.resolved_head_dim
    widths = [2 * (model.intermediate_size or 4 * hidden)]
    if model.n_experts:
        moe = model.moe_intermediate_size or model.intermediate_size or 4 * hidden
        widths.append(2 * ((model.n_experts_per_token or 1) * moe + (model.shared_expert_intermediate_size or 0)))
    inter = _cdiv(max(widths), tp)
    vocab = _cdiv(model.vocab_size or 32_000, tp)
    return chunk_tokens * (2 * hidden + inter) * 2 + max_num_seqs * vocab * 4


@dataclass(frozen=True, slots=True)
class KvProfile:
    """Per-GPU KV bytes as a function of (T, B), from the engine's per-layer bytes.

    `stages[s]` lists (bytes per token on one rank, window or None, compressed entry bytes,
    compress ratio, fixed bytes per sequence) for each group of layers of stage s; stage bytes at
    (T, B) = B x sum(bytes x min(T, window) + entry bytes x T // ratio + fixed)
    (`kv_cache.layer_cache_bytes`: DeepSeek-V4's compressed caches are not windowed; its
    compressor's open windows are the fixed bytes, `kv_cache.compressor_state_bytes`).
    """

    stages: tuple[tuple[tuple[int, int | None, int, int, int], ...], ...]
    #: decode context parallel: each rank holds ceil(T / dcp) positions (`parallel.dcp_tokens`)
    dcp: int = 1

    @classmethod
    def build(
        cls,
        model: ModelSpec,
        k: StorageFormat,
        v: StorageFormat,
        tp: int = 1,
        pp: int = 1,
        stages: list[range] | None = None,
    ) -> KvProfile:
        """Group each stage's layers by (kv_cache.layer_kv_bytes_per_token, window); `stages`
        (layer ranges) overrides vLLM's split of the layers into `pp` stages."""
        layers = model.layers
        out = []
        for st in stages if stages is not None else kv_cache.pp_stages(model.n_layers, pp):
            groups: dict[tuple[int, int | None, int, int, int], int] = {}
            for i in st:
                layer = layers[i]
                if not layer.caches_kv:
                    continue
                # kv_cache.tokens_cached: min(T, window) for sliding layers, else T
                w = layer.window if layer.kind == "sliding" else None
                key = (
                    kv_cache.layer_kv_bytes_per_token(layer, k, v, tp),
                    w,
                    kv_cache.layer_entry_bytes(layer, k),
                    max(layer.compress_ratio, 1),
                    kv_cache.compressor_state_bytes(layer),
                )
                groups[key] = groups.get(key, 0) + 1
            out.append(tuple((b * n, w, e * n, r, f * n) for (b, w, e, r, f), n in groups.items()))
        return cls(stages=tuple(out))

    def stage_bytes(self, seq_len: int, batch: int) -> list[int]:
        """KV bytes of each stage on one rank."""
        T = parallel.dcp_tokens(seq_len, self.dcp)
        return [
            batch * sum(b * (T if w is None or w > T else w) + e * (T // r) + (f if T else 0) for b, w, e, r, f in st)
            for st in self.stages
        ]

    def per_gpu_bytes(self, seq_len: int, batch: int) -> int:
        """The fullest stage: `kv_cache.estimate(...).kv_cache_bytes_per_gpu`."""
        return max(self.stage_bytes(seq_len, batch))


@dataclass(frozen=True)
class Layout:
    """How a model is placed: tp x pp x dp GPUs, the weight and KV formats, and the knobs of the
    memory plan and the roofline."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    #: the formats as objects (None: the checkpoint's weights, the model's dtype for K and V); a
    #: name given as text (a caller's, a test's) is looked up once, when the layout is made
    weight_dtype: StorageFormat | None = None
    k_dtype: StorageFormat | None = None
    v_dtype: StorageFormat | None = None
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    cuda_context_bytes: int = DEFAULT_CUDA_CONTEXT_BYTES
    activation_reserve_bytes: int | None = None
    bw_efficiency: float = roofline.DEFAULT_BW_EFFICIENCY
    flops_efficiency: float = roofline.DEFAULT_FLOPS_EFFICIENCY
    #: layers of each pipeline stage, first to last (None: vLLM's split, `kv_cache.pp_stages`);
    #: llama.cpp's `--tensor-split` puts its own counts on each device (`calc.plan`)
    stage_layers: tuple[int, ...] | None = None
    #: the speed model's terms for this engine on this GPU (`calc.speed`, from `speed.yaml` and a
    #: calibration); None: the bare roofline with `bw_efficiency` / `flops_efficiency` above
    speed: speed_terms.SpeedTerms | None = None
    #: attention data-parallel ranks inside one engine, expert-parallel size, decode context
    #: parallel size (`calc.parallel`: one meaning each; `dp` stays whole replicas)
    dp_attention: int = 1
    ep: int = 1
    dcp: int = 1

    def __post_init__(self) -> None:
        for name in ("weight_dtype", "k_dtype", "v_dtype"):
            value = getattr(self, name)
            if isinstance(value, str):  # a name from outside the request builder: looked up here, once
                lookup = weight_format if name == "weight_dtype" else kv_format
                object.__setattr__(self, name, lookup(value, field=name))

    @property
    def n_gpus(self) -> int:
        """GPUs of the layout: tp x pp x dp_attention per replica, x dp replicas."""
        return self.tp * self.pp * self.dp_attention * self.dp

    def stages(self, n_layers: int) -> list[range]:
        """The layer indices of each stage: `stage_layers` when given (they must sum to
        `n_layers`, one count per stage), else `kv_cache.pp_stages(n_layers, pp)`."""
        if self.stage_layers is None:
            return kv_cache.pp_stages(n_layers, self.pp)
        if len(self.stage_layers) != self.pp or sum(self.stage_layers) != n_layers or min(self.stage_layers) < 1:
            raise KvcalcError(
                f"stage layers {list(self.stage_layers)} must be {self.pp} positive counts summing to {n_layers}",
                field="pp",
                value=self.pp,
                form=MESSAGE,
            )
        out, start = [], 0
        for n in self.stage_layers:
            out.append(range(start, start + n))
            start += n
        return out

    def check(self) -> None:
        """Raise `KvcalcError` (field: the knob's name) for a utilization or efficiency outside
        (0, 1] or a negative CUDA context. Called once, where the request is built
        (`requests.EstimateRequest.build`, `requests.PlanRequest.build`, `requests.plan_kv_memory`,
        `kvcalc sweep`); a deployment's knobs are its schema's (`schema_deploy.Deployment`).
        `GpuFit` and the searches trust the layout they are given."""
        for name in ("gpu_memory_utilization", "bw_efficiency", "flops_efficiency"):
            x = getattr(self, name)
            if not 0 < x <= 1:
                raise KvcalcError(f"must be in (0, 1], got {x}", field=name, value=x, form=OPTION_SAYS)
        if self.cuda_context_bytes < 0:
            raise KvcalcError(
                f"must not be negative, got {self.cuda_context_bytes}",
                field="cuda_context_bytes",
                value=self.cuda_context_bytes,
                form=OPTION_SAYS,
            )


class GpuFit:
    """Everything about one (model, GPU, layout) that does not depend on (T, B), precomputed, so
    that each (T, B) point is a few multiplications: memory plan, capacity solves, roofline.

    Raises `KvcalcError` for a TP / PP layout the engines refuse, formats that do not fit the
    heads, or a config that cannot be sized.
    """

    def __init__(self, model: ModelSpec, gpu: GpuSpec, layout: Layout = Layout()) -> None:
        kv_cache.check_tp(model, layout.tp)
        parallel.check_layout(model, layout.tp, layout.dp_attention, layout.ep, layout.dcp)
        self.model, self.gpu, self.layout = model, gpu, layout
        #: attention-DP ranks of one engine: each holds ceil(B / dpa) of a replica's B sequences
        self.dpa = layout.dp_attention
        tp, pp = layout.tp, layout.pp
        self.stages = layout.stages(model.n_layers)
        wf, ef = weight_formats(model, layout.weight_dtype)
        self.expert_bits = ef.bits
        self.weight_format_name = wf.name
        self.weight_dtype = weight_format_label(model, layout.weight_dtype)
        k, v = kv_cache.formats(layout.k_dtype or model.dtype_format, layout.v_dtype)
        self.kv_dtype = k.name if k == v else f"{k.name}/{v.name}"
        self.kv = KvProfile.build(model, k, v, tp, pp, self.stages)
        if layout.dcp > 1:
            self.kv = dataclasses.replace(self.kv, dcp=layout.dcp)
        wb = parallel.rank_weight_bytes(model, layout.weight_dtype, tp, layout.dp_attention, layout.ep)
        self.stage_weight_bytes = wb.stage_bytes(self.stages)
        self.n_params, self.n_active_params = param_counts(model)
        self.weights_source = weights_source(model, layout.weight_dtype)
        state = kv_cache.state_bytes_per_seq(model)
        self.state_per_seq_per_gpu = _cdiv(state, tp * pp) if state else 0
        self.act_bytes = (
            layout.activation_reserve_bytes
            if layout.activation_reserve_bytes is not None
            else activation_reserve_bytes(model, tp)
        )
        self.fixed_bytes = self.act_bytes + layout.cuda_context_bytes
        self.budget = budget_bytes(gpu.memory_bytes, layout.gpu_memory_utilization)
        self.peak = roofline.peak_flops_per_s(gpu, wf.name)

        # roofline precompute: decode reads every dense weight of every stage on this rank (the
        # token passes through the stages in turn) and the experts its batch routes to.
        n = len(wb.layer_dense_bytes)
        # a decode step reads the layers' dense weights and the output head whole, but only the
        # batch's rows of the input embedding (`embedding_read_bytes`); a tied head is the
        # embedding matrix, read whole by the head's GEMV
        self.head_read_bytes = _head_read_bytes(model, wb, wf, layout.weight_dtype, tp)
        self.embedding_bytes = 0 if wb.tied else wb.embedding_bytes
        self.vocab_per_rank = _cdiv(model.vocab_size, tp) if model.vocab_size and can_derive(model) else 0
        self.dense_read_bytes = sum(wb.layer_dense_bytes) + self.head_read_bytes
        if not self.vocab_per_rank:  # rows unknown: the embedding counts whole
            self.dense_read_bytes += self.embedding_bytes
        self.weight_bits = wf.bits
        moe: dict[tuple[int, int, int], int] = {}
        for i in range(n):
            if wb.layer_n_experts[i]:
                key = (wb.layer_expert_bytes[i], wb.layer_n_experts[i], wb.layer_n_active_experts[i])
                moe[key] = moe.get(key, 0) + 1
        self.moe_groups = tuple((cnt, eb, e, a) for (eb, e, a), cnt in moe.items())
        # FLOPs per token: 2 per active matrix weight on this rank (embedding lookups excluded)
        #: of which the routed experts' (2 per active expert weight on this TP rank)
        self.expert_flops_per_token = 0
        if can_derive(model):
            p = model_params(model, tp)
            self.matmul_flops_per_token = 2 * (p.active - p.embedding)
            self.expert_flops_per_token = 2 * sum(lp.n_active_experts * lp.expert_linear for lp in p.layers)
        else:
            self.matmul_flops_per_token = 2 * _cdiv(self.n_active_params, tp)
        # attention FLOPs per (query, cached key) pair, grouped by window
        h = _cdiv(model.n_heads, tp)
        att: dict[int | None, list[int]] = {}
        for layer in model.layers:
            if not layer.caches_kv:
                continue
            w = layer.window if layer.kind == "sliding" else None
            if layer.kind == "mla":
                lora, rope = model.kv_lora_rank, model.qk_rope_head_dim
                if lora is None or rope is None:  # ModelSpec refuses attention: mla without them
                    raise KvcalcError(
                        f"{model.name}: attention: mla needs kv_lora_rank and qk_rope_head_dim",
                        field="kv_lora_rank",
                        form=MESSAGE,
                    )
                nope = model.qk_nope_head_dim or lora
                vd = model.v_head_dim or nope
                dec = 2 * h * (2 * lora + rope)  # absorbed: scores over the latent, values from it
                pre = 2 * h * (nope + rope + vd)  # prefill: per-head q.k and p.v
            else:
                dec = pre = 2 * h * (layer.head_dim_k + layer.head_dim_v)
            g = att.setdefault(w, [0, 0])
            g[0] += dec
            g[1] += pre
        self.att_groups = tuple((w, d, p_) for w, (d, p_) in att.items())
        self.hidden = model.hidden_size or model.n_heads * model.resolved_head_dim

    def variant(
        self, *, gpu: GpuSpec | None = None, dp: int | None = None, speed: speed_terms.SpeedTerms | None = None
    ) -> GpuFit:
        """This plan on another GPU and / or with another number of replicas, without redoing
        what depends on neither (weights, KV profile, FLOPs): only the budget and the peak
        FLOP/s follow the GPU, and `speed` (the speed terms on that GPU) when given. What a
        search over GPUs and counts reuses (`calc.plan`)."""
        new = copy.copy(self)
        if dp is not None:
            new.layout = dataclasses.replace(self.layout, dp=dp)
        if speed is not None:
            new.layout = dataclasses.replace(new.layout, speed=speed)
        if gpu is not None:
            new.gpu = gpu
            new.budget = budget_bytes(gpu.memory_bytes, self.layout.gpu_memory_utilization)
            new.peak = roofline.peak_flops_per_s(gpu, self.weight_format_name)
        return new

    # ----- memory ------------------------------------------------------------------------

    def stage_used_bytes(self, seq_len: int, batch: int) -> list[int]:
        """Bytes each stage's GPU uses at (T, B), B the replica's sequences (its fullest
        attention-DP rank holds ceil(B / dp_attention) of them, `parallel.rank_batch`)."""
        batch = parallel.rank_batch(batch, self.dpa)
        kv = self.kv.stage_bytes(seq_len, batch)
        st = batch * self.state_per_seq_per_gpu + self.fixed_bytes
        return [w + k + st for w, k in zip(self.stage_weight_bytes, kv)]

    def headroom_bytes(self, seq_len: int, batch: int) -> int:
        """min over stages of budget - used (negative: short by that much)."""
        return self.budget - max(self.stage_used_bytes(seq_len, batch))

    def max_batch(self, seq_len: int, stage: int | None = None) -> int:
        """The largest batch per replica that fits at `seq_len` on every stage (0 if none):
        min over stages of (budget - weights - reserve) // (KV + state per sequence). Exact:
        a stage's KV bytes are linear in the batch. `stage`: that stage only (a device of a
        layer split whose GPUs differ, `calc.plan`)."""
        per_seq = self.kv.stage_bytes(seq_len, 1)
        out = None
        pairs = list(zip(self.stage_weight_bytes, per_seq))
        for w, kv1 in pairs if stage is None else [pairs[stage]]:
            free = self.budget - w - self.fixed_bytes
            one = kv1 + self.state_per_seq_per_gpu
            b = 0 if free < 0 else (free // one if one else 2**62)
            out = b if out is None else min(out, b)
        return int(out or 0) * self.dpa  # each attention-DP rank holds its own

    def max_seq_len(self, batch: int, cap: int | None = None) -> tuple[int, bool]:
        """(the longest context that fits `batch` sequences on every stage, capped): binary
        search on T, exact because KV bytes never shrink as T grows (they stop growing on
        sliding layers past the window, so the curve bends and a linear solve would be wrong).
        `cap` defaults to the model's context limit (`ModelSpec.context_limit`, else 2^30); the flag says the cap,
        not memory, was the limit. 0 when not even one token fits."""
        hi = cap or self.model.context_limit or 2**30
        if self.headroom_bytes(hi, batch) >= 0:
            return hi, True
        if self.headroom_bytes(1, batch) < 0:
            return 0, False
        lo = 1  # fits at lo, not at hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.headroom_bytes(mid, batch) >= 0:
                lo = mid
            else:
                hi = mid
        return lo, False

    # ----- roofline ----------------------------------------------------------------------

    def embedding_read_bytes(self, tokens: int) -> int:
        """Bytes of the input embedding `tokens` tokens read on this rank: their rows only
        (`speed.decode_embedding_bytes`); 0 when tied (the head reads the matrix whole) or when
        the vocabulary is unknown (then `dense_read_bytes` holds the whole table)."""
        if not self.vocab_per_rank:
            return 0
        return speed_terms.decode_embedding_bytes(tokens, self.vocab_per_rank, self.embedding_bytes)

    def _weights_read(self, tokens: int) -> tuple[int, int]:
        """(dense bytes, routed-expert bytes) the weights `tokens` tokens touch on this rank."""
        e_b = 0
        for cnt, eb, e, a in self.moe_groups:
            if self.dpa > 1 or self.layout.ep > 1:
                # expert parallel: the tokens of the whole engine route over all E experts; this
                # rank holds e of them and reads its share of those touched
                n = self.model.n_experts or e
                touched = roofline.expected_experts_touched(n, a, tokens) * e / n
            else:
                touched = a if tokens == 1 else roofline.expected_experts_touched(e, a, tokens)
            e_b += int(round(cnt * eb * touched))
        return self.dense_read_bytes + self.embedding_read_bytes(tokens), e_b

    def decode(self, seq_len: int, batch: int) -> roofline.StepTime:
        """One decode step of `batch` sequences at `seq_len` cached tokens, on one TP rank over
        every pipeline stage in turn: bytes = weights touched + the batch's KV; FLOPs = 2 x active
        weights x batch + attention (per cached token per layer: 2 H (D_k + D_v); MLA absorbed:
        2 H (2 kv_lora + rope)); plus 2 all-reduces per layer of (batch, hidden)."""
        T = seq_len
        b = parallel.rank_batch(batch, self.dpa)  # this attention-DP rank's sequences
        kv = sum(self.kv.stage_bytes(T, b))
        Tc = -(-T // self.layout.dcp)
        att = sum(d * (Tc if w is None or w > Tc else w) for w, d, _ in self.att_groups)
        flops = b * (self.matmul_flops_per_token + att)
        comm = roofline.tp_allreduce_bytes(self.model.n_layers, b, self.hidden)
        step = self._step(self._weights_read(batch), kv, flops, comm, overlap=True, attention_flops=b * att)
        return self._with_alltoall(step, b)

    def _with_alltoall(self, step: roofline.StepTime, tokens: int) -> roofline.StepTime:
        """`step` plus the expert-parallel dispatch and combine of `tokens` tokens on this rank
        (`parallel.alltoall_bytes`) over the GPU's one-direction link bandwidth (half the
        bidirectional `interconnect_bytes_per_s`; PCIe 4.0 x16 for a row without a link,
        `roofline.PCIE_GEN4_X16_BYTES_PER_S`); unchanged without EP."""
        ep = self.layout.ep
        if ep <= 1 or not self.moe_groups:
            return step
        n_moe = sum(cnt for cnt, *_ in self.moe_groups)
        k = self.model.n_experts_per_token or 1
        nbytes = parallel.alltoall_bytes(n_moe, tokens, k, self.hidden, ep)
        bw = (self.gpu.interconnect_bytes_per_s or roofline.PCIE_GEN4_X16_BYTES_PER_S) / 2
        return dataclasses.replace(step, comm_time_s=step.comm_time_s + nbytes / bw)

    def prefill(self, prompt_len: int, batch: int = 1) -> roofline.StepTime:
        """Prefill of `batch` prompts of `prompt_len` tokens in one pass (time to first token):
        FLOPs = B (2 x active weights x P + attention over the causal pairs: 2 H (D_k + D_v) per
        pair, the term that grows with P^2; sliding layers min(i, window)); bytes = weights
        touched by B x P tokens + the prompts' KV written; plus the all-reduces of (B P, hidden)."""
        P, B = prompt_len, batch
        att = sum(p * roofline.attended_pairs(P, w) for w, _, p in self.att_groups)
        per_token = self.matmul_flops_per_token
        if self.layout.ep > 1 or self.dpa > 1:
            # one prompt on one attention-DP rank: its tokens' expert work is spread over the
            # engine's tp x dp_attention GPUs, 1 / dp_attention of it on each of the tp ranks here
            ex = self.expert_flops_per_token
            per_token += ex // self.dpa - ex
        flops = B * (P * per_token + att)
        kv = sum(self.kv.stage_bytes(P, B))
        comm = roofline.tp_allreduce_bytes(self.model.n_layers, B * P, self.hidden)
        return self._step(self._weights_read(B * P), kv, flops, comm, overlap=self.layout.speed is None)

    def _step(
        self,
        weights: tuple[int, int],
        other_bytes: int,
        flops: int,
        comm_bytes: int,
        *,
        overlap: bool,
        attention_flops: int | None = None,
    ) -> roofline.StepTime:
        """One step's time: the bare roofline (`roofline.step_time`) without speed terms; with
        them (`calc.speed`), the engine's floor, the weights read at their format's efficiency,
        memory + compute added for prefill (`overlap` False) and the all-reduces' latency. With
        `attention_flops` (decode: `other_bytes` is the KV read), the attention is timed on its
        own roofline after the GEMMs (`speed.attention_time_s`); the GEMMs keep the rest."""
        lay, sp = self.layout, self.layout.speed
        weight_bytes = weights[0] + weights[1]
        if sp is None:
            return roofline.step_time(
                weight_bytes + other_bytes,
                flops,
                comm_bytes,
                self.gpu,
                lay.tp,
                self.peak,
                lay.bw_efficiency,
                lay.flops_efficiency,
            )
        comm = roofline.allreduce_time_s(comm_bytes, lay.tp, self.gpu.interconnect_bytes_per_s)
        if lay.tp > 1:
            comm += speed_terms.allreduce_calls(self.model.n_layers) * sp.allreduce_latency_s
        att_s, gemm_flops, read = 0.0, flops, other_bytes
        if attention_flops is not None:
            att_s = speed_terms.attention_time_s(
                other_bytes,
                attention_flops,
                self.gpu.hbm_bytes_per_s,
                sp.bw_efficiency,
                self.gpu.bf16_flops_per_s,
                sp.flops_efficiency,
            )
            gemm_flops, read = flops - attention_flops, 0
        return roofline.StepTime(
            bytes_read=weight_bytes + other_bytes,
            flops=flops,
            memory_time_s=speed_terms.memory_time_s(
                [
                    (weights[0], sp.format_efficiency_at(self.weight_bits)),
                    (weights[1], sp.format_efficiency_at(self.expert_bits)),
                    (read, 1.0),
                ],
                self.gpu.hbm_bytes_per_s,
                sp.bw_efficiency,
            ),
            compute_time_s=roofline.compute_time_s(gemm_flops, self.peak, sp.flops_efficiency),
            comm_time_s=comm,
            floor_s=sp.step_floor_s * lay.pp,
            overlap=overlap,
            attention_time_s=att_s,
        )

    # ----- one point ---------------------------------------------------------------------

    def point(self, seq_len: int, batch: int) -> tuple[int, bool, float, float]:
        """(memory bytes per GPU, fits, TPOT s, total tokens/s) at (T, B): the sweep's hot path."""
        used = max(self.stage_used_bytes(seq_len, batch))
        st = self.decode(seq_len, batch)
        t = st.step_time_s
        return used, used <= self.budget, t, batch * self.layout.dp / t

    def split_decode(self, seq_len: int, concurrency: int) -> tuple[roofline.StepTime, float]:
        """`concurrency` sequences spread over the layout's dp replicas as evenly as they go:
        with q, r = divmod(concurrency, dp), r replicas hold q + 1 sequences and dp - r hold q
        (idle when q = 0). Returns (the fullest replica's decode step, whose time is the TPOT a
        target must meet; total output tokens/s = r (q + 1) / t(q + 1) + (dp - r) q / t(q)).
        Counting ceil(concurrency / dp) on every replica would invent sequences: 1 sequence
        on 8 replicas is 1 / TPOT tokens/s, not 8 / TPOT."""
        q, r = divmod(concurrency, self.layout.dp)
        full = self.decode(seq_len, q + 1 if r else q)
        tok_s = (r * (q + 1) if r else self.layout.dp * q) / full.step_time_s
        if r and q:
            tok_s += (self.layout.dp - r) * q / self.decode(seq_len, q).step_time_s
        return full, tok_s

    def serving(self, seq_len: int, batch: int, kv_cache_bytes_per_gpu: int | None = None) -> ServingEstimate:
        """The full result at (T, B). `kv_cache_bytes_per_gpu` is `kv_cache.estimate`'s figure when
        the caller has it (it must equal this plan's own; a mismatch is a bug and raises)."""
        lay = self.layout
        kv = self.kv.per_gpu_bytes(seq_len, parallel.rank_batch(batch, self.dpa))
        if kv_cache_bytes_per_gpu is not None and kv_cache_bytes_per_gpu != kv:
            raise RuntimeError(f"KV per GPU {kv} != kv_cache.estimate {kv_cache_bytes_per_gpu}")
        used = max(self.stage_used_bytes(seq_len, batch))
        dec = self.decode(seq_len, batch)
        pre = self.prefill(seq_len)
        max_t, capped = self.max_seq_len(batch)
        fits = used <= self.budget
        tpot = dec.step_time_s
        sp = lay.speed
        return ServingEstimate(
            gpu=self.gpu.key,
            gpu_count=lay.n_gpus,
            weight_dtype=self.weight_dtype,
            n_params=self.n_params,
            n_active_params=self.n_active_params,
            weights_source=self.weights_source,
            weights_bytes_per_gpu=max(self.stage_weight_bytes),
            kv_cache_bytes_per_gpu=kv,
            state_bytes_per_gpu=parallel.rank_batch(batch, self.dpa) * self.state_per_seq_per_gpu,
            activation_reserve_bytes=self.act_bytes,
            cuda_context_bytes=lay.cuda_context_bytes,
            memory_bytes_per_gpu=used,
            gpu_memory_bytes=self.gpu.memory_bytes,
            gpu_memory_utilization=lay.gpu_memory_utilization,
            budget_bytes_per_gpu=self.budget,
            headroom_bytes=self.budget - used,
            fits=fits,
            max_batch=self.max_batch(seq_len),
            max_seq_len=max_t,
            max_seq_len_capped=capped,
            bw_efficiency=sp.bw_efficiency if sp else lay.bw_efficiency,
            flops_efficiency=sp.flops_efficiency if sp else lay.flops_efficiency,
            decode_bytes_read_per_step=dec.bytes_read,
            decode_flops_per_step=dec.flops,
            decode_bound=dec.bound,
            decode_allreduce_s=dec.comm_time_s,
            tpot_s=tpot if fits else None,
            tokens_per_s_per_seq=1 / tpot if fits else None,
            tokens_per_s=batch * lay.dp / tpot if fits else None,
            ttft_s=pre.step_time_s if fits else None,
            prefill_bound=pre.bound if fits else None,
            speed_model=sp.describe(self.weight_bits) if sp else "roofline",
            decode_floor_s=dec.floor_s,
        )


def _head_read_bytes(
    model: ModelSpec, wb: WeightBytes, wf: StorageFormat, weight_dtype: StorageFormat | None, tp: int
) -> int:
    """Bytes of the output head (and final norm) on one rank, as the file holds them. With a
    llama.cpp block format given as --weight-dtype (q4_0, q4_k, q8_0, ...), `llama-quantize`
    stores output.weight in Q6_K unless the type is Q8_0 (llama.cpp `src/llama-quant.cpp`
    `llama_tensor_get_type`: "else if (new_type != GGML_TYPE_Q8_0) new_type = GGML_TYPE_Q6_K"),
    and a tied head (no output.weight) is token_embd.weight under the same rule; otherwise the
    head is in the model's dtype (`weights.weight_bytes`), or the checkpoint's own bytes."""
    head = wb.head_bytes + (wb.embedding_bytes if wb.tied else 0)
    ggml = weight_dtype is not None and model.checkpoint is None and wf.name.startswith("q") and can_derive(model)
    if not ggml or not model.vocab_size or not model.hidden_size:
        return head
    values = _cdiv(model.vocab_size, tp) * model.hidden_size
    fmt = wf if wf.name == "q8_0" else STORAGE_FORMATS["q6_k"]
    if values % fmt.block_values:
        return head
    return fmt.bytes_for(values) + (model.hidden_size * 2)  # + the final norm (bf16 / fp16)
