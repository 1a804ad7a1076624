"""llama.cpp's KV cache: cells, streams, the SWA cache, the per-device split, recurrent state, the
tool's slot defaults, the refusals, and its log lines.

Two versions are modelled (`version=`); what changed between them is listed under each.

- `current`: the llama.cpp that llama-cpp-python 0.3.36 vendors (commit 0c1e570, 2026-10-01),
  the version the llama.cpp oracle (`tests/oracle`, docs/engine-oracles.md) builds and runs. Its
  rules are those of PR #17046 (Nov 2025, b7000) on, but for what changed since b7000:
  * the recurrent size line gained the rs_seq count and a P figure: "(%6u cells, %3d layers,
    %2u seqs %2u rs_seq), R (%s): %7.2f MiB, S (%s): %7.2f MiB, P (%s): %7.2f MiB" (b7000:
    "(%6u cells, %3d layers, %2u seqs), R ..., S ..."). n_rs_seq, recurrent snapshots kept for a
    draft model's rollback, multiplies the R and S rows by 1 + n_rs_seq; it is 0 unless a
    speculative draft (MTP, EAGLE3) asks for it, which kvcalc does not model; P, the per-layer
    embedding conv state, is 0 B for every model kvcalc reads;
  * a quantized V cache with `-fa off` is refused as "quantized V cache requires flash_attn to be
    enabled" (b7000: "V cache quantization requires flash_attn"), and `-fa auto` turns flash
    attention on for it ("enabling flash_attn since it is required for quantized V cache");
  * new refusal with flash attention on: a quantized K (V) type whose 32-value block does not
    divide a layer's head size ("K cache type %s with block size %u does not divide
    n_embd_head_k=%u"), e.g. q8_0 with Phi-2's heads of 80;
  * llama-server and llama-cli fit unset options to free device memory (`--fit`, on by default,
    `common/common.h` `fit_params = true`): a `-c 0` may come out lower than n_ctx_train (not
    below `--fit-ctx`, 4096). kvcalc does not know the device's free memory and gives the context
    as asked (what `--fit off` does, or a context that fits).
  * `src/llama-context.cpp` (`llama_context::llama_context`): n_ctx = n_ctx_train when `-c 0`
    (the GGUF's `context_length`, the config's max_position_embeddings); n_batch =
    min(n_ctx, n_batch) (causal attention), n_ubatch = min(n_batch, n_ubatch); then
    n_ctx = GGML_PAD(n_ctx, 256); with a unified cache (`--kv-unified`) one stream of n_ctx
    cells, otherwise n_seq_max (`--parallel`) streams of n_ctx_seq = GGML_PAD(n_ctx / n_seq_max,
    256) cells each (n_ctx becomes n_ctx_seq x n_seq_max).
  * `src/llama-kv-cache-iswa.cpp` (`llama_kv_cache_iswa::llama_kv_cache_iswa`): models with
    sliding and full layers get two caches, the SWA one of GGML_PAD(min(n_ctx_seq, n_swa x
    (unified ? n_seq_max : 1) + n_ubatch), 256) cells ("the SWA cache is always padded to 256
    for performance", llama.cpp issue #17037), or n_ctx_seq with `--swa-full`.
  * `src/llama-kv-cache.cpp` logs, per cache, "llama_kv_cache: %10s KV buffer size = %8.2f MiB"
    for each device and "llama_kv_cache: size = %7.2f MiB (%6u cells, %3d layers, %2u/%u seqs),
    K (%s): %7.2f MiB, V (%s): %7.2f MiB".
  * Recurrent state (`src/llama-memory-recurrent.cpp`, made by `llama_model::create_memory` in
    `src/llama-model.cpp`, hybrids through `src/llama-memory-hybrid.cpp`, the attention cache
    first): Mamba / Mamba-2 / Gated-DeltaNet layers keep max(1, n_seq_max) cells of R (conv
    state, `hparams.n_embd_r()` values) and S (`hparams.n_embd_s()` values), both f32 whatever
    `-ctk` / `-ctv` say (`GGML_TYPE_F32` in `create_memory`), on the layer's device. Logs
    "llama_memory_recurrent: %10s RS buffer size = %8.2f MiB" per device and
    "llama_memory_recurrent: size = %7.2f MiB (%6u cells, %3d layers, %2u seqs %2u rs_seq), R (%s):
    %7.2f MiB, S (%s): %7.2f MiB, P (%s): %7.2f MiB", the layer count being the model's n_layer
    (every layer). Which layers go where is `create_memory`'s filter_attn / filter_recr per
    architecture: Falcon-H1 (`LLM_ARCH_FALCON_H1`, layer kind `hybrid`) puts every layer in both
    the KV cache and the recurrent memory; Nemotron-H attention where head_count_kv > 0 and
    feed_forward_length 0, recurrent where both are 0, its MLP layers in neither; Granite-4.0-H,
    Jamba and the Gated-DeltaNet hybrids recurrent iff the layer is (`hparams.is_recr`), the rest
    attention. kvcalc's layer kinds say the same: K and V for `LayerSpec.caches_kv`, R and S for
    `LayerSpec.keeps_state`. The tests/oracle grid holds every line and byte of this against the
    engine for Falcon-H1-7B, Nemotron-H-8B and Granite-4.0-H-Tiny (and Qwen3.5, Jamba, Mamba).
    `src/llama-hparams.cpp`: n_embd_r = (d_conv - 1) x (d_inner + 2 x n_group x d_state),
    n_embd_s = d_state x d_inner (Mamba-1: n_group 0; Gated DeltaNet: d_inner = value heads x
    value head dim, n_group = key heads, d_state = key head dim).
  * MLA (DeepSeek, Kimi): since llama.cpp PR #12801 (April 2025) a GGUF converted for it
    (`deepseek2.attention.key_length_mla`) caches the latent (kv_lora_rank + qk_rope_head_dim)
    as K and no V (V is a view of K). An older GGUF still gets the expanded cache (below).
  * Refusals, `llama_init_from_model` (`src/llama-context.cpp`), each with llama.cpp's message
    (`check_refusals`): "model does not support different K (%s) and V (%s) cache types" (an MLA
    model, latent cache); "quantized V cache requires flash_attn to be enabled" (a quantized V
    cache with `-fa off`); a quantized type whose block does not divide the head size (above);
    `llama_context` refuses n_seq_max > LLAMA_MAX_SEQ = 256 (`src/llama-cparams.h`).
    `-fa auto` (the default, `common/common.h` `flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO`)
    turns flash attention on where the backend supports it for every layer: kvcalc assumes it
    does (CUDA, Metal and the CPU backend do for the head sizes of the bundled models), so a
    quantized V cache passes with auto; on a backend without it llama.cpp refuses
    ("quantized V cache was requested, but this requires Flash Attention").
- `legacy`: llama.cpp of 2024 to spring 2025 (the "KV self size" era, as in ollama's runner),
  pinned to commit 7841fc7 (March 2025), the one llama-cpp-python 0.3.8 vendors and the legacy
  oracle runs (docs/engine-oracles.md): n_ctx = GGML_PAD(n_ctx, flash_attn ? 256 : 32)
  (`llama_kv_cache_get_padding`), one unified cache of n_ctx cells with every layer, sliding
  ones full size (the SWA cache came with PR #13194, May 2025); MLA K and V expanded per head
  (n_heads x (qk_nope_head_dim + qk_rope_head_dim) of K, n_heads x v_head_dim of V per layer:
  before PR #12801); one slot unless `--parallel`; `-fa` a switch, off by default. Logs
  "llama_kv_cache_init: kv_size = %d, offload = %d, type_k = '%s', type_v = '%s', n_layer = %d,
  can_shift = %d" (can_shift 0 for DeepSeek-V2 (MLA) and recurrent models), "llama_kv_cache_init:
  %10s KV buffer size = %8.2f MiB" per device and "llama_init_from_model: KV self size  = %7.2f
  MiB, K (%s): %7.2f MiB, V (%s): %7.2f MiB" (two spaces before '='; builds before the January
  2025 rename log it from llama_new_context_with_model, with the same figures). Found by the
  oracle run, each in `tests/engines/test_llamacpp_legacy.py`: `-fa` is forced off for a model
  whose K and V heads differ (the expanded DeepSeek cache: "flash_attn requires n_embd_head_k ==
  n_embd_head_v - forcing off", `legacy_flash_attn`), so it pads to 32 and a quantized V is
  refused; a pure recurrent model (Mamba) keeps its conv and SSM state as K and V of max(1,
  n_seq_max) cells in f32. Refused (`refuse_legacy`): hybrid attention + recurrent models (no
  such architecture yet) and DeepSeek GGUFs converted for the latent cache (no attn_kv_b).

The tool that makes the context (`tool=`, current only) sets what the user left out:
- `llama-server` (the default: what users compare with): without `-np` it serves 4 slots sharing
  one unified cache ("n_parallel is set to auto, using n_parallel = 4 and kv_unified = true",
  `tools/server/server.cpp`; `common/arg.cpp` gives the server n_parallel = -1, auto); an
  explicit `-np N` gives N separate streams unless `-kvu` (`common/common.h`
  `bool kv_unified = false`).
- `llama-cli`: the `common_params` defaults: one sequence, kv_unified false, swa_full false.
- `library`: `llama_context_default_params()` (`src/llama-context.cpp`): n_seq_max 1,
  kv_unified false, swa_full true (the full-size SWA cache), flash_attn_type auto.

K of one layer is a tensor of (n_embd_k_gqa, cells, streams) in type_k: ggml_row_size(type_k,
n_embd_k_gqa) x cells x streams bytes (`layer_k_v_bytes_per_cell`); V alike.
The MiB figures are `(float)bytes / (1024.0f * 1024.0f)`, so they are computed in float32 here.

Layers to devices, `src/llama-model.cpp` `load_tensors`: the last n_gpu_layers layers are
offloaded (i_gpu_start = max(n_layer - n_gpu_layers, 0); act = min(n_gpu_layers, n_layer + 1),
the +1 being the output layer); layer il goes to device upper_bound(splits, (il - i_gpu_start) /
act) where splits are the cumulative, normalised `--tensor-split` (default: each device's free
memory; kvcalc assumes equal devices). A layer's K and V live on its device (`--no-kv-offload` not
modelled). ollama passes n_ctx x OLLAMA_NUM_PARALLEL as llama.cpp's n_ctx (`ollama=True`).

Defaults and limits (current): `--cache-type-k/-v` default f16 whatever the model's dtype
(`common/common.h`: `ggml_type cache_type_k = GGML_TYPE_F16;`), so `default_kv_dtype` is f16;
`-b` n_batch 2048 and `-ub` n_ubatch 512 (`common/common.h`); `-ngl -1` is "use the default"
(`common/common.h` `n_gpu_layers = -1; // ... (-1 - use default)`), modelled as every layer
offloaded. A cache larger than a given `--kv-memory` is allocated anyway by kvcalc, with a
`KvcalcWarning`: llama.cpp itself would fail to allocate the buffer on a device of that size.
Builds before late 2025 also raised n_batch to GGML_KQ_MASK_PAD (64) first; that only matters for
`-b` below 64 with `-ub` above it, and is not modelled.
"""

