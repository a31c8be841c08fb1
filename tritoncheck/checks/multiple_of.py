"""multiple_of: `multiple_of: 8` -- every value of an integer field is a multiple of k.

Sequence lengths padded to a multiple of 8 for tensor cores, sizes a kernel tiles by, strides of
packed positions. `k` is a positive integer written in the spec (no parameter); values in the
field's `allow` list (`-100`) are exempt, as from its other value checks.

Integer and bool fields only: a float field with this option is refused at load (a remainder of a
rounded value would pass or fail by rounding, not by the data; cast, or write a rule). This module
is the whole kind: no other file of the package names it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tritoncheck.checks.registry import (
    CheckKind,
    Option,
    Severity,
    allow_text,
    always_per_sample,
    break_with,
    except_allowed,
    register,
)
from tritoncheck.dtypes import GROUPS, INT64_MAX, all_integer_names

if TYPE_CHECKING:
    import torch

SPAN = 25  # multiples a strategy draws from at each end of a field's range


@dataclass(frozen=True, slots=True)
class MultipleOfCheck:
    """`field % k == 0` for every value not in `allow`."""

    field: str
    k: int
    allow: tuple[int | float, ...]
    axes: tuple[str, ...]
    hint: str | None
    kind: Literal["multiple_of"] = "multiple_of"
    code: str = "not_a_multiple"
    severity: Severity = "error"


def _check_option(k: Any) -> int:
    """`multiple_of:` as a spec gives it: a positive integer of int64."""
    if isinstance(k, bool) or not isinstance(k, int):
        raise ValueError(f"must be a positive integer such as 8, got {k!r}")
    if not 1 <= k <= INT64_MAX:
        raise ValueError(f"must be a positive integer such as 8 (at most 2**63 - 1), got {k}")
    return k


def _lower(name: str, f: Any, fp: Any, scope: Any) -> tuple:
    k = getattr(f, "multiple_of", None)
    if k is None:
        return ()
    if not all_integer_names(fp.dtypes):
        floats = ", ".join(d for d in fp.dtypes if d in GROUPS["float"])
        raise scope.error(f"fields.{name}.multiple_of", f"needs an integer field, but {name} accepts {floats}: a "
                                                        "float's remainder depends on its rounding; cast the field, "
                                                        "or write a rule")
    code = "not_a_multiple"
    return (MultipleOfCheck(name, k, tuple(f.allow), fp.axes, f.hints.get(code),
                            severity=f.severity.get(code, "error")),)


def _describe(c: MultipleOfCheck) -> str:
    return f"{c.field} is a multiple of {c.k}{allow_text(c.allow)}"


def _settle(c: MultipleOfCheck, ctx: Any) -> bool:
    summary = ctx.summary(c.field)
    if summary is None or c.k == 1:
        return True
    lo, hi = summary  # a constant field: that one value decides
    return lo == hi and (lo % c.k == 0 or lo in ctx.comparable(c.allow, c.field))


def _torch(c: MultipleOfCheck, ctx: Any) -> torch.Tensor:
    x = ctx.tensor(c.field)  # int64: every k of the spec fits
    return except_allowed(x.remainder(c.k) != 0, x, ctx.comparable(c.allow, c.field))


def _ir(c: MultipleOfCheck, lw: Any) -> Any:
    x = lw.full_load(c.field)  # an integer field loads as int64 ("i")
    bad = lw.emit("ne", (lw.emit("mod", (x, lw.const(c.k, "i")), "i"), lw.const(0, "i")), "b")
    return lw.allowed(bad, x, c.field, c.allow)


def _hint(c: MultipleOfCheck, value: Any) -> str | None:
    """The spec's hint, else the two multiples around the value found."""
    if c.hint is not None or isinstance(value, bool) or not isinstance(value, int):
        return c.hint
    below = value // c.k * c.k
    return f"{value} lies between the multiples {below} and {below + c.k}"


def _fails(c: MultipleOfCheck, v: float, ctx: Any) -> bool:
    return v not in c.allow and (not float(v).is_integer() or int(v) % c.k != 0)


def _constrain(c: MultipleOfCheck, ctx: Any) -> None:
    """Draw from the multiples of k in the field's range so far: up to SPAN at each end (from 0 where it
    is open), or those of its value set."""
    d = ctx.domains[c.field]
    d.allow = c.allow
    if d.values is not None:
        d.values = [v for v in d.values if float(v).is_integer() and int(v) % c.k == 0]
        return
    lo = None if d.lo is None else -(-int(-(-d.lo // 1)) // c.k)  # multiples of k, in units of k
    hi = None if d.hi is None else int(d.hi // 1) // c.k
    if lo is None:
        lo = 0 if hi is None or hi >= 0 else hi - 2 * SPAN
    if hi is None:
        hi = lo + 2 * SPAN
    units = range(lo, hi + 1) if hi - lo < 2 * SPAN else [*range(lo, lo + SPAN), *range(hi - SPAN + 1, hi + 1)]
    d.values = [u * c.k for u in units]


def _mutate(c: MultipleOfCheck, ctx: Any, rng: random.Random):
    """One element moved off its multiple (a valid value plus or minus 1, or half of k)."""
    if c.field not in ctx.batch or c.k == 1 or ctx.batch[c.field].numel() == 0:
        return None
    flat = ctx.batch[c.field].reshape(-1)
    near = [int(flat[rng.randrange(flat.numel())]) for _ in range(4)]
    return break_with(c, ctx, rng, (w for v in near for w in (v + 1, v - 1, v + c.k // 2)), "not a multiple")


register(CheckKind(
    kind="multiple_of", node=MultipleOfCheck, code="not_a_multiple", doc="docs/errors.md#not_a_multiple", order=60,
    option=Option("multiple_of", int | None, "Every value is a multiple of this positive integer (8: lengths padded "
                                             "for tensor cores); integer fields only; `allow` values are exempt.",
                  check=_check_option),
    lower=_lower, describe=_describe, settle=_settle, torch=_torch, ir=_ir, hint=_hint, value_fails=_fails,
    per_sample=always_per_sample, constrain=_constrain, mutate=_mutate,
))
