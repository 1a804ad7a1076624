"""vLLM 0.33's own KV-cache sizing for the published 2026 configs (issue 19, item 4).

The 2026 families (`tests/data/hf-configs-2026/`, copied from `shared/fixtures/hf-configs-2026/`,
the configs ai-dynamo/aiconfigurator ships at commit 095f58a) are built here from their
config.json, not from kvcalc's `ModelSpec` (kvcalc does not read most of them yet). For each
family `layer_specs_<family>` builds the per-layer `KVCacheSpec` dict that vLLM 0.33's model
class builds, then `run_case` runs the engine core's sizing exactly as `vllm_harness.run_vllm`
does (`kv_cache_planning.get_global_kv_cache_groups`, `get_kv_cache_configs`,
`kv_cache_utils.generate_scheduler_kv_cache_config`, `update_kv_cache_capacity`), on vLLM's CPU
platform, and records what vLLM makes of it: the groups (spec kind, layers, block size,
page_size_bytes), num_blocks, the "GPU KV cache size" and "Maximum concurrency" lines, or the
refusal.

What is vLLM's own code and what is restated (file paths are in the vllm 0.33.0 wheel):

- vLLM's own classes, instantiated and asked for their spec (`get_kv_cache_spec`):
  `DeepseekV4SWACache` (`vllm/v1/attention/backends/mla/sparse_swa.py` 76-150),
  `CompressorStateCache` (`vllm/models/deepseek_v4/compressor.py` 139-197),
  `DeepseekV4IndexerCache` (`vllm/models/deepseek_v4/attention.py` 886-926),
  `DeepseekV32IndexerCache` (`vllm/model_executor/models/deepseek_v2.py` 639-668); the
  DeepSeek-V4 KV-cache dtype rule is vLLM's `_resolve_dsv4_kv_cache_dtype`
  (`vllm/models/deepseek_v4/attention.py` 94-129), called;
- restated with the arguments the model class passes (the layer classes themselves need CUDA
  kernels, torchvision or a checkpoint to construct): `Attention.get_kv_cache_spec`
  (`vllm/model_executor/layers/attention/attention.py` 611-684, the sliding block size through
  vLLM's own `_largest_kernel_block_within`, via `vllm_harness._sliding_block_size`),
  `MLAAttention.get_kv_cache_spec` (`mla_attention.py` 1371-1402, with the sparse backend's
  dtype canonicalisation `_canonicalize_sparse_mla_kv_cache_dtype`, 359-377, called),
  `DeepseekV4Attention.get_kv_cache_spec` (`vllm/models/deepseek_v4/attention.py` 860-883),
  `MiniMaxM3SparseAttention.get_kv_cache_spec` (`vllm/models/minimax_m3/nvidia/model.py`
  562-571) and `MiniMaxM3IndexerCache.get_kv_cache_spec` (`vllm/models/minimax_m3/common/
  indexer.py` 145-153; the module imports torchvision, which a CPU torch cannot load);
- the block size each backend forces (the CUDA platform's `update_block_size_for_backend`
  does not run on a CPU): dense MLA FLASH_ATTN_MLA 16 for a 16-bit cache, FlashMLA 64 for fp8
  (`DENSE_MLA_BLOCK`); sparse MLA 64 (Hopper: FLASH_ATTN_MLA_SPARSE for a 16-bit cache,
  `flashattn_mla_sparse.py` 41-51, 86-100; FLASHMLA_SPARSE for fp8); DeepSeek-V4's sparse MLA 256
  (`vllm/models/deepseek_v4/sparse_mla.py` 60-61), MiniMax-M3's sparse backend 128
  (`vllm/models/minimax_m3/common/sparse_attention.py` 165-167), FlashAttention 16.

Hybrid families with recurrent state (Qwen3.5, Nemotron-3-Super, Kimi-K3): the state layers
are stand-ins of vLLM's `MambaBase` whose state comes from vLLM's calculators with the model
class's arguments, and vLLM's own hybrid steps run on the config (`_hybrid`), as
`vllm_harness._align_hybrid` does for the older hybrids.

Only this module and `vllm_harness.py` import vllm.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import vllm_harness as h
from vllm_harness import kvi

CONFIG_DIR = Path(__file__).resolve().parent.parent / "data" / "hf-configs-2026"
GIB = 2**30


def load_config(file: str) -> dict:
    """The published config.json (the text config where the checkpoint wraps one)."""
    cfg = json.loads((CONFIG_DIR / file).read_text())
    return cfg.get("text_config") or cfg


def _quant(kv_cache_dtype: str) -> dict:
    return {"kv_quant_mode": kvi.get_kv_quant_mode(kv_cache_dtype)}


def _torch_dtype(cfg, kv_cache_dtype: str) -> torch.dtype:
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype

    return kv_cache_dtype_str_to_dtype(kv_cache_dtype, cfg.model_config)


def attention_spec(
    cfg,
    kv_cache_dtype: str,
    *,
    num_kv_heads: int,
    head_size: int,
    tp: int,
    head_size_v: int | None = None,
    sliding_window: int | None = None,
):
    """`Attention.get_kv_cache_spec` (attention.py 611-684) for a layer built with
    `num_kv_heads` total KV heads (the model classes shard them max(1, heads // tp))."""
    kwargs = dict(
        block_size=cfg.cache_config.block_size,
        num_kv_heads=max(1, num_kv_heads // tp),
        head_size=head_size,
        dtype=_torch_dtype(cfg, kv_cache_dtype),
        **_quant(kv_cache_dtype),
    )
    if head_size_v is not None:
        kwargs["head_size_v"] = head_size_v
    if sliding_window is None:
        return kvi.FullAttentionSpec(**kwargs)
    kwargs["block_size"] = h._sliding_block_size(cfg, kwargs, sliding_window)
    return kvi.SlidingWindowSpec(**kwargs, sliding_window=sliding_window)


def mla_spec(
    cfg,
    kv_cache_dtype: str,
    *,
    head_size: int,
    sparse: bool,
    topk_buffer_width: int | None = None,
    index_group_leader: bool = False,
):
    """`MLAAttention.get_kv_cache_spec` (mla_attention.py 1371-1402). A sparse layer's dtype first
    goes through `_canonicalize_sparse_mla_kv_cache_dtype` for FLASHMLA_SPARSE (Hopper's sparse
    MLA backend): any quantized dtype but nvfp4_ds_mla becomes fp8_ds_mla (656 B a token)."""
    if sparse:
        from vllm.model_executor.layers.attention.mla_attention import (
            _canonicalize_sparse_mla_kv_cache_dtype,
        )

        class FlashMLASparse:
            @staticmethod
            def get_name():
                return "FLASHMLA_SPARSE"

        kv_cache_dtype = _canonicalize_sparse_mla_kv_cache_dtype(FlashMLASparse, kv_cache_dtype)
    kwargs = dict(
        block_size=cfg.cache_config.block_size,
        num_kv_heads=1,
        max_tp_shards=1,
        head_size=head_size,
        dtype=_torch_dtype(cfg, kv_cache_dtype),
        cache_dtype_str=kv_cache_dtype,
        state_content_bytes={"fp8_ds_mla": 656, "nvfp4_ds_mla": 352}.get(kv_cache_dtype),
        **_quant(kv_cache_dtype),
    )
    return kvi.MLAAttentionSpec(**kwargs, topk_buffer_width=topk_buffer_width, is_index_group_leader=index_group_leader)


class _Registered:
    """`set_current_vllm_config(cfg)` around the construction of vLLM's own cache modules (they
    register in `compilation_config.static_forward_context`)."""

    def __init__(self, cfg):
        from vllm.config import set_current_vllm_config

        self.ctx = set_current_vllm_config(cfg)

    def __enter__(self):
        self.ctx.__enter__()
        return self

    def __exit__(self, *exc):
        return self.ctx.__exit__(*exc)


# ---------------------------------------------------------------------------------------------
# The families: {layer name: KVCacheSpec}, as vLLM 0.33's model class builds them


def specs_dense(hf: dict, cfg, kv: str, tp: int) -> dict:
    """Plain GQA decoders: Qwen3-VL-8B's text model (`qwen3_vl.py` -> Qwen3 `Attention`),
    MiniMax-M2.7 (`minimax_m2.py` `MiniMaxM2Attention`): every layer a FullAttentionSpec of
    num_key_value_heads x head_dim."""
    return {
        f"model.layers.{i}.self_attn.attn": attention_spec(
            cfg, kv, num_kv_heads=hf["num_key_value_heads"], head_size=hf["head_dim"], tp=tp
        )
        for i in range(hf["num_hidden_layers"])
    }


def specs_layer_types(hf: dict, cfg, kv: str, tp: int) -> dict:
    """`layer_types` full / sliding GQA with one geometry: Step-3.7-Flash as `step3p5.py`
    `Step3p5DecoderLayer` builds it (lines 439-452: the window on sliding_attention layers)."""
    out = {}
    for i, t in enumerate(hf["layer_types"][: hf["num_hidden_layers"]]):
        out[f"model.layers.{i}.self_attn.attn"] = attention_spec(
            cfg,
            kv,
            num_kv_heads=hf["num_key_value_heads"],
            head_size=hf["head_dim"],
            tp=tp,
            sliding_window=hf["sliding_window"] if t == "sliding_attention" else None,
        )
    return out


def specs_gemma4(hf: dict, cfg, kv: str, tp: int) -> dict:
    """Gemma-4 (`gemma4.py` `Gemma4DecoderLayer` 578-587, `Gemma4Attention` 396-510): each layer's
    head_dim and KV heads from `per_layer_config` (transformers 5.20 `configuration_gemma4.py`
    210-222: full_attention layers get `global_head_dim` and, when `attention_k_eq_v`,
    `num_global_key_value_heads`); sliding layers the window. K == V layers load K's weights into
    both the K and the V slot (`Gemma4Attention` 419-423): the cache holds K and V (head_size_v ==
    head_size). The last `num_kv_shared_layers` layers pass `kv_sharing_target_layer_name` and
    get no spec of their own (`GPUModelRunner.get_kv_cache_spec` skips them)."""
    n = hf["num_hidden_layers"]
    first_shared = n - hf.get("num_kv_shared_layers", 0)
    k_eq_v = hf.get("attention_k_eq_v", False)
    out = {}
    for i, t in enumerate(hf["layer_types"][:first_shared]):
        full = t == "full_attention"
        heads = (
            hf["num_global_key_value_heads"]
            if (full and k_eq_v and hf.get("num_global_key_value_heads"))
            else hf["num_key_value_heads"]
        )
        head = hf.get("global_head_dim", 512) if full else hf["head_dim"]
        out[f"model.language_model.layers.{i}.self_attn.attn"] = attention_spec(
            cfg, kv, num_kv_heads=heads, head_size=head, tp=tp, sliding_window=None if full else hf["sliding_window"]
        )
    return out


def specs_mimo_v2(hf: dict, cfg, kv: str, tp: int) -> dict:
    """MiMo-V2-Flash (`mimo_v2.py` `MiMoV2DecoderLayer` 403-440): `hybrid_layer_pattern` 1 = a
    sliding layer (swa_num_key_value_heads, swa_head_dim K, swa_v_head_dim V, window
    sliding_window_size), 0 = a global layer (num_key_value_heads, head_dim K, v_head_dim V).
    vLLM has no chunked attention for it (`attention_chunk_size` is not read) and the attention
    sinks are parameters, not cache."""
    out = {}
    for i, swa in enumerate(hf["hybrid_layer_pattern"][: hf["num_hidden_layers"]]):
        if swa == 1:
            spec = attention_spec(
                cfg,
                kv,
                num_kv_heads=hf["swa_num_key_value_heads"],
                head_size=hf["swa_head_dim"],
                head_size_v=hf["swa_v_head_dim"],
                tp=tp,
                sliding_window=hf["sliding_window_size"],
            )
        else:
            spec = attention_spec(
                cfg,
                kv,
                num_kv_heads=hf["num_key_value_heads"],
                head_size=hf["head_dim"],
                head_size_v=hf["v_head_dim"],
                tp=tp,
            )
        out[f"model.layers.{i}.self_attn.attn"] = spec
    return out


def specs_mla(hf: dict, cfg, kv: str, tp: int) -> dict:
    """Kimi-K2.5's text model (DeepSeek-V3 MLA, `kimi_k25.py` -> `deepseek_v2.py`): one latent of
    kv_lora_rank + qk_rope_head_dim per token and layer, FlashMLA (dense)."""
    head = hf["kv_lora_rank"] + hf["qk_rope_head_dim"]
    return {
        f"model.layers.{i}.self_attn.attn": mla_spec(cfg, kv, head_size=head, sparse=False)
        for i in range(hf["num_hidden_layers"])
    }


def dsa_indexer_layers(hf: dict) -> list[int]:
    """The layers with their own DSA indexer (`vllm/models/deepseek_v32/attention.py` 167-188):
    skip_topk = max(layer - index_skip_topk_offset + 1, 0) % index_topk_freq != 0 (or the
    `index_topk_pattern` letter 'S'); V3.2 (no index_topk_freq) has one on every layer."""
    freq = hf.get("index_topk_freq", 1)
    offset = hf.get("index_skip_topk_offset", 2)
    pattern = hf.get("index_topk_pattern")
    out = []
    for i in range(hf["num_hidden_layers"]):
        if pattern is None:
            skip = max(i - offset + 1, 0) % freq != 0
        else:
            skip = i < len(pattern) and pattern[i] == "S"
        if not skip:
            out.append(i)
    return out


def specs_dsa(hf: dict, cfg, kv: str, tp: int) -> dict:
    """DeepSeek-V3.2 and GLM-5.2 (`vllm/models/deepseek_v32/attention.py` `DeepseekV32Attention`):
    every layer a sparse MLA latent (kv_lora_rank + qk_rope_head_dim), `is_index_group_leader`
    where the layer has its own indexer; those layers also own an index-key cache,
    `DeepseekV32IndexerCache(head_dim=index_head_dim + index_head_dim // 128 * 4, uint8)` (vLLM's
    class, `attention.py` 95-100: 128 fp8 + 4 B fp32 scale = 132 B). `DeepseekV32ForCausalLM`
    (`model_executor/models/config.py` 74-86) turns `bfloat16` into `auto`."""
    from vllm.model_executor.models.deepseek_v2 import DeepseekV32IndexerCache

    if kv == "bfloat16":
        kv = "auto"
    head = hf["kv_lora_rank"] + hf["qk_rope_head_dim"]
    with_indexer = set(dsa_indexer_layers(hf))
    out = {}
    with _Registered(cfg):
        for i in range(hf["num_hidden_layers"]):
            out[f"model.layers.{i}.self_attn.attn"] = mla_spec(
                cfg,
                kv,
                head_size=head,
                sparse=True,
                topk_buffer_width=hf["index_topk"],
                index_group_leader=i in with_indexer,
            )
            if i in with_indexer:
                idx = hf["index_head_dim"]
                name = f"model.layers.{i}.self_attn.indexer.k_cache"
                out[name] = DeepseekV32IndexerCache(
                    head_dim=idx + idx // 128 * 4, dtype=torch.uint8, prefix=name, cache_config=cfg.cache_config
                ).get_kv_cache_spec(cfg)
    return out


def specs_deepseek_v4(hf: dict, cfg, kv: str, tp: int) -> dict:
    """DeepSeek-V4 (`vllm/models/deepseek_v4/attention.py` `DeepseekV4Attention.__init__`
    280-420, `get_kv_cache_spec` 860-883), FlashMLA on Hopper (`nvidia/model.py`
    `_select_dsv4_attn_cls` 537-569: `use_fp8_ds_mla_layout` True). Per layer with
    compress ratio r = compress_ratios[layer]:

    - every layer: its sliding-window cache `DeepseekV4SWACache` (window `sliding_window`, head
      512, block 64, 584 B a token in fp8_ds_mla, page aligned to 576 B);
    - r > 1: the compressed latent, an MLAAttentionSpec with tokens_per_state = r (one 584 B
      entry per r tokens), and the compressor's running state `CompressorStateCache`
      (state_dim = 2 x coff x 512 float32, coff = 2 for r = 4 else 1; `compressor.py` 282-287);
    - r = 4: the indexer (`attention.py` 300-318, 1019-1047): its key cache
      `DeepseekV4IndexerCache` (128 fp8 + 4 B scale = 132 B per compressed entry) and its own
      compressor state (state_dim 2 x 2 x 128).

    The KV-cache dtype is vLLM's `_resolve_dsv4_kv_cache_dtype`: auto / fp8* -> fp8_ds_mla,
    anything else refused."""
    from vllm.models.deepseek_v4.attention import (
        DeepseekV4IndexerCache,
        _resolve_dsv4_kv_cache_dtype,
    )
    from vllm.models.deepseek_v4.compressor import CompressorStateCache
    from vllm.v1.attention.backends.mla.sparse_swa import DeepseekV4SWACache

    kv, torch_dtype = _resolve_dsv4_kv_cache_dtype(True, kv, cfg.cache_config)
    head = hf["head_dim"]
    ds = kv == "fp8_ds_mla"
    out = {}
    with _Registered(cfg):
        for i in range(hf["num_hidden_layers"]):
            r = hf["compress_ratios"][i]
            p = f"model.layers.{i}.self_attn"
            out[f"{p}.swa_cache"] = DeepseekV4SWACache(
                head_dim=head,
                window_size=hf["sliding_window"],
                dtype=torch_dtype,
                prefix=f"{p}.swa_cache",
                cache_config=cfg.cache_config,
            ).get_kv_cache_spec(cfg)
            if r <= 1:
                continue
            out[p] = kvi.MLAAttentionSpec(
                block_size=cfg.cache_config.block_size,
                num_kv_heads=1,
                max_tp_shards=1,
                head_size=head,
                dtype=torch.uint8 if ds else torch_dtype,
                tokens_per_state=r,
                cache_dtype_str=kv,
                alignment=576 if ds else 512,
                model_version="deepseek_v4",
                kv_quant_mode=kvi.get_kv_quant_mode(kv),
                state_content_bytes=584 if ds else None,
            )
            coff = 1 + (r == 4)
            name = f"{p}.compressor.state_cache"
            out[name] = CompressorStateCache(
                state_dim=2 * coff * head, dtype=torch.float32, compress_ratio=r, prefix=name
            ).get_kv_cache_spec(cfg)
            if r == 4:
                idx = hf["index_head_dim"]
                name = f"{p}.indexer.k_cache"
                out[name] = DeepseekV4IndexerCache(
                    head_dim=idx + idx // 128 * 4,
                    dtype=torch.uint8,
                    prefix=name,
                    cache_config=cfg.cache_config,
                    compress_ratio=r,
                ).get_kv_cache_spec(cfg)
                name = f"{p}.indexer.compressor.state_cache"
                out[name] = CompressorStateCache(
                    state_dim=2 * 2 * idx, dtype=torch.float32, compress_ratio=r, prefix=name
                ).get_kv_cache_spec(cfg)
    return out


def specs_minimax_m3(hf: dict, cfg, kv: str, tp: int) -> dict:
    """MiniMax-M3 (`vllm/models/minimax_m3/nvidia/model.py`): layers whose
    `sparse_attention_freq` is 0 are plain `MiniMaxM3Attention` (a FullAttentionSpec); the others
    `MiniMaxM3SparseAttention` (lines 562-571: FullAttentionSpec of K and V, num_key_value_heads
    x head_dim) plus the indexer's key-only cache `MiniMaxM3IndexerCache` (`common/indexer.py`
    145-153: MLAAttentionSpec, one head of `sparse_index_dim`, bf16 unless
    `--attention-config '{"indexer_kv_dtype": "fp8"}'`: the default is bf16 whatever
    --kv-cache-dtype, `nvidia/model.py` 507-509)."""
    sparse = hf["sparse_attention_config"]
    out = {}
    for i, f in enumerate(sparse["sparse_attention_freq"][: hf["num_hidden_layers"]]):
        p = f"model.layers.{i}.self_attn"
        out[f"{p}.attn"] = attention_spec(
            cfg, kv, num_kv_heads=hf["num_key_value_heads"], head_size=hf["head_dim"], head_size_v=hf["head_dim"], tp=tp
        )
        if f:
            out[f"{p}.indexer.index_cache"] = kvi.MLAAttentionSpec(
                block_size=cfg.cache_config.block_size,
                num_kv_heads=1,
                head_size=sparse["sparse_index_dim"],
                dtype=torch.bfloat16,
                cache_role=kvi.SparseCacheRole.INDEXER,
            )
    return out


# ---------------------------------------------------------------------------------------------
# Hybrids: attention beside a recurrent state (Mamba-2, Gated DeltaNet, KDA)


class _NoLayoutPreference(h._FlashAttentionOnHopper):
    """`vllm_harness`'s FlashAttention stand-in, with the base class's answer to
    `supported_kv_cache_layouts` (`vllm/v1/attention/backend.py` 372-375: None)."""

    @classmethod
    def supported_kv_cache_layouts(cls):
        return None


class _FlashMLAOnHopper(_NoLayoutPreference):
    """Stand-in for FlashMLA (`v1/attention/backends/mla/flashmla.py` 57-58): kernel block 64."""

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None):
        return [64]


def _state_layer(kind: str, shape_fn, dtype_fn, mamba_type: str, align_fn=lambda: None):
    """A stand-in of vLLM's `MambaBase` whose state is `shape_fn()` / `dtype_fn()` (the model
    class's calculators) and whose prefill checkpoint alignment is `align_fn()` (asked when
    vLLM asks, after its hooks set the Mamba cache mode), registered where
    `get_layers_from_vllm_config` finds Mamba layers."""
    from vllm.model_executor.layers.mamba.abstract import MambaBase
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum

    class Layer(MambaBase, h._StandInMambaLayer):
        def __init__(self):
            pass

        def get_state_shape(self):
            return shape_fn()

        def get_state_dtype(self):
            return dtype_fn()

        @property
        def mamba_type(self):
            return MambaAttentionBackendEnum[mamba_type]

        def get_prefill_checkpoint_alignment(self):
            return align_fn()

        def get_attn_backend(self):
            raise NotImplementedError

    layer = Layer()
    layer.kind = kind
    return layer


def _hybrid(
    cfg, *, arch: str, hf: dict, model_cls, attn_heads: int, attn_head: int, use_mla: bool, backend, state_layers: dict
) -> None:
    """vLLM's hybrid set-up on the stand-in model config, as `vllm_harness._align_hybrid` does:
    the architecture and HF config vLLM's hooks read, `VllmConfig.try_verify_and_update_config`
    (the model's `MODELS_CONFIG_MAP` hook, then `HybridAttentionMambaModelConfig`), the state
    layers registered, then `Platform._align_hybrid_block_size` (`vllm/platforms/interface.py`
    940-1120: the attention block raised until one attention page holds a state page, the state
    page padded to it) with the Hopper backend."""
    from types import SimpleNamespace

    from vllm.model_executor.models import ModelRegistry
    from vllm.platforms.interface import Platform

    mc = cfg.model_config
    mc.architecture, mc.architectures = arch, [arch]
    mc.hf_config = mc.hf_text_config = SimpleNamespace(**hf)
    mc.is_hybrid, mc.convert_type, mc.runner_type, mc.use_mla = True, "none", "generate", use_mla
    mc.get_num_kv_heads = lambda parallel_config: max(1, attn_heads // parallel_config.tensor_parallel_size)
    mc.get_head_size = lambda: attn_head
    ModelRegistry.resolve_model_cls = lambda architectures, model_config=None: (model_cls, arch)
    cfg.cache_config.enable_prefix_caching = True
    cfg.scheduler_config.enable_chunked_prefill = True
    cfg.try_verify_and_update_config()
    ctx = cfg.compilation_config.static_forward_context
    ctx.update(state_layers)

    class Hopper(Platform, h._HopperPlatform):
        @classmethod
        def _find_non_ssm_backends(cls, vllm_config):
            return [backend]

    Hopper._align_hybrid_block_size(cfg, backend)


def _state_specs(cfg, layers: dict, checkpoint: dict) -> dict:
    """`MambaBase.get_kv_cache_spec` (vLLM's, on the stand-in) and the layer class's own
    replace of the prefill checkpoint fields (`checkpoint`)."""
    from dataclasses import replace

    from vllm.model_executor.layers.mamba.abstract import MambaBase

    return {name: replace(MambaBase.get_kv_cache_spec(layer, cfg), **checkpoint) for name, layer in layers.items()}


def specs_qwen3_5(hf: dict, cfg, kv: str, tp: int) -> dict:
    """Qwen3.5 (`qwen3_5.py`): `layer_types` full_attention -> Qwen3-Next attention
    (FullAttentionSpec of num_key_value_heads x head_dim; the output gate is not cache),
    linear_attention -> Gated DeltaNet, whose state is the model class's
    `get_mamba_state_shape_from_config` / `get_mamba_state_dtype_from_config` (lines 388-418,
    restated: the module imports torchvision): `MambaStateShapeCalculator.
    gated_delta_net_state_shape` / `MambaStateDtypeCalculator.gated_delta_net_state_dtype`,
    called. `Qwen3_5ForConditionalGenerationConfig` (`config.py` 953-976) takes the SSM state
    dtype from `mamba_ssm_dtype` (float32). The GDN prefill backend on Hopper is FlashInfer
    (`QwenGatedDeltaNet`, `gdn_attn.FLASHINFER_GDN_CHECKPOINT_ALIGNMENT`), as in vllm_harness."""
    from vllm.model_executor.layers.mamba.mamba_utils import (
        MambaStateDtypeCalculator,
        MambaStateShapeCalculator,
    )

    class Qwen3_5ForConditionalGeneration:
        @classmethod
        def get_mamba_state_dtype_from_config(cls, vllm_config):
            return MambaStateDtypeCalculator.gated_delta_net_state_dtype(
                vllm_config.model_config.dtype,
                vllm_config.cache_config.mamba_cache_dtype,
                vllm_config.cache_config.mamba_ssm_cache_dtype,
            )

        @classmethod
        def get_mamba_state_shape_from_config(cls, vllm_config):
            c = vllm_config.model_config.hf_text_config
            return MambaStateShapeCalculator.gated_delta_net_state_shape(
                vllm_config.parallel_config.tensor_parallel_size,
                c.linear_num_key_heads,
                c.linear_num_value_heads,
                c.linear_key_head_dim,
                c.linear_value_head_dim,
                c.linear_conv_kernel_dim,
                0,
            )

    from vllm.v1.attention.backends.gdn_attn import FLASHINFER_GDN_CHECKPOINT_ALIGNMENT

    def align():  # `QwenGatedDeltaNet.__init__`: FlashInfer's checkpoint alignment in 'align' mode
        return FLASHINFER_GDN_CHECKPOINT_ALIGNMENT if cfg.cache_config.mamba_cache_mode == "align" else None

    model_cls = Qwen3_5ForConditionalGeneration
    names = [f"model.layers.{i}.linear_attn" for i, t in enumerate(hf["layer_types"]) if t == "linear_attention"]
    layers = {
        n: _state_layer(
            "gdn",
            lambda: model_cls.get_mamba_state_shape_from_config(cfg),
            lambda: model_cls.get_mamba_state_dtype_from_config(cfg),
            "GDN_ATTN",
            align,
        )
        for n in names
    }
    _hybrid(
        cfg,
        arch="Qwen3_5ForConditionalGeneration",
        hf=hf,
        model_cls=model_cls,
        attn_heads=hf["num_key_value_heads"],
        attn_head=hf["head_dim"],
        use_mla=False,
        backend=_NoLayoutPreference,
        state_layers=layers,
    )
    checkpoint = {}
    if align() is not None:  # `QwenGatedDeltaNet.get_kv_cache_spec`
        from vllm.model_executor.layers.mamba.abstract import get_mamba_prefill_checkpoint_grid

        checkpoint = dict(
            num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=get_mamba_prefill_checkpoint_grid(cfg)
        )
    out = _state_specs(cfg, layers, checkpoint)
    for i, t in enumerate(hf["layer_types"]):
        if t == "full_attention":
            out[f"model.layers.{i}.self_attn.attn"] = attention_spec(
                cfg, kv, num_kv_heads=hf["num_key_value_heads"], head_size=hf["head_dim"], tp=tp
            )
    return out


def specs_nemotron_h(hf: dict, cfg, kv: str, tp: int) -> dict:
    """Nemotron-H (`nemotron_h.py` `NemotronHForCausalLM`, vLLM's class: its
    `get_mamba_state_shape_from_config` / `get_mamba_state_dtype_from_config`, called):
    `hybrid_override_pattern` M = Mamba-2 mixer (MambaSpec; `MambaMixer2.get_kv_cache_spec`: one
    prefill checkpoint block, alignment 1), * = attention (FullAttentionSpec), E / - = no cache.
    `NemotronHForCausalLMConfig` (`config.py` 817-845) sets the SSM state dtype from the config's
    `mamba_ssm_cache_dtype` (float32)."""
    from vllm.model_executor.models.nemotron_h import NemotronHForCausalLM

    pattern = hf["hybrid_override_pattern"]
    layers = {
        f"model.layers.{i}.mixer": _state_layer(
            "mamba2",
            lambda: NemotronHForCausalLM.get_mamba_state_shape_from_config(cfg),
            lambda: NemotronHForCausalLM.get_mamba_state_dtype_from_config(cfg),
            "MAMBA2",
        )
        for i, c in enumerate(pattern)
        if c == "M"
    }
    _hybrid(
        cfg,
        arch="NemotronHForCausalLM",
        hf=hf,
        model_cls=NemotronHForCausalLM,
        attn_heads=hf["num_key_value_heads"],
        attn_head=hf["head_dim"],
        use_mla=False,
        backend=_NoLayoutPreference,
        state_layers=layers,
    )
    out = _state_specs(cfg, layers, dict(num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=1))
    for i, c in enumerate(pattern):
        if c == "*":
            out[f"model.layers.{i}.mixer.attn"] = attention_spec(
                cfg, kv, num_kv_heads=hf["num_key_value_heads"], head_size=hf["head_dim"], tp=tp
            )
    return out


def specs_kimi_k3(hf: dict, cfg, kv: str, tp: int) -> dict:
    """Kimi-K3 (`vllm/models/kimi_k3/nvidia/`): `linear_attn_config` (1-based layer numbers)
    `kda_layers` -> `KimiK3DeltaAttention` (`kda.py` 567-909: state `kda_state_shape(tp,
    num_heads, head_dim, conv_kernel_size=short_conv_kernel_size)` / `kda_state_dtype`, vLLM's
    calculators called; mamba_type GDN_ATTN; the spec replaced with one prefill checkpoint block
    of alignment 16, `kda_prefill_checkpoint_alignment('flashkda')`: FlashKDA is what
    `resolve_kda_prefill_backend` picks on SM90 for head 128, bf16, a bounded gate), the others
    (`full_attn_layers`) -> MLA (`mla.py` 421-437, latent kv_lora_rank + qk_rope_head_dim, dense
    FlashMLA, block 64)."""
    from vllm.model_executor.layers.mamba.mamba_utils import (
        MambaStateDtypeCalculator,
        MambaStateShapeCalculator,
    )

    lin = hf["linear_attn_config"]

    class KimiK3ForConditionalGeneration:
        @classmethod
        def get_mamba_state_dtype_from_config(cls, vllm_config):
            return MambaStateDtypeCalculator.kda_state_dtype(
                vllm_config.model_config.dtype,
                vllm_config.cache_config.mamba_cache_dtype,
                vllm_config.cache_config.mamba_ssm_cache_dtype,
            )

        @classmethod
        def get_mamba_state_shape_from_config(cls, vllm_config):
            return MambaStateShapeCalculator.kda_state_shape(
                vllm_config.parallel_config.tensor_parallel_size,
                lin["num_heads"],
                lin["head_dim"],
                conv_kernel_size=lin["short_conv_kernel_size"],
                num_spec=0,
            )

    model_cls = KimiK3ForConditionalGeneration
    kda = set(lin["kda_layers"])
    head = hf["kv_lora_rank"] + hf["qk_rope_head_dim"]
    layers = {
        f"model.layers.{n - 1}.self_attn": _state_layer(
            "kda",
            lambda: model_cls.get_mamba_state_shape_from_config(cfg),
            lambda: model_cls.get_mamba_state_dtype_from_config(cfg),
            "GDN_ATTN",
        )
        for n in range(1, hf["num_hidden_layers"] + 1)
        if n in kda
    }
    _hybrid(
        cfg,
        arch="KimiK3ForConditionalGeneration",
        hf=hf,
        model_cls=model_cls,
        attn_heads=1,
        attn_head=head,
        use_mla=True,
        backend=_FlashMLAOnHopper,
        state_layers=layers,
    )
    out = _state_specs(cfg, layers, dict(num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=16))
    for n in range(1, hf["num_hidden_layers"] + 1):
        if n not in kda:
            out[f"model.layers.{n - 1}.self_attn.attn"] = mla_spec(cfg, kv, head_size=head, sparse=False)
    return out


def backends_default() -> list:
    """FlashAttention / FlashMLA / Triton on Hopper: none declares a KV cache layout
    (`AttentionBackend.supported_kv_cache_layouts` returns None), so vLLM's default preference
    applies (`vllm/v1/attention/backends/utils.py` 229-236, LBNHC first)."""
    return [_NoLayoutPreference]


def backends_deepseek_v4() -> list:
    """The backends of DeepSeek-V4's caches on Hopper (FlashMLA): the sparse MLA latent
    (`DeepseekV4FlashMLABackend`, `sparse_mla.py` 292), the SWA cache
    (`DeepseekSparseSWABackend`), the compressor state (`CompressorBackend`) and the indexer
    (`DeepseekV4IndexerBackend`, `v1/attention/backends/mla/indexer.py` 334-357, which declares
    BLHNC / BLNHC: 'the layer dim must sit inside the block dim')."""
    from vllm.models.deepseek_v4.compressor import CompressorBackend
    from vllm.models.deepseek_v4.sparse_mla import DeepseekV4FlashMLABackend
    from vllm.v1.attention.backends.mla.indexer import DeepseekV4IndexerBackend
    from vllm.v1.attention.backends.mla.sparse_swa import DeepseekSparseSWABackend

    return [DeepseekV4FlashMLABackend, DeepseekSparseSWABackend, CompressorBackend, DeepseekV4IndexerBackend]


def resolve_layout(cfg, backends: list, specs: dict, tp: int) -> str:
    """The engine core's KV cache layout (`EngineCore` -> vLLM's `get_supported_kv_cache_layouts`
    over the workers' backends, then `resolve_kv_cache_layout`, which narrows mixed head/state
    shapes to block-compact layouts), recorded on `cfg.cache_config` as vLLM records it."""
    from vllm.v1.attention.backends.utils import (
        get_supported_kv_cache_layouts,
        resolve_kv_cache_layout,
    )

    names = [layout.name for layout in get_supported_kv_cache_layouts(backends)]
    cfg.cache_config.kv_cache_layout = None
    return resolve_kv_cache_layout(cfg, [names] * tp, specs.values()).name


@dataclass(frozen=True)
class Family:
    """One 2026 family: its config file, vLLM 0.33's spec builder, the block size its backend
    forces on Hopper, and what vLLM 0.33 does with the exact published config.json when that is
    not what the builder models (`exact_config`)."""

    name: str
    file: str
    build: object
    block_size: int | dict = 16  # or {kv_cache_dtype: block size} where the backend depends on it
    exact_config: str = ""
    backends: object = backends_default


#: dense MLA on Hopper (`vllm/platforms/cuda.py` `_get_backend_priorities` 139-155: FLASH_ATTN_MLA first,
#: then FLASHMLA): FLASH_ATTN_MLA takes auto / float16 / bfloat16 caches only
#: (`v1/attention/backends/mla/flashattn_mla.py` 42-50, kernel blocks MultipleOf(16): vLLM's
#: default 16), an fp8 cache goes to FLASHMLA (kernel block 64, `flashmla.py` 57-58)
DENSE_MLA_BLOCK = {"auto": 16, "bfloat16": 16, "fp8": 64}

FAMILIES = {
    f.name: f
    for f in (
        Family(
            "deepseek-v4-flash",
            "deepseek-ai--DeepSeek-V4-Flash.json",
            specs_deepseek_v4,
            256,
            backends=backends_deepseek_v4,
        ),
        Family(
            "deepseek-v4-flash-nvfp4",
            "nvidia--DeepSeek-V4-Flash-NVFP4.json",
            specs_deepseek_v4,
            256,
            backends=backends_deepseek_v4,
        ),
        Family("deepseek-v3.2", "deepseek-ai--DeepSeek-V3.2.json", specs_dsa, 64),
        Family("glm-5.2", "zai-org--GLM-5.2.json", specs_dsa, 64),
        Family("kimi-k2.5", "moonshotai--Kimi-K2.5.json", specs_mla, DENSE_MLA_BLOCK),
        Family(
            "minimax-m3",
            "MiniMaxAI--MiniMax-M3.json",
            specs_minimax_m3,
            128,
            "architectures ['MiniMaxM3ForCausalLM'] / model_type 'minimax_m3' are in neither vLLM 0.33's registry "
            "nor its config registry (it has MiniMaxM3SparseForCausalLM, model_type minimax_m3_vl / minimax_m3_text); "
            "the specs are MiniMaxM3SparseForCausalLM's for this geometry",
        ),
        Family("minimax-m2.7", "MiniMaxAI--MiniMax-M2.7.json", specs_dense),
        Family("mimo-v2-flash", "XiaomiMiMo--MiMo-V2-Flash.json", specs_mimo_v2),
        Family("gemma-4-26b-a4b", "google--gemma-4-26B-A4B.json", specs_gemma4),
        Family(
            "step-3.7-flash",
            "stepfun-ai--Step-3.7-Flash.json",
            specs_layer_types,
            16,
            "architectures ['Step3p7FlashForCausalLM'] is not in vLLM 0.33's registry (it has "
            "Step3p7ForConditionalGeneration, whose text model is step3p5.py's Step3p5ForCausalLM, which reads "
            "num_attention_groups, absent here); the specs are Step3p5's for this geometry",
        ),
        Family("qwen3-vl-8b", "Qwen--Qwen3-VL-8B-Instruct.json", specs_dense),
        Family("qwen3.5-27b", "Qwen--Qwen3.5-27B.json", specs_qwen3_5),
        Family("nemotron-3-super", "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json", specs_nemotron_h),
        Family("kimi-k3", "moonshotai--Kimi-K3.json", specs_kimi_k3, DENSE_MLA_BLOCK),
    )
}

KV_DTYPES = ("auto", "fp8")
LENGTHS = (32768, 131072)
BUDGETS = (GIB, 16 * GIB, 64 * GIB)
TPS = (1, 8)


@dataclass
class Case:
    family: str
    kv_cache_dtype: str
    max_model_len: int
    tp: int
    kv_memory_bytes: int

    @property
    def id(self) -> str:
        return (
            f"{self.family}-{self.kv_cache_dtype}-L{self.max_model_len}-tp{self.tp}-{self.kv_memory_bytes / GIB:g}GiB"
        )


def grid() -> list[Case]:
    """Families x KV dtypes (auto, fp8) x lengths (up to the config's max_position_embeddings) x
    tp x per-rank budgets, and DeepSeek-V4's bfloat16 and nvfp4_ds_mla refusals."""
    cases = []
    for name, fam in FAMILIES.items():
        limit = load_config(fam.file).get("max_position_embeddings")
        cases += [
            Case(name, kv, L, tp, mem)
            for kv in KV_DTYPES
            for L in LENGTHS
            if not limit or limit >= L
            for tp in TPS
            for mem in BUDGETS
        ]
        if fam.build is specs_deepseek_v4:
            # the dtypes DeepseekV4ForCausalLM refuses: bf16, and the NVFP4 layout (V4.1's records)
            cases += [Case(name, kv, LENGTHS[0], 1, BUDGETS[1]) for kv in ("bfloat16", "nvfp4_ds_mla")]
    return cases


def case_config(family: Family, case: Case):
    load_config(family.file)  # reads (and checks) the family's config file as before; the value is unused
    block = family.block_size
    if isinstance(block, dict):
        block = block[case.kv_cache_dtype]
    return h.make_vllm_config(
        max_model_len=case.max_model_len,
        block_size=block,
        kv_cache_dtype=case.kv_cache_dtype,
        model_dtype=torch.bfloat16,
        tp=case.tp,
    )


def _spec_kind(spec) -> str:
    return type(spec).__name__


def _layer_spec(group_spec, name: str):
    specs = getattr(group_spec, "kv_cache_specs", None)
    return specs[name] if specs else group_spec


def _group_record(g, layer_pages: dict) -> dict:
    """A KV cache group as the worker's `KVCacheConfig` holds it: its spec class (and the layer
    specs inside a `UniformTypeKVCacheSpecs`), layer count, block size, and the bytes one block
    of the group takes over all its layers (the sum of each layer's page)."""
    spec = g.kv_cache_spec
    specs = getattr(spec, "kv_cache_specs", None)
    inner = sorted({_spec_kind(s) for s in specs.values()}) if specs else [_spec_kind(spec)]
    return {
        "spec": _spec_kind(spec),
        "layer_specs": inner,
        "layers": len(g.layer_names),
        "block_size": spec.block_size,
        "block_bytes": sum(layer_pages[n] for n in g.layer_names),
    }


def per_layer_records(specs: dict) -> list[dict]:
    """One row per distinct (spec class, block size, page, window / ratio) with its layer count:
    what each layer stores, before grouping."""
    rows: dict[tuple, dict] = {}
    for name, s in specs.items():
        kind = name.rsplit(".", 1)[-1] if not name.endswith("attn") else "attn"
        key = (
            kind,
            _spec_kind(s),
            s.block_size,
            s.page_size_bytes,
            getattr(s, "sliding_window", None),
            str(getattr(s, "tokens_per_state", 1)),
        )
        row = rows.setdefault(
            key,
            {
                "cache": kind,
                "spec": _spec_kind(s),
                "block_size": s.block_size,
                "page_size_bytes": s.page_size_bytes,
                "real_page_size_bytes": getattr(s, "real_page_size_bytes", s.page_size_bytes),
                "sliding_window": getattr(s, "sliding_window", None),
                "tokens_per_state": str(getattr(s, "tokens_per_state", 1)),
                "num_kv_heads": getattr(s, "num_kv_heads", None),
                "head_size": getattr(s, "head_size", None),
                "head_size_v": getattr(s, "head_size_v", None),
                "dtype": str(getattr(s, "dtype", "")).removeprefix("torch."),
                "layers": 0,
            },
        )
        row["layers"] += 1
    return list(rows.values())


_ESTIMATED = re.compile(r"estimated maximum model length is (\d+)")


def run_case(case: Case) -> dict:
    """vLLM's figures for one case: the per-layer specs, the groups, and the engine core's KV
    cache initialisation with `kv_memory_bytes` on every one of the `tp` ranks (or its refusal)."""
    fam = FAMILIES[case.family]
    hf = load_config(fam.file)
    out = {"inputs": asdict(case), "vllm_version": h.VLLM_VERSION}
    if fam.exact_config:
        out["exact_config"] = fam.exact_config
    try:
        with h._LogCapture() as log:
            cfg = case_config(fam, case)
            built = fam.build(hf, cfg, case.kv_cache_dtype, case.tp)  # every rank builds the same specs
            specs = [dict(built) for _ in range(case.tp)]
    except (ValueError, NotImplementedError, AssertionError) as e:
        out["refused"] = f"{type(e).__name__}: {e}"
        return out
    out["config_lines"] = [line for line in log.lines if "KV cache" in line or "kv-cache" in line]
    out["kv_cache_dtype_resolved"] = cfg.cache_config.cache_dtype
    out["layer_specs"] = per_layer_records(specs[0])
    out["kv_cache_layout"] = resolve_layout(cfg, fam.backends(), specs[0], case.tp)
    memory = [case.kv_memory_bytes] * case.tp
    try:
        with h._LogCapture() as log:
            groups = h.planning.get_global_kv_cache_groups(cfg, specs)
            configs = h.planning.get_kv_cache_configs(cfg, specs, memory, groups)
    except (ValueError, AssertionError, NotImplementedError) as e:
        out["refused"] = f"{type(e).__name__}: {e}"
        m = _ESTIMATED.search(str(e))
        if m:
            out["estimated_max_model_len"] = int(m.group(1))
        return out
    sched = h.kv_cache_utils.generate_scheduler_kv_cache_config(configs)
    with h._LogCapture() as log:
        h.kv_cache_utils.update_kv_cache_capacity(cfg, sched)
    lines = [line for line in log.lines if line.startswith(("GPU KV cache size", "Maximum concurrency"))]
    tokens = int(re.search(r"GPU KV cache size: ([\d,]+) tokens", lines[0]).group(1).replace(",", ""))
    layer_pages = {
        name: s.page_size_bytes
        for g in configs[0].kv_cache_groups
        for name in g.layer_names
        for s in [_layer_spec(g.kv_cache_spec, name)]
    }
    out.update(
        groups=[_group_record(g, layer_pages) for g in configs[0].kv_cache_groups],
        num_blocks=sched.num_blocks,
        gpu_kv_cache_tokens=tokens,
        max_concurrency=cfg.cache_config.kv_cache_max_concurrency,
        lines=[h.available_memory_line(case.kv_memory_bytes), *lines],
    )
    return out


def main() -> None:
    import sys
    import warnings

    warnings.simplefilter("ignore")
    cases = grid()
    if len(sys.argv) > 1 and sys.argv[1] != "--write":
        cases = [c for c in cases if c.family in sys.argv[1:]]
    results = [run_case(c) for c in cases]
    if "--write" in sys.argv:
        path = Path(__file__).resolve().parent / "fixtures" / "vllm-0.33-2026.json"
        path.write_text(json.dumps({"vllm_version": h.VLLM_VERSION, "cases": results}, indent=1) + "\n")
        print(f"wrote {len(results)} cases to {path}")
    else:
        for r in results:
            print(json.dumps(r))


if __name__ == "__main__":
    main()
