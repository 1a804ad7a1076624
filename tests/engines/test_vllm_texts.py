"""vLLM's start-up texts and log lines, byte for byte per version, each with its source line
(vLLM 0.33.0 / 0.11.0 wheels; the vLLM oracle, tests/oracle/vllm_harness.py, compares the same
texts with vLLM's own raised messages and logged lines).

- 0.33 `vllm/v1/core/kv_cache_planning.py` `_check_enough_kv_cache_memory`: "No available memory"
  (lines 57-64) and "To serve at least one request with the model's ..." (lines 77-87), GiB by
  `vllm/utils/mem_utils.py` `format_gib` (line 31: f"{round(b / GiB_bytes, 2)}").
- 0.33 `vllm/v1/core/kv_cache_utils.py` `update_kv_cache_capacity` (lines 1147-1153): one line
  "GPU KV cache size: N tokens, Maximum concurrency for L tokens per request: X.XXx";
  `vllm/v1/worker/gpu_worker.py` line 772: "Available KV cache memory: %s GiB" with `format_gib`.
- 0.11 `vllm/v1/core/kv_cache_utils.py` `check_enough_kv_cache_memory` (lines 698-723):
  "models's", "%.2f" GiB, f"{estimated_msg} Try" (two spaces when no length fits); the figures
  in two lines (lines 1087-1092); `gpu_worker.py` line 298 "%.2f GiB".
"""

import warnings

import pytest

from kvcalc.engines import vllm
from kvcalc.engines.vllm import VllmOptions, v0_33
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

BF16 = kv_format("bf16")
GiB = 2**30
GUIDE = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."


def _warned(*args, **kw) -> str:
    with pytest.warns(UserWarning) as caught:
        vllm.capacity(*args, **kw)
    return str(caught[0].message)


def test_format_gib_is_round_to_two_places():
    # f"{round(b / 2**30, 2)}": Python's float repr after rounding, no fixed width
    assert v0_33.format_gib(2**29) == "0.5"
    assert v0_33.format_gib(40 * GiB) == "40.0"
    assert v0_33.format_gib(int(6.51 * GiB)) == "6.51"
    assert v0_33.format_gib(1) == "0.0"
    assert v0_33.format_gib(534_773_760) == "0.5"  # 0.498046875 GiB


