"""The kernel IR: a plan's runnable data checks, lowered once for every device's code generator.

`lower(plan, checks, fields)` turns the data checks of one batch signature into a `Kernel`:

- **groups**: checks over the same iteration space (the same named axes, and whether they hold a
  reduction) share one `Group`; a group's ops are SSA values computed once per position, so a
  field checked for min, max and allowed values is loaded once;
- **ops**: small typed operations (`load`, `const`, `lt`, `floordiv`, `reduction`, ...; the table
  `OPS`), each of a *kind*: `b` bool, `i` int64, `f` float32, `d` float64 (the compute dtypes of
  `dtypes.compute_kind`, plus bool). All typing, promotion and constant conversion happens
  here, so a generator never decides semantics; it only spells each op for its device;
- **one predicate per check**: `Group.checks` pairs each check with the op that is true where the
  check fails;
- **arguments**: field pointers, strides (for non-contiguous fields), dim sizes and *host
  scalars* (sub-expressions over dims only, evaluated on the host per call exactly as the torch
  backend evaluates them);
- **the result buffer**, laid out once by `Layout`.

A generator walks the ops with `walk(ops, handler, env)`, which calls one handler method per op
(Inductor's ops handler): `handler.lt(op, a, b)`. A handler lacking a method is an error, never a
silent fallback; `missing_ops(handler)` lists what a handler lacks.

The IR needs no torch: a field's signature is its dtype's name, axes and layout (`FieldSig`), so a kernel and
its C source can be built for buffers that are not tensors; the functions given tensors only read their
shapes and strides.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tritoncheck.checks.registry import UnknownCheckKind, kind_of
from tritoncheck.checks.registry import expr_axes as axes_of
from tritoncheck.dtypes import (
    FLIPPED,
    INT64_MAX,
    INT64_MIN,
    as_double,
    comparable_values,
    compute_kind,
    dtype_name,
    exact_comparison,
    float32,
    int_limit,
)
from tritoncheck.expr import Arange, Binary, Const, Dim, Expr, Reduce, Ref, Unary, is_host, nodes, to_text
from tritoncheck.kernel import sums
from tritoncheck.plan.lower import DataCheck, Plan, RuleCheck, evaluate_scalar, stored_elements

if TYPE_CHECKING:
    import torch

BIG = 2**62  # a first-index slot holds BIG - index, so 0 means "none" and max() keeps the first

# Every op a handler implements, with its arguments (`Val`s are earlier ops' results).
OPS: dict[str, str] = {
    "load": "(field, index): the field's element at the current position, in its compute kind; index "
    "has one entry per field axis: None follows the axis' loop, k >= 0 selects k, k < 0 selects size + k",
    "const": "(value): a Python number already converted to the op's kind",
    "load_prev": "(field, axis): the field's element one position before the current one along axis (the "
    "current element itself at position 0); its other axes follow the loop",
    "index": "(axis): the current position along an axis, as int64 (arange)",
    "scalar": "(slot): host scalar `slot`, converted to the op's kind (int slots: int64; float slots: double)",
    "cast": "(x): x converted to the op's kind (b->i, b->f, i->f, i->d, f->d, b->d)",
    "neg": "(x): -x, wrapping for int64",
    "abs": "(x): |x|, wrapping for int64 (abs(INT64_MIN) == INT64_MIN)",
    "not_": "(x): x == 0, as b",
    "truth": "(x): x != 0, as b (NaN is true)",
    "isfinite": "(x): x is neither NaN nor +-inf, as b (x is f or d)",
    "add": "(a, b): a + b in the op's kind, int64 wrapping",
    "sub": "(a, b): a - b",
    "mul": "(a, b): a * b",
    "floordiv": "(a, b): floor(a / b) as torch computes it; for int64 a // 0 == 0",
    "mod": "(a, b): a - floor(a / b) * b as torch computes it (divisor's sign); for int64 a % 0 == a",
    "eq": "(a, b): a == b, as b", "ne": "(a, b): a != b", "lt": "(a, b): a < b", "le": "(a, b): a <= b",
    "gt": "(a, b): a > b", "ge": "(a, b): a >= b",
    "and_": "(a, b): both b operands true", "or_": "(a, b): either true",
    "reduction": "(red, axes, body): sum/any/all of body() over the named axes, which the body's "
    "loads and index ops follow (shadowing an outer position along the same axis)",
}

class Unsupported(Exception):
    """A construct this IR does not lower (a backend then leaves the plan to the torch backend)."""


@dataclass(frozen=True, slots=True)
class Val:
    """A reference to an earlier op's result."""

    id: int
    kind: str


@dataclass(frozen=True, slots=True)
class Op:
    """One SSA value: `name` is the handler method, `args` holds `Val`s and literals (see OPS)."""

    id: int
    name: str
    args: tuple[Any, ...]
    kind: str

    @property
    def val(self) -> Val:
        return Val(self.id, self.kind)


