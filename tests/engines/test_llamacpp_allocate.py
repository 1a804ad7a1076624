"""llama.cpp's KV cache (`kvcalc/engines/llamacpp.py`): whole `allocate` results pinned (cells,
streams, the SWA cache, the per-device split, the log lines), for the current and the legacy
cache, plus its refusals and `device_of_layers`.

Written for mutation testing (tools/mutation.py). Models: configs/models/gemma-3-27b.yaml
(62 layers: 5 sliding (window 1024) then 1 full, repeated, so full layers are 5, 11, ..., 59;
16 KV heads x 128), llama-3.1-8b.yaml (32 layers, 8 KV heads x 128), mistral-7b-v0.1.yaml
(32 sliding layers), qwen3-next-80b-a3b.yaml (36 linear + 12 full layers, 2 KV heads x 256).
Per cell and layer: f16 = 2 B per value; q8_0 = 34 B per 32 values; q4_0 = 18 B per 32 values.
MiB = 2^20 B. The llama.cpp sources are cited in the module docstring of kvcalc/engines/llamacpp.py.
"""

from __future__ import annotations

import pytest

from kvcalc.engines import llamacpp
from kvcalc.engines.llamacpp import LlamacppOptions
from kvcalc.errors import KvcalcError, KvcalcWarning
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

F16, Q8, Q4, BF16 = kv_format("f16"), kv_format("q8_0"), kv_format("q4_0"), kv_format("bf16")
FP8 = kv_format("fp8")
MiB, GiB = 2**20, 2**30
NONE = dict(
    engine_state_bytes=None,
    kv_memory_basis=None,
    block_size=None,
    page_size_bytes=None,
    num_gpu_blocks=None,
    usable_blocks=None,
    num_cpu_blocks=None,
)


def dev(name, n, b):
    return {"device": name, "n_layers": n, "kv_bytes": b}


