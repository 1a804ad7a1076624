"""The command layer's structure: flag sets spread into signatures (`flag_sets`), narrow
command functions, refusals derived from the engine groups, no import cycle, short functions."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from kvcalc.calc.memory_plan import Layout
from kvcalc.cli import app
from kvcalc.cli import capacity as capacity_cmd
from kvcalc.cli import estimate as estimate_cmd
from kvcalc.cli import sweep as sweep_cmd
from kvcalc.cli.options import (
    ENGINE_FLAGS,
    GPU_ONLY_OPTIONS,
    GpuPlanFlags,
    KvFormatFlags,
    LayoutFlags,
    LlamacppFlags,
    SglangFlags,
    VllmFlags,
    flag_sets,
    only,
)
from kvcalc.engines.profile import LlamacppOptions, SglangOptions, VllmOptions

runner = CliRunner()
CLI = Path(__file__).parents[2] / "kvcalc" / "cli"


def long_flags(*args: str) -> list[str]:
    """The options of a command's --help, in order (the first long name on each option line)."""
    r = runner.invoke(app, [*args, "--help"])
    assert r.exit_code == 0, r.output
    return [m.group(1) for m in re.finditer(r"^  (?:-\w+, )*(--[\w-]+)", r.stdout, re.M)]


#: the option groups several commands spread, each in its order
KV_DTYPES = ["--kv-dtype", "--k-dtype", "--v-dtype"]
PARALLEL = [
    "--tp",
    "--pp",
    "--dp",
    "--dp-attention",
    "--ep",
    "--enable-expert-parallel",
    "--enable-dp-attention",
    "--dcp",
]
SGLANG_STATE = ["--mamba-full-memory-ratio", "--max-mamba-cache-size", "--mamba-ssm-dtype", "--disable-radix-cache"]
GPU_PLAN = [
    "--gpu",
    "--weight-dtype",
    "--gpu-memory-utilization",
    "--bw-efficiency",
    "--flops-efficiency",
    "--cuda-context",
    "--activation-reserve",
]
#: the tier below the GPU and a shared prefix (capacity's `KvMemoryFlags`, less --kv-memory)
OFFLOAD = [
    "--kv-offloading-size",
    "--kv-offloading-backend",
    "--offload-blocks-per-chunk",
    "--lmcache-cpu-size",
    "--lmcache-l1-size",
    "--hicache-ratio",
    "--hicache-size",
    "--hicache-host-memory-fraction",
    "--enable-hierarchical-cache",
    "--no-kv-offload",
    "--host-memory",
    "--gpus-per-node",
    "--shared-prefix",
    "--prefix-hit-rate",
    "--link",
]
#: the options of no group, then the --format / --help every command has
SOURCE = ["--calibration", "--revision", "--trust-plain-decoder", "--format", "--help"]


@pytest.mark.parametrize(
    "command, flags",
    [
        (
            "estimate",
            ["--seq-len", "--batch", "--engine", "--input-len", "--output-len", "--request-rate", *SOURCE]
            + [*KV_DTYPES, "--quant-group-size", "--scale-dtype", *PARALLEL, "--count"]
            + ["--speculative-config", "--speculative-algorithm", "--speculative-num-steps"]
            + ["--speculative-draft-model-path", "--accepted-len", "--block-size", "--page-size", *SGLANG_STATE]
            + [*GPU_PLAN, *OFFLOAD],
        ),
        (
            "sweep",
            ["--seq-len", "--batch", "--plot", "--force", "--beyond-context", "--engine", *SOURCE, *GPU_PLAN]
            + ["--count", "--tp", "--pp", "--kv-dtype"],
        ),
        (
            "capacity",
            ["--engine", "--format", "--help", "--kv-memory", *OFFLOAD, "--max-model-len", "--concurrency"]
            + [*PARALLEL, *KV_DTYPES]
            # vLLM
            + ["--block-size", "--vllm-version", "--disable-hybrid-kv-cache-manager", "--max-num-batched-tokens"]
            + ["--async-scheduling", "--attention-backend", "--allow-long-max-model-len", "--enable-prefix-caching"]
            + ["--vllm-v0", "--swap-space"]
            # SGLang
            + ["--page-size", "--sglang-version", "--disable-hybrid-swa-memory", "--swa-full-tokens-ratio"]
            + ["--dsa-prefill-backend", "--dsa-decode-backend", *SGLANG_STATE]
            # llama.cpp
            + ["--ctx-size", "--llamacpp-tool", "--parallel", "--kv-unified", "--swa-full", "--flash-attn"]
            + ["--llamacpp-version", "--n-gpu-layers", "--gpus", "--tensor-split", "--ubatch-size", "--batch-size"]
            + [
                "--ollama",
                "--gpu",
                "--revision",
                "--trust-plain-decoder",
                "--weight-dtype",
                "--gpu-memory-utilization",
            ],
        ),
    ],
)
def test_help_lists_every_option_in_its_place(command, flags):
    # the options of no group first (under "Options"), then each option group under its own
    # heading (`FlagSet.panel`: issue 23 friction 5), in the order the command spreads them
    assert long_flags(command) == flags


