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
  core resolves from the workers' backends;
- Llama-4's `attention_chunk_size` is on the stand-in model config and `VllmConfig.__post_init__`'s
  rule for it (the hybrid KV cache manager off unless vLLM's own
  `envs.VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`) is applied by the harness, citing the
  lines (`make_vllm_config`);
- hybrid Mamba / Gated-DeltaNet models (`HYBRID_ARCHS`): the stand-in model config carries the
  architecture and the HF config; vLLM's own `VllmConfig.try_verify_and_update_config` (0.11:
  the block alignment and the padded Mamba page; 0.33: Nemotron-H's float32 SSM state, the
  'align' Mamba cache mode) and 0.33's `Platform._align_hybrid_block_size` run on it; the Mamba
  layers are stand-ins of vLLM's `MambaBase` whose state is the model class's own
  `get_mamba_state_shape_from_config` / `get_mamba_state_dtype_from_config` (0.11's qwen3_next.py
  does not import on a CPU torch: its two classmethods are restated, calling vLLM's calculators);
  Gated DeltaNet's FlashInfer prefill (Hopper) is assumed, as the CUDA platform would pick it;
- the start-up lines: vLLM's own logged lines are captured ("Setting attention block size",
  "Padding mamba page size", 0.11's "disabling prefix caching", "GPU KV cache size", "Maximum
  concurrency"; the device named "GPU" as on CUDA); "Available KV cache memory" (the worker's
  GPU profiling) is formatted with vLLM's own `format_gib` / `GiB_bytes`.

Only this module imports vllm; it is imported by `tests/oracle/test_vllm_oracle.py` after the
test has checked that vllm is importable.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")  # vLLM's CPU platform: no CUDA driver needed
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import torch
import vllm
import vllm.platforms

if vllm.platforms._current_platform is None:  # 0.11 infers CPU only from a CPU build: name it
    from vllm.platforms.cpu import CpuPlatform

    vllm.platforms._current_platform = CpuPlatform()
from vllm.config import VllmConfig

VLLM_VERSION = vllm.__version__
#: kvcalc's name for the vLLM release installed ('0.33', '0.11')
KVCALC_VERSION = ".".join(VLLM_VERSION.split(".")[:2])

from vllm.v1 import kv_cache_interface as kvi  # noqa: E402  (vLLM's modules by the version installed)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: run as a script too
from published_configs import GRANITE_H_TINY, NEMOTRON_H_8B  # noqa: E402

if KVCALC_VERSION == "0.11":
    from vllm.v1.core import kv_cache_utils as planning
else:
    from vllm.v1.core import kv_cache_planning as planning
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
    lines: list[str] = field(default_factory=list)
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


