"""llama.cpp 0c1e570 on the 2026 configs (issue 19 item 2): the architectures it has and kvcalc
sizes, and the one it lacks refused in its own words. Rules: docs/engine-rules-2026.md (llama.cpp
section: `src/llama-arch.cpp` 39-156, `llama_model::create_memory` `src/llama-model.cpp` 2352-2760).
"""

from __future__ import annotations

import pytest

from kvcalc.engines import llamacpp
from kvcalc.engines.llamacpp import LlamacppOptions
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

F16 = kv_format("fp16")


def test_gemma4_iswa_per_layer_rows():
    """Gemma-4-26B-A4B, llama-server defaults (4 slots, one unified stream), --ctx-size 32768, f16:
    non-SWA cache 32,768 cells x 5 global layers x 2 KV heads x 512 x 2 B = 335,544,320 B of K
    (320.00 MiB; V the same: K = V layers allocate both rows); SWA cache 4 x 1,024 + 512 = 4,608
    cells (a multiple of 256) x 25 layers x 8 x 256 x 2 B = 471,859,200 B of K (450.00 MiB)."""
    r = llamacpp.allocate(load_model("gemma-4-26b-a4b"), 32_768, F16, F16, options=LlamacppOptions())
    assert r.engine_kv_bytes == 2 * (335_544_320 + 471_859_200)  # 1,614,807,040 B
    assert "llama_kv_cache_iswa: creating     SWA KV cache, size = 4608 cells" in r.log_lines


def test_step_3_7_has_no_llamacpp_architecture():
    with pytest.raises(KvcalcError) as e:
        llamacpp.allocate(load_model("step-3.7-flash"), 4096, F16, F16, options=LlamacppOptions())
    assert "llama.cpp 0c1e570 has no architecture for it" in str(e.value)
    assert "Model Step3p7FlashForCausalLM is not supported" in str(e.value)


@pytest.mark.parametrize("name", ["deepseek-v4-flash", "glm-5.2", "minimax-m3", "mimo-v2-flash", "kimi-k3"])
def test_caches_not_modelled_yet_are_refused(name):
    with pytest.raises(KvcalcError, match="llama.cpp profile does not model"):
        llamacpp.allocate(load_model(name), 4096, F16, F16, options=LlamacppOptions())
