"""SGLang 0.5.23's state pool for the hybrid (Mamba / linear-attention) models: the `MambaPool`
of per-request state slots beside a `HybridLinearKVPool` of the full-attention layers.

Sources, SGLang 0.5.23 (the PyPI wheel, `python/sglang/srt/`):

- State shapes, `configs/mamba_utils.py`: `Mamba2StateShape.create` (Mamba-2 and Gated DeltaNet):
  n_groups is widened to tp when tp does not divide it (`extra_groups_for_head_shards`),
  conv_dim = intermediate_size + 2 x n_groups x state_size, conv state (conv_dim / tp,
  conv_kernel - 1), temporal (SSM) state (num_heads / tp, head_dim, state_size);
  `KimiLinearStateShape.create` (KDA): conv state (conv_kernel - 1, 3 x num_heads x head_dim /
  tp), temporal (num_heads / tp, head_dim, head_dim). `divide` asserts each split is exact.
  Gated DeltaNet (`configs/qwen3_next.py` `mamba2_cache_params`, Qwen3-Next / Qwen3.5):
  intermediate_size = linear_value_head_dim x linear_num_value_heads, n_groups =
  linear_num_key_heads, num_heads = linear_num_value_heads, head_dim = linear_value_head_dim,
  state_size = linear_key_head_dim. Nemotron-H (`configs/nemotron_h.py` 425-439):
  intermediate_size = mamba_num_heads x mamba_head_dim, n_groups, ssm_state_size, conv_kernel.
- Dtypes, `mamba2_state_dtype`: conv state `SGLANG_MAMBA_CONV_DTYPE` (default bfloat16), SSM state
  float32 unless `--mamba-ssm-dtype` (`SGLANG_MAMBA_SSM_DTYPE`) or the config's `mamba_ssm_dtype`
  says otherwise (Qwen3.5 and Nemotron-3-Super say float32; Kimi's `KimiLinearCacheParams` reads
  no config: float32).
- Bytes per request, `BaseLinearStateParams.mamba_cache_per_req`: (conv values x conv bytes +
  SSM values x SSM bytes) x state layers.
- The split, `mem_cache/kv_cache_configurator.py` `_handle_max_mamba_cache` (3230-3409), in
  SGLang's float GiB arithmetic: rest = budget / 2^30; without `--max-mamba-cache-size`,
  mamba_budget = rest x r / (1 + r) (r = `--mamba-full-memory-ratio`, default 0.9,
  `arg_groups/fields/schedule.py` 220-226), max_mamba_cache_size = int((mamba_budget x 2^30 -
  per_req) // per_req); with it, that count. The KV budget left is int((rest - (max_mamba_cache_size
  + 1) x per_req / 2^30) x 2^30) (`_profile_available_bytes`, 3039-3060): the pool's +1 padding slot
  (`MambaPool`, buffers of size + 1 rows). max_mamba_cache_size <= 0 raises "Not enough GPU memory
  for hybrid (mamba/linear-attention) state cache."
- The attention pool, `model_executor/pool_configurator.py` `DefaultPoolConfigurator` (219-653):
  the cell counts `mambaish.full_attention_layer_ids` only; tokens = available // cell // page x
  page.
- Requests, `resolve_max_num_reqs` (3116-3175): min(max(min(int(tokens / context_len x 512),
  4096), 2048), tokens // 2), capped at max_mamba_cache_size // ratio, where ratio
  (`_calculate_mamba_ratio`, 3062-3087) is 3 state slots a request plus 2 tracking slots with the
  `extra_buffer` radix-cache strategy that `arg_groups/overrides.py` `_mamba_radix_cache_resolution`
  picks by default for these architectures (overlap schedule on, triton linear-attention backend):
  5; 1 with `--disable-radix-cache`.
- Log lines, `mem_cache/memory_pool.py`: `MambaPool.__init__` (1002-1010) "Mamba Cache is
  allocated. max_mamba_cache_size: K, conv_state size: X.XXGB, ssm_state size: Y.YYGB " (the
  trailing space is SGLang's), before the attention pool's `_finalize_allocation_log`
  (2073-2099); the capped requests' warning (kv_cache_configurator.py 3136-3148).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from kvcalc.errors import MESSAGE, OPTION_SAYS, KvcalcError
from kvcalc.schema import ModelSpec

GIB = 1 << 30
#: `--mamba-full-memory-ratio` fallback (`arg_groups/fields/schedule.py` 220-226)
DEFAULT_MAMBA_FULL_MEMORY_RATIO = 0.9
#: `MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO` (kv_cache_configurator.py 222-228)
BASE_SLOTS_PER_REQUEST = 3
#: `get_mamba_tracking_slots(extra_buffer=True, overlap=True)` (`mem_cache/allocation_sizing.py` 11-19)
EXTRA_BUFFER_TRACKING_SLOTS = 2
#: `resolve_max_num_reqs`: the estimate's clamp and scale
MAX_REQS_LOW, MAX_REQS_HIGH, MAX_REQS_SCALE = 2048, 4096, 512
#: SSM dtypes `--mamba-ssm-dtype` accepts (`arg_groups/fields/exec_.py` 490-496): name -> bytes
SSM_DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}
CONV_DTYPE, CONV_BYTES = "bfloat16", 2  # SGLANG_MAMBA_CONV_DTYPE's default (environ.py 1628)

#: model type -> the state SGLang 0.5.23 keeps for its linear layers (`configs/hybrid_arch.py`
#: `mambaish_config`: `hybrid_gdn_config`, `mamba2_config`, `kimi_linear_config`)
STATE_KINDS = {
    "qwen3_next": "gdn",
    "qwen3_5": "gdn",
    "qwen3_5_text": "gdn",
    "qwen3_5_moe": "gdn",
    "qwen3_5_moe_text": "gdn",
    "nemotron_h": "mamba2",
    "kimi_linear": "kda",
    "kimi_k3": "kda",
}
KIND_NAMES = {"gdn": "Gated DeltaNet", "mamba2": "Mamba-2", "kda": "KDA"}


@dataclass(frozen=True)
class MambaState:
    """One request's state on one attention-TP rank.

    - `kind`: gdn, mamba2 or kda; `n_layers`: the state layers (`mamba2_cache_params.layers`);
    - `conv_shape` / `temporal_shape`: one layer's conv and SSM state (values);
    - `ssm_dtype` / `ssm_bytes`: the SSM state's element (the conv state is bf16, 2 B)."""

    kind: str
    n_layers: int
    conv_shape: tuple[int, int]
    temporal_shape: tuple[int, int, int]
    ssm_dtype: str
    ssm_bytes: int

    @property
    def conv_bytes_per_layer(self) -> int:
        return prod(self.conv_shape) * CONV_BYTES

    @property
    def ssm_bytes_per_layer(self) -> int:
        return prod(self.temporal_shape) * self.ssm_bytes

    @property
    def per_request_bytes(self) -> int:
        """`mamba_cache_per_req`: (conv + SSM bytes of one layer) x state layers."""
        return (self.conv_bytes_per_layer + self.ssm_bytes_per_layer) * self.n_layers