from __future__ import annotations

import bisect
import struct
import warnings
from dataclasses import dataclass

from kvcalc.calc.kv_cache import refuse_indexer
from kvcalc.engines import SEARCH_LIMIT_TOKENS, defaults, longest_fitting
from kvcalc.errors import MESSAGE, OPTION, OPTION_SAYS, KvcalcError, KvcalcWarning, flag
from kvcalc.formats import StorageFormat
from kvcalc.results import DeviceBuffer, EngineResult
from kvcalc.schema import LayerSpec, ModelSpec

#: the llama.cpp commit "current" is held against (llama-cpp-python 0.3.36's vendor/llama.cpp)
CURRENT_COMMIT = "0c1e570"
VERSION = (f"llama.cpp {CURRENT_COMMIT} (Oct 2026, as llama-cpp-python 0.3.36 vendors it; b7000+ rules; current) "
           "and the 2024-spring 2025 'KV self size' era (legacy)")
VERSIONS = ("current", "legacy")
N_CTX_PAD = 256
#: src/llama-kv-cache-iswa.cpp: "the SWA cache is always padded to 256 for performance"
SWA_PAD = 256
#: src/llama-cparams.h `#define LLAMA_MAX_SEQ 256` (current); llama_context refuses more.
LLAMA_MAX_SEQ = 256
DEFAULT_N_UBATCH = defaults.LLAMACPP_N_UBATCH
#: `-b` / `--batch-size` (`common/common.h` `int32_t n_batch = 2048`; `llama_context_default_params` alike)
DEFAULT_N_BATCH = defaults.LLAMACPP_N_BATCH
SWA_FULL_REF = "https://github.com/ggml-org/llama.cpp/pull/13194#issuecomment-2868343055"
#: the programs whose defaults kvcalc models (`tool=`): see the module docstring
TOOLS = ("llama-server", "llama-cli", "library")
DEFAULT_TOOL = "llama-server"
#: llama-server's slots when -np is not given (`tools/server/server.cpp`)
SERVER_AUTO_PARALLEL = 4
#: `-fa` values (`common/arg.cpp`, b6300+: `-fa, --flash-attn [on|off|auto]`)
FLASH_ATTN = ("on", "off", "auto")
#: how an MLA model's cache is laid out (`ModelSpec.mla_cache`): the latent, or K and V per head
MLA_CACHES = ("latent", "expanded")
#: recurrent state (R and S) is f32 whatever the KV types (`llama_model::create_memory`)
RECURRENT_TYPE = "f32"
RECURRENT_BYTES = 4
#: ggml types whose blocks quantize (`ggml_is_quantized`): the KV types llama.cpp takes, less the float ones
QUANTIZED = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")

#: kvcalc format name -> ggml type name (ggml.c type_traits), the KV types llama.cpp accepts.
GGML_NAMES: dict[str, str] = {"fp32": "f32", "fp16": "f16", "bf16": "bf16", "q8_0": "q8_0",
                              "q4_0": "q4_0", "q4_1": "q4_1", "q5_0": "q5_0", "q5_1": "q5_1",
                              "iq4_nl": "iq4_nl"}


def default_kv_dtype(model: ModelSpec) -> tuple[str, str]:
    """(format name, label) when no `--cache-type-k/-v` is given: f16 for every model
    (`common/common.h` `cache_type_k = GGML_TYPE_F16`), not the model's dtype."""
    return "fp16", "f16 (llama.cpp default --cache-type-k/-v)"


