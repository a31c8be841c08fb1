"""Dtype names used in specs, and the dtype each backend compares values in.

Both backends compare in the same *compute dtype* (int64 for integers and bool, float32 for
16- and 32-bit floats, float64 for float64), so a bound such as 0.1 rounds the same way in the
Triton kernel and in the torch reference and the two agree bit for bit.
"""

from __future__ import annotations

import torch

DTYPES: dict[str, torch.dtype] = {
    "bool": torch.bool,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
}
GROUPS: dict[str, tuple[str, ...]] = {
    "int": ("uint8", "int8", "int16", "int32", "int64"),
    "float": ("float16", "bfloat16", "float32", "float64"),
}
NAMES = {v: k for k, v in DTYPES.items()}


def expand_dtypes(names: list[str]) -> tuple[torch.dtype, ...]:
    """Spec dtype names (and groups) -> torch dtypes; raise ValueError on an unknown name."""
    out: list[torch.dtype] = []
    for name in names:
        for n in GROUPS.get(name, (name,)):
            if n not in DTYPES:
                known = ", ".join([*DTYPES, *GROUPS])
                raise ValueError(f"unknown dtype {name!r}; known: {known}")
            if DTYPES[n] not in out:
                out.append(DTYPES[n])
    return tuple(out)


def dtype_name(dtype: torch.dtype) -> str:
    return NAMES.get(dtype, str(dtype).removeprefix("torch."))


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    if dtype.is_floating_point:
        return torch.float64 if dtype == torch.float64 else torch.float32
    return torch.int64


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point
