"""A checkpoint's own quantization: `quantization_config` in config.json -> the weight formats
of the memory plan (`ModelSpec.weight_dtype`, `expert_weight_dtype`) and how its packed tensors
hold their values (for counting parameters from safetensors headers).

Each method as the engine that loads it reads it (vLLM `model_executor/layers/quantization/`):

| `quant_method` | fields read | weight format (`kvcalc.formats`) |
| --- | --- | --- |
| `fp8` (`fp8.py`) | `weight_block_size` [128, 128], `fmt`; DeepSeek-V4: `expert_dtype` | `fp8_e4m3:b128:fp32` (fp32 `weight_scale_inv` per block; DeepSeek-V4 with fp4 experts: `fp8_e4m3:b128:e8m0`, one e8m0 byte per block, `models/deepseek_v4/quant_config.py`); none: `fp8_e4m3` (one fp32 scale per tensor, not counted) |
| `compressed-tensors` (`compressed_tensors.py`) | `config_groups.*.weights`: `num_bits`, `type`, `strategy`, `group_size`, `block_structure`, `symmetric`; `ignore` | float 8: `fp8_e4m3` (`:b128` block, `:g128` group); int 4/8 group G: `int4:gG:<dtype>` (+ `:zp` when asymmetric); float 4 group 16: `nvfp4`; channel / tensor strategy: the value format (per-row or per-tensor scales not counted) |
| `awq` (`awq.py`) | `bits` / `w_bit`, `group_size` / `q_group_size`, `zero_point` | `int4:gG:fp16:zp` (fp16 `scales`, packed int32 `qzeros`) |
| `gptq` (`gptq.py`) | `bits`, `group_size` | `int4:gG:fp16:zp` / `int8:gG:fp16:zp` (GPTQ always stores `qzeros`; the int32 `g_idx`, 4 B per input column, is not counted); `group_size: -1` (one scale and zero per output column, over all its input values): G = hidden_size, exact for the matrices that read the hidden state, while down_proj / o_proj, whose input is wider, are given K / hidden_size times their scales (Llama-3.1-8B down_proj: 14,336 scales and zeros instead of 4,096, 10,240 x 2.5 B = 25,600 B more per layer, 0.02% of it) |
| `bitsandbytes` (`bitsandbytes.py`) | `load_in_4bit`, `bnb_4bit_use_double_quant`, `load_in_8bit`, `llm_int8_skip_modules` | `nf4` / `nf4_dq`; 8 bit: `int8` (fp32 row scales `SCB` not counted) |
| `mxfp4` (`mxfp4.py`, gpt-oss) | `modules_to_not_convert` | `mxfp4` |
| `modelopt` (`modelopt.py`) | `quant_algo` FP8 / NVFP4 | `fp8_e4m3` / `nvfp4` |

Layers left unquantized: embeddings, LM head, norms and routers are always counted in the model's
dtype (kvcalc's weight count puts only decoder matrices in the weight format). The config's
`modules_to_not_convert` / `ignore` / `ignored_layers` / `llm_int8_skip_modules` patterns are
matched against module names (plain names as substrings, as transformers does; `re:` regexes as
compressed-tensors does; `*` globs as gpt-oss writes them): attention left unquantized in a MoE
model means only the routed experts are quantized (`expert_weight_dtype`, as gpt-oss), and a
latent MoE's down / up projections with them unless a pattern names those too
(`latent_weight_dtype`, Kimi-K3); a pattern
kvcalc's per-layer count cannot express (attention of a dense model, some layers only) gives a
`KvcalcWarning` and the count keeps the quantized format; a checkpoint's safetensors headers are
exact either way. Nothing here reads files.
"""

from __future__ import annotations

import fnmatch
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvcalc.errors import ConfigError, KvcalcWarning
from kvcalc.load.fields import ModelFields
from kvcalc.load.hf.reader import _shown
from kvcalc.text import excerpt

if TYPE_CHECKING:
    from kvcalc.json_types import JsonObject


