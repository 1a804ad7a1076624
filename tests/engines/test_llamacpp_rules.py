"""llama.cpp's rules of issue 10 item 1, each an exact figure with its arithmetic
(`kvcalc/engines/llamacpp.py`, whose docstring cites the llama.cpp source of each):

- the SWA cache is GGML_PAD(min(n_ctx_seq, n_swa x (unified ? n_seq_max : 1) + n_ubatch), 256)
  (`src/llama-kv-cache-iswa.cpp`);
- n_ubatch is capped by n_batch (`-b`, default 2048; `src/llama-context.cpp`);
- `-c 0` is the model's training context (n_ctx_train);
- llama-server's slots: no `-np` -> 4 slots in one unified cache; `-np N` -> N streams unless `-kvu`;
  llama-cli one sequence; the library the full-size SWA cache;
- the refusals of `llama_init_from_model`: K and V types of an MLA model, a quantized V cache
  without flash attention;
- the recurrent state (R, S in f32) of Gated-DeltaNet and Mamba layers (`src/llama-memory-recurrent.cpp`);
- DeepSeek's MLA cache expanded per head before llama.cpp cached the latent (legacy, or a GGUF saying so).

Per cell and layer f16 is 2 B per value, q8_0 34 B per 32 values; MiB = 2^20 B.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engines import llamacpp
from kvcalc.engines.llamacpp import LlamacppOptions
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.hf import model_from_hf_config
from kvcalc.load.models import load_model
from kvcalc.schema import ModelSpec

F16, Q8 = kv_format("f16"), kv_format("q8_0")
MiB = 2**20
CFG = Path(__file__).parents[1] / "data" / "engine-configs"
runner = CliRunner()

#: google/gemma-3-270m: 18 layers (15 sliding of window 512, 3 full), 1 KV head x 256:
#: K = V = 256 x 2 B = 512 B per cell per layer, 1,024 B together.
GEMMA_270M = str(CFG / "gemma-3-270m.yaml")
#: Qwen3.5-9B (Qwen3_5TextConfig's defaults, as tests/load/test_hf_families_served.py): 32 layers, every
#: 4th full attention (8 full of 4 KV heads x 256, 24 Gated DeltaNet of 16 key heads and 32 value
#: heads of 128, conv kernel 4).
QWEN35_9B = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "qwen3_5_text",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "full_attention_interval": 4,
        "max_position_embeddings": 262144,
    },
}


def cli_json(*args: str) -> dict:
    r = runner.invoke(app, [*args, "-f", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def cli_error(*args: str) -> str:
    r = runner.invoke(app, list(args))
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


# ----- the SWA cache: padded to 256 ------------------------------------------------------------


def test_swa_cache_is_padded_to_256_gpt_oss_20b_at_4096():
    # gpt-oss-20b: 24 layers, 12 sliding (window 128) + 12 full, 8 KV heads x 64:
    # K = V = 8 x 64 x 2 B = 1,024 B per cell per layer, 2,048 B together.
    # -c 4096, one sequence (llama-cli): non-SWA 4,096 cells: 12 x 4,096 x 2,048 = 100,663,296 B = 96 MiB;
    # SWA GGML_PAD(min(4096, 128 x 1 + 512), 256) = GGML_PAD(640, 256) = 768 cells (not 640):
    # 12 x 768 x 2,048 = 18,874,368 B = 18.00 MiB (not 15.00); total 119,537,664 B.
    r = llamacpp.allocate(load_model("gpt-oss-20b"), 4096, F16, F16, options=LlamacppOptions(tool="llama-cli"))
    assert r.log_lines == [
        "llama_kv_cache_iswa: creating non-SWA KV cache, size = 4096 cells",
        "llama_kv_cache:      CUDA0 KV buffer size =    96.00 MiB",
        "llama_kv_cache: size =   96.00 MiB (  4096 cells,  12 layers,  1/1 seqs), K (f16):   48.00 MiB, "
        "V (f16):   48.00 MiB",
        "llama_kv_cache_iswa: creating     SWA KV cache, size = 768 cells",
        "llama_kv_cache:      CUDA0 KV buffer size =    18.00 MiB",
        "llama_kv_cache: size =   18.00 MiB (   768 cells,  12 layers,  1/1 seqs), K (f16):    9.00 MiB, "
        "V (f16):    9.00 MiB",
    ]
    assert (r.engine_kv_bytes, r.n_cells, r.notes) == (119_537_664, 4096, [])
    # llama-server without -np: 4 slots in one unified cache keep a window each:
    # GGML_PAD(min(4096, 128 x 4 + 512), 256) = 1,024 cells: 12 x 1,024 x 2,048 = 24 MiB
    server = llamacpp.allocate(load_model("gpt-oss-20b"), 4096, F16, F16)
    assert server.log_lines[3] == "llama_kv_cache_iswa: creating     SWA KV cache, size = 1024 cells"
    assert server.engine_kv_bytes == 100_663_296 + 12 * 1024 * 2048 == 120 * MiB


def test_swa_cache_at_ubatch_1_gemma():
    # gemma-3-270m -c 4096 -ub 1, one sequence: GGML_PAD(min(4096, 512 + 1), 256) = 768 cells, not 513:
    # 15 sliding layers x 768 x 1,024 B = 11,796,480 B = 11.25 MiB
    r = llamacpp.allocate(load_model(GEMMA_270M), 4096, F16, F16, options=LlamacppOptions(tool="llama-cli", n_ubatch=1))
    assert r.log_lines[3] == "llama_kv_cache_iswa: creating     SWA KV cache, size = 768 cells"
    assert r.log_lines[5] == (
        "llama_kv_cache: size =   11.25 MiB (   768 cells,  15 layers,  1/1 seqs), "
        "K (f16):    5.62 MiB, V (f16):    5.62 MiB"
    )


def test_n_batch_caps_n_ubatch():
    # gpt-oss-20b -c 4096 -b 100 (-ub 512): n_ubatch = min(n_batch = min(4096, 100), 512) = 100;
    # SWA GGML_PAD(min(4096, 128 + 100 = 228), 256) = 256 cells: 12 x 256 x 2,048 = 6 MiB (with -b 2048: 768)
    r = llamacpp.allocate(
        load_model("gpt-oss-20b"), 4096, F16, F16, options=LlamacppOptions(tool="llama-cli", n_batch=100)
    )
    assert r.log_lines[3] == "llama_kv_cache_iswa: creating     SWA KV cache, size = 256 cells"
    assert r.engine_kv_bytes == 96 * MiB + 6 * MiB
    # the CLI's -b / --batch-size
    out = cli_json("capacity", "gpt-oss-20b", "-e", "llamacpp", "-c", "4096", "-np", "1", "-b", "100")
    assert out["engine_kv_bytes"] == 102 * MiB
    assert cli_json("capacity", "gpt-oss-20b", "-e", "llamacpp", "-c", "4096", "-np", "1")["engine_kv_bytes"] == (
        96 * MiB + 18 * MiB
    )


# ----- -c 0 ------------------------------------------------------------------------------------


def test_ctx_size_0_is_the_training_context():
    # gemma-3-270m -c 0: n_ctx = n_ctx_train = 32,768 (max_position_embeddings); one sequence:
    # non-SWA 3 x 32,768 x 1,024 = 96 MiB; SWA GGML_PAD(min(32768, 512 + 512), 256) = 1,024 cells: 15 MiB
    r = llamacpp.allocate(load_model(GEMMA_270M), 0, F16, F16, options=LlamacppOptions(tool="llama-cli"))
    assert (r.n_ctx, r.n_cells, r.engine_kv_bytes) == (32_768, 32_768, 111 * MiB)
    assert r.notes == [
        "-c 0: n_ctx = n_ctx_train = 32,768 (the model's max_position_embeddings, the GGUF's context_length)"
    ]
    out = cli_json("capacity", GEMMA_270M, "-e", "llamacpp", "-c", "0", "--llamacpp-tool", "llama-cli")
    assert (out["n_ctx"], out["engine_kv_bytes"]) == (32_768, 111 * MiB)
    with pytest.raises(
        KvcalcError,
        match=r"^--ctx-size 0: -c 0 means the model's training context, but nomax states "
        r"no max_position_embeddings; give the context$",
    ):
        llamacpp.allocate(ModelSpec(name="nomax", n_layers=2, n_heads=2, head_dim=64), 0, F16, F16)
    assert cli_error("capacity", GEMMA_270M, "-e", "llamacpp", "-c", "-1") == (
        "error: --ctx-size must be 0 (the model's training context) or a count of tokens, got -1"
    )


# ----- the tool's slots ------------------------------------------------------------------------


def test_llama_server_explicit_np_gives_separate_streams_gemma_3_270m():
    # -c 1024 -np 3 (no -kvu): n_ctx_seq = GGML_PAD(1024 / 3 = 341, 256) = 512 cells x 3 streams = 1,536 cells.
    # non-SWA: 3 layers x 512 x 3 x 1,024 B = 4,718,592 B = 4.50 MiB;
    # SWA GGML_PAD(min(512, 512 x 1 + 512), 256) = 512 cells: 15 x 512 x 3 x 1,024 = 23,592,960 B = 22.50 MiB;
    # total 28,311,552 B = 27.00 MiB (one unified stream of 1,024 cells would be 18.00)
    r = llamacpp.allocate(load_model(GEMMA_270M), 1024, F16, F16, options=LlamacppOptions(parallel=3))
    assert r.log_lines == [
        "llama_kv_cache_iswa: creating non-SWA KV cache, size = 512 cells",
        "llama_kv_cache:      CUDA0 KV buffer size =     4.50 MiB",
        "llama_kv_cache: size =    4.50 MiB (   512 cells,   3 layers,  3/3 seqs), K (f16):    2.25 MiB, "
        "V (f16):    2.25 MiB",
        "llama_kv_cache_iswa: creating     SWA KV cache, size = 512 cells",
        "llama_kv_cache:      CUDA0 KV buffer size =    22.50 MiB",
        "llama_kv_cache: size =   22.50 MiB (   512 cells,  15 layers,  3/3 seqs), K (f16):   11.25 MiB, "
        "V (f16):   11.25 MiB",
    ]
    assert (r.n_cells, r.n_ctx, r.engine_kv_bytes) == (1536, 1536, 28_311_552)
    out = cli_json("capacity", GEMMA_270M, "-e", "llamacpp", "-c", "1024", "-np", "3")
    assert (out["n_cells"], out["engine_kv_bytes"]) == (1536, 27 * MiB)
    # -np 3 -kvu: one stream of 1,024 cells for both caches (GGML_PAD(min(1024, 512 x 3 + 512), 256) = 1,024):
    # 18 layers x 1,024 x 1,024 = 18 MiB
    kvu = cli_json("capacity", GEMMA_270M, "-e", "llamacpp", "-c", "1024", "-np", "3", "-kvu")
    assert (kvu["n_cells"], kvu["engine_kv_bytes"]) == (1024, 18 * MiB)
    assert "(  1024 cells,  15 layers,  3/1 seqs)" in kvu["log_lines"][-1]


def test_llama_server_without_np_runs_4_unified_slots():
    # gemma-3-270m -c 1024, no -np: 4 slots, one stream of 1,024 cells; SWA GGML_PAD(min(1024, 512 x 4 + 512),
    # 256) = 1,024: 18 x 1,024 x 1,024 = 18 MiB, "4/1 seqs"
    r = llamacpp.allocate(load_model(GEMMA_270M), 1024, F16, F16)
    assert (r.n_cells, r.engine_kv_bytes) == (1024, 18 * MiB)
    assert r.log_lines[-1] == (
        "llama_kv_cache: size =   15.00 MiB (  1024 cells,  15 layers,  4/1 seqs), "
        "K (f16):    7.50 MiB, V (f16):    7.50 MiB"
    )
    assert r.notes == [
        "llama-server without -np: 4 slots sharing one unified cache (tools/server/server.cpp: "
        "n_parallel is set to auto, using n_parallel = 4 and kv_unified = true)"
    ]
    # 4 requests of 256 tokens share the 1,024 cells: 4.0x; 4 at once get 256 each
    r = llamacpp.allocate(load_model(GEMMA_270M), 1024, F16, F16, max_model_len=256, concurrency=4)
    assert (r.max_concurrency, r.longest_context) == (4.0, 256)


@pytest.mark.parametrize(
    "tool, swa_cells, seqs, total_mib",
    [
        # gemma-3-270m -c 4096; non-SWA 3 x 4,096 x 1,024 = 12 MiB in each case.
        # llama-server (no -np): 4 unified slots, SWA GGML_PAD(min(4096, 512 x 4 + 512 = 2,560), 256) = 2,560:
        #   15 x 2,560 x 1,024 = 37.5 MiB -> 49.5 MiB
        ("llama-server", 2560, "4/1", 49.5),
        # llama-cli: one sequence, SWA GGML_PAD(min(4096, 512 + 512), 256) = 1,024: 15 MiB -> 27 MiB
        ("llama-cli", 1024, "1/1", 27.0),
        # the library (llama_context_default_params): swa_full true, the SWA cache full size: 60 MiB -> 72 MiB
        ("library", 4096, "1/1", 72.0),
    ],
)
def test_each_tool_has_its_own_defaults(tool, swa_cells, seqs, total_mib):
    r = llamacpp.allocate(load_model(GEMMA_270M), 4096, F16, F16, options=LlamacppOptions(tool=tool))
    assert f"creating     SWA KV cache, size = {swa_cells} cells" in "\n".join(r.log_lines)
    assert f"15 layers,  {seqs} seqs)" in r.log_lines[-1]
    assert r.engine_kv_bytes == int(total_mib * MiB)
    assert (r.log_lines[0] == f"llama_kv_cache_iswa: using full-size SWA cache (ref: {llamacpp.SWA_FULL_REF})") == (
        tool == "library"
    )
    out = cli_json("capacity", GEMMA_270M, "-e", "llamacpp", "-c", "4096", "--llamacpp-tool", tool)
    assert out["engine_kv_bytes"] == int(total_mib * MiB)


def test_unknown_tool_is_refused():
    assert cli_error("capacity", GEMMA_270M, "-e", "llamacpp", "-c", "4096", "--llamacpp-tool", "llama-bench") == (
        "error: --llamacpp-tool llama-bench: use one of llama-server, llama-cli, library, not 'llama-bench'"
    )


# ----- refusals --------------------------------------------------------------------------------


def test_mla_model_refuses_different_k_and_v_types():
    m = load_model("deepseek-v2-lite")
    with pytest.raises(KvcalcError) as e:
        llamacpp.allocate(m, 4096, Q8, F16)
    assert e.value.field == "v_dtype"
    assert '"llama_init_from_model: model does not support different K (q8_0) and V (f16) cache types"' in str(e.value)
    # one type for both is fine: the latent (512 + 64) in q8_0 = 18 blocks x 34 = 612 B per cell per layer
    assert llamacpp.allocate(m, 4096, Q8, Q8).engine_kv_bytes == 27 * 612 * 4096
    # the expanded cache (legacy) has a V of its own: K and V may differ
    assert (
        llamacpp.allocate(m, 4096, Q8, F16, options=LlamacppOptions(version="legacy")).v_bytes
        == 27 * 16 * 128 * 2 * 4096
    )
    err = cli_error("capacity", "deepseek-v2-lite", "-e", "llamacpp", "-c", "4096", "-ctk", "q8_0", "-ctv", "f16")
    assert err.startswith(
        'error: --v-dtype f16: llama.cpp refuses it: "llama_init_from_model: model does not '
        'support different K (q8_0) and V (f16) cache types"'
    )


def test_quantized_v_cache_needs_flash_attention():
    m = load_model("llama-3.1-8b")
    with pytest.raises(
        KvcalcError, match='"llama_init_from_model: quantized V cache requires flash_attn to be enabled"'
    ):
        llamacpp.allocate(m, 4096, F16, Q8, options=LlamacppOptions(flash_attn="off"))
    # -fa auto (the default) is on where the backend supports it, which kvcalc assumes; -fa on alike
    for fa in (None, "auto", "on", True):
        assert (
            llamacpp.allocate(m, 4096, F16, Q8, options=LlamacppOptions(flash_attn=fa)).v_bytes
            == 32 * 8 * 4 * 34 * 4096
        )
    # a quantized K alone needs no flash attention
    assert (
        llamacpp.allocate(m, 4096, Q8, F16, options=LlamacppOptions(flash_attn="off")).k_bytes == 32 * 8 * 4 * 34 * 4096
    )
    err = cli_error("capacity", "llama-3.1-8b", "-e", "llamacpp", "-c", "4096", "-ctv", "q8_0", "-fa", "off")
    assert err == (
        'error: --v-dtype q8_0: llama.cpp refuses it: "llama_init_from_model: quantized V cache '
        'requires flash_attn to be enabled"; add -fa on (or auto) or use an f16 V cache'
    )


# ----- recurrent state -------------------------------------------------------------------------


def test_qwen3_5_9b_recurrent_state_beside_the_kv_cache():
    m = model_from_hf_config(QWEN35_9B, "Qwen3.5-9B/config.json")
    # KV: 8 full layers x 4 KV heads x 256 x 2 B = 2,048 B of K (and of V) per cell per layer;
    # 8 x 4,096 cells x 4,096 B = 134,217,728 B = 128 MiB.
    # state, one sequence (max(1, n_seq_max) = 1 cell), f32 whatever -ctk / -ctv:
    # R = 24 layers x 3 (conv kernel - 1) x 8,192 (32 x 128 + 2 x 16 x 128) x 4 B = 2,359,296 B = 2.25 MiB
    # S = 24 layers x 32 x 128 x 128 x 4 B = 50,331,648 B = 48 MiB; R + S = 52,690,944 B = 50.25 MiB
    r = llamacpp.allocate(m, 4096, F16, F16, options=LlamacppOptions(tool="llama-cli"))
    assert r.log_lines == [
        "llama_kv_cache:      CUDA0 KV buffer size =   128.00 MiB",
        "llama_kv_cache: size =  128.00 MiB (  4096 cells,   8 layers,  1/1 seqs), K (f16):   64.00 MiB, "
        "V (f16):   64.00 MiB",
        "llama_memory_recurrent:      CUDA0 RS buffer size =    50.25 MiB",
        "llama_memory_recurrent: size =   50.25 MiB (     1 cells,  32 layers,  1 seqs  0 rs_seq), R (f32):    2.25 MiB, "
        "S (f32):   48.00 MiB, P (f32):    0.00 MiB",
    ]
    assert (r.engine_kv_bytes, r.engine_state_bytes) == (128 * MiB, 52_690_944)
    # a q8_0 cache shrinks the KV, not the state
    q8 = llamacpp.allocate(m, 4096, Q8, Q8, options=LlamacppOptions(tool="llama-cli"))
    assert q8.engine_state_bytes == 52_690_944 and q8.log_lines[-1] == r.log_lines[-1]
    # llama-server's 4 slots keep 4 cells: 201.00 MiB, R 9.00, S 192.00 (as a public llama-server log of
    # Qwen3.5-9B prints it; llama.cpp 0c1e570 adds the rs_seq count and the P (PLE) figure)
    server = llamacpp.allocate(m, 4096, F16, F16)
    assert server.log_lines[-1] == (
        "llama_memory_recurrent: size =  201.00 MiB (     4 cells,  32 layers,  4 seqs  0 rs_seq), "
        "R (f32):    9.00 MiB, S (f32):  192.00 MiB, P (f32):    0.00 MiB"
    )
    assert server.engine_state_bytes == 4 * 52_690_944


def test_recurrent_state_follows_the_layers_devices_and_counts_in_the_fit():
    m = model_from_hf_config(QWEN35_9B, "Qwen3.5-9B/config.json")
    # -ngl 8: layers 24-31 on CUDA0 (i_gpu_start = 32 - 8), 6 of them Gated DeltaNet (24-26, 28-30),
    # 18 on the CPU; one layer's R + S = (24,576 + 524,288) x 4 B = 2,195,456 B:
    # CPU 18 x 2,195,456 = 39,518,208 B = 37.69 MiB; CUDA0 6 x 2,195,456 = 13,172,736 B = 12.56 MiB
    r = llamacpp.allocate(m, 4096, F16, F16, options=LlamacppOptions(tool="llama-cli", n_gpu_layers=8))
    assert r.log_lines[-3:-1] == [
        "llama_memory_recurrent:        CPU RS buffer size =    37.69 MiB",
        "llama_memory_recurrent:      CUDA0 RS buffer size =    12.56 MiB",
    ]
    # 128 MiB of KV + 50.25 MiB of state = 186,908,672 B hold exactly -c 4096; one byte less: 3,840
    # (8 x 3,840 x 4,096 = 120 MiB + 50.25)
    budget = 128 * MiB + 52_690_944
    assert llamacpp.largest_ctx_size(m, budget, F16, F16, options=LlamacppOptions(tool="llama-cli")) == 4096
    assert llamacpp.largest_ctx_size(m, budget - 1, F16, F16, options=LlamacppOptions(tool="llama-cli")) == 3840
    out = cli_json(
        "capacity", "-e", "llamacpp", "--kv-memory", f"{budget}B", "--llamacpp-tool", "llama-cli", str(_qwen35_file())
    )
    assert (out["n_ctx"], out["engine_state_bytes"]) == (4096, 52_690_944)


def _qwen35_file() -> Path:
    """The Qwen3.5-9B config.json written to a temporary folder (the loader reads a file)."""
    import tempfile

    d = Path(tempfile.mkdtemp()) / "Qwen3.5-9B"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(QWEN35_9B))
    return d / "config.json"


def test_jamba_mamba_state_two_sequences():
    # jamba-1.5-mini: 28 Mamba-1 layers (d_inner = 2 x 4,096 = 8,192, d_conv 4, d_state 16) + 4 full layers of
    # 8 KV heads x 128 (K + V 2 x 8 x 128 x 2 B = 4,096 B per cell per layer). -c 4096 -np 2 (two streams of
    # 2,048 cells): KV 4 x 2 x 2,048 x 4,096 B = 64 MiB.
    # state, 2 cells: R = 28 x 3 x 8,192 x 2 x 4 B = 5,505,024 B = 5.25 MiB; S = 28 x 16 x 8,192 x 2 x 4 B
    # = 29,360,128 B = 28 MiB; together 34,865,152 B = 33.25 MiB
    r = llamacpp.allocate(load_model("jamba-1.5-mini"), 4096, F16, F16, options=LlamacppOptions(parallel=2))
    assert r.log_lines[-1] == (
        "llama_memory_recurrent: size =   33.25 MiB (     2 cells,  32 layers,  2 seqs  0 rs_seq), "
        "R (f32):    5.25 MiB, S (f32):   28.00 MiB, P (f32):    0.00 MiB"
    )
    assert (r.engine_kv_bytes, r.engine_state_bytes) == (64 * MiB, 34_865_152)


def test_recurrent_r_and_s_add_up_to_the_layer_state():
    for m in (
        model_from_hf_config(QWEN35_9B, "Qwen3.5-9B/config.json"),
        load_model("jamba-1.5-mini"),
        load_model("qwen3-next-80b-a3b"),
    ):
        for layer in m.layers:
            if layer.kind in ("mamba", "linear"):
                r, s = llamacpp.recurrent_r_s_values(m, layer)
                assert r + s == layer.state_values > 0


# ----- DeepSeek's MLA cache: latent, or expanded per head -------------------------------------


def test_deepseek_v2_lite_expanded_before_the_latent_cache():
    m = load_model("deepseek-v2-lite")
    # legacy (before llama.cpp cached the latent, April 2025): K and V per head, 16 heads x (128 + 64) = 3,072
    # values of K and 16 x 128 = 2,048 of V per layer: 27 x (3,072 + 2,048) x 2 B = 276,480 B per cell;
    # x 163,840 cells = 45,298,483,200 B = 43,200 MiB (K 27 x 3,072 x 2 x 163,840 = 25,920 MiB, V 17,280 MiB)
    r = llamacpp.allocate(m, 163_840, F16, F16, options=LlamacppOptions(version="legacy"))
    assert (r.engine_kv_bytes, r.k_bytes, r.v_bytes) == (45_298_483_200, 25_920 * MiB, 17_280 * MiB)
    assert r.log_lines[-1] == (
        "llama_init_from_model: KV self size  = 43200.00 MiB, K (f16): 25920.00 MiB, V (f16): 17280.00 MiB"
    )
    # current: the latent 512 + 64 = 576 values as K, no V: 27 x 576 x 2 B = 31,104 B per cell;
    # x 163,840 = 5,096,079,360 B = 4,860 MiB
    cur = llamacpp.allocate(m, 163_840, F16, F16, options=LlamacppOptions(tool="llama-cli"))
    assert cur.engine_kv_bytes == 5_096_079_360 == 4_860 * MiB
    assert cur.log_lines[-1] == (
        "llama_kv_cache: size = 4860.00 MiB (163840 cells,  27 layers,  1/1 seqs), "
        "K (f16): 4860.00 MiB, V (f16):    0.00 MiB"
    )


def test_the_model_can_say_which_mla_cache_its_gguf_has():
    m = load_model("deepseek-v2-lite")
    # a GGUF without key_length_mla, run by current llama.cpp: the expanded cache (276,480 B per cell)
    old = m.model_copy(update={"mla_cache": "expanded"})
    assert (
        llamacpp.allocate(old, 4096, F16, F16, options=LlamacppOptions(tool="llama-cli")).engine_kv_bytes
        == 276_480 * 4096
    )
    # and a latent GGUF stays latent (31,104 B per cell); legacy llama.cpp cannot load it: since PR #12801
    # convert_hf_to_gguf.py writes attn_k_b / attn_v_b in place of attn_kv_b, which 7841fc7's
    # llama_model::load_tensors requires (create_tensor(tn(LLM_TENSOR_ATTN_KV_B, "weight", i), ..., 0))
    new = m.model_copy(update={"mla_cache": "latent"})
    assert (
        llamacpp.allocate(new, 4096, F16, F16, options=LlamacppOptions(tool="llama-cli")).engine_kv_bytes
        == 31_104 * 4096
    )
    with pytest.raises(KvcalcError, match=r"missing tensor 'blk\.0\.attn_kv_b\.weight'") as e:
        llamacpp.allocate(new, 4096, F16, F16, options=LlamacppOptions(version="legacy"))
    assert e.value.field == "llamacpp_version"
    assert llamacpp.rules("current").mla_cache(m) == "latent" and llamacpp.rules("legacy").mla_cache(m) == "expanded"
    with pytest.raises(ValidationError, match="mla_cache"):
        ModelSpec(name="x", n_layers=2, n_heads=2, head_dim=64, mla_cache="latent")
    # the expanded cache needs the per-head sizes
    bare = ModelSpec(name="bare-mla", n_layers=2, n_heads=4, attention="mla", kv_lora_rank=64, qk_rope_head_dim=16)
    with pytest.raises(
        KvcalcError,
        match=r"^bare-mla: the expanded MLA cache .* needs qk_nope_head_dim and "
        r"v_head_dim in the config$",
    ):
        llamacpp.allocate(bare, 4096, F16, F16, options=LlamacppOptions(version="legacy"))


def test_a_mamba_only_model_has_state_and_no_kv_cache():
    # 4 Mamba-1 layers, hidden 256 (d_inner 2 x 256 = 512, d_conv 4, d_state 16): R = 3 x 512 = 1,536 and
    # S = 16 x 512 = 8,192 values per layer and sequence. llama-server's 4 slots: 4 cells;
    # R = 4 x 1,536 x 4 x 4 B = 98,304 B (0.09 MiB), S = 4 x 8,192 x 4 x 4 B = 524,288 B (0.50 MiB),
    # 622,592 B (0.59 MiB). No llama_kv_cache at all; each of the 4 slots holds any length.
    m = ModelSpec(
        name="mamba-4",
        n_layers=4,
        n_heads=4,
        hidden_size=256,
        layer_pattern=["mamba"],
        mamba_d_state=16,
        mamba_d_conv=4,
        mamba_expand=2,
        max_position_embeddings=2048,
    )
    r = llamacpp.allocate(m, 4096, F16, F16, max_model_len=1000, concurrency=5)
    assert r.log_lines == [
        "llama_memory_recurrent:      CUDA0 RS buffer size =     0.59 MiB",
        "llama_memory_recurrent: size =    0.59 MiB (     4 cells,   4 layers,  4 seqs  0 rs_seq), "
        "R (f32):    0.09 MiB, S (f32):    0.50 MiB, P (f32):    0.00 MiB",
    ]
    assert (r.engine_kv_bytes, r.engine_state_bytes, r.max_concurrency, r.longest_context) == (0, 622_592, 4.0, 0)
    assert llamacpp.allocate(m, 4096, F16, F16, concurrency=4).longest_context is None  # no limit
