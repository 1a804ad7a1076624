"""One interface over the engine modules: a typed options object per engine and a profile object
that every engine implements (`EngineProfile`).

The module-level functions of `vllm/`, `sglang.py`, `llamacpp/` and `ideal.py` stay the
engines' arithmetic (tests call them directly); a profile only maps its options object onto them.
`get_profile(name)` (also `kvcalc.engines.get_profile`) gives the profile for an engine name or
alias. Callers never branch on the engine: what differs is a profile attribute
(`allocates_cells`, `splits_heads`, `plan_budget_note`, `no_memory`) or method.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypedDict, TypeVar, Union

from kvcalc.engines import canonical, ideal, launch, llamacpp, sglang, sglang_mamba, vllm
from kvcalc.engines.llamacpp.options import LlamacppOptions
from kvcalc.engines.vllm.options import VllmOptions
from kvcalc.errors import OPTION, KvcalcError, UnknownNameError
from kvcalc.formats import StorageFormat, kv_format, storage_format
from kvcalc.results import EngineResult
from kvcalc.schema import ModelSpec

if TYPE_CHECKING:
    from kvcalc.calc.plan import EngineKv
    from kvcalc.schema_deploy import GpuSpec

# ----- options: one frozen dataclass per engine -------------------------------------------


@dataclass(frozen=True)
class IdealOptions:
    """The exact formula has no options."""


class PoolKwargs(TypedDict):
    """The pool keyword arguments `sglang.capacity` / `sglang.memory_for` take."""

    page_size: int
    version: str
    hybrid_swa_memory: bool
    swa_full_tokens_ratio: float | None
    target: sglang.PoolTarget
    mamba: sglang_mamba.MambaOptions


class LaunchExtras(TypedDict, total=False):
    """The `launch.LaunchSpec` fields an engine's launch line adds for a layout
    (`EngineProfile.launch_extras`)."""

    block_size: int | None
    attention_backend: str | None
    flags: tuple[str, ...]


@dataclass(frozen=True)
class SglangOptions:
    """SGLang's pool options, as `sglang.capacity` / `sglang.memory_for` take them.

    - `page_size`: tokens per page (`--page-size`; DeepSeek-V3.2's NSA pool forces 64).
    - `version`: 'current' or 'legacy' (before PR #11309: the NSA pool sized without its
      indexer), `--sglang-version`.
    - `hybrid_swa_memory`: False is `--disable-hybrid-swa-memory` (sliding layers sized as full).
    - `swa_full_tokens_ratio`: `--swa-full-tokens-ratio`, SWA-pool tokens per full-pool token
      (None: not given; SGLang 0.5.23 then takes 0.8, DeepSeek-V4 0.1).
    - `compute_capability` / `vendor`: the GPU's (from `--gpu`; None: Hopper assumed), and
      `dsa_prefill_backend` / `dsa_decode_backend` (`--dsa-prefill-backend`, `--dsa-decode-backend`;
      None: SGLang's default for the GPU): they pick the sparse-MLA latent row and fp4 pool extras.
    - `mamba`: the hybrids' state-pool options (`sglang_mamba.MambaOptions`: --mamba-full-memory-ratio,
      --max-mamba-cache-size, --mamba-ssm-dtype, --disable-radix-cache).
    """

    page_size: int = sglang.DEFAULT_PAGE_SIZE
    version: str = "current"
    hybrid_swa_memory: bool = True
    swa_full_tokens_ratio: float | None = None
    compute_capability: str | None = None
    vendor: str | None = None
    dsa_prefill_backend: str | None = None
    dsa_decode_backend: str | None = None
    mamba: sglang_mamba.MambaOptions = sglang_mamba.DEFAULT_OPTIONS

    def pool_kwargs(self) -> PoolKwargs:
        """The keyword arguments of `sglang.capacity` / `sglang.memory_for`."""
        target = sglang.PoolTarget(
            self.compute_capability, self.vendor, self.dsa_prefill_backend, self.dsa_decode_backend
        )
        return {
            "page_size": self.page_size,
            "version": self.version,
            "hybrid_swa_memory": self.hybrid_swa_memory,
            "swa_full_tokens_ratio": self.swa_full_tokens_ratio,
            "target": target,
            "mamba": self.mamba,
        }


#: an engine's options object (`EngineProfile.options_type`)
EngineOptions = Union[IdealOptions, VllmOptions, SglangOptions, LlamacppOptions]
#: one engine's options type (a profile's `options_type`)
Opts = TypeVar("Opts", IdealOptions, VllmOptions, SglangOptions, LlamacppOptions)
#: `calc.plan.PlanSearch.engine_kv`: (gpu, tp, stages (layer ranges), (K, V)) -> the engine's KV
#: (vLLM's also takes a `calc.plan.KvPick` for (K, V) and `dcp=N`: `vllm.plan.plan_kv`)
PlanEngineKv = Callable[..., "EngineKv"]

# ----- the interface ----------------------------------------------------------------------


@dataclass(frozen=True)
class KvChoice:
    """The KV formats an engine uses: `k`, `v`, the dtype as the engine spells it (`label`), and
    the options with anything the dtype name implies folded in (vLLM's per-token-head scales)."""

    k: StorageFormat
    v: StorageFormat
    label: str
    options: EngineOptions


class EngineProfile(Generic[Opts]):
    """What every engine profile offers. Subclasses set the class attributes and implement
    `_capacity` (and, where the engine sizes from a memory budget, `memory_for`).

    - `name`: the registry key; `display_name`: as the engine spells itself; `version`: the
      engine version modelled (the module's `VERSION`); `options_type`: its options dataclass.
    - `allocates_cells`: sized by a cell count (llama.cpp's n_ctx), not a memory budget.
    - `splits_heads`: tensor parallelism splits KV heads (False: llama.cpp splits layers).
    - `no_memory`: the engine's start-up error when there is no KV memory.
    - `plan_budget_note`: appended where a GPU plan's budget stands in for the engine's own.
    """

    name: ClassVar[str]
    display_name: ClassVar[str]
    module: ClassVar[ModuleType]  # the engine's rules module (`vllm`, `sglang`, ...)
    options_type: type[Opts]
    allocates_cells: ClassVar[bool] = False
    splits_heads: ClassVar[bool] = True
    no_memory: ClassVar[str] = ""
    plan_budget_note: ClassVar[str] = ""

    @property
    def version(self) -> str:
        return self.module.VERSION

    def options(self, options: object = None) -> Opts:
        """`options`, or the defaults; raises `KvcalcError` for another engine's options object."""
        if options is None:
            return self.options_type()
        if not isinstance(options, self.options_type):
            raise KvcalcError(f"--engine {self.name} takes {self.options_type.__name__}, not {type(options).__name__}")
        return options

    def check_options(self, options: Opts) -> None:
        """Raise `KvcalcError` for option values the engine refuses (checked before any sizing)."""

    def check_model(self, model: ModelSpec) -> None:
        """Raise `KvcalcError` (field `model`) for a model this profile cannot size whatever the
        layout, formats or memory: the same refusal `capacity` and `estimate --engine` give
        (vLLM: hybrid attention + Mamba-2 layers, DeepSeek-V3.2's indexer; SGLang: any mamba /
        linear-attention layer; llama.cpp: the indexer). `kvcalc plan` asks before searching."""

    def default_kv_dtype(self, model: ModelSpec, options: Opts) -> tuple[str, str]:
        """(format name, label) with no KV dtype given (or 'auto'): the engine's default."""
        return self.module.default_kv_dtype(model)

    def split_kv_dtype(self, text: str, options: Opts) -> tuple[str, Opts]:
        """(plain format name, options) for a KV dtype as typed; engines with dtype suffixes
        (vLLM's `_per_token_head`) fold them into the options."""
        return text, options

    def kv_formats(
        self,
        model: ModelSpec,
        kv_dtype: str | None = None,
        k_dtype: str | StorageFormat | None = None,
        v_dtype: str | StorageFormat | None = None,
        options: object = None,
    ) -> KvChoice:
        """The K and V formats and their label. No `kv_dtype` (or 'auto') is the engine's default
        (`default_kv_dtype`), labelled 'auto (...)'; `k_dtype` / `v_dtype` override either side.
        Raises `KvcalcError` (an `UnknownNameError`) for a format kvcalc does not know, and, in
        the engine's own words (`check_kv_formats`), for one the engine has no cache type for."""
        options = self.options(options)
        default, label = self.default_kv_dtype(model, options)
        base = (kv_dtype or "auto").strip()
        shown = base
        base, options = self.split_kv_dtype(base, options)
        if base.lower() == "auto":  # auto, or a dtype the engine packs itself (`split_kv_dtype`)
            base = default
            if shown.lower() == "auto":
                shown = label
        try:
            k = storage_format(k_dtype or base, field="k_dtype" if k_dtype else "kv_dtype")
            v = (
                k
                if not (k_dtype or v_dtype)
                else storage_format(v_dtype or base, field="v_dtype" if v_dtype else "kv_dtype")
            )
        except UnknownNameError as e:
            raise self.unknown_kv_dtype(e, options) from None
        self.check_kv_formats(model, k, v, options)
        if k_dtype or v_dtype:
            shown = k.name if k == v else f"{k.name}/{v.name}"
        return KvChoice(k, v, shown, options)

    def unknown_kv_dtype(self, err: UnknownNameError, options: Opts) -> KvcalcError:
        """The refusal of a KV dtype name neither kvcalc nor the engine knows: `err` (kvcalc's
        close names) for the exact formula; an engine names its version and what it accepts."""
        return err

    def check_kv_formats(
        self, model: ModelSpec, k: StorageFormat, v: StorageFormat, options: Opts | None = None
    ) -> None:
        """Raise `KvcalcError` for a K or V format this engine has no cache type for: first in
        the engine's own words (each engine's override), then any weight-only format
        (`formats.kv_format`: MXFP4 is no cache type of any engine)."""
        kv_format(k, field="k_dtype")
        kv_format(v, field="v_dtype")

    def capacity(
        self,
        model: ModelSpec,
        kv_memory_bytes: int | None,
        k: StorageFormat,
        v: StorageFormat,
        *,
        tp: int = 1,
        max_model_len: int | None = None,
        concurrency: int | None = None,
        options: object = None,
        kv_cache_dtype: str | None = None,
    ) -> EngineResult:
        """What the engine makes of `kv_memory_bytes` of KV memory per rank: tokens, blocks,
        concurrency at `max_model_len` (tokens), the longest context at `concurrency`, its log lines.
        Raises `KvcalcError` when the memory is missing or the engine would refuse to start."""
        if kv_memory_bytes is None:
            raise KvcalcError(f"--engine {self.name} needs --kv-memory (the KV memory of one GPU rank, e.g. 6.51GiB)")
        return self._capacity(
            model,
            kv_memory_bytes,
            k,
            v,
            tp=tp,
            max_model_len=max_model_len,
            concurrency=concurrency,
            options=self.options(options),
            kv_cache_dtype=kv_cache_dtype,
        )

    def _capacity(
        self,
        model: ModelSpec,
        kv_memory_bytes: int,
        k: StorageFormat,
        v: StorageFormat,
        *,
        tp: int,
        max_model_len: int | None,
        concurrency: int | None,
        options: Opts,
        kv_cache_dtype: str | None,
    ) -> EngineResult:
        raise NotImplementedError

    def memory_for(
        self,
        model: ModelSpec,
        seq_len: int,
        batch: int,
        k: StorageFormat,
        v: StorageFormat,
        *,
        tp: int = 1,
        options: object = None,
    ) -> int:
        """KV memory per rank (bytes) for `batch` requests of `seq_len` tokens."""
        raise KvcalcError(f"--engine {self.name} does not size a KV memory budget")

    #: the engine splits layers over devices (llama.cpp), so a plan uses tp 1 and a layer split
    plan_layer_split: ClassVar[bool] = False

    def plan_formats(self, model: ModelSpec) -> tuple[tuple[str, ...], tuple[str | None, ...], frozenset[str]]:
        """`kvcalc plan`'s default (KV formats, weight formats, the fp8-only ones): the model's
        dtype (the checkpoint's weights), then fp8 where the GPU has fp8 tensor cores."""
        kv = (model.dtype if model.dtype != "fp32" else "bf16", "fp8_e4m3")
        weights = (None,) if (model.weight_dtype or model.dtype).startswith("fp8") else (None, "fp8_e4m3")
        return kv, weights, frozenset({"fp8_e4m3"})

    def launch_line(self, spec: launch.LaunchSpec) -> str | None:
        """The command that starts this layout (`kvcalc.engines.launch`); None for an engine
        that is no program (ideal). Raises `KvcalcError` for a format the engine lacks."""
        return None

    def plan_engine_kv(
        self, model: ModelSpec, options: object, kv_options: dict[str, EngineOptions] | None = None
    ) -> PlanEngineKv | None:
        """`kvcalc plan`'s per-GPU KV arithmetic (`calc.plan.PlanSearch.engine_kv`: (gpu, tp,
        stages, (K, V)) -> `calc.plan.EngineKv`), or None: the exact formula sizes every layout.
        `kv_options`: the options object each of the engine's own dtypes was parsed into
        (`engine_kv_dtype`), by name."""
        return None

    def recorded_kv_dtype(self, model: ModelSpec, options: object, pick: tuple[str, str, str | None]) -> str:
        """The `kv_dtype` a deployment file records for a plan's KV `pick` (K, V, the engine's own
        name or None: `calc.plan.KvPick`), the name whose parse by this engine
        (`requests.plan_kv_picks`, as `kvcalc check` reads the file) gives `pick` back: the
        engine's own name where it has one, else the K format (K/V where they differ)."""
        k, v, own = pick
        return own or (k if k == v else f"{k}/{v}")

    def engine_kv_dtype(self, choice: KvChoice, options: object) -> str | None:
        """The engine's own `--kv-cache-dtype` that `kvcalc plan` carries beside a parsed
        `choice` (`calc.plan.KvPick.engine_dtype`): None where the K / V formats say it all (the
        launch line names them in the engine's words), as for every engine but vLLM."""
        return None

    def launch_extras(
        self,
        model: ModelSpec,
        options: object,
        gpu: GpuSpec | None,
        k_dtype: StorageFormat | str | None = None,
        kv_cache_dtype: str | None = None,
    ) -> LaunchExtras:
        """`LaunchSpec` fields this engine's launch line states for a layout on `gpu` (a
        `GpuSpec`, or None) with KV format `k_dtype` (None: the engine's default; `kv_cache_dtype`:
        the engine's own name of it, `calc.plan.KvPick.engine_dtype`) beyond the layout's own:
        none by default."""
        return {}

    def for_batch(
        self,
        model: ModelSpec,
        seq_len: int,
        batch: int,
        k: StorageFormat,
        v: StorageFormat,
        *,
        tp: int = 1,
        options: object = None,
        kv_cache_dtype: str | None = None,
        kv_memory_bytes: int | None = None,
    ) -> EngineResult:
        """What the engine allocates to serve `batch` requests of `seq_len` tokens, from
        `kv_memory_bytes` per rank (None: `memory_for` the batch)."""
        options = self.options(options)
        if kv_memory_bytes is None:
            kv_memory_bytes = self.memory_for(model, seq_len, batch, k, v, tp=tp, options=options)
        return self._capacity(
            model,
            kv_memory_bytes,
            k,
            v,
            tp=tp,
            max_model_len=seq_len,
            concurrency=batch,
            options=options,
            kv_cache_dtype=kv_cache_dtype,
        )


class IdealProfile(EngineProfile[IdealOptions]):
    """The exact formula (`kvcalc.engines.ideal`): no block, page or padding rule."""

    name = "ideal"
    display_name = "ideal"
    module: ClassVar[ModuleType] = ideal
    options_type = IdealOptions

    def _capacity(self, model, kv_memory_bytes, k, v, *, tp, max_model_len, concurrency, options, kv_cache_dtype):
        res = ideal.capacity(model, kv_memory_bytes, k, v, tp=tp, max_model_len=max_model_len, concurrency=concurrency)
        return res if kv_cache_dtype is None else res.model_copy(update={"kv_cache_dtype": kv_cache_dtype})

    def for_batch(self, *args: object, **kwargs: object) -> EngineResult:
        raise KvcalcError("--engine ideal is estimate's own result")


class VllmProfile(EngineProfile[VllmOptions]):
    """vLLM's paged cache (`kvcalc.engines.vllm`): the release is `VllmOptions.version`."""

    name = "vllm"
    display_name = "vLLM"
    module: ClassVar[ModuleType] = vllm
    options_type = VllmOptions
    no_memory = vllm.NO_MEMORY

    def check_options(self, options: VllmOptions) -> None:
        if options.block_size is not None:
            vllm.rules(options.version).check_block_size(options.block_size)

    def check_model(self, model: ModelSpec) -> None:
        # the current release's own checks: what it refuses at load, and the layers it cannot size
        # (0.33 sizes the 2026 attention by per-layer specs; an older --vllm-version refuses them later)
        rules = vllm.rules(vllm.CURRENT_VERSION)
        rules.check_loadable(model)
        rules.check_features(model)

    def default_kv_dtype(self, model: ModelSpec, options: VllmOptions) -> tuple[str, str]:
        return vllm.rules(options.version).default_kv_dtype(model)

    def check_kv_formats(
        self, model: ModelSpec, k: StorageFormat, v: StorageFormat, options: VllmOptions | None = None
    ) -> None:
        # "vLLM 0.33 has no 'q8_0' KV cache dtype; vLLM 0.33's --kv-cache-dtype takes auto, ..."
        vllm.rules(options.version if options is not None else vllm.CURRENT_VERSION).check_formats(model, k, v)
        super().check_kv_formats(model, k, v)

    def kv_formats(
        self,
        model: ModelSpec,
        kv_dtype: str | None = None,
        k_dtype: str | StorageFormat | None = None,
        v_dtype: str | StorageFormat | None = None,
        options: object = None,
    ) -> KvChoice:
        """As `EngineProfile.kv_formats`; vLLM 0.33's `fp8_ds_mla` is refused, naming why, for a
        model without sparse MLA (DeepSeek-V3.2 / GLM-5 / DeepSeek-V4: the only layers whose
        backend, FLASHMLA_SPARSE, lists it; `engine_dtypes` row `attention` sparse_mla)."""
        from kvcalc.engines.vllm import v0_33_specs

        if (kv_dtype or "").strip().lower() == "fp8_ds_mla" and not (
            v0_33_specs.is_sparse_mla(model) or v0_33_specs.is_deepseek_v4(model)
        ):
            raise KvcalcError(
                f"{model.name}: vLLM 0.33 stores fp8_ds_mla rows only for sparse MLA (DeepSeek-V3.2, "
                "GLM-5, DeepSeek-V4: FLASHMLA_SPARSE); this model has none: use fp8",
                field="kv_dtype",
                value=kv_dtype,
            )
        opts = self.options(options)
        lowered = (kv_dtype or "").strip().lower()
        is_mla = any(layer.kind == "mla" for layer in model.layers) or v0_33_specs.is_deepseek_v4(model)
        if opts.version == vllm.CURRENT_VERSION and lowered in ("nvfp4", "nvfp4_4over6") and is_mla:
            # vLLM 0.33.0 `config/vllm.py` 3421-3437 `validate_nvfp4_kv_cache_with_mla`: any
            # "nvfp4*" dtype but the "_ds_mla" layouts, on a `use_mla` model (DeepSeek-V4 included:
            # `model_arch_config_convertor.py` 294-327), at config time, before any backend
            raise KvcalcError(
                f"{model.name}: vLLM 0.33 refuses it: nvfp4 KV cache is not supported with MLA "
                "(Multi-head Latent Attention) backends. Please use a different --kv-cache-dtype "
                "(e.g., 'fp8', 'auto', or 'nvfp4_ds_mla' with a sparse MLA backend) for MLA models "
                "such as DeepSeek. (vLLM 0.33.0 config/vllm.py validate_nvfp4_kv_cache_with_mla)",
                field="kv_dtype",
                value=kv_dtype,
            )
        if (
            lowered == "nvfp4_ds_mla"
            and opts.version == vllm.CURRENT_VERSION
            and opts.vendor != "amd"
            and v0_33_specs.is_deepseek_v4(model)
        ):
            # DeepseekV4ForCausalLM's own refusal on every CUDA GPU (`v0_33_specs.dsv4_refusal`);
            # `--attention-backend FLASHINFER_MLA_SPARSE_DSV4` off SM120 picks the plain-row class
            # instead (`nvidia/model.py` 556-559), whose backend does not list the dtype
            plain_rows = (
                opts.attention_backend or ""
            ).upper() == "FLASHINFER_MLA_SPARSE_DSV4" and v0_33_specs.cc_major(opts.compute_capability) != 12
            why = (
                "vLLM 0.33's FLASHINFER_MLA_SPARSE_DSV4 backend takes auto, bfloat16, fp8, fp8_e4m3 and "
                "fp8_ds_mla, not nvfp4_ds_mla (models/deepseek_v4/nvidia/flashinfer_sparse.py 111-117); use fp8"
                if plain_rows
                else v0_33_specs.dsv4_refusal(lowered)
            )
            raise KvcalcError(f"{model.name}: {why}", field="kv_dtype", value=kv_dtype)
        if (
            opts.version == vllm.CURRENT_VERSION
            and opts.vendor != "amd"
            and v0_33_specs.is_deepseek_v4(model)
            and (opts.attention_backend or "").upper() == "FLASHINFER_MLA_SPARSE_DSV4"
            and v0_33_specs.cc_major(opts.compute_capability) != 12
        ):
            # vLLM 0.33.0 `models/deepseek_v4/nvidia/model.py` `_select_dsv4_attn_cls` 556-559: this
            # backend off SM120 picks the plain-row class (bf16 or per-tensor fp8 rows), not the
            # fp8_ds_mla layout kvcalc sizes (`v0_33_specs.deepseek_v4_specs`): refused, not guessed
            raise KvcalcError(
                f"{model.name}: --attention-backend FLASHINFER_MLA_SPARSE_DSV4 makes vLLM 0.33 store "
                "DeepSeek-V4's plain-row cache (models/deepseek_v4/nvidia/model.py "
                "_select_dsv4_attn_cls), which kvcalc does not size; leave --attention-backend unset "
                "(FlashMLA's fp8_ds_mla layout)",
                field="attention_backend",
                value=opts.attention_backend,
            )
        if (
            lowered == "nvfp4_ds_mla"
            and opts.version == vllm.CURRENT_VERSION
            and v0_33_specs.cc_major(opts.compute_capability) == 10
            and not v0_33_specs.is_sparse_mla(model)
        ):
            # vLLM 0.33.0 `platforms/cuda.py` `_get_backend_priorities` (major 10): only the sparse
            # MLA backend FLASHMLA_SPARSE lists nvfp4_ds_mla (`flashmla_sparse.py`); FlashInfer takes
            # any "nvfp4*" name on a full-attention model as plain uint8, not modelled here
            raise KvcalcError(
                f"{model.name}: vLLM 0.33 stores nvfp4_ds_mla rows (352 B) only for DeepSeek-V3.2 / "
                "GLM-5's sparse MLA (FLASHMLA_SPARSE, SM100); kvcalc does not model it for this model: use fp8",
                field="kv_dtype",
                value=kv_dtype,
            )
        name = (kv_dtype or "").strip().lower()
        if (  # `opts`: the defaults (the current release, no GPU) where no options were given
            name
            and opts.version == vllm.CURRENT_VERSION
            and any(layer.kind == "mla" for layer in model.layers)
            and not v0_33_specs.is_deepseek_v4(model)
            and opts.vendor != "amd"
        ):
            from kvcalc.engine_dtypes import VLLM_033_CACHE_DTYPES, vllm_033_check_mla

            if name in VLLM_033_CACHE_DTYPES:
                vllm_033_check_mla(
                    name,
                    sparse=v0_33_specs.is_sparse_mla(model),
                    compute_capability=opts.compute_capability,
                )
        return super().kv_formats(model, kv_dtype, k_dtype, v_dtype, options)

    def unknown_kv_dtype(self, err: UnknownNameError, options: VllmOptions) -> KvcalcError:
        if options.version == vllm.CURRENT_VERSION:
            from kvcalc.engines.vllm.v0_33 import VLLM_033_TAKES

            takes = VLLM_033_TAKES
        else:
            takes = "use auto, bfloat16, float16, fp8, fp8_e5m2, int8_per_token_head or fp8_per_token_head"
        return KvcalcError(
            f"vLLM {options.version} has no '{err.name}' KV cache dtype",
            fix=takes,
            field=err.field,
            value=err.name,
            form=OPTION,
        )

    def split_kv_dtype(self, text: str, options: VllmOptions) -> tuple[str, VllmOptions]:
        from kvcalc.engine_dtypes import VLLM_033_CACHE_DTYPES

        row = VLLM_033_CACHE_DTYPES.get(text.strip().lower())
        # vLLM 0.33 dtypes that name a layout of a format kvcalc has (`engine_dtypes`): fp8_ds_mla
        # is fp8 on sparse MLA (`_canonicalize_sparse_mla_kv_cache_dtype`; the 656 B row is
        # `v0_33_specs.sparse_mla_specs`'), nvfp4_4over6 nvfp4's bytes (only its scales differ)
        if row is not None and row.name in ("fp8_ds_mla", "nvfp4_4over6"):
            self._check_033(row.name, options)
            return ("fp8_e4m3" if row.name == "fp8_ds_mla" else "nvfp4"), options
        if row is not None and row.name == "fp8_inc":  # no in-tree backend lists it (vllm_grid oracle)
            raise KvcalcError(
                f"vLLM 0.33 --kv-cache-dtype fp8_inc: no CUDA or ROCm backend takes it ({row.gpus}); use fp8",
                field="kv_dtype",
                value=row.name,
            )
        if row is not None and row.name == "nvfp4_ds_mla":
            cc = options.compute_capability or "9.0"
            if cc.split(".")[0] == "10":
                # FLASHMLA_SPARSE's 352 B row on SM100 (`v0_33_specs.sparse_mla_specs`); the fp8
                # format stands for it as for fp8_ds_mla, `kv_formats` refuses it off sparse MLA
                self._check_033(row.name, options)
                return "fp8_e4m3", options
            where = (
                f"vLLM 0.33 takes it on SM100 only, no backend on compute capability {cc}"
                f"{'' if options.compute_capability else ' (assumed: no GPU given)'}"
            )
            raise KvcalcError(
                f"--kv-cache-dtype nvfp4_ds_mla (DeepSeek sparse MLA, FLASHMLA_SPARSE): {where}; use fp8 (fp8_ds_mla)",
                field="kv_dtype",
                value=row.name,
            )
        if row is not None and (row.layout == "packed_slot" or row.name == "int4_per_token_head"):
            self._check_033(row.name, options)
            # the layers the preset packs are sized from `cache_dtype`; the rest in the model's dtype
            return "auto", dataclasses.replace(options, cache_dtype=row.name)
        plain, scales = vllm.split_kv_dtype(text)
        if scales and plain not in ("int8", "fp8"):
            raise KvcalcError(f"--kv-dtype {text}: vLLM has int8_per_token_head and fp8_per_token_head only")
        return plain, dataclasses.replace(options, per_token_head_scales=scales)

    @staticmethod
    def _check_033(name: str, options: VllmOptions) -> None:
        from kvcalc.engine_dtypes import vllm_033_check_device

        if options.version != vllm.CURRENT_VERSION:
            raise KvcalcError(
                f"vLLM {options.version} has no '{name}' KV cache dtype; use auto, bfloat16, "
                "float16, fp8, fp8_e5m2, int8_per_token_head or fp8_per_token_head",
                field="kv_dtype",
                value=name,
            )
        vllm_033_check_device(name, options.compute_capability, options.vendor)

    def _capacity(self, model, kv_memory_bytes, k, v, *, tp, max_model_len, concurrency, options, kv_cache_dtype):
        return vllm.capacity(
            model,
            kv_memory_bytes,
            k,
            v,
            tp=tp,
            max_model_len=max_model_len,
            concurrency=concurrency,
            kv_cache_dtype=kv_cache_dtype,
            options=options,
        )

    def launch_line(self, spec: launch.LaunchSpec) -> str:
        """`vllm serve ...` (`launch.vllm_line`: flags from `vllm/engine/arg_utils.py`)."""
        return launch.vllm_line(spec)

    def plan_engine_kv(
        self, model: ModelSpec, options: object, kv_options: dict[str, EngineOptions] | None = None
    ) -> PlanEngineKv | None:
        """vLLM's blocks on each GPU (`vllm.plan.plan_kv`): the MLA backend's block size, the
        null block, a hybrid's unified page, the version's concurrency rule; each of vLLM's own
        dtypes with the options it was parsed into (`kv_options`)."""
        from kvcalc.engines.vllm import plan

        by_dtype = {k: o for k, o in (kv_options or {}).items() if isinstance(o, VllmOptions)}
        return plan.plan_kv(model, self.options(options), by_dtype)

    def recorded_kv_dtype(self, model: ModelSpec, options: object, pick: tuple[str, str, str | None]) -> str:
        """vLLM's own `--kv-cache-dtype` for `pick`, as the launch line states it: the name the
        plan parsed where it kept one (`engine_kv_dtype`), else vLLM 0.33's name of the format
        (`engine_dtypes.VLLM_033_FORMAT_NAMES`: fp8_e4m3 is `fp8`) where it is not the model's
        default, else the format. The kvcalc name `fp8_e4m3` would not do: vLLM parses
        `--kv-cache-dtype fp8_e4m3` as its own entry, which on DeepSeek sparse MLA on Hopper picks
        FLASHINFER_MLA_SPARSE_SM90 (576 B rows) where `fp8` picks FLASHMLA_SPARSE (fp8_ds_mla,
        656 B; vLLM 0.33.0 `v1/attention/backends/mla/flashmla_sparse.py`,
        `flashinfer_mla_sparse_sm90.py`, `v0_33_specs.sparse_mla_specs`), so `kvcalc check` would
        size another backend than plan."""
        from kvcalc.engine_dtypes import VLLM_033_FORMAT_NAMES

        k, v, own = pick
        if own is None and k == v and k != self.default_kv_dtype(model, self.options(options))[0]:
            return VLLM_033_FORMAT_NAMES.get(k, k)
        return super().recorded_kv_dtype(model, options, pick)

    def engine_kv_dtype(self, choice: KvChoice, options: object) -> str | None:
        """vLLM's `--kv-cache-dtype` as given (`choice.label`), where it is a vLLM 0.33 `CacheDType`
        entry that the K / V formats do not name alone: a name whose parse changed the options
        (TurboQuant presets, `*_per_token_head`), a layout of a kvcalc format (`fp8_ds_mla`,
        `nvfp4_4over6`, `nvfp4_ds_mla`) or another spelling of one (`fp8_e4m3`, which on sparse
        MLA picks another backend than `fp8`). None for auto and for the names that are the
        formats' own (`fp8`, `nvfp4`, `bfloat16`: `engine_dtypes.VLLM_033_FORMAT_NAMES`)."""
        from kvcalc.engine_dtypes import VLLM_033_CACHE_DTYPES, VLLM_033_FORMAT_NAMES

        label = choice.label.strip().lower()
        if label.startswith("auto") or label not in VLLM_033_CACHE_DTYPES:
            return None
        plain = choice.options == options and choice.k == choice.v
        if plain and VLLM_033_FORMAT_NAMES.get(choice.k.name) == label:
            return None
        return label

    def launch_extras(
        self,
        model: ModelSpec,
        options: object,
        gpu: GpuSpec | None,
        k_dtype: StorageFormat | str | None = None,
        kv_cache_dtype: str | None = None,
    ) -> LaunchExtras:
        """`--block-size` where the options give one or the MLA backend on `gpu` takes another
        than 16 for a `k_dtype` cache, `kv_cache_dtype` where vLLM's own name picks the backend
        (`vllm.plan.launch_block_size`), `--attention-backend`
        where the options name one, the other cache options that differ from vLLM's defaults
        (`vllm.plan.launch_flags`)."""
        from kvcalc.engines.vllm import plan

        o: VllmOptions = self.options(options)
        return {
            "block_size": plan.launch_block_size(model, o, gpu, k_dtype, kv_cache_dtype),
            "attention_backend": o.attention_backend,
            "flags": plan.launch_flags(o),
        }

    def memory_for(self, model, seq_len, batch, k, v, *, tp=1, options=None) -> int:
        return vllm.memory_for(model, seq_len, batch, k, v, tp=tp, options=self.options(options))


class SglangProfile(EngineProfile[SglangOptions]):
    """SGLang's token pool (`kvcalc.engines.sglang`)."""

    name = "sglang"
    display_name = "SGLang"
    module: ClassVar[ModuleType] = sglang
    options_type = SglangOptions
    no_memory = sglang.NO_MEMORY
    plan_budget_note = " (vLLM's rule; SGLang's own budget comes from --mem-fraction-static)"

    def check_model(self, model: ModelSpec) -> None:
        sglang.check_model(model)

    def unknown_kv_dtype(self, err: UnknownNameError, options: SglangOptions) -> KvcalcError:
        rules = sglang.RULES.get(options.version, sglang.RULES["current"])
        return KvcalcError(
            f"{rules.label} has no '{err.name}' KV cache dtype",
            fix=f"its pool stores {', '.join(('auto', *rules.kv_dtypes))}",
            field=err.field,
            value=err.name,
            form=OPTION,
        )

    def check_kv_formats(
        self, model: ModelSpec, k: StorageFormat, v: StorageFormat, options: SglangOptions | None = None
    ) -> None:
        sglang.check_dtypes(k, v)  # "SGLang 0.5.23 has no 'q8_0' KV cache dtype; its pool stores auto, ..."
        super().check_kv_formats(model, k, v)

    def check_options(self, options: SglangOptions) -> None:
        if options.page_size <= 0:
            raise KvcalcError(f"--page-size must be a positive integer, got {options.page_size}")
        sglang.check_version(options.version)
        if options.swa_full_tokens_ratio is not None:
            sglang.check_swa_ratio(options.swa_full_tokens_ratio)
        sglang_mamba.check_options(options.mamba)

    def _capacity(self, model, kv_memory_bytes, k, v, *, tp, max_model_len, concurrency, options, kv_cache_dtype):
        return sglang.capacity(
            model,
            kv_memory_bytes,
            k,
            v,
            tp=tp,
            max_model_len=max_model_len,
            concurrency=concurrency,
            kv_cache_dtype=kv_cache_dtype,
            **options.pool_kwargs(),
        )

    def launch_line(self, spec: launch.LaunchSpec) -> str:
        """`python -m sglang.launch_server ...` (`launch.sglang_line`: flags from
        `python/sglang/srt/server_args.py`)."""
        return launch.sglang_line(spec)

    def memory_for(self, model, seq_len, batch, k, v, *, tp=1, options=None) -> int:
        return sglang.memory_for(model, seq_len, batch, k, v, tp=tp, **self.options(options).pool_kwargs())

    def plan_engine_kv(
        self, model: ModelSpec, options: object, kv_options: dict[str, EngineOptions] | None = None
    ) -> PlanEngineKv | None:
        """SGLang's pools on each GPU (`sglang_plan.plan_kv`): what `capacity --engine sglang`
        gives on the rank's KV memory (DeepSeek-V4's pools, the hybrids' state slots and request
        cap, the NSA / SWA pools)."""
        from kvcalc.engines import sglang_plan

        return sglang_plan.plan_kv(model, self.options(options))


class LlamacppProfile(EngineProfile[LlamacppOptions]):
    """llama.cpp's cells (`kvcalc.engines.llamacpp`): sized by n_ctx, layers split over devices;
    the version is `LlamacppOptions.version`."""

    name = "llamacpp"
    display_name = "llama.cpp"
    module: ClassVar[ModuleType] = llamacpp
    options_type = LlamacppOptions
    allocates_cells = True
    splits_heads = False
    plan_layer_split = True

    def check_model(self, model: ModelSpec) -> None:
        llamacpp.rules().check_model(model)  # the current release's (Gemma-4 sized, Step-3.7 refused)

    def unknown_kv_dtype(self, err: UnknownNameError, options: LlamacppOptions) -> KvcalcError:
        from kvcalc.engines.llamacpp.common import GGML_NAMES

        return KvcalcError(
            f"llama.cpp ({options.version}) has no '{err.name}' KV cache type",
            fix=f"use one of {', '.join(GGML_NAMES.values())}",
            field=err.field,
            value=err.name,
            form=OPTION,
        )

    def kv_formats(
        self,
        model: ModelSpec,
        kv_dtype: str | None = None,
        k_dtype: str | StorageFormat | None = None,
        v_dtype: str | StorageFormat | None = None,
        options: object = None,
    ) -> KvChoice:
        """As `EngineProfile.kv_formats`; a format llama.cpp lacks is named as typed, under the
        option that gave it (`--kv-dtype fp8`, not its kvcalc name `fp8_e4m3`)."""
        from kvcalc.engines.llamacpp.common import NoGgmlTypeError

        try:
            return super().kv_formats(model, kv_dtype, k_dtype, v_dtype, options)
        except NoGgmlTypeError as e:
            own = k_dtype if e.field == "k_dtype" else v_dtype
            if isinstance(own, StorageFormat):  # resolved by the request builder: named by its name
                own = own.name
            raise e.named(own, str(e.field)) if own else e.named(kv_dtype, "kv_dtype") from None

    def check_kv_formats(
        self, model: ModelSpec, k: StorageFormat, v: StorageFormat, options: LlamacppOptions | None = None
    ) -> None:
        llamacpp.ggml_name(k, field="k_dtype")  # "llama.cpp has no 'int4' KV cache type; use one of ..."
        llamacpp.ggml_name(v, field="v_dtype")
        super().check_kv_formats(model, k, v)

    def plan_formats(self, model: ModelSpec) -> tuple[tuple[str, ...], tuple[str | None, ...], frozenset[str]]:
        """llama.cpp's default cache type (f16, `common/common.h`), then q8_0; the checkpoint's
        weights (its 16-bit dtype where the checkpoint is fp8: GGUF has no fp8), then q8_0 (a
        GGUF's Q8_0). No fp8 cache either: llama.cpp has no fp8 cache type."""
        own = (model.weight_dtype or model.dtype).startswith("fp8")
        return ("fp16", "q8_0"), (model.dtype if own else None, "q8_0"), frozenset()

    def launch_line(self, spec: launch.LaunchSpec) -> str:
        """`llama-server ...` (`launch.llamacpp_line`: flags from `common/arg.cpp`)."""
        return launch.llamacpp_line(spec, llamacpp.ggml_name)

    def capacity(
        self,
        model,
        kv_memory_bytes,
        k,
        v,
        *,
        tp=1,
        max_model_len=None,
        concurrency=None,
        options=None,
        kv_cache_dtype=None,
    ) -> EngineResult:
        """With `options.n_ctx`: what llama.cpp allocates for it (checked against
        `kv_memory_bytes` when given); else the largest --ctx-size that fits `kv_memory_bytes`.
        `kv_cache_dtype` is unused: llama.cpp names its types itself (f16, q8_0)."""
        o: LlamacppOptions = self.options(options)
        if tp != 1:
            raise KvcalcError("llama.cpp splits layers over devices, not heads: drop --tp, use --gpus / --tensor-split")
        kw = dict(max_model_len=max_model_len, concurrency=concurrency, options=o)
        if o.n_ctx is not None:
            return llamacpp.allocate(model, o.n_ctx, k, v, kv_memory_bytes=kv_memory_bytes, **kw)
        if kv_memory_bytes:
            return llamacpp.capacity(model, kv_memory_bytes, k, v, **kw)
        raise KvcalcError("give --ctx-size (llama.cpp's -c) or --kv-memory")

    def allocate(
        self,
        model: ModelSpec,
        n_ctx: int,
        k: StorageFormat,
        v: StorageFormat,
        *,
        options: object = None,
        max_model_len: int | None = None,
        concurrency: int | None = None,
        kv_memory_bytes: int | None = None,
    ) -> EngineResult:
        """What llama.cpp allocates for `--ctx-size n_ctx` (`llamacpp.allocate`)."""
        o: LlamacppOptions = self.options(options)
        return llamacpp.allocate(
            model,
            n_ctx,
            k,
            v,
            max_model_len=max_model_len,
            concurrency=concurrency,
            kv_memory_bytes=kv_memory_bytes,
            options=o,
        )

    def for_batch(
        self, model, seq_len, batch, k, v, *, tp=1, options=None, kv_cache_dtype=None, kv_memory_bytes=None
    ) -> EngineResult:
        """n_ctx = seq_len x batch cells with --parallel batch (one sequence per request)."""
        o = dataclasses.replace(self.options(options), parallel=batch)
        return self.allocate(model, seq_len * batch, k, v, options=o, max_model_len=seq_len, concurrency=batch)


#: a profile picked by engine name at run time. Any: each takes its own options type, which its
#: `options` checks (the public methods take any options object; the hooks their own type)
AnyProfile = EngineProfile[Any]

#: engine name -> its profile (one instance each; profiles hold no state).
PROFILES: dict[str, AnyProfile] = {
    p.name: p for p in (IdealProfile(), VllmProfile(), SglangProfile(), LlamacppProfile())
}


def get_profile(name: str) -> AnyProfile:
    """The profile for engine `name` (case-insensitive, aliases resolved); raises `UnknownNameError`."""
    return PROFILES[canonical(name)]
