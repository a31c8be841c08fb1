"""Triton source for a `Kernel`: every data check of a plan in one launch.

The kernel IR (`tritoncheck/kernel/ir.py`) decides what is computed: the groups, their ops
and kinds, the host scalars, the result buffer's `Layout`. `TritonCodegen` is the Triton ops
handler over it (Inductor's `TritonKernel` to the C generator's `CppKernel`): one method per IR
op, each spelling the op for Triton, nothing re-decided here.

The kernel has one flat grid. An element-wise check whose field a reduction of another group
reads whole over the same elements runs inside that reduction's loop, on the loaded values, so
each field is read once per kernel (`program_groups`). The IR's groups are split where their
checks read disjoint fields of different widths (`split_group`), and each resulting group is a `@triton.jit`
function the kernel calls for its contiguous range of program ids (`end_<g>` arguments); its
tile sizes come from the bytes its loads read per element (`per_thread`), about 64 bytes a
thread in flight and a 128-bit load of its narrowest field:

- an element-wise group gives each program one tile of `block` elements. A full tile (FULL, a
  constexpr: all but the last program) loads without a mask, so a contiguous field read whole
  over the group's axes loads 128 bits at a time at the flat index `offs`; the ragged last tile
  loads masked. Positions along the axes (for broadcasts, selections, `arange`, strided fields)
  are unravelled only where needed, and with `_divmod` -- a multiply-high and a shift by
  magic numbers from the host, in 32 or 64 bits as the indices -- never a division instruction;
- a group with a reduction gives each program a block of output rows and loops over the reduced
  axes `step` elements per row a step, the full steps unmasked along the row. A row longer than
  `MAX_STEPS` steps is split across 2**split programs (`combine` says how their partials meet
  without a write on a valid batch).

A valid batch writes nothing: each group computes one combined "anything wrong?" reduction,
and only a program that finds something counts per check (per sample for checks over the batch
axis) and keeps the first offending flat index (`atomic_max` of BIG - index), into the buffer
laid out by `Layout`. The fused checks' path walks their rows again, one element a thread a step
(`fused_store`), and so does the path of an element-wise tile of 16 half-precision elements a
thread (`walk_again`), so they cost few registers: a kernel's registers are its heaviest path's,
and they bound how many programs an SM holds. Every value is a block of its scope's shape (constants and host scalars
are broadcast): Triton's CPU interpreter mistypes a 0-d comparison once broadcast.

Sizes, host scalars, magic numbers and program ranges are runtime arguments the JIT does not
specialise on (`do_not_specialize`), so one compiled kernel serves every batch shape of a field
signature; each is cast once at the top of a group function, to IDX for sizes and strides
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
import dataclasses
import hashlib
import importlib.util
import math
import os
import struct
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tritoncheck.dtypes import ITEMSIZE
from tritoncheck.expr import to_text
from tritoncheck.kernel.ir import BIG, FieldSig, Group, Kernel, Op, Unsupported, Val, positional_axes, reductions, walk
from tritoncheck.plan.lower import describe
from tritoncheck.codegen.source import RESERVED, IndentedBuffer, NameSpace, comment

KERNEL_NAME = "tritoncheck_kernel"

_TL = {"b": "tl.int1", "i": "tl.int64", "f": "tl.float32", "d": "tl.float64"}
# storage dtypes loaded as they are (no conversion to the compute kind needed)
_NATIVE = {"int64": "i", "float32": "f", "float64": "d"}
_FLOAT_MAX = {"f": "3.4028234663852886e+38", "d": repr(sys.float_info.max)}  # the largest finite float32, float64

_HELPERS = {
    "_fmod_f": '''
@triton.jit
def _fmod_f(a, b):
    # C's fmod for float32, exact as torch computes it (a float `%` compiles to a - trunc(a / b) * b,
    # wrong when a / b rounds across an integer). In float64, a float32 ratio (at most 2**277) is
    # reduced 28 bits a step: s = |b| * 2**k, t = floor(r / s) < 2**29, and t * s and r - t * s are exact.
    r = tl.abs(a.to(tl.float64))
    d = tl.abs(b.to(tl.float64))
    for _ in tl.static_range(11):
        e = (((r / d).to(tl.int64, bitcast=True) >> 52) & 2047) - 1023  # the ratio's exponent
        s = d * ((tl.maximum(e - 28, 0) + 1023) << 52).to(tl.float64, bitcast=True)
        rest = r - tl.floor(r / s) * s
        r = tl.where(r >= d, tl.where(rest < 0, rest + s, rest), r)  # the quotient rounded up: one s back
    # the sign of a, -0.0 included: r * -1.0, as `-r` is 0 - r in Triton 3.6 (+0.0 for r = +0.0)
    r = tl.where(a.to(tl.int32, bitcast=True) < 0, r * -1.0, r).to(tl.float32)
    r = tl.where(d - d != 0, a, r)  # b = +-inf: a
    nan = tl.full(r.shape, 2143289344, tl.int32).to(tl.float32, bitcast=True)
    return tl.where((d == 0) | (a - a != 0) | (b != b), nan, r)  # b = 0, a = +-inf or NaN, b NaN
''',
    "_fmod_d": '''
@triton.jit
def _fmod_d(a, b):
    # C's fmod for float64, exact (Triton's float64 % is a - trunc(a / b) * b on GPUs). |a| is
    # reduced by s = |b| * 2**k, k >= 0 so that t = floor(r / s) < 2**52: r - t * s lies in (-s, s)
    # on a multiple of s's last bit, so one fma gives it exactly. A step takes 50 bits of the
    # quotient; the loop runs while any element of the block has r >= |b| (at most 43 steps).
    r = tl.abs(a)
    d = tl.abs(b)
    go = (r >= d) & (d > 0) & (r - r == 0) & (d - d == 0)
    tiny = 2.2250738585072014e-308  # the smallest normal float64: below it, scale by 2**64 to read the exponent
    ds = tl.where(d < tiny, d * 18446744073709551616.0, d)
    ed = ((ds.to(tl.int64, bitcast=True) >> 52) & 2047) - tl.where(d < tiny, 64, 0)
    while tl.max(go.to(tl.int32)) > 0:  # over every axis of the block
        rs = tl.where(r < tiny, r * 18446744073709551616.0, r)
        er = ((rs.to(tl.int64, bitcast=True) >> 52) & 2047) - tl.where(r < tiny, 64, 0)
        k = tl.maximum(er - ed - 50, 0)
        s = d * ((tl.minimum(k, 1000) + 1023) << 52).to(tl.float64, bitcast=True)
        s = s * ((tl.minimum(tl.maximum(k - 1000, 0), 1000) + 1023) << 52).to(tl.float64, bitcast=True)
        s = s * ((tl.maximum(k - 2000, 0) + 1023) << 52).to(tl.float64, bitcast=True)
        rest = tl.fma(-tl.floor(r / s), s, r)
        r = tl.where(go, tl.where(rest < 0, rest + s, rest), r)  # the quotient rounded up: one s back
        go = go & (r >= d)
    r = tl.where(a.to(tl.int64, bitcast=True) < 0, r * -1.0, r)  # the sign of a, -0.0 included (as in _fmod_f)
    r = tl.where(d - d != 0, a, r)  # b = +-inf: a
    nan = tl.full(r.shape, 9221120237041090560, tl.int64).to(tl.float64, bitcast=True)
    return tl.where((d == 0) | (a - a != 0) | (b != b), nan, r)  # b = 0, a = +-inf or NaN, b NaN
''',
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
    mod = _fmod_f(a, b)
    basic_inf = (basic == basic) & (basic - basic != 0)  # +-inf: inf - inf is NaN
    a_not_inf = (a != a) | (a - a == 0)
    div = tl.div_rn(tl.where(basic_inf & a_not_inf, a, a - mod), b)
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floored = tl.floor(div)
    floored = tl.where((div < 0) & (floored == 0), -1.0, floored)  # tl.floor flushes a denormal to 0 on GPUs
    floored = tl.where(div - floored > 0.5, floored + 1, floored)
    floored = tl.where(div == 0, basic * 0, floored)  # a zero keeps the sign of a / b
    return tl.where(b == 0, basic, floored)
''',
    "_floordiv_d": '''
@triton.jit
def _floordiv_d(a, b):
    # _floordiv_f for float64 (whose `/` rounds to nearest)
    basic = a / b
    mod = _fmod_d(a, b)
    basic_inf = (basic == basic) & (basic - basic != 0)
    a_not_inf = (a != a) | (a - a == 0)
    div = tl.where(basic_inf & a_not_inf, a, a - mod) / b
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floored = tl.floor(div)
    floored = tl.where(div - floored > 0.5, floored + 1, floored)
    floored = tl.where(div == 0, basic * 0, floored)
    return tl.where(b == 0, basic, floored)
''',
    "_divmod": '''
@triton.jit
def _divmod(n, d, magic, shift, IDX: tl.constexpr):
    # (n // d, n % d) for d >= 1 and 0 <= n < 2**31 (int32 indices) or 2**63 (int64): no division
    # instruction, but q = (umulhi(n, magic) + n) >> shift in IDX's width, unsigned (the sum stays
    # below 2n), magic and shift from the host for that width (`backend.divisor_magic`)
    if IDX == tl.int32:
        nu = n.to(tl.uint32, bitcast=True)
        q = ((tl.umulhi(nu, magic.to(tl.uint32, bitcast=True)) + nu) >> shift.to(tl.uint32)).to(tl.int32, bitcast=True)
    else:
        nu = n.to(tl.uint64, bitcast=True)
        m = tl.cast(magic, tl.int64).to(tl.uint64, bitcast=True)  # (an int32 argument where the magic fits one)
        q = ((tl.umulhi(nu, m) + nu) >> shift.to(tl.uint64)).to(tl.int64, bitcast=True)
    return q, n - q * d
''',
    "_pow2": '''
@triton.jit
def _pow2(k):
    # 2.0**k, exactly, for int64 k in [-1022, 1023] (the exponent bits)
    return ((k + 1023) << 52).to(tl.float64, bitcast=True)
''',
    "_fsum_finish": '''
@triton.jit
def _fsum_finish(special, g, hi, lo):
    # a float sum's row total from its folds (docs/semantics.md, "Sums"; as C's tc_fsum_finish): the
    # carry moves into hi; hi splits into its float64 rounding and an int64 rest that joins lo
    # exactly (|rest| < 2**40); one addition rounds the exact total, two scalings by powers of two
    # place it (exact, or IEEE's overflow); a row with a NaN or an infinity is `special`
    hi += lo >> 30
    lo = lo & 0x3FFFFFFF
    rounded = hi.to(tl.float64)
    total = rounded * 1073741824.0 + ((hi - rounded.to(tl.int64)) * 1073741824 + lo).to(tl.float64)
    total = total * _pow2(g >> 1) * _pow2(g - (g >> 1))
    return tl.where(special != 0, special, total)
''',
    "_mod_f": '''
@triton.jit
def _mod_f(a, b):
    # torch.remainder for float32: fmod, moved into the divisor's sign
    mod = _fmod_f(a, b)
    return tl.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod)
''',
    "_mod_d": '''
@triton.jit
def _mod_d(a, b):
    # _mod_f for float64
    mod = _fmod_d(a, b)
    return tl.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod)
''',
}

# Names the kernel uses as they are; no identifier derived from a spec may take one.
_FIXED = frozenset({KERNEL_NAME, "pid", "tile", "offs", "live", "out_ptr", "n_bad", "first", "IDX", "FULL", "split",
                    "scratch", "row_block", "part", "parts", "settled", "mine", "seen", "last", "open_rows", "ALIGN",
                    "value", "key", *_HELPERS})

WARPS = 4  # Triton's default num_warps: 128 threads per program
MAX_STEPS = 64  # loop steps (tiles) one program of a reduction walks at most: longer rows are split
BYTES_PER_THREAD = 64  # loads in flight per thread per tile that a group aims for (16 registers)
HALF_BYTES_PER_THREAD = 32  # a half-precision tile's bytes a thread: two 128-bit loads (see `per_thread`)
WALK_AGAIN_PER_THREAD = 8  # an element-wise tile of more elements a thread writes its violations by `walk_again`
FLAG_BITS = 31  # check bits in one int32 word of the valid path (the sign bit left clear: `tl.max(...) > 0`)


@dataclass(frozen=True)
class GroupPlan:
    """How one group runs. An element-wise group: `block` elements per program, one tile each. A
    group with a reduction: `block` output rows per program, and each reduction walks its reduced
    axes `step` elements per row a step; `2**split` programs share a row block when a row is longer
    than `MAX_STEPS` steps (`splittable`: no float sum, whose order across programs would vary)."""

    axes: tuple[str, ...]
    reduce: bool
    block: int
    step: int = 0
    reductions: tuple[tuple[str, ...], ...] = ()  # the reduced axes of each reduction
    splittable: bool = False
    load_bytes: int = 0  # bytes a tile's loads read per element (a reduction's: its heaviest loop's)

    @property
    def aligned(self) -> bool:
        """Whether the group takes ALIGN (constexpr): its rows' reduced lengths are multiples of 16
        elements, so rows start 16-element aligned and load 128 bits at a time."""
        return self.reduce and self.block > 1


@dataclass
class Program:
    """Generated source and what the launcher needs: per group its `GroupPlan`, the kernel's
    argument names in order (`args`), the dims whose sizes the kernel divides by (`divisors`: each
    passes a magic number and a shift after the sizes), and the source lines that stream a field
    (`streamed`: line, 1-based -> field; a contiguous field read whole over the loop's axes, in an
    element-wise group's full tiles or a reduction's full steps)."""

    kernel: Kernel
    source: str
    groups: tuple[GroupPlan, ...]
    args: tuple[str, ...]
    divisors: tuple[str, ...]
    streamed: dict[int, str]
    fn: Any = None  # the JIT function, once `load`ed
    path: str | None = None
    positional: frozenset[str] = frozenset()  # `ir.positional_axes`: the axes never walked at size 1
    recorded: frozenset[int] = frozenset()  # checks whose shown value the kernel records (`value_slot`)


def generate(kernel: Kernel) -> Program:
    """The Triton module for `kernel` (raises `Unsupported` for a reduction inside a reduction)."""
    return TritonCodegen(kernel).run()


INDEX_KEY = 2**31 - 1  # (INDEX_KEY - first index) << 32 keys a recorded value's halves: max keeps the first's


def value_slot(kernel: Kernel, batch: int, k: int) -> int:
    """The result buffer's slot of the low half of check k's recorded value (the 64 bits of what it
    shows at its first index). After the `Layout` come one such slot per check, then one for each
    high half: each holds ((INDEX_KEY - index) << 32) | 32 bits of the value at that index, written
    with atomic max, so both halves come from the first index with no lock (indices < 2**31 - 1)."""
    return kernel.layout.length(batch) + k


def recorded_bits(kernel: Kernel, batch: int, values: Any, k: int) -> int | None:
    """The 64 bits of the value check k's kernel recorded at its first index, or None (not recorded)."""
    low = int(values[value_slot(kernel, batch, k)])
    high = int(values[value_slot(kernel, batch, k) + len(kernel.checks)])
    first = BIG - int(values[kernel.layout.first(k)])
    if not low or low >> 32 != INDEX_KEY - first or high >> 32 != INDEX_KEY - first:
        return None
    bits = (high & 0xFFFFFFFF) << 32 | (low & 0xFFFFFFFF)
    return bits - 2**64 if bits >= 2**63 else bits