def make_vllm_config(
    *,
    max_model_len: int,
    block_size: int,
    kv_cache_dtype: str,
    model_dtype: torch.dtype,
    tp: int,
    max_num_batched_tokens: int = 8192,
    async_scheduling: bool = True,
    hybrid_allocator: bool = True,
    attention_chunk_size: int | None = None,
    model=None,
) -> VllmConfig:
    """vLLM's `VllmConfig` for one case (CPU platform), with a stand-in model config.

    `attention_chunk_size` (Llama-4) goes on the model config, and vLLM's rule for it is applied
    as `VllmConfig.__post_init__` applies it (0.11 `vllm/config/__init__.py` lines 512-529, 0.33
    `vllm/config/vllm.py` lines 2235-2255: the hybrid KV cache manager is turned off unless
    `envs.VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE`, read from vLLM's own envs, whose
    default is False in 0.11 and True in 0.33). That block cannot run as vLLM's code here: the
    rest of `__post_init__` needs a real `ModelConfig` (a checkpoint's config), and the same
    block first turns the manager off on any platform without `support_hybrid_kv_cache` (CPU).
    `model` (a kvcalc `ModelSpec` with Mamba / linear layers): the stand-in also carries what
    the hybrid alignment reads (`_hybrid_model_config`), and vLLM's own
    `VllmConfig.try_verify_and_update_config` runs on it (`_align_hybrid`).
    """
    from vllm import envs
    from vllm.config import CacheConfig

    cfg = VllmConfig(cache_config=CacheConfig(block_size=16, cache_dtype=kv_cache_dtype))
    cfg.cache_config.block_size = block_size  # after the CPU platform's checks (0.11's refuses 64 without IPEX)
    # the CPU platform's own rule (0.33 `CpuPlatform.check_and_update_config`: "Reset SSM cache type
    # to float32 for accelerated GDN" on AVX-512 BF16 hosts) undone: CUDA leaves `--mamba-ssm-cache-dtype` as given
    if hasattr(cfg.cache_config, "mamba_ssm_cache_dtype"):
        cfg.cache_config.mamba_ssm_cache_dtype = "auto"
    cfg.device_config.device_type = (
        "cuda"  # the "GPU KV cache size" line names the CUDA device (`_kv_cache_device_name`)
    )
    cfg.model_config = SimpleNamespace(
        max_model_len=max_model_len,
        original_max_model_len=max_model_len,
        dtype=model_dtype,
        supports_kv_cache_grouping=False,
        use_mla=False,
        attention_chunk_size=attention_chunk_size,
    )
    cfg.scheduler_config.max_num_batched_tokens = max_num_batched_tokens
    cfg.scheduler_config.async_scheduling = async_scheduling
    if attention_chunk_size is not None and not envs.VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE:
        hybrid_allocator = False  # VllmConfig.__post_init__ (lines above): "There is a latency regression ..."
    cfg.scheduler_config.disable_hybrid_kv_cache_manager = not hybrid_allocator
    cfg.parallel_config.tensor_parallel_size = tp
    if hasattr(cfg.cache_config, "kv_cache_layout"):
        cfg.cache_config.kv_cache_layout = "NHD"
    if model is not None and _is_hybrid(model):
        _hybrid_model_config(cfg, model)
        _align_hybrid(cfg, model)
    return cfg


def _sliding_block_size(cfg: VllmConfig, spec_kwargs: dict, window: int) -> int:
    """0.33 `Attention.get_kv_cache_spec`: the backend picks a sliding layer's block size."""
    if KVCALC_VERSION == "0.11":
        return cfg.cache_config.block_size
    from vllm.model_executor.layers.attention.attention import (
        _largest_kernel_block_within,
    )

    one = kvi.SlidingWindowSpec(**{**spec_kwargs, "block_size": 1}, sliding_window=window)
    per_token = one.real_page_size_bytes
    shared_page = getattr(cfg.cache_config, "skip_page_size_padded", None)
    budget = shared_page or per_token * cfg.cache_config.block_size
    return _largest_kernel_block_within(_FlashAttentionOnHopper, per_token, budget, cfg.cache_config.block_size, one)


# ---------------------------------------------------------------------------------------------
# Hybrid attention + Mamba / Gated-DeltaNet models

#: kvcalc model type -> (vLLM architecture, module of vllm/model_executor/models, HF config field
#: -> kvcalc `ModelSpec` field) for the bundled configs, whose HF fields the stand-in carries
HYBRID_ARCHS = {
    "qwen3_next": (
        "Qwen3NextForCausalLM",
        "qwen3_next",
        {
            f: f
            for f in (
                "linear_num_key_heads",
                "linear_num_value_heads",
                "linear_key_head_dim",
                "linear_value_head_dim",
                "linear_conv_kernel_dim",
                "hidden_size",
            )
        },
    ),
    "jamba": (
        "JambaForCausalLM",
        "jamba",
        {
            "hidden_size": "hidden_size",
            "mamba_expand": "mamba_expand",
            "mamba_d_state": "mamba_d_state",
            "mamba_d_conv": "mamba_d_conv",
        },
    ),
    "nemotron_h": ("NemotronHForCausalLM", "nemotron_h", {}),
    "granitemoehybrid": ("GraniteMoeHybridForCausalLM", "granitemoehybrid", {}),
}