def test_gpu_defaults_are_the_plans_defaults():
    # the CLI's defaults (0.9, 0.8, 0.5, 500 MiB) are memory_plan / roofline's: an untyped group
    # gives exactly `Layout()`
    assert GpuPlanFlags().layout() == Layout()
    assert Layout().cuda_context_bytes == 500 * 2**20
    text = " ".join(runner.invoke(app, ["estimate", "--help"]).stdout.split())
    assert "(vLLM default 0.9)" in text and "(default 500MiB)" in text and "[default: 0.8]" in text
    assert GPU_ONLY_OPTIONS == (
        "weight_dtype",
        "gpu_memory_utilization",
        "bw_efficiency",
        "flops_efficiency",
        "cuda_context",
        "activation_reserve",
    )


@pytest.mark.parametrize("fn", [estimate_cmd.estimate, capacity_cmd.capacity, sweep_cmd.sweep])
def test_command_functions_take_few_parameters(fn):
    own = inspect.signature(inspect.unwrap(fn)).parameters
    # estimate: 15 with its whole-request group (issue 21) and the parallel and speculative groups (issue 20),
    # 16 with the offload group (issue 22: capacity's `KvMemoryFlags`, less --kv-memory)
    assert len(own) <= 16, list(own)
    # what typer sees: every option, spread out (estimate 23, capacity 30, sweep 16 with ctx and model)
    assert len(inspect.signature(fn).parameters) > len(own)


#: a value for each engine option that takes one (flags take none)
VALUES = {
    "block_size": "32",
    "max_num_batched_tokens": "2048",
    "swap_space": "1GiB",
    "page_size": "16",
    "ctx_size": "4096",
    "parallel": "2",
    "llamacpp_version": "legacy",
    "n_gpu_layers": "10",
    "gpus": "2",
    "tensor_split": "1,1",
    "ubatch_size": "256",
    "fa": "on",
    "vllm_version": "0.11",
    "attention_backend": "FLASHMLA",
    "llamacpp_tool": "llama-cli",
    "batch_size": "256",
    "sglang_version": "legacy",
    "swa_full_tokens_ratio": "0.5",
    "dsa_prefill_backend": "trtllm",
    "dsa_decode_backend": "trtllm",
    "mamba_full_memory_ratio": "0.5",
    "max_mamba_cache_size": "100",
    "mamba_ssm_dtype": "bfloat16",
}


def _typed(group: type, name: str) -> list[str]:
    param = next(p for p in group.parameters() if p.name == name)
    info = param.annotation.__metadata__[0]
    # typer keeps the first declaration of an Annotated option in `default`
    flag = max([info.default.split("/")[0], *info.param_decls], key=len)  # the long name
    return [flag] + ([VALUES[name]] if name in VALUES else [])


@pytest.mark.parametrize("group,name", [(g, n) for g in ENGINE_FLAGS for n in g.option_names()])
def test_each_engine_option_is_refused_with_another_engine(group, name):
    # the refusal is read from the engine groups' fields: every option of every group
    other = "sglang" if group.engine != "sglang" else "vllm"
    args = _typed(group, name)
    r = runner.invoke(app, ["capacity", "llama-3.1-70b", "-m", "6.51GiB", "-e", other, *args])
    assert r.exit_code == 2
    assert f"applies to --engine {group.engine} only" in r.output
    assert args[0].removeprefix("--") in r.output


