"""Speculative decoding: what it adds to memory, and the time per output token at an acceptance
length the user states (kvcalc never assumes one).

Memory, per GPU rank (vLLM 0.33.0):

- MTP (`method: mtp`, DeepSeek-V3 / V4, GLM, Qwen3-Next's `num_nextn_predict_layers`): the MTP
  layers' weights (`weights.mtp_params`: one decoder layer like the model's last, enorm, hnorm,
  eh_proj, the shared head's norm; embedding and LM head shared with the target,
  `vllm/model_executor/models/deepseek_mtp.py`), and a KV cache for each MTP layer of the same
  kind as the model's last layer (the MTP layer's attention is a layer of the target's kind
  with its own cache, `DeepSeekMultiTokenPredictorLayer.mtp_block`). vLLM runs
  num_speculative_tokens draft steps over those layers (`spec_step_idx % num_mtp_layers`).
- EAGLE / EAGLE-3 head or a separate draft model: its own `ModelSpec` (weights and KV bytes per
  token of its layers), given by the caller; kvcalc does not invent a head's size.
- Lookahead slots: the scheduler reserves KV for `num_lookahead_tokens` positions past the
  tokens scheduled, capped at max_model_len (`vllm/v1/core/kv_cache_manager.py`
  `allocate_slots`: "num_tokens_main_model + num_lookahead_tokens, self.max_model_len");
  `vllm/config/vllm.py` `num_lookahead_tokens`: k for EAGLE / MTP / a draft model, k + 1 for
  DFlash fill-in drafting, 0 for n-gram.
- Hybrid models' recurrent state: `MambaSpec.num_speculative_blocks` = num_speculative_tokens
  (`vllm/model_executor/layers/mamba/abstract.py`, unless `use_replayssm`), so one sequence
  holds 1 + k state blocks (`vllm/v1/kv_cache_interface.py` `MambaSpec.max_memory_usage_bytes`:
  "page_size_bytes * (1 + self.num_speculative_blocks)"; 2 + k in `align` cache mode).

Speed: one target step verifies k + 1 tokens per sequence after k draft steps; with `accepted`
the mean tokens a step emits (1 <= accepted <= k + 1, the bonus token included; aiconfigurator's
`--nextn-accepted` is the same figure's mean over the draft positions, accepted - 1):

    TPOT = (verify step + k x draft step) / accepted

Pure: imports only the schema and calc modules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.formats import StorageFormat
from kvcalc.results import SpeculativeEstimate
from kvcalc.schema import ModelSpec

#: vLLM 0.33.0 `--speculative-config` methods kvcalc sizes, and the lookahead each reserves
#: (`vllm/config/vllm.py` `num_lookahead_tokens`): "k" = num_speculative_tokens
METHODS = {"mtp": "k", "eagle": "k", "eagle3": "k", "draft_model": "k", "ngram": "0"}

#: SGLang 0.5.23's `--speculative-algorithm` name for each method (`server_args.py`: EAGLE,
#: EAGLE3, NEXTN (MTP, run as EAGLE), STANDALONE (a draft model), NGRAM)
SGLANG_ALGORITHM = {"mtp": "NEXTN", "eagle": "EAGLE", "eagle3": "EAGLE3", "draft_model": "STANDALONE", "ngram": "NGRAM"}


@dataclass(frozen=True)
class SpecDecode:
    """A speculative-decoding setup: `method` (a key of `METHODS`), `num_speculative_tokens` (k,
    draft tokens per step), `accepted` (mean tokens a verify step emits, the user's figure; None:
    no TPOT is given), `draft` (the EAGLE head's or draft model's `ModelSpec`; MTP uses the
    model's own layers, n-gram none), `draft_ref` (the draft's id for the launch line)."""

    method: str
    num_speculative_tokens: int
    accepted: float | None = None
    draft: ModelSpec | None = None
    draft_ref: str | None = None

    def check(self, model: ModelSpec) -> None:
        """Raise `KvcalcError` (field named) for a method kvcalc does not size, k < 1, an
        acceptance length outside [1, k + 1], MTP on a model without MTP layers, or an EAGLE /
        draft method without the draft's spec."""
        k = self.num_speculative_tokens
        if self.method not in METHODS:
            raise KvcalcError(
                f"speculative method {self.method!r}: kvcalc sizes {', '.join(METHODS)}",
                field="speculative_method",
                value=self.method,
            )
        if k < 1:
            raise KvcalcError(
                f"num_speculative_tokens must be at least 1, got {k}", field="num_speculative_tokens", value=k
            )
        if self.accepted is not None and not 1 <= self.accepted <= k + 1:
            raise KvcalcError(
                f"the acceptance length (mean tokens per verify step, bonus token included) must lie "
                f"in [1, {k + 1}] for {k} speculative tokens, got {self.accepted}",
                field="accepted",
                value=self.accepted,
            )
        if self.method == "mtp" and not model.n_mtp_layers:
            raise KvcalcError(
                f"{model.name} has no MTP layers (num_nextn_predict_layers 0): MTP needs them",
                field="speculative_method",
                value="mtp",
                form=MESSAGE,
            )
        if self.method in ("eagle", "eagle3", "draft_model") and self.draft is None:
            raise KvcalcError(
                f"{self.method} needs the draft's config (its layers size its weights and KV); "
                "kvcalc does not assume a head's size",
                field="draft",
                value=self.method,
                form=MESSAGE,
            )

    @property
    def lookahead_tokens(self) -> int:
        """KV slots reserved past the scheduled tokens (`METHODS`)."""
        return self.num_speculative_tokens if METHODS[self.method] == "k" else 0

    def vllm_config_json(self) -> str:
        """vLLM 0.33.0's `--speculative-config` value (`vllm/config/speculative.py`
        `SpeculativeConfig`: method, num_speculative_tokens, model for a separate draft)."""
        cfg: dict[str, object] = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens}
        if self.draft_ref:
            cfg["model"] = self.draft_ref
        return json.dumps(cfg, separators=(",", ":"))

    def sglang_flags(self) -> list[str]:
        """SGLang 0.5.23's flags (`python/sglang/srt/server_args.py`): --speculative-algorithm,
        --speculative-num-steps k, --speculative-eagle-topk 1, --speculative-num-draft-tokens
        k + 1 (a chain: topk 1 verifies k + 1 tokens), --speculative-draft-model-path."""
        k = self.num_speculative_tokens
        out = [
            "--speculative-algorithm",
            SGLANG_ALGORITHM[self.method],
            "--speculative-num-steps",
            str(k),
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            str(k + 1),
        ]
        if self.draft_ref:
            out += ["--speculative-draft-model-path", self.draft_ref]
        return out


