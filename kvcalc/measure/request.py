"""`MeasureRequest`: everything one `kvcalc measure` run is asked to do, as one frozen object
(torch-free: the CLI builds it before torch is imported)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from kvcalc.formats import StorageFormat
from kvcalc.schema import ModelSpec


class MeasureRequest(BaseModel):
    """One measurement: `model`'s cache at `seq_len` tokens x `batch` sequences, K stored in
    `k_format` and V in `v_format` (the same format twice for one --kv-dtype). `seq_len` None:
    a size that runs in seconds on the device (`kvcalc.measure.defaults.default_seq_len`),
    resolved by `run` once it has read the device.

    `device` is 'auto', 'cuda' or 'cpu'; `layers` the number of caching layers to measure
    (None: all); `steps` the timed decode steps (None: 30 on a GPU, 8 on the CPU; a GPU run
    raises fewer to 30); `backend` 'auto', 'sdpa', 'matmul' or 'flash'; `with_weights` times
    whole decoder layers with random weights; `cuda_graph` captures one step and replays it.
    Device, backend and format support are checked by `kvcalc.measure.run` (KvcalcError), where
    torch can tell; counts must be positive (pydantic ValidationError).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: ModelSpec
    seq_len: int | None = Field(default=None, gt=0)
    batch: int = Field(gt=0)
    k_format: StorageFormat
    v_format: StorageFormat
    device: str = "auto"
    layers: int | None = Field(default=None, gt=0)
    steps: int | None = Field(default=None, gt=0)
    backend: str = "auto"
    with_weights: bool = False
    cuda_graph: bool = False
