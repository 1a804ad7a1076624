"""Runs SGLang 0.5.23's own token-pool sizing on a CPU (no GPU, no server) for the attention pools
the other two harnesses leave out: the plain MHA / GQA pool, the MLA pool, the sparse-MLA (DSA) pool
with its index keys, and the hybrid sliding / full SWA pool (issue 19 items 2 and 4).

Needs SGLang 0.5.23's Python code and its imports (docs/engine-oracles.md:
`/work/oracle/venv-sglang-0.5.23`). What runs is SGLang's, unchanged:

- `configs/model_config.py` `ModelConfig` on the config.json (`is_hybrid_swa`, `attention_arch`,
  `get_num_kv_heads` / `get_swa_num_kv_heads`, the SWA layer ids) and
  `model_runner_components/layer_setup.py` `resolve_layer_indices` (the `ModelLayerInfo`);
- `model_executor/pool_configurator.py` `create_memory_pool_configurator` (which configurator a
  model gets), `DefaultPoolConfigurator.__init__` / `_compute_cell_size` /
  `_compute_dsa_indexer_cell_size` / `calculate_pool_sizes`, `HybridSWAPoolConfigurator.__init__` /
  `calculate_pool_sizes` / `_solve_pool_sizes` / `validate_swa_pool_size` and `MemoryPoolConfig`'s
  "Not enough memory" check;
- `mem_cache/kv_cache_configurator.py` `calculate_mla_kv_cache_dim` (the DSA latent row per backend);
- `mem_cache/kv_cache_dtype.py` `configure_kv_cache_dtype` (`--kv-cache-dtype` -> torch dtype);
- `arg_groups/overrides.py` `_dsa_kv_cache_dtype_default` (bf16 / fp8_e4m3 only) and
  `_dsa_split_backend_resolution` (the DSA backends by GPU and KV dtype);
- `arg_groups/kv_cache_hook.py` `handle_mxfp8_kv_cache_compatibility` (mxfp8 needs Blackwell); not
  `handle_kv4_compatibility` (it needs the resolved attention backends: the fp4 types run on
  Blackwell only, where it admits them);
- `models/registry.py` `_ModelRegistry._normalize_archs` over the `EntryClass` names of
  `srt/models/*.py` (read from the source, not imported: importing every model needs a GPU build),
  for the architectures SGLang has no model class for;
- the model class's `get_attention_sliding_window_size` where it has one (Gemma-4, gpt-oss:
  `sliding_window - 1`), as `load_model_utils.resolve_sliding_window_size` calls it.

What is stood in for (SGLang reads it from its runtime context, built from `ServerArgs` on a GPU
host), each a device query or a resolved server argument, never sizing arithmetic:

- the GPU: `torch.cuda.get_device_capability` answers (9, 0) (Hopper) or (10, 0) (Blackwell), and
  the platform is CUDA (`utils/common.py` `is_cuda`; `runtime_context.override_platform`, SGLang's
  own scoped override of its platform probes: is_sm90 / is_sm100 / is_blackwell, not HIP / NPU);
- the resolved server arguments of a default launch: `--page-size` as given (DSA: 64 x
  `get_dsa_index_kpool`, `arg_groups/model_overrides/deepseek_v2.py`), `--swa-full-tokens-ratio`
  0.8 (`arg_groups/fields/schedule.py` fallback) or as given, no speculative decoding, no HiSparse,
  no unified memory, no PD disaggregation, no KV sharding, no `--max-running-requests` (so the SWA
  model gets `HybridSWAPoolConfigurator`, not `SWARequestCapPoolConfigurator`), PP 1;
- the parallel layout: attention TP = tp / dp (`--enable-dp-attention`), no DCP / CP.
The config.json copies lose their `auto_map` (SGLang's own config classes are used).
"""

from __future__ import annotations

import ast
import functools
import json
import logging
import tempfile
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import sglang
import torch
from sglang.srt.arg_groups import kv_cache_hook as kch
from sglang.srt.arg_groups import overrides as ov
from sglang.srt.configs import model_config as cfg_mc
from sglang.srt.configs.model_config import ModelConfig, get_dsa_index_kpool, is_deepseek_dsa
from sglang.srt.layers.cp import utils as cp_utils
from sglang.srt.layers.quantization import fp4_kv_cache_quant_method as fp4q
from sglang.srt.mem_cache import kv_cache_configurator as kcc
from sglang.srt.mem_cache import kv_cache_dtype as kvd
from sglang.srt.mem_cache import memory_pool as mp
from sglang.srt.mem_cache import page_interleave as pi
from sglang.srt.mem_cache import swa_memory_pool as smp
from sglang.srt.model_executor import pool_configurator as pc
from sglang.srt.model_executor.model_runner_components.layer_setup import resolve_layer_indices
from sglang.srt.models.registry import _ModelRegistry
from sglang.srt.runtime_context import override_platform
from sglang.srt.utils import common as sgl_common

