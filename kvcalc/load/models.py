"""A `ModelSpec` from what the user holds: a bundled name, a YAML file, or a Hugging Face
config.json (or the folder holding one). The one entry point is `load_model`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from kvcalc.errors import MESSAGE, OPTION_SAYS, ConfigError, KvcalcError, UnknownNameError
from kvcalc.load.files import build, bundled, bundled_path, read_mapping
from kvcalc.schema import ModelSpec

if TYPE_CHECKING:
    from kvcalc.json_types import JsonObject


def user_path(text: str | Path) -> Path:
    """The path the user means by `text`: a leading `~` (`~/m.yaml`, `~alice/m.yaml`) is expanded
    only when it names a home folder that exists; otherwise the text is the literal path (a file
    named `~draft.yaml` in the current folder, or `~nosuchuser/m.yaml`, which then is reported
    missing as written). Never raises: `Path.expanduser` raises `RuntimeError` for an unknown user
    or an unset home (Python 3.12+), which is not the user's error to see as a crash."""
    s = str(text)
    literal = Path(s)
    if not s.startswith("~"):
        return literal
    head = s.replace("\\", "/").split("/", 1)[0]
    try:
        home = Path(head).expanduser()
        expanded = literal.expanduser()
    except (RuntimeError, KeyError, OSError):
        return literal
    if str(home) == head or not home.is_dir():  # not expanded, or no such home folder
        return literal
    if literal.exists() and not expanded.exists():  # `~` is a home, yet only the literal file exists
        return literal
    return expanded


#: the suffixes of the model files kvcalc reads
_FILE_SUFFIXES = (".yaml", ".yml", ".json", ".gguf")


def _looks_like_path(ref: str) -> bool:
    return "/" in ref or "\\" in ref or ref.lower().endswith(_FILE_SUFFIXES)


def load_model(ref: str | Path, revision: str | None = None, *, trust_plain_decoder: bool = False) -> ModelSpec:
    """`_load_model` with `trust_plain_decoder` set for every config.json the load reads (a file,
    a checkpoint folder, a Hub id: `kvcalc.load.hf.TRUST_PLAIN_DECODER`): True accepts an unmapped
    model_type read as a plain decoder, a guess the output labels."""
    if not trust_plain_decoder:
        return _load_model(ref, revision)
    from kvcalc.load.hf import TRUST_PLAIN_DECODER

    token = TRUST_PLAIN_DECODER.set(True)
    try:
        return _load_model(ref, revision)
    finally:
        TRUST_PLAIN_DECODER.reset(token)


def _load_model(ref: str | Path, revision: str | None = None) -> ModelSpec:
    """A `ModelSpec` from a YAML path, a Hugging Face config.json, a checkpoint folder (its
    config.json and safetensors headers: `load.checkpoint`), a GGUF file (`load.gguf`), a bundled
    name (case-insensitive), or a Hugging Face Hub id `org/name` that is not a local path
    (`load.hub`; `revision` is for Hub ids only).

    Raises `ConfigError` for a bad file, `UnknownNameError` (with close matches) for an
    unknown bundled name, `KvcalcError` for a Hub id that cannot be resolved or a `revision`
    given with anything but a Hub id.
    """
    if not isinstance(ref, (str, Path)):
        raise KvcalcError(
            f"model must be a name or a path (str), got {type(ref).__name__}",
            field="model",
            value=ref,
            form=MESSAGE,
            fix="give a bundled name (`kvcalc models`), a .yaml or config.json path, or a Hub id",
        )
    ref_s = str(ref)
    if not ref_s.strip():
        raise KvcalcError(
            "the model argument is empty",
            field="model",
            value=ref_s,
            form=MESSAGE,
            fix="give a bundled name (`kvcalc models`), a .yaml or config.json path, or a Hub id",
        )
    path = user_path(ref_s)
    if "/" in ref_s and not path.exists():  # a Hub id has a '/': a bundled name never loads the Hub module
        from kvcalc.load.hub import parse_hub_id  # regex only: huggingface_hub loads on the Hub path alone

        if parse_hub_id(ref_s) is not None:
            from kvcalc.load.hub import load_hub_model

            return load_hub_model(ref_s, revision)
    if revision is not None:
        raise KvcalcError(
            f"applies to a Hugging Face Hub id (org/name), not to '{ref_s}'", option="--revision", form=OPTION_SAYS
        )
    if path.is_dir() and (path / "config.json").is_file():
        data, _ = read_mapping(path / "config.json", "model")
        if is_hf_config(data):  # a checkpoint folder: config.json + the safetensors headers beside it
            from kvcalc.load.checkpoint import load_folder

            return load_folder(path, data)
        path = path / "config.json"
    if "/" in ref_s and not path.exists() and not ref_s.lower().endswith(_FILE_SUFFIXES):
        # `a/b/c`: not a file kvcalc reads by its name, and (above) not written as a Hub id either
        from kvcalc.errors import ConfigError
        from kvcalc.text import excerpt

        raise ConfigError(
            "no such file or folder, and not a Hugging Face Hub id (org/name or org/name@revision, "
            "e.g. meta-llama/Llama-3.1-8B)",
            path=excerpt(ref_s, 200),
        )
    if path.is_file() or path.is_dir() or _looks_like_path(ref_s):
        return load_model_file(path)
    key = ref_s.strip().lower()
    found = bundled_path("models", key)
    if found is not None:
        return load_model_file(found)
    raise UnknownNameError(
        "model",
        ref_s,
        bundled("models"),
        hint="`kvcalc models` lists the bundled ones; or give a .yaml or config.json path",
    )


