"""Drive vLLM 0.33's own attention-backend selection on a CPU, and kvcalc's choice beside it.

vLLM's side (the oracle), all vLLM's code: `vllm/platforms/cuda.py` `CudaPlatform.
get_attn_backend_cls` (`_get_backend_priorities`, `get_valid_backends`: each backend's
`validate_configuration` - head size, KV dtype, block size, compute capability,
`supports_combination` - the first valid one, the "--block-size ... precluded" warning), then
`Platform._preferred_block_size_for_backends` (`get_preferred_block_size`) when no `--block-size`
is given, as `update_block_size_for_backend` does.

What is not vLLM's code, and why:

- the CUDA platform's device: `CudaPlatform.get_device_capability` is replaced by the case's
  compute capability (there is no GPU); `vllm._C_stable_libtorch` / `vllm._C` (CUDA kernels) are
  empty stand-in modules so `vllm/platforms/cuda.py` imports;
- compiled kernels, assumed present as in the official CUDA wheel vllm-0.33.0 (its file list has
  `vllm_flash_attn/_vllm_fa2_C`, `_vllm_fa3_C`, `cute/`, `_flashmla_C`, `_flashmla_extension_C`;
  its requirements `flashinfer-python==0.7.2.post1`, `tokenspeed-mla==2.0.3`): stand-in modules of
  those names, so vLLM's own availability checks (`fa_utils.flash_attn_supports_mla`,
  `flash_attn_interface.is_fa_version_supported`, `ops/flashmla.is_flashmla_dense_supported`,
  TOKENSPEED_MLA's import check) answer as on that wheel, each still asking the faked device;
  `flashinfer` / `tokenspeed_mla` are modules whose every attribute is a dummy callable (the
  backends import kernel entry points at module level, never called here);
- `cutlass_mla.py` allocates its 128 MB workspace on the GPU at import: imported here with
  `torch.empty(device='cuda')` sent to the meta device, and 132 SMs (`num_compute_units`);
- the model config the backends read (`get_current_vllm_config().model_config`):
  `hf_text_config` with the case's qk_nope / qk_rope / v head dims, and the head counts.

It replaces vLLM's current platform for the whole process, so `tests/oracle/test_vllm_backend_oracle.py`
runs it in a process of its own (`python tests/oracle/vllm_backends.py --json`).
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import types
from dataclasses import dataclass
from types import SimpleNamespace

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")


def _dummy(*args, **kwargs):
    raise RuntimeError("a stand-in kernel entry point: no GPU here")


class _DummyMeta(type):
    def __getattr__(cls, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _dummy


class _AnyAttr(types.ModuleType):
    """A stand-in module whose every attribute is a dummy class (kernel entry points and
    wrappers: calling one, or any method of it, raises; none is called here)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _DummyMeta(name, (), {"__init__": _dummy})


def _stub(name: str, any_attr: bool = False) -> None:
    if name not in sys.modules:
        mod = _AnyAttr(name) if any_attr else types.ModuleType(name)
        mod.__path__ = []  # a package, so submodules import
        mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)  # importlib.util.find_spec
        sys.modules[name] = mod


for _name in (
    "vllm._C_stable_libtorch",
    "vllm._C",
    "vllm._flashmla_C",
    "vllm._flashmla_extension_C",
    "vllm.vllm_flash_attn._vllm_fa2_C",
    "vllm.vllm_flash_attn._vllm_fa3_C",
):
    _stub(_name)
for _name in (
    "flashinfer",
    "flashinfer.decode",
    "flashinfer.utils",
    "flashinfer.prefill",
    "flashinfer.mla",
    "flashinfer.jit",
    "flashinfer.comm",
    "tokenspeed_mla",
):
    _stub(_name, any_attr=True)

import torch  # noqa: E402
import vllm  # noqa: E402
import vllm.platforms  # noqa: E402
from vllm.platforms import cuda as vllm_cuda  # noqa: E402
from vllm.platforms.interface import DeviceCapability  # noqa: E402

VLLM_VERSION = vllm.__version__


