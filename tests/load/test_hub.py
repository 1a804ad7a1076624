"""Hugging Face Hub ids (`kvcalc.load.hub`), never touching the network: a real Hub cache is built in
a temporary folder in the layout huggingface_hub reads (`models--org--name/refs/main`,
`snapshots/<commit>/config.json` linked to `blobs/<sha256>`), and the CLI runs in a fresh process
with `HF_HUB_OFFLINE=1` and `HF_HUB_CACHE` pointing there (huggingface_hub reads both when it is
imported). The Hub's own answers (gated, not found, no such revision, no network) are the client's
real exception classes, raised by a stand-in for its download call in-process."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

hf = pytest.importorskip("huggingface_hub", reason="Hub ids need huggingface_hub: pip install 'kvcalc[hub]'")

from kvcalc.load.hub import headers_cache_path, parse_hub_id, save_headers  # noqa: E402  (after the skip above)

ROOT = Path(__file__).parents[2]
LLAMA = (ROOT / "tests" / "data" / "hf" / "Llama-3.1-8B.json").read_text()
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cache_repo(cache: Path, repo_id: str, config: str, commit: str = COMMIT, ref: str = "main") -> Path:
    """One repo in a Hub cache as huggingface_hub writes it; returns the snapshot folder."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    blob = repo / "blobs" / hashlib.sha256(config.encode()).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_text(config)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / ref).write_text(commit)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (snap / "config.json").symlink_to(os.path.relpath(blob, snap))
    return snap


def run(args: list[str], cache: Path, kv_cache: Path, offline: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_CACHE": str(cache), "KVCALC_CACHE": str(kv_cache), "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_TOKEN", None)
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run([sys.executable, "-m", "kvcalc", *args], capture_output=True, text=True, cwd=ROOT, env=env)


@pytest.fixture
def dirs(tmp_path):
    return tmp_path / "hub", tmp_path / "kvcalc"


# Llama-3.1-8B at 8,192 tokens, bf16: 2 x 32 layers x 8 KV heads x 128 x 8,192 x 2 B = 1,073,741,824 B
LLAMA_8K_BYTES = 1_073_741_824


def test_cached_config_works_offline(dirs):
    cache, kv = dirs
    cache_repo(cache, "acme/llama-copy", LLAMA)
    r = run(["estimate", "acme/llama-copy", "-s", "8k", "-f", "json"], cache, kv)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["kv_cache_bytes"] == LLAMA_8K_BYTES
    assert d["model"] == "llama-copy"
    assert d["source"] == (
        "acme/llama-copy config.json (Hugging Face cache, commit 0123456789ab); weights counted "
        "from the architecture (no safetensors headers cached for this commit)"
    )


def test_cached_headers_give_exact_weights_offline(dirs, monkeypatch):
    # the headers kvcalc kept for this commit on an earlier online run (`save_headers`): one bf16
    # safetensors file of Llama-3.1-8B's tensors with their real names and shapes
    cache, kv = dirs
    cache_repo(cache, "acme/llama-copy", LLAMA)
    shapes = {
        "model.embed_tokens.weight": [128256, 4096],
        "lm_head.weight": [128256, 4096],
        "model.norm.weight": [4096],
    }
    for i in range(32):
        for n, s in {
            "self_attn.q_proj": [4096, 4096],
            "self_attn.k_proj": [1024, 4096],
            "self_attn.v_proj": [1024, 4096],
            "self_attn.o_proj": [4096, 4096],
            "mlp.gate_proj": [14336, 4096],
            "mlp.up_proj": [14336, 4096],
            "mlp.down_proj": [4096, 14336],
            "input_layernorm": [4096],
            "post_attention_layernorm": [4096],
        }.items():
            shapes[f"model.layers.{i}.{n}.weight"] = s
    header, offset = {}, 0
    for name, s in shapes.items():
        n = 2 * (s[0] * s[1] if len(s) == 2 else s[0])
        header[name] = {"dtype": "BF16", "shape": s, "data_offsets": [offset, offset + n]}
        offset += n
    monkeypatch.setenv("KVCALC_CACHE", str(kv))
    save_headers("acme/llama-copy", COMMIT, {"model.safetensors": header})
    assert headers_cache_path("acme/llama-copy", COMMIT).is_file()
    r = run(["estimate", "acme/llama-copy", "-s", "8k", "--gpu", "h100-sxm", "-f", "json"], cache, kv)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    # 8,030,261,248 parameters x 2 B: the same as the architecture's count
    assert (d["n_params"], d["weights_bytes_per_gpu"]) == (8_030_261_248, 16_060_522_496)
    assert d["weights_source"] == "safetensors headers of 1 file"


def test_bundled_id_resolves_without_the_network(dirs):
    cache, kv = dirs  # an empty cache, offline
    r = run(["estimate", "meta-llama/Llama-3.1-8B", "-s", "8k", "-f", "json"], cache, kv)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["kv_cache_bytes"] == LLAMA_8K_BYTES and d["model"] == "llama-3.1-8b"
    assert d["source"] == "meta-llama/Llama-3.1-8B config.json, bundled copy 'llama-3.1-8b' (the Hub was not contacted)"


def test_bundled_id_does_not_answer_for_another_revision(dirs):
    cache, kv = dirs
    r = run(["estimate", "meta-llama/Llama-3.1-8B", "--revision", "v2"], cache, kv)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f"error: meta-llama/Llama-3.1-8B at revision 'v2' is not in the Hugging Face cache ({cache}) and "
        "HF_HUB_OFFLINE is set: run once online (unset HF_HUB_OFFLINE) to cache its config.json; or use the "
        "bundled 'llama-3.1-8b' (meta-llama/Llama-3.1-8B)"
    ]


