"""Reading configs: YAML and JSON files, bundled names, and turning every parse or validation
problem into a `ConfigError` that names the file, the line and the field.

Every file a user names is read by `read_config_text` (issue 12): only a regular file (a FIFO,
a device, a socket or a folder is refused before it is opened for reading), and at most
`MAX_FILE_BYTES[kind]` bytes (refused from its size before it is read). YAML is composed with
`MAX_DEPTH` levels at most and aliases adding at most `MAX_ALIAS_NODES` values; JSON is held to
the same depth. A message echoes a user's value as a short excerpt (`kvcalc.text.excerpt`), and a
validation error lists `MAX_PROBLEMS` problems, then how many more.

Bundled configs live in the repo's top-level `configs/` and ship in the wheel as the package
`kvcalc.configs`, so a name like `llama-3.1-70b` resolves after a plain install too.
"""

from __future__ import annotations

import difflib
import os
import stat
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import yaml
from pydantic import BaseModel, ValidationError

from kvcalc.errors import ConfigError
from kvcalc.text import excerpt

if TYPE_CHECKING:
    from collections.abc import Mapping

    from kvcalc.json_types import JsonObject, JsonValue

M = TypeVar("M", bound=BaseModel)

#: Hugging Face / other calculators' spellings of our fields, for "did you mean" hints.
FIELD_HINTS: dict[str, str] = {
    "num_hidden_layers": "n_layers",
    "num_layers": "n_layers",
    "n_layer": "n_layers",
    "layers": "n_layers",
    "num_attention_heads": "n_heads",
    "n_head": "n_heads",
    "heads": "n_heads",
    "num_heads": "n_heads",
    "num_key_value_heads": "n_kv_heads",
    "kv_heads": "n_kv_heads",
    "n_kv_head": "n_kv_heads",
    "num_kv_heads": "n_kv_heads",
    "n_embd": "hidden_size",
    "d_model": "hidden_size",
    "torch_dtype": "dtype",
    "n_positions": "max_position_embeddings",
    "max_seq_len": "max_position_embeddings",
    "context_length": "max_position_embeddings",
    "window": "sliding_window",
    # GPU rows (`--gpu FILE`, a GPU file in a `kvcalc check` folder)
    "memory": "memory_bytes",
    "mem": "memory_bytes",
    "vram": "memory_bytes",
    "memory_gb": "memory_bytes",
    "memory_gib": "memory_bytes",
    "memory_size": "memory_bytes",
    "bandwidth": "hbm_bytes_per_s",
    "memory_bandwidth": "hbm_bytes_per_s",
    "mem_bandwidth": "hbm_bytes_per_s",
    "hbm_bandwidth": "hbm_bytes_per_s",
    "bf16_tflops": "bf16_flops_per_s",
    "tflops": "bf16_flops_per_s",
    "flops": "bf16_flops_per_s",
    "fp16_flops_per_s": "bf16_flops_per_s",
    "fp8_tflops": "fp8_flops_per_s",
    "nvlink": "interconnect_bytes_per_s",
    "nvlink_bytes_per_s": "interconnect_bytes_per_s",
    "l2_cache": "l2_bytes",
    "l2_cache_bytes": "l2_bytes",
}

#: endings of fields named for their unit: `memory` -> `memory_bytes`, `hbm` -> `hbm_bytes_per_s`.
UNIT_SUFFIXES = ("_bytes", "_bytes_per_s", "_flops_per_s", "_per_s", "_ms", "_s")


def field_hint(name: str, known: list[str], top_level: bool = True) -> str | None:
    """The field an unknown `name` most likely meant, among `known`: a spelling from
    `FIELD_HINTS` (top-level keys; only when that field exists here), else the one known field
    that is `name` plus a unit suffix (`memory` -> `memory_bytes`, not `memory_note`), else
    difflib's closest (cutoff 0.6), else None."""
    hint = FIELD_HINTS.get(name.lower()) if top_level else None
    if hint in known:
        return hint
    unit = [f for f in known if f.startswith(name + "_") and f.endswith(UNIT_SUFFIXES)]
    if len(unit) == 1:
        return unit[0]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return close[0] if close else None


