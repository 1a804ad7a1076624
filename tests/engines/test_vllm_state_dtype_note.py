"""Issue #11 (trial): Nemotron-H's attention block is 1,040 tokens on vLLM 0.33 and 528 on 0.11
because 0.33 keeps its SSM state in fp32; the result now says which dtype the state is in, per
version, and why (`V1Rules.state_dtype_note`)."""

from __future__ import annotations

from kvcalc.engines import vllm
from kvcalc.engines.vllm import VllmOptions
from kvcalc.formats import kv_format
from kvcalc.load.hf import model_from_hf_config
from kvcalc.load.models import load_model
from tests.published_configs import NEMOTRON_H_8B

GiB = 2**30
BF16 = kv_format("bf16")

SOURCE = "NemotronHForCausalLMConfig sets mamba_ssm_cache_dtype float32"


def test_nemotron_h_state_dtype_per_version():
    m = model_from_hf_config(NEMOTRON_H_8B, "Nemotron-H-8B-Base-8K/config.json")
    # conv 3 x (128 x 64 + 2 x 8 x 128) = 30,720 values x 2 B = 61,440 B (bf16 in both versions);
    # SSM 128 x 64 x 128 = 1,048,576 values: 0.11 bf16 2,097,152 B -> 2,158,592 B; 0.33 fp32
    # 4,194,304 B -> 4,255,744 B, so 16 x cdiv(4,255,744, 65,536) = 1,040-token blocks, not 528
    new = vllm.capacity(m, 20 * GiB, BF16, BF16, max_model_len=8192, options=VllmOptions(version="0.33"))
    old = vllm.capacity(m, 20 * GiB, BF16, BF16, max_model_len=8192, options=VllmOptions(version="0.11"))
    assert (new.block_size, old.block_size) == (1040, 528)
    assert new.notes[0] == (
        "Mamba-2 state per layer and request: conv state bf16, SSM state fp32, 4,255,744 B "
        f"(vLLM 0.33: {SOURCE}; 0.11 keeps it in bf16: 2,158,592 B)"
    )
    assert old.notes[0] == (
        "Mamba-2 state per layer and request: conv state bf16, SSM state bf16, 2,158,592 B "
        f"(vLLM 0.11: the model's dtype; 0.33 keeps it in fp32, 4,255,744 B: {SOURCE})"
    )


def test_other_hybrids_say_their_dtype_alone():
    # Jamba (Mamba-1): d_inner 8,192; conv 3 x 8,192 + SSM 8,192 x 16 = 155,648 values x 2 B
    r = vllm.capacity(load_model("jamba-1.5-mini"), 20 * GiB, BF16, BF16, max_model_len=8192)
    assert r.notes[0] == "Mamba state per layer and request: conv state bf16, SSM state bf16, 311,296 B"
    # Qwen3-Next (Gated DeltaNet): conv 3 x 8,192 + recurrent 32 x 128 x 128 = 548,864 values x 2 B
    r = vllm.capacity(
        load_model("qwen3-next-80b-a3b"), 20 * GiB, BF16, BF16, max_model_len=8192, options=VllmOptions(version="0.11")
    )
    assert r.notes[0] == (
        "Gated DeltaNet state per layer and request: conv state bf16, recurrent state bf16, 1,097,728 B"
    )


def test_the_note_is_in_the_table(cli, tmp_path):
    import json

    p = tmp_path / "nemotron-h" / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps(NEMOTRON_H_8B))
    r = cli("capacity", str(p), "--engine", "vllm", "--kv-memory", "20GiB", "-s", "8192", env={"COLUMNS": "300"})
    assert r.exit_code == 0
    note = next(ln for ln in r.stdout.splitlines() if "Mamba-2 state" in ln)
    assert note.split("│")[2].strip() == (
        "Mamba-2 state per layer and request: conv state bf16, SSM state fp32, "
        f"4,255,744 B (vLLM 0.33: {SOURCE}; 0.11 keeps it in bf16: 2,158,592 B)"
    )