def test_current_iswa_two_devices_split_3_to_1_and_a_too_small_budget():
    # gemma-3-27b, --ctx-size 8192 unified (-kvu: an explicit -np alone gives separate streams), --parallel 4,
    # --ubatch-size 256, -ngl 40, 2 GPUs split 3:1.
    # K f16: 16 x 128 x 2 = 4,096 B per cell per layer; V q8_0: 16 x 128/32 x 34 = 2,176 B; 6,272 B.
    # SWA cache: GGML_PAD(min(8192, 1024 x 4 + 256), 256) = 4,352 cells (17 x 256); non-SWA: 8,192 cells.
    # devices: i_gpu_start = 62 - 40 = 22 (layers 0-21 on the CPU); (il - 22) / 40 < 0.75 -> CUDA0
    #   (layers 22-51), else CUDA1 (52-61). Full layers: CPU 5, 11, 17; CUDA0 23..47 (5); CUDA1 53, 59.
    # a full layer: 6,272 x 8,192 = 51,380,224 B (49 MiB); a sliding one: 6,272 x 4,352 = 27,295,744 B.
    # K = 10 x 4,096 x 8,192 + 52 x 4,096 x 4,352 = 335,544,320 + 926,941,184 = 1,262,485,504 B
    # V = 10 x 2,176 x 8,192 + 52 x 2,176 x 4,352 = 178,257,920 + 492,437,504 = 670,695,424 B
    # total 1,933,180,928 B = 1,843.62 MiB > 1 GiB: warns; the largest fitting ctx c <= 4,352 has
    #   62 x 6,272 x c <= 2^30 -> c <= 2,761 -> 2,560 (a multiple of 256).
    # concurrency at 4,096: 8,192 / 4,096 = 2.0; 3 requests: 8,192 // 3 = 2,730 tokens each.
    msg = (
        "--ctx-size 8192 allocates 1843.62 MiB of KV cache, more than --kv-memory 1024.00 MiB: llama.cpp would "
        "fail to allocate the KV buffer on a device that size; the largest --ctx-size that fits is 2560"
    )
    with pytest.warns(KvcalcWarning) as w:
        r = llamacpp.allocate(
            load_model("gemma-3-27b"),
            8192,
            F16,
            Q8,
            max_model_len=4096,
            concurrency=3,
            kv_memory_bytes=GiB,
            options=LlamacppOptions(
                parallel=4, unified=True, n_ubatch=256, n_gpu_layers=40, n_devices=2, tensor_split=[3, 1]
            ),
        )
    assert [str(x.message) for x in w] == [msg]
    assert r.model_dump() == dict(
        NONE,
        engine="llamacpp",
        engine_version="llama.cpp (current)",
        kv_memory_bytes=GiB,
        kv_cache_dtype="f16/q8_0",
        kv_cache_tokens=8192,
        engine_kv_bytes=1_933_180_928,
        max_model_len=4096,
        max_concurrency=2.0,
        concurrency=3,
        longest_context=2730,
        n_cells=8192,
        n_ctx=8192,
        k_bytes=1_262_485_504,
        v_bytes=670_695_424,
        devices=[
            dev("CUDA0", 30, 5 * 51_380_224 + 25 * 27_295_744),
            dev("CUDA1", 10, 2 * 51_380_224 + 8 * 27_295_744),
            dev("CPU", 22, 3 * 51_380_224 + 19 * 27_295_744),
        ],
        log_lines=[
            "llama_kv_cache_iswa: creating non-SWA KV cache, size = 8192 cells",
            "llama_kv_cache:        CPU KV buffer size =   147.00 MiB",
            "llama_kv_cache:      CUDA0 KV buffer size =   245.00 MiB",
            "llama_kv_cache:      CUDA1 KV buffer size =    98.00 MiB",
            "llama_kv_cache: size =  490.00 MiB (  8192 cells,  10 layers,  4/1 seqs), K (f16):  320.00 MiB, "
            "V (q8_0):  170.00 MiB",
            "llama_kv_cache_iswa: creating     SWA KV cache, size = 4352 cells",
            "llama_kv_cache:        CPU KV buffer size =   494.59 MiB",
            "llama_kv_cache:      CUDA0 KV buffer size =   650.78 MiB",
            "llama_kv_cache:      CUDA1 KV buffer size =   208.25 MiB",
            "llama_kv_cache: size = 1353.62 MiB (  4352 cells,  52 layers,  4/1 seqs), K (f16):  884.00 MiB, "
            "V (q8_0):  469.62 MiB",
        ],
        notes=[msg],
    )


def test_current_streams_per_sequence():
    # llama-3.1-8b, --ctx-size 5000 --parallel 3 (not unified): n_ctx = pad(5000, 256) = 5,120;
    # n_ctx_seq = pad(5120 // 3 = 1,706, 256) = 1,792 cells x 3 streams = 5,376.
    # 32 layers x (2,048 + 2,048) B x 1,792 x 3 = 704,643,072 B = 672 MiB (K, V 336 MiB each).
    # L = 1,792 fits one stream: 3 requests; 2 requests (<= 3 streams) get 1,792 tokens each.
    r = llamacpp.allocate(
        load_model("llama-3.1-8b"),
        5000,
        F16,
        F16,
        max_model_len=1792,
        concurrency=2,
        options=LlamacppOptions(parallel=3, unified=False),
    )
    assert r.model_dump() == dict(
        NONE,
        engine="llamacpp",
        engine_version="llama.cpp (current)",
        kv_memory_bytes=None,
        kv_cache_dtype="f16",
        kv_cache_tokens=5376,
        engine_kv_bytes=704_643_072,
        max_model_len=1792,
        max_concurrency=3.0,
        concurrency=2,
        longest_context=1792,
        n_cells=5376,
        n_ctx=5376,
        k_bytes=352_321_536,
        v_bytes=352_321_536,
        devices=[dev("CUDA0", 32, 704_643_072)],
        log_lines=[
            "llama_kv_cache:      CUDA0 KV buffer size =   672.00 MiB",
            "llama_kv_cache: size =  672.00 MiB (  1792 cells,  32 layers,  3/3 seqs), K (f16):  336.00 MiB, "
            "V (f16):  336.00 MiB",
        ],
        notes=[],
    )