@dataclass(frozen=True, slots=True)
class HostScalar:
    """A sub-expression over dims and constants, evaluated on the host per call.

    `py` is its Python type ("int", "float" or "bool"), which decides the argument array it
    travels in (int64 or double); an int past int64 raises `Unsupported` when a call evaluates it
    (the torch backend computes with it as a float). A bound on an integer field has a `side` ("min"/"max"): its
    value is the int64 the field is compared with (`int_limit`), and a second scalar of the same
    bound (`part="always"`) is 1 where no int64 can express it because every value fails.
    """

    expr: Expr
    py: str
    side: str | None = None
    part: str = "limit"

    def value(self, dims: Mapping[str, int]) -> int | float:
        v = evaluate_scalar(self.expr, dims)
        if self.side is not None:
            limit = int_limit(v, self.side)
            if self.part == "always":
                return int(limit == "always")
            if isinstance(limit, int):
                return limit
            return INT64_MIN if self.side == "min" else INT64_MAX  # no value fails (or "always" decides)
        if self.py == "float":
            return as_double(v)
        if self.py == "int" and not INT64_MIN <= v <= INT64_MAX:
            # torch's backend turns such an int into a Python float, which changes the kind the
            # expression computes in (int64 -> float32): no kernel lowered for int64 says that
            raise Unsupported(f"{to_text(self.expr)} = {v} is past int64")
        return int(v)


@dataclass(frozen=True, slots=True)
class FieldSig:
    """A field as the kernel reads it: storage dtype (its name, "int64"; a torch dtype given is taken as its
    name), axes, and whether it is contiguous.

    `order` is set for a non-contiguous field whose elements still fill one block of memory in some
    order of its axes (channels_last, a transposed copy; `memory_order`): its axis positions from the
    largest stride to the smallest, so a kernel can walk it as stored."""

    name: str
    dtype: str
    axes: tuple[str, ...]
    contiguous: bool
    order: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, str):
            object.__setattr__(self, "dtype", dtype_name(self.dtype))

    @property
    def kind(self) -> str:
        return compute_kind(self.dtype)


@dataclass(frozen=True, slots=True)
class Group:
    """Checks sharing an iteration space: loop over `axes` row-major, compute `ops`, test each check.

    `checks` pairs a check index with the op that is true where it fails. `elementwise` is True
    when every load reads its whole field over exactly these axes (no selection, broadcast, index
    or reduction), so a backend may walk contiguous fields with one flat index.
    """

    axes: tuple[str, ...]
    reduce: bool
    ops: tuple[Op, ...]
    checks: tuple[tuple[int, Val], ...]
    elementwise: bool
    fields: tuple[str, ...]  # fields the group loads, in first-use order


@dataclass(frozen=True, slots=True)
class Layout:
    """The int64 result buffer, zero before a kernel runs; one definition for every backend.

    [0, K)            BIG - the first offending flat index (row-major over the check's axes) of check k; 0: none
    [K, 2K)           the count of check k, for a check without the batch axis
    [2K + r*B, +B)    per-sample counts of the r-th check over the batch axis (its count is their sum)

    A valid batch writes nothing. `max` keeps the first index in the first slot, so parallel
    writers (Triton's atomic_max) and a sequential loop agree.
    """

    n_checks: int
    batch_rows: tuple[int, ...]  # per check: its row among the per-sample rows, or -1

    def first(self, k: int) -> int:
        return k

    def count(self, k: int) -> int:
        return self.n_checks + k

    def sample_base(self, k: int) -> tuple[int, int]:
        """(offset, row): check k's count for sample b is at offset + row * B + b."""
        return 2 * self.n_checks, self.batch_rows[k]

    def length(self, batch: int) -> int:
        return 2 * self.n_checks + sum(r >= 0 for r in self.batch_rows) * batch


@dataclass(frozen=True, slots=True)
class Subject:
    """Ops computing a rule's subject (the value a violation shows), walked at one position by the decoder."""

    ops: tuple[Op, ...]
    value: Val