@dataclass(frozen=True)
class Quantization:
    """What `quantization_config` says, for the memory plan and the header reader.

    `weight_dtype` / `expert_weight_dtype`: kvcalc format names of the decoder matrices and the
    routed experts (None: the model's dtype); `latent_weight_dtype`: of a latent MoE's down / up
    projections where they differ from the decoder matrices (None: as `weight_dtype`);
    `expert_tensor_scale_bytes`: per-tensor scales of each routed-expert matrix; `packed_bits`:
    bits of each value packed into int32 words (`qweight`, `qzeros`, `weight_packed`: 32 / bits
    values per word), None when nothing is packed so; `u8_nibbles`: 4-bit values packed two per
    uint8 byte (mxfp4 `*_blocks`, bitsandbytes 4-bit `weight`, nvfp4 `weight_packed`); `method`:
    the config's `quant_method`."""

    method: str
    weight_dtype: str | None
    expert_weight_dtype: str | None = None
    packed_bits: int | None = None
    u8_nibbles: bool = False
    #: the config field that sets the group or block of the scales (`quantization_config.weight_block_size`),
    #: named when the architecture's matrices are not whole groups or blocks of it
    field: str = "quantization_config"
    latent_weight_dtype: str | None = None
    expert_tensor_scale_bytes: int = 0  # `NVFP4_EXPERT_TENSOR_SCALE_BYTES` for ModelOpt's NVFP4 experts
    linear_tensor_scale_bytes: int = 0  # `MODELOPT_TENSOR_SCALE_BYTES` per ModelOpt-quantized matrix
    kv_scale_bytes: int = 0  # `MODELOPT_KV_SCALE_BYTES` per attention layer (`kv_cache_quant_algo`)

    def fields(self) -> ModelFields:
        """The `ModelSpec` fields this sets (only those not None)."""
        return {
            k: v
            for k, v in (
                ("weight_dtype", self.weight_dtype),
                ("expert_weight_dtype", self.expert_weight_dtype),
                ("latent_weight_dtype", self.latent_weight_dtype),
            )
            if v is not None
        } | {
            k: v
            for k, v in (
                ("expert_tensor_scale_bytes", self.expert_tensor_scale_bytes),
                ("linear_tensor_scale_bytes", self.linear_tensor_scale_bytes),
                ("kv_scale_bytes", self.kv_scale_bytes),
            )
            if v
        }


def _int(q: JsonObject, keys: tuple[str, ...], default: int | None, path: str | None) -> int | None:
    for k in keys:
        v = q.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int):
            raise ConfigError(f"must be a whole number, got {v!r}", path=path, field=f"quantization_config.{k}")
        return v
    return default


#: ModelOpt's NVFP4 routed experts store, per matrix (w1, w2, w3 of each expert), beside the packed
#: values and their fp8 scale per 16, two fp32 scalars: the global `weight_scale_2` and the static
#: `input_scale` (the activations are NVFP4 too, `input_activations.dynamic: false`): 8 B. vLLM
#: 0.33.0 `modelopt.py` ModelOptNvFp4FusedMoE.create_weights: w13_weight_scale_2 (E, 2) and
#: w2_weight_scale_2 (E), w13_input_scale and w2_input_scale likewise, all torch.float32.
NVFP4_EXPERT_TENSOR_SCALE_BYTES = 8

#: ModelOpt's FP8 and NVFP4 checkpoints store, per quantized linear module (each of q_proj, k_proj,
#: v_proj, o_proj, in_proj, up_proj ... apart: vLLM fuses qkv / gate_up but keeps one scale per
#: shard, `shapes.num_partitions`), two fp32 scalars: FP8 `weight_scale` and `input_scale`
#: (per-tensor static W8A8), NVFP4 `weight_scale_2` and `input_scale` (beside the per-16 fp8
#: `weight_scale` of the `nvfp4` format): 8 B. vLLM 0.33.0 `modelopt.py` KFp8StaticTensor /
#: KNvfp4Static.create_weights (torch.float32, PerTensorScaleParameter); FP8 experts likewise
#: (ModelOptFp8MoEMethod: w13_weight_scale (E, 2), w2_weight_scale (E), the input scales).
MODELOPT_TENSOR_SCALE_BYTES = 8

