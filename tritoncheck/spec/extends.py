"""`extends:` in spec files: a contract written as the changes to another one.

    extends: bert-sequence-classification    # a built-in name, or a path relative to this file
    name: my-classifier
    fields:
      token_type_ids: null                   # removes the field (and the base rules that name it)
      labels: {max: 9}                       # overrides these keys of the base field only
    rules:
      - rule: L <= 128                       # appended after the base rules

Merging is done on the raw YAML mappings before validation, so the result is checked as one spec:
top-level keys override, `params` merge key by key, a field's keys override one by one (a null key
resets it to its default; `hints` merge by code), `fields: {x: null}` removes x, rules append.

A spec file is untrusted, so `extends:` reads little and says little. It reads a built-in by name,
or a `.yaml`/`.yml` file of at most `MAX_BYTES` in the extending file's own directory or below it
(after resolving symlinks). Any other path (absolute, `..` leaving that directory, a symlink
pointing elsewhere) is refused unless `TRITONCHECK_EXTENDS_ANYWHERE=1` is set. An error in a base
file names the file, and the line and column, never its content.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tritoncheck import expr as _expr
from tritoncheck.spec.schema import (
    BatchSpec,
    SpecError,
    builtin_dir,
    builtin_spec_names,
    closest,
    import_yaml,
    spec_from_dict,
    split_where,
)

MAX_DEPTH = 16
MAX_NODES = 100_000  # a spec has tens of nodes; a YAML alias bomb has billions
MAX_BYTES = 1 << 20  # a spec is a few KB; a base file larger than 1 MiB is refused unread
ANYWHERE_ENV = "TRITONCHECK_EXTENDS_ANYWHERE"
SUFFIXES = (".yaml", ".yml")


def resolve(data: Any, path: str | Path) -> Any:
    """Return `data` (a spec mapping read from `path`) with its `extends:` chain merged in."""
    return _resolve(data, Path(path), chain=())


def _resolve(data: Any, path: Path, chain: tuple[Path, ...]) -> Any:
    if not isinstance(data, Mapping) or "extends" not in data:
        return data
    here = _key(path)
    if here in chain:
        cycle = " -> ".join(str(p) for p in (*chain, here))
        raise SpecError(f"{path}: extends cycle: {cycle}")
    if len(chain) >= MAX_DEPTH:
        raise SpecError(f"{path}: extends chain deeper than {MAX_DEPTH} files")
    base_ref = data["extends"]
    if not isinstance(base_ref, str) or not base_ref.strip():
        raise SpecError(f"{path}: extends must be a built-in spec name or a relative path, got {type(base_ref).__name__}")
    base_path = _locate(base_ref.strip(), path)
    base = _resolve(read_yaml(base_path, f"{path}: the base spec {base_path}"), base_path, (*chain, here))
    if not isinstance(base, Mapping):
        raise SpecError(f"{path}: the base spec {base_path} is not a mapping")
    child = {k: v for k, v in data.items() if k != "extends"}
    return merge(base, child, str(path))


def merge(base: Mapping[str, Any], child: Mapping[str, Any], source: str) -> dict[str, Any]:
    """The spec mapping `base` with `child`'s changes applied (see the module docstring)."""
    out = dict(base)
    for key, value in child.items():
        if key == "params":
            base_params = _mapping(base.get("params"), f"{source}: base params")
            out["params"] = {**base_params, **_mapping(value, f"{source}: params")}
        elif key == "fields":
            base_fields = _mapping(base.get("fields"), f"{source}: base fields")
            out["fields"] = _merge_fields(base_fields, _mapping(value, f"{source}: fields"))
        elif key == "rules":
            if value is not None and not isinstance(value, list):
                raise SpecError(f"{source}: rules must be a list, got {type(value).__name__}")
            out["rules"] = list(base.get("rules") or []) + list(value or [])
        else:
            out[key] = value
    removed = set(_mapping(base.get("fields"), source)) - set(out.get("fields") or {})
    if removed and isinstance(out.get("rules"), list):
        out["rules"] = [r for r in out["rules"] if not (_rule_names(r) & removed)]
    return out


