"""C source for a `Kernel`: one function that runs every data check in one call.

The generated function is

    int64_t tc_check(const int64_t *ia, const double *fa, int64_t *out)

with `ia` the int64 arguments in `Kernel.int_args()` order (field pointers, strides of
non-contiguous fields, dim sizes, int host scalars), `fa` the float host scalars, and `out` the
zeroed result buffer of `Layout`. It returns nonzero when some check failed.

Each group runs twice at most. The *fast pass* loops over the group's axes and only ORs the
groups' failure predicates together: no stores, no branches, so the compiler vectorizes it (an
element-wise group over contiguous fields, or over fields stored alike in another axis order,
walks one flat index over their memory). Only when that finds something does the *locate pass*
walk the group again (row-major, or in the fields' memory order), counting per check (per sample
for checks over the batch axis) and keeping the least offending row-major index. A valid batch
costs its reads.

Safety: identifiers come from a `NameSpace`, numbers are formatted here (ints as `INT64_C`,
floats as exact hex literals, inf and NaN as macros), and spec text enters only through
`comment()` in `//` comments (which holds no newline, backslash or `?`, so no trigraph or line
splice can end a comment early). C semantics are pinned to torch's: float32 math in `float`
(compile with -ffp-contract=off, never -ffast-math), int64 arithmetic wrapping through
`uint64_t`, torch's floor division and remainder, and float16/bfloat16 widened by bit
manipulation (no compiler fp16 support needed), or, compared with a constant or tested for
finiteness, tested on their bits (`key_interval`). any/all reductions stop once decided.

The generator needs no torch: fields are keyed by their dtype's name (`ir.FieldSig`).
"""

from __future__ import annotations

import contextlib
import functools
import math
from typing import Any

from tritoncheck.expr import to_text
from tritoncheck.plan.lower import describe
from tritoncheck.codegen.source import RESERVED, IndentedBuffer, NameSpace, comment
from tritoncheck.kernel.ir import BIG, Group, Kernel, Op, Val, invariant_ops, walk

FUNCTION = "tc_check"
STRIP = 64  # an any/all over a row tests whether it is decided once per this many elements
_CTYPE = {"b": "int", "i": "int64_t", "f": "float", "d": "double"}
_STORAGE = {
    "bool": "uint8_t", "uint8": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
    "int64": "int64_t", "float16": "uint16_t", "bfloat16": "uint16_t", "float32": "float", "float64": "double",
}
# Names the function uses as they are; no identifier derived from a spec may take one.
_FIXED = frozenset({FUNCTION, "ia", "fa", "out", "found", "dirty", "flat", "tc_idx", "TC_BIG", "TC_STRIP", "uintptr_t",
                    "intptr_t", "INT64_C", "INFINITY", "NAN", "fmodf", "floorf", "fabsf", "fmod", "floor", "fabs",
                    "copysign", "copysignf", "restrict", "tc_pow2", "tc_fsum_exp", "tc_fsum_odd", "tc_fsum_grid",
                    "tc_fsum_finish"})

