"""llama.cpp's caches for the Mamba-2 hybrids: Falcon-H1 (every layer attention AND a Mamba-2
mixer: `LLM_ARCH_FALCON_H1`, `llama_model::create_memory` filter_attn and filter_recr true for
every layer), Nemotron-H (M / * / - layers: filter_attn = !is_recr && n_ff == 0, filter_recr =
is_recr && n_ff == 0) and Granite-4.0-H (recurrent iff head_count_kv is 0).

Every expected line below is the one the vendored llama.cpp printed for the same geometry in the
oracle (`tests/oracle`, `llamacpp_geometries.py`: falcon-h1-7b, nemotron-h-8b, granite-4.0-h-tiny),
run with llama.cpp's library defaults on the CPU (`tool="library"`, `n_gpu_layers=0`); the bytes
are derived by hand beside them: K (V) = layers x cells x streams x ggml_row_size(type, KV heads x
head_dim) (`src/llama-kv-cache.cpp`), R = layers x max(1, n_seq_max) x n_embd_r x 4 B and S alike
with n_embd_s (`src/llama-memory-recurrent.cpp`, f32), n_embd_r = (d_conv - 1) x (d_inner + 2 x
n_group x d_state), n_embd_s = d_state x d_inner (`src/llama-hparams.cpp`).
"""

from __future__ import annotations

import pytest

from kvcalc.engines import llamacpp
from kvcalc.engines.llamacpp import LlamacppOptions
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.hf import model_from_hf_config
from tests.published_configs import FALCON_H1_7B, GRANITE_H_TINY, NEMOTRON_H_8B

F16, Q8 = kv_format("fp16"), kv_format("q8_0")


def allocate(config: dict, n_ctx: int, k=F16, v=F16, **options):
    model = model_from_hf_config(config, f"{config['model_type']}/config.json")
    return llamacpp.allocate(model, n_ctx, k, v, options=LlamacppOptions(tool="library", n_gpu_layers=0, **options))


def test_falcon_h1_every_layer_in_both_caches():
    r = allocate(FALCON_H1_7B, 4096)
    assert r.log_lines == [
        "llama_kv_cache:        CPU KV buffer size =   176.00 MiB",
        "llama_kv_cache: size =  176.00 MiB (  4096 cells,  44 layers,  1/1 seqs), K (f16):   88.00 MiB, "
        "V (f16):   88.00 MiB",
        "llama_memory_recurrent:        CPU RS buffer size =   133.80 MiB",
        "llama_memory_recurrent: size =  133.80 MiB (     1 cells,  44 layers,  1 seqs  0 rs_seq), R (f32):    1.80 MiB, "
        "S (f32):  132.00 MiB, P (f32):    0.00 MiB",
    ]
    # K = V = 44 layers x 4,096 cells x (2 KV heads x 128 = 256 values x 2 B = 512 B) = 92,274,688 B (88 MiB)
    assert (r.k_bytes, r.v_bytes) == (92_274_688, 92_274_688)
    # R: 44 x 1 cell x 3 x (3,072 + 2 x 1 x 256) = 10,752 values x 4 B = 1,892,352 B;
    # S: 44 x 256 x 3,072 = 786,432 values x 4 B = 138,412,032 B -> 140,304,384 B
    assert r.engine_state_bytes == 140_304_384


def test_falcon_h1_four_streams_and_q8_0():
    r = allocate(FALCON_H1_7B, 5000, parallel=4)
    # n_ctx 5,120 / 4 = 1,280 cells per stream; K = 44 x 1,280 x 4 x 512 B = 115,343,360 B (110 MiB)
    assert r.log_lines[1] == (
        "llama_kv_cache: size =  220.00 MiB (  1280 cells,  44 layers,  4/4 seqs), "
        "K (f16):  110.00 MiB, V (f16):  110.00 MiB"
    )
    assert r.log_lines[3] == (
        "llama_memory_recurrent: size =  535.22 MiB (     4 cells,  44 layers,  4 seqs  0 rs_seq), "
        "R (f32):    7.22 MiB, S (f32):  528.00 MiB, P (f32):    0.00 MiB"
    )
    # 4 cells x 140,304,384 B = 561,217,536 B
    assert (r.k_bytes, r.engine_state_bytes) == (115_343_360, 561_217_536)
    q = allocate(FALCON_H1_7B, 1024, Q8, Q8)
    # 256 values = 8 q8_0 blocks of 34 B = 272 B; 44 x 1,024 x 272 = 12,255,232 B (11.69 MiB); the state stays f32
    assert q.log_lines[1] == (
        "llama_kv_cache: size =   23.38 MiB (  1024 cells,  44 layers,  1/1 seqs), "
        "K (q8_0):   11.69 MiB, V (q8_0):   11.69 MiB"
    )
    assert (q.k_bytes, q.engine_state_bytes) == (12_255_232, 140_304_384)


