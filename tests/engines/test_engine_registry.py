"""The engine registry (`kvcalc/engines/__init__.py`): `profile(name)` imports the engine's
module by its name or an alias; an unknown name is refused with the names it may mean."""

from __future__ import annotations

import pytest

from kvcalc import engines
from kvcalc.engines import ideal, llamacpp, sglang, vllm
from kvcalc.errors import UnknownNameError


@pytest.mark.parametrize("name, module", [("vllm", vllm), ("SGLang", sglang), (" llama.cpp ", llamacpp),
                                          ("llama_cpp", llamacpp), ("exact", ideal), ("none", ideal)])
def test_profile_imports_the_module(name, module):
    assert engines.profile(name) is module


def test_profile_refuses_an_unknown_engine():
    with pytest.raises(UnknownNameError) as e:
        engines.profile("vlm")
    assert str(e.value).startswith("unknown engine 'vlm'")
    assert "vllm" in str(e.value)