@dataclass(frozen=True)
class Kernel:
    """Everything a code generator, the argument packer and the decoder need, for one signature."""

    spec_name: str
    batch_dim: str
    checks: tuple[DataCheck, ...]
    fields: tuple[FieldSig, ...]  # fields read, in argument order
    fixed: dict[str, int]  # axes of a fixed size (constants in generated code)
    sizes: tuple[str, ...]  # dims whose size is a runtime argument, in argument order
    scalars: tuple[HostScalar, ...]  # host scalars, in slot order
    groups: tuple[Group, ...]
    subjects: dict[int, Subject]  # per rule check: its subject
    layout: Layout

    def field(self, name: str) -> FieldSig:
        return next(f for f in self.fields if f.name == name)

    def work(self, hoists: bool) -> tuple[tuple[tuple[str, ...], ...], ...]:
        """Per group, what its loops walk as a sum of products of axis sizes: each term a tuple of
        axes (repeats multiply: `y <= sum(y, dim=B)` over [B, L] computes its sum at each of the
        B * L positions, (B, L, B)). `hoists`: the generator computes the group's invariant
        reductions (`invariant_ops`: `x <= sum(x)`) once, before its loops, as C's does; Triton's
        computes every reduction at each position. `check_result_backed` sizes them."""
        cache = self.__dict__.setdefault("_work", {})  # (a frozen dataclass: its __dict__ holds caches)
        if hoists not in cache:
            cache[hoists] = tuple(_group_work(self, g, hoists) for g in self.groups)
        return cache[hoists]

    @functools.cached_property
    def float_rows(self) -> tuple[tuple[str, ...], ...]:
        """The reduced axes of each float sum (a row of values whose int64 folds add up; `kernel/sums.py`)."""
        return tuple(op.args[1] for g in self.groups for op in reductions(g.ops)
                     if op.args[0] == "sum" and op.kind == "d")

    @property
    def int_slots(self) -> tuple[int, ...]:
        """Host scalar slots passed as int64 (the rest travel as doubles)."""
        return tuple(s for s, h in enumerate(self.scalars) if h.py != "float")

    @property
    def float_slots(self) -> tuple[int, ...]:
        return tuple(s for s, h in enumerate(self.scalars) if h.py == "float")

    def int_args(self) -> list[tuple]:
        """The int64 argument array, in order: ("ptr", field), ("stride", field, axis position),
        ("size", dim), ("scalar", slot). Contiguous fields pass no strides."""
        out: list[tuple] = [("ptr", f.name) for f in self.fields]
        out += [("stride", f.name, i) for f in self.fields if not f.contiguous for i in range(len(f.axes))]
        out += [("size", d) for d in self.sizes]
        out += [("scalar", s) for s in self.int_slots]
        return out

    def float_args(self) -> list[tuple]:
        """The double argument array: ("scalar", slot) for float host scalars."""
        return [("scalar", s) for s in self.float_slots]

    def selections(self) -> list[tuple[str, int, int]]:
        """(field, axis position, index) for every fixed index a load selects (`x[:, -1]`), so a
        launcher can refuse an index out of range instead of reading past the tensor."""
        found: dict[tuple[str, int, int], None] = {}

        def visit(ops: tuple[Op, ...]) -> None:
            for op in ops:
                if op.name == "load":
                    for pos, sel in enumerate(op.args[1]):
                        if sel is not None:
                            found[(op.args[0], pos, sel)] = None
                elif op.name == "reduction":
                    visit(op.args[2])

        for g in self.groups:
            visit(g.ops)
        for sub in self.subjects.values():
            visit(sub.ops)
        return list(found)

    def pretty(self) -> str:
        """The IR as text, one op per line (for debugging and tests; never fed to a compiler)."""
        lines = [f"kernel for {self.spec_name}: {len(self.checks)} checks, {len(self.groups)} groups"]
        for g_i, g in enumerate(self.groups):
            lines.append(f"group {g_i} over [{', '.join(g.axes)}]{' (reduce)' if g.reduce else ''}")
            lines.extend(_pretty_ops(g.ops, "  "))
            lines.extend(f"  check {k} fails where %{v.id}" for k, v in g.checks)
        return "\n".join(lines)


def _pretty_ops(ops: tuple[Op, ...], pad: str) -> list[str]:
    out = []
    for op in ops:
        if op.name == "reduction":
            red, axes, body, value = op.args
            out.append(f"{pad}%{op.id}: {op.kind} = {red} over [{', '.join(axes)}] of %{value.id}:")
            out.extend(_pretty_ops(body, pad + "  "))
        else:
            args = ", ".join(f"%{a.id}" if isinstance(a, Val) else repr(a) for a in op.args)
            out.append(f"{pad}%{op.id}: {op.kind} = {op.name}({args})")
    return out


# ---------------------------------------------------------------------------------------------
# Walking the ops with a handler.


def walk(ops: tuple[Op, ...], handler: Any, env: dict[int, Any]) -> None:
    """Call `handler.<op.name>(op, *args)` for each op, with `Val`s replaced by their results in `env`.

    A reduction gets `body`, a function that walks the reduction's own ops and returns its
    value's result, so each backend places the loop (C: a nested loop; torch: a vectorized pass).
    """
    for op in ops:
        method = getattr(handler, op.name, None)
        if method is None:
            raise NotImplementedError(f"{type(handler).__name__} does not implement the kernel op {op.name!r}")
        if op.name == "reduction":
            red, axes, body_ops, value = op.args

            def body(body_ops=body_ops, value=value):
                walk(body_ops, handler, env)
                return env[value.id]

            env[op.id] = method(op, red, axes, body)
        else:
            env[op.id] = method(op, *(env[a.id] if isinstance(a, Val) else a for a in op.args))


def memory_order(t: torch.Tensor) -> tuple[int, ...] | None:
    """For a non-contiguous tensor whose elements fill one block of memory (dense, no overlap, no gap; torch
    strides are never negative, so element 0 is the block's start): its axes from the largest stride to the
    smallest. None for a contiguous tensor or any other layout (an expanded view, a slice with gaps)."""
    if t.is_contiguous():
        return None
    stride, shape = t.stride(), t.shape
    order = tuple(sorted(range(t.dim()), key=lambda d: (-stride[d], d)))
    step = 1
    for d in reversed(order):
        if shape[d] != 1 and stride[d] != step:
            return None
        step *= shape[d]
    return order