SGLANG_VERSION = sglang.__version__
DATA = Path(__file__).parents[1] / "data"
GIB = 1 << 30
#: the GPU a case runs on: its compute capability (the only device query SGLang's sizing makes)
ARCHS = {"hopper": (9, 0), "blackwell": (10, 0), "sm120": (12, 0)}
#: the (prefill, decode) attention backends a default nvfp4 launch resolves on an MHA model
#: (`arg_groups/kv_cache_hook.py` `_NVFP4_PREFILL_BACKEND` 25-28 and
#: `handle_nvfp4_prefill_kv_dequant_dtype` 34-97: SM100 prefills the native layout on trtllm_mha,
#: SM120 an fp8 dequant workspace on flashinfer; decode trtllm_mha): a resolved server argument
NVFP4_BACKENDS = {"blackwell": ("trtllm_mha", "trtllm_mha"), "sm120": ("flashinfer", "trtllm_mha")}


def _platform(arch: str) -> dict:
    """The platform facts (`runtime_context.override_platform`, SGLang's own override of its device
    probes) of a CUDA host with the `arch` GPU."""
    major, minor = ARCHS[arch]
    return {
        "is_cuda": True,
        "is_hip": False,
        "is_npu": False,
        "is_xpu": False,
        "is_sm90": major == 9,
        "is_sm100": major == 10,
        "is_sm100_or_sm110": major in (10, 11),
        "is_sm120": major == 12,
        "is_blackwell": major >= 10,
        "device_capability": (major, minor),
    }


@functools.cache
def model_config(config_file: str) -> ModelConfig:
    """SGLang's `ModelConfig` of a published config.json (tests/data/...)."""
    data = json.loads((DATA / config_file).read_text())
    data.pop("auto_map", None)
    folder = Path(tempfile.mkdtemp(prefix="sglang-oracle-"))
    (folder / "config.json").write_text(json.dumps(data))
    return ModelConfig(str(folder))


@functools.cache
def registered_architectures() -> frozenset[str]:
    """The class names every `srt/models/*.py` lists as its `EntryClass` (what
    `import_model_classes` registers), read from SGLang's source."""
    names: set[str] = set()
    for path in (Path(sglang.__file__).parent / "srt" / "models").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "EntryClass" for t in node.targets
            ):
                value = node.value
                items = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
                names.update(i.id for i in items if isinstance(i, ast.Name))
    return frozenset(names)


@functools.cache
def _window_method(arch: str) -> ast.Module | None:
    """The model class `arch`'s `get_attention_sliding_window_size` (and the module function of
    that name it may call), from `srt/models/*.py`; None where the class has no such method."""
    name = "get_attention_sliding_window_size"
    for path in sorted((Path(sglang.__file__).parent / "srt" / "models").glob("*.py")):
        tree = ast.parse(path.read_text())
        cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == arch), None)
        if cls is None:
            continue
        method = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
        if method is None:
            return None
        helper = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
        method.name = "_method"
        method.decorator_list = []
        return ast.Module(body=[*helper, method], type_ignores=[])
    return None


def _model_class_window(mc: ModelConfig) -> int | None:
    """`load_model_utils.resolve_sliding_window_size`: the model class's
    `get_attention_sliding_window_size` where it has one, else `model_config.sliding_window_size`
    for a hybrid SWA model. The method (and the module function of that name it may call) is
    compiled from the class's own source and run on the config, as the instance would run it:
    importing the model module needs a GPU build. Gemma-4 and gpt-oss: `sliding_window - 1`."""
    module = _window_method(mc.hf_config.architectures[0])
    if module is not None:
        namespace: dict = {}
        exec(compile(module, "get_attention_sliding_window_size", "exec"), namespace)
        return namespace["_method"](SimpleNamespace(config=mc.hf_config, text_config=mc.hf_text_config))
    return mc.sliding_window_size if mc.is_hybrid_swa else None


class _Grab(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.INFO)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


