"""vLLM 0.6.x, the V0 engine: its own block arithmetic and refusals.

Delete this module and its line in `kvcalc.engines.vllm.versions.VERSION_MODULES` to drop V0. Sources
are vLLM 0.6.6's files (`vllm/worker/cache_engine.py`, `vllm/executor/gpu_executor.py`):

- `CacheEngine.get_cache_block_size` = block_size x sum over layers of (K + V) bytes per token
  (sliding layers full); GPU blocks = available // that, CPU blocks = swap_space // that;
  logs "# GPU blocks: N, # CPU blocks: M" (0.6.4+ prints "# CUDA blocks") and
  "Maximum concurrency for L tokens per request: X.XXx" = blocks x block_size / L. swap_space
  defaults to 4 GiB (`vllm/engine/arg_utils.py` `EngineArgs.swap_space`).
- Refusals, with vLLM's own text: block sizes other than 8 / 16 / 32 on CUDA (argparse choices
  8-128, `CacheConfig._verify_args` "up to 32"), models whose architecture its registry lacks
  (`UNSUPPORTED_ARCHITECTURES`: Qwen3, Gemma-3, gpt-oss, Llama-4, Falcon-H1 ...), hybrid Mamba
  models (the state is kept outside the blocks); 0 GPU blocks raise "No available memory"
  (`vllm/worker/worker.py` `raise_if_cache_size_invalid`); L > blocks x block_size warns.
- KV dtype `auto` (`_get_and_verify_dtype`): fp32 checkpoints are served in fp16.
- DeepSeek-V2/V3 (MLA came in 0.7): K and V per head, the head padded to 256 (`v0_mla_page_bytes`).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from kvcalc.engines.vllm.base import VllmRules, check_positive_block_size
from kvcalc.engines.vllm.common import (
    ALLOW_LONG_ENV,
    DEFAULT_BLOCK_SIZE,
    NO_MEMORY,
    Group,
    Resolved,
    longest_context,
    no_memory_error,
    uniform_page,
)
from kvcalc.errors import MESSAGE, KvcalcError, KvcalcWarning
from kvcalc.formats import StorageFormat
from kvcalc.results import EngineResult
from kvcalc.schema import ModelSpec

if TYPE_CHECKING:
    from kvcalc.engines.vllm.options import VllmOptions

#: vLLM 0.6.6's `--block-size` choices (`vllm/engine/arg_utils.py` `EngineArgs.add_cli_args`:
#: `choices=[8, 16, 32, 64, 128]`); argparse refuses any other before the engine starts.
BLOCK_SIZE_CHOICES = (8, 16, 32, 64, 128)
#: vLLM 0.6.6 on CUDA: "CUDA Paged Attention kernel only supports block sizes up to 32"
#: (`vllm/config.py` `CacheConfig._verify_args`), so 64 and 128 are refused on NVIDIA GPUs.
CUDA_MAX_BLOCK_SIZE = 32
#: vLLM 0.6.6's default `--swap-space` (`vllm/engine/arg_utils.py` `EngineArgs.swap_space: float =
#: 4  # GiB`; `CacheConfig.swap_space_bytes = swap_space * GiB_bytes`): CPU swap per GPU, bytes.
SWAP_SPACE_BYTES = 4 * 2**30
#: vLLM 0.6's head size for DeepSeek-V2/V3 (`vllm/config.py` `ModelConfig.get_head_size`)
MLA_HEAD_SIZE = 256
#: the model types `ModelConfig.get_head_size` (0.6.6) pads to `MLA_HEAD_SIZE`
MLA_MODEL_TYPES = ("deepseek_v2", "deepseek_v3")

#: model types (a Hugging Face config's `model_type`, the text model's for a multimodal one, or a
#: GGUF file's `general.architecture`: what `ModelSpec.model_type` keeps) whose architecture vLLM
#: 0.6.6's model registry lacks (`vllm/model_executor/models/registry.py` `_VLLM_MODELS`), with the
#: architecture name a checkpoint of that type lists (`architectures[0]`; kvcalc keeps the type,
#: not the name, so a multimodal checkpoint's outer name, e.g. Gemma3ForConditionalGeneration, is
#: shown as its text model's). Types absent here are taken as served: the ones kvcalc bundles are
#: in the registry (LlamaForCausalLM, MistralForCausalLM, MixtralForCausalLM, Qwen2ForCausalLM,
#: Gemma2ForCausalLM, Phi3ForCausalLM, FalconForCausalLM, GPT2LMHeadModel, DeepseekV2ForCausalLM,
#: DeepseekV3ForCausalLM (Kimi-K2's too), JambaForCausalLM).
UNSUPPORTED_ARCHITECTURES: dict[str, str] = {
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "qwen3moe": "Qwen3MoeForCausalLM",
    "qwen3_next": "Qwen3NextForCausalLM",
    "qwen3_5": "Qwen3_5ForCausalLM",
    "qwen3_5_text": "Qwen3_5ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "gpt-oss": "GptOssForCausalLM",
    "llama4": "Llama4ForCausalLM",
    "llama4_text": "Llama4ForCausalLM",
    "falcon_h1": "FalconH1ForCausalLM",
    "falcon-h1": "FalconH1ForCausalLM",
    "granitemoehybrid": "GraniteMoeHybridForCausalLM",
    "granitehybrid": "GraniteMoeHybridForCausalLM",
    "nemotron_h": "NemotronHForCausalLM",
    "mistral3": "Mistral3ForConditionalGeneration",
    "deepseek_v32": "DeepseekV32ForCausalLM",
    "glm4_moe": "Glm4MoeForCausalLM",
    # the 2026 families (issue 19): none is in 0.6.6's registry
    "deepseek_v4": "DeepseekV4ForCausalLM",
    "glm_moe_dsa": "GlmMoeDsaForCausalLM",
    "gemma4": "Gemma4ForConditionalGeneration",
    "gemma4_text": "Gemma4ForConditionalGeneration",
    "mimo_v2_flash": "MiMoV2FlashForCausalLM",
    "minimax_m2": "MiniMaxM2ForCausalLM",
    "minimax_m3": "MiniMaxM3ForCausalLM",
    "qwen3_vl": "Qwen3VLForConditionalGeneration",
    "qwen3_vl_text": "Qwen3VLForConditionalGeneration",
    "step3p7": "Step3p7FlashForCausalLM",
}


def check_loadable(model: ModelSpec) -> None:
    """Raise `KvcalcError` (field `model`) for a model vLLM 0.6.6 cannot load: its `model_type` is
    in `UNSUPPORTED_ARCHITECTURES`. The text is vLLM's own, `ModelRegistry._raise_for_unsupported`
    ("Model architectures [...] are not supported for now. Supported architectures: [...]", the
    list of ~150 names left out). A model without a model_type passes (nothing to key on)."""
    arch = UNSUPPORTED_ARCHITECTURES.get((model.model_type or "").lower())
    if arch is not None:
        raise KvcalcError(
            f"{model.name}: vLLM 0.6 cannot load it: Model architectures ['{arch}'] are not supported "
            "for now. (vllm/model_executor/models/registry.py; model_type "
            f"{model.model_type}): use --vllm-version 0.11 or 0.33",
            field="model",
            value=model.name,
            form=MESSAGE,
        )
    if model.attention == "mla" and (model.model_type or "").lower() not in MLA_MODEL_TYPES:
        raise KvcalcError(
            f"{model.name}: vLLM 0.6 has no MLA; it pads the head of model_type deepseek_v2 / "
            f"deepseek_v3 only (ModelConfig.get_head_size), and model_type {model.model_type} would "
            "get hidden_size // heads: not modelled for --vllm-version 0.6",
            field="model",
            value=model.name,
            form=MESSAGE,
        )


def mla_page_bytes(model: ModelSpec, k: StorageFormat, v: StorageFormat, block_size: int, tp: int) -> int:
    """One block of one layer of a DeepSeek-V2/V3 (MLA) model in vLLM 0.6's V0 engine, bytes: MLA
    came to vLLM in 0.7, so 0.6 caches K and V per head like any model. `CacheEngine.
    get_cache_block_size`: block_size x num_kv_heads x head_size for K and again for V, where
    `ModelConfig.get_head_size` returns 256 for deepseek_v2 / deepseek_v3 ("FlashAttention
    supports only head_size 32, 64, 128, 256, we need to pad head_size 192 to 256") and
    `get_num_kv_heads` max(1, num_key_value_heads // tp), num_key_value_heads being the number of
    attention heads in DeepSeek's configs. DeepSeek-V3, bf16, tp 1: 16 x 128 x 256 x 2 x 2 B =
    2,097,152 B per layer, x 61 layers = 127,926,272 B per block (the latent: 16 x 576 x 2 x 61 =
    1,124,352 B)."""
    heads = max(1, model.n_heads // tp)
    values = block_size * heads * MLA_HEAD_SIZE
    return k.bytes_for(values, what="K block", field="k_dtype") + v.bytes_for(values, what="V block", field="v_dtype")


class VllmV0(VllmRules):
    """vLLM 0.6.x, the V0 engine: one block holds every layer."""

    version = "0.6"
    label = "vLLM 0.6.x (V0 engine)"
    fp32_served_as = "fp16"  # 0.6.x `vllm/config.py` `_get_and_verify_dtype`: "we use float16 for float32 models"
    default_swap_space_bytes = SWAP_SPACE_BYTES
    max_model_len_tail = (
        " This may lead to incorrect model outputs or CUDA errors. To allow overriding this "
        f"maximum, set the env var {ALLOW_LONG_ENV}=1"
    )

    def check_block_size(self, block_size: int) -> None:
        """vLLM 0.6.6 on CUDA takes 8, 16 or 32, refused with vLLM's own text: argparse's
        "invalid choice" outside `BLOCK_SIZE_CHOICES`, `CacheConfig._verify_args`'s "CUDA Paged
        Attention kernel only supports block sizes up to 32" for 64 and 128."""
        check_positive_block_size(block_size)
        if block_size not in BLOCK_SIZE_CHOICES:  # Python 3.11 argparse `_check_value`
            raise KvcalcError(
                f"vLLM 0.6 refuses it: argument --block-size: invalid choice: {block_size} (choose from "
                f"{', '.join(map(str, BLOCK_SIZE_CHOICES))}) (vllm/engine/arg_utils.py)",
                field="block_size",
                value=block_size,
            )
        if block_size > CUDA_MAX_BLOCK_SIZE:
            raise KvcalcError(
                f"vLLM 0.6 refuses it: CUDA Paged Attention kernel only supports block sizes up to "
                f"{CUDA_MAX_BLOCK_SIZE}. Got {block_size}. (vllm/config.py CacheConfig._verify_args)",
                field="block_size",
                value=block_size,
            )

    def check_loadable(self, model: ModelSpec) -> None:
        check_loadable(model)

    def kv_cache_groups(
        self, model: ModelSpec, hybrid_allocator: bool = True, mamba_pages: int = 1
    ) -> tuple[list[Group], int]:
        """One block of every layer, sliding ones full (`CacheEngine`): one full group of n_layers."""
        return [Group("full", None, model.n_layers)], model.n_layers

    def stage_layers(self, model: ModelSpec, stage: range) -> int:
        """Every layer of the stage holds a page (`CacheEngine` counts them all)."""
        return len(stage)

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
        """The checks, then the block size given (else 16) and the page: per head for DeepSeek
        (`mla_page_bytes`), else the layers' one page. Hybrid Mamba models are refused."""
        self.check(model, k, v, tp, options.block_size)
        notes: list[str] = []
        block_size = options.block_size or DEFAULT_BLOCK_SIZE
        if any(layer.kind in ("mamba", "linear") for layer in model.layers):
            raise KvcalcError(
                f"{model.name}: vLLM 0.6 (V0) keeps Mamba state outside the KV blocks "
                "(MambaCacheManager, sized by max_num_seqs); kvcalc models hybrid models for vLLM 0.11 "
                "and 0.33",
                field="model",
                value=model.name,
                form=MESSAGE,
            )
        if model.attention == "mla":
            page = mla_page_bytes(model, k, v, block_size, tp)
            notes.append(
                f"vLLM 0.6 (V0, before MLA support in 0.7) caches K and V per head, {model.n_heads} heads "
                f"({max(1, model.n_heads // tp)} per rank) padded to a head size of {MLA_HEAD_SIZE}"
            )
        else:
            page = uniform_page(model, k, v, block_size, tp, options.per_token_head_scales)
        return Resolved(k, v, block_size, page, options.hybrid_allocator, notes=notes)

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
        """Block bytes = page x n_layers (`CacheEngine.get_cache_block_size`, sliding layers
        full); GPU blocks = available // block bytes, CPU blocks = swap // block bytes;
        concurrency = blocks x block_size / L. Raises when not one block fits
        (`raise_if_cache_size_invalid`); warns when L > blocks x block_size."""
        L, block_size, notes = max_model_len, r.block_size, r.notes
        swap_space_bytes = options.swap_space_bytes or 0
        # vllm/worker/worker.py determine_num_available_blocks (0.6.x) memory report, last clause
        lines = [f"the rest of the memory reserved for KV Cache is {kv_memory_bytes / 2**30:.2f}GiB."]
        if any(layer.kind == "sliding" for layer in model.layers):
            notes.append("V0 allocates sliding-window layers for the full length")
        block_bytes = r.page * model.n_layers  # CacheEngine.get_cache_block_size
        gpu_blocks = kv_memory_bytes // block_bytes
        cpu_blocks = swap_space_bytes // block_bytes
        if gpu_blocks <= 0:  # vllm/worker/worker.py raise_if_cache_size_invalid
            raise no_memory_error(
                kv_memory_bytes, f"{kv_memory_bytes:,} B holds no block of {block_bytes:,} B: {NO_MEMORY}"
            )
        if gpu_blocks * block_size < L:
            msg = (
                f"vLLM V0 would refuse to start: The model's max seq len ({L}) is larger than the maximum "
                f"number of tokens that can be stored in KV cache ({gpu_blocks * block_size}). Try increasing "
                "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
            )
            notes.append(msg)
            warnings.warn(msg, KvcalcWarning, stacklevel=4)  # at capacity's caller
        conc = gpu_blocks * block_size / L
        lines += [
            f"# GPU blocks: {gpu_blocks}, # CPU blocks: {cpu_blocks}",
            f"Maximum concurrency for {L} tokens per request: {conc:.2f}x",
        ]
        longest = None
        if concurrency:
            longest = longest_context(lambda n: gpu_blocks * block_size / n >= concurrency, model, L)
        return EngineResult(
            engine="vllm",
            engine_version=self.label,
            kv_memory_bytes=kv_memory_bytes,
            kv_cache_dtype=dtype_name,
            block_size=block_size,
            page_size_bytes=block_bytes,
            num_gpu_blocks=gpu_blocks,
            num_cpu_blocks=cpu_blocks,
            kv_cache_tokens=gpu_blocks * block_size,
            engine_kv_bytes=gpu_blocks * block_bytes,
            max_model_len=L,
            max_concurrency=conc,
            concurrency=concurrency,
            longest_context=longest,
            log_lines=lines,
            notes=notes,
        )


RULES = VllmV0()