#: published config.json files of hybrids kvcalc has no bundled config for (the HF config the
#: stand-in carries and kvcalc reads with `model_from_hf_config`): nvidia/Nemotron-H-8B-Base-8K
#: and ibm-granite/granite-4.0-h-tiny, the one copy in tests/published_configs.py
HF_CONFIGS = {"nemotron-h-8b": NEMOTRON_H_8B, "granite-4.0-h-tiny": GRANITE_H_TINY}


def load(name: str):
    """kvcalc's `ModelSpec` of a grid model: a bundled config, or one of `HF_CONFIGS`."""
    import kvcalc

    if name in HF_CONFIGS:
        from kvcalc.load.hf import model_from_hf_config

        return model_from_hf_config(HF_CONFIGS[name], f"{name}/config.json")
    return kvcalc.load_model(name)


def _is_hybrid(model) -> bool:
    return any(layer.kind in ("mamba", "linear") for layer in model.layers)


def _model_class(model):
    """vLLM's model class for `model`, imported from its file (what `ModelRegistry.resolve_model_cls`
    returns; resolved here by name so that the registry's subprocess inspection is not needed).

    0.11's qwen3_next.py does not import on a CPU torch (its FLA ops read `triton.language.exp` at
    import, and triton is vLLM's placeholder there): the stand-in class has 0.11's two
    classmethods, calling vLLM's `MambaStateShapeCalculator` / `MambaStateDtypeCalculator` with the
    arguments `Qwen3NextForCausalLM.get_mamba_state_shape_from_config` /
    `get_mamba_state_dtype_from_config` pass (0.11 qwen3_next.py lines 1150-1171)."""
    import importlib

    arch, module, _ = HYBRID_ARCHS[model.model_type]
    try:
        return getattr(importlib.import_module(f"vllm.model_executor.models.{module}"), arch)
    except (ImportError, AttributeError):
        if not (KVCALC_VERSION == "0.11" and module == "qwen3_next"):
            raise
    from vllm.model_executor.layers.mamba.mamba_utils import (
        MambaStateDtypeCalculator,
        MambaStateShapeCalculator,
    )

    class Qwen3NextForCausalLM:  # 0.11 vllm/model_executor/models/qwen3_next.py, the two classmethods
        @classmethod
        def get_mamba_state_dtype_from_config(cls, vllm_config):
            return MambaStateDtypeCalculator.gated_delta_net_state_dtype(
                vllm_config.model_config.dtype, vllm_config.cache_config.mamba_cache_dtype
            )

        @classmethod
        def get_mamba_state_shape_from_config(cls, vllm_config):
            hf = vllm_config.model_config.hf_config
            num_spec = vllm_config.speculative_config.num_speculative_tokens if vllm_config.speculative_config else 0
            return MambaStateShapeCalculator.gated_delta_net_state_shape(
                vllm_config.parallel_config.tensor_parallel_size,
                hf.linear_num_key_heads,
                hf.linear_num_value_heads,
                hf.linear_key_head_dim,
                hf.linear_value_head_dim,
                hf.linear_conv_kernel_dim,
                num_spec,
            )

    return Qwen3NextForCausalLM