def test_engine_groups_build_the_engines_options():
    # untyped, each group gives its engine's own defaults
    assert (VllmFlags().to_options(), SglangFlags().to_options(), LlamacppFlags().to_options()) == (
        VllmOptions(),
        SglangOptions(),
        LlamacppOptions(),
    )
    o = VllmFlags(block_size=32, disable_hybrid=True, v0=True, swap_space="4GiB").to_options()
    assert (o.block_size, o.hybrid_allocator, o.version, o.swap_space_bytes) == (32, False, "0.6", 4 * 2**30)
    assert SglangFlags(page_size=16).to_options().page_size == 16
    # --tensor-split 63,37 -> 2 devices unless --gpus says otherwise; --ollama means legacy lines
    o = LlamacppFlags(ctx_size="32k", tensor_split="63,37", ollama=True).to_options()
    assert (o.n_ctx, o.n_devices, o.tensor_split, o.version) == (32_768, 2, (63.0, 37.0), "legacy")


def test_option_groups_hand_one_object_per_group():
    seen = {}
    toy = typer.Typer(rich_markup_mode=None, add_completion=False)

    @toy.command()
    @flag_sets(order=("gpu", "count"))
    def cmd(
        layout: LayoutFlags = LayoutFlags(),
        kv: Annotated[KvFormatFlags, only("kv_dtype", kv_dtype="K and V.")] = KvFormatFlags(),
        gpu: Annotated[GpuPlanFlags, only("gpu")] = GpuPlanFlags(),
        n: int = 1,
    ) -> None:
        seen.update(layout=layout, kv=kv, gpu=gpu, n=n)

    r = runner.invoke(toy, ["--tp", "2", "--count", "8", "--kv-dtype", "fp8", "--gpu", "h100-sxm", "--n", "3"])
    assert r.exit_code == 0, r.output
    assert seen["layout"] == LayoutFlags(tp=2, count=8) and seen["layout"].resolve() == (2, 1, 4)
    assert seen["kv"] == KvFormatFlags(kv_dtype="fp8") and seen["gpu"].gpu == "h100-sxm" and seen["n"] == 3
    help_text = runner.invoke(toy, ["--help"]).stdout
    assert "K and V." in help_text
    flags = re.findall(r"^  (?:-\w+, )*(--[\w-]+)", help_text, re.M)
    assert flags == ["--tp", "--pp", "--dp", "--kv-dtype", "--gpu", "--count", "--n", "--help"]


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names += [a.name for a in node.names]
    return names


@pytest.mark.parametrize(
    "path", sorted(p for p in CLI.glob("*.py") if p.name not in ("__init__.py", "app.py")), ids=lambda p: p.name
)
def test_command_modules_never_import_the_app(path):
    # app.py imports the command modules; they import options / output / kvcalc.*, never the app
    # nor the package (`from kvcalc.cli import ...` would run app.py mid-import: a cycle)
    cli = [n for n in _imports(path) if n == "kvcalc.cli" or n.startswith("kvcalc.cli.")]
    assert [n for n in cli if n.split(".")[:3] not in (["kvcalc", "cli", "options"], ["kvcalc", "cli", "output"])] == []


def _statements(fn: ast.FunctionDef) -> int:
    """Statements in `fn`'s body, nested ones included (the def itself not counted)."""
    return sum(isinstance(x, ast.stmt) for x in ast.walk(fn)) - 1


def test_no_function_in_the_cli_is_over_40_statements():
    # counted in statements, not lines: the formatter (tools/lint.sh --fix) spreads a call or a
    # signature over one line per argument, which says nothing of a function's size (the longest,
    # `sweep`, has 37; 40 statements is about the 60 lines this rule allowed before the formatter)
    long = [
        (p.name, n.name, _statements(n))
        for p in CLI.glob("*.py")
        for n in ast.walk(ast.parse(p.read_text()))
        if isinstance(n, ast.FunctionDef) and _statements(n) > 40
    ]
    assert long == []
