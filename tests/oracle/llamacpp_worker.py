"""Runs llama.cpp (through llama-cpp-python's low-level API) for the oracle tests, in its own
process: a failed `GGML_ASSERT` aborts the process, not the test session.

    python llamacpp_worker.py JOB.json OUT.json

JOB: {"geometry": NAME (in `llamacpp_geometries.GEOMETRIES`), "workdir": DIR, "cases": [CASE...]}.
The worker learns the tensor table llama.cpp wants (`llamacpp_gguf.discover_tensors`, cached in
DIR as NAME.tensors.json), writes DIR/NAME.gguf, loads it once (mmap, CPU, no weight repacking)
and creates one context per CASE, capturing every log line llama.cpp prints meanwhile
(`llama_log_set`). A CASE is {"id", "n_ctx", "n_batch", "n_ubatch", "n_seq_max", "type_k",
"type_v", "flash_attn" ("on"/"off"/"auto"), "swa_full", "kv_unified"}.

OUT: {"gguf": path, "llama_cpp_python": version, "system_info": ..., "row_bytes": {type: {n:
ggml_row_size}}, "results": [{"id", "ok", "lines"}...]}.

Two llama-cpp-python releases are driven (`LEGACY` tells which is installed): 0.3.36 (kvcalc's
"current" llama.cpp) and 0.3.8 (llama.cpp 7841fc7, March 2025: kvcalc's "legacy", the "KV self
size" era). 0.3.8's API is the older one: `llama_model_params` has `use_mmap` (no `load_mode`,
no `use_extra_bufts`), `llama_context_params` a `flash_attn` bool (no `flash_attn_type`) and
no `swa_full` / `kv_unified`; a case asking 0.3.8 for those is an error of the grid.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import llama_cpp as L
from llamacpp_geometries import GEOMETRIES
from llamacpp_gguf import GGML_TYPES, discover_tensors, write_gguf

FLASH_ATTN = {"auto": -1, "off": 0, "on": 1}  # include/llama.h enum llama_flash_attn_type
LOAD_MODE_MMAP = 1  # include/llama.h enum llama_load_mode
#: the llama-cpp-python releases whose llama.cpp is kvcalc's "legacy" one (the older API above)
LEGACY_RELEASES = ("0.3.8",)
LEGACY = L.__version__ in LEGACY_RELEASES

#: ggml/include/ggml.h enum ggml_log_level
LOG_DEBUG, LOG_CONT = 1, 5

VERBOSE = os.environ.get("ORACLE_VERBOSE") == "1"
_chunks: list[str] = []
_last_level = [0]


@L.llama_log_callback
def _log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    """Keep what llama.cpp logs at INFO and above (a CONT piece continues its line's level)."""
    if level != LOG_CONT:
        _last_level[0] = level
    if _last_level[0] != LOG_DEBUG:
        _chunks.append(text.decode("utf-8", "replace"))
        if VERBOSE:  # ORACLE_VERBOSE=1: echo the log as it comes (a crash leaves no OUT)
            sys.stderr.write(_chunks[-1])


def _take_lines() -> list[str]:
    """The log since the last call, as lines (llama.cpp may log one line in several pieces)."""
    text = "".join(_chunks)
    _chunks.clear()
    return text.splitlines()


def _set(params: ctypes.Structure, **values) -> None:
    """Set fields of a ctypes struct, refusing a name the struct lacks (ctypes would silently
    make it a plain Python attribute, and llama.cpp would never see it)."""
    names = {f[0] for f in type(params)._fields_}
    for name, value in values.items():
        if name not in names:
            raise SystemExit(f"llama-cpp-python's {type(params).__name__} has no field {name!r}")
        setattr(params, name, value)


def load(path: Path):
    """The model at `path` (mmap, no extra buffer types: the weights are never read), or None."""
    mp = L.llama_model_default_params()
    if LEGACY:  # 0.3.8: mmap by a bool; no extra buffer types (no weight repacking) to turn off
        _set(mp, use_mmap=True, check_tensors=False)
    else:
        _set(mp, load_mode=LOAD_MODE_MMAP, use_extra_bufts=False, check_tensors=False)
    return L.llama_model_load_from_file(str(path).encode(), mp) or None


def try_load(path: Path) -> tuple[bool, list[str]]:
    _take_lines()
    model = load(path)
    if model:
        L.llama_model_free(model)
    return model is not None, _take_lines()


def run_case(model, case: dict) -> dict:
    cp = L.llama_context_default_params()
    _set(
        cp,
        n_ctx=case["n_ctx"],
        n_batch=case["n_batch"],
        n_ubatch=case["n_ubatch"],
        n_seq_max=case["n_seq_max"],
        type_k=GGML_TYPES[case["type_k"]],
        type_v=GGML_TYPES[case["type_v"]],
        n_threads=1,
        n_threads_batch=1,
    )
    if LEGACY:  # flash attention a switch; one unified cache, no SWA cache: nothing else to set
        if case["flash_attn"] == "auto" or case["swa_full"] or case["kv_unified"]:
            raise SystemExit(f"case {case['id']}: llama.cpp 0.3.8 has no -fa auto, --swa-full or -kvu")
        _set(cp, flash_attn=case["flash_attn"] == "on")
    else:
        _set(
            cp, flash_attn_type=FLASH_ATTN[case["flash_attn"]], swa_full=case["swa_full"], kv_unified=case["kv_unified"]
        )
    _take_lines()
    ctx = L.llama_init_from_model(model, cp)
    ok = bool(ctx)
    if ok:
        L.llama_free(ctx)
    return {"id": case["id"], "ok": ok, "lines": _take_lines()}


def row_bytes(types: list[str], widths: list[int]) -> dict[str, dict[str, int]]:
    """ggml_row_size(type, n) from the library itself, for the exact bytes of a KV row."""
    lib_dir = Path(L.__file__).parent / "lib"
    base = ctypes.CDLL(str(next(lib_dir.glob("libggml-base.so*"))))
    base.ggml_row_size.restype = ctypes.c_size_t
    base.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]
    return {t: {str(n): int(base.ggml_row_size(GGML_TYPES[t], n)) for n in widths} for t in types}