def missing_ops(handler: Any) -> list[str]:
    """The ops of `OPS` that `handler` does not implement."""
    return [name for name in OPS if not callable(getattr(handler, name, None))]


# ---------------------------------------------------------------------------------------------
# Semantics shared by every backend: promotion, constants, integer limits.


def arith_kind(k: str) -> str:
    """Booleans take part in arithmetic and comparisons as int64."""
    return "i" if k == "b" else k


def promote(a: str, b: str) -> str:
    """The kind two tensors of the same dimensionality meet in (torch's promotion over the compute kinds)."""
    a, b = arith_kind(a), arith_kind(b)
    return "d" if "d" in (a, b) else "f" if "f" in (a, b) else "i"


def result_kind(a: str, a_dimensioned: bool, b: str, b_dimensioned: bool) -> str:
    """The kind two tensors meet in, with torch's rule for a 0-d tensor against one with axes: the
    0-d one decides only when it is of a higher category (float over int), so a float32 field
    against a 0-d float64 value (`x < sum(y_f64)`, `x < y[0, 0]`) compares in float32."""
    if a_dimensioned == b_dimensioned:
        return promote(a, b)
    dim, zero = (arith_kind(a), arith_kind(b)) if a_dimensioned else (arith_kind(b), arith_kind(a))
    return dim if dim != "i" else zero


def weak_kind(py: str, other: str) -> str:
    """The kind a Python scalar meets a tensor of kind `other` in: an int or bool adopts the
    tensor's kind, a float makes an integer tensor float32 (torch's default dtype)."""
    other = arith_kind(other)
    if py == "float" and other == "i":
        return "f"
    return other


def convert(value: int | float | bool, kind: str) -> int | float | bool:
    """A Python number in `kind`, rounded as torch rounds a Python scalar into that dtype."""
    if kind == "b":
        return bool(value)
    if kind == "i":
        if isinstance(value, float) or not INT64_MIN <= int(value) <= INT64_MAX:
            raise Unsupported(f"the constant {value!r} is not an int64")
        return int(value)
    if kind == "d":
        return float(value)
    return float32(float(value))


def pytype(expr: Expr) -> str:
    """The Python type (int, float or bool) `evaluate_scalar` gives a host expression."""
    if isinstance(expr, Const):
        return "bool" if isinstance(expr.value, bool) else "int" if isinstance(expr.value, int) else "float"
    if isinstance(expr, Dim):
        return "int"
    if isinstance(expr, Unary):
        if expr.op in ("not", "isfinite"):
            return "bool"
        return "float" if pytype(expr.x) == "float" else "int"
    if isinstance(expr, Binary):
        if expr.op in ("&", "|", "==", "!=", "<", "<=", ">", ">="):
            return "bool"
        return "float" if "float" in (pytype(expr.a), pytype(expr.b)) else "int"
    raise Unsupported(f"{type(expr).__name__} is not a host scalar")


def expr_axes(plan: Plan, expr: Expr | None) -> tuple[str, ...]:
    """The named axes an expression spans, in order of first appearance (as the plan orders them)."""
    return axes_of(expr, lambda name: plan.field(name).axes)


# ---------------------------------------------------------------------------------------------
# Lowering.


@dataclass(frozen=True, slots=True)
class _Weak:
    """A host expression not yet given a kind: it takes one from the operand it meets."""

    expr: Expr
    py: str


@dataclass
class _Scope:
    ops: list[Op]
    memo: dict[tuple, Val]
    loads: list[tuple[str, tuple]] = field(default_factory=list)
    uses_index: bool = False


