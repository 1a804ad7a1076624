"""SGLang's token pool: `max_total_num_tokens` from a memory budget, and the pool it logs.

Models SGLang 0.4.x-0.5.23 (`python/sglang/srt/`), one rule table row per release line
(`RULES`, `--sglang-version`): `current` is SGLang 0.5.23 (its sparse-MLA cell rule since 0.5.17,
sgl-project/sglang#31992: the budget is divided by the row the pool allocates; its fp4 KV
types); `0.5.16` is SGLang from PR #11309 through 0.5.16 (the cell counts the latent as
kv_lora_rank + qk_rope_head_dim values, whatever row the pool allocates); `legacy` is SGLang
before PR #11309 (merged 2025-10-08), which sized DeepSeek-V3.2's pool without the indexer.
Rules, each from its source:

- Cell size, `model_executor/model_runner.py` `profile_max_num_token` (since 0.5.x
  `model_runner_kv_cache_mixin.py` `get_cell_size_per_token`): bytes one token takes over all
  layers on one TP rank: get_num_kv_heads(tp) x (head_dim + v_head_dim) x layers x element bytes
  (= sum of `layer_kv_bytes_per_token`); MLA (`use_mla_backend`): (kv_lora_rank +
  qk_rope_head_dim) x layers x element bytes, one buffer.
- Tokens: max_num_token = int(rest_memory x 2^30) // cell_size where rest_memory is the static
  budget in GiB (`available - total x (1 - mem_fraction_static)`); here the budget is given in
  bytes, so tokens = budget // cell_size; then rounded down to the page size:
  max_total_num_tokens // page_size x page_size (`--page-size`, default 1; `_resolve_token_capacity`).
- The pool, `mem_cache/memory_pool.py` `MHATokenToKVPool._create_buffers`: one K and one V buffer
  per layer of shape (size + page_size, head_num, head_dim) (slot 0 is a padded dummy), so
  K bytes = layers x (size + page_size) x heads x head_dim x element bytes; `MLATokenToKVPool`:
  one buffer per layer of (size + page_size, 1, kv_cache_dim), kv_cache_dim = kv_lora_rank +
  qk_rope_head_dim.
- Its log line: "KV Cache is allocated. #tokens: N, K size: X GB, V size: Y GB" (MLA:
  "KV size: X GB") with `GB = 1024 * 1024 * 1024` in `memory_pool.py`: SGLang labels GiB
  values "GB". kvcalc prints the line exactly as SGLang does; the value is bytes / 2^30.

DeepSeek-V3.2 (NSA, `is_deepseek_nsa`: the model has an `index_head_dim`):

- `server_args.py`: "Setting page size to 64 for DeepSeek NSA." (CUDA): the page is 64 tokens
  whatever `--page-size` says; the KV dtype is bf16 or fp8_e4m3 only ("DeepSeek NSA only supports
  bf16/bfloat16 or fp8_e4m3 kv_cache_dtype"); `auto` is fp8_e4m3 on Blackwell, bf16 on Hopper
  (kvcalc's `auto` is the model's dtype: pass --kv-dtype fp8 for Blackwell).
- `memory_pool.py` `NSATokenToKVPool` (0.5.23: `DSATokenToKVPool`): the latent row is
  `calculate_mla_kv_cache_dim()` (0.5.23 `mem_cache/kv_cache_configurator.py`): with an
  fp8_e4m3 cache and a scaled-layout DSA backend (Hopper's default `flashmla_kv`) 656 B
  (kv_lora_rank 512 fp8 + 512 / 128 x 4 B fp32 scales + qk_rope_head_dim 64 x 2 B bf16 rope);
  with `trtllm` as either DSA backend (Blackwell's default), on AMD (triton / tilelang / aiter)
  or tilelang for both, the raw row (kv_lora_rank + qk_rope_head_dim) x element bytes (576 B
  fp8, 1,152 B bf16); plus per layer an indexer buffer `index_k_with_scale_buffer` of
  ((size + page_size + 1) // page_size) pages x page_size x (index_head_dim + index_head_dim /
  128 x 4) B (128 + 4 = 132 B a token). The DSA backends (`--dsa-prefill-backend`,
  `--dsa-decode-backend`; `arg_groups/overrides.py` `_dsa_split_backend_resolution`) default
  by the GPU: fp8 `trtllm` on compute capability >= 10, else `flashmla_kv`; bf16 prefill
  `flashmla_sparse`, decode `trtllm` (>= 10) or `fa3`; AMD `triton`. Without `--gpu` kvcalc
  assumes Hopper and says so (`dsa_backends`).
- Current rule (0.5.17+, PR #31992; 0.5.23 `model_executor/pool_configurator.py`
  `_compute_cell_size`): cell = layers x (row + 132): Hopper fp8 61 x (656 + 132) = 61 x 788 =
  48,068 B, Blackwell fp8 (trtllm) 61 x (576 + 132) = 61 x 708 = 43,188 B; the pool fits the
  budget. 0.5.16 rule (PR #11309, `get_cell_size_per_token`): cell = layers x ((kv_lora_rank +
  qk_rope_head_dim) x element bytes + 132) = 43,188 B with fp8 on any GPU, so with the 656 B row
  the pool exceeds the budget by layers x 80 B a token (a note says by how much). The log's "KV
  size" includes the indexer buffers (`NSATokenToKVPool.get_kv_size_bytes`).
- Legacy rule (before PR #11309): cell = layers x 576 B (no indexer) and the logged "KV size" is
  the latent buffers only, while the indexer buffers are allocated all the same. PR #11309's own
  logs (8 x B200, DeepSeek-V3.2-Exp): before, "#tokens: 1462784, KV size: 54.52 GB" (really
  65.49 GiB with the indexer); after, "#tokens: 975424, KV size: 43.67 GB".

Sliding-window models (`SWAKVPool`, `mem_cache/swa_memory_pool.py`): SGLang keeps separate
pools only for the architectures `configs/model_config.py` `is_hybrid_swa_model` lists (of the
models kvcalc knows: gpt-oss, Llama-4; 0.5.23 also Gemma-4 and MiMo-V2-Flash, below) unless
`--disable-hybrid-swa-memory`; every other model
(Gemma 2/3, Mistral; `server_args.py` also logs "Disable hybrid SWA memory for Gemma3... as it
is not yet supported.") sizes sliding layers like full ones. 0.5.16 and 0.5.23 split the
budget by `HybridSWAPoolConfigurator` (below, the 2026 families); the `legacy` row by the older
`model_runner_kv_cache_mixin.py` `_resolve_hybrid_swa_tokens`: with F and S the bytes of one
token in one full / sliding layer, r = `--swa-full-tokens-ratio` (default 0.8) and C the
page-aligned capacity (budget // (F x n_full + S x n_swa)):
full_max_total_num_tokens = align(int(C x (F x n_full + S x n_swa) / (F x n_full + r x S x n_swa))),
swa_max_total_num_tokens = align(int(full x r)), logged as "Use sliding window memory pool.
full_layer_tokens=..., swa_layer_tokens=..."; each sub-pool is an `MHATokenToKVPool` (its own
"KV Cache is allocated" line, the SWA pool first, under the `legacy` row; 0.5.23 logs the "Full"
pool first, then the "SWA" one, below) and `SWAKVPool` logs "SWAKVPool mem usage:
X GB, swa size: S, full size: F". (Older 0.4.10-0.5.x `set_num_token_hybrid` split
max_total_num_tokens x num_hidden_layers by layer counts, the same when F = S, without the
page alignment after the split.) A request of L tokens holds L full-pool tokens and, once SGLang
evicts the tokens that left the window, min(L, sliding_window) SWA-pool tokens; kvcalc's
concurrency takes the smaller of the two pools' counts. On Blackwell SGLang serves gpt-oss
with trtllm_mha and turns the SWA pool off (`server_args.py`): use --disable-hybrid-swa-memory.

- Start-up check, `model_executor/model_runner.py` `init_memory_pool`: max_total_num_tokens <= 0
  raises "Not enough memory. Please try to increase --mem-fraction-static."
- KV dtype `auto` (`init_memory_pool`: kv_cache_dtype = self.dtype): the model's dtype as
  `configs/model_config.py` `_get_and_verify_dtype` resolves `--dtype auto` (adapted from vLLM
  0.6.4): an fp32 checkpoint is served in fp16 ("Following the common practice, we use float16
  for float32 models"), gemma-family fp32 checkpoints in bf16.

- FP4 and MXFP8 KV (0.5.23 only: `--kv-cache-dtype nvfp4 | fp4_mx_block16 | mxfp8`;
  `pool_configurator.py` `_compute_cell_size`, `layers/quantization/fp4_kv_cache_quant_method.py`
  `compute_cell_size`): a layer's token holds H_kv x (head_dim / 2) B of e2m1 values per side and
  H_kv x head_dim / 16 B of scales per side per scale layout (= the nvfp4 / fp4_mx_block16 format,
  9 B per 16 values, for one layout); MLA: 576 / 2 + 576 / 16 = 324 B. nvfp4 (MHA) needs compute
  capability 10.x (native prefill and decode on trtllm_mha: one scale layout) or 12.x (FP8 prefill
  on flashinfer: a linear scale layout plus a dequant workspace of H_kv x head_dim x 2 B fp8 per
  token, once for all layers); `kv_cache_hook.py` `handle_kv4_compatibility` refuses other GPUs.
  mxfp8: one scale byte per 32 values (= the mxfp8 format), compute capability >= 10. In the SWA
  pool (`HybridSWAPoolConfigurator`, no fp4 quant method) the fp4 types cost 1 B a value with no
  scales and no workspace, on SM100 and SM120 alike (`swa_priced_format`, `swa_fp4_note`).

The 2026 families, SGLang 0.5.23 (issue 19; docs/engine-rules-2026.md):

- SWAKVPool for Gemma-4 and MiMo-V2-Flash (`is_hybrid_swa_model` lists
  Gemma4ForConditionalGeneration and MiMoV2FlashForCausalLM: `configs/model_config.py`
  2651-2679), split by `HybridSWAPoolConfigurator`
  (`model_executor/pool_configurator.py` 656-921): F = get_num_kv_heads(tp) x (head_dim +
  v_head_dim) x element bytes of a full layer, S = get_swa_num_kv_heads(tp) x (swa_head_dim +
  swa_v_head_dim) x element bytes of a sliding one (700-714; Gemma-4's full layers 2 x 512, sliding
  8 x 256, `utils/hf_transformers/config.py` 115-148; MiMo K 192 / V 128 with 4 full, 8 sliding
  heads); cell = F x n_full + r x S x n_swa (a float, 786-803); full = int(budget // cell) // page
  x page, swa = int(full x r) // page x page (859-916); refused when sliding_window_size + page
  >= swa (`validate_swa_pool_size`, 198-216), with SGLang's exclusive window (`sglang_window`:
  Gemma-4 1,023, gpt-oss 127, MiMo-V2-Flash 128). mxfp8 adds one scale byte per 32 values of
  each layer kind (716-725). An MLA model's mxfp8 is a plain fp8 latent (`pool_formats`).
  SGLang 0.5.23's own code on a CPU gives the same figures for the MHA, MLA, DSA and SWA pools
  (tests/oracle/fixtures/sglang_0523_pools.json, 1,334 cases). The pools log in 0.5.23's format (`memory_pool.py`
  `_finalize_allocation_log`, 2073-2099): "Full KV Cache is allocated. dtype: torch.bfloat16,
  #tokens: N, K size: X GB, V size: Y GB", then the "SWA" pool, then "SWAKVPool mem usage".
  `SWARequestCapPoolConfigurator` (971-1046: --max-running-requests with the radix cache off)
  is not modelled. gpt-oss and Llama-4 (GptOssForCausalLM, in `SWA_SINK_ARCHS`;
  Llama4ForConditionalGeneration) take the same rule; 0.5.16 had it too (its
  `pool_configurator.py` 301-420), with unlabelled pool lines, the SWA pool first.
- Log lines, 0.5.23 (`memory_pool.py` `_finalize_allocation_log`, 2073-2099; `kv_cache_dtype.py`
  for the dtype): every pool kvcalc prints logs "KV Cache is allocated. dtype: torch.bfloat16,
  #tokens: N, K size: X GB, V size: Y GB" (MLA and DSA: "KV size: X GB", the DSA one with its
  index-K buffers; "Full" / "SWA" labels on the SWAKVPool's two); the `0.5.16` and `legacy` rows
  keep the older "KV Cache is allocated. #tokens: ..." form of PR #11309's logs.
- Plain pools, sized as before: Kimi-K2.5 (MLA), MiniMax-M2.7, Qwen3-VL (MHA), DeepSeek-V3.2 (DSA);
  GLM-5 (GlmMoeDsaForCausalLM) in the DSA pool with its index key only on the layers that do not
  skip top-k (`indexer_types` "full": `dsa_layer_skips_topk`, `configs/model_config.py` 488-520;
  `_compute_dsa_indexer_cell_size`, pool_configurator.py 560-634; the others get 0-page index
  buffers, `mem_cache/index_key_cache.py` `_layer_num_pages`): Hopper fp8 78 x 656 + 21 x 132 =
  53,940 B a token.
- Refused with SGLang's reason, an architecture 0.5.23 registers no model class for
  (`UNREGISTERED`): Step-3.7-Flash (Step3p7FlashForCausalLM; `models/step3p7.py` is the VL
  Step3p7ForConditionalGeneration) and MiniMax-M3 (MiniMaxM3ForCausalLM; `models/minimax_m3.py`
  is MiniMaxM3SparseForCausalLM): SGLang would run its Transformers backend.
- The mamba / linear-attention hybrids (Qwen3.5 / Qwen3-Next Gated DeltaNet, Nemotron-H Mamba-2,
  Kimi-K3 / Kimi-Linear KDA beside MLA): the `MambaPool` of state slots takes its share of the
  budget first (`--mamba-full-memory-ratio` 0.9), the `HybridLinearKVPool` of the full-attention
  layers gets the rest; `sglang_mamba.py` has the rules and their sources; SGLang 0.5.23's own
  code, run on a CPU, gives the same figures (tests/oracle/fixtures/sglang_0523_mamba.json).
  Other hybrids (Jamba, Falcon-H1, Granite-4.0-H, LFM2) are refused (`MAMBA_POOL`).
- DeepSeek-V4 (`models/deepseek_v4.py`): `DSV4PoolConfigurator` (pool_configurator.py 1067-1713)
  sizes its SWA, c4 / c128 compressed and compressor-state pools; `sglang_dsv4.py` has the rules
  and their sources; SGLang 0.5.23's own configurator, run on a CPU, gives the same figures
  (tests/oracle/fixtures/sglang_0523_dsv4.json).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.calc.kv_cache import (
    ENGINES_MODEL_TODAY,
    check_tp,
    indexer_bytes_per_token,
    kv_heads_per_rank,
    layer_features,
    layer_kv_bytes_per_token,
    refuse_hybrid_layers,
    refuse_unmodelled_layers,
)
from kvcalc.engines import SEARCH_LIMIT_TOKENS, defaults, longest_fitting, sglang_dsv4, sglang_mamba
from kvcalc.errors import MESSAGE, OPTION_SAYS, KvcalcError
from kvcalc.formats import StorageFormat, kv_format
from kvcalc.results import EngineResult
from kvcalc.schema import LayerSpec, ModelSpec

VERSION = "SGLang 0.4.x-0.5.23 (pool_configurator._compute_cell_size, memory_pool.MHATokenToKVPool)"


@dataclass(frozen=True)
class SglangRules:
    """One SGLang release line's pool rules (a row of `RULES`):

    - `label`: what `engine_version` says;
    - `nsa_cell`: how the sparse-MLA (DSA / NSA) cell counts a layer: `row` the latent row the pool
      allocates + the indexer key (0.5.17+), `latent` (kv_lora_rank + qk_rope_head_dim) x element
      bytes + the indexer key (PR #11309 to 0.5.16), `latent_only` without the indexer (before);
    - `kv_dtypes`: the kvcalc formats its `--kv-cache-dtype` stores (`auto` is the model's dtype);
    - `swa_model_types`: the model types whose architectures `configs/model_config.py`
      `is_hybrid_swa_model` lists, so they get the `SWAKVPool`;
    - `swa_ratio_types`: the model types whose SWA pool kvcalc splits by the pool-configurator rule (0.5.23
      `model_executor/pool_configurator.py` `HybridSWAPoolConfigurator`, lines 786-803 and
      859-917: max_total = int(budget // (F x n_full + r x S x n_swa)), one "Full" and one "SWA"
      pool line in the 0.5.23 log format; 0.5.16 the same split); the others (legacy) by the older
      `_resolve_hybrid_swa_tokens` (C = budget // (F x n_full + S x n_swa), rescaled).
    """

    label: str
    nsa_cell: str
    kv_dtypes: tuple[str, ...]
    swa_model_types: frozenset[str] = frozenset({"gpt_oss", "llama4", "llama4_text"})
    swa_ratio_types: frozenset[str] = frozenset()


_PLAIN_KV = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2")
#: `--sglang-version` -> its rules; `current` reads alone, an old line is deleted with its row.
RULES: dict[str, SglangRules] = {
    "current": SglangRules(
        "SGLang 0.5.23",
        "row",
        _PLAIN_KV + ("mxfp8", "nvfp4", "fp4_mx_block16"),
        frozenset({"gpt_oss", "llama4", "llama4_text", "gemma4", "gemma4_text", "mimo_v2_flash"}),
        frozenset({"gpt_oss", "llama4", "llama4_text", "gemma4", "gemma4_text", "mimo_v2_flash"}),
    ),
    "0.5.16": SglangRules(
        "SGLang 0.5.16 (PR #11309 to 0.5.16)",
        "latent",
        _PLAIN_KV,
        swa_ratio_types=frozenset({"gpt_oss", "llama4", "llama4_text"}),
    ),
    "legacy": SglangRules("SGLang 0.5.x before PR #11309", "latent_only", _PLAIN_KV),
}
#: the label each version puts in `engine_version`.
VERSIONS = {name: rules.label for name, rules in RULES.items()}
#: the GPU assumed for the DSA backend and the fp4 layouts when `--gpu` is not given (as vLLM's profile)
ASSUMED_COMPUTE_CAPABILITY = "9.0"
#: DSA backends that read the raw latent row (no fp32 scales, fp8 rope): `calculate_mla_kv_cache_dim`
RAW_ROW_DSA_BACKENDS_AMD = ("tilelang", "triton", "aiter")
DEFAULT_PAGE_SIZE = defaults.SGLANG_PAGE_SIZE
SGLANG_GB = 1 << 30  # memory_pool.py: GB = 1024 * 1024 * 1024 (a GiB, labelled "GB")
#: server_args.py: "Setting page size to 64 for DeepSeek NSA." (NSATokenToKVPool asserts it on CUDA)
NSA_PAGE_SIZE = 64
#: NSATokenToKVPool.quant_block_size: one fp32 scale (4 B) per 128 fp8 latent values; the rope
#: part stays bf16 (rope_storage_dtype), 2 B a value
NSA_QUANT_BLOCK_VALUES = 128
NSA_SCALE_BYTES = 4
NSA_ROPE_BYTES = 2
NSA_KV_DTYPES = ("bf16", "fp8_e4m3")
#: server_args.py `--swa-full-tokens-ratio` default: SWA-pool tokens per full-pool token
DEFAULT_SWA_FULL_TOKENS_RATIO = defaults.SGLANG_SWA_FULL_TOKENS_RATIO
#: model types whose architectures `configs/model_config.py` `is_hybrid_swa_model` lists
#: (GptOssForCausalLM, Llama4ForConditionalGeneration): they get the SWAKVPool
SWA_POOL_MODEL_TYPES = frozenset({"gpt_oss", "llama4", "llama4_text"})


NO_MEMORY = "Not enough memory. Please try to increase --mem-fraction-static."


def default_kv_dtype(model: ModelSpec) -> tuple[str, str]:
    """(format name, label) of `--kv-cache-dtype auto`: the model's serving dtype; fp32
    checkpoints in fp16 (gemma*: bf16), `configs/model_config.py` `_get_and_verify_dtype`."""
    from kvcalc.formats import kv_format

    name = kv_format(model.dtype_format).name  # the model's format, looked up once per model
    if name == "fp32":
        name = "bf16" if (model.model_type or "").startswith("gemma") else "fp16"
        return name, f"auto ({name}: fp32 checkpoint served in {name})"
    return name, f"auto ({name})"


def check_dtypes(k: StorageFormat, v: StorageFormat, version: str = "current") -> None:
    """Raise `KvcalcError` (field `k_dtype` / `v_dtype`) for a format the SGLang `version` has no
    KV pool dtype for, naming the version and what its `--kv-cache-dtype` stores (`RULES`)."""
    rules = RULES.get(version, RULES["current"])
    for field, f in (("k_dtype", k), ("v_dtype", v)):
        if f.name not in rules.kv_dtypes:
            raise KvcalcError(
                f"{rules.label} has no '{f.name}' KV cache dtype; its pool stores "
                f"{', '.join(('auto',) + rules.kv_dtypes)}",
                field=field,
                value=f.name,
                form=MESSAGE,
            )


def _major(compute_capability: str | None) -> int:
    return int((compute_capability or ASSUMED_COMPUTE_CAPABILITY).split(".")[0])


def dsa_backends(
    model: ModelSpec,
    k: StorageFormat,
    compute_capability: str | None = None,
    vendor: str | None = None,
    prefill: str | None = None,
    decode: str | None = None,
) -> tuple[str, str]:
    """(prefill, decode) DSA backends SGLang 0.5.23 runs a sparse-MLA model with
    (`arg_groups/overrides.py` `_dsa_split_backend_resolution`; a given `--dsa-prefill-backend` /
    `--dsa-decode-backend` stands): AMD `triton`; GLM-5 (`glm_moe_dsa`) fp8 on compute capability
    12.x `flashinfer_sparse_mla`; fp8 `trtllm` on >= 10 (Blackwell), else `flashmla_kv` (Hopper);
    bf16 prefill `flashmla_sparse`, decode `trtllm` (>= 10) or `fa3`. No GPU: Hopper (9.0)."""
    major = _major(compute_capability)
    if vendor == "amd":
        default = ("triton", "triton")
    elif k.name == "fp8_e4m3":
        if (model.model_type or "").startswith("glm") and major == 12:
            default = ("flashinfer_sparse_mla", "flashinfer_sparse_mla")
        else:
            backend = "trtllm" if major >= 10 else "flashmla_kv"
            default = (backend, backend)
    else:
        default = ("flashmla_sparse", "trtllm" if major >= 10 else "fa3")
    return prefill or default[0], decode or default[1]


def is_nsa(model: ModelSpec) -> bool:
    """True for DeepSeek-V3.2's sparse attention (`configs/model_config.py` `is_deepseek_nsa`):
    the model has an indexer (`index_head_dim`), so SGLang builds an `NSATokenToKVPool`."""
    return model.index_head_dim is not None


def uses_swa_pool(model: ModelSpec, hybrid_swa_memory: bool = True, version: str = "current") -> bool:
    """True when SGLang gives the sliding layers their own pool (`SWAKVPool`): a model type of
    the version's `swa_model_types` (0.5.23 adds Gemma-4, MiMo-V2-Flash and Step-3.7:
    `configs/model_config.py` `is_hybrid_swa_model`, lines 2651-2679) with sliding layers, and
    no `--disable-hybrid-swa-memory`."""
    types = RULES.get(version, RULES["current"]).swa_model_types
    return (
        hybrid_swa_memory
        and (model.model_type or "") in types
        and any(layer.kind == "sliding" for layer in model.layers)
    )


#: model types whose SGLang 0.5.23 window is the config's inclusive one less one: the model class's
#: `get_attention_sliding_window_size` (`models/gemma4_mm.py` 314-315, `models/gpt_oss.py` 131-132,
#: 1374-1375: `sliding_window - 1`, "Inclusive (HF) -> exclusive (sglang)") or, for MiMo-V2-Flash
#: (no such method), `ModelConfig.sliding_window_size` (the config's sliding_window_size, 128, where
#: its layers attend 129 tokens); `load_model_utils.resolve_sliding_window_size` picks between them
EXCLUSIVE_WINDOW_TYPES = frozenset({"gemma4", "gemma4_text", "gpt_oss", "mimo_v2_flash"})


def sglang_window(model: ModelSpec) -> int | None:
    """The `sliding_window_size` SGLang 0.5.23 gives the pool configurator for `model` (its SWA
    admission floor, `validate_swa_pool_size`): the tokens a sliding layer attends less one for
    `EXCLUSIVE_WINDOW_TYPES` (Gemma-4 1,023, gpt-oss 127, MiMo-V2-Flash 128), else the window as
    kvcalc reads it; None without sliding layers."""
    window = next((layer.window for layer in model.layers if layer.kind == "sliding"), None)
    if window is None:
        return None
    return window - 1 if (model.model_type or "") in EXCLUSIVE_WINDOW_TYPES else window


def check_version(version: str) -> None:
    """Raise `KvcalcError` (field `sglang_version`) for a version kvcalc does not model."""
    if version not in RULES:
        raise KvcalcError(
            f"must be one of {', '.join(RULES)}, got '{version}'",
            field="sglang_version",
            option="--sglang-version",
            value=version,
            form=OPTION_SAYS,
        )


def check_swa_ratio(ratio: float) -> None:
    """Raise `KvcalcError` (field `swa_full_tokens_ratio`) unless 0 < ratio <= 1: SGLang asserts a
    positive denominator in `_resolve_hybrid_swa_tokens`, and `server_args.py` documents the
    range ("It should be between 0 and 1": the SWA pool is never larger than the full one)."""
    if not 0 < ratio <= 1:  # NaN too
        raise KvcalcError(
            f"must be in (0, 1]: above 0 and at most 1 (SWA-pool tokens per full-pool token, "
            f"SGLang's range), got {ratio:g}",
            field="swa_full_tokens_ratio",
            option="--swa-full-tokens-ratio",
            value=ratio,
            form=OPTION_SAYS,
        )


#: the 2026 layer features the 0.5.23 SWAKVPool sizes (`HybridSWAPoolConfigurator`: a full and a
#: sliding geometry, `get_num_kv_heads` / `get_swa_num_kv_heads` x (head_dim + v_head_dim); sinks
#: and Gemma-4's K = V weights change no buffer: both K and V rows are allocated)
SWA_POOL_FEATURES = frozenset({"kind_geometry", "sinks", "k_eq_v"})


#: why the other hybrids (Jamba, Falcon-H1, Granite-4.0-H, LFM2, ...; every hybrid under the older rows)
#: are refused: 0.5.23 keeps their state in a `MambaPool` (`mem_cache/memory_pool.py` 984-1010) beside
#: a `HybridLinearKVPool` of the full-attention layers (`DefaultPoolConfigurator.__init__`,
#: pool_configurator.py 228-236); kvcalc sizes it (`sglang_mamba.py`) only for the state shapes it
#: has checked against SGLang's config classes (`sglang_mamba.STATE_KINDS`)
MAMBA_POOL = (
    "kvcalc sizes SGLang 0.5.23's MambaPool (the state slots beside the HybridLinearKVPool of the "
    "full-attention layers) for Qwen3.5 / Qwen3-Next, Nemotron-H and Kimi-Linear / Kimi-K3 only"
)


#: model types whose published architecture SGLang 0.5.23 registers no model class for (no
#: `EntryClass` of `srt/models/` names it): `models/registry.py` `_normalize_archs` then falls back
#: to its Transformers backend (`models/transformers.py` `TransformersForCausalLM`), whose pool
#: kvcalc does not model. model type -> (architecture, what SGLang serves instead)
UNREGISTERED = {
    "jamba": ("JambaForCausalLM", "no model class of srt/models/ names it"),
    "step3p7": (
        "Step3p7FlashForCausalLM",
        "models/step3p7.py serves Step3p7ForConditionalGeneration, the one is_hybrid_swa_model lists",
    ),
    "minimax_m3": (
        "MiniMaxM3ForCausalLM",
        "models/minimax_m3.py serves MiniMaxM3SparseForCausalLM, whose "
        "MiniMaxSparseKVPool (pool_configurator.py 410-494) kvcalc does not model either",
    ),
}


def pool_refusal(model: ModelSpec, version: str = "current") -> str | None:
    """Why kvcalc does not size `model`'s SGLang 0.5.23 pool, naming the pool it does not model
    (None when it does, or for an older `version`). Sources, 0.5.23: `model_executor/pool_configurator.py`
    `create_memory_pool_configurator` (1715-1725) and `_compute_cell_size` (340-535)."""
    if version != "current":
        return None  # the older rows refuse by the layer features (`refuse_hybrid_layers`)
    label = RULES["current"].label
    if (model.model_type or "") in UNREGISTERED:
        arch, served = UNREGISTERED[model.model_type or ""]
        return (
            f"{label} registers no {arch} ({served}): it would fall back to its Transformers backend "
            "(models/registry.py _normalize_archs), whose pool kvcalc does not model"
        )
    features = layer_features(model)
    if "indexer_kv" in features:
        return (
            f"kvcalc does not model {label}'s MiniMax-M3 pool (MiniMaxSparseKVPool: dense and sparse layers "
            "plus a one-head indexer pool, pool_configurator.py 410-494)"
        )
    return None


def uses_state_pool(model: ModelSpec) -> bool:
    """True when SGLang 0.5.23 serves `model` with a `MambaPool` of state slots beside a
    `HybridLinearKVPool` that kvcalc sizes (`sglang_mamba.STATE_KINDS`: Qwen3-Next / Qwen3.5's
    Gated DeltaNet, Nemotron-H's Mamba-2, Kimi-Linear / Kimi-K3's KDA)."""
    return any(layer.keeps_state for layer in model.layers) and sglang_mamba.state_kind(model) is not None


def check_model(model: ModelSpec, version: str = "current", hybrid_swa_memory: bool = True) -> None:
    """Raise `KvcalcError` (field `model`) for a model whose SGLang pool kvcalc does not size
    (`pool_refusal`) or with mamba / linear-attention or hybrid layers: the profile sizes
    SGLang's token pool of attention layers and, for the SWA pool, two layer geometries."""
    why = pool_refusal(model, version)
    if why:
        raise KvcalcError(
            f"{model.name}: {why}", fix="use --engine ideal", field="model", value=model.name, form=MESSAGE
        )
    if version == "current" and sglang_dsv4.is_dsv4(model):
        sglang_dsv4.geometry(model)  # DSV4PoolConfigurator (sglang_dsv4.py): refuses what it cannot hold
        return
    if uses_swa_pool(model, hybrid_swa_memory, version) and (model.model_type or "") in RULES[version].swa_ratio_types:
        refuse_unmodelled_layers(model, "SGLang", ENGINES_MODEL_TODAY | {"indexer"} | SWA_POOL_FEATURES)
        return
    if version == "current" and uses_state_pool(model):
        # the MambaPool beside a HybridLinearKVPool (sglang_mamba.py); Kimi-K3: MLA layers beside KDA
        refuse_unmodelled_layers(model, "SGLang", ENGINES_MODEL_TODAY | {"linear_beside_mla"})
        return
    if any(not layer.caches_kv for layer in model.layers):
        raise KvcalcError(
            f"{model.name} has mamba / linear-attention layers: {MAMBA_POOL}; the SGLang profile "
            "models attention layers only",
            fix="use --engine ideal",
            field="model",
            value=model.name,
            form=MESSAGE,
        )
    if version == "current" and is_nsa(model):
        # GLM-5: the index-K only on the layers that do not skip top-k (`indexer_types` "full"):
        # 0.5.23 counts those in the cell (`_compute_dsa_indexer_cell_size`, pool_configurator.py
        # 560-634) and gives the others a 0-page buffer (`mem_cache/index_key_cache.py`
        # `_layer_num_pages`, `DSATokenToKVPool._should_allocate_index_layer`)
        refuse_unmodelled_layers(model, "SGLang", ENGINES_MODEL_TODAY | {"indexer", "partial_indexer"})
        return
    refuse_hybrid_layers(model, "SGLang")


def _check(
    model: ModelSpec,
    k: StorageFormat,
    v: StorageFormat,
    tp: int,
    page_size: int,
    version: str = "current",
    swa_full_tokens_ratio: float | None = None,
    hybrid_swa_memory: bool = True,
) -> None:
    """The checks `capacity` and `memory_for` share: the TP degree (field `tp`), no mamba layers
    (`model`), plain formats (`k_dtype` / `v_dtype`; NSA: bf16 or fp8_e4m3 only), a positive page
    size (`page_size`), the version (`sglang_version`) and the SWA ratio."""
    check_tp(model, tp)
    check_version(version)
    check_model(model, version, hybrid_swa_memory)
    if version == "current" and sglang_dsv4.is_dsv4(model):
        sglang_dsv4.check_dtype(k, v)  # before check_dtypes: SGLang's own refusal for V4
    check_dtypes(k, v, version)
    if is_nsa(model):
        for field, f in (("k_dtype", k), ("v_dtype", v)):
            if f.name not in NSA_KV_DTYPES:  # 0.5.23 arg_groups/overrides.py 541-544 (before: server_args.py)
                name = "DSA" if version == "current" else "NSA"
                raise KvcalcError(
                    f"SGLang: DeepSeek {name} only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype, not {f.name}",
                    field=field,
                    value=f.name,
                    form=MESSAGE,
                )
    if page_size <= 0:
        raise KvcalcError(
            f"must be a positive integer, got {page_size}", field="page_size", value=page_size, form=OPTION_SAYS
        )
    if swa_full_tokens_ratio is not None:  # None: not given (SGLang's fallback, or a model override)
        check_swa_ratio(swa_full_tokens_ratio)


def pool_formats(
    model: ModelSpec, k: StorageFormat, v: StorageFormat, version: str = "current"
) -> tuple[StorageFormat, StorageFormat]:
    """The formats SGLang's pool stores `k` / `v` in: an MLA model's `--kv-cache-dtype mxfp8` is a
    plain fp8_e4m3 latent, no scales (SGLang 0.5.23 `pool_configurator.py` `_compute_cell_size`:
    the MLA branch, 361-385, prices `calculate_mla_kv_cache_dim` x 1 B with no mxfp8 term, which
    only the MHA branch has, 525-529; `kv_cache_configurator.py` 2517-2525 builds
    `MLATokenToKVPool` for MLA and `MHATokenToKVPoolMXFP8`, the block-scaled pool, for MHA only;
    `kv_cache_dtype.py` 72-73: mxfp8 stores torch.float8_e4m3fn). Kimi-K2.5: 61 x 576 = 35,136 B
    a token, not 61 x 594. Every other case: (k, v) as given."""
    from kvcalc.formats import kv_format

    if version == "current" and model.attention == "mla" and not is_nsa(model):
        fp8 = kv_format("fp8_e4m3")
        return (fp8 if k.name == "mxfp8" else k), (fp8 if v.name == "mxfp8" else v)
    return k, v


def _indexer_bytes(layer: LayerSpec) -> int:
    return indexer_bytes_per_token(layer.index_dim) if layer.kind == "mla" else 0


def cell_size_bytes(
    model: ModelSpec,
    k: StorageFormat,
    v: StorageFormat,
    tp: int = 1,
    version: str = "current",
    *,
    row: int | None = None,
    extra_bytes: int = 0,
) -> int:
    """Bytes one token takes in the pool over all layers on one TP rank (0.5.23
    `pool_configurator._compute_cell_size`): sum of `layer_kv_bytes_per_token`, window ignored,
    plus `extra_bytes` (an fp4 pool's second scale layout and dequant workspace, `fp4_extras`).
    Sparse MLA (NSA / DSA), per `RULES[version].nsa_cell`: `row` (current, 0.5.17+): each layer
    the latent `row` the pool allocates (`nsa_row_bytes`; default: Hopper's flashmla_kv) + the
    132 B indexer key, e.g. 61 x (656 + 132) = 48,068 B fp8 on Hopper, 61 x (576 + 132) = 43,188 B
    on Blackwell's trtllm; `latent` (0.5.16): (kv_lora_rank + qk_rope_head_dim) x element bytes
    + 132 (43,188 B fp8 on any GPU); `latent_only` (legacy): the latent alone (35,136 B)."""
    total = sum(layer_kv_bytes_per_token(layer, k, v, tp) for layer in model.layers) + extra_bytes
    rule = RULES[version].nsa_cell
    if rule == "latent_only":
        total -= sum(_indexer_bytes(layer) for layer in model.layers)
    elif rule == "row" and is_nsa(model):
        latent = k.bytes_for((model.kv_lora_rank or 0) + (model.qk_rope_head_dim or 0), what="latent")
        row = nsa_row_bytes(model, k) if row is None else row
        total += sum(1 for layer in model.layers if layer.kind == "mla") * (row - latent)
    return total


def nsa_row_bytes(
    model: ModelSpec,
    k: StorageFormat,
    backends: tuple[str, str] = ("flashmla_kv", "flashmla_kv"),
    vendor: str | None = None,
) -> int:
    """Bytes of one token's latent row in one NSA layer (`calculate_mla_kv_cache_dim`, 0.5.23
    `mem_cache/kv_cache_configurator.py`) with the (prefill, decode) DSA `backends`: fp8_e4m3 with
    a scaled layout (flashmla_kv, flashmla_sparse, flashinfer_sparse_mla): kv_lora_rank +
    kv_lora_rank / 128 x 4 B + qk_rope_head_dim x 2 B (512 + 16 + 128 = 656 B); `trtllm` as either
    backend, AMD's tilelang / triton / aiter, or tilelang for both: the raw row (kv_lora_rank +
    qk_rope_head_dim) x element bytes (576 B fp8); bf16: (512 + 64) x 2 B = 1,152 B."""
    rank, rope = model.kv_lora_rank or 0, model.qk_rope_head_dim or 0
    raw = (
        "trtllm" in backends
        or backends == ("tilelang", "tilelang")
        or (vendor == "amd" and any(b in RAW_ROW_DSA_BACKENDS_AMD for b in backends))
    )
    if k.name == "fp8_e4m3" and not raw:
        return rank + rank // NSA_QUANT_BLOCK_VALUES * NSA_SCALE_BYTES + rope * NSA_ROPE_BYTES
    return k.bytes_for(rank + rope, what="latent", field="k_dtype")


def fp4_extras(
    model: ModelSpec, k: StorageFormat, tp: int = 1, compute_capability: str | None = None, version: str = "current"
) -> tuple[int, str | None]:
    """(extra bytes a token, note) an fp4 / mxfp8 pool adds to the format's own bytes, SGLang
    0.5.23 (`pool_configurator._compute_cell_size`, `NVFP4KVCacheMethod.compute_cell_size`,
    `kv_cache_hook.handle_kv4_compatibility` and `handle_nvfp4_prefill_kv_dequant_dtype`):

    - nvfp4 on an attention (not MLA) model: compute capability 10.x prefills and decodes the
      native layout on trtllm_mha: one scale layout, nothing extra (Llama-3.1-8B: 32 x 8 x 2 x
      (64 + 8) = 36,864 B a token); 12.x prefills from an fp8 dequant workspace on flashinfer:
      + H_kv x head_dim x 2 x 1 B once per token (8 x 128 x 2 = 2,048 B); other GPUs are refused
      ("requires Blackwell SM100 or SM120"), and so is no `--gpu` (the two differ).
    - nvfp4 on MLA and fp4_mx_block16: the format's 9 B per 16 values, nothing extra.
    - mxfp8: needs compute capability >= 10 (checked when the GPU is known).

    Raises `KvcalcError` (field `kv_dtype`) naming the version for a GPU SGLang refuses."""
    label = RULES[version].label
    major = _major(compute_capability) if compute_capability else None
    if k.name == "mxfp8" and major is not None and major < 10:
        raise KvcalcError(  # 0.5.23 arg_groups/kv_cache_hook.py handle_mxfp8_kv_cache_compatibility, 100-109
            f"{label}: --kv-cache-dtype mxfp8 requires an SM100+ (Blackwell) GPU for the block-scaled "
            f"operands used by the FA4 MXFP8 attention path (compute capability {compute_capability})",
            field="kv_dtype",
            value=k.name,
            form=MESSAGE,
        )
    if k.name != "nvfp4":
        return 0, None
    if major is not None and major not in (10, 12):
        raise KvcalcError(
            f"{label}: --kv-cache-dtype=nvfp4 requires Blackwell SM100 or SM120, not compute capability "
            f"{compute_capability}; use fp4_mx_block16 (or bf16, fp8_e4m3, fp8_e5m2)",
            field="kv_dtype",
            value=k.name,
            form=MESSAGE,
        )
    if model.attention == "mla":
        return 0, None
    if major is None:
        raise KvcalcError(
            f"{label}: --kv-cache-dtype nvfp4 sizes its pool by the GPU (SM100: native layout; SM120: "
            "+ an fp8 prefill workspace): give --gpu (b200, b300, gb200, rtx-5090, ...)",
            field="gpu",
            value=k.name,
            form=MESSAGE,
        )
    if major == 10:
        return 0, "nvfp4 on SM100: native NVFP4 prefill and decode (trtllm_mha), one scale layout"
    first = next(layer for layer in model.layers if layer.caches_kv)
    workspace = kv_heads_per_rank(first, tp) * first.head_dim_k * 2
    return workspace, (
        f"nvfp4 on SM120: FP8 prefill from a dequant workspace (flashinfer) of {workspace:,} B a token, "
        "counted in the cell"
    )


def _layers_pool_bytes(
    layers: list[LayerSpec] | tuple[LayerSpec, ...], rows: int, k: StorageFormat, v: StorageFormat, tp: int
) -> tuple[int, int]:
    """(K bytes, V bytes) of `MHATokenToKVPool` / `MLATokenToKVPool` buffers of `rows` rows for
    `layers` (MLA: the one latent buffer is K, V is 0)."""
    k_only = [layer.model_copy(update={"head_dim_v": 0}) for layer in layers]
    k_bytes = sum(layer_kv_bytes_per_token(layer, k, v, tp) - _indexer_bytes(layer) for layer in k_only) * rows
    total = sum(layer_kv_bytes_per_token(layer, k, v, tp) - _indexer_bytes(layer) for layer in layers) * rows
    return k_bytes, total - k_bytes


def nsa_pool_bytes(
    model: ModelSpec, size: int, k: StorageFormat, page_size: int = NSA_PAGE_SIZE, *, row: int | None = None
) -> tuple[int, int]:
    """(latent bytes, indexer bytes) of `NSATokenToKVPool` for `size` tokens: every layer has a
    latent buffer of (size + page_size) rows of `row` bytes (default `nsa_row_bytes` on Hopper) and
    an indexer buffer of (size + page_size + 1) // page_size pages x page_size x 132 B."""
    layers = [layer for layer in model.layers if layer.kind == "mla"]
    latent = len(layers) * (size + page_size) * (nsa_row_bytes(model, k) if row is None else row)
    pages = (size + page_size + 1) // page_size
    return latent, sum(pages * page_size * _indexer_bytes(layer) for layer in layers)


def pool_bytes(
    model: ModelSpec, size: int, page_size: int, k: StorageFormat, v: StorageFormat, tp: int = 1
) -> tuple[int, int]:
    """(K bytes, V bytes) of the pool as `get_kv_size_bytes` sums them: every layer's buffer has
    size + page_size rows. For MLA the one latent buffer is returned as K and V is 0; for NSA, K
    is the latent and indexer buffers together (`nsa_pool_bytes`)."""
    if is_nsa(model):
        return sum(nsa_pool_bytes(model, size, k, page_size)), 0
    return _layers_pool_bytes(model.layers, size + page_size, k, v, tp)


def swa_split(
    model: ModelSpec,
    capacity: int,
    k: StorageFormat,
    v: StorageFormat,
    tp: int = 1,
    page_size: int = DEFAULT_PAGE_SIZE,
    swa_full_tokens_ratio: float = DEFAULT_SWA_FULL_TOKENS_RATIO,
) -> tuple[int, int]:
    """(full_max_total_num_tokens, swa_max_total_num_tokens) for a page-aligned `capacity`
    (`_resolve_hybrid_swa_tokens`), in SGLang's own float arithmetic: full = align(int(C x cell /
    (F x n_full + r x S x n_swa))), swa = align(int(full x r)); every layer sliding: (0, align(C))."""
    full_layers = [layer for layer in model.layers if layer.kind != "sliding"]
    swa_layers = [layer for layer in model.layers if layer.kind == "sliding"]
    if not full_layers:
        return 0, capacity // page_size * page_size
    F = layer_kv_bytes_per_token(full_layers[0], k, v, tp)
    S = layer_kv_bytes_per_token(swa_layers[0], k, v, tp)
    total_memory = capacity * (F * len(full_layers) + S * len(swa_layers))
    denominator = F * len(full_layers) + swa_full_tokens_ratio * S * len(swa_layers)
    full = int(total_memory / denominator) // page_size * page_size
    return full, int(full * swa_full_tokens_ratio) // page_size * page_size


#: the fp4 KV types (`--kv-cache-dtype`, 0.5.23): torch dtype float4_e2m1fn_x2, one byte a packed pair
FP4_KV_TYPES = frozenset({"nvfp4", "fp4_mx_block16"})


def swa_priced_format(k: StorageFormat) -> StorageFormat:
    """The format SGLang 0.5.23's SWA pool sizing prices a `k` cache at (`pool_configurator.py`
    `HybridSWAPoolConfigurator.__init__` 659-725): kv_size = torch._utils._element_size of the
    pool's torch dtype times the values a token holds, scales only for mxfp8 (716-725). For the fp4
    types the dtype is float4_e2m1fn_x2 (`mem_cache/kv_cache_dtype.py` 72-78), whose element (a
    packed pair of e2m1 values) is 1 B, while the count is of values (H_kv x (head_dim +
    v_head_dim), 702-714): 1 B a value and no scale term, as fp8_e4m3 (gpt-oss-20b, tp 1: 8 x (64
    + 64) x 1 = 1,024 B a layer, not the 576 B the nvfp4 format stores). Every other format: itself."""
    return kv_format("fp8_e4m3") if k.name in FP4_KV_TYPES else k


def swa_fp4_note(k: StorageFormat) -> str:
    """What SGLang 0.5.23 does with an fp4 KV cache in the SWA pool, beyond its sizing
    (`swa_priced_format`): `mem_cache/kv_cache_configurator.py` `_build_hybrid_swa_kv_pool`
    (2500-2549) hands `SWAKVPool` no fp4 quant method (the MHA pool gets one, 436-455), so
    `MHATokenToKVPool` (`memory_pool.py` 2289-2291, `_create_buffers_normal` 2580-2630) allocates
    plain float4_e2m1fn_x2 buffers of H_kv x head_dim elements with `torch.zeros`: 1 B a value, no
    scales, as priced (no dequant workspace on SM120 either). torch.zeros of that dtype fails on
    the CPU ("fill_cpu" not implemented, run with torch 2.14.1) and torch's CUDA fill kernel
    (aten/src/ATen/native/cuda/FillKernel.cu) dispatches float8 but no float4 type: not run on a
    GPU, so the note says the launch may fail there."""
    return (
        f"{k.name} in the SWA pool (SGLang 0.5.23): sized and allocated as plain float4_e2m1fn_x2 "
        "tensors of head_dim elements, 1 B a value with no scales (the fp4 quant method is not "
        "passed to SWAKVPool), twice the packed bytes; torch.zeros of that dtype is not implemented "
        "on the CPU and its CUDA fill kernel lists no fp4 type: the launch may fail allocating the "
        "pool (not checked on a GPU)"
    )


def swa_layer_bytes_per_token(layer: LayerSpec, k: StorageFormat, v: StorageFormat, tp: int = 1) -> int:
    """Bytes a token of one layer costs in SGLang 0.5.23's SWA pool sizing (`_full_per_token` /
    `_swa_per_token`, `pool_configurator.py` 702-725): `layer_kv_bytes_per_token` at
    `swa_priced_format`."""
    return layer_kv_bytes_per_token(layer, swa_priced_format(k), swa_priced_format(v), tp)


def swa_cell_0523(
    model: ModelSpec,
    k: StorageFormat,
    v: StorageFormat,
    tp: int = 1,
    swa_full_tokens_ratio: float = DEFAULT_SWA_FULL_TOKENS_RATIO,
    grouped: bool = True,
) -> float:
    """The SWA pool's bytes per full-pool token, SGLang 0.5.23 (`pool_configurator.py`
    `HybridSWAPoolConfigurator._recompute_cell_size`, 786-803; a float): F x n_full + r x S x
    n_swa, with F = get_num_kv_heads(tp) x (head_dim + v_head_dim) x element bytes of a full
    layer and S = get_swa_num_kv_heads(tp) x (swa_head_dim + swa_v_head_dim) x element bytes of
    a sliding layer (700-714; each kind's own heads and head sizes: Gemma-4's full layers 2 x
    (512 + 512), its sliding ones 8 x (256 + 256)); the fp4 types at 1 B a value with no scales
    (`swa_priced_format`); every layer sliding: S x n_swa. `grouped`:
    0.5.23 multiplies r by (S x n_swa), 0.5.16 computes (r x S) x n_swa (the float may differ in
    its last bit)."""
    full = [layer for layer in model.layers if layer.kind != "sliding"]
    swa = [layer for layer in model.layers if layer.kind == "sliding"]
    S = swa_layer_bytes_per_token(swa[0], k, v, tp)
    if not full:
        return S * len(swa)
    if grouped:  # 0.5.23: _full_cell_bytes() + r x _swa_cell_bytes()
        return swa_layer_bytes_per_token(full[0], k, v, tp) * len(full) + swa_full_tokens_ratio * (S * len(swa))
    # 0.5.16 (pool_configurator.py 386-394): F x n_full + r x S x n_swa, left to right
    return layer_kv_bytes_per_token(full[0], k, v, tp) * len(full) + swa_full_tokens_ratio * S * len(swa)


def swa_pool_tokens(
    model: ModelSpec,
    kv_memory_bytes: int,
    k: StorageFormat,
    v: StorageFormat,
    tp: int = 1,
    page_size: int = DEFAULT_PAGE_SIZE,
    swa_full_tokens_ratio: float = DEFAULT_SWA_FULL_TOKENS_RATIO,
    grouped: bool = True,
) -> tuple[int, int]:
    """(full_max_total_num_tokens, swa_max_total_num_tokens) of SGLang 0.5.23's SWAKVPool for a
    budget (`HybridSWAPoolConfigurator.calculate_pool_sizes` 907-916 and `_solve_pool_sizes`
    859-893, SGLang's float arithmetic): max_total = int(budget // cell) (`swa_cell_0523`),
    full = max_total // page x page, swa = int(full x r) // page x page; every layer sliding:
    (0, max_total // page x page)."""
    cell = swa_cell_0523(model, k, v, tp, swa_full_tokens_ratio, grouped)
    n = int(kv_memory_bytes // cell)
    if all(layer.kind == "sliding" for layer in model.layers):
        return 0, n // page_size * page_size
    full = n // page_size * page_size
    return full, int(full * swa_full_tokens_ratio) // page_size * page_size


_TORCH_DTYPES = {
    "bf16": "torch.bfloat16",
    "fp16": "torch.float16",
    "fp8_e4m3": "torch.float8_e4m3fn",
    "fp8_e5m2": "torch.float8_e5m2",
}


#: the torch dtype 0.5.23's pool logs for the fp4 / mxfp8 KV types (`mem_cache/kv_cache_dtype.py` 72-78)
_TORCH_DTYPES_0523 = {
    **_TORCH_DTYPES,
    "mxfp8": "torch.float8_e4m3fn",
    "nvfp4": "torch.float4_e2m1fn_x2",
    "fp4_mx_block16": "torch.float4_e2m1fn_x2",
}


def _torch_dtype(k: StorageFormat) -> str:
    return _TORCH_DTYPES_0523[k.name]


def max_total_num_tokens(
    model: ModelSpec,
    kv_memory_bytes: int,
    k: StorageFormat,
    v: StorageFormat,
    tp: int = 1,
    page_size: int = DEFAULT_PAGE_SIZE,
    version: str = "current",
    *,
    row: int | None = None,
    extra_bytes: int = 0,
) -> int:
    """budget // cell_size, rounded down to a multiple of `page_size` (`_resolve_token_capacity`)."""
    n = kv_memory_bytes // cell_size_bytes(model, k, v, tp, version, row=row, extra_bytes=extra_bytes)
    return n // page_size * page_size


@dataclass(frozen=True)
class PoolTarget:
    """What picks SGLang's pool layout beyond the model and dtype: the GPU's compute capability
    and vendor (`--gpu`; None: Hopper assumed, as `ASSUMED_COMPUTE_CAPABILITY`) and the DSA
    backends given (`--dsa-prefill-backend`, `--dsa-decode-backend`; None: SGLang's default)."""

    compute_capability: str | None = None
    vendor: str | None = None
    dsa_prefill_backend: str | None = None
    dsa_decode_backend: str | None = None


def pool_layout(
    model: ModelSpec,
    k: StorageFormat,
    v: StorageFormat,
    tp: int = 1,
    version: str = "current",
    target: PoolTarget = PoolTarget(),
    hybrid_swa_memory: bool = True,
) -> tuple[int | None, int, list[str]]:
    """(NSA latent row bytes or None, extra bytes a token, notes) for `model` on `target`:
    the DSA backends and the row they allocate (`dsa_backends`, `nsa_row_bytes`), and an fp4
    pool's extras (`fp4_extras`). Raises `KvcalcError` for a GPU SGLang refuses the dtype on."""
    notes: list[str] = []
    extra, note = fp4_extras(model, k, tp, target.compute_capability, version)
    if k.name in FP4_KV_TYPES and uses_swa_pool(model, hybrid_swa_memory, version):
        # the SWA pool has no fp4 quant method: no scale layout, no dequant workspace (`swa_fp4_note`)
        extra, note = 0, swa_fp4_note(k)
    if note:
        notes.append(note)
    if extra and uses_swa_pool(model, hybrid_swa_memory, version):
        raise KvcalcError(
            f"{RULES[version].label}: kvcalc does not model the SWA pool with an nvfp4 dequant workspace: "
            "add --disable-hybrid-swa-memory",
            field="kv_dtype",
            value=k.name,
            form=MESSAGE,
        )
    if not is_nsa(model):
        return None, extra, notes
    backends = dsa_backends(
        model, k, target.compute_capability, target.vendor, target.dsa_prefill_backend, target.dsa_decode_backend
    )
    row = nsa_row_bytes(model, k, backends, target.vendor)
    gpu = (
        f"compute capability {target.compute_capability}"
        if target.compute_capability
        else f"no --gpu: Hopper ({ASSUMED_COMPUTE_CAPABILITY}) assumed"
    )
    notes.append(f"DSA backends prefill={backends[0]}, decode={backends[1]} ({gpu}): latent rows of {row:,} B a layer")
    return row, extra, notes


def _state_pool(
    model: ModelSpec, kv_memory_bytes: int, tp: int, version: str, mamba: sglang_mamba.MambaOptions
) -> tuple[sglang_mamba.StateSlots | None, int]:
    """(the state slots, the budget left for the token pool): the hybrids' `MambaPool` takes its
    share first (`sglang_mamba.split_budget`); other models: (None, the whole budget)."""
    if version != "current" or not uses_state_pool(model) or kv_memory_bytes <= 0:
        return None, kv_memory_bytes
    return sglang_mamba.plan_state(model, kv_memory_bytes, tp, mamba)


def _kv_line_0523(n: int, k_bytes: int, v_bytes: int, k: StorageFormat, mla: bool) -> str:
    """0.5.23's `_finalize_allocation_log` (memory_pool.py 2073-2099) for an unlabelled pool:
    "KV Cache is allocated. dtype: torch.bfloat16, #tokens: N, K size: X GB, V size: Y GB" (MLA:
    "KV size: X GB"), GB = 2^30."""
    head = f"KV Cache is allocated. dtype: {_torch_dtype(k)}, #tokens: {n}"
    if mla:
        return f"{head}, KV size: {_gib(k_bytes + v_bytes)}"
    return f"{head}, K size: {_gib(k_bytes)}, V size: {_gib(v_bytes)}"


def _gib(n: int) -> str:
    return f"{n / SGLANG_GB:.2f} GB"


def _kv_line(n: int, k_bytes: int, v_bytes: int, mla: bool) -> str:
    if mla:
        return f"KV Cache is allocated. #tokens: {n}, KV size: {_gib(k_bytes + v_bytes)}"
    return f"KV Cache is allocated. #tokens: {n}, K size: {_gib(k_bytes)}, V size: {_gib(v_bytes)}"


def capacity(
    model: ModelSpec,
    kv_memory_bytes: int,
    k: StorageFormat,
    v: StorageFormat,
    *,
    tp: int = 1,
    page_size: int = DEFAULT_PAGE_SIZE,
    max_model_len: int | None = None,
    concurrency: int | None = None,
    kv_cache_dtype: str | None = None,
    version: str = "current",
    hybrid_swa_memory: bool = True,
    swa_full_tokens_ratio: float | None = None,
    target: PoolTarget = PoolTarget(),
    mamba: sglang_mamba.MambaOptions = sglang_mamba.DEFAULT_OPTIONS,
) -> EngineResult:
    """SGLang's pool for a static budget of `kv_memory_bytes` per rank: `max_total_num_tokens`,
    pages, K and V bytes and the log lines; DeepSeek-V3.2's NSA pool (page 64, the indexer
    buffers) and, for the models in `SWA_POOL_MODEL_TYPES`, the SWA pool's two token counts
    (`kv_cache_tokens` is the full pool's). SGLang prints no concurrency; kvcalc reports
    tokens / (cdiv(L, page_size) x page_size), requests of L tokens the pool holds at once (SWA
    pool: the smaller of full / pages(L) and swa / pages(min(L, window))).

    `target` (`PoolTarget`: the GPU, the DSA backends) picks the NSA latent row and the fp4 extras.

    Raises `KvcalcError` for TP layouts SGLang refuses, formats the version has no dtype for,
    mamba layers, NSA caches other than bf16 / fp8_e4m3, a GPU the dtype needs and lacks, and a
    budget that holds no page ("Not enough memory").
    """
    _check(model, k, v, tp, page_size, version, swa_full_tokens_ratio, hybrid_swa_memory)
    sglang_mamba.check_options(mamba)  # SGLang refuses these for any model (argparse choices)
    kv_cache_dtype = kv_cache_dtype or (k.name if k == v else f"{k.name}/{v.name}")
    if (k, v) != pool_formats(model, k, v, version):
        fp4_extras(model, k, tp, target.compute_capability, version)  # mxfp8's GPU check first
        k, v = pool_formats(model, k, v, version)
    if version == "current" and sglang_dsv4.is_dsv4(model):
        return _dsv4_capacity(model, kv_memory_bytes, k, v, max_model_len, concurrency, swa_full_tokens_ratio)
    swa_full_tokens_ratio = _swa_ratio(swa_full_tokens_ratio)
    row, extra, layout_notes = pool_layout(model, k, v, tp, version, target, hybrid_swa_memory)
    notes = [
        'SGLang prints GiB values (bytes / 2^30) labelled "GB" (memory_pool.py: GB = 1024 * 1024 * 1024)',
        *layout_notes,
    ]
    lines: list[str] = []
    nsa = is_nsa(model)
    if nsa:
        page_size = NSA_PAGE_SIZE
        # 0.5.23 arg_groups/model_overrides/deepseek_v2.py 170-173 (CUDA: 64 x index_kpool, 1 for these models)
        lines.append(f"Setting page size to 64 for DeepSeek {'DSA' if version == 'current' else 'NSA'}.")
    L = max_model_len or model.default_context
    cell = cell_size_bytes(model, k, v, tp, version, row=row, extra_bytes=extra)
    slots, budget = _state_pool(model, kv_memory_bytes, tp, version, mamba)
    n = budget // cell // page_size * page_size if budget > 0 else 0
    ratio_pool = (
        uses_swa_pool(model, hybrid_swa_memory, version) and (model.model_type or "") in RULES[version].swa_ratio_types
    )
    if ratio_pool and extra:
        raise KvcalcError(
            f"{RULES[version].label}: kvcalc does not model the SWA pool with an nvfp4 dequant "
            "workspace: add --disable-hybrid-swa-memory",
            field="kv_dtype",
            value=k.name,
            form=MESSAGE,
        )
    if ratio_pool and k.name not in _TORCH_DTYPES_0523:
        # mxfp8: HybridSWAPoolConfigurator adds one scale byte per 32 values of each layer kind
        # (pool_configurator.py 716-725), as the format does; the fp4 types: priced at 1 B a
        # value with no scale term (`swa_priced_format`)
        raise KvcalcError(
            f"{RULES[version].label}: kvcalc does not model the SWA pool (SWAKVPool) with a "
            f"{k.name} KV cache; use bf16, fp16, fp8_e4m3, fp8_e5m2 or mxfp8",
            field="kv_dtype",
            value=k.name,
            form=MESSAGE,
        )
    if ratio_pool and kv_memory_bytes > 0:
        n = 1  # the SWA pool's own check below
    if n <= 0:
        raise KvcalcError(
            f"SGLang would fail at start-up ({max(budget, 0):,} B holds no page of "
            f"{cell * page_size:,} B): {NO_MEMORY}",
            field="kv_memory_bytes",
            value=kv_memory_bytes,
            form=MESSAGE,
        )

    def per_req(t: int) -> int:  # tokens one request of t tokens holds: whole pages
        return -(-t // page_size) * page_size

    swa_pool = uses_swa_pool(model, hybrid_swa_memory, version)
    ratio_rule = swa_pool and (model.model_type or "") in RULES[version].swa_ratio_types
    if swa_pool:
        has_full = any(layer.kind != "sliding" for layer in model.layers)
        sliding = [layer for layer in model.layers if layer.kind == "sliding"]
        window = sliding[0].window or 0
        if ratio_rule:
            full, swa = swa_pool_tokens(
                model, kv_memory_bytes, k, v, tp, page_size, swa_full_tokens_ratio, version == "current"
            )
            floor = (sglang_window(model) or 0) if version == "current" else window
            if has_full and floor + page_size >= swa:  # pool_configurator.py validate_swa_pool_size, 198-216
                raise KvcalcError(
                    f"SGLang would fail at start-up: SWA pool ({swa} tokens) cannot hold even one "
                    f"request: the prefill admission floor is sliding_window_size ({floor}) + "
                    f"page_size ({page_size}). Increase --swa-full-tokens-ratio or the total KV budget.",
                    field="kv_memory_bytes",
                    value=kv_memory_bytes,
                    form=MESSAGE,
                )
        else:
            full, swa = swa_split(model, n, k, v, tp, page_size, swa_full_tokens_ratio)
        if swa <= 0 or (has_full and full <= 0):
            raise KvcalcError(
                f"SGLang would fail at start-up ({kv_memory_bytes:,} B leaves the SWA pool "
                f"{full:,} full-layer and {swa:,} sliding-layer tokens): {NO_MEMORY}",
                field="kv_memory_bytes",
                value=kv_memory_bytes,
                form=MESSAGE,
            )
        pk, pv = (swa_priced_format(k), swa_priced_format(v)) if ratio_rule else (k, v)  # fp4: unquantized
        sk, sv = _layers_pool_bytes(sliding, swa + page_size, pk, pv, tp)
        fk, fv = _layers_pool_bytes([x for x in model.layers if x.kind != "sliding"], full + page_size, pk, pv, tp)
        k_bytes, v_bytes = fk + sk, fv + sv
        mem = f"SWAKVPool mem usage: {(k_bytes + v_bytes) / SGLANG_GB:.2f} GB, swa size: {swa}, full size: {full}"
        if ratio_rule and version == "current":
            # 0.5.23 memory_pool.py _finalize_allocation_log 2073-2099 ("Full" / "SWA" allocation labels);
            # swa_memory_pool.py 95-133 builds the full pool first
            dtype = _torch_dtype(k)
            lines += [
                f"Use sliding window memory pool. full_layer_tokens={full}, swa_layer_tokens={swa}",
                f"Full KV Cache is allocated. dtype: {dtype}, #tokens: {full}, K size: {_gib(fk)}, V size: {_gib(fv)}",
                f"SWA KV Cache is allocated. dtype: {dtype}, #tokens: {swa}, K size: {_gib(sk)}, V size: {_gib(sv)}",
                mem,
            ]
        elif ratio_rule and version != "current":
            # 0.5.16 memory_pool.py _finalize_allocation_log 1606-1624 (no label); swa_memory_pool.py 60-86
            # builds the SWA pool first
            dtype = _TORCH_DTYPES[k.name]
            lines += [
                f"Use sliding window memory pool. full_layer_tokens={full}, swa_layer_tokens={swa}",
                f"KV Cache is allocated. dtype: {dtype}, #tokens: {swa}, K size: {_gib(sk)}, V size: {_gib(sv)}",
                f"KV Cache is allocated. dtype: {dtype}, #tokens: {full}, K size: {_gib(fk)}, V size: {_gib(fv)}",
                mem,
            ]
        else:
            lines += [
                f"Use sliding window memory pool. full_layer_tokens={full}, swa_layer_tokens={swa}",
                _kv_line(swa, sk, sv, False),
                _kv_line(full, fk, fv, False),
                mem,
            ]
        if ratio_rule:
            # arg_groups/model_overrides/gemma4.py, mimo_v2.py; arg_groups/overrides.py 1174-1187
            notes.append(
                f"sliding-window layers in their own pool (SWAKVPool): {swa:,} tokens "
                f"(--swa-full-tokens-ratio {swa_full_tokens_ratio:g}) beside {full:,} for the full layers; "
                "SGLang 0.5.23 picks the attention backend by the GPU (Gemma-4: triton, or trtllm_mha on "
                "SM100, which needs --page-size 16 to 128 and sets 64; MiMo-V2: fa4 on SM100)"
            )
        else:
            notes.append(
                f"sliding-window layers in their own pool (SWAKVPool): {swa:,} tokens "
                f"(--swa-full-tokens-ratio {swa_full_tokens_ratio:g}) beside {full:,} for the full layers; "
                "on Blackwell SGLang serves gpt-oss with trtllm_mha and turns it off "
                "(--disable-hybrid-swa-memory)"
            )

        def fits(t: int, c: int) -> bool:
            return full >= c * per_req(t) and swa >= c * per_req(min(t, window))

        conc = min(full / per_req(L), swa / per_req(min(L, window))) if L else None
        n = full if has_full else swa  # every layer sliding: SGLang's capacity is the SWA pool's
    else:

        def fits(t: int, c: int) -> bool:
            return n >= c * per_req(t)

        conc = n / per_req(L) if L else None
        if nsa:
            latent, indexer = nsa_pool_bytes(model, n, k, page_size, row=row)
            k_bytes, v_bytes = latent + indexer, 0
            logged = latent if version == "legacy" else latent + indexer
            lines.append(
                _kv_line_0523(n, logged, 0, k, True)
                if version == "current"
                else f"KV Cache is allocated. #tokens: {n}, KV size: {_gib(logged)}"
            )
            if version == "legacy":
                notes.append(
                    f"SGLang before PR #11309 sized tokens and logged the KV size without the indexer "
                    f"key cache: the pool really takes {k_bytes:,} B ({k_bytes / SGLANG_GB:.2f} GiB)"
                )
            sized = k.bytes_for((model.kv_lora_rank or 0) + (model.qk_rope_head_dim or 0), what="latent")
            if row != sized and RULES[version].nsa_cell != "row":
                notes.append(
                    f"SGLang sizes the fp8 latent as {sized:,} B a layer but allocates {row:,} B rows (fp32 "
                    f"scales and a bf16 rope): the pool takes {k_bytes:,} B, "
                    f"{k_bytes - kv_memory_bytes:,} B over the budget"
                )
        elif slots is not None:
            reqs, warning = sglang_mamba.max_running_requests(
                n, L or n, slots.max_mamba_cache_size, disable_radix_cache=mamba.disable_radix_cache
            )
            k_bytes, v_bytes = pool_bytes(model, n, page_size, k, v, tp)
            lines += [
                *([warning] if warning else []),
                sglang_mamba.mamba_log_line(slots.state, slots.max_mamba_cache_size),
                _kv_line_0523(n, k_bytes, v_bytes, k, model.attention == "mla"),
            ]
            notes += [
                sglang_mamba.state_note(slots.state),
                (
                    f"--max-mamba-cache-size {mamba.max_mamba_cache_size}: "
                    if mamba.max_mamba_cache_size is not None
                    else f"the budget split by --mamba-full-memory-ratio {mamba.full_memory_ratio:g}: "
                )
                + f"{slots.max_mamba_cache_size:,} state slots (+1 padding) take {slots.state_bytes:,} B, "
                f"{budget:,} B left for the KV cache of the {slots.n_attention_layers} full-attention layers; "
                f"max_running_requests {reqs:,} ({sglang_mamba.slots_per_request(mamba.disable_radix_cache)} "
                f"state slots a request, context_len {L:,})",
            ]

            def fits(t: int, c: int) -> bool:  # noqa: F811 (the state slots cap the requests too)
                return c <= reqs and n >= c * per_req(t)

            conc = min(n / per_req(L), reqs) if L else None
        else:
            k_bytes, v_bytes = pool_bytes(model, n, page_size, k, v, tp)
            mla = model.attention == "mla"
            lines.append(
                _kv_line_0523(n, k_bytes, v_bytes, k, mla)
                if version == "current"
                else _kv_line(n, k_bytes, v_bytes, mla)
            )
        if any(layer.kind == "sliding" for layer in model.layers):
            why = (
                "--disable-hybrid-swa-memory"
                if (model.model_type or "") in RULES[version].swa_model_types
                else "SGLang's SWA pool serves only the architectures model_config.is_hybrid_swa_model lists"
            )
            notes.append(f"sliding-window layers sized like full ones ({why})")
    longest = None
    if concurrency:
        longest = longest_fitting(lambda t: fits(t, concurrency), SEARCH_LIMIT_TOKENS)
    return EngineResult(
        engine="sglang",
        engine_version=VERSIONS[version],
        kv_memory_bytes=kv_memory_bytes,
        kv_cache_dtype=kv_cache_dtype,
        block_size=page_size,
        page_size_bytes=cell * page_size,
        num_gpu_blocks=n // page_size,
        kv_cache_tokens=n,
        engine_kv_bytes=k_bytes + v_bytes,
        engine_state_bytes=slots.state_bytes if slots else None,
        max_model_len=L,
        max_concurrency=conc,
        concurrency=concurrency,
        longest_context=longest,
        k_bytes=k_bytes,
        v_bytes=v_bytes,
        log_lines=lines,
        notes=notes,
    )


def _swa_ratio(swa_full_tokens_ratio: float | None) -> float:
    """--swa-full-tokens-ratio as SGLang 0.5.23 resolves it for every model but DeepSeek-V4: the
    value given, else the field's fallback 0.8 (`arg_groups/fields/schedule.py`:
    `swa_full_tokens_ratio` defaults to None, `Arg(fallback=0.8)`). DeepSeek-V4 takes None to
    its override's 0.1 instead (`arg_groups/model_overrides/deepseek_v4.py`: "Setting
    swa_full_tokens_ratio to 0.1" only while it is None), in `sglang_dsv4.pools`; an explicit
    value, 0.8 included, is honoured."""
    return DEFAULT_SWA_FULL_TOKENS_RATIO if swa_full_tokens_ratio is None else swa_full_tokens_ratio


def _dsv4_capacity(
    model: ModelSpec,
    kv_memory_bytes: int,
    k: StorageFormat,
    v: StorageFormat,
    max_model_len: int | None,
    concurrency: int | None,
    swa_full_tokens_ratio: float | None,
) -> EngineResult:
    """SGLang 0.5.23's DeepSeek-V4 pools for a budget of `kv_memory_bytes` per rank
    (`sglang_dsv4.pools`: `DSV4PoolConfigurator.calculate_pool_sizes`); `kv_cache_tokens` is the
    full pool's. Requests of L tokens at once: the smaller of full / pages(L), swa / pages(min(L,
    window)) and SGLang's request estimate (the c128 states it reserved)."""
    p = sglang_dsv4.pools(model, kv_memory_bytes, swa_full_tokens_ratio)
    page = sglang_dsv4.PAGE_SIZE
    window = sglang_dsv4.geometry(model).window
    L = max_model_len or model.default_context

    def pages(t: int) -> int:
        return -(-t // page) * page

    def fits(t: int, c: int) -> bool:
        return c <= p.max_running_requests and p.full >= c * pages(t) and p.swa >= c * pages(min(t, window))

    conc = min(p.full / pages(L), p.swa / pages(min(L, window)), p.max_running_requests) if L else None
    longest = longest_fitting(lambda t: fits(t, concurrency), SEARCH_LIMIT_TOKENS) if concurrency else None
    ratio = swa_full_tokens_ratio
    notes = [
        'SGLang prints GiB values (bytes / 2^30) labelled "GB" (memory_pool.py: GB = 1024 * 1024 * 1024)',
        f"DeepSeek-V4 pools (DSV4PoolConfigurator): {p.full:,} full tokens, SWA {p.swa:,} "
        f"(--swa-full-tokens-ratio {ratio if ratio is not None else sglang_dsv4.DEFAULT_SWA_RATIO:g}), "
        f"c4 {p.c4:,}, c128 {p.c128:,}, c4 state {p.c4_state:,}; page 256 (the V4 override, whatever --page-size says)",
        f"priced at {p.per_full_token:,.2f} B a full token (SWA {p.per_swa_token:,.2f} B a token), after "
        f"{p.c128_state_bytes:,} B of c128 compressor states for SGLang's estimate of {p.max_running_requests:,} "
        "requests; the latent is FlashMLA's V4 layout (584 B: fp8 nope, bf16 rope, scales) whatever "
        "--kv-cache-dtype says, and every attention rank holds it whole (per rank for any tp)",
    ]
    return EngineResult(
        engine="sglang",
        engine_version=VERSIONS["current"],
        kv_memory_bytes=kv_memory_bytes,
        kv_cache_dtype=sglang_dsv4.KV_DTYPES[k.name],
        block_size=page,
        page_size_bytes=int(p.per_full_token * page),
        num_gpu_blocks=p.full // page,
        kv_cache_tokens=p.full,
        engine_kv_bytes=p.priced_bytes,
        engine_state_bytes=p.c128_state_bytes,
        max_model_len=L,
        max_concurrency=conc,
        concurrency=concurrency,
        longest_context=longest,
        k_bytes=p.priced_bytes,
        v_bytes=0,
        log_lines=list(p.log_lines),
        notes=notes,
    )


def memory_for(
    model: ModelSpec,
    seq_len: int,
    batch: int,
    k: StorageFormat,
    v: StorageFormat,
    *,
    tp: int = 1,
    page_size: int = DEFAULT_PAGE_SIZE,
    version: str = "current",
    hybrid_swa_memory: bool = True,
    swa_full_tokens_ratio: float | None = None,
    target: PoolTarget = PoolTarget(),
    mamba: sglang_mamba.MambaOptions = sglang_mamba.DEFAULT_OPTIONS,
    context_len: int | None = None,
) -> int:
    """The static budget per rank for `batch` requests of `seq_len` tokens:
    batch x cdiv(seq_len, page) x page x cell_size (NSA: page 64). With the SWA pool, the least
    budget whose split (`swa_split`) holds batch x pages(seq_len) full-layer tokens and
    batch x pages(min(seq_len, window)) sliding-layer tokens (found by bisection). DeepSeek-V4:
    the least budget whose pools (`sglang_dsv4.pools`) hold the full and SWA tokens and whose
    request estimate admits `batch`, as `capacity` counts them. The hybrids' state pool: the
    least budget that also admits `batch` requests (`sglang_mamba.least_budget`), SGLang's
    request estimate taken at `context_len` (--context-length; None: the model's context, else
    `seq_len`)."""
    _check(model, k, v, tp, page_size, version, swa_full_tokens_ratio, hybrid_swa_memory)
    sglang_mamba.check_options(mamba)  # SGLang refuses these for any model (argparse choices)
    if (k, v) != pool_formats(model, k, v, version):
        fp4_extras(model, k, tp, target.compute_capability, version)  # mxfp8's GPU check first
        k, v = pool_formats(model, k, v, version)
    if version == "current" and sglang_dsv4.is_dsv4(model):
        page = sglang_dsv4.PAGE_SIZE
        window = sglang_dsv4.geometry(model).window
        return sglang_dsv4.least_budget(
            model,
            batch * -(-seq_len // page) * page,
            batch * -(-min(seq_len, window) // page) * page,
            swa_full_tokens_ratio,
            need_requests=batch,
        )
    swa_full_tokens_ratio = _swa_ratio(swa_full_tokens_ratio)
    row, extra, _ = pool_layout(model, k, v, tp, version, target, hybrid_swa_memory)
    if version == "current" and uses_state_pool(model):
        # the MambaPool's slots first: the least budget whose split holds the tokens and the requests
        return sglang_mamba.least_budget(
            model,
            tp=tp,
            cell_bytes=cell_size_bytes(model, k, v, tp, version, row=row, extra_bytes=extra),
            page_size=page_size,
            need_tokens=batch * -(-seq_len // page_size) * page_size,
            need_requests=batch,
            context_len=context_len or model.default_context or seq_len,
            options=mamba,
        )
    if is_nsa(model):
        page_size = NSA_PAGE_SIZE
    cell = cell_size_bytes(model, k, v, tp, version, row=row, extra_bytes=extra)
    need_full = batch * -(-seq_len // page_size) * page_size
    if not uses_swa_pool(model, hybrid_swa_memory, version):
        return need_full * cell
    window = next(layer.window for layer in model.layers if layer.kind == "sliding") or seq_len
    need_swa = batch * -(-min(seq_len, window) // page_size) * page_size

    def enough(budget: int) -> bool:
        if (model.model_type or "") in RULES[version].swa_ratio_types:
            full, swa = swa_pool_tokens(model, budget, k, v, tp, page_size, swa_full_tokens_ratio, version == "current")
        else:
            full, swa = swa_split(
                model, budget // cell // page_size * page_size, k, v, tp, page_size, swa_full_tokens_ratio
            )
        return full >= need_full and swa >= need_swa

    hi = cell * page_size
    while not enough(hi):
        hi *= 2
    lo = 0  # enough(lo) is false: no tokens
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi
