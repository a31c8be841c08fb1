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
