"""Dtype names used in specs, and the dtype each backend compares values in.

Both backends compare in the same *compute dtype* (int64 for integers and bool, float32 for
16- and 32-bit floats, float64 for float64), so a bound such as 0.1 rounds the same way in the
Triton kernel and in the torch reference and the two agree bit for bit.

Names, groups and limits need no torch (importing it costs over a second of CPU): a spec loads
and validates without it. The torch dtypes are made on first use (`torch_dtypes`); a function
given a torch.dtype has torch loaded already.
"""

from __future__ import annotations

import math
import struct
import sys
from fractions import Fraction
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

DTYPE_NAMES: tuple[str, ...] = (
    "bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
)
GROUPS: dict[str, tuple[str, ...]] = {
    "int": ("uint8", "int8", "int16", "int32", "int64"),
    "float": ("float16", "bfloat16", "float32", "float64"),
}
# torch's other names of these dtypes (torch.long is int64), for a spec that writes one
TORCH_ALIASES: dict[str, str] = {
    "short": "int16", "int": "int32", "long": "int64", "half": "float16", "float": "float32", "double": "float64",
}
# the values each integer (and bool) dtype holds: the bounds a field of it puts on an expression
INT_RANGES: dict[str, tuple[int, int]] = {
    "bool": (0, 1), "uint8": (0, 2**8 - 1), "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1),
}
ITEMSIZE: dict[str, int] = {
    "bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "float16": 2, "bfloat16": 2, "float32": 4,
    "float64": 8,
}
_TORCH_DTYPES: dict[str, torch.dtype] = {}  # filled by torch_dtypes()
_NAMES: dict[torch.dtype, str] = {}  # torch dtype -> name, filled by name_of()
_COMPUTE: dict[torch.dtype, torch.dtype] = {}  # filled by compute_dtype()


def torch_dtypes() -> dict[str, torch.dtype]:
    """Spec dtype names -> torch dtypes, in `DTYPE_NAMES` order; imports torch on the first call."""
    if not _TORCH_DTYPES:
        import torch

        _TORCH_DTYPES.update((name, getattr(torch, name)) for name in DTYPE_NAMES)
    return _TORCH_DTYPES


def name_of(dtype: torch.dtype) -> str:
    """A tensor's dtype as its name (`dtype_name`), in one dict lookup: where a batch's tensors meet the plan,
    which holds dtype names."""
    name = _NAMES.get(dtype)
    if name is None:
        if not _NAMES:
            _NAMES.update((d, n) for n, d in torch_dtypes().items())
        name = _NAMES.get(dtype) or dtype_name(dtype)  # (a dtype no spec names, complex64, is not kept)
    return name


def is_torch_dtype(value: Any) -> bool:
    """Whether `value` is a torch.dtype, without importing torch: none exists before torch is imported."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.dtype)


def expand_names(names: list[str]) -> tuple[str, ...]:
    """Spec dtype names (and groups) -> the dtype names they stand for, each once; raise ValueError on an
    unknown name."""
    out: list[str] = []
    for name in names:
        for n in GROUPS.get(name, (name,)):
            if n not in DTYPE_NAMES:
                known = ", ".join([*DTYPE_NAMES, *GROUPS])
                raise ValueError(f"unknown dtype {name!r}; known: {known}")
            if n not in out:
                out.append(n)
    return tuple(out)


def is_dtype_name(name: str) -> bool:
    """A dtype name or group a spec may list (int64, bfloat16, float, ...)."""
    return name in DTYPE_NAMES or name in GROUPS


def dtype_name(dtype: torch.dtype | str) -> str:
    """torch.int64 -> int64: a torch dtype's name is its spec name (any other dtype's name too); a name is
    itself."""
    return str(dtype).removeprefix("torch.")


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a field of `dtype` is compared in (see the module docstring); one lookup once seen."""
    out = _COMPUTE.get(dtype)
    if out is None:
        table = torch_dtypes()
        if dtype.is_floating_point:
            out = table["float64"] if dtype == table["float64"] else table["float32"]
        else:
            out = table["int64"]
        _COMPUTE[dtype] = out
    return out


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def all_integer_names(names: tuple[str, ...]) -> bool:
    """True when every accepted dtype (names, as `expand_names` gives them) is an integer or bool: the field
    can only hold integers."""
    return all(n not in GROUPS["float"] for n in names)


def compute_kind(name: str) -> str:
    """The kind a field of dtype `name` is compared in (see the module docstring): "i" (int64, for integers and
    bool), "f" (float32) or "d" (float64)."""
    return "d" if name == "float64" else "f" if name in GROUPS["float"] else "i"


