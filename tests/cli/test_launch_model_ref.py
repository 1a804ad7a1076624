"""Trial finding B: the model a launch line names is one the engine can load (`engines.launch.
model_ref`): the Hub id when kvcalc knows it (a bundled model's `source`, a config.json's
`_name_or_path` that is an `org/name` id), else the folder that holds the config.json, never a
name made from the file name (`deepseek-ai--deepseek-v4-flash` was printed before). vLLM 0.33.0
`vllm serve MODEL` and SGLang 0.5.23 `--model-path` take a Hub id or a local folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "hf-configs-2026"
V4_FLASH = DATA / "deepseek-ai--DeepSeek-V4-Flash.json"  # copied from huggingface.co, no _name_or_path


def plan_launch(cli, model: str, engine: str, *extra: str) -> str:
    r = cli("plan", model, "-s", "8k", "--gpu", "h200", "--engine", engine, "-f", "json", *extra)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["layouts"][0]["launch"]


PREFIX = {
    "vllm": "vllm serve {} --tensor-parallel-size ",
    "sglang": "python -m sglang.launch_server --model-path {} --tp-size ",
}


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_config_json_without_name_or_path_names_its_folder(cli, engine):
    line = plan_launch(cli, str(V4_FLASH), engine)
    assert line.startswith(PREFIX[engine].format(DATA)), line
    assert "deepseek-ai--deepseek-v4-flash" not in line


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize(
    "name_or_path,expected",
    [
        ("deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Flash"),  # a Hub id: as written
        ("/models/dsv4", None),  # a local path where it was saved: the folder the file is in now
        ("./dsv4", None),
        ("checkpoints/dsv4/config.json", None),  # a file, not a Hub id
    ],
)
def test_config_json_name_or_path(cli, tmp_path, engine, name_or_path, expected):
    data = json.loads(V4_FLASH.read_text())
    data["_name_or_path"] = name_or_path
    f = tmp_path / "some-file-name.json"
    f.write_text(json.dumps(data))
    line = plan_launch(cli, str(f), engine)
    assert line.startswith(PREFIX[engine].format(expected or tmp_path.resolve())), line


def test_checkpoint_folder_names_the_folder(cli, tmp_path):
    folder = tmp_path / "my-ckpt"
    folder.mkdir()
    shutil.copy(V4_FLASH, folder / "config.json")
    line = plan_launch(cli, str(folder), "vllm")
    assert line.startswith(f"vllm serve {folder.resolve()} --tensor-parallel-size "), line


@pytest.mark.parametrize(
    "model,hub_id", [("deepseek-v3", "deepseek-ai/DeepSeek-V3"), ("llama-3.1-8b", "meta-llama/Llama-3.1-8B")]
)
def test_bundled_model_names_its_hub_id(cli, model, hub_id):
    assert plan_launch(cli, model, "vllm").startswith(f"vllm serve {hub_id} --tensor-parallel-size ")
    assert plan_launch(cli, model, "sglang").startswith(f"python -m sglang.launch_server --model-path {hub_id} ")


def test_write_deployment_header_names_the_folder(cli, tmp_path):
    out = tmp_path / "dep.yaml"
    r = cli("plan", str(V4_FLASH), "-s", "8k", "--gpu", "h200", "--engine", "vllm", "--write-deployment", str(out))
    assert r.exit_code == 0, r.output
    launch = next(ln for ln in out.read_text().splitlines() if ln.startswith("# launch (vllm): "))
    assert launch.startswith(f"# launch (vllm): vllm serve {DATA} --tensor-parallel-size "), launch
