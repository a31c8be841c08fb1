"""Every check kind is registered once with all its parts, and dispatch refuses an unknown kind."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

import tritoncheck as tc
from tritoncheck.checks.registry import REGISTRY, CheckKind, UnknownCheckKind, describe, hint, kind_of, kinds
from tritoncheck.plan.lower import compile_plan, referenced_fields
from tritoncheck.spec.schema import spec_from_dict

DOC = Path(__file__).resolve().parent.parent / "docs" / "errors.md"
OPTIONAL_PARTS = {"repair", "value_fails"}  # a kind may need no repair, and only element-wise kinds test one value
RULE_KINDS = {"rule", "dim_bound"}  # lowered from the spec's `rules:` list, not from a field option
HOST_KINDS = {"dim_bound"}  # checked by `bind` from sizes alone: no data to settle, evaluate or lower


def test_builtin_kinds_are_registered():
    assert set(REGISTRY) == {"min", "max", "values", "finite", "rule", "dim_bound", "monotonic", "multiple_of"}


def test_each_kind_is_one_module_of_the_checks_folder():
    """Each kind's node type lives in a module of tritoncheck/checks/ other than the core, found and imported by
    the package (min and max share range.py, rule and dim_bound rules.py)."""
    modules = {kind: entry.node.__module__ for kind, entry in REGISTRY.items()}
    assert all(m.startswith("tritoncheck.checks.") and m != "tritoncheck.checks.registry" for m in modules.values())
    assert modules["multiple_of"] == "tritoncheck.checks.multiple_of"
    assert [k.code for k in kinds()] == [c for c in tc.VIOLATION_CODES if c in {k.code for k in REGISTRY.values()}]


def test_a_new_kind_is_named_by_its_module_alone():
    """`multiple_of` was added as one module: no other file of the package (dispatch, plan, backends, report,
    strategies, spec, scan) names the kind, its option or its code."""
    root = Path(tc.__file__).resolve().parent
    own = root / "checks" / "multiple_of.py"
    entry = REGISTRY["multiple_of"]
    names = {entry.kind, entry.option.name, entry.code, entry.node.__name__}
    found = [f"{path.relative_to(root)}: {name}" for path in sorted(root.rglob("*.py")) if path != own
             for name in names if name in path.read_text(encoding="utf-8")]
    assert found == []
    assert all(name in own.read_text(encoding="utf-8") for name in names)


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_no_part_is_missing(kind):
    entry = REGISTRY[kind]
    for part in fields(CheckKind):
        if part.name in OPTIONAL_PARTS or (kind in RULE_KINDS and part.name in ("option", "lower")):
            continue
        if kind in HOST_KINDS and part.name in ("settle", "torch", "ir", "per_sample"):
            continue
        assert getattr(entry, part.name) is not None, f"{kind}: no {part.name}"
    if kind not in RULE_KINDS:
        assert entry.option.name and callable(entry.lower)


@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_every_kind_has_its_code_documented_and_listed(kind):
    entry = REGISTRY[kind]
    sections = re.findall(r"^## `([a-z_]+)`\s*$", DOC.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert entry.doc == f"docs/errors.md#{entry.code}"
    assert entry.code in sections
    assert entry.code in tc.VIOLATION_CODES


@dataclass(frozen=True)
class Stranger:
    field: str = "x"
    kind: str = "min"  # a registered kind, but not the registered node type


def test_dispatch_raises_on_an_unknown_kind():
    for obj in (Stranger(), Stranger(kind="no_such_kind"), object()):
        with pytest.raises(UnknownCheckKind):
            kind_of(obj)
        with pytest.raises(UnknownCheckKind):
            describe(obj)
        with pytest.raises(UnknownCheckKind):
            referenced_fields(obj)


def test_registering_a_kind_twice_is_refused():
    from tritoncheck.checks.registry import register

    with pytest.raises(ValueError, match="already registered"):
        register(REGISTRY["min"])


def _spec(**field):
    return spec_from_dict({"name": "s", "fields": {"x": {"dtype": "int64", "shape": ["B", "L"], **field}}}, "s.yaml")


def test_field_options_lower_in_their_kinds_order():
    plan = compile_plan(_spec(min=0, max=9, values=[1, 2], monotonic="L", multiple_of=2))
    assert [c.kind for c in plan.checks] == ["min", "max", "values", "monotonic", "multiple_of"]
    assert [describe(c) for c in plan.checks] == ["x >= 0", "x <= 9", "x in [1, 2]", "x is non-decreasing along L",
                                                  "x is a multiple of 2"]


def test_range_hint_is_part_of_its_kind():
    c = compile_plan(spec_from_dict({"name": "s", "fields": {"y": {
        "dtype": "int64", "shape": ["B"], "min": 0, "allow": [-100]}}}, "s.yaml")).checks[0]
    assert hint(c, -1).startswith("-1 where -100 was meant?")
    assert hint(c, -2) is None
