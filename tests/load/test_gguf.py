"""GGUF files as model input (`kvcalc.load.gguf`): the header reader, the weights from the tensor
table and the dense decoder mapping, on tiny files written by the `gguf` package's own writer.
Every byte figure is derived by hand in the comment beside it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from gguf_files import ENDS, LLAMA_8B_KV, gguf, stored_bytes, tiny_layers, write_gguf

from kvcalc.calc.kv_cache import estimate
from kvcalc.calc.weights import param_counts, weight_bytes, weight_format_label, weights_source
from kvcalc.errors import ConfigError
from kvcalc.load.gguf import StringArray, model_from_gguf, read_header
from kvcalc.load.models import load_model
from kvcalc.schema import Workload


@pytest.fixture
def llama8b(tmp_path) -> Path:
    return write_gguf(tmp_path / "Llama-3.1-8B-Q4_K_M.gguf", "llama", LLAMA_8B_KV, tiny_layers(32) + ENDS)


def kv_per_token(model, kv_dtype: str = "fp16") -> int:
    return estimate(model, Workload(seq_len=1, k_dtype=kv_dtype, v_dtype=kv_dtype)).kv_bytes_per_token


def test_stored_sizes_come_from_the_package_table():
    # Q8_0: 64 x 32 = 2,048 values / 32 per block x 34 B = 2,176 B; Q4_K: 512 / 256 x 144 = 288;
    # Q6_K: 1,024 / 256 x 210 = 840
    assert stored_bytes("Q8_0", (64, 32)) == 2176
    assert stored_bytes("Q4_K", (256, 2)) == 288
    assert stored_bytes("Q6_K", (256, 4)) == 840


def test_llama_8b_architecture_from_the_metadata(llama8b):
    m = load_model(str(llama8b))
    assert (m.n_layers, m.n_heads, m.n_kv_heads, m.head_dim, m.hidden_size) == (32, 32, 8, 128, 4096)
    assert (m.intermediate_size, m.vocab_size, m.max_position_embeddings) == (14336, 128256, 131072)
    assert m.model_type == "llama" and m.dtype == "fp16" and m.layer_kinds == ["full"] * 32
    assert m.name == "Llama-3.1-8B-Q4_K_M"
    assert "architecture llama, Meta Llama 3.1 8B Instruct, Q4_K_M" in m.source
    # 2 (K and V) x 32 layers x 8 KV heads x 128 head_dim x 2 B (f16) = 131,072 B per token
    assert kv_per_token(m) == 131072
    # q8_0 cache: each 128-value row is 4 blocks of 34 B = 136 B; 2 x 32 x 8 x 136 = 69,632 B
    assert kv_per_token(m, "q8_0") == 69632


def test_llama_8b_weights_from_the_tensor_table(llama8b):
    ck = model_from_gguf(llama8b).checkpoint
    # per layer: attn_q Q4_K 256 x 2 = 2 blocks x 144 B = 288 B, attn_norm F32 8 x 4 B = 32 B: 320 B
    assert ck.layer_bytes == [320] * 32 and ck.layer_expert_bytes == [0] * 32
    assert ck.embedding_bytes == 840  # token_embd Q6_K 256 x 4: 4 blocks x 210 B
    assert ck.head_bytes == 2176 + 64  # output Q8_0 64 x 32: 2,048 / 32 x 34 B; output_norm 16 x 4 B
    assert ck.other_bytes == 0
    assert ck.total_bytes == 13320  # 32 x 320 + 840 + 2,240
    # values: 32 x (512 + 8) + 1,024 + 2,048 + 16 = 19,728
    assert ck.n_params == 19728
    # Q4_K 32 x 288 = 9,216; F32 32 x 32 + 64 = 1,088
    assert ck.bytes_by_dtype == {"F32": 1088, "Q4_K": 9216, "Q6_K": 840, "Q8_0": 2176}
    assert ck.label == "Q4_K_M" and ck.source == "GGUF tensor table"


def test_the_memory_plan_uses_the_stored_bytes(llama8b):
    m = model_from_gguf(llama8b)
    assert weight_bytes(m).total_bytes == 13320
    assert param_counts(m) == (19728, 19728)
    assert weights_source(m) == "GGUF tensor table"
    assert weight_format_label(m) == "Q4_K_M as stored"
    # --weight-dtype counts from the architecture instead: Llama-3.1-8B in q4_k (144 B / 256 values)
    # 32 layers x 218,103,808 matrix values x 144 / 256 = 3,925,868,544; fp16 rest: embeddings and
    # head 2 x 128,256 x 4,096 x 2 B = 2,101,346,304, norms (32 x 2 + 1) x 4,096 x 2 B = 532,480
    assert weights_source(m, "q4_K") == "architecture"
    assert weight_bytes(m, "q4_K").total_bytes == 3925868544 + 2101346304 + 532480


def test_reader_agrees_with_the_package_reader(llama8b):
    mine = read_header(llama8b)
    ref = gguf.GGUFReader(str(llama8b))
    assert mine.data_offset == ref.data_offset
    assert [(t.name, t.ggml_type, t.n_values, t.n_bytes, t.offset + mine.data_offset) for t in mine.tensors] == [
        (t.name, int(t.tensor_type), t.n_elements, int(t.n_bytes), t.data_offset) for t in ref.tensors
    ]
    for key in ("llama.block_count", "llama.attention.head_count_kv", "general.file_type"):
        assert mine.metadata[key] == ref.fields[key].contents()
    assert mine.metadata["general.name"] == ref.fields["general.name"].contents()


def test_vocabulary_from_the_token_list(tmp_path):
    kv = {k: v for k, v in LLAMA_8B_KV.items() if k != "vocab_size"}
    kv["tokenizer.ggml.tokens"] = [f"t{i}" for i in range(1000)]
    p = write_gguf(tmp_path / "m.gguf", "llama", kv, tiny_layers(32) + ENDS)
    assert read_header(p).metadata["tokenizer.ggml.tokens"] == StringArray(1000)
    assert model_from_gguf(p).vocab_size == 1000


def test_per_layer_kv_head_array(tmp_path):
    # some converters write head counts per layer; the same 8 on every layer is plain GQA
    kv = {**LLAMA_8B_KV, "attention.head_count_kv": [8] * 32, "attention.head_count": [32] * 32}
    m = model_from_gguf(write_gguf(tmp_path / "m.gguf", "llama", kv, tiny_layers(32) + ENDS))
    assert (m.n_heads, m.n_kv_heads) == (32, 8)
    assert kv_per_token(m) == 131072  # as the scalar file: 2 x 32 x 8 x 128 x 2 B


def test_kv_heads_that_differ_between_layers_are_refused(tmp_path):
    # OpenELM-style: 3 KV heads on the first layers, 4 on the last ones
    kv = {**LLAMA_8B_KV, "attention.head_count_kv": [3] * 16 + [4] * 16}
    p = write_gguf(tmp_path / "m.gguf", "llama", kv, tiny_layers(32) + ENDS)
    with pytest.raises(ConfigError) as e:
        model_from_gguf(p)
    assert "field 'llama.attention.head_count_kv'" in str(e.value) and "differ between layers (3, 4)" in str(e.value)


def test_array_of_the_wrong_length_is_refused(tmp_path):
    kv = {**LLAMA_8B_KV, "attention.head_count_kv": [8] * 31}
    p = write_gguf(tmp_path / "m.gguf", "llama", kv, tiny_layers(32) + ENDS)
    with pytest.raises(ConfigError, match="lists 31 layers but block_count is 32"):
        model_from_gguf(p)


def test_tied_head_and_qkv_bias_from_the_tensors(tmp_path):
    # Qwen2.5-0.5B: 24 layers, hidden 896, 14 heads on 2 KV heads (head 64), tied, q/k/v biases
    kv = {
        "block_count": 24,
        "embedding_length": 896,
        "attention.head_count": 14,
        "attention.head_count_kv": 2,
        "context_length": 32768,
        "feed_forward_length": 4864,
        "vocab_size": 151936,
        "general.file_type": 7,
    }
    tensors = [
        ("token_embd.weight", "Q8_0", (64, 2)),
        ("output_norm.weight", "F32", (8,)),
        ("blk.0.attn_q.bias", "F32", (896,)),
    ] + [(f"blk.{i}.attn_k.weight", "Q8_0", (32, 1)) for i in range(24)]
    m = model_from_gguf(write_gguf(tmp_path / "qwen.gguf", "qwen2", kv, tensors))
    assert m.tie_word_embeddings and m.attention_bias and m.head_dim == 64
    # 2 x 24 layers x 2 KV heads x 64 x 2 B = 12,288 B per token
    assert kv_per_token(m) == 12288
    ck = m.checkpoint
    # layer 0: 896 x 4 B bias + 34 B (one Q8_0 block); layers 1-23: 34 B each
    assert ck.layer_bytes[0] == 3584 + 34 and ck.layer_bytes[1:] == [34] * 23
    assert ck.head_bytes == 32 and ck.label == "Q8_0"


def test_key_and_value_lengths(tmp_path):
    # Gemma-2-9B-like head of 256 wider than hidden / heads (3584 / 16 = 224); V 128 narrower
    kv = {**LLAMA_8B_KV, "attention.key_length": 256, "attention.value_length": 128}
    m = model_from_gguf(write_gguf(tmp_path / "m.gguf", "llama", kv, tiny_layers(32) + ENDS))
    assert (m.head_dim, m.resolved_v_head_dim) == (256, 128)
    # 32 layers x 8 KV heads x (256 + 128) x 2 B = 196,608 B per token
    assert kv_per_token(m) == 196608


@pytest.mark.parametrize(
    "file_type, label, dtype",
    [
        (0, "F32", "fp32"),
        (1, "F16", "fp16"),
        (32, "BF16", "bf16"),
        (7, "Q8_0", "fp16"),
        (18, "Q6_K", "fp16"),
        (30, "IQ4_XS", "fp16"),
        (15 | 1024, "Q4_K_M (guessed)", "fp16"),
    ],
)
def test_file_type_label(tmp_path, file_type, label, dtype):
    kv = {**LLAMA_8B_KV, "general.file_type": file_type}
    m = model_from_gguf(write_gguf(tmp_path / "m.gguf", "llama", kv, tiny_layers(32) + ENDS))
    assert (m.checkpoint.label, m.dtype) == (label, dtype)


def test_without_file_type_the_type_holding_most_bytes(llama8b, tmp_path):
    kv = {k: v for k, v in LLAMA_8B_KV.items() if k != "general.file_type"}
    m = model_from_gguf(write_gguf(tmp_path / "m.gguf", "llama", kv, tiny_layers(32) + ENDS))
    assert m.checkpoint.label == "mostly Q4_K"  # 9,216 of the 13,320 B


def test_no_tensor_data_is_read(llama8b, monkeypatch):
    # every read goes through struct.unpack_from at an offset below the data section
    import kvcalc.load.gguf as g

    seen: list[int] = []
    real = g.struct.unpack_from

    class Spy:
        def __getattr__(self, name):
            return getattr(g.struct, name)

    spy = Spy()
    spy.unpack_from = lambda fmt, buf, off=0: (seen.append(off), real(fmt, buf, off))[1]
    spy.calcsize = g.struct.calcsize
    monkeypatch.setattr(g, "struct", spy)
    h = read_header(llama8b)
    assert max(seen) < h.data_offset < h.file_bytes


def test_mlp_widths_that_differ_leave_the_width_to_the_tensor_table(tmp_path):
    # an OpenELM-style per-layer feed_forward_length: the KV cache does not need it, the weights come
    # from the tensors, so the model loads without an intermediate_size
    kv = {**LLAMA_8B_KV, "feed_forward_length": [768 * (1 + i % 3) for i in range(32)]}
    m = model_from_gguf(write_gguf(tmp_path / "m.gguf", "llama", kv, tiny_layers(32) + ENDS))
    assert m.intermediate_size is None and weight_bytes(m).total_bytes == 13320