def configs_dir() -> Path:
    """The bundled `configs/` folder: the installed `kvcalc.configs` package, else the repo's.
    The package is found, not imported (`importlib.util.find_spec`: its folder, as
    `importlib.resources.files` would give it, without importing `importlib.resources`'
    readers at every start-up)."""
    from importlib.util import find_spec

    try:
        spec = find_spec("kvcalc.configs")
    except (ImportError, ValueError):
        spec = None
    for folder in (spec.submodule_search_locations or ()) if spec is not None else ():
        p = Path(folder)
        if (p / "models").is_dir():
            return p
    return Path(__file__).resolve().parent.parent.parent / "configs"


@cache
def bundled(kind: str = "models") -> dict[str, Path]:
    """Bundled configs of `kind` ('models' or 'deployments'): lower-case name -> path.

    A bundled model's file is named for its `name:` field in lower case (a test checks it)."""
    d = configs_dir() / kind
    if not d.is_dir():
        return {}
    return {p.stem.lower(): p for p in sorted(d.glob("*.yaml"))}


def bundled_path(kind: str, key: str) -> Path | None:
    """The bundled config of `kind` named `key` (lower case), or None: `configs/KIND/KEY.yaml`
    looked up directly (a bundled file is named for its name in lower case), so loading a bundled
    name lists no folder; `bundled` (the whole listing) answers only when that file is not there."""
    if key and key == Path(key).name and not key.startswith("."):
        p = configs_dir() / kind / f"{key}.yaml"
        if p.is_file():
            return p
    return bundled(kind).get(key)


#: the largest file of each kind read (bytes), checked before the file is read: a model config
#: (kvcalc YAML or a Hugging Face config.json) is kilobytes, 4 MiB leaves room for the largest
#: published config.json (label maps); a GPU row, a deployment and a price file are a few lines.
#: A file whose kind is not known before it is read (`kvcalc check` folders) gets the largest
#: config bound. A safetensors index (`model.safetensors.index.json`) names every tensor, one line
#: each: tens of thousands of lines (megabytes) for the largest MoE checkpoints, so 64 MiB.
MAX_FILE_BYTES: dict[str, int] = {
    "model": 4 * 2**20,
    "gpu": 2**20,
    "deployment": 2**20,
    "prices": 2**20,
    "config": 4 * 2**20,
    "index": 64 * 2**20,
}

#: the deepest nesting of lists and mappings in a config (a real one nests 3 deep)
MAX_DEPTH = 32

#: the most nodes YAML aliases (`*name`) may add to a document when expanded: an anchor used a
#: few times is fine, an alias bomb (each level repeating the one before) is refused
MAX_ALIAS_NODES = 10_000

#: the most problems a validation error lists; the rest are counted in one "and N more" line
MAX_PROBLEMS = 10

_WHAT = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


#: libyaml's event parser when PyYAML was built with it (ten times the pure-Python scanner's
#: speed on a large file); the composing, where the checks below live, stays in Python
_Parser: Any  # Any: a base class chosen at import, libyaml's or Python's
try:
    from yaml.cyaml import CParser as _Parser  # type: ignore[attr-defined]  # (the stubs omit it)
except ImportError:  # PyYAML without libyaml
    _Parser = yaml.parser.Parser
_Reader: Any = object if _Parser is not yaml.parser.Parser else yaml.reader.Reader  # Any: as _Parser
_Scanner: Any = object if _Parser is not yaml.parser.Parser else yaml.scanner.Scanner  # Any: as _Parser


