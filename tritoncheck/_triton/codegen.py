"""Generate one Triton kernel that runs every data check of a plan in a single launch.

The kernel has one flat grid. Checks that iterate the same axes (and hold no reduction) form a
*group*; each group owns a contiguous range of program ids, and a program evaluates every check
of its group on one tile, so a field checked for min, max and allowed values is read once. A
group with a reduction (`any(mask != 0, dim=L)`) gives each program a block of output rows and
loops over the reduced axes. Axis sizes, strides and group ranges are runtime arguments, so one
compiled kernel serves every batch shape; the source depends only on the plan, the runnable
checks and the field dtypes.

Output (one int64 buffer, zero at launch): slot k holds BIG - first offending flat index of
check k (so `atomic_max` keeps the first), slot K + k the count of a check without a batch axis,
and a row of `B` per-sample counts after 2K for each check over the batch axis. A program that
finds nothing wrong writes nothing.

A spec is untrusted input: the source is assembled from the plan's structured values, every
identifier comes from `_source.NameSpace` and any spec text (names, rule, bound and shape text)
reaches it only through `_source.comment`, as `#` comment lines.

Generated source is written to a real file (Triton's JIT reads it with `inspect`), atomically,
under TRITONCHECK_CACHE_DIR (default ~/.cache/tritoncheck).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import math
import os
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any

import torch

from .. import _expr
from .._dtypes import INT64_MAX, INT64_MIN, comparable_values, compute_dtype, dtype_name
from .._expr import Arange, Binary, Const, Dim, Expr, Reduce, Ref, Unary
from .._plan import DataCheck, FiniteCheck, Plan, RangeCheck, RuleCheck, describe, referenced_fields
from .._source import RESERVED, IndentedBuffer, NameSpace, comment

BIG = 2**62
BLOCK = 1024  # elements per program for element-wise groups
BLOCK_ROWS = 16  # output rows per program for groups with a reduction
BLOCK_RED = 128  # reduced elements per loop step
KERNEL_NAME = "tritoncheck_kernel"


class Unsupported(Exception):
    """A construct the generator does not lower (e.g. a reduction inside a reduction)."""


_KIND = {torch.int64: "i", torch.float32: "f", torch.float64: "d"}
_TL = {"i": "tl.int64", "f": "tl.float32", "d": "tl.float64"}


@dataclass
class Group:
    """Checks sharing one iteration space; `reduce` groups loop over reduced axes per row."""

    axes: tuple[str, ...]
    checks: list[int]  # indices into Program.checks
    reduce: bool
    block: int


@dataclass
class Program:
    """A generated kernel and what the launcher needs to fill its arguments."""

    source: str
    checks: tuple[DataCheck, ...]
    groups: list[Group]
    fields: dict[str, str]  # field -> pointer argument
    strides: dict[str, tuple[str, ...]]  # field -> stride argument per axis
    sizes: dict[str, str]  # axis -> size argument
    reduces: list[tuple[str, tuple[str, ...]]]  # (argument, reduced axes) per reduction
    limits: dict[int, str]  # check index -> runtime bound argument
    batch_dim: str
    batch_checks: list[int]  # checks over the batch axis, in buffer order
    ends: list[str] = field(default_factory=list)  # argument: end of each group's program range
    numels: list[str] = field(default_factory=list)  # argument: elements (rows) of each group
    kernel: Any = None
    path: str | None = None
    launch_lock: threading.Lock = field(default_factory=threading.Lock)

    def buffer_len(self, batch: int) -> int:
        return 2 * len(self.checks) + len(self.batch_checks) * batch


def generate(plan: Plan, checks: tuple[DataCheck, ...], dtypes: dict[str, torch.dtype]) -> Program:
    """Lower `checks` (the runnable data checks of `plan`) for fields of the given dtypes."""
    return _Gen(plan, checks, dtypes).run()


# Names the kernel body uses as they are; no identifier derived from a spec may take one.
_KERNEL_NAMES = frozenset({KERNEL_NAME, "pid", "tile", "offs", "live", "rest", "out_ptr", "n_bad", "first", "IDX"})


class _Gen:
    def __init__(self, plan: Plan, checks: tuple[DataCheck, ...], dtypes: dict[str, torch.dtype]):
        self.plan, self.checks, self.dtypes = plan, checks, dtypes
        self.ns = NameSpace(RESERVED | _KERNEL_NAMES)
        self.fields: dict[str, str] = {}
        self.strides: dict[str, tuple[str, ...]] = {}
        self.sizes: dict[str, str] = {}
        self.reduces: list[tuple[str, tuple[str, ...]]] = []
        self.limits: dict[int, str] = {}
        self.numels: list[str] = []
        self.helpers: set[str] = set()

    # -- names -------------------------------------------------------------------------------
    def field_args(self, f: str) -> tuple[str, tuple[str, ...]]:
        """The field's pointer and stride arguments, named once per kernel."""
        if f not in self.fields:
            self.fields[f] = self.ns.create_name(f"{f}_ptr")
            self.strides[f] = tuple(self.ns.create_name(f"{f}_stride{i}") for i in range(len(self.plan.field(f).axes)))
        return self.fields[f], self.strides[f]

    def size(self, axis: str) -> str:
        if axis not in self.sizes:
            self.sizes[axis] = self.ns.create_name("size_" + axis)
        return self.sizes[axis]

    def kind(self, f: str) -> str:
        return _KIND[compute_dtype(self.dtypes[f])]

    # -- driver ------------------------------------------------------------------------------
    def run(self) -> Program:
        groups = self.group()
        batch_checks = [k for k, c in enumerate(self.checks) if self.plan.batch_dim in c.axes]
        self.batch_slot = {k: j for j, k in enumerate(batch_checks)}
        body = IndentedBuffer(level=1)
        body.writeline("pid = tl.program_id(0)")
        body.writeline("# IDX is tl.int32 when every index and offset fits, else tl.int64 (> 2**31 elements)")
        ends = []
        for g_i, g in enumerate(groups):
            end = self.ns.create_name(f"end_{g_i}")
            ends.append(end)
            kw = "if" if g_i == 0 else "elif"
            checks = "; ".join(comment(describe(self.checks[k])) for k in g.checks)
            body.writeline(f"# group {g_i}: over [{_words(g.axes)}] - {checks}")
            body.writeline(f"{kw} pid < {end}:")
            with body.indent():
                start = "0" if g_i == 0 else ends[g_i - 1]
                self.emit_group(body, g, start, g_i)
        # arguments: fields, sizes, limits, ranges, out
        args: list[str] = []
        for f, ptr in self.fields.items():
            args.append(ptr)
            args.extend(self.strides[f])
        args.extend(self.sizes.values())
        args.extend(self.numels)
        args.extend(name for name, _ in self.reduces)
        for k, name in self.limits.items():
            args.append(name + (": tl.constexpr" if self.kind(self.checks[k].field) == "d" else ""))
        args.extend(ends)
        args.append("out_ptr")
        args.append("IDX: tl.constexpr")
        out = IndentedBuffer()
        out.writelines(self.header(groups))
        out.writelines(["import triton", "import triton.language as tl", "", ""])
        for name, text in _HELPERS.items():
            if name in self.helpers:
                out.writelines(text.strip("\n").splitlines())
                out.writelines(["", ""])
        out.writeline("@triton.jit")
        out.writeline(f"def {KERNEL_NAME}(")
        with out.indent():
            for a in args:
                out.writeline(a + ",")
        out.writeline("):")
        out.splice(body)
        return Program(out.getvalue(), self.checks, groups, dict(self.fields), dict(self.strides), dict(self.sizes),
                       self.reduces, self.limits, self.plan.batch_dim, batch_checks, ends, self.numels)

    def group(self) -> list[Group]:
        groups: dict[tuple, Group] = {}
        for k, c in enumerate(self.checks):
            has_reduce = isinstance(c, RuleCheck) and (_has_reduce(c.expr) or (c.where is not None and _has_reduce(c.where)))
            key = (c.axes, has_reduce)
            if key not in groups:
                groups[key] = Group(c.axes, [], has_reduce, BLOCK_ROWS if has_reduce else BLOCK)
            groups[key].checks.append(k)
        return list(groups.values())

    # -- one group ---------------------------------------------------------------------------
    def emit_group(self, buf: IndentedBuffer, g: Group, start: str, g_i: int) -> None:
        self.idx: dict[str, str] = {}
        self.loads: dict[tuple, str] = {}
        self.memo: dict[tuple, tuple[str, str]] = {}
        buf.writeline("tile = pid.to(IDX)" if start == "0" else f"tile = (pid - {start}).to(IDX)")
        buf.writeline(f"offs = tile * {g.block} + tl.arange(0, {g.block}).to(IDX)")
        numel = self.ns.create_name(f"numel_{g_i}")
        self.numels.append(numel)
        buf.writeline(f"live = offs < {numel}  # {comment(' * '.join(g.axes) or '1')}, computed on the host")
        self.unravel(buf, "offs", g.axes, "i_")
        # loads and checks are emitted together; each value is computed once per group (CSE)
        buf.writeline("# loads")
        pre = IndentedBuffer(level=buf.level)
        bads = []
        checks_buf = IndentedBuffer(level=buf.level)
        self.load_buf = pre
        for k in g.checks:
            bads.append(self.emit_check(k, checks_buf))
        buf.splice(pre)
        buf.writeline("# checks")
        buf.splice(checks_buf)
        buf.writeline("# store: only a program that found a violation writes")
        for k, bad in zip(g.checks, bads, strict=True):
            buf.writeline(f"n_bad = tl.sum({bad}.to(tl.int32), axis=0)")
            buf.writeline("if n_bad > 0:")
            with buf.indent():
                if k in self.batch_slot:
                    base = f"{2 * len(self.checks)} + {self.batch_slot[k]} * {self.size(self.plan.batch_dim)}"
                    buf.writeline(f"tl.atomic_add(out_ptr + ({base}) + {self.idx[self.plan.batch_dim]}, {bad}.to(tl.int64), mask={bad})")
                else:
                    buf.writeline(f"tl.atomic_add(out_ptr + {len(self.checks) + k}, n_bad.to(tl.int64))")
                buf.writeline(f"first = tl.min(tl.where({bad}, offs.to(tl.int64), {BIG}), axis=0)")
                buf.writeline(f"tl.atomic_max(out_ptr + {k}, {BIG} - first)  # {BIG} = 2**62: max keeps the first")

    def unravel(self, buf: IndentedBuffer, flat: str, axes: tuple[str, ...], prefix: str) -> None:
        """Row-major flat index -> one index vector per axis."""
        if not axes:
            return
        buf.writeline(f"rest = {flat}")
        for pos in range(len(axes) - 1, -1, -1):
            a = axes[pos]
            name = self.ns.create_name(prefix + a)
            self.idx[a] = name
            if pos == 0:
                buf.writeline(f"{name} = rest")
            else:
                buf.writeline(f"{name} = rest % {self.size(a)}")
                buf.writeline(f"rest = rest // {self.size(a)}")

    def emit_check(self, k: int, cb: IndentedBuffer) -> str:
        c = self.checks[k]
        bad = self.ns.create_name(f"bad_{k}")
        self.mode2d = None
        if isinstance(c, RuleCheck):
            ok, ok_kind = self.expr(c.expr, cb)
            cond = f"~{_truth(ok, ok_kind)}"
            if c.where is not None:
                w, w_kind = self.expr(c.where, cb)
                cond = f"{cond} & {_truth(w, w_kind)}"
            cb.writeline(f"{bad} = live & ({cond})  # {comment(c.text)}")
            return bad
        x, kind = self.expr(Ref(c.field, (None,) * len(self.plan.field(c.field).axes)), cb)
        if isinstance(c, FiniteCheck):
            cond = f"~{self.finite(x, kind)}"
        elif isinstance(c, RangeCheck):
            op = "<" if c.kind == "min" else ">"
            cond = f"{x} {op} {self.limit(k, c, kind)}"
        else:  # an empty set (nothing the dtype can equal) fails every element
            values = self.comparable(c.field, c.values)
            cond = " & ".join(f"({x} != {self.const(v, kind)})" for v in values) or f"({x} == {x}) | ({x} != {x})"
        allow = () if isinstance(c, FiniteCheck) else self.comparable(c.field, c.allow)
        if allow:
            cond = f"({cond})" + "".join(f" & ({x} != {self.const(v, kind)})" for v in allow)
        cb.writeline(f"{bad} = live & ({cond})  # {comment(describe(c))}")
        return bad

    def comparable(self, f: str, values: tuple[int | float, ...]) -> tuple[int | float, ...]:
        """The one rule for sentinels and value sets against the field's dtype (0.5 never equals an int)."""
        return comparable_values(values, self.dtypes[f])

    def limit(self, k: int, c: RangeCheck, kind: str) -> str:
        """A bound as a literal when it is one exactly, else a runtime argument.

        The argument gets the torch backend's bound value at launch, so a bound that no literal of
        the field's kind states (0.5, inf or 1e30 against integers, 10**30 against floats) follows
        the one rule there.
        """
        value = c.bound.value if isinstance(c.bound, Const) else None
        if isinstance(value, int) and INT64_MIN <= value <= INT64_MAX:
            return self.const(value, kind)
        if isinstance(value, float) and kind != "i":
            return self.const(value, kind)
        name = self.ns.create_name(f"limit_{k}")
        self.limits[k] = name
        return name

    def finite(self, x: str, kind: str) -> str:
        """isfinite: NaN fails ==, and +-Inf is above the dtype's largest finite value."""
        if kind in ("i", "b"):
            return f"({x} == {x})"
        big = self.const(torch.finfo(torch.float64 if kind == "d" else torch.float32).max, "d" if kind == "d" else "f")
        return f"(tl.abs({x}) <= {big})"

    def const(self, v: Any, kind: str) -> str:
        if isinstance(v, bool):
            v = int(v)
        if isinstance(v, float):
            if kind == "d" or not math.isfinite(v):
                return f"tl.full((), {_float_lit(v)}, {'tl.float64' if kind == 'd' else 'tl.float32'})"
            return _float_lit(v)
        return self.int_lit(v)

    @staticmethod
    def int_lit(v: int) -> str:
        """An int literal; -2**63 as an expression (its absolute value does not fit int64)."""
        return f"({v + 1} - 1)" if v == INT64_MIN else repr(int(v))

    # -- expressions -------------------------------------------------------------------------
    def fresh(self, base: str = "t") -> str:
        return self.ns.create_name(base)

    def expr(self, e: Expr, buf: IndentedBuffer) -> tuple[str, str]:
        """Emit `e` once per group (common subexpressions are shared); return (name, kind)."""
        if isinstance(e, (Unary, Binary, Reduce)):
            key = (e, self.mode2d)
            if key not in self.memo:
                self.memo[key] = self._expr(e, buf)
            return self.memo[key]
        return self._expr(e, buf)

    def _expr(self, e: Expr, buf: IndentedBuffer) -> tuple[str, str]:
        """Emit `e`; return (variable or literal, kind) with kind b/i/f/d (bool, int64, fp32, fp64)."""
        if isinstance(e, Const):
            v = e.value
            if isinstance(v, bool):
                return ("1" if v else "0"), "i"
            return (repr(v) if isinstance(v, int) else _float_lit(v)), ("i" if isinstance(v, int) else "w")
        if isinstance(e, Dim):
            return self.size(e.name), "i"
        if isinstance(e, Arange):
            return f"{self.index(e.dim)}.to(tl.int64)", "i"  # int64 like torch.arange, even with int32 indexing
        if isinstance(e, Ref):
            return self.load(e, buf)
        if isinstance(e, Unary):
            x, k = self.expr(e.x, buf)
            name = self.fresh()
            if e.op == "neg":
                buf.writeline(f"{name} = -{_num(x, k)}")
                return name, _arith_kind(k)
            if e.op == "not":
                buf.writeline(f"{name} = {x} == 0")
                return name, "b"
            if e.op == "abs":
                buf.writeline(f"{name} = tl.abs({_num(x, k)})")
                return name, _arith_kind(k)
            buf.writeline(f"{name} = {self.finite(x, k)}")
            return name, "b"
        if isinstance(e, Binary):
            a, ka = self.expr(e.a, buf)
            b, kb = self.expr(e.b, buf)
            a, b = self.promote_const(a, ka, e.a, kb), self.promote_const(b, kb, e.b, ka)
            name = self.fresh()
            if e.op in ("&", "|"):
                buf.writeline(f"{name} = {_truth(a, ka)} {e.op} {_truth(b, kb)}")
                return name, "b"
            if e.op in ("==", "!=", "<", "<=", ">", ">="):
                buf.writeline(f"{name} = {_num(a, ka)} {e.op} {_num(b, kb)}")
                return name, "b"
            kind = _result_kind(ka, kb)
            if e.op in ("//", "%"):
                fn = ("_floordiv" if e.op == "//" else "_remainder") + ("_int" if kind == "i" else "_float")
                self.helpers.add(fn)
                buf.writeline(f"{name} = {fn}({_num(a, ka)}, {_num(b, kb)})")
            else:
                buf.writeline(f"{name} = {_num(a, ka)} {e.op} {_num(b, kb)}")
            return name, kind
        if isinstance(e, Reduce):
            return self.reduce(e, buf)
        raise Unsupported(f"cannot lower {type(e).__name__}")

    def promote_const(self, text: str, kind: str, e: Expr, other: str) -> str:
        # a float literal next to fp64 data must keep double precision (torch compares in fp64)
        if isinstance(e, Const) and kind == "w" and other == "d":
            return self.const(float(e.value), "d")
        if isinstance(e, Const) and kind == "w" and not math.isfinite(e.value):
            return self.const(float(e.value), "f")
        return text

    def index(self, axis: str) -> str:
        if axis not in self.idx:
            raise Unsupported(f"axis {axis} is not in the iteration space")
        i = self.idx[axis]
        return self.shape_for(axis, i)

    def shape_for(self, axis: str, i: str) -> str:
        """In a reduction loop, outer indices are columns ([:, None]) and reduced ones rows."""
        if self.mode2d is None:
            return i
        return f"{i}[None, :]" if axis in self.mode2d else f"{i}[:, None]"

    def load(self, e: Ref, buf: IndentedBuffer) -> tuple[str, str]:
        key = (e, self.mode2d)
        kind = self.kind(e.field)
        if key in self.loads:
            return self.loads[key], kind
        fp = self.plan.field(e.field)
        ptr, strides = self.field_args(e.field)
        terms = []
        for axis, sel, stride in zip(fp.axes, e.index, strides, strict=True):
            if sel is None:
                terms.append(f"{self.index(axis)} * {stride}")
            elif sel >= 0:
                terms.append(f"{sel} * {stride}")
            else:
                terms.append(f"({self.size(axis)} - {-sel}) * {stride}")
        if None not in e.index:
            # a 0-d field or a single element: a block of equal offsets, as a masked load needs
            terms.append("offs * 0" if self.mode2d is None else "offs[:, None] * 0")
        mask = "live" if self.mode2d is None else self.live2
        name = self.fresh(f"x_{e.field}")
        if self.mode2d is None:
            buf = self.load_buf
        raw = f"tl.load({ptr} + {' + '.join(terms)}, mask={mask}, other=0)"
        if self.dtypes[e.field] == torch.bfloat16:
            # bfloat16 is the top half of a float32: widen by bits, exact for denormals everywhere
            # (Triton's CPU interpreter flushes them to zero in .to(tl.float32))
            value = f"({raw}.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)"
        else:
            value = f"{raw}.to({_TL[kind]})"
        buf.writeline(f"{name} = {value}  # {comment(_expr.to_text(e))}")
        self.loads[key] = name
        return name, kind

    def reduce(self, e: Reduce, buf: IndentedBuffer) -> tuple[str, str]:
        if self.mode2d is not None:
            raise Unsupported("a reduction inside a reduction")
        x_axes = _axes(self.plan, e.x)
        red = x_axes if e.dims is None else tuple(a for a in x_axes if a in e.dims)
        arg = self.ns.create_name(f"rnumel_{len(self.reduces)}")
        self.reduces.append((arg, red))
        acc = self.fresh("acc")
        rb = BLOCK_RED
        # the accumulator's dtype depends on the reduced value, so evaluate its kind first
        kind = self.kind_of(e.x)
        acc_kind = {"b": "i", "w": "f"}.get(kind, kind) if e.op == "sum" else "i"
        buf.writeline(f"# reduce: {comment(_expr.to_text(e))} over [{comment(', '.join(red))}]")
        buf.writeline(f"{acc} = tl.zeros([{BLOCK_ROWS}], dtype={_TL[acc_kind]})")
        r0 = self.fresh("r0")
        buf.writeline(f"for {r0} in range(0, {arg}, {rb}):")
        saved_idx, saved_loads, saved_memo = dict(self.idx), self.loads, self.memo
        with buf.indent():
            r = self.fresh("r")
            self.live2 = self.fresh("live2")
            buf.writeline(f"{r} = {r0} + tl.arange(0, {rb}).to(IDX)")
            buf.writeline(f"{self.live2} = live[:, None] & ({r} < {arg})[None, :]")
            rest = self.fresh("rest")  # its own name: a loop-carried variable may not change shape
            buf.writeline(f"{rest} = {r}")
            for pos in range(len(red) - 1, -1, -1):
                a = red[pos]
                name = self.ns.create_name("j_" + a)
                self.idx[a] = name
                if pos == 0:
                    buf.writeline(f"{name} = {rest}")
                else:
                    buf.writeline(f"{name} = {rest} % {self.size(a)}")
                    buf.writeline(f"{rest} = {rest} // {self.size(a)}")
            self.mode2d = frozenset(red)
            self.loads, self.memo = {}, {}
            x, k = self.expr(e.x, buf)
            self.mode2d = None
            if e.op == "sum":
                val = x if k != "b" else f"{x}.to(tl.int64)"
                if k == "w":
                    val = f"tl.full((), {x}, tl.float32)"
            elif e.op == "any":
                val = f"{_truth(x, k)}.to(tl.int64)"
            else:
                val = f"({x} == 0).to(tl.int64)"
            buf.writeline(f"{acc} += tl.sum(tl.where({self.live2}, {val}, 0), axis=1).to({_TL[acc_kind]})")
        self.idx, self.loads, self.memo = saved_idx, saved_loads, saved_memo
        if e.op == "sum":
            return acc, acc_kind
        name = self.fresh()
        buf.writeline(f"{name} = {acc} {'>' if e.op == 'any' else '=='} 0")
        return name, "b"

    def kind_of(self, e: Expr) -> str:
        if isinstance(e, Const):
            return "w" if isinstance(e.value, float) else "i"
        if isinstance(e, (Dim, Arange)):
            return "i"
        if isinstance(e, Ref):
            return self.kind(e.field)
        if isinstance(e, Unary):
            return "b" if e.op in ("not", "isfinite") else _arith_kind(self.kind_of(e.x))
        if isinstance(e, Binary):
            if e.op in ("&", "|", "==", "!=", "<", "<=", ">", ">="):
                return "b"
            return _result_kind(self.kind_of(e.a), self.kind_of(e.b))
        if isinstance(e, Reduce):
            k = self.kind_of(e.x)
            return ({"b": "i", "w": "f"}.get(k, k)) if e.op == "sum" else "b"
        raise Unsupported(type(e).__name__)

    # -- header ------------------------------------------------------------------------------
    def header(self, groups: list[Group]) -> list[str]:
        """The kernel in words, as `#` lines: every piece of spec text goes through `comment`."""
        plan = self.plan
        lines = [f"Generated by tritoncheck for spec {comment(plan.spec_name)}: every data check in one launch.", ""]
        lines.append("fields:")
        used = [f for f in plan.fields if f.name in self.fields]
        for f in used:
            dtype = dtype_name(self.dtypes[f.name])
            lines.append(f"  {comment(f.name)}: {dtype} [{_words(f.shape_text)}]  (axes {_words(f.axes)})")
        dims = sorted({a for f in used for a in f.shape if isinstance(a, str)})
        lines.append(f"dims: {_words(dims) or '-'} (batch dim {comment(plan.batch_dim)}); "
                     "sizes and strides are runtime arguments")
        lines.append("checks:")
        for k, c in enumerate(self.checks):
            lines.append(f"  [{k}] {comment(c.code)}: {comment(describe(c))}  over [{_words(c.axes)}]")
        lines.append("groups (program ranges, in order):")
        total = []
        for g_i, g in enumerate(groups):
            reads = []
            for k in g.checks:
                for f in sorted(referenced_fields(self.checks[k])):
                    item = f"{comment(f)} ({self.dtypes[f].itemsize} B/elem)"
                    if item not in reads:
                        reads.append(item)
            unit = "rows" if g.reduce else "elements"
            lines.append(f"  {g_i}: [{_words(g.axes)}], {g.block} {unit} per program, checks {g.checks}; "
                         f"reads {', '.join(reads)}")
        for f in used:
            numel = "*".join(str(s) if isinstance(s, int) else comment(s) for s in f.shape) or "1"
            total.append(f"{self.dtypes[f.name].itemsize}*{numel}")
        lines.append(f"bytes read, at least (each field once): {' + '.join(total) or '0'}; "
                     "a field used by several groups is read by each")
        lines.append(f"writes: nothing on a valid batch; on violations int64 counts into {2}*{len(self.checks)} + "
                     f"{comment(plan.batch_dim)}*{sum(plan.batch_dim in c.axes for c in self.checks)} slots")
        return [f"# {line}" if line else "#" for line in lines]