def test_current_all_sliding_streams_too_short_for_the_request():
    # mistral-7b-v0.1: only sliding layers, so no SWA cache (the note); --parallel 2 not unified:
    # pad(4096 // 2, 256) = 2,048 cells per stream < L = 4,096: no request fits (0.0, longest 0);
    # 3 requests > 2 streams: 0 as well. 32 x 4,096 B x 2,048 x 2 = 512 MiB.
    r = llamacpp.allocate(
        load_model("mistral-7b-v0.1"),
        4096,
        F16,
        F16,
        max_model_len=4096,
        concurrency=3,
        options=LlamacppOptions(parallel=2, unified=False),
    )
    assert (r.max_concurrency, r.longest_context, r.n_cells, r.engine_kv_bytes) == (0.0, 0, 4096, 512 * MiB)
    assert r.notes == ["sliding-window layers get the full cache size (no full layers: no SWA cache)"]
    assert r.log_lines[-1] == (
        "llama_kv_cache: size =  512.00 MiB (  2048 cells,  32 layers,  2/2 seqs), "
        "K (f16):  256.00 MiB, V (f16):  256.00 MiB"
    )


def test_current_swa_full_per_stream():
    # gemma-3-27b --swa-full, --ctx-size 8192 --parallel 2 (not unified): 4,096 cells per stream for both
    # caches; full: 10 x 8,192 B x 4,096 x 2 = 640 MiB; SWA: 52 x 8,192 x 4,096 x 2 = 3,328 MiB.
    r = llamacpp.allocate(
        load_model("gemma-3-27b"), 8192, F16, F16, options=LlamacppOptions(swa_full=True, parallel=2, unified=False)
    )
    assert r.log_lines == [
        "llama_kv_cache_iswa: using full-size SWA cache "
        "(ref: https://github.com/ggml-org/llama.cpp/pull/13194#issuecomment-2868343055)",
        "llama_kv_cache_iswa: creating non-SWA KV cache, size = 4096 cells",
        "llama_kv_cache:      CUDA0 KV buffer size =   640.00 MiB",
        "llama_kv_cache: size =  640.00 MiB (  4096 cells,  10 layers,  2/2 seqs), K (f16):  320.00 MiB, "
        "V (f16):  320.00 MiB",
        "llama_kv_cache_iswa: creating     SWA KV cache, size = 4096 cells",
        "llama_kv_cache:      CUDA0 KV buffer size =  3328.00 MiB",
        "llama_kv_cache: size = 3328.00 MiB (  4096 cells,  52 layers,  2/2 seqs), K (f16): 1664.00 MiB, "
        "V (f16): 1664.00 MiB",
    ]
    assert (r.n_cells, r.n_ctx, r.engine_kv_bytes, r.notes) == (8192, 8192, 3968 * MiB, [])
    # without --swa-full, not unified: the SWA cache is min(4096, 1024 x 1 + 512) = 1,536 cells per stream
    r = llamacpp.allocate(load_model("gemma-3-27b"), 8192, F16, F16, options=LlamacppOptions(parallel=2, unified=False))
    assert r.log_lines[3] == "llama_kv_cache_iswa: creating     SWA KV cache, size = 1536 cells"