class _ConfigLoader(
    yaml.composer.Composer,
    yaml.constructor.SafeConstructor,
    yaml.resolver.Resolver,
    _Parser,
    *(c for c in (_Reader, _Scanner) if c is not object),  # type: ignore[misc]  # (bases chosen at import)
):
    """A safe loader (PyYAML's SafeLoader: libyaml's parser when present, Python's composer and
    safe constructor) that refuses a key given twice in one mapping (PyYAML keeps the last),
    nesting deeper than `MAX_DEPTH` (as written or as aliases expand it), aliases that add more
    than `MAX_ALIAS_NODES` nodes, and an alias to the node it is in (a recursive structure)."""

    def __init__(self, stream: str) -> None:
        if _Parser is yaml.parser.Parser:
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
        else:
            _Parser.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self._depth = 0
        self._alias_nodes = 0
        self._open_anchors: list[str] = []
        self._shape: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, expanded depth)
        self._path: list[str] = []  # the keys and list indices down to the node being composed

    def _refuse(self, problem: str, mark: object, last: str | None = None) -> None:
        """Raise the composer's error at `mark`, naming the key where it happens (the path of
        keys and list indices down to it, plus `last`, the node being composed): `key_path`."""
        # `mark`: an event's start mark, PyYAML's or libyaml's (`yaml._yaml.Mark`, the same fields)
        err = yaml.composer.ComposerError(None, None, problem, cast("yaml.Mark | None", mark))
        err.key_path = _key_path([*self._path, *([last] if last else [])])  # type: ignore[attr-defined]
        raise err

    @staticmethod
    def _step(index: object) -> str | None:
        """The path component of a node composed at `index`: a mapping value's key, a list
        item's position; None for a key itself or the document."""
        if isinstance(index, yaml.ScalarNode):
            return str(index.value)
        if isinstance(index, int) and not isinstance(index, bool):
            return f"[{index}]"
        return None

    def _expanded(self, node: yaml.Node) -> tuple[int, int]:
        """(nodes, depth) of `node` with every alias in it expanded; memoized per node, so a
        chain of aliases costs one pass. Recursion is bounded: a node's own children are at most
        `MAX_DEPTH` levels deep as written, and aliased nodes are memoized when first aliased."""
        key = id(node)
        got = self._shape.get(key)
        if got is not None:
            return got
        n, d = 1, 0
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [c for pair in node.value for c in pair]
        else:
            children = []
        for c in children:
            cn, cd = self._expanded(c)
            n += cn
            d = max(d, cd)
        self._shape[key] = (n, d + 1)
        return n, d + 1

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        # (PyYAML's stubs say index: int; the composer passes a mapping's key node, or None, too)
        step = self._step(index)
        if self.check_event(yaml.AliasEvent):
            event = cast("yaml.AliasEvent", self.peek_event())  # (PyYAML's stubs say Event | None)
            if event.anchor in self._open_anchors:
                self._refuse(
                    f"the alias *{excerpt(event.anchor, 30)} refers to the node it is in", event.start_mark, step
                )
            target = self.anchors.get(event.anchor)
            if target is not None:
                nodes, depth = self._expanded(target)
                self._alias_nodes += nodes
                if self._alias_nodes > MAX_ALIAS_NODES:
                    self._refuse(
                        f"aliases expand to more than {MAX_ALIAS_NODES:,} values (an alias bomb?); "
                        "write the values out",
                        event.start_mark,
                        step,
                    )
                if self._depth + depth > MAX_DEPTH:
                    self._refuse(
                        f"nested deeper than {MAX_DEPTH} levels once aliases are expanded", event.start_mark, step
                    )
            return super().compose_node(parent, index)
        start = cast("yaml.Event", self.peek_event())  # one exists: check_event found none past the end
        self._depth += 1
        if self._depth > MAX_DEPTH:
            self._refuse(f"nested deeper than {MAX_DEPTH} levels", start.start_mark, step)
        anchor = getattr(start, "anchor", None)
        if anchor is not None:
            self._open_anchors.append(anchor)
        if step is not None:
            self._path.append(step)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1
            if step is not None:
                self._path.pop()
            if anchor is not None:
                self._open_anchors.pop()

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: let PyYAML report it
                break
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key '{excerpt(key)}' is given twice (first on line {first})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


#: the most characters of a key path an error names (`_key_path`)
KEY_PATH_CHARS = 80


def _key_path(steps: list[str]) -> str | None:
    """`extra.k0.k1[3]`: the keys (dotted) and list positions down to a node, for an error's
    field; a path longer than `KEY_PATH_CHARS` keeps its first key and its end. None: the top."""
    if not steps:
        return None
    text = "".join(
        s if s.startswith("[") or i == 0 else f".{s}"
        for i, s in enumerate(excerpt(x, 40) if not x.startswith("[") else x for x in steps)
    )
    if len(text) > KEY_PATH_CHARS:
        head = excerpt(steps[0], 40)
        text = f"{head}...{text[-(KEY_PATH_CHARS - len(head) - 3) :]}"
    return text


def _top_key_at(text: str, line: int) -> str | None:
    """The top-level key whose value holds 0-based `line` of YAML `text` (the nearest line at or
    above it that starts a `key:` at column 0), for an error the parser raised before any key
    was composed (libyaml's own nesting cap scans a flow list ahead); None when there is none."""
    import re

    lines = text.splitlines()[: line + 1]
    for ln in reversed(lines[-10_000:]):
        m = re.match(r"""^(?:"([^"]{1,200})"|'([^']{1,200})'|([^\s#'"\-?:][^:#]{0,199}?))\s*:(?:\s|$)""", ln)
        if m:
            return excerpt(next(g for g in m.groups() if g is not None).strip(), 40)
    return None