def model_file(ref: str | Path) -> tuple[str, str] | None:
    """(path, kind) of the file `load_model(ref)` reads the architecture from: kind 'config.json'
    for a Hugging Face config.json (given, or in a checkpoint folder), 'yaml' for a kvcalc model
    file; None for a bundled name, a Hub id, a GGUF file or a path that is not there. Reads the
    file again (only on an error's path: to say which file lacks a field). Never raises."""
    ref_s = str(ref)
    path = user_path(ref_s)
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file() or path.suffix.lower() == ".gguf":
        return None
    try:
        data, _ = read_mapping(path, "model")
    except KvcalcError:
        return None
    return str(path), "config.json" if is_hf_config(data) else "yaml"


@contextmanager
def naming_model_file(ref: str | Path | None, name: str | None = None) -> Iterator[None]:
    """Within the block, an error whose fix depends on the file the model came from is raised
    again in that file's words: an `UncountedParamsError` about the model loaded from `ref`
    (named `name`; None: any) names the file and its fix (`model_file`); a llama.cpp file type
    given as --weight-dtype (`formats.FileTypeMixError`) while the model IS a .gguf file says to
    drop the option. Other errors pass unchanged. For the commands that count weights (a GPU
    plan) from a model the user gave; `ref` None (a `ModelSpec` given, no file): errors pass."""
    from kvcalc.errors import UncountedParamsError

    try:
        yield
    except UncountedParamsError as e:
        found = None
        if ref is not None and e.path is None and (name is None or e.model == name):
            found = model_file(ref)
        if found is None:
            raise
        raise e.in_file(*found) from None
    except KvcalcError as e:
        from kvcalc.formats import FileTypeMixError

        path = user_path(str(ref)) if ref is not None else None
        if (
            isinstance(e, FileTypeMixError)
            and e.gguf_path is None
            and path is not None
            and path.suffix.lower() == ".gguf"
        ):
            raise e.on_gguf(str(path)) from None
        raise


def load_model_file(path: Path) -> ModelSpec:
    """A `ModelSpec` from one file: our YAML/JSON schema, or a Hugging Face config.json
    (recognised by its `model_type` or `num_hidden_layers` / `n_layer` fields), or a GGUF file
    (`.gguf`: `kvcalc.load.gguf`, its header only)."""
    if path.suffix.lower() == ".gguf":
        from kvcalc.load.gguf import model_from_gguf  # imported only for GGUF input (needs the gguf package)

        return model_from_gguf(path)
    data, lines = read_mapping(path, "model")
    if is_hf_config(data):
        from kvcalc.load.checkpoint import read_hf_quant_beside
        from kvcalc.load.hf import model_from_hf_config  # imported only for config.json input

        return model_from_hf_config(data, path=str(path), hf_quant=read_hf_quant_beside(path))
    _check_model_fields(data, path)
    return build(ModelSpec, data, str(path), lines)


def _check_model_fields(data: JsonObject, path: Path) -> None:
    """One line, before pydantic's list, for a file that is no model config at all: an
    hf_quant_config.json (quantization only), a JSON that is neither a Hugging Face config.json
    nor a kvcalc model, a kvcalc YAML missing required fields (listed, first few). Raises `ConfigError`."""
    required = [n for n, f in ModelSpec.model_fields.items() if f.is_required()]
    missing = [n for n in required if n not in data]
    if not missing:
        return
    if path.suffix.lower() == ".json" and len(missing) == len(required):
        if "quantization" in data or path.name.endswith("hf_quant_config.json"):
            what = "an hf_quant_config.json (the quantization only), not a Hugging Face config.json"
        else:
            what = "a JSON without model_type: not a Hugging Face config.json"
        raise ConfigError(
            what, path=str(path), fix="give the config.json beside it (or its folder), or a kvcalc model YAML"
        )
    rest = missing[1:4]
    also = f" (also {', '.join(rest)}{f' and {len(missing) - 4} more' if len(missing) > 4 else ''})" if rest else ""
    raise ConfigError(
        f"required field is missing{also}",
        path=str(path),
        field=missing[0],
        fix=f"add {'them' if rest else 'it'} (`kvcalc import` writes a model file from a config.json), "
        "or give a Hugging Face config.json",
    )


def is_hf_config(data: JsonObject) -> bool:
    """True for a Hugging Face config.json dict rather than a kvcalc model config."""
    if "name" in data and "n_layers" in data:  # kvcalc's own schema (MPT's config.json has n_layers)
        return False
    return any(k in data for k in ("model_type", "architectures", "num_hidden_layers", "n_layer", "text_config"))