class _FakeCuda(vllm_cuda.CudaPlatform):
    """vLLM's CUDA platform on the case's device (`capability`), nothing else changed."""

    capability = DeviceCapability(9, 0)

    @classmethod
    def get_device_capability(cls, device_id: int = 0):
        return cls.capability

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return f"stand-in sm{cls.capability.to_int()}"

    @classmethod
    def num_compute_units(cls, device_id: int = 0) -> int:
        return 132  # an H100 SXM's SMs (cutlass_mla.py sizes a workspace with it at import)


vllm.platforms._current_platform = _FakeCuda()


def _import_with_meta_tensors(module: str) -> None:
    """Import `module`, whose import allocates a CUDA tensor (`cutlass_mla.py`'s 128 MB
    `SM100Workspace`), with `torch.empty(..., device='cuda')` made on the meta device instead."""
    import importlib

    empty = torch.empty

    def meta_empty(*args, **kwargs):
        if str(kwargs.get("device", "")).startswith("cuda"):
            kwargs["device"] = "meta"
        return empty(*args, **kwargs)

    torch.empty = meta_empty
    try:
        importlib.import_module(module)
    finally:
        torch.empty = empty


_import_with_meta_tensors("vllm.v1.attention.backends.mla.cutlass_mla")

from vllm.config import VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.platforms.interface import Platform  # noqa: E402
from vllm.utils.import_utils import resolve_obj_by_qualname  # noqa: E402
from vllm.v1.attention.selector import AttentionSelectorConfig  # noqa: E402


@dataclass(frozen=True)
class Case:
    """One selection: the device, the KV cache dtype (vLLM's name), the `--block-size` given
    (None: not given) and the model (a kvcalc model name)."""

    compute_capability: str
    kv_cache_dtype: str
    block_size: int | None
    model: str

    @property
    def id(self) -> str:
        return f"{self.model}-sm{self.compute_capability}-{self.kv_cache_dtype}-bs{self.block_size}"


#: the models of the grid: DeepSeek-V2-Lite (16 heads), DeepSeek-V3 (128), Kimi-K2 (64), Llama-3.1-8B
MODELS = ("deepseek-v2-lite", "deepseek-v3", "kimi-k2", "llama-3.1-8b")


def grid() -> list[Case]:
    """compute capability 9.0 / 10.0 / 12.0 x KV dtype auto / fp8 / fp8_e5m2 x block size not
    given / 16 / 32 / 64 / 128 / 8 x the four models: 216 cases."""
    return [
        Case(cc, kv, bs, m)
        for cc in ("9.0", "10.0", "12.0")
        for kv in ("auto", "fp8", "fp8_e5m2")
        for bs in (None, 16, 32, 64, 128, 8)
        for m in MODELS
    ]


def _vllm_config(model, block_size: int | None) -> VllmConfig:
    """vLLM's `VllmConfig` with a stand-in model config carrying what the backends read."""
    from vllm.config import CacheConfig

    cfg = VllmConfig(cache_config=CacheConfig(block_size=block_size))
    hf = SimpleNamespace(
        qk_nope_head_dim=model.qk_nope_head_dim,
        qk_rope_head_dim=model.qk_rope_head_dim,
        v_head_dim=model.v_head_dim,
        kv_lora_rank=model.kv_lora_rank,
        num_attention_heads=model.n_heads,
        index_topk=None,
    )
    heads = model.n_heads
    kv_heads = 1 if model.kv_lora_rank else model.resolved_n_kv_heads
    cfg.model_config = SimpleNamespace(
        hf_text_config=hf,
        get_head_size=lambda: model.resolved_head_dim,
        get_num_attention_heads=lambda pc=None: heads,
        get_num_kv_heads=lambda pc=None: kv_heads,
        max_model_len=4096,
        dtype=torch.bfloat16,
        use_mla=bool(model.kv_lora_rank),
        is_diffusion=False,
    )
    return cfg


