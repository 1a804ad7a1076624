"""Flags every command shares, declared once: single flags as `Annotated` aliases, and flag
sets (`KvFormatFlags`, `LayoutFlags`, `GpuPlanFlags`, one per engine) that
`flag_sets` spreads into a command's signature and hands back as one frozen object each.
Also the checks that turn options into values and refuse an option that would be ignored.

A command declares a group as a parameter annotated with the group's class (all its options)
or `Annotated[Group, only("a", "b", a="other help")]` (some of them, help text overridden):

    @handle_errors
    @flag_sets(order=("gpu", "count"))
    def estimate(ctx: typer.Context, model: ModelArg, kv: KvFormatFlags = KvFormatFlags(), ...)

typer reads `inspect.signature`, so the wrapper's rewritten `__signature__` lists each group's
options in place (or in `order`); which options the user typed still comes from the click
context (`typed_options`).

Start-up: every command imports this module, so declaring it must cost little. The annotations
are objects, not strings (no `from __future__ import annotations`): typer and the groups read
them without evaluating text. The groups are `FlagSet`s, not dataclasses (a frozen dataclass
compiles six methods when declared), and `Only` is a NamedTuple.
"""

import copy
import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, NamedTuple, Optional, TypeVar, Union

import typer

# defaults as plain constants: importing the plan, the roofline or the engines here would make
# every command pay for them at start-up (the engines' options objects load in `to_options`)
from kvcalc.calc.defaults import (
    DEFAULT_BW_EFFICIENCY,
    DEFAULT_CUDA_CONTEXT_BYTES,
    DEFAULT_FLOPS_EFFICIENCY,
    DEFAULT_GPU_MEMORY_UTILIZATION,
)
from kvcalc.engines import defaults as engine_defaults
from kvcalc.errors import MESSAGE, OPTION_SAYS, KvcalcError
from kvcalc.requests import check_limits, check_positive, resolve_seq_len, warn_beyond_context  # noqa: F401

if TYPE_CHECKING:  # (annotations here are evaluated: these are named as strings)
    from kvcalc.calc.memory_plan import Layout
    from kvcalc.calc.speculative import SpecDecode
    from kvcalc.engines.offload_rules import OffloadSettings
    from kvcalc.engines.profile import EngineOptions, LlamacppOptions, SglangOptions, VllmOptions
    from kvcalc.formats import StorageFormat
    from kvcalc.schema import ModelSpec
    from kvcalc.schema_deploy import GpuSpec

_R = TypeVar("_R")

# ----- shared options ---------------------------------------------------------------------
#
# Each option also answers to the engines' own names for the same thing, so a launch line's flags
# can be pasted: vLLM (--kv-cache-dtype, --tensor-parallel-size / -tp, --pipeline-parallel-size /
# -pp, --max-model-len, --gpu-memory-utilization, --max-num-seqs), SGLang (--context-length,
# --mem-fraction-static, --tp-size, --pp-size, --max-running-requests), --quantization (vLLM's and
# SGLang's: fp8 is the fp8 weight format; a method such as awq is refused with the format to give
# instead, `formats.QUANTIZATION_METHODS`), llama.cpp (-ctk / --cache-type-k, -ctv /
# --cache-type-v, -np / --parallel, and in `capacity`'s llama.cpp group -c, -fa, -ub, -ngl, -ts).
# Choices (--format, --device, --backend, --llamacpp-version) are case-insensitive.


def lower_choice(value: Optional[str]) -> Optional[str]:
    """typer callback: a choice in lower case (`--format JSON` is `--format json`)."""
    return value.strip().lower() if isinstance(value, str) else value


def auto_is_default(value: Optional[str]) -> Optional[str]:
    """typer callback for --kv-dtype: 'auto' (vLLM's and SGLang's word for the default) is no
    choice, i.e. the model's dtype, or the engine's own default under --engine."""
    return None if isinstance(value, str) and value.strip().lower() == "auto" else value


#: the names of the context per sequence: kvcalc's, vLLM's (--max-model-len) and SGLang's
#: (--context-length); `estimate` and `capacity` take all of them (llama.cpp's -c is n_ctx,
#: the context of all sequences together: `capacity --engine llamacpp -c`)
SEQ_LEN_NAMES = ("--seq-len", "-s", "--max-model-len", "-L", "--context-length")

ModelArg = Annotated[
    str,
    typer.Argument(
        help="A bundled name (see `kvcalc models`), a .yaml file, a config.json, a checkpoint folder (config.json + safetensors), a .gguf file, or a Hugging Face Hub id (org/name, org/name@revision)."
    ),
]

RevisionOpt = Annotated[
    Optional[str],
    typer.Option("--revision", help="Hub ids only: the branch, tag or commit hash to read (default main)."),
]

#: accept a config.json of an unmapped model_type read as a plain decoder (every model-taking command)
TrustPlainOpt = Annotated[
    bool,
    typer.Option(
        "--trust-plain-decoder",
        help="A config.json whose model_type kvcalc does not map, and whose every cache-shaping field a plain decoder reads: accept reading it as one (a guess; the output says so). Without it such a config is refused.",
    ),
]

SeqLenOpt = Annotated[
    Optional[str],
    typer.Option(
        *SEQ_LEN_NAMES,
        help="Tokens per sequence (8192 or 32k; vLLM --max-model-len, SGLang --context-length). Default: the model's max_position_embeddings (as vLLM scales it by rope_scaling).",
    ),
]

#: the short options that are llama.cpp's own, whichever command takes them: -b is llama.cpp's
#: --batch-size (n_batch, prompt tokens per step) and -c its --ctx-size (n_ctx), both in
#: `capacity --engine llamacpp`, never kvcalc's --batch (sequences) or --concurrency. A command
#: without them answers `-b` / `-c` with this hint (`output.usage_error_lines`). One flag means one
#: thing on every command (tests/cli/test_flag_meanings.py walks them all). The hint goes on to
#: name the command's own option (`output.count_option_hint`).
LLAMACPP_SHORT_OPTIONS = {
    "-b": "llama.cpp's --batch-size (n_batch: `kvcalc capacity --engine llamacpp -b`)",
    "-c": "llama.cpp's --ctx-size (n_ctx: `kvcalc capacity --engine llamacpp -c`)",
}

BatchOpt = Annotated[
    int,
    typer.Option(
        "--batch",
        "--max-num-seqs",
        "--max-running-requests",
        "--parallel",
        "-np",
        help="Sequences in the batch (per DP rank, attention-DP ranks too, as vLLM --max-num-seqs; SGLang's --max-running-requests is the engine's total; llama.cpp -np). Not -b: that is llama.cpp's --batch-size (prompt tokens per step, which does not change the KV cache).",
    ),
]

KvDtypeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--kv-dtype",
        "--kv-cache-dtype",
        callback=auto_is_default,
        help="KV format for K and V (vLLM --kv-cache-dtype): fp16, bf16, fp8, fp8_e5m2, int8, int4, q8_0, q4_0 ... Default (or auto): the model's dtype; with --engine, the engine's default.",
    ),
]
#: --kv-dtype's help on a command without --engine (compare, measure, sweep): it names no engine
PLAIN_KV_DTYPE_HELP = (
    "KV format for K and V (vLLM --kv-cache-dtype): fp16, bf16, fp8, fp8_e5m2, int8, int4, q8_0, "
    "q4_0 ... Default (or auto): the model's dtype."
)

KDtypeOpt = Annotated[
    Optional[str],
    typer.Option("--k-dtype", "--cache-type-k", "-ctk", help="K format, when it differs from V (llama.cpp -ctk)."),
]

VDtypeOpt = Annotated[
    Optional[str],
    typer.Option("--v-dtype", "--cache-type-v", "-ctv", help="V format, when it differs from K (llama.cpp -ctv)."),
]

GroupOpt = Annotated[
    Optional[int],
    typer.Option(
        "--quant-group-size", "--group-size", help="Values per scale of an int8/int4 KV cache (quantization group)."
    ),
]

