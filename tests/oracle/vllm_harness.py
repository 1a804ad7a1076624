"""Drive vLLM's own KV-cache sizing code on a CPU, and kvcalc's vLLM profile beside it.

vLLM's side (the oracle): the per-layer KV cache specs a model's attention layers build
(`vllm/model_executor/layers/attention/attention.py` `Attention.get_kv_cache_spec`,
`mla_attention.py` `MLAAttention.get_kv_cache_spec`, `chunked_local_attention.py`), then the
engine core's KV cache initialisation (`vllm/v1/engine/core.py` `EngineCore._initialize_kv_caches`):

- 0.33: `kv_cache_planning.get_global_kv_cache_groups`, `get_kv_cache_configs` (the start-up
  memory check, the null block, the estimated maximum length), `kv_cache_utils.
  generate_scheduler_kv_cache_config`, `get_kv_cache_capacity` (the "GPU KV cache size" and
  "Maximum concurrency" figures);
- 0.11: `kv_cache_utils.get_kv_cache_configs` (which checks memory and logs the figures itself),
  `get_max_concurrency_for_kv_cache_config`.

Nothing is reimplemented: the harness only builds what those functions take. What is not vLLM's
code, and why:

- the model's geometry (layer kinds, KV heads, head sizes, windows, MLA latent) is read from
  kvcalc's `ModelSpec` (the config readers are tested against the published configs elsewhere);
  KV heads per rank are max(1, heads // tp) as `ModelConfig.get_num_kv_heads` gives them;
- `VllmConfig` is vLLM's own class, built on vLLM's CPU platform (`VLLM_TARGET_DEVICE=cpu`: the
  CUDA platform needs the compiled extensions), with a stand-in `model_config` that carries only
  what the sizing code reads (`max_model_len`, `original_max_model_len`, `dtype`,
  `supports_kv_cache_grouping`); the scheduler's `async_scheduling` and `max_num_batched_tokens`
  are set as `vllm serve` on a large GPU sets them;
- the sliding-window block size: `Attention.get_kv_cache_spec` (0.33) lets the backend pick it
  (`_largest_kernel_block_within`); the backend is FlashAttention on Hopper, whose kernel block
  sizes are `MultipleOf(16)` (`FlashAttentionBackend.get_supported_kernel_block_sizes`), declared
  here by a stand-in backend class since the real one imports CUDA kernels;
- the MLA block size is the one the case gives (the backend forcing it is chosen by the CUDA
  platform, which does not load on a CPU); kvcalc is told the matching backend;
- the KV cache layout: FlashAttention's NHD (`CacheConfig.kv_cache_layout`), which the engine
  core resolves from the workers' backends.

Only this module imports vllm; it is imported by `tests/oracle/test_vllm_oracle.py` after the
test has checked that vllm is importable.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from types import SimpleNamespace

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # vLLM's CPU platform: no CUDA driver needed
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import torch  # noqa: E402
import vllm  # noqa: E402
import vllm.platforms  # noqa: E402

if vllm.platforms._current_platform is None:  # 0.11 infers CPU only from a CPU build: name it
    from vllm.platforms.cpu import CpuPlatform

    vllm.platforms._current_platform = CpuPlatform()
from vllm.config import VllmConfig  # noqa: E402

VLLM_VERSION = vllm.__version__
#: kvcalc's name for the vLLM release installed ('0.33', '0.11')
KVCALC_VERSION = ".".join(VLLM_VERSION.split(".")[:2])

from vllm.v1 import kv_cache_interface as kvi  # noqa: E402

if KVCALC_VERSION == "0.11":
    from vllm.v1.core import kv_cache_utils as planning  # noqa: E402
else:
    from vllm.v1.core import kv_cache_planning as planning  # noqa: E402
from vllm.v1.core import kv_cache_utils  # noqa: E402

TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.bfloat16}  # fp32 served as bf16


@dataclass
class Figures:
    """What one side makes of one case: blocks, the logged token and concurrency figures, or the
    start-up refusal (and, when refused for length, the estimated maximum model length)."""

    num_blocks: int | None = None
    tokens: int | None = None
    concurrency: float | None = None
    refused: str | None = None
    estimated_max_len: int | None = None
    extra: dict = field(default_factory=dict)


class _FlashAttentionOnHopper:
    """Stand-in for `vllm/v1/attention/backends/flash_attn.py` `FlashAttentionBackend`: its
    kernel block sizes on Hopper (no FA4 fp8 / head-size-256 special cases) and no spec change."""

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None):
        from vllm.v1.attention.backend import MultipleOf

        return [MultipleOf(16)]

    @staticmethod
    def customize_spec(spec):
        return spec


def make_vllm_config(*, max_model_len: int, block_size: int, kv_cache_dtype: str, model_dtype: torch.dtype,
                     tp: int, max_num_batched_tokens: int = 8192, async_scheduling: bool = True,
                     hybrid_allocator: bool = True) -> VllmConfig:
    """vLLM's `VllmConfig` for one case (CPU platform), with a stand-in model config."""
    from vllm.config import CacheConfig

    cfg = VllmConfig(cache_config=CacheConfig(block_size=16, cache_dtype=kv_cache_dtype))
    cfg.cache_config.block_size = block_size  # after the CPU platform's checks (0.11's refuses 64 without IPEX)
    cfg.model_config = SimpleNamespace(max_model_len=max_model_len, original_max_model_len=max_model_len,
                                       dtype=model_dtype, supports_kv_cache_grouping=False, use_mla=False)
    cfg.scheduler_config.max_num_batched_tokens = max_num_batched_tokens
    cfg.scheduler_config.async_scheduling = async_scheduling
    cfg.scheduler_config.disable_hybrid_kv_cache_manager = not hybrid_allocator
    cfg.parallel_config.tensor_parallel_size = tp
    if hasattr(cfg.cache_config, "kv_cache_layout"):
        cfg.cache_config.kv_cache_layout = "NHD"
    return cfg