def layout_length(kernel: Kernel, batch: int) -> int:
    """Slots before the scratch of split reductions: the `Layout`, then the recorded values' halves."""
    return kernel.layout.length(batch) + 2 * len(kernel.checks)


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


def _pow2_floor(n: int) -> int:
    return 1 << max(0, n.bit_length() - 1)


def per_thread(itemsizes: list[int], wide: bool = True) -> int:
    """Elements per thread for a tile whose loads have these item sizes: about BYTES_PER_THREAD
    bytes in flight, at least one 128-bit load of the widest field, and up to one 128-bit load of
    the narrowest (a 1-byte mask wants 16 elements a thread) where the registers allow; a tile of
    half-precision loads up to HALF_BYTES_PER_THREAD (a lone fp16 field: 16 elements, two 128-bit
    loads): at 8, its 2 KB tiles kept 16 KB in flight per SM where the H100 wants about 24 KB
    (bf16 LayoutLMv3 read at 0.63 of copy bandwidth). Its violation path walks the tile again one
    element a thread (`walk_again`), so the wider tile costs the valid path's registers only.
    `wide` False (a field of a few elements a sample): half precision gets 8 elements a thread."""
    if not itemsizes:
        return 8
    want = _pow2_floor(max(1, BYTES_PER_THREAD // sum(itemsizes)))
    cap = max(16 // min(itemsizes), 8)
    if wide and min(itemsizes) == 2:
        cap = max(cap, HALF_BYTES_PER_THREAD // sum(itemsizes))
    return max(16 // max(itemsizes), min(want, cap))


@dataclass
class _Red:
    """The reduction body being written: its axes, flat index, masks and per-axis positions."""

    axes: tuple[str, ...]
    r: str  # flat index over the reduced axes, a [step] vector
    mask: str  # the [rows, step] mask of this step
    jdx: dict[str, str]
    rn: str  # the reduced length
    loads: dict[tuple, str] = field(default_factory=dict)  # (field, index, prev, kind) -> its variable this step


class TritonCodegen:
    """Writes the module: per group a `@triton.jit` function, and the kernel that dispatches program
    ids to them. Its op methods are the Triton ops handler that `ir.walk` calls."""

    def __init__(self, kernel: Kernel):
        self.k = kernel
        self.ns = NameSpace(RESERVED | _FIXED)
        self.helpers: set[str] = set()
        self.names: dict[int, str] = {}
        self.streamed: dict[str, str] = {}  # variable -> field: its first definition streams the field
        self.divisors: dict[str, tuple[str, str]] = {}  # dim -> its magic and shift arguments
        # arguments, in `Kernel.int_args()` order, then the float scalars (as bits)
        self.ptr = {f.name: self.ns.create_name(f"{f.name}_ptr") for f in kernel.fields}
        self.stride_arg = {(f.name, i): self.ns.create_name(f"{f.name}_stride{i}")
                           for f in kernel.fields if not f.contiguous for i in range(len(f.axes))}
        self.size_arg = {a: self.ns.create_name(f"size_{a}") for a in kernel.sizes}
        self.scalar_arg = {s: self.ns.create_name(f"scalar_{s}") for s in (*kernel.int_slots, *kernel.float_slots)}
        # the program groups: element-wise checks fused into a reduction that reads their fields
        # (`program_groups`), each IR group split where its checks read disjoint fields of different widths
        parts = program_groups(kernel)
        self.groups = [g for g, _ in parts]
        self.fused: dict[int, Fused] = {g_i: f for g_i, (_, f) in enumerate(parts) if f is not None}
        self.fusing: Fused | None = None  # the group being written: its fused checks
        self.here = False  # while set, loads are written where they are needed (`walk_again`)
        self.fused_late: tuple | None = None  # (fused, the flag that one failed, the steps) until the group's end
        self.group_args: list[tuple[str, ...]] = []
        for g_i, g in enumerate(self.groups):
            names = ("end", "split", "parts", "scratch") if g.reduce else ("end", "full")
            self.group_args.append(tuple(self.ns.create_name(f"{n}_{g_i}") for n in names))
        # per group (reset by `group`)
        self.used: dict[str, None] = {}  # kernel arguments the group function takes, in first-use order
        self.prelude: dict[str, str] = {}  # name -> line: sizes, strides, host scalars, cast once
        self.n: dict[str, str] = {}  # dim -> its size in IDX
        self.st: dict[tuple[str, int], str | None] = {}  # (field, axis) -> stride in IDX (None: 1)
        self.sc: dict[int, str] = {}  # slot -> host scalar as int64 or float64
        self.buf = IndentedBuffer()
        self.positions = IndentedBuffer()
        self.loads = IndentedBuffer()
        self.loads_full = IndentedBuffer()  # the same loads without a mask, for FULL tiles
        self.reduce_buf = IndentedBuffer()
        self.idx: dict[str, str] = {}  # axis -> index vector of the group's position
        self.g: Group | None = None
        self.plan = GroupPlan((), False, 1)
        self.red: _Red | None = None  # set while a reduction body is written
        self.accs: list[tuple[str, str, str]] = []  # per reduction of the group: (acc, red, kind)
        self.recorded: set[int] = set()  # checks whose value the kernel records
        self.inline = False  # while set, loads and positions are written where they are needed, not hoisted
        self.inline_loads: dict[tuple, str] = {}  # (field, index, prev, kind) -> its variable, while inline
        self.offs, self.live = "offs", "live"  # the positions loads and positions follow, and their mask

    # -- the module -------------------------------------------------------------------------------
    def run(self) -> Program:
        k = self.k
        plans, functions, calls = [], [], []
        for g_i, g in enumerate(self.groups):
            plan, fn, call = self.group(g_i, g)
            plans.append(plan)
            functions.append(fn)
            calls.append(call)
        divisors = [d for d in k.sizes if d in self.divisors]  # in the sizes' order
        magic = [a for d in divisors for a in self.divisors[d]]
        args = [*self.ptr.values(), *self.stride_arg.values(), *self.size_arg.values(), *magic]
        args += [self.scalar_arg[s] for s in k.int_slots] + [self.scalar_arg[s] for s in k.float_slots]
        runtime = [*self.size_arg.values(), *magic, *self.scalar_arg.values()]
        aligns = []
        for g_i, names in enumerate(self.group_args):
            args += names
            runtime += names
            if plans[g_i].aligned:
                aligns.append(self.ns.create_name(f"ALIGN_{g_i}"))
        args += [*aligns, "out_ptr", "IDX"]
        out = IndentedBuffer()
        out.writelines(self.header(plans))
        out.writelines(["import triton", "import triton.language as tl", "", ""])
        for name, text in _HELPERS.items():
            if name in self.helpers:
                out.writelines(text.strip("\n").splitlines())
                out.writelines(["", ""])
        for fn in functions:
            out.splice(fn)
            out.writelines(["", ""])
        # sizes, host scalars and program ranges change from batch to batch: the JIT must not
        # specialise on their values (a new compile per padded length), only pointers on alignment
        keep = ", ".join(str(args.index(a)) for a in runtime)
        out.writeline(f"@triton.jit(do_not_specialize=[{keep}])")
        out.writeline(f"def {KERNEL_NAME}(")
        with out.indent():
            for a in args:
                out.writeline(a + (": tl.constexpr," if a == "IDX" or a in aligns else ","))
        out.writeline("):")
        with out.indent():
            out.writeline("pid = tl.program_id(0)")
            align = iter(aligns)
            for g_i, call in enumerate(calls):
                if plans[g_i].aligned:
                    call = [line.replace("ALIGN", next(align)) for line in call]
                end = self.group_args[g_i][0]
                out.writeline(f"{'if' if g_i == 0 else 'elif'} pid < {end}:")
                with out.indent():
                    start = "pid" if g_i == 0 else f"(pid - {self.group_args[g_i - 1][0]})"
                    out.writeline(f"tile = {start}.to(IDX)")
                    out.writelines(call)
        source = out.getvalue()
        streamed = {}
        for i, line in enumerate(source.splitlines(), 1):
            name = line.strip().split(" = ", 1)[0]
            if name in self.streamed and "tl.load(" in line:
                streamed[i] = self.streamed.pop(name)  # the first definition: the unmasked one
        return Program(k, source, tuple(plans), tuple(args), tuple(divisors), streamed,
                       positional=positional_axes(k), recorded=frozenset(self.recorded))

    def header(self, plans: list[GroupPlan]) -> list[str]:
        """The kernel in words, as `#` lines: every piece of spec text goes through `comment`."""
        k = self.k
        lines = [f"Generated by tritoncheck for spec {comment(k.spec_name)}: every data check in one launch.", ""]
        lines.append("fields (read once per group that uses them):")
        for f in k.fields:
            lay = "contiguous" if f.contiguous else "strided"
            lines.append(f"  {comment(f.name)}: {f.dtype} [{self.shape_words(f.axes)}], {lay}")
        lines.append(f"dims: {_words(k.sizes) or '-'} (batch dim {comment(k.batch_dim)}); "
                     "sizes, strides and host scalars are runtime arguments")
        lines.append("checks:")
        for i, c in enumerate(k.checks):
            lines.append(f"  [{i}] {comment(c.code)}: {comment(describe(c))}  over [{_words(c.axes)}]")
        lines.append("groups (program ranges, in order):")
        for g_i, (g, p) in enumerate(zip(self.groups, plans, strict=True)):
            reads = ", ".join(f"{comment(f)} ({ITEMSIZE[k.field(f).dtype]} B/elem)" for f in g.fields)
            if p.reduce:
                how = (f"{p.block} rows per program, reduced {p.step} elements a step, at most {MAX_STEPS} steps "
                       f"a program ({'longer rows split across programs' if p.splittable else 'a float sum: never split'})")
            else:
                how = f"{p.block} elements per program"
            fused = self.fused.get(g_i)
            if fused is not None:
                how += f", and at each element its reduction walks checks {[c for c, _ in fused.group.checks]} (fused)"
                reads = ", ".join(f"{comment(f)} ({ITEMSIZE[k.field(f).dtype]} B/elem)"
                                  for f in dict.fromkeys((*g.fields, *fused.group.fields)))
            lines.append(f"  {g_i}: [{_words(g.axes)}], {how}, checks {[c for c, _ in g.checks]}; reads {reads or 'nothing'}")
        total = [f"{ITEMSIZE[f.dtype]}*{self.shape_words(f.axes, '*') or '1'}" for f in k.fields]
        lines.append(f"bytes read, at least (each field once): {' + '.join(total) or '0'}; "
                     "a field used by several groups is read by each")
        rows = sum(r >= 0 for r in k.layout.batch_rows)
        lines.append(f"writes: nothing on a valid batch (but, where rows are split across programs, partials and a "
                     f"count per row into scratch slots the row's last part zeroes); on violations int64 counts and "
                     f"first "
                     f"indices into 2*{len(k.checks)} + {comment(k.batch_dim)}*{rows} slots, then the value seen there "
                     f"per check, in two halves keyed by its index (2*{len(k.checks)} slots)")
        return [f"# {line}" if line else "#" for line in lines]

    def shape_words(self, axes: tuple[str, ...], sep: str = ", ") -> str:
        return sep.join(str(self.k.fixed[a]) if a in self.k.fixed else comment(a) for a in axes)

    # -- values cast once at the top of a group function ---------------------------------------------
    def arg(self, name: str) -> str:
        self.used[name] = None
        return name

    def size(self, axis: str) -> str:
        """An axis' size: a literal for a fixed axis, else the dim's size argument cast to IDX."""
        if axis in self.k.fixed:
            return str(self.k.fixed[axis])
        if axis not in self.n:
            if axis not in self.size_arg:
                raise Unsupported(f"no size for axis {axis}")
            self.n[axis] = name = self.ns.create_name(f"n_{axis}")
            self.prelude[name] = f"{name} = tl.cast({self.arg(self.size_arg[axis])}, IDX)  # {comment(axis)}"
        return self.n[axis]

    def numel(self, axes: tuple[str, ...]) -> str:
        return " * ".join(self.size(a) for a in axes) or "1"

    def stride(self, fname: str, pos: int) -> str | None:
        """A field's stride along axis `pos` in IDX; None for a contiguous field's innermost axis (1)."""
        key = (fname, pos)
        if key not in self.st:
            f = self.k.field(fname)
            if not f.contiguous:
                name = self.ns.create_name(f"st_{fname}_{pos}")
                self.prelude[name] = f"{name} = tl.cast({self.arg(self.stride_arg[key])}, IDX)"
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
            arg = self.arg(self.scalar_arg[slot])
            self.sc[slot] = name = self.ns.create_name(f"sc_{slot}")
            if slot in self.k.float_slots:
                value = f"tl.cast(tl.cast({arg}, tl.int64), tl.float64, bitcast=True)"
            else:
                value = f"tl.cast({arg}, tl.int64)"
            self.prelude[name] = f"{name} = {value}  # {comment(to_text(self.k.scalars[slot].expr))}"
        return self.sc[slot]

    # -- one group ----------------------------------------------------------------------------------
    def plan_for(self, g: Group, fused: Fused | None = None) -> GroupPlan:
        """Tile sizes from the bytes the group's loads read per element (`per_thread`); a reduction
        with fused element-wise checks also reads their fields that it does not load itself."""
        if not g.reduce:
            sizes = [ITEMSIZE[self.k.field(op.args[0]).dtype] for op in g.ops if op.name in ("load", "load_prev")]
            # a field of fewer elements a sample than a wide tile holds (multi-label's [B, 7] labels) is a
            # few bytes a sample: it keeps the narrow tile (0: a dim of runtime size, a field of any size)
            sample = math.prod(self.k.fixed.get(a, 0) for a in g.axes if a != self.k.batch_dim)
            wide = not 0 < sample < per_thread(sizes) * 32 * WARPS
            return GroupPlan(g.axes, False, per_thread(sizes, wide) * 32 * WARPS, load_bytes=sum(sizes))
        reductions = [op for op in g.ops if op.name == "reduction"]

        def reads(r: Op) -> list[int]:
            loads = list(_loads(r.args[2]))
            if fused is not None and fused.op == r.id:
                whole = {op.args[0] for op in loads if op.name == "load" and all(i is None for i in op.args[1])}
                loads += [op for op in _loads(fused.group.ops) if op.args[0] not in whole]
            return [ITEMSIZE[self.k.field(op.args[0]).dtype] for op in loads]

        heaviest = max((reads(r) for r in reductions), key=sum, default=[])
        elements = per_thread(heaviest) * 32 * WARPS
        rows, step = (1, elements) if not g.axes else (max(1, elements // 128), 128)
        float_sum = any(r.args[0] == "sum" and r.kind in ("f", "d") for r in reductions)
        return GroupPlan(g.axes, True, rows, step, tuple(tuple(r.args[1]) for r in reductions), not float_sum,
                         sum(heaviest))

    def group(self, g_i: int, g: Group) -> tuple[GroupPlan, IndentedBuffer, list[str]]:
        """The group's function, and the kernel lines that call it."""
        k = self.k
        self.fusing = self.fused.get(g_i)
        self.g, self.plan = g, self.plan_for(g, self.fusing)
        self.used, self.prelude, self.n, self.st, self.sc, self.idx, self.accs = {}, {}, {}, {}, {}, {}, []
        self.buf = IndentedBuffer(level=1)
        self.positions, self.loads, self.reduce_buf = (IndentedBuffer(level=1) for _ in range(3))
        self.loads_full = IndentedBuffer(level=2)
        p = self.plan
        fn_name = self.ns.create_name(f"group_{g_i}")
        w = self.buf.writeline
        if p.reduce:
            w(f"row_block = tile >> split  # 2**split programs share a block of {p.block} rows")
            w("part = tile - (row_block << split)  # this program's part of the reduced axes")
            w(f"offs = row_block * {p.block} + tl.arange(0, {p.block}).to(IDX)  # rows, row-major over the group's axes")
            w(f"live = offs < tl.where(part < parts, {self.numel(g.axes)}, 0)  # a part past the reduced axes' end has no rows")
        else:
            w(f"offs = tile * {p.block} + tl.arange(0, {p.block}).to(IDX)  # elements, row-major over the group's axes")
            w(f"live = tl.full([{p.block}], 1, tl.int1) if FULL else offs < {self.numel(g.axes)}  "
              "# FULL: every element is in range (no mask: 128-bit loads)")
        env: dict[int, Any] = {}
        checks = IndentedBuffer(level=1)
        head, self.buf = self.buf, checks
        walk(g.ops, self, env)
        self.buf = head
        if not p.reduce and self.walks(g):
            # a group that walks its violations again walks its ragged last tile too, one element a
            # thread a step: a masked tile of 16 elements a thread holds a predicate per element
            w("if FULL:  # every element is in range: loads without a mask (128-bit loads where the field allows)")
            with self.buf.indent():
                if self.positions.lines:
                    w("# positions along the group's axes")
                    self.buf.lines.extend(_indented(self.positions.lines))
                if self.loads.lines:
                    w("# loads")
                    self.buf.splice(self.loads_full)  # (written a level deeper, as under `if FULL:`)
                w("# checks")
                self.buf.lines.extend(_indented(checks.lines))
                self.store(g, self.bads(g, env, "live"))
            w("else:  # the ragged last tile, one element a thread a step")
            with self.buf.indent():
                self.walk_again(g, None)
            return self.function(g_i, g, p, fn_name)
        if self.positions.lines:
            w("# positions along the group's axes")
            self.buf.splice(self.positions)
        if self.loads.lines and not p.reduce:
            w("# loads: a full tile unmasked (128-bit loads where the field allows), the ragged last one masked")
            w("if FULL:")
            self.buf.splice(self.loads_full)
            w("else:")
            self.buf.lines.extend(_indented(self.loads.lines))
        elif self.loads.lines:
            w("# loads")
            self.buf.splice(self.loads)
        if self.reduce_buf.lines:
            self.buf.splice(self.reduce_buf)
        settled = "live"
        if p.reduce and p.splittable:
            settled = self.combine()
        w("# checks")
        self.buf.splice(checks)
        self.store(g, self.bads(g, env, settled))
        if self.fused_late is not None:  # after the group's own store: fewer values live across it
            self.fused_store(*self.fused_late)
            self.fused_late = None
        return self.function(g_i, g, p, fn_name)

    def bads(self, g: Group, env: dict[int, Any], settled: str) -> list[str]:
        """Each check's failures where `settled` (in range, and decided by this program)."""
        out = []
        for c, v in g.checks:
            bad = self.ns.create_name(f"bad_{c}")
            out.append(bad)
            self.buf.writeline(f"{bad} = tl.where({settled}, {env[v.id]}, False)  # {comment(describe(self.k.checks[c]))}")
        return out

    def function(self, g_i: int, g: Group, p: GroupPlan, fn_name: str) -> tuple[GroupPlan, IndentedBuffer, list[str]]:
        """The group's function around the body written (`self.buf`), and the kernel lines that call it."""
        k = self.k
        # the function: its arguments, then the values cast once
        fn = IndentedBuffer()
        what = "; ".join(comment(describe(k.checks[c])) for c, _ in g.checks)
        fn.writeline(f"# group {g_i}: over [{_words(g.axes)}]: {what}")
        fn.writeline("@triton.jit")
        own = ["tile", "split", "parts", "scratch"] if p.reduce else ["tile", "FULL: tl.constexpr"]
        own += ["ALIGN: tl.constexpr"] if p.aligned else []
        params = [*self.used, "out_ptr", *own, "IDX: tl.constexpr"]
        fn.writeline(f"def {fn_name}({', '.join(params)}):")
        with fn.indent():
            if self.prelude:
                fn.writeline("# sizes and strides in IDX (int32 unless an index or offset passes 2**31 - 1), host scalars")
                fn.writelines(list(self.prelude.values()))
        fn.splice(self.buf)
        passed = ", ".join([*self.used, "out_ptr"])
        if p.reduce:
            _, split, parts, scratch = self.group_args[g_i]
            call = [f"{fn_name}({passed}, tile, {split}, {parts}, {scratch}, {'ALIGN, ' if p.aligned else ''}IDX)"]
        else:
            full = self.group_args[g_i][1]
            call = [f"if tile < {full}:", f"    {fn_name}({passed}, tile, True, IDX)", "else:",
                    f"    {fn_name}({passed}, tile, False, IDX)"]
        return p, fn, call

    def record(self, g: Group, c: int) -> str | None:
        """Writes, in the violation branch, the int64 bits of the value check c shows at its first
        offending index (`first`), and returns their variable; None where the kernel does not record
        it. So a report shows what the kernel saw even if the batch changes before the host reads it
        (deferred mode). Recorded: a range, value-set, finiteness or monotonic check's element, and a
        rule's subject where it holds no reduction (one that does is left to the decoder, which
        computes it from the batch when the verdict is read).

        The value is computed again at that one position: loads and positions follow it instead of
        `offs` and `live`, with blocks of one element (`inline`: loaded there, volatile, so the
        compiler cannot merge the load with the valid path's, through a scalar pointer: Triton's
        coalescing pass slices the whole kernel for each load through a block of pointers, which
        made compile time grow with checks times kernel size). A block of the tile's values selected
        at `first` kept the tile's registers live into the branch: 64 -> 93 registers and 37% less
        in flight for fp16 ctc in the sm_90 report."""
        subject = self.k.subjects.get(c)
        load = None
        if subject is None:
            name = self.k.checks[c].field
            f = next((f for f in self.k.fields if f.name == name), None)
            whole = None if f is None else (f.name, (None,) * len(f.axes))
            load = next((op for op in g.ops if op.name == "load" and op.args == whole), None)
            if load is None:  # an integer field's finiteness: never violated, its field not even read
                return None
        elif any(op.name in ("reduction", "load_prev") for op in subject.ops):
            return None
        w = self.buf.writeline
        at, live = self.ns.create_name("at"), self.ns.create_name("at_live")
        w(f"{at} = first.to(IDX) + tl.zeros([1], dtype=IDX)  # the first offending position alone")
        w(f"{live} = {at} == {at}")
        outer = (self.plan, self.positions, self.inline, self.idx, self.inline_loads, self.offs, self.live)
        self.plan, self.positions = dataclasses.replace(self.plan, block=1), self.buf
        self.inline, self.idx, self.inline_loads, self.offs, self.live = True, {}, {}, at, live
        try:
            if subject is not None:
                env: dict[int, Any] = {}
                walk(subject.ops, self, env)
                value, kind = env[subject.value.id], subject.value.kind
            else:
                f = self.k.field(self.k.checks[c].field)
                value, kind = self.load(load, *load.args), load.kind
                if f.dtype == "bool":  # torch reads any nonzero byte as 1
                    value, kind = f"({value} != 0)", "b"
        finally:
            self.plan, self.positions, self.inline, self.idx, self.inline_loads, self.offs, self.live = outer
        bits = {"b": f"{value}.to(tl.int64)", "i": value, "d": f"{value}.to(tl.int64, bitcast=True)",
                "f": f"{value}.to(tl.int32, bitcast=True).to(tl.int64)"}[kind]
        w(f"value = tl.sum({bits}, axis=0)  # as int64 bits")
        self.recorded.add(c)
        return "value"

    def value_base(self) -> str:
        """Where the recorded values start in the result buffer: after the `Layout` (`value_slot`)."""
        k = self.k
        rows = sum(r >= 0 for r in k.layout.batch_rows)
        return f"({2 * len(k.checks)} + {rows} * {self.size(k.batch_dim)})" if rows else str(2 * len(k.checks))

    def combine(self) -> str:
        """Settle rows whose reductions were split across programs; returns the mask of rows this
        program settles.

        With `split == 0` a program sees whole rows: every live row is settled, nothing written.
        Otherwise a program settles a row by itself when each of the group's reductions is decided
        by its own part (`any` found a true value, `all` a false one): then the row's total is that
        value, whatever the other parts hold -- the usual case of a valid batch for `any(labels !=
        -100)`. Every part also adds its partials to the row's totals in the scratch slots (atomics;
        a decided part's value decides the total too) and counts itself in; the one that counts
        2**split settles the row from the totals and swaps them and the count back to zero. So the
        kernel leaves the scratch as it found it, zero, on every batch but one with a violation
        (the claims below; the host zeroes that buffer on the stream): no memset after the kernel,
        one launch a check. If several programs settle the same row, `store` lets only the first
        write it (a claim, on the violation path).
        """
        w = self.buf.writeline
        rows = self.numel(self.g.axes)
        w("# combine: a row whose reduced axes are split across programs (split > 0) is settled by the")
        w("# program that decides it alone, else by the last program to add its partials (see the docs)")
        w("settled = live")
        w("if split > 0:")
        with self.buf.indent():
            decided = " & ".join(f"({acc} > 0)" for acc, red, _ in self.accs if red != "sum") if all(
                red != "sum" for _, red, _ in self.accs) else ""
            w(f"settled = live & {decided}" if decided else "settled = live & False  # a sum is never decided by a part")
            w(f"# scratch: [seen: rows][claimed: rows][total of each reduction: rows]")
            for j, (acc, red, _) in enumerate(self.accs):
                fn = "atomic_add" if red == "sum" else "atomic_max"
                w(f"tl.{fn}(out_ptr + scratch + {2 + j} * {rows} + offs, {acc}.to(tl.int64), mask=live)")
            w("tl.debug_barrier()  # every partial is added before this program counts itself in")
            w("seen = tl.atomic_add(out_ptr + scratch + offs, 1, mask=live)")
            w("last = live & (seen == parts - 1)")
            w("if tl.max(last.to(tl.int32), axis=0) > 0:  # the row's last part: its totals, and the slots zeroed")
            with self.buf.indent():
                for j, (acc, _, kind) in enumerate(self.accs):
                    w(f"{acc} = tl.where(last, tl.atomic_xchg(out_ptr + scratch + {2 + j} * {rows} + offs, 0, "
                      f"mask=last).to({kind}), {acc})")
                w("tl.atomic_xchg(out_ptr + scratch + offs, 0, mask=last)")
            w("settled = settled | last")
        return "settled"

    def words(self, bads: list[str], name: str = "flags") -> list[str]:
        """The checks' flags as int32 words, `FLAG_BITS` checks a word."""
        words = []
        for start in range(0, len(bads), FLAG_BITS):
            words.append(word := self.ns.create_name(name))
            self.buf.writeline(f"{word} = " + " | ".join(f"({bad}.to(tl.int32) << {bit})" if bit else f"{bad}.to(tl.int32)"
                                                         for bit, bad in enumerate(bads[start:start + FLAG_BITS])))
        return words

    def walks(self, g: Group) -> bool:
        """Whether an element-wise group writes its violations by `walk_again`: a tile of more than
        WALK_AGAIN_PER_THREAD half-precision elements a thread (a lone fp16 or bf16 field). A 1-byte
        mask's 16 elements a thread keep the plain path: walked again, ptxas aimed BERT's and
        RoBERTa's kernels at fewer registers and spilled 8 bytes of their other paths (triton 3.9)."""
        return self.plan.block > WALK_AGAIN_PER_THREAD * 32 * WARPS and self.plan.load_bytes == 2

    def walk_again(self, g: Group, words: list[str] | None) -> None:
        """The violation path of an element-wise group that `walks`: where any check failed
        (`words`), the tile is loaded and checked again, `32 * WARPS` elements (one a thread) a
        step, and each step holding a failure is written by `store`; with `words` None (the
        group's ragged last tile) every step is walked, its checks with it. Its blocks then cost a
        few registers, not a tile's: the kernel's registers are its heaviest path's and set how
        many programs an SM holds on the valid path too (16 fp16 elements a thread took nll's
        kernel from 59 registers to 102 through this path alone under triton 3.9, LayoutLMv3's to
        92 under 3.6)."""
        p, w = self.plan, self.buf.writeline
        sub = 32 * WARPS
        j, offs, live = (self.ns.create_name(n) for n in ("j", "offs_j", "live_j"))
        if words is not None:
            w(f"if tl.max({' | '.join(words)}, axis=0) > 0:  # a check failed in this tile: walk it again to write it")
        with self.buf.indent(0 if words is None else 1):
            w(f"for {j} in range(0, {p.block}, {sub}):")
            with self.buf.indent():
                w(f"{offs} = tile * {p.block} + {j} + tl.arange(0, {sub}).to(IDX)")
                w(f"{live} = {offs} < {self.numel(g.axes)}")
                outer = (self.plan, self.offs, self.live, self.idx, self.positions, self.here)
                self.plan, self.offs, self.live = dataclasses.replace(p, block=sub), offs, live
                self.idx, self.positions, self.here = {}, self.buf, True
                try:
                    env: dict[int, Any] = {}
                    walk(g.ops, self, env)
                    bads = [f"tl.where({live}, {env[v.id]}, False)" for _, v in g.checks]
                    self.store(g, None, flat=offs, words=self.words(bads))
                finally:
                    self.plan, self.offs, self.live, self.idx, self.positions, self.here = outer

    def store(self, g: Group, bads: list[str] | None, flat: str = "offs", words: list[str] | None = None,
              rows: bool = False) -> None:
        """The violation path. The valid path keeps one int32 word of check bits per element
        (`FLAG_BITS` checks a word) rather than a bool block per check: the checks' values die at
        the word, so registers stay those of one word whatever the number of checks (triton 3.6
        kept every check's block live into this branch: 148-159 registers for fp16 bce).
        `words` (and `flat`, the flat index they are at): fused checks computed again on the
        violation path (`fused_store`), whose sample index is computed there; `rows`: blocks of
        [rows, step], reduced over both axes."""
        w = self.buf.writeline
        k = self.k
        again = words is not None
        axis = "" if rows else ", axis=0"
        if words is None:
            words = self.words(bads)
            w("# store: one reduction on a valid batch; only a program that found a violation writes")
            if not self.plan.reduce and self.walks(g):
                self.walk_again(g, words)
                return
        w(f"if tl.max({' | '.join(words)}{axis}) > 0:")
        with self.buf.indent():
            if self.plan.reduce and self.plan.splittable and not again:
                w("if split > 0:  # a row settled by several programs is written by the first to claim it")
                with self.buf.indent():
                    w(f"mine = tl.atomic_xchg(out_ptr + scratch + {self.numel(g.axes)} + offs, 1, "
                      f"mask=({' | '.join(words)}) != 0) == 0")
                    for word in words:
                        w(f"{word} = tl.where(mine, {word}, 0)")
            b = k.batch_dim
            idx = {} if again else self.idx
            if any(k.layout.sample_base(c)[1] >= 0 for c, _ in g.checks) and b not in idx:
                self.unravel(self.buf, flat, g.axes, idx)  # the sample index, on this path only
            for i, (c, _) in enumerate(g.checks):
                hit = self.ns.create_name(f"hit_{c}")
                word, bit = words[i // FLAG_BITS], i % FLAG_BITS
                w(f"{hit} = (({word} >> {bit}) & 1) != 0  # {comment(describe(k.checks[c]))}")
                w(f"n_bad = tl.sum({hit}.to(tl.int32){axis})")
                w("if n_bad > 0:")
                with self.buf.indent():
                    base, row = k.layout.sample_base(c)
                    if row >= 0:
                        w(f"tl.atomic_add(out_ptr + ({base} + {row} * {self.size(b)}) + {idx[b]}, "
                          f"{hit}.to(tl.int64), mask={hit})")
                    else:
                        w(f"tl.atomic_add(out_ptr + {k.layout.count(c)}, n_bad.to(tl.int64))")
                    w(f"first = tl.min(tl.where({hit}, {flat}.to(tl.int64), {BIG}){axis})")
                    w(f"tl.atomic_max(out_ptr + {k.layout.first(c)}, {BIG} - first)  # {BIG} = 2**62: max keeps the first")
                    if self.record(g, c) is None:
                        continue
                    # each half of the value's bits keyed by its index (`value_slot`): max keeps the first's
                    w(f"if IDX == tl.int32:  # (indices < 2**31 - 1; with int64 ones the decoder reads the batch)")
                    w(f"    key = ({INDEX_KEY} - first) << 32")
                    w(f"    tl.atomic_max(out_ptr + {self.value_base()} + {c}, key | (value & 4294967295))")
                    high = f"out_ptr + {self.value_base()} + {len(k.checks) + c}"
                    w(f"    tl.atomic_max({high}, key | ((value >> 32) & 4294967295))")

    def unravel(self, buf: IndentedBuffer, flat: str, axes: tuple[str, ...], into: dict[str, str]) -> None:
        """Row-major flat index -> one index vector per axis (a single axis is the flat index itself)."""
        rest = flat
        for pos in range(len(axes) - 1, -1, -1):
            a = axes[pos]
            if pos == 0:
                into[a] = rest
            else:
                into[a] = name = self.ns.create_name(f"i_{a}" if into is self.idx else f"j_{a}")
                nxt = self.ns.create_name("rest")
                if a in self.k.fixed:  # a constant divisor: the compiler multiplies and shifts
                    buf.writeline(f"{name} = {rest} % {self.size(a)}")
                    buf.writeline(f"{nxt} = {rest} // {self.size(a)}")
                else:
                    if a not in self.divisors:
                        self.divisors[a] = (self.ns.create_name(f"magic_{a}"), self.ns.create_name(f"shift_{a}"))
                    magic, shift = (self.arg(x) for x in self.divisors[a])
                    self.helpers.add("_divmod")
                    buf.writeline(f"{nxt}, {name} = _divmod({rest}, {self.size(a)}, {magic}, {shift}, IDX)")
                rest = nxt

    # -- the ops handler ------------------------------------------------------------------------------
    def let(self, op: Op, expr: str, note: str = "", buf: IndentedBuffer | None = None) -> str:
        name = self.names[op.id] = self.ns.create_name(f"v{op.id}")
        (buf or self.buf).writeline(f"{name} = {expr}" + (f"  # {note}" if note else ""))
        return name

    def position(self, axis: str) -> str:
        """The index vector along `axis`, shaped for the current scope (computed once, where first needed)."""
        red = self.red
        if red is not None and axis in red.axes:
            if not red.jdx:
                self.unravel(self.buf, red.r, red.axes, red.jdx)
            return f"{red.jdx[axis]}[None, :]"
        if axis in self.g.axes:
            if not self.idx:
                self.unravel(self.positions, self.offs, self.g.axes, self.idx)
            return self.idx[axis] if red is None else f"{self.idx[axis]}[:, None]"
        raise Unsupported(f"axis {axis} is not in the iteration space")

    def offset(self, f: FieldSig, index: tuple, prev: str | None) -> tuple[str, bool]:
        """The load's element offsets, and whether they stream the field (one flat index over it).

        A contiguous field whose followed axes sit together and are exactly the loop's axes (the
        group's, then the reduced ones in a reduction) is read at the flat index times the stride
        of its last followed axis, plus its fixed selections: no per-axis index, no division.
        """
        red = self.red
        followed = [pos for pos, sel in enumerate(index) if sel is None]
        axes = tuple(f.axes[pos] for pos in followed)
        together = followed == list(range(followed[0], followed[-1] + 1)) if followed else False
        fixed = [self.selected(f, pos, sel) for pos, sel in enumerate(index) if sel is not None]
        if f.contiguous and together and prev is None:
            st = self.stride(f.name, followed[-1])
            scale = "" if st is None else f" * {st}"
            flat = None
            if red is None and axes == self.g.axes:
                flat = self.offs
            elif red is not None and axes == red.axes:
                flat = f"{red.r}[None, :]"
            elif red is not None and axes == self.g.axes + red.axes and not set(self.g.axes) & set(red.axes):
                flat = f"({self.offs}[:, None] * {red.rn} + {red.r}[None, :])"
            if flat is not None:
                text = " + ".join([f"{flat}{scale}" if scale else flat, *fixed])
                if red is not None and axes == red.axes and self.plan.block > 1:  # the same along every row
                    text = f"tl.zeros({self.shape()}, dtype=IDX) + {text}"
                return text, not fixed
        terms, spans = [], set()
        for pos, (axis, sel) in enumerate(zip(f.axes, index, strict=True)):
            if sel is None:
                ix = self.position(axis)
                spans.add("inner" if red is not None and axis in red.axes else "outer")
                if axis == prev:  # one position back, clamped at 0
                    ix = f"tl.maximum({ix} - 1, 0)"
                st = self.stride(f.name, pos)
                terms.append(ix if st is None else f"{ix} * {st}")
        terms += fixed or ["0"] * (not terms)
        # a load must be as wide as its mask: broadcast where the offsets do not span the scope
        if (red is not None and spans != {"outer", "inner"}) or (red is None and not spans):
            return f"tl.zeros({self.shape()}, dtype=IDX) + {' + '.join(terms)}", False
        return " + ".join(terms), False

    def selected(self, f: FieldSig, pos: int, sel: int) -> str:
        ix = str(sel) if sel >= 0 else f"({self.size(f.axes[pos])} - {-sel})"
        st = self.stride(f.name, pos)
        return ix if st is None else f"{ix} * {st}"

    def load(self, op: Op, fname: str, index: tuple, prev: str | None = None) -> str:
        f = self.k.field(fname)
        key = (fname, index, prev, op.kind)
        if self.red is not None and not self.inline and key in self.red.loads:  # loaded at this step already
            self.names[op.id] = self.red.loads[key]
            return self.red.loads[key]
        offset, streamed = self.offset(f, index, prev)
        mask = self.live if self.red is None else self.red.mask
        if self.inline:  # (see `record`): one element, through a scalar pointer, broadcast back to a block
            raw = f"tl.broadcast_to(tl.load({self.arg(self.ptr[fname])} + tl.sum({offset}, axis=0), volatile=True), [1])"
        else:
            raw = f"tl.load({self.arg(self.ptr[fname])} + {offset}, mask={mask}, other=0)"
        if f.dtype == "bfloat16":
            # bfloat16 is the top half of a float32: widen by bits, exact for denormals everywhere
            # (Triton's CPU interpreter flushes them to zero in .to(tl.float32))
            value = f"({raw}.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)"
        elif _NATIVE.get(f.dtype) == op.kind:
            value = raw
        else:
            value = f"{raw}.to({_TL[op.kind]})"
        if self.inline:  # a value recorded on the violation path: loaded there, once per recorded value
            key = (fname, index, prev, op.kind)
            if key not in self.inline_loads:
                self.inline_loads[key] = self.let(op, value, comment(fname))
            return self.inline_loads[key]
        if self.here:  # walked again on the violation path (`walk_again`): loaded where it is needed
            return self.let(op, value, comment(fname))
        # a load at the group's top level depends only on the position: hoisted into the loads section
        name = self.let(op, value, comment(fname), self.loads if self.red is None else None)
        if self.red is None and not self.plan.reduce:  # the same load in a FULL tile: no mask
            self.loads_full.writeline(f"{name} = {value.replace(f', mask={mask}, other=0)', ')')}  # {comment(fname)}")
        if streamed and (self.red is None or self.red.mask.startswith("tl.broadcast_to")):
            self.streamed[name] = fname  # a FULL tile's load, or a reduction's full step
        if self.red is not None:
            self.red.loads[key] = name
        return name

    def load_prev(self, op: Op, fname: str, axis: str) -> str:
        return self.load(op, fname, (None,) * len(self.k.field(fname).axes), prev=axis)

    def shape(self) -> str:
        """The current scope's block shape: every value in the kernel is a block of it. (Triton's CPU
        interpreter types a 0-d comparison by its operands, so a 0-d bool broadcast against a block
        became an integer or float array that `&` and `|` refuse.)"""
        return f"[{self.plan.block}]" if self.red is None else f"[{self.plan.block}, {self.plan.step}]"

    def const(self, op: Op, value: Any) -> str:
        return self.let(op, literal(value, op.kind, self.shape()))

    def index(self, op: Op, axis: str) -> str:
        return self.let(op, f"tl.broadcast_to({self.position(axis)}, {self.shape()}).to(tl.int64)",
                        f"arange({comment(axis)})")

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
        if op.kind in ("f", "d"):  # Triton 3.6 spells -x as 0 - x, +0.0 for x = +0.0; LLVM makes the product an fneg
            return self.let(op, f"{x} * -1.0")
        return self.let(op, f"-{x}")  # int64 wraps

    def abs(self, op: Op, x: str) -> str:
        return self.let(op, f"tl.abs({x})")  # abs(INT64_MIN) == INT64_MIN

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
        name += "_" + op.kind
        self.helpers.add(name)
        if name in ("_mod_f", "_floordiv_f", "_mod_d", "_floordiv_d"):
            self.helpers.add("_fmod_" + op.kind)
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
        """A loop over this program's part of the reduced axes, `step` elements per row a step: the
        full steps unmasked along the row (128-bit loads), then the ragged last one masked. Values
        gather in a [rows, step] accumulator, reduced across threads once, after the loop. A float
        sum walks its rows twice (`float_sum`)."""
        if self.red is not None:
            raise Unsupported("a reduction inside a reduction")
        p = self.plan
        outer, self.buf = self.buf, self.reduce_buf
        w = self.buf.writeline
        acc, acc2, rn, lo, hi, full = (self.ns.create_name(n) for n in (
            f"acc{op.id}", f"acc{op.id}_2", "rn", "lo", "hi", "full"))
        w(f"# reduce: {red} over [{_words(axes)}]")
        w(f"{rn} = {self.numel(axes)}")
        if p.aligned:  # the same value, written so that the compiler sees 16 | rn, so rows start aligned
            w(f"{rn} = ({rn} >> 4) << 4 if ALIGN else {rn}  # ALIGN: the host found every reduced length a multiple of 16")
        chunk = self.ns.create_name("chunk")
        # this program's part: [lo, hi), lo a multiple of the step (so 128-bit loads stay aligned)
        w(f"{chunk} = ((({rn} + {p.step - 1}) // {p.step} + (1 << split) - 1) >> split) * {p.step}")
        w(f"{lo} = part * {chunk}")
        w(f"{hi} = tl.minimum({lo} + {chunk}, {rn})")
        w(f"{full} = {lo} + tl.maximum({hi} - {lo}, 0) // {p.step} * {p.step}  # the end of the full steps")
        steps = (axes, rn, lo, hi, full)
        if red == "sum" and op.kind == "d":
            self.float_sum(acc, steps, body)
            self.accs.append((acc, red, _TL["d"]))
            self.buf = outer
            return acc
        # sum: in the value's kind (int64, wrapping); any/all: the max of (value, resp. not value) seen so far
        kind = _TL[op.kind] if red == "sum" else "tl.int32"
        w(f"{acc2} = tl.zeros([{p.block}, {p.step}], dtype={kind})")
        fused = self.fusing if self.fusing is not None and self.fusing.op == op.id else None
        # an any/all keeps 0/1 per element: the fused checks' flags ride in its accumulator's higher
        # bits (`packed`), so they cost no register of their own (up to 30 checks, the sign bit clear)
        packed = fused is not None and red != "sum" and len(fused.group.checks) < FLAG_BITS
        seen = acc2 if packed else self.ns.create_name("fused_bad")
        if fused is not None and not packed:
            w(f"{seen} = tl.zeros([{p.block}, {p.step}], dtype=tl.int32)  # the fused element-wise checks' flags, or-ed")
        if fused is not None:
            body = self.fused_body(body, fused, seen, 1 if packed else 0)

        def add(value: str, ragged: str | None) -> None:
            hit = value if red == "sum" else f"{value}.to(tl.int32)" if red == "any" else f"({value} == 0).to(tl.int32)"
            if ragged is not None:
                hit = f"tl.where({ragged}, {hit}, 0)"
            if packed:
                w(f"{acc2} = {acc2} | {hit}")
            else:
                w(f"{acc2} += {hit}" if red == "sum" else f"{acc2} = tl.maximum({acc2}, {hit})")

        self.steps(steps, body, add)
        w(f"{acc} = {'tl.sum' if red == 'sum' else 'tl.max'}({f'{acc2} & 1' if packed else acc2}, axis=1)")
        if fused is not None:
            failed = self.ns.create_name("fused_failed")
            w(f"{failed} = tl.max({f'({seen} >> 1)' if packed else seen})  # any fused element-wise check failed here")
            self.fused_late = (fused, failed, steps)  # its violation path comes last in the group (`fused_store`)
        self.accs.append((acc, red, kind))
        self.buf = outer
        if red == "sum":
            return acc
        return self.let(op, f"{acc} {'>' if red == 'any' else '=='} 0")

    def fused_words(self, fused: Fused) -> list[str]:
        """The fused element-wise checks at this step's elements, as flag words (`FLAG_BITS` checks
        each, masked by the step's mask); loads the reduction made here are reused (`_Red.loads`)."""
        env: dict[int, Any] = {}
        walk(fused.group.ops, self, env)
        return self.words([f"tl.where({self.red.mask}, {env[v.id]}, False)" for _, v in fused.group.checks], "fused_flags")

    def fused_body(self, body: Callable[[], str], fused: Fused, seen: str, shift: int) -> Callable[[], str]:
        """The reduction's body, then the fused checks on the same elements, or-ed into `seen` (shifted
        left by `shift`): on a valid batch they cost no write and no reduction across threads in the loop."""
        def both() -> str:
            value = body()
            self.buf.writeline(f"# fused: {_words(describe(self.k.checks[c]) for c, _ in fused.group.checks)}")
            flags = " | ".join(self.fused_words(fused))
            self.buf.writeline(f"{seen} = {seen} | " + (f"(({flags}) << {shift})" if shift else flags))
            return value
        return both

    def fused_store(self, fused: Fused, seen: str, steps: tuple) -> None:
        """The violation path of the fused checks: where any element failed, this program walks its
        rows again, one element a thread a step (`rows` x 128 / rows), every step masked (few
        registers: the kernel's registers are its heaviest path's, and they set how many programs
        an SM holds on the valid path too), and at each step holding a failure counts and locates as
        an element-wise group would, at the flat index over the element-wise group's axes."""
        axes, rn, lo, hi, _ = steps
        p, w = self.plan, self.buf.writeline
        step = max(1, 32 * WARPS // p.block)
        r0, r, mask, flat = (self.ns.create_name(n) for n in ("r0", "r", "live2", "flat"))
        w(f"if {seen} > 0:  # a fused element-wise check failed here: walk these elements again to write it")
        with self.buf.indent():
            w(f"for {r0} in range({lo}, {hi}, {step}):")
            with self.buf.indent():
                w(f"{r} = {r0} + tl.arange(0, {step}).to(IDX)")
                w(f"{mask} = live[:, None] & ({r} < {hi})[None, :]")
                outer = (self.g, self.plan)
                self.plan = dataclasses.replace(p, step=step)
                self.red = _Red(axes, r, mask, {}, rn)
                try:
                    words = self.fused_words(fused)
                finally:
                    self.red = None
                w(f"{flat} = offs[:, None] * {rn} + {r}[None, :]  # the flat index over [{_words(fused.group.axes)}]")
                self.g, self.plan = fused.group, dataclasses.replace(self.plan, reduce=False)
                try:
                    self.store(fused.group, None, flat=flat, words=words, rows=True)
                finally:
                    self.g, self.plan = outer

    def steps(self, steps: tuple, body: Callable[[], str], add: Callable[[str, str | None], None]) -> None:
        """The loop over the reduced axes: `add(value, ragged)` writes what each step gathers
        (`ragged`: the mask of the ragged last step, None on a full one)."""
        axes, rn, lo, hi, full = steps
        p, w = self.plan, self.buf.writeline
        r0 = self.ns.create_name("r0")
        rows_live = f"tl.broadcast_to(live[:, None], [{p.block}, {p.step}])"
        for first in (True, False):
            r = self.ns.create_name("r")
            if first:
                w(f"for {r0} in range({lo}, {full}, {p.step}):")
                mask = rows_live
            else:
                w(f"if {full} < {hi}:  # the ragged last step")
                mask = self.ns.create_name("live2")
            with self.buf.indent():
                w(f"{r} = {r0 if first else full} + tl.arange(0, {p.step}).to(IDX)")
                if not first:
                    w(f"{mask} = live[:, None] & ({r} < {hi})[None, :]")
                self.red = _Red(axes, r, mask, {}, rn)
                try:
                    value = body()
                finally:
                    self.red = None
                add(value, None if first else mask)

    def float_sum(self, acc: str, steps: tuple, body: Callable[[], str]) -> None:
        """A float sum, one value in any order (docs/semantics.md; the torch backend's `float_sum`):
        pass 1 finds each row's largest finite biased exponent E and sums its non-finite values
        (NaN, an infinity or 0 in any order); pass 2 adds trunc(x / 2**g), g = max(E - 1082, -1074),
        as two 30-bit int64 folds (exact); the total is rounded to float64 once."""
        p, w = self.plan, self.buf.writeline
        shape = f"[{p.block}, {p.step}]"
        ea, sa, ha, la = (self.ns.create_name(n) for n in ("exp_2", "special_2", "hi_2", "lo_2"))
        e, special, g, s1, s2 = (self.ns.create_name(n) for n in ("exp", "special", "g", "s1", "s2"))
        w(f"{ea} = tl.zeros({shape}, dtype=tl.int64)  # pass 1: the largest finite biased exponent")
        w(f"{sa} = tl.zeros({shape}, dtype=tl.float64)  # and the non-finite values")

        def scan(value: str, ragged: str | None) -> None:
            ev = self.ns.create_name("ev")
            w(f"{ev} = (({value}.to(tl.int64, bitcast=True) >> 52) & 0x7FF)  # 0x7FF: NaN or an infinity")
            keep = f"({ev} != 0x7FF)" if ragged is None else f"({ragged} & ({ev} != 0x7FF))"
            w(f"{ea} = tl.maximum({ea}, tl.where({keep}, {ev}, 0))")
            odd = f"({ev} == 0x7FF)" if ragged is None else f"({ragged} & ({ev} == 0x7FF))"
            w(f"{sa} += tl.where({odd}, {value}, 0.0)")

        self.steps(steps, body, scan)
        w(f"{e} = tl.max({ea}, axis=1)")
        w(f"{special} = tl.sum({sa}, axis=1)  # NaN, an infinity, or 0")
        w(f"{g} = tl.maximum({e} - 1082, -1074)  # the grid 2**g: 2**-60 times the least power of two above the row")
        w(f"{s1} = _pow2(-{g} >> 1)[:, None]  # 2**-g = s1 * s2, each exact")
        w(f"{s2} = _pow2(-{g} - (-{g} >> 1))[:, None]")
        w(f"{ha} = tl.zeros({shape}, dtype=tl.int64)  # pass 2: the folds of t = trunc(x / 2**g), |t| < 2**60")
        w(f"{la} = tl.zeros({shape}, dtype=tl.int64)")

        def fold(value: str, ragged: str | None) -> None:
            t = self.ns.create_name("t")
            finite = f"(tl.abs({value}) <= {_FLOAT_MAX['d']})"
            keep = finite if ragged is None else f"({ragged} & {finite})"
            w(f"{t} = (tl.where({keep}, {value}, 0.0) * {s1} * {s2}).to(tl.int64)  # truncates towards zero")
            w(f"{ha} += {t} >> 30")
            w(f"{la} += {t} & 0x3FFFFFFF")

        self.steps(steps, body, fold)
        self.helpers.update(("_pow2", "_fsum_finish"))
        w(f"{acc} = _fsum_finish({special}, {g}, tl.sum({ha}, axis=1), tl.sum({la}, axis=1))")


@dataclass(frozen=True)
class Fused:
    """Element-wise checks a reduction group runs at each element that its reduction `op` walks
    (`program_groups`): `group` is their part of the element-wise group over the same elements."""

    group: Group
    op: int  # the id of the reduction whose loop walks those elements


def program_groups(kernel: Kernel) -> list[tuple[Group, Fused | None]]:
    """The groups the kernel runs, in order, each with the element-wise checks fused into it.

    An element-wise check reading a field that a reduction of another group loads whole, over the
    same elements (the group's axes then the reduced ones: `any(attention_mask != 0, dim=L)` over
    [B] and `attention_mask in [0, 1]` over [B, L]), runs inside that reduction's loop on the same
    loaded values, so the field is read once per kernel, not once per group. Checks joined by a
    common field move together. Only a splittable reduction takes them (no float sum, whose
    group is never split: the element-wise checks would lose their parallelism), only for a field
    of 4 bytes or more an element (a bool mask read twice is a few percent of a batch's bytes,
    and fused it made ptxas spill), and not for a per-sample field (few bytes). Then each group
    is split as `split_group` says, the fused checks going with the part that holds the reduction.
    """
    hosts: list[tuple[int, Op, set[str]]] = []  # (IR group, reduction, fields it loads whole)
    for g_i, g in enumerate(kernel.groups):
        needed = {op.id for _, v in g.checks for op in _needed(g.ops, v)}  # (a reduction a rule folded away runs nowhere)
        outer = [op for op in g.ops if op.name == "reduction" and op.id in needed]
        if not g.reduce or any(r.args[0] == "sum" and r.kind in ("f", "d") for r in reductions(g.ops)):
            continue
        for r in outer:
            whole = {op.args[0] for op in _loads(r.args[2])
                     if op.name == "load" and all(i is None for i in op.args[1])}
            hosts.append((g_i, r, whole))
    moved: dict[int, tuple[int, list[tuple[int, Val]]]] = {}  # reduction id -> (element-wise IR group, checks it takes)
    kept: dict[int, list[tuple[int, Val]]] = {}  # element-wise IR group -> checks it keeps
    hosting: dict[int, int] = {}  # IR group -> its one reduction that takes checks (a part runs one Fused)
    for e_i, e in enumerate(kernel.groups):
        if e.reduce or not e.elementwise or e.axes == (kernel.batch_dim,):  # a per-sample field's bytes are few
            continue
        kept[e_i] = []
        for names, checks in _components(e):
            # a field of 1 or 2 bytes an element is left read twice: a few percent of the bytes, and its
            # reduction's tile (16 elements a thread) has no registers to spare (ptxas spilled bool masks)
            wide = {f for f in names if ITEMSIZE[kernel.field(f).dtype] >= 4}
            host = next(((g_i, r) for g_i, r, whole in hosts
                         if kernel.groups[g_i].axes + tuple(r.args[1]) == e.axes and whole & wide
                         and hosting.get(g_i, r.id) == r.id and moved.get(r.id, (e_i,))[0] == e_i), None)
            if host is None:
                kept[e_i].extend(checks)
                continue
            hosting[host[0]] = host[1].id
            moved.setdefault(host[1].id, (e_i, []))[1].extend(checks)
    out: list[tuple[Group, Fused | None]] = []
    for g_i, g in enumerate(kernel.groups):
        if g_i in kept:
            if len(kept[g_i]) < len(g.checks):
                g = _subgroup(g, kept[g_i]) if kept[g_i] else None
            if g is None:
                continue
        for part in split_group(kernel, g):
            fused = None
            for op in part.ops:
                if op.name == "reduction" and op.id in moved:
                    e_i, checks = moved[op.id]
                    fused = Fused(_subgroup(kernel.groups[e_i], checks), op.id)
            out.append((part, fused))
    return out


def _components(g: Group) -> list[tuple[set[str], list[tuple[int, Val]]]]:
    """The group's checks joined where they read a common field: (fields, checks) per component."""
    fields = {c: {op.args[0] for op in _loads(_needed(g.ops, v))} for c, v in g.checks}
    parts: list[tuple[set[str], list[tuple[int, Val]]]] = []
    for c, v in g.checks:
        joined = [p for p in parts if p[0] & fields[c]]
        merged = (set(fields[c]), [])
        for p in joined:
            merged[0].update(p[0])
            merged[1].extend(p[1])
            parts.remove(p)
        merged[1].append((c, v))
        parts.append(merged)
    return parts


def _subgroup(g: Group, checks: list[tuple[int, Val]]) -> Group:
    """`g` with only these checks (in g's order) and the ops they need."""
    order = [c for c, _ in g.checks]
    checks = sorted(checks, key=lambda cv: order.index(cv[0]))
    keep = {op.id for _, v in checks for op in _needed(g.ops, v)}
    ops = tuple(op for op in g.ops if op.id in keep)
    used = tuple(dict.fromkeys(op.args[0] for op in _loads(ops)))
    return Group(g.axes, g.reduce, ops, tuple(checks), g.elementwise, used)


def split_group(kernel: Kernel, g: Group) -> list[Group]:
    """`g` as the groups the kernel runs: its checks joined where they read a common field (so
    each field is still read once), then joined where their narrowest fields are as wide. A tile
    then holds as many elements of a 1-byte mask as 128-bit loads need, without holding as many
    of the int64 fields checked beside it (which would cost registers)."""
    by_width: dict[int, list[tuple[int, Val]]] = {}
    for names, checks in _components(g):  # connected by shared fields
        width = min((ITEMSIZE[kernel.field(f).dtype] for f in names), default=0)
        by_width.setdefault(width, []).extend(checks)
    return [_subgroup(g, checks) for checks in by_width.values()]


def _needed(ops: tuple[Op, ...], value: Val) -> list[Op]:
    """The ops (of this scope) that `value` depends on, itself included."""
    by_id = {op.id: op for op in ops}
    out, todo = {}, [value.id]
    while todo:
        op = by_id[todo.pop()]
        if op.id not in out:
            out[op.id] = op
            if op.name != "reduction":  # a reduction's body is its own scope
                todo.extend(a.id for a in op.args if isinstance(a, Val))
    return list(out.values())


def _loads(ops):
    for op in ops:
        if op.name in ("load", "load_prev"):
            yield op
        elif op.name == "reduction":
            yield from _loads(op.args[2])


def _indented(lines: list[str]) -> list[str]:
    """Lines moved a level deeper."""
    return ["    " + line if line else line for line in lines]


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


__all__ = ["INDEX_KEY", "KERNEL_NAME", "MAX_STEPS", "GroupPlan", "Program", "TritonCodegen", "cache_dir", "generate",
           "layout_length", "literal", "load", "per_thread", "recorded_bits", "value_slot"]
