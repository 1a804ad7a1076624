"""Local checkpoint folders: exact weight bytes from the safetensors headers (`kvcalc.load.checkpoint`),
compared with the count from the architecture and `quantization_config`. The files are written
with the `safetensors` package itself (real tensor names, tiny shapes); every figure is derived by
hand below."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from kvcalc.calc.weights import param_counts, weight_bytes, weights_source
from kvcalc.errors import ConfigError, KvcalcWarning
from kvcalc.load.checkpoint import read_header
from kvcalc.load.models import load_model

torch = pytest.importorskip("torch", reason="writing fp8 safetensors needs torch (pip install torch)")
st = pytest.importorskip("safetensors.torch", reason="writing the test checkpoints needs safetensors")

ROOT = Path(__file__).parents[2]

#: a tiny Llama: hidden 256, 2 query heads and 1 KV head of 128, MLP 512, 2 layers, vocab 384, untied
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 128,
    "num_hidden_layers": 2,
    "vocab_size": 384,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}
FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]}
#: (out, in) of each decoder matrix
SHAPES = {
    "self_attn.q_proj": (256, 256),
    "self_attn.k_proj": (128, 256),
    "self_attn.v_proj": (128, 256),
    "self_attn.o_proj": (256, 256),
    "mlp.gate_proj": (512, 256),
    "mlp.up_proj": (512, 256),
    "mlp.down_proj": (256, 512),
}


def write_fp8(folder: Path, *, prefix: str = "model.", shards: int = 1) -> Path:
    """The tiny Llama as an FP8 block-quantized checkpoint, as DeepSeek-V3 / Qwen3-FP8 store it:
    fp8 `weight` + fp32 `weight_scale_inv` of (ceil(out / 128), ceil(in / 128)) per matrix."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**CONFIG, "quantization_config": FP8}))
    t = {}
    for i in range(2):
        for n, (o, k) in SHAPES.items():
            t[f"{prefix}layers.{i}.{n}.weight"] = torch.zeros(o, k, dtype=torch.float8_e4m3fn)
            t[f"{prefix}layers.{i}.{n}.weight_scale_inv"] = torch.ones(-(-o // 128), -(-k // 128))
        t[f"{prefix}layers.{i}.input_layernorm.weight"] = torch.ones(256, dtype=torch.bfloat16)
        t[f"{prefix}layers.{i}.post_attention_layernorm.weight"] = torch.ones(256, dtype=torch.bfloat16)
    t[f"{prefix}embed_tokens.weight"] = torch.zeros(384, 256, dtype=torch.bfloat16)
    t[f"{prefix}norm.weight"] = torch.ones(256, dtype=torch.bfloat16)
    t["lm_head.weight"] = torch.zeros(384, 256, dtype=torch.bfloat16)
    if shards == 1:
        st.save_file(t, str(folder / "model.safetensors"))
    else:  # layer 0 and the embedding in shard 1, the rest in shard 2, with the index naming them
        names = sorted(t)
        first = {n: t[n] for n in names if ".layers.0." in n or "embed" in n}
        rest = {n: t[n] for n in names if n not in first}
        files = {"model-00001-of-00002.safetensors": first, "model-00002-of-00002.safetensors": rest}
        for f, ts in files.items():
            st.save_file(ts, str(folder / f))
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {}, "weight_map": {n: f for f, ts in files.items() for n in ts}})
        )
    return folder


# Per layer: fp8 values q 65,536 + k 32,768 + v 32,768 + o 65,536 + gate 131,072 + up 131,072 +
# down 131,072 = 589,824 B; fp32 block scales q 2x2 + k 1x2 + v 1x2 + o 2x2 + gate 4x2 + up 4x2 +
# down 2x4 = 36 scales = 144 B; two bf16 norms 2 x 256 x 2 = 1,024 B: 590,992 B.
LAYER_BYTES = 589_824 + 144 + 1_024
EMBEDDING_BYTES = 384 * 256 * 2  # 196,608
HEAD_BYTES = 384 * 256 * 2 + 256 * 2  # lm_head 196,608 + final norm 512 = 197,120
TOTAL_BYTES = 2 * LAYER_BYTES + EMBEDDING_BYTES + HEAD_BYTES  # 1,575,712