class _Lowering:
    def __init__(self, plan: Plan, fields: Mapping[str, FieldSig]):
        self.plan, self.fields = plan, fields
        self.next_id = 0
        self.scalars: list[HostScalar] = []
        self.axes_used: dict[str, None] = {}
        self.scope: _Scope = _Scope([], {})
        self.group_axes: tuple[str, ...] = ()  # the axes the check being lowered runs over

    # -- emitting ------------------------------------------------------------------------------
    def emit(self, name: str, args: tuple, kind: str) -> Val:
        # literals keyed with their type and repr: 0.0 == -0.0 (and 1 == 1.0 == True) must not merge
        key = (name, tuple((type(a), repr(a)) if isinstance(a, (int, float)) else a for a in args), kind)
        if key in self.scope.memo:
            return self.scope.memo[key]
        op = Op(self.next_id, name, args, kind)
        self.next_id += 1
        self.scope.ops.append(op)
        self.scope.memo[key] = op.val
        return op.val

    def const(self, value: Any, kind: str) -> Val:
        return self.emit("const", (convert(value, kind),), kind)

    def scalar(self, h: HostScalar, kind: str) -> Val:
        if h not in self.scalars:
            self.scalars.append(h)
        return self.emit("scalar", (self.scalars.index(h),), kind)

    def materialize(self, x: Val | _Weak, kind: str) -> Val:
        """x in `kind`: a constant is converted here, a host scalar in the kernel, a value by a cast."""
        if isinstance(x, _Weak):
            if isinstance(x.expr, Const):
                return self.const(x.expr.value, kind)
            if kind == "b" and x.py != "bool":  # `where B - 1`: its truth, exactly, whatever its size
                return self.scalar(HostScalar(Binary("!=", x.expr, Const(0)), "bool"), kind)
            return self.scalar(HostScalar(x.expr, x.py), kind)
        if x.kind == kind:
            return x
        if kind == "b":
            return self.emit("truth", (x,), "b")
        return self.emit("cast", (x,), kind)

    def natural(self, x: Val | _Weak) -> Val:
        """A value standing alone: a Python int or bool scalar is int64, a float one float32 (as torch.tensor(x))."""
        if isinstance(x, Val):
            return x
        return self.materialize(x, {"bool": "b", "int": "i", "float": "f"}[x.py])

    def truth(self, x: Val | _Weak) -> Val:
        return self.materialize(x, "b")

    # -- expressions ---------------------------------------------------------------------------
    def expr(self, e: Expr) -> Val | _Weak:
        if is_host(e):
            return _Weak(e, pytype(e))
        if isinstance(e, Ref):
            return self.load(e)
        if isinstance(e, Arange):
            self.scope.uses_index = True
            self.axes_used[e.dim] = None
            return self.emit("index", (e.dim,), "i")
        if isinstance(e, Unary):
            x = self.natural(self.expr(e.x))
            if e.op in ("neg", "abs"):
                return self.emit(e.op, (self.materialize(x, arith_kind(x.kind)),), arith_kind(x.kind))
            if e.op == "not":
                return self.emit("not_", (x,), "b")
            if x.kind in ("b", "i"):
                return self.const(True, "b")  # integers are always finite
            return self.emit("isfinite", (x,), "b")
        if isinstance(e, Binary):
            return self.binary(e)
        if isinstance(e, Reduce):
            return self.reduce(e)
        raise Unsupported(f"cannot lower {type(e).__name__}")

    def binary(self, e: Binary) -> Val:
        a, b = self.expr(e.a), self.expr(e.b)
        if e.op in _COMPARE and isinstance(a, Val) != isinstance(b, Val):
            x, c, op = (a, b, e.op) if isinstance(a, Val) else (b, a, FLIPPED[e.op])
            if isinstance(c.expr, Const):  # the exact comparison with the constant as written (docs/semantics.md)
                kind = arith_kind(x.kind)
                exact = exact_comparison(op, c.expr.value, kind)
                if isinstance(exact, bool):
                    return self.const(exact, "b")
                return self.emit(_COMPARE[exact[0]], (self.materialize(x, kind), self.const(exact[1], kind)), "b")
        if e.op in ("&", "|"):
            return self.emit("and_" if e.op == "&" else "or_", (self.truth(a), self.truth(b)), "b")
        if e.op in ("//", "%"):
            # torch's backend divides by a Python scalar as a 0-d int64 or float64 tensor
            ka = ("d" if a.py == "float" else "i", False) if isinstance(a, _Weak) else (a.kind, self.dimensioned(e.a))
            kb = ("d" if b.py == "float" else "i", False) if isinstance(b, _Weak) else (b.kind, self.dimensioned(e.b))
            kind = result_kind(*ka, *kb)
        elif isinstance(a, _Weak):
            kind = weak_kind(a.py, b.kind)
        elif isinstance(b, _Weak):
            kind = weak_kind(b.py, a.kind)
        else:
            kind = result_kind(a.kind, self.dimensioned(e.a), b.kind, self.dimensioned(e.b))
        a, b = self.materialize(a, kind), self.materialize(b, kind)
        if e.op in _COMPARE:
            return self.emit(_COMPARE[e.op], (a, b), "b")
        return self.emit(_ARITH[e.op], (a, b), kind)

    def dimensioned(self, e: Expr) -> bool:
        """True when torch's backend holds `e` as a tensor with axes (not 0-d)."""
        return bool(expr_axes(self.plan, e))

    def load(self, e: Ref) -> Val:
        sig = self.fields[e.field]
        self.axes_used.update(dict.fromkeys(sig.axes))  # a contiguous field's strides come from its sizes
        self.scope.loads.append((e.field, e.index))
        return self.canonical(sig, self.emit("load", (e.field, e.index), sig.kind))

    def canonical(self, sig: FieldSig, x: Val) -> Val:
        """A bool field's byte as torch reads it: any nonzero byte is True (1). A bool tensor can hold
        other bytes (`uint8.view(torch.bool)`, numpy bools from bytes), and a kernel reads the byte."""
        if sig.dtype != "bool":
            return x
        return self.emit("cast", (self.emit("truth", (x,), "b"),), x.kind)

    def reduce(self, e: Reduce) -> Val:
        red = expr_axes(self.plan, e.x) if e.dims is None else tuple(e.dims)
        # m <= sum(m, dim=L): a kernel would redo the sum for every element, work growing with L squared.
        # Over the batch dim alone (a batch total compared per sample, as BART's eos count) it costs a
        # factor of the batch size, and stays compiled.
        shared = [a for a in red if a in self.group_axes and a != self.plan.batch_dim]
        if shared:
            raise Unsupported(f"{to_text(e)} reduces an axis the check also runs over ({', '.join(shared)}): "
                              "the work would grow with the square of its length")
        self.axes_used.update(dict.fromkeys(red))
        outer = self.scope
        self.scope = _Scope([], {})
        try:
            x = self.natural(self.expr(e.x))
            # a float sum accumulates in float64 on every backend (docs/semantics.md)
            value = self.truth(x) if e.op in ("any", "all") else self.materialize(x, arith_kind(x.kind).replace("f", "d"))
            body = tuple(self.scope.ops)
            inner = self.scope
        finally:
            self.scope = outer
        outer.loads.extend(inner.loads)
        kind = "b" if e.op in ("any", "all") else value.kind
        op = Op(self.next_id, "reduction", (e.op, red, body, value), kind)
        self.next_id += 1
        outer.ops.append(op)
        return op.val

    # -- checks (each kind's `ir` part, tritoncheck.checks.registry, builds its predicate with these) -------
    def check(self, k: int, c: DataCheck) -> Val:
        """The op that is true where check `k` fails: its registered kind's lowering (an unknown kind raises)."""
        try:
            lower = kind_of(c).ir
        except UnknownCheckKind as exc:  # not one of ours: this IR cannot lower it
            raise Unsupported(str(exc)) from None
        if lower is None:  # a host kind (dim_bound) never reaches a kernel
            raise Unsupported(f"check kind {c.kind!r} has no kernel lowering")
        return lower(c, self)

    def full_load(self, name: str) -> Val:
        return self.load(Ref(name, (None,) * len(self.fields[name].axes)))

    def load_prev(self, name: str, axis: str) -> Val:
        """The element one before the current position along `axis` (itself at position 0)."""
        sig = self.fields[name]
        self.axes_used.update(dict.fromkeys(sig.axes))
        self.scope.loads.append((name, (None,) * len(sig.axes)))
        self.scope.uses_index = True  # needs the position along `axis`: never a flat walk
        return self.canonical(sig, self.emit("load_prev", (name, axis), sig.kind))

    def host_scalar(self, expr: Expr, py: str, kind: str, side: str | None = None, part: str = "limit") -> Val:
        """A host scalar (see `HostScalar`) in `kind`."""
        return self.scalar(HostScalar(expr, py, side, part), kind)

    def comparable(self, values: tuple, name: str) -> tuple:
        """`values` as field `name` can hold them (`comparable_values`)."""
        return comparable_values(values, self.fields[name].dtype)

    def allowed(self, bad: Val, x: Val, name: str, allow: tuple) -> Val:
        """`bad`, except where `x` is one of the `allow` sentinels of field `name`."""
        for v in self.comparable(allow, name):
            bad = self.emit("and_", (bad, self.emit("ne", (x, self.const(v, x.kind)), "b")), "b")
        return bad


