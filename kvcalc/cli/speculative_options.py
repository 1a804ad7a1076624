"""The speculative-decoding options of `kvcalc estimate` (`calc.speculative`), under the
engines' own flags: vLLM 0.33.0's `--speculative-config '{"method": ..., "num_speculative_tokens":
k, "model": ...}'` (`vllm/config/speculative.py`), SGLang 0.5.23's `--speculative-algorithm`,
`--speculative-num-steps`, `--speculative-draft-model-path` (`server_args.py`), and kvcalc's
`--accepted-len` (the mean tokens a verify step emits: the user's figure, never assumed)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Optional

import typer

from kvcalc.cli.options import OptionGroup

#: SGLang algorithm -> kvcalc / vLLM method
_FROM_SGLANG = {"NEXTN": "mtp", "EAGLE": "eagle", "EAGLE3": "eagle3", "STANDALONE": "draft_model", "NGRAM": "ngram"}


class SpeculativeOptions(OptionGroup):
    """--speculative-config (vLLM), --speculative-algorithm / --speculative-num-steps /
    --speculative-draft-model-path (SGLang), --accepted-len (kvcalc)."""

    speculative_config: Annotated[Optional[str], typer.Option("--speculative-config", "-sc", help="vLLM's speculative config as JSON: method (mtp, eagle, eagle3, draft_model, ngram), num_speculative_tokens, model (the draft). Needs --gpu.")] = None
    speculative_algorithm: Annotated[Optional[str], typer.Option("--speculative-algorithm", help="SGLang: NEXTN (MTP), EAGLE, EAGLE3, STANDALONE, NGRAM.")] = None
    speculative_num_steps: Annotated[Optional[int], typer.Option("--speculative-num-steps", help="SGLang: draft steps (tokens proposed per verify step).")] = None
    speculative_draft_model_path: Annotated[Optional[str], typer.Option("--speculative-draft-model-path", help="SGLang: the draft model (a bundled name, config file or Hub id).")] = None
    accepted_len: Annotated[Optional[float], typer.Option("--accepted-len", help="Mean tokens one verify step emits (bonus token included, 1..k+1): your measured figure; TPOT needs it.")] = None

    def resolve(self, load: Any) -> Any:
        """A `calc.speculative.SpecDecode`, or None without a speculative option; `load(ref)`
        loads a draft's `ModelSpec`. Raises `KvcalcError` (option named) for JSON that does not
        parse or lacks a field."""
        from kvcalc.calc.speculative import SpecDecode
        from kvcalc.errors import KvcalcError

        if self.speculative_config is None and self.speculative_algorithm is None:
            if self.accepted_len is not None:
                raise KvcalcError("--accepted-len needs --speculative-config (or --speculative-algorithm)",
                                  option="--accepted-len")
            return None
        if self.speculative_config is not None:
            try:
                cfg = json.loads(self.speculative_config)
                method, k = str(cfg["method"]), int(cfg["num_speculative_tokens"])
            except (ValueError, KeyError, TypeError) as e:
                raise KvcalcError(f"--speculative-config must be JSON with method and num_speculative_tokens ({e})",
                                  option="--speculative-config", value=self.speculative_config) from None
            ref = cfg.get("model")
        else:
            algo = (self.speculative_algorithm or "").upper()
            if algo not in _FROM_SGLANG:
                raise KvcalcError(f"--speculative-algorithm {self.speculative_algorithm}: one of "
                                  f"{', '.join(_FROM_SGLANG)}", option="--speculative-algorithm",
                                  value=self.speculative_algorithm)
            if self.speculative_num_steps is None:
                raise KvcalcError("--speculative-algorithm needs --speculative-num-steps", option="--speculative-num-steps")
            method, k, ref = _FROM_SGLANG[algo], self.speculative_num_steps, self.speculative_draft_model_path
        draft = load(ref) if ref else None
        return SpecDecode(method=method, num_speculative_tokens=k, accepted=self.accepted_len, draft=draft,
                          draft_ref=ref)