def _divide(n: int, tp: int, what: str) -> int:
    """`distributed/utils.py` `divide`: SGLang asserts n % tp == 0."""
    if n % tp:
        raise KvcalcError(
            f"SGLang 0.5.23 cannot split the {what} ({n}) over tp {tp} (distributed/utils.divide asserts it)",
            field="tp",
            value=tp,
            form=MESSAGE,
        )
    return n // tp


def state_kind(model: ModelSpec) -> str | None:
    """The state SGLang 0.5.23 keeps for `model`'s linear layers (`STATE_KINDS`), None when kvcalc
    does not know SGLang's state for its model type."""
    return STATE_KINDS.get(model.model_type or "")


def mamba_state(model: ModelSpec, tp: int = 1, ssm_dtype: str = "float32") -> MambaState:
    """One request's state on one rank (`MambaState`), per SGLang 0.5.23's shapes (module doc).

    Qwen3.5-27B at tp 1 (48 GDN layers, 16 key heads, 48 value heads, 128 x 128, kernel 4):
    conv (128 x 48 + 2 x 16 x 128, 3) = (10,240, 3) x 2 B = 61,440 B; SSM (48, 128, 128) x 4 B =
    3,145,728 B; x 48 = 153,944,064 B. Raises `KvcalcError` (field `model`) for a model type
    kvcalc does not know SGLang's state of or a config without the sizes; (field `tp`) for a tp
    SGLang cannot divide by; (field `mamba_ssm_dtype`) for a dtype SGLang does not take."""
    if ssm_dtype not in SSM_DTYPES:
        raise KvcalcError(
            f"must be one of {', '.join(SSM_DTYPES)}, got '{ssm_dtype}'",
            field="mamba_ssm_dtype",
            option="--mamba-ssm-dtype",
            value=ssm_dtype,
            form=OPTION_SAYS,
        )
    kind = state_kind(model)
    kinds = {layer.kind for layer in model.layers if layer.keeps_state}
    wanted = "mamba" if kind == "mamba2" else "linear"
    if kind is None or kinds != {wanted}:
        raise KvcalcError(
            f"{model.name}: kvcalc does not know SGLang 0.5.23's state for model type "
            f"'{model.model_type}' with {', '.join(sorted(kinds)) or 'no'} state layers "
            f"(it knows {', '.join(sorted(STATE_KINDS))}); use --engine ideal",
            field="model",
            value=model.name,
            form=MESSAGE,
        )
    n_layers = sum(1 for layer in model.layers if layer.keeps_state)
    if kind == "kda":
        heads, dim, kernel = _sizes(
            model, ("linear_num_value_heads", "linear_value_head_dim", "linear_conv_kernel_dim")
        )
        conv: tuple[int, int] = (kernel - 1, 3 * _divide(heads * dim, tp, "KDA projection"))
        temporal = (_divide(heads, tp, "KDA heads"), dim, dim)
    else:
        if kind == "gdn":
            hk, hv, dk, dv, kernel = _sizes(
                model,
                (
                    "linear_num_key_heads",
                    "linear_num_value_heads",
                    "linear_key_head_dim",
                    "linear_value_head_dim",
                    "linear_conv_kernel_dim",
                ),
            )
            groups, heads, head_dim, state = hk, hv, dv, dk
        else:
            groups, heads, head_dim, state, kernel = _sizes(
                model, ("mamba_n_groups", "mamba_n_heads", "mamba_head_dim", "mamba_d_state", "mamba_d_conv")
            )
        if groups % tp:
            groups += tp - groups  # extra_groups_for_head_shards
        conv_dim = heads * head_dim + 2 * groups * state
        conv = (_divide(conv_dim, tp, f"{KIND_NAMES[kind]} conv channels"), kernel - 1)
        temporal = (_divide(heads, tp, f"{KIND_NAMES[kind]} heads"), head_dim, state)
    return MambaState(kind, n_layers, conv, temporal, ssm_dtype, SSM_DTYPES[ssm_dtype])