def pad(n: int, to: int) -> int:
    """GGML_PAD(n, to): n rounded up to a multiple of `to`."""
    return (n + to - 1) // to * to


def f32(x: float) -> float:
    """x rounded to float32, as C's (float) cast does."""
    return struct.unpack("f", struct.pack("f", x))[0]


def mib_f32(n_bytes: int) -> float:
    """(float)n_bytes / (1024.0f * 1024.0f), the MiB llama.cpp prints in its size lines."""
    return f32(n_bytes) / 2**20


def ggml_name(f: StorageFormat, *, field: str = "k_dtype") -> str:
    """The ggml type name of a KV format; raises `KvcalcError` (field `field`: `k_dtype` or
    `v_dtype`) for one llama.cpp lacks."""
    if f.name not in GGML_NAMES:
        raise KvcalcError(f"llama.cpp has no '{f.name}' KV cache type; use one of {', '.join(GGML_NAMES.values())}",
                          field=field, value=f.name, form=MESSAGE)
    return GGML_NAMES[f.name]


def layer_k_v_bytes_per_cell(layer: LayerSpec, k: StorageFormat, v: StorageFormat) -> tuple[int, int]:
    """(K, V) bytes of one cell of one layer: ggml_row_size(type, n_embd_{k,v}_gqa), the row of
    every KV head together, as `llama_kv_cache` makes it (`src/llama-kv-cache.cpp`:
    ggml_new_tensor_3d(type_k, n_embd_k_gqa, kv_size, n_stream)). A quantized row need only be
    whole blocks over all heads: Phi-2's 32 heads x 80 = 2,560 values = 80 q8_0 blocks of 34 B =
    2,720 B, though one head of 80 is 2.5 blocks. MLA: the latent as K, V 0. Raises `KvcalcError`
    (field `k_dtype` / `v_dtype`) for a row that is not whole blocks."""
    if not layer.caches_kv:
        return 0, 0
    if layer.kind == "mla":
        return k.bytes_for(layer.head_dim_k, what="latent", field="k_dtype"), 0
    return (k.bytes_for(layer.n_kv_heads * layer.head_dim_k, what="K row", field="k_dtype"),
            v.bytes_for(layer.n_kv_heads * layer.head_dim_v, what="V row", field="v_dtype"))


def mla_cache(model: ModelSpec, version: str) -> str:
    """How llama.cpp lays out an MLA model's cache: the model's own `mla_cache` when it states
    one (a GGUF tells: the files converted for the latent cache carry
    `deepseek2.attention.key_length_mla`), else 'latent' for `current` and 'expanded' for
    `legacy` (before llama.cpp PR #12801, April 2025)."""
    own = getattr(model, "mla_cache", None)
    if own is not None:
        return own
    return "expanded" if version == "legacy" else "latent"


def expanded_mla_layer(model: ModelSpec) -> LayerSpec:
    """An MLA layer as llama.cpp cached it before the latent cache: K of n_heads x
    (qk_nope_head_dim + qk_rope_head_dim) values and V of n_heads x v_head_dim per cell
    (`src/llama-model.cpp`: n_embd_head_k = qk_nope + qk_rope, n_embd_head_v = v_head_dim,
    n_head_kv = n_head). Raises `KvcalcError` (field `qk_nope_head_dim` / `v_head_dim`) when the
    config does not give them."""
    missing = [f for f in ("qk_nope_head_dim", "v_head_dim") if getattr(model, f) is None]
    if missing:
        raise KvcalcError(f"{model.name}: the expanded MLA cache (llama.cpp before April 2025, or a GGUF without "
                          f"key_length_mla) needs {' and '.join(missing)} in the config", field=missing[0],
                          form=MESSAGE)
    return LayerSpec(kind="full", n_kv_heads=model.n_heads, head_dim_k=model.qk_nope_head_dim + model.qk_rope_head_dim,
                     head_dim_v=model.v_head_dim)


def recurrent_r_s_values(model: ModelSpec, layer: LayerSpec) -> tuple[int, int]:
    """(n_embd_r, n_embd_s): the R (conv) and S (state) values one sequence keeps in one mamba
    or linear layer, as `src/llama-hparams.cpp` sizes them: n_embd_r = (d_conv - 1) x (d_inner +
    2 x n_group x d_state), n_embd_s = d_state x d_inner. Mamba-1: d_inner = expand x hidden,
    n_group 0; Mamba-2 (Nemotron-H, Granite-4.0-H, and the mixer of a Falcon-H1 `hybrid` layer):
    d_inner = n_heads x head_dim (the GGUF's ssm.inner_size); Gated DeltaNet: d_inner = value heads x
    value head dim, n_group = key heads, d_state = key head dim, d_conv the conv kernel. (0, 0)
    when the config does not size the layer (`LayerSpec.state_values` 0); r + s equals
    `state_values`."""
    if layer.state_values == 0:
        return 0, 0
    m = model
    if layer.kind in ("mamba", "hybrid"):  # hybrid (Falcon-H1): the Mamba-2 mixer beside the attention
        d_state, d_conv = m.mamba_d_state, m.mamba_d_conv
        if m.mamba_n_groups is not None:
            d_inner, n_group = m.mamba_n_heads * m.mamba_head_dim, m.mamba_n_groups
        else:
            d_inner, n_group = m.mamba_expand * m.hidden_size, 0
    else:
        d_inner = m.linear_num_value_heads * m.linear_value_head_dim
        n_group, d_state, d_conv = m.linear_num_key_heads, m.linear_key_head_dim, m.linear_conv_kernel_dim
    return (d_conv - 1) * (d_inner + 2 * n_group * d_state), d_state * d_inner


def device_of_layers(n_layer: int, n_gpu_layers: int | None, splits: list[float] | None,
                     n_devices: int = 1) -> list[int]:
    """Device index of each layer (-1 = CPU), as `llama_model::load_tensors` assigns them.

    i_gpu_start = max(n_layer - ngl, 0); act = min(ngl, n_layer + 1); layer il >= i_gpu_start goes
    to upper_bound(cumulative normalised splits, (il - i_gpu_start) / act) (float32).
    """
    ngl = n_layer + 1 if n_gpu_layers is None or n_gpu_layers == -1 else n_gpu_layers
    if n_devices <= 0 or ngl <= 0:
        return [-1] * n_layer
    check_tensor_split(splits or None, n_devices)
    raw = list(splits) if splits else [1.0] * n_devices
    cum, total = [], 0.0
    for s in raw:
        total = f32(total + f32(s))
        cum.append(total)
    cum = [f32(c / total) for c in cum]
    i_gpu_start = max(n_layer - ngl, 0)
    act = min(ngl, n_layer + 1)
    out = []
    for il in range(n_layer):
        if il < i_gpu_start or il - i_gpu_start >= act:
            out.append(-1)
            continue
        out.append(min(bisect.bisect_right(cum, f32((il - i_gpu_start) / act)), n_devices - 1))
    return out


def _device_name(d: int) -> str:
    return "CPU" if d < 0 else f"CUDA{d}"