def _json_deep_key(text: str) -> str | None:
    """The top-level key of JSON `text` under which brackets first nest past `MAX_DEPTH` (for
    the error when `json.loads` ran out of stack first): one pass over the characters, strings
    skipped; None when no top-level key holds it."""
    depth, key, last, i, n = 0, None, None, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            last = text[i + 1 : j]
            i = j + 1
            continue
        if ch == ":" and depth == 1:
            key = last
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH + 1:  # the document's own object is level 1
                return None if key is None else excerpt(key, 40)
        elif ch in "]}":
            depth -= 1
        i += 1
    return None


def _no_duplicate_pairs(pairs: list[tuple[str, JsonValue]]) -> JsonObject:
    out: JsonObject = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key '{excerpt(k)}' is given twice")
        out[k] = v
    return out


def _check_data(data: object, path: str, what: str) -> None:
    """Raise `ConfigError` when parsed `data` nests lists and mappings deeper than `MAX_DEPTH`
    or holds a string with a lone UTF-16 surrogate (JSON's `"\\ud800"`: no text can print or
    save it). Iterative, so no depth can overflow the stack; a mapping's keys are checked too."""
    stack: list[tuple[object, int, tuple[str, ...]]] = [(data, 1, ())]
    while stack:
        v, d, where = stack.pop()
        if isinstance(v, str):
            try:
                v.encode("utf-8")  # refuses a lone surrogate (U+D800..U+DFFF), and nothing else
            except UnicodeEncodeError as e:
                raise ConfigError(
                    f"invalid {what}: a string holds \\u{ord(v[e.start]):04x}, half of a UTF-16 "
                    "surrogate pair, which is not text",
                    path=path,
                    field=_key_path(list(where)),
                ) from None
        elif isinstance(v, (list, dict)):
            if d > MAX_DEPTH:
                raise ConfigError(
                    f"invalid {what}: nested deeper than {MAX_DEPTH} levels", path=path, field=_key_path(list(where))
                )
            if isinstance(v, dict):
                stack.extend((k, d, where) for k in v)
                stack.extend((c, d + 1, (*where, str(k))) for k, c in v.items())
            else:
                stack.extend((c, d + 1, (*where, f"[{i}]")) for i, c in enumerate(v))


