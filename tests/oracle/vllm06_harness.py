"""Drive vLLM 0.6's V0 KV-cache sizing code on a CPU, and kvcalc's `--vllm-version 0.6` beside it.

vLLM's side (the oracle), vLLM 0.6.6.post1's own functions:

- `vllm/worker/cache_engine.py` `CacheEngine.get_cache_block_size`: block_size x KV heads per
  rank x head size x 2 (K and V) x attention layers x dtype bytes, from vLLM's `ModelConfig`
  methods (`get_head_size`: 256 for DeepSeek-V2/V3, "FlashAttention supports only head_size 32,
  64, 128, 256, we need to pad head_size 192 to 256"; `get_num_kv_heads`,
  `get_num_layers_by_block_type`) and `CacheConfig` (`cache_dtype` through vLLM's
  `STR_DTYPE_TO_TORCH_DTYPE`, `get_dtype_size`);
- `vllm/worker/worker.py` `Worker.determine_num_available_blocks`: num_gpu_blocks =
  int(available_kv_cache_memory // cache_block_size), num_cpu_blocks = int(swap_space_bytes //
  cache_block_size), and its memory report (the "the rest of the memory reserved for KV Cache is
  X.XXGiB." clause);
- `vllm/executor/gpu_executor.py` `GPUExecutor.initialize_cache`: the lines "# GPU blocks: N,
  # CPU blocks: M" and "Maximum concurrency for L tokens per request: X.XXx";
- `vllm/worker/worker.py` `raise_if_cache_size_invalid` (what `Worker.initialize_cache` calls
  with the same arguments): "No available memory for the cache blocks", and the max seq len
  check against num_gpu_blocks x block_size;
- `vllm/config.py` `_get_and_verify_dtype` (the dtype of `--dtype auto`: fp32 checkpoints in fp16,
  Gemma-2 in bf16) and `_get_and_verify_max_len` (the max_model_len check and its message).

Not vLLM's, and why:

- the HF config: a transformers `PretrainedConfig` carrying the fields vLLM's methods read
  (model_type, layers, heads, KV heads, head_dim, hidden size, max_position_embeddings,
  torch_dtype, rope_scaling), from kvcalc's `ModelSpec` of the bundled config; for DeepSeek's
  MLA models num_key_value_heads = num_attention_heads, as their published config.json states
  (16 for V2-Lite, 128 for V3);
- `ModelConfig` is vLLM's class, made without its `__init__` (which loads the config from a
  model folder or the Hub and inspects the model classes in a subprocess) and given the config,
  `dtype` and `max_model_len` from vLLM's own functions above, `is_attention_free` and
  `is_hybrid` False (the grid has no Mamba model: kvcalc refuses V0 hybrids);
- the GPU profiling: `Worker.determine_num_available_blocks` runs on a stand-in worker whose
  total memory is 2^50 B, `gpu_memory_utilization` 1.0 and the profiled non-KV memory
  total - budget, so vLLM's `available_kv_cache_memory` is the budget exactly (as a float:
  exact below 2^53); torch.cuda's calls there and its closing `gc.collect()` are no-ops.

Only this module imports vllm (0.6.x); `tests/oracle/test_vllm06_oracle.py` imports it after
checking vllm 0.6 is importable. Summary: `python tests/oracle/vllm06_harness.py`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
from dataclasses import dataclass, field
from types import SimpleNamespace

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")

import torch
import vllm
from transformers import PretrainedConfig
from vllm import config as vcfg
from vllm.config import CacheConfig, ModelConfig
from vllm.executor.gpu_executor import GPUExecutor
from vllm.worker import worker as vworker

VLLM_VERSION = vllm.__version__
if not VLLM_VERSION.startswith("0.6."):
    raise ImportError(f"vllm06_harness drives vLLM 0.6.x (V0), not vllm {VLLM_VERSION}")
KVCALC_VERSION = "0.6"

GIB = 2**30
TOTAL_BYTES = 2**50  # the stand-in GPU's memory: budgets below it leave floats exact
TORCH_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def hf_config(model) -> PretrainedConfig:
    """The HF config fields vLLM 0.6's ModelConfig methods read, from kvcalc's spec."""
    att = [layer for layer in model.layers if layer.caches_kv]
    d = {
        "model_type": model.model_type or "llama",
        "num_hidden_layers": model.n_layers,
        "num_attention_heads": model.n_heads,
        "hidden_size": model.hidden_size,
        "max_position_embeddings": model.max_position_embeddings,
    }
    if model.attention == "mla":
        d["num_key_value_heads"] = model.n_heads
    else:
        d["num_key_value_heads"] = att[0].n_kv_heads
        d["head_dim"] = att[0].head_dim_k
    rs = model.rope_scaling
    if rs is not None:
        d["rope_scaling"] = {
            k: v
            for k, v in (
                ("rope_type", rs.rope_type),
                ("factor", rs.factor),
                ("original_max_position_embeddings", rs.original_max_position_embeddings),
            )
            if v is not None
        }
    cfg = PretrainedConfig(**d)
    cfg.torch_dtype = TORCH_DTYPES.get(model.dtype, torch.bfloat16)
    return cfg


def model_config(model, max_model_len: int, tp: int = 1) -> ModelConfig:
    """vLLM's ModelConfig for `model` (without its __init__: see the module docstring), checked
    against the tensor parallel size by its own `verify_with_parallel_config` (heads % tp)."""
    mc = object.__new__(ModelConfig)
    mc.hf_config = mc.hf_text_config = hf_config(model)
    mc.is_attention_free = False
    mc.is_hybrid = False
    mc.dtype = vcfg._get_and_verify_dtype(mc.hf_config, "auto")
    mc.max_model_len = vcfg._get_and_verify_max_len(
        mc.hf_config, max_model_len, disable_sliding_window=False, sliding_window_len=None
    )
    mc.verify_with_parallel_config(SimpleNamespace(tensor_parallel_size=tp, pipeline_parallel_size=1))
    return mc


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def _captured(*names: str):
    handler = _Capture()
    loggers = [logging.getLogger(n) for n in names]
    old = [(lg.level, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
        lg.propagate = False
    try:
        yield handler.lines
    finally:
        for lg, (level, prop) in zip(loggers, old, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)
            lg.propagate = prop


@dataclass
class Figures:
    num_blocks: int | None = None
    cpu_blocks: int | None = None
    block_bytes: int | None = None
    concurrency_line: str | None = None
    refused: str | None = None
    lines: list[str] = field(default_factory=list)


_REST = re.compile(r"the rest of the memory reserved for KV Cache is [\d.]+GiB\.")


def run_vllm(
    model,
    *,
    kv_memory_bytes: int,
    max_model_len: int,
    tp: int,
    kv_cache_dtype: str,
    block_size: int = 16,
    swap_space_gib: float | None = None,
) -> Figures:
    """vLLM 0.6's figures for one case: its block size, block counts, lines and refusal.
    `swap_space_gib` None: `vllm serve`'s default (`EngineArgs.swap_space`, 4 GiB)."""
    from vllm.engine.arg_utils import EngineArgs

    if swap_space_gib is None:
        swap_space_gib = EngineArgs.swap_space
    try:
        mc = model_config(model, max_model_len, tp)
    except ValueError as e:
        return Figures(refused=str(e))
    cc = CacheConfig(
        block_size=block_size, gpu_memory_utilization=1.0, swap_space=swap_space_gib, cache_dtype=kv_cache_dtype
    )
    pc = SimpleNamespace(rank=0, tensor_parallel_size=tp, pipeline_parallel_size=1)
    result = SimpleNamespace(
        non_kv_cache_memory_in_bytes=TOTAL_BYTES - kv_memory_bytes,
        profile_time=0.0,
        weights_memory_in_bytes=0,
        non_torch_increase_in_bytes=0,
        torch_peak_increase_in_bytes=0,
    )

    @contextlib.contextmanager
    def profiling(**_kw):
        yield result

    worker = SimpleNamespace(
        init_gpu_memory=TOTAL_BYTES,
        cache_config=cc,
        model_config=mc,
        parallel_config=pc,
        model_runner=SimpleNamespace(model_memory_usage=0, profile_run=lambda: None, lora_manager=None),
        _assert_memory_footprint_increased_during_profiling=lambda: None,
    )
    worker.get_cache_block_size_bytes = lambda: vworker.Worker.get_cache_block_size_bytes(worker)
    patches = {
        "empty_cache": lambda: None,
        "reset_peak_memory_stats": lambda *a: None,
        "synchronize": lambda *a: None,
        "mem_get_info": lambda *a: (TOTAL_BYTES, TOTAL_BYTES),
    }
    saved = {k: getattr(torch.cuda, k) for k in patches}
    saved_profiling, saved_gc = vworker.memory_profiling, vworker.gc
    try:
        for k, f in patches.items():
            setattr(torch.cuda, k, f)
        vworker.memory_profiling = profiling
        vworker.gc = SimpleNamespace(collect=lambda: 0)  # its closing gc.collect() frees memory, sizes nothing
        with _captured("vllm.worker.worker", "vllm.executor.gpu_executor") as logged:
            gpu, cpu = vworker.Worker.determine_num_available_blocks(worker)
            executor = SimpleNamespace(
                cache_config=cc,
                model_config=mc,
                driver_worker=SimpleNamespace(
                    # Worker.initialize_cache: raise_if_cache_size_invalid(num_gpu_blocks, self.cache_config.block_size,
                    # self.model_config.is_attention_free, self.model_config.max_model_len), then the GPU allocation
                    initialize_cache=lambda g, c: vworker.raise_if_cache_size_invalid(
                        g, cc.block_size, mc.is_attention_free, mc.max_model_len
                    )
                ),
            )
            refused = None
            try:
                GPUExecutor.initialize_cache(executor, gpu, cpu)
            except ValueError as e:
                refused = str(e)
    finally:
        for k, f in saved.items():
            setattr(torch.cuda, k, f)
        vworker.memory_profiling, vworker.gc = saved_profiling, saved_gc
    rest = [m.group(0) for ln in logged if (m := _REST.search(ln))]
    lines = rest + [ln for ln in logged if ln.startswith(("# GPU blocks", "Maximum concurrency"))]
    return Figures(
        num_blocks=gpu,
        cpu_blocks=cpu,
        block_bytes=worker.get_cache_block_size_bytes(),
        concurrency_line=lines[-1] if lines else None,
        refused=refused,
        lines=lines,
    )