def run(
    config_file: str,
    *,
    tp: int,
    dp: int,
    kv_dtype: str,
    page_size: int,
    budget_bytes: int,
    arch: str,
    swa_ratio: float | None,
    allocate: bool = False,
) -> dict:
    """SGLang's figures for one launch: the configurator it picks, its cell (bytes a token; the SWA
    pool's a float), the pool sizes `calculate_pool_sizes` returns, its log lines; or its refusal.
    `allocate`: also the pools themselves, built on the CPU by `KVCacheConfigurator`'s own
    `_build_mha_kv_pool` / `_build_mla_kv_pool` / `_build_hybrid_swa_kv_pool`: their
    "KV Cache is allocated" lines and `get_kv_size_bytes`."""
    archs = json.loads((DATA / config_file).read_text()).get("architectures") or []
    resolved = _ModelRegistry(models=dict.fromkeys(registered_architectures()))._normalize_archs(archs)
    if archs[:1] and archs[0] not in resolved:  # models/registry.py: the Transformers backend instead
        return {
            "sglang": SGLANG_VERSION,
            "error": (
                f"SGLang {SGLANG_VERSION} registers no {archs[0]}. models/registry.py _normalize_archs "
                f"falls back to {resolved[-1]} (the Transformers backend)."
            ),
        }
    mc = model_config(config_file)
    attn_tp = tp // dp
    parallel = SimpleNamespace(
        attn_tp_size=attn_tp,
        attn_dcp_size=1,
        attn_dcp_rank=0,
        dcp_enabled=False,
        attn_cp_size=1,
        attn_dp_size=dp,
        pp_size=1,
        tp_size=tp,
        enable_dsa_cache_layer_split=False,
    )
    schedule = SimpleNamespace(
        page_size=page_size,
        max_total_tokens=None,
        swa_full_tokens_ratio=0.8 if swa_ratio is None else swa_ratio,
        max_running_requests=None,
        chunked_prefill_size=8192,
        disable_overlap_schedule=False,
        prefill_only_disable_kv_cache=False,
    )
    memory = SimpleNamespace(
        enable_hisparse=False,
        enable_unified_memory=False,
        disable_radix_cache=False,
        enable_unified_cache_external_linker=False,
        enable_hierarchical_cache=False,
    )
    disagg = SimpleNamespace(disaggregation_mode="null", disaggregation_decode_extra_slots=0, enable_pdmux=False)
    spec = SimpleNamespace(speculative_algorithm=None, speculative_num_draft_tokens=None)
    kernel = SimpleNamespace(dsa_prefill_backend=None, dsa_decode_backend=None)
    exec_ = SimpleNamespace(kernel=kernel, features=SimpleNamespace(enable_memory_saver=False))
    getters = {
        "get_parallel": lambda: parallel,
        "get_schedule": lambda: schedule,
        "get_memory": lambda: memory,
        "get_disagg": lambda: disagg,
        "get_spec": lambda: spec,
        "get_exec": lambda: exec_,
    }
    patches = [
        mock.patch.object(module, name, fn)
        for module in (pc, kcc, cp_utils, pi, mp, smp)
        for name, fn in getters.items()
        if hasattr(module, name)
    ]
    patches += [
        mock.patch.object(torch.cuda, "get_device_capability", lambda *_a: ARCHS[arch]),
        mock.patch.object(sgl_common, "is_cuda", lambda: True),
        mock.patch.object(kch, "resolving_view", lambda args: args),
        mock.patch.object(ov, "model_config_of", lambda _view: mc),
        mock.patch.object(pi, "get_kv_shard_group_info", lambda _kvc: (None, 1)),  # --enable-kv-cache-sharding off
        # the fp4 quant method's `configure_attention_backends_from_server_args` reads the resolved
        # backends; given here to its own `configure_attention_backends` (MHA pools only;
        # fp4_mx_block16's cell does not depend on them)
        mock.patch.object(
            fp4q.KVCacheQuantMethodBase,
            "configure_attention_backends_from_server_args",
            lambda self, _args: self.configure_attention_backends(*NVFP4_BACKENDS.get(arch, ("triton", "triton"))),
        ),
    ]
    lines: list[str] = []
    handler = _Grab(lines)
    loggers = (pc.logger, ov.logger, mp.logger, smp.logger)
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    platform = override_platform(**_platform(arch))
    platform.install()
    for p in patches:
        p.start()
    try:
        out = _run(mc, kv_dtype, page_size, budget_bytes, dp, kernel, allocate)
    except (RuntimeError, ValueError, AssertionError) as e:  # SGLang's start-up failures
        out = {"sglang": SGLANG_VERSION, "error": str(e)}
    finally:
        for p in reversed(patches):
            p.stop()
        platform.restore()
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(level)
    return {**out, "log_lines": lines}


