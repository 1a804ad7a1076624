"""Deployment files: a model on some GPUs at a context and a concurrency, with optional targets,
checked into a repo and verified by `kvcalc check` in CI.

```yaml
# configs/deployments/llama-3.1-70b-fp8-2xh100.yaml
model: llama-3.1-70b          # a bundled name, or a path relative to this file
gpu: h100-sxm                 # a key of `kvcalc gpus`, or a GPU YAML relative to this file
count: 2                      # GPUs in all = tp x pp x dp
tp: 2
pp: 1
kv_dtype: fp8
max_seq_len: 32768            # every sequence at this context (the worst case)
concurrency: 16               # sequences at once over all replicas
gpu_memory_utilization: 0.9
targets: {max_tpot_ms: 50, min_tokens_per_s: 300}
```
"""

from __future__ import annotations

from pathlib import Path

from kvcalc.errors import ConfigError, KvcalcError
from kvcalc.results import CheckRow
from kvcalc.schema import Deployment  # the input model (kvcalc.schema); `kvcalc schema` finds it here too

#: an error's field -> the deployment key it is reported against: the calc's `k_dtype` /
#: `v_dtype` are the file's `kv_dtype`.
FIELD_KEYS: dict[str, str] = {"k_dtype": "kv_dtype", "v_dtype": "kv_dtype"}
#: key -> the key whose line stands in when the key is not written: tp defaults from count; the
#: formats and everything else about the model default from the model's config.
FALLBACK_KEYS: dict[str, str] = {"tp": "count"}


def deployment_files(paths: list[str]) -> list[Path]:
    """The files named, and the *.yaml / *.yml in the folders named (sorted).

    Raises `ConfigError` for a path that does not exist or a folder with no YAML."""
    out: list[Path] = []
    for s in paths:
        p = Path(s).expanduser()
        if p.is_dir():
            found = sorted([*p.glob("*.yaml"), *p.glob("*.yml")])
            if not found:
                raise ConfigError("folder holds no .yaml deployment files", path=str(p))
            out += found
        elif p.exists():
            out.append(p)
        else:
            raise ConfigError("file not found", path=str(p))
    seen: set[Path] = set()
    return [f for f in out if not (f.resolve() in seen or seen.add(f.resolve()))]  # each file once


def _resolve(ref: str, base: Path) -> str:
    """A path-looking reference resolved against the deployment's folder; names unchanged."""
    looks = "/" in ref or "\\" in ref or ref.lower().endswith((".yaml", ".yml", ".json"))
    if looks and not Path(ref).expanduser().is_absolute():
        return str(base / ref)
    return ref


def load_deployment(path: Path):
    """(Deployment, ModelSpec, GpuSpec, key -> line) from one file; raises `ConfigError` naming the file, the
    line and the field (an unknown model or GPU name is reported against `model:` / `gpu:`)."""
    from kvcalc.load.gpus import get_gpu
    from kvcalc.load.files import build, read_mapping
    from kvcalc.load.models import load_model

    data, lines = read_mapping(path)
    dep = build(Deployment, data, str(path), lines)
    try:
        model = load_model(_resolve(dep.model, path.parent))
    except KvcalcError as e:
        raise ConfigError(str(e), path=str(path), field="model", line=lines.get("model")) from None
    try:
        gpu = get_gpu(_resolve(dep.gpu, path.parent))
    except KvcalcError as e:
        raise ConfigError(str(e), path=str(path), field="gpu", line=lines.get("gpu")) from None
    return dep, model, gpu, lines


def field_error(e: KvcalcError, path: Path, lines: dict[str, int]) -> ConfigError:
    """`e` reported against the deployment key its `field` names (`FIELD_KEYS`), at that key's
    line (else the line of `FALLBACK_KEYS`' stand-in, else of `model:`). An error about no key of
    the file (a field of the model's config, or none) is reported against `model`, which brought
    that config in."""
    key = FIELD_KEYS.get(e.field or "", e.field)
    if key not in Deployment.model_fields:
        key = "model"
    line = lines.get(key) or lines.get(FALLBACK_KEYS.get(key, "model"))
    return ConfigError(e.message, path=str(path), field=key, line=line, value=e.value)


def check_deployment(path: Path) -> CheckRow:
    """Load one deployment file and check it (`kvcalc.calc.check.check`). Raises `ConfigError`
    naming the file, the line and the field when the file is invalid, including a layout or a
    format the engines refuse (reported against the key of the error's `field`). Warns
    (`KvcalcWarning`) when `max_seq_len` is beyond the model's max_position_embeddings."""
    from kvcalc.calc.check import check

    dep, model, gpu, lines = load_deployment(path)
    try:
        row = check(dep, model, gpu, file=str(path))
    except KvcalcError as e:
        raise field_error(e, path, lines) from None
    if model.max_position_embeddings and dep.max_seq_len > model.max_position_embeddings:
        import warnings

        from kvcalc.errors import KvcalcWarning

        warnings.warn(str(ConfigError(
            f"{dep.max_seq_len:,} tokens is beyond {model.name}'s max_position_embeddings "
            f"({model.max_position_embeddings:,}); engines refuse a longer max_model_len",
            path=str(path), field="max_seq_len", line=lines.get("max_seq_len"))), KvcalcWarning, stacklevel=2)
    return row


def check_paths(paths: list[str]) -> tuple[list[CheckRow], list[str]]:
    """Check every deployment file under `paths`: (rows of the valid ones, one error line per
    invalid one). Raises `ConfigError` only when a path itself does not exist."""
    rows, errors = [], []
    for f in deployment_files(paths):
        try:
            rows.append(check_deployment(f))
        except KvcalcError as e:
            errors += str(e).splitlines()
    return rows, errors


def exit_code(rows: list[CheckRow], errors: list[str]) -> int:
    """2 when any file is invalid, else 1 when any deployment does not fit or misses a target,
    else 0."""
    if errors:
        return 2
    return 0 if all(r.status == "ok" for r in rows) else 1