#: ModelOpt's `kv_cache_quant_algo` (FP8): each attention layer's checkpoint holds an fp32
#: `k_scale` and `v_scale` (`k_proj.k_scale`, `v_proj.v_scale`; vLLM 0.33.0 `quantization/kv_cache.py`
#: BaseKVCacheMethod loads them, ModelOptKVCacheMethod in `modelopt.py`): 8 B
MODELOPT_KV_SCALE_BYTES = 8

#: the most repeats (`*`, `+`, `{m,n}`) one `re:` pattern may hold: k unbounded repeats in a row
#: try up to n^k splits of an n-character name (`.*` x 7 over a 38-character module name: 0.3 s
#: per name, and a pattern is tried on about 30 names); published patterns hold one or two
MAX_PATTERN_REPEATS = 5


def _regex_problem(regex: str) -> str | None:
    """Why `regex` (an `re:` pattern's body) cannot be matched safely, or None: it does not
    compile, holds a repeat inside a repeat (`(.*)*`) or an alternation inside a repeat
    (`(a|a)*`), which backtrack exponentially in the name's length (Python's `re` has no time
    limit), or more than `MAX_PATTERN_REPEATS` repeats. Read from the parse tree of Python's own
    regex compiler (`re._parser`, `sre_parse` before Python 3.11)."""
    try:
        from re import _parser as sre  # type: ignore[attr-defined]
    except ImportError:  # Python 3.10
        import sre_parse as sre
    try:
        tree = sre.parse(regex)
    except (re.error, RecursionError, OverflowError) as e:
        return f"is not a regular expression ({str(e)[:80]})"
    repeat_ops = {sre.MAX_REPEAT, sre.MIN_REPEAT} | (
        {sre.POSSESSIVE_REPEAT} if hasattr(sre, "POSSESSIVE_REPEAT") else set()
    )
    count = 0

    def walk(items: Any, in_repeat: bool) -> str | None:  # Any: sre_parse's SubPattern (untyped)
        nonlocal count
        for op, av in items:
            if op in repeat_ops:
                lo, hi, sub = av
                if hi is sre.MAXREPEAT or hi > 1:
                    if in_repeat:
                        return "holds a repeat inside a repeat"
                    count += 1
                    problem = walk(sub, True)
                else:
                    problem = walk(sub, in_repeat)
            elif op is sre.BRANCH:
                if in_repeat:
                    return "holds an alternation inside a repeat"
                problem = next((w for b in av[1] if (w := walk(b, in_repeat))), None)
            elif op is sre.SUBPATTERN:
                problem = walk(av[-1], in_repeat)
            elif op in (sre.ASSERT, sre.ASSERT_NOT):
                problem = walk(av[1], in_repeat)
            elif op is getattr(sre, "ATOMIC_GROUP", None):
                problem = walk(av, in_repeat)
            elif op is sre.GROUPREF_EXISTS:
                problem = next((w for b in av[1:] if b is not None and (w := walk(b, in_repeat))), None)
            else:
                problem = None
            if problem:
                return problem
        return None

    problem = walk(tree, False)
    if problem is None and count > MAX_PATTERN_REPEATS:
        problem = f"holds {count} repeats, more than {MAX_PATTERN_REPEATS}"
    if problem and not problem.startswith("is not"):
        problem += ", which backtracks without end on a module name; write a simpler pattern"
    return problem


def _unquantized_patterns(q: JsonObject, path: str | None) -> list[str]:
    """The unquantized-module patterns of every key transformers and the engines read (see the
    module docstring). Raises `ConfigError` for a key that is not a list of strings, and for an
    `re:` pattern that does not compile or could not be matched in bounded time (`_regex_problem`)."""
    out: list[str] = []
    for key in ("modules_to_not_convert", "ignore", "ignored_layers", "llm_int8_skip_modules"):
        v = q.get(key)
        if v is None:
            continue
        names = [x for x in v if isinstance(x, str)] if isinstance(v, list) else []
        if not isinstance(v, list) or len(names) != len(v):
            raise ConfigError("must be a list of module names", path=path, field=f"quantization_config.{key}")
        for x in names:
            problem = _regex_problem(x[3:]) if x.startswith("re:") else None
            if problem:
                raise ConfigError(
                    f"{excerpt(x, 60, quote=True)} {problem}", path=path, field=f"quantization_config.{key}"
                )
        out += names
    return out


def matches(pattern: str, module: str) -> bool:
    """True when an unquantized-module `pattern` covers `module` (a dotted module name):
    `re:REGEX` matched from the start (compressed-tensors `ignore`), a glob with `*` (gpt-oss
    `model.layers.*.self_attn`, also covering the modules below it), else a substring of the
    name (transformers' `modules_to_not_convert` test)."""
    if pattern.startswith("re:"):
        try:
            return re.match(pattern[3:], module) is not None
        except re.error:
            return False
    if "*" in pattern:
        return fnmatch.fnmatchcase(module, pattern) or fnmatch.fnmatchcase(module, pattern + ".*")
    return pattern in module


#: module names of one decoder layer the patterns are tested on, per part
_ATTENTION = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")
_DENSE_MLP = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
_EXPERTS = ("mlp.experts.0.gate_proj", "mlp.experts.0.down_proj")
#: a latent MoE's down and up projections, as each family's engine class names them (vLLM 0.33.0
#: `models/kimi_k3/nvidia/model.py` KimiMoE `routed_expert_{down,up}_proj`; `nemotron_h.py`
#: NemotronHMoE `fc1_latent_proj` / `fc2_latent_proj`)
_LATENT = (
    ("block_sparse_moe.routed_expert_down_proj", "block_sparse_moe.routed_expert_up_proj"),
    ("mixer.fc1_latent_proj", "mixer.fc2_latent_proj"),
)


def _left_out(patterns: list[str], n_layers: int, part: tuple[str, ...]) -> list[bool]:
    """For each of the first, second and last layers: is every module of `part` unquantized?"""
    layers = sorted({0, min(1, n_layers - 1), n_layers - 1})
    return [all(any(matches(p, f"model.layers.{i}.{m}") for p in patterns) for m in part) for i in layers]


def _latent_left_out(patterns: list[str], n_layers: int) -> list[bool]:
    """For each of the first, second and last layers: are a latent MoE's down and up projections
    unquantized (every module of one family's naming, `_LATENT`, matched by a pattern)?"""
    layers = sorted({0, min(1, n_layers - 1), n_layers - 1})
    return [
        any(all(any(matches(p, f"model.layers.{i}.{m}") for p in patterns) for m in names) for names in _LATENT)
        for i in layers
    ]


def _fp8_format(
    method: str, q: JsonObject, path: str | None, unsized: Callable[[str], None], scale: str = "fp32"
) -> Quantization | None:
    """fp8 (vLLM `fp8.py`): per-tensor scales, or `weight_block_size` blocks with `scale` scales
    (fp32; e8m0 for DeepSeek-V4's FP4-expert checkpoints, `_deepseek_v4_scale`)."""
    fmt = q.get("fmt", "e4m3")
    base = "fp8_e5m2" if fmt == "e5m2" else "fp8_e4m3"
    block = q.get("weight_block_size")
    if block is None:
        return Quantization(method, base)
    if (
        not isinstance(block, list)
        or len(block) != 2
        or not all(isinstance(b, int) and not isinstance(b, bool) and 0 < b <= 1024 for b in block)
    ):
        raise ConfigError(
            f"must be two block sizes such as [128, 128], got {block!r}",
            path=path,
            field="quantization_config.weight_block_size",
        )
    if block[0] != block[1]:
        unsized(f"fp8 with a {block[0]} x {block[1]} block")
        return None
    return Quantization(method, f"{base}:b{block[0]}:{scale}", field="quantization_config.weight_block_size")