ScaleOpt = Annotated[
    Optional[str], typer.Option("--scale-dtype", help="Scale dtype of int8/int4 groups (fp16, bf16, fp32).")
]

TpOpt = Annotated[
    int, typer.Option("--tp", "--tensor-parallel-size", "-tp", "--tp-size", help="Tensor-parallel ranks.")
]

PpOpt = Annotated[int, typer.Option("--pp", "--pipeline-parallel-size", "-pp", "--pp-size", help="Pipeline stages.")]

DpOpt = Annotated[int, typer.Option("--dp", "--data-parallel-size", "-dp", "--dp-size", help="Data-parallel replicas.")]

FormatOpt = Annotated[
    str, typer.Option("--format", "-f", callback=lower_choice, help="table, json, yaml, csv or markdown.")
]

GpuOpt = Annotated[
    Optional[str], typer.Option("--gpu", help="A GPU from `kvcalc gpus` (h100-sxm, h200 ...) or a GPU YAML file.")
]

CountOpt = Annotated[Optional[int], typer.Option("--count", help="GPUs in all (= tp x pp x dp); alone, it sets --tp.")]

WeightDtypeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--weight-dtype",
        "--quantization",
        help="Weight format: bf16, fp16, fp8, int8, int4 (group scales: int4:g128); vLLM / SGLang --quantization fp8. Default: the model's dtype.",
    ),
]

UtilOpt = Annotated[
    float,
    typer.Option(
        "--gpu-memory-utilization",
        "--mem-fraction-static",
        help=f"Fraction of GPU memory the engine may use (vLLM default {DEFAULT_GPU_MEMORY_UTILIZATION:g}); SGLang: --mem-fraction-static.",
    ),
]

BwEffOpt = Annotated[
    float,
    typer.Option(
        "--bw-efficiency",
        help=f"Fraction of HBM bandwidth decode reaches (default {DEFAULT_BW_EFFICIENCY:g}: FlashInfer / FlashDecoding reach 80-95%).",
    ),
]

FlopsEffOpt = Annotated[
    float,
    typer.Option(
        "--flops-efficiency",
        help=f"Fraction of dense peak FLOP/s reached (default {DEFAULT_FLOPS_EFFICIENCY:g}: PaLM 46% MFU).",
    ),
]

CudaCtxOpt = Annotated[
    Optional[str],
    typer.Option(
        "--cuda-context",
        help=f"Memory outside the allocator per GPU: 500MiB, 1GiB, 0 (default {DEFAULT_CUDA_CONTEXT_BYTES // 2**20}MiB).",
    ),
]

ActOpt = Annotated[
    Optional[str],
    typer.Option(
        "--activation-reserve",
        help="Activation reserve per GPU, e.g. 2GiB (default: estimated from an 8192-token prefill chunk).",
    ),
]

EngineOpt = Annotated[
    str, typer.Option("--engine", "-e", callback=lower_choice, help="ideal (exact formula), vllm, sglang or llamacpp.")
]

BlockSizeOpt = Annotated[
    Optional[int],
    typer.Option(
        "--block-size",
        help="vLLM tokens per block (default: the attention backend's choice, 16 for most; vLLM 0.33 on Hopper: 64 for an MLA model with an fp8 cache, on Blackwell 32).",
    ),
]

PageSizeOpt = Annotated[int, typer.Option("--page-size", help="SGLang tokens per page.")]

# `kvcalc measure`'s own options (--device, --layers, --steps, --backend, --with-weights,
# --cuda-graph) are declared in `kvcalc.cli.measure`: no other command pays for them at start-up.


# ----- flag sets --------------------------------------------------------------------------


class Only(NamedTuple):
    """Marker for `Annotated[Group, only(...)]`: the group's options a command takes, and help
    text that differs from the group's."""

    names: tuple[str, ...]
    help: dict[str, str]


def only(*names: str, **help: str) -> Only:
    """Take only the options `names` of a group (the rest keep their defaults); `help` maps an
    option's parameter name to the help text this command shows for it."""
    return Only(names, help)


def with_help(alias: Any, text: str) -> Any:  # Any: an `Annotated` type form, as typer reads it
    """A shared single option (`SeqLenOpt`, ...) with this command's help text: its names and
    type kept, so the options stay declared once."""
    base, info = typing.get_args(alias)
    info = copy.copy(info)
    info.help = text
    return Annotated[base, info]


#: --kv-dtype on a command without --engine (compare, measure)
PlainKvDtypeOpt = with_help(KvDtypeOpt, PLAIN_KV_DTYPE_HELP)


def _is_class_var(annotation: object) -> bool:
    """True for `ClassVar[...]` (an object, or the text a postponed annotation leaves)."""
    if isinstance(annotation, str):
        return annotation.startswith(("ClassVar", "typing.ClassVar"))
    return annotation is ClassVar or typing.get_origin(annotation) is ClassVar


class FlagSet:
    """Base of a flag set (a group of flags): a class whose fields are declared like a command's parameters
    (`name: Annotated[type, typer.Option(...)] = default`, every field with its default;
    `ClassVar` annotations are no fields).

    An instance is an immutable value, as a frozen dataclass would be: built from keyword
    arguments (the class's defaults fill the rest; an unknown name raises `TypeError`), equal
    and hashed by its type and values, shown as `Name(name=value, ...)`; setting or deleting a
    field raises `dataclasses.FrozenInstanceError`. `asdict()` and `replace(**changes)` stand in
    for `dataclasses.asdict` / `dataclasses.replace`. Not a dataclass: a frozen dataclass
    compiles six methods for each class when it is declared (about 0.4 ms each), and every
    command declares these groups at start-up; this base does that work once, for all of them.
    """

    _fields: ClassVar[tuple[str, ...]] = ()
    #: the heading the group's options are listed under in `--help` (typer's `rich_help_panel`,
    #: which `lazy.LazyGroupCommand.format_options` honours in plain help too); None: "Options"
    panel: ClassVar[Optional[str]] = None

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__annotations__", {})
        cls._fields = tuple(n for n, a in own.items() if not _is_class_var(a))
        missing = [n for n in cls._fields if n not in cls.__dict__]
        if missing:
            raise TypeError(f"{cls.__name__}: flag set fields need a default: {', '.join(missing)}")

    def __init__(self, **values: object) -> None:
        cls = type(self)
        unknown = [n for n in values if n not in cls._fields]
        if unknown:
            raise TypeError(f"{cls.__name__}.__init__() got an unexpected keyword argument '{unknown[0]}'")
        for name in cls._fields:
            object.__setattr__(self, name, values[name] if name in values else cls.__dict__[name])

    def __setattr__(self, name: str, value: object) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field '{name}'")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field '{name}'")

    def _values(self) -> tuple[object, ...]:
        return tuple(self.__dict__[n] for n in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self), self._values()))

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}({', '.join(f'{n}={self.__dict__[n]!r}' for n in self._fields)})"

    def asdict(self) -> dict[str, Any]:  # Any: each field's own type, passed on as keywords
        """The fields and their values, in declaration order."""
        return {n: self.__dict__[n] for n in self._fields}

    def replace(self, **changes: object) -> "FlagSet":
        """A copy with `changes` applied (`TypeError` for an unknown field)."""
        return type(self)(**(self.asdict() | changes))

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The group's parameter names, in declaration order."""
        return cls._fields

    @classmethod
    def parameters(cls, selection: Optional[Only] = None) -> list[inspect.Parameter]:
        """The group's options as `inspect.Parameter`s (selected, help overridden, listed under the
        group's `panel` in `--help`)."""
        hints = typing.get_type_hints(cls, include_extras=True)
        defaults = {n: cls.__dict__[n] for n in cls._fields}
        names = selection.names if selection else cls.option_names()
        params = []
        for name in names:
            ann = hints[name]
            override = selection.help.get(name) if selection else None
            if override is not None or cls.panel is not None:
                base, info = typing.get_args(ann)
                info = copy.copy(info)
                if override is not None:
                    info.help = override
                if cls.panel is not None and info.rich_help_panel is None:
                    info.rich_help_panel = cls.panel
                ann = Annotated[base, info]
            params.append(
                inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=defaults[name], annotation=ann)
            )
        return params