@pytest.mark.parametrize("args", [["meta-llama/Llama-3.1-8B", "--revision", "main"], ["meta-llama/Llama-3.1-8B@main"]])
def test_an_explicit_revision_is_never_the_bundled_copy(dirs, args):
    # issue 23 friction 10: `--revision main` answered from the bundled copy, contacting neither
    # the cache nor the Hub; offline with an empty cache it now says it has neither
    cache, kv = dirs
    r = run(["estimate", *args], cache, kv)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(
        f"error: meta-llama/Llama-3.1-8B at revision 'main' is not in the Hugging Face cache "
        f"({cache}) and HF_HUB_OFFLINE is set"
    ), r.stderr
    # with the revision cached, the cache answers (a copy of Llama-3.1-8B's config.json)
    cache_repo(cache, "meta-llama/Llama-3.1-8B", LLAMA)
    r = run(["estimate", *args, "-s", "8k", "-f", "json"], cache, kv)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["kv_cache_bytes"] == LLAMA_8K_BYTES
    assert d["source"].startswith("meta-llama/Llama-3.1-8B config.json (Hugging Face cache, commit 0123456789ab)")


def test_revision_reads_that_commit_from_the_cache(dirs):
    cache, kv = dirs
    other = "f" * 40
    cache_repo(cache, "acme/llama-copy", LLAMA)
    qwen = (ROOT / "tests" / "data" / "hf" / "Qwen3-4B.json").read_text()
    cache_repo(cache, "acme/llama-copy", qwen, commit=other, ref="v2")
    r = run(["estimate", "acme/llama-copy@v2", "-s", "8k", "-f", "json"], cache, kv)
    # Qwen3-4B: 2 x 36 layers x 8 KV heads x 128 x 8,192 x 2 B = 1,207,959,552 B
    assert json.loads(r.stdout)["kv_cache_bytes"] == 1_207_959_552, r.stderr
    r = run(["estimate", "acme/llama-copy", "--revision", other, "-s", "8k", "-f", "json"], cache, kv)
    assert json.loads(r.stdout)["kv_cache_bytes"] == 1_207_959_552, r.stderr
    r = run(["estimate", "acme/llama-copy@v2", "--revision", "v3"], cache, kv)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "error: --revision v3: acme/llama-copy@v2 names revision v2, --revision names v3; give one"
    ]


def test_not_cached_offline_is_one_line(dirs):
    cache, kv = dirs
    r = run(["estimate", "meta-llama/Llama-3.1-8B-Instruct"], cache, kv)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        f"error: meta-llama/Llama-3.1-8B-Instruct is not in the Hugging Face cache ({cache}) and HF_HUB_OFFLINE is "
        "set: run once online (unset HF_HUB_OFFLINE) to cache its config.json; or use the bundled 'llama-3.1-8b' "
        "(meta-llama/Llama-3.1-8B)"
    ]


