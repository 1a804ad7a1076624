"""Sizes, rates and contexts in files (issue 11, item 2): a GPU YAML takes `80GiB`, `3.35TB/s`,
`768e9`, `989.4TFLOPS` as the command line does (one rule: `units.parse_size`), a deployment's
`max_seq_len` and a model's `max_position_embeddings` take `32k`, and every refusal is one line
naming the file, the line and the field."""

from __future__ import annotations

import json

import pytest

from kvcalc.errors import ConfigError
from kvcalc.load.deployments import check_deployment
from kvcalc.load.gpus import get_gpu
from kvcalc.load.models import load_model

GPU = """name: My H100
memory_bytes: {memory}
hbm_bytes_per_s: {hbm}
bf16_flops_per_s: 989.4TFLOPS
fp8_flops_per_s: 1978.9e12
l2_bytes: 50MiB
interconnect_bytes_per_s: 900GB/s
source: datasheet
"""


@pytest.mark.parametrize(
    "memory,hbm,memory_bytes,hbm_bytes_per_s",
    [
        ("80GiB", "3.35TB/s", 85_899_345_920, 3_350_000_000_000),  # 80 x 2^30; 3.35 x 10^12
        (
            "81559MiB",
            "768e9",
            85_520_809_984,
            768_000_000_000,
        ),  # nvidia-smi's 81,559 MiB x 2^20; YAML reads 768e9 as text
        ("85_520_809_984", "7.68e+11", 85_520_809_984, 768_000_000_000),  # YAML int; YAML float 768000000000.0
        ("80.5GB", "4.8 TB/s", 80_500_000_000, 4_800_000_000_000),
    ],
)
def test_gpu_yaml_takes_the_clis_sizes(tmp_path, memory, hbm, memory_bytes, hbm_bytes_per_s):
    p = tmp_path / "my-h100.yaml"
    p.write_text(GPU.format(memory=memory, hbm=hbm))
    g = get_gpu(str(p))
    assert (g.memory_bytes, g.hbm_bytes_per_s) == (memory_bytes, hbm_bytes_per_s)
    # 989.4 x 10^12, 1978.9 x 10^12, 50 x 2^20, 900 x 10^9
    assert (g.bf16_flops_per_s, g.fp8_flops_per_s, g.l2_bytes, g.interconnect_bytes_per_s) == (
        989_400_000_000_000,
        1_978_900_000_000_000,
        52_428_800,
        900_000_000_000,
    )


@pytest.mark.parametrize(
    "memory,hbm,message",
    [
        (
            "80",
            "3.35TB/s",
            "2: field 'memory_bytes': '80' has no unit, so it would be 80 bytes; did you mean 80GiB? "
            "(write 80B for bytes)",
        ),
        (
            "6.5",
            "3.35TB/s",
            "2: field 'memory_bytes': '6.5' has no unit and is not a whole number of bytes; did you mean 6.5GiB?",
        ),
        ("1.5B", "3.35TB/s", "2: field 'memory_bytes': '1.5B' is not a whole number of bytes; did you mean 1.5GiB?"),
        ("true", "3.35TB/s", "2: field 'memory_bytes': true is not a size (write 80GB, 6.51GiB or a byte count)"),
        ("80GiB", "3.35TB", None),  # a rate may leave off /s: 3.35TB read as 3.35 TB/s
        (
            "80GiB",
            "3.35",
            "3: field 'hbm_bytes_per_s': '3.35' has no unit and is not a whole number of bytes/s; "
            "did you mean 3.35GB/s?",
        ),
        (
            "80GiB",
            "3.35TiB/s",
            "3: field 'hbm_bytes_per_s': '3.35TiB/s' is not a rate (write 3.35TB/s, 768GB/s or 768e9)",
        ),
    ],
)
def test_gpu_yaml_refusals_name_file_line_and_field(tmp_path, memory, hbm, message):
    p = tmp_path / "g.yaml"
    p.write_text(GPU.format(memory=memory, hbm=hbm))
    if message is None:
        assert get_gpu(str(p)).hbm_bytes_per_s == 3_350_000_000_000
        return
    with pytest.raises(ConfigError) as e:
        get_gpu(str(p))
    assert str(e.value) == f"{p}:{message}"


def test_gpu_yaml_error_is_one_cli_line(cli, tmp_path):
    p = tmp_path / "g.yaml"
    p.write_text(GPU.format(memory="80", hbm="3.35TB/s"))
    r = cli("estimate", "llama-3.1-8b", "-s", "8k", "--gpu", str(p))
    assert (r.exit_code, r.output) == (
        2,
        f"error: {p}:2: field 'memory_bytes': '80' has no unit, so it would be "
        f"80 bytes; did you mean 80GiB? (write 80B for bytes)\n",
    )


DEPLOYMENT = """model: llama-3.1-8b
gpu: h100-sxm
max_seq_len: {T}
concurrency: 4
"""


def test_deployment_max_seq_len_takes_32k(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text(DEPLOYMENT.format(T="32k"))
    b.write_text(DEPLOYMENT.format(T="32768"))
    ra, rb = check_deployment(a), check_deployment(b)
    assert ra.max_seq_len == 32_768  # 32 x 1,024
    assert ra.model_dump(exclude={"file", "name"}) == rb.model_dump(exclude={"file", "name"})  # named for the files


@pytest.mark.parametrize(
    "T,message",
    [
        ("32.5k", "'32.5k' is not a positive whole number (e.g. 16, 8192 or 32k)"),
        ("32768.0", "Input should be a valid integer (got 32768.0)"),  # a YAML float is no token count
        ("0", "Input should be greater than 0 (got 0)"),
    ],
)
def test_deployment_max_seq_len_refusals(tmp_path, T, message):
    p = tmp_path / "d.yaml"
    p.write_text(DEPLOYMENT.format(T=T))
    with pytest.raises(ConfigError) as e:
        check_deployment(p)
    assert str(e.value) == f"{p}:3: field 'max_seq_len': {message}"


def test_model_max_position_embeddings_takes_128k(tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text("name: m\nn_layers: 2\nn_heads: 4\nhead_dim: 64\nmax_position_embeddings: 128k\n")
    assert load_model(str(p)).max_position_embeddings == 131_072  # 128 x 1,024
    p.write_text("name: m\nn_layers: 2\nn_heads: 4\nhead_dim: 64\nmax_position_embeddings: 128 tokens\n")
    with pytest.raises(ConfigError) as e:
        load_model(str(p))
    assert str(e.value) == (
        f"{p}:5: field 'max_position_embeddings': '128 tokens' is not a positive whole number (e.g. 16, 8192 or 32k)"
    )


def test_json_schema_says_sizes_and_contexts_may_be_text(cli):
    d = json.loads(cli("schema", "gpu").stdout)["properties"]
    assert {"type": "string"} in d["memory_bytes"]["anyOf"]
    dep = json.loads(cli("schema", "deployment").stdout)["properties"]
    assert [t["type"] for t in dep["max_seq_len"]["anyOf"]] == ["integer", "string"]