def _run(mc: ModelConfig, kv_dtype: str, page_size: int, budget_bytes: int, dp: int, kernel, allocate: bool) -> dict:
    _, torch_dtype = kvd.configure_kv_cache_dtype(
        server_args_kv_cache_dtype=kv_dtype,
        model=None,
        model_dtype=mc.dtype,
        is_draft_worker=False,
        is_dflash=False,
        speculative_draft_attention_backend="",
    )
    out: dict = {"sglang": SGLANG_VERSION}
    kch.handle_mxfp8_kv_cache_compatibility(SimpleNamespace(kv_cache_dtype=kv_dtype))
    if is_deepseek_dsa(mc.hf_config):
        page_size = 64 * get_dsa_index_kpool(mc.hf_config)  # model_overrides/deepseek_v2.py (CUDA)
        view = SimpleNamespace(
            kv_cache_dtype=kv_dtype,
            dsa_prefill_backend=None,
            dsa_decode_backend=None,
            dsa_topk_backend=None,
            enable_hisparse=False,
            dcp_size=1,
        )
        ov._dsa_kv_cache_dtype_default(view)  # asserts bf16 / fp8_e4m3
        declared = ov._dsa_split_backend_resolution(view)
        kernel.dsa_prefill_backend = declared["dsa_prefill_backend"]
        kernel.dsa_decode_backend = declared["dsa_decode_backend"]
        out["dsa_backends"] = [kernel.dsa_prefill_backend, kernel.dsa_decode_backend]
    layer_info = resolve_layer_indices(model=SimpleNamespace(), model_config=mc, is_draft_worker=False)
    kvc = SimpleNamespace(
        kv_cache_dtype_str=kv_dtype,
        kv_cache_dtype=torch_dtype,
        model_dtype=mc.dtype,
        model_config=mc,
        layer_info=layer_info,
        pp_size=1,
        attn_dp_size=dp,
        page_size=page_size,
        sliding_window_size=_model_class_window(mc),
        spec_algorithm=SimpleNamespace(
            is_eagle=lambda: False, is_standalone=lambda: False, is_dflash_family=lambda: False, is_none=lambda: True
        ),
        spec_aux_config=SimpleNamespace(),
        is_draft_worker=False,
        fused_entry_bytes=lambda _name: None,
        server_args=SimpleNamespace(enable_hisparse=False),
        use_mla_backend=mc.attention_arch == cfg_mc.AttentionArch.MLA,
        is_hybrid_swa=mc.is_hybrid_swa,
        mambaish_config=None,
        device="cuda",
        pool_page_size=page_size,  # `pool_page_size`: page x loc_space_scale (1: no DCP)
        post_capture_kv_active=False,
        kv_shard_rank=None,
        is_hybrid_swa_compress=mc.is_hybrid_swa_compress,
        draft_swa_full_capacity=False,
    )
    if kv_dtype in ("nvfp4", "fp4_mx_block16") and not kvc.use_mla_backend:
        # `_compute_cell_size` builds the fp4 quant method (NVFP4KVCacheMethod.__init__ puts its
        # per-layer global scales on `device`): the CPU here, a device query; its
        # `compute_cell_size` is SGLang's, unchanged
        kvc.device = "cpu"
    conf = pc.create_memory_pool_configurator(kvc)
    kvc.device = "cuda"
    cfg = conf.calculate_pool_sizes(budget_bytes, page_size)
    out.update(
        configurator=type(conf).__name__,
        page_size=page_size,
        cell=conf._cell_size,
        tokens=cfg.max_total_num_tokens,
    )
    if isinstance(conf, pc.HybridSWAPoolConfigurator):
        out.update(
            full_per_token=conf._full_per_token,
            swa_per_token=conf._swa_per_token,
            full=cfg.full_max_total_num_tokens,
            swa=cfg.swa_max_total_num_tokens,
            sliding_window_size=kvc.sliding_window_size,
        )
    if allocate:
        kvc.device = "cpu"
        build = kcc.KVCacheConfigurator
        if isinstance(conf, pc.HybridSWAPoolConfigurator):
            pool = build._build_hybrid_swa_kv_pool(
                kvc,
                full_max_total_num_tokens=cfg.full_max_total_num_tokens,
                swa_max_total_num_tokens=cfg.swa_max_total_num_tokens,
                mha_pool_class=mp.MHATokenToKVPool,
            )
        elif is_deepseek_dsa(mc.hf_config):
            kvc.loc_space_scale = 1
            with mock.patch.object(kcc, "max_speculative_num_draft_tokens", lambda: None):
                pool = build._build_dsa_kv_pool(
                    kvc,
                    max_total_num_tokens=cfg.max_total_num_tokens,
                    max_running_requests=4096,
                    dsa_pool_class=mp.DSATokenToKVPool,
                )
        elif kvc.use_mla_backend:
            pool = build._build_mla_kv_pool(
                kvc, max_total_num_tokens=cfg.max_total_num_tokens, mla_pool_class=mp.MLATokenToKVPool
            )
        else:
            pool = build._build_mha_kv_pool(
                kvc, max_total_num_tokens=cfg.max_total_num_tokens, mha_pool_class=mp.MHATokenToKVPool
            )
        size = pool.get_kv_size_bytes()
        out["kv_bytes"] = [int(x) for x in size] if isinstance(size, tuple) else [int(size), 0]
        del pool
    return out