def test_fp8_headers_equal_the_architecture_and_quantization_config(tmp_path):
    m = load_model(str(write_fp8(tmp_path / "ck")))
    ck = m.checkpoint
    assert ck.layer_bytes == [LAYER_BYTES, LAYER_BYTES] and ck.layer_expert_bytes == [0, 0]
    assert (ck.embedding_bytes, ck.head_bytes, ck.other_bytes) == (EMBEDDING_BYTES, HEAD_BYTES, 0)
    assert ck.total_bytes == TOTAL_BYTES == 1_575_712
    # bytes by dtype: fp8 2 x 589,824; fp32 2 x 144; bf16 2 x 1,024 + 196,608 + 196,608 + 512
    assert ck.bytes_by_dtype == {"F8_E4M3": 1_179_648, "F32": 288, "BF16": 395_776}
    assert ck.label == "fp8_e4m3 + bf16"
    # the same figure from the architecture and quantization_config (fp8_e4m3:b128:fp32): the 589,824
    # matrix values are 36 blocks of 16,384, each 16,384 + 4 B = 589,968 B; norms, embedding, head bf16
    arch = m.model_copy(update={"checkpoint": None})
    assert arch.weight_dtype == "fp8_e4m3:b128:fp32"
    assert weight_bytes(arch).total_bytes == weight_bytes(m).total_bytes == TOTAL_BYTES
    # parameters: 2 x (589,824 + 36 + 512) + 98,304 + 98,304 + 256 = 1,377,608 values stored
    assert param_counts(m) == (1_377_608, 1_377_608)
    assert weights_source(m) == "safetensors headers of 1 file"
    assert m.source.endswith("; weights from safetensors headers of 1 file")


def test_sharded_folder_reads_the_index(tmp_path):
    m = load_model(str(write_fp8(tmp_path / "ck", shards=2)))
    assert m.checkpoint.total_bytes == TOTAL_BYTES
    assert m.checkpoint.source == "safetensors headers of 2 files"


def test_missing_shard_falls_back_to_the_architecture(tmp_path):
    folder = write_fp8(tmp_path / "ck", shards=2)
    (folder / "model-00002-of-00002.safetensors").unlink()
    with pytest.warns(KvcalcWarning, match="1 of 2 safetensors shards are missing"):
        m = load_model(str(folder))
    assert m.checkpoint is None
    assert m.source.endswith("weights counted from the architecture (no safetensors files)")
    assert weight_bytes(m).total_bytes == TOTAL_BYTES


def test_multimodal_wrapper_and_vision_tower(tmp_path):
    # Gemma-3 / Llava naming: the text model under `language_model.model.`, a vision tower beside it
    folder = write_fp8(tmp_path / "ck", prefix="language_model.model.")
    t = st.load_file(str(folder / "model.safetensors"))
    t["vision_tower.vision_model.encoder.layers.0.mlp.fc1.weight"] = torch.zeros(64, 32, dtype=torch.bfloat16)
    st.save_file(t, str(folder / "model.safetensors"))
    ck = load_model(str(folder)).checkpoint
    assert ck.layer_bytes == [LAYER_BYTES, LAYER_BYTES]
    assert ck.other_bytes == 64 * 32 * 2  # 4,096 B of vision tower, not a decoder layer
    assert ck.total_bytes == TOTAL_BYTES + 4_096


def test_moe_experts_and_mtp_layer(tmp_path):
    # a tiny Qwen3-MoE-like layout: 2 layers, 4 experts of (gate, up, down) 32 x 16 bf16 each, and
    # one MTP layer (model.layers.2) past num_hidden_layers, as DeepSeek-V3 ships it
    cfg = {
        "model_type": "qwen3_moe",
        "hidden_size": 16,
        "intermediate_size": 64,
        "moe_intermediate_size": 32,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 8,
        "num_hidden_layers": 2,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "vocab_size": 10,
        "torch_dtype": "bfloat16",
        "max_position_embeddings": 128,
        "tie_word_embeddings": True,
    }
    folder = tmp_path / "moe"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(cfg))
    t = {
        "model.embed_tokens.weight": torch.zeros(10, 16, dtype=torch.bfloat16),
        "model.norm.weight": torch.zeros(16, dtype=torch.bfloat16),
    }
    for i in range(3):
        t[f"model.layers.{i}.self_attn.q_proj.weight"] = torch.zeros(16, 16, dtype=torch.bfloat16)
        t[f"model.layers.{i}.mlp.gate.weight"] = torch.zeros(4, 16, dtype=torch.bfloat16)
        # a shared expert (DeepSeek naming), read by every token: dense bytes, not routed-expert bytes
        t[f"model.layers.{i}.mlp.shared_experts.down_proj.weight"] = torch.zeros(32, 16, dtype=torch.bfloat16)
        for j in range(4):
            for p in ("gate_proj", "up_proj", "down_proj"):
                t[f"model.layers.{i}.mlp.experts.{j}.{p}.weight"] = torch.zeros(32, 16, dtype=torch.bfloat16)
    st.save_file(t, str(folder / "model.safetensors"))
    m = load_model(str(folder))
    ck = m.checkpoint
    # experts: 4 x 3 x 32 x 16 x 2 B = 12,288 B; q 16 x 16 x 2 = 512 B; router 4 x 16 x 2 = 128 B;
    # shared expert 32 x 16 x 2 = 1,024 B
    assert ck.layer_expert_bytes == [12_288, 12_288]
    assert ck.layer_bytes == [12_288 + 512 + 128 + 1_024] * 2
    assert ck.other_bytes == 12_288 + 512 + 128 + 1_024  # the MTP layer 2
    assert (ck.embedding_bytes, ck.head_bytes) == (320, 32)  # 10 x 16 x 2; tied head: the norm only
    # the plan reads 2 of 4 experts per token: 12,288 / 4 = 3,072 B per expert
    wb = weight_bytes(m)
    assert wb.layer_expert_bytes == (3_072, 3_072) and wb.layer_n_active_experts == (2, 2)