def _cache_lines(prefix: str, legacy: bool, cells: int, n_stream: int, n_seq_max: int, layers: list[int],
                 per_cell: list[tuple[int, int]], dev: list[int], tk: str, tv: str,
                 buffers: dict[str, tuple[int, int]]) -> tuple[list[str], int, int]:
    """Log lines of one llama_kv_cache over `layers` (indices), adding to `buffers`; (lines, K, V)."""
    own: dict[str, tuple[int, int]] = {}
    k_tot = v_tot = 0
    for il in layers:
        kb, vb = per_cell[il]
        kb, vb = kb * cells * n_stream, vb * cells * n_stream
        name = _device_name(dev[il])
        n, b = own.get(name, (0, 0))
        own[name] = (n + 1, b + kb + vb)
        k_tot += kb
        v_tot += vb
    order = sorted(own) if not legacy else sorted(own, key=lambda s: (s == "CPU", s))
    lines = []
    for name in order:
        lines.append(f"{prefix}: {name:>10} KV buffer size = {own[name][1] / 2**20:8.2f} MiB")
        n, b = buffers.get(name, (0, 0))
        buffers[name] = (n + own[name][0], b + own[name][1])
    if not legacy:
        lines.append(f"llama_kv_cache: size = {mib_f32(k_tot + v_tot):7.2f} MiB ({cells:6d} cells, "
                     f"{len(layers):3d} layers, {n_seq_max:2d}/{n_stream} seqs), K ({tk}): {mib_f32(k_tot):7.2f} MiB, "
                     f"V ({tv}): {mib_f32(v_tot):7.2f} MiB")
    return lines, k_tot, v_tot


def _recurrent_lines(model: ModelSpec, dev: list[int], n_seq_max: int) -> tuple[list[str], int, list[str]]:
    """`llama_memory_recurrent`'s lines for the layers that keep a state (`LayerSpec.keeps_state`:
    mamba, linear, and Falcon-H1's hybrid layers, which `llama_model::create_memory` puts in both
    the KV cache and the recurrent memory, `filter_recr` true for every layer): max(1, n_seq_max)
    cells of R and S in f32 per layer on the layer's device; (lines, bytes, notes). No lines when
    the model has no recurrent layer or the config does not size them."""
    rec = [i for i, layer in enumerate(model.layers) if layer.keeps_state]
    if not rec:
        return [], 0, []
    sized = [(i, *recurrent_r_s_values(model, model.layers[i])) for i in rec]
    if any(r + s == 0 for _, r, s in sized):
        return [], 0, ["mamba / linear-attention layers: the config does not size their state; not counted"]
    cells = max(1, n_seq_max)
    own: dict[str, int] = {}
    r_tot = s_tot = 0
    for il, r, s in sized:
        rb, sb = r * cells * RECURRENT_BYTES, s * cells * RECURRENT_BYTES
        name = _device_name(dev[il])
        own[name] = own.get(name, 0) + rb + sb
        r_tot += rb
        s_tot += sb
    lines = [f"llama_memory_recurrent: {name:>10} RS buffer size = {own[name] / 2**20:8.2f} MiB"
             for name in sorted(own)]
    # n_rs_seq (recurrent snapshots for speculative rollback) is 0 unless a draft model asks for it
    lines.append(f"llama_memory_recurrent: size = {mib_f32(r_tot + s_tot):7.2f} MiB ({cells:6d} cells, "
                 f"{model.n_layers:3d} layers, {n_seq_max:2d} seqs {0:2d} rs_seq), R ({RECURRENT_TYPE}): "
                 f"{mib_f32(r_tot):7.2f} MiB, S ({RECURRENT_TYPE}): {mib_f32(s_tot):7.2f} MiB, "
                 f"P ({RECURRENT_TYPE}): {mib_f32(0):7.2f} MiB")
    return lines, r_tot + s_tot, []


@dataclass(frozen=True)
class Context:
    """What llama.cpp runs with once the tool's defaults are applied (`resolve_context`):
    `parallel` (n_seq_max), `unified` (kv_unified), `swa_full`, `flash_attn` (True when on; an
    `auto` the backend supports is on), and `notes` saying which defaults were taken."""

    parallel: int
    unified: bool
    swa_full: bool
    flash_attn: bool
    notes: tuple[str, ...] = ()


def resolve_context(*, tool: str = DEFAULT_TOOL, version: str = "current", parallel: int | None = None,
                    unified: bool | None = None, swa_full: bool | None = None,
                    flash_attn: bool | str | None = None) -> Context:
    """The options llama.cpp runs with: what was given, the rest from `tool`'s defaults (module
    docstring). llama-server without `parallel`: 4 slots in one unified cache; with it: separate
    streams unless `unified`. llama-cli: 1 sequence, not unified. library: 1 sequence, not
    unified, `swa_full` on. `flash_attn` None is auto (current; legacy: off), True 'on', False
    'off'; auto is on (kvcalc assumes the backend supports it). Raises `KvcalcError` (field
    `llamacpp_tool` / `flash_attn`) for an unknown tool or `-fa` value."""
    if tool not in TOOLS:
        raise KvcalcError(f"use one of {', '.join(TOOLS)}, not '{tool}'", option="--llamacpp-tool",
                          field="llamacpp_tool", value=tool, form=OPTION)
    fa = {True: "on", False: "off"}.get(flash_attn, flash_attn) if isinstance(flash_attn, bool) else flash_attn
    if fa is not None and fa not in FLASH_ATTN:
        raise KvcalcError(f"'{fa}' is not on, off or auto (llama.cpp's -fa values)", option="-fa", field="flash_attn",
                          value=fa, form=OPTION)
    legacy = version == "legacy"
    fa = fa or ("off" if legacy else "auto")
    notes: list[str] = []
    if legacy:  # one cache for every sequence, no SWA cache: the tool changes nothing
        return Context(1 if parallel is None else parallel, True, bool(swa_full), fa != "off", ())
    if tool == "llama-server" and parallel is None:
        notes.append(f"llama-server without -np: {SERVER_AUTO_PARALLEL} slots sharing one unified cache "
                     "(tools/server/server.cpp: n_parallel is set to auto, using n_parallel = 4 and kv_unified = true)")
        parallel, unified = SERVER_AUTO_PARALLEL, True
    if swa_full is None:
        swa_full = tool == "library"  # llama_context_default_params: swa_full = true; common_params: false
    return Context(1 if parallel is None else parallel, bool(unified), swa_full, fa != "off", tuple(notes))