def _merge_fields(base: Mapping[str, Any], child: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for name, override in child.items():
        if override is None:
            out.pop(name, None)
            continue
        if not isinstance(override, Mapping) or not isinstance(base.get(name), Mapping):
            out[name] = override  # a new field, or a malformed one that validation will report
            continue
        merged = dict(base[name])
        for key, value in override.items():
            if value is None:
                merged.pop(key, None)
            elif key == "hints" and isinstance(value, Mapping) and isinstance(merged.get("hints"), Mapping):
                hints = {**merged["hints"], **value}
                merged["hints"] = {k: v for k, v in hints.items() if v is not None}
            else:
                merged[key] = value
        out[name] = merged
    return out


def _rule_names(rule: Any) -> set[str]:
    """Names a rule uses; an unparsable rule names nothing here (validation reports it later)."""
    text = rule.get("rule") if isinstance(rule, Mapping) else rule
    if not isinstance(text, str):
        return set()
    try:
        return set().union(*(_expr.names(_expr.parse(part)) for part in split_where(text)))
    except ValueError:
        return set()


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError(f"{where} must be a mapping, got {type(value).__name__}")
    return value


def _locate(ref: str, child: Path) -> Path:
    """The base file `ref` names: a built-in, or a YAML file beside `child` (elsewhere only with the opt-in)."""
    if not Path(ref).suffix:
        if ref in builtin_spec_names():
            return builtin_dir() / f"{ref}.yaml"
        raise SpecError(f"{child}: extends {ref!r}: no such file and no built-in spec of that name (a file must end in "
                        f".yaml or .yml); built-ins: {', '.join(builtin_spec_names())}")
    candidate = child.parent / ref  # an absolute ref stays absolute
    target = _key(candidate)
    if candidate.suffix.lower() not in SUFFIXES or target.suffix.lower() not in SUFFIXES:
        raise SpecError(f"{child}: extends {ref!r}: only .yaml and .yml files can be extended")
    if os.environ.get(ANYWHERE_ENV) != "1" and (Path(ref).is_absolute() or not target.is_relative_to(_key(child.parent))):
        raise SpecError(f"{child}: extends {ref!r}: outside the directory of {child.name}; a spec may extend only a built-in "
                        f"or a file in its own directory or below, unless {ANYWHERE_ENV}=1 is set in the environment")
    if not candidate.exists():
        raise SpecError(f"{child}: extends {ref!r}: no such file ({candidate})")
    return candidate


def read_yaml(path: Path, what: str) -> Any:
    """Parse a YAML file of at most MAX_BYTES; errors start with `what` and never quote the file's content."""
    yaml = import_yaml()
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise SpecError(f"{what}: not a regular file")
        if info.st_size > MAX_BYTES:
            raise SpecError(f"{what}: {info.st_size} bytes; a spec file may hold at most {MAX_BYTES}")
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"{what}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    if len(raw) > MAX_BYTES:  # it grew after the stat
        raise SpecError(f"{what}: more than {MAX_BYTES} bytes; a spec file may hold at most {MAX_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{what}: not UTF-8 text (at byte {exc.start})") from None
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is not None and _expanded_size(node, MAX_NODES) > MAX_NODES:
                raise SpecError(f"{what}: more than {MAX_NODES} YAML nodes once aliases are expanded")
            twice = _repeated_key(node, set()) if node is not None else None
            if twice is not None:  # a loader keeps the last of the two without a word
                raise SpecError(f"{what}: a key appears twice in one mapping (lines {twice[0]} and {twice[1]})")
            return loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise SpecError(f"{what}: not valid YAML{where}") from None
    except RecursionError:
        raise SpecError(f"{what}: nested too deeply") from None


def _repeated_key(node: Any, seen: set[int]) -> tuple[int, int] | None:
    """The lines of the first key given twice in one mapping of the YAML graph (`seen`: nodes visited)."""
    if id(node) in seen:
        return None
    seen.add(id(node))
    children = node.value if isinstance(node.value, list) else []
    if node.id == "mapping":
        lines: dict[Any, int] = {}
        for key, _ in children:
            if key.id == "scalar" and key.value != "<<":  # `<<` merges may repeat
                if key.value in lines:
                    return lines[key.value], key.start_mark.line + 1
                lines[key.value] = key.start_mark.line + 1
        children = [n for pair in children for n in pair]
    for child in children:
        found = _repeated_key(child, seen)
        if found is not None:
            return found
    return None


def _expanded_size(node: Any, limit: int) -> int:
    """Nodes in a YAML graph with every alias expanded, counted up to just past `limit`.

    An alias is a reference, so `yaml.safe_load` builds a "billion laughs" document cheaply, but
    anything that then walks the spec (validation, merging) would visit every expansion.
    """
    count, stack = 0, [node]
    while stack and count <= limit:
        n = stack.pop()
        count += 1
        if isinstance(n.value, list):
            stack.extend(v for item in n.value for v in (item if isinstance(item, tuple) else (item,)))
    return count


def _key(path: Path) -> Path:
    try:
        return path.resolve()
    except OSError:
        return path


def _is_file(path: Path) -> bool:
    """Whether `path` is a file; False where the OS refuses the name (too long, a NUL byte)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def spec_path(name_or_path: str | Path) -> Path:
    """The file a built-in name or a path refers to."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise SpecError(f"a spec is a built-in name or a YAML file's path, not a value of type {type(name_or_path).__name__}"
                        + (" (a dict: tc.BatchSpec.model_validate(data))" if isinstance(name_or_path, dict) else ""))
    if "\n" in str(name_or_path):
        raise SpecError("a spec is a built-in name or a YAML file's path, not YAML text: write it to a file, or "
                        "pass yaml.safe_load(text) to tc.BatchSpec.model_validate")
    path = Path(name_or_path)
    if not path.suffix and not _is_file(path):
        if str(name_or_path) not in builtin_spec_names():
            raise SpecError(f"no built-in spec named {str(name_or_path)!r}{closest(name_or_path, builtin_spec_names())}; "
                            f"built-ins: {', '.join(builtin_spec_names())}")
        path = builtin_dir() / f"{name_or_path}.yaml"
    return path


def read_spec(name_or_path: str | Path) -> BatchSpec:
    """Read a built-in spec by name, or a YAML file, without filling parameters."""
    path = spec_path(name_or_path)
    if not _is_file(path):
        raise SpecError(f"spec file not found: {path}")
    data = resolve(read_yaml(path, str(path)), path)
    return spec_from_dict(data, str(path))