def test_gptq_packed_words_count_their_values(tmp_path):
    # GPTQ int4, group 128: qweight int32 (in / 8, out), qzeros int32 (in / 128, out / 8), scales fp16
    # (in / 128, out), g_idx int32 (in): one 256 x 256 matrix (names of a real layer; other tensors
    # left out, so the architecture is not asked)
    from kvcalc.load.checkpoint import checkpoint_weights, local_headers
    from kvcalc.load.hf.quant import Quantization

    t = {
        "model.layers.0.self_attn.q_proj.qweight": torch.zeros(32, 256, dtype=torch.int32),
        "model.layers.0.self_attn.q_proj.qzeros": torch.zeros(2, 32, dtype=torch.int32),
        "model.layers.0.self_attn.q_proj.scales": torch.zeros(2, 256, dtype=torch.float16),
        "model.layers.0.self_attn.q_proj.g_idx": torch.zeros(256, dtype=torch.int32),
    }
    tmp_path.joinpath("c").mkdir()
    st.save_file(t, str(tmp_path / "c" / "model.safetensors"))
    ck = checkpoint_weights(
        local_headers(tmp_path / "c"), n_layers=1, quant=Quantization("gptq", "int4:g128:fp16:zp", packed_bits=4)
    )
    # values: qweight 32 x 256 x 8 = 65,536; qzeros 2 x 32 x 8 = 512; scales 512; g_idx 256
    assert ck.n_params == 65_536 + 512 + 512 + 256
    # bytes: 32,768 + 256 + 1,024 + 1,024 = 35,072 B: the format's 65,536 / 256 x 133 = 34,048 B
    # plus the g_idx (1,024 B) it does not count
    assert ck.layer_bytes == [35_072] and ck.label == "int4 + fp16"


def test_reads_only_the_header(tmp_path):
    # a file whose data is garbage of the right length: the header alone is read (and the file's
    # size checked against it), so its figures still come back; a file cut short is refused
    # (tests/load/test_checkpoint_refusals.py)
    folder = write_fp8(tmp_path / "ck")
    f = folder / "model.safetensors"
    raw = f.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    f.write_bytes(raw[: 8 + n] + b"\xff" * (len(raw) - 8 - n))
    assert sum(t.nbytes for t in read_header(f).values()) == TOTAL_BYTES


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x01\x02", "too short for a safetensors file"),
        (struct.pack("<Q", 200_000_000), "exceeds safetensors' limit"),
        (struct.pack("<Q", 50) + b"{}", "truncated: the header says 50 B"),
        (struct.pack("<Q", 5) + b"{nope", "not valid JSON"),
        (struct.pack("<Q", 2) + b"[]", "not a JSON object"),
    ],
)
def test_damaged_headers_are_one_error(tmp_path, content, message):
    f = tmp_path / "model.safetensors"
    f.write_bytes(content)
    with pytest.raises(ConfigError, match=message) as e:
        read_header(f)
    assert str(e.value).startswith(str(f))


def test_offsets_must_match_shape(tmp_path):
    header = json.dumps({"model.norm.weight": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 6]}}).encode()
    f = tmp_path / "model.safetensors"
    f.write_bytes(struct.pack("<Q", len(header)) + header + bytes(8))
    with pytest.raises(ConfigError, match="data_offsets hold 6 B but shape \\[4\\] of BF16 is 8 B"):
        read_header(f)


def test_cli_estimate_gpu_says_where_weights_come_from(tmp_path, cli):
    folder = write_fp8(tmp_path / "ck")
    r = cli("estimate", str(folder), "-s", "1k", "--gpu", "h100-sxm", "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["weights_source"] == "safetensors headers of 1 file"
    assert d["weights_bytes_per_gpu"] == TOTAL_BYTES
    assert d["kv_cache_bytes"] == 2 * 2 * 1 * 128 * 1024 * 2  # 2 x layers x KV heads x head_dim x T x 2 B
    r = cli("estimate", str(folder), "-s", "1k", "--gpu", "h100-sxm", "--weight-dtype", "bf16", "-f", "json")
    assert json.loads(r.stdout)["weights_source"] == "architecture"


def test_damaged_file_in_a_folder_exits_2(tmp_path):
    folder = write_fp8(tmp_path / "ck")
    (folder / "model.safetensors").write_bytes(b"\x00")
    r = subprocess.run(
        [sys.executable, "-m", "kvcalc", "estimate", str(folder)], capture_output=True, text=True, cwd=ROOT
    )
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"error: {folder / 'model.safetensors'}: too short for a safetensors file (no 8-byte header length)"
    ]
