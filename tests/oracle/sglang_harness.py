"""Runs SGLang 0.5.23's own pool-sizing code on a CPU (no GPU, no server): the functions that turn
a static budget into the hybrids' state slots and token pool, on the published configs.

Needs SGLang 0.5.23's Python code and what its modules import (docs/engine-oracles.md:
`/work/oracle/venv-sglang-0.5.23`). What runs is SGLang's, unchanged:

- `configs/model_config.py` `ModelConfig` on the config.json (its own config classes:
  `Qwen3_5Config`, `NemotronHConfig`, `KimiK3Config`), `configs/hybrid_arch.py` `mambaish_config`
  and the config's `mamba2_cache_params` (`configs/mamba_utils.py`: shapes, dtypes,
  `mamba_cache_per_req`);
- `mem_cache/kv_cache_configurator.py` `KVCacheConfigurator._handle_max_mamba_cache` (the split),
  `_calculate_mamba_ratio` and `resolve_max_num_reqs`;
- `model_executor/pool_configurator.py` `DefaultPoolConfigurator._compute_cell_size` and
  `calculate_pool_sizes`;
- `mem_cache/memory_pool.py` `MambaPool` and `MHATokenToKVPool` / `MLATokenToKVPool`, allocated
  on the CPU for small budgets, for their log lines and buffer bytes.

What is stood in for (SGLang reads it from its runtime context, built from `ServerArgs` on a
GPU host): the resolved server arguments a default launch has for these models (`SCHEDULE`,
`EXEC_MAMBA`: `--mamba-full-memory-ratio` 0.9, no `--max-mamba-cache-size`, radix cache and
overlap schedule on, the `extra_buffer` radix-cache strategy `_mamba_radix_cache_resolution`
picks), the parallel layout (attention TP = `tp`, no DP / DCP / PP) and the `KVCacheConfigurator`
instance's attributes these methods read. The config.json copies lose their `auto_map` (SGLang's
own config class is used, as it is for these model types with trust_remote_code off).
"""

from __future__ import annotations

import functools
import json
import logging
import tempfile
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import torch
from sglang.srt.configs import kimi_linear as cfg_kimi
from sglang.srt.configs import nemotron_h as cfg_nemotron
from sglang.srt.configs import qwen3_next as cfg_qwen3_next
from sglang.srt.configs.hybrid_arch import hybrid_gdn_config, hybrid_kda_config, mambaish_config
from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.layers.cp import utils as cp_utils
from sglang.srt.mem_cache import kv_cache_configurator as kcc
from sglang.srt.mem_cache import memory_pool as mp
from sglang.srt.model_executor import pool_configurator as pc

