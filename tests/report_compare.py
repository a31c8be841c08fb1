"""Comparing reports across backends: exact, with types kept apart and NaN equal to itself."""

from __future__ import annotations

import math
from typing import Any


def comparable(value: Any) -> Any:
    """A report's dict with types kept apart (1 vs 1.0 vs True) and NaN equal to itself."""
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [comparable(v) for v in value]
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else repr(value))
    if isinstance(value, (bool, int)):
        return (type(value).__name__, value)
    return value


def checked_like_torch(batch: Any, spec: Any, backend: str) -> Any:
    """`tc.check(batch, spec, backend=backend)`, asserted to have run on that backend and to equal the torch
    backend's report (all but the name of the backend)."""
    import tritoncheck as tc

    report = tc.check(batch, spec, backend=backend)
    assert report.backend == backend, "the backend fell back instead of running the check"
    reference = tc.check(batch, spec, backend="torch")
    assert comparable(report.to_dict() | {"backend": "-"}) == comparable(reference.to_dict() | {"backend": "-"})
    return report


def only(report: Any) -> Any:
    """The one violation of `report` (its text shown where there are others or none)."""
    assert len(report.violations) == 1, str(report)
    return report.violations[0]