_HELPERS: dict[str, str] = {
    "tc_f16": """
// float16 bits -> float, exactly (c10's fp16_ieee_to_fp32_value: normals via an exponent rebias
// and one multiply, subnormals via a magic-number subtraction; inf and NaN pass through)
static inline float tc_f16(uint16_t h) {
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & UINT32_C(0x80000000);
    const uint32_t two_w = w + w;
    uint32_t bits = (two_w >> 4) + (UINT32_C(0xE0) << 23);
    float normal, denormal, out;
    memcpy(&normal, &bits, 4);
    normal *= 0x1.0p-112f;
    bits = (two_w >> 17) | (UINT32_C(126) << 23);
    memcpy(&denormal, &bits, 4);
    denormal -= 0.5f;
    uint32_t nb, db;
    memcpy(&nb, &normal, 4);
    memcpy(&db, &denormal, 4);
    bits = sign | (two_w < (UINT32_C(1) << 27) ? db : nb);
    memcpy(&out, &bits, 4);
    return out;
}""",
    "tc_bf16": """
// bfloat16 bits -> float: the high half of a float32
static inline float tc_bf16(uint16_t h) {
    const uint32_t bits = (uint32_t)h << 16;
    float out;
    memcpy(&out, &bits, 4);
    return out;
}""",
    "tc_key16": """
// float16/bfloat16 bits -> an int16 ordered as the values are (-0 just below +0; NaNs past +-inf), kept in
// 16-bit lanes: a negative value's magnitude bits flipped
static inline int16_t tc_key16(uint16_t h) {
    const int16_t k = (int16_t)h;
    return (int16_t)(k ^ ((k >> 15) & 0x7FFF));
}""",
    "tc_add_i": "static inline int64_t tc_add_i(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }",
    "tc_sub_i": "static inline int64_t tc_sub_i(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }",
    "tc_mul_i": "static inline int64_t tc_mul_i(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }",
    "tc_neg_i": "static inline int64_t tc_neg_i(int64_t a) { return (int64_t)(UINT64_C(0) - (uint64_t)a); }",
    "tc_abs_i": "static inline int64_t tc_abs_i(int64_t a) { return a < 0 ? tc_neg_i(a) : a; }",
    "tc_floordiv_i": """
// torch's floor division for int64; a // 0 == 0, and INT64_MIN // -1 wraps (C's / would trap)
static inline int64_t tc_floordiv_i(int64_t a, int64_t b) {
    if (b == 0) return 0;
    if (b == -1) return (int64_t)(UINT64_C(0) - (uint64_t)a);
    const int64_t q = a / b, r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}""",
    "tc_mod_i": """
// torch.remainder for int64: the result takes the divisor's sign; a % 0 == a
static inline int64_t tc_mod_i(int64_t a, int64_t b) {
    if (b == 0) return a;
    if (b == -1) return 0;
    const int64_t r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}""",
}
for _t, _s in (("f", "f"), ("d", "")):
    _T = _CTYPE[_t]
    _HELPERS[f"tc_floordiv_{_t}"] = f"""
// torch's floor division for {_T} (ATen's vectorized div_floor_floating)
static inline {_T} tc_floordiv_{_t}({_T} a, {_T} b) {{
    const {_T} basic = a / b;
    if (b == 0) return basic;
    const {_T} mod = fmod{_s}(a, b);
    const {_T} num = (fabs{_s}(basic) == INFINITY && fabs{_s}(a) != INFINITY) ? a : a - mod;
    {_T} div = num / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
    if (div == 0) return copysign{_s}(0, basic);
    {_T} floored = floor{_s}(div);
    if (div - floored > 0.5{_s}) floored += 1;
    return floored;
}}"""
    _HELPERS[f"tc_mod_{_t}"] = f"""
// torch.remainder for {_T}: fmod, moved into the divisor's sign
static inline {_T} tc_mod_{_t}({_T} a, {_T} b) {{
    const {_T} mod = fmod{_s}(a, b);
    return (mod != 0 && ((b < 0) != (mod < 0))) ? mod + b : mod;
}}"""
_HELPERS["tc_fsum"] = """
// float sums (docs/semantics.md, "Sums"), as tritoncheck/kernel/sums.py computes them: the largest biased
// exponent E among a row's finite values fixes a grid 2**g; each value cut towards zero to a multiple
// of it is an integer t, |t| < 2**60, whose two 30-bit folds add up in int64 (exact, so in any
// order); the total is rounded to double once.
static inline double tc_pow2(int64_t k) {  // 2**k, exactly, for k in [-1022, 1023]
    const uint64_t bits = (uint64_t)(k + 1023) << 52;
    double d;
    memcpy(&d, &bits, 8);
    return d;
}
static inline int64_t tc_fsum_exp(double x) {  // pass 1: x's biased exponent, 0 for NaN and an infinity
    uint64_t bits;
    memcpy(&bits, &x, 8);
    const int64_t e = (int64_t)((bits >> 52) & 0x7FF);
    return e == 0x7FF ? 0 : e;
}
static inline int64_t tc_fsum_odd(double x) {  // pass 1: 1 for +inf, 2 for -inf, 3 for NaN, else 0 (ORed)
    uint64_t bits;
    memcpy(&bits, &x, 8);
    const int64_t odd = -(int64_t)(((bits >> 52) & 0x7FF) == 0x7FF);  // all ones for NaN and an infinity
    return odd & ((1 + (int64_t)(bits >> 63)) | 3 * (int64_t)((bits << 12) != 0));  // (no branch: vectorizes)
}
static inline int64_t tc_fsum_grid(int64_t e) {  // g: 2**-60 times the least power of two above the row
    return e - 1082 < -1074 ? -1074 : e - 1082;
}
static inline double tc_fsum_finish(int64_t nonfinite, int64_t g, int64_t hi, int64_t lo) {
    if (nonfinite) return nonfinite == 1 ? (double)INFINITY : nonfinite == 2 ? -(double)INFINITY : (double)NAN;
    hi += lo >> 30;  // the carry; lo in [0, 2**30)
    lo &= 0x3FFFFFFF;
    const double rounded = (double)hi;
    const int64_t rest = (hi - (int64_t)rounded) * INT64_C(1073741824) + lo;  // |rest| < 2**40: exact
    const double total = rounded * 0x1p30 + (double)rest;  // the one rounding
    return total * tc_pow2(g >> 1) * tc_pow2(g - (g >> 1));  // exact, or IEEE's overflow
}"""