def _check_options(n_ctx: int, *, parallel: int, n_ubatch: int, n_batch: int, version: str,
                   n_gpu_layers: int | None, n_devices: int) -> None:
    """Raise `KvcalcError` (field: the option's) for options llama.cpp refuses or kvcalc cannot read."""
    if version not in VERSIONS:
        raise KvcalcError(f"use one of {', '.join(VERSIONS)}, not '{version}'", field="llamacpp_version",
                          value=version, form=OPTION)
    if n_ctx < 0:
        raise KvcalcError(f"must be 0 (the model's training context) or a count of tokens, got {n_ctx}",
                          field="n_ctx", value=n_ctx, form=OPTION_SAYS)
    bad = [(f, x) for f, x in (("parallel", parallel), ("n_ubatch", n_ubatch)) if x <= 0]
    if bad:
        raise KvcalcError(f"{flag('parallel')} and {flag('n_ubatch')} must be positive",
                          field=bad[0][0], value=bad[0][1], form=MESSAGE)
    if n_batch <= 0:
        raise KvcalcError(f"must be a positive integer, got {n_batch}", option="--batch-size", field="n_batch",
                          value=n_batch, form=OPTION_SAYS)
    if version == "current" and parallel > LLAMA_MAX_SEQ:
        raise KvcalcError(f"llama.cpp refuses it: n_seq_max must be <= {LLAMA_MAX_SEQ} "
                          "(src/llama-context.cpp, LLAMA_MAX_SEQ)", field="parallel", value=parallel)
    if n_gpu_layers is not None and n_gpu_layers < -1:
        raise KvcalcError("use a count >= 0, or -1 for llama.cpp's default (all layers)", field="n_gpu_layers",
                          value=n_gpu_layers)
    if n_devices < 1:
        raise KvcalcError(f"must be a positive integer, got {n_devices} (for a CPU-only cache use "
                          f"{flag('n_gpu_layers')} 0)", field="n_devices", value=n_devices, form=OPTION_SAYS)
    from kvcalc.units import check_bound  # the one set of bounds (n_ctx: llama.cpp's int32)

    for field, value in (("n_ctx", n_ctx or None), ("parallel", parallel), ("n_ubatch", n_ubatch),
                         ("n_gpu_layers", n_gpu_layers), ("n_devices", n_devices)):
        check_bound(field, value)
    check_bound("n_batch", n_batch, option="--batch-size")  # an int32, as -ub (common/arg.cpp std::stoi)


#: values per block of the quantized KV types (ggml.c type_traits blck_size: QK8_0 = QK4_0 = ... = 32)
QUANT_BLOCK = 32


def head_sizes(model: ModelSpec, version: str = "current") -> list[tuple[int, int]]:
    """(n_embd_head_k, n_embd_head_v) of each attention layer as llama.cpp sees it: the head's
    K and V values (`src/llama-hparams.cpp`); an MLA model with its latent cache: K the latent
    (kv_lora_rank + rope), V the kv_lora_rank (the GGUF's key_length / value_length); the
    expanded MLA cache: nope + rope and v_head_dim."""
    mla = mla_cache(model, version)
    out = []
    for layer in model.layers:
        if not layer.caches_kv:
            continue
        if layer.kind == "mla" and mla == "latent":
            out.append((layer.head_dim_k, model.kv_lora_rank or 0))
        elif layer.kind == "mla":
            ex = expanded_mla_layer(model)
            out.append((ex.head_dim_k, ex.head_dim_v))
        else:
            out.append((layer.head_dim_k, layer.head_dim_v))
    return out


def check_refusals(model: ModelSpec, tk: str, tv: str, *, flash_attn: bool, version: str = "current") -> None:
    """Raise `KvcalcError` (field `k_dtype` / `v_dtype`) where `llama_init_from_model`
    (`src/llama-context.cpp`) returns no context, with llama.cpp's own message, in its order:

    - an MLA model with its latent cache and K and V of different types ("model does not support
      different K (%s) and V (%s) cache types");
    - a quantized V cache with flash attention off: current "quantized V cache requires
      flash_attn to be enabled" (`-fa auto` turns it on instead: "enabling flash_attn since it is
      required for quantized V cache"); legacy "V cache quantization requires flash_attn";
    - legacy (7841fc7), whatever `-fa` says: the same makes llama.cpp abort
      (`GGML_ASSERT(hparams.n_embd_head_k % ggml_blck_size(type_k) == 0)` in `llama_init_from_model`);
    - current, flash attention not off: a quantized K (V) type whose block (32 values) does not
      divide a layer's head size ("K cache type %s with block size %u does not divide
      n_embd_head_k=%u"; `head_sizes`), e.g. q8_0 with Phi-2's heads of 80.
    """
    legacy = version == "legacy"
    func = "llama_init_from_model"  # legacy too: 7841fc7 logs from llama_init_from_model
    latent = any(layer.kind == "mla" for layer in model.layers) and mla_cache(model, version) == "latent"
    if latent and tk != tv and not legacy:
        raise KvcalcError(f"llama.cpp refuses it: \"{func}: model does not support different K ({tk}) and V ({tv}) "
                          f"cache types\" ({model.name} caches the MLA latent as K, V is a view of it); give one "
                          "type to -ctk and -ctv", field="v_dtype", value=tv)
    if tv in QUANTIZED and not flash_attn:
        reason = ("V cache quantization requires flash_attn" if legacy
                  else "quantized V cache requires flash_attn to be enabled")
        raise KvcalcError(f"llama.cpp refuses it: \"{func}: {reason}\"; add -fa on "
                          "(or auto) or use an f16 V cache", field="v_dtype", value=tv)
    if legacy:  # 7841fc7 llama_init_from_model: GGML_ASSERT(hparams.n_embd_head_k % ggml_blck_size(type_k) == 0)
        for which, t in (("k", tk), ("v", tv)):
            bad = [hs[which == "v"] for hs in head_sizes(model, version) if hs[which == "v"] % QUANT_BLOCK]
            if t in QUANTIZED and bad:
                raise KvcalcError(f"llama.cpp aborts: \"GGML_ASSERT(hparams.n_embd_head_{which} % "
                                  f"ggml_blck_size(type_{which}) == 0) failed\" ({t} blocks of {QUANT_BLOCK} values, "
                                  f"heads of {bad[0]}); use an f16 or bf16 {which.upper()} cache for {model.name}",
                                  field=f"{which}_dtype", value=t)
        return
    if not flash_attn:
        return
    for which, t in (("K", tk), ("V", tv)):
        if t not in QUANTIZED:
            continue
        bad = [hs[which == "V"] for hs in head_sizes(model, version) if hs[which == "V"] % QUANT_BLOCK]
        if bad:
            raise KvcalcError(f"llama.cpp refuses it: \"{func}: {which} cache type {t} with block size {QUANT_BLOCK} "
                              f"does not divide n_embd_head_{which.lower()}={bad[0]}\"; use an f16 or bf16 "
                              f"{which} cache for {model.name}", field=f"{which.lower()}_dtype", value=t)


def check_tensor_split(splits: list[float] | tuple[float, ...] | None, n_devices: int) -> None:
    """Raise `KvcalcError` (field `tensor_split`) unless `splits` is None or `n_devices` finite,
    non-negative shares that do not all vanish: a NaN or inf share would put every layer on one
    device (llama.cpp normalises the shares by their sum, `llama_model::load_tensors`)."""
    import math

    if splits is None:
        return
    raw = list(splits)
    bad = [s for s in raw if not isinstance(s, (int, float)) or isinstance(s, bool) or not math.isfinite(s)]
    if bad:
        raise KvcalcError(f"share {bad[0]!r} is not a finite number; give {n_devices} shares such as 63,37",
                          field="tensor_split", value=",".join(str(s) for s in raw), form=OPTION)
    if len(raw) != n_devices or any(s < 0 for s in raw) or sum(raw) <= 0:
        raise KvcalcError(f"needs {n_devices} non-negative values that do not all vanish", field="tensor_split",
                          value=splits, form=OPTION_SAYS)