def _sizes(model: ModelSpec, names: tuple[str, ...]) -> tuple[int, ...]:
    values = tuple(getattr(model, n) for n in names)
    missing = [n for n, v in zip(names, values, strict=True) if v is None]
    if missing:
        raise KvcalcError(
            f"{model.name}: SGLang's state needs {', '.join(missing)}, which the config does not give",
            field="model",
            value=model.name,
            form=MESSAGE,
        )
    return tuple(int(v) for v in values)


def check_ratio(ratio: float) -> None:
    """Raise `KvcalcError` (field `mamba_full_memory_ratio`) unless ratio > 0 (SGLang divides
    by 1 + ratio and needs a positive state budget)."""
    if not ratio > 0:  # NaN too
        raise KvcalcError(
            f"must be above 0 (state memory per byte of full-attention KV memory), got {ratio:g}",
            field="mamba_full_memory_ratio",
            option="--mamba-full-memory-ratio",
            value=ratio,
            form=OPTION_SAYS,
        )


def split_budget(
    budget_bytes: int,
    per_request_bytes: int,
    *,
    ratio: float = DEFAULT_MAMBA_FULL_MEMORY_RATIO,
    max_mamba_cache_size: int | None = None,
) -> tuple[int, int]:
    """(max_mamba_cache_size, bytes left for the attention pool) from the static budget, as
    `_handle_max_mamba_cache` and `_profile_available_bytes` compute them in float GiB:
    rest = budget / 2^30; K = int((rest x r / (1 + r) x 2^30 - per_req) // per_req) (or the given
    `max_mamba_cache_size`); left = int((rest - (K + 1) x per_req / 2^30) x 2^30).

    Qwen3.5-27B tp 1, 80 GiB: rest = 80.0; 80 x 0.9 / 1.9 x 2^30 = 40,689,163,856.8; K =
    int((40,689,163,856.8 - 153,944,064) // 153,944,064) = 263; left = 85,899,345,920 - 264 x
    153,944,064 = 45,258,113,024 B.

    Raises `KvcalcError` (field `kv_memory_bytes`) where SGLang fails at start-up: no state slot
    ("Not enough GPU memory for hybrid (mamba/linear-attention) state cache"), or no memory left
    ("Loaded weights leave no GPU memory for the KV cache")."""
    rest = budget_bytes / GIB
    if max_mamba_cache_size is None:
        check_ratio(ratio)
        mamba_budget_bytes = rest * ratio / (1 + ratio) * GIB
        k = int((mamba_budget_bytes - per_request_bytes) // per_request_bytes)
    else:
        k = max_mamba_cache_size
    if k <= 0:
        raise KvcalcError(
            f"SGLang would fail at start-up: Not enough GPU memory for hybrid (mamba/linear-attention) "
            f"state cache. Computed max_mamba_cache_size={k} (total_rest_memory={rest:.2f} GB, "
            f"mamba_cache_per_req={per_request_bytes / (1 << 20):.2f} MB)",
            field="kv_memory_bytes",
            value=budget_bytes,
            form=MESSAGE,
        )
    left = rest - (k + 1) * per_request_bytes / GIB
    if left <= 0:
        raise KvcalcError(
            f"SGLang would fail at start-up: {k + 1:,} state slots of {per_request_bytes:,} B leave no memory "
            f"of the {budget_bytes:,} B budget for the KV cache",
            field="kv_memory_bytes",
            value=budget_bytes,
            form=MESSAGE,
        )
    return k, int(left * GIB)


def slots_per_request(disable_radix_cache: bool = False) -> int:
    """`_calculate_mamba_ratio`: 1 without the radix cache, else 3 + 2 tracking slots of the
    default `extra_buffer` strategy (overlap schedule on)."""
    return 1 if disable_radix_cache else BASE_SLOTS_PER_REQUEST + EXTRA_BUFFER_TRACKING_SLOTS


def max_running_requests(
    tokens: int, context_len: int, max_mamba_cache_size: int, *, disable_radix_cache: bool = False
) -> tuple[int, str | None]:
    """(max_running_requests, SGLang's warning when the state slots cap it) per
    `resolve_max_num_reqs` with no `--max-running-requests`: min(max(min(int(tokens / context_len
    x 512), 4096), 2048), tokens // 2, K // ratio). Raises `KvcalcError` when it is 0 ("Hybrid
    (mamba/linear-attention) state cache is too small to serve any requests")."""
    estimated = max(min(int(tokens / context_len * MAX_REQS_SCALE), MAX_REQS_HIGH), MAX_REQS_LOW)
    reqs = min(estimated, tokens // 2)
    ratio = slots_per_request(disable_radix_cache)
    cap = max_mamba_cache_size // ratio
    warning = None
    if cap < reqs:
        warning = (
            f"max_running_requests is capped to {cap} by the mamba state cache (max_mamba_cache_size="
            f"{max_mamba_cache_size}, {ratio} state slots per request). To raise it: increase "
            "--mamba-full-memory-ratio or --max-mamba-cache-size, or halve the state size with "
            "--mamba-ssm-dtype bfloat16."
        )
    reqs = min(reqs, cap)
    if reqs <= 0:
        raise KvcalcError(
            f"SGLang would fail at start-up: Hybrid (mamba/linear-attention) state cache is too small to "
            f"serve any requests. max_mamba_cache_size={max_mamba_cache_size}, mamba_ratio={ratio}, "
            f"resulting max_num_reqs={reqs}",
            field="kv_memory_bytes",
            value=max_mamba_cache_size,
            form=MESSAGE,
        )
    return reqs, warning


def state_pool_bytes(state: MambaState, max_mamba_cache_size: int) -> tuple[int, int]:
    """(conv bytes, SSM bytes) the `MambaPool` allocates: every buffer (layers, K + 1, *shape)."""
    slots = (max_mamba_cache_size + 1) * state.n_layers
    return slots * state.conv_bytes_per_layer, slots * state.ssm_bytes_per_layer


def mamba_log_line(state: MambaState, max_mamba_cache_size: int) -> str:
    """`MambaPool.__init__`'s line without speculative decoding (memory_pool.py 1002-1010)."""
    conv, ssm = state_pool_bytes(state, max_mamba_cache_size)
    return (
        f"Mamba Cache is allocated. max_mamba_cache_size: {max_mamba_cache_size}, "
        f"conv_state size: {conv / GIB:.2f}GB, ssm_state size: {ssm / GIB:.2f}GB "
    )


def state_note(state: MambaState) -> str:
    """What kvcalc assumed about the state, for the result's notes."""
    return (
        f"{KIND_NAMES[state.kind]} state per request: {state.n_layers} layers x (conv {state.conv_shape} "
        f"{CONV_DTYPE} {state.conv_bytes_per_layer:,} B + SSM {state.temporal_shape} {state.ssm_dtype} "
        f"{state.ssm_bytes_per_layer:,} B) = {state.per_request_bytes:,} B (SGLang's MambaPool, beside the "
        "HybridLinearKVPool of the full-attention layers)"
    )


@dataclass(frozen=True)
class MambaOptions:
    """SGLang's state-pool options: `--mamba-full-memory-ratio`, `--max-mamba-cache-size`,
    `--mamba-ssm-dtype` (float32: SGLang's default and what Qwen3.5 / Nemotron-3-Super's configs
    say), `--disable-radix-cache` (one state slot a request instead of 5)."""

    full_memory_ratio: float = DEFAULT_MAMBA_FULL_MEMORY_RATIO
    max_mamba_cache_size: int | None = None
    ssm_dtype: str = "float32"
    disable_radix_cache: bool = False


#: SGLang's defaults (`capacity`'s default `mamba`)
DEFAULT_OPTIONS = MambaOptions()


def check_options(options: MambaOptions) -> None:
    """Raise `KvcalcError` for options SGLang refuses, whatever the model: a ratio not above 0
    (`check_ratio`), an SSM dtype `--mamba-ssm-dtype` does not take, a `--max-mamba-cache-size`
    below 1."""
    check_ratio(options.full_memory_ratio)
    if options.ssm_dtype not in SSM_DTYPES:
        raise KvcalcError(
            f"must be one of {', '.join(SSM_DTYPES)}, got '{options.ssm_dtype}'",
            field="mamba_ssm_dtype",
            option="--mamba-ssm-dtype",
            value=options.ssm_dtype,
            form=OPTION_SAYS,
        )
    if options.max_mamba_cache_size is not None and options.max_mamba_cache_size < 1:
        raise KvcalcError(
            f"must be at least 1 (state slots), got {options.max_mamba_cache_size}",
            field="max_mamba_cache_size",
            option="--max-mamba-cache-size",
            value=options.max_mamba_cache_size,
            form=OPTION_SAYS,
        )


@dataclass(frozen=True)
class StateSlots:
    """The `MambaPool` SGLang builds: `state` per request, `max_mamba_cache_size` slots (+1
    padding), `state_bytes` allocated, beside `n_attention_layers` full-attention layers."""

    state: MambaState
    max_mamba_cache_size: int
    n_attention_layers: int

    @property
    def state_bytes(self) -> int:
        return sum(state_pool_bytes(self.state, self.max_mamba_cache_size))


def plan_state(
    model: ModelSpec, budget_bytes: int, tp: int = 1, options: MambaOptions = DEFAULT_OPTIONS
) -> tuple[StateSlots, int]:
    """(the state pool, bytes left for the attention pool) of `model` under a static budget of
    `budget_bytes` per rank (`mamba_state`, `split_budget`)."""
    state = mamba_state(model, tp, options.ssm_dtype)
    k, left = split_budget(
        budget_bytes,
        state.per_request_bytes,
        ratio=options.full_memory_ratio,
        max_mamba_cache_size=options.max_mamba_cache_size,
    )
    n_attention = sum(1 for layer in model.layers if layer.caches_kv)
    return StateSlots(state, k, n_attention), left


def _slots_and_left(budget_bytes: int, per_req: int, options: MambaOptions) -> tuple[int, int]:
    """`split_budget` without its checks: (max_mamba_cache_size, bytes left), each monotone in the
    budget while the other is held (the slots by the budget; the bytes left within one slot count)."""
    rest = budget_bytes / GIB
    if options.max_mamba_cache_size is not None:
        k = options.max_mamba_cache_size
    else:
        k = int((rest * options.full_memory_ratio / (1 + options.full_memory_ratio) * GIB - per_req) // per_req)
    return k, int((rest - (k + 1) * per_req / GIB) * GIB)


def least_budget(
    model: ModelSpec,
    *,
    tp: int,
    cell_bytes: int,
    page_size: int,
    need_tokens: int,
    need_requests: int,
    context_len: int,
    options: MambaOptions = DEFAULT_OPTIONS,
) -> int:
    """The least static budget per rank under which SGLang 0.5.23's split leaves a token pool of
    at least `need_tokens` and admits `need_requests` (`max_running_requests`). The tokens left are
    not monotone in the budget (each new state slot takes a whole request's state), so the search
    walks the slot counts: within one count K the bytes left grow with the budget, and a
    bisection finds the least budget there; the first K that works gives the answer."""
    check_ratio(options.full_memory_ratio)
    per_req = mamba_state(model, tp, options.ssm_dtype).per_request_bytes
    ratio = slots_per_request(options.disable_radix_cache)

    def ok(budget: int) -> bool:
        k, left = _slots_and_left(budget, per_req, options)
        tokens = left // cell_bytes // page_size * page_size if left > 0 else 0
        if k <= 0 or tokens <= 0:
            return False
        estimated = max(min(int(tokens / context_len * MAX_REQS_SCALE), MAX_REQS_HIGH), MAX_REQS_LOW)
        return tokens >= need_tokens and min(estimated, tokens // 2, k // ratio) >= need_requests

    def least(lo: int, hi: int) -> int:  # ok(hi); the least ok budget in (lo, hi], ok monotone there
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if ok(mid) else (mid, hi)
        return hi

    def first_with_slots(k: int) -> int:  # the least budget that gives at least k slots
        lo, hi = 0, per_req * (k + 2) * 4
        while _slots_and_left(hi, per_req, options)[0] < k:
            hi *= 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if _slots_and_left(mid, per_req, options)[0] >= k else (mid, hi)
        return hi

    if options.max_mamba_cache_size is not None:
        hi = (options.max_mamba_cache_size + 1) * per_req + (need_tokens + page_size) * cell_bytes
        while not ok(hi):
            hi *= 2
        return least(0, hi)
    r = options.full_memory_ratio
    # a slot count K leaves at most about per_req x ((K + 2) / r + 1) bytes: start below the first K that can
    k = max(1, ratio * need_requests, int(need_tokens * cell_bytes * r / per_req - r) - 3)
    while True:
        lo, hi = first_with_slots(k), first_with_slots(k + 1)
        if ok(hi - 1):
            return least(lo - 1, hi - 1) if not ok(lo) else lo
        k += 1