def test_033_too_small_text():
    # llama-3.1-8b, 0.5 GiB, L 4,096, bf16: page 16 x 8 x 256 x 2 = 65,536 B x 32 layers = 2 MiB per
    # block; one request 256 blocks = 536,870,912 B ("0.5"); 0.33 checks the budget less the null
    # block: 536,870,912 - 2,097,152 = 534,773,760 B ("0.5"), 255 blocks -> estimated 4,080 tokens
    m = load_model("llama-3.1-8b")
    text = _warned(m, GiB // 2, BF16, BF16, max_model_len=4096, options=VllmOptions(version="0.33"))
    assert text == (
        "vLLM would refuse to start: To serve at least one request with the model's max seq len (4096), "
        "(0.5 GiB KV cache is needed, which is larger than the available KV cache memory (0.5 GiB). Based on the "
        "available memory, the estimated maximum model length is 4080. Try increasing `gpu_memory_utilization` "
        "(which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the "
        f"engine. {GUIDE}"
    )


def test_033_no_memory_text():
    # 1 B less the null block (2 MiB) <= 0: kv_cache_planning.py lines 56-64
    with pytest.raises(KvcalcError) as e:
        vllm.capacity(
            load_model("llama-3.1-8b"), 1, BF16, BF16, max_model_len=4096, options=VllmOptions(version="0.33")
        )
    assert str(e.value).endswith(
        "vLLM would fail at start-up: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory reservation on "
        f"the CPU backend, despite its name). {GUIDE}"
    )
    assert vllm.rules("0.11").no_memory == (
        "No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine."
    )


def test_011_texts_keep_models_s_and_the_double_space():
    # gemma-3-27b, 1 B, L 4,096: 0.11 checks each layer's own spec: 10 full x 256 pages + 52 sliding x
    # (cdiv(min(1,023 + 8,192, 4,096), 16) + 1 = 257) pages = 15,924 pages x 131,072 B = 2,087,190,528 B
    # = 1.94 GiB; no length fits (estimated_msg ""), so f"... GiB). " f"{estimated_msg} " "Try" = "GiB).  Try"
    with pytest.raises(KvcalcError) as e:
        vllm.capacity(load_model("gemma-3-27b"), 1, BF16, BF16, max_model_len=4096, options=VllmOptions(version="0.11"))
    assert str(e.value).endswith(
        "vLLM would fail at start-up: To serve at least one request with the models's max seq len (4096), (1.94 GiB "
        "KV cache is needed, which is larger than the available KV cache memory (0.00 GiB).  Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
    )
    # with an estimated length: "... is 4080. Try" (estimated_msg ends in "." and one space follows)
    text = _warned(
        load_model("llama-3.1-8b"), GiB // 2 - 1, BF16, BF16, max_model_len=4096, options=VllmOptions(version="0.11")
    )
    assert text.endswith(
        "memory (0.50 GiB). Based on the available memory, the estimated maximum model length is "
        "4080. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
        "initializing the engine."
    )


def test_log_lines_per_version():
    # llama-3.1-70b, 40 GiB, L 32,768: page 16 x 8 x 256 x 2 = 65,536 B x 80 layers = 5 MiB per block;
    # 40 GiB // 5 MiB = 8,192 blocks = 131,072 tokens; 8,192 / 2,048 per request = 4.00x
    m = load_model("llama-3.1-70b")
    new = vllm.capacity(m, 40 * GiB, BF16, BF16, max_model_len=32768, options=VllmOptions(version="0.33"))
    assert new.log_lines == [
        "Available KV cache memory: 40.0 GiB",
        ("GPU KV cache size: 131,072 tokens, Maximum concurrency for 32,768 tokens per request: 4.00x"),
    ]
    old = vllm.capacity(m, 40 * GiB, BF16, BF16, max_model_len=32768, options=VllmOptions(version="0.11"))
    assert old.log_lines == [
        "Available KV cache memory: 40.00 GiB",
        "GPU KV cache size: 131,072 tokens",
        "Maximum concurrency for 32,768 tokens per request: 4.00x",
    ]


def test_qwen3_next_033_start_up_lines():
    # Qwen3-Next-80B-A3B, 6.51 GiB (6,990,059,274 B), L 131,072, bf16, Hopper (as the vLLM oracle
    # prints them): block 64 x cdiv(1,097,728, 64 x 2,048) = 576 tokens, page 576 x 2,048 = 1,179,648 B,
    # padding (1,179,648 - 1,097,728) / 1,097,728 = 7.46%; 36 linear + 12 full -> 12 layers a group,
    # 4 groups; blocks 6,990,059,274 // 1,179,648 // 12 = 493; per request cdiv(131,072, 576) = 228
    # + 3 Mamba groups x (2 + 1 checkpoint) = 237; int(493 / 237 x 131,072) = 272,651; 2.08x
    r = vllm.capacity(
        load_model("qwen3-next-80b-a3b"),
        int(6.51 * GiB),
        BF16,
        BF16,
        max_model_len=131072,
        options=VllmOptions(version="0.33", compute_capability="9.0"),
    )
    assert r.log_lines == [
        "Setting attention block size to 576 tokens to ensure that attention page size is >= mamba page size.",
        "Padding mamba page size by 7.46% to ensure that mamba page size and attention page size are exactly equal.",
        "Available KV cache memory: 6.51 GiB",
        "GPU KV cache size: 272,651 tokens, Maximum concurrency for 131,072 tokens per request: 2.08x",
    ]


def test_llama4_011_checks_chunked_layers_by_their_chunk():
    # Llama-4-Scout, bf16, L 32,768, tp 1 in 0.11: the hybrid manager is off for chunked local
    # attention (vllm/config/__init__.py lines 512-529), so all 48 layers are one full group, but
    # the start-up check runs on the layers' own specs first (kv_cache_utils.get_kv_cache_configs,
    # lines 1241-1244 before 1258): 12 full x cdiv(32,768, 16) = 24,576 pages + 36 chunked x
    # cdiv(min(8,192 + 8,192, 32,768), 16) = 36,864 pages = 61,440 x 65,536 B = 4,026,531,840 B (3.75 GiB)
    m = load_model("llama-4-scout")
    need = 61_440 * 65_536
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # vLLM starts, below one request of full blocks
        r = vllm.capacity(m, need, BF16, BF16, max_model_len=32768, options=VllmOptions(version="0.11"))
    # blocks 4,026,531,840 // 65,536 // 48 = 1,280 = 20,480 tokens; 1,280 / 2,048 = 0.625
    assert (r.num_gpu_blocks, r.kv_cache_tokens, r.max_concurrency) == (1280, 20_480, 0.625)
    text = _warned(m, need - 1, BF16, BF16, max_model_len=32768, options=VllmOptions(version="0.11"))
    # one byte less: 32,752 tokens fit (12 x 2,047 + 36 x 1,024 = 61,428 pages)
    assert "(3.75 GiB KV cache is needed" in text and "estimated maximum model length is 32752." in text