_COMPARE = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
_ARITH = {"+": "add", "-": "sub", "*": "mul", "//": "floordiv", "%": "mod"}


def lower(plan: Plan, checks: tuple[DataCheck, ...], fields: Mapping[str, FieldSig]) -> Kernel:
    """Lower `checks` (the runnable data checks of `plan`, in order) for fields of these signatures.

    Groups are keyed by (axes, holds a reduction), in order of first appearance, as the Triton
    kernel groups them: a group with a reduction runs per output row and loops over the reduced
    axes, an element-wise one per element.
    """
    lw = _Lowering(plan, fields)
    keys: dict[tuple, list[int]] = {}
    for k, c in enumerate(checks):
        red = isinstance(c, RuleCheck) and any(isinstance(n, Reduce) for e in (c.expr, c.where) for n in nodes(e))
        keys.setdefault((c.axes, red), []).append(k)
    groups = []
    for (axes, red), members in keys.items():
        lw.scope, lw.group_axes = _Scope([], {}), axes
        lw.axes_used.update(dict.fromkeys(axes))
        bads = tuple((k, lw.check(k, checks[k])) for k in members)
        loads = lw.scope.loads
        elementwise = not red and not lw.scope.uses_index and all(
            all(i is None for i in index) and fields[f].axes == axes for f, index in loads)
        group_fields = tuple(dict.fromkeys(f for f, _ in loads))
        groups.append(Group(axes, red, tuple(lw.scope.ops), bads, elementwise, group_fields))
    subjects = {}
    for k, c in enumerate(checks):
        if isinstance(c, RuleCheck):
            lw.scope, lw.group_axes = _Scope([], {}), c.axes
            value = lw.natural(lw.expr(c.subject))
            subjects[k] = Subject(tuple(lw.scope.ops), value)
    used = {f for g in groups for f in g.fields}
    used |= {f for s in subjects.values() for f in _op_fields(s.ops)}
    fixed, sizes = {}, []
    for axis in lw.axes_used:
        size = _fixed_size(plan, axis)
        if size is None:
            sizes.append(axis)
        else:
            fixed[axis] = size
    rows = [k for k, c in enumerate(checks) if plan.batch_dim in c.axes]
    layout = Layout(len(checks), tuple(rows.index(k) if k in rows else -1 for k in range(len(checks))))
    ordered = tuple(fields[f.name] for f in plan.fields if f.name in used)
    return Kernel(plan.spec_name, plan.batch_dim, tuple(checks), ordered, fixed, tuple(sizes),
                  tuple(lw.scalars), tuple(groups), subjects, layout)