def main(job_path: str, out_path: str) -> None:
    job = json.loads(Path(job_path).read_text())
    geo = GEOMETRIES[job["geometry"]]
    workdir = Path(job["workdir"])
    L.llama_log_set(_log, ctypes.c_void_p())
    L.llama_backend_init()
    cache = workdir / f"{geo.name}.tensors.json"
    if cache.is_file():
        tensors = {k: tuple(v) for k, v in json.loads(cache.read_text()).items()}
    else:
        tensors = discover_tensors(geo, workdir, try_load)
        cache.write_text(json.dumps(tensors))
    path = write_gguf(workdir / f"{geo.name}.gguf", geo, tensors)
    _take_lines()
    model = load(path)
    if not model:
        raise SystemExit(f"{geo.name}: llama.cpp does not load {path}:\n" + "\n".join(_take_lines()[-20:]))
    load_lines = _take_lines()
    results = [run_case(model, case) for case in job["cases"]]
    L.llama_model_free(model)
    out = {
        "gguf": str(path),
        "llama_cpp_python": L.__version__,
        "system_info": L.llama_print_system_info().decode(),
        "load_lines": load_lines,
        # f32 always: the recurrent state's type whatever the cases ask for
        "row_bytes": row_bytes(
            sorted({c["type_k"] for c in job["cases"]} | {c["type_v"] for c in job["cases"]} | {"f32"}),
            job.get("widths", []),
        ),
        "results": results,
    }
    Path(out_path).write_text(json.dumps(out))
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: llama.cpp's static destructors are not needed


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