@dataclass(frozen=True)
class _Layers:
    """What every cache of one allocation is built from: the indices of the layers that cache
    K and V, each layer's (K, V) bytes per cell and device (-1 = CPU), and the ggml type names."""

    att: list[int]
    per_cell: list[tuple[int, int]]
    dev: list[int]
    tk: str
    tv: str
    pad_v_line: str | None = None

    def lines(self, prefix: str, legacy: bool, cells: int, n_stream: int, n_seq_max: int, layers: list[int],
              buffers: dict[str, tuple[int, int]]) -> tuple[list[str], int, int]:
        """`_cache_lines` of one cache over `layers`, after the V padding warning when there is one."""
        lines, k_tot, v_tot = _cache_lines(prefix, legacy, cells, n_stream, n_seq_max, layers, self.per_cell,
                                           self.dev, self.tk, self.tv, buffers)
        return ([self.pad_v_line] if self.pad_v_line and not legacy else []) + lines, k_tot, v_tot


def v_pad_line(model: ModelSpec, flash_attn: bool) -> str | None:
    """The warning `llama_kv_cache` logs before its buffers when flash attention is off (V is
    stored transposed) and the V width, head_count_kv(il) x value_length, differs between layers
    (`llama_hparams::is_n_embd_v_gqa_variable`, `src/llama-kv-cache.cpp` [TAG_V_CACHE_VARIABLE]):
    "the V embeddings have different sizes across layers and FA is not enabled - padding V cache
    to %d" (the widest). A Mamba hybrid's GGUF gives head_count_kv per layer, 0 on the Mamba
    layers (Jamba, Nemotron-H, Granite-4 hybrid: `convert_hf_to_gguf.py`), so its V width varies;
    Gated-DeltaNet hybrids (Qwen3-Next, Qwen3.5) give one count for all layers and do not. Every
    attention layer of a kvcalc model has the same V width, so the padding adds no bytes. None
    when there is no warning."""
    widths = [layer.n_kv_heads * layer.head_dim_v for layer in model.layers if layer.caches_kv]
    if flash_attn or not widths or not any(layer.kind == "mamba" for layer in model.layers):
        return None
    return ("llama_kv_cache: the V embeddings have different sizes across layers and FA is not enabled - "
            f"padding V cache to {max(widths)}")


@dataclass
class _Caches:
    """The caches of one allocation: their log lines, K and V bytes over every cache, streams,
    cells per stream, llama.cpp's final n_ctx and the bytes per device (name -> (layers, bytes))."""

    lines: list[str]
    k_bytes: int
    v_bytes: int
    n_stream: int
    n_seq_cells: int
    n_ctx: int
    buffers: dict[str, tuple[int, int]]


def _legacy_caches(model: ModelSpec, lay: _Layers, requested: int, parallel: int, flash_attn: bool) -> _Caches:
    """The 'KV self size' era (llama.cpp 7841fc7, `src/llama.cpp` `llama_init_from_model`,
    `src/llama-kv-cache.cpp` `llama_kv_cache_init`): n_ctx = GGML_PAD(n_ctx, flash_attn ? 256 :
    32) (`llama_kv_cache_get_padding`); one unified cache of n_ctx cells holding every layer,
    sliding ones full size. A recurrent model (`llama_model_is_recurrent`: Mamba) keeps
    kv_size = max(1, n_seq_max) cells instead, K and V forced to f32 ("it's probably best to keep
    as much precision as possible for the states"), each layer's K row n_embd_k_gqa(il) +
    n_embd_k_s() = (d_conv - 1) x d_inner values and V row n_embd_v_s() = d_state x d_inner.
    can_shift = !recurrent && arch != LLM_ARCH_DEEPSEEK2 ("not supported due to MLA")."""
    buffers: dict[str, tuple[int, int]] = {}
    n_ctx = pad(requested, 256 if flash_attn else 32)
    recurrent = not lay.att and any(layer.keeps_state for layer in model.layers)
    cells = max(1, parallel) if recurrent else n_ctx
    layers = [i for i, layer in enumerate(model.layers) if layer.keeps_state] if recurrent else lay.att
    # every MLA model kvcalc reads is llama.cpp's deepseek2 architecture (DeepSeek-V2/V3/R1, Kimi-K2)
    can_shift = int(not recurrent and not any(layer.kind == "mla" for layer in model.layers))
    tk, tv = (RECURRENT_TYPE, RECURRENT_TYPE) if recurrent else (lay.tk, lay.tv)
    lines = [f"llama_kv_cache_init: kv_size = {cells}, offload = 1, type_k = '{tk}', type_v = '{tv}', "
             f"n_layer = {model.n_layers}, can_shift = {can_shift}"]
    if recurrent:
        per_cell = list(lay.per_cell)
        for il in layers:
            r, s_values = recurrent_r_s_values(model, model.layers[il])
            per_cell[il] = (r * RECURRENT_BYTES, s_values * RECURRENT_BYTES)
        more, k_tot, v_tot = _cache_lines("llama_kv_cache_init", True, cells, 1, parallel, layers, per_cell, lay.dev,
                                          tk, tv, buffers)
    else:
        more, k_tot, v_tot = lay.lines("llama_kv_cache_init", True, cells, 1, parallel, layers, buffers)
    lines += more
    lines.append(f"llama_init_from_model: KV self size  = {mib_f32(k_tot + v_tot):7.2f} MiB, "
                 f"K ({tk}): {mib_f32(k_tot):7.2f} MiB, V ({tv}): {mib_f32(v_tot):7.2f} MiB")
    return _Caches(lines, k_tot, v_tot, n_stream=1, n_seq_cells=cells, n_ctx=n_ctx, buffers=buffers)


def legacy_flash_attn(model: ModelSpec, flash_attn: bool) -> tuple[bool, str | None]:
    """(flash attention as legacy llama.cpp runs it, the warning it logs or None). 7841fc7's
    `llama_init_from_model` (`src/llama.cpp`) turns `-fa` off for a model whose K and V heads
    differ: "flash_attn requires n_embd_head_k == n_embd_head_v - forcing off", e.g. the expanded
    DeepSeek-V2 cache (K 128 + 64 = 192, V 128). Off, the context pads to 32 and a quantized V
    cache is refused (`check_refusals`). (It also forces it off for Grok, which kvcalc does not read.)"""
    if not flash_attn:
        return False, None
    if any(hk != hv for hk, hv in head_sizes(model, "legacy")):
        return False, "llama_init_from_model: flash_attn requires n_embd_head_k == n_embd_head_v - forcing off"
    return True, None


