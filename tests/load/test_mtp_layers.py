"""MTP layers (issue 20 item 3): each family reads its config's MTP field into `n_mtp_layers`, the
field vLLM 0.33.0 reads for that architecture (`vllm/config/speculative.py`
`SpeculativeConfig.hf_config_override`: deepseek_v3 / deepseek_v32 / glm_moe_dsa / deepseek_v4 /
nemotron_h / qwen3_next -> num_nextn_predict_layers; qwen3_5 -> text_config.mtp_num_hidden_layers;
minimax_m3 and step3p7 as their readers say), and every bundled YAML whose published config is in
the repo (its `source` names the copy) or in `shared/fixtures` carries the count the reader gives.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from kvcalc.load.models import load_model

ROOT = Path(__file__).parents[2]
DATA = ROOT / "tests" / "data" / "hf-configs-2026"
SHARED = ROOT.parent.parent / "shared" / "fixtures" / "hf-configs-2026"
BUNDLED_DIR = ROOT / "configs" / "models"


# config file -> (the field vLLM 0.33.0 reads, its value in the published config.json = n_mtp_layers)
READERS = {
    "deepseek-ai--DeepSeek-V3.2": ("num_nextn_predict_layers", 1),  # deepseek_v32 -> deepseek_mtp
    "deepseek-ai--DeepSeek-V4-Flash": ("num_nextn_predict_layers", 1),
    "zai-org--GLM-5.2": ("num_nextn_predict_layers", 1),  # glm_moe_dsa -> deepseek_mtp
    "Qwen--Qwen3.5-27B": ("text_config.mtp_num_hidden_layers", 1),  # qwen3_5 -> qwen3_5_mtp
    "siblings/Qwen--Qwen3.5-397B-A17B": ("text_config.mtp_num_hidden_layers", 1),  # qwen3_5_moe
    "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8": ("num_nextn_predict_layers", 1),  # -> nemotron_h_mtp
    "stepfun-ai--Step-3.7-Flash": ("num_nextn_predict_layers", 3),
    "MiniMaxAI--MiniMax-M3": ("num_nextn_predict_layers", 1),
    "moonshotai--Kimi-K3": ("text_config.num_nextn_predict_layers", 0),
    "moonshotai--Kimi-K2.5": ("text_config.num_nextn_predict_layers", 0),
}


def _field(cfg: dict, dotted: str) -> object:
    for key in dotted.split("."):
        cfg = cfg[key]
    return cfg


@pytest.mark.parametrize("name", sorted(READERS))
def test_reader_takes_the_mtp_field(name):
    path = DATA / f"{name}.json"
    key, n = READERS[name]
    assert _field(json.loads(path.read_text()), key) == n  # the published config says so
    assert load_model(path).n_mtp_layers == n


def _sources() -> list[tuple[str, Path]]:
    """(bundled YAML, its published config): the copy its `source` names (`copy: tests/data/...`),
    else `shared/fixtures/hf-configs-2026/<org>--<name>.json` for the Hub id it starts with."""
    out = []
    for y in sorted(BUNDLED_DIR.glob("*.yaml")):
        source = str(yaml.safe_load(y.read_text()).get("source", ""))
        copy = re.search(r"copy: (tests/data/\S+\.json)", source)
        hub = re.match(r"([\w.-]+)/([\w.-]+) config\.json", source)
        if copy:
            out.append((y.stem, ROOT / copy.group(1)))
        elif hub and (SHARED / f"{hub.group(1)}--{hub.group(2)}.json").is_file():
            out.append((y.stem, SHARED / f"{hub.group(1)}--{hub.group(2)}.json"))
    return out


SOURCES = _sources()


def test_the_bundled_models_with_mtp_are_among_them():
    assert {"deepseek-v3.2", "qwen3.5-27b", "nemotron-3-super-120b-a12b", "glm-5.2"} <= {n for n, _ in SOURCES}


@pytest.mark.parametrize("name, config", SOURCES, ids=[n for n, _ in SOURCES])
def test_bundled_n_mtp_layers_equals_the_reader(name, config):
    assert load_model(name).n_mtp_layers == load_model(config).n_mtp_layers


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"shared fixtures absent ({SHARED}): the repo's copies are tested")
@pytest.mark.parametrize("name", sorted(p.stem for p in DATA.glob("*.json") if "hf_quant" not in p.name))
def test_the_shared_fixture_reads_as_the_copy(name):
    """The repo's copies in tests/data are the shared fixtures' files: same MTP count."""
    shared = SHARED / f"{name}.json"
    if not shared.is_file():
        pytest.skip(f"{shared} absent")
    assert load_model(shared).n_mtp_layers == load_model(DATA / f"{name}.json").n_mtp_layers


# Bundled YAMLs whose published config is not in the repo: the counts their config.json gives
# (deepseek-ai/DeepSeek-R1 and DeepSeek-V3 config.json: "num_nextn_predict_layers": 1)
@pytest.mark.parametrize("name, n", [("deepseek-r1", 1), ("deepseek-v3", 1)])
def test_bundled_without_a_copy(name, n):
    assert load_model(name).n_mtp_layers == n
