"""What the llama.cpp versions modelled share: cells, rows, padding, the per-device split,
recurrent state sizes, the checks, the log lines of one cache, and how many requests fit.

Each version module (`current`, `legacy`) builds on these; a rule that differs between versions
lives in the version's module. Sources are llama.cpp's files (both versions unless named):

K of one layer is a tensor of (n_embd_k_gqa, cells, streams) in type_k: ggml_row_size(type_k,
n_embd_k_gqa) x cells x streams bytes (`layer_k_v_bytes_per_cell`); V alike.
The MiB figures are `(float)bytes / (1024.0f * 1024.0f)`, so they are computed in float32 here.

Layers to devices, `src/llama-model.cpp` `load_tensors`: the last n_gpu_layers layers are
offloaded (i_gpu_start = max(n_layer - n_gpu_layers, 0); act = min(n_gpu_layers, n_layer + 1),
the +1 being the output layer); layer il goes to device upper_bound(splits, (il - i_gpu_start) /
act) where splits are the cumulative, normalised `--tensor-split` (default: each device's free
memory; kvcalc assumes equal devices). A layer's K and V live on its device (`--no-kv-offload` not
modelled). ollama passes n_ctx x OLLAMA_NUM_PARALLEL as llama.cpp's n_ctx (`ollama=True`).

Defaults: `--cache-type-k/-v` default f16 whatever the model's dtype (`common/common.h`:
`ggml_type cache_type_k = GGML_TYPE_F16;`), so `default_kv_dtype` is f16; `-b` n_batch 2048 and
`-ub` n_ubatch 512 (`common/common.h`); `-ngl -1` is "use the default" (`common/common.h`
`n_gpu_layers = -1; // ... (-1 - use default)`), modelled as every layer offloaded.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass

from kvcalc.engines import defaults
from kvcalc.errors import MESSAGE, OPTION, OPTION_SAYS, KvcalcError, flag
from kvcalc.formats import StorageFormat
from kvcalc.schema import LayerSpec, ModelSpec

N_CTX_PAD = 256
#: src/llama-kv-cache-iswa.cpp: "the SWA cache is always padded to 256 for performance"
SWA_PAD = 256
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
GGML_NAMES: dict[str, str] = {
    "fp32": "f32",
    "fp16": "f16",
    "bf16": "bf16",
    "q8_0": "q8_0",
    "q4_0": "q4_0",
    "q4_1": "q4_1",
    "q5_0": "q5_0",
    "q5_1": "q5_1",
    "iq4_nl": "iq4_nl",
}


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


#: the llama.cpp release whose `common/arg.cpp` `kv_cache_types` `GGML_NAMES` lists (the current
#: rules' `current.CURRENT_COMMIT`, tests/engines/test_launch_lines.py holds them equal)
KV_TYPES_COMMIT = "0c1e570"


class NoGgmlTypeError(KvcalcError):
    """A KV format llama.cpp has no cache type for (`common/arg.cpp` `kv_cache_types`), named
    as typed where the caller knows it (`named`): `--kv-dtype: llama.cpp 0c1e570 has no 'fp8' KV cache
    type; use one of ...`."""

    def __init__(self, name: str, field: str) -> None:
        super().__init__(
            f"llama.cpp {KV_TYPES_COMMIT} has no '{name}' KV cache type",
            fix=f"use one of {', '.join(GGML_NAMES.values())}",
            field=field,
            value=name,
            form=OPTION,
        )

    def named(self, name: str | None, field: str) -> NoGgmlTypeError:
        """The same refusal for the name as the user typed it (None: this one's) under `field`."""
        return NoGgmlTypeError(name or str(self.value), field)


def ggml_name(f: StorageFormat, *, field: str = "k_dtype") -> str:
    """The ggml type name of a KV format; raises `NoGgmlTypeError` (field `field`: `k_dtype` or
    `v_dtype`) for one llama.cpp lacks."""
    if f.name not in GGML_NAMES:
        raise NoGgmlTypeError(f.name, field)
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
    return (
        k.bytes_for(layer.n_kv_heads * layer.head_dim_k, what="K row", field="k_dtype"),
        v.bytes_for(layer.n_kv_heads * layer.head_dim_v, what="V row", field="v_dtype"),
    )


def expanded_mla_layer(model: ModelSpec) -> LayerSpec:
    """An MLA layer as llama.cpp cached it before the latent cache: K of n_heads x
    (qk_nope_head_dim + qk_rope_head_dim) values and V of n_heads x v_head_dim per cell
    (`src/llama-model.cpp`: n_embd_head_k = qk_nope + qk_rope, n_embd_head_v = v_head_dim,
    n_head_kv = n_head). Raises `KvcalcError` (field `qk_nope_head_dim` / `v_head_dim`) when the
    config does not give them."""
    nope, rope, dv = model.qk_nope_head_dim, model.qk_rope_head_dim, model.v_head_dim
    missing = [f for f, v in (("qk_nope_head_dim", nope), ("v_head_dim", dv)) if v is None]
    if missing or nope is None or dv is None:
        raise KvcalcError(
            f"{model.name}: the expanded MLA cache (llama.cpp before April 2025, or a GGUF without "
            f"key_length_mla) needs {' and '.join(missing)} in the config",
            field=missing[0],
            form=MESSAGE,
        )
    if rope is None:  # ModelSpec refuses attention: mla without qk_rope_head_dim
        raise KvcalcError(
            f"{model.name}: the expanded MLA cache needs qk_rope_head_dim in the config",
            field="qk_rope_head_dim",
            form=MESSAGE,
        )
    return LayerSpec(kind="full", n_kv_heads=model.n_heads, head_dim_k=nope + rope, head_dim_v=dv)


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
    # state_values > 0: ModelSpec._state_values found every size below set (None never reaches the sums)
    d_inner_factors: tuple[int | None, int | None]
    n_group: int | None
    if layer.kind in ("mamba", "hybrid"):  # hybrid (Falcon-H1): the Mamba-2 mixer beside the attention
        d_state, d_conv = m.mamba_d_state, m.mamba_d_conv
        if m.mamba_n_groups is not None:
            d_inner_factors, n_group = (m.mamba_n_heads, m.mamba_head_dim), m.mamba_n_groups
        else:
            d_inner_factors, n_group = (m.mamba_expand, m.hidden_size), 0
    else:
        d_inner_factors = (m.linear_num_value_heads, m.linear_value_head_dim)
        n_group, d_state, d_conv = m.linear_num_key_heads, m.linear_key_head_dim, m.linear_conv_kernel_dim
    a, b = d_inner_factors
    if a is None or b is None or n_group is None or d_state is None or d_conv is None:
        return 0, 0
    d_inner = a * b
    return (d_conv - 1) * (d_inner + 2 * n_group * d_state), d_state * d_inner


def device_of_layers(
    n_layer: int, n_gpu_layers: int | None, splits: list[float] | None, n_devices: int = 1
) -> list[int]:
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


def device_name(d: int) -> str:
    return "CPU" if d < 0 else f"CUDA{d}"


def cache_lines(
    prefix: str,
    cells: int,
    n_stream: int,
    n_seq_max: int,
    layers: list[int],
    per_cell: list[tuple[int, int]],
    dev: list[int],
    tk: str,
    tv: str,
    buffers: dict[str, tuple[int, int]],
    *,
    cpu_last: bool = False,
    size_line: bool = True,
) -> tuple[list[str], int, int]:
    """Log lines of one llama_kv_cache over `layers` (indices), adding to `buffers`; (lines, K, V).
    The buffer lines by device name (`cpu_last`: the CPU's last), then (`size_line`) the
    "llama_kv_cache: size = ..." line."""
    own: dict[str, tuple[int, int]] = {}
    k_tot = v_tot = 0
    for il in layers:
        kb, vb = per_cell[il]
        kb, vb = kb * cells * n_stream, vb * cells * n_stream
        name = device_name(dev[il])
        n, b = own.get(name, (0, 0))
        own[name] = (n + 1, b + kb + vb)
        k_tot += kb
        v_tot += vb
    order = sorted(own, key=lambda s: (s == "CPU", s)) if cpu_last else sorted(own)
    lines = []
    for name in order:
        lines.append(f"{prefix}: {name:>10} KV buffer size = {own[name][1] / 2**20:8.2f} MiB")
        n, b = buffers.get(name, (0, 0))
        buffers[name] = (n + own[name][0], b + own[name][1])
    if size_line:
        lines.append(
            f"llama_kv_cache: size = {mib_f32(k_tot + v_tot):7.2f} MiB ({cells:6d} cells, "
            f"{len(layers):3d} layers, {n_seq_max:2d}/{n_stream} seqs), K ({tk}): {mib_f32(k_tot):7.2f} MiB, "
            f"V ({tv}): {mib_f32(v_tot):7.2f} MiB"
        )
    return lines, k_tot, v_tot


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


def check_options(
    n_ctx: int,
    *,
    parallel: int,
    n_ubatch: int,
    n_batch: int,
    n_gpu_layers: int | None,
    n_devices: int,
    max_seq: int | None = None,
) -> None:
    """Raise `KvcalcError` (field: the option's) for options llama.cpp refuses or kvcalc cannot
    read; `max_seq`: the most sequences llama.cpp takes (None: no limit)."""
    if n_ctx < 0:
        raise KvcalcError(
            f"must be 0 (the model's training context) or a count of tokens, got {n_ctx}",
            field="n_ctx",
            value=n_ctx,
            form=OPTION_SAYS,
        )
    bad = [(f, x) for f, x in (("parallel", parallel), ("n_ubatch", n_ubatch)) if x <= 0]
    if bad:
        raise KvcalcError(
            f"{flag('parallel')} and {flag('n_ubatch')} must be positive",
            field=bad[0][0],
            value=bad[0][1],
            form=MESSAGE,
        )
    if n_batch <= 0:
        raise KvcalcError(
            f"must be a positive integer, got {n_batch}",
            option="--batch-size",
            field="n_batch",
            value=n_batch,
            form=OPTION_SAYS,
        )
    if max_seq is not None and parallel > max_seq:
        raise KvcalcError(
            f"llama.cpp refuses it: n_seq_max must be <= {max_seq} (src/llama-context.cpp, LLAMA_MAX_SEQ)",
            field="parallel",
            value=parallel,
        )
    if n_gpu_layers is not None and n_gpu_layers < -1:
        raise KvcalcError(
            "use a count >= 0, or -1 for llama.cpp's default (all layers)", field="n_gpu_layers", value=n_gpu_layers
        )
    if n_devices < 1:
        raise KvcalcError(
            f"must be a positive integer, got {n_devices} (for a CPU-only cache use {flag('n_gpu_layers')} 0)",
            field="n_devices",
            value=n_devices,
            form=OPTION_SAYS,
        )
    from kvcalc.units import check_bound  # the one set of bounds (n_ctx: llama.cpp's int32)

    for field, value in (
        ("n_ctx", n_ctx or None),
        ("parallel", parallel),
        ("n_ubatch", n_ubatch),
        ("n_gpu_layers", n_gpu_layers),
        ("n_devices", n_devices),
    ):
        check_bound(field, value)
    check_bound("n_batch", n_batch, option="--batch-size")  # an int32, as -ub (common/arg.cpp std::stoi)


#: values per block of the quantized KV types (ggml.c type_traits blck_size: QK8_0 = QK4_0 = ... = 32)
QUANT_BLOCK = 32


def head_sizes(model: ModelSpec, mla: str = "latent") -> list[tuple[int, int]]:
    """(n_embd_head_k, n_embd_head_v) of each attention layer as llama.cpp sees it: the head's
    K and V values (`src/llama-hparams.cpp`); an MLA model with its latent cache: K the latent
    (kv_lora_rank + rope), V the kv_lora_rank (the GGUF's key_length / value_length); the
    expanded MLA cache (`mla` 'expanded'): nope + rope and v_head_dim."""
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
        raise KvcalcError(
            f"share {bad[0]!r} is not a finite number; give {n_devices} shares such as 63,37",
            field="tensor_split",
            value=",".join(str(s) for s in raw),
            form=OPTION,
        )
    if len(raw) != n_devices or any(s < 0 for s in raw) or sum(raw) <= 0:
        raise KvcalcError(
            f"needs {n_devices} non-negative values that do not all vanish",
            field="tensor_split",
            value=splits,
            form=OPTION_SAYS,
        )


@dataclass(frozen=True)
class Layers:
    """What every cache of one allocation is built from: the indices of the layers that cache
    K and V, each layer's (K, V) bytes per cell and device (-1 = CPU), and the ggml type names."""

    att: list[int]
    per_cell: list[tuple[int, int]]
    dev: list[int]
    tk: str
    tv: str
    pad_v_line: str | None = None

    def lines(
        self,
        prefix: str,
        cells: int,
        n_stream: int,
        n_seq_max: int,
        layers: list[int],
        buffers: dict[str, tuple[int, int]],
    ) -> tuple[list[str], int, int]:
        """`cache_lines` of one cache over `layers`, after the V padding warning when there is one."""
        lines, k_tot, v_tot = cache_lines(
            prefix, cells, n_stream, n_seq_max, layers, self.per_cell, self.dev, self.tk, self.tv, buffers
        )
        return ([self.pad_v_line] if self.pad_v_line else []) + lines, k_tot, v_tot


def _v_widths(model: ModelSpec) -> list[int]:
    """head_count_kv(il) x value_length(il) of every layer that caches K and V (not MLA)."""
    return [layer.n_kv_heads * layer.head_dim_v for layer in model.layers if layer.caches_kv and layer.kind != "mla"]


def v_pad_line(model: ModelSpec, flash_attn: bool) -> str | None:
    """The warning `llama_kv_cache` logs before its buffers when flash attention is off (V is
    stored transposed) and the V width, head_count_kv(il) x value_length(il), differs between
    layers (`llama_hparams::is_n_embd_v_gqa_variable`, `src/llama-kv-cache.cpp` 158-161
    [TAG_V_CACHE_VARIABLE]): "the V embeddings have different sizes across layers and FA is not
    enabled - padding V cache to %d" (the widest). A Mamba hybrid's GGUF gives head_count_kv per
    layer, 0 on the Mamba layers (Jamba, Nemotron-H, Granite-4 hybrid: `convert_hf_to_gguf.py`),
    so its V width varies though its attention layers' do not (the padding adds no bytes);
    Gated-DeltaNet hybrids (Qwen3-Next, Qwen3.5) give one count for all layers and do not. Gemma-4
    and MiMo-V2 have wider sliding layers than full ones: `pad_v_rows` gives the bytes. Kimi-K3 /
    Kimi-Linear (MLA beside KDA layers): the converter writes head_count_kv 0 on the KDA layers and
    1 on the MLA ones, whose V width is 1 x kv_lora_rank (`src/models/kimi-k3.cpp`:
    n_embd_head_v_full = n_lora_kv), so llama.cpp warns "padding V cache to 512" though the latent
    cache keeps no V (the tests/oracle grid, -fa off). None when there is no warning."""
    widths = _v_widths(model)
    mamba = any(layer.kind == "mamba" for layer in model.layers)
    kinds = {layer.kind for layer in model.layers}
    if kinds == {"mla", "linear"} and model.kv_lora_rank:  # Kimi's KDA hybrid: head_count_kv 0 on the KDA layers
        widths, mamba = [model.kv_lora_rank], True
    if flash_attn or not widths or (not mamba and len(set(widths)) == 1):
        return None
    return (
        "llama_kv_cache: the V embeddings have different sizes across layers and FA is not enabled - "
        f"padding V cache to {max(widths)}"
    )


def pad_v_rows(model: ModelSpec, per_cell: list[tuple[int, int]], v: StorageFormat) -> list[tuple[int, int]]:
    """`per_cell` with flash attention off: every attention layer's V row is n_embd_v_gqa_max()
    values (`src/llama-kv-cache.cpp` 209-210: n_embd_v_gqa = !v_trans ? hparams.n_embd_v_gqa(il) :
    hparams.n_embd_v_gqa_max()), the widest layer's; unchanged when the widths agree. Gemma-4-26B,
    -fa off: its full layers' V of 2 x 512 is stored as 8 x 256 = 2,048 values."""
    widths = _v_widths(model)
    if len(set(widths)) <= 1:
        return per_cell
    row = v.bytes_for(max(widths), what="V row", field="v_dtype")
    return [
        (kb, row if layer.caches_kv and layer.kind != "mla" else vb)
        for (kb, vb), layer in zip(per_cell, model.layers, strict=True)
    ]


@dataclass
class Caches:
    """The caches of one allocation: their log lines, K and V bytes over every cache, streams,
    cells per stream, llama.cpp's final n_ctx and the bytes per device (name -> (layers, bytes))."""

    lines: list[str]
    k_bytes: int
    v_bytes: int
    n_stream: int
    n_seq_cells: int
    n_ctx: int
    buffers: dict[str, tuple[int, int]]


def fill(
    c: Caches, max_model_len: int | None, concurrency: int | None, parallel: int, has_kv: bool = True
) -> tuple[float | None, int | None]:
    """(requests of `max_model_len` the cells hold, the longest context for `concurrency`):
    one stream shares its cells (cells / L, cells // concurrency); separate streams hold one
    sequence each (streams when a stream holds L, the stream's cells when concurrency fits).
    Without a KV cache (a recurrent model) every one of the `parallel` sequences holds any length."""
    total_cells = c.n_seq_cells * c.n_stream
    L = max_model_len
    if not has_kv:  # no attention layer: the state does not grow with the context
        return (float(parallel) if L else None, (None if concurrency <= parallel else 0) if concurrency else None)
    conc = None
    if L:
        conc = (total_cells / L) if c.n_stream == 1 else float(c.n_stream if c.n_seq_cells >= L else 0)
    longest = None
    if concurrency:
        longest = (
            (total_cells // concurrency) if c.n_stream == 1 else (c.n_seq_cells if concurrency <= c.n_stream else 0)
        )
    return conc, longest


def n_ctx_train(model: ModelSpec) -> int:
    """llama.cpp's `hparams.n_ctx_train`, which `-c 0` takes: the GGUF's `context_length`, which
    convert_hf_to_gguf.py writes from the config's max_position_embeddings. Raises `KvcalcError`
    (field `n_ctx`) when the config states none."""
    if model.max_position_embeddings is None:
        raise KvcalcError(
            f"-c 0 means the model's training context, but {model.name} states no "
            "max_position_embeddings; give the context",
            field="n_ctx",
            value=0,
        )
    return model.max_position_embeddings
