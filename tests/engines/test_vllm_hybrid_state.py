"""Exact figures and errors of `kvcalc.engines.vllm.hybrid`, worked by hand from vLLM 0.11.0 /
0.33.0's code (the mutation run's survivors in that module).

Sources: `vllm/model_executor/layers/mamba/mamba_utils.py` `MambaStateShapeCalculator` (state
shapes, `divide` per tp rank); `vllm/distributed/utils.py` `divide`; 0.33 `vllm/platforms/interface.py`
`Platform._align_hybrid_block_size` (alignment max(16, --block-size), lcm'd with the 64-token
FlashInfer GDN checkpoint alignment, block only raised when smaller than attn_block);
`qwen_gdn_linear_attn.py` `_resolve_gdn_prefill_backend` (FlashInfer on 9.x, or 10.x / 12.x with
key_dim 128); 0.11 `MambaModelConfig` (prefix caching refused for hybrids).
"""

import pytest

from kvcalc.engines import vllm
from kvcalc.engines.vllm.v0_33 import gdn_flashinfer_prefill
from kvcalc.errors import MESSAGE, OPTION_VALUE, KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model
from kvcalc.schema import ModelSpec
from tests.engines.test_vllm_hybrid import granite, nemotron

BF16 = kv_format("bf16")


def mamba_state(model, tp, version, *args):
    """`V1Rules.mamba_state` of vLLM `version`."""
    return vllm.rules(version).mamba_state(model, tp, *args)


def state_dtype_note(model, state, version, *args):
    """`V1Rules.state_dtype_note` of vLLM `version`."""
    return vllm.rules(version).state_dtype_note(model, state, *args)


def align_block_size(model, attention, k, v, *, version, **kw):
    """`V1Rules.align_block_size` of vLLM `version`."""
    return vllm.rules(version).align_block_size(model, attention, k, v, **kw)


def qwen35(**update) -> ModelSpec:
    """A Qwen3.5 geometry (3 Gated DeltaNet layers + 1 full): 16 key heads / 32 value heads of 128, conv 4."""
    m = ModelSpec(
        name="q35",
        model_type="qwen3_5_text",
        n_layers=4,
        n_heads=16,
        n_kv_heads=2,
        head_dim=256,
        layer_types=["linear", "linear", "linear", "full"],
        max_position_embeddings=4096,
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
    )
    return m.model_copy(update=update)


def blocks(model: ModelSpec, **kw):
    attention = next(layer for layer in model.layers if layer.kind == "full")
    args = {
        "block_size": 16,
        "tp": 1,
        "version": "0.33",
        "prefix_caching": None,
        "compute_capability": "9.0",
        "model_dtype": "bf16",
        "model_dtype_bytes": 2,
    }
    args.update(kw)
    return align_block_size(model, attention, BF16, BF16, **args)


def raised(fn, *args, **kw) -> KvcalcError:
    with pytest.raises(KvcalcError) as info:
        fn(*args, **kw)
    return info.value


# ----- errors: the message, and field / value / form as data -------------------------------------


def test_a_tp_vllm_cannot_split_by_names_what_and_the_tp():
    # Qwen3-Next conv channels 2 x 16 x 128 + 32 x 128 = 8,192; 8,192 % 3 = 2
    e = raised(mamba_state, load_model("qwen3-next-80b-a3b"), 3, "0.33")
    assert (e.field, e.value, e.form) == ("tp", 3, OPTION_VALUE)
    assert (
        str(e)
        == "--tp 3: vLLM splits the Gated DeltaNet conv channels (8192) over tp ranks and 8192 is not divisible by 3"
    )
    # value heads 24: conv 2 x 16 x 128 + 24 x 128 = 7,168 = 7 x 1,024 splits over 7, 24 heads do not
    e = raised(mamba_state, qwen35(linear_num_value_heads=24), 7, "0.33")
    assert str(e) == "--tp 7: vLLM splits the linear value heads (24) over tp ranks and 24 is not divisible by 7"
    # Nemotron-H-8B, tp 3: n_groups 8 -> 8 + (3 - 8) = 3 groups (extra_groups_for_head_shards);
    # conv 128 x 64 + 2 x 3 x 128 = 8,960; 8,960 % 3 = 2
    e = raised(mamba_state, nemotron(), 3, "0.33")
    assert str(e) == "--tp 3: vLLM splits the Mamba-2 conv channels (8960) over tp ranks and 8960 is not divisible by 3"
    # Granite geometry with 6 Mamba heads, tp 4: groups 1 -> 4; conv 6 x 64 + 2 x 4 x 128 = 1,408
    # = 4 x 352 splits; 6 heads do not
    e = raised(mamba_state, granite().model_copy(update={"mamba_n_heads": 6}), 4, "0.33")
    assert str(e) == "--tp 4: vLLM splits the Mamba-2 heads (6) over tp ranks and 6 is not divisible by 4"
    # Jamba: d_inner = mamba_expand 2 x hidden 4,096 = 8,192; 8,192 % 3 = 2
    e = raised(mamba_state, load_model("jamba-1.5-mini"), 3, "0.11")
    assert str(e) == "--tp 3: vLLM splits the Mamba d_inner (8192) over tp ranks and 8192 is not divisible by 3"


