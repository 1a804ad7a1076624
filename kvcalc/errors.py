"""The one user-error type and its few subclasses.

Every problem a user can fix (a bad file, a bad field, a bad option) is a `KvcalcError`;
the CLI catches it once, prints it as one line and exits 2.

An error carries what it is about as data, never only in its wording: `field` (the standard
name of the field: `tp`, `pp`, `kv_dtype`, `weight_dtype`, `model`, `cuda_context_bytes`, ...),
`option` (the CLI flag, from `OPTIONS` unless the raise site names one) and `value` (what was
given). `reason` is the bare sentence (what is wrong), `fix` what to do about it (`use --engine
ideal`), and `message` the two joined once (`reason; fix`). `str(err)` is the CLI's line, rendered from that data
in the error's `form` (`--tp 3: llama-3.1-70b has 64 attention heads, ...`); `kvcalc check`
renders the same error against a deployment file as `file:line: field 'tp': <message>`.
Nothing ever parses a message back into a field, and no caller rewrites a message: one that
gives a different fix builds a new error from `reason` and its own `fix`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

#: field (standard name) -> the CLI flag that sets it: the one place the calc words meet the CLI's.
OPTIONS: dict[str, str] = {
    "tp": "--tp",
    "pp": "--pp",
    "dp": "--dp",
    "count": "--count",
    "seq_len": "--seq-len",
    "batch": "--batch",
    "kv_dtype": "--kv-dtype",
    "k_dtype": "--k-dtype",
    "v_dtype": "--v-dtype",
    "weight_dtype": "--weight-dtype",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "bw_efficiency": "--bw-efficiency",
    "flops_efficiency": "--flops-efficiency",
    "cuda_context_bytes": "--cuda-context",
    "activation_reserve_bytes": "--activation-reserve",
    # engines
    "block_size": "--block-size",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "page_size": "--page-size",
    "max_model_len": "--max-model-len",
    "kv_memory_bytes": "--kv-memory",
    "swap_space_bytes": "--swap-space",
    "n_ctx": "--ctx-size",
    "parallel": "--parallel",
    "n_ubatch": "--ubatch-size",
    "n_gpu_layers": "--n-gpu-layers",
    "n_devices": "--gpus",
    "tensor_split": "--tensor-split",
    "llamacpp_version": "--llamacpp-version",
    "vllm_version": "--vllm-version",
    "attention_backend": "--attention-backend",
    "allow_long_max_model_len": "--allow-long-max-model-len",
    "prefix_caching": "--enable-prefix-caching",
    "hybrid_allocator": "--disable-hybrid-kv-cache-manager",
    # output
    "plot": "--plot",
    "format": "--format",
    # choices by name
    "engine": "--engine",
    "gpu": "--gpu",
    "scale_dtype": "--scale-dtype",
}

#: flag -> field, for errors raised where only the flag is known (`units.parse_count(text, "--seq-len")`).
FIELDS: dict[str, str] = {flag: field for field, flag in OPTIONS.items()}

#: how `str(err)` puts the option before the message (the CLI's one line). `OPTION_VALUE` is
#: the default when there is a value, `OPTION` when there is none.
OPTION_VALUE = "{option} {value}: {message}"  # --tp 3: llama-3.1-70b has 64 attention heads, ...
OPTION = "{option}: {message}"  # --seq-len: 'abc' is not a positive whole number
OPTION_SAYS = "{option} {message}"  # --block-size must be a positive integer, got 0
MESSAGE = "{message}"  # the message names its own subject (mxfp4 is a weight format)
FORMS = (OPTION_VALUE, OPTION, OPTION_SAYS, MESSAGE)


def flag(field: str) -> str:
    """The CLI flag of `field` (`OPTIONS`), else `--field-name`."""
    return OPTIONS.get(field) or "--" + field.replace("_", "-")


class KvcalcError(Exception):
    """A problem the user can fix. `str(err)` is one line: where, what, and the fix.

    `KvcalcError(message, *, option=None, field=None, value=None, form=None, fix="")`: `message`
    is what is wrong (kept as `reason`), `fix` what to do about it; `.message` is `reason; fix`
    (or `reason` alone when there is no fix). `field` is the field's standard name, `option` the CLI flag (default `OPTIONS[field]`), `value` what was
    given; `form` (one of `FORMS`) says how the CLI line joins them: default `OPTION_VALUE`
    when a value is given (`--tp 3: ...`), else `OPTION` (`--plot: ...`); `OPTION_SAYS` when the
    message is a predicate (`--pp` + `5 exceeds the model's 4 layers`), `MESSAGE` when it names
    its own subject. With no option the line is the message alone.
    """

    def __init__(
        self,
        message: str = "",
        *,
        option: str | None = None,
        field: str | None = None,
        value: object = None,
        form: str | None = None,
        fix: str = "",
    ) -> None:
        if form is not None and form not in FORMS:
            raise ValueError(f"form must be one of {FORMS}, got {form!r}")
        self.reason = message
        self.fix = fix
        self.message = f"{message}; {fix}" if fix else message
        self.field = field if field is not None else FIELDS.get(option or "")
        self.option = option or (OPTIONS.get(self.field) if self.field else None)
        self.value = value
        self.form = form or (OPTION_VALUE if value is not None else OPTION)
        super().__init__(self._render())  # the text is fixed here: setting attributes later never changes it

    def _render(self) -> str:
        if self.option is None or self.form == MESSAGE:
            return self.message
        return self.form.format(option=self.option, value=self.value, message=self.message)


class ConfigError(KvcalcError):
    """A model, deployment or GPU config that cannot be read or is invalid.

    Attributes: `path` (file or None), `field` (dotted field name or None), `line` (1-based
    line in the file or None); `str(err)` is `path:line: field 'field': message`.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        field: str | None = None,
        line: int | None = None,
        value: object = None,
        fix: str = "",
    ) -> None:
        self.path = path
        self.line = line
        super().__init__(message, field=field, value=value, form=MESSAGE, fix=fix)
        self.option = None  # about a file's field, not a CLI flag

    def _render(self) -> str:
        where = ""
        if self.path:
            where = f"{self.path}"
            if self.line:
                where += f":{self.line}"
            where += ": "
        if self.field:
            where += f"field '{self.field}': "
        return where + self.message