def _words(items) -> str:
    """Names or text from the spec, each made safe for a comment, comma-separated."""
    return ", ".join(comment(x) for x in items)


def _axes(plan: Plan, e: Expr) -> tuple[str, ...]:
    if isinstance(e, Ref):
        f = plan.field(e.field)
        return tuple(a for a, i in zip(f.axes, e.index, strict=True) if i is None)
    if isinstance(e, Arange):
        return (e.dim,)
    if isinstance(e, Unary):
        return _axes(plan, e.x)
    if isinstance(e, Binary):
        a = _axes(plan, e.a)
        return a + tuple(x for x in _axes(plan, e.b) if x not in a)
    if isinstance(e, Reduce):
        return () if e.dims is None else tuple(a for a in _axes(plan, e.x) if a not in e.dims)
    return ()


def _has_reduce(e: Expr) -> bool:
    if isinstance(e, Reduce):
        return True
    if isinstance(e, Unary):
        return _has_reduce(e.x)
    if isinstance(e, Binary):
        return _has_reduce(e.a) or _has_reduce(e.b)
    return False


def _truth(x: str, kind: str = "") -> str:
    return x if kind == "b" else f"({x} != 0)"


def _num(x: str, kind: str) -> str:
    """Booleans take part in arithmetic and comparisons as int64, as torch's promotion does."""
    return f"{x}.to(tl.int64)" if kind == "b" else x


