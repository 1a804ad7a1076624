"""`kvcalc estimate -s 8k,32k,128k` (issue 11 item 7): one compact row per length, JSON a list of
the usual objects; one length keeps today's output exactly.

Llama-3.1-70B (meta-llama/Llama-3.1-70B config.json): 2 x 80 layers x 8 KV heads x 128 x 2 B =
327,680 B per token in bf16."""

from __future__ import annotations

import json
import re

import pytest

import kvcalc
from kvcalc.load.models import load_model
from kvcalc.requests import EstimateRequest, resolve_seq_lens, run_estimate

PER_TOKEN = 327_680  # 2 x 80 x 8 x 128 x 2 B


def ints_in(obj) -> set[int]:
    """Every integer of a JSON value (bools aside)."""
    if isinstance(obj, bool):
        return set()
    if isinstance(obj, int):
        return {obj}
    if isinstance(obj, dict):
        return set().union(*map(ints_in, obj.values())) if obj else set()
    if isinstance(obj, list):
        return set().union(*map(ints_in, obj)) if obj else set()
    return set()


def test_json_is_a_list_of_the_usual_objects(cli):
    r = cli("estimate", "llama-3.1-70b", "-s", "8k,32k,128k", "-f", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [d["seq_len"] for d in rows] == [8192, 32768, 131072]
    # 327,680 B x 8,192 = 2,684,354,560; x 32,768 = 10,737,418,240; x 131,072 = 42,949,672,960
    assert [d["kv_cache_bytes"] for d in rows] == [2_684_354_560, 10_737_418_240, 42_949_672_960]
    single = json.loads(cli("estimate", "llama-3.1-70b", "-s", "32k", "-f", "json").stdout)
    assert rows[1] == single  # each row is exactly what one length prints


def test_table_has_one_row_per_length_and_whole_numbers(cli):
    r = cli("estimate", "llama-3.1-70b", "-s", "8k,32k,128k")
    assert r.exit_code == 0, r.output
    lines = [line for line in r.stdout.splitlines() if re.search(r"│\s+[\d,]+ │", line)]
    assert len(lines) == 3
    # seq_len, B/token, KV cache (B), GiB
    assert [c.strip() for c in lines[0].strip("│").split("│")] == ["8,192", "327,680", "2,684,354,560", "2.50"]
    assert [c.strip() for c in lines[2].strip("│").split("│")] == ["131,072", "327,680", "42,949,672,960", "40.00"]
    assert "per GPU" not in r.stdout  # one GPU: the column would repeat the total


def test_per_gpu_column_under_tp(cli):
    # tp 8: 8 KV heads / 8 ranks = 1 head per GPU: 2,684,354,560 / 8 = 335,544,320 B at 8k
    r = cli("estimate", "llama-3.1-70b", "-s", "8k,32k", "--tp", "8", "-f", "json")
    assert [d["kv_cache_bytes_per_gpu"] for d in json.loads(r.stdout)] == [335_544_320, 1_342_177_280]
    t = cli("estimate", "llama-3.1-70b", "-s", "8k,32k", "--tp", "8").stdout
    assert "per GPU (B)" in t and "335,544,320" in t and "1,342,177,280" in t and "tp 8 x pp 1" in t


@pytest.mark.parametrize("columns", ["60", "80", "120"])
def test_no_number_is_cut_at_any_width(cli, columns):
    args = ["estimate", "llama-3.1-70b", "-s", "8k,32k,128k", "--tp", "8", "--pp", "2"]
    data = json.loads(cli(*args, "-f", "json").stdout)
    text = cli(*args, env={"COLUMNS": columns}).stdout
    assert "…" not in text
    shown = {int(x.replace(",", "")) for x in re.findall(r"(?<![\d,.])\d{1,3}(?:,\d{3})*(?![\d,])", text)}
    wanted = {d[k] for d in data for k in ("seq_len", "kv_bytes_per_token", "kv_cache_bytes", "kv_cache_bytes_per_gpu")}
    assert wanted <= shown
    assert max(len(line) for line in text.splitlines()) <= int(columns)


def test_one_length_keeps_todays_output(cli):
    # one value, written either way, prints the full estimate table (formula and all), JSON one object
    a, b = cli("estimate", "llama-3.1-70b", "-s", "8k"), cli("estimate", "llama-3.1-70b", "-s", "8192")
    assert a.stdout == b.stdout and "formula" in a.stdout and "2,684,354,560 B (2.68 GB, 2.50 GiB)" in a.stdout
    assert isinstance(json.loads(cli("estimate", "llama-3.1-70b", "-s", "8k", "-f", "json").stdout), dict)
    assert kvcalc.estimate("llama-3.1-70b", seq_len=8192).kv_cache_bytes == 2_684_354_560


def test_contexts_beyond_the_model_warn_once(cli):
    r = cli("estimate", "llama-3.1-70b", "-s", "8k,256k,512k")
    assert r.exit_code == 0
    assert r.stderr.count("warning:") == 1 and "262,144, 524,288 tokens are beyond" in r.stderr


@pytest.mark.parametrize(
    "extra,msg",
    [
        (["--gpu", "h100-sxm"], "use `kvcalc sweep llama-3.1-70b --seq-len 8192,32768 --batch 1 --gpu h100-sxm`"),
        (["--engine", "vllm"], "--engine vllm with several --seq-len values: give one --seq-len"),
    ],
)
def test_gpu_and_engine_take_one_length(cli, extra, msg):
    r = cli("estimate", "llama-3.1-70b", "-s", "8k,32k", *extra)
    assert r.exit_code == 2 and r.stdout == "" and msg in r.stderr and r.stderr.count("\n") == 1


def test_requests_resolve_and_build_lengths(recwarn):
    spec = load_model("llama-3.1-70b")
    assert resolve_seq_lens(spec, "8k,32k,8k") == [8192, 32768]  # a repeat is one length
    assert resolve_seq_lens(spec, None) == [131_072]  # max_position_embeddings
    assert resolve_seq_lens(spec, 4096) == [4096]
    reqs = EstimateRequest.build_lengths(spec, [8192, 262_144, 524_288], batch=2)
    assert [q.workload.seq_len for q in reqs] == [8192, 262_144, 524_288]
    assert len(recwarn) == 1  # one warning for both lengths beyond 131,072
    # batch 2 at 8,192: 2 x 2,684,354,560
    assert run_estimate(reqs[0]).kv.kv_cache_bytes == 5_368_709_120