def _flag_set_of(annotation: object) -> "tuple[type[FlagSet] | None, Only | None]":
    """(group class, selection) when a parameter is annotated with a flag set."""
    if typing.get_origin(annotation) is Annotated:
        base, *meta = typing.get_args(annotation)
        sel = next((m for m in meta if isinstance(m, Only)), None)
        if sel is not None and isinstance(base, type) and issubclass(base, FlagSet):
            return base, sel
        return None, None
    if isinstance(annotation, type) and issubclass(annotation, FlagSet):
        return annotation, None
    return None, None


def _reorder(params: list[inspect.Parameter], order: Sequence[str]) -> list[inspect.Parameter]:
    """Move the parameters named in `order[1:]` to follow `order[0]`, in that order."""
    if not order:
        return params
    by_name = {p.name: p for p in params}
    rest = [p for p in params if p.name not in order[1:]]
    i = next(j for j, p in enumerate(rest) if p.name == order[0])
    return rest[:i] + [by_name[n] for n in order] + rest[i + 1 :]


def flag_sets(*, order: Sequence[str] = ()) -> Callable[[Callable[..., _R]], Callable[..., _R]]:
    """Decorator: spread each option-group parameter of a command into the group's typer
    options (`__signature__` rewritten, so typer sees them), and call the command with one
    group object per group parameter. `order` places options that the groups would otherwise
    list elsewhere, to keep a command's `--help` order: ("gpu", "count") puts --count after --gpu.
    """

    def deco(fn: Callable[..., _R]) -> Callable[..., _R]:
        hints = typing.get_type_hints(fn, include_extras=True)
        sig = inspect.signature(fn)
        params: list[inspect.Parameter] = []
        groups: dict[str, tuple[type[FlagSet], tuple[str, ...]]] = {}
        for p in sig.parameters.values():
            ann = hints.get(p.name, p.annotation)
            group, selection = _flag_set_of(ann)
            if group is None:
                params.append(p.replace(annotation=ann))
                continue
            expanded = group.parameters(selection)
            groups[p.name] = (group, tuple(q.name for q in expanded))
            params += expanded
        params = _reorder(params, order)

        @functools.wraps(fn)
        def command(*args: object, **kwargs: object) -> _R:
            for name, (group, names) in groups.items():
                kwargs[name] = group(**{n: kwargs.pop(n) for n in names if n in kwargs})
            return fn(*args, **kwargs)

        command.__signature__ = sig.replace(parameters=params, return_annotation=None)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
        return command

    return deco


class KvFormatFlags(FlagSet):
    """The KV cache's formats: --kv-dtype, --k-dtype, --v-dtype, --quant-group-size, --scale-dtype."""

    panel: ClassVar[Optional[str]] = "KV cache format"

    kv_dtype: KvDtypeOpt = None
    k_dtype: KDtypeOpt = None
    v_dtype: VDtypeOpt = None
    quant_group_size: GroupOpt = None
    scale_dtype: ScaleOpt = None


class ModelSourceFlags(FlagSet):
    """Where the model comes from and how far to trust it: --revision (a Hub id's branch, tag or
    commit) and --trust-plain-decoder (accept reading an unmapped model_type as a plain decoder)."""

    revision: RevisionOpt = None
    trust_plain_decoder: TrustPlainOpt = False

    def load(self, model: str) -> "ModelSpec":
        """The `ModelSpec` of MODEL (`kvcalc.load.models.load_model`) with these options."""
        from kvcalc.load.models import load_model

        return load_model(model, self.revision, trust_plain_decoder=self.trust_plain_decoder)


class MoeLayoutFlags(FlagSet):
    """Attention data-parallel, expert parallel and decode context parallel inside one engine
    (`kvcalc.calc.parallel`), under kvcalc's words and the engines' own flags. kvcalc's `--dp`
    stays whole replicas; `--dp-attention N` is N attention ranks of ONE engine whose MoE layers
    span them all. vLLM's `--enable-expert-parallel` turns its `--data-parallel-size` (kvcalc's
    --dp) on an MoE model into that (vLLM 0.33.0 `FusedMoEParallelConfig.make`: EP = tp x dp);
    SGLang's `--enable-dp-attention` turns its `--dp-size` into that with `--tp-size` the total."""

    panel: ClassVar[Optional[str]] = "Parallel layout"

    dp_attention: Annotated[
        int,
        typer.Option(
            "--dp-attention",
            help="Attention data-parallel ranks inside one engine, each holding its own sequences' KV (an MoE model's experts span them all; vLLM --data-parallel-size with --enable-expert-parallel, SGLang --enable-dp-attention --dp-size). Not --dp: whole replicas.",
        ),
    ] = 1
    ep: Annotated[
        int,
        typer.Option(
            "--ep",
            "--ep-size",
            "--expert-parallel-size",
            help="Expert-parallel size: GPUs that divide the routed experts (SGLang --ep-size; vLLM's is tp x dp-attention under --enable-expert-parallel).",
        ),
    ] = 1
    enable_expert_parallel: Annotated[
        bool,
        typer.Option(
            "--enable-expert-parallel",
            "-ep",
            help="vLLM: expert parallel; an MoE model's --data-parallel-size ranks become attention-DP ranks of one engine, EP = tp x dp.",
        ),
    ] = False
    enable_dp_attention: Annotated[
        bool,
        typer.Option(
            "--enable-dp-attention",
            help="SGLang: --dp-size attention-DP groups inside the engine, --tp-size the engine's total GPUs.",
        ),
    ] = False
    dcp: Annotated[
        int,
        typer.Option(
            "--dcp",
            "--decode-context-parallel-size",
            "-dcp",
            help="vLLM decode context parallel: dcp of the tp ranks each hold 1/dcp of every sequence's positions (dcp divides tp).",
        ),
    ] = 1

    def resolve(self, model: "ModelSpec", tp: int, dp: int) -> dict[str, int]:
        """(tp, dp, dp_attention, ep, dcp) as kvcalc's words, from kvcalc's and the engines' flags;
        raises `KvcalcError` (the option named) where they disagree."""
        from kvcalc.errors import KvcalcError

        dpa, ep = self.dp_attention, self.ep
        moe = bool(getattr(model, "n_experts", None))
        if self.enable_dp_attention:  # SGLang: --tp-size is the total, --dp-size the attention groups
            if dpa != 1:
                raise KvcalcError(
                    "--enable-dp-attention takes its groups from --dp-size; drop --dp-attention",
                    option="--dp-attention",
                    value=dpa,
                )
            if tp % dp:
                raise KvcalcError(
                    f"--enable-dp-attention: --tp-size {tp} must be divisible by --dp-size {dp} "
                    f"(SGLang's attention TP is tp / dp)",
                    option="--dp-size",
                    value=dp,
                )
            tp, dpa, dp = tp // dp, dp, 1
        if self.enable_expert_parallel:  # vLLM
            if not moe:
                raise KvcalcError("the model has no routed experts", option="--enable-expert-parallel")
            if dpa == 1:
                dpa, dp = dp, 1
            if ep not in (1, tp * dpa):
                raise KvcalcError(f"vLLM's EP size is tp x dp = {tp * dpa}; drop --ep", option="--ep", value=ep)
            ep = tp * dpa
        return {"tp": tp, "dp": dp, "dp_attention": dpa, "ep": ep, "dcp": self.dcp}