def test_a_config_without_the_state_sizes_names_every_missing_field():
    e = raised(mamba_state, qwen35(linear_value_head_dim=None, linear_conv_kernel_dim=None), 1, "0.33")
    assert (e.field, e.value, e.form) == ("model", "q35", MESSAGE)
    assert str(e) == (
        "q35: the vLLM profile sizes the recurrent state from linear_value_head_dim, "
        "linear_conv_kernel_dim, which the config does not give"
    )


def test_unknown_linear_attention_and_qwen35_on_011_are_refused_with_the_model():
    e = raised(mamba_state, qwen35(model_type="minimax"), 1, "0.33")
    assert (e.field, e.value, e.form) == ("model", "q35", MESSAGE)
    assert str(e) == (
        "q35: kvcalc's vLLM profile knows the Gated DeltaNet state of Qwen3-Next / Qwen3.5, "
        "not model type minimax's linear attention"
    )
    e = raised(mamba_state, qwen35(), 1, "0.11")
    assert (e.field, e.value, e.form) == ("model", "q35", MESSAGE)
    assert str(e) == (
        "q35: vLLM 0.11 has no Qwen3.5 model (Qwen3_5ForConditionalGeneration came later); use --vllm-version 0.33"
    )


def test_prefix_caching_on_011_is_refused_with_the_value():
    e = raised(blocks, load_model("qwen3-next-80b-a3b"), version="0.11", prefix_caching=True)
    assert (e.field, e.value, e.option) == ("prefix_caching", True, "--enable-prefix-caching")
    assert str(e) == (
        "--enable-prefix-caching True: vLLM 0.11 switches prefix caching off for hybrid models "
        "(MambaModelConfig: 'not yet supported')"
    )


# ----- the state's dtype ---------------------------------------------------------------------------


def test_the_state_dtype_defaults_to_bf16_and_follows_the_model_dtype():
    # Nemotron-H-8B in 0.11: both states in the model's dtype (no fp32 SSM before 0.33)
    assert mamba_state(nemotron(), 1, "0.11").ssm_dtype == "bf16"
    assert mamba_state(nemotron(), 1, "0.11", 2, "fp16").ssm_dtype == "fp16"
    # Qwen3-Next (not fp32 in 0.33 either): an fp16 model's note says fp16
    assert blocks(load_model("qwen3-next-80b-a3b"), model_dtype="fp16").state.ssm_dtype == "fp16"


def test_a_layer_list_with_mamba_and_linear_layers_is_sized_as_mamba():
    # 'mamba' and 'linear' kinds both present: not the Gated DeltaNet path; Granite's Mamba-2 state:
    # conv 3 x (128 x 64 + 2 x 1 x 128) = 3 x 8,448, SSM 128 x 64 x 128; 0.11 bf16
    m = granite().model_copy(update={"layer_types": ["linear"] + (["mamba"] * 9 + ["full"]) * 4})
    s = mamba_state(m, 1, "0.11")
    assert s.kind == "mamba2" and s.shapes == ((3, 8448), (128, 64, 128))
    assert s.page_size_bytes == (3 * 8448 + 128 * 64 * 128) * 2 == 2_147_840


