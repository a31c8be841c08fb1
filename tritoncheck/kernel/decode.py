"""The result buffer -> violations, for every backend that fills a `Layout` buffer (C, Triton).

Per failing check the buffer gives counts (per sample for checks over the batch axis) and the
first offending flat index; the decoder unravels the index over the check's axes and reads the
value shown there on the host: the field's element for a range, value-set or finiteness check,
and for a rule its *subject* (the left-hand side), computed by walking the subject's IR ops
with `PointOps` at that one position. PointOps is the eager torch ops handler of the kernel IR;
it evaluates in the same kinds the generated kernels compute in, and reduces with torch over the
reduced axes, so a violation costs one small evaluation, never a pass over the batch.

The violation itself (rule text, resolved bound, hint) comes from the torch backend's
`violation`, the one builder every backend uses, so reports agree exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from tritoncheck.dtypes import compute_dtype
from tritoncheck.plan.lower import Bound, RuleCheck
from tritoncheck.checks.registry import violation
from tritoncheck.report import SampleRange, Violation
from tritoncheck.kernel.ir import BIG, Kernel, Op, unravel, walk
from tritoncheck.kernel.sums import float_sum

KIND_DTYPE = {"b": torch.bool, "i": torch.int64, "f": torch.float32, "d": torch.float64}  # an IR kind's torch dtype


def decode(kernel: Kernel, values: Any, bound: Bound, walked: Mapping[str, int] | None = None,
           recorded: Mapping[int, int] | None = None) -> list[Violation]:
    """Violations from a filled result buffer, in the order of the kernel's checks.

    `recorded` gives, per check whose backend records it, the int64 bits of the value the kernel
    saw at the first offending index (`recorded_value`): shown as it is, never read from the batch,
    which may have changed since (deferred mode). Other checks' values are read from the batch.

    `walked` gives the sizes the kernel walked (`ir.loop_sizes`) where it walked an expanded dim
    at size 1: each entry found there stands for the dim's full size, so counts scale by it, the
    first index is the same position, and along the batch dim every sample holds it (a
    `SampleRange`, never one entry per sample).
    """
    layout = kernel.layout
    # one int64 view of the buffer (a ctypes array, a tensor or a list): per-sample counts are
    # summed and their nonzero rows listed by torch, in time proportional to the violations
    buf = values if isinstance(values, torch.Tensor) else (
        torch.tensor(values, dtype=torch.int64) if isinstance(values, (list, tuple)) else torch.frombuffer(values, dtype=torch.int64))
    dims = bound.dim_values()
    loop = {**dims, **(walked or {})}
    collapsed = {a: dims[a] for a, n in loop.items() if a in dims and n != dims[a]}
    batch = loop.get(kernel.batch_dim, 0)
    out = []
    for k, check in enumerate(kernel.checks):
        if not buf[layout.first(k)]:  # no failure: nothing else of it is written either
            continue
        base, row = layout.sample_base(k)
        if row >= 0:
            per_sample = buf[base + row * batch : base + (row + 1) * batch]
            hit = per_sample.nonzero().flatten()  # (one pass over the row; the count from its hits alone)
            count = int(per_sample.index_select(0, hit).sum())
            samples: Sequence[int] = tuple(hit.tolist())
        else:
            count, samples = int(buf[layout.count(k)]), ()
        if not count:
            continue
        count *= math.prod(collapsed[a] for a in check.axes if a in collapsed)
        if row >= 0 and kernel.batch_dim in collapsed:
            samples = SampleRange(collapsed[kernel.batch_dim])
        index = unravel(BIG - int(buf[layout.first(k)]), [axis_size(kernel, a, loop) for a in check.axes])
        seen = recorded_value(kernel, k, bound, recorded[k]) if recorded and k in recorded else \
            point_value(kernel, k, index, bound)
        out.append(violation(check, bound, count, samples, index, seen))
    return out


def recorded_value(kernel: Kernel, k: int, bound: Bound, bits: int) -> Any:
    """The Python value of check k whose int64 `bits` a kernel recorded, typed as `point_value` types it:
    a rule's subject in its kind, a field's element in its compute dtype (a float32's bits in the low half)."""
    check = kernel.checks[k]
    dtype = KIND_DTYPE[kernel.subjects[k].value.kind] if isinstance(check, RuleCheck) else \
        compute_dtype(bound.tensors[check.field].dtype)
    t = torch.tensor(bits, dtype=torch.int64)
    if dtype == torch.float32:
        return t.to(torch.int32).view(torch.float32).item()
    if dtype == torch.float64:
        return t.view(torch.float64).item()
    return t.to(dtype).item()


def axis_size(kernel: Kernel, axis: str, dims: Mapping[str, int]) -> int:
    return kernel.fixed[axis] if axis in kernel.fixed else dims[axis]


def point_value(kernel: Kernel, k: int, index: tuple[int, ...], bound: Bound) -> Any:
    """The value check `k` shows at `index` (a position over the check's axes), as a Python number."""
    check = kernel.checks[k]
    at = dict(zip(check.axes, index, strict=True))
    if not isinstance(check, RuleCheck):
        t = bound.tensors[check.field]
        return t[index].to(compute_dtype(t.dtype)).item()
    subject = kernel.subjects[k]
    env: dict[int, Any] = {}
    walk(subject.ops, PointOps(kernel, bound, at), env)
    return env[subject.value.id].item()


class PointOps:
    """The kernel IR evaluated eagerly with torch at one position (`at`: axis -> index).

    Values are tensors over the axes of the reductions being evaluated (none at the top level,
    so a check's subject comes out 0-d); a reduction appends its axes, and its body's loads and
    index ops follow those axes instead of `at`.
    """

    def __init__(self, kernel: Kernel, bound: Bound, at: dict[str, int]):
        self.kernel, self.bound, self.at = kernel, bound, at
        self.dims = bound.dim_values()
        # where a constant, index or host scalar is made: once reshaped to a reduction's rank, a CPU
        # tensor cannot meet the batch's CUDA ones
        self.device = next((t.device for t in bound.tensors.values()), None)
        self.free: list[str] = []  # axes of the reductions in progress, outermost first

    def _slot(self, axis: str) -> int:
        """Where `axis` lies in self.free: a reduction nested in one over the same axis (`any(sum(x)
        != x)` over B) rebinds it, so a load or index in the inner body follows the innermost."""
        return len(self.free) - 1 - self.free[::-1].index(axis)

    def _shape(self, axis: str) -> list[int]:
        """Size of `axis` at its innermost slot, 1 elsewhere."""
        shape = [1] * len(self.free)
        shape[self._slot(axis)] = axis_size(self.kernel, axis, self.dims)
        return shape

    def _align(self, *xs: torch.Tensor) -> list[torch.Tensor]:
        """Values from an outer scope have fewer (leading) axes: pad them to this scope's rank."""
        n = len(self.free)
        return [x.reshape(tuple(x.shape) + (1,) * (n - x.dim())) for x in xs]

    def load(self, op: Op, field: str, index: tuple) -> torch.Tensor:
        t = self.bound.tensors[field]
        axes = self.kernel.field(field).axes
        picks: list[Any] = []
        kept: list[str] = []
        for axis, sel in zip(axes, index, strict=True):
            if sel is not None:
                picks.append(sel)
            elif axis in self.free:
                picks.append(slice(None))
                kept.append(axis)
            else:
                picks.append(self.at[axis])
        x = t[tuple(picks)]  # over the kept axes, in the field's order
        # an expanded (zero-stride) axis holds one value: keep size 1 there, so that nothing here
        # allocates in proportion to a view's logical size (`reduction` scales sums back)
        size = [1 if st == 0 and n > 1 else n for n, st in zip(x.shape, x.stride(), strict=True)]
        x = x.as_strided(size, x.stride(), x.storage_offset()).to(KIND_DTYPE[op.kind])
        if kept:  # lay the kept axes out at their slots in self.free, size 1 elsewhere
            slots = [self._slot(a) for a in kept]
            shape = [1] * len(self.free)
            for slot, n in zip(slots, x.shape, strict=True):
                shape[slot] = n
            x = x.permute(sorted(range(len(kept)), key=slots.__getitem__)).reshape(shape)
        return x

    def load_prev(self, op: Op, field: str, axis: str) -> torch.Tensor:
        """The element before along `axis` (itself at position 0)."""
        whole = (None,) * len(self.kernel.field(field).axes)
        if axis not in self.free:
            at, self.at = self.at, {**self.at, axis: max(self.at[axis] - 1, 0)}
            try:
                return self.load(op, field, whole)
            finally:
                self.at = at
        x = self.load(op, field, whole)
        i = self._slot(axis)
        before = (torch.arange(x.shape[i], device=x.device) - 1).clamp(min=0)  # size 1 (an expanded axis): itself
        return x.index_select(i, before)

    def const(self, op: Op, value: Any) -> torch.Tensor:
        return torch.tensor(value, dtype=KIND_DTYPE[op.kind], device=self.device)

    def index(self, op: Op, axis: str) -> torch.Tensor:
        if axis in self.free:
            return torch.arange(axis_size(self.kernel, axis, self.dims), device=self.device).reshape(self._shape(axis))
        return torch.tensor(self.at[axis], dtype=torch.int64, device=self.device)

    def scalar(self, op: Op, slot: int) -> torch.Tensor:
        value = self.kernel.scalars[slot].value(self.dims)  # a double or an int64, as the kernel receives it
        as_passed = torch.float64 if isinstance(value, float) else torch.int64
        return torch.tensor(value, dtype=as_passed, device=self.device).to(KIND_DTYPE[op.kind])

    def cast(self, op: Op, x: torch.Tensor) -> torch.Tensor:
        return x.to(KIND_DTYPE[op.kind])

    def neg(self, op: Op, x: torch.Tensor) -> torch.Tensor:
        return -x

    def abs(self, op: Op, x: torch.Tensor) -> torch.Tensor:
        return x.abs()

    def not_(self, op: Op, x: torch.Tensor) -> torch.Tensor:
        return x == 0

    def truth(self, op: Op, x: torch.Tensor) -> torch.Tensor:
        return x != 0

    def isfinite(self, op: Op, x: torch.Tensor) -> torch.Tensor:
        return torch.isfinite(x)

    def _binary(self, fn: Callable, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = self._align(a, b)
        return fn(a, b)

    def add(self, op: Op, a, b):
        return self._binary(torch.add, a, b)

    def sub(self, op: Op, a, b):
        return self._binary(torch.sub, a, b)

    def mul(self, op: Op, a, b):
        return self._binary(torch.mul, a, b)

    def floordiv(self, op: Op, a, b):
        return self._binary(_floordiv, a, b)

    def mod(self, op: Op, a, b):
        return self._binary(_mod, a, b)

    def eq(self, op: Op, a, b):
        return self._binary(torch.eq, a, b)

    def ne(self, op: Op, a, b):
        return self._binary(torch.ne, a, b)

    def lt(self, op: Op, a, b):
        return self._binary(torch.lt, a, b)

    def le(self, op: Op, a, b):
        return self._binary(torch.le, a, b)

    def gt(self, op: Op, a, b):
        return self._binary(torch.gt, a, b)

    def ge(self, op: Op, a, b):
        return self._binary(torch.ge, a, b)

    def and_(self, op: Op, a, b):
        return self._binary(torch.logical_and, a, b)

    def or_(self, op: Op, a, b):
        return self._binary(torch.logical_or, a, b)

    def reduction(self, op: Op, red: str, axes: tuple[str, ...], body: Callable[[], torch.Tensor]) -> torch.Tensor:
        outer = len(self.free)
        self.free.extend(axes)
        try:
            x = self._align(body())[0]
            sizes = [axis_size(self.kernel, a, self.dims) for a in axes]
            if 0 in sizes:  # an empty reduction: any() is False, all() True, sum() 0
                x = x.expand(tuple(x.shape[:outer]) + tuple(sizes))
            dims = tuple(range(outer, outer + len(axes)))
            if red == "any":
                return x.any(dim=dims) if dims else x
            if red == "all":
                return x.all(dim=dims) if dims else x
            # a value of size 1 along a reduced axis stands for that many equal values
            spread = math.prod(n for j, n in enumerate(sizes) if x.shape[outer + j] == 1)
            if x.is_floating_point():  # the kernels' float sum, bit for bit (docs/semantics.md)
                return float_sum(x, dims, spread)
            out = x.sum(dim=dims) if dims else x
            if spread == 1:
                return out
            return out * ((spread + 2**63) % 2**64 - 2**63)  # int64 wraps
        finally:
            del self.free[outer:]


def _floordiv(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Floor division as the kernels compute it: torch's, with int64 a // 0 == 0 (torch raises)."""
    if a.dtype.is_floating_point:
        return torch.div(a, b, rounding_mode="floor")
    safe = torch.where((b == 0) | (b == -1), 1, b)
    q = torch.where(b == -1, -a, torch.div(a, safe, rounding_mode="floor"))
    return torch.where(b == 0, 0, q)


def _mod(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.remainder, with int64 a % 0 == a (torch raises)."""
    if a.dtype.is_floating_point:
        return torch.remainder(a, b)
    safe = torch.where((b == 0) | (b == -1), 1, b)
    r = torch.where(b == -1, 0, torch.remainder(a, safe))
    return torch.where(b == 0, a, r)


__all__ = ["PointOps", "decode", "point_value", "recorded_value"]