def test_nemotron_h_attention_and_mamba_layers_only():
    r = allocate(NEMOTRON_H_8B, 2048, parallel=3, unified=True, flash_attn="off")
    assert r.log_lines == [
        # head_count_kv is 0 on the M and - layers: the V width varies (is_n_embd_v_gqa_variable)
        "llama_kv_cache: the V embeddings have different sizes across layers and FA is not enabled - padding V cache "
        "to 1024",
        "llama_kv_cache:        CPU KV buffer size =    32.00 MiB",
        "llama_kv_cache: size =   32.00 MiB (  2048 cells,   4 layers,  3/1 seqs), K (f16):   16.00 MiB, "
        "V (f16):   16.00 MiB",
        "llama_memory_recurrent:        CPU RS buffer size =   296.44 MiB",
        # the layer count is the model's n_layer (52); only the 24 M layers hold R and S
        "llama_memory_recurrent: size =  296.44 MiB (     3 cells,  52 layers,  3 seqs  0 rs_seq), R (f32):    8.44 MiB, "
        "S (f32):  288.00 MiB, P (f32):    0.00 MiB",
    ]
    # K = 4 layers x 2,048 cells x (8 x 128 = 1,024 values x 2 B) = 16,777,216 B (16 MiB)
    assert r.k_bytes == 16_777_216
    # R: 24 x 3 x 3 x (8,192 + 2 x 8 x 128) = 30,720 values x 4 B = 8,847,360 B;
    # S: 24 x 3 x 128 x 8,192 x 4 B = 301,989,888 B -> 310,837,248 B
    assert r.engine_state_bytes == 310_837_248


def test_granite_4_h_streams():
    r = allocate(GRANITE_H_TINY, 2048, parallel=3, flash_attn="off")
    assert r.log_lines[2] == (
        "llama_kv_cache: size =   18.00 MiB (   768 cells,   4 layers,  3/3 seqs), "
        "K (f16):    9.00 MiB, V (f16):    9.00 MiB"
    )
    assert r.log_lines[4] == (
        "llama_memory_recurrent: size =  166.11 MiB (     3 cells,  40 layers,  3 seqs  0 rs_seq), "
        "R (f32):    4.11 MiB, S (f32):  162.00 MiB, P (f32):    0.00 MiB"
    )
    # GGML_PAD(2,048 / 3 = 682, 256) = 768 cells x 3 streams; K = 4 x 768 x 3 x (4 x 128 x 2 B) = 9,437,184 B
    assert r.k_bytes == 9_437_184
    # R: 36 x 3 x 3 x (3,072 + 2 x 128) = 9,984 values x 4 B = 4,313,088 B; S: 36 x 3 x 128 x 3,072 x 4 B =
    # 169,869,312 B -> 174,182,400 B
    assert r.engine_state_bytes == 174_182_400
    with pytest.raises(KvcalcError, match="quantized V cache requires flash_attn to be enabled"):
        allocate(GRANITE_H_TINY, 4096, F16, Q8, flash_attn="off")


def test_falcon_h1_capacity_counts_the_state():
    model = model_from_hf_config(FALCON_H1_7B, "falcon_h1/config.json")
    # one sequence: 140,304,384 B of state + 44 x 2 x 512 B = 45,056 B per cell; 1 GiB = 1,073,741,824 B leaves
    # 933,437,440 B = 20,717.2 cells -> the largest multiple of 256 is 20,480
    r = llamacpp.capacity(model, 2**30, F16, F16, options=LlamacppOptions(tool="library", n_gpu_layers=0))
    assert r.n_ctx == 20_480
    assert r.engine_kv_bytes + r.engine_state_bytes == 20_480 * 45_056 + 140_304_384


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_vllm_and_sglang_still_refuse_falcon_h1(engine):
    from kvcalc.engines.profile import get_profile

    model = model_from_hf_config(FALCON_H1_7B, "falcon_h1/config.json")
    with pytest.raises(KvcalcError) as e:
        get_profile(engine).capacity(model, 20 * 2**30, F16, F16, max_model_len=32768)
    assert e.value.field == "model" and "side by side in every layer" in e.value.message


def test_legacy_refuses_the_hybrid():
    # llama.cpp 7841fc7 (legacy) has no falcon-h1 architecture (added mid-2025): it fails to load the model
    with pytest.raises(KvcalcError, match="unknown model architecture") as e:
        allocate(FALCON_H1_7B, 4096, version="legacy")
    assert e.value.field == "llamacpp_version"
