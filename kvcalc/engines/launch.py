"""The command line that launches a planned layout, per engine (`EngineProfile.launch_line`).

Each flag is the engine's own current name, checked against its argument parser:

- vLLM, `vllm/engine/arg_utils.py` (`EngineArgs.add_cli_args`; `vllm serve` takes the model as
  its positional argument): `--tensor-parallel-size`, `--pipeline-parallel-size`,
  `--data-parallel-size`, `--max-model-len`, `--kv-cache-dtype` (every entry of vLLM 0.33.0's
  `vllm/config/cache.py` `CacheDType`: kvcalc's formats by vLLM's names, `auto`, `bfloat16`,
  `float16`, `fp8`, `fp8_e5m2`, `nvfp4`, and vLLM's own as the plan parsed them,
  `LaunchSpec.kv_cache_dtype`: `turboquant_k8v4`, `fp8_per_token_head`, `fp8_ds_mla` ...),
  `--gpu-memory-utilization`, `--max-num-seqs`,
  `--quantization fp8` (fp8 weights quantized at load from a 16-bit checkpoint). Several nodes
  run one engine with the mp backend (vLLM 0.33.0 `vllm/config/parallel.py` `nnodes`,
  `node_rank`): `--nnodes N --node-rank R --master-addr HEAD`, the head's line shown; attention
  data-parallel + expert parallel: `--data-parallel-size`, `--enable-expert-parallel`,
  `--data-parallel-size-local`, `--data-parallel-address` (`vllm_parallel_flags`).
- SGLang, `python/sglang/srt/server_args.py` (`ServerArgs.add_cli_args`), run as
  `python -m sglang.launch_server`: `--model-path`, `--tp-size` (alias `--tensor-parallel-size`),
  `--pp-size`, `--dp-size`, `--context-length`, `--kv-cache-dtype` (`auto`, `fp8_e4m3`,
  `fp8_e5m2`), `--mem-fraction-static`, `--max-running-requests`, `--quantization fp8`; several
  nodes: `--nnodes N --node-rank R --dist-init-addr HOST:PORT`, one line per node.
- llama.cpp, `common/arg.cpp` (`common_params_parser_init`), `llama-server`: `-m` (`--model`),
  `-c` (`--ctx-size`: all slots together, each of the `-np` slots gets c / np), `-np`
  (`--parallel`: given, the slots are separate streams of c / np cells, as `llamacpp.allocate`
  sizes them; left out, llama-server would run 4 slots in one unified cache instead), `-ctk` /
  `-ctv` (`--cache-type-k` / `--cache-type-v`: f16, bf16, q8_0, q4_0, ...), `-ngl`
  (`--n-gpu-layers`), `-ts` (`--tensor-split`, proportions per device), `-fa on`
  (`--flash-attn [on|off|auto]`: a quantized V cache needs flash attention, "V cache
  quantization requires flash_attn"; `on` rather than the default `auto`, which turns it off
  where the backend lacks it).

Flag names were confirmed in the engines' sources through a search of public code: vLLM's
`--tensor-parallel-size`, `--pipeline-parallel-size`, `--max-model-len`, `--kv-cache-dtype`,
`--gpu-memory-utilization`, `--max-num-seqs`, `--quantization`; llama.cpp's `-ngl`, `-ts`,
`-np`, `-c`, `-m`, `-ctk`, `-ctv` (arg.cpp) and `-fa [on|off|auto]`; SGLang's `--tp-size` /
`--pp-size` / `--dp-size` / `--nnodes` / `--context-length` / `--mem-fraction-static` /
`--max-running-requests` from its server-arguments documentation and launch scripts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvcalc.engine_dtypes import VLLM_033_FORMAT_NAMES
from kvcalc.errors import KvcalcError
from kvcalc.formats import StorageFormat, kv_format, weight_format
from kvcalc.schema import ModelSpec

#: an `org/name` Hugging Face id at the start of a config's `source` (the bundled models' form:
#: `meta-llama/Llama-3.1-8B config.json (huggingface.co/...)`)
_HF_ID = re.compile(r"^([\w.-]+/[\w.-]+)(\s+config\.json\b|$)")

#: the placeholder where kvcalc knows no checkpoint an engine could load (a kvcalc YAML that names
#: none, a GGUF header): written in capitals, as `HEAD_NODE_IP`, for the user to fill in
CHECKPOINT_PLACEHOLDER = "CHECKPOINT_DIR"


def model_ref(model: ModelSpec) -> str:
    """The model argument of a launch line (`vllm serve MODEL`, SGLang `--model-path MODEL`):
    what the engine can load, never a name kvcalc made up. In order:

    1. `model.model_path`, as the loader set it: a Hub id input's `org/name`
       (`load.hub`); a config.json's `_name_or_path` where that is an `org/name` Hub id, else
       the folder that holds the config.json (absolute; a checkpoint folder given is that
       folder: `load.hf._model_path`);
    2. the Hub id a bundled model's `source` starts with (`org/name config.json (...)`, or
       the id alone; a file such as `dir/model.yaml` is no id);
    3. else `CHECKPOINT_DIR`, a placeholder the user fills in (kvcalc knows no checkpoint: a
       kvcalc YAML that names none).

    vLLM 0.33.0 (`vllm/config/model.py` `ModelConfig.model`: "Name or path of the Hugging Face
    model to use") and SGLang 0.5.23 (`server_args.py` `--model-path`: "The path of the model
    weights. This can be a local folder or a Hugging Face repo ID") take either form."""
    if model.model_path:
        return model.model_path
    m = _HF_ID.match(model.source or "")
    if m and not m.group(1).lower().endswith((".json", ".yaml", ".yml", ".gguf")):
        return m.group(1)
    return CHECKPOINT_PLACEHOLDER


@dataclass(frozen=True)
class LaunchSpec:
    """What a launch line needs from a plan: the layout (tp x pp x dp over `nodes`), the
    context (tokens) and concurrency (sequences per replica), the formats as the request builder
    resolved them (`StorageFormat`s, written by name on the line; `weight_dtype` None: the
    checkpoint's own; a name given as text is looked up once, here), the memory fraction, and
    llama.cpp's split."""

    model: ModelSpec
    tp: int
    pp: int
    dp: int
    nodes: int
    max_model_len: int
    max_num_seqs: int
    k_dtype: StorageFormat
    v_dtype: StorageFormat
    weight_dtype: StorageFormat | None
    gpu_memory_utilization: float
    tensor_split: tuple[int, ...] | None = None
    #: vLLM: the block size to state (`vllm.plan.launch_block_size`), the
    #: attention backend given; None: vLLM's own choice, not stated
    block_size: int | None = None
    attention_backend: str | None = None
    #: vLLM: the cache options the plan was made with where they differ from `vllm serve`'s
    #: defaults (`vllm.plan.launch_flags`: --disable-hybrid-kv-cache-manager ...), in order
    flags: tuple[str, ...] = ()
    #: attention data-parallel ranks of one engine and the expert-parallel size (`calc.parallel`)
    dp_attention: int = 1
    ep: int = 1
    #: vLLM's decode context parallel (`--decode-context-parallel-size`, `calc.parallel`)
    dcp: int = 1
    #: the speculative config (`calc.speculative.SpecDecode`), None: none
    speculative: object | None = None
    #: the engine's own `--kv-cache-dtype` as the request parsed it (`calc.plan.KvPick.engine_dtype`:
    #: vLLM 0.33's `turboquant_k8v4`, `fp8_per_token_head`, `fp8_ds_mla`, ...), stated as it is;
    #: None: the engine's name of `k_dtype`
    kv_cache_dtype: str | None = None

    def __post_init__(self) -> None:
        for name in ("k_dtype", "v_dtype", "weight_dtype"):
            value = getattr(self, name)
            if isinstance(value, str):  # a name from outside the request builder (a test's)
                lookup = weight_format if name == "weight_dtype" else kv_format
                object.__setattr__(self, name, lookup(value, field=name))


def vllm_parallel_flags(spec: LaunchSpec, gpus_per_node: int = 8) -> list[str]:
    """vLLM 0.33.0's flags (`vllm/engine/arg_utils.py`) for the attention-DP / EP part of a
    layout: `--data-parallel-size D --enable-expert-parallel` (EP size = tp x D, vLLM's
    `FusedMoEParallelConfig.make`), `--enable-expert-parallel` alone for TP + EP; across nodes
    `--data-parallel-size-local L --data-parallel-address HEAD_NODE_IP` on the head (the other
    nodes: `--headless --data-parallel-start-rank k L`); a TP / PP engine over several nodes
    (mp backend): `--nnodes N --node-rank 0 --master-addr HEAD_NODE_IP` (node r: --node-rank r)."""
    out: list[str] = []
    if spec.dp_attention > 1:
        out += ["--data-parallel-size", str(spec.dp_attention)]
        per_node = max(1, gpus_per_node // (spec.tp * spec.pp))
        if spec.nodes > 1 and spec.dp_attention > per_node:
            out += ["--data-parallel-size-local", str(per_node), "--data-parallel-address", "HEAD_NODE_IP"]
    if spec.ep > 1:
        out += ["--enable-expert-parallel"]
    if spec.dcp > 1:  # vllm/engine/arg_utils.py (0.33.0): --decode-context-parallel-size, -dcp
        out += ["--decode-context-parallel-size", str(spec.dcp)]
    if spec.dp_attention == 1 and spec.dp == 1 and spec.nodes > 1:
        out += ["--nnodes", str(spec.nodes), "--node-rank", "0", "--master-addr", "HEAD_NODE_IP"]
    return out


def _checkpoint_format(model: ModelSpec) -> str:
    return model.weight_dtype or model.dtype


def _quantization(spec: LaunchSpec, engine: str) -> list[str]:
    """`--quantization fp8` for fp8 weights from a checkpoint that is not fp8 already; refuse
    other weight formats (they need a checkpoint quantized offline: AWQ, GPTQ, GGUF)."""
    w = spec.weight_dtype.name if spec.weight_dtype is not None else None
    if w is None or w == _checkpoint_format(spec.model):
        return []
    if w.startswith("fp8"):
        return ["--quantization", "fp8"]
    if w in ("bf16", "fp16"):
        return ["--dtype", "bfloat16" if w == "bf16" else "float16"]
    raise KvcalcError(
        f"{engine} loads {w} weights from a checkpoint quantized offline (AWQ, GPTQ); "
        f"kvcalc has no launch line for it: plan with --weight-dtype fp8 or the model's dtype",
        field="weight_dtype",
        value=w,
    )


def _kv_cache_dtype(
    spec: LaunchSpec, engine: str, fp8: str, also: tuple[str, ...] = (), names: dict[str, str] | None = None
) -> str:
    """The engine's `--kv-cache-dtype` for the planned K / V format: the engine's own name where
    the plan parsed one (`LaunchSpec.kv_cache_dtype`), `auto` for the model's own dtype, `fp8`
    spelled as the engine spells it, the formats of `also` by their own names (SGLang 0.5.23's
    mxfp8, nvfp4, fp4_mx_block16) or by the engine's name in `names` (vLLM 0.33's nvfp4,
    bfloat16, float16: `engine_dtypes.VLLM_033_FORMAT_NAMES`); anything else is refused,
    naming the list."""
    if spec.kv_cache_dtype is not None:
        return spec.kv_cache_dtype
    k, v = spec.k_dtype.name, spec.v_dtype.name  # names: what the line writes and the refusals name
    if k != v:
        raise KvcalcError(f"{engine} stores K and V in one format; plan with one --kv-dtype", field="k_dtype")
    if k == spec.model.dtype or (k in ("bf16", "fp16") and spec.model.dtype == "fp32"):
        return "auto"
    if k == "fp8_e4m3":
        return fp8
    if k == "fp8_e5m2" or k in also:
        return k
    if names and k in names:
        return names[k]
    listed = ", ".join(dict.fromkeys(("auto", fp8, "fp8_e5m2", *also, *(names or {}).values())))
    raise KvcalcError(f"{engine} has no {k} KV cache ({listed})", field="k_dtype", value=k)


def vllm_line(spec: LaunchSpec) -> str:
    """`vllm serve MODEL --tensor-parallel-size ... --max-num-seqs ...` (vLLM V1), with
    `--block-size` (`vllm/config/cache.py`) where the plan's block is not vLLM's default 16 or
    differs from vLLM's own choice (an MLA backend's size on the plan's GPU,
    `vllm.plan.launch_block_size`), and
    `--attention-backend` where one was given, then the plan's other cache options (`spec.flags`)."""
    parts = [
        "vllm",
        "serve",
        model_ref(spec.model),
        "--tensor-parallel-size",
        str(spec.tp),
        "--pipeline-parallel-size",
        str(spec.pp),
    ]
    moe = bool(spec.model.n_experts)
    if spec.dp > 1 and not moe:
        parts += ["--data-parallel-size", str(spec.dp)]
    parts += vllm_parallel_flags(spec)
    parts += [
        "--max-model-len",
        str(spec.max_model_len),
        "--kv-cache-dtype",
        _kv_cache_dtype(spec, "vLLM 0.33", "fp8", names=VLLM_033_FORMAT_NAMES),
        "--gpu-memory-utilization",
        f"{spec.gpu_memory_utilization:g}",
        # each DP rank is an engine core with its own scheduler: the limit is per rank
        "--max-num-seqs",
        str(-(-spec.max_num_seqs // spec.dp_attention)),
    ]
    if spec.block_size is not None:
        parts += ["--block-size", str(spec.block_size)]
    if spec.attention_backend is not None:
        parts += ["--attention-backend", spec.attention_backend.strip().upper()]
    parts += list(spec.flags) + _quantization(spec, "vLLM")
    if spec.speculative is not None:
        parts += ["--speculative-config", "'" + spec.speculative.vllm_config_json() + "'"]  # type: ignore[attr-defined]
    if spec.dp > 1 and moe:  # vLLM's --data-parallel-size would shard an MoE model's experts
        parts += ["#", f"x {spec.dp} engines (replicas) behind a load balancer"]
    return " ".join(parts)


def sglang_line(spec: LaunchSpec) -> str:
    """`python -m sglang.launch_server --model-path MODEL --tp-size ...` (run on each node with
    its `--node-rank` when the layout spans nodes)."""
    # SGLang 0.5.23 `server_args.py`: with --enable-dp-attention, --tp-size is the engine's total
    # GPUs and --dp-size the attention-DP groups (attention TP = tp / dp); --ep-size the experts'
    parts = [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        model_ref(spec.model),
        "--tp-size",
        str(spec.tp * spec.dp_attention),
    ]
    if spec.pp > 1:
        parts += ["--pp-size", str(spec.pp)]
    if spec.dp_attention > 1:
        parts += ["--dp-size", str(spec.dp_attention), "--enable-dp-attention"]
    elif spec.dp > 1:
        parts += ["--dp-size", str(spec.dp)]
    if spec.ep > 1:
        parts += ["--ep-size", str(spec.ep)]
    if spec.nodes > 1:
        parts += ["--nnodes", str(spec.nodes), "--node-rank", "0", "--dist-init-addr", "HEAD_NODE_IP:5000"]
    parts += [
        "--context-length",
        str(spec.max_model_len),
        "--kv-cache-dtype",
        _kv_cache_dtype(spec, "SGLang 0.5.23", "fp8_e4m3", ("mxfp8", "nvfp4", "fp4_mx_block16")),
        "--mem-fraction-static",
        f"{spec.gpu_memory_utilization:g}",
        "--max-running-requests",
        str(spec.max_num_seqs),
    ]
    parts += _quantization(spec, "SGLang")
    if spec.speculative is not None:
        parts += spec.speculative.sglang_flags()  # type: ignore[attr-defined]
    return " ".join(parts)


def llamacpp_line(spec: LaunchSpec, ggml_name) -> str:
    """`llama-server -m MODEL-FORMAT.gguf -c (T x B) -np B -ctk K -ctv V -ngl N [-ts ...]`:
    every layer offloaded (-ngl at least n_layers + 1, the output layer too), `-c` the whole
    cache (T tokens for each of B slots). `ggml_name` maps a kvcalc format to llama.cpp's
    type name (`llamacpp.ggml_name`, which refuses a type llama.cpp lacks). The file name is a
    placeholder for the GGUF of the planned weight format."""
    if spec.tp != 1 or spec.dp != 1:
        raise KvcalcError("llama.cpp splits layers over devices, not heads: plan it with tp 1", field="tp")
    k = ggml_name(kv_format(spec.k_dtype), field="k_dtype")
    v = ggml_name(kv_format(spec.v_dtype), field="v_dtype")
    w = spec.weight_dtype.name if spec.weight_dtype is not None else _checkpoint_format(spec.model)
    gguf = f"{spec.model.name}-{w.upper()}.gguf"
    parts = [
        "llama-server",
        "-m",
        gguf,
        "-c",
        str(spec.max_model_len * spec.max_num_seqs),
        "-np",
        str(spec.max_num_seqs),
        "-ctk",
        k,
        "-ctv",
        v,
        "-ngl",
        str(max(99, spec.model.n_layers + 1)),
    ]
    if spec.tensor_split and len(spec.tensor_split) > 1:
        parts += ["-ts", ",".join(str(x) for x in spec.tensor_split)]
    if v not in ("f32", "f16", "bf16"):
        parts += ["-fa", "on"]
    return " ".join(parts)