def test_legacy_ollama_on_the_cpu():
    # qwen2.5-7b, legacy, ollama with --parallel 2: llama.cpp gets n_ctx 1000 x 2 = 2,000, padded to
    # 256 (flash attention, which a q4_0 V cache needs): 2,048 cells, 28 layers of 4 KV heads x 128.
    # K f16: 512 x 2 = 1,024 B/cell/layer; V q4_0: 512/32 x 18 = 288 B/cell/layer.
    # K = 28 x 1,024 x 2,048 = 58,720,256 B (56.00 MiB), V = 28 x 288 x 2,048 = 16,515,072 B (15.75 MiB).
    # -ngl 0: every layer on the CPU. 2,048 / 1,000 = 2.048 requests; 4 requests: 2,048 // 4 = 512.
    r = llamacpp.allocate(
        load_model("qwen2.5-7b"),
        1000,
        F16,
        Q4,
        max_model_len=1000,
        concurrency=4,
        options=LlamacppOptions(version="legacy", ollama=True, parallel=2, n_gpu_layers=0, flash_attn=True),
    )
    assert r.model_dump() == dict(
        NONE,
        engine="llamacpp",
        engine_version="llama.cpp (legacy)",
        kv_memory_bytes=None,
        kv_cache_dtype="f16/q4_0",
        kv_cache_tokens=2048,
        engine_kv_bytes=75_235_328,
        max_model_len=1000,
        max_concurrency=2.048,
        concurrency=4,
        longest_context=512,
        n_cells=2048,
        n_ctx=2048,
        k_bytes=58_720_256,
        v_bytes=16_515_072,
        devices=[dev("CPU", 28, 75_235_328)],
        log_lines=[
            "llama_kv_cache_init: kv_size = 2048, offload = 1, type_k = 'f16', type_v = 'q4_0', n_layer = 28, "
            "can_shift = 1",
            "llama_kv_cache_init:        CPU KV buffer size =    71.75 MiB",
            "llama_init_from_model: KV self size  =   71.75 MiB, K (f16):   56.00 MiB, V (q4_0):   15.75 MiB",
        ],
        notes=["ollama passes n_ctx x OLLAMA_NUM_PARALLEL = 1,000 x 2 = 2,000 to llama.cpp"],
    )
    # without flash attention llama.cpp refuses the q4_0 V cache (src/llama.cpp llama_init_from_model,
    # 7841fc7: `if (ggml_is_quantized(params.type_v) && !params.flash_attn)`)
    with pytest.raises(KvcalcError, match=r'"llama_init_from_model: V cache quantization requires flash_attn"'):
        llamacpp.allocate(
            load_model("qwen2.5-7b"), 1000, F16, Q4, options=LlamacppOptions(version="legacy", ollama=True, parallel=2)
        )


def test_legacy_refuses_hybrid_models():
    # llama.cpp 7841fc7 (legacy) has no hybrid attention + linear/mamba architecture: Qwen3-Next fails to load
    # ("unknown model architecture", src/llama-model.cpp); kvcalc refuses rather than count half the model
    with pytest.raises(KvcalcError, match="unknown model architecture") as e:
        llamacpp.allocate(load_model("qwen3-next-80b-a3b"), 1000, F16, F16, options=LlamacppOptions(version="legacy"))
    assert e.value.field == "llamacpp_version"


def test_legacy_flash_attention_pads_to_256_and_lists_the_gpu_first():
    # gemma-3-27b legacy: pad(1000, 256) = 1,024 cells, every layer full size (8,192 B/cell):
    # 8 MiB per layer; -ngl 10 puts layers 52-61 on CUDA0 (80 MiB), 52 on the CPU (416 MiB).
    r = llamacpp.allocate(
        load_model("gemma-3-27b"),
        1000,
        F16,
        F16,
        options=LlamacppOptions(version="legacy", flash_attn=True, n_gpu_layers=10),
    )
    assert r.log_lines == [
        "llama_kv_cache_init: kv_size = 1024, offload = 1, type_k = 'f16', type_v = 'f16', n_layer = 62, can_shift = 1",
        "llama_kv_cache_init:      CUDA0 KV buffer size =    80.00 MiB",
        "llama_kv_cache_init:        CPU KV buffer size =   416.00 MiB",
        "llama_init_from_model: KV self size  =  496.00 MiB, K (f16):  248.00 MiB, V (f16):  248.00 MiB",
    ]
    assert r.notes == ["sliding-window layers get the full cache size (before llama.cpp PR #13194)"]
    assert [d.model_dump() for d in r.devices] == [dev("CUDA0", 10, 80 * MiB), dev("CPU", 52, 416 * MiB)]
    assert (r.n_cells, r.max_concurrency, r.longest_context) == (1024, None, None)
    # legacy has no stream limit: --parallel 300 is accepted (current refuses > 256)
    assert (
        llamacpp.allocate(
            load_model("gemma-3-27b"), 1000, F16, F16, options=LlamacppOptions(version="legacy", parallel=300)
        ).n_cells
        == 1024
    )


def test_budget_that_fits_gives_no_warning_and_an_unfittable_one_says_so():
    import warnings

    m = load_model("llama-3.1-8b")  # 131,072 B per cell; 256 cells = 32 MiB
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = llamacpp.allocate(
            m, 256, F16, F16, kv_memory_bytes=32 * MiB, options=LlamacppOptions(parallel=1)
        )  # exactly fits
    assert r.notes == [] and r.kv_memory_bytes == 32 * MiB
    with pytest.warns(
        KvcalcWarning,
        match=r"allocates 32\.00 MiB of KV cache, more than --kv-memory 1\.00 MiB: .*"
        r"device that size; not even 256 cells fit$",
    ):
        llamacpp.allocate(m, 256, F16, F16, kv_memory_bytes=MiB)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(version="b1234"), "--llamacpp-version: use one of current, legacy, not 'b1234'"),
        (dict(parallel=0), "^--parallel and --ubatch-size must be positive$"),
        (dict(n_ubatch=0), "^--parallel and --ubatch-size must be positive$"),
        (dict(n_batch=0), "^--batch-size must be a positive integer, got 0$"),
        (dict(tool="llama-bench"), "^--llamacpp-tool: use one of llama-server, llama-cli, library, not 'llama-bench'$"),
        (dict(flash_attn="maybe"), "^-fa: 'maybe' is not on, off or auto"),
        (
            dict(parallel=257),
            "--parallel 257: llama.cpp refuses it: n_seq_max must be <= 256 "
            r"\(src/llama-context.cpp, LLAMA_MAX_SEQ\)",
        ),
        (dict(n_gpu_layers=-2), r"--n-gpu-layers -2: use a count >= 0, or -1 for llama.cpp's default \(all layers\)"),
        (dict(n_devices=0), r"--gpus must be a positive integer, got 0 \(for a CPU-only cache use --n-gpu-layers 0\)"),
        (dict(parallel=512, unified=False, version="legacy"), None),
    ],
)
def test_refusals(kwargs, match):
    m = load_model("llama-3.1-8b")
    if match is None:  # legacy accepts any --parallel; not unified has no meaning there
        assert llamacpp.allocate(m, 4096, F16, F16, options=LlamacppOptions(**kwargs)).n_cells == 4096
        return
    with pytest.raises(KvcalcError, match=match):
        llamacpp.allocate(m, 4096, F16, F16, options=LlamacppOptions(**kwargs))


def test_edges_that_are_accepted():
    m = load_model("llama-3.1-8b")
    # exactly 256 sequences, -ngl -1 (all layers), n_ubatch 1
    r = llamacpp.allocate(m, 65536, F16, F16, options=LlamacppOptions(parallel=256, n_gpu_layers=-1, n_ubatch=1))
    assert (r.n_cells, r.devices[0].device, r.devices[0].n_layers) == (65536, "CUDA0", 32)