def _hybrid_model_config(cfg: VllmConfig, model) -> None:
    """What vLLM's hybrid code reads of the model config, on the stand-in: the architecture,
    the HF config (a published config.json, or the bundled config's fields under their HF
    names), `is_hybrid`, and `get_num_kv_heads` / `get_head_size` (max(1, kv heads // tp), as
    `ModelConfig.get_num_kv_heads` gives them, and the attention layers' head_dim)."""
    from vllm.model_executor.models import ModelRegistry

    arch, _, fields = HYBRID_ARCHS[model.model_type]
    hf = (
        dict(HF_CONFIGS[model.name])
        if model.name in HF_CONFIGS
        else {hf_name: getattr(model, ours) for hf_name, ours in fields.items()}
    )
    hf.setdefault("model_type", model.model_type)
    attention = next(layer for layer in model.layers if layer.kind == "full")
    mc = cfg.model_config
    mc.architecture, mc.architectures = arch, [arch]
    mc.hf_config = mc.hf_text_config = SimpleNamespace(**hf)
    mc.is_hybrid, mc.convert_type, mc.runner_type = True, "none", "generate"
    mc.get_num_kv_heads = lambda parallel_config: max(1, attention.n_kv_heads // parallel_config.tensor_parallel_size)
    mc.get_head_size = lambda: attention.head_dim_k
    model_cls = _model_class(model)
    ModelRegistry.resolve_model_cls = lambda architectures, model_config=None: (model_cls, arch)


class _StandInMambaLayer:
    """A Mamba / Gated-DeltaNet layer as `get_layers_from_vllm_config(vllm_config, MambaBase)`
    finds it (an instance of vLLM's `MambaBase`, made by `_mamba_layer`): its state shape and
    dtypes from the model class, and the prefill checkpoint alignment it declares."""


def _mamba_layer(cfg: VllmConfig, model, model_cls):
    """A `MambaBase` subclass instance standing in for one of `model`'s Mamba layers. Its state
    is the model class's (`get_mamba_state_shape_from_config`, `get_mamba_state_dtype_from_config`),
    which is what the layer's own `get_state_shape` / `get_state_dtype` compute. 0.33's Gated
    DeltaNet declares FlashInfer's checkpoint alignment in 'align' mode
    (`QwenGatedDeltaNet.__init__`, `gdn_attn.FLASHINFER_GDN_CHECKPOINT_ALIGNMENT`: the prefill
    backend FlashInfer picks on Hopper, `_resolve_gdn_prefill_backend`, which needs the CUDA
    platform); Mamba-1 and Mamba-2 layers declare none (`MambaBase.get_prefill_checkpoint_alignment`)."""
    from vllm.model_executor.layers.mamba.abstract import MambaBase

    kind = (
        "gdn"
        if model.model_type == "qwen3_next"
        else "mamba2"
        if model.mamba_n_groups is not None or model.model_type in ("nemotron_h", "granitemoehybrid")
        else "mamba1"
    )
    align = None
    if kind == "gdn" and KVCALC_VERSION != "0.11" and cfg.cache_config.mamba_cache_mode == "align":
        from vllm.v1.attention.backends.gdn_attn import (
            FLASHINFER_GDN_CHECKPOINT_ALIGNMENT,
        )

        align = FLASHINFER_GDN_CHECKPOINT_ALIGNMENT
    mamba_types = {"gdn": "gdn_attn", "mamba2": "mamba2", "mamba1": "mamba1"}

    class Layer(MambaBase, _StandInMambaLayer):
        def __init__(self):
            pass

        def get_state_shape(self):
            return model_cls.get_mamba_state_shape_from_config(cfg)

        def get_state_dtype(self):
            return model_cls.get_mamba_state_dtype_from_config(cfg)

        @property
        def mamba_type(self):
            try:
                from vllm.v1.attention.backends.registry import (
                    MambaAttentionBackendEnum,
                )

                return MambaAttentionBackendEnum[mamba_types[kind].upper()]
            except (ImportError, KeyError):
                return mamba_types[kind]

        def get_prefill_checkpoint_alignment(self):
            return align

        def get_attn_backend(self):
            raise NotImplementedError

    layer = Layer()
    layer.kind = kind
    return layer


def _mamba_layers(cfg: VllmConfig, model) -> dict:
    """{layer name: stand-in Mamba layer} for `model`'s Mamba / linear layers, registered in
    `compilation_config.static_forward_context` where vLLM's `get_layers_from_vllm_config` looks."""
    model_cls = _model_class(model)
    ctx = cfg.compilation_config.static_forward_context
    out = {}
    for i, layer in enumerate(model.layers):
        if layer.kind in ("mamba", "linear"):
            name = f"model.layers.{i}.mixer"
            out[name] = ctx[name] = _mamba_layer(cfg, model, model_cls)
    return out


class _HopperPlatform:
    """Made a subclass of vLLM's `Platform` in `_align_hybrid`: the attention backends of a
    CUDA build's hybrid model are FlashAttention on Hopper (`_FlashAttentionOnHopper`)."""


def _align_hybrid(cfg: VllmConfig, model) -> None:
    """vLLM's own hybrid config steps on `cfg`: `VllmConfig.try_verify_and_update_config` (the
    model's `MODELS_CONFIG_MAP` hook, e.g. Nemotron-H's float32 SSM state in 0.33, then
    `HybridAttentionMambaModelConfig.verify_and_update_config`: in 0.11 prefix caching off and the
    block-size alignment with the Mamba page padded; in 0.33 `MambaModelConfig`'s Mamba cache
    mode), then in 0.33 `Platform._align_hybrid_block_size` (`vllm/platforms/interface.py`, run by
    `update_block_size_for_backend` once the layers exist) with FlashAttention as the backend.
    Prefix caching is on in 0.33 (`vllm serve`'s default for these models,
    `ModelConfig.is_prefix_caching_supported`); 0.11 turns it off itself."""
    from vllm.platforms.interface import Platform

    cfg.cache_config.enable_prefix_caching = KVCALC_VERSION != "0.11"
    if hasattr(cfg.scheduler_config, "enable_chunked_prefill"):
        cfg.scheduler_config.enable_chunked_prefill = True
    cfg.try_verify_and_update_config()
    if KVCALC_VERSION == "0.11":
        return
    _mamba_layers(cfg, model)

    class Hopper(Platform, _HopperPlatform):
        @classmethod
        def _find_non_ssm_backends(cls, vllm_config):
            return [_FlashAttentionOnHopper]

    Hopper._align_hybrid_block_size(cfg, _FlashAttentionOnHopper)


def mamba_specs(cfg: VllmConfig, model) -> dict:
    """{layer name: MambaSpec} of `model`'s Mamba / linear layers as this vLLM builds them.

    0.33: `MambaBase.get_kv_cache_spec` (vLLM's, called on the stand-in layer), then the
    layer's own replace: Mamba-2 (`MambaMixer2.get_kv_cache_spec`: one prefill checkpoint
    block, alignment 1), Gated DeltaNet exporting checkpoints (`QwenGatedDeltaNet.get_kv_cache_spec`:
    one block, alignment `get_mamba_prefill_checkpoint_grid`). 0.11
    (`GPUModelRunner.get_kv_cache_spec`, `vllm/v1/worker/gpu_model_runner.py` lines 4112-4138):
    MambaSpec(shapes, dtypes, block_size=max_model_len, page_size_padded, mamba_type).
    """
    from dataclasses import replace

    from vllm.model_executor.layers.mamba.abstract import MambaBase

    layers = _mamba_layers(cfg, model)
    specs = {}
    for name, layer in layers.items():
        if KVCALC_VERSION == "0.11":
            specs[name] = kvi.MambaSpec(
                shapes=layer.get_state_shape(),
                dtypes=layer.get_state_dtype(),
                block_size=cfg.model_config.max_model_len,
                page_size_padded=cfg.cache_config.mamba_page_size_padded,
                mamba_type=layer.mamba_type,
                num_speculative_blocks=0,
            )
            continue
        spec = MambaBase.get_kv_cache_spec(layer, cfg)
        if layer.kind == "mamba2":
            spec = replace(spec, num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=1)
        elif layer.kind == "gdn" and layer.get_prefill_checkpoint_alignment() is not None:
            from vllm.model_executor.layers.mamba.abstract import (
                get_mamba_prefill_checkpoint_alignment,
                get_mamba_prefill_checkpoint_grid,
            )

            if get_mamba_prefill_checkpoint_alignment(cfg) is not None:
                spec = replace(
                    spec,
                    num_prefill_checkpoint_blocks=1,
                    prefill_checkpoint_alignment=get_mamba_prefill_checkpoint_grid(cfg),
                )
        specs[name] = spec
    return specs


def layer_specs(model, cfg: VllmConfig, kv_cache_dtype: str, tp: int) -> dict:
    """{layer name: KVCacheSpec} as the model's attention layers build them in this vLLM.

    `model`: kvcalc `ModelSpec`; full -> FullAttentionSpec, sliding -> SlidingWindowSpec
    (Llama-4's chunked layers, `model_type` llama4*, -> ChunkedLocalAttentionSpec), mla ->
    MLAAttentionSpec, Mamba / linear (Gated DeltaNet) -> MambaSpec (`mamba_specs`); mlp layers
    have no spec. For a hybrid `cfg` must come from `make_vllm_config(model=...)` (the aligned
    block size and the padded Mamba page).
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
    mamba = mamba_specs(cfg, model) if _is_hybrid(model) else {}
    for i, layer in enumerate(model.layers):
        name = f"model.layers.{i}.self_attn.attn"
        if layer.kind in ("mamba", "linear"):
            name = f"model.layers.{i}.mixer"
            specs[name] = mamba[name]
            continue
        if layer.kind == "mlp":
            continue
        if layer.kind == "mla":
            mla = dict(quant, max_tp_shards=1) if quant else {}  # 0.33 `MLAAttention.get_kv_cache_spec`
            specs[name] = kvi.MLAAttentionSpec(
                block_size=block_size,
                num_kv_heads=1,
                head_size=layer.head_dim_k,
                dtype=dtype,
                cache_dtype_str=kv_cache_dtype,
                **mla,
            )
            continue
        if layer.kind not in ("full", "sliding"):
            raise NotImplementedError(f"{model.name}: {layer.kind} layers are not built by the harness")
        kwargs = dict(
            block_size=block_size,
            num_kv_heads=max(1, layer.n_kv_heads // tp),
            head_size=layer.head_dim_k,
            dtype=dtype,
            **quant,
        )
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


def run_vllm(
    model,
    *,
    kv_memory_bytes: int,
    max_model_len: int,
    tp: int,
    kv_cache_dtype: str,
    block_size: int = 16,
    max_num_batched_tokens: int = 8192,
    async_scheduling: bool = True,
) -> Figures:
    """vLLM's figures for one case: the engine core's KV cache initialisation with
    `kv_memory_bytes` available on every one of the `tp` ranks."""
    with _LogCapture() as log:
        cfg = case_config(
            model,
            max_model_len=max_model_len,
            block_size=block_size,
            kv_cache_dtype=kv_cache_dtype,
            tp=tp,
            max_num_batched_tokens=max_num_batched_tokens,
            async_scheduling=async_scheduling,
        )
    config_lines = [
        line
        for line in log.lines
        if line.startswith(
            ("Setting attention block", "Padding mamba", "Hybrid or mamba-based model detected: disabling")
        )
    ]
    specs = [layer_specs(model, cfg, kv_cache_dtype, tp) for _ in range(tp)]
    memory = [kv_memory_bytes] * tp
    try:
        with _LogCapture() as log:
            if KVCALC_VERSION == "0.11":
                configs = planning.get_kv_cache_configs(cfg, specs, memory)  # logs the figures itself
            else:
                groups = planning.get_global_kv_cache_groups(cfg, specs)
                configs = planning.get_kv_cache_configs(cfg, specs, memory, groups)
    except ValueError as e:
        m = _ESTIMATED.search(str(e))
        return Figures(refused=str(e), estimated_max_len=int(m.group(1)) if m else None)
    sched = kv_cache_utils.generate_scheduler_kv_cache_config(configs)
    conc = kv_cache_utils.get_max_concurrency_for_kv_cache_config(cfg, sched)
    if KVCALC_VERSION != "0.11":
        with _LogCapture() as log:
            kv_cache_utils.update_kv_cache_capacity(cfg, sched)  # EngineCore._initialize_kv_caches
        conc = cfg.cache_config.kv_cache_max_concurrency
    figures = [line for line in log.lines if line.startswith(("GPU KV cache size", "Maximum concurrency"))]
    if KVCALC_VERSION == "0.11":  # logged once per rank (`get_kv_cache_configs` per worker), all alike: one pair
        assert figures == figures[:2] * tp, figures
        figures = figures[:2]
    tokens = int(re.search(r"GPU KV cache size: ([\d,]+) tokens", figures[0]).group(1).replace(",", ""))
    return Figures(
        num_blocks=sched.num_blocks,
        tokens=tokens,
        concurrency=conc,
        lines=[*config_lines, available_memory_line(kv_memory_bytes), *figures],
        extra={
            "groups": len(sched.kv_cache_groups),
            "block_sizes": sorted({g.kv_cache_spec.block_size for g in sched.kv_cache_groups}),
        },
    )


def available_memory_line(kv_memory_bytes: int) -> str:
    """The worker's "Available KV cache memory" line (`Worker.determine_available_memory`, which
    profiles a GPU and does not run here), with vLLM's own figure: 0.33 `format_gib`
    (`vllm/v1/worker/gpu_worker.py` line 772), 0.11 "%.2f" of `GiB` (line 298)."""
    if KVCALC_VERSION == "0.11":
        from vllm.utils import GiB_bytes

        return f"Available KV cache memory: {kv_memory_bytes / GiB_bytes:.2f} GiB"  # "%.2f GiB" % GiB(...)
    from vllm.utils.mem_utils import format_gib

    return f"Available KV cache memory: {format_gib(kv_memory_bytes)} GiB"  # "%s GiB" % format_gib(...)


class _LogCapture:
    """The INFO lines vLLM's loggers write inside the block (`lines`, as `record.getMessage()`
    formats them); vLLM's `info_once` cache is cleared first, so every case logs."""

    def __enter__(self):
        import logging

        import vllm.logger as vllm_logger

        for name in ("_print_info_once", "_print_warning_once"):
            if hasattr(getattr(vllm_logger, name, None), "cache_clear"):
                getattr(vllm_logger, name).cache_clear()
        self.lines: list[str] = []
        outer = self

        class Handler(logging.Handler):
            def emit(self, record):
                outer.lines.append(record.getMessage())

        self.handler, self.logger = Handler(logging.INFO), logging.getLogger("vllm")
        self.level = self.logger.level
        self.logger.setLevel(logging.INFO)
        self.logger.addHandler(self.handler)
        self.saved = {h: h.level for h in self.logger.handlers if h is not self.handler}
        for h in self.saved:
            h.setLevel(logging.ERROR)  # keep the console quiet
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)
        self.logger.setLevel(self.level)
        for h, level in self.saved.items():
            h.setLevel(level)
        return False


