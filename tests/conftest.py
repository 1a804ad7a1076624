"""Shared test infrastructure: a pinned terminal width, small hand-written model specs, the CLI
runner, and a derandomized hypothesis profile.

Terminal width: rich sizes tables from `COLUMNS` (else 80 when stdout is not a terminal). The
suite was written against 80 columns: at 60 or 40 the tables wrap the figures some tests look
for (`test_table_shows_formula_and_both_units`, the measure table), so 80 is pinned here for the
whole session, subprocesses included, whatever the machine's terminal says. A test that needs
another width passes `env={"COLUMNS": ...}` to the runner for that one call.

Specs (each small enough to work out by hand; bytes per token in bf16 given beside each):

- `gqa_spec`: 4 layers, 8 query heads on 2 KV heads, head_dim 64: 2 x 4 x 2 x 64 x 2 B = 2,048 B/token
- `mqa_spec`: 2 layers, 4 query heads on 1 KV head, head_dim 32: 2 x 2 x 1 x 32 x 2 B = 256 B/token
- `mla_spec`: 3 layers, latent 64 + 16 = 80 values: 3 x 80 x 2 B = 480 B/token (no factor 2)
- `sliding_spec`: 6 layers, pattern (sliding, sliding, full), window 256, 4 heads on 2 KV heads
  of 32: 256 B per layer per token, 1,536 B/token while inside the window
- `hybrid_spec`: 4 layers, pattern (mamba, mamba, mamba, full), 4 heads on 2 KV heads of 32,
  hidden 128: only the one full layer caches: 2 x 1 x 2 x 32 x 2 B = 256 B/token
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from kvcalc.schema import ModelSpec

#: the width every test runs at (see the module docstring).
TEST_COLUMNS = "80"

# Set at import: the root conftest is imported before any test module, so no Console (and no
# subprocess a test starts) sees the machine's own terminal width.
os.environ["COLUMNS"] = TEST_COLUMNS
os.environ.pop("FORCE_COLOR", None)  # colour codes would break the text comparisons
os.environ.pop("KVCALC_DEBUG", None)  # would turn every one-line error into a traceback

try:
    from hypothesis import HealthCheck, settings

    # Derandomized so CI is repeatable; no example database written into the repo.
    settings.register_profile(
        "kvcalc",
        derandomize=True,
        deadline=None,
        max_examples=100,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.load_profile("kvcalc")
except ImportError:  # pragma: no cover - hypothesis is a dev dependency
    pass


# ----- specs ---------------------------------------------------------------------------------


@pytest.fixture
def gqa_spec() -> ModelSpec:
    """4 layers, 8 query heads sharing 2 KV heads (group 4), head_dim 64, bf16, 4,096 positions."""
    return ModelSpec(name="t-gqa", n_layers=4, n_heads=8, n_kv_heads=2, head_dim=64, max_position_embeddings=4096)


@pytest.fixture
def mqa_spec() -> ModelSpec:
    """2 layers, 4 query heads on 1 KV head, head_dim 32, bf16."""
    return ModelSpec(name="t-mqa", n_layers=2, n_heads=4, n_kv_heads=1, head_dim=32, max_position_embeddings=2048)


@pytest.fixture
def mla_spec() -> ModelSpec:
    """3 MLA layers, kv_lora_rank 64 + qk_rope_head_dim 16 = an 80-value latent, 4 query heads."""
    return ModelSpec(
        name="t-mla",
        n_layers=3,
        n_heads=4,
        attention="mla",
        kv_lora_rank=64,
        qk_rope_head_dim=16,
        max_position_embeddings=2048,
    )


@pytest.fixture
def sliding_spec() -> ModelSpec:
    """6 layers (sliding, sliding, full) x 2, window 256, 4 heads on 2 KV heads of 32, bf16."""
    return ModelSpec(
        name="t-swa",
        n_layers=6,
        n_heads=4,
        n_kv_heads=2,
        head_dim=32,
        sliding_window=256,
        layer_pattern=["sliding", "sliding", "full"],
        max_position_embeddings=8192,
    )


@pytest.fixture
def hybrid_spec() -> ModelSpec:
    """4 layers (mamba, mamba, mamba, full), 4 heads on 2 KV heads of 32, hidden 128; the mamba
    state is sized (d_state 16, d_conv 4, expand 2)."""
    return ModelSpec(
        name="t-hybrid",
        n_layers=4,
        n_heads=4,
        n_kv_heads=2,
        head_dim=32,
        hidden_size=128,
        layer_pattern=["mamba", "mamba", "mamba", "full"],
        mamba_d_state=16,
        mamba_d_conv=4,
        mamba_expand=2,
        max_position_embeddings=4096,
    )


@pytest.fixture
def write_spec(tmp_path) -> Callable[[ModelSpec], str]:
    """Write a spec as a kvcalc YAML (as `kvcalc import` does) and return its path."""
    from kvcalc.load.export import spec_to_yaml

    def write(spec: ModelSpec) -> str:
        p = tmp_path / f"{spec.name}.yaml"
        p.write_text(spec_to_yaml(spec))
        return str(p)

    return write


# ----- the CLI -------------------------------------------------------------------------------


@pytest.fixture
def cli():
    """Run `kvcalc ARGS...` in-process: `cli("estimate", "gpt2", "-f", "json")` returns click's
    `Result` with `exit_code`, `stdout` and `stderr` apart (`output` is both, interleaved).
    Keyword `env` adds environment variables for that call (e.g. `env={"COLUMNS": "100"}`)."""
    from typer.testing import CliRunner

    from kvcalc.cli import app

    runner = CliRunner()

    def run(*args: str, env: dict[str, str] | None = None, input: str | None = None):
        return runner.invoke(app, [str(a) for a in args], env=env, input=input)

    return run
