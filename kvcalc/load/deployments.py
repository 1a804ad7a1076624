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
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from kvcalc.errors import ConfigError, KvcalcError
from kvcalc.schema import _Frozen  # frozen, extra="forbid": the one base of every config model
from kvcalc.units import MAX_CONCURRENCY, MAX_SEQ_LEN  # shared with the CLI's --batch / --seq-len checks


#: Bounds past which the arithmetic stops meaning anything (and float formatting turns to
#: garbage): no deployment has more GPUs, sequences or tokens per sequence than these.
MAX_GPUS = 100_000

# strict: YAML `true` or `1.5` is not a count (pydantic's lax mode would read true as 1)
Count = Annotated[int, Field(strict=True, gt=0, le=MAX_GPUS)]
# strict floats still take YAML ints (50 -> 50.0) but not booleans or strings; never inf / nan
Positive = Annotated[float, Field(strict=True, gt=0, le=1e12, allow_inf_nan=False)]


class Targets(_Frozen):
    """Service targets: the slowest acceptable time per output token (ms) and the least total
    output tokens/s over the whole deployment."""

    max_tpot_ms: Positive | None = None
    min_tokens_per_s: Positive | None = None


class Deployment(_Frozen):
    """One deployment. `tp` defaults to count / pp; dp = count / (tp x pp) replicas share the
    `concurrency` sequences of `max_seq_len` tokens: some hold ceil(concurrency / dp), the rest
    floor (`plan.Planner.split_decode`)."""

    name: str | None = None
    description: str | None = None
    model: str = Field(min_length=1)
    gpu: str = Field(min_length=1)
    count: Count = 1
    tp: Count | None = None
    pp: Count = 1
    kv_dtype: str | None = None
    weight_dtype: str | None = None
    max_seq_len: Annotated[int, Field(strict=True, gt=0, le=MAX_SEQ_LEN)]
    concurrency: Annotated[int, Field(strict=True, gt=0, le=MAX_CONCURRENCY)] = 1
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1, strict=True, allow_inf_nan=False)
    targets: Targets | None = None

    @field_validator("kv_dtype", "weight_dtype")
    @classmethod
    def _fmt(cls, v: str | None, info) -> str | None:
        if v is None:
            return v
        from kvcalc.formats import kv_format, weight_format

        try:
            return (kv_format if info.field_name == "kv_dtype" else weight_format)(v).name
        except KvcalcError as e:
            raise ValueError(str(e)) from None

    @model_validator(mode="after")
    def _layout(self) -> Deployment:
        tp = self.tp or self.count // self.pp
        if tp < 1 or self.count % (tp * self.pp):
            raise ValueError(f"count ({self.count}) must be a multiple of tp x pp ({tp} x {self.pp})")
        return self

    @property
    def resolved_tp(self) -> int:
        """tp, else count // pp."""
        return self.tp or self.count // self.pp

    @property
    def dp(self) -> int:
        """Replicas: count // (tp x pp)."""
        return self.count // (self.resolved_tp * self.pp)

    @property
    def batch_per_replica(self) -> int:
        """ceil(concurrency / dp): the fullest replica's sequences."""
        return -(-self.concurrency // self.dp)


class CheckRow(_Frozen):
    """One checked deployment: its memory per GPU against the budget, the roofline decode at
    its worst case (every sequence at max_seq_len), and what, if anything, fails."""

    file: str
    name: str
    model: str
    gpu: str
    count: int
    tp: int
    pp: int
    dp: int
    kv_dtype: str
    weight_dtype: str
    max_seq_len: int
    concurrency: int
    memory_bytes_per_gpu: int
    budget_bytes_per_gpu: int
    headroom_bytes: int
    fits: bool
    max_concurrency: int
    tpot_ms: float
    tokens_per_s: float
    max_tpot_ms: float | None
    min_tokens_per_s: float | None
    meets_targets: bool
    status: Literal["ok", "does not fit", "misses target"]
    problems: list[str]


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


def _field_error(e: KvcalcError, path: Path, lines: dict[str, int], field: str,
                 fallback: str | None = None) -> ConfigError:
    """`e` reported against `field` of the deployment file (its line, else `fallback`'s line),
    without the CLI option prefix the engine gives it (`--tp 3: `)."""
    import re

    msg = re.sub(r"^--[a-z-]+ [^:]+: ", "", str(e))
    return ConfigError(msg, path=str(path), field=field, line=lines.get(field) or lines.get(fallback or ""))


def check_deployment(path: Path) -> CheckRow:
    """Load, plan and roofline one deployment file. Raises `ConfigError` when the file is
    invalid, including a layout the engines refuse (reported against `tp`)."""
    from kvcalc.calc.memory_plan import Layout, Planner

    dep, model, gpu, lines = load_deployment(path)
    kv = dep.kv_dtype or model.dtype
    layout = Layout(tp=dep.resolved_tp, pp=dep.pp, dp=dep.dp, weight_dtype=dep.weight_dtype, k_dtype=kv,
                    gpu_memory_utilization=dep.gpu_memory_utilization)
    from kvcalc.calc import kv_cache

    try:
        kv_cache.check_tp(model, dep.resolved_tp)
    except KvcalcError as e:
        raise _field_error(e, path, lines, "tp", "count") from None
    try:
        planner = Planner(model, gpu, layout)
    except KvcalcError as e:
        m = str(e)
        field = ("model" if "cannot count parameters" in m else "weight_dtype" if "weight" in m
                 else "kv_dtype")
        raise _field_error(e, path, lines, field, "model") from None
    if model.max_position_embeddings and dep.max_seq_len > model.max_position_embeddings:
        import warnings

        from kvcalc.errors import KvcalcWarning

        warnings.warn(str(ConfigError(
            f"{dep.max_seq_len:,} tokens is beyond {model.name}'s max_position_embeddings "
            f"({model.max_position_embeddings:,}); engines refuse a longer max_model_len",
            path=str(path), field="max_seq_len", line=lines.get("max_seq_len"))), KvcalcWarning, stacklevel=2)
    B, T = dep.batch_per_replica, dep.max_seq_len
    used = max(planner.stage_used_bytes(T, B))
    step, tok_s = planner.split_decode(T, dep.concurrency)
    tpot_ms = step.step_time_s * 1e3
    fits = used <= planner.budget
    t = dep.targets or Targets()
    missed = []
    if t.max_tpot_ms is not None and tpot_ms > t.max_tpot_ms:
        missed.append(f"TPOT {tpot_ms:,.2f} ms > max_tpot_ms {t.max_tpot_ms:g}")
    if t.min_tokens_per_s is not None and tok_s < t.min_tokens_per_s:
        missed.append(f"{tok_s:,.0f} tokens/s < min_tokens_per_s {t.min_tokens_per_s:g}")
    problems = [] if fits else [
        f"needs {used / 2**30:,.2f} GiB per GPU > budget {planner.budget / 2**30:,.2f} GiB "
        f"({dep.gpu_memory_utilization:g} x {gpu.memory_bytes / 2**30:,.2f} GiB); "
        f"at most {planner.max_batch(T) * dep.dp} sequences fit"]
    problems += missed
    meets = not missed
    status = "does not fit" if not fits else ("ok" if meets else "misses target")
    return CheckRow(
        file=str(path), name=dep.name or path.stem, model=model.name, gpu=gpu.key, count=dep.count,
        tp=dep.resolved_tp, pp=dep.pp, dp=dep.dp, kv_dtype=planner.kv_dtype,
        weight_dtype=planner.weight_dtype, max_seq_len=T, concurrency=dep.concurrency,
        memory_bytes_per_gpu=used, budget_bytes_per_gpu=planner.budget, headroom_bytes=planner.budget - used,
        fits=fits, max_concurrency=planner.max_batch(T) * dep.dp, tpot_ms=tpot_ms, tokens_per_s=tok_s,
        max_tpot_ms=t.max_tpot_ms, min_tokens_per_s=t.min_tokens_per_s, meets_targets=meets,
        status=status, problems=problems)


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