def unravel(flat: int, shape: Sequence[int]) -> tuple[int, ...]:
    """The row-major index of entry `flat` of `shape` (0 along an empty axis). Not torch.unravel_index:
    it imports sympy on its first call, 0.9 s."""
    index = []
    for n in reversed(shape):
        flat, i = divmod(flat, n) if n else (0, 0)
        index.append(i)
    return tuple(reversed(index))


def positional_axes(kernel: Kernel) -> frozenset[str]:
    """Axes whose positions a group's result depends on beyond the values loaded there: an
    `index` (arange), a `load_prev`, a selection (`x[:, 1]`) or a `sum` over the axis. Along any
    other axis, equal values give equal results (see `loop_sizes`)."""
    found: set[str] = set()

    def visit(ops: tuple[Op, ...]) -> None:
        for op in ops:
            if op.name == "index":
                found.add(op.args[0])
            elif op.name == "load_prev":
                found.add(op.args[1])
            elif op.name == "load":
                axes = kernel.field(op.args[0]).axes
                found.update(a for a, sel in zip(axes, op.args[1], strict=True) if sel is not None)
            elif op.name == "reduction":
                if op.args[0] == "sum":
                    found.update(op.args[1])
                visit(op.args[2])

    for g in kernel.groups:
        visit(g.ops)
    return frozenset(found)


def invariant_ops(kernel: Kernel, group: Group) -> tuple[Op, ...]:
    """The group's ops whose value is the same at every position of the loops around them, in
    order: constants, host scalars, and each outermost reduction whose body reads no position of
    those loops (`x <= sum(x)` over B: the sum; also inside another reduction, as in
    `any(y > sum(x), dim=L)`). A backend computes them once, before the group's loops, so such a
    rule costs 2B reads, not B**2."""
    found: list[Op] = []
    ids: set[int] = set()

    def free(ops: tuple[Op, ...], forbidden: set[str], known: set[int]) -> bool:
        """Whether `ops` read no position along `forbidden` and no value but their own and `known`."""
        known = set(known)
        for op in ops:
            if op.name != "reduction" and any(isinstance(a, Val) and a.id not in known for a in op.args):
                return False  # (a reduction's value is its body's)
            if op.name == "index" and op.args[0] in forbidden:
                return False
            if op.name in ("load", "load_prev"):
                axes = kernel.field(op.args[0]).axes
                sels = op.args[1] if op.name == "load" else (None,) * len(axes)
                if any(sel is None and a in forbidden for a, sel in zip(axes, sels, strict=True)):
                    return False
            if op.name == "reduction" and not free(op.args[2], forbidden - set(op.args[1]), known):
                return False
            known.add(op.id)
        return True

    def scan(ops: tuple[Op, ...], loops: set[str]) -> None:
        for op in ops:
            if op.name in ("const", "scalar") or (
                    op.name == "reduction" and free(op.args[2], loops - set(op.args[1]), ids)):
                found.append(op)
                ids.add(op.id)
            elif op.name == "reduction":
                scan(op.args[2], loops | set(op.args[1]))

    scan(group.ops, set(group.axes))
    return tuple(found)


def loop_sizes(kernel: Kernel, positional: frozenset[str], tensors: Mapping[str, torch.Tensor],
               dims: Mapping[str, int]) -> dict[str, int]:
    """The sizes a kernel walks, and which dims it walks at size 1: {axis: size, ...}, collapsed.

    A dim is walked at size 1 when every field spanning it is an expanded view along it (stride
    0) or empty, and no op reads positions along it (`positional_axes`): every position then
    holds the same values and gives the same result, so a kernel reads each stored value once and
    `decode` scales counts, samples and indices back to the full size. A batch that stores a few
    bytes (`torch.tensor([1]).expand(2**27)`) costs a few bytes, never its logical size.
    """
    sizes = {a: dims[a] for a in kernel.sizes}
    for axis in kernel.sizes:
        if sizes[axis] <= 1 or axis in positional:
            continue
        spans = [(tensors[f.name], f.axes.index(axis)) for f in kernel.fields if axis in f.axes]
        if spans and all(t.numel() == 0 or t.stride(pos) == 0 for t, pos in spans):
            sizes[axis] = 1
    return sizes