def refuse_legacy(model: ModelSpec) -> None:
    """Raise `KvcalcError` (field `llamacpp_version`) for what legacy llama.cpp (7841fc7) cannot
    load: hybrid attention + recurrent models (its only recurrent architectures are mamba, rwkv6
    and rwkv6qwen2, `llama_model_is_recurrent` in `src/llama-model.cpp`: Jamba, Falcon-H1,
    Nemotron-H, Granite-4.0-H, Qwen3-Next / Qwen3.5 came later), and a DeepSeek GGUF converted for
    the MLA latent cache (`mla_cache` 'latent' from the file's key_length_mla): since PR #12801
    convert_hf_to_gguf.py splits attn_kv_b into attn_k_b and attn_v_b, and 7841fc7 requires
    attn_kv_b (`llama_model::load_tensors`: "missing tensor 'blk.0.attn_kv_b.weight'")."""
    kinds = {layer.kind for layer in model.layers if layer.caches_kv}
    if kinds and any(layer.keeps_state for layer in model.layers):
        raise KvcalcError(f"{model.name} mixes attention and recurrent (mamba / linear) layers: llama.cpp of the "
                          "'KV self size' era has no such architecture and fails to load it (\"unknown model "
                          "architecture\"); use --llamacpp-version current", field="llamacpp_version",
                          value="legacy", form=MESSAGE)
    if "mla" in kinds and getattr(model, "mla_cache", None) == "latent":
        raise KvcalcError(f"{model.name} is a GGUF converted for the MLA latent cache (key_length_mla, attn_k_b / "
                          "attn_v_b): llama.cpp before PR #12801 (legacy) fails to load it (\"missing tensor "
                          "'blk.0.attn_kv_b.weight'\"); use --llamacpp-version current", field="llamacpp_version",
                          value="legacy", form=MESSAGE)