def case_id(case: dict) -> str:
    name = case["config"].split("--")[-1].split("/")[-1].removesuffix(".json")
    ratio = "" if case["swa_ratio"] is None else f"-r{case['swa_ratio']}"
    alloc = "-allocated" if case["allocate"] else ""
    return (
        f"{name}-tp{case['tp']}-dp{case['dp']}-{case['kv_dtype']}-p{case['page_size']}-"
        f"{case['arch']}-{case['budget_bytes']}{ratio}{alloc}"
    )


#: config file (tests/data/...) -> what the grid runs it with: the pool's kind, the KV dtypes
#: (`--kv-cache-dtype`), the (tp, attention dp) layouts
PLAIN_DTYPES = ("bf16", "fp8_e4m3", "fp8_e5m2", "mxfp8")
#: the fp4 types too: on MHA pools `_compute_cell_size` builds the fp4 quant method (its scales
#: put on the CPU); the SWA pool prices them by torch's element size (no quant method)
FP4_DTYPES = ("nvfp4", "fp4_mx_block16")
MHA_DTYPES = PLAIN_DTYPES + FP4_DTYPES
MLA_DTYPES = ("bf16", "fp8_e4m3", "fp8_e5m2", "mxfp8", "nvfp4", "fp4_mx_block16")
DSA_DTYPES = ("bf16", "fp8_e4m3", "fp8_e5m2")  # fp8_e5m2: SGLang's DSA assertion refuses it
CONFIGS = {
    # plain MHA / GQA (DefaultPoolConfigurator)
    "hf/Llama-3.1-8B.json": ("mha", MHA_DTYPES, ((1, 1), (8, 1), (8, 8), (16, 1))),
    "hf-configs-2026/Qwen--Qwen3-VL-8B-Instruct.json": ("mha", MHA_DTYPES, ((1, 1), (4, 1), (8, 1), (8, 2))),
    "hf-configs-2026/MiniMaxAI--MiniMax-M2.7.json": ("mha", MHA_DTYPES, ((1, 1), (4, 1), (8, 1), (8, 8))),
    # Gemma-3: sliding layers sized like full ones (not in is_hybrid_swa_model)
    "hf/gemma-3-1b-it.json": ("mha", MHA_DTYPES, ((1, 1),)),
    # MLA (DefaultPoolConfigurator, use_mla_backend)
    "hf/DeepSeek-V2-Lite-Chat.json": ("mla", MLA_DTYPES, ((1, 1), (8, 1))),
    "hf-configs-2026/moonshotai--Kimi-K2.5.json": ("mla", MLA_DTYPES, ((1, 1), (8, 1), (8, 8))),
    # sparse MLA with the indexer (DSA)
    "hf-configs-2026/deepseek-ai--DeepSeek-V3.2.json": ("dsa", DSA_DTYPES, ((1, 1), (8, 1), (8, 8))),
    "hf-configs-2026/zai-org--GLM-5.2.json": ("dsa", DSA_DTYPES, ((1, 1), (8, 1), (8, 8))),
    # hybrid sliding / full (HybridSWAPoolConfigurator)
    "hf-configs-2026/google--gemma-4-26B-A4B.json": ("swa", MHA_DTYPES, ((1, 1), (2, 1), (8, 1))),
    "hf-configs-2026/XiaomiMiMo--MiMo-V2-Flash.json": ("swa", MHA_DTYPES, ((1, 1), (4, 1), (8, 1))),
    "hf/gpt-oss-20b.json": ("swa", MHA_DTYPES, ((1, 1), (8, 1))),
    # architectures SGLang 0.5.23 registers no model class for
    "hf-configs-2026/stepfun-ai--Step-3.7-Flash.json": ("unregistered", ("bf16",), ((1, 1),)),
    "hf-configs-2026/MiniMaxAI--MiniMax-M3.json": ("unregistered", ("bf16",), ((1, 1),)),
}
#: budgets per rank: round GiB counts, an odd byte count, and ones too small for SGLang to start
BUDGETS = (20 * GIB, 57_123_456_789, 100_000)
#: the SWA pool also at 1 GiB: with --swa-full-tokens-ratio 0.1 too small for one windowed request
SWA_BUDGETS = (*BUDGETS, GIB)
#: page sizes: SGLang's default 1 and larger pages (DSA forces 64 whatever is given)
PAGES = (1, 64)