def stat_path(path: str | Path) -> os.stat_result:
    """`os.stat(path)`, following links. Raises `ConfigError` naming the file: not found, or
    unreadable (the OS's reason)."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise ConfigError("file not found", path=str(path)) from None
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror or e.__class__.__name__}", path=str(path)) from None


def read_config_text(path: Path, kind: str = "config") -> str:
    """The text of a config file, read only when it is a regular file of at most
    `MAX_FILE_BYTES[kind]` bytes: a FIFO, a device (`/dev/zero`), a socket or a folder is refused
    before it is opened for reading, a file past the bound before it is read. The file is opened
    non-blocking and checked again through its descriptor (it may have been swapped since), and at
    most the bound plus one byte is read (a `/proc` file says 0 bytes and holds more).

    Raises `ConfigError` naming the file: not found, not a regular file, too large, unreadable,
    not UTF-8 (a UTF-8 byte-order mark is fine).
    """
    p = str(path)
    limit = MAX_FILE_BYTES[kind]
    what = "model config" if kind == "model" else ("config" if kind == "config" else f"{kind} file")
    if kind == "prices":
        what = "price file"
    st = stat_path(path)
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError("is a folder with no config.json in it (give a .yaml or a config.json)", path=p)

    def check(st: os.stat_result) -> None:
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(
                f"is {_WHAT.get(stat.S_IFMT(st.st_mode), 'not a regular file')}, not a regular file; "
                "kvcalc reads configs only from regular files",
                path=p,
            )
        if st.st_size > limit:
            raise ConfigError(f"is {st.st_size:,} B; a {what} is at most {limit:,} B ({limit // 2**20} MiB)", path=p)

    check(st)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror or e.__class__.__name__}", path=p) from None
    try:
        check(os.fstat(fd))
        chunks, got = [], 0
        while got <= limit:
            b = os.read(fd, min(1 << 20, limit + 1 - got))
            if not b:
                break
            chunks.append(b)
            got += len(b)
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror or e.__class__.__name__}", path=p) from None
    finally:
        os.close(fd)
    if got > limit:
        raise ConfigError(f"holds more than {limit:,} B; a {what} is at most {limit // 2**20} MiB", path=p)
    try:
        return b"".join(chunks).decode("utf-8-sig")  # -sig: a UTF-8 byte-order mark is fine
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"cannot read: not UTF-8 text (byte {e.start:,} is 0x{e.object[e.start]:02x})", path=p
        ) from None


def parse_mapping(text: str, path: str, *, json_text: bool = False) -> tuple[JsonObject, dict[str, int]]:
    """Parse `text` (JSON when `json_text`, else YAML) that must hold one mapping; returns
    (data, top-level key -> 1-based line). `path` names the source in errors.

    Raises `ConfigError` for text that does not parse, holds several YAML documents, is empty or
    not a mapping, gives a key twice, nests deeper than `MAX_DEPTH`, or holds aliases that expand
    past `MAX_ALIAS_NODES`.
    """
    p = path
    lines: dict[str, int] = {}
    if json_text:
        import json  # here, not at import: a bundled name or a YAML file never needs it

        try:
            data = json.loads(text, object_pairs_hook=_no_duplicate_pairs)
        except json.JSONDecodeError as e:
            raise ConfigError(f"invalid JSON: {e.msg} (column {e.colno})", path=p, line=e.lineno) from None
        except ValueError as e:
            raise ConfigError(f"invalid JSON: {excerpt(str(e), 120)}", path=p) from None
        except RecursionError:
            raise ConfigError(
                f"invalid JSON: nested deeper than {MAX_DEPTH} levels", path=p, field=_json_deep_key(text)
            ) from None
        _check_data(data, p, "JSON")
        for i, ln in enumerate(text.splitlines(), 1):
            s = ln.strip()
            if s.startswith('"') and '":' in s:
                lines.setdefault(s[1 : s.index('"', 1)], i)
    else:
        loader = _ConfigLoader(text)
        docs: list[tuple[yaml.Node | None, JsonValue]] = []
        try:
            while loader.check_node():
                node = loader.get_node()
                d = loader.construct_document(node)
                if d is not None:
                    docs.append((node, d))
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            if "maximum nesting depth" in problem:  # libyaml's own cap (1,000), past ours
                problem = f"nested deeper than {MAX_DEPTH} levels"
            key = getattr(e, "key_path", None) or (_top_key_at(text, mark.line) if mark else None)
            raise ConfigError(
                f"invalid YAML: {excerpt(problem, 160)}", path=p, field=key, line=(mark.line + 1) if mark else None
            ) from None
        except (ValueError, OverflowError) as e:  # an integer of more than 4,300 digits
            raise ConfigError(f"invalid YAML: {excerpt(str(e), 120)}", path=p) from None
        except RecursionError:
            raise ConfigError(f"invalid YAML: nested deeper than {MAX_DEPTH} levels", path=p) from None
        finally:
            loader.dispose()
        if len(docs) > 1:
            raise ConfigError("holds several YAML documents; put one config in each file", path=p)
        node, data = docs[0] if docs else (None, None)
        _check_data(data, p, "YAML")
        if isinstance(node, yaml.MappingNode):
            lines = {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}
    if data is None:
        raise ConfigError(EMPTY_FILE, path=p)
    if not isinstance(data, dict):
        raise ConfigError(f"must hold a mapping of fields, not a {type(data).__name__}", path=p)
    return data, lines


def read_mapping(path: Path, kind: str = "config") -> tuple[JsonObject, dict[str, int]]:
    """Parse a YAML or JSON file that must hold one mapping; returns (data, key -> line).
    `kind` (a key of `MAX_FILE_BYTES`: model, gpu, deployment, prices, config) sets the largest
    file read (`read_config_text`).

    Raises `ConfigError` for a missing, unreadable, non-regular, too large or unparsable file,
    or one that is not a mapping (`parse_mapping`).
    """
    text = read_config_text(path, kind)
    try:
        return parse_mapping(text, str(path), json_text=path.suffix.lower() == ".json")
    except ConfigError as e:
        if e.reason != EMPTY_FILE or kind not in EMPTY_HINTS:
            raise
        raise ConfigError(f"is empty; it must hold {EMPTY_HINTS[kind]}", path=str(path)) from None


#: `parse_mapping`'s words for a file with nothing in it, and what each kind of file must hold instead
EMPTY_FILE = "is empty; it must hold a mapping of fields"
EMPTY_HINTS = {
    "model": "a mapping of fields (name: ..., n_layers: ...)",
    "prices": "GPU keys with their price an hour (h200: 3.5)",
}


def _nested_fields(model_cls: type[BaseModel], loc: tuple) -> list[str]:
    """Field names of the model that `loc` (a pydantic error location, less its last part)
    leads to from `model_cls` (`('targets',)` -> Targets' fields), for the unknown-field hint."""
    import typing

    cls = model_cls
    for part in loc:
        f = cls.model_fields.get(str(part)) if isinstance(part, str) else None
        if f is None:
            continue  # a list index or a union tag: stay on the model found so far
        subs = [
            a
            for a in (f.annotation, *typing.get_args(f.annotation))
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if not subs:
            break
        cls = subs[0]
    return list(cls.model_fields)


def validation_error(
    err: ValidationError,
    model_cls: type[BaseModel],
    path: str | None,
    lines: dict[str, int] | None = None,
    *,
    first_only: bool = False,
) -> ConfigError:
    """One `ConfigError` line per pydantic error, each naming file, line and field, with a
    "did you mean" hint for an unknown field (the known fields are listed once, on the first
    unknown field without a hint). At most `MAX_PROBLEMS` lines, then "and N more problems";
    a value the user gave is echoed as a short excerpt (`kvcalc.text.excerpt`), never whole.
    `first_only`: the first problem in the file alone, one line (`kvcalc check`'s deployment files)."""
    lines = lines or {}
    out = []
    errors = err.errors(include_url=False)
    if first_only:  # the first in the file (by line; a problem with no line of its own last)
        errors = sorted(errors, key=lambda e: lines.get(str(e["loc"][0]) if e["loc"] else "", 1 << 62))[:1]
    listed_known = False
    for e in errors[:MAX_PROBLEMS]:
        loc = ".".join(excerpt(x, 40) if isinstance(x, str) else str(x) for x in e["loc"])
        top = str(e["loc"][0]) if e["loc"] else None
        # a validator's ValueError is its own sentence (`ctx["error"]`), not pydantic's "Value error, ..."
        ctx = e.get("ctx") or {}
        msg = str(ctx["error"]) if e["type"] == "value_error" and "error" in ctx else e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
            name, known = str(e["loc"][-1]) if e["loc"] else "", _nested_fields(model_cls, e["loc"][:-1])
            hint = field_hint(name[:200], known, top_level=len(e["loc"]) == 1)
            if hint:
                msg += f"; did you mean '{hint}'?"
            elif not listed_known:
                msg += f"; known fields: {', '.join(known)}"
                listed_known = True
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif "input" in e and e["type"] not in ("value_error",):
            msg += f" (got {excerpt(e['input'], quote=True)})"
        msg = excerpt(msg, 2000) if len(msg) > 2000 else msg  # a safety net: a validator's own wording
        field = loc or None  # a model-level check names its field by raising `schema.field_error`
        out.append(str(ConfigError(msg, path=path, field=field, line=lines.get(top or field or ""))))
    if len(errors) > MAX_PROBLEMS:
        more = len(errors) - MAX_PROBLEMS
        out.append(str(ConfigError(f"and {more:,} more problem{'s' if more > 1 else ''}", path=path)))
    ce = ConfigError("\n".join(out))
    ce.path = path
    return ce


def build(
    model_cls: type[M],
    data: Mapping[str, object],
    path: str | None = None,
    lines: dict[str, int] | None = None,
    *,
    first_only: bool = False,
    names: Mapping[str, str] | None = None,
) -> M:
    """Validate `data` as `model_cls`; raises `ConfigError` naming the file, line and field
    (`first_only`: the first problem alone, `validation_error`). `names` (kvcalc field -> the
    file's own key, for a file that is not a kvcalc YAML: config.json, GGUF) reaches the
    schema's checks as data (`kvcalc.schema.FILE_NAMES`), so their errors name the file's field."""
    context = None
    if names:
        from kvcalc.schema import FILE_NAMES

        context = {FILE_NAMES: dict(names)}
    try:
        return model_cls.model_validate(data, context=context)
    except ValidationError as e:
        raise validation_error(e, model_cls, path, lines, first_only=first_only) from None