def run_kvcalc(
    model,
    *,
    kv_memory_bytes: int,
    max_model_len: int,
    tp: int,
    kv_cache_dtype: str,
    block_size: int = 16,
    swap_space_gib: float | None = None,
) -> Figures:
    """kvcalc's `--vllm-version 0.6` for the same case, through `kvcalc.capacity` (as the CLI runs it);
    `swap_space_gib` None: kvcalc's own default (no --swap-space)."""
    import warnings

    import kvcalc
    from kvcalc.engines.profile import VllmOptions
    from kvcalc.errors import KvcalcError

    opts = VllmOptions(
        version="0.6",
        block_size=block_size,
        swap_space_bytes=None if swap_space_gib is None else int(swap_space_gib * GIB),
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            r = kvcalc.capacity(
                model,
                engine="vllm",
                kv_memory_bytes=kv_memory_bytes,
                max_model_len=max_model_len,
                kv_dtype=kv_cache_dtype,
                tp=tp,
                options=opts,
            )
        except KvcalcError as e:
            return Figures(refused=str(e))
    refusal = next((str(w.message) for w in caught if "refuse" in str(w.message)), None)
    return Figures(
        num_blocks=r.num_gpu_blocks,
        cpu_blocks=r.num_cpu_blocks,
        block_bytes=r.page_size_bytes,
        concurrency_line=r.log_lines[-1],
        refused=refusal,
        lines=list(r.log_lines),
    )


# ---------------------------------------------------------------------------------------------
# The grid and the comparison

#: kvcalc's bundled models whose architecture vLLM 0.6.6 serves (no Qwen3, Gemma-3, gpt-oss,
#: Llama-4: later releases), MLA models as V0 caches them (per head, padded to 256)
MODELS = (
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-2-7b",
    "mistral-7b-v0.1",
    "mixtral-8x7b",
    "qwen2.5-7b",
    "gemma-2-9b",
    "phi-3-mini",
    "falcon-7b",
    "gpt2",
    "deepseek-v2-lite",
    "deepseek-v3",
)
#: per-rank budgets: 1 B (no block), 0.5 GiB, 6.51 GiB, 40 GiB
BUDGETS = (1, GIB // 2, int(6.51 * GIB), 40 * GIB)
#: lengths: each model's limit decides (gpt2 1,024, gemma-2 8,192, phi-3-mini 4,096 refuse the longer ones)
LENGTHS = (1024, 4096, 32768, 131072)
TPS = (1, 4)
KV_DTYPES = ("auto", "fp8")


@dataclass(frozen=True)
class Case:
    model: str
    kv_memory_bytes: int
    max_model_len: int
    tp: int
    kv_cache_dtype: str

    @property
    def id(self) -> str:
        mem = self.kv_memory_bytes
        mem_s = f"{mem / GIB:g}GiB" if mem >= 2**20 else f"{mem}B"
        return f"{self.model}-{mem_s}-L{self.max_model_len}-tp{self.tp}-{self.kv_cache_dtype}"


def grid() -> list[Case]:
    return [
        Case(name, mem, L, tp, dtype)
        for name in MODELS
        for L in LENGTHS
        for tp in TPS
        for dtype in KV_DTYPES
        for mem in BUDGETS
    ]


def load(name: str):
    import kvcalc

    return kvcalc.load_model(name)


@dataclass
class Outcome:
    case: Case
    status: str  # match / mismatch / refused (kvcalc refuses on purpose, vLLM too)
    vllm: Figures | None = None
    kvcalc: Figures | None = None
    differs: tuple[str, ...] = ()


#: the refusals whose text kvcalc quotes: the max_model_len check, the two start-up checks
START_UP = ("User-specified max_model_len", "No available memory", "The model's max seq len")


def compare(case: Case) -> Outcome:
    """Blocks (GPU and CPU), block bytes, the logged lines, and the refusal: both refuse or
    neither, and vLLM's message inside kvcalc's."""
    model = load(case.model)
    kw = dict(
        kv_memory_bytes=case.kv_memory_bytes,
        max_model_len=case.max_model_len,
        tp=case.tp,
        kv_cache_dtype=case.kv_cache_dtype,
    )
    v = run_vllm(model, **kw)
    k = run_kvcalc(model, **kw)
    differs = []
    if (v.refused is None) != (k.refused is None):
        differs.append("refusal")
    elif (
        v.refused is not None
        and v.refused.startswith(START_UP)
        and not k.refused.startswith("--tp")
        and v.refused not in k.refused
    ):
        # vLLM's start-up texts, byte for byte; other refusals (vLLM's heads % tp check, which kvcalc makes
        # before the max_model_len check and vLLM after it): both refuse
        differs.append("message")
    if k.num_blocks is not None:  # kvcalc started (or warned): every figure
        for name in ("num_blocks", "cpu_blocks", "block_bytes"):
            if getattr(v, name) != getattr(k, name):
                differs.append(name)
        if v.lines != k.lines:
            differs.append("lines")
    return Outcome(case, "mismatch" if differs else "match", vllm=v, kvcalc=k, differs=tuple(differs))


# ---------------------------------------------------------------------------------------------
# What vLLM 0.6.6 refuses before sizing: the model's architecture, the block size

#: each bundled model's `architectures[0]` in its published config.json (kvcalc keeps the
#: model_type only; the multimodal Gemma-3 4B+ and Llama-4 checkpoints list their outer class)
ARCHITECTURES = {
    "deepseek-r1": "DeepseekV3ForCausalLM",
    "deepseek-v2-lite": "DeepseekV2ForCausalLM",
    "deepseek-v3": "DeepseekV3ForCausalLM",
    "falcon-7b": "FalconForCausalLM",
    "falcon-h1-7b": "FalconH1ForCausalLM",
    "gemma-2-9b": "Gemma2ForCausalLM",
    "gemma-3-12b": "Gemma3ForConditionalGeneration",
    "gemma-3-1b": "Gemma3ForCausalLM",
    "gemma-3-27b": "Gemma3ForConditionalGeneration",
    "gemma-3-4b": "Gemma3ForConditionalGeneration",
    "gpt-oss-120b": "GptOssForCausalLM",
    "gpt-oss-20b": "GptOssForCausalLM",
    "gpt2": "GPT2LMHeadModel",
    "jamba-1.5-mini": "JambaForCausalLM",
    "kimi-k2": "DeepseekV3ForCausalLM",
    "llama-2-70b": "LlamaForCausalLM",
    "llama-2-7b": "LlamaForCausalLM",
    "llama-3.1-405b": "LlamaForCausalLM",
    "llama-3.1-70b": "LlamaForCausalLM",
    "llama-3.1-8b": "LlamaForCausalLM",
    "llama-3.2-1b": "LlamaForCausalLM",
    "llama-3.2-3b": "LlamaForCausalLM",
    "llama-3.3-70b": "LlamaForCausalLM",
    "llama-4-scout": "Llama4ForConditionalGeneration",
    "mistral-7b-v0.1": "MistralForCausalLM",
    "mistral-nemo": "MistralForCausalLM",
    "mistral-small-24b": "MistralForCausalLM",
    "mixtral-8x7b": "MixtralForCausalLM",
    "phi-3-mini": "Phi3ForCausalLM",
    "phi-4": "Phi3ForCausalLM",
    "qwen2.5-72b": "Qwen2ForCausalLM",
    "qwen2.5-7b": "Qwen2ForCausalLM",
    "qwen3-14b": "Qwen3ForCausalLM",
    "qwen3-235b-a22b": "Qwen3MoeForCausalLM",
    "qwen3-30b-a3b": "Qwen3MoeForCausalLM",
    "qwen3-32b": "Qwen3ForCausalLM",
    "qwen3-4b": "Qwen3ForCausalLM",
    "qwen3-8b": "Qwen3ForCausalLM",
    "qwen3-next-80b-a3b": "Qwen3NextForCausalLM",
}
#: kvcalc refuses these for 0.6 with its own reason though vLLM's registry lists them
KVCALC_OWN_REFUSALS = ("jamba-1.5-mini", "kimi-k2")
#: the block sizes tried: vLLM 0.6.6's argparse choices and some outside them
BLOCK_SIZES = (1, 4, 8, 16, 24, 32, 64, 128, 256)


@dataclass
class Check:
    """One refusal check: vLLM's verdict (None: taken) beside kvcalc's."""

    id: str
    vllm: str | None
    kvcalc: str | None
    status: str = ""
    note: str = ""


def architecture_checks() -> list[Check]:
    """Each bundled model's architecture through vLLM's `ModelRegistry` (`_raise_for_unsupported`'s
    text, its first sentence) beside kvcalc's `--vllm-version 0.6` (a 40 GiB, 1,024-token case).
    Match: both take it, or both refuse and vLLM's sentence is in kvcalc's message (or, for the
    multimodal checkpoints, the same sentence with the text model's architecture name)."""
    from vllm.model_executor.models import ModelRegistry

    import kvcalc
    from kvcalc.engines.vllm import v0_6 as kv_vllm_v0
    from kvcalc.errors import KvcalcError

    supported = set(ModelRegistry.get_supported_archs())
    out = []
    for name, arch in sorted(ARCHITECTURES.items()):
        v = None
        if arch not in supported:
            try:
                ModelRegistry._raise_for_unsupported([arch])
            except ValueError as e:
                v = str(e).split(" Supported architectures:")[0]
        try:
            kvcalc.capacity(
                kvcalc.load_model(name),
                engine="vllm",
                kv_memory_bytes=40 * GIB,
                max_model_len=1024,
                options=kvcalc_options(),
            )
            k = None
        except KvcalcError as e:
            k = str(e)
        c = Check(f"arch-{name}", v, k)
        text_arch = kv_vllm_v0.UNSUPPORTED_ARCHITECTURES.get(kvcalc.load_model(name).model_type or "")
        if v is None and k is None:
            c.status = "match"
        elif v is None and name in KVCALC_OWN_REFUSALS:
            c.status, c.note = "kvcalc-refuses", "in vLLM's registry; not modelled by kvcalc for V0"
        elif v is not None and k is not None and v in k:
            c.status = "match"
        elif v is not None and k is not None and text_arch and v.replace(arch, text_arch) in k:
            c.status, c.note = "match", f"kvcalc names the text model's architecture {text_arch}"
        else:
            c.status = "mismatch"
        out.append(c)
    return out


def kvcalc_options(**kw):
    from kvcalc.engines.profile import VllmOptions

    return VllmOptions(version="0.6", **kw)


def block_size_checks() -> list[Check]:
    """Each of `BLOCK_SIZES` through vLLM's own CLI parser (`EngineArgs.add_cli_args`) and
    `CacheConfig` on CUDA (`current_platform.is_cuda()` stood in as True), beside kvcalc's
    `--vllm-version 0.6 --block-size B`. Match: both refuse with vLLM's text inside kvcalc's, or both take it."""
    import io

    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils import FlexibleArgumentParser

    import kvcalc
    from kvcalc.errors import KvcalcError

    out = []
    for b in BLOCK_SIZES:
        v = None
        parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                parser.parse_args(["--block-size", str(b)])
            except SystemExit:
                v = err.getvalue().strip().splitlines()[-1].split("error: ", 1)[1]
        if v is None:
            saved = vcfg.current_platform
            vcfg.current_platform = SimpleNamespace(
                is_cuda=lambda: True,
                is_rocm=lambda: False,
                is_neuron=lambda: False,
                is_hpu=lambda: False,
                is_cpu=lambda: False,
                is_tpu=lambda: False,
                is_xpu=lambda: False,
            )
            try:
                CacheConfig(block_size=b, gpu_memory_utilization=0.9, swap_space=4, cache_dtype="auto")
            except ValueError as e:
                v = str(e)
            finally:
                vcfg.current_platform = saved
        try:
            kvcalc.capacity(
                kvcalc.load_model("llama-3.1-8b"),
                engine="vllm",
                kv_memory_bytes=GIB,
                max_model_len=1024,
                options=kvcalc_options(block_size=b),
            )
            k = None
        except KvcalcError as e:
            k = str(e)
        ok = (v is None and k is None) or (v is not None and k is not None and v in k)
        out.append(Check(f"block-size-{b}", v, k, "match" if ok else "mismatch"))
    return out


def swap_default_check() -> Check:
    """vLLM's `--swap-space` default (`EngineArgs.swap_space`, GiB, and the parser's) beside kvcalc's."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils import FlexibleArgumentParser

    parsed = EngineArgs.add_cli_args(FlexibleArgumentParser()).parse_args([]).swap_space
    v = f"{int(parsed * GIB)} B"
    k = f"{kvcalc_options().swap_space_bytes} B"
    return Check("swap-space-default", v, k, "match" if v == k and EngineArgs.swap_space == parsed else "mismatch")


def refusal_checks() -> list[Check]:
    return architecture_checks() + block_size_checks() + [swap_default_check()]


def main() -> None:
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
    refused = sum(o.vllm.refused is not None for o in outcomes)
    print(
        f"vLLM {VLLM_VERSION}: {len(outcomes)} cases, {dict(counts)}, vLLM refused {refused}, "
        f"in {time.time() - start:.0f} s"
    )
    for (model, differs), n in sorted(kinds.items()):
        print(f"  {model}: {', '.join(differs)} x {n}")
    checks = refusal_checks()
    for c in checks:
        if c.status != "match" or c.note:
            print(f"{c.status.upper()} {c.id}: vllm {c.vllm!r}\n  kvcalc {c.kvcalc!r} {c.note}")
    print(f"refusal checks: {len(checks)}, {dict(collections.Counter(c.status for c in checks))}")


if __name__ == "__main__":
    main()