def _deepseek_v4_scale(config: JsonObject) -> str:
    """The fp8 block-scale dtype of a DeepSeek-V4 checkpoint (model_type deepseek_v4): vLLM 0.33.0
    `models/deepseek_v4/quant_config.py` DeepseekV4FP8Config, which serves its `fp8` configs
    (`override_quantization_method`), creates the scales as float8_e8m0fnu (1 B a 128 x 128 block)
    when `is_scale_e8m0`, "FP4 checkpoints store FP8 linear scales as e8m0fnu", i.e. when the
    config's `expert_dtype` is fp4 (its default when absent), and float32 for fp8 experts
    (DeepSeek-V4-Flash-Base); the reference `inference/model.py` Linear stores `scale` as
    float8_e8m0fnu. fp32 for every other model."""
    if config.get("model_type") != "deepseek_v4":
        return "fp32"
    return "e8m0" if config.get("expert_dtype", "fp4") == "fp4" else "fp32"


def _compressed_tensors_format(
    method: str, q: JsonObject, dtype: str, path: str | None, where: str, unsized: Callable[[str], None]
) -> Quantization | None:
    """compressed-tensors (`config_groups`: the first group's `weights` scheme): fp8 per tensor,
    per group or per block, nvfp4, int4 / int8 with group scales (`:zp` when asymmetric)."""
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ConfigError(
            "must map group names to their schemes (compressed-tensors)",
            path=path,
            field="quantization_config.config_groups",
        )
    scheme = next(iter(groups.values()))
    w = scheme.get("weights") if isinstance(scheme, dict) else None
    if not isinstance(w, dict):
        raise ConfigError("needs a `weights` scheme", path=path, field="quantization_config.config_groups")
    if len(groups) > 1:
        warnings.warn(
            f"{where}: quantization_config has {len(groups)} config_groups; kvcalc counts every matrix with the first",
            KvcalcWarning,
            stacklevel=4,
        )
    bits, kind = w.get("num_bits"), w.get("type", "int")
    strategy, gsize = w.get("strategy", "tensor"), w.get("group_size")
    if kind == "float" and bits == 8:
        if strategy == "block":
            b = w.get("block_structure") or [128, 128]
            if isinstance(b, list) and len(b) == 2 and b[0] == b[1] and isinstance(b[0], int):
                return Quantization(method, f"fp8_e4m3:b{b[0]}:{dtype}", field="quantization_config.config_groups")
            unsized(f"fp8 block_structure {b!r}")
            return None
        if strategy == "group" and isinstance(gsize, int):
            return Quantization(method, f"fp8_e4m3:g{gsize}:{dtype}", field="quantization_config.config_groups")
        return Quantization(method, "fp8_e4m3")
    if kind == "float" and bits == 4:
        # vLLM 0.33.0 compressed_tensors.py `_is_nvfp4_format` (group 16) / `_is_mxfp4` (group 32, e8m0
        # uint8 scales, format mxfp4-pack-quantized: Kimi-K3's experts)
        if gsize == 32:
            return Quantization(method, "mxfp4", u8_nibbles=True)
        if gsize in (16, None):
            return Quantization(method, "nvfp4", u8_nibbles=True)
    if kind == "int" and bits in (4, 8):
        if strategy == "group" and isinstance(gsize, int) and not isinstance(gsize, bool) and gsize > 0:
            zp = "" if w.get("symmetric", True) else ":zp"
            return Quantization(
                method,
                f"int{bits}:g{gsize}:{dtype}{zp}",
                packed_bits=4 if bits == 4 else None,
                field="quantization_config.config_groups",
            )
        if bits == 8:
            return Quantization(method, "int8")
    unsized(f"compressed-tensors {kind} {bits}-bit with strategy {strategy}")
    return None