def float32(value: float) -> float:
    """A double rounded to the nearest float32 (+-inf past its range), as torch rounds a Python float into
    float32 (`torch.tensor(value, dtype=torch.float32).item()`)."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:  # (struct refuses what C's conversion rounds to an infinity)
        return math.copysign(math.inf, value)


def int_limit(value: int | float, side: str) -> int | str:
    """The int64 bound an integer field is compared with, exactly: `x < value` (side "min") or
    `x > value` (side "max"); "always"/"never" where no int64 bound expresses it (NaN, inf, huge).

    A fractional bound rounds inward (x >= 0.5 is x >= 1). Only bounds over dims, or on fields
    that also accept floats, get here with such values: a field that holds only integers cannot be
    given a fractional or non-finite number (see `number_problem`).
    """
    if isinstance(value, float):
        if math.isnan(value):
            return "never"
        if math.isinf(value):
            return "always" if (value > 0) == (side == "min") else "never"
        value = math.ceil(value) if side == "min" else math.floor(value)
    value = int(value)
    if side == "min":
        return "always" if value > INT64_MAX else "never" if value <= INT64_MIN else value
    return "always" if value < INT64_MIN else "never" if value >= INT64_MAX else value


def number_problem(value: int | float, integers: bool) -> str | None:
    """Why `value` cannot be a bound, sentinel or set member of a field, or None if it can.

    A field that holds only integers compares exactly, so a fractional, non-finite or
    out-of-int64 number there is a mistake in the spec (0.5 would silently never match); on a
    float field only NaN is one, since NaN never compares equal (nor less or greater).
    """
    if isinstance(value, bool):
        return None
    if integers:
        if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
            return f"{value!r} is not an integer"
        if not INT64_MIN <= value <= INT64_MAX:
            return f"{value!r} is outside the int64 range"
        return None
    if isinstance(value, float) and math.isnan(value):
        return "nan never compares equal, less or greater; to reject NaN use finite: true"
    return None


def comparable_values(values: tuple[int | float, ...], dtype: str | torch.dtype) -> tuple[int | float, ...]:
    """The values a field of `dtype` (a name, or a torch dtype) can equal, as every backend compares them (once,
    here).

    A value is compared exactly, never rounded into the field's range: for an integer (or bool)
    field a fractional, non-finite or out-of-int64 value can never be equal, so it is dropped
    (0.5 does not allow 0). A float field compares in its compute dtype, so the value is rounded
    to float32 for 16- and 32-bit floats, as torch does with a Python scalar; NaN never equals.
    """
    out: list[int | float] = []
    kind = compute_kind(dtype_name(dtype))
    if kind == "i":
        for v in values:
            if isinstance(v, bool) or isinstance(v, int):
                v = int(v)
            elif math.isfinite(v) and float(v).is_integer():
                v = int(v)
            else:
                continue
            if INT64_MIN <= v <= INT64_MAX and v not in out:
                out.append(v)
        return tuple(out)
    for v in values:
        f = float(v)
        if math.isnan(f):
            continue
        if kind == "f":
            f = float32(f)
        if f not in out:
            out.append(f)
    return tuple(out)


def as_double(v: int | float) -> float:
    """A Python number as a double; an integer past the double range is +-inf, as torch has it."""
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


FLIPPED = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}  # c op x  ==  x FLIPPED[op] c


def exact_comparison(op: str, value: int | float | bool, kind: str) -> tuple[str, int | float] | bool:
    """`x op value`, exactly, for every x of compute kind `kind` ("i": int64 or bool, "f": float32,
    "d": float64), as `(op, c)` -- one comparison in that kind with a constant it holds, the
    constant rounded once in the direction `op` needs -- or as the verdict when it is the same for
    every x, NaN included (docs/semantics.md). `x < 16777217` on float32 is `x < 16777218`,
    `x > 16777216.5` on int64 is `x > 16777216`, `x == 0.1` on float32 is False."""
    if isinstance(value, float) and math.isnan(value):
        return op == "!="
    v = int(value) if isinstance(value, bool) else value
    if kind in ("i", "b"):
        if isinstance(v, float) and math.isinf(v):
            return op in ("!=", "<", "<=") if v > 0 else op in ("!=", ">", ">=")
        exact = isinstance(v, int) or v.is_integer()
        if op in ("==", "!="):
            if not exact or not INT64_MIN <= int(v) <= INT64_MAX:
                return op == "!="
            return op, int(v)
        c = int(v) if exact else (math.ceil(v) if op in ("<", ">=") else math.floor(v))
        if c > INT64_MAX:
            return op in ("<", "<=")
        if c < INT64_MIN:
            return op in (">", ">=")
        return op, c
    down, up = _neighbours(v, kind)
    if down == up:
        return op, down
    if op in ("==", "!="):
        return op == "!="
    return op, (up if op in ("<", ">=") else down)


def _neighbours(v: int | float, kind: str) -> tuple[float, float]:
    """The largest and the smallest number of `kind` ("f" or "d") at most and at least v (+-inf past the range)."""
    import numpy as np

    if isinstance(v, float) and math.isinf(v):
        return v, v
    np_type = np.float32 if kind == "f" else np.float64
    top, exact = np_type(math.inf), Fraction(v)

    def cmp(a) -> int:  # the sign of a - v, exactly
        if math.isinf(a):
            return 1 if a > 0 else -1
        d = Fraction(float(a)) - exact
        return (d > 0) - (d < 0)

    with np.errstate(over="ignore"):
        r = np_type(as_double(v))  # the nearest, or one step off after rounding through a double
        while cmp(r) > 0:
            r = np.nextafter(r, -top)
        if cmp(r) == 0:
            return float(r), float(r)
        while cmp(np.nextafter(r, top)) < 0:
            r = np.nextafter(r, top)
        return float(r), float(np.nextafter(r, top))
