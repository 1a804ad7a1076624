"""The V1 engine's arithmetic that vLLM 0.11 and 0.33 share (`V1Rules`), calling each
release's own rules where they differ.

V1 (`vllm/v1/core/kv_cache_utils.py`, `vllm/v1/worker/gpu_worker.py`): blocks = available //
page // layers per group (`get_num_blocks`); concurrency = blocks / `blocks_per_request`; the
start-up check (`check_enough_kv_cache_memory`): available <= 0 raises "No available memory for
the cache blocks. ..."; less than one request of max_model_len needs raises "To serve at least
one request with the model's max seq len (L), (X GiB KV cache is needed, ..." (texts byte for
byte per version: `too_small`). kvcalc raises the first, and the second when not one block
fits; otherwise it warns (`KvcalcWarning`) and notes it, so the block figures stay readable.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, ClassVar

from kvcalc.calc.kv_cache import layer_kv_bytes_per_token
from kvcalc.engines import longest_fitting
from kvcalc.engines.vllm import hybrid, planning
from kvcalc.engines.vllm.base import VllmRules
from kvcalc.engines.vllm.common import (
    ALLOW_LONG_ENV,
    ASSUMED_COMPUTE_CAPABILITY,
    DEFAULT_BLOCK_SIZE,
    OTHER_BACKENDS,
    ROCM_MLA_BACKENDS,
    Group,
    Resolved,
    blocks_per_request,
    chunked_local,
    kv_cache_groups,
    longest_context,
    no_memory_error,
    uniform_page,
    vllm_cache_dtype,
)
from kvcalc.engines.vllm.dcp import check_dcp, dcp_note, with_dcp
from kvcalc.errors import MESSAGE, KvcalcError, KvcalcWarning
from kvcalc.formats import StorageFormat
from kvcalc.results import EngineResult
from kvcalc.schema import LayerSpec, ModelSpec

if TYPE_CHECKING:
    from kvcalc.engines.vllm.options import VllmOptions


class V1Rules(VllmRules):
    """The V1 engine (vLLM 0.10+): per-layer pages in groups, the hybrid allocator, hybrid Mamba
    models (`kvcalc.engines.vllm.hybrid`), an MLA backend's block size. A version sets:

    - `mla_backend_names`: the MLA backends it knows (`--attention-backend`);
    - `chunked_hybrid_default`: VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE unset;
    - `widen_groups`: `common.kv_cache_groups(widen=...)`;

    and implements the methods that raise `NotImplementedError` here.
    """

    mla_backend_names: ClassVar[tuple[str, ...]]
    chunked_hybrid_default: ClassVar[bool]
    widen_groups: ClassVar[bool] = False
    max_model_len_tail = (
        f" To allow overriding this maximum, set the env var {ALLOW_LONG_ENV}=1. {ALLOW_LONG_ENV} must be "
        "used with extreme caution. If the model uses relative position encoding (RoPE), positions exceeding "
        "derived_max_model_len lead to nan. If the model uses absolute position encoding, positions exceeding "
        "derived_max_model_len will cause a CUDA array out-of-bounds error."
    )

    # ----- what each V1 version states ---------------------------------------------------

    def select_block_size(
        self,
        model: ModelSpec,
        block_size: int | None,
        name: str | None,
        compute_capability: str | None,
        vendor: str | None,
        kv_cache_dtype: str | None,
    ) -> tuple[int, str | None]:
        """(block size, note) once `attention_block_size` has checked the backend's name."""
        raise NotImplementedError

    def available_memory_line(self, kv_memory_bytes: int) -> str:
        """The worker's "Available KV cache memory" line."""
        raise NotImplementedError

    def kv_figures_lines(self, tokens: int, max_model_len: int, concurrency: float) -> list[str]:
        """The start-up lines vLLM logs with the KV cache figures."""
        raise NotImplementedError

    def kv_cache_tokens(
        self, num_blocks: int, groups: list[Group], concurrency: float, max_model_len: int, block_size: int
    ) -> int:
        """The N of "GPU KV cache size: N tokens"."""
        raise NotImplementedError

    def request_bytes(
        self,
        model: ModelSpec,
        groups: list[Group],
        layers_per_group: int,
        max_model_len: int,
        block_size: int,
        page: int,
        in_flight: int,
    ) -> int:
        """KV bytes one request of `max_model_len` needs in vLLM's start-up check."""
        raise NotImplementedError

    def too_small(self, L: int, needed: int, available: int, estimated: int) -> str:
        """vLLM's message when one request of L does not fit, byte for byte."""
        raise NotImplementedError

    def check_groups(self, model: ModelSpec, groups: list[Group]) -> list[Group]:
        """The groups the start-up check counts: the ones the memory holds."""
        return groups

    def mamba_state(
        self, model: ModelSpec, tp: int, model_dtype_bytes: int = 2, model_dtype: str = "bf16"
    ) -> hybrid.MambaState:
        """The state of `model`'s Mamba / linear layers on one rank (`hybrid.mamba_state`)."""
        raise NotImplementedError

    def state_dtype_note(
        self, model: ModelSpec, state: hybrid.MambaState, model_dtype: str, tp: int, model_dtype_bytes: int
    ) -> str:
        """The note that says which dtype the state is in."""
        raise NotImplementedError

    def hybrid_alignment(
        self,
        model: ModelSpec,
        state: hybrid.MambaState,
        *,
        block_size: int,
        prefix_caching: bool | None,
        compute_capability: str,
        vendor: str | None,
    ) -> tuple[int, int, list[str], list[str]]:
        """(alignment in tokens, Mamba pages per request, log lines, notes) of a hybrid model."""
        raise NotImplementedError

    def hybrid_notes(self, blocks: hybrid.HybridBlocks, options: VllmOptions) -> list[str]:
        """Notes `resolve` adds for a hybrid model beyond `HybridBlocks.notes`: none by default."""
        return []

    # ----- shared V1 arithmetic -----------------------------------------------------------

    def kv_cache_groups(
        self, model: ModelSpec, hybrid_allocator: bool = True, mamba_pages: int = 1
    ) -> tuple[list[Group], int]:
        return kv_cache_groups(model, hybrid_allocator, mamba_pages, widen=self.widen_groups)

    def chunked_hybrid_allowed(self, allow: bool | None = None) -> bool:
        """`VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE` (`allow`; None: the version's
        default, `chunked_hybrid_default`). Off, vLLM turns the hybrid allocator off for a model
        with chunked local attention ("There is a latency regression ...", `VllmConfig.__post_init__`)."""
        return self.chunked_hybrid_default if allow is None else allow

    def attention_block_size(
        self,
        model: ModelSpec,
        block_size: int | None,
        backend: str | None = None,
        compute_capability: str | None = None,
        vendor: str | None = None,
        kv_cache_dtype: str | None = "auto",
    ) -> tuple[int, str | None]:
        """(block size vLLM uses, a note naming the MLA backend and why, or None) for `model`.

        `block_size` is the `--block-size` given (None: not given, vLLM's default);
        `kv_cache_dtype` vLLM's name for the cache dtype (`common.vllm_cache_dtype`). The
        version's `select_block_size` picks; here the backend's name is checked. Raises
        `KvcalcError` (field `attention_backend`) for an unknown backend, an MLA backend on a
        non-MLA model, a non-MLA backend on an MLA model, one the GPU's vendor lacks.
        """
        name = backend.strip().upper() if backend else None
        mla_names = self.mla_backend_names
        if name is not None and name not in mla_names and name not in OTHER_BACKENDS:
            raise KvcalcError(
                f"kvcalc knows the MLA backends {', '.join(mla_names)} and {', '.join(OTHER_BACKENDS)}",
                field="attention_backend",
                value=backend,
            )
        if not any(layer.kind == "mla" for layer in model.layers):
            if name in mla_names:
                raise KvcalcError(
                    f"{name} is an MLA backend and {model.name} has no MLA layers",
                    field="attention_backend",
                    value=backend,
                )
            return self.select_block_size(model, block_size, name, compute_capability, vendor, kv_cache_dtype)
        if name in OTHER_BACKENDS:
            raise KvcalcError(
                f"{model.name} uses MLA: give an MLA backend ({', '.join(mla_names)})",
                field="attention_backend",
                value=backend,
            )
        amd = vendor == "amd"
        if name is not None and (name in ROCM_MLA_BACKENDS) != amd and name != "TRITON_MLA":
            raise KvcalcError(
                f"{name} is {'a ROCm' if name in ROCM_MLA_BACKENDS else 'an NVIDIA'} backend and the "
                f"GPU is {'AMD' if amd else 'NVIDIA'}",
                field="attention_backend",
                value=backend,
            )
        return self.select_block_size(model, block_size, name, compute_capability, vendor, kv_cache_dtype)

    def align_block_size(
        self,
        model: ModelSpec,
        attention_layer: LayerSpec,
        k: StorageFormat,
        v: StorageFormat,
        *,
        block_size: int,
        tp: int,
        prefix_caching: bool | None,
        compute_capability: str,
        model_dtype: str,
        model_dtype_bytes: int,
        vendor: str | None = None,
        token_page: int | None = None,
    ) -> hybrid.HybridBlocks:
        """The block size, page and Mamba pages per request of a hybrid model: token page =
        `layer_kv_bytes_per_token(attention_layer)`, the state (`mamba_state`), the version's
        alignment (`hybrid_alignment`), then `hybrid.unify_pages`."""
        if token_page is None:  # else the backend's own packing (`customize_spec`), given
            token_page = layer_kv_bytes_per_token(attention_layer, k, v, tp)
        state = self.mamba_state(model, tp, model_dtype_bytes, model_dtype)
        notes = [self.state_dtype_note(model, state, model_dtype, tp, model_dtype_bytes)]
        align, mamba_pages, lines, more = self.hybrid_alignment(
            model,
            state,
            block_size=block_size,
            prefix_caching=prefix_caching,
            compute_capability=compute_capability,
            vendor=vendor,
        )
        return hybrid.unify_pages(
            token_page,
            state,
            block_size=block_size,
            align=align,
            mamba_pages=mamba_pages,
            log_lines=lines,
            notes=notes + more,
        )

    def _hybrid_blocks(
        self,
        model: ModelSpec,
        k: StorageFormat,
        v: StorageFormat,
        *,
        block_size: int,
        tp: int,
        options: VllmOptions,
        scales: bool,
        token_page: int | None = None,
    ) -> hybrid.HybridBlocks:
        """`align_block_size` for a model with Mamba / linear-attention layers beside full
        attention, on the options' GPU (no compute capability: Hopper assumed); refuses what
        kvcalc does not model (MLA or sliding layers beside Mamba, attention-free models,
        per-token-head scales)."""
        from kvcalc.formats import kv_format

        kinds = {layer.kind for layer in model.layers} - {"mlp"}

        def refuse(why: str) -> KvcalcError:
            return KvcalcError(f"{model.name}: {why}", field="model", value=model.name, form=MESSAGE)

        if kinds & {"mla", "sliding"}:
            raise refuse(
                "Mamba / linear-attention layers beside MLA or sliding-window layers are not modelled by "
                "the vLLM profile"
            )
        if "full" not in kinds:
            raise refuse("an attention-free model (only Mamba layers) is not modelled by the vLLM profile")
        if scales:
            raise refuse("per-token-head KV scales beside Mamba layers are not modelled by the vLLM profile")
        fmt = kv_format(self.default_kv_dtype(model)[0])
        attention = next(layer for layer in model.layers if layer.kind == "full")
        return self.align_block_size(
            model,
            attention,
            k,
            v,
            block_size=block_size,
            tp=tp,
            prefix_caching=options.prefix_caching,
            compute_capability=options.compute_capability or ASSUMED_COMPUTE_CAPABILITY,
            model_dtype=fmt.name,
            model_dtype_bytes=fmt.block_bytes // fmt.block_values,
            vendor=options.vendor,
            token_page=token_page,
        )

    def spec_resolve(
        self, model: ModelSpec, k: StorageFormat, v: StorageFormat, *, tp: int, options: VllmOptions, label: str | None
    ) -> Resolved | None:
        """A `Resolved` with per-layer specs (`Resolved.specs`) for a model whose layers do not
        share one page, as the release builds them; None (the default): the one-page path."""
        return None

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
        """The checks, then: each layer's own KV dtype (`layer_formats`), the MLA backend's block
        size (`attention_block_size`), a hybrid Mamba model's unified block and page
        (`align_block_size`), the hybrid allocator vLLM leaves on (off for chunked local
        attention unless `chunked_hybrid_allowed`), the page. `options.block_size` None:
        `--block-size` not given (vLLM's default, or the backend's preferred)."""
        self.check(model, k, v, tp, options.block_size)
        if options.dcp > 1:
            scales = options.per_token_head_scales
            cache_dtype = options.cache_dtype or (
                f"{'fp8' if k.name.startswith('fp8') else 'int8'}_per_token_head" if scales else None
            )
            if cache_dtype is None and label is not None and not label.startswith("auto"):
                from kvcalc.engine_dtypes import VLLM_033_CACHE_DTYPES, VLLM_033_FORMAT_NAMES

                cache_dtype = label if label in VLLM_033_CACHE_DTYPES else VLLM_033_FORMAT_NAMES.get(k.name, label)
            check_dcp(model, tp, options.dcp, self.version, cache_dtype, options.compute_capability)
        spec_resolved = self.spec_resolve(model, k, v, tp=tp, options=options, label=label)
        if spec_resolved is not None:
            return spec_resolved
        notes: list[str] = []
        k, v, dtype_note = self.layer_formats(model, k, v)
        if dtype_note:
            notes.append(dtype_note)
        scales = options.per_token_head_scales and not dtype_note
        block_size, block_note = self.attention_block_size(
            model,
            options.block_size,
            options.attention_backend,
            options.compute_capability,
            options.vendor,
            vllm_cache_dtype(model, k, scales),
        )
        if block_note:
            notes.append(block_note)
        block_size = block_size or DEFAULT_BLOCK_SIZE
        hybrid_allocator = options.hybrid_allocator
        if chunked_local(model) and hybrid_allocator:
            hybrid_allocator = self.chunked_hybrid_allowed(options.chunked_local_hybrid)
            if not hybrid_allocator:
                notes.append(
                    f"vLLM {self.version} turns the hybrid KV cache manager off for chunked local attention "
                    "(latency regression) unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1: "
                    "chunked layers keep every token"
                )
        if any(layer.kind in ("mamba", "linear") for layer in model.layers):
            hb = self._hybrid_blocks(model, k, v, block_size=block_size, tp=tp, options=options, scales=scales)
            notes += hb.notes
            notes += self.hybrid_notes(hb, options)
            return Resolved(
                k, v, hb.block_size, hb.page_bytes, hybrid_allocator, hb.mamba_pages, list(hb.log_lines), notes
            )
        page = uniform_page(model, k, v, block_size, tp, scales)
        return Resolved(k, v, block_size, page, hybrid_allocator, notes=notes)

    def _too_small_check(
        self,
        model: ModelSpec,
        groups: list[Group],
        layers_per_group: int,
        num_blocks: int,
        kv_memory_bytes: int,
        page: int,
        *,
        block_size: int,
        max_model_len: int,
        in_flight: int,
    ) -> list[str]:
        """`check_enough_kv_cache_memory`: raise when one request of L needs more than the memory
        and not one block fits; when blocks fit, warn and return the note (else no note). With
        `null_block` the check is against the memory less one block of every group; the groups
        counted are `check_groups`."""
        L = max_model_len
        check = kv_memory_bytes - page * layers_per_group if self.null_block else kv_memory_bytes
        groups = self.check_groups(model, groups)

        def need(n: int) -> int:
            return self.request_bytes(model, groups, layers_per_group, n, block_size, page, in_flight)

        if need(L) <= check:
            return []
        if check <= 0:  # 0.33: the null block takes all there is (`_check_enough_kv_cache_memory`)
            raise no_memory_error(kv_memory_bytes, self.no_memory)
        est = longest_fitting(lambda n: need(n) <= check, L)
        msg = self.too_small(L, need(L), check, est or 0)
        if num_blocks == 0:
            raise no_memory_error(kv_memory_bytes, msg)
        warnings.warn(f"vLLM would refuse to start: {msg}", KvcalcWarning, stacklevel=5)  # at capacity's caller
        return [f"vLLM refuses to start at this max_model_len: {msg}"]

    def _spec_capacity(
        self,
        model: ModelSpec,
        kv_memory_bytes: int,
        r: Resolved,
        *,
        max_model_len: int,
        concurrency: int | None,
        dtype_name: str,
        in_flight: int,
        dcp: int = 1,
    ) -> EngineResult:
        """`_capacity` over per-layer specs (`Resolved.specs`, `planning`): bytes per block = the
        widest group's pages (`_get_kv_cache_bytes_per_block`); blocks = available // that;
        a request holds the sum over groups of its pages (`blocks_per_request`); the start-up
        check (0.33 `get_kv_cache_configs`) is against the budget less one block (the null
        block), needing bytes per block x blocks per request, with vLLM's estimated maximum
        model length (`planning.estimate_max_model_len`) in its message."""
        L, notes = max_model_len, list(r.notes)
        groups = planning.kv_cache_groups(with_dcp(r.specs or [], dcp), block_outermost=r.block_outermost)
        block_bytes = planning.bytes_per_block(groups)
        lines = [*r.log_lines, self.available_memory_line(kv_memory_bytes)]
        num_blocks = kv_memory_bytes // block_bytes
        check = kv_memory_bytes - block_bytes if self.null_block else kv_memory_bytes
        per_req = planning.blocks_per_request(groups, L, in_flight)
        if check <= 0:
            raise no_memory_error(kv_memory_bytes, self.no_memory)
        needed = block_bytes * per_req
        if needed > check:
            est = planning.estimate_max_model_len(groups, block_bytes, check, L, in_flight)
            msg = self.too_small(L, needed, check, est)
            if num_blocks == 0:
                raise no_memory_error(kv_memory_bytes, msg)
            warnings.warn(f"vLLM would refuse to start: {msg}", KvcalcWarning, stacklevel=5)
            notes.append(f"vLLM refuses to start at this max_model_len: {msg}")
        conc = num_blocks / per_req
        tokens = self.kv_cache_tokens(num_blocks, [], conc, L, r.block_size)
        lines += self.kv_figures_lines(tokens, L, conc)
        notes.append(planning.groups_text(groups, block_bytes))
        if dcp > 1:
            notes.append(dcp_note(dcp, L, r.block_size, per_req))
        longest = None
        if concurrency:
            longest = longest_context(
                lambda n: num_blocks >= concurrency * planning.blocks_per_request(groups, n, in_flight), model, L
            )
        return EngineResult(
            engine="vllm",
            engine_version=self.label,
            kv_memory_bytes=kv_memory_bytes,
            kv_cache_dtype=dtype_name,
            block_size=r.block_size,
            page_size_bytes=block_bytes,
            num_gpu_blocks=num_blocks,
            usable_blocks=max(num_blocks - 1, 0),
            kv_cache_tokens=tokens,
            engine_kv_bytes=num_blocks * block_bytes,
            max_model_len=L,
            max_concurrency=conc,
            concurrency=concurrency,
            longest_context=longest,
            log_lines=lines,
            notes=notes,
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
        """V1: blocks = available // page // layers_per_group (`get_num_blocks`); concurrency =
        blocks / `blocks_per_request`; tokens as the version logs them (`kv_cache_tokens`)."""
        L, block_size, page, notes = max_model_len, r.block_size, r.page, r.notes
        in_flight = self.in_flight_tokens(options.max_num_batched_tokens, options.async_scheduling)
        if r.specs is not None:
            return self._spec_capacity(
                model,
                kv_memory_bytes,
                r,
                max_model_len=L,
                concurrency=concurrency,
                dtype_name=dtype_name,
                in_flight=in_flight,
                dcp=options.dcp,
            )
        # vllm/v1/worker/gpu_worker.py determine_available_memory
        lines = [*r.log_lines, self.available_memory_line(kv_memory_bytes)]
        groups, layers_per_group = self.kv_cache_groups(model, r.hybrid_allocator, r.mamba_pages)
        groups = with_dcp(groups, options.dcp)
        num_blocks = kv_memory_bytes // page // layers_per_group  # get_num_blocks
        notes += self._too_small_check(
            model,
            groups,
            layers_per_group,
            num_blocks,
            kv_memory_bytes,
            page,
            block_size=block_size,
            max_model_len=L,
            in_flight=in_flight,
        )
        per_req = blocks_per_request(groups, L, block_size, in_flight)
        conc = num_blocks / per_req
        tokens = self.kv_cache_tokens(num_blocks, groups, conc, L, block_size)
        lines += self.kv_figures_lines(tokens, L, conc)
        if options.dcp > 1:
            notes.append(dcp_note(options.dcp, L, block_size, per_req))
        padding = len(groups) * layers_per_group - sum(g.n_layers for g in groups)
        if padding:
            notes.append(f"{len(groups)} KV cache groups of {layers_per_group} layers: {padding} padding layers")
        longest = None
        if concurrency:
            longest = longest_context(
                lambda n: num_blocks >= concurrency * blocks_per_request(groups, n, block_size, in_flight), model, L
            )
        return EngineResult(
            engine="vllm",
            engine_version=self.label,
            kv_memory_bytes=kv_memory_bytes,
            kv_cache_dtype=dtype_name,
            block_size=block_size,
            page_size_bytes=page * layers_per_group,
            num_gpu_blocks=num_blocks,
            usable_blocks=max(num_blocks - 1, 0),
            kv_cache_tokens=tokens,
            engine_kv_bytes=num_blocks * page * layers_per_group,
            max_model_len=L,
            max_concurrency=conc,
            concurrency=concurrency,
            longest_context=longest,
            log_lines=lines,
            notes=notes,
        )
