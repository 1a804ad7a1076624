"""A model from a Hugging Face Hub id (`Qwen/Qwen3-8B`, `org/name@revision`), through
`huggingface_hub` (the Hub's own client, imported only on this path: `pip install 'kvcalc[hub]'`).

Only small files are fetched: `config.json` (`hf_hub_download`, into the standard cache:
`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`) and the safetensors headers
of the shards (`get_safetensors_metadata`: `model.safetensors.index.json` and one ranged read of
each shard's header; never the weights). The parsed headers are kept as one small JSON per commit
in kvcalc's own cache (`KVCALC_CACHE`, else `$XDG_CACHE_HOME/kvcalc`, else `~/.cache/kvcalc`:
`safetensors/<org>--<name>/<commit>.json`, the headers as safetensors writes them), so a model
fetched once gives the same exact weight bytes offline.

The order, so that nothing touches the network that need not:
1. the Hub cache: a config.json cached for the revision (default `main`) is used as is, with the
   headers kvcalc cached for its commit, else those of the safetensors files in the snapshot
   folder itself (a full download), else the weights are counted from the architecture (and
   the source says so);
2. a bundled copy: an id that a bundled config names as its `source` (`meta-llama/Llama-3.1-8B`
   -> `llama-3.1-8b`) resolves without the network, and the source says it is the bundled copy
   (only for an id given without a revision: `--revision main` or `@main` reads the cache or the
   Hub, as any other revision does);
3. the Hub (`HF_TOKEN` for gated repos; refused under `HF_HUB_OFFLINE=1`): first one request for
   config.json without the client's retry loop (`_probe`), so that no network answers in a few
   seconds, not the ~24 s of `hf_hub_download`'s retries.

Every failure is one `KvcalcError` line naming the fix: a gated repo without a token (`HF_TOKEN`),
an unknown repo (the bundled near-name), a revision that does not exist (`--revision`), no
network or offline mode with nothing cached (the cache folder, the bundled near-name).
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from kvcalc.errors import MESSAGE, KvcalcError, KvcalcWarning, MissingExtraError, close_names
from kvcalc.schema import ModelSpec

if TYPE_CHECKING:
    from kvcalc.json_types import JsonObject
    from kvcalc.load.checkpoint import Tensor

    #: {shard file: {tensor name: Tensor}}: a checkpoint's safetensors headers, parsed
    Headers = dict[str, dict[str, Tensor]]

#: a Hub repo id (`huggingface_hub.utils.validate_repo_id`: letters, digits, `-`, `_`, `.`; at most
#: 96 characters each side), optionally `@revision`
_REPO_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95})(?:@(?P<rev>[\w./-]{1,200}))?$")
_SOURCE = re.compile(r"^source:\s*['\"]?([\w.-]+/[\w.-]+)", re.MULTILINE)
_FILE_SUFFIXES = (".yaml", ".yml", ".json", ".gguf", ".safetensors")


def parse_hub_id(ref: str) -> tuple[str, str | None] | None:
    """(repo id, revision or None) when `ref` is written as a Hub id (`org/name` or
    `org/name@rev`, no file suffix, no `--` or `..`), else None. Whether a local path of that
    name exists is the caller's test."""
    m = _REPO_ID.match(ref.strip())
    if not m or "--" in m["repo"] or ".." in m["repo"] or m["repo"].lower().endswith(_FILE_SUFFIXES):
        return None
    return m["repo"], m["rev"]


def bundled_hub_ids() -> dict[str, tuple[str, str]]:
    """Lower-case Hub id -> (bundled model name, the id as written), from each bundled config's
    `source:` line (the Hub id it was copied from). Reads the small YAML files as text."""
    from kvcalc.load.files import bundled

    out: dict[str, tuple[str, str]] = {}
    for name, path in bundled("models").items():
        try:
            m = _SOURCE.search(path.read_text(encoding="utf-8"))
        except OSError:
            continue
        if m:
            out.setdefault(m.group(1).lower(), (name, m.group(1)))
    return out


def kvcalc_cache_dir() -> Path:
    """kvcalc's own cache: `KVCALC_CACHE`, else `$XDG_CACHE_HOME/kvcalc`, else `~/.cache/kvcalc`."""
    if os.environ.get("KVCALC_CACHE"):
        return Path(os.environ["KVCALC_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kvcalc"


def headers_cache_path(repo_id: str, commit: str) -> Path:
    """Where the safetensors headers of `repo_id` at `commit` are kept (`kvcalc_cache_dir`)."""
    return kvcalc_cache_dir() / "safetensors" / repo_id.replace("/", "--") / f"{commit}.json"


def save_headers(repo_id: str, commit: str, files: dict[str, JsonObject]) -> None:
    """Keep the headers ({file: safetensors header JSON}) for offline use; a cache that cannot be
    written is skipped (the next online run fetches them again)."""
    path = headers_cache_path(repo_id, commit)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"repo_id": repo_id, "commit": commit, "files": files}), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


