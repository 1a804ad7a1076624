"""Input bugs a user trial found in checkpoint folders and quantization configs, each refused in
one line naming the file (and field), or counted as the format says:

- a truncated safetensors file (its header places data past the end of the file);
- an index whose weight_map names shard files outside the folder;
- GPTQ `group_size: -1` (one scale and zero point per output column), counted as GPTQ, not bf16;
- an fp8 `weight_block_size` that does not fit the matrices, reported against config.json at load.
"""

from __future__ import annotations

import json
import struct
import warnings
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from kvcalc.calc.weights import weight_bytes
from kvcalc.errors import ConfigError, KvcalcWarning
from kvcalc.load.checkpoint import local_headers, read_header
from kvcalc.load.hf import model_from_hf_config

DATA = Path(__file__).parents[1] / "data" / "hf"
LLAMA = json.loads((DATA / "Llama-3.1-8B.json").read_text())
BF16_REST = 2_101_878_784  # Llama-3.1-8B embeddings + head + norms, bf16 bytes (test_quant.py)


def shard(path: Path) -> Path:
    # two tensors: 4 x 8 bf16-sized float16 (64 B) and 16 float32 (64 B): 128 B of data
    save_file({"a": np.zeros((4, 8), dtype=np.float16), "b": np.zeros(16, dtype=np.float32)}, str(path))
    return path


def test_truncated_file_is_refused_naming_it(tmp_path):
    f = shard(tmp_path / "model.safetensors")
    raw = f.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert len(raw) == 8 + n + 128  # the whole file: header, then 64 + 64 B of data
    assert len(read_header(f)) == 2
    f.write_bytes(raw[:-1])  # one byte short
    with pytest.raises(ConfigError) as e:
        read_header(f)
    # the data runs to byte 8 + n + 128; the file holds one less
    assert str(e.value) == (
        f"{f}: truncated: its header places tensor data up to byte {8 + n + 128:,} but the file "
        f"holds {8 + n + 127:,} B (an interrupted download?); fetch the file again"
    )


def test_truncated_shard_in_a_folder_stops_the_load(tmp_path, cli):
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA))
    f = shard(folder / "model.safetensors")
    f.write_bytes(f.read_bytes()[:-64])  # the last tensor's data is gone
    r = cli("estimate", str(folder))
    assert r.exit_code == 2
    assert len(r.stderr.splitlines()) == 1 and f"{f}: truncated" in r.stderr


@pytest.mark.parametrize(
    "name", ["../outside.safetensors", "/etc/passwd", "sub/../../x.safetensors", "..\\x.safetensors", ""]
)
def test_index_naming_files_outside_the_folder_is_refused(tmp_path, name):
    folder = tmp_path / "ck"
    folder.mkdir()
    shard(tmp_path / "outside.safetensors")  # exists, so only the rule can refuse it
    index = folder / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": {"a": name, "b": name}}))
    with pytest.raises(ConfigError) as e:
        local_headers(folder)
    assert (e.value.path, e.value.field) == (str(index), "weight_map")
    assert "outside the checkpoint folder" in e.value.message


def test_index_naming_a_shard_beside_it_still_reads(tmp_path):
    folder = tmp_path / "ck"
    folder.mkdir()
    shard(folder / "model-00001-of-00001.safetensors")
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00001.safetensors", "b": "./model-00001-of-00001.safetensors"}})
    )
    assert sorted(local_headers(folder)) == ["./model-00001-of-00001.safetensors", "model-00001-of-00001.safetensors"]


def test_shards_linked_to_blobs_outside_are_read(tmp_path):
    # a Hugging Face cache snapshot: the shard is a symbolic link to ../../blobs/<hash>; the index
    # names it plainly, so it is read (the rule is on the name, not where the link points)
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    shard(blobs / "abc123")
    snap = tmp_path / "snapshots" / "rev"
    snap.mkdir(parents=True)
    (snap / "model-00001-of-00001.safetensors").symlink_to(Path("../../blobs/abc123"))
    (snap / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00001.safetensors", "b": "model-00001-of-00001.safetensors"}})
    )
    assert len(local_headers(snap)["model-00001-of-00001.safetensors"]) == 2


def test_gptq_group_size_minus_one_is_per_column_gptq():
    data = dict(
        LLAMA, quantization_config={"quant_method": "gptq", "bits": 4, "group_size": -1, "desc_act": False, "sym": True}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", KvcalcWarning)  # it used to be "counted in bf16" with a warning
        m = model_from_hf_config(data, path="Llama-3.1-8B-GPTQ/config.json")
    # one group per output column over its hidden_size (4,096) inputs
    assert m.weight_dtype == "int4:g4096:fp16:zp"
    wb = weight_bytes(m)
    # a layer's matrices: 218,103,808 values x 0.5 B = 109,051,904 B, plus one fp16 scale and one
    # int4 zero per 4,096 values: 53,248 x 2.5 B = 133,120 B; plus two bf16 norms 2 x 4,096 x 2 B = 16,384
    assert wb.layer_dense_bytes[0] == 109_051_904 + 133_120 + 16_384
    # the exact per-column count is 43,008 columns (q 4,096 + k 1,024 + v 1,024 + o 4,096 + gate
    # 14,336 + up 14,336 + down 4,096) x 2.5 B = 107,520 B: down_proj's 14,336-wide input is counted
    # as 3.5 groups per column, 10,240 x 2.5 = 25,600 B more (the documented approximation)
    assert 133_120 - 43_008 * 5 // 2 == 25_600
    # the whole model: 32 layers + the bf16 rest
    assert wb.total_bytes == 32 * (109_051_904 + 133_120) + BF16_REST


def test_gptq_group_size_minus_one_8bit():
    data = dict(LLAMA, quantization_config={"quant_method": "gptq", "bits": 8, "group_size": -1})
    assert model_from_hf_config(data, path="c/config.json").weight_dtype == "int8:g4096:fp16:zp"


def test_bad_fp8_block_is_refused_at_load_naming_file_and_field():
    data = dict(LLAMA, quantization_config={"quant_method": "fp8", "weight_block_size": [100, 100]})
    with pytest.raises(ConfigError) as e:
        model_from_hf_config(data, path="Llama-3.1-8B-FP8/config.json")
    assert (e.value.path, e.value.field) == ("Llama-3.1-8B-FP8/config.json", "quantization_config.weight_block_size")
    # 100 x 100 = 10,000 values per block; 218,103,808 = 10,000 x 21,810 + 3,808: not whole blocks
    assert str(e.value).startswith(
        "Llama-3.1-8B-FP8/config.json: field 'quantization_config.weight_block_size': "
        "fp8_e4m3:b100:fp32 packs 10000 values per block"
    )
    # the published block loads
    ok = dict(LLAMA, quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]})
    assert model_from_hf_config(ok, path="c/config.json").weight_dtype == "fp8_e4m3:b128:fp32"


def test_bad_group_size_names_group_size():
    data = dict(LLAMA, quantization_config={"quant_method": "awq", "bits": 4, "group_size": 100})
    with pytest.raises(ConfigError) as e:
        model_from_hf_config(data, path="c/config.json")
    assert e.value.field == "quantization_config.group_size"
