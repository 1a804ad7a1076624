"""vLLM 0.33's own KV-cache sizing over parallel layouts and every KV-cache dtype (issue 20, item 5),
on a CPU, written to a fixture that the plain test run compares kvcalc against without vLLM.

Two parts, each run in a process of its own (`--part`), since the dtype part replaces vLLM's
current platform with `vllm_backends`' faked CUDA one:

- `layouts`: attention data-parallel + expert parallel and decode context parallel. vLLM's own
  `ParallelConfig` (its tp % dcp check) and `ModelConfig.verify_with_parallel_config` (called on
  a stand-in model config carrying the heads, KV heads, `use_mla` and `is_moe` it reads: the
  GQA / MQA dcp rules, "Number of experts ... when expert parallelism is enabled"), then the
  per-rank layer specs (`vllm_harness.layer_specs`: KV heads max(1, H_kv // tp), as each DP
  rank's engine core builds them) and the engine core's start-up with
  `parallel_config.decode_context_parallel_size` / `data_parallel_size` /
  `enable_expert_parallel` set: `get_global_kv_cache_groups`, `get_kv_cache_configs` (memory
  check, estimated maximum length), `generate_scheduler_kv_cache_config`,
  `update_kv_cache_capacity`. Each DP rank is an engine core of its own with its own requests, so
  a given per-rank budget gives the same figures whatever the DP size (what the grid checks).
- `dtypes`: each of vLLM 0.33's 22 `CacheDType` entries x models on compute capability 9.0 and
  10.0: vLLM's backend selection (`vllm_backends.run_vllm`: `CudaPlatform.get_attn_backend_cls`,
  the preferred block size) - a dtype no backend takes is refused with vLLM's text - then the
  chosen backend's own `customize_spec` over the layer specs (`FullAttentionSpec` /
  `MLAAttentionSpec` with `get_kv_quant_mode`), TurboQuant / UltraQuant's boundary layers
  (`TurboQuantConfig.get_boundary_skip_layers` on the stand-in model config) and vLLM's block
  alignment for them (`Platform._align_heterogeneous_kv_block_size`), then the same start-up
  functions. Not vLLM's: `vllm.utils.flashinfer.has_nvidia_artifactory` answers True (a GPU
  server fetches or caches the TRTLLM cubins; this host has no network), so FlashInfer's
  `supports_trtllm_attention` answers per device as on such a server.
- `models2026`: the same for three 2026 configs (`vllm_2026.FAMILIES`): DeepSeek-V3.2 and GLM-5.2
  (sparse MLA: GLM's `GlmMoeDsaForCausalLM.verify_and_update_config`, the selection with
  `use_sparse` and a rank's query heads, `_canonicalize_sparse_mla_kv_cache_dtype` asked with the
  chosen backend, the block every non-SSM backend takes: the MLA backend's and the indexer
  cache's `DeepseekV32IndexerBackend`, the indexer key cache) and Qwen3.5-27B (Gated DeltaNet hybrid: the attention
  spec through the chosen backend's `customize_spec`, `Platform._align_hybrid_block_size` with
  that backend), built by `vllm_2026`'s spec builders with the chosen backend in place of its
  Hopper stand-ins; `flashinfer_mla_sparse_sm90.has_flashinfer_sm90_nope_mla` answers True (the
  wheel requires flashinfer-python 0.7.2.post1, past the 0.6.18 it checks for).

Run: `PYTHONPATH=$PWD:$PWD/tests/oracle /work/oracle/venv-vllm-0.33.0/bin/python
tests/oracle/vllm_grid.py --write` (rewrites `tests/oracle/fixtures/vllm-0.33-grid.json`);
`--part layouts` / `--part dtypes` print one JSON record per case. kvcalc's side and the
comparison: `vllm_grid_fixture.py` (no vLLM needed).
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).parent))

from vllm_grid_cases import (  # noqa: E402
    MODELS_2026,
    PARTS,
    dcp_cases,
    dtype_cases,
    layout_cases,
    models2026_cases,
)

FIXTURE = Path(__file__).parent / "fixtures" / "vllm-0.33-grid.json"
GIB = 2**30


def _value_error(e: Exception) -> str:
    """The ValueError text inside a pydantic ValidationError (vLLM's config classes are pydantic)."""
    errors = getattr(e, "errors", None)
    if callable(errors):
        ctx = errors()[0].get("ctx") or {}
        if "error" in ctx:
            return str(ctx["error"])
    return str(e)


def _start(cfg, specs: dict, mem: int, tp: int) -> dict:
    """The engine core's KV cache start-up (vLLM 0.33) for `tp` workers with `specs` each."""
    import re

    import vllm_harness as h
    from vllm.v1.core import kv_cache_planning as planning
    from vllm.v1.core import kv_cache_utils

    try:
        groups = planning.get_global_kv_cache_groups(cfg, [specs] * tp)
        configs = planning.get_kv_cache_configs(cfg, [specs] * tp, [mem] * tp, groups)
    except ValueError as e:
        m = h._ESTIMATED.search(str(e))
        return {"refused": str(e), "estimated_max_len": int(m.group(1)) if m else None}
    sched = kv_cache_utils.generate_scheduler_kv_cache_config(configs)
    with h._LogCapture() as log:
        kv_cache_utils.update_kv_cache_capacity(cfg, sched)
    line = next(x for x in log.lines if x.startswith("GPU KV cache size"))
    tokens = int(re.search(r"GPU KV cache size: ([\d,]+) tokens", line).group(1).replace(",", ""))
    return {
        "refused": None,
        "num_blocks": sched.num_blocks,
        "tokens": tokens,
        "concurrency": cfg.cache_config.kv_cache_max_concurrency,
        "line": line,
        "pages": sorted({s.page_size_bytes for s in specs.values()}),
        "block_sizes": sorted({g.kv_cache_spec.block_size for g in sched.kv_cache_groups}),
    }


def _standin_model_config(model, kv_heads: int):
    from vllm.config import ModelConfig

    mc = SimpleNamespace(
        model_arch_config=SimpleNamespace(total_num_attention_heads=model.n_heads),
        use_mla=any(layer.kind == "mla" for layer in model.layers),
        is_moe=bool(model.n_experts),
        multimodal_config=None,
        get_total_num_kv_heads=lambda: kv_heads,
    )
    mc._verify_with_expert_parallelism = lambda: ModelConfig._verify_with_expert_parallelism(mc)
    return mc


def _fresh_device_caches() -> None:
    """Clear the device answers vLLM caches per process (`functools.cache` in
    `vllm/utils/flashinfer.py`: `supports_trtllm_attention` ...): one vLLM process serves one GPU,
    this one fakes several in turn."""
    import vllm.utils.flashinfer as fi

    for value in vars(fi).values():
        if isinstance(value, functools._lru_cache_wrapper):
            value.cache_clear()
    fi.has_nvidia_artifactory = lambda: True  # see run_dtype


def run_layout(inputs: dict) -> dict:
    """vLLM's figures (or refusal) for one layout case (`vllm_grid_cases.layout_cases`)."""
    import vllm_harness as h
    from vllm.config import ModelConfig, ParallelConfig

    model = h.load(inputs["model"])
    tp, dp, ep, dcp = inputs["tp"], inputs["dp"], inputs["ep"], inputs["dcp"]
    try:
        pc = ParallelConfig(
            tensor_parallel_size=tp, data_parallel_size=dp, enable_expert_parallel=ep, decode_context_parallel_size=dcp
        )
        ModelConfig.verify_with_parallel_config(_standin_model_config(model, model.resolved_n_kv_heads), pc)
    except Exception as e:  # noqa: BLE001 - vLLM's config refusal, recorded as its text
        return {"refused": _value_error(e), "stage": "config"}
    cfg = h.case_config(
        model,
        max_model_len=inputs["max_model_len"],
        block_size=inputs["block_size"],
        kv_cache_dtype=inputs["kv_cache_dtype"],
        tp=tp,
    )
    cfg.parallel_config.decode_context_parallel_size = dcp
    cfg.parallel_config.data_parallel_size = dp
    cfg.parallel_config.enable_expert_parallel = ep
    specs = h.layer_specs(model, cfg, inputs["kv_cache_dtype"], tp)
    out = _start(cfg, specs, inputs["kv_memory_bytes"], tp)
    out["stage"] = "start-up"
    return out


def _config_refusal(dtype_name: str, use_mla: bool) -> dict | None:
    """vLLM's own config-time dtype check, `VllmConfig.validate_nvfp4_kv_cache_with_mla`
    (`vllm/config/vllm.py` 3421-3437: an "nvfp4*" dtype but the "_ds_mla" layouts on a `use_mla`
    model), run on the case's cache dtype and `use_mla`. vLLM runs it when `VllmConfig` is built,
    before any backend is chosen; the selection configs here are built without the model config,
    so it is called on its own, first. None when it passes."""
    from vllm.config.vllm import VllmConfig

    check = VllmConfig.validate_nvfp4_kv_cache_with_mla
    check = getattr(check, "wrapped", check)  # pydantic's descriptor proxy, where it is one
    stand_in = SimpleNamespace(
        model_config=SimpleNamespace(use_mla=use_mla), cache_config=SimpleNamespace(cache_dtype=dtype_name)
    )
    try:
        check(stand_in)
    except ValueError as e:
        return {"refused": str(e), "stage": "config"}
    return None


def run_dtype(inputs: dict) -> dict:
    """vLLM's backend, block size and figures (or refusal) for one dtype case."""
    import vllm_backends as vb
    import vllm_harness as h
    from vllm.config.vllm import set_current_vllm_config
    from vllm.utils.import_utils import resolve_obj_by_qualname  # noqa: F401  (vb imports it)

    # a GPU server reaches NVIDIA's artifactory for the TRTLLM cubins (or has them cached); this
    # CPU host does not, and `supports_trtllm_attention` would answer False on every device
    _fresh_device_caches()
    name, dtype_name, cc = inputs["model"], inputs["kv_cache_dtype"], inputs["compute_capability"]
    model = h.load(name)
    if (refused := _config_refusal(dtype_name, bool(model.kv_lora_rank))) is not None:
        return refused
    try:
        backend_name, block, msg = vb.run_vllm(vb.Case(cc, dtype_name, None, name))
    except Exception as e:  # noqa: BLE001 - a config vLLM's selection raises on
        return {"refused": f"{type(e).__name__}: {e}", "stage": "backend"}
    if backend_name is None:
        return {"refused": msg, "stage": "backend"}
    with set_current_vllm_config(vb._vllm_config(model, None)):
        path = _backend_path(vb, model, dtype_name)
    backend = vb.resolve_obj_by_qualname(path)
    return _size(inputs, model, backend, backend_name, block)


def _backend_path(vb, model, dtype_name: str) -> str:
    import torch

    return vb._FakeCuda.get_attn_backend_cls(
        None,
        vb.AttentionSelectorConfig(
            head_size=model.resolved_head_dim,
            dtype=torch.bfloat16,
            kv_cache_dtype=dtype_name,
            block_size=None,
            use_mla=bool(model.kv_lora_rank),
        ),
        num_heads=model.n_heads,
    )


def _size(inputs: dict, model, backend, backend_name: str, block: int) -> dict:
    import torch
    import vllm_harness as h
    from vllm.config.vllm import set_current_vllm_config
    from vllm.platforms.interface import Platform
    from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype
    from vllm.v1 import kv_cache_interface as kvi

    dtype_name = inputs["kv_cache_dtype"]
    tp, dcp = inputs.get("tp", 1), inputs.get("dcp", 1)
    mla = bool(model.kv_lora_rank)
    cfg = h.make_vllm_config(
        max_model_len=inputs["max_model_len"],
        block_size=block,
        kv_cache_dtype=dtype_name,
        model_dtype=torch.bfloat16,
        tp=tp,
    )
    cfg.parallel_config.decode_context_parallel_size = dcp
    n_layers = len(model.layers)
    kv_heads = 1 if mla else max(1, model.resolved_n_kv_heads // tp)
    head = model.layers[0].head_dim_k
    cfg.model_config.get_num_kv_heads = lambda pc=None: kv_heads
    cfg.model_config.get_head_size = lambda: head
    cfg.model_config.is_hybrid = False
    cfg.model_config.hf_text_config = SimpleNamespace(num_hidden_layers=n_layers)
    skip: set[int] = set()
    if dtype_name.startswith("turboquant_") or dtype_name == "ultraquant_4bit":  # engine/arg_utils.py 2334-2351
        from vllm.model_executor.layers.quantization.turboquant.config import TurboQuantConfig

        cfg.cache_config.kv_cache_dtype_skip_layers = TurboQuantConfig.get_boundary_skip_layers(cfg.model_config)
        skip = {int(i) for i in cfg.cache_config.kv_cache_dtype_skip_layers}
        Platform._align_heterogeneous_kv_block_size(cfg, backend)
        block = cfg.cache_config.block_size
    try:
        dtype = kv_cache_dtype_str_to_dtype(dtype_name, cfg.model_config)
    except Exception as e:  # noqa: BLE001
        return {"refused": f"{type(e).__name__}: {e}", "stage": "dtype"}
    quant = kvi.get_kv_quant_mode(dtype_name)
    specs = {}
    with set_current_vllm_config(cfg):
        for i, layer in enumerate(model.layers):
            if mla:
                spec = kvi.MLAAttentionSpec(
                    block_size=block,
                    num_kv_heads=1,
                    head_size=layer.head_dim_k,
                    dtype=dtype,
                    cache_dtype_str=dtype_name,
                    kv_quant_mode=quant,
                    max_tp_shards=1,
                )
            elif i in skip:
                spec = kvi.FullAttentionSpec(
                    block_size=block, num_kv_heads=kv_heads, head_size=head, dtype=torch.bfloat16
                )
            else:
                spec = kvi.FullAttentionSpec(
                    block_size=block, num_kv_heads=kv_heads, head_size=head, dtype=dtype, kv_quant_mode=quant
                )
            if i not in skip:
                spec = backend.customize_spec(spec)
            specs[f"model.layers.{i}.self_attn.attn"] = spec
    out = _start(cfg, specs, inputs["kv_memory_bytes"], tp)
    out.update(stage="start-up", backend=backend_name, block_size=block, skip_layers=sorted(skip))
    return out


def run_dcp(inputs: dict) -> dict:
    """A dtype case under decode context parallel (`inputs` tp, dcp): vLLM's backend selection with
    `use_dcp` (each backend's `supports_dcp`, `AttentionBackend.validate_configuration`: "DCP not
    supported"), the device set as in `run_dtype`; then `_size` with the parallel config's
    `decode_context_parallel_size`, or, for the 2026 configs, `run_2026`."""
    import torch
    import vllm_backends as vb
    import vllm_harness as h
    from vllm.config.vllm import set_current_vllm_config
    from vllm.platforms.interface import Platform

    if inputs["model"] in MODELS_2026:
        return run_2026(inputs)
    _fresh_device_caches()
    model = h.load(inputs["model"])
    if (refused := _config_refusal(inputs["kv_cache_dtype"], bool(model.kv_lora_rank))) is not None:
        return refused
    major, minor = (int(x) for x in inputs["compute_capability"].split("."))
    vb._FakeCuda.capability = vb.DeviceCapability(major, minor)
    vb.vllm_cuda._get_backend_priorities.cache_clear()
    cfg = vb._vllm_config(model, None)
    cfg.parallel_config.tensor_parallel_size = inputs["tp"]
    cfg.parallel_config.decode_context_parallel_size = inputs["dcp"]
    selector = vb.AttentionSelectorConfig(
        head_size=model.resolved_head_dim,
        dtype=torch.bfloat16,
        kv_cache_dtype=inputs["kv_cache_dtype"],
        block_size=None,
        use_mla=bool(model.kv_lora_rank),
        use_dcp=inputs["dcp"] > 1,
    )
    try:
        with set_current_vllm_config(cfg):
            backend = vb.resolve_obj_by_qualname(
                vb._FakeCuda.get_attn_backend_cls(None, selector, num_heads=model.n_heads)
            )
            block = Platform._preferred_block_size_for_backends([backend], 16, cfg)
    except Exception as e:  # noqa: BLE001 - vLLM's refusal, as its text
        return {"refused": str(e), "stage": "backend"}
    return _size(inputs, model, backend, backend.get_name(), block)


def run_2026(inputs: dict) -> dict:
    """vLLM's backend, block size and figures (or refusal) for a 2026 config (`vllm_2026.FAMILIES`:
    DeepSeek-V3.2's sparse MLA, Qwen3.5's Gated DeltaNet hybrid) under one `--kv-cache-dtype`:
    vLLM's backend selection with `use_sparse` for the DSA model, then `vllm_2026`'s spec builders
    with the chosen backend in place of its Hopper stand-ins (the sparse dtype canonicalisation
    `_canonicalize_sparse_mla_kv_cache_dtype` asked with that backend; the attention layers'
    spec through its `customize_spec`; `Platform._align_hybrid_block_size` with it)."""
    import torch
    import vllm.model_executor.layers.attention.mla_attention as mla_mod
    import vllm_2026 as v26
    import vllm_backends as vb
    from vllm.config.vllm import set_current_vllm_config
    from vllm.platforms.interface import Platform

    _fresh_device_caches()
    # the wheel's flashinfer-python 0.7.2.post1 has SM90 MLA (`ckv_scale_arr`, FlashInfer >= 0.6.18);
    # the stand-in flashinfer module has no signature to inspect
    import vllm.v1.attention.backends.mla.flashinfer_mla_sparse_sm90 as sm90

    sm90.has_flashinfer_sm90_nope_mla = lambda: True
    family, dtype_name, cc = inputs["model"], inputs["kv_cache_dtype"], inputs["compute_capability"]
    fam = v26.FAMILIES[family]
    hf = v26.load_config(fam.file)
    sparse = "index_topk" in hf
    mla = "kv_lora_rank" in hf
    if (refused := _config_refusal(dtype_name, mla)) is not None:
        return refused
    head = hf["kv_lora_rank"] + hf["qk_rope_head_dim"] if mla else hf["head_dim"]
    major, minor = (int(x) for x in cc.split("."))
    vb._FakeCuda.capability = vb.DeviceCapability(major, minor)
    vb.vllm_cuda._get_backend_priorities.cache_clear()
    from vllm.config import CacheConfig

    tp, dcp = inputs.get("tp", 1), inputs.get("dcp", 1)
    sel_cfg = vb.VllmConfig(cache_config=CacheConfig(block_size=None, cache_dtype=dtype_name))
    sel_cfg.model_config = SimpleNamespace(
        hf_text_config=SimpleNamespace(
            qk_nope_head_dim=hf.get("qk_nope_head_dim"),
            qk_rope_head_dim=hf.get("qk_rope_head_dim"),
            v_head_dim=hf.get("v_head_dim"),
            kv_lora_rank=hf.get("kv_lora_rank"),
            num_attention_heads=hf["num_attention_heads"],
            index_topk=hf.get("index_topk"),
        ),
        get_head_size=lambda: head,
        # per rank, as `ModelConfig.get_num_attention_heads(parallel_config)` (FA4's head check)
        get_num_attention_heads=lambda pc=None: hf["num_attention_heads"] // tp,
        get_num_kv_heads=lambda pc=None: 1 if mla else hf["num_key_value_heads"],
        max_model_len=inputs["max_model_len"],
        dtype=torch.bfloat16,
        use_mla=mla,
        is_diffusion=False,
        is_mm_prefix_lm=False,
        rswa_window=None,
    )
    sel_cfg.parallel_config.tensor_parallel_size = tp
    sel_cfg.parallel_config.decode_context_parallel_size = dcp
    if "GlmMoeDsaForCausalLM" in hf.get("architectures", ()):
        # the model class's config hook, run by `VllmConfig.__post_init__` (`models/config.py`
        # 89-116): auto becomes fp8_e4m3 on the SM100 family (the faked platform's capability)
        from vllm.model_executor.models.config import GlmMoeDsaForCausalLM

        GlmMoeDsaForCausalLM.verify_and_update_config(sel_cfg)
        dtype_name = sel_cfg.cache_config.cache_dtype
    selector = vb.AttentionSelectorConfig(
        head_size=head,
        dtype=torch.bfloat16,
        kv_cache_dtype=dtype_name,
        block_size=None,
        use_mla=mla,
        use_sparse=sparse,
        use_dcp=dcp > 1,
    )
    try:
        with set_current_vllm_config(sel_cfg):
            # the heads of one rank: `DeepseekV2MLAAttention` hands `num_local_heads` (heads // tp)
            # to `MLAAttention`, which asks the selector with them (mla_attention.py 514-521)
            backend = vb.resolve_obj_by_qualname(
                vb._FakeCuda.get_attn_backend_cls(None, selector, num_heads=hf["num_attention_heads"] // tp)
            )
            # `Platform.update_block_size_for_backend` takes the block every non-SSM layer's backend
            # accepts (`_find_non_ssm_backends`): a DSA model's indexer cache is such a layer
            # (`DeepseekV32IndexerCache.get_attn_backend`, deepseek_v2.py 675), and
            # `DeepseekV32IndexerBackend` takes 64 only on CUDA (indexer.py 285-286)
            from vllm.v1.attention.backends.mla.indexer import DeepseekV32IndexerBackend

            backends = [backend, DeepseekV32IndexerBackend] if sparse else [backend]
            block = Platform._preferred_block_size_for_backends(backends, 16, sel_cfg)
    except Exception as e:  # noqa: BLE001 - vLLM's refusal, as its text
        return {"refused": str(e), "stage": "backend"}
    canonicalize = mla_mod._canonicalize_sparse_mla_kv_cache_dtype
    mla_mod._canonicalize_sparse_mla_kv_cache_dtype = lambda _stub, kv: canonicalize(backend, kv)
    plain_spec = v26.attention_spec
    v26.attention_spec = lambda *a, **kw: backend.customize_spec(plain_spec(*a, **kw))
    v26._NoLayoutPreference = backend
    case = v26.Case(family, dtype_name, inputs["max_model_len"], tp, inputs["kv_memory_bytes"])
    try:
        cfg = v26.case_config(fam, case)
        cfg.cache_config.block_size = block
        cfg.parallel_config.decode_context_parallel_size = dcp
        # what FlashInfer's kernel block sizes read of the model config (flashinfer.py 590-600)
        cfg.model_config.get_num_attention_heads = lambda pc=None: hf["num_attention_heads"]
        with set_current_vllm_config(cfg):
            specs = fam.build(hf, cfg, dtype_name, tp)
    except Exception as e:  # noqa: BLE001
        return {"refused": f"{type(e).__name__}: {e}", "stage": "specs", "backend": backend.get_name()}
    finally:
        mla_mod._canonicalize_sparse_mla_kv_cache_dtype = canonicalize
        v26.attention_spec = plain_spec
    out = _start(cfg, specs, inputs["kv_memory_bytes"], tp)
    out.update(stage="start-up", backend=backend.get_name(), block_size=min(s.block_size for s in specs.values()))
    return out


def main() -> None:
    args = sys.argv[1:]
    if "--part" in args:
        part = args[args.index("--part") + 1]
        import warnings

        warnings.simplefilter("ignore")
        if part != "layouts":
            import vllm_backends  # noqa: F401  (the faked CUDA platform, before vllm_harness)
        if part in ("models2026", "dcp"):
            # DeepSeek-V3.2's indexer cache class lives in models/deepseek_v2.py, whose imports ask
            # the CUDA kernels whether CUTLASS takes block fp8 (`w8a8_utils.py` at import): a weight
            # question, stood in (there are no kernels here)
            import vllm._custom_ops as ops

            ops.cutlass_scaled_mm_supports_block_fp8 = lambda capability: False
            from vllm.model_executor.models import deepseek_v2  # noqa: F401
        run, cases = {
            "layouts": (run_layout, layout_cases),
            "dtypes": (run_dtype, dtype_cases),
            "models2026": (run_2026, models2026_cases),
            "dcp": (run_dcp, dcp_cases),
        }[part]
        cases = cases()
        for inputs in cases:
            print("RECORD " + json.dumps({"part": part, "inputs": inputs, "vllm": run(inputs)}), flush=True)
        return
    records = []
    for part in PARTS:
        out = subprocess.run(
            [sys.executable, __file__, "--part", part], check=True, capture_output=True, text=True
        ).stdout
        records += [json.loads(x[7:]) for x in out.splitlines() if x.startswith("RECORD ")]
    import vllm

    doc = {"vllm_version": vllm.__version__, "generator": "tests/oracle/vllm_grid.py", "cases": records}
    if "--write" in args:
        FIXTURE.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {len(records)} cases to {FIXTURE}")
    else:
        print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
