"""Triton source for a `Kernel`: every data check of a plan in one launch.

The kernel IR (`tritoncheck/_kernel/ir.py`) decides what is computed: the groups, their ops
and kinds, the host scalars, the result buffer's `Layout`. `TritonCodegen` is the Triton ops
handler over it (Inductor's `TritonKernel` to the C generator's `CppKernel`): one method per IR
op, each spelling the op for Triton, nothing re-decided here.

The kernel has one flat grid. Each group owns a contiguous range of program ids (`end_<g>`
arguments). An element-wise group gives each program a tile of `BLOCK` elements, walked with
one flat index when every field it reads is contiguous; a group with a reduction gives each
program a block of output rows (`BLOCK_ROWS`, or 1 for a group without axes) and loops over the
reduced axes `BLOCK_RED` elements a step. Dim sizes, strides and host scalars are runtime
arguments, so one compiled kernel serves every batch shape; the source depends on the plan, the
runnable checks and each field's dtype and contiguity.

A valid batch writes nothing: each group computes one combined "anything wrong?" reduction,
and only a program that finds something counts per check (per sample for checks over the batch
axis) and keeps the first offending flat index (`atomic_max` of BIG - index), into the buffer
laid out by `Layout`.

Integer arguments may reach the kernel as int32, int64 or (when equal to 1) a constexpr, as the
JIT specialises them; each is cast once at the top (`tl.cast`), to IDX for sizes and strides
(int32 unless an index or offset can pass 2**31 - 1, decided on the host) and to int64 for host
scalars. Float host scalars travel as the int64 bits of their double (a float argument would be
float32), so a bound such as 0.1 compares exactly as torch compares it.

A spec is untrusted input: the source is assembled from the IR's structured values, every
identifier comes from `_source.NameSpace`, numbers are formatted here, and any spec text (names,
rule, bound and shape text) reaches it only through `_source.comment`, as `#` comment lines.

Generated source is written to a real file (Triton's JIT reads it with `inspect`), atomically,
under TRITONCHECK_CACHE_DIR (default ~/.cache/tritoncheck).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import math
import os
import struct
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .._dtypes import dtype_name
from .._expr import to_text
from .._kernel.ir import BIG, Group, Kernel, Op, Unsupported, walk
from .._plan import describe
from .._source import RESERVED, IndentedBuffer, NameSpace, comment

BLOCK = 1024  # elements per program for element-wise groups
BLOCK_ROWS = 16  # output rows per program for groups with a reduction
BLOCK_RED = 128  # reduced elements per loop step
KERNEL_NAME = "tritoncheck_kernel"

_TL = {"b": "tl.int1", "i": "tl.int64", "f": "tl.float32", "d": "tl.float64"}
# storage dtypes loaded as they are (no conversion to the compute kind needed)
_NATIVE = {torch.int64: "i", torch.float32: "f", torch.float64: "d"}
_FLOAT_MAX = {"f": repr(torch.finfo(torch.float32).max), "d": repr(torch.finfo(torch.float64).max)}

_HELPERS = {
    "_floordiv_i": '''
@triton.jit
def _floordiv_i(a, b):
    # torch's floor division for int64; a // 0 == 0, and INT64_MIN // -1 wraps (// would overflow)
    safe = tl.where((b == 0) | (b == -1), 1, b)
    q = a // safe  # truncates
    q = q - ((a - q * safe != 0) & ((a < 0) != (safe < 0))).to(tl.int64)
    return tl.where(b == 0, 0, tl.where(b == -1, -a, q))
''',
    "_mod_i": '''
@triton.jit
def _mod_i(a, b):
    # torch.remainder for int64: the result takes the divisor's sign; a % 0 == a
    safe = tl.where((b == 0) | (b == -1), 1, b)
    r = a - (a // safe) * safe
    r = r + tl.where((r != 0) & ((r < 0) != (safe < 0)), safe, 0)
    return tl.where(b == 0, a, tl.where(b == -1, 0, r))
''',
    "_floordiv_f": '''
@triton.jit
def _floordiv_f(a, b):
    # torch's floor division for float32 (ATen's div_floor_floating; % on floats is fmod).
    # tl.div_rn: a float32 `/` compiles to an approximate division on NVIDIA GPUs
    basic = tl.div_rn(a, b)
    mod = a % b
    basic_inf = (basic == basic) & (basic - basic != 0)  # +-inf: inf - inf is NaN
    a_not_inf = (a != a) | (a - a == 0)
    div = tl.div_rn(tl.where(basic_inf & a_not_inf, a, a - mod), b)
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floored = tl.floor(div)
    floored = tl.where(div - floored > 0.5, floored + 1, floored)
    floored = tl.where(div == 0, basic * 0, floored)  # a zero keeps the sign of a / b
    return tl.where(b == 0, basic, floored)
''',
    "_floordiv_d": '''
@triton.jit
def _floordiv_d(a, b):
    # _floordiv_f for float64 (whose `/` rounds to nearest)
    basic = a / b
    mod = a % b
    basic_inf = (basic == basic) & (basic - basic != 0)
    a_not_inf = (a != a) | (a - a == 0)
    div = tl.where(basic_inf & a_not_inf, a, a - mod) / b
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floored = tl.floor(div)
    floored = tl.where(div - floored > 0.5, floored + 1, floored)
    floored = tl.where(div == 0, basic * 0, floored)
    return tl.where(b == 0, basic, floored)
''',
    "_mod_f": '''
@triton.jit
def _mod_f(a, b):
    # torch.remainder for floats: fmod, moved into the divisor's sign
    mod = a % b
    return tl.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod)
''',
}

# Names the kernel uses as they are; no identifier derived from a spec may take one.
_FIXED = frozenset({KERNEL_NAME, "pid", "tile", "offs", "live", "out_ptr", "n_bad", "first", "IDX", *_HELPERS})


@dataclass
class Program:
    """Generated source and what the launcher needs: per group its block (elements or rows per
    program), and the axes of every reduction (for choosing the index width)."""

    kernel: Kernel
    source: str
    blocks: tuple[int, ...]
    reductions: tuple[tuple[str, ...], ...]
    fn: Any = None  # the JIT function, once `load`ed
    path: str | None = None


def generate(kernel: Kernel) -> Program:
    """The Triton module for `kernel` (raises `Unsupported` for a reduction inside a reduction)."""
    return TritonCodegen(kernel).run()


def literal(value: Any, kind: str, shape: str = "()") -> str:
    """A constant of `kind` as an exact, typed Triton block of `shape` (never a bare Python number,
    whose type Triton would infer): ints and bools as themselves, finite floats by repr (which
    round-trips), inf and NaN by their bits."""
    if kind == "f" or kind == "d":
        v = float(value)
        if math.isfinite(v):
            return f"tl.full({shape}, {v!r}, {_TL[kind]})"
        if kind == "f":
            bits = struct.unpack("<i", struct.pack("<f", v))[0]
            return f"tl.full({shape}, {bits}, tl.int32).to(tl.float32, bitcast=True)"
        bits = struct.unpack("<q", struct.pack("<d", v))[0]
        return f"tl.full({shape}, {_int(bits)}, tl.int64).to(tl.float64, bitcast=True)"
    return f"tl.full({shape}, {_int(int(value))}, {_TL[kind]})"


def _int(v: int) -> str:
    """An int literal; -2**63 as an expression (its absolute value is not an int64)."""
    return f"({v + 1} - 1)" if v == -(2**63) else repr(v)


class TritonCodegen:
    """Writes the kernel; its op methods are the Triton ops handler that `ir.walk` calls."""

    def __init__(self, kernel: Kernel):
        self.k = kernel
        self.ns = NameSpace(RESERVED | _FIXED)
        self.helpers: set[str] = set()
        self.names: dict[int, str] = {}
        # arguments, in `Kernel.int_args()` order, then the float scalars (as bits)
        self.ptr = {f.name: self.ns.create_name(f"{f.name}_ptr") for f in kernel.fields}
        self.stride_arg = {(f.name, i): self.ns.create_name(f"{f.name}_stride{i}")
                           for f in kernel.fields if not f.contiguous for i in range(len(f.axes))}
        self.size_arg = {a: self.ns.create_name(f"size_{a}") for a in kernel.sizes}
        self.scalar_arg = {s: self.ns.create_name(f"scalar_{s}") for s in (*kernel.int_slots, *kernel.float_slots)}
        self.ends = [self.ns.create_name(f"end_{g}") for g in range(len(kernel.groups))]
        # kernel-level values cast once at the top, emitted only where used
        self.prelude: dict[str, str] = {}  # name -> line
        self.n: dict[str, str] = {}  # dim -> its size in IDX
        self.st: dict[tuple[str, int], str | None] = {}  # (field, axis) -> stride in IDX (None: 1)
        self.sc: dict[int, str] = {}  # slot -> host scalar as int64 or float64
        # per group
        self.buf = IndentedBuffer()
        self.loads = IndentedBuffer()
        self.idx: dict[str, str] = {}  # axis -> index vector of the group's position
        self.flat = False  # loads use `offs` (element-wise group over contiguous fields)
        self.red: tuple[tuple[str, ...], dict[str, str], str, str] | None = None  # in a reduction body
        self.rows = 0

    # -- the module -------------------------------------------------------------------------------
    def run(self) -> Program:
        body = IndentedBuffer(level=1)
        blocks, reductions = [], []
        for g_i, g in enumerate(self.k.groups):
            blocks.append(self.block(g))
            self.group(g_i, g, body, reductions)
        args = [*self.ptr.values(), *self.stride_arg.values(), *self.size_arg.values()]
        args += [self.scalar_arg[s] for s in self.k.int_slots] + [self.scalar_arg[s] for s in self.k.float_slots]
        args += [*self.ends, "out_ptr", "IDX: tl.constexpr"]
        out = IndentedBuffer()
        out.writelines(self.header(blocks))
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
        with out.indent():
            out.writeline("pid = tl.program_id(0)")
            if self.prelude:
                out.writeline("# sizes and strides in IDX (int32 unless an index or offset passes 2**31 - 1), host scalars")
                out.writelines(list(self.prelude.values()))
        out.splice(body)
        return Program(self.k, out.getvalue(), tuple(blocks), tuple(reductions))

    def header(self, blocks: list[int]) -> list[str]:
        """The kernel in words, as `#` lines: every piece of spec text goes through `comment`."""
        k = self.k
        lines = [f"Generated by tritoncheck for spec {comment(k.spec_name)}: every data check in one launch.", ""]
        lines.append("fields (read once per group that uses them):")
        for f in k.fields:
            lay = "contiguous" if f.contiguous else "strided"
            lines.append(f"  {comment(f.name)}: {dtype_name(f.dtype)} [{self.shape_words(f.axes)}], {lay}")
        lines.append(f"dims: {_words(k.sizes) or '-'} (batch dim {comment(k.batch_dim)}); "
                     "sizes, strides and host scalars are runtime arguments")
        lines.append("checks:")
        for i, c in enumerate(k.checks):
            lines.append(f"  [{i}] {comment(c.code)}: {comment(describe(c))}  over [{_words(c.axes)}]")
        lines.append("groups (program ranges, in order):")
        for g_i, (g, block) in enumerate(zip(k.groups, blocks, strict=True)):
            unit = "rows" if g.reduce else "elements"
            reads = ", ".join(f"{comment(f)} ({k.field(f).dtype.itemsize} B/elem)" for f in g.fields)
            lines.append(f"  {g_i}: [{_words(g.axes)}], {block} {unit} per program, checks "
                         f"{[c for c, _ in g.checks]}; reads {reads or 'nothing'}")
        total = [f"{f.dtype.itemsize}*{self.shape_words(f.axes, '*') or '1'}" for f in k.fields]
        lines.append(f"bytes read, at least (each field once): {' + '.join(total) or '0'}; "
                     "a field used by several groups is read by each")
        rows = sum(r >= 0 for r in k.layout.batch_rows)
        lines.append(f"writes: nothing on a valid batch; on violations int64 counts into 2*{len(k.checks)} + "
                     f"{comment(k.batch_dim)}*{rows} slots")
        return [f"# {line}" if line else "#" for line in lines]

    def shape_words(self, axes: tuple[str, ...], sep: str = ", ") -> str:
        return sep.join(str(self.k.fixed[a]) if a in self.k.fixed else comment(a) for a in axes)

    # -- kernel-level values ------------------------------------------------------------------------
    def size(self, axis: str) -> str:
        """An axis' size: a literal for a fixed axis, else the dim's size argument cast to IDX."""
        if axis in self.k.fixed:
            return str(self.k.fixed[axis])
        if axis not in self.n:
            if axis not in self.size_arg:
                raise Unsupported(f"no size for axis {axis}")
            self.n[axis] = name = self.ns.create_name(f"n_{axis}")
            self.prelude[name] = f"{name} = tl.cast({self.size_arg[axis]}, IDX)  # {comment(axis)}"
        return self.n[axis]

    def stride(self, fname: str, pos: int) -> str | None:
        """A field's stride along axis `pos` in IDX; None for a contiguous field's innermost axis (1)."""
        key = (fname, pos)
        if key not in self.st:
            f = self.k.field(fname)
            if not f.contiguous:
                name = self.ns.create_name(f"st_{fname}_{pos}")
                self.prelude[name] = f"{name} = tl.cast({self.stride_arg[key]}, IDX)"
                self.st[key] = name
            elif pos == len(f.axes) - 1:
                self.st[key] = None
            else:  # row-major from the sizes: size of the next axis times its stride
                inner, size = self.stride(fname, pos + 1), self.size(f.axes[pos + 1])
                name = self.ns.create_name(f"st_{fname}_{pos}")
                self.prelude[name] = f"{name} = {size if inner is None else f'{inner} * {size}'}"
                self.st[key] = name
        return self.st[key]

    def host(self, slot: int) -> str:
        """Host scalar `slot`: an int64, or the float64 whose bits it travels in."""
        if slot not in self.sc:
            arg = self.scalar_arg[slot]
            self.sc[slot] = name = self.ns.create_name(f"sc_{slot}")
            if slot in self.k.float_slots:
                value = f"tl.cast(tl.cast({arg}, tl.int64), tl.float64, bitcast=True)"
            else:
                value = f"tl.cast({arg}, tl.int64)"
            self.prelude[name] = f"{name} = {value}  # {comment(to_text(self.k.scalars[slot].expr))}"
        return self.sc[slot]

    # -- one group ----------------------------------------------------------------------------------
    def block(self, g: Group) -> int:
        if not g.reduce:
            return BLOCK
        return BLOCK_ROWS if g.axes else 1

    def group(self, g_i: int, g: Group, body: IndentedBuffer, reductions: list) -> None:
        k = self.k
        what = "; ".join(comment(describe(k.checks[c])) for c, _ in g.checks)
        body.writeline(f"# group {g_i}: over [{_words(g.axes)}]: {what}")
        body.writeline(f"{'if' if g_i == 0 else 'elif'} pid < {self.ends[g_i]}:")
        self.buf = IndentedBuffer(level=body.level + 1)
        self.loads = IndentedBuffer(level=body.level + 1)
        self.idx, self.rows, self.reductions = {}, self.block(g), reductions
        self.flat = g.elementwise and bool(g.axes) and all(k.field(f).contiguous for f in g.fields)
        w = self.buf.writeline
        start = "pid" if g_i == 0 else f"(pid - {self.ends[g_i - 1]})"
        w(f"tile = {start}.to(IDX)")
        unit = "rows" if g.reduce else "elements"
        w(f"offs = tile * {self.rows} + tl.arange(0, {self.rows}).to(IDX)  # {unit}, row-major over the group's axes")
        numel = " * ".join(self.size(a) for a in g.axes) or "1"
        w(f"live = offs < {numel}")
        if not self.flat:
            self.unravel("offs", g.axes, self.idx)
        env: dict[int, Any] = {}
        checks = IndentedBuffer(level=self.buf.level)
        head, self.buf = self.buf, checks
        walk(g.ops, self, env)
        self.buf = head
        if self.loads.lines:
            w("# loads")
            self.buf.splice(self.loads)
        w("# checks")
        self.buf.splice(checks)
        bads = []
        for c, v in g.checks:
            bad = self.ns.create_name(f"bad_{c}")
            bads.append(bad)
            w(f"{bad} = {self.as_mask(env[v.id])}  # {comment(describe(k.checks[c]))}")
        self.store(g, bads)
        body.splice(self.buf)

    def store(self, g: Group, bads: list[str]) -> None:
        w = self.buf.writeline
        k = self.k
        w("# store: one reduction on a valid batch; only a program that found a violation writes")
        w(f"if tl.max(({' | '.join(bads)}).to(tl.int32), axis=0) > 0:")
        with self.buf.indent():
            per_sample = any(k.layout.sample_base(c)[1] >= 0 for c, _ in g.checks)
            if per_sample and self.flat:  # the sample index, on this path only
                self.unravel("offs", g.axes, self.idx)
            for (c, _), bad in zip(g.checks, bads, strict=True):
                w(f"n_bad = tl.sum({bad}.to(tl.int32), axis=0)")
                w("if n_bad > 0:")
                with self.buf.indent():
                    base, row = k.layout.sample_base(c)
                    if row >= 0:
                        b = k.batch_dim
                        w(f"tl.atomic_add(out_ptr + ({base} + {row} * {self.size(b)}) + {self.idx[b]}, "
                          f"{bad}.to(tl.int64), mask={bad})")
                    else:
                        w(f"tl.atomic_add(out_ptr + {k.layout.count(c)}, n_bad.to(tl.int64))")
                    w(f"first = tl.min(tl.where({bad}, offs.to(tl.int64), {BIG}), axis=0)")
                    w(f"tl.atomic_max(out_ptr + {k.layout.first(c)}, {BIG} - first)  # {BIG} = 2**62: max keeps the first")

    def unravel(self, flat: str, axes: tuple[str, ...], into: dict[str, str]) -> None:
        """Row-major flat index -> one index vector per axis."""
        rest = flat
        for pos in range(len(axes) - 1, -1, -1):
            a = axes[pos]
            name = self.ns.create_name(f"i_{a}" if into is self.idx else f"j_{a}")
            into[a] = name
            if pos == 0:
                self.buf.writeline(f"{name} = {rest}")
            else:
                self.buf.writeline(f"{name} = {rest} % {self.size(a)}")
                nxt = self.ns.create_name("rest")
                self.buf.writeline(f"{nxt} = {rest} // {self.size(a)}")
                rest = nxt

    # -- the ops handler ------------------------------------------------------------------------------
    def let(self, op: Op, expr: str, note: str = "", buf: IndentedBuffer | None = None) -> str:
        name = self.names[op.id] = self.ns.create_name(f"v{op.id}")
        (buf or self.buf).writeline(f"{name} = {expr}" + (f"  # {note}" if note else ""))
        return name

    def position(self, axis: str) -> tuple[str, str]:
        """The index vector along `axis`, shaped for the current scope, and which scope follows it."""
        if self.red is not None:
            axes, jdx, _, _ = self.red
            if axis in axes:
                return f"{jdx[axis]}[None, :]", "inner"
            if axis in self.idx:
                return f"{self.idx[axis]}[:, None]", "outer"
        elif axis in self.idx:
            return self.idx[axis], "outer"
        raise Unsupported(f"axis {axis} is not in the iteration space")

    def load(self, op: Op, fname: str, index: tuple, prev: str | None = None) -> str:
        f = self.k.field(fname)
        if self.flat and self.red is None and prev is None:
            offset = "offs"
        else:
            terms, follows = [], set()
            for pos, (axis, sel) in enumerate(zip(f.axes, index, strict=True)):
                if sel is None:
                    ix, scope = self.position(axis)
                    follows.add(scope)
                    if axis == prev:  # one position back, clamped at 0
                        ix = f"tl.maximum({ix} - 1, 0)"
                elif sel >= 0:
                    ix = str(sel)
                else:
                    ix = f"({self.size(axis)} - {-sel})"
                st = self.stride(fname, pos)
                terms.append(ix if st is None else f"{ix} * {st}")
            # a load must be as wide as its mask: add zeros where the offsets do not span the scope
            if self.red is not None and follows != {"outer", "inner"}:
                terms.append(self.red[3])
            elif self.red is None and not follows:
                terms.append("offs * 0")
            offset = " + ".join(terms)
        mask = "live" if self.red is None else self.red[2]
        raw = f"tl.load({self.ptr[fname]} + {offset}, mask={mask}, other=0)"
        if f.dtype == torch.bfloat16:
            # bfloat16 is the top half of a float32: widen by bits, exact for denormals everywhere
            # (Triton's CPU interpreter flushes them to zero in .to(tl.float32))
            value = f"({raw}.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)"
        elif _NATIVE.get(f.dtype) == op.kind:
            value = raw
        else:
            value = f"{raw}.to({_TL[op.kind]})"
        # a load at the group's top level depends only on the position: hoisted into the loads section
        return self.let(op, value, comment(fname), self.loads if self.red is None else None)

    def load_prev(self, op: Op, fname: str, axis: str) -> str:
        return self.load(op, fname, (None,) * len(self.k.field(fname).axes), prev=axis)

    def shape(self) -> str:
        """The current scope's block shape: every value in the kernel is a block of it. (Triton's CPU
        interpreter types a 0-d comparison by its operands, so a 0-d bool broadcast against a block
        became an integer or float array that `&` and `|` refuse.)"""
        return f"[{self.rows}]" if self.red is None else f"[{self.rows}, {BLOCK_RED}]"

    def const(self, op: Op, value: Any) -> str:
        return self.let(op, literal(value, op.kind, self.shape()))

    def index(self, op: Op, axis: str) -> str:
        return self.let(op, f"{self.position(axis)[0]}.to(tl.int64)", f"arange({comment(axis)})")

    def scalar(self, op: Op, slot: int) -> str:
        x = f"tl.broadcast_to({self.host(slot)}, {self.shape()})"
        if op.kind == "b":
            return self.let(op, f"{x} != 0")
        if op.kind == "i" and slot not in self.k.float_slots:
            return self.let(op, x)
        return self.let(op, f"{x}.to({_TL[op.kind]})")

    def cast(self, op: Op, x: str) -> str:
        return self.let(op, f"{x}.to({_TL[op.kind]})")

    def neg(self, op: Op, x: str) -> str:
        return self.let(op, f"-{x}")  # int64 wraps

    def abs(self, op: Op, x: str) -> str:
        return self.let(op, f"tl.abs({x})")  # abs(INT64_MIN) == INT64_MIN

    def as_mask(self, x: str) -> str:
        """The boolean block `x`, False where the scope is masked off."""
        mask = "live" if self.red is None else self.red[2]
        return f"tl.where({mask}, {x}, False)"

    def not_(self, op: Op, x: str) -> str:
        return self.let(op, f"{x} == 0")

    def truth(self, op: Op, x: str) -> str:
        return self.let(op, f"{x} != 0")  # NaN is true

    def isfinite(self, op: Op, x: str) -> str:
        return self.let(op, f"tl.abs({x}) <= {_FLOAT_MAX[op.args[0].kind]}")  # NaN and +-inf fail <=

    def add(self, op: Op, a: str, b: str) -> str:
        return self.let(op, f"{a} + {b}")

    def sub(self, op: Op, a: str, b: str) -> str:
        return self.let(op, f"{a} - {b}")

    def mul(self, op: Op, a: str, b: str) -> str:
        return self.let(op, f"{a} * {b}")

    def _helper(self, op: Op, name: str, a: str, b: str) -> str:
        name += "_" + ("f" if name == "_mod" and op.kind == "d" else op.kind)
        self.helpers.add(name)
        return self.let(op, f"{name}({a}, {b})")

    def floordiv(self, op: Op, a: str, b: str) -> str:
        return self._helper(op, "_floordiv", a, b)

    def mod(self, op: Op, a: str, b: str) -> str:
        return self._helper(op, "_mod", a, b)

    def eq(self, op: Op, a: str, b: str) -> str:
        return self.let(op, f"{a} == {b}")

    def ne(self, op: Op, a: str, b: str) -> str:
        return self.let(op, f"{a} != {b}")

    def lt(self, op: Op, a: str, b: str) -> str:
        return self.let(op, f"{a} < {b}")

    def le(self, op: Op, a: str, b: str) -> str:
        return self.let(op, f"{a} <= {b}")

    def gt(self, op: Op, a: str, b: str) -> str:
        return self.let(op, f"{a} > {b}")

    def ge(self, op: Op, a: str, b: str) -> str:
        return self.let(op, f"{a} >= {b}")

    def and_(self, op: Op, a: str, b: str) -> str:
        return self.let(op, f"{a} & {b}")

    def or_(self, op: Op, a: str, b: str) -> str:
        return self.let(op, f"{a} | {b}")

    def reduction(self, op: Op, red: str, axes: tuple[str, ...], body: Callable[[], str]) -> str:
        """A loop over the reduced axes, BLOCK_RED elements a step, for every row of the block."""
        if self.red is not None:
            raise Unsupported("a reduction inside a reduction")
        w = self.buf.writeline
        acc = self.ns.create_name(f"acc{op.id}")
        rnumel = " * ".join(self.size(a) for a in axes) or "1"
        self.reductions.append(axes)
        # sum: in the value's kind; any/all: the max of (value, resp. not value) seen so far
        acc_dtype = _TL[op.kind] if red == "sum" else "tl.int32"
        w(f"# reduce: {red} over [{_words(axes)}]")
        w(f"{acc} = tl.zeros([{self.rows}], dtype={acc_dtype})")
        r0 = self.ns.create_name("r0")
        w(f"for {r0} in range(0, {rnumel}, {BLOCK_RED}):")
        with self.buf.indent():
            r, live2, zero2 = (self.ns.create_name(n) for n in ("r", "live2", "zero2"))
            w(f"{r} = {r0} + tl.arange(0, {BLOCK_RED}).to(IDX)")
            w(f"{live2} = live[:, None] & ({r} < {rnumel})[None, :]")
            w(f"{zero2} = tl.zeros([{self.rows}, {BLOCK_RED}], dtype=IDX)")
            jdx: dict[str, str] = {}
            self.unravel(r, axes, jdx)
            self.red = (axes, jdx, live2, zero2)
            try:
                value = body()
            finally:
                self.red = None
            if red == "sum":
                w(f"{acc} += tl.sum(tl.where({live2}, {value}, 0), axis=1)")
            else:
                hit = value if red == "any" else f"{value} == 0"
                w(f"{acc} = tl.maximum({acc}, tl.max(tl.where({live2}, {hit}, 0).to(tl.int32), axis=1))")
        if red == "sum":
            return acc
        return self.let(op, f"{acc} {'>' if red == 'any' else '=='} 0")


def _words(items) -> str:
    """Names or text from the spec, each made safe for a comment, comma-separated."""
    return ", ".join(comment(x) for x in items)


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
    program.fn = getattr(module, KERNEL_NAME)
    program.path = path
    return program


__all__ = ["BLOCK", "BLOCK_RED", "BLOCK_ROWS", "KERNEL_NAME", "Program", "TritonCodegen", "cache_dir", "generate",
           "literal", "load"]