class LayoutFlags(FlagSet):
    """The parallel layout: --tp, --pp, --dp, and --count (= tp x pp x dp)."""

    panel: ClassVar[Optional[str]] = "Parallel layout"

    tp: TpOpt = 1
    pp: PpOpt = 1
    dp: DpOpt = 1
    count: CountOpt = None

    def resolve(self) -> tuple[int, int, int]:
        """(tp, pp, dp) with --count applied (`resolve_count`)."""
        return resolve_count(self.count, self.tp, self.pp, self.dp)


class GpuPlanFlags(FlagSet):
    """The GPU and the knobs of the memory plan and roofline; all but --gpu need --gpu."""

    panel: ClassVar[Optional[str]] = "GPU and memory plan"

    gpu: GpuOpt = None
    weight_dtype: WeightDtypeOpt = None
    gpu_memory_utilization: UtilOpt = DEFAULT_GPU_MEMORY_UTILIZATION
    bw_efficiency: BwEffOpt = DEFAULT_BW_EFFICIENCY
    flops_efficiency: FlopsEffOpt = DEFAULT_FLOPS_EFFICIENCY
    cuda_context: CudaCtxOpt = None
    activation_reserve: ActOpt = None

    def refuse_without_gpu(self, ctx: typer.Context, allowed: tuple[str, ...] = ()) -> None:
        """`check_gpu_only_options` for this group."""
        check_gpu_only_options(ctx, self.gpu, allowed)

    def layout(
        self,
        tp: int = 1,
        pp: int = 1,
        dp: int = 1,
        k_dtype: "str | StorageFormat | None" = None,
        v_dtype: "str | StorageFormat | None" = None,
    ) -> "Layout":
        """A `memory_plan.Layout` with this group's knobs (sizes parsed with `units.parse_size`)."""
        return make_layout(
            tp,
            pp,
            dp,
            self.weight_dtype,
            k_dtype,
            v_dtype,
            self.gpu_memory_utilization,
            self.bw_efficiency,
            self.flops_efficiency,
            self.cuda_context,
            self.activation_reserve,
        )


#: vLLM's env var that lets --max-model-len exceed the model's limit (`vllm/envs.py`: "1" or "true").
ALLOW_LONG_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
#: vLLM's env var keeping the hybrid allocator on for Llama-4's chunked local attention.
CHUNKED_HYBRID_ENV = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"

#: llama.cpp's -fa values (b6300+: `-fa on|off|auto`); auto is on where the backend has flash
#: attention, as on the GPUs kvcalc sizes (`kvcalc.engines.llamacpp.FLASH_ATTN`)
FLASH_ATTN_VALUES = ("on", "off", "auto")
#: the llama.cpp programs whose defaults `--llamacpp-tool` picks (`kvcalc.engines.llamacpp.TOOLS`)
LLAMACPP_TOOLS = ("llama-server", "llama-cli", "library")


class VllmFlags(FlagSet):
    """vLLM's options (`--engine vllm` only), turned into `VllmOptions` by `to_options`; left at
    their defaults (and VLLM_ALLOW_LONG_MAX_MODEL_LEN unset) they give `VllmOptions()` (a test
    holds the two equal)."""

    panel: ClassVar[Optional[str]] = "vLLM (--engine vllm)"

    engine: ClassVar[str] = "vllm"
    block_size: BlockSizeOpt = None
    vllm_version: Annotated[
        str,
        typer.Option(
            "--vllm-version",
            callback=lower_choice,
            help=f"vLLM release modelled: {engine_defaults.VLLM_VERSION} (current, default), 0.11, or 0.6 (the V0 engine, as --vllm-v0).",
        ),
    ] = engine_defaults.VLLM_VERSION
    disable_hybrid: Annotated[
        bool,
        typer.Option(
            "--disable-hybrid-kv-cache-manager",
            help="vLLM: sliding-window layers keep every token (no hybrid allocator).",
        ),
    ] = False
    max_num_batched_tokens: Annotated[
        int,
        typer.Option("--max-num-batched-tokens", help="vLLM: sizes sliding-window pages in the concurrency figure."),
    ] = engine_defaults.VLLM_MAX_NUM_BATCHED_TOKENS
    async_scheduling: Annotated[
        Optional[bool],
        typer.Option(
            "--async-scheduling/--no-async-scheduling",
            help="vLLM 0.33: two batches in flight (on by default in `vllm serve`), held by sliding-window requests.",
        ),
    ] = None
    attention_backend: Annotated[
        Optional[str],
        typer.Option(
            "--attention-backend",
            help="vLLM attention backend (VLLM_ATTENTION_BACKEND): FLASHMLA, CUTLASS_MLA, FLASHINFER_MLA, TRITON_MLA set an MLA model's block size. Default: the GPU's (--gpu; else Hopper is assumed).",
        ),
    ] = None
    allow_long_max_model_len: Annotated[
        bool,
        typer.Option(
            "--allow-long-max-model-len",
            help=f"vLLM's {ALLOW_LONG_ENV}=1 (also read from the environment): a --max-model-len past the model's limit warns instead of being refused.",
        ),
    ] = False
    prefix_caching: Annotated[
        Optional[bool],
        typer.Option(
            "--enable-prefix-caching/--no-enable-prefix-caching",
            help="vLLM prefix caching (default: the version's; 0.33 on, which puts hybrid Mamba models' cache in 'align' mode).",
        ),
    ] = None
    v0: Annotated[
        bool, typer.Option("--vllm-v0", help="vLLM's V0 engine (0.6.x): '# GPU blocks' lines (= --vllm-version 0.6).")
    ] = False
    swap_space: Annotated[
        Optional[str],
        typer.Option(
            "--swap-space",
            help="vLLM V0 CPU swap space per GPU (default 4GiB, vLLM 0.6's; its --swap-space 4 is 4GiB: write the unit).",
        ),
    ] = None

    def to_options(self, compute_capability: str | None = None, vendor: str | None = None) -> "VllmOptions":
        """The engine's options, on a GPU of `compute_capability` ('9.0'; None: unknown) and
        `vendor` ('nvidia', 'amd'; None: unknown); VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE
        is read from the environment.
        Raises `KvcalcError` for --swap-space without V0, --vllm-v0 beside another
        --vllm-version, --async-scheduling / --no-async-scheduling on a version other than 0.33
        (the only one whose KV figures it changes), or a version kvcalc does not model."""
        import os

        from kvcalc.engines.profile import VllmOptions
        from kvcalc.units import parse_size

        swap_bytes = None if self.swap_space is None else parse_size(self.swap_space, "--swap-space", allow_zero=True)
        version = self.vllm_version
        if self.v0:
            if version not in (engine_defaults.VLLM_VERSION, "0.6"):
                raise KvcalcError(
                    f"--vllm-v0 is --vllm-version 0.6; it disagrees with --vllm-version {version}", option="--vllm-v0"
                )
            version = "0.6"
        if swap_bytes and version != "0.6":
            raise KvcalcError(
                "--swap-space is vLLM V0's CPU swap (# CPU blocks); V1 and the other engines have none: "
                "add --engine vllm --vllm-version 0.6, or drop --swap-space"
            )
        if self.async_scheduling is not None and version != "0.33":  # vllm.in_flight_tokens: 0.33's rule only
            why = (
                "holds --max-num-batched-tokens in flight for a sliding-window request either way "
                "(SlidingWindowSpec.max_memory_usage_bytes)"
                if version == "0.11"
                else "(the V0 engine) keeps sliding-window layers at full length, with no tokens in flight"
            )
            raise KvcalcError(
                f"applies to --vllm-version 0.33 only (two batches in flight); vLLM {version} {why}: "
                "drop it, or give --vllm-version 0.33",
                option="--async-scheduling" if self.async_scheduling else "--no-async-scheduling",
                form=OPTION_SAYS,
            )
        allow_long = self.allow_long_max_model_len or os.environ.get(ALLOW_LONG_ENV, "0").strip().lower() in (
            "1",
            "true",
        )
        return VllmOptions(
            block_size=self.block_size,
            hybrid_allocator=not self.disable_hybrid,
            max_num_batched_tokens=self.max_num_batched_tokens,
            version=version,
            swap_space_bytes=swap_bytes,
            async_scheduling=self.async_scheduling is not False,
            attention_backend=self.attention_backend,
            compute_capability=compute_capability,
            allow_long_max_model_len=allow_long,
            vendor=vendor,
            prefix_caching=self.prefix_caching,
            chunked_local_hybrid=_env_flag(CHUNKED_HYBRID_ENV),
        )