def test_kv_types_llama_cpp_lacks():
    with pytest.raises(
        KvcalcError, match="llama.cpp 0c1e570 has no 'fp8_e4m3' KV cache type; use one of f32, f16, bf16, q8_0"
    ):
        llamacpp.allocate(load_model("llama-3.1-8b"), 4096, FP8, FP8)


def test_device_of_layers():
    # 4 layers, 2 devices, equal split, all offloaded: act = min(5, 5) = 5; (il / 5) < 0.5 -> CUDA0 for 0, 1, 2
    assert llamacpp.device_of_layers(4, None, None, 2) == [0, 0, 0, 1]
    assert llamacpp.device_of_layers(4, -1, [1.0, 1.0], 2) == [0, 0, 0, 1]
    # -ngl 2: layers 0, 1 on the CPU; act = 2: layer 2 -> 0/2 = 0 -> CUDA0, layer 3 -> 1/2 = 0.5 -> CUDA1
    assert llamacpp.device_of_layers(4, 2, None, 2) == [-1, -1, 0, 1]
    # -ngl 0 or no device: all CPU
    assert llamacpp.device_of_layers(4, 0, None, 2) == [-1, -1, -1, -1]
    assert llamacpp.device_of_layers(3, None, None, 0) == [-1, -1, -1]
    # a split of 0 for the first device puts everything on the second
    assert llamacpp.device_of_layers(4, None, [0.0, 1.0], 2) == [1, 1, 1, 1]
    for bad in ([1.0], [1.0, -1.0], [0.0, 0.0]):
        with pytest.raises(KvcalcError, match="--tensor-split needs 2 non-negative values that do not all vanish"):
            llamacpp.device_of_layers(4, None, bad, 2)


def test_layer_k_v_bytes_per_cell():
    # llama layer: K = V = 8 x 128 x 2 = 2,048 B (f16); q8_0 V: 8 x 4 x 34 = 1,088 B
    layer = load_model("llama-3.1-8b").layers[0]
    assert llamacpp.layer_k_v_bytes_per_cell(layer, F16, Q8) == (2048, 1088)
    # MLA (deepseek-v3): the latent 512 + 64 = 576 values as K, no V
    mla = load_model("deepseek-v3").layers[0]
    assert llamacpp.layer_k_v_bytes_per_cell(mla, F16, F16) == (1152, 0)


def test_default_kv_dtype_is_f16():
    assert llamacpp.default_kv_dtype(load_model("llama-3.1-8b")) == (
        "fp16",
        "f16 (llama.cpp default --cache-type-k/-v)",
    )


def test_capacity_largest_ctx_and_its_note():
    # llama-3.1-8b: 131,072 B per cell; 100 MiB holds 800 cells -> the largest multiple of 256 is 768
    r = llamacpp.capacity(load_model("llama-3.1-8b"), 100 * MiB, F16, F16, options=LlamacppOptions(parallel=1))
    assert (r.n_cells, r.engine_kv_bytes, r.notes) == (
        768,
        96 * MiB,
        ["largest --ctx-size that fits: 768 cells (-c 768)"],
    )
    with pytest.raises(KvcalcError, match=r"^1,000 B does not hold even 256 cells of llama-3\.1-8b's cache$"):
        llamacpp.capacity(load_model("llama-3.1-8b"), 1000, F16, F16)
    assert llamacpp.largest_ctx_size(load_model("llama-3.1-8b"), 100 * MiB, F16, F16) == 768


def test_ctx_size_bounds_and_equal_streams():
    m = load_model("llama-3.1-8b")
    with pytest.raises(
        KvcalcError,
        match=r"^--ctx-size must be 0 \(the model's training context\) or a count of "
        "tokens, got -1$",
    ):
        llamacpp.allocate(m, -1, F16, F16)
    assert llamacpp.allocate(m, 0, F16, F16).n_cells == 131_072  # -c 0: n_ctx_train = max_position_embeddings
    assert llamacpp.allocate(m, 1, F16, F16).n_cells == 256  # pad(1, 256)
    # 3 requests on 3 streams of 1,792 cells (see test_current_streams_per_sequence): each gets 1,792
    r = llamacpp.allocate(m, 5000, F16, F16, concurrency=3, options=LlamacppOptions(parallel=3, unified=False))
    assert r.longest_context == 1792