def case_config(model, *, max_model_len: int, block_size: int, kv_cache_dtype: str, tp: int, **kw) -> VllmConfig:
    """`make_vllm_config` for `model`: its dtype, Llama-4's `attention_chunk_size` (the chunked
    layers' window in kvcalc's `ModelSpec`), and the hybrid model config for Mamba hybrids."""
    chunk = None
    if (model.model_type or "").startswith("llama4"):
        chunk = next((layer.window for layer in model.layers if layer.kind == "sliding"), None)
    return make_vllm_config(
        max_model_len=max_model_len,
        block_size=block_size,
        kv_cache_dtype=kv_cache_dtype,
        model_dtype=TORCH_DTYPES.get(model.dtype, torch.bfloat16),
        tp=tp,
        attention_chunk_size=chunk,
        model=model,
        **kw,
    )


def run_kvcalc(
    model,
    *,
    kv_memory_bytes: int,
    max_model_len: int,
    tp: int,
    kv_cache_dtype: str,
    block_size: int = 16,
    max_num_batched_tokens: int = 8192,
    async_scheduling: bool = True,
    attention_backend: str | None = None,
) -> Figures:
    """kvcalc's vLLM profile for the same case, through `kvcalc.capacity` (as the CLI runs it)."""
    import warnings

    import kvcalc
    from kvcalc.engines.profile import VllmOptions
    from kvcalc.errors import KvcalcError

    opts = VllmOptions(
        version=KVCALC_VERSION,
        block_size=block_size,
        max_num_batched_tokens=max_num_batched_tokens,
        async_scheduling=async_scheduling,
        attention_backend=attention_backend,
        compute_capability="9.0",
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
            m = _ESTIMATED.search(str(e))
            return Figures(refused=str(e), estimated_max_len=int(m.group(1)) if m else None)
    refusal = next((str(w.message) for w in caught if "refuse" in str(w.message)), None)
    m = _ESTIMATED.search(refusal or "")
    return Figures(
        num_blocks=r.num_gpu_blocks,
        tokens=r.kv_cache_tokens,
        concurrency=r.max_concurrency,
        refused=refusal,
        estimated_max_len=int(m.group(1)) if m else None,
        lines=list(r.log_lines),
    )


# ---------------------------------------------------------------------------------------------
# The grid and the comparison

#: the models: kvcalc's bundled configs (configs/models), each from its published config.json
MODELS = (
    "llama-3.1-8b",
    "llama-3.1-70b",
    "qwen3-8b",
    "mistral-7b-v0.1",
    "gemma-2-9b",
    "gemma-3-1b",
    "gemma-3-27b",
    "gpt-oss-20b",
    "deepseek-v2-lite",
    "deepseek-v3",
    "qwen3-next-80b-a3b",
    "llama-4-scout",
    "jamba-1.5-mini",
    "nemotron-h-8b",
    "granite-4.0-h-tiny",
)
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

    cases = []
    for name in MODELS:
        model = load(name)
        for L in LENGTHS:
            if model.context_limit is not None and model.context_limit < L:
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
    cfg = case_config(
        model,
        max_model_len=case.max_model_len,
        kv_cache_dtype=case.kv_cache_dtype,
        tp=case.tp,
        block_size=kw.get("block_size", 16),
    )
    specs = layer_specs(model, cfg, case.kv_cache_dtype, case.tp)
    if KVCALC_VERSION == "0.11":
        return planning.max_memory_usage_bytes(cfg, specs.values())
    from vllm.v1.core.kv_cache_config_builder import get_kv_cache_config_builder

    builder = get_kv_cache_config_builder(cfg)
    groups = planning.get_global_kv_cache_groups(cfg, [specs])
    return planning._max_memory_usage_bytes_from_groups(
        builder, cfg, groups
    ) + planning._pool_bytes_per_block_from_builder(builder, cfg, groups)


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

    model = load(case.model)
    opts = _options(model)
    try:
        specs_ok = layer_specs(
            model,
            case_config(
                model, max_model_len=case.max_model_len, block_size=16, kv_cache_dtype=case.kv_cache_dtype, tp=case.tp
            ),
            case.kv_cache_dtype,
            case.tp,
        )
    except NotImplementedError as e:
        specs_ok, why = None, str(e)
    mem = case.kv_memory_bytes
    if isinstance(mem, str):
        if specs_ok is None:
            mem = 40 * GIB
        else:
            mem = one_request_bytes(model, case, **opts) - (1 if mem == "one-1" else 0)
    backend = MLA_BACKEND if opts else None
    k = run_kvcalc(
        model,
        kv_memory_bytes=mem,
        max_model_len=case.max_model_len,
        tp=case.tp,
        kv_cache_dtype=case.kv_cache_dtype,
        attention_backend=backend,
        **opts,
    )
    if specs_ok is None:
        return Outcome(case, "refused", kvcalc=k, reason=f"{why}; kvcalc: {k.refused}")
    v = run_vllm(
        model,
        kv_memory_bytes=mem,
        max_model_len=case.max_model_len,
        tp=case.tp,
        kv_cache_dtype=case.kv_cache_dtype,
        **opts,
    )
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
        if v.lines != k.lines:
            differs.append("lines")
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
    print(
        f"vLLM {VLLM_VERSION}: {len(outcomes)} cases, {dict(counts)} in {time.time() - start:.0f} s; "
        f"{figures_only} match in every figure (the refusal text aside)"
    )
    for (model, differs), n in sorted(kinds.items()):
        print(f"  {model}: {', '.join(differs)} x {n}")


if __name__ == "__main__":
    main()