class SglangFlags(FlagSet):
    """SGLang's options (`--engine sglang` only)."""

    panel: ClassVar[Optional[str]] = "SGLang (--engine sglang)"

    engine: ClassVar[str] = "sglang"
    page_size: PageSizeOpt = engine_defaults.SGLANG_PAGE_SIZE
    sglang_version: Annotated[
        str,
        typer.Option(
            "--sglang-version",
            callback=lower_choice,
            help="SGLang current (0.5.23; sparse-MLA cells sized by the row allocated, since 0.5.17), 0.5.16 (cells count the 576 B latent), or legacy (before PR #11309: DeepSeek-V3.2's pool sized without its indexer).",
        ),
    ] = "current"
    disable_hybrid_swa_memory: Annotated[
        bool,
        typer.Option(
            "--disable-hybrid-swa-memory", help="SGLang: no separate pool for sliding-window layers (gpt-oss, Llama-4)."
        ),
    ] = False
    swa_full_tokens_ratio: Annotated[
        Optional[float],
        typer.Option(
            "--swa-full-tokens-ratio",
            help="SGLang: sliding-layer pool tokens per full-layer pool token (default: 0.8; DeepSeek-V4 0.1).",
        ),
    ] = None
    dsa_prefill_backend: Annotated[
        Optional[str],
        typer.Option(
            "--dsa-prefill-backend",
            help="SGLang DSA prefill backend (DeepSeek-V3.2, GLM-5): trtllm reads 576 B fp8 latent rows, flashmla_kv 656 B. Default: the GPU's (--gpu).",
        ),
    ] = None
    dsa_decode_backend: Annotated[
        Optional[str],
        typer.Option("--dsa-decode-backend", help="SGLang DSA decode backend (as --dsa-prefill-backend)."),
    ] = None
    mamba_full_memory_ratio: Annotated[
        float,
        typer.Option("--mamba-full-memory-ratio", help="SGLang hybrids: state-pool memory per byte of KV memory."),
    ] = 0.9
    max_mamba_cache_size: Annotated[
        Optional[int],
        typer.Option("--max-mamba-cache-size", help="SGLang hybrids: state slots (default: from the ratio)."),
    ] = None
    mamba_ssm_dtype: Annotated[
        str, typer.Option("--mamba-ssm-dtype", help="SGLang hybrids: SSM state dtype: float32, bfloat16, float16.")
    ] = "float32"
    disable_radix_cache: Annotated[
        bool, typer.Option("--disable-radix-cache", help="SGLang hybrids: 1 state slot a request instead of 5.")
    ] = False

    def to_options(self, compute_capability: str | None = None, vendor: str | None = None) -> "SglangOptions":
        """The engine's options, on a GPU of `compute_capability` ('9.0'; None: unknown) and `vendor`."""
        from kvcalc.engines.profile import SglangOptions
        from kvcalc.engines.sglang_mamba import MambaOptions

        return SglangOptions(
            page_size=self.page_size,
            version=self.sglang_version,
            hybrid_swa_memory=not self.disable_hybrid_swa_memory,
            swa_full_tokens_ratio=self.swa_full_tokens_ratio,
            compute_capability=compute_capability,
            vendor=vendor,
            dsa_prefill_backend=_lower(self.dsa_prefill_backend),
            dsa_decode_backend=_lower(self.dsa_decode_backend),
            mamba=MambaOptions(
                self.mamba_full_memory_ratio, self.max_mamba_cache_size, self.mamba_ssm_dtype, self.disable_radix_cache
            ),
        )


class LlamacppFlags(FlagSet):
    """llama.cpp's options (`--engine llamacpp` only), turned into `LlamacppOptions`; left at
    their defaults they give `LlamacppOptions()` (a test holds the two equal)."""

    panel: ClassVar[Optional[str]] = "llama.cpp (--engine llamacpp)"

    engine: ClassVar[str] = "llamacpp"
    ctx_size: Annotated[
        Optional[str],
        typer.Option(
            "--ctx-size",
            "-c",
            help="llama.cpp n_ctx, the context of all sequences together (0: the model's training context; ollama: per sequence).",
        ),
    ] = None
    llamacpp_tool: Annotated[
        str,
        typer.Option(
            "--llamacpp-tool",
            callback=lower_choice,
            help="The llama.cpp program whose defaults apply: llama-server (no -np: 4 slots in one unified cache), llama-cli (1 sequence), library (llama_context_default_params: full-size SWA cache).",
        ),
    ] = "llama-server"
    parallel: Annotated[
        Optional[int],
        typer.Option(
            "--parallel",
            "-np",
            help="llama.cpp sequences (n_seq_max; default: the tool's, llama-server 4 unified); ollama: OLLAMA_NUM_PARALLEL.",
        ),
    ] = None
    kv_unified: Annotated[
        Optional[bool],
        typer.Option(
            "--kv-unified/--no-kv-unified",
            "-kvu/-no-kvu",
            help="llama.cpp: one stream shared by all sequences, or one per sequence (default: the tool's; llama-server unified only without -np).",
        ),
    ] = None
    swa_full: Annotated[
        bool,
        typer.Option(
            "--swa-full", help="llama.cpp: full-size cache for sliding-window layers (the library's default)."
        ),
    ] = False
    flash_attn: Annotated[
        bool,
        typer.Option(
            "--flash-attn", help="llama.cpp flash attention on (= -fa on; legacy: pads n_ctx to 256, else 32)."
        ),
    ] = False
    fa: Annotated[
        Optional[str],
        typer.Option(
            "-fa",
            callback=lower_choice,
            help="llama.cpp -fa on|off|auto (default auto, which kvcalc takes as on; legacy: off).",
        ),
    ] = None
    llamacpp_version: Annotated[
        str,
        typer.Option(
            "--llamacpp-version",
            callback=lower_choice,
            help="current (b7000+, 'llama_kv_cache: size = ...') or legacy ('KV self size').",
        ),
    ] = "current"
    n_gpu_layers: Annotated[
        Optional[int],
        typer.Option(
            "--n-gpu-layers", "--gpu-layers", "-ngl", help="llama.cpp layers offloaded (default, or -1: all)."
        ),
    ] = None
    gpus: Annotated[
        Optional[int],
        typer.Option(
            "--gpus", help="llama.cpp devices the layers are split over (default: the --tensor-split count, else 1)."
        ),
    ] = None
    tensor_split: Annotated[
        Optional[str],
        typer.Option("--tensor-split", "-ts", help="llama.cpp share of each device, e.g. 63,37 (default even)."),
    ] = None
    ubatch_size: Annotated[
        int, typer.Option("--ubatch-size", "-ub", help="llama.cpp n_ubatch (sizes the SWA cache).")
    ] = engine_defaults.LLAMACPP_N_UBATCH
    batch_size: Annotated[int, typer.Option("--batch-size", "-b", help="llama.cpp n_batch (caps n_ubatch).")] = (
        engine_defaults.LLAMACPP_N_BATCH
    )
    ollama: Annotated[
        bool, typer.Option("--ollama", help="ollama's runner: n_ctx x --parallel cells, legacy log lines.")
    ] = False

    def to_options(self) -> "LlamacppOptions":
        """The engine's options: --tensor-split and --ctx-size parsed (0: the training context),
        --gpus defaulting to the split's length, --ollama meaning the legacy log lines, -fa /
        --flash-attn as one value. Raises `KvcalcError`, also for -kvu / -no-kvu with the legacy
        llama.cpp or --ollama (one unified cache there: the flag would change nothing)."""
        from kvcalc.engines.profile import LlamacppOptions
        from kvcalc.units import parse_count

        split = _split(self.tensor_split)
        if self.fa is not None and self.fa not in FLASH_ATTN_VALUES:
            raise KvcalcError(f"'{self.fa}' is not on, off or auto (llama.cpp's values)", option="-fa", value=self.fa)
        if self.fa == "off" and self.flash_attn:
            raise KvcalcError("--flash-attn and -fa off disagree; give one of them", option="-fa", value=self.fa)
        legacy = self.ollama or self.llamacpp_version == "legacy"
        if legacy and self.kv_unified is not None:  # llamacpp.resolve_context: legacy is one unified cache
            raise KvcalcError(
                f"applies to --llamacpp-version current only; the legacy llama.cpp"
                f"{' of ollama' if self.ollama else ''} keeps one unified cache of n_ctx cells for "
                "every sequence whatever the flag: drop it",
                option="--kv-unified" if self.kv_unified else "--no-kv-unified",
                form=OPTION_SAYS,
            )
        if self.llamacpp_tool not in LLAMACPP_TOOLS:
            raise KvcalcError(
                f"use one of {', '.join(LLAMACPP_TOOLS)}, not '{self.llamacpp_tool}'",
                option="--llamacpp-tool",
                value=self.llamacpp_tool,
            )
        n_ctx = None
        if self.ctx_size is not None:  # llama.cpp's -c 0 is the model's training context; below 0 means nothing
            text = self.ctx_size.strip()
            if text.lstrip("-").isdigit() and int(text) <= 0:
                if int(text) < 0:
                    raise KvcalcError(
                        f"must be 0 (the model's training context) or a count of tokens, got {text}",
                        option="--ctx-size",
                        value=text,
                        form=OPTION_SAYS,
                    )
                n_ctx = 0
            else:
                n_ctx = parse_count(self.ctx_size, "--ctx-size")
        return LlamacppOptions(
            n_ctx=n_ctx,
            parallel=self.parallel,
            unified=self.kv_unified,
            version="legacy" if self.ollama else self.llamacpp_version,
            tool=self.llamacpp_tool,
            flash_attn="on" if self.flash_attn else self.fa,
            swa_full=True if self.swa_full else None,
            n_ubatch=self.ubatch_size,
            n_batch=self.batch_size,
            n_gpu_layers=self.n_gpu_layers,
            n_devices=self.gpus or (len(split) if split else 1),
            tensor_split=tuple(split) if split else None,
            ollama=self.ollama,
        )