def _format(
    method: str,
    q: JsonObject,
    dtype: str,
    path: str | None,
    hidden_size: int | None = None,
    fp8_scale: str = "fp32",
) -> Quantization | None:
    """The weight format a method stores its matrices in (None after a warning when kvcalc
    cannot size it)."""
    where = path or "config"

    def unsized(what: str) -> None:
        warnings.warn(
            f"{where}: quantization_config {what} is not one kvcalc sizes; weights are counted in "
            f"{dtype} (give --weight-dtype, or point kvcalc at the checkpoint's safetensors files)",
            KvcalcWarning,
            stacklevel=4,
        )

    if method == "fp8":
        return _fp8_format(method, q, path, unsized, fp8_scale)
    if method == "compressed-tensors":
        return _compressed_tensors_format(method, q, dtype, path, where, unsized)
    if method in ("awq", "gptq"):
        bits = _int(q, ("bits", "w_bit"), 4, path)
        group = _int(q, ("group_size", "q_group_size"), 128, path)
        if method == "gptq" and group == -1 and bits in (4, 8) and hidden_size:
            # GPTQ group_size -1: one group per output column, spanning all its input values (vLLM
            # `gptq.py` create_weights: `group_size = input_size` when -1; `scales` and `qzeros` of
            # shape (1, output_size)): counted as groups of hidden_size, exact for the matrices that
            # read the hidden state (q, k, v, gate, up, in_proj)
            return Quantization(
                method, f"int{bits}:g{hidden_size}:fp16:zp", packed_bits=bits, field="quantization_config.group_size"
            )
        if bits not in (4, 8) or group is None or group <= 0:
            unsized(f"{method} {bits}-bit with group_size {group}")
            return None
        zp = ":zp" if method == "gptq" or q.get("zero_point", True) else ""
        return Quantization(
            method, f"int{bits}:g{group}:fp16{zp}", packed_bits=bits, field="quantization_config.group_size"
        )
    if method == "bitsandbytes":
        for flag in ("load_in_4bit", "load_in_8bit", "bnb_4bit_use_double_quant"):
            # transformers' BitsAndBytesConfig.post_init: "load_in_4bit must be a boolean" (TypeError)
            if flag in q and not isinstance(q[flag], bool):
                raise ConfigError(
                    f"must be true or false, got {_shown(q[flag])}", path=path, field=f"quantization_config.{flag}"
                )
        if q.get("load_in_4bit"):
            return Quantization(method, "nf4_dq" if q.get("bnb_4bit_use_double_quant") else "nf4", u8_nibbles=True)
        if q.get("load_in_8bit"):
            return Quantization(method, "int8")
        unsized("bitsandbytes without load_in_4bit or load_in_8bit")
        return None
    if method == "mxfp4":
        return Quantization(method, "mxfp4", u8_nibbles=True)
    if method == "modelopt":
        algo = str(q.get("quant_algo", "")).upper()
        if algo == "FP8":
            return Quantization(method, "fp8_e4m3")
        if algo == "NVFP4":
            return Quantization(method, "nvfp4", u8_nibbles=True)
        unsized(f"modelopt quant_algo {algo or '(none)'}")
        return None
    unsized(f"quant_method '{method}'")
    return None


