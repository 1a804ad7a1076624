"""Pydantic v2 models of the serving side's inputs: a GPU (`GpuSpec`, `kvcalc gpus`, `--gpu`) and
a deployment with its service targets (`Deployment`, `Targets`, `kvcalc check`). Part of
`kvcalc.schema`, which hands these names out (`from kvcalc.schema import GpuSpec` works
everywhere); they live in their own module so that a call that reads no GPU and no deployment,
`kvcalc estimate MODEL`, does not declare them at start-up (README "Speed").

Annotations are objects, not text, as in `kvcalc.schema`.
"""

from typing import Annotated, Literal

from pydantic import (
    BeforeValidator,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from kvcalc.errors import KvcalcError
from kvcalc.schema_types import _TOKENS_SCHEMA, _Frozen, _tokens
from kvcalc.units import MAX_CONCURRENCY, MAX_GPUS, MAX_QUANTITY, MAX_SEQ_LEN, parse_size


def _quantity(kind: str, *, min_unitless: int, hint_unit: str, allow_zero: bool = False) -> BeforeValidator:
    """A validator reading a file's size, rate or FLOP/s field with `units.parse_size`, the rule
    the CLI's size options follow: `80GB`, `24GiB`, `3.35TB/s`, `768e9`, `989.4TFLOPS` or an int."""

    def parse(value: object) -> object:
        if value is None:
            return value
        try:
            return parse_size(
                value, None, kind=kind, min_unitless=min_unitless, hint_unit=hint_unit, allow_zero=allow_zero
            )
        except KvcalcError as e:
            raise ValueError(e.message) from None

    return BeforeValidator(parse)


#: bytes of memory: `80GB`, `24GiB`, `1.5e9` or an int; unitless figures under 1 MiB are refused
_SIZE_SCHEMA = WithJsonSchema({"anyOf": [{"type": "integer"}, {"type": "number"}, {"type": "string"}]})
MemoryBytes = Annotated[
    int,
    _quantity("bytes", min_unitless=2**20, hint_unit="GiB"),
    Field(strict=True, gt=0, le=MAX_QUANTITY),
    _SIZE_SCHEMA,
]
#: bytes that may be small or 0 (an L2 cache)
Bytes0 = Annotated[
    int,
    _quantity("bytes", min_unitless=0, hint_unit="MiB", allow_zero=True),
    Field(strict=True, ge=0, le=MAX_QUANTITY),
    _SIZE_SCHEMA,
]
#: bytes per second: `3.35TB/s`, `768GB/s`, `768e9` or an int (decimal prefixes, as vendors quote)
BytesPerS = Annotated[
    int,
    _quantity("bytes_per_s", min_unitless=10**6, hint_unit="GB/s"),
    Field(strict=True, gt=0, le=MAX_QUANTITY),
    _SIZE_SCHEMA,
]
#: FLOP/s: `989.4TFLOPS`, `989.4e12` or an int
FlopsPerS = Annotated[
    int,
    _quantity("flops_per_s", min_unitless=10**6, hint_unit="TFLOPS"),
    Field(strict=True, gt=0, le=MAX_QUANTITY),
    _SIZE_SCHEMA,
]


# ----- deployments (`kvcalc check`; read by `kvcalc.load.deployments`) ------------------------

# strict: YAML `true` or `1.5` is not a count (pydantic's lax mode would read true as 1)
GpuCount = Annotated[int, Field(strict=True, gt=0, le=MAX_GPUS)]
#: a deployment's context: `32k` or an int, at most `units.MAX_SEQ_LEN`
ContextTokens = Annotated[int, BeforeValidator(_tokens), Field(strict=True, gt=0, le=MAX_SEQ_LEN), _TOKENS_SCHEMA]
# strict floats still take YAML ints (50 -> 50.0) but not booleans or strings; never inf / nan
Positive = Annotated[float, Field(strict=True, gt=0, le=1e12, allow_inf_nan=False)]


class Targets(_Frozen):
    """Service targets: the slowest acceptable time per output token (ms) and the least total
    output tokens/s over the whole deployment."""

    max_tpot_ms: Positive | None = None
    min_tokens_per_s: Positive | None = None


# ----- a deployment's tier below the GPU (`offload:`, checked by `kvcalc.offload_request`) ---------------
#
# Each size is written as the engine's own flag takes it, in the engine's unit: vLLM
# `kv_offloading_size` and LMCache sizes in GiB, SGLang `hicache_size` in GB (a value written with
# the other unit is refused with the figure to write instead, `engines.offload_rules.engine_number`).
# `host_memory` is a size with its unit (`2TB`, `1.5TiB`), per node.

#: a size as the engine's flag takes it: 1600, 37.5 or '1600GiB' (its own unit)
EngineSize = int | float | str


class OffloadSpec(_Frozen):
    """The engine's offload flags and the host that holds them.

    - `engine`: vllm or sglang (the engine that serves the deployment).
    - vLLM: `kv_offloading_size` (GiB, all ranks of one engine together),
      `kv_offloading_backend` (native, lmcache), `blocks_per_chunk`; LMCache:
      `lmcache_cpu_size` (GiB per TP worker) or `lmcache_l1_size` (GiB, one server per node).
    - SGLang: `hicache_ratio`, `hicache_size` (GB per rank), `hicache_host_memory_fraction`.
    - `host_memory` per node, `gpus_per_node`; `shared_prefix`: tokens every session shares.
    """

    engine: Literal["vllm", "sglang"]
    kv_offloading_size: EngineSize | None = None
    kv_offloading_backend: Literal["native", "lmcache"] = "native"
    blocks_per_chunk: Annotated[int, Field(strict=True, gt=0, le=1 << 20)] = 1
    lmcache_cpu_size: EngineSize | None = None
    lmcache_l1_size: EngineSize | None = None
    hicache_ratio: Annotated[float, Field(strict=True, gt=0, le=1e6, allow_inf_nan=False)] | None = None
    hicache_size: EngineSize | None = None
    hicache_host_memory_fraction: Annotated[float, Field(strict=True, gt=0, le=1, allow_inf_nan=False)] | None = None
    host_memory: MemoryBytes | None = None
    gpus_per_node: Annotated[int, Field(strict=True, gt=0, le=1024)] = 8
    shared_prefix: ContextTokens | None = None


class SpeculativeSpec(_Frozen):
    """Speculative decoding as `kvcalc plan --speculative-config` wrote it
    (`calc.speculative.SpecDecode`): vLLM's `method` and `num_speculative_tokens` (SGLang's
    --speculative-num-steps), the draft `model` (an EAGLE head or draft model: a bundled name,
    config file or Hub id; None for MTP and n-gram) and the user's `accepted` length (mean tokens
    a verify step emits; None: no speculative TPOT)."""

    method: Literal["mtp", "eagle", "eagle3", "draft_model", "ngram"]
    num_speculative_tokens: Annotated[int, Field(strict=True, gt=0, le=64)]
    model: Annotated[str, Field(min_length=1)] | None = None
    accepted: Positive | None = None


class Deployment(_Frozen):
    """One deployment. `tp` defaults to count / pp; dp = count / (tp x pp) replicas share the
    `concurrency` sequences of `max_seq_len` tokens: some hold ceil(concurrency / dp), the rest
    floor (`memory_plan.GpuFit.split_decode`). Checked by `kvcalc.calc.check.check`, with the
    KV arithmetic of `engine` and its `engine_options` (as `kvcalc plan` wrote them), so plan and
    check give one figure for one file."""

    name: str | None = None
    description: str | None = None
    model: str = Field(min_length=1)
    gpu: str = Field(min_length=1)
    count: GpuCount = 1
    tp: GpuCount | None = None
    pp: GpuCount = 1
    #: attention data-parallel ranks of one engine, expert-parallel size, decode context parallel
    #: (`kvcalc.calc.parallel`): count = tp x pp x dp_attention x dp replicas
    dp_attention: GpuCount = 1
    ep: GpuCount = 1
    dcp: GpuCount = 1
    kv_dtype: str | None = None
    weight_dtype: str | None = None
    max_seq_len: ContextTokens
    concurrency: Annotated[int, Field(strict=True, gt=0, le=MAX_CONCURRENCY)] = 1
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1, strict=True, allow_inf_nan=False)
    #: the serving engine whose KV arithmetic sizes the deployment, as `kvcalc plan --engine` took
    #: it (vllm, sglang, llamacpp, ideal; an alias); None: the exact formula (`ideal`)
    engine: Annotated[str, Field(min_length=1, max_length=40)] | None = None
    #: the engine's options that plan sized it with (`VllmOptions` field names: `version`,
    #: `block_size`, `attention_backend` ...), checked against the engine by
    #: `load.deployments.engine_options`; only with `engine`
    engine_options: dict[str, str | int | float | bool | None] | None = None
    targets: Targets | None = None
    #: the tier below the GPU (`OffloadSpec`), checked against its host memory
    offload: OffloadSpec | None = None
    #: speculative decoding (`SpeculativeSpec`): its memory and, with `accepted`, its TPOT
    speculative: SpeculativeSpec | None = None

    @field_validator("kv_dtype", "weight_dtype")
    @classmethod
    def _fmt(cls, v: str | None, info) -> str | None:
        if v is None:
            return v
        from kvcalc.errors import KvcalcError
        from kvcalc.formats import kv_format, weight_format

        try:
            return (kv_format if info.field_name == "kv_dtype" else weight_format)(v).name
        except KvcalcError as e:  # -> pydantic ValueError, which the loader reports against this field
            from kvcalc.engine_dtypes import VLLM_033_CACHE_DTYPES

            if info.field_name == "kv_dtype" and v.strip().lower() in VLLM_033_CACHE_DTYPES:
                # vLLM's own dtype (turboquant_k8v4, fp8_per_token_head ...): the file's engine
                # parses it (`load.deployments.engine_kv_of`), as `kvcalc plan` did
                return v.strip().lower()
            raise ValueError(e.message) from None

    #: `kv_dtype` as the file spells it (stripped, lower case): the name the file's engine parses
    #: (`load.deployments.engine_kv_of`), where `kv_dtype` is kvcalc's format name (vLLM 0.33's
    #: `fp8` and `fp8_e4m3` are both fp8_e4m3, but pick other sparse MLA backends)
    _kv_dtype_given: str | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_given(cls, data: object, handler: ModelWrapValidatorHandler["Deployment"]) -> "Deployment":
        dep = handler(data)
        given = data.get("kv_dtype") if isinstance(data, dict) else None
        if isinstance(given, str):
            dep._kv_dtype_given = given.strip().lower()
        return dep

    @property
    def kv_dtype_given(self) -> str | None:
        """`kv_dtype` as the file spells it (`_kv_dtype_given`), else `kv_dtype`."""
        return self._kv_dtype_given or self.kv_dtype

    @model_validator(mode="after")
    def _layout(self) -> "Deployment":
        tp = self.tp or self.count // (self.pp * self.dp_attention)
        if tp < 1 or self.count % (tp * self.pp * self.dp_attention):
            what = (
                f"tp x pp ({tp} x {self.pp})"
                if self.dp_attention == 1
                else f"tp x pp x dp_attention ({tp} x {self.pp} x {self.dp_attention})"
            )
            raise ValueError(f"count ({self.count}) must be a multiple of {what}")
        return self

    @property
    def resolved_tp(self) -> int:
        """tp, else count // (pp x dp_attention)."""
        return self.tp or self.count // (self.pp * self.dp_attention)

    @property
    def dp(self) -> int:
        """Replicas: count // (tp x pp x dp_attention)."""
        return self.count // (self.resolved_tp * self.pp * self.dp_attention)

    @property
    def batch_per_replica(self) -> int:
        """ceil(concurrency / dp): the fullest replica's sequences."""
        return -(-self.concurrency // self.dp)


class GpuSpec(_Frozen):
    """One GPU from `kvcalc/data/gpus.yaml` or a user's own YAML. Base units throughout; a file
    may write sizes with units (`memory_bytes: 80GiB`, `hbm_bytes_per_s: 3.35TB/s` or `768e9`,
    `bf16_flops_per_s: 989.4TFLOPS`), read exactly by `units.parse_size`.

    `memory_bytes` is the memory as the device reports it (nvidia-smi total MiB x 2^20), not
    the marketing figure; FLOP/s are dense (not 2:4 sparse); `interconnect_bytes_per_s` is the
    per-GPU bidirectional figure vendors quote (one direction is half). `compute_capability`:
    NVIDIA's "major.minor" (`torch.cuda.get_device_capability`; 9.0 Hopper, 10.0 Blackwell), which
    picks an engine's attention backend (vLLM's MLA block size); None for other vendors.
    `fp4_flops_per_s`: dense FP4 (NVFP4 / MXFP4) tensor peak, None where the GPU has no FP4
    tensor cores (every GPU before Blackwell). `nvlink_domain_gpus`: GPUs in one NVLink
    (NVSwitch) domain, the most that TP / EP can span at NVLink speed: 8 on an HGX board, 72 in a
    GB200 / GB300 NVL72 rack; None where the row states none (PCIe cards, other vendors).
    """

    key: str
    name: str
    vendor: Literal["nvidia", "amd", "other"] = "other"
    memory_bytes: MemoryBytes
    memory_note: str = ""
    hbm_bytes_per_s: BytesPerS
    bf16_flops_per_s: FlopsPerS
    fp8_flops_per_s: FlopsPerS | None = None
    fp4_flops_per_s: FlopsPerS | None = None
    l2_bytes: Bytes0 = 0
    interconnect_bytes_per_s: BytesPerS | None = None
    compute_capability: Annotated[str, Field(pattern=r"^[0-9]+\.[0-9]+$")] | None = None
    nvlink_domain_gpus: GpuCount | None = None
    source: str
