"""vLLM's own block arithmetic for `kvcalc plan`, per candidate GPU.

`kvcalc plan --engine vllm` asks, for every layout on every GPU, two things of the KV cache:
the memory each rank must leave vLLM for `batch` requests of `seq_len` tokens, and how many such
requests the memory a rank leaves admits. Both come from the same pieces `vllm.capacity` and
`vllm.memory_for` use (the release's `VllmRules.resolve`: the layers' own dtype, the MLA
backend's block size on this GPU, a hybrid's unified page; `VllmRules.kv_cache_groups`,
`common.blocks_per_request`, `VllmRules.in_flight_tokens`), so a plan's max concurrency on a
GPU is floor of the "Maximum concurrency" `kvcalc capacity --engine vllm --gpu G --kv-memory M`
prints for the KV memory M the plan leaves (budget - weights - activation reserve - CUDA
context), and a layout fits exactly
when vLLM would start and admit the batch:

- V1 (0.11, 0.33): blocks = M // (page x layers per group) (`kv_cache_utils.get_num_blocks`);
  requests = blocks // blocks per request (`get_max_concurrency_for_kv_cache_config`, floored).
  0.33 also refuses to start unless M less one block (the null block) holds one request
  (`kv_cache_planning.get_kv_cache_configs`), so one request needs per request + 1 blocks.
  Memory for `batch` requests: max(batch x per request, per request + 1) blocks in 0.33,
  batch x per request in 0.11 (`vllm.memory_for`).
- V0 (0.6): block = page x every layer (`CacheEngine.get_cache_block_size`); a request of L
  tokens takes cdiv(L, block_size) blocks (`vllm.memory_for`'s rule; V0's printed concurrency,
  blocks x block_size / L, rounds the last block away).
- Pipeline stages: each worker holds its stage's layers and vLLM takes the smallest block count
  over workers (`get_kv_cache_configs`, step 5), each worker checked alone. Modelled for models
  whose KV layers form one group (one kind); a hybrid's groups projected onto stages
  (`_project_kv_cache_groups_to_worker`) are not: `VllmPlanKv.build` refuses them
  (`KvcalcError`), and the plan sizes those layouts by the exact formula and says so.

The GPU enters through its compute capability and vendor (`GpuSpec`), as `kvcalc capacity
--gpu` passes them (`VllmOptions.compute_capability`, `vendor`), which pick an MLA model's
backend and block size (`V1Rules.attention_block_size`): in 0.33 FLASH_ATTN_MLA 16 tokens on Hopper
(FLASHMLA 64 for an fp8 cache), FLASHINFER_MLA 32 on Blackwell, TRITON_MLA 16 on ROCm and SM120;
in 0.11 FlashMLA 64 on Hopper, CUTLASS MLA 128 on Blackwell.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kvcalc.engines.vllm.common import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    Group,
    blocks_per_request,
    default_kv_dtype,
    vllm_cache_dtype,
)
from kvcalc.engines.vllm.options import VllmOptions
from kvcalc.engines.vllm.planning import CacheGroup
from kvcalc.engines.vllm.versions import rules as release
from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.formats import StorageFormat, kv_format
from kvcalc.schema import GpuSpec, ModelSpec


def gpu_options(options: VllmOptions, gpu: GpuSpec | None) -> VllmOptions:
    """`options` (a `VllmOptions`) with the GPU's compute capability and vendor, as `kvcalc
    capacity --gpu` sets them (`cli.options.engine_options`: vendor 'other' is None); no GPU:
    `options` as given."""
    import dataclasses

    if gpu is None:
        return options
    return dataclasses.replace(
        options, compute_capability=gpu.compute_capability, vendor=None if gpu.vendor == "other" else gpu.vendor
    )


@dataclass(frozen=True)
class VllmPlanKv:
    """vLLM's KV arithmetic for one layout (tp, its pipeline stages, K / V formats) on one kind
    of GPU: `block_size` (tokens), `page_bytes` (one page of one layer on one rank), per stage
    (its groups, layers per group), the tokens in flight a sliding request holds
    (`VllmRules.in_flight_tokens`), and the notes the release's `resolve` makes (the backend that
    set the block size, a layer's own dtype, a hybrid's unified page)."""

    version: str
    block_size: int
    page_bytes: int
    stages: tuple[tuple[tuple[Group, ...], int], ...]
    in_flight: int
    notes: tuple[str, ...] = ()
    #: the 2026 models' groups over per-layer specs (`v0_33_specs`, `planning.kv_cache_groups`):
    #: then `page_bytes` is the pool's bytes per block (`planning.bytes_per_block`) and a request
    #: takes `planning.blocks_per_request` blocks, as `VllmRules.memory_for` counts them
    spec_groups: tuple[CacheGroup, ...] | None = None

    @classmethod
    def build(
        cls,
        model: ModelSpec,
        options: VllmOptions,
        gpu: GpuSpec | None,
        tp: int,
        stages: tuple[range, ...],
        k_dtype: StorageFormat,
        v_dtype: StorageFormat,
    ) -> VllmPlanKv:
        """Resolve once what no (seq_len, batch) changes. `options`: a `VllmOptions`, whose
        compute capability and vendor become the GPU's (`gpu_options`). Raises `KvcalcError`
        where `vllm.capacity` would, and (field `pp`) for a multi-group (hybrid or sliding +
        full) model over more than one stage."""
        return cls.on_stages(model, resolve(model, options, gpu, tp, k_dtype, v_dtype), stages)

    @classmethod
    def on_stages(cls, model: ModelSpec, whole: VllmPlanKv, stages: tuple[range, ...]) -> VllmPlanKv:
        """`whole` (the model on one stage, `resolve`) over the pipeline `stages` (layer
        ranges): each stage one group of its own layers; raises `KvcalcError` (field `pp`) for
        a multi-group model over more than one stage."""
        import dataclasses

        ((groups, per_group),) = whole.stages
        rules = release(whole.version)
        out: tuple[tuple[tuple[Group, ...], int], ...]
        if len(stages) == 1:
            out = ((tuple(groups), per_group),)
        elif whole.spec_groups is not None:
            raise KvcalcError(
                f"{model.name}: vLLM 0.33 sizes its layers by per-layer KV cache specs; their groups "
                "projected onto pipeline stages (kv_cache_planning._project_kv_cache_groups_to_worker) "
                "are not modelled by kvcalc",
                field="pp",
                value=len(stages),
                form=MESSAGE,
            )
        elif len(groups) > 1:
            raise KvcalcError(
                f"{model.name} has {len(groups)} KV cache groups: vLLM projects them onto each "
                "pipeline stage (kv_cache_planning._project_kv_cache_groups_to_worker), which kvcalc "
                "does not model",
                field="pp",
                value=len(stages),
                form=MESSAGE,
            )
        else:
            g = groups[0]
            counted = [rules.stage_layers(model, st) for st in stages]
            out = tuple(((Group(g.kind, g.window, n, g.mamba_pages),), n) if n else ((), 0) for n in counted)
        return dataclasses.replace(whole, stages=out)

    def _per_request(self, groups: tuple[Group, ...], seq_len: int) -> int:
        """Blocks one request of `seq_len` tokens takes (V0's one full group: cdiv(seq_len, block_size));
        a spec model's: `planning.blocks_per_request` over its groups."""
        if self.spec_groups is not None:
            from kvcalc.engines.vllm import planning

            return planning.blocks_per_request(list(self.spec_groups), seq_len, self.in_flight)
        return blocks_per_request(list(groups), seq_len, self.block_size, self.in_flight)

    def stage_bytes(self, seq_len: int, batch: int) -> list[int]:
        """KV memory (bytes) each stage's rank must leave vLLM so that it starts and admits
        `batch` requests of `seq_len` tokens: `vllm.memory_for`'s blocks x page x layers per
        group (0.33: at least one request's blocks + the null block)."""
        out = []
        rules = release(self.version)
        for groups, per_group in self.stages:
            if not groups and self.spec_groups is None:
                out.append(0)
                continue
            per_req = self._per_request(groups, seq_len)
            out.append(rules.blocks_for_batch(per_req, batch) * self.page_bytes * per_group)
        return out

    def max_batch(self, seq_len: int, free_bytes: list[int]) -> int:
        """Requests of `seq_len` tokens vLLM admits at once when stage s leaves `free_bytes[s]`
        of KV memory: min over stages of blocks // blocks per request, blocks =
        free // (page x layers per group) (floor of `vllm.capacity`'s max concurrency); 0 when
        a stage would not start (0.33: its blocks less the null block hold no request)."""
        best = None
        rules = release(self.version)
        for (groups, per_group), free in zip(self.stages, free_bytes):
            if not groups and self.spec_groups is None:
                continue
            blocks = max(free, 0) // (self.page_bytes * per_group)
            per_req = self._per_request(groups, seq_len)
            if not rules.starts(blocks, per_req):
                return 0
            n = blocks // per_req
            best = n if best is None else min(best, n)
        return 0 if best is None else best


def resolve(
    model: ModelSpec,
    options: VllmOptions,
    gpu: GpuSpec | None,
    tp: int,
    k_dtype: StorageFormat | str,
    v_dtype: StorageFormat | str,
    label: str | None = None,
) -> VllmPlanKv:
    """The model on one stage on `gpu` (what depends on the GPU, tp and formats, not on the
    pipeline split): the release's `resolve` (block size, page, notes) and `kv_cache_groups`
    (V0: one block of every layer, sliding ones full, `CacheEngine`). `label`: vLLM's
    `--kv-cache-dtype` where the formats do not say it (`calc.plan.KvPick.engine_dtype`), as
    `vllm.capacity` hands it to `resolve`. Raises `KvcalcError` where `vllm.capacity` would."""
    o = gpu_options(options, gpu)
    rules = release(o.version)
    k, v = kv_format(k_dtype), kv_format(v_dtype)
    r = rules.resolve(model, k, v, tp=tp, options=o, label=label)
    in_flight = rules.in_flight_tokens(o.max_num_batched_tokens, o.async_scheduling)
    if r.specs is not None:  # the 2026 models: per-layer specs, as `VllmRules.memory_for` counts them
        from kvcalc.engines.vllm import planning

        spec_groups = planning.kv_cache_groups(r.specs, block_outermost=r.block_outermost)
        return VllmPlanKv(
            version=o.version,
            block_size=r.block_size,
            page_bytes=planning.bytes_per_block(spec_groups),
            stages=(((), 1),),
            in_flight=in_flight,
            notes=tuple(r.notes),
            spec_groups=tuple(spec_groups),
        )
    groups, per_group = rules.kv_cache_groups(model, r.hybrid_allocator, r.mamba_pages)
    return VllmPlanKv(
        version=o.version,
        block_size=r.block_size,
        page_bytes=r.page,
        stages=((tuple(groups), per_group),),
        in_flight=in_flight,
        notes=tuple(r.notes),
    )


def plan_kv(
    model: ModelSpec, options: VllmOptions, kv_options: Mapping[str, VllmOptions] | None = None
) -> Callable[..., VllmPlanKv]:
    """The callable `calc.plan.PlanSearch.engine_kv` takes: (gpu, tp, stages, kv, dcp=1) ->
    `VllmPlanKv`, resolved once per (compute capability, vendor, tp, formats, dcp) and split once
    per pipeline split: GPUs of one architecture share it.

    `kv` is (K, V) or a `calc.plan.KvPick`, whose `engine_dtype` names the options object the
    request builder parsed that dtype into (`kv_options`, by name: `VllmProfile.kv_formats` folds
    TurboQuant presets and per-token-head scales into `cache_dtype` / `per_token_head_scales`),
    so each layout is sized exactly as `kvcalc capacity --engine vllm --kv-cache-dtype X` sizes
    it (`VllmRules.resolve`). `dcp` > 1: vLLM's checks under decode context parallel
    (`dcp.check_dcp`, through `resolve`) and the backend it picks there (SM100: FA4's heads x
    dcp); the request's tokens per rank, cdiv(L, dcp), are the caller's (`calc.plan._Placed.positions`)."""
    import dataclasses

    cache: dict[tuple, VllmPlanKv | KvcalcError] = {}
    by_dtype = dict(kv_options or {})

    def cached(key: tuple, make: Callable[[], VllmPlanKv]) -> VllmPlanKv:
        if key not in cache:
            try:
                cache[key] = make()
            except KvcalcError as e:
                cache[key] = e
        found = cache[key]
        if isinstance(found, KvcalcError):
            raise found
        return found

    def build(
        gpu: GpuSpec, tp: int, stages: tuple[range, ...], kv: tuple[StorageFormat, ...], dcp: int = 1
    ) -> VllmPlanKv:
        label: str | None = getattr(kv, "engine_dtype", None)  # `calc.plan.KvPick`
        key = (gpu.compute_capability, gpu.vendor, tp, tuple(kv), label, dcp)
        o = by_dtype.get(label, options) if label else options
        if dcp > 1:
            o = dataclasses.replace(o, dcp=dcp)
        whole = cached(key, lambda: resolve(model, o, gpu, tp, kv[0], kv[1], label))
        split = tuple((s.start, s.stop) for s in stages)
        return cached((*key, split), lambda: VllmPlanKv.on_stages(model, whole, stages))

    return build


def launch_block_size(
    model: ModelSpec,
    options: VllmOptions,
    gpu: GpuSpec | None,
    k_dtype: StorageFormat | str | None = None,
    cache_dtype: str | None = None,
) -> int | None:
    """The `--block-size` a launch line states, None where vLLM's default 16 stands.

    The block vLLM uses on `gpu` for a `k_dtype` cache (None: the model's dtype) is stated when
    it is not 16 or when the options give one that differs from vLLM's own choice: an MLA
    model's backend takes another size (`V1Rules.attention_block_size`; 0.33: FLASHMLA 64 for an
    fp8 cache on Hopper, FLASHINFER_MLA 32 on Blackwell, and a `--block-size 16` given on
    Blackwell, which moves vLLM to TRITON_MLA, is stated; 0.11: FlashMLA 64 on Hopper, CUTLASS
    MLA 128 on Blackwell whatever is given). Stating a backend's own preferred size picks the
    same backend again: the ones passed over for it were passed over without it too. A hybrid's
    unified block is vLLM's own choice: not stated. `cache_dtype`: vLLM's own `--kv-cache-dtype`
    where the plan carries one (`calc.plan.KvPick.engine_dtype`: `fp8_ds_mla` picks FLASHMLA_SPARSE
    where `fp8` picks FLASHINFER_MLA_SPARSE on Blackwell), which the backend is chosen for."""
    o = gpu_options(options, gpu)
    rules = release(o.version)
    given = o.block_size
    if cache_dtype is not None and given is None:
        from kvcalc.engines.vllm import v0_33_specs

        if v0_33_specs.needs_specs(model):  # the per-layer backends' own block (`v0_33.spec_resolve`)
            return None
    own = chosen = given or DEFAULT_BLOCK_SIZE
    if any(layer.kind == "mla" for layer in model.layers):
        k = kv_format(k_dtype or default_kv_dtype(model)[0])
        dtype = cache_dtype or vllm_cache_dtype(model, k, o.per_token_head_scales)

        def pick(size: int | None) -> int:
            return rules.attention_block_size(model, size, o.attention_backend, o.compute_capability, o.vendor, dtype)[
                0
            ]

        own, chosen = pick(None), pick(given)
    elif given is not None:
        own = DEFAULT_BLOCK_SIZE
    return None if chosen == own == DEFAULT_BLOCK_SIZE else chosen


def launch_flags(options: VllmOptions) -> tuple[str, ...]:
    """The `vllm serve` flags (`vllm/engine/arg_utils.py`) for the cache options of `options` (a
    `VllmOptions`) that differ from vLLM's defaults and change its blocks, so that the launch
    line runs what the plan sized: `--disable-hybrid-kv-cache-manager` (hybrid_allocator False),
    `--max-num-batched-tokens N` (a value other than kvcalc's default), `--no-async-scheduling`
    (releases with async scheduling only, `VllmRules.async_scheduling`: others refuse the
    option), `--enable-prefix-caching` / `--no-enable-prefix-caching` (given either way). The
    block size and attention backend are `launch_block_size` and `LaunchSpec.attention_backend`."""
    flags: list[str] = []
    if not options.hybrid_allocator:
        flags.append("--disable-hybrid-kv-cache-manager")
    if options.max_num_batched_tokens != DEFAULT_MAX_NUM_BATCHED_TOKENS:
        flags += ["--max-num-batched-tokens", str(options.max_num_batched_tokens)]
    if release(options.version).async_scheduling and not options.async_scheduling:
        flags.append("--no-async-scheduling")
    if options.prefix_caching is not None:
        flags.append("--enable-prefix-caching" if options.prefix_caching else "--no-enable-prefix-caching")
    return tuple(flags)