def test_qwen35_033_note_names_the_source():
    m = qwen35()
    s = mamba_state(m, 1, "0.33")
    # 3 x 8,192 x 2 + 32 x 128 x 128 x 4 = 49,152 + 2,097,152 = 2,146,304 B
    assert state_dtype_note(m, s, "0.33", "bf16", 1, 2) == (
        "Gated DeltaNet state per layer and request: conv state bf16, recurrent state fp32, 2,146,304 B "
        "(vLLM 0.33: Qwen3_5ForConditionalGenerationConfig takes the config's mamba_ssm_dtype, float32)"
    )


# ----- FlashInfer GDN prefill per compute capability -----------------------------------------------


@pytest.mark.parametrize(
    ("cc", "key_dim", "flashinfer"),
    [
        ("9.0", 128, True),
        ("9.0", 64, True),  # Hopper: always
        ("10.0", 128, True),
        ("12.0", 128, True),  # Blackwell with key_dim 128
        ("10.0", 129, False),
        ("12.0", 64, False),  # ... not with another key_dim
        ("11.0", 128, False),
        ("13.0", 128, False),
        ("8.0", 128, False),
    ],
)
def test_gdn_flashinfer_prefill(cc, key_dim, flashinfer):
    assert gdn_flashinfer_prefill(qwen35(linear_key_head_dim=key_dim), cc) is flashinfer
    assert gdn_flashinfer_prefill(qwen35(linear_key_head_dim=key_dim), cc, "amd") is False


# ----- the 0.33 block ------------------------------------------------------------------------------


def test_a_given_block_equal_to_attn_block_is_not_logged_as_raised():
    # Qwen3-Next on Hopper, --block-size 576: align lcm(576, 64) = 576; token page 2 x 2 x 256 x 2
    # = 2,048 B; attn_block 576 x cdiv(1,097,728, 576 x 2,048 = 1,179,648) = 576 = the block given
    r = blocks(load_model("qwen3-next-80b-a3b"), block_size=576)
    assert r.block_size == 576 and r.page_bytes == 1_179_648
    # padding (1,179,648 - 1,097,728) / 1,097,728 = 81,920 / 1,097,728 = 7.46%
    assert r.log_lines == (
        ("Padding mamba page size by 7.46% to ensure that mamba page size and attention page size are exactly equal."),
    )


def test_the_checkpoint_alignment_is_lcmd_with_the_given_block():
    # --block-size 80: align lcm(80, 64) = 320; 320 x cdiv(1,097,728, 320 x 2,048 = 655,360) = 320 x 2 = 640
    # (64 alone would give 64 x cdiv(1,097,728, 131,072) = 64 x 9 = 576)
    r = blocks(load_model("qwen3-next-80b-a3b"), block_size=80)
    assert r.block_size == 640 and r.page_bytes == 640 * 2048


def test_the_033_notes_name_the_backends_and_the_rocm_prefill():
    q = load_model("qwen3-next-80b-a3b")
    assert blocks(q).notes[1] == (
        "the attention backend's smallest kernel block assumed 16 tokens (FLASH_ATTN / FLASHINFER / TRITON_ATTN)"
    )
    amd = blocks(q, vendor="amd")
    assert amd.notes[1] == (
        "the attention backend's smallest kernel block assumed 16 tokens (ROCM_ATTN / ROCM_AITER_FA / TRITON_ATTN)"
    )
    assert amd.notes[2] == (
        "Gated DeltaNet prefill on ROCm: AITER FlyDSL or Triton/FLA (vLLM's FlashInfer "
        "prefill is CUDA-only), neither of which keeps prefill checkpoints: no checkpoint "
        "block, no 64-token alignment"
    )
    assert amd.mamba_pages == 2


def test_mamba2_on_rocm_keeps_its_checkpoint_block():
    # Nemotron-H (Mamba-2) on ROCm: MambaMixer2 declares one prefill checkpoint block whatever the
    # vendor: 2 + 1 = 3 pages. 0.33 fp32 SSM: 3 x 10,240 x 2 + 128 x 64 x 128 x 4 = 4,255,744 B;
    # token page 2 x 8 x 128 x 2 = 4,096 B; 16 x cdiv(4,255,744, 65,536) = 16 x 65 = 1,040
    r = blocks(nemotron(), vendor="amd")
    assert r.mamba_pages == 3 and r.block_size == 1040
    assert len(r.notes) == 3  # the state, the kernel block, the align mode: no ROCm GDN note
