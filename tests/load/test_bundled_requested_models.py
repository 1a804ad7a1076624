"""The bundled models users ask for by name (issue 9 item 7): each new configs/models/*.yaml
pinned by its KV bytes per token in bf16, derived by hand from the published config.json (Hub id
in each file's `source:`), and near-miss names answered with a suggestion, never silently.

Values are from the published configs (none of these is in /work/shared/fixtures/hf-configs;
written from the model pages' config.json: layers, KV heads, head_dim, context, dtype).
"""

from __future__ import annotations

import pytest

from kvcalc.calc.kv_cache import kv_bytes_per_token, kv_cache_bytes
from kvcalc.errors import UnknownNameError
from kvcalc.load.files import bundled
from kvcalc.load.models import load_model

NEW = {
    # name: (KV bytes per token in bf16, context limit, source Hub id)
    "qwen3-8b": (147_456, 40_960, "Qwen/Qwen3-8B"),  # 2 x 36 layers x 8 KV x 128 x 2 B
    "qwen3-14b": (163_840, 40_960, "Qwen/Qwen3-14B"),  # 2 x 40 x 8 x 128 x 2 B
    "qwen3-235b-a22b": (192_512, 40_960, "Qwen/Qwen3-235B-A22B"),  # 2 x 94 x 4 x 128 x 2 B
    "qwen2.5-72b": (327_680, 32_768, "Qwen/Qwen2.5-72B-Instruct"),  # 2 x 80 x 8 x (8192 / 64 = 128) x 2 B
    "llama-3.2-1b": (32_768, 131_072, "meta-llama/Llama-3.2-1B"),  # 2 x 16 x 8 x 64 x 2 B
    "llama-3.2-3b": (114_688, 131_072, "meta-llama/Llama-3.2-3B"),  # 2 x 28 x 8 x 128 x 2 B
    "llama-3.3-70b": (327_680, 131_072, "meta-llama/Llama-3.3-70B-Instruct"),  # 2 x 80 x 8 x 128 x 2 B
    "deepseek-r1": (70_272, 163_840, "deepseek-ai/DeepSeek-R1"),  # 61 layers x (512 + 64) x 2 B, no factor 2
    "mistral-small-24b": (163_840, 32_768, "mistralai/Mistral-Small-24B-Instruct-2501"),  # 2 x 40 x 8 x 128 x 2 B
    "gemma-3-4b": (139_264, 131_072, "google/gemma-3-4b-it"),  # 2 x 34 x 4 x 256 x 2 B (inside the window)
    "gemma-3-12b": (393_216, 131_072, "google/gemma-3-12b-it"),  # 2 x 48 x 8 x 256 x 2 B
    "phi-4": (204_800, 16_384, "microsoft/phi-4"),  # 2 x 40 x 10 x (5120 / 40 = 128) x 2 B
    "llama-4-scout": (196_608, 10_485_760, "meta-llama/Llama-4-Scout-17B-16E-Instruct"),  # 2 x 48 x 8 x 128 x 2 B
}


@pytest.mark.parametrize("name", sorted(NEW))
def test_kv_bytes_per_token_and_source(name):
    per_token, limit, hub_id = NEW[name]
    m = load_model(name)
    assert kv_bytes_per_token(m, "bf16") == per_token
    assert m.context_limit == limit
    assert m.source.startswith(hub_id + " config.json")
    assert name in bundled("models")


def test_sliding_layers_stop_at_their_window():
    # gemma-3-4b at 32,768 tokens: 29 sliding layers hold 1,024 tokens, 5 full layers 32,768;
    # one layer: 2 x 4 KV x 256 x 2 B = 4,096 B per token
    # 29 x 4,096 x 1,024 + 5 x 4,096 x 32,768 = 121,634,816 + 671,088,640 = 792,723,456 B
    assert kv_cache_bytes(load_model("gemma-3-4b"), 32_768, 1, "bf16") == 792_723_456
    # llama-4-scout at 131,072 tokens: 36 chunked layers hold one chunk of 8,192, 12 NoPE global
    # layers all; one layer: 2 x 8 x 128 x 2 B = 4,096 B per token
    # 36 x 4,096 x 8,192 + 12 x 4,096 x 131,072 = 1,207,959,552 + 6,442,450,944 = 7,650,410,496 B
    assert kv_cache_bytes(load_model("llama-4-scout"), 131_072, 1, "bf16") == 7_650_410_496


@pytest.mark.parametrize(
    "typed, meant",
    [
        ("llama3-8b", "llama-3.1-8b"),
        ("deepseek-r1-0528", "deepseek-r1"),
        ("qwen3 8b", "qwen3-8b"),
        ("gemma3-12b", "gemma-3-12b"),
        ("phi4", "phi-4"),
        ("qwen3-235b", "qwen3-235b-a22b"),
    ],
)
def test_near_miss_names_are_suggested_never_taken(typed, meant):
    with pytest.raises(UnknownNameError) as e:
        load_model(typed)
    assert e.value.close[0] == meant


def test_near_miss_on_the_command_line_is_one_line_exit_2(cli):
    r = cli("estimate", "deepseek-r1-0528")
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        "error: unknown model 'deepseek-r1-0528'; did you mean 'deepseek-r1', 'deepseek-v3.2' or 'deepseek-v3'?"
    ]


def test_models_table_reads_whole_at_80_columns(cli):
    r = cli("models")
    assert r.exit_code == 0
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    for name in NEW:
        assert f"│ {name} " in r.stdout
    assert "10,485,760" in r.stdout  # llama-4-scout's context, not cut