def literal(value: Any, kind: str) -> str:
    """A constant as exact C source: INT64_C for ints, hex floats, macros for inf and NaN."""
    if kind == "b":
        return "1" if value else "0"
    if kind == "i":
        v = int(value)
        if v == -(2**63):
            return "(-INT64_C(9223372036854775807) - 1)"
        return f"INT64_C({v})" if v >= 0 else f"(-INT64_C({-v}))"
    v = float(value)
    suffix = "f" if kind == "f" else ""
    cast = "" if kind == "f" else "(double)"
    if math.isnan(v):
        return f"({cast}NAN)"
    if math.isinf(v):
        return f"({cast}INFINITY)" if v > 0 else f"(-{cast}INFINITY)"
    return f"{v.hex()}{suffix}" if math.copysign(1.0, v) > 0 else f"(-{(-v).hex()}{suffix})"  # keeps -0.0


_ON_FLOATS = ("eq", "ne", "lt", "le", "gt", "ge", "isfinite", "not_", "truth")


@functools.lru_cache(maxsize=1024)
def key_interval(dtype: str, name: str, pattern: tuple) -> tuple[int, int, bool] | None:
    """(lo, hi, inside): op `name` over a float16/bfloat16 value (None in `pattern`) and float32 constants (the
    rest) is true exactly where `lo <= tc_key16(bits) <= hi` (inside) or outside that, or None where no
    interval says it. Found by evaluating the op as the kernel does (the value widened to float32) on all
    65536 bit patterns, so the interval test is exact by construction."""
    if name not in _ON_FLOATS or any(v is not None and not isinstance(v, float) for v in pattern):
        return None
    import numpy as np

    bits = np.arange(-(2**15), 2**15, dtype=np.int32)
    if dtype == "bfloat16":  # the top half of a float32
        values = (bits.astype(np.uint32) << 16).view(np.float32)
    else:
        values = bits.astype(np.int16).view(np.float16).astype(np.float32)
    args = [values if v is None else np.float32(v) for v in pattern]
    with np.errstate(invalid="ignore"):
        holds = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
                 "ge": np.greater_equal, "isfinite": np.isfinite, "not_": lambda x: x == 0,
                 "truth": lambda x: x != 0}[name](*args)
    keys = np.where(bits < 0, bits ^ 0x7FFF, bits)  # tc_key16
    for inside in (True, False):
        chosen = keys[holds if inside else ~holds]
        if chosen.size == 0:
            return 1, 0, inside
        lo, hi = int(chosen.min()), int(chosen.max())
        # an interval when every key in [lo, hi] is chosen, and none outside
        if chosen.size == hi - lo + 1 and not ((keys >= lo) & (keys <= hi) & (holds != inside)).any():
            return lo, hi, inside
    return None


class CSource:
    """Generated C source and the kernel it implements."""

    def __init__(self, kernel: Kernel, text: str, index_bits: int):
        self.kernel, self.text, self.index_bits = kernel, text, index_bits


def generate(kernel: Kernel, index_bits: int = 32) -> CSource:
    """C source for `kernel`; loop indices are int32 unless `index_bits` is 64 (sizes past 2**31 - 1)."""
    return CSource(kernel, CCodegen(kernel, index_bits).run(), index_bits)