def _current_caches(model: ModelSpec, lay: _Layers, requested: int, *, parallel: int, unified: bool, iswa: bool,
                    swa_full: bool, n_ubatch: int) -> _Caches:
    """llama.cpp b7000+: n_ctx = GGML_PAD(n_ctx, 256); one stream of n_ctx cells (unified) or
    n_seq_max streams of GGML_PAD(n_ctx / n_seq_max, 256); with sliding and full layers a
    non-SWA cache and an SWA cache of GGML_PAD(min(cells, n_swa x (unified ? n_seq_max : 1) +
    n_ubatch), 256). A model without attention layers gets no KV cache (no lines)."""
    buffers: dict[str, tuple[int, int]] = {}
    n_ctx_pad = pad(requested, N_CTX_PAD)
    if unified:
        n_stream, cells = 1, n_ctx_pad
    else:
        # llama.cpp's "n_ctx_seq == 0" error cannot fire here: n_ctx_pad >= 256 and parallel <= 256
        # (`_check_options`), so n_ctx_pad // parallel >= 1 and cells >= 256
        cells = pad(n_ctx_pad // parallel, N_CTX_PAD)
        n_stream, n_ctx_pad = parallel, cells * parallel
    if not lay.att:
        return _Caches([], 0, 0, n_stream, cells, n_ctx_pad, buffers)
    if not iswa:
        lines, k_tot, v_tot = lay.lines("llama_kv_cache", False, cells, n_stream, parallel, lay.att, buffers)
        return _Caches(lines, k_tot, v_tot, n_stream, cells, n_ctx_pad, buffers)
    sliding = [i for i in lay.att if model.layers[i].kind == "sliding"]
    window = max(model.layers[i].window or 0 for i in sliding)
    size_swa = pad(min(cells, window * (parallel if unified else 1) + n_ubatch), SWA_PAD)
    lines = []
    if swa_full:
        lines.append(f"llama_kv_cache_iswa: using full-size SWA cache (ref: {SWA_FULL_REF})")
        size_swa = cells
    base = [i for i in lay.att if model.layers[i].kind != "sliding"]
    lines.append(f"llama_kv_cache_iswa: creating non-SWA KV cache, size = {cells} cells")
    more, k_tot, v_tot = lay.lines("llama_kv_cache", False, cells, n_stream, parallel, base, buffers)
    lines += more
    lines.append(f"llama_kv_cache_iswa: creating     SWA KV cache, size = {size_swa} cells")
    more, k2, v2 = lay.lines("llama_kv_cache", False, size_swa, n_stream, parallel, sliding, buffers)
    lines += more
    return _Caches(lines, k_tot + k2, v_tot + v2, n_stream, cells, n_ctx_pad, buffers)


def _fill(c: _Caches, max_model_len: int | None, concurrency: int | None, parallel: int,
          has_kv: bool = True) -> tuple[float | None, int | None]:
    """(requests of `max_model_len` the cells hold, the longest context for `concurrency`):
    one stream shares its cells (cells / L, cells // concurrency); separate streams hold one
    sequence each (streams when a stream holds L, the stream's cells when concurrency fits).
    Without a KV cache (a recurrent model) every one of the `parallel` sequences holds any length."""
    total_cells = c.n_seq_cells * c.n_stream
    L = max_model_len
    if not has_kv:  # no attention layer: the state does not grow with the context
        return (float(parallel) if L else None,
                (None if concurrency <= parallel else 0) if concurrency else None)
    conc = None
    if L:
        conc = (total_cells / L) if c.n_stream == 1 else float(c.n_stream if c.n_seq_cells >= L else 0)
    longest = None
    if concurrency:
        longest = (total_cells // concurrency) if c.n_stream == 1 else (c.n_seq_cells if concurrency <= c.n_stream else 0)
    return conc, longest


def n_ctx_train(model: ModelSpec) -> int:
    """llama.cpp's `hparams.n_ctx_train`, which `-c 0` takes: the GGUF's `context_length`, which
    convert_hf_to_gguf.py writes from the config's max_position_embeddings. Raises `KvcalcError`
    (field `n_ctx`) when the config states none."""
    if model.max_position_embeddings is None:
        raise KvcalcError(f"-c 0 means the model's training context, but {model.name} states no "
                          "max_position_embeddings; give the context", field="n_ctx", value=0)
    return model.max_position_embeddings


def allocate(model: ModelSpec, n_ctx: int, k: StorageFormat, v: StorageFormat, *, parallel: int | None = None,
             unified: bool | None = None, version: str = "current", tool: str = DEFAULT_TOOL,
             flash_attn: bool | str | None = None, swa_full: bool | None = None,
             n_ubatch: int = DEFAULT_N_UBATCH, n_batch: int = DEFAULT_N_BATCH, n_gpu_layers: int | None = None,
             n_devices: int = 1, tensor_split: list[float] | None = None, ollama: bool = False,
             max_model_len: int | None = None, concurrency: int | None = None,
             kv_memory_bytes: int | None = None) -> EngineResult:
    """What llama.cpp allocates for `--ctx-size n_ctx` (0: the model's training context; ollama:
    n_ctx per sequence), with the lines it logs. `parallel`, `unified`, `swa_full` and
    `flash_attn` left None take `tool`'s defaults (`resolve_context`); `n_batch` caps `n_ubatch`.
    `engine_kv_bytes` is the KV cache; `engine_state_bytes` the recurrent state of mamba /
    linear layers (current). Raises `KvcalcError` for bad options, KV types llama.cpp lacks and
    combinations it refuses (`check_refusals`), with the option's field (`n_ctx`, `parallel`,
    `n_gpu_layers`, `k_dtype`, `v_dtype`, ...)."""
    ctx = resolve_context(tool=tool, version=version, parallel=parallel, unified=unified, swa_full=swa_full,
                          flash_attn=flash_attn)
    _check_options(n_ctx, parallel=ctx.parallel, n_ubatch=n_ubatch, n_batch=n_batch, version=version,
                   n_gpu_layers=n_gpu_layers, n_devices=n_devices)
    parallel = ctx.parallel
    refuse_indexer(model, "llama.cpp")
    tk, tv = ggml_name(k), ggml_name(v, field="v_dtype")
    legacy = version == "legacy"
    notes: list[str] = list(ctx.notes)
    flash_on = ctx.flash_attn
    if legacy:
        refuse_legacy(model)
        flash_on, forced_off = legacy_flash_attn(model, ctx.flash_attn)
        if forced_off:
            if tv in QUANTIZED:
                raise KvcalcError(f"llama.cpp refuses it: \"{forced_off}\", then \"llama_init_from_model: V cache "
                                  "quantization requires flash_attn\"; use an f16 V cache", field="v_dtype", value=tv)
            notes.append(forced_off.removeprefix("llama_init_from_model: "))
    check_refusals(model, tk, tv, flash_attn=flash_on, version=version)
    requested = n_ctx * parallel if ollama else n_ctx
    if ollama:  # ollama hands llama.cpp n_ctx x parallel cells: llama.cpp's 32-bit bound applies to the product
        from kvcalc.units import check_bound

        check_bound("n_ctx", requested or None, option=f"{flag('n_ctx')} {n_ctx} x {flag('parallel')} {parallel} =")
        notes.append(f"ollama passes n_ctx x OLLAMA_NUM_PARALLEL = {n_ctx:,} x {parallel:,} = {requested:,} to llama.cpp")
    if requested == 0:  # llama_context: n_ctx = params.n_ctx == 0 ? hparams.n_ctx_train : params.n_ctx
        requested = n_ctx_train(model)
        notes.append(f"-c 0: n_ctx = n_ctx_train = {requested:,} (the model's max_position_embeddings, "
                     "the GGUF's context_length)")
    # llama_context: n_batch = min(n_ctx, n_batch) (causal attention); n_ubatch = min(n_batch, n_ubatch)
    n_ubatch_eff = min(min(requested, n_batch), n_ubatch)
    mla = mla_cache(model, version)
    expanded = expanded_mla_layer(model) if mla == "expanded" and model.attention == "mla" else None
    att = [i for i, layer in enumerate(model.layers) if layer.caches_kv]
    if expanded is not None:
        notes.append("MLA cached as K and V per head (llama.cpp before the latent cache of April 2025, "
                     f"or a GGUF without key_length_mla): {model.n_heads} heads x "
                     f"{expanded.head_dim_k} K + {expanded.head_dim_v} V values per layer")
    per_cell = [layer_k_v_bytes_per_cell(expanded if expanded is not None and layer.kind == "mla" else layer, k, v)
                if layer.caches_kv else (0, 0) for layer in model.layers]
    dev = device_of_layers(model.n_layers, n_gpu_layers, tensor_split, n_devices)
    lay = _Layers(att, per_cell, dev, tk, tv, v_pad_line(model, ctx.flash_attn))
    kinds = {model.layers[i].kind for i in att}
    iswa = not legacy and "sliding" in kinds and len(kinds) > 1
    if "sliding" in kinds and not iswa:
        notes.append("sliding-window layers get the full cache size "
                     + ("(before llama.cpp PR #13194)" if legacy else "(no full layers: no SWA cache)"))
    c = (_legacy_caches(model, lay, requested, parallel, flash_on) if legacy else
         _current_caches(model, lay, requested, parallel=parallel, unified=ctx.unified, iswa=iswa,
                         swa_full=ctx.swa_full, n_ubatch=n_ubatch_eff))
    state_bytes = None
    if not legacy:
        more, state, more_notes = _recurrent_lines(model, dev, parallel)
        c.lines += more
        notes += more_notes
        state_bytes = state if more else None
    devices = [DeviceBuffer(device=d, n_layers=c.buffers[d][0], kv_bytes=c.buffers[d][1])
               for d in sorted(c.buffers, key=lambda s: (s == "CPU", s))]
    conc, longest = _fill(c, max_model_len, concurrency, parallel, has_kv=bool(att))
    kv_bytes = c.k_bytes + c.v_bytes
    total = kv_bytes + (state_bytes or 0)
    if kv_memory_bytes is not None and total > kv_memory_bytes:
        fit = largest_ctx_size(model, kv_memory_bytes, k, v, parallel=parallel, unified=ctx.unified, version=version,
                               tool=tool, flash_attn=ctx.flash_attn, swa_full=ctx.swa_full, n_ubatch=n_ubatch,
                               n_batch=n_batch, n_gpu_layers=n_gpu_layers, n_devices=n_devices,
                               tensor_split=tensor_split, ollama=ollama)
        what = "of KV cache" + (" and recurrent state" if state_bytes else "")
        msg = (f"{flag('n_ctx')} {n_ctx} allocates {mib_f32(total):.2f} MiB {what}, more than "
               f"{flag('kv_memory_bytes')} {mib_f32(kv_memory_bytes):.2f} MiB: llama.cpp would fail to allocate "
               "the KV buffer on a device that size; "
               + (f"the largest {flag('n_ctx')} that fits is {fit}" if fit else "not even 256 cells fit"))
        notes.append(msg)
        warnings.warn(msg, KvcalcWarning, stacklevel=2)
    return EngineResult(
        engine="llamacpp", engine_version=f"llama.cpp ({version})", kv_memory_bytes=kv_memory_bytes,
        kv_cache_dtype=tk if tk == tv else f"{tk}/{tv}", kv_cache_tokens=c.n_seq_cells * c.n_stream,
        engine_kv_bytes=kv_bytes, engine_state_bytes=state_bytes, max_model_len=max_model_len,
        max_concurrency=conc, concurrency=concurrency, longest_context=longest, n_cells=c.n_seq_cells * c.n_stream,
        n_ctx=c.n_ctx, k_bytes=c.k_bytes, v_bytes=c.v_bytes, devices=devices, log_lines=c.lines, notes=notes)


def largest_ctx_size(model: ModelSpec, kv_memory_bytes: int, k: StorageFormat, v: StorageFormat, **options) -> int:
    """The largest `--ctx-size` (a multiple of 256, ollama: per sequence) whose cache and
    recurrent state fit in `kv_memory_bytes` (summed over devices); 0 when not even 256 cells fit."""
    opts = {key: val for key, val in options.items()
            if key not in ("max_model_len", "concurrency", "kv_memory_bytes")}

    def fits(units: int) -> bool:
        r = allocate(model, units * N_CTX_PAD, k, v, **opts)
        return r.engine_kv_bytes + (r.engine_state_bytes or 0) <= kv_memory_bytes

    units = longest_fitting(fits, SEARCH_LIMIT_TOKENS // N_CTX_PAD)
    return (SEARCH_LIMIT_TOKENS // N_CTX_PAD if units is None else units) * N_CTX_PAD


def capacity(model: ModelSpec, kv_memory_bytes: int, k: StorageFormat, v: StorageFormat, **options) -> EngineResult:
    """The largest `--ctx-size` (`largest_ctx_size`) and what llama.cpp allocates for it.
    Raises `KvcalcError` when not even 256 cells fit."""
    n_ctx = largest_ctx_size(model, kv_memory_bytes, k, v, **options)
    if n_ctx == 0:
        raise KvcalcError(f"{kv_memory_bytes:,} B does not hold even 256 cells of {model.name}'s cache",
                          field="kv_memory_bytes", value=kv_memory_bytes, form=MESSAGE)
    res = allocate(model, n_ctx, k, v, kv_memory_bytes=kv_memory_bytes, **options)
    return res.model_copy(update={"notes": res.notes + [f"largest --ctx-size that fits: {n_ctx:,} cells (-c {n_ctx})"]})
