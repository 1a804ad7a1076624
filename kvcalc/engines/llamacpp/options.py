"""llama.cpp's options object (`LlamacppOptions`): the context flags kvcalc models, and the version."""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.engines import defaults


@dataclass(frozen=True)
class LlamacppOptions:
    """llama.cpp's context options, as `llamacpp.allocate` / `llamacpp.capacity` take them.

    - `n_ctx`: `--ctx-size` (0: the model's training context; ollama: per sequence); None:
      `capacity` searches the largest that fits.
    - `tool`: the program whose defaults fill what is None (`llamacpp.TOOLS`: 'llama-server',
      'llama-cli', 'library'; `LlamacppRules.resolve_context`).
    - `parallel`: `--parallel` (n_seq_max; None: the tool's: llama-server 4); `unified`:
      `--kv-unified` (one stream for all sequences; None: the tool's: llama-server unified only
      without `-np`).
    - `version`: 'current' (b7000+) or 'legacy' ('KV self size'), `llamacpp.VERSIONS`; the one
      place the version is chosen (`llamacpp.rules(version)`). `flash_attn`: `-fa` 'on', 'off'
      or 'auto' (None: auto, legacy off; True / False are on / off).
    - `swa_full` (None: the tool's; the library's is on), `n_ubatch`, `n_batch` (`-b`, caps
      n_ubatch): sliding-window cache size; `n_gpu_layers`, `n_devices`, `tensor_split`: how
      layers are split over devices; `ollama`: n_ctx x parallel cells.
    """

    n_ctx: int | None = None
    parallel: int | None = None
    unified: bool | None = None
    version: str = "current"
    tool: str = "llama-server"
    flash_attn: bool | str | None = None
    swa_full: bool | None = None
    n_ubatch: int = defaults.LLAMACPP_N_UBATCH
    n_batch: int = defaults.LLAMACPP_N_BATCH
    n_gpu_layers: int | None = None
    n_devices: int = 1
    tensor_split: tuple[float, ...] | None = None
    ollama: bool = False