def mtp_weight_bytes(
    model: ModelSpec, weight_dtype: StorageFormat | str | None, tp: int = 1, dp_attention: int = 1, ep: int = 1
) -> int:
    """Bytes of the MTP layers on one GPU: n_mtp_layers x (the model's last layer as this rank
    holds it, `parallel.rank_weight_bytes`: its experts divided by EP like the target's + the
    MTP glue, enorm + hnorm + eh_proj (2 hidden x hidden) + the head's norm, in the matrices'
    format over tp; DeepSeek-V4: less the last layer's compressor and indexer, plus the MTPBlock's
    fp32 hyper-connection head) (`weights.mtp_params`, vLLM `deepseek_mtp.py`,
    `models/deepseek_v4/attention.py`)."""
    from kvcalc.calc import parallel
    from kvcalc.calc.weights import FP32_BYTES, hc_head_params, mtp_compression_params, weight_format, weight_formats

    if not model.n_mtp_layers:
        return 0
    wb = parallel.rank_weight_bytes(model, weight_dtype, tp, dp_attention, ep)
    d = model.hidden_size or 0
    wf, _ = weight_formats(model, weight_dtype)
    glue = wf.bytes_for(-(-2 * d * d // tp)) + 3 * d * 2  # eh_proj in the matrices' format; bf16 norms
    glue += FP32_BYTES * hc_head_params(model)  # DeepSeek-V4's MTPBlock: its own fp32 hyper-connection head
    # DeepSeek-V4: the MTP layer has no compressor or indexer (replicated parts of the last layer)
    c_linear, c_other, c_fp32 = mtp_compression_params(model)
    base = weight_format(model.dtype, field=None)
    less = wf.bytes_for(c_linear) + base.bytes_for(c_other) + FP32_BYTES * c_fp32
    return model.n_mtp_layers * (wb.layer_bytes(model.n_layers - 1) - less + glue)


def mtp_kv_bytes_per_token(model: ModelSpec, layer_kv_bytes_per_token: int) -> int:
    """KV bytes per token the MTP layers add: n_mtp_layers x the model's last layer's bytes per
    token on the rank (`layer_kv_bytes_per_token`, `kv_cache.layer_kv_bytes_per_token` of
    `model.layers[-1]`): each MTP layer caches K / V (MLA: its latent) like a target layer."""
    return model.n_mtp_layers * layer_kv_bytes_per_token


def slots_per_sequence(seq_len: int, lookahead_tokens: int, max_model_len: int | None = None) -> int:
    """KV positions one sequence holds with speculative decoding: min(T + lookahead,
    max_model_len) (`kv_cache_manager.py` `allocate_slots`)."""
    n = seq_len + lookahead_tokens
    return n if max_model_len is None else min(n, max_model_len)


def state_blocks_per_sequence(num_speculative_tokens: int, align_mode: bool = False) -> int:
    """Recurrent-state blocks one sequence holds: 1 + k (`MambaSpec.max_memory_usage_bytes`,
    num_speculative_blocks = k), 2 + k in vLLM's `mamba_cache_mode="align"` (prefill
    checkpoint blocks aside)."""
    return (2 if align_mode else 1) + num_speculative_tokens


def spec_tpot_s(verify_step_s: float, draft_step_s: float, num_speculative_tokens: int, accepted: float) -> float:
    """Time per output token: (verify step + k x draft step) / accepted (s). `verify_step_s`:
    one target step over k + 1 tokens per sequence; `draft_step_s`: one draft step;
    `accepted`: mean tokens emitted per verify step (the user's figure, in [1, k + 1], checked by
    `SpecDecode.check`)."""
    return (verify_step_s + num_speculative_tokens * draft_step_s) / accepted


def memory_parts(
    planner: object, spec: SpecDecode, seq_len: int, batch: int, max_model_len: int | None = None
) -> tuple[int, int, int, int]:
    """(draft weights, draft KV, lookahead KV, extra recurrent state) in bytes on the fullest GPU
    of a `memory_plan.GpuFit`'s layout, `batch` sequences per replica of `seq_len` tokens (the
    fullest attention-DP rank's share, `parallel.rank_batch`). Lookahead slots are capped at
    `max_model_len` (`kv_cache_manager.py` `allocate_slots`; None: the model's context limit), so a
    plan at its launch line's --max-model-len reserves none past it. Draft KV: MTP's layers hold
    ceil(slots / dcp) positions like the target's (`mtp_kv_bytes_per_token`); an EAGLE head's or a
    draft model's at the target's tp. `spec` is taken as checked (`SpecDecode.check`, called where
    the request is built: `requests.EstimateRequest.build`, `requests.PlanRequest.build`)."""
    from kvcalc.calc import kv_cache, parallel
    from kvcalc.calc.memory_plan import GpuFit, Layout

    p: GpuFit = planner  # type: ignore[assignment]
    model, lay = p.model, p.layout
    b = parallel.rank_batch(batch, p.dpa)
    cap = model.context_limit if max_model_len is None else max_model_len
    slots = slots_per_sequence(seq_len, spec.lookahead_tokens, cap)
    lookahead_kv = max(p.kv.stage_bytes(slots, b)) - max(p.kv.stage_bytes(seq_len, b))
    draft_w = draft_kv = 0
    if spec.method == "mtp":
        kf, vf = kv_cache.formats(lay.k_dtype or model.dtype_format, lay.v_dtype)
        draft_w = mtp_weight_bytes(model, lay.weight_dtype, lay.tp, lay.dp_attention, lay.ep)
        per_tok = mtp_kv_bytes_per_token(model, kv_cache.layer_kv_bytes_per_token(model.layers[-1], kf, vf, lay.tp))
        draft_kv = b * -(-slots // lay.dcp) * per_tok
    elif spec.draft is not None:
        dp_ = GpuFit(
            spec.draft,
            p.gpu,
            Layout(
                tp=lay.tp, k_dtype=lay.k_dtype, v_dtype=lay.v_dtype, gpu_memory_utilization=lay.gpu_memory_utilization
            ),
        )
        draft_w = sum(dp_.stage_weight_bytes)
        draft_kv = max(dp_.kv.stage_bytes(slots, b))
    state = b * p.state_per_seq_per_gpu * spec.num_speculative_tokens  # k more state blocks (MambaSpec)
    return draft_w, draft_kv, lookahead_kv, state


def estimate(planner: object, spec: SpecDecode, seq_len: int, batch: int) -> SpeculativeEstimate:
    """Speculative decoding on a `memory_plan.GpuFit`'s layout at `seq_len` tokens for `batch`
    sequences per replica (its fullest attention-DP rank's share, `parallel.rank_batch`).

    Raises `KvcalcError` as `SpecDecode.check` does, or when the draft cannot be sized."""
    from kvcalc.calc import parallel, roofline
    from kvcalc.calc.memory_plan import GpuFit, Layout

    p: GpuFit = planner  # type: ignore[assignment]
    model, lay = p.model, p.layout
    draft_w, draft_kv, lookahead_kv, state = memory_parts(p, spec, seq_len, batch)
    k = spec.num_speculative_tokens
    tp, b = lay.tp, parallel.rank_batch(batch, p.dpa)
    T = seq_len
    if spec.method == "mtp":
        active = p.matmul_flops_per_token // max(1, model.n_layers)  # one layer's FLOPs per token
        # one draft step reads the MTP layer, the shared LM head and the MTP layer's cache
        draft = p._step((draft_w + p.head_read_bytes, 0), draft_kv, b * active * model.n_mtp_layers, 0, overlap=True)
        draft_s = draft.step_time_s
    elif spec.draft is not None:
        dp_ = GpuFit(
            spec.draft,
            p.gpu,
            Layout(tp=tp, k_dtype=lay.k_dtype, v_dtype=lay.v_dtype, gpu_memory_utilization=lay.gpu_memory_utilization),
        )
        draft_s = dp_.decode(T, b).step_time_s
    else:  # n-gram: no model
        draft_s = 0.0
    used = max(p.stage_used_bytes(T, batch)) + draft_w + draft_kv + lookahead_kv + state
    # the verify step: k + 1 tokens per sequence through the target (weights touched by all of
    # them, the cache read once, FLOPs and all-reduces x (k + 1))
    dec = p.decode(T, batch)
    kv_read = sum(p.kv.stage_bytes(T, b))
    comm = roofline.tp_allreduce_bytes(model.n_layers, b * (k + 1), p.hidden)
    att = (dec.flops - b * p.matmul_flops_per_token) * (k + 1)  # the attention's share, as in decode
    verify = p._step(
        p._weights_read(batch * (k + 1)),
        kv_read,
        dec.flops * (k + 1),
        comm,
        overlap=True,
        attention_flops=att if lay.speed is not None else None,
    )
    verify_s = verify.step_time_s
    tpot = tok_s = None
    if spec.accepted is not None and used <= p.budget:  # a batch that does not fit gets no TPOT
        tpot = spec_tpot_s(verify_s, draft_s, k, spec.accepted)
        tok_s = batch * lay.dp / tpot
    return SpeculativeEstimate(
        method=spec.method,
        num_speculative_tokens=k,
        lookahead_tokens=spec.lookahead_tokens,
        draft_weight_bytes=draft_w,
        draft_kv_bytes=draft_kv,
        lookahead_kv_bytes=lookahead_kv,
        state_extra_bytes=state,
        memory_bytes_per_gpu=used,
        budget_bytes_per_gpu=p.budget,
        fits=used <= p.budget,
        verify_step_s=verify_s,
        draft_step_s=draft_s,
        accepted=spec.accepted,
        tpot_s=tpot,
        tokens_per_s=tok_s,
        vllm_config=spec.vllm_config_json(),
        sglang_flags=" ".join(spec.sglang_flags()),
    )