def load_headers(repo_id: str, commit: str) -> Headers | None:
    """{file: tensors} kept by `save_headers` for this commit, None when there are none.

    Raises `ConfigError` naming the cache file when it is damaged."""
    from kvcalc.errors import ConfigError
    from kvcalc.load.checkpoint import parse_header
    from kvcalc.text import excerpt

    path = headers_cache_path(repo_id, commit)
    if not path.is_file():
        return None
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
        return {name: parse_header(h, f"{path} ({name})") for name, h in files.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise ConfigError(
            f"kvcalc's cached safetensors headers are damaged ({excerpt(str(e) or type(e).__name__, 120)}); "
            "delete the file",
            path=str(path),
        ) from None


def _hf() -> ModuleType:
    try:
        import huggingface_hub
    except ImportError:
        raise MissingExtraError("huggingface_hub", "hub") from None
    from huggingface_hub.utils import disable_progress_bars, logging

    disable_progress_bars()
    logging.set_verbosity_error()  # its retry notices are not kvcalc's output: a failure is one line
    return huggingface_hub


#: suffixes of fine-tuned or re-packaged variants of one base model (`-Instruct`, `-it`, `-FP8` ...)
_VARIANT = re.compile(r"(-(instruct|it|chat|base|hf|fp8|awq|gptq|int4|int8|bnb-4bit|\d{4}))+$")


def _near(repo_id: str) -> str:
    """'; or use the bundled 'x' (org/X)' for the closest bundled model, else '': the bundled
    model of the same base (`meta-llama/Llama-3.1-8B-Instruct` -> `meta-llama/Llama-3.1-8B`, variant
    suffixes dropped on both sides), else the closest spelling."""
    ids = bundled_hub_ids()
    base = _VARIANT.sub("", repo_id.lower())
    same = [k for k in ids if _VARIANT.sub("", k) == base]
    by_id = same[:1] or close_names(repo_id.lower(), list(ids), n=1)
    if by_id:
        name, shown = ids[by_id[0]]
        return f"; or use the bundled '{name}' ({shown})"
    short = close_names(repo_id.split("/")[-1].lower(), [n for n, _ in ids.values()], n=1)
    return f"; or use the bundled '{short[0]}'" if short else ""


def hub_error(e: BaseException, repo_id: str, revision: str | None) -> KvcalcError:
    """One line for an exception of `huggingface_hub` (gated, not found, bad revision, offline,
    no network, no config.json), naming the fix."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    at = f" at revision '{revision}'" if revision else ""
    if isinstance(e, GatedRepoError):
        return KvcalcError(
            f"{repo_id} is a gated repository on the Hugging Face Hub: accept its licence on "
            f"huggingface.co/{repo_id}, then set HF_TOKEN (or run `hf auth login`){_near(repo_id)}",
            form=MESSAGE,
        )
    if isinstance(e, RevisionNotFoundError):
        return KvcalcError(
            f"{repo_id} has no such revision on the Hugging Face Hub: give a branch, tag or commit "
            "hash that exists (default main)",
            option="--revision",
            value=revision,
        )
    if isinstance(e, RepositoryNotFoundError):
        return KvcalcError(
            f"{repo_id} is neither a local file nor a model repository on the Hugging Face Hub "
            f"(a private one needs HF_TOKEN){_near(repo_id)}",
            form=MESSAGE,
        )
    offline = isinstance(e, OfflineModeIsEnabled) or constants.is_offline_mode()
    if isinstance(e, (OfflineModeIsEnabled, LocalEntryNotFoundError)) and offline:
        return KvcalcError(
            f"{repo_id}{at} is not in the Hugging Face cache ({constants.HF_HUB_CACHE}) and "
            f"HF_HUB_OFFLINE is set: run once online (unset HF_HUB_OFFLINE) to cache its config.json"
            f"{_near(repo_id)}",
            form=MESSAGE,
        )
    if isinstance(e, EntryNotFoundError) and not isinstance(e, LocalEntryNotFoundError):
        return KvcalcError(
            f"{repo_id}{at} has no config.json on the Hugging Face Hub: kvcalc reads transformers "
            "checkpoints (for a GGUF repository, download the .gguf file and give its path)",
            form=MESSAGE,
        )
    if isinstance(e, HfHubHTTPError):
        status = getattr(getattr(e, "response", None), "status_code", None)
        return KvcalcError(
            f"the Hugging Face Hub answered {status or 'an error'} for {repo_id}{at}: {str(e).splitlines()[0][:160]}",
            form=MESSAGE,
        )
    return KvcalcError(
        f"cannot reach the Hugging Face Hub for {repo_id}{at} ({type(e).__name__}), and its config.json "
        f"is not in the cache ({constants.HF_HUB_CACHE}): check the network (or HF_ENDPOINT); to work "
        f"offline, set HF_HUB_OFFLINE=1 with the model in that cache, or give a local folder holding "
        f"its config.json{_near(repo_id)}",
        form=MESSAGE,
    )


def _hub_exceptions() -> tuple[type[BaseException], ...]:
    """What the client raises for the Hub's answers and the network's failures (its HTTP
    package: httpx2 in huggingface_hub 2.x, httpx in 1.x)."""
    from huggingface_hub.errors import EntryNotFoundError, HfHubHTTPError

    out: tuple[type[BaseException], ...] = (HfHubHTTPError, EntryNotFoundError, OSError, ConnectionError, TimeoutError)
    for http in ("httpx2", "httpx"):
        try:
            out += (__import__(http).HTTPError,)
        except (ImportError, AttributeError):
            pass
    return out


#: seconds the one reachability request may take before kvcalc says the Hub cannot be reached
#: (the client's own `HF_HUB_ETAG_TIMEOUT` wins when set)
PROBE_TIMEOUT_S = 5


def probe_timeout_s() -> float:
    """The reachability request's timeout: `HF_HUB_ETAG_TIMEOUT` when the environment sets it,
    else `PROBE_TIMEOUT_S`."""
    raw = os.environ.get("HF_HUB_ETAG_TIMEOUT", "").strip()
    try:
        return float(raw) if raw and float(raw) > 0 else PROBE_TIMEOUT_S
    except ValueError:
        return PROBE_TIMEOUT_S


def _probe(hf: ModuleType, repo_id: str, revision: str | None) -> None:
    """One HEAD request for the repo's config.json (`get_hf_file_metadata`, the client's own call,
    with its `retry_on_errors=False` default and a `probe_timeout_s` timeout) before
    `hf_hub_download`, which, when the first request fails on the network and nothing is cached,
    tries again through `http_backoff` (huggingface_hub 2.4 `file_download._hf_hub_download_to_cache_dir`:
    "No local file found. Retrying..", up to 5 retries, 1 + 2 + 4 + 8 + 8 s): about 24 s before
    a one-line answer with no network. The probe fails at once instead, raising what the client
    raises (a connection error, `GatedRepoError`, `RepositoryNotFoundError`, ...). Nothing is
    probed in offline mode (`hf_hub_download` refuses at once there)."""
    from huggingface_hub import constants

    if constants.is_offline_mode():
        return
    hf.get_hf_file_metadata(hf.hf_hub_url(repo_id, "config.json", revision=revision), timeout=probe_timeout_s())


def _cached_config(hf: ModuleType, repo_id: str, revision: str | None) -> str | None:
    """The cached config.json of the revision, else None (never the network)."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return hf.hf_hub_download(repo_id, "config.json", revision=revision, local_files_only=True)
    except LocalEntryNotFoundError:
        return None