def read_hf_quant_config(data: JsonObject, *, n_layers: int, moe: bool, path: str | None = None) -> Quantization | None:
    """The `Quantization` NVIDIA ModelOpt's `hf_quant_config.json` (beside config.json in its FP8 /
    NVFP4 checkpoints) states: `quantization.quant_algo` FP8 (`fp8_e4m3`, per-tensor scales) or
    NVFP4 (`nvfp4`: fp4 values, one fp8 scale per 16) for the decoder matrices, less the
    `exclude_modules` patterns (as `quantization_config`'s ignore lists are read); MIXED_PRECISION
    with `quantized_layers` {module: {quant_algo}}: when every quantized module is a layer's
    routed experts (`layers.N.ffn.experts`, `.mlp.experts`) in one algorithm, that is the experts'
    format (nvidia/DeepSeek-V4-Flash-NVFP4: NVFP4 experts, the rest as config.json says), else
    kvcalc cannot place it (a `KvcalcWarning`, None). Each quantized matrix also stores two fp32
    scalars (`MODELOPT_TENSOR_SCALE_BYTES`: `linear_tensor_scale_bytes`, and per expert matrix
    `expert_tensor_scale_bytes`); none for an excluded module. `kv_cache_quant_algo` says how the
    checkpoint's KV scales were calibrated, not the cache format an engine uses: read only for the
    fp32 `k_scale` / `v_scale` each attention layer stores (`kv_scale_bytes`).
    (vLLM 0.33.0 `model_executor/layers/quantization/modelopt.py` reads the same file.)

    Raises `ConfigError` (field named) for a file without a `quantization` object."""
    q = data.get("quantization")
    if not isinstance(q, dict):
        raise ConfigError(
            "must hold a `quantization` object (NVIDIA ModelOpt's hf_quant_config.json)",
            path=path,
            field="quantization",
        )
    formats = {"FP8": "fp8_e4m3", "NVFP4": "nvfp4"}
    algo = str(q.get("quant_algo") or "").upper()
    kv = MODELOPT_KV_SCALE_BYTES if q.get("kv_cache_quant_algo") else 0
    if algo in formats:
        quant = Quantization(
            "modelopt",
            formats[algo],
            u8_nibbles=algo == "NVFP4",
            field="quantization.quant_algo",
            expert_tensor_scale_bytes=MODELOPT_TENSOR_SCALE_BYTES if moe else 0,
            linear_tensor_scale_bytes=MODELOPT_TENSOR_SCALE_BYTES,
            kv_scale_bytes=kv,
        )
        given = q.get("exclude_modules") or []
        excluded = [p for p in given if isinstance(p, str)] if isinstance(given, list) else []
        if not isinstance(given, list) or len(excluded) != len(given):
            raise ConfigError("must be a list of module patterns", path=path, field="quantization.exclude_modules")
        attention = _left_out(excluded, n_layers, _ATTENTION)
        mlp = _left_out(excluded, n_layers, _EXPERTS if moe else _DENSE_MLP)
        if moe and all(attention) and not any(mlp):
            return Quantization(
                "modelopt",
                None,
                quant.weight_dtype,
                None,
                quant.u8_nibbles,
                quant.field,
                expert_tensor_scale_bytes=MODELOPT_TENSOR_SCALE_BYTES,
                kv_scale_bytes=kv,
            )
        return quant
    layers = q.get("quantized_layers")
    if algo == "MIXED_PRECISION" and isinstance(layers, dict) and layers:
        algos = {str(v.get("quant_algo", "")).upper() for v in layers.values() if isinstance(v, dict)}
        experts_only = all(re.search(r"(^|\.)(ffn|mlp)\.experts$", str(k)) for k in layers)
        if experts_only and len(algos) == 1 and next(iter(algos)) in formats and moe:
            fmt = formats[next(iter(algos))]
            return Quantization(
                "modelopt",
                None,
                fmt,
                None,
                fmt == "nvfp4",
                "quantization.quantized_layers",
                expert_tensor_scale_bytes=MODELOPT_TENSOR_SCALE_BYTES,
                kv_scale_bytes=kv,
            )
    warnings.warn(
        f"{path or 'hf_quant_config.json'}: quant_algo {algo or '(none)'} is not one kvcalc places on the "
        "decoder matrices; the weights are counted as config.json says (the checkpoint's safetensors headers "
        "are exact)",
        KvcalcWarning,
        stacklevel=3,
    )
    return None