def _norm(name: str) -> str:
    """A name as the tables spell their keys: lower case, spaces and underscores as hyphens."""
    return name.strip().lower().replace(" ", "-").replace("_", "-")


def close_names(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The names of `choices` that `name` most likely meant, the family first: every choice that
    starts with `name` (`h100` -> `h100-sxm`, `h100-pcie`, `h100-nvl`, in table order), then
    difflib's close matches (`h100-smx` -> `h100-sxm`) up to `n` names in all (more when the
    family alone is larger). Case, spaces and underscores are ignored in the comparison."""
    choices = list(choices)
    key = _norm(name)
    family = [c for c in choices if key and _norm(c).startswith(key) and _norm(c) != key]
    close = difflib.get_close_matches(name.lower(), [c.lower() for c in choices], n=n, cutoff=0.5)
    out = list(family)
    for c in close:  # each name once: `close` holds a name twice when the choices differ only in case
        if c.lower() not in {x.lower() for x in out}:
            out.append(c)
    return out[: max(n, len(family))]


class UnknownNameError(KvcalcError):
    """A name (model, GPU, dtype, engine) that is not in its table; the message lists the
    names it most likely meant (`close_names`: its family first, then close spellings), else the
    choices (or `hint`). With a `field` that a CLI flag sets (`OPTIONS`: `kv_dtype`, `engine`,
    `gpu`, ...) the CLI line names the flag first (`--kv-dtype: unknown dtype 'nope'; choose one
    of: ...`); a file's reader uses `message` and names its own field."""

    def __init__(
        self, what: str, name: str, choices: Iterable[str], hint: str = "", *, field: str | None = None
    ) -> None:
        choices = list(choices)
        close = close_names(name, choices)
        from kvcalc.text import excerpt  # a name from a user's file may be megabytes, or hold controls

        msg = f"unknown {what} '{excerpt(name)}'"
        if close:
            quoted = [f"'{c}'" for c in close]
            msg += "; did you mean " + (", ".join(quoted[:-1]) + " or " if len(quoted) > 1 else "") + quoted[-1] + "?"
        elif hint:
            msg += f"; {hint}"
        else:
            msg += f"; choose one of: {', '.join(sorted(choices))}"
        super().__init__(msg, field=field, value=name, form=OPTION if field in OPTIONS else MESSAGE)
        self.name = name
        self.close = close


class UncountedParamsError(KvcalcError):
    """A model whose parameters (the weight memory of a GPU plan) cannot be counted from its
    architecture: `missing` names the config fields it lacks (`vocab_size`, ...), `model` the
    model. `path` and `kind` ('yaml' or 'config.json'), when the file the model came from is
    known (`in_file`), put the file first and give that file's fix: a kvcalc YAML may add the
    fields or give `n_params`; a config.json may add the fields or take the checkpoint's
    safetensors beside it (`n_params` is not a config.json field). Field `model`, value the name."""

    def __init__(self, model: str, missing: Iterable[str], *, path: str | None = None, kind: str | None = None) -> None:
        self.model = model
        self.missing = tuple(missing)
        self.path = path
        self.kind = kind
        fields = ", ".join(self.missing)
        them = "them" if len(self.missing) > 1 else "it"
        if path is None:
            fix = f"add {them} to the config, or give n_params (and n_active_params)"
            msg = f"{model}: cannot count parameters without {fields}; {fix}"
        else:
            if kind == "yaml":
                fix = (
                    f"add {fields} to that file, or give the parameter count there as n_params "
                    "(and n_active_params for a mixture of experts)"
                )
            else:
                fix = (
                    f"add {fields} to the config.json, or put the checkpoint's *.safetensors files beside it "
                    "(their headers give the weights); a kvcalc YAML may give n_params instead "
                    "(`kvcalc import` writes one from the config.json)"
                )
            msg = f"{path}: cannot count the parameters of {model} (for the weight memory) without {fields}; {fix}"
        super().__init__(msg, field="model", value=model, form=MESSAGE)

    def in_file(self, path: str, kind: str) -> UncountedParamsError:
        """The same error, naming the file `path` the model came from (`kind` 'yaml' or 'config.json')."""
        return UncountedParamsError(self.model, self.missing, path=path, kind=kind)


class MissingExtraError(KvcalcError):
    """An optional package is needed: the message says what to install."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(f"this needs {package}: pip install 'kvcalc[{extra}]'", form=MESSAGE)
        self.package = package
        self.extra = extra


class KvcalcWarning(UserWarning):
    """Something the user should check but that does not stop the command (an unknown
    model_type read as a plain decoder). The CLI prints each as one yellow `warning:` line."""
