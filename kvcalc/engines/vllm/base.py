"""The interface every vLLM version module implements (`VllmRules`), with the defaults and
the steps every release shares (the checks, `capacity`'s prelude, `memory_for`).

A version is one subclass in its own module (`v0_33.Vllm033`, `v0_11.Vllm011`, `v0_6.VllmV0`),
registered in `kvcalc.engines.vllm.versions.VERSION_MODULES`; `kvcalc.engines.vllm.rules(version)`
gives its instance. The version is chosen once, from `VllmOptions.version`; nothing below takes
a version argument. The V1 engine's shared arithmetic is `v1.V1Rules`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from kvcalc.calc.kv_cache import ENGINES_MODEL_TODAY, LAYER_FEATURES, check_tp, layer_features
from kvcalc.engines.vllm.common import (
    BLOCK_SIZES,
    DEFAULT_BLOCK_SIZE,
    NO_MEMORY,
    Group,
    Resolved,
    blocks_per_request,
    check_formats,
    check_model,
    default_kv_dtype,
    kv_cache_groups,
    long_max_model_len,
    no_memory_error,
)
from kvcalc.errors import MESSAGE, OPTION_SAYS, KvcalcError, flag
from kvcalc.formats import StorageFormat
from kvcalc.results import EngineResult
from kvcalc.schema import ModelSpec

if TYPE_CHECKING:
    from kvcalc.engines.vllm.options import VllmOptions


def check_positive_block_size(block_size: int) -> None:
    """Raise `KvcalcError` (field `block_size`) for a block size <= 0."""
    if block_size <= 0:
        raise KvcalcError(
            f"must be a positive integer, got {block_size}", field="block_size", value=block_size, form=OPTION_SAYS
        )


class VllmRules:
    """One vLLM version's rules. Class attributes:

    - `version`: the `--vllm-version` value; `label`: the `engine_version` a result names;
    - `fp32_served_as`: the dtype an fp32 checkpoint is served in (`default_kv_dtype`);
    - `no_memory`: the "No available memory" start-up error's text;
    - `default_swap_space_bytes`: the CPU swap a GPU gets by default (V0's `# CPU blocks`);
    - `null_block`: the start-up check holds one block of every group back (`blocks_for_batch`);
    - `async_scheduling`: `--async-scheduling` changes the tokens in flight (`in_flight_tokens`);
    - `max_model_len_tail`: the end of the "User-specified max_model_len" refusal.
    """

    version: ClassVar[str]
    label: ClassVar[str]
    fp32_served_as: ClassVar[str] = "bf16"
    no_memory: ClassVar[str] = NO_MEMORY
    default_swap_space_bytes: ClassVar[int] = 0
    null_block: ClassVar[bool] = False
    async_scheduling: ClassVar[bool] = False
    max_model_len_tail: ClassVar[str] = ""

    def default_kv_dtype(self, model: ModelSpec) -> tuple[str, str]:
        """(format name, label) of `--kv-cache-dtype auto` (`common.default_kv_dtype`)."""
        return default_kv_dtype(model, self.fp32_served_as)

    def check_block_size(self, block_size: int) -> None:
        """Raise `KvcalcError` (field `block_size`) unless this version accepts `block_size`
        (V1: `common.BLOCK_SIZES`, `vllm/config/cache.py` `BlockSize`)."""
        check_positive_block_size(block_size)
        if block_size not in BLOCK_SIZES:
            raise KvcalcError(
                f"vLLM accepts {', '.join(map(str, BLOCK_SIZES))} (vllm/config/cache.py BlockSize)",
                field="block_size",
                value=block_size,
            )

    def check_loadable(self, model: ModelSpec) -> None:
        """Raise `KvcalcError` (field `model`) for a model this version cannot load; none by default."""

    def check(self, model: ModelSpec, k: StorageFormat, v: StorageFormat, tp: int, block_size: int | None) -> None:
        """The checks `capacity` and `memory_for` share: the block size given (None: not given;
        first, as vLLM's argparse), the model the version cannot load (`check_loadable`), the TP
        degree, the model (`common.check_model`), the formats."""
        if block_size is not None:
            self.check_block_size(block_size)
        self.check_loadable(model)
        check_tp(model, tp)
        self.check_features(model)
        self.check_formats(model, k, v)

    def check_formats(self, model: ModelSpec, k: StorageFormat, v: StorageFormat) -> None:
        """Raise `KvcalcError` (field `k_dtype` / `v_dtype`) for a format this version has no
        cache dtype for (`common.check_formats`: no block-quantized format before 0.33)."""
        check_formats(model, k, v, version=self.version)

    def check_features(self, model: ModelSpec) -> None:
        """Raise `KvcalcError` (field `model`) for layers this version does not have: hybrid
        attention + Mamba-2 layers (`common.check_model`), and the 2026 attention
        (`kv_cache.layer_features`), which a release before 0.33 does not have ("vLLM 0.11 does
        not have ..."); sinks and K = V projections change no cache and pass."""
        missing = sorted(layer_features(model) - ENGINES_MODEL_TODAY)
        if missing or model.index_head_dim is not None:
            what = "; ".join(LAYER_FEATURES[m] for m in missing) or LAYER_FEATURES["indexer"]
            raise KvcalcError(
                f"{model.name}: vLLM {self.version} does not have {what} (vLLM 0.33 sizes the 2026 "
                "attention: --vllm-version 0.33)",
                field="model",
                value=model.name,
                form=MESSAGE,
            )
        check_model(model)

    def check_max_model_len(self, model: ModelSpec, max_model_len: int, allow_long: bool = False) -> str | None:
        """`common.long_max_model_len` with this version's message."""
        return long_max_model_len(model, max_model_len, allow_long, self.max_model_len_tail)

    def layer_formats(
        self, model: ModelSpec, k: StorageFormat, v: StorageFormat
    ) -> tuple[StorageFormat, StorageFormat, str | None]:
        """(K, V, note) as the model's layers cache them: `k`, `v`, None unless a version says otherwise."""
        return k, v, None

    def attention_block_size(
        self,
        model: ModelSpec,
        block_size: int | None,
        backend: str | None = None,
        compute_capability: str | None = None,
        vendor: str | None = None,
        kv_cache_dtype: str | None = "auto",
    ) -> tuple[int, str | None]:
        """(block size, note): the size given, else `DEFAULT_BLOCK_SIZE` (no backend sets it)."""
        return block_size or DEFAULT_BLOCK_SIZE, None

    def in_flight_tokens(self, max_num_batched_tokens: int, async_scheduling: bool = True) -> int:
        """Tokens scheduled but not yet settled, which a sliding-window request holds beyond its
        window: max_num_batched_tokens (0.11 `SlidingWindowSpec.max_memory_usage_bytes`)."""
        return max_num_batched_tokens

    def kv_cache_groups(
        self, model: ModelSpec, hybrid_allocator: bool = True, mamba_pages: int = 1
    ) -> tuple[list[Group], int]:
        """(groups, layers per group) (`common.kv_cache_groups`)."""
        return kv_cache_groups(model, hybrid_allocator, mamba_pages)

    def stage_layers(self, model: ModelSpec, stage: range) -> int:
        """The layers of pipeline stage `stage` that hold pages: every layer but mlp-only ones."""
        return sum(1 for i in stage if model.layers[i].kind != "mlp")

    def blocks_for_batch(self, per_request: int, batch: int) -> int:
        """Blocks that let vLLM start and admit `batch` requests of `per_request` blocks:
        batch x per request; with `null_block`, at least per request + 1."""
        if self.null_block:
            return max(batch * per_request, per_request + 1)
        return batch * per_request

    def starts(self, blocks: int, per_request: int) -> bool:
        """Whether `blocks` let vLLM start with requests of `per_request` blocks (`null_block`:
        one block is held back, so one request needs per request + 1)."""
        return blocks >= per_request + 1 if self.null_block else True

    def resolve(
        self,
        model: ModelSpec,
        k: StorageFormat,
        v: StorageFormat,
        *,
        tp: int,
        options: VllmOptions,
        label: str | None = None,
    ) -> Resolved:
        """The block size, page and notes for `model` (`Resolved`); `label`: the
        `--kv-cache-dtype` as given ('auto (bf16)' / None: auto). Raises `KvcalcError`."""
        raise NotImplementedError

    def capacity(
        self,
        model: ModelSpec,
        kv_memory_bytes: int,
        k: StorageFormat,
        v: StorageFormat,
        *,
        tp: int,
        max_model_len: int | None,
        concurrency: int | None,
        kv_cache_dtype: str | None,
        options: VllmOptions,
    ) -> EngineResult:
        """`kvcalc.engines.vllm.capacity` for this version: `resolve`, the checks of the
        options and memory, max_model_len, then `_capacity`."""
        asked = (k, v)
        r = self.resolve(model, k, v, tp=tp, options=options, label=kv_cache_dtype)
        k, v, notes = r.k, r.v, r.notes
        if (k, v) != asked:  # the layers cache in their own dtype: the label says what they hold
            kv_cache_dtype = None
        n = options.max_num_batched_tokens
        if n <= 0:
            raise KvcalcError(
                f"must be a positive integer, got {n}", field="max_num_batched_tokens", value=n, form=OPTION_SAYS
            )
        if kv_memory_bytes <= 0:
            raise no_memory_error(kv_memory_bytes, self.no_memory)
        L = max_model_len or model.default_context
        if L is None:
            raise KvcalcError(
                f"{model.name} has no max_position_embeddings; give {flag('max_model_len')}",
                field="max_model_len",
                form=MESSAGE,
            )
        long_note = self.check_max_model_len(model, L, options.allow_long_max_model_len)
        if long_note:
            notes.append(f"vLLM warns: {long_note}")
        dtype_name = kv_cache_dtype or (k.name if k == v else f"{k.name}/{v.name}")
        return self._capacity(
            model, kv_memory_bytes, r, max_model_len=L, concurrency=concurrency, dtype_name=dtype_name, options=options
        )

    def _capacity(
        self,
        model: ModelSpec,
        kv_memory_bytes: int,
        r: Resolved,
        *,
        max_model_len: int,
        concurrency: int | None,
        dtype_name: str,
        options: VllmOptions,
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
        tp: int,
        options: VllmOptions,
    ) -> int:
        """KV memory one rank needs so that vLLM starts and fits `batch` requests of `seq_len`
        tokens: `blocks_for_batch` x page x layers per group."""
        r = self.resolve(model, k, v, tp=tp, options=options)
        in_flight = self.in_flight_tokens(options.max_num_batched_tokens, options.async_scheduling)
        if r.specs is not None:  # per-layer specs: bytes per block x blocks (`planning`)
            from kvcalc.engines.vllm import planning
            from kvcalc.engines.vllm.dcp import with_dcp

            spec_groups = planning.kv_cache_groups(with_dcp(r.specs, options.dcp), block_outermost=r.block_outermost)
            per_request = planning.blocks_per_request(spec_groups, seq_len, in_flight)
            return self.blocks_for_batch(per_request, batch) * planning.bytes_per_block(spec_groups)
        from kvcalc.engines.vllm.dcp import with_dcp

        groups, layers_per_group = self.kv_cache_groups(model, r.hybrid_allocator, r.mamba_pages)
        per_req = blocks_per_request(with_dcp(groups, options.dcp), seq_len, r.block_size, in_flight)
        return self.blocks_for_batch(per_req, batch) * r.page * layers_per_group