def run_vllm(case: Case) -> tuple[str | None, int | None, str]:
    """(backend name, block size, what vLLM raised or warned) as vLLM 0.33 chooses for `case`."""
    import logging

    from kvcalc.load.models import load_model

    model = load_model(case.model)
    major, minor = (int(x) for x in case.compute_capability.split("."))
    _FakeCuda.capability = DeviceCapability(major, minor)
    vllm_cuda._get_backend_priorities.cache_clear()
    mla = bool(model.kv_lora_rank)
    cfg = _vllm_config(model, case.block_size)
    selector = AttentionSelectorConfig(
        head_size=model.resolved_head_dim,
        dtype=torch.bfloat16,
        kv_cache_dtype=case.kv_cache_dtype,
        block_size=case.block_size,
        use_mla=mla,
    )
    records: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record):
            if record.levelno >= logging.WARNING:
                records.append(record.getMessage())

    log = logging.getLogger("vllm.platforms.cuda")
    handler, level = _Keep(), log.level
    log.addHandler(handler)
    log.setLevel(logging.WARNING)
    try:
        with set_current_vllm_config(cfg):
            try:
                path = _FakeCuda.get_attn_backend_cls(None, selector, num_heads=model.n_heads)
            except ValueError as e:
                return None, None, str(e)
        backend = resolve_obj_by_qualname(path)
        size = case.block_size or Platform._preferred_block_size_for_backends([backend], 16, cfg)
        return backend.get_name(), size, " ".join(records)
    finally:
        log.removeHandler(handler)
        log.setLevel(level)


def run_kvcalc(case: Case) -> tuple[str | None, int | None, str]:
    """(backend name, block size, refusal or note) as kvcalc's vLLM 0.33 profile chooses."""
    from kvcalc.engines import vllm as kv_vllm
    from kvcalc.errors import KvcalcError
    from kvcalc.load.models import load_model

    model = load_model(case.model)
    try:
        size, note = kv_vllm.rules("0.33").attention_block_size(
            model, case.block_size, None, case.compute_capability, "nvidia", case.kv_cache_dtype
        )
    except KvcalcError as e:
        return None, None, str(e)
    if note is None:  # non-MLA: kvcalc names no backend (every CUDA one takes the same size)
        return None, size, ""
    return note.split()[3], size, note


@dataclass
class Outcome:
    case: Case
    vllm: tuple
    kvcalc: tuple
    status: str  # 'match' / 'differ'


def compare(case: Case) -> Outcome:
    """Both sides for `case`: they match when both refuse, or pick the same block size and (for MLA
    models, where kvcalc names it) the same backend, and kvcalc's note carries vLLM's warning."""
    v, k = run_vllm(case), run_kvcalc(case)
    if v[1] is None or k[1] is None:
        same = v[1] is None and k[1] is None
    else:
        same = v[1] == k[1] and (k[0] is None or k[0] == v[0])
        same = same and ("precluded" in v[2]) == ("precluded" in k[2])
        if "precluded" in v[2]:  # vLLM's warning, as kvcalc's note quotes it
            same = same and v[2].split(" Using ")[0] in k[2]
    return Outcome(case, v, k, "match" if same else "differ")


def main() -> None:
    """Print the grid's summary (docs/engine-oracles.md, "vLLM backend choice"); with `--json`,
    one JSON object per case instead (what `test_vllm_backend_oracle.py` reads: this module replaces
    vLLM's current platform, so the tests run it in a process of its own)."""
    import json
    import warnings

    warnings.simplefilter("ignore")
    outcomes = [compare(c) for c in grid()]
    if "--json" in sys.argv:
        for o in outcomes:
            print(json.dumps({"id": o.case.id, "status": o.status, "vllm": o.vllm, "kvcalc": o.kvcalc}))
        return
    print(f"warnings vLLM printed ('--block-size ... precluded'): {sum('precluded' in o.vllm[2] for o in outcomes)}")
    matched = [o for o in outcomes if o.status == "match"]
    print(f"vLLM {VLLM_VERSION} backend choice: {len(matched)} of {len(outcomes)} cases match")
    by: dict[tuple, int] = {}
    for o in outcomes:
        key = (o.case.compute_capability, o.vllm[0] or "refused", o.vllm[1])
        by[key] = by.get(key, 0) + 1
    for (cc, name, size), n in sorted(by.items(), key=str):
        print(f"  sm {cc:>4}  {name:<15} block {size!s:>4}  {n:>3} cases")
    for o in outcomes:
        if o.status != "match":
            print(f"DIFFER {o.case.id}\n  vLLM   {o.vllm}\n  kvcalc {o.kvcalc}")


if __name__ == "__main__":
    main()