def _arith_kind(k: str) -> str:
    return "i" if k == "b" else k


def _result_kind(a: str, b: str) -> str:
    a, b = _arith_kind(a), _arith_kind(b)
    if "d" in (a, b):
        return "d"
    if "f" in (a, b) or "w" in (a, b):
        return "f"
    return "i"


def _float_lit(v: float) -> str:
    if math.isnan(v):
        return 'float("nan")'
    if math.isinf(v):
        return 'float("inf")' if v > 0 else 'float("-inf")'
    return repr(float(v))


_HELPERS = {
    "_floordiv_int": '''
@triton.jit
def _floordiv_int(a, b):
    """Floor division for integers (Triton's // truncates); a // 0 is 0, so a == (a // b) * b + a % b."""
    nonzero = tl.where(b == 0, 1, b)
    q = a // nonzero
    r = a - q * nonzero
    q = q - ((r != 0) & ((r < 0) != (nonzero < 0))).to(q.dtype)
    return tl.where(b == 0, 0, q)
''',
    "_remainder_int": '''
@triton.jit
def _remainder_int(a, b):
    """torch.remainder for integers: the result takes the divisor's sign; a % 0 is a."""
    nonzero = tl.where(b == 0, 1, b)
    r = a - (a // nonzero) * nonzero
    r = r + tl.where((r != 0) & ((r < 0) != (nonzero < 0)), nonzero, 0)
    return tl.where(b == 0, a, r)
''',
    "_floordiv_float": '''
@triton.jit
def _floordiv_float(a, b):
    """torch's floor division for floats (fmod-based, as in ATen's div_floor)."""
    mod = a % b
    div = (a - mod) / b
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floored = tl.floor(div)
    floored = tl.where(div - floored > 0.5, floored + 1, floored)
    return tl.where(div == 0, 0.0 * (a / b), tl.where(b == 0, a / b, floored))
''',
    "_remainder_float": '''
@triton.jit
def _remainder_float(a, b):
    """torch.remainder for floats: fmod, shifted into the divisor's sign."""
    mod = a % b
    return tl.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod)
''',
}


