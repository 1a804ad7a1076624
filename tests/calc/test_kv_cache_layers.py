"""`kvcalc.calc.kv_cache`'s per-layer arithmetic, exactly: the (K, V) formats and the field an
unknown name is reported against, KV heads per rank (replication past the heads, floor division,
MLA), and one layer's bytes per token with the block-format refusals naming K head, V head or
latent and the right field."""

from __future__ import annotations

import pytest

from kvcalc.calc import kv_cache as K
from kvcalc.errors import KvcalcError
from kvcalc.load.models import load_model
from kvcalc.schema import LayerSpec

FULL = LayerSpec(kind="full", n_kv_heads=8, head_dim_k=128, head_dim_v=128)
MLA = LayerSpec(kind="mla", n_kv_heads=1, head_dim_k=576, head_dim_v=0)


def test_formats_v_follows_k_unless_given():
    k, v = K.formats("fp8")
    assert (k.name, v.name) == ("fp8_e4m3", "fp8_e4m3")
    k, v = K.formats("bf16", "fp8")
    assert (k.name, v.name) == ("bf16", "fp8_e4m3")


@pytest.mark.parametrize("args, field", [(("nope",), "k_dtype"), (("bf16", "nope"), "v_dtype")])
def test_formats_report_an_unknown_name_against_its_field(args, field):
    with pytest.raises(KvcalcError) as e:
        K.formats(*args)
    assert (e.value.field, e.value.value) == (field, "nope")
    assert e.value.message.startswith("unknown dtype 'nope'; choose one of: bf16, ")


def test_kv_heads_per_rank():
    assert K.kv_heads_per_rank(FULL) == 8  # tp 1 by default
    assert K.kv_heads_per_rank(FULL, 2) == 4
    assert K.kv_heads_per_rank(FULL, 3) == 2  # 8 // 3 (check_tp refuses tp 3 before this)
    assert K.kv_heads_per_rank(FULL, 16) == 1  # replicated: 8 // 16 = 0 -> 1 per rank
    assert K.kv_heads_per_rank(MLA) == 1 and K.kv_heads_per_rank(MLA, 8) == 1
    assert type(K.kv_heads_per_rank(FULL, 3)) is int


def test_layer_bytes_per_token():
    bf16, fp8 = K.formats("bf16", "fp8")
    # 8 heads x (128 x 2 B + 128 x 1 B) = 3,072 B at tp 1 (the default); 4 heads at tp 2: 1,536 B
    assert K.layer_kv_bytes_per_token(FULL, bf16, fp8) == 3072
    assert K.layer_kv_bytes_per_token(FULL, bf16, fp8, 2) == 1536
    # MLA: one latent of 576 values, no V, the same on every rank: 576 x 2 B
    assert K.layer_kv_bytes_per_token(MLA, bf16, bf16, 8) == 1152
    # a layer without a per-token cache
    mamba = LayerSpec(kind="mamba", n_kv_heads=0, head_dim_k=0, head_dim_v=0, state_values=1000)
    assert K.layer_kv_bytes_per_token(mamba, bf16, bf16) == 0


def test_block_formats_name_the_part_and_the_field():
    q8, bf16 = K.formats("q8_0", "bf16")
    odd = LayerSpec(kind="full", n_kv_heads=8, head_dim_k=80, head_dim_v=80)
    with pytest.raises(KvcalcError) as e:
        K.layer_kv_bytes_per_token(odd, q8, bf16)
    assert e.value.message == (
        "q8_0 packs 32 values per block; a K head of 80 values is not a whole number of blocks; use another KV dtype"
    )
    assert (e.value.field, e.value.value) == ("k_dtype", "q8_0")
    with pytest.raises(KvcalcError) as e:
        K.layer_kv_bytes_per_token(odd, bf16, q8)
    assert e.value.message == (
        "q8_0 packs 32 values per block; a V head of 80 values is not a whole number of blocks; use another KV dtype"
    )
    assert (e.value.field, e.value.value) == ("v_dtype", "q8_0")
    latent = LayerSpec(kind="mla", n_kv_heads=1, head_dim_k=564, head_dim_v=0)  # 500 + 64
    with pytest.raises(KvcalcError) as e:
        K.layer_kv_bytes_per_token(latent, q8, q8)
    assert e.value.message == (
        "q8_0 packs 32 values per block; a latent of 564 values is not a whole number of blocks; use another KV dtype"
    )
    assert e.value.field == "k_dtype"


def test_kv_bytes_per_token_of_a_model_at_tp():
    # llama-3.1-8b: 32 layers x 8 heads x 128 x 2 (K, V) x 2 B = 131,072 B; at tp 4: 32,768 B;
    # fp8 K with bf16 V at tp 2: 32 x 4 x 128 x 3 B = 49,152 B
    m = load_model("llama-3.1-8b")
    assert K.kv_bytes_per_token(m, "bf16") == 131_072
    assert K.kv_bytes_per_token(m, "bf16", tp=4) == 32_768
    assert K.kv_bytes_per_token(m, "fp8", "bf16", tp=2) == 49_152