def _sliding_block_size(cfg: VllmConfig, spec_kwargs: dict, window: int) -> int:
    """0.33 `Attention.get_kv_cache_spec`: the backend picks a sliding layer's block size."""
    if KVCALC_VERSION == "0.11":
        return cfg.cache_config.block_size
    from vllm.model_executor.layers.attention.attention import _largest_kernel_block_within

    one = kvi.SlidingWindowSpec(**{**spec_kwargs, "block_size": 1}, sliding_window=window)
    per_token = one.real_page_size_bytes
    shared_page = getattr(cfg.cache_config, "skip_page_size_padded", None)
    budget = shared_page or per_token * cfg.cache_config.block_size
    return _largest_kernel_block_within(_FlashAttentionOnHopper, per_token, budget, cfg.cache_config.block_size, one)


def layer_specs(model, cfg: VllmConfig, kv_cache_dtype: str, tp: int) -> dict:
    """{layer name: KVCacheSpec} as the model's attention layers build them in this vLLM.

    `model`: kvcalc `ModelSpec`; full -> FullAttentionSpec, sliding -> SlidingWindowSpec
    (Llama-4's chunked layers, `model_type` llama4*, -> ChunkedLocalAttentionSpec), mla ->
    MLAAttentionSpec. Raises `NotImplementedError` for Mamba / linear-attention layers.
    """
    try:
        from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype

        dtype = kv_cache_dtype_str_to_dtype(kv_cache_dtype, cfg.model_config)
    except ImportError:  # 0.11: `GPUModelRunner.__init__` (`kv_cache_dtype`)
        from vllm.utils import STR_DTYPE_TO_TORCH_DTYPE

        dtype = cfg.model_config.dtype if kv_cache_dtype == "auto" else STR_DTYPE_TO_TORCH_DTYPE[kv_cache_dtype]
    block_size = cfg.cache_config.block_size
    quant = {}
    if hasattr(kvi, "get_kv_quant_mode"):
        quant = {"kv_quant_mode": kvi.get_kv_quant_mode(kv_cache_dtype)}
    chunked = (model.model_type or "").startswith("llama4")
    specs = {}
    for i, layer in enumerate(model.layers):
        name = f"model.layers.{i}.self_attn.attn"
        if layer.kind == "mla":
            mla = dict(quant, max_tp_shards=1) if quant else {}  # 0.33 `MLAAttention.get_kv_cache_spec`
            specs[name] = kvi.MLAAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=layer.head_dim_k,
                                               dtype=dtype, cache_dtype_str=kv_cache_dtype, **mla)
            continue
        if layer.kind not in ("full", "sliding"):
            raise NotImplementedError(f"{model.name}: {layer.kind} layers (MambaSpec) are not built by the harness")
        kwargs = dict(block_size=block_size, num_kv_heads=max(1, layer.n_kv_heads // tp), head_size=layer.head_dim_k,
                      dtype=dtype, **quant)
        if layer.head_dim_v != layer.head_dim_k:
            kwargs["head_size_v"] = layer.head_dim_v
        if layer.kind == "full":
            specs[name] = kvi.FullAttentionSpec(**kwargs)
        elif chunked:
            specs[name] = kvi.ChunkedLocalAttentionSpec(**kwargs, attention_chunk_size=layer.window)
        else:
            kwargs["block_size"] = _sliding_block_size(cfg, kwargs, layer.window)
            specs[name] = kvi.SlidingWindowSpec(**kwargs, sliding_window=layer.window)
    return specs


_ESTIMATED = re.compile(r"estimated maximum model length is (\d+)")


def run_vllm(model, *, kv_memory_bytes: int, max_model_len: int, tp: int, kv_cache_dtype: str, block_size: int = 16,
             max_num_batched_tokens: int = 8192, async_scheduling: bool = True) -> Figures:
    """vLLM's figures for one case: the engine core's KV cache initialisation with
    `kv_memory_bytes` available on every one of the `tp` ranks."""
    cfg = make_vllm_config(max_model_len=max_model_len, block_size=block_size, kv_cache_dtype=kv_cache_dtype,
                           model_dtype=TORCH_DTYPES.get(model.dtype, torch.bfloat16), tp=tp,
                           max_num_batched_tokens=max_num_batched_tokens, async_scheduling=async_scheduling)
    specs = [layer_specs(model, cfg, kv_cache_dtype, tp) for _ in range(tp)]
    memory = [kv_memory_bytes] * tp
    try:
        if KVCALC_VERSION == "0.11":
            configs = planning.get_kv_cache_configs(cfg, specs, memory)
        else:
            groups = planning.get_global_kv_cache_groups(cfg, specs)
            configs = planning.get_kv_cache_configs(cfg, specs, memory, groups)
    except ValueError as e:
        m = _ESTIMATED.search(str(e))
        return Figures(refused=str(e), estimated_max_len=int(m.group(1)) if m else None)
    sched = kv_cache_utils.generate_scheduler_kv_cache_config(configs)
    if KVCALC_VERSION == "0.11":
        conc = kv_cache_utils.get_max_concurrency_for_kv_cache_config(cfg, sched)
        tokens = sched.num_blocks // len(sched.kv_cache_groups) * min(
            g.kv_cache_spec.block_size for g in sched.kv_cache_groups)  # _report_kv_cache_config
    else:
        tokens, conc = kv_cache_utils.get_kv_cache_capacity(cfg, sched)
    return Figures(num_blocks=sched.num_blocks, tokens=tokens, concurrency=conc,
                   extra={"groups": len(sched.kv_cache_groups),
                          "block_sizes": sorted({g.kv_cache_spec.block_size for g in sched.kv_cache_groups})})


