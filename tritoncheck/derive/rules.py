"""Findings of a trace -> the spec mapping, each derived rule with its origin; the spec type that prints them.

The hints' mapping (today's per-family lists) is the starting point: it names fields and params and
carries the messages. The trace then decides: a bound an op puts on a field replaces the hint's
where the two differ, a field the hints do not know gets the op's bound, a loss's ignore index is
allowed in its target (an error only when every value is ignored: a NaN mean), and every tensor
parameter of `forward` becomes a field, so none is ever `unexpected_field`.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from pydantic import PrivateAttr

from tritoncheck.spec.schema import BatchSpec
from tritoncheck.derive.example import evaluate
from tritoncheck.derive.trace import Finding



class DerivedSpec(BatchSpec):
    """A contract `tc.spec_for` derived: `to_yaml()` writes where each rule came from as comments."""

    _origins: dict[str, list[str]] = PrivateAttr(default_factory=dict)  # "fields.<name>" / "rules.<text>" -> origins
    _how: str = PrivateAttr(default="")  # one line: traced, or derived by fallback and why
    _example: dict[str, Any] | None = PrivateAttr(default=None)  # the batch the trace ran cleanly on

    @property
    def origins(self) -> dict[str, list[str]]:
        """Where each derived field and rule came from: `{"fields.input_ids": ["max: bert.embeddings... (embedding)"]}`."""
        return dict(self._origins)

    @property
    def example(self) -> dict[str, Any] | None:
        """The batch the model ran cleanly on when this contract was traced (None for a fallback): a copy."""
        return None if self._example is None else {k: v.clone() for k, v in self._example.items()}

    @property
    def derivation(self) -> str:
        """How the contract was derived: from a trace of the forward, or by fallback (and why)."""
        return self._how

    def to_yaml(self) -> str:
        lines = super().to_yaml().splitlines()
        out = [f"# {line}" for line in self._how.splitlines()]
        section, rule = None, 0
        for line in lines:
            top = re.match(r"(\w+):", line)
            if top:
                section = top.group(1)
            field = re.fullmatch(r"  (\w+):", line) if section == "fields" else None
            key = f"fields.{field.group(1)}" if field else None
            if section == "rules" and line.startswith("- ") and rule < len(self.rules):
                key, rule = f"rules.{self.rules[rule].rule}", rule + 1
            indent = "  " if field else ""
            out += [f"{indent}# {_comment(o)}" for o in self._origins.get(key or "", [])]
            out.append(line)
        return "\n".join(out) + "\n"


def _comment(text: str) -> str:
    return " ".join(text.split())  # one line: a comment cannot break the YAML


def build(data: dict[str, Any], origins: dict[str, list[str]], how: str, source: str) -> DerivedSpec:
    from tritoncheck.spec.schema import spec_from_dict

    plain = spec_from_dict(data, source)
    spec = DerivedSpec.model_validate(plain.model_dump())
    spec._origins = {k: list(v) for k, v in origins.items()}
    spec._how = how
    return spec


def _note(origins: dict[str, list[str]], key: str, text: str) -> None:
    if text not in origins.setdefault(key, []):
        origins[key].append(text)


def merge_findings(data: dict[str, Any], findings: list[Finding], origins: dict[str, list[str]],
                   example: dict[str, torch.Tensor]) -> None:
    """Fold the trace's findings into the spec mapping `data` (in place); every field of `example` is in it."""
    fields, params = data["fields"], data["params"]
    by_field: dict[str, list[Finding]] = {}
    for f in findings:
        if f.field in fields:
            by_field.setdefault(f.field, []).append(f)
    for name, found in by_field.items():
        field = fields[name]
        for f in found:
            _note(origins, f"fields.{name}", _origin_text(f))
        index = [f for f in found if f.target is None or f.target == "classes"]
        if index:
            _index_bounds(name, field, index, params, data["rules"], origins)
        floats = example[name].is_floating_point()
        if floats and any(f.target == "probabilities" for f in found) and field.get("max") is None:
            field.update(min=0, max=1)
        if floats and any(f.target in ("probabilities", "values") for f in found):
            field["finite"] = True


def _origin_text(f: Finding) -> str:
    if f.target == "classes":
        bound = f"a class in [0, {f.high}]" + (f", ignore_index {f.ignore}" if f.ignore is not None else "")
    elif f.target:
        bound = f"a {f.target} target" + (" in [0, 1]" if f.target == "probabilities" else "")
    else:
        bound = f"in [{f.low}, {f.high}]"
    return f"{bound}: {f.origin}"


def _index_bounds(name: str, field: dict, found: list[Finding], params: dict, rules: list[dict],
                  origins: dict[str, list[str]]) -> None:
    """The tightest bound the ops put on the field; it replaces the hint's where the two differ."""
    low = max((f.low for f in found if f.low is not None), default=None)
    high = min((f.high for f in found if f.high is not None), default=None)
    for key, value in (("min", low), ("max", high)):
        hinted = field.get(key)
        if value is not None and (hinted is None or evaluate(hinted, params) not in (None, value)):
            field[key] = value
    dtypes = set.intersection(*(set(f.dtypes) for f in found))
    if dtypes and set(field["dtype"]) <= {"int64", "int32", "int"}:
        field["dtype"] = [d for d in ("int64", "int32") if d in dtypes]
    ignores = {f.ignore for f in found if f.ignore is not None}
    if len(ignores) != 1:
        return
    ignore = ignores.pop()
    if ignore not in field.setdefault("allow", []) and not (low is not None and high is not None and low <= ignore <= high):
        field["allow"].append(ignore)
    if not any(r.get("code") == "all_ignored" and re.search(rf"\b{name}\b", r["rule"]) for r in rules):
        rules.append({"rule": f"any({name} != {ignore})", "code": "all_ignored", "field": name,
                      "hint": f"every value of {name} is the loss's ignore_index {ignore}, so the mean loss is NaN"})
        _note(origins, f"rules.{rules[-1]['rule']}", f"{name} is a loss target with ignore_index {ignore}: "
              + next(f.origin for f in found if f.ignore is not None))