def read_quantization(
    config: JsonObject,
    *,
    dtype: str,
    n_layers: int,
    moe: bool,
    path: str | None = None,
    hidden_size: int | None = None,
    latent: bool = False,
) -> Quantization | None:
    """The `Quantization` of a Hugging Face config dict (`quantization_config`, at the top level
    or in `text_config`), None when it has none or kvcalc cannot size its method (after a
    `KvcalcWarning`). `dtype`: the model's dtype (the unquantized parts, and compressed-tensors'
    scales); `moe`: the model has routed experts; `hidden_size`: the group of GPTQ's
    `group_size: -1` (one scale and zero point per output column); `latent`: the MoE has latent
    down / up projections, quantized unless the unquantized-module patterns name them (`_LATENT`;
    compressed-tensors targets every `Linear` its `ignore` list leaves: Kimi-K3's are MXFP4 with
    the experts while its attention stays bf16).

    Raises `ConfigError` (file and field named) for a malformed `quantization_config`.
    """
    q = config.get("quantization_config")
    text = config.get("text_config")
    if q is None and isinstance(text, dict):
        q = text.get("quantization_config")
    if q is None:
        return None
    if not isinstance(q, dict):
        raise ConfigError(f"must be a JSON object, got {q!r}"[:200], path=path, field="quantization_config")
    method = q.get("quant_method")
    if not isinstance(method, str):
        raise ConfigError(
            "needs quant_method (fp8, compressed-tensors, awq, gptq, bitsandbytes, mxfp4)",
            path=path,
            field="quantization_config.quant_method",
        )
    method = method.strip().lower()
    quant = _format(method, q, dtype, path, hidden_size, _deepseek_v4_scale(config))
    if quant is None:
        return None
    if moe and str(q.get("moe_quant_algo") or "").upper() == "NVFP4":
        # ModelOpt's mixed checkpoints (nvidia/DeepSeek-V4-Flash-NVFP4): `moe_quant_algo` NVFP4 for the
        # routed experts beside the method's format for the rest
        return Quantization(
            method,
            quant.weight_dtype,
            "nvfp4",
            quant.packed_bits,
            quant.u8_nibbles,
            quant.field,
            expert_tensor_scale_bytes=NVFP4_EXPERT_TENSOR_SCALE_BYTES,
        )
    patterns = _unquantized_patterns(q, path)
    attention = _left_out(patterns, n_layers, _ATTENTION)
    mlp = _left_out(patterns, n_layers, _EXPERTS if moe else _DENSE_MLP)
    latent_quantized = latent and not any(_latent_left_out(patterns, n_layers))
    # the latent projections apart from the decoder matrices: quantized beside unquantized attention
    # (Kimi-K3), or left in the model's dtype beside quantized attention
    latent_alone = quant.weight_dtype if latent_quantized else None
    if all(attention) and all(mlp):  # nothing of the decoder is quantized
        return Quantization(
            method,
            None,
            packed_bits=quant.packed_bits,
            u8_nibbles=quant.u8_nibbles,
            field=quant.field,
            latent_weight_dtype=latent_alone,
        )
    if moe and all(attention) and not any(mlp):  # gpt-oss: bf16 attention, quantized routed experts
        return Quantization(
            method,
            None,
            quant.weight_dtype,
            quant.packed_bits,
            quant.u8_nibbles,
            quant.field,
            latent_weight_dtype=latent_alone,
        )
    if latent and not latent_quantized:
        quant = Quantization(
            quant.method,
            quant.weight_dtype,
            quant.expert_weight_dtype,
            quant.packed_bits,
            quant.u8_nibbles,
            quant.field,
            latent_weight_dtype=dtype,
        )
    if any(attention) or any(mlp):
        shown = ", ".join(p for p in patterns if "layers" in p or "attn" in p or "mlp" in p)
        warnings.warn(
            f"{path or 'config'}: quantization_config leaves some decoder matrices unquantized "
            f"({shown[:120]}); kvcalc counts them in {quant.weight_dtype} (the checkpoint's safetensors "
            f"headers are exact)",
            KvcalcWarning,
            stacklevel=3,
        )
    return quant