def run_kvcalc(model, *, kv_memory_bytes: int, max_model_len: int, tp: int, kv_cache_dtype: str, block_size: int = 16,
               max_num_batched_tokens: int = 8192, async_scheduling: bool = True,
               attention_backend: str | None = None) -> Figures:
    """kvcalc's vLLM profile for the same case, through `kvcalc.capacity` (as the CLI runs it)."""
    import warnings

    import kvcalc
    from kvcalc.engines.profile import VllmOptions
    from kvcalc.errors import KvcalcError

    opts = VllmOptions(version=KVCALC_VERSION, block_size=block_size, max_num_batched_tokens=max_num_batched_tokens,
                       async_scheduling=async_scheduling, attention_backend=attention_backend,
                       compute_capability="9.0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            r = kvcalc.capacity(model, engine="vllm", kv_memory_bytes=kv_memory_bytes, max_model_len=max_model_len,
                                kv_dtype=kv_cache_dtype, tp=tp, options=opts)
        except KvcalcError as e:
            m = _ESTIMATED.search(str(e))
            return Figures(refused=str(e), estimated_max_len=int(m.group(1)) if m else None)
    refusal = next((str(w.message) for w in caught if "refuse" in str(w.message)), None)
    m = _ESTIMATED.search(refusal or "")
    return Figures(num_blocks=r.num_gpu_blocks, tokens=r.kv_cache_tokens, concurrency=r.max_concurrency,
                   refused=refusal, estimated_max_len=int(m.group(1)) if m else None)