SGLANG_VERSION = __import__("sglang").__version__
DATA = Path(__file__).parents[1] / "data" / "hf-configs-2026"
GIB = 1 << 30
DTYPES = {"bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn}


def _parallel(tp: int) -> SimpleNamespace:
    return SimpleNamespace(
        attn_tp_size=tp, attn_dcp_size=1, attn_dp_size=1, pp_size=1, tp_size=tp, launch_world_size=tp
    )


@functools.cache
def model_config(config_file: str) -> ModelConfig:
    """SGLang's `ModelConfig` of a published config.json (tests/data/hf-configs-2026/...)."""
    data = json.loads((DATA / config_file).read_text())
    data.pop("auto_map", None)
    folder = Path(tempfile.mkdtemp(prefix="sglang-oracle-"))
    (folder / "config.json").write_text(json.dumps(data))
    return ModelConfig(str(folder))


def run(config_file: str, *, tp: int, kv_dtype: str, budget_bytes: int, allocate: bool = False) -> dict:
    """SGLang's figures for one launch: {per_req, max_mamba_cache_size, available_bytes, cell,
    tokens, max_running_requests, (allocate: the log lines and buffer bytes)}."""
    mc = model_config(config_file)
    parallel = _parallel(tp)
    schedule = SimpleNamespace(
        max_mamba_cache_size=None,
        mamba_full_memory_ratio=0.9,
        max_running_requests=None,
        disable_overlap_schedule=False,
        max_total_tokens=None,
        page_size=1,
    )
    exec_ = SimpleNamespace(
        mamba=SimpleNamespace(
            enable_linear_replayssm_spec=False,
            enable_mamba_extra_buffer=True,
            enable_mamba_extra_buffer_lazy=False,
        )
    )
    memory = SimpleNamespace(disable_radix_cache=False, enable_hisparse=False)

    def override(_name: str, **kw: int) -> None:
        for key, value in kw.items():
            setattr(schedule, key, value)

    context = SimpleNamespace(override=override)
    patches = [
        mock.patch.object(cfg_nemotron, "get_parallel", lambda: parallel),
        mock.patch.object(cfg_kimi, "get_parallel", lambda: parallel),
        mock.patch.object(cfg_qwen3_next, "get_parallel", lambda: parallel),
        mock.patch.object(cfg_qwen3_next, "linear_attn_tp_size", lambda: tp),
        mock.patch.object(kcc, "get_schedule", lambda: schedule),
        mock.patch.object(kcc, "get_exec", lambda: exec_),
        mock.patch.object(kcc, "get_memory", lambda: memory),
        mock.patch.object(kcc, "get_context", lambda: context),
        mock.patch.object(kcc, "get_parallel", lambda: parallel),
        mock.patch.object(kcc, "_pd_prefill_skips_mamba_spec_state", lambda: False),
        mock.patch.object(pc, "get_parallel", lambda: parallel),
        mock.patch.object(pc, "get_memory", lambda: memory),
        mock.patch.object(cp_utils, "get_glm_dsa_layer_split_effective_num_layers", lambda _kvc, n: n),
    ]
    warnings: list[str] = []
    handler = _Grab(warnings)
    kcc.logger.addHandler(handler)
    for p in patches:
        p.start()
    try:
        out = _run(mc, tp, DTYPES[kv_dtype], budget_bytes, schedule, allocate)
    except (RuntimeError, ValueError) as e:  # SGLang's start-up failures
        out = {"sglang": SGLANG_VERSION, "error": str(e)}
    finally:
        for p in reversed(patches):
            p.stop()
        kcc.logger.removeHandler(handler)
    return {**out, "warnings": warnings}


class _Grab(logging.Handler):
    """Keeps the messages of the logger it is added to."""

    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.INFO)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


def _run(mc: ModelConfig, tp: int, kv_dtype: torch.dtype, budget_bytes: int, schedule, allocate: bool) -> dict:
    hybrid = mambaish_config(mc)
    params = hybrid.mamba2_cache_params
    kvc = SimpleNamespace(
        mambaish_config=hybrid,
        pp_size=1,
        attn_dp_size=1,
        fused_entry_bytes=lambda _name: None,
        spec_algorithm=SimpleNamespace(is_none=lambda: True),
        hybrid_gdn_config=hybrid_gdn_config(mc),
        hybrid_kda_config=hybrid_kda_config(mc),
        extra_mamba_cache_bytes_per_req=0,
        model_config=mc,
        kv_cache_dtype=kv_dtype,
        server_args=SimpleNamespace(enable_hisparse=False),
        use_mla_backend=mc.attention_arch == mc.attention_arch.MLA,
        is_draft_worker=False,
    )
    kvc._calculate_mamba_ratio = lambda: kcc.KVCacheConfigurator._calculate_mamba_ratio(kvc)
    # _profile_available_bytes: rest_memory in GiB, then the state's share, then bytes
    rest_gib = kcc.KVCacheConfigurator._handle_max_mamba_cache(kvc, budget_bytes / GIB)
    available = int(rest_gib * (1 << 30))
    n_full = len(hybrid.full_attention_layer_ids)
    fake = SimpleNamespace(
        kv_cache_dtype_str="auto", _compute_qsa_cell_size=pc.DefaultPoolConfigurator._compute_qsa_cell_size
    )
    cell = pc.DefaultPoolConfigurator._compute_cell_size(fake, kvc, n_full)
    sizer = SimpleNamespace(_cell_size=cell, _fixed_overhead_bytes=0, _zero_kv_max_tokens=0)
    tokens = pc.DefaultPoolConfigurator.calculate_pool_sizes(sizer, available, 1).max_total_num_tokens
    reqs = kcc.KVCacheConfigurator.resolve_max_num_reqs(kvc, tokens)
    out = {
        "sglang": SGLANG_VERSION,
        "per_req": params.mamba_cache_per_req,
        "conv_shape": [list(s) for s in params.shape.conv],
        "temporal_shape": list(params.shape.temporal),
        "max_mamba_cache_size": schedule.max_mamba_cache_size,
        "available_bytes": available,
        "cell": cell,
        "tokens": tokens,
        "max_running_requests": reqs,
    }
    if allocate:
        out.update(_allocate(mc, hybrid, params, kv_dtype, tp, schedule.max_mamba_cache_size, tokens))
    return out