def test_bundled_name_never_imports_the_client():
    code = (
        "import sys\nfrom kvcalc.cli import main\nsys.argv=['kvcalc','estimate','llama-3.1-8b','-s','8k','-f','json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('LOADED', [m for m in ('huggingface_hub', 'safetensors') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert str(LLAMA_8K_BYTES) in out
    assert out.strip().endswith("LOADED []")


@pytest.mark.parametrize(
    "ref, parsed",
    [
        ("Qwen/Qwen3-8B", ("Qwen/Qwen3-8B", None)),
        ("Qwen/Qwen3-8B@main", ("Qwen/Qwen3-8B", "main")),
        ("org/name@refs/pr/1", ("org/name", "refs/pr/1")),
        ("configs/model.yaml", None),
        ("some/config.json", None),
        ("a--b/c", None),
        ("a/b/c", None),
        ("llama-3.1-8b", None),
    ],
)
def test_parse_hub_id(ref, parsed):
    assert parse_hub_id(ref) == parsed


# ----- the Hub's answers, in-process (no network): the client's own exception classes -------------


def _raiser(exc: BaseException):
    from huggingface_hub.errors import LocalEntryNotFoundError

    def download(repo_id, filename, *, revision=None, local_files_only=False, **kw):
        if local_files_only:  # nothing cached
            raise LocalEntryNotFoundError("not in the cache")
        raise exc

    return download


def _http_error(cls, status: int):
    import httpx2

    response = httpx2.Response(status, request=httpx2.Request("GET", "https://huggingface.co/x"))
    return cls("Client error", response=response)


@pytest.mark.parametrize(
    "make, ref, line",
    [
        (
            lambda e: _http_error(e.GatedRepoError, 401),
            "meta-llama/Llama-3.3-70B-Instruct",
            "meta-llama/Llama-3.3-70B-Instruct is a gated repository on the Hugging Face Hub: accept its licence on "
            "huggingface.co/meta-llama/Llama-3.3-70B-Instruct, then set HF_TOKEN (or run `hf auth login`); or use the "
            "bundled 'llama-3.1-70b' (meta-llama/Llama-3.1-70B)",
        ),
        (
            lambda e: _http_error(e.RepositoryNotFoundError, 404),
            "qwen/qwen3-4b-nosuch",
            "qwen/qwen3-4b-nosuch is neither a local file nor a model repository on the Hugging Face Hub (a private one "
            "needs HF_TOKEN); or use the bundled 'qwen3-4b' (Qwen/Qwen3-4B)",
        ),
        (
            lambda e: _http_error(e.RevisionNotFoundError, 404),
            "acme/model@nosuch",
            "--revision nosuch: acme/model has no such revision on the Hugging Face Hub: give a branch, tag or commit hash "
            "that exists (default main)",
        ),
        (
            lambda e: e.LocalEntryNotFoundError("connection error"),
            "acme/model",
            "cannot reach the Hugging Face Hub for acme/model (LocalEntryNotFoundError), and its config.json is not in the "
            "cache ({cache}): check the network (or HF_ENDPOINT); to work offline, set HF_HUB_OFFLINE=1 with the model in "
            "that cache, or give a local folder holding its config.json",
        ),
        (
            lambda e: _http_error(e.RemoteEntryNotFoundError, 404),
            "acme/model",
            "acme/model has no config.json on the Hugging Face Hub: kvcalc reads transformers checkpoints (for a GGUF "
            "repository, download the .gguf file and give its path)",
        ),
    ],
)
def test_hub_failures_are_one_line_exit_2(cli, monkeypatch, tmp_path, make, ref, line):
    import huggingface_hub
    from huggingface_hub import constants, errors

    from kvcalc.load import hub

    # the bundled ids the near-names come from, fixed here (more bundled models must not change the lines)
    monkeypatch.setattr(
        hub,
        "bundled_hub_ids",
        lambda: {
            "meta-llama/llama-3.1-70b": ("llama-3.1-70b", "meta-llama/Llama-3.1-70B"),
            "qwen/qwen3-4b": ("qwen3-4b", "Qwen/Qwen3-4B"),
        },
    )

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", _raiser(make(errors)))

    def probe(url, **kw):  # the one request before the download (`hub._probe`) meets the same answer
        raise make(errors)

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", probe)
    r = cli("estimate", ref)
    assert r.exit_code == 2
    assert r.stderr.splitlines() == ["error: " + line.format(cache=tmp_path)]


def test_online_fetch_keeps_the_headers(cli, monkeypatch, tmp_path):
    # a Hub answer stood in for: config.json lands in a snapshot folder, the headers come from the
    # client's metadata objects; kvcalc keeps them for the commit, so the next run is offline-ready
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.utils import (
        SafetensorsFileMetadata,
        SafetensorsRepoMetadata,
        TensorInfo,
    )

    snap = cache_repo(
        tmp_path / "hub",
        "acme/tiny",
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 16,
                "intermediate_size": 32,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "head_dim": 8,
                "num_hidden_layers": 1,
                "vocab_size": 10,
                "torch_dtype": "bfloat16",
                "max_position_embeddings": 64,
                "tie_word_embeddings": True,
            }
        ),
    )
    calls = []

    def download(repo_id, filename, *, revision=None, local_files_only=False, **kw):
        calls.append(local_files_only)
        if local_files_only:
            from huggingface_hub.errors import LocalEntryNotFoundError

            raise LocalEntryNotFoundError("not cached")
        return str(snap / "config.json")

    def info(shape):
        n = 2 * shape[0] * (shape[1] if len(shape) > 1 else 1)
        return TensorInfo(dtype="BF16", shape=shape, data_offsets=(0, n))

    tensors = {
        "model.embed_tokens.weight": info([10, 16]),
        "model.norm.weight": info([16]),
        "model.layers.0.self_attn.q_proj.weight": info([16, 16]),
    }
    meta = SafetensorsRepoMetadata(
        metadata=None,
        sharded=False,
        weight_map=dict.fromkeys(tensors, "model.safetensors"),
        files_metadata={"model.safetensors": SafetensorsFileMetadata(metadata={}, tensors=tensors)},
    )
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", lambda url, **kw: None)  # the Hub answers
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", lambda repo_id, revision=None: meta)
    monkeypatch.setenv("KVCALC_CACHE", str(tmp_path / "kv"))
    r = cli("estimate", "acme/tiny", "-s", "64", "--gpu", "h100-sxm", "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    # 320 B embedding + 32 B norm + 512 B q_proj = 864 B; 160 + 16 + 256 = 432 parameters
    assert (d["weights_bytes_per_gpu"], d["n_params"]) == (864, 432)
    assert calls == [True, False]  # the cache first, then the Hub
    assert headers_cache_path("acme/tiny", COMMIT).is_file()