def _fetch_headers(hf: ModuleType, repo_id: str, commit: str) -> tuple[Headers | None, str]:
    """The shards' safetensors headers at `commit`, fetched and kept (`save_headers`), and why
    not when there are none (a repo without safetensors, a failed fetch: a warning)."""
    from huggingface_hub.errors import NotASafetensorsRepoError

    try:
        meta = hf.get_safetensors_metadata(repo_id, revision=commit)
    except NotASafetensorsRepoError:
        return None, "the repository has no safetensors files"
    except _hub_exceptions() + (ValueError,) as e:
        warnings.warn(
            f"{repo_id}: could not read the safetensors headers ({type(e).__name__}); weights are counted "
            "from the architecture",
            KvcalcWarning,
            stacklevel=3,
        )
        return None, "the safetensors headers could not be read"
    raw: dict[str, JsonObject] = {
        name: {
            t: {"dtype": i.dtype, "shape": list(i.shape), "data_offsets": list(i.data_offsets)}
            for t, i in fm.tensors.items()
        }
        for name, fm in meta.files_metadata.items()
    }
    save_headers(repo_id, commit, raw)
    return load_headers(repo_id, commit) or _parsed(raw), ""


def _parsed(raw: dict[str, JsonObject]) -> Headers:
    from kvcalc.load.checkpoint import parse_header

    return {name: parse_header(h, name) for name, h in raw.items()}