def _archs(kind: str, kv_dtype: str) -> tuple[str, ...]:
    """The GPUs a case runs on: DSA and mxfp8 on Hopper and Blackwell, nvfp4 on the MHA and SWA
    pools on SM100 and SM120 (the MHA pool's scale layouts and dequant workspace differ; the SWA
    pool has neither), the other fp4 cases on SM100, the rest on Hopper."""
    if kind == "dsa" or kv_dtype == "mxfp8":
        return ("hopper", "blackwell")
    if kv_dtype == "nvfp4" and kind in ("mha", "swa"):
        return ("blackwell", "sm120")
    return ("blackwell",) if "fp4" in kv_dtype else ("hopper",)


def grid() -> list[dict]:
    """Every config x its layouts x its dtypes x `PAGES` x `BUDGETS`; DSA and mxfp8 on Hopper and
    Blackwell (the backends and the latent row differ; mxfp8 is refused on Hopper), the fp4 types on
    Blackwell (nvfp4 on the MHA and SWA pools also on SM120), the rest on Hopper; plus every served config's pools allocated on the CPU at tp 1,
    bf16 / fp8_e4m3, a quarter GiB; SWA models also with
    --swa-full-tokens-ratio 0.1 and at 1 GiB."""
    cases = []
    for config, (kind, dtypes, layouts) in CONFIGS.items():
        ratios = (None, 0.1) if kind == "swa" else (None,)
        budgets = {"unregistered": BUDGETS[:1], "swa": SWA_BUDGETS}.get(kind, BUDGETS)
        cases += [
            {
                "config": config,
                "tp": tp,
                "dp": dp,
                "kv_dtype": d,
                "page_size": page,
                "budget_bytes": b,
                "arch": arch,
                "swa_ratio": r,
            }
            for tp, dp in layouts
            for d in dtypes
            for page in (PAGES if kind != "dsa" else (1,))
            for b in budgets
            for arch in _archs(kind, d)
            for r in ratios
        ]
    # the pools themselves, allocated on the CPU (a quarter GiB): their log lines and bytes
    cases += [
        {
            "config": config,
            "tp": 1,
            "dp": 1,
            "kv_dtype": d,
            "page_size": 1,
            "budget_bytes": GIB // 4,
            "arch": arch,
            "swa_ratio": None,
        }
        for config, (kind, _, _) in CONFIGS.items()
        if kind != "unregistered"
        for d in ("bf16", "fp8_e4m3")
        for arch in (("hopper", "blackwell") if kind == "dsa" else ("hopper",))
    ]
    return [{**case, "allocate": case["budget_bytes"] == GIB // 4} for case in cases]


FIXTURE = Path(__file__).parent / "fixtures" / "sglang_0523_pools.json"


def main() -> None:
    """Writes `FIXTURE`: SGLang's own output for every case of `grid`."""
    records = [
        {"inputs": case, "sglang": run(case["config"], **{k: v for k, v in case.items() if k != "config"})}
        for case in grid()
    ]
    FIXTURE.write_text(json.dumps(records, indent=1) + "\n")
    print(f"{len(records)} cases -> {FIXTURE}")


if __name__ == "__main__":
    main()
