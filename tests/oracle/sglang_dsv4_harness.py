"""Runs SGLang 0.5.23's own DeepSeek-V4 pool sizing on a CPU (no GPU, no server):
`model_executor/pool_configurator.py` `DSV4PoolConfigurator.__init__` and `calculate_pool_sizes`,
unchanged, on the published DeepSeek-V4 configs, for a grid of budgets.

Needs SGLang 0.5.23's Python code and its imports (docs/engine-oracles.md:
`/work/oracle/venv-sglang-0.5.23`). What runs is SGLang's: `configs/model_config.py` `ModelConfig`
on the config.json, the configurator, and what it calls in `mem_cache/deepseek_v4_memory_pool.py`
(`collect_sources_by_ratio`, `resolve_compress_state_ring_size`, `get_dsv4_indexer_bytes_per_token`,
`select_dsv4_kv_layout`, `kernels/ops/attention/dsv4/kv_layout.py` `KVLayout.page_bytes`).

What is stood in for (SGLang reads it from its runtime context, built from `ServerArgs` on a GPU
host): the resolved server arguments of a default CUDA launch (`arg_groups/model_overrides/
deepseek_v4.py`: page_size 256, --swa-full-tokens-ratio 0.1 set by the override, not by the
operator; `--dsv4-attn-backend` auto resolving to flashmla; no --max-running-requests, no
speculative decoding, no HiSparse, no PD disaggregation, radix cache on), the parallel layout
(`attn_dp_size`, no PP) and the `KVCacheConfigurator` attributes the configurator reads.
`--kv-cache-dtype` reaches it as `kv_cache_dtype_str` (the configurator prices the FlashMLA layout
whatever it says on CUDA).
"""

from __future__ import annotations

import functools
import json
import logging
import tempfile
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

from sglang.srt.configs.model_config import ModelConfig
from sglang.srt.mem_cache import deepseek_v4_memory_pool as dmp
from sglang.srt.model_executor import pool_configurator as pc

SGLANG_VERSION = __import__("sglang").__version__
DATA = Path(__file__).parents[1] / "data" / "hf-configs-2026"
GIB = 1 << 30
PAGE_SIZE = 256  # arg_groups/model_overrides/deepseek_v4.py (CUDA)


@functools.cache
def model_config(config_file: str) -> ModelConfig:
    """SGLang's `ModelConfig` of a published config.json (tests/data/hf-configs-2026/...)."""
    data = json.loads((DATA / config_file).read_text())
    data.pop("auto_map", None)
    folder = Path(tempfile.mkdtemp(prefix="sglang-oracle-"))
    (folder / "config.json").write_text(json.dumps(data))
    return ModelConfig(str(folder))


class _Grab(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.INFO)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())


