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
engine: vllm                  # whose KV arithmetic sizes it (default: the exact formula)
engine_options: {version: '0.33', block_size: 16}   # as `kvcalc plan` took them
targets: {max_tpot_ms: 50, min_tokens_per_s: 300}
```

A folder may also hold the GPU files its deployments use (a GPU row as `--gpu FILE` takes it:
`name`, `memory_bytes`, `hbm_bytes_per_s`, ...): `gpu: my-gpu` then names the file `my-gpu.yaml`
(or its `key:`). Each file's kind is read from its keys (`file_kind`), or from `kind: deployment`
/ `kind: gpu` when given.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from kvcalc.errors import ConfigError, KvcalcError
from kvcalc.load.models import user_path  # `~` expanded only when it names a home
from kvcalc.results import CheckRow
from kvcalc.schema import Deployment  # the input model (kvcalc.schema); `kvcalc schema` finds it here too

if TYPE_CHECKING:
    from collections.abc import Callable

    from pydantic import BaseModel

    from kvcalc.calc.plan import EngineKv, KvPick
    from kvcalc.calc.speculative import SpecDecode
    from kvcalc.formats import StorageFormat
    from kvcalc.json_types import JsonObject
    from kvcalc.requests import EngineOptions
    from kvcalc.schema import GpuSpec, ModelSpec

    #: the GPU files beside a deployment by key (`folder_gpus`): each a GPU, or why it did not load
    LocalGpus = dict[str, GpuSpec | KvcalcError]
    #: `kvcalc plan`'s per-GPU KV arithmetic (`calc.plan.PlanSearch.engine_kv`)
    EngineKvOf = Callable[[GpuSpec, int, tuple[range, ...], tuple[StorageFormat, StorageFormat]], EngineKv]

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
        p = user_path(s)
        if p.is_dir():
            found = sorted([*p.glob("*.yaml"), *p.glob("*.yml")])
            if not found:
                raise ConfigError("folder holds no .yaml deployment files", path=str(p))
            out += found
        elif p.exists():
            out.append(p)
        else:
            raise ConfigError("file not found", path=str(p))
    once: dict[Path, Path] = {}  # each file once (by its resolved path), in the order found
    for f in out:
        once.setdefault(f.resolve(), f)
    return list(once.values())


#: the kinds a file in a `kvcalc check` folder may be (`kind:` in the file, or read from its keys).
KINDS = ("deployment", "gpu", "model")


@cache
def _kind_keys() -> dict[str, frozenset[str]]:
    """kind -> the keys that mark a file as that kind: a deployment's own fields (all but
    `name` / `description`, which every kind may have); a GPU row's fields (but `name`, `key`,
    `source`) and the spellings `FIELD_HINTS` maps to them (`memory:` is a GPU row with a
    misspelt field, not an unknown file); a model config's fields and their HF spellings."""
    from kvcalc.load.files import FIELD_HINTS
    from kvcalc.schema import GpuSpec, ModelSpec

    common = {"name", "description", "source", "key"}
    gpu = set(GpuSpec.model_fields) - common
    model = set(ModelSpec.model_fields) - common
    return {
        "deployment": frozenset(set(Deployment.model_fields) - common),
        "gpu": frozenset(gpu | {k for k, v in FIELD_HINTS.items() if v in gpu}),
        "model": frozenset(model | {k for k, v in FIELD_HINTS.items() if v in model}),
    }


def file_kind(data: JsonObject, path: Path, lines: dict[str, int] | None = None) -> str | None:
    """What a config file holds: its `kind:` when given (deployment, gpu or model), else
    "deployment" when it has any deployment key (`model`, `gpu`, `max_seq_len`, ...: a file
    with a misspelt field is still a deployment, reported as such), else "gpu" for a GPU row's
    keys (`memory_bytes`, `hbm_bytes_per_s`, ...), else "model" for a model config's, else None.

    Raises `ConfigError` for a `kind:` that is none of those."""
    if "kind" in data:
        kind = str(data["kind"]).strip().lower()
        if kind not in KINDS:
            raise ConfigError(
                f"unknown kind '{data['kind']}'; use one of: {', '.join(KINDS)}",
                path=str(path),
                field="kind",
                line=(lines or {}).get("kind"),
            )
        return kind
    keys = {str(k) for k in data}
    for kind, marks in _kind_keys().items():
        if keys & marks:
            return kind
    return None


def folder_gpus(folder: Path) -> LocalGpus:
    """The GPU files of `folder` by normalized key (the file's `key:`, else its stem): each a
    `GpuSpec`, or the `KvcalcError` that loading it raised (raised again when a deployment
    names it). A key defined by two files maps to an error naming both."""
    from kvcalc.load.files import read_mapping
    from kvcalc.load.gpus import gpu_from_mapping, normalize_key

    out: LocalGpus = {}
    where: dict[str, Path] = {}
    for f in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        try:
            data, lines = read_mapping(f)
            if file_kind(data, f, lines) != "gpu":
                continue
        except KvcalcError:
            continue  # reported when the file itself is checked
        key = normalize_key(str(data.get("key", f.stem)))
        if key in out:
            out[key] = ConfigError(
                f"GPU '{key}' is defined twice in {folder}: {where[key].name} and {f.name}",
                path=str(f),
                field="key",
                line=lines.get("key"),
            )
            continue
        where[key] = f
        try:
            out[key] = gpu_from_mapping(data, f, lines)
        except KvcalcError as e:
            out[key] = e
    return out


def _resolve(ref: str, base: Path) -> str:
    """A path-looking reference resolved against the deployment's folder; names unchanged."""
    looks = "/" in ref or "\\" in ref or ref.lower().endswith((".yaml", ".yml", ".json"))
    if looks and not user_path(ref).is_absolute():
        return str(base / ref)
    return ref


def load_deployment(path: Path, gpus: LocalGpus | None = None) -> tuple[Deployment, ModelSpec, GpuSpec, dict[str, int]]:
    """(Deployment, ModelSpec, GpuSpec, key -> line) from one file; raises `ConfigError` naming the file, the
    line and the field (an unknown model or GPU name is reported against `model:` / `gpu:`). `gpus`: the GPU
    files beside it (`folder_gpus`), named before the bundled table; `kind: deployment` is allowed."""
    from kvcalc.load.files import build, read_mapping
    from kvcalc.load.gpus import get_gpu
    from kvcalc.load.models import load_model

    data, lines = read_mapping(path, "deployment")
    if str(data.get("kind", "deployment")).strip().lower() == "deployment":
        data = {k: v for k, v in data.items() if k != "kind"}
    dep = build(Deployment, data, str(path), lines, first_only=True)  # one line: the first bad field
    try:
        model = load_model(_resolve(dep.model, path.parent))
    except KvcalcError as e:
        raise ConfigError(
            str(e) if isinstance(e, ConfigError) else e.message, path=str(path), field="model", line=lines.get("model")
        ) from None
    try:
        gpu = get_gpu(_resolve(dep.gpu, path.parent), local=gpus)
    except KvcalcError as e:
        raise ConfigError(
            str(e) if isinstance(e, ConfigError) else e.message, path=str(path), field="gpu", line=lines.get("gpu")
        ) from None
    return dep, model, gpu, lines


#: engine options a deployment does not record: each GPU row gives them (the compute capability
#: and vendor that pick vLLM's attention backend), the KV dtype does (vLLM's per-token-head
#: scales), or the layout does (llama.cpp's devices and their split)
DERIVED_OPTIONS = frozenset({"compute_capability", "vendor", "per_token_head_scales", "n_devices", "tensor_split"})


@cache
def _options_model(options_cls: type) -> type[BaseModel]:
    """A pydantic model of the engine options a deployment may record (`options_cls`'s fields
    less `DERIVED_OPTIONS`), strict (`block_size: "32"` or `true` is no count) and closed (an
    unknown key is named, with the near one), wrapped as the file's `engine_options:` key so
    errors name it."""
    import dataclasses
    import typing

    from pydantic import ConfigDict, create_model

    hints = typing.get_type_hints(options_cls)
    fields = {
        f.name: (hints[f.name], f.default) for f in dataclasses.fields(options_cls) if f.name not in DERIVED_OPTIONS
    }
    # mypy matches **fields against every keyword of create_model (__doc__, __base__, ...), not
    # only **field_definitions, so no dict of field definitions type-checks here
    inner = create_model(
        f"{options_cls.__name__}InDeployment",  # type: ignore[call-overload]
        __config__=ConfigDict(strict=True, extra="forbid", frozen=True),
        **fields,
    )
    return create_model("DeploymentEngineOptions", __config__=ConfigDict(extra="forbid"), engine_options=(inner, ...))


def recorded_options(options: EngineOptions | None) -> JsonObject:
    """The engine options (`VllmOptions`, `SglangOptions`, `LlamacppOptions`) a deployment file
    records: `version` always (the release the figures are for), every other option a
    deployment may hold where it differs from that version's default. `{}` for the exact formula."""
    import dataclasses

    if options is None or not dataclasses.is_dataclass(options) or isinstance(options, type):
        return {}
    version = getattr(options, "version", None)
    plain = type(options)(**({"version": version} if version is not None else {}))  # the version's defaults
    out: JsonObject = {}
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if f.name in DERIVED_OPTIONS or f.name == "v0":  # v0: the same as version '0.6'
            continue
        if f.name == "version" or value != getattr(plain, f.name):
            out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


def engine_kv_of(
    dep: Deployment,
    model: ModelSpec,
    path: str = "deployment",
    lines: dict[str, int] | None = None,
    gpu: GpuSpec | None = None,
) -> tuple[str, EngineKvOf | None, KvPick | None]:
    """(engine name, its per-GPU KV arithmetic or None) for a deployment: the file's `engine:`
    and `engine_options:` resolved as `kvcalc plan` resolves `--engine` and its flags
    (`EngineProfile.options`, `plan_engine_kv`), so `kvcalc check` sizes the file as plan did.
    No `engine:` is the exact formula ("ideal", None). The third: the file's `kv_dtype` as the
    engine parsed it on `gpu` (`requests.plan_kv_picks`, the one parse `kvcalc plan` makes of a
    `--kv-dtype`), from the name as the file spells it (`Deployment.kv_dtype_given`): vLLM's own
    names (`turboquant_k8v4`, `fp8_per_token_head` ...) and its spellings of one format that pick
    other backends (`fp8` and `fp8_e4m3` on sparse MLA) are sized as plan sized them. None
    without a `kv_dtype` or a GPU.

    Raises `ConfigError` against `engine` (an unknown engine, or one that cannot serve the
    model) or `engine_options` (options without an engine, an unknown option, a value of the
    wrong type, a version the engine does not model)."""
    from pydantic import ValidationError

    from kvcalc.load.files import validation_error

    lines = lines or {}
    if dep.engine is None:
        if dep.engine_options:
            raise ConfigError(
                "engine options without an engine: add engine: (vllm, sglang, llamacpp)",
                path=path,
                field="engine_options",
                line=lines.get("engine_options"),
            )
        return "ideal", None, None
    from kvcalc.engines.profile import get_profile
    from kvcalc.requests import check_option_bounds

    try:
        prof = get_profile(dep.engine)
    except KvcalcError as e:
        raise ConfigError(e.message, path=path, field="engine", line=lines.get("engine"), value=dep.engine) from None
    options_type: type = prof.options_type  # a class is hashable (`_options_model` is cached)
    wrapper = _options_model(options_type)
    try:
        # `engine_options`: the one field of the model built at run time (`_options_model`)
        wrapped = wrapper.model_validate({"engine_options": dep.engine_options or {}})
        given: BaseModel = getattr(wrapped, "engine_options")  # noqa: B009  (typed: BaseModel has no such field)
        opts = prof.options(prof.options_type(**given.model_dump(exclude_unset=True)))
        check_option_bounds(opts)
        prof.check_options(opts)
    except ValidationError as e:
        raise validation_error(e, wrapper, path, lines, first_only=True) from None
    except KvcalcError as e:
        raise ConfigError(
            e.message, path=path, field="engine_options", line=lines.get("engine_options"), value=e.value
        ) from None
    from kvcalc.requests import refuse_engine_model

    try:
        refuse_engine_model(prof, model, opts)  # the release's own refusals, as plan makes them
    except KvcalcError as e:
        raise ConfigError(e.message, path=path, field="engine", line=lines.get("engine"), value=dep.engine) from None
    kv: KvPick | None = None
    kv_options: dict[str, EngineOptions] = {}
    if dep.kv_dtype_given is not None and gpu is not None:
        from kvcalc.calc.plan import GpuChoice
        from kvcalc.requests import plan_kv_picks

        try:
            picks, kv_options, _ = plan_kv_picks(prof, model, opts, [dep.kv_dtype_given], [GpuChoice((gpu,))])
        except KvcalcError as e:
            raise ConfigError(
                e.message, path=path, field="kv_dtype", line=lines.get("kv_dtype"), value=dep.kv_dtype_given
            ) from None
        kv = picks[0]
    return prof.name, prof.plan_engine_kv(model, opts, kv_options), kv


def speculative_of(
    dep: Deployment, model: ModelSpec, path: Path, lines: dict[str, int] | None = None
) -> SpecDecode | None:
    """The deployment's `speculative:` as a `calc.speculative.SpecDecode` (None without one), its
    draft `model` loaded (a path resolved against the folder of the file at `path`), checked
    against the model (`SpecDecode.check`). Raises `ConfigError` against `speculative`."""
    if dep.speculative is None:
        return None
    from kvcalc.calc.speculative import SpecDecode
    from kvcalc.load.models import load_model

    s, lines = dep.speculative, lines or {}
    try:
        draft = load_model(_resolve(s.model, path.parent)) if s.model else None
        sd = SpecDecode(s.method, s.num_speculative_tokens, s.accepted, draft, s.model)
        sd.check(model)
    except KvcalcError as e:
        msg = str(e) if isinstance(e, ConfigError) else e.message
        raise ConfigError(msg, path=str(path), field="speculative", line=lines.get("speculative")) from None
    return sd


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


def check_deployment(path: Path, gpus: LocalGpus | None = None) -> CheckRow:
    """Load one deployment file and check it (`kvcalc.calc.check.check`). Raises `ConfigError`
    naming the file, the line and the field when the file is invalid, including a layout or a
    format the engines refuse (reported against the key of the error's `field`). Warns
    (`KvcalcWarning`) when `max_seq_len` is beyond the model's context limit (`ModelSpec.context_limit`). `gpus`: the
    GPU files beside it (`folder_gpus`; read from the file's folder when None)."""
    from kvcalc.calc.check import check

    dep, model, gpu, lines = load_deployment(path, folder_gpus(path.parent) if gpus is None else gpus)
    engine, engine_kv, kv = engine_kv_of(dep, model, str(path), lines, gpu)
    sd = speculative_of(dep, model, path, lines)
    try:
        from kvcalc.requests import speed_terms

        speed = speed_terms(gpu, engine, dep.resolved_tp)  # plan's and estimate's terms
        row = check(
            dep, model, gpu, file=str(path), engine_kv=engine_kv, engine=engine, speed=speed, speculative=sd, kv=kv
        )
        if dep.offload is not None:  # the tier below the GPU against the host (kvcalc.offload_request)
            from kvcalc.offload_request import check_offload

            row = check_offload(dep, model, gpu, row)
    except KvcalcError as e:
        raise field_error(e, path, lines) from None
    if model.context_limit and dep.max_seq_len > model.context_limit:
        import warnings

        from kvcalc.errors import KvcalcWarning

        warnings.warn(
            str(
                ConfigError(
                    f"{dep.max_seq_len:,} tokens is beyond {model.name}'s {model.context_limit_label}; engines refuse a longer max_model_len",
                    path=str(path),
                    field="max_seq_len",
                    line=lines.get("max_seq_len"),
                )
            ),
            KvcalcWarning,
            stacklevel=2,
        )
    return row


def check_paths(paths: list[str]) -> tuple[list[CheckRow], list[str]]:
    """Check every deployment file under `paths`: (rows of the valid ones, one error line per
    problem). The GPU files among them are loaded (an invalid one is an error line) and named by
    the deployments of their folder; model configs are skipped; a file found in a folder that is
    none of these is skipped with a warning, while a file named on its own is checked as a
    deployment. Raises `ConfigError` when a path does not exist or no deployment is found."""
    import warnings

    from kvcalc.errors import KvcalcWarning
    from kvcalc.load.files import read_mapping
    from kvcalc.load.gpus import normalize_key

    named = {user_path(s).resolve() for s in paths if not user_path(s).is_dir()}
    folders: dict[Path, LocalGpus] = {}
    rows: list[CheckRow] = []
    errors: list[str] = []
    n_deployments = 0
    for f in deployment_files(paths):
        try:
            data, lines = read_mapping(f)
            kind = file_kind(data, f, lines)
        except KvcalcError as e:
            errors += str(e).splitlines()
            continue
        if kind is None and f.resolve() in named:
            kind = "deployment"
        if f.parent not in folders:
            folders[f.parent] = folder_gpus(f.parent)
        if kind == "gpu":
            hit = folders[f.parent].get(normalize_key(str(data.get("key", f.stem))))
            if isinstance(hit, KvcalcError):
                errors += str(hit).splitlines()
            continue
        if kind == "model":
            continue
        if kind is None:
            warnings.warn(
                str(
                    ConfigError(
                        "neither a deployment (model:, gpu:, max_seq_len:) nor a GPU file (memory_bytes:, hbm_bytes_per_s:, "
                        "...); skipped (set kind: deployment or kind: gpu)",
                        path=str(f),
                    )
                ),
                KvcalcWarning,
                stacklevel=2,
            )
            continue
        n_deployments += 1
        try:
            rows.append(check_deployment(f, folders[f.parent]))
        except KvcalcError as e:
            errors += str(e).splitlines()
    if not n_deployments and not errors:
        raise ConfigError(
            "holds no deployment file (one with model:, gpu: and max_seq_len:, or kind: deployment)",
            path=", ".join(paths),
        )
    return rows, list(dict.fromkeys(errors))


def exit_code(rows: list[CheckRow], errors: list[str]) -> int:
    """2 when any file is invalid, else 1 when any deployment does not fit or misses a target,
    else 0."""
    if errors:
        return 2
    return 0 if all(r.status == "ok" for r in rows) else 1
