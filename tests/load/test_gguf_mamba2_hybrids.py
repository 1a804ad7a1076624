"""The Mamba-2 hybrids' GGUF files as llama.cpp reads them: Nemotron-H (`nemotron_h`) and
Granite-4.0-H (`granitehybrid`), with the metadata their converter writes (`conversion/granite.py`
GraniteHybridModel, `conversion/nemotron.py` NemotronHModel): head_count_kv per layer (0 where a
layer has no attention), Nemotron-H's feed_forward_length per layer (the MLP width on the "-"
layers, 0 elsewhere), ssm.inner_size (d_inner), ssm.time_step_rank (the Mamba-2 heads),
ssm.group_count, ssm.state_size, ssm.conv_kernel and context_length 2^20. Each file gives the
same KV cache and state as the model's config.json, and llama.cpp's lines for it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from gguf_files import write_gguf

from kvcalc.calc.kv_cache import kv_bytes_per_token, state_bytes_per_seq
from kvcalc.engines import llamacpp
from kvcalc.engines.llamacpp import LlamacppOptions
from kvcalc.errors import ConfigError
from kvcalc.formats import kv_format
from kvcalc.load.gguf import model_from_gguf
from kvcalc.load.hf import model_from_hf_config

F16 = kv_format("fp16")
#: nvidia/Nemotron-H-8B-Base-8K: M Mamba-2, * attention, - MLP
PATTERN_8B = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
#: nvidia/NVIDIA-Nemotron-Nano-9B-v2
PATTERN_9B = "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-"


def nemotron_kv(pattern: str, hidden: int, heads: int, mamba_heads: int, mamba_head_dim: int, ff: int) -> dict:
    return {
        "block_count": len(pattern),
        "context_length": 2**20,
        "embedding_length": hidden,
        "feed_forward_length": [ff if ch == "-" else 0 for ch in pattern],
        "attention.head_count": heads,
        "attention.head_count_kv": [8 if ch == "*" else 0 for ch in pattern],
        "attention.key_length": 128,
        "attention.value_length": 128,
        "ssm.conv_kernel": 4,
        "ssm.inner_size": mamba_heads * mamba_head_dim,
        "ssm.state_size": 128,
        "ssm.time_step_rank": mamba_heads,
        "ssm.group_count": 8,
        "vocab_size": 131072,
    }


def norms(n_layers: int) -> list:
    return [(f"blk.{i}.attn_norm.weight", "F32", (32,)) for i in range(n_layers)]


def test_nemotron_h_8b_layers_by_llama_cpp_rule(tmp_path):
    kv = nemotron_kv(PATTERN_8B, 4096, 32, 128, 64, 21504)
    g = model_from_gguf(
        write_gguf(
            tmp_path / "Nemotron-H-8B-Base-8K.gguf",
            "nemotron_h",
            kv,
            norms(52) + [("blk.0.ssm_norm.weight", "F32", (1024, 8))],
        )
    )
    # M -> mamba (head_count_kv 0, feed_forward_length 0), * -> full, - -> mlp (feed_forward_length 21,504)
    assert g.layer_kinds == [{"M": "mamba", "*": "full", "-": "mlp"}[ch] for ch in PATTERN_8B]
    assert (g.mamba_n_heads, g.mamba_head_dim, g.mamba_n_groups, g.mamba_d_state, g.mamba_d_conv) == (
        128,
        64,
        8,
        128,
        4,
    )
    assert (g.intermediate_size, g.mlp_kind, g.mamba_norm) == (21504, "plain", True)
    h = model_from_hf_config(
        {
            "model_type": "nemotron_h",
            "hidden_size": 4096,
            "hybrid_override_pattern": PATTERN_8B,
            "intermediate_size": 21504,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "mamba_num_heads": 128,
            "mamba_head_dim": 64,
            "ssm_state_size": 128,
            "n_groups": 8,
            "conv_kernel": 4,
        },
        "Nemotron-H-8B-Base-8K/config.json",
    )
    # 2 x 4 attention layers x 8 x 128 x 2 B = 16,384 B per token; state 24 x (30,720 + 1,048,576) x 2 B
    assert (
        (kv_bytes_per_token(g, "bf16"), state_bytes_per_seq(g))
        == (kv_bytes_per_token(h, "bf16"), state_bytes_per_seq(h))
        == (16_384, 51_806_208)
    )
    # -c 0 is the GGUF's context_length, 2^20, which the converter writes (no RoPE), not the config's 8,192
    assert llamacpp.n_ctx_train(g) == 1_048_576


def test_nemotron_nano_9b_v2_d_inner_is_not_a_multiple_of_hidden(tmp_path):
    # d_inner 128 x 80 = 10,240 over hidden 4,480: a Mamba-1 reading (expand = inner / hidden) would refuse it
    g = model_from_gguf(
        write_gguf(tmp_path / "nano.gguf", "nemotron_h", nemotron_kv(PATTERN_9B, 4480, 40, 128, 80, 15680), norms(56))
    )
    assert (g.layer_kinds.count("mamba"), g.layer_kinds.count("full"), g.layer_kinds.count("mlp")) == (27, 4, 25)
    r = llamacpp.allocate(g, 1024, F16, F16, options=LlamacppOptions(tool="library", n_gpu_layers=0))
    # n_embd_r = 3 x (10,240 + 2 x 8 x 128) = 36,864, n_embd_s = 128 x 10,240 = 1,310,720; 27 layers x 4 B:
    # R 3,981,312 B (3.80 MiB), S 141,557,760 B (135 MiB)
    assert r.log_lines[-1] == (
        "llama_memory_recurrent: size =  138.80 MiB (     1 cells,  56 layers,  1 seqs  0 rs_seq), "
        "R (f32):    3.80 MiB, S (f32):  135.00 MiB, P (f32):    0.00 MiB"
    )
    assert r.engine_state_bytes == 3_981_312 + 141_557_760


def test_granite_4_h_tiny(tmp_path):
    attn = (5, 15, 25, 35)
    kv = {
        "block_count": 40,
        "context_length": 2**20,
        "embedding_length": 1536,
        "feed_forward_length": 512,
        "attention.head_count": 12,
        "attention.head_count_kv": [4 if i in attn else 0 for i in range(40)],
        "expert_count": 64,
        "expert_used_count": 6,
        "expert_shared_feed_forward_length": 1024,
        "ssm.conv_kernel": 4,
        "ssm.inner_size": 3072,
        "ssm.state_size": 128,
        "ssm.time_step_rank": 48,
        "ssm.group_count": 1,
        "vocab_size": 100352,
    }
    g = model_from_gguf(write_gguf(tmp_path / "granite-4.0-h-tiny.gguf", "granitehybrid", kv, norms(40)))
    # recurrent iff head_count_kv is 0; key_length defaults to 1,536 / 12 = 128
    assert g.layer_kinds == ["full" if i in attn else "mamba" for i in range(40)]
    assert (g.resolved_n_kv_heads, g.resolved_head_dim, g.mamba_n_heads, g.mamba_head_dim) == (4, 128, 48, 64)
    # 2 x 4 x 4 x 128 x 2 B = 8,192 B per token; 36 x (9,984 + 393,216) values x 2 B = 29,030,400 B per sequence
    assert (kv_bytes_per_token(g, "bf16"), state_bytes_per_seq(g)) == (8_192, 29_030_400)
    r = llamacpp.allocate(g, 4096, F16, F16, options=LlamacppOptions(tool="library", n_gpu_layers=0))
    # the oracle's granite-4.0-h-tiny at -c 4096: K = 4 x 4,096 x 512 x 2 B = 16 MiB; R 36 x 9,984 x 4 B =
    # 1,437,696 B, S 36 x 393,216 x 4 B = 56,623,104 B (54 MiB)
    assert r.log_lines == [
        "llama_kv_cache:        CPU KV buffer size =    32.00 MiB",
        "llama_kv_cache: size =   32.00 MiB (  4096 cells,   4 layers,  1/1 seqs), K (f16):   16.00 MiB, "
        "V (f16):   16.00 MiB",
        "llama_memory_recurrent:        CPU RS buffer size =    55.37 MiB",
        "llama_memory_recurrent: size =   55.37 MiB (     1 cells,  40 layers,  1 seqs  0 rs_seq), R (f32):    1.37 MiB, "
        "S (f32):   54.00 MiB, P (f32):    0.00 MiB",
    ]
    assert r.engine_state_bytes == 1_437_696 + 56_623_104


def test_other_mamba2_architectures_still_refused(tmp_path):
    """A pure Mamba-2 file (`mamba2`) is refused; nemotron_h_moe (Nemotron-3) is read as nemotron_h
    (tests/load/test_gguf_2026.py)."""
    kv = nemotron_kv(PATTERN_8B, 4096, 32, 128, 64, 21504)
    with pytest.raises(ConfigError, match=r"field 'mamba2.ssm.group_count': Mamba-2 layers"):
        model_from_gguf(write_gguf(tmp_path / "m2.gguf", "mamba2", kv, norms(52)))
    moe = model_from_gguf(write_gguf(tmp_path / "moe.gguf", "nemotron_h_moe", kv, norms(52)))
    assert moe.model_type == "nemotron_h"
