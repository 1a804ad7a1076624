"""llama.cpp prints its cache sizes as `(float)bytes / (1024.0f * 1024.0f)`: the byte count is
rounded to float32 (24-bit mantissa) before the division, so past 16 MiB the printed MiB can
differ in the last digit from the exact figure. `kvcalc/engines/llamacpp.py` (`f32`, `mib_f32`)
reproduces that rounding; these pin a size where it shows.

The case was found by searching cache sizes (q8_0, 61 layers, 3 KV heads of 96, contexts in
steps of 256) for one whose `%7.2f` differs with and without the rounding.
"""

from __future__ import annotations

from kvcalc.engines import llamacpp
from kvcalc.engines.llamacpp import LlamacppOptions
from kvcalc.formats import kv_format
from kvcalc.schema import ModelSpec

Q8 = kv_format("q8_0")
#: 61 layers x 3 KV heads x 96 values: 288 values = 9 q8_0 blocks x 34 B = 306 B of K per cell per
#: layer; x 61 layers = 18,666 B per cell.
ODD = ModelSpec(name="odd", n_layers=61, n_heads=6, n_kv_heads=3, head_dim=96)


def test_f32_rounds_as_a_c_float_cast():
    # 8,596,514,304 needs 34 bits; float32 keeps 24, so the step is 2^10 = 1,024:
    # 8,596,514,304 / 1,024 = 8,395,033.5, a tie, rounded to the even 8,395,034 x 1,024 = 8,596,514,816
    assert llamacpp.f32(8_596_514_304) == 8_596_514_816.0
    assert llamacpp.f32(2**24 + 1) == 2**24  # the first integer float32 cannot hold
    assert llamacpp.f32(1.1) != 1.1 and abs(llamacpp.f32(1.1) - 1.1) < 1e-7


def test_mib_figure_printed_after_float32_rounding():
    # K = 460,544 cells x 18,666 B = 8,596,514,304 B = 8198.27490234375 MiB exactly ("8198.27"),
    # but llama.cpp divides float32(8,596,514,304) = 8,596,514,816 -> 8198.275390625 -> "8198.28"
    r = llamacpp.allocate(ODD, 460_544, Q8, Q8, options=LlamacppOptions(parallel=1))
    assert r.n_cells == 460_544 and r.k_bytes == r.v_bytes == 460_544 * 18_666 == 8_596_514_304
    assert f"{r.k_bytes / 2**20:.2f}" == "8198.27"
    assert llamacpp.mib_f32(r.k_bytes) == 8198.275390625
    assert r.log_lines[-1] == (
        "llama_kv_cache: size = 16396.55 MiB (460544 cells,  61 layers,  1/1 seqs), "
        "K (q8_0): 8198.28 MiB, V (q8_0): 8198.28 MiB"
    )
    # the buffer line is a double division in llama.cpp (ggml_backend_buffer_get_size / 1024.0 / 1024.0)
    assert r.log_lines[0] == "llama_kv_cache:      CUDA0 KV buffer size = 16396.55 MiB"


def test_legacy_line_rounds_the_same_way():
    r = llamacpp.allocate(
        ODD, 460_544, Q8, Q8, options=LlamacppOptions(version="legacy", flash_attn=True)
    )  # q8_0 V needs it
    assert r.log_lines[-1] == (
        "llama_init_from_model: KV self size  = 16396.55 MiB, K (q8_0): 8198.28 MiB, V (q8_0): 8198.28 MiB"
    )