UNBACKED_SAMPLES = 2**16  # samples a result buffer may hold that no field stores a value for
# positions a kernel may walk beyond the values the batch stores (Triton's interpreter: about 0.35 s)
KERNEL_WALK_LIMIT = 2**16
WALK_PER_STORED = 4  # past this many positions per stored value, a kernel's walk is not what the batch stores


def check_result_backed(kernel: Kernel, tensors: Mapping[str, torch.Tensor], walked: Mapping[str, int],
                        hoists: bool = False) -> None:
    """Raise `Unsupported`, so that the torch backend checks the batch from its stored values, where
    a kernel's work would outgrow what the batch stores or its float sums could wrap:

    - the result buffer (a count per sample and check): the batch dim is walked past
      UNBACKED_SAMPLES samples while every field spanning it is empty or expanded along it (walked
      in full because a rule reads positions along it, as `x <= sum(x)` does);
    - a group's loops would walk more than max(KERNEL_WALK_LIMIT, WALK_PER_STORED x stored values)
      positions (`Kernel.work`): an expanded dim walked in full because a rule reads positions along it
      (`arange`, a `sum` over it, `monotonic`) or some other field stores it, or a reduction over
      the batch dim computed again at each position (`y <= sum(y, dim=B)` over [B, L]: B * B * L;
      `x <= sum(x)` too, unless the generator `hoists` it out of the loop, as C's does).
      The torch backend walks only the axes each rule's own operands vary along, and computes a
      reduction once; `plan.lower.refuse_logical_walks` bounds that walk for every backend;
    - a float sum over a row of `sums.MAX_TERMS` (2**33) values or more, materialized or expanded:
      the kernels add its int64 folds, which could wrap; the torch backend adds such a row exactly.
    """
    b = kernel.batch_dim
    if b is not None and walked.get(b, 0) > UNBACKED_SAMPLES:
        spans = [(tensors[f.name], f.axes.index(b)) for f in kernel.fields if b in f.axes]
        if all(t.numel() == 0 or t.stride(pos) == 0 for t, pos in spans):
            raise Unsupported(f"the batch dim {b} is walked at {walked[b]} samples that no field stores a value for")
    for axes in kernel.float_rows:
        n = _positions(kernel, axes, walked)
        if n >= sums.MAX_TERMS:
            raise Unsupported(f"a float sum over a row of {n:,} values (2**33 or more: the kernel's int64 folds could "
                              "wrap; the torch backend adds such a row exactly)")
    positions = max((sum(_positions(kernel, t, walked) for t in terms) for terms in kernel.work(hoists)), default=0)
    if positions > KERNEL_WALK_LIMIT and positions > WALK_PER_STORED * stored_elements(tensors):
        raise Unsupported(f"the kernel would walk {positions:,} positions where the batch stores "
                          f"{stored_elements(tensors):,} values (expanded views, or a reduction computed at each position)")


def _positions(kernel: Kernel, axes: tuple[str, ...], walked: Mapping[str, int]) -> int:
    return math.prod(kernel.fixed[a] if a in kernel.fixed else walked[a] for a in axes)


def _group_work(kernel: Kernel, group: Group, hoists: bool) -> tuple[tuple[str, ...], ...]:
    """`Kernel.work` of one group: per position, 1 plus each reduction's axes times its body's work;
    a hoisted reduction's walk counted once."""
    hoisted = {op.id for op in invariant_ops(kernel, group) if op.name == "reduction"} if hoists else set()

    def terms(ops: tuple[Op, ...]) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
        per, once = [()], []
        for op in ops:
            if op.name != "reduction":
                continue
            body_per, body_once = terms(op.args[2])
            walk = [tuple(op.args[1]) + t for t in body_per]
            (once if op.id in hoisted else per).extend(walk)
            once.extend(body_once)
        return per, once

    per, once = terms(group.ops)
    return tuple(group.axes + t for t in per) + tuple(once)


def reductions(ops: tuple[Op, ...]) -> list[Op]:
    """Every reduction op among `ops`, nested ones included."""
    out = []
    for op in ops:
        if op.name == "reduction":
            out.append(op)
            out.extend(reductions(op.args[2]))
    return out


def _op_fields(ops: tuple[Op, ...]) -> set[str]:
    out = set()
    for op in ops:
        if op.name in ("load", "load_prev"):
            out.add(op.args[0])
        elif op.name == "reduction":
            out |= _op_fields(op.args[2])
    return out


def _fixed_size(plan: Plan, axis: str) -> int | None:
    """The size of a fixed axis (`bbox.2` -> 4), or None for a named dim bound by the batch."""
    for f in plan.fields:
        if axis in f.axes:
            size = f.shape[f.axes.index(axis)]
            return size if isinstance(size, int) else None
    return None


__all__ = ["BIG", "OPS", "FieldSig", "Group", "HostScalar", "Kernel", "Layout", "Op", "Subject", "Unsupported",
           "Val", "invariant_ops", "loop_sizes", "lower", "memory_order", "missing_ops", "positional_axes", "walk"]