# ---------------------------------------------------------------------------------------------
# The grid and the comparison

#: the models: kvcalc's bundled configs (configs/models), each from its published config.json
MODELS = ("llama-3.1-8b", "llama-3.1-70b", "qwen3-8b", "mistral-7b-v0.1", "gemma-2-9b", "gemma-3-1b", "gemma-3-27b",
          "gpt-oss-20b", "deepseek-v2-lite", "deepseek-v3", "qwen3-next-80b-a3b", "llama-4-scout")
GIB = 2**30
#: per-rank KV budgets, bytes (1 B: nothing fits, the "No available memory" refusal; 6.51 GiB: gpt-oss-20b's figure in issue 10), plus per case the
#: budget of exactly one request and one byte less (`one_request_bytes`)
BUDGETS = (1, GIB // 2, int(6.51 * GIB), 40 * GIB)
LENGTHS = (4096, 32768, 131072)
TPS = (1, 4)
KV_DTYPES = ("auto", "fp8")
#: the MLA backend the cases name (the CUDA platform that would pick it does not load on a CPU)
MLA_BACKEND, MLA_BLOCK_SIZE = "FLASHMLA", 64


@dataclass(frozen=True)
class Case:
    model: str
    kv_memory_bytes: int | str  # bytes, or 'one' / 'one-1': one request's budget (and one byte less)
    max_model_len: int
    tp: int
    kv_cache_dtype: str

    @property
    def id(self) -> str:
        mem = self.kv_memory_bytes
        if not isinstance(mem, str):
            mem = f"{mem / GIB:g}GiB" if mem >= 2**20 else f"{mem}B"
        return f"{self.model}-{mem}-L{self.max_model_len}-tp{self.tp}-{self.kv_cache_dtype}"


def grid() -> list[Case]:
    """Every case: models x budgets x lengths (up to the model's limit) x tp x KV dtype."""
    import kvcalc

    cases = []
    for name in MODELS:
        model = kvcalc.load_model(name)
        for L in LENGTHS:
            if model.context_limit is not None and L > model.context_limit:
                continue
            for tp in TPS:
                for dtype in KV_DTYPES:
                    for mem in (*BUDGETS, "one", "one-1"):
                        cases.append(Case(name, mem, L, tp, dtype))
    return cases


def one_request_bytes(model, case: Case, **kw) -> int:
    """The smallest per-rank budget vLLM starts with for one request of max_model_len, from
    vLLM's own functions: 0.33 `get_kv_cache_configs` checks the budget less the null block
    (`_pool_bytes_per_block_from_builder`) against `_max_memory_usage_bytes_from_groups`; 0.11
    `check_enough_kv_cache_memory` checks it against `max_memory_usage_bytes`."""
    cfg = make_vllm_config(max_model_len=case.max_model_len, kv_cache_dtype=case.kv_cache_dtype,
                           model_dtype=TORCH_DTYPES.get(model.dtype, torch.bfloat16), tp=case.tp,
                           block_size=kw.get("block_size", 16))
    specs = layer_specs(model, cfg, case.kv_cache_dtype, case.tp)
    if KVCALC_VERSION == "0.11":
        return planning.max_memory_usage_bytes(cfg, specs.values())
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder

    builder = get_kv_cache_config_builder(cfg)
    groups = planning.get_global_kv_cache_groups(cfg, [specs])
    return (planning._max_memory_usage_bytes_from_groups(builder, cfg, groups)
            + planning._pool_bytes_per_block_from_builder(builder, cfg, groups))


def _options(model) -> dict:
    if any(layer.kind == "mla" for layer in model.layers):
        return {"block_size": MLA_BLOCK_SIZE}
    return {}


def _same_float(a: float | None, b: float | None) -> bool:
    return a is None and b is None or (a is not None and b is not None and abs(a - b) <= 1e-12 * max(1.0, abs(a)))


@dataclass
class Outcome:
    """One case compared: status 'match', 'mismatch' (with the fields that differ) or 'refused'
    (kvcalc refuses the model or option on purpose; `reason` says why)."""

    case: Case
    status: str
    vllm: Figures | None = None
    kvcalc: Figures | None = None
    differs: tuple[str, ...] = ()
    reason: str = ""


def _message(text: str | None) -> str | None:
    if text is None:
        return None
    return text.removeprefix("vLLM would refuse to start: ").removeprefix("vLLM would fail at start-up: ")


def compare(case: Case) -> Outcome:
    """Run one case on both sides and compare blocks, tokens, concurrency, the refusal, its text
    and the estimated maximum length."""
    import kvcalc
    from kvcalc.errors import KvcalcError

    model = kvcalc.load_model(case.model)
    opts = _options(model)
    try:
        specs_ok = layer_specs(model, make_vllm_config(max_model_len=case.max_model_len, block_size=16,
                                                       kv_cache_dtype=case.kv_cache_dtype, model_dtype=torch.bfloat16,
                                                       tp=case.tp), case.kv_cache_dtype, case.tp)
    except NotImplementedError as e:
        specs_ok, why = None, str(e)
    mem = case.kv_memory_bytes
    if isinstance(mem, str):
        if specs_ok is None:
            mem = 40 * GIB
        else:
            mem = one_request_bytes(model, case, **opts) - (1 if mem == "one-1" else 0)
    backend = MLA_BACKEND if opts else None
    k = run_kvcalc(model, kv_memory_bytes=mem, max_model_len=case.max_model_len, tp=case.tp,
                   kv_cache_dtype=case.kv_cache_dtype, attention_backend=backend, **opts)
    if specs_ok is None:
        return Outcome(case, "refused", kvcalc=k, reason=f"{why}; kvcalc: {k.refused}")
    v = run_vllm(model, kv_memory_bytes=mem, max_model_len=case.max_model_len, tp=case.tp,
                 kv_cache_dtype=case.kv_cache_dtype, **opts)
    if k.refused and k.num_blocks is None and v.refused is None:
        return Outcome(case, "refused", vllm=v, kvcalc=k, reason=k.refused)
    differs = []
    if (v.refused is None) != (k.refused is None):
        differs.append("refusal")
    elif v.refused is not None:
        if v.estimated_max_len != k.estimated_max_len:
            differs.append("estimated_max_len")
        if _message(v.refused) != _message(k.refused):
            differs.append("message")
    if v.refused is None:
        for name in ("num_blocks", "tokens"):
            if getattr(v, name) != getattr(k, name):
                differs.append(name)
        if not _same_float(v.concurrency, k.concurrency):
            differs.append("concurrency")
    return Outcome(case, "mismatch" if differs else "match", vllm=v, kvcalc=k, differs=tuple(differs))


def main() -> None:
    """Print every mismatch and the totals (`python tests/oracle/vllm_harness.py`)."""
    import collections
    import time
    import warnings

    warnings.simplefilter("ignore")
    start = time.time()
    outcomes = [compare(c) for c in grid()]
    counts = collections.Counter(o.status for o in outcomes)
    kinds = collections.Counter()
    for o in outcomes:
        if o.status == "mismatch":
            kinds[(o.case.model, o.differs)] += 1
            print(f"MISMATCH {o.case.id} {o.differs}\n  vllm   {o.vllm}\n  kvcalc {o.kvcalc}")
        elif o.status == "refused":
            print(f"REFUSED  {o.case.id}: {o.reason[:200]}")
    figures_only = sum(o.status == "match" or (o.status == "mismatch" and o.differs == ("message",)) for o in outcomes)
    print(f"vLLM {VLLM_VERSION}: {len(outcomes)} cases, {dict(counts)} in {time.time() - start:.0f} s; "
          f"{figures_only} match in every figure (the refusal text aside)")
    for (model, differs), n in sorted(kinds.items()):
        print(f"  {model}: {', '.join(differs)} x {n}")


if __name__ == "__main__":
    main()
