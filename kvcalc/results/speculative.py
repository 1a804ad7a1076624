"""`SpeculativeEstimate`: `kvcalc estimate --speculative-config ...` (`calc.speculative.estimate`)."""

from __future__ import annotations

from kvcalc.schema import _Frozen


class SpeculativeEstimate(_Frozen):
    """What speculative decoding adds on the fullest GPU (bytes) and its speed (s): the draft's
    weights (MTP layers, EAGLE head or draft model) and KV, the target's lookahead slots, the
    extra recurrent-state blocks; memory used with them; one verify step (k + 1 tokens per
    sequence) and one draft step; with the acceptance length the user gave, TPOT and total
    tokens/s (None without it: kvcalc never assumes one). `vllm_config`: the value of vLLM's
    `--speculative-config`; `sglang_flags`: SGLang's flags."""

    method: str
    num_speculative_tokens: int
    lookahead_tokens: int
    draft_weight_bytes: int
    draft_kv_bytes: int
    lookahead_kv_bytes: int
    state_extra_bytes: int
    memory_bytes_per_gpu: int
    budget_bytes_per_gpu: int
    fits: bool
    verify_step_s: float
    draft_step_s: float
    accepted: float | None
    tpot_s: float | None
    tokens_per_s: float | None
    vllm_config: str
    sglang_flags: str