def _snapshot_headers(snapshot: Path) -> Headers | None:
    """The headers of the safetensors files the Hub cache's snapshot folder itself holds (the
    shards its `model.safetensors.index.json` names, else every `*.safetensors`: downloaded
    with the weights by `hf download` or transformers), read as a local checkpoint folder's are
    (`checkpoint.local_headers`; the snapshot's files are links to `../../blobs/`); None when it
    holds none, or not every shard the index names (a config-only download: no warning then,
    the source says the weights are counted from the architecture).

    Raises `ConfigError` for a damaged header or index."""
    from kvcalc.load.checkpoint import local_headers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", KvcalcWarning)  # shards missing from a partial download are not news
        return local_headers(snapshot)


def _from_config(repo_id: str, config_path: str, *, where: str, files: Headers | None, missing: str) -> ModelSpec:
    from kvcalc.load.checkpoint import attach_checkpoint
    from kvcalc.load.files import build, read_mapping
    from kvcalc.load.hf import model_fields_from_hf_config

    commit = Path(config_path).parent.name
    shown = f"{repo_id}/config.json"
    data, _ = read_mapping(Path(config_path), "model")
    names: dict[str, str] = {}
    fields = model_fields_from_hf_config(data, path=shown, names=names)
    fields["name"] = repo_id.split("/")[-1].lower()
    fields["source"] = f"{repo_id} config.json ({where}, commit {commit[:12]})"
    fields["model_path"] = repo_id
    return build(ModelSpec, attach_checkpoint(fields, data, files, path=shown, missing=missing), shown, names=names)


def load_hub_model(ref: str, revision: str | None = None) -> ModelSpec:
    """A `ModelSpec` for a Hub id (`org/name`, `org/name@rev`; `revision` from --revision):
    from the Hub cache, else a bundled copy, else the Hub (see the module docstring).

    Raises `KvcalcError` (one line naming the fix) for every failure, `MissingExtraError` when
    huggingface_hub is not installed and no bundled copy answers."""
    parsed = parse_hub_id(ref)
    if parsed is None:
        raise KvcalcError(f"'{ref}' is not a Hugging Face Hub id (org/name)", form=MESSAGE)
    repo_id, at = parsed
    if revision and at and revision != at:
        raise KvcalcError(
            f"{ref} names revision {at}, --revision names {revision}; give one", option="--revision", value=revision
        )
    revision = revision or at
    # a revision the user names (even `main`, by --revision or `@main`) is read from the cache or
    # the Hub, never answered by the bundled copy, whose commit kvcalc does not know (issue 23
    # friction 10); the bundled copy stands in only for an id given without a revision
    bundled_name = bundled_hub_ids().get(repo_id.lower(), (None, None))[0] if revision is None else None
    try:
        hf = _hf()
    except MissingExtraError:
        if bundled_name:
            return _bundled(repo_id, bundled_name)
        raise
    cached = _cached_config(hf, repo_id, revision)
    if cached is not None:
        files = load_headers(repo_id, Path(cached).parent.name) or _snapshot_headers(Path(cached).parent)
        return _from_config(
            repo_id,
            cached,
            where="Hugging Face cache",
            files=files,
            missing="no safetensors headers cached for this commit",
        )
    if bundled_name:
        return _bundled(repo_id, bundled_name)
    try:
        _probe(hf, repo_id, revision)
        path = hf.hf_hub_download(repo_id, "config.json", revision=revision)
    except _hub_exceptions() as e:
        raise hub_error(e, repo_id, revision) from None
    files, missing = _fetch_headers(hf, repo_id, Path(path).parent.name)
    return _from_config(repo_id, path, where="Hugging Face Hub", files=files, missing=missing)


def _bundled(repo_id: str, name: str) -> ModelSpec:
    """The bundled config copied from `repo_id`, its source saying it is the bundled copy."""
    from kvcalc.load.files import build, bundled, read_mapping

    path = bundled("models")[name]
    data, lines = read_mapping(path, "model")  # a bundled config is kvcalc's own YAML
    spec = build(ModelSpec, data, str(path), lines)
    return spec.model_copy(
        update={"source": f"{repo_id} config.json, bundled copy '{name}' (the Hub was not contacted)"}
    )
