"""The engine registry (`kvcalc/engines/__init__.py`): `canonical(name)` resolves a name or an
alias (any case, spaces around it) to its registry key, whose `ENGINES` entry is the engine's
module; an unknown name is refused with the names it may mean."""

from __future__ import annotations

import importlib

import pytest

from kvcalc import engines
from kvcalc.engines import ideal, llamacpp, sglang, vllm
from kvcalc.errors import UnknownNameError


@pytest.mark.parametrize(
    "name, key, module",
    [
        ("vllm", "vllm", vllm),
        ("SGLang", "sglang", sglang),
        (" llama.cpp ", "llamacpp", llamacpp),
        ("llama_cpp", "llamacpp", llamacpp),
        ("LLAMA-CPP", "llamacpp", llamacpp),
        ("exact", "ideal", ideal),
        ("none", "ideal", ideal),
    ],
)
def test_canonical_names_the_module(name, key, module):
    assert engines.canonical(name) == key
    assert importlib.import_module(engines.ENGINES[key]) is module


def test_unknown_engine_refused():
    with pytest.raises(UnknownNameError) as e:
        engines.canonical("vlm")
    assert e.value.message.startswith("unknown engine 'vlm'") and str(e.value).startswith("--engine: ")
    assert "vllm" in str(e.value)