def run(config_file: str, *, tp: int, dp: int, kv_dtype: str, budget_bytes: int) -> dict:
    """SGLang's figures for one launch: the pool sizes `calculate_pool_sizes` returns, the
    configurator's per-token bytes, its request estimate and its log lines (or the error)."""
    mc = model_config(config_file)
    schedule = SimpleNamespace(
        swa_full_tokens_ratio=0.1,
        _swa_full_tokens_ratio_explicitly_set=False,
        max_running_requests=None,
        chunked_prefill_size=8192,
        swa_prefix_tails=None,
    )
    exec_ = SimpleNamespace(
        kernel=SimpleNamespace(dsv4_attn_backend="flashmla", enable_deepseek_v4_fp4_indexer=False),
        features=SimpleNamespace(enable_encoder_swa_bounded_replay=False),
    )
    spec = SimpleNamespace(speculative_algorithm=None, speculative_num_draft_tokens=None)
    memory = SimpleNamespace(enable_hisparse=False, disable_radix_cache=False)
    disagg = SimpleNamespace(disaggregation_mode="null", disaggregation_decode_extra_slots=0)
    n_layers = mc.num_hidden_layers
    kvc = SimpleNamespace(
        kv_cache_dtype_str=kv_dtype,
        model_config=mc,
        spec_algorithm=SimpleNamespace(is_dspark=lambda: False, is_none=lambda: True, is_eagle=lambda: False),
        layer_info=SimpleNamespace(start_layer=0, end_layer=n_layers),
        pp_size=1,
        sliding_window_size=mc.sliding_window_size,
        page_size=PAGE_SIZE,
        attn_dp_size=dp,
        attn_tp_size=tp // dp,
    )
    patches = [
        mock.patch.object(pc, "get_schedule", lambda: schedule),
        mock.patch.object(pc, "get_exec", lambda: exec_),
        mock.patch.object(pc, "get_spec", lambda: spec),
        mock.patch.object(pc, "get_memory", lambda: memory),
        mock.patch.object(pc, "get_disagg", lambda: disagg),
        mock.patch.object(pc, "max_speculative_num_draft_tokens", lambda: None),
        mock.patch.object(dmp, "get_spec", lambda: spec),
        mock.patch.object(dmp, "get_exec", lambda: exec_),
    ]
    lines: list[str] = []
    handler = _Grab(lines)
    pc.logger.addHandler(handler)
    level = pc.logger.level
    pc.logger.setLevel(logging.INFO)
    for p in patches:
        p.start()
    try:
        conf = pc.DSV4PoolConfigurator(kvc)
        reqs = conf._resolve_max_running_requests_per_worker(budget_bytes)
        cfg = conf.calculate_pool_sizes(budget_bytes, PAGE_SIZE)
        out = {
            "sglang": SGLANG_VERSION,
            "bytes_per_full_token": conf.bytes_per_full_token,
            "bytes_per_swa_token": conf.bytes_per_swa_token,
            "max_running_requests_estimate": reqs,
            "full": cfg.full_max_total_num_tokens,
            "swa": cfg.swa_max_total_num_tokens,
            "c4": cfg.c4_max_total_num_tokens,
            "c128": cfg.c128_max_total_num_tokens,
            "c4_state": cfg.c4_state_pool_size,
            "c128_state": cfg.c128_state_pool_size,
        }
    except (RuntimeError, ValueError, AssertionError) as e:  # SGLang's start-up failures
        out = {"sglang": SGLANG_VERSION, "error": str(e)}
    finally:
        for p in reversed(patches):
            p.stop()
        pc.logger.removeHandler(handler)
        pc.logger.setLevel(level)
    return {**out, "log_lines": lines}


#: the DeepSeek-V4 configs (tests/data/hf-configs-2026/): Flash, its NVFP4 checkpoint, Pro (NVFP4)
CONFIGS = (
    "deepseek-ai--DeepSeek-V4-Flash.json",
    "nvidia--DeepSeek-V4-Flash-NVFP4.json",
    "siblings/nvidia--DeepSeek-V4-Pro-NVFP4.json",
)
#: budgets per rank: round GiB counts, odd byte counts, ones too small for SGLang to start, and two
#: either side of DeepSeek-V4-Flash's SWA floor (c128 states for 2,048 requests, 21,506,293,760 B,
#: plus 3,000 / 6,000 full tokens of 7,086.75 B: an SWA pool of 256 tokens, refused, and of 512)
BUDGETS = (
    GIB // 8,
    GIB // 2,
    GIB,
    3 * GIB,
    20 * GIB,
    21_527_554_010,
    21_548_814_260,
    57_123_456_789,
    80 * GIB,
    130 * GIB,
)
#: (tp, attention dp): plain TP and DP-attention layouts
LAYOUTS = ((1, 1), (4, 1), (8, 1), (8, 8))
KV_DTYPES = ("fp8_e4m3", "bfloat16")


def grid() -> list[dict]:
    """Every config x `LAYOUTS` x `KV_DTYPES` x `BUDGETS`."""
    return [
        {"config": c, "tp": tp, "dp": dp, "kv_dtype": d, "budget_bytes": b}
        for c in CONFIGS
        for tp, dp in LAYOUTS
        for d in KV_DTYPES
        for b in BUDGETS
    ]


def case_id(case: dict) -> str:
    name = case["config"].split("--")[-1].removesuffix(".json")
    return f"{name}-tp{case['tp']}-dp{case['dp']}-{case['kv_dtype']}-{case['budget_bytes']}"


FIXTURE = Path(__file__).parent / "fixtures" / "sglang_0523_dsv4.json"


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