class CCodegen:
    """Writes the function; its op methods are the C ops handler that `ir.walk` calls."""

    def __init__(self, kernel: Kernel, index_bits: int):
        self.k, self.bits = kernel, index_bits
        self.ns = NameSpace(RESERVED | _FIXED | set(_HELPERS))
        self.helpers: set[str] = set()
        self.buf = IndentedBuffer()
        self.names: dict[int, str] = {}
        self.bind: dict[str, str] = {}  # axis -> loop variable in scope
        self.flat: str | None = None  # the flat index, in an element-wise pass over contiguous fields
        self.row_major = True  # whether the loops being emitted walk the group's axes row-major
        self.halves: dict[int, tuple[str, str]] = {}  # a float16/bfloat16 load's op id -> (its bits, dtype)
        self.consts: dict[int, Any] = {}  # a const op's id -> its value
        self.pre: dict[int, Any] = {}  # the current group's invariant values (`invariant_ops`), by op id
        self.rest: tuple[Op, ...] = ()  # the current group's other ops, walked at each position
        self.ptr = {f.name: self.ns.create_name(f"p_{f.name}") for f in kernel.fields}
        self.stride = {f.name: tuple(self.ns.create_name(f"s_{f.name}_{i}") for i in range(len(f.axes)))
                       for f in kernel.fields}
        axes = dict.fromkeys([*kernel.sizes, *kernel.fixed])
        self.size = {a: self.ns.create_name(f"n_{a}") for a in axes}
        self.sc = {s: self.ns.create_name(f"sc_{s}") for s in range(len(kernel.scalars))}

    # -- the function ---------------------------------------------------------------------------
    def run(self) -> str:
        body = self.buf
        with body.indent():
            self.arguments()
            body.writeline("int64_t found = 0;")
            for g_i, g in enumerate(self.k.groups):
                self.group(g_i, g)
            body.writeline("return found;")
        out = IndentedBuffer()
        out.writelines(self.header())
        out.writelines(["#include <stdint.h>", "#include <string.h>", "#include <math.h>", ""])
        out.writeline(f"typedef {'int64_t' if self.bits == 64 else 'int32_t'} tc_idx;  // loop indices")
        out.writeline(f"#define TC_BIG INT64_C({BIG})  // a first-index slot holds TC_BIG - index")
        out.writeline(f"#define TC_STRIP {STRIP}  // elements an any/all reads between tests of whether it is decided")
        for name, text in _HELPERS.items():
            if name in self.helpers:
                out.writelines(text.strip("\n").splitlines())
        out.writeline("")
        out.writeline(f"int64_t {FUNCTION}(const int64_t *restrict ia, const double *restrict fa, "
                      "int64_t *restrict out)")
        out.writeline("{")
        out.splice(body)
        out.writeline("}")
        return out.getvalue()

    def header(self) -> list[str]:
        k = self.k
        lines = [f"// Generated by tritoncheck for spec {comment(k.spec_name)}: every data check in one call.", "//"]
        lines.append("// fields (read once per group that uses them):")
        for f in k.fields:
            lay = "contiguous" if f.contiguous else "strided"
            lines.append(f"//   {comment(f.name)}: {f.dtype} over [{comment(', '.join(f.axes))}], {lay}")
        lines.append("// checks:")
        for i, c in enumerate(k.checks):
            lines.append(f"//   [{i}] {comment(c.code)}: {comment(describe(c))}  over [{comment(', '.join(c.axes))}]")
        lines.append(f"// out: int64[{2 * len(k.checks)} + {sum(r >= 0 for r in k.layout.batch_rows)} * batch], "
                     "written only where a check fails")
        return lines

    def arguments(self) -> None:
        w = self.buf.writeline
        w("// arguments")
        k = self.k
        pos = 0
        for f in k.fields:
            ctype = _STORAGE[f.dtype]
            w(f"const {ctype} *restrict {self.ptr[f.name]} = (const {ctype} *)(uintptr_t)ia[{pos}];")
            pos += 1
        for f in k.fields:
            if not f.contiguous:
                for s in self.stride[f.name]:
                    w(f"const int64_t {s} = ia[{pos}];")
                    pos += 1
        for a in k.sizes:
            w(f"const tc_idx {self.size[a]} = (tc_idx)ia[{pos}];  // {comment(a)}")
            pos += 1
        for a, n in k.fixed.items():
            w(f"const tc_idx {self.size[a]} = {n};  // {comment(a)}")
        for s in k.int_slots:
            w(f"const int64_t {self.sc[s]} = ia[{pos}];  // {comment(to_text(k.scalars[s].expr))}")
            pos += 1
        for j, s in enumerate(k.float_slots):
            w(f"const double {self.sc[s]} = fa[{j}];  // {comment(to_text(k.scalars[s].expr))}")
        for f in k.fields:
            if f.contiguous:  # row-major strides from the sizes, so the innermost one is the constant 1
                strides = self.stride[f.name]
                for i in range(len(f.axes) - 1, -1, -1):
                    value = "1" if i == len(f.axes) - 1 else f"{strides[i + 1]} * (int64_t){self.size[f.axes[i + 1]]}"
                    w(f"const int64_t {strides[i]} = {value};")

    # -- one group ------------------------------------------------------------------------------
    def group(self, g_i: int, g: Group) -> None:
        w = self.buf.writeline
        k = self.k
        what = "; ".join(comment(describe(k.checks[c])) for c, _ in g.checks)
        w(f"// group {g_i}: over [{comment(', '.join(g.axes))}]: {what}")
        w("{")
        with self.buf.indent():
            flat_ok, loops = self.walk_order(g)
            once = invariant_ops(k, g)
            self.pre = {}
            if any(op.name == "reduction" for op in once):
                w("// once: reductions the same at every position (x <= sum(x) reads 2B elements, not B*B)")
            walk(once, self, self.pre)
            self.rest = tuple(op for op in g.ops if op.id not in self.pre)
            w("// fast pass: does any element fail? (no stores: vectorizable)")
            w("int dirty = 0;")
            if flat_ok:
                numel = " * ".join(f"(int64_t){self.size[a]}" for a in g.axes)
                i = self.ns.create_name("i")
                w(f"for (tc_idx {i} = 0; {i} < (tc_idx)({numel}); {i}++) {{")
                self.flat = i
                with self.buf.indent():
                    self.body(g, locate=False)
                self.flat = None
                w("}")
            else:
                self.nest(g, loops, locate=False)
            w("if (dirty) {")
            with self.buf.indent():
                w("// locate pass: count per check (per sample) and keep the first offending flat index")
                w("found = 1;")
                self.firsts = {c: self.ns.create_name(f"first_{c}") for c, _ in g.checks}
                for c, _ in g.checks:
                    w(f"int64_t {self.firsts[c]} = -1;")
                w("int64_t flat = 0;")
                self.nest(g, loops, locate=True)
                for c, _ in g.checks:
                    w(f"if ({self.firsts[c]} >= 0) out[{k.layout.first(c)}] = TC_BIG - {self.firsts[c]};")
            w("}")
        w("}")

    def walk_order(self, g: Group) -> tuple[bool, tuple[str, ...]]:
        """(flat, loops): whether the fast pass may walk the group's fields with one flat index over their memory,
        and the order of its loops. An element-wise group over contiguous fields, or over fields stored alike as
        one dense block in another order (channels_last: `FieldSig.order`), walks them as stored; the locate
        pass then nests its loops in that memory order too, and computes each failure's row-major index."""
        if not (g.elementwise and g.axes):
            return False, g.axes
        fields = [self.k.field(f) for f in g.fields]
        if all(f.contiguous for f in fields):
            return True, g.axes
        orders = {f.order for f in fields}
        if len(orders) == 1 and None not in orders:  # (an element-wise group's fields span exactly its axes)
            return True, tuple(g.axes[i] for i in orders.pop())
        return False, g.axes

    def nest(self, g: Group, loops: tuple[str, ...], locate: bool) -> None:
        """Loops over the group's axes in the order `loops` (row-major unless the fields are stored in another)
        around the group body."""
        w = self.buf.writeline
        self.row_major = loops == g.axes
        for a in loops:
            i = self.ns.create_name(f"i_{a}")
            w(f"for (tc_idx {i} = 0; {i} < {self.size[a]}; {i}++) {{  // {comment(a)}")
            self.buf.level += 1
            self.bind[a] = i
        self.body(g, locate)
        if locate and self.row_major:
            w("flat++;")
        for a in reversed(loops):
            self.buf.level -= 1
            w("}")
            del self.bind[a]

    def body(self, g: Group, locate: bool) -> None:
        env: dict[int, Any] = dict(self.pre)  # the group's invariant values, computed before its loops
        walk(self.rest, self, env)
        w = self.buf.writeline
        if not locate:
            w("dirty |= " + " | ".join(env[v.id] for _, v in g.checks) + ";")
            return
        for c, v in g.checks:
            w(f"if ({env[v.id]}) {{")
            with self.buf.indent():
                base, row = self.k.layout.sample_base(c)
                if row >= 0:
                    b = self.k.batch_dim
                    w(f"out[{base} + {row} * (int64_t){self.size[b]} + {self.bind[b]}] += 1;")
                else:
                    w(f"out[{self.k.layout.count(c)}] += 1;")
                if self.row_major:
                    w(f"if ({self.firsts[c]} < 0) {self.firsts[c]} = flat;")
                else:  # walked in memory order: the row-major index of this failure, the least one kept
                    w(f"flat = {self.row_major_index(g)};")
                    w(f"if ({self.firsts[c]} < 0 || flat < {self.firsts[c]}) {self.firsts[c]} = flat;")
            w("}")

    def row_major_index(self, g: Group) -> str:
        """The current position's flat index, row-major over the group's axes."""
        index = f"(int64_t){self.bind[g.axes[0]]}"
        for a in g.axes[1:]:
            index = f"({index} * (int64_t){self.size[a]} + (int64_t){self.bind[a]})"
        return index

    # -- the ops handler ------------------------------------------------------------------------
    def let(self, op: Op, expr: str) -> str:
        if op.id not in self.names:
            self.names[op.id] = self.ns.create_name(f"v{op.id}")
        name = self.names[op.id]
        self.buf.writeline(f"const {_CTYPE[op.kind]} {name} = {expr};")
        return name

    def helper(self, name: str) -> str:
        self.helpers.add(name)
        return name

    def load(self, op: Op, field: str, index: tuple) -> str:
        f = self.k.field(field)
        if self.flat is not None:
            offset = self.flat
        else:
            terms = []
            for axis, sel, stride in zip(f.axes, index, self.stride[field], strict=True):
                if sel is None:
                    terms.append(f"(int64_t){self.bind[axis]} * {stride}")
                elif sel >= 0:
                    terms.append(f"INT64_C({sel}) * {stride}")
                else:
                    terms.append(f"((int64_t){self.size[axis]} - INT64_C({-sel})) * {stride}")
            offset = " + ".join(terms) or "0"
        x = f"{self.ptr[field]}[{offset}]"
        if f.dtype in ("float16", "bfloat16"):
            # the bits, which a comparison with a constant or a finiteness test reads directly (`on_bits`); the
            # widened float only where another op uses it (else the compiler drops it)
            bits = self.ns.create_name(f"h{op.id}")
            self.buf.writeline(f"const uint16_t {bits} = {x};")
            self.halves[op.id] = (bits, f.dtype)
            x = f"{self.helper('tc_f16' if f.dtype == 'float16' else 'tc_bf16')}({bits})"
        elif op.kind == "i" and f.dtype != "int64":
            x = f"(int64_t){x}"  # bool storage is read as its byte, as torch's summary views it
        return self.let(op, x)

    def load_prev(self, op: Op, field: str, axis: str) -> str:
        # the element before along `axis` (itself at position 0); a group reading it has no flat walk
        pos = self.bind[axis]
        self.bind[axis] = f"({pos} > 0 ? {pos} - 1 : 0)"
        try:
            return self.load(op, field, (None,) * len(self.k.field(field).axes))
        finally:
            self.bind[axis] = pos

    def const(self, op: Op, value: Any) -> str:
        self.consts[op.id] = value
        return literal(value, op.kind)

    def on_bits(self, op: Op) -> str | None:
        """`op` (a comparison of a float16/bfloat16 field with a constant, or a finiteness or truth test of one)
        as an interval test on the field's ordered bits (`tc_key16`), or None where it is not one. Integer
        compares of 16-bit lanes vectorize twice as wide as the widened floats, and need no widening.
        `key_interval` derives the interval from the op's result on every one of the 65536 bit patterns, so
        the test gives what the widened comparison gives, NaN included."""
        if not all(isinstance(a, Val) for a in op.args):
            return None
        half = [a for a in op.args if a.id in self.halves]
        if len(half) != 1 or any(a.id not in self.halves and a.id not in self.consts for a in op.args):
            return None
        bits, dtype = self.halves[half[0].id]
        pattern = tuple(None if a.id in self.halves else self.consts[a.id] for a in op.args)
        found = key_interval(dtype, op.name, pattern)
        if found is None:
            return None
        lo, hi, inside = found
        if lo > hi:  # no pattern passes (or, outside, every one does)
            return self.let(op, "0" if inside else "1")
        key = f"{self.helper('tc_key16')}({bits})"
        test = f"((uint16_t)({key} - ({lo})) {'<=' if inside else '>'} {hi - lo})"
        return self.let(op, test)

    def index(self, op: Op, axis: str) -> str:
        return self.let(op, f"(int64_t){self.bind[axis]}")

    def scalar(self, op: Op, slot: int) -> str:
        if op.id in self.pre:  # computed before the group's loops
            return self.pre[op.id]
        name = self.sc[slot]
        if op.kind == "b":
            return self.let(op, f"({name} != 0)")
        return self.let(op, f"({_CTYPE[op.kind]}){name}")

    def cast(self, op: Op, x: str) -> str:
        return self.let(op, f"({_CTYPE[op.kind]}){x}")

    def _int_or(self, op: Op, name: str, args: tuple[str, ...], float_expr: str) -> str:
        if op.kind == "i":
            return self.let(op, f"{self.helper(name)}({', '.join(args)})")
        return self.let(op, float_expr)

    def neg(self, op: Op, x: str) -> str:
        return self._int_or(op, "tc_neg_i", (x,), f"-{x}")

    def abs(self, op: Op, x: str) -> str:
        if op.kind == "i":
            self.helper("tc_neg_i")  # tc_abs_i calls it
        return self._int_or(op, "tc_abs_i", (x,), f"fabs{'f' if op.kind == 'f' else ''}({x})")

    def not_(self, op: Op, x: str) -> str:
        return self.on_bits(op) or self.let(op, f"({x} == 0)")

    def truth(self, op: Op, x: str) -> str:
        return self.on_bits(op) or self.let(op, f"({x} != 0)")

    def isfinite(self, op: Op, x: str) -> str:
        return self.on_bits(op) or self.let(op, f"(isfinite({x}) != 0)")

    def add(self, op: Op, a: str, b: str) -> str:
        return self._int_or(op, "tc_add_i", (a, b), f"{a} + {b}")

    def sub(self, op: Op, a: str, b: str) -> str:
        return self._int_or(op, "tc_sub_i", (a, b), f"{a} - {b}")

    def mul(self, op: Op, a: str, b: str) -> str:
        return self._int_or(op, "tc_mul_i", (a, b), f"{a} * {b}")

    def floordiv(self, op: Op, a: str, b: str) -> str:
        return self.let(op, f"{self.helper(f'tc_floordiv_{op.kind}')}({a}, {b})")

    def mod(self, op: Op, a: str, b: str) -> str:
        return self.let(op, f"{self.helper(f'tc_mod_{op.kind}')}({a}, {b})")

    def _compare(self, op: Op, sym: str, a: str, b: str) -> str:
        return self.on_bits(op) or self.let(op, f"({a} {sym} {b})")

    def eq(self, op: Op, a: str, b: str) -> str:
        return self._compare(op, "==", a, b)

    def ne(self, op: Op, a: str, b: str) -> str:
        return self._compare(op, "!=", a, b)

    def lt(self, op: Op, a: str, b: str) -> str:
        return self._compare(op, "<", a, b)

    def le(self, op: Op, a: str, b: str) -> str:
        return self._compare(op, "<=", a, b)

    def gt(self, op: Op, a: str, b: str) -> str:
        return self._compare(op, ">", a, b)

    def ge(self, op: Op, a: str, b: str) -> str:
        return self._compare(op, ">=", a, b)

    def and_(self, op: Op, a: str, b: str) -> str:
        return self.let(op, f"({a} & {b})")

    def or_(self, op: Op, a: str, b: str) -> str:
        return self.let(op, f"({a} | {b})")

    def reduction(self, op: Op, red: str, axes: tuple[str, ...], body) -> str:
        if op.id in self.pre:  # computed before the group's loops (`invariant_ops`)
            return self.pre[op.id]
        if red == "sum" and op.kind == "d":
            return self.float_sum(op, axes, body)
        w = self.buf.writeline
        if op.id not in self.names:
            self.names[op.id] = self.ns.create_name(f"v{op.id}")
        acc = self.names[op.id]
        init = {"sum": literal(0, op.kind), "any": "0", "all": "1"}[red]
        w(f"{_CTYPE[op.kind]} {acc} = {init};  // {red} over [{comment(', '.join(axes))}]")
        # any/all stop at the first element that decides them: every loop tests the accumulator, the innermost
        # once per strip of TC_STRIP elements (so that the strip itself stays a vectorizable loop)
        with self._loops(axes, {"sum": "", "any": f" && !{acc}", "all": f" && {acc}"}[red]):
            value = body()
            if red == "sum":  # (int64, wrapping)
                w(f"{acc} = {self.helper('tc_add_i')}({acc}, {value});")
            else:
                w(f"{acc} {'|' if red == 'any' else '&'}= {value};")
        return acc

    def float_sum(self, op: Op, axes: tuple[str, ...], body) -> str:
        """A float sum, one value in any order (`tc_fsum`): the row walked twice, for its largest
        finite exponent and its non-finite values, then (all finite) for its folds on its grid."""
        w = self.buf.writeline
        if op.id not in self.names:
            self.names[op.id] = self.ns.create_name(f"v{op.id}")
        acc = self.names[op.id]
        nf, e, g, s1, s2, hi, lo = (self.ns.create_name(n) for n in ("odd", "e", "g", "s1", "s2", "hi", "lo"))
        self.helper("tc_fsum")
        w(f"double {acc};  // sum over [{comment(', '.join(axes))}]: one value in any order")
        w("{")
        with self.buf.indent():
            w(f"int64_t {nf} = 0, {e} = 0;  // pass 1: non-finite values seen (tc_fsum_odd); the largest exponent")
            w(f"int64_t {hi} = 0, {lo} = 0;  // pass 2: the folds")
            with self._loops(axes):
                v = body()
                ev = self.ns.create_name("ev")
                w(f"{nf} |= tc_fsum_odd({v});")
                w(f"const int64_t {ev} = tc_fsum_exp({v});")
                w(f"{e} = {ev} > {e} ? {ev} : {e};")
            w(f"const int64_t {g} = tc_fsum_grid({e});")
            w(f"if (!{nf}) {{")
            with self.buf.indent():
                w(f"const double {s1} = tc_pow2((-{g}) >> 1), {s2} = tc_pow2(-{g} - ((-{g}) >> 1));  // 2**-g")
                with self._loops(axes):
                    v = body()
                    t = self.ns.create_name("t")
                    w(f"const int64_t {t} = (int64_t)({v} * {s1} * {s2});  // trunc(x / 2**g), |t| < 2**60")
                    w(f"{hi} += {t} >> 30;")
                    w(f"{lo} += {t} & 0x3FFFFFFF;")
            w("}")
            w(f"{acc} = tc_fsum_finish({nf}, {g}, {hi}, {lo});")
        w("}")
        return acc

    @contextlib.contextmanager
    def _loops(self, axes: tuple[str, ...], going: str = ""):
        """Loops over `axes` around what the block writes, their positions bound (no flat index);
        `going` (` && cond`) ends them early, the innermost tested once per strip."""
        w = self.buf.writeline
        saved = {a: self.bind.get(a) for a in axes}
        flat, self.flat = self.flat, None
        for n, a in enumerate(axes):
            j = self.ns.create_name(f"j_{a}")
            if going and n == len(axes) - 1:
                s, e = self.ns.create_name(f"s_{a}"), self.ns.create_name(f"e_{a}")
                end = f"({self.size[a]} - {s} < TC_STRIP ? {self.size[a]} : {s} + TC_STRIP)"  # (never past the size)
                w(f"for (tc_idx {s} = 0; {s} < {self.size[a]}{going}; {s} = {end}) {{")
                self.buf.level += 1
                w(f"const tc_idx {e} = {end};")
                w(f"for (tc_idx {j} = {s}; {j} < {e}; {j}++) {{")
                self.buf.level += 1
            else:
                w(f"for (tc_idx {j} = 0; {j} < {self.size[a]}{going}; {j}++) {{")
                self.buf.level += 1
            self.bind[a] = j
        yield
        for _ in axes:
            self.buf.level -= 1
            w("}")
        if going and axes:
            self.buf.level -= 1
            w("}")
        for a, prev in saved.items():
            if prev is None:
                del self.bind[a]
            else:
                self.bind[a] = prev
        self.flat = flat


__all__ = ["CCodegen", "CSource", "FUNCTION", "generate", "literal"]
