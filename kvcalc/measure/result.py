"""The result model of `kvcalc measure` (no torch needed to read it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class MeasureResult(BaseModel):
    """The result of `kvcalc measure` (its JSON keys are a public contract).

    Bytes are of the layers measured (`layers_measured` of `n_layers`); `model_kv_bytes` is the
    engine's figure for the whole model, and `model_step_s_median` the measured median scaled
    to the whole model by KV bytes read (equal to the median when every layer was measured).
    `predicted_step_s` = bytes read per step / the bandwidth probed in this run (calibrated);
    `predicted_step_s_table` uses the GPU table's bandwidth (None on a CPU or an unknown GPU).
    `error_percent` = 100 x (predicted - measured) / measured. Memory fields that do not apply
    on this device are None.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    device: str
    device_name: str
    backend: str
    kv_dtype: str
    compute_dtype: str
    seq_len: int
    batch: int
    n_layers: int
    layers_measured: int
    layer_indices: list[int]
    steps: int
    warmup_steps: int
    cuda_graph: bool
    with_weights: bool
    predicted_kv_bytes: int
    measured_kv_bytes: int
    kv_bytes_equal: bool
    model_kv_bytes: int
    allocator_requested_delta_bytes: int | None
    allocator_allocated_delta_bytes: int | None
    allocator_allocated_expected_bytes: int | None
    device_used_delta_bytes: int | None
    nvml_used_delta_bytes: int | None
    cuda_context_bytes: int | None
    rss_delta_bytes: int | None
    weight_bytes: int
    bytes_read_per_step: int
    predicted_step_s: float
    predicted_step_s_table: float | None
    measured_step_s_median: float
    measured_step_s_p10: float
    measured_step_s_p90: float
    model_step_s_median: float
    achieved_bytes_per_s: float
    probe_bytes: int
    probe_bytes_per_s: float
    table_gpu: str | None
    table_bytes_per_s: float | None
    fraction_of_probe: float
    fraction_of_table: float | None
    error_percent: float
    error_percent_table: float | None
    notes: list[str]
