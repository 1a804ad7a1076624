"""The cases of the vLLM 0.33 layout / dtype grid (`vllm_grid.py`), as plain data (no vLLM)."""

from __future__ import annotations

GIB = 2**30

#: vLLM 0.33's `CacheDType` (`vllm/config/cache.py`), in its order
CACHE_DTYPES = (
    "auto",
    "float16",
    "bfloat16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
    "nvfp4_ds_mla",
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "octave_k3v4",
    "octave_k3v3",
    "octave_k3v3_compact",
    "ultraquant_4bit",
    "int4_per_token_head",
    "int8_per_token_head",
    "fp8_per_token_head",
    "nvfp4",
    "nvfp4_4over6",
)

#: (model, tp, dp, ep, dcp): GQA models (Llama-3.1-8B 8 KV heads of 32, Llama-3.1-70B 8 of 64,
#: Qwen3-30B-A3B 4 of 32, MoE), MLA models (DeepSeek-V2-Lite, DeepSeek-V3, MoE), a sliding model
LAYOUTS = (
    # attention DP + EP: each DP rank's own requests, per-rank figures as tp alone
    ("deepseek-v3", 1, 8, True, 1),
    ("deepseek-v3", 8, 2, True, 1),
    ("deepseek-v2-lite", 1, 4, True, 1),
    ("deepseek-v2-lite", 2, 4, False, 1),
    ("qwen3-30b-a3b", 1, 8, True, 1),
    ("qwen3-30b-a3b", 2, 4, True, 1),
    ("llama-3.1-8b", 1, 4, True, 1),  # EP on a dense model: refused
    ("llama-3.1-8b", 2, 4, False, 1),  # DP without EP on a dense model: whole replicas
    # decode context parallel, MLA: any dcp dividing tp
    ("deepseek-v3", 8, 1, False, 2),
    ("deepseek-v3", 8, 1, False, 4),
    ("deepseek-v3", 8, 1, False, 8),
    ("deepseek-v3", 8, 2, True, 8),
    ("deepseek-v3", 8, 1, False, 3),  # tp % dcp: refused
    ("deepseek-v2-lite", 4, 1, False, 2),
    ("deepseek-v2-lite", 4, 1, False, 4),
    # decode context parallel, GQA: tp > KV heads, dcp <= tp // KV heads, q per kv % dcp
    ("llama-3.1-8b", 8, 1, False, 2),  # tp == KV heads: refused
    ("llama-3.1-8b", 16, 1, False, 2),
    ("llama-3.1-8b", 32, 1, False, 4),
    ("llama-3.1-8b", 16, 1, False, 4),  # dcp > tp // KV heads: refused
    ("llama-3.1-70b", 16, 1, False, 2),
    ("llama-3.1-70b", 32, 1, False, 4),
    ("qwen3-30b-a3b", 8, 1, False, 2),
    ("qwen3-30b-a3b", 16, 2, True, 4),
    ("qwen3-30b-a3b", 32, 1, False, 8),
    ("qwen3-8b", 16, 1, False, 2),
    ("qwen3-8b", 32, 1, False, 4),
)
LAYOUT_BUDGETS = (GIB // 2, 16 * GIB, 40 * GIB)
LAYOUT_LENGTHS = (32_768, 131_072)
LAYOUT_KV = ("auto", "fp8")
#: the MLA cases' block size and backend (FlashMLA, as `vllm_harness`)
MLA_MODELS = ("deepseek-v3", "deepseek-v2-lite")

#: the dtype grid's models: GQA head 128 (Llama-3.1-8B, Qwen3-8B), MLA (DeepSeek-V2-Lite, DeepSeek-V3)
DTYPE_MODELS = ("llama-3.1-8b", "qwen3-8b", "deepseek-v2-lite", "deepseek-v3")
DTYPE_CCS = ("9.0", "10.0")
#: the 2026 configs of the dtype grid (`vllm_2026.FAMILIES`): sparse MLA, Gated DeltaNet hybrid
MODELS_2026 = ("deepseek-v3.2", "glm-5.2", "qwen3.5-27b")
#: the parts of the grid, each run in a process of its own
PARTS = ("layouts", "dtypes", "models2026", "dcp")
#: the dcp x dtype part: (model, tp, dcp) with dcp valid for the model (GQA: tp > KV heads)
DCP_LAYOUTS = (
    ("llama-3.1-8b", 16, 2),
    ("qwen3-8b", 16, 2),
    ("deepseek-v2-lite", 4, 2),
    ("deepseek-v3", 8, 8),
    ("deepseek-v3.2", 8, 8),
    # a Gated DeltaNet hybrid (4 KV heads of 24 query heads: tp 8 > 4, dcp 2 <= 8 // 4, 6 % 2 == 0):
    # the attention group sharded by position, the state kept whole (issue 20 item 3)
    ("qwen3.5-27b", 8, 2),
)


def layout_cases() -> list[dict]:
    """Every layout case's inputs: LAYOUTS x budgets x lengths (within the model's limit) x KV dtype."""
    from kvcalc.load.models import load_model

    out = []
    for model, tp, dp, ep, dcp in LAYOUTS:
        limit = load_model(model).context_limit
        for L in LAYOUT_LENGTHS:
            if limit is not None and limit < L:  # vLLM refuses it at load (not this grid's subject)
                continue
            for kv in LAYOUT_KV:
                for mem in LAYOUT_BUDGETS:
                    out.append(
                        {
                            "model": model,
                            "tp": tp,
                            "dp": dp,
                            "ep": ep,
                            "dcp": dcp,
                            "max_model_len": L,
                            "kv_cache_dtype": kv,
                            "kv_memory_bytes": mem,
                            "block_size": 64 if model in MLA_MODELS else 16,
                        }
                    )
    return out


def dtype_cases() -> list[dict]:
    """Every dtype case's inputs: the 22 dtypes x DTYPE_MODELS x compute capability 9.0 / 10.0,
    16 GiB a rank, max_model_len 32,768, tp 1."""
    return [
        {
            "model": model,
            "kv_cache_dtype": d,
            "compute_capability": cc,
            "kv_memory_bytes": 16 * GIB,
            "max_model_len": 32_768,
        }
        for model in DTYPE_MODELS
        for cc in DTYPE_CCS
        for d in CACHE_DTYPES
    ]


def models2026_cases() -> list[dict]:
    """The 22 dtypes x MODELS_2026 x compute capability 9.0 / 10.0, 16 GiB, max_model_len 32,768, tp 1."""
    return [
        {
            "model": model,
            "kv_cache_dtype": d,
            "compute_capability": cc,
            "kv_memory_bytes": 16 * GIB,
            "max_model_len": 32_768,
        }
        for model in MODELS_2026
        for cc in DTYPE_CCS
        for d in CACHE_DTYPES
    ]


def dcp_cases() -> list[dict]:
    """Every dtype under decode context parallel: DCP_LAYOUTS x the 22 dtypes x SM90 / SM100,
    16 GiB a rank, max_model_len 32,768."""
    return [
        {
            "model": model,
            "tp": tp,
            "dcp": dcp,
            "kv_cache_dtype": d,
            "compute_capability": cc,
            "kv_memory_bytes": 16 * GIB,
            "max_model_len": 32_768,
        }
        for model, tp, dcp in DCP_LAYOUTS
        for cc in DTYPE_CCS
        for d in CACHE_DTYPES
    ]


def case_id(record: dict) -> str:
    i = record["inputs"]
    if record["part"] == "layouts":
        mem = i["kv_memory_bytes"] / GIB
        ep = "-ep" if i["ep"] else ""
        return (
            f"{i['model']}-tp{i['tp']}-dp{i['dp']}{ep}-dcp{i['dcp']}-L{i['max_model_len']}-"
            f"{i['kv_cache_dtype']}-{mem:g}GiB"
        )
    if record["part"] == "dcp":
        return f"{i['model']}-tp{i['tp']}-dcp{i['dcp']}-sm{i['compute_capability']}-{i['kv_cache_dtype']}"
    return f"{i['model']}-sm{i['compute_capability']}-{i['kv_cache_dtype']}"