def _allocate(mc, hybrid, params, kv_dtype, tp, slots, tokens) -> dict:
    """The pools themselves, on the CPU: their log lines and bytes."""
    records: list[str] = []
    handler = _Grab(records)
    mp.logger.addHandler(handler)
    mp.logger.setLevel(logging.INFO)
    try:
        mamba = mp.MambaPool(
            size=slots,
            spec_state_size=slots,
            cache_params=params,
            mamba_layer_ids=list(params.layers),
            device="cpu",
        )
        full = len(hybrid.full_attention_layer_ids)
        if mc.attention_arch == mc.attention_arch.MLA:
            pool = mp.MLATokenToKVPool(
                size=tokens,
                page_size=1,
                dtype=kv_dtype,
                kv_lora_rank=mc.kv_lora_rank,
                qk_rope_head_dim=mc.qk_rope_head_dim,
                layer_num=full,
                device="cpu",
                enable_memory_saver=False,
            )
            kv = pool.get_kv_size_bytes()
            kv_bytes = [int(kv), 0]
        else:
            pool = mp.MHATokenToKVPool(
                size=tokens,
                page_size=1,
                dtype=kv_dtype,
                head_num=mc.get_num_kv_heads(tp),
                head_dim=mc.head_dim,
                layer_num=full,
                device="cpu",
                enable_memory_saver=False,
            )
            kv_bytes = [int(x) for x in pool.get_kv_size_bytes()]
        state_bytes = int(mamba.mamba_cache.mem_usage_bytes())
    finally:
        mp.logger.removeHandler(handler)
    return {"log_lines": records, "kv_bytes": kv_bytes, "state_bytes": state_bytes}


#: the hybrid configs (tests/data/hf-configs-2026/): Qwen3.5 dense and MoE, Nemotron-3-Super, Kimi-K3
CONFIGS = (
    "Qwen--Qwen3.5-27B.json",
    "siblings/Qwen--Qwen3.5-397B-A17B.json",
    "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json",
    "moonshotai--Kimi-K3.json",
)
#: budgets per rank: round GiB counts, an odd byte count, and ones too small for SGLang to start
BUDGETS = (20 * GIB, 80 * GIB, 57_123_456_789, 130 * GIB, GIB // 2, 3 * GIB)


def grid() -> list[dict]:
    """The cases: every model x tp 1, 2, 4, 8, 16 (Nemotron's 8 groups widened to 16) x bf16 / fp8_e4m3
    x `BUDGETS`; plus the pools allocated
    on the CPU at tp 8 with a 1 GiB budget (their log lines and bytes)."""
    cases = [
        {"config": c, "tp": tp, "kv_dtype": d, "budget_bytes": b, "allocate": False}
        for c in CONFIGS
        for tp in (1, 2, 4, 8, 16)
        if not (tp == 16 and c == "Qwen--Qwen3.5-27B.json")  # 24 attention heads: SGLang cannot load it at tp 16
        for d in DTYPES
        for b in BUDGETS
    ]
    cases += [{"config": c, "tp": 8, "kv_dtype": "bf16", "budget_bytes": GIB, "allocate": True} for c in CONFIGS]
    return cases


def case_id(case: dict) -> str:
    name = case["config"].split("--")[-1].removesuffix(".json")
    alloc = "-allocated" if case["allocate"] else ""
    return f"{name}-tp{case['tp']}-{case['kv_dtype']}-{case['budget_bytes']}{alloc}"


FIXTURE = Path(__file__).parent / "fixtures" / "sglang_0523_mamba.json"


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