#: the engine flag sets, in the order their refusals are checked.
ENGINE_FLAGS: tuple[type[FlagSet], ...] = (VllmFlags, SglangFlags, LlamacppFlags)


def engine_key(engine: str) -> str:
    """`engine` as a registry key (lower case, aliases resolved), without refusing unknown names."""
    from kvcalc.engines import ALIASES

    key = engine.strip().lower()
    return ALIASES.get(key, key)


def refuse_other_engines(ctx: typer.Context, engine: str) -> None:
    """Raise `KvcalcError` when an option of another engine than `engine` was typed
    ('--block-size applies to --engine vllm only'); which options belong to which engine is
    read from the engine groups' fields."""
    key = engine_key(engine)
    for group in ENGINE_FLAGS:
        if group.engine != key:  # type: ignore[attr-defined]
            refuse_typed(ctx, group.option_names(), f"--engine {group.engine} only")  # type: ignore[attr-defined]


@typing.overload
def gpu_object(gpu: "str | GpuSpec") -> "GpuSpec": ...
@typing.overload
def gpu_object(gpu: None) -> None: ...
@typing.overload
def gpu_object(gpu: "str | GpuSpec | None") -> "GpuSpec | None": ...
def gpu_object(gpu: "str | GpuSpec | None") -> "GpuSpec | None":
    """`--gpu` as its `GpuSpec`: a table name or GPU file looked up (once: the object is what
    travels on), a `GpuSpec` as it is, None kept. Raises `KvcalcError` for an unknown GPU."""
    if gpu is None or not isinstance(gpu, str):
        return gpu
    from kvcalc.load.gpus import get_gpu

    return get_gpu(gpu)


def engine_gpu(
    engine: str, groups: "Iterable[Union[VllmFlags, SglangFlags, LlamacppFlags]]", gpu: "str | GpuSpec | None"
) -> "str | GpuSpec | None":
    """`gpu` as its `GpuSpec` where `engine_options` reads it (vLLM's and SGLang's options take
    its compute capability and vendor), else as given: a command looks the GPU up here, at the
    point `engine_options` would, and hands the object to both it and the request."""
    key = engine_key(engine)
    if not isinstance(gpu, str) or key not in ("vllm", "sglang") or not any(g.engine == key for g in groups):
        return gpu
    return gpu_object(gpu)


def engine_options(
    engine: str, groups: "Iterable[Union[VllmFlags, SglangFlags, LlamacppFlags]]", gpu: "str | GpuSpec | None" = None
) -> "EngineOptions | None":
    """The options object of `engine` from the command's group for it (None: the engine's
    defaults). `gpu` (a `GpuSpec`, or a `--gpu` name or file) gives vLLM and SGLang the GPU's
    compute capability and vendor."""
    key = engine_key(engine)
    group = next((g for g in groups if g.engine == key), None)
    if group is None:
        return None
    if isinstance(group, LlamacppFlags):
        return group.to_options()
    spec = gpu_object(gpu)
    return group.to_options(gpu_compute_capability(spec), gpu_vendor(spec))  # vLLM's, SGLang's


def _lower(text: str | None) -> str | None:
    """An engine's backend name as it spells it (lower case), None kept."""
    return None if text is None else text.strip().lower()


def gpu_vendor(gpu: "str | GpuSpec | None") -> str | None:
    """The vendor of `--gpu` ('nvidia', 'amd'; None without a GPU or for 'other')."""
    spec = gpu_object(gpu)
    if spec is None:
        return None
    return None if spec.vendor == "other" else spec.vendor


def _env_flag(name: str) -> bool | None:
    """An environment variable read as vLLM reads its 0/1 flags: None when unset."""
    import os

    text = os.environ.get(name)
    if text is None or not text.strip():
        return None
    return text.strip().lower() in ("1", "true")


def gpu_compute_capability(gpu: "str | GpuSpec | None") -> str | None:
    """The compute capability of `--gpu` ('9.0'; None without a GPU or for one that names none)."""
    spec = gpu_object(gpu)
    return None if spec is None else spec.compute_capability


# ----- option checks ----------------------------------------------------------------------


def resolve_kv_dtypes(
    model: "ModelSpec",
    kv_dtype: str | None,
    k_dtype: str | None,
    v_dtype: str | None,
    quant_group_size: int | None = None,
    scale_dtype: str | None = None,
) -> tuple[str, str]:
    """(K format name, V format name) from the options (`requests.kv_format_names`)."""
    from kvcalc.requests import kv_format_names

    return kv_format_names(model, kv_dtype, k_dtype, v_dtype, quant_group_size, scale_dtype)


def typed_options(ctx: typer.Context) -> list[str]:
    """Parameters of the running command that the user typed (not left at their defaults)."""
    return [n for n in ctx.params if getattr(ctx.get_parameter_source(n), "name", "DEFAULT") != "DEFAULT"]


def flag_name(ctx: typer.Context, param: str) -> str:
    """The option as the user writes it (`--vllm-v0` for the parameter `v0`)."""
    for p in ctx.command.params:
        if p.name == param and getattr(p, "opts", None):
            return max(p.opts, key=len)
    return "--" + param.replace("_", "-")


