"""The oracle tests run only when asked for: `pytest -m oracle tests/oracle` (they need
llama-cpp-python, `tools/install_llama_cpp_oracle.sh`, and take a minute or two). In any other run
they are reported as skipped with that reason, so the default `pytest` stays fast whether or not
the engine is installed."""

from __future__ import annotations

import pytest

REASON = "engine oracle (llama.cpp, vLLM): run it with `pytest -m oracle tests/oracle` (docs/engine-oracles.md)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "oracle" in (config.getoption("markexpr") or "").replace("not oracle", ""):
        return
    for item in items:
        if item.get_closest_marker("oracle") is not None:
            item.add_marker(pytest.mark.skip(reason=REASON))