# ---------------------------------------------------------------------------------------------
# Writing and importing the generated module.

_lock = threading.Lock()


def cache_dir() -> str:
    return os.environ.get("TRITONCHECK_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tritoncheck")


def write_atomic(path: str, text: str) -> None:
    """Write via a temporary file and os.replace, so a reader never sees half a file."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".py")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def load(program: Program) -> Program:
    """Write the program's source to the cache dir and import its kernel."""
    digest = hashlib.sha256(program.source.encode()).hexdigest()[:20]
    # NOTE: Triton's JIT reads a kernel's source with `inspect`, so it must live in a real file.
    path = os.path.join(cache_dir(), f"tc_{digest}.py")
    with _lock:
        existing = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                existing = fh.read()
        if existing != program.source:
            write_atomic(path, program.source)
        # triton.jit picks interpreter or compiler when the module runs, so each mode gets its own module
        interp = "_interp" if os.environ.get("TRITON_INTERPRET") == "1" else ""
        mod_name = f"tritoncheck_generated.tc_{digest}{interp}"
        module = sys.modules.get(mod_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(mod_name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[mod_name] = module
    program.kernel = getattr(module, KERNEL_NAME)
    program.path = path
    return program


__all__ = ["generate", "load", "Program", "Unsupported", "cache_dir"]