def refuse_typed(ctx: typer.Context, params: Iterable[str], applies_to: str) -> None:
    """Raise `KvcalcError` when any of `params` was typed: an option that would be ignored is
    refused, never silently dropped ('--x applies to `applies_to`')."""
    typed = set(typed_options(ctx))
    given = [n for n in params if n in typed]
    if given:
        verb = "applies" if len(given) == 1 else "apply"
        raise KvcalcError(f"{', '.join(flag_name(ctx, n) for n in given)} {verb} to {applies_to}")


def resolve_count(count: int | None, tp: int, pp: int, dp: int) -> tuple[int, int, int]:
    """(tp, pp, dp) from --count and the layout options: --count alone sets tp; with tp / pp
    given, the rest of the count becomes dp replicas. Raises `KvcalcError` when they disagree."""
    if count is None:
        return tp, pp, dp
    check_positive(count=count)
    if (tp, pp, dp) == (1, 1, 1):
        return count, 1, 1
    if count == tp * pp * dp:
        return tp, pp, dp
    if dp == 1 and count % (tp * pp) == 0:
        return tp, pp, count // (tp * pp)
    raise KvcalcError(
        f"--count {count} does not equal --tp {tp} x --pp {pp} x --dp {dp}; give a count that is a multiple of tp x pp"
    )


#: options that mean something only with --gpu: the GPU group's, but --gpu itself (--count is
#: the layout's: it sets count = tp x pp x dp)
GPU_ONLY_OPTIONS = tuple(n for n in GpuPlanFlags.option_names() if n != "gpu")


def check_gpu_only_options(ctx: typer.Context, gpu: str | None, allowed: tuple[str, ...] = ()) -> None:
    """Raise `KvcalcError` naming --gpu when an option that needs a GPU was typed without one.
    typer fills in defaults, so the click context's parameter source says which were typed.
    `allowed` lists those the command uses without a GPU (sweep's --weight-dtype)."""
    if gpu is not None:
        return
    typed = set(typed_options(ctx))
    given = [n for n in GPU_ONLY_OPTIONS if n not in allowed and n in typed]
    if given:
        opts = ", ".join("--" + n.replace("_", "-") for n in given)
        raise KvcalcError(
            f"{opts} {'needs' if len(given) == 1 else 'need'} --gpu (a GPU from `kvcalc gpus`); "
            f"without it there is no memory plan or roofline to apply {'it' if len(given) == 1 else 'them'} to"
        )


def make_layout(
    tp: int,
    pp: int,
    dp: int,
    weight_dtype: str | None,
    k_dtype: "str | StorageFormat | None",
    v_dtype: "str | StorageFormat | None",
    gpu_memory_utilization: float,
    bw_efficiency: float,
    flops_efficiency: float,
    cuda_context: str | None,
    activation_reserve: str | None,
) -> "Layout":
    """A `plan.Layout` from CLI options (sizes parsed with `units.parse_size`: 0, or a size
    with a unit or of at least 1 MiB)."""
    from kvcalc.calc.memory_plan import Layout
    from kvcalc.units import parse_size

    ctx = (
        DEFAULT_CUDA_CONTEXT_BYTES
        if cuda_context is None
        else parse_size(cuda_context, "--cuda-context", allow_zero=True, hint_unit="MiB")
    )
    act = (
        None if activation_reserve is None else parse_size(activation_reserve, "--activation-reserve", allow_zero=True)
    )
    from kvcalc.formats import kv_format, weight_format

    return Layout(  # each format parsed once, here
        tp=tp,
        pp=pp,
        dp=dp,
        weight_dtype=None if weight_dtype is None else weight_format(weight_dtype),
        k_dtype=None if k_dtype is None else kv_format(k_dtype, field="k_dtype"),
        v_dtype=None if v_dtype is None else kv_format(v_dtype, field="v_dtype"),
        gpu_memory_utilization=gpu_memory_utilization,
        cuda_context_bytes=ctx,
        activation_reserve_bytes=act,
        bw_efficiency=bw_efficiency,
        flops_efficiency=flops_efficiency,
    )


def _split(text: str | None) -> list[float] | None:
    """--tensor-split as shares (`63,37` or `63/37`); raises `KvcalcError` for a share that is
    not a finite non-negative number (NaN or inf would put every layer on one device)."""
    import math

    if not text:
        return None
    try:
        shares = [float(x) for x in text.replace("/", ",").split(",") if x.strip()]
    except ValueError:
        raise KvcalcError(f"--tensor-split: '{text}' is not a list of numbers (write 63,37)") from None
    if not all(math.isfinite(x) and x >= 0 for x in shares):
        raise KvcalcError("every share must be a finite number >= 0 (write 63,37)", option="--tensor-split", value=text)
    return shares


#: SGLang algorithm -> kvcalc / vLLM method
_FROM_SGLANG = {"NEXTN": "mtp", "EAGLE": "eagle", "EAGLE3": "eagle3", "STANDALONE": "draft_model", "NGRAM": "ngram"}


class SpeculativeFlags(FlagSet):
    """--speculative-config (vLLM), --speculative-algorithm / --speculative-num-steps /
    --speculative-draft-model-path (SGLang), --accepted-len (kvcalc)."""

    panel: ClassVar[Optional[str]] = "Speculative decoding"

    speculative_config: Annotated[
        Optional[str],
        typer.Option(
            "--speculative-config",
            "-sc",
            help="vLLM's speculative config as JSON: method (mtp, eagle, eagle3, draft_model, ngram), num_speculative_tokens, model (the draft). Needs --gpu.",
        ),
    ] = None
    speculative_algorithm: Annotated[
        Optional[str],
        typer.Option("--speculative-algorithm", help="SGLang: NEXTN (MTP), EAGLE, EAGLE3, STANDALONE, NGRAM."),
    ] = None
    speculative_num_steps: Annotated[
        Optional[int],
        typer.Option("--speculative-num-steps", help="SGLang: draft steps (tokens proposed per verify step)."),
    ] = None
    speculative_draft_model_path: Annotated[
        Optional[str],
        typer.Option(
            "--speculative-draft-model-path", help="SGLang: the draft model (a bundled name, config file or Hub id)."
        ),
    ] = None
    accepted_len: Annotated[
        Optional[float],
        typer.Option(
            "--accepted-len",
            help="Mean tokens one verify step emits (bonus token included, 1..k+1): your measured figure; TPOT needs it.",
        ),
    ] = None

    def resolve(self, load: "Callable[[str], ModelSpec]", engine: str | None = None) -> "SpecDecode | None":
        """A `calc.speculative.SpecDecode`, or None without a speculative option; `load(ref)`
        loads a draft's `ModelSpec`. Raises `KvcalcError` (option named) for JSON that does not
        parse or lacks a field, for SGLang's flags with `engine` vllm (or vLLM's with sglang),
        and for both engines' flags at once."""
        from kvcalc.errors import KvcalcError

        sglang_flags = [
            f
            for f, v in (
                ("--speculative-algorithm", self.speculative_algorithm),
                ("--speculative-num-steps", self.speculative_num_steps),
                ("--speculative-draft-model-path", self.speculative_draft_model_path),
            )
            if v is not None
        ]
        key = engine_key(engine) if engine else None
        if sglang_flags and (key == "vllm" or self.speculative_config is not None):
            raise KvcalcError(
                f"{sglang_flags[0]} is SGLang's flag, not vLLM's; with --engine vllm give "
                '--speculative-config \'{"method": "mtp", "num_speculative_tokens": N}\' alone',
                option=sglang_flags[0],
                form=MESSAGE,
            )
        if self.speculative_config is not None and key == "sglang":
            raise KvcalcError(
                "--speculative-config is vLLM's flag, not SGLang's; with --engine sglang give "
                "--speculative-algorithm NEXTN --speculative-num-steps N",
                option="--speculative-config",
                form=MESSAGE,
            )
        if self.speculative_config is None and self.speculative_algorithm is None:
            if self.accepted_len is not None:
                raise KvcalcError(
                    "--accepted-len needs --speculative-config (or --speculative-algorithm)",
                    option="--accepted-len",
                    form=MESSAGE,  # the message names the option: not `--accepted-len: --accepted-len ...`
                )
            return None
        if self.speculative_config is not None:
            import json

            try:
                cfg = json.loads(self.speculative_config)
                method, k = str(cfg["method"]), int(cfg["num_speculative_tokens"])
            except (ValueError, KeyError, TypeError) as e:
                raise KvcalcError(
                    f"--speculative-config must be JSON with method and num_speculative_tokens ({e})",
                    option="--speculative-config",
                    value=self.speculative_config,
                    form=MESSAGE,
                ) from None
            ref = cfg.get("model")
        else:
            algo = (self.speculative_algorithm or "").upper()
            if algo not in _FROM_SGLANG:
                raise KvcalcError(
                    f"--speculative-algorithm {self.speculative_algorithm}: one of {', '.join(_FROM_SGLANG)}",
                    option="--speculative-algorithm",
                    value=self.speculative_algorithm,
                    form=MESSAGE,
                )
            if self.speculative_num_steps is None:
                raise KvcalcError(
                    "--speculative-algorithm needs --speculative-num-steps",
                    option="--speculative-num-steps",
                    form=MESSAGE,
                )
            if self.speculative_num_steps < 1:
                raise KvcalcError(
                    f"--speculative-num-steps must be at least 1, got {self.speculative_num_steps}",
                    option="--speculative-num-steps",
                    value=self.speculative_num_steps,
                    form=MESSAGE,
                )
            method, k, ref = _FROM_SGLANG[algo], self.speculative_num_steps, self.speculative_draft_model_path
        from kvcalc.calc.speculative import SpecDecode

        draft = load(ref) if ref else None
        return SpecDecode(
            method=method, num_speculative_tokens=k, accepted=self.accepted_len, draft=draft, draft_ref=ref
        )


