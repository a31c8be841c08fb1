"""Check kinds, each one module of this folder, registered once with every part a backend, the
strategies and the report need (see `registry`).

Every module here but `registry` is a kind's: this package imports each once, found by listing the
folder, so a new kind is one new module and no other file names it. The names the other layers use
are re-exported here.
"""

from __future__ import annotations

import pkgutil
from importlib import import_module

from tritoncheck.checks.registry import (
    REGISTRY,
    SEVERITIES,
    CheckKind,
    Option,
    Severity,
    UnknownCheckKind,
    describe,
    expr_axes,
    expr_dims,
    expr_fields,
    field_codes,
    field_kinds,
    hint,
    kind_codes,
    kind_of,
    message,
    options,
    register,
)
from tritoncheck.report import CONTRACT_CODES, HOST_CODES

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module != "registry":
        import_module(f"{__name__}.{_module}")  # registers its kind (once: a module runs once)

from tritoncheck.checks.finite import FiniteCheck  # noqa: E402
from tritoncheck.checks.monotonic import MonotonicCheck  # noqa: E402
from tritoncheck.checks.range import MINUS_ONE_HINT, RangeCheck, range_limit  # noqa: E402
from tritoncheck.checks.rules import DimCheck, RuleCheck  # noqa: E402
from tritoncheck.checks.values import ValueSetCheck, covers  # noqa: E402

# Every code tritoncheck itself emits (`tc.VIOLATION_CODES`), in the order of docs/errors.md.
VIOLATION_CODES: tuple[str, ...] = (*HOST_CODES, *kind_codes(), *CONTRACT_CODES)

__all__ = [
    "MINUS_ONE_HINT", "REGISTRY", "SEVERITIES", "VIOLATION_CODES", "CheckKind", "DimCheck", "FiniteCheck",
    "MonotonicCheck", "Option", "RangeCheck", "RuleCheck", "Severity", "UnknownCheckKind", "ValueSetCheck", "covers",
    "describe", "expr_axes", "expr_dims", "expr_fields", "field_codes", "field_kinds", "hint", "kind_codes",
    "kind_of", "message", "options", "range_limit", "register",
]
