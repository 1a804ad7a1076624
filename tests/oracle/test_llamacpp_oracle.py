"""llama.cpp itself as the test of kvcalc's llama.cpp profile (`kvcalc/engines/llamacpp.py`,
version "current" = the llama.cpp vendored by llama-cpp-python 0.3.36; version "legacy" = the one
vendored by llama-cpp-python 0.3.8, llama.cpp 7841fc7 of March 2025, when that release is the one
installed: `LEGACY`, its own grid `LEGACY_GRID` and its own log lines).

For each geometry of `llamacpp_geometries` a worker process (`llamacpp_worker.py`) writes a tiny
GGUF file (`llamacpp_gguf.py`: real KV geometry, no tensor data), loads it with llama.cpp and
creates a context for every case of the grid below, capturing llama.cpp's log. Each case is then
held against `llamacpp.allocate` with the same options, as llama.cpp's own library defaults take
them (`tool="library"`, everything given explicitly, CPU: `n_gpu_layers=0`):

- every `llama_kv_cache`, `llama_kv_cache_iswa` and `llama_memory_recurrent` line must be the
  one kvcalc prints, in order (the two `attn_rot_k/v` lines, which size nothing, aside);
- the exact bytes: kvcalc's K, V and recurrent-state bytes must equal cells x streams x layers x
  `ggml_row_size(type, width)` summed over the caches llama.cpp made, with cells, streams and
  layers read from llama.cpp's lines and `ggml_row_size` called in the library;
- a context llama.cpp refuses, kvcalc refuses with llama.cpp's reason (its error line).

Marked `oracle` and skipped unless asked for (`pytest -m oracle tests/oracle`) and unless
llama-cpp-python is installed (`tools/install_llama_cpp_oracle.sh`); docs/engine-oracles.md has
the last run.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("llama_cpp") is None:
    pytest.skip(
        "llama-cpp-python is not installed: the llama.cpp oracle needs it (bash tools/install_llama_cpp_oracle.sh)",
        allow_module_level=True,
    )

sys.path.insert(0, str(Path(__file__).parent))

from llamacpp_geometries import GEOMETRIES

from kvcalc.engines import llamacpp
from kvcalc.engines.llamacpp import LlamacppOptions
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format

pytestmark = pytest.mark.oracle

#: the llama-cpp-python installed, and which of kvcalc's llama.cpp versions its llama.cpp is
LLAMA_CPP_PYTHON = importlib.metadata.version("llama_cpp_python")
#: llama-cpp-python releases that vendor a "KV self size" llama.cpp (kvcalc's legacy profile)
LEGACY_RELEASES = {"0.3.8": "7841fc7"}
LEGACY = LLAMA_CPP_PYTHON in LEGACY_RELEASES
KVCALC_VERSION = "legacy" if LEGACY else "current"

WORKER = Path(__file__).parent / "llamacpp_worker.py"
MEMORY_LINE = re.compile(
    r"^(llama_kv_cache|llama_kv_cache_iswa|llama_memory_recurrent|llama_kv_cache_dsa|llama_kv_cache_msa|"
    r"llama_kv_cache_dsv4|llama_dsv4_comp_state): "
)
#: llama_kv_cache lines that size nothing (the Hadamard rotation of quantized caches)
NOT_SIZES = re.compile(r"^llama_kv_cache: attn_rot_[kv] = ")
KV_SIZE = re.compile(
    r"^llama_kv_cache: size = +[\d.]+ MiB \( *(\d+) cells, +(\d+) layers, +\d+/(\d+) seqs\), "
    r"K \((\w+)\): +([\d.]+) MiB, V \((\w+)\): +([\d.]+) MiB$"
)
RS_SIZE = re.compile(
    r"^llama_memory_recurrent: size = +[\d.]+ MiB \( *(\d+) cells, +(\d+) layers, +\d+ seqs +(\d+) "
    r"rs_seq\), R \(f32\): +([\d.]+) MiB, S \(f32\): +([\d.]+) MiB"
)
#: llama_kv_cache_dsv4's compressor states: 2 (kv, score) f32 tensors of state x n_embd_state per layer and stream
COMP_STATE = re.compile(
    r"^llama_dsv4_comp_state: (\w+) ratio = \d+, state = (\d+) x (\d+), streams = (\d+), rs_seq = (\d+), "
    r"layers = (\d+), size = +([\d.]+) MiB$"
)
ERROR = re.compile(r"^llama_init_from_model: (.*)$")
#: legacy (0.3.8): `llama_kv_cache_init` lines and the context's "KV self size" line
LEGACY_MEMORY_LINE = re.compile(r"^(llama_kv_cache_init: |llama_init_from_model: KV self size )")
LEGACY_INIT = re.compile(
    r"^llama_kv_cache_init: kv_size = (\d+), offload = \d, type_k = '(\w+)', type_v = '(\w+)', "
    r"n_layer = (\d+), can_shift = \d$"
)
LEGACY_SIZE = re.compile(
    r"^llama_init_from_model: KV self size  = +[\d.]+ MiB, K \((\w+)\): +([\d.]+) MiB, "
    r"V \((\w+)\): +([\d.]+) MiB$"
)


def case(
    n_ctx: int = 4096,
    np: int = 1,
    kvu: bool = False,
    ub: int = 512,
    b: int = 2048,
    ctk: str = "f16",
    ctv: str = "f16",
    fa: str = "auto",
    swa_full: bool = False,
) -> dict:
    """One llama_context_params setting: -c, -np, -kvu, -ub, -b, -ctk, -ctv, -fa, --swa-full."""
    return {
        "n_ctx": n_ctx,
        "n_seq_max": np,
        "kv_unified": kvu,
        "n_ubatch": ub,
        "n_batch": b,
        "type_k": ctk,
        "type_v": ctv,
        "flash_attn": fa,
        "swa_full": swa_full,
    }


#: what every attention model is run with: contexts (padding to 256, -c 0), slots unified or not
#: (n_ctx not a multiple of n_seq_max x 256), -ub and -b (-b caps -ub; -b below the context caps
#: it too), the cache types (quantized, mixed K/V, bf16, f32), -fa on/off/auto (a quantized V
#: with -fa off is refused), --swa-full.
COMMON = [
    case(),
    case(n_ctx=1000),
    case(n_ctx=2048, np=3),
    case(n_ctx=2048, np=3, kvu=True),
    case(n_ctx=5000, np=4),
    case(n_ctx=1024, np=2, kvu=True, swa_full=True),
    case(ub=1),
    case(ub=64, b=32),
    case(n_ctx=1024, ub=2048),
    case(ctk="q8_0", ctv="q8_0"),
    case(ctk="q4_0", ctv="q4_0", fa="on"),
    case(ctk="q8_0", ctv="f16"),
    case(ctk="f16", ctv="q4_0"),
    case(ctk="bf16", ctv="bf16", fa="off"),
    case(ctk="f32", ctv="f32", n_ctx=1024),
    case(fa="off"),
    case(fa="on", np=2),
    case(ctv="q8_0", fa="off"),
    case(swa_full=True),
    case(n_ctx=3000, np=2, ub=256),
]
SMALL = [
    case(n_ctx=1024),
    case(n_ctx=512, np=2),
    case(n_ctx=700, np=3, kvu=True),
    case(n_ctx=1024, fa="off"),
    case(n_ctx=1024, ctk="q8_0", ctv="q8_0"),
    case(n_ctx=512, ctk="f16", ctv="q8_0", fa="off"),
]
GRID: dict[str, list[dict]] = {
    "llama-3.2-1b": COMMON,
    "gemma-3-1b": COMMON,
    "gemma-3-270m": COMMON + [case(n_ctx=1024, np=3), case(n_ctx=0), case(n_ctx=1024, np=3, ub=1)],
    "gpt-oss-20b": COMMON,
    "deepseek-v2-lite": COMMON + [case(ctk="q8_0", ctv="f16", fa="on")],
    "deepseek-v2-lite-expanded": SMALL,
    "qwen3.5-9b": COMMON + [case(n_ctx=1024, np=8)],
    "jamba-1.5-mini": COMMON,
    "falcon-h1-7b": COMMON + [case(n_ctx=1024, np=8), case(n_ctx=8192, np=2, kvu=True)],
    "nemotron-h-8b": COMMON + [case(n_ctx=1024, np=8), case(n_ctx=2048, np=3, kvu=True, fa="off")],
    "granite-4.0-h-tiny": COMMON + [case(n_ctx=1024, np=8), case(n_ctx=2048, np=3, fa="off")],
    "mamba-130m": [
        case(n_ctx=0),
        case(n_ctx=1024, np=4),
        case(n_ctx=2048, np=2, kvu=True),
        case(ctk="q8_0", ctv="q8_0"),
        case(fa="off"),
    ],
}
#: the 2026 architectures (issue 19 item 4): real layer counts and widths, so small contexts (the
#: machine's memory): padding, streams unified or not, -ub, quantized / mixed types (MLA and DSV4
#: refuse K != V types), -fa off, the SWA cache without --swa-full (the library's default is on)
GRID_2026 = [
    case(n_ctx=1024),
    case(n_ctx=1000, np=2),
    case(n_ctx=1024, np=2, kvu=True),
    case(n_ctx=2048, ub=256, swa_full=False),
    case(n_ctx=1024, np=2, swa_full=False),
    case(n_ctx=1024, fa="off"),
    case(n_ctx=1024, ctk="q8_0", ctv="q8_0"),
    case(n_ctx=1024, ctk="q8_0", ctv="f16"),
]
GRID.update(
    {
        name: list(GRID_2026)
        for name in (
            "gemma-4-26b-a4b",
            "mimo-v2-flash",
            "deepseek-v3.2",
            "glm-5.2",
            "minimax-m3",
            "deepseek-v4-flash",
            "kimi-k3",
            "qwen3.5-27b",
            "nemotron-3-super",
        )
    }
)


def lcase(fa: str = "off", **kw) -> dict:
    """A legacy (0.3.8) case: `-fa` a switch, off by default; no -kvu / --swa-full (one cache)."""
    return case(fa=fa, **kw)


#: legacy: contexts (padded to 32 with -fa off, 256 with it on), -np (one unified cache whatever
#: it is), -ub / -b (n_batch below 64 raised to 64: no effect on the cache), cache types, -fa.
LEGACY_COMMON = [
    lcase(),
    lcase(n_ctx=1000),
    lcase(n_ctx=1000, fa="on"),
    lcase(n_ctx=100),
    lcase(n_ctx=5000, np=4),
    lcase(n_ctx=2048, np=3, fa="on"),
    lcase(ub=1),
    lcase(ub=64, b=32),
    lcase(n_ctx=1024, ub=2048),
    lcase(ctk="q8_0", ctv="q8_0", fa="on"),
    lcase(ctk="q4_0", ctv="q4_0", fa="on"),
    lcase(ctk="q8_0"),
    lcase(ctv="q4_0"),
    lcase(ctk="bf16", ctv="bf16"),
    lcase(ctk="f32", ctv="f32", n_ctx=1024),
    lcase(fa="on"),
    lcase(ctv="q8_0"),
    lcase(n_ctx=3000, np=2, ub=256, fa="on"),
    lcase(ctk="q8_0", ctv="f16", fa="on"),
]
#: the geometries llama.cpp 7841fc7 has: llama, gemma3 (sliding layers cached full size), the
#: pre-#12801 DeepSeek-V2 (K and V per head), mamba (pure recurrent, its state in the KV cache)
LEGACY_GRID: dict[str, list[dict]] = {
    "llama-3.2-1b": LEGACY_COMMON,
    "gemma-3-1b": LEGACY_COMMON,
    "gemma-3-270m": LEGACY_COMMON + [lcase(n_ctx=0), lcase(n_ctx=1024, np=3)],
    "deepseek-v2-lite-expanded": LEGACY_COMMON,
    "mamba-130m": [
        lcase(n_ctx=0),
        lcase(n_ctx=1024, np=4),
        lcase(n_ctx=2048, np=2, fa="on"),
        lcase(ctk="q8_0", ctv="q8_0", fa="on"),
        lcase(ctk="q8_0", ctv="q8_0"),
        lcase(n_ctx=0, np=3),
    ],
}
if LEGACY:
    GRID = LEGACY_GRID
for _name, _cases in GRID.items():
    GRID[_name] = [{**c, "id": i} for i, c in enumerate(_cases)]


def _case_id(name: str, c: dict) -> str:
    return (
        f"{name}-c{c['n_ctx']}-np{c['n_seq_max']}{'-kvu' if c['kv_unified'] else ''}-ub{c['n_ubatch']}"
        f"-b{c['n_batch']}-{c['type_k']}-{c['type_v']}-fa{c['flash_attn']}{'-swafull' if c['swa_full'] else ''}"
    )


PARAMS = [pytest.param(name, c, id=_case_id(name, c)) for name, cases in GRID.items() for c in cases]


@pytest.fixture(scope="session")
def engine(tmp_path_factory):
    """name -> the worker's output for that geometry's grid (one llama.cpp process per geometry)."""
    runs: dict[str, dict] = {}
    workdir = tmp_path_factory.mktemp("llamacpp-oracle")

    def run(name: str) -> dict:
        if name not in runs:
            geo = GEOMETRIES[name]
            job = workdir / f"{name}.job.json"
            out = workdir / f"{name}.out.json"
            widths = sorted(geo.all_widths())
            job.write_text(
                json.dumps({"geometry": name, "workdir": str(workdir), "cases": GRID[name], "widths": widths})
            )
            p = subprocess.run(
                [sys.executable, str(WORKER), str(job), str(out)],
                capture_output=True,
                text=True,
                check=False,
                timeout=600,
            )
            if p.returncode != 0 or not out.is_file():
                pytest.fail(
                    f"llama.cpp worker for {name} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
                )
            runs[name] = json.loads(out.read_text())
        return runs[name]

    return run


def kvcalc_model(name: str, gguf: str):
    """kvcalc's model: from the GGUF file itself where kvcalc reads the architecture, else the
    geometry's own spec (Qwen3.5's config.json, a Mamba spec)."""
    from kvcalc.load.models import load_model

    geo = GEOMETRIES[name]
    return geo.kvcalc() if callable(geo.kvcalc) else load_model(gguf)


def memory_lines(lines: list[str]) -> list[str]:
    if LEGACY:
        return [ln for ln in lines if LEGACY_MEMORY_LINE.match(ln)]
    return [ln for ln in lines if MEMORY_LINE.match(ln) and not NOT_SIZES.match(ln)]


def legacy_exact_bytes(name: str, lines: list[str], row: dict[str, dict[str, int]]) -> tuple[int, int]:
    """Legacy: (K, V) bytes from llama.cpp's `llama_kv_cache_init` line (kv_size, types, n_layer)
    and its ggml_row_size: kv_size x n_layer x row size, K and V widths the geometry's KV widths
    (n_embd_k_gqa) or, for a recurrent model, its state widths (n_embd_k_s, n_embd_v_s: 7841fc7
    keeps Mamba's conv and SSM states as K and V of max(1, n_seq_max) cells, in f32). The "KV
    self size" line's K and V MiB are checked against them."""
    geo = GEOMETRIES[name]
    init = next(m for ln in lines if (m := LEGACY_INIT.match(ln)))
    size = next(m for ln in lines if (m := LEGACY_SIZE.match(ln)))
    kv_size, tk, tv, n_layer = int(init[1]), init[2], init[3], int(init[4])
    wk, wv = geo.kv_widths if geo.kv_widths != (0, 0) else geo.state_widths[:2]
    kb = kv_size * n_layer * row[tk][str(wk)]
    vb = kv_size * n_layer * row[tv][str(wv)]
    assert (size[1], size[3]) == (tk, tv)
    assert (mib(kb), mib(vb)) == (size[2], size[4]), size[0]
    return kb, vb


def mib(n_bytes: int) -> str:
    return f"{llamacpp.mib_f32(n_bytes):.2f}"


def exact_bytes(name: str, c: dict, lines: list[str], row: dict[str, dict[str, int]]) -> tuple[int, int, int]:
    """(K, V, recurrent state) bytes from llama.cpp's own lines and its ggml_row_size: per cache
    cells x streams x layers x row size (the row of that cache: `Geometry.widths_for`); each
    cache's printed K and V MiB checked against them. DeepSeek-V4's compressor states: 2 x state
    x n_embd_state x streams x (1 + rs_seq) x layers x 4 B (f32)."""
    geo = GEOMETRIES[name]
    n_caches = sum(1 for ln in lines if KV_SIZE.match(ln))
    widths = iter(geo.widths_for(c, n_caches))
    k_tot = v_tot = state = 0
    for ln in lines:
        if m := COMP_STATE.match(ln):
            _, size, embd, streams, rs_seq, layers, s_mib = m.groups()
            sb = 2 * int(size) * int(embd) * int(streams) * (1 + int(rs_seq)) * int(layers) * 4
            assert mib(sb) == f"{float(s_mib):.2f}", ln
            state += sb
        elif m := KV_SIZE.match(ln):
            wk, wv = next(widths)
            cells, layers, streams, tk, k_mib, tv, v_mib = m.groups()
            kb = int(cells) * int(streams) * int(layers) * row[tk][str(wk)]
            vb = int(cells) * int(streams) * int(layers) * row[tv][str(wv)] if wv else 0
            assert (mib(kb), mib(vb)) == (k_mib, v_mib), ln
            k_tot, v_tot = k_tot + kb, v_tot + vb
        elif m := RS_SIZE.match(ln):
            cells, _, rs_seq, r_mib, s_mib = m.groups()
            wr, ws, n_rec = geo.state_widths
            rows = int(cells) * (1 + int(rs_seq)) * n_rec
            rb, sb = rows * 4 * wr, rows * 4 * ws  # f32: 4 B per value
            assert (mib(rb), mib(sb)) == (r_mib, s_mib), ln
            state += rb + sb
    return k_tot, v_tot, state


@pytest.mark.parametrize(("name", "c"), PARAMS)
def test_llamacpp_allocates_what_kvcalc_prints(name: str, c: dict, engine) -> None:
    out = engine(name)
    res = out["results"][c["id"]]
    model = kvcalc_model(name, out["gguf"])
    try:
        r = llamacpp.allocate(
            model,
            c["n_ctx"],
            kv_format(c["type_k"]),
            kv_format(c["type_v"]),
            options=LlamacppOptions(
                parallel=c["n_seq_max"],
                unified=c["kv_unified"],
                tool="library",
                flash_attn=c["flash_attn"],
                swa_full=c["swa_full"],
                n_ubatch=c["n_ubatch"],
                n_batch=c["n_batch"],
                n_gpu_layers=0,
                version=KVCALC_VERSION,
            ),
        )
    except KvcalcError as e:
        reasons = [m.group(1) for ln in res["lines"] if (m := ERROR.match(ln))]
        assert not res["ok"], f"kvcalc refuses ({e}) what llama.cpp allocates:\n" + "\n".join(
            memory_lines(res["lines"])
        )
        assert reasons and reasons[0] in str(e), f"llama.cpp's reason {reasons} is not kvcalc's: {e}"
        return
    assert res["ok"], "llama.cpp refuses what kvcalc allocates:\n" + "\n".join(res["lines"][-8:])
    assert r.log_lines == memory_lines(res["lines"])
    if LEGACY:
        assert (r.k_bytes, r.v_bytes) == legacy_exact_bytes(name, res["lines"], out["row_bytes"])
        return
    k_bytes, v_bytes, state_bytes = exact_bytes(name, c, res["lines"], out["row_bytes"])
    assert (r.k_bytes, r.v_bytes, r.engine_state_bytes or 0) == (k_bytes, v_bytes, state_bytes)


def test_the_oracle_runs_the_vendored_llama_cpp(engine) -> None:
    """The records in docs/engine-oracles.md name these versions: llama-cpp-python 0.3.36
    (current) and 0.3.8 (legacy)."""
    out = engine("llama-3.2-1b")
    assert out["llama_cpp_python"] == ("0.3.8" if LEGACY else "0.3.36")