# ----- KV memory and the tier below the GPU (`kvcalc capacity`) ---------------------------


class KvMemoryFlags(FlagSet):
    """The memory the KV cache takes: --kv-memory on each GPU rank, the tier below the GPU with
    the host that holds it, and a prefix the requests share (see the module docstring)."""

    panel: ClassVar[Optional[str]] = "KV memory, offload tiers and shared prefixes"
    kv_memory: Annotated[
        Optional[str],
        typer.Option(
            "--kv-memory",
            "-m",
            help="KV memory per GPU rank: 6.51GiB, 80GB or bytes (vLLM: 'Available KV cache memory'; SGLang: the static pool budget).",
        ),
    ] = None
    kv_offloading_size: Annotated[
        Optional[str],
        typer.Option(
            "--kv-offloading-size",
            help="vLLM: CPU offload buffer in GiB (2^30 B) for ALL tensor-parallel ranks together, as vLLM reads it (100 = 100 GiB; '100GB' is refused with the GiB figure to pass).",
        ),
    ] = None
    kv_offloading_backend: Annotated[
        str,
        typer.Option(
            "--kv-offloading-backend",
            help="vLLM: native (CPU offload in vLLM) or lmcache (vLLM 0.33 starts LMCache's multi-process connector; size it with --lmcache-l1-size).",
        ),
    ] = "native"
    blocks_per_chunk: Annotated[
        int,
        typer.Option(
            "--offload-blocks-per-chunk",
            help="vLLM native offload: GPU blocks per CPU chunk (kv_connector_extra_config blocks_per_chunk).",
        ),
    ] = 1
    lmcache_cpu_size: Annotated[
        Optional[str],
        typer.Option(
            "--lmcache-cpu-size",
            help="LMCache in-process connector: LMCACHE_MAX_LOCAL_CPU_SIZE, GiB per tensor-parallel worker (LMCache logs it as 'GB').",
        ),
    ] = None
    lmcache_l1_size: Annotated[
        Optional[str],
        typer.Option("--lmcache-l1-size", help="LMCache multi-process server: --l1-size-gb, GiB, one server per node."),
    ] = None
    hicache_ratio: Annotated[
        Optional[float],
        typer.Option(
            "--hicache-ratio",
            help="SGLang HiCache: host pool tokens per device pool token, per rank (SGLang's default 2.0, cut to fit the host when --host-memory is given).",
        ),
    ] = None
    hicache_size: Annotated[
        Optional[str],
        typer.Option(
            "--hicache-size",
            help="SGLang HiCache: host pool per rank in GB (10^9 B), a whole number; overrides --hicache-ratio.",
        ),
    ] = None
    hicache_host_memory_fraction: Annotated[
        Optional[float],
        typer.Option(
            "--hicache-host-memory-fraction",
            help="SGLang HiCache: share of the host (after a 10 GiB reserve) the pools may take when neither ratio nor size is given (default 0.8).",
        ),
    ] = None
    hierarchical_cache: Annotated[
        bool,
        typer.Option(
            "--enable-hierarchical-cache",
            help="SGLang HiCache with its defaults (ratio 2.0, cut to fit the host when --host-memory is given); implied by the --hicache-* options.",
        ),
    ] = False
    no_kv_offload: Annotated[
        bool, typer.Option("--no-kv-offload", "-nkvo", help="llama.cpp: keep the KV cache in host memory.")
    ] = False
    host_memory: Annotated[
        Optional[str],
        typer.Option(
            "--host-memory",
            help="Host memory per node (2TB, 1.5TiB): pinned offload buffers are checked against it and refused when they exceed it.",
        ),
    ] = None
    gpus_per_node: Annotated[
        int, typer.Option("--gpus-per-node", help="GPUs (ranks) per node, for host bytes per node.")
    ] = 8
    shared_prefix: Annotated[
        Optional[str],
        typer.Option(
            "--shared-prefix",
            help="Tokens every request shares (a system prompt, 12k): reusable whole blocks, footprint, concurrency, prefill saved.",
        ),
    ] = None
    prefix_hit_rate: Annotated[
        float,
        typer.Option("--prefix-hit-rate", help="Share of requests that find the shared prefix cached (prefill saved)."),
    ] = 1.0
    link: Annotated[
        Optional[str],
        typer.Option(
            "--link",
            help="Links to time a prefix load over (comma list of kvcalc/data/links.yaml keys: pcie5-x16, nvlink-c2c, nvme-gen5, rdma-400g ...). Default: every host, storage and network link. Needs --gpu (the prefill model).",
        ),
    ] = None

    def settings(self) -> "OffloadSettings":
        """The `engines.offload_rules.OffloadSettings` of these options (--host-memory, --shared-prefix
        parsed). Each engine size flag stays as typed: it is read in the engine's own unit
        (vLLM and LMCache GiB, SGLang GB; `engines.offload_rules.engine_number`)."""
        from kvcalc.engines.offload_rules import OffloadSettings
        from kvcalc.units import parse_count, parse_size

        check_positive(gpus_per_node=self.gpus_per_node, offload_blocks_per_chunk=self.blocks_per_chunk)
        host = parse_size(self.host_memory, "--host-memory") if self.host_memory else None
        prefix = parse_count(self.shared_prefix, "--shared-prefix") if self.shared_prefix is not None else 0
        return OffloadSettings(
            kv_offloading_size=self.kv_offloading_size,
            kv_offloading_backend=self.kv_offloading_backend.strip().lower(),
            blocks_per_chunk=self.blocks_per_chunk,
            lmcache_cpu_size=self.lmcache_cpu_size,
            lmcache_l1_size=self.lmcache_l1_size,
            hicache_ratio=self.hicache_ratio,
            hicache_size=self.hicache_size,
            hicache_host_memory_fraction=self.hicache_host_memory_fraction,
            hierarchical_cache=self.hierarchical_cache,
            no_kv_offload=self.no_kv_offload,
            host_memory_bytes=host,
            gpus_per_node=self.gpus_per_node,
            shared_prefix_tokens=prefix,
        )