@pytest.mark.parametrize(
    "model, kwargs, fit",
    [
        # gemma-3-27b, n_ubatch 256: SWA cap 1,024 + 256 = 1,280 cells; 1 GiB: 10 x 8,192 x c + 52 x 8,192 x 1,280
        #   <= 2^30 -> 81,920 c <= 528,482,304 -> c <= 6,451 -> 6,400 (with the default 512: cap 1,536 -> 5,120)
        # (one sequence, -np 1; llama-server's 4 unified slots would make the SWA cache 4 x 1,024 + 256)
        ("gemma-3-27b", dict(n_ubatch=256, parallel=1), 6400),
        # --swa-full: every layer full size: 62 x 8,192 x c <= 2^30 -> c <= 2,114 -> 2,048
        ("gemma-3-27b", dict(swa_full=True), 2048),
        # legacy: every layer full size too -> 2,048 (current without options: 5,120)
        ("gemma-3-27b", dict(version="legacy"), 2048),
        ("gemma-3-27b", dict(parallel=1), 5120),
        # llama-3.1-8b (131,072 B/cell), 2 streams not unified: c = 512 -> 256 x 2 cells = 64 MiB; c = 768 ->
        #   pad(384, 256) = 512 x 2 = 1,024 cells = 128 MiB > 100 MiB -> 512 (unified: 768)
        ("llama-3.1-8b", dict(parallel=2, unified=False), 512),
        # ollama, --parallel 2: llama.cpp gets 2c cells: 2c x 131,072 <= 100 MiB -> c <= 400 -> 256
        ("llama-3.1-8b", dict(parallel=2, ollama=True), 256),
    ],
)
def test_the_largest_fitting_ctx_size_in_the_warning_uses_every_option(model, kwargs, fit):
    budget = GiB if model.startswith("gemma") else 100 * MiB
    with pytest.warns(KvcalcWarning, match=rf"the largest --ctx-size that fits is {fit}$"):
        llamacpp.allocate(load_model(model), 65536, F16, F16, kv_memory_bytes=budget, options=LlamacppOptions(**kwargs))
    assert llamacpp.largest_ctx_size(load_model(model), budget, F16, F16, options=LlamacppOptions(**kwargs)) == fit


def test_largest_ctx_size_ignores_request_options_and_caps_at_the_search_limit():
    import warnings

    m = load_model("llama-3.1-8b")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert llamacpp.largest_ctx_size(m, 100 * MiB, F16, F16) == 768
    # 2^27 cells x 131,072 B = 2^44 B fit in 2^45: the search limit itself, an int
    got = llamacpp.largest_ctx_size(m, 2**45, F16, F16)
    assert got == 2**27 and type(got) is int


def test_capacity_passes_its_options_and_budget():
    # 2 streams not unified in 100 MiB: 512 (see above); 512 cells x 131,072 = 64 MiB
    r = llamacpp.capacity(
        load_model("llama-3.1-8b"), 100 * MiB, F16, F16, options=LlamacppOptions(parallel=2, unified=False)
    )
    assert (r.n_ctx, r.n_cells, r.kv_memory_bytes, r.engine_kv_bytes) == (512, 512, 100 * MiB, 64 * MiB)
    assert "(   256 cells,  32 layers,  2/2 seqs)" in r.log_lines[-1]


def test_device_of_layers_defaults_and_one_offloaded_layer():
    assert llamacpp.device_of_layers(4, None, None) == [0, 0, 0, 0]  # one device by default
    # -ngl 1: only the last layer on the GPU
    assert llamacpp.device_of_layers(4, 1, None, 1) == [-1, -1, -1, 0]
