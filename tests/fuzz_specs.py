"""Hypothesis strategies for the differential fuzz (tests/test_differential_fuzz.py).

`cases()` draws a random spec *as YAML text* and a batch for it. The spec is drawn as a plain
mapping from a small model of what it declares (fields, their ranks and dims, parameters), so
that most texts load and most batches fit its shapes, while names, numbers and rules come from
pools of hostile choices: names the kernel generator uses (`out`, `i`, `tl`, `ptr`), unicode,
dims named like fields, -0.0, huge, fractional and non-finite bounds, rules from the whole
expression grammar of `tritoncheck/expr.py`. Batches mix odd dtypes, strides (transposed,
stepped, expanded, offset), sizes (0, 1, past a block) and values (NaN, +-inf, -0.0,
denormals, integer extremes, and at and one step around each bound and rule constant: a bound
or a rule's part written over parameters and dims, `num_labels - 1` or `L * 0.5`, evaluated with
the drawn sizes); a share of them is drawn inside the spec's bounds, so that the path where
nothing is wrong runs too.

Tensor values come from a `torch.Generator` seeded by a drawn integer, so an example stays small
for Hypothesis however large its tensors are. `Case.__repr__` prints the YAML text and the batch
as Python code (exact storage, sizes, strides and offset), ready to paste into a reproducer.
"""

from __future__ import annotations

import ast
import math
import operator
import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
import yaml
from hypothesis import assume
from hypothesis import strategies as st

DTYPE_NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
TORCH_DTYPES = {n: getattr(torch, n) for n in DTYPE_NAMES}
GROUPS = {"int": ["uint8", "int8", "int16", "int32", "int64"], "float": ["float16", "bfloat16", "float32", "float64"]}

# Names that collide with what a code generator writes (arguments, locals, modules, builtins),
# with the expression grammar's own functions, or with dims; and names that are not identifiers.
HOSTILE_NAMES = [
    "out", "i", "tl", "size", "ptr", "stride0", "pid", "mask", "offs", "x0", "n", "triton", "torch", "math",
    "BLOCK", "result", "first", "count", "program_id", "kernel", "self", "sum", "any", "all", "abs", "arange",
    "isfinite", "min", "max", "int", "float", "len", "print", "x_ptr", "stride_0", "numel", "grid", "acc",
    "idx", "_x", "where", "values", "dim", "B", "L", "N", "tritoncheck_kernel", "BIG", "n_elements", "k0",
]
PLAIN_NAMES = ["input_ids", "labels", "x", "y", "attention_mask", "bbox", "lengths", "pixel_values"]
NOT_IDENTIFIERS = ["ñ", "λx", "变量", "a-b", "1x", "None", "True", "class", "x y", "", "x\n", "a.b"]
DIM_NAMES = ["B", "L", "C", "N", "S", "T", "i", "tl", "size", "ptr", "stride0", "out", "pid", "D0", "K", "n"]
PARAM_NAMES = ["V", "vocab_size", "num_labels", "P", "max_len", "tl_size", "stride1", "offs"]

INF = math.inf
NAN = math.nan
# Bound, sentinel and set numbers: exact, fractional, signed zero, huge, tiny, non-finite, past int64.
NUMBERS = [
    0, 1, -1, 2, 3, 7, 9, 100, -100, 255, 256, 127, -128, 0.0, -0.0, 0.5, -0.5, 2.5, 1.0, 3.0, 1e20, -1e20,
    1e-45, 5e-324, 65504.0, 65505.0, 3.4e38, 1e308, INF, -INF, NAN, 2**31 - 1, 2**31, 2**63 - 1, 2**63,
    -(2**63), -(2**63) - 1, 10**40, True, False, *[float(c) for c in ("16777217", "16777216.5", "0.1",
    "0.10000000149011613", "1.00000005", "2049", "2049.5", "65520", "9007199254740993", "3.4028235677973366e38")],
]
# Constants no narrower float holds (float32: 2**24 + 1, 0.1 and its float32 value, past its max; float16:
# 2049, 65520; bfloat16: 0.1; float64: 2**53 + 1): each rounds one way as a bound and the other way
# as the value beside it. Batch values are also drawn at and one step around every bound (`edges`).
F32_EDGES = ["16777217", "16777216.5", "0.10000000149011613", "1.00000005", "2049", "65520", "9007199254740993"]
# Constants in rule text (the parser's own numbers, spelled as a user would).
CONSTS = ["0", "1", "-1", "2", "3", "0.5", "-0.0", "0.0", "1e20", "1e400", "-100", "True", "False", "4611686018427387904",
          "255", "0.1", "1e-45", *F32_EDGES, "2**3", "'a'"]
HINT_TEXTS = [
    "check the collate function", '"""; __import__("os").system("id"); _ = """', "\x1b[31mred\x1b[0m",
    "[bold]x[/bold] [link=http://e.invalid]y[/link]", "line1\nline2", "ünïcödé ✓", "}{ %s {0}", "'''", "\\", "",
]
MULTIPLES = [0, -4, 2.5, True, "8", 2**63]  # what `multiple_of:` refuses at load
HINT_CODES = ["below_min", "above_max", "not_in_set", "non_finite", "rule_failed", "dim_bound", "bogus_code"]
EXTENDS = ["bert-sequence-classification", "ctc", "/etc/passwd", "../../x.yaml", "missing.yaml", "", 7, ["mse"]]
RULE_COMMENTS = ['  # """;__import__("os").system("id");_="""', "  # ok", "  # \x1b]0;title\x07"]


@dataclass
class FieldModel:
    """What a drawn field declares: its axes (("dim", name) or ("size", n)) and its bounds."""

    name: str
    dtypes: list[str]
    axes: list[tuple[str, Any]]
    min: Any = None
    max: Any = None
    allow: list = field(default_factory=list)
    values: list | None = None
    # numbers its values are drawn at and around: numeric bounds, sentinels, set members; the rules'
    # constants and bounds written as expressions (`num_labels - 1`) join them once dims are drawn (`resolved`)
    edges: list = field(default_factory=list)
    # a rule reduces it whole beside its bounds (`shared_axes`): its batches have values at and past its
    # edges, so that a check the Triton kernel lost shows
    reduced: bool = False


@dataclass
class Case:
    """One example: the spec text and a batch for it (the batch's repr is Python code)."""

    yaml_text: str
    batch: dict[str, Any]
    params: dict[str, Any]

    def __repr__(self) -> str:
        return (f"Case(\nyaml_text={self.yaml_text!r},\n# spec file:\n{_indent(self.yaml_text)}\n"
                f"params={self.params!r},\nbatch={batch_code(self.batch)})")

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))  # Hypothesis prints a failing example with this, not field by field


def _indent(text: str) -> str:
    return "\n".join("#   " + line for line in text.splitlines())


# ---------------------------------------------------------------------------------------------
# Specs


@st.composite
def spec_models(draw) -> tuple[dict, list[FieldModel], dict[str, Any]]:
    """(spec mapping, field models, parameter values) for one random spec.

    Two specs in three are drawn `clean`: every choice that the spec rules reject outright (a
    name that is no identifier, an unknown dtype, a fractional bound on an integer field, `**`)
    is left out, so that most of them load and their batches reach the backends; the rest may
    hold anything, and must then load or raise SpecError. One clean spec in three has fields
    that share their axes, each bounded and reduced along an axis by a rule (`shared_axes`).
    """
    clean = draw(st.integers(0, 2)) > 0
    shared = clean and draw(st.integers(0, 2)) == 0
    n_fields = draw(st.integers(2 if shared else 1, 4))
    field_names = draw(st.lists(st.sampled_from(HOSTILE_NAMES + PLAIN_NAMES), min_size=n_fields, max_size=n_fields,
                                unique=True))
    if not clean and draw(st.booleans()):  # a name that is no identifier: SpecError at load
        field_names[draw(st.integers(0, n_fields - 1))] = draw(st.sampled_from(NOT_IDENTIFIERS))
    dims = draw(st.lists(st.sampled_from(DIM_NAMES), min_size=1, max_size=3, unique=True))
    if clean or draw(st.booleans()):  # dims and fields must differ; sometimes let them clash
        dims = [d for d in dims if d not in field_names] or ["B" if "B" not in field_names else "D0"]
    if shared:  # a batch dim and one to reduce along, at least (`shared_axes` may take a third)
        dims += [d for d in DIM_NAMES if d not in dims and d not in field_names][:max(0, 2 - len(dims))]
    params: dict[str, Any] = {}
    for p in draw(st.lists(st.sampled_from(PARAM_NAMES), max_size=2, unique=True)):
        if p not in field_names and p not in dims:
            odd = st.sampled_from([2.5, True, "x", None, -1, 2**40, 0.0, 1e400])
            params[p] = draw(st.integers(0, 6) if clean else st.one_of(st.integers(0, 6), odd))

    models = [draw(field_models(name, dims, params, k == 0, clean)) for k, name in enumerate(field_names)]
    reductions = draw(shared_axes(models, dims)) if shared else []
    if clean:  # a name only becomes a dim by sizing an axis
        dims = [d for d in dims if any(("dim", d) in m.axes for m in models)]
    for m in models:
        draw(value_bounds(m, dims, params, clean))
    for m in models[:len(reductions)]:  # each reduced field has an element-wise check: a small max, its edges drawn
        m.min, m.max = draw(st.sampled_from([m.min, None, 0, -1])), draw(st.sampled_from([1, 7, 9, 100]))
    data: dict[str, Any] = {"name": draw(st.sampled_from(["fuzz", "spec [x]", "ünï", "a\x1bb", '"""', "x\ny"]))}
    if dims[0] != "B" or draw(st.booleans()):
        data["batch_dim"] = dims[0]
    if params:
        data["params"] = params
    data["fields"] = {m.name: _field_mapping(draw, m, clean) for m in models}
    # (a shared-axes spec has its reductions alone: a rule drawn beside them often sent the whole plan to torch)
    rules = reductions or draw(st.lists(rules_for(models, dims, list(params), clean), min_size=int(clean), max_size=4))
    if rules:
        data["rules"] = rules
    for m in models:
        m.edges = [v for v in (m.min, m.max, *m.allow, *(m.values or []))
                   if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if not clean and draw(st.integers(0, 3)) == 0:  # a base to merge: a built-in, or a file it may not read
        data["extends"] = draw(st.sampled_from(EXTENDS))
    if draw(st.integers(0, 3)) == 0:
        data["unexpected_fields"] = draw(st.sampled_from(["ignore", "error"] if clean else ["ignore", "warn", 1]))
    return data, models, params


def _integral(v: Any) -> bool:
    """A number an integer field can take as a bound, sentinel or set member."""
    return isinstance(v, (int, float)) and math.isfinite(v) and float(v).is_integer() and -(2**63) <= v < 2**63


def numbers(dtypes: list[str], clean: bool) -> st.SearchStrategy:
    """Bound, sentinel and set numbers; for a clean spec only those the field's dtypes admit."""
    if not clean:
        return st.sampled_from(NUMBERS)
    expanded = [d for n in dtypes for d in GROUPS.get(n, [n])]
    if all(not d.startswith(("float", "bfloat")) for d in expanded):
        return st.sampled_from([v for v in NUMBERS if _integral(v)])
    return st.sampled_from([v for v in NUMBERS if not (isinstance(v, float) and math.isnan(v))])


FUSED_DTYPES = ["int32", "float32", "int64", "float64", "int32", "float32", "int16", "float16"]  # mostly 4 bytes or more


@st.composite
def shared_axes(draw, models: list[FieldModel], dims: list[str]) -> list[str]:
    """Give the first fields (two or more) one shape, [batch dim, D] or with a third axis, and one
    dtype each, mostly of 4 bytes or more; return a reduction rule over D per field (`any(a != 0,
    dim=L)`); `dims`: the spec's, two at least. The shape the Triton printer fuses: a field's
    element-wise checks (its bounds, which the caller makes sure of) run in the loop of a reduction
    that loads it whole over the same elements, one reduction a group (6f4fab4: where two took
    checks, the first's ran nowhere). Left to chance it was rare: the long run at 2fe9880 (4,400
    examples, every backend) missed that bug, as did the CI run and 150-example runs at five seeds;
    with this shape drawn (and the fix reverted), four of those five seeds found it."""
    axes = [("dim", dims[0]), ("dim", dims[1])]
    if len(dims) > 2 and draw(st.integers(0, 3)) == 0:  # (a dim: a fixed size is an axis of each field's own)
        axes.insert(draw(st.integers(1, 2)), ("dim", dims[2]))
    reduced = draw(st.sampled_from([v for kind, v in axes[1:] if kind == "dim"]))
    rules = []
    for m in models[:draw(st.integers(2, len(models)))]:
        m.axes, m.dtypes, m.reduced = list(axes), [draw(st.sampled_from(FUSED_DTYPES))], True
        op, c = draw(st.sampled_from(["!=", "==", ">", ">=", "<", "<="])), draw(st.sampled_from(["0", "1", "-1", "0.5"]))
        kind = draw(st.sampled_from(["any", "any", "all", "all", "sum"]))  # (sum least: a float sum's group hosts none)
        rules.append(f"sum({m.name}, dim={reduced}) {op} {c}" if kind == "sum" else f"{kind}({m.name} {op} {c}, dim={reduced})")
    return rules


@st.composite
def field_models(draw, name: str, dims: list[str], params: dict[str, Any], first: bool, clean: bool) -> FieldModel:
    dtypes = draw(st.lists(st.sampled_from(DTYPE_NAMES + ["int", "float"]), min_size=1, max_size=3, unique=True))
    if not clean and draw(st.integers(0, 4)) == 0:
        dtypes.append(draw(st.sampled_from(["float8_e4m3fn", "complex64", "Int64", ""])))
    rank = draw(st.sampled_from([1, 2, 2, 3, 1, 0]))
    if first:
        rank = max(rank, 1)  # the first field carries the batch dim
    axes: list[tuple[str, Any]] = []
    free = list(dims)
    for axis in range(rank):
        if first and axis == 0:
            axes.append(("dim", dims[0]))
            free.remove(dims[0])
            continue
        kind = draw(st.sampled_from(["dim", "dim", "size", "param"] if params else ["dim", "dim", "size"]))
        if kind == "dim" and free:
            d = draw(st.sampled_from(free))
            free.remove(d)
            axes.append(("dim", d))
        elif kind == "param":
            p = draw(st.sampled_from(sorted(params)))
            axes.append(("param", draw(st.sampled_from([p, f"{p} + 1", f"2 * {p}", f"{p} // 2", f"{p} - 1", f"{p} % 3"]))))
        else:
            axes.append(("size", draw(st.sampled_from([1, 2, 3, 4, 0, 5, 17]))))
    if not clean and draw(st.integers(0, 4)) == 0:
        axes.append(("raw", draw(st.sampled_from([-1, "B + 1", "1.5", "2**3", "abs(", True, dims[0]]))))
    return FieldModel(name, dtypes, axes)


@st.composite
def value_bounds(draw, m: FieldModel, dims: list[str], params: dict[str, Any], clean: bool) -> None:
    """min/max (numbers or expressions over parameters and dims), sentinels and value sets, into `m`."""
    number = numbers(m.dtypes, clean)
    texts = [*params, *(f"{p} - 1" for p in params), *dims, *(f"{d} - 1" for d in dims), *(f"{d} * 2" for d in dims),
             "abs(-3)", *([] if clean else ["1 // 0", "unknown_name", "x[0]", "2 ** 3"])]
    bound = st.one_of(number, st.sampled_from(texts))
    if draw(st.booleans()):
        m.min = draw(bound)
    if draw(st.booleans()):
        m.max = draw(bound)
    if draw(st.integers(0, 2)) == 0:
        m.allow = draw(st.lists(number, max_size=3))
    if draw(st.integers(0, 3)) == 0:
        m.values = draw(st.lists(st.one_of(st.sampled_from([0, 1, 2, 3, -1, 5]), number), max_size=4))


def _field_mapping(draw, m: FieldModel, clean: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"dtype": m.dtypes[0] if len(m.dtypes) == 1 and draw(st.booleans()) else list(m.dtypes)}
    out["shape"] = [v for _, v in m.axes]
    if draw(st.integers(0, 4)) == 0:
        out["optional"] = True
    for key in ("min", "max"):
        if getattr(m, key) is not None:
            out[key] = getattr(m, key)
    if m.allow:
        out["allow"] = list(m.allow)
    if m.values is not None:
        out["values"] = list(m.values)
    if draw(st.integers(0, 3)) == 0:
        out["finite"] = True
    integers = all(not d.startswith(("float", "bfloat")) for n in m.dtypes for d in GROUPS.get(n, [n]))
    if draw(st.integers(0, 4)) == 0 and (integers or not clean):  # a float field is refused at load
        out["multiple_of"] = draw(st.sampled_from([1, 2, 3, 8, 2**62, 2**63 - 1] + ([] if clean else MULTIPLES)))
    if draw(st.integers(0, 4)) == 0:
        codes = HINT_CODES[:-1] if clean else HINT_CODES
        out["hints"] = draw(st.dictionaries(st.sampled_from(codes), st.sampled_from(HINT_TEXTS), max_size=2))
    if draw(st.integers(0, 9)) == 0:
        out["description"] = draw(st.sampled_from(HINT_TEXTS))
    return out


# ---------------------------------------------------------------------------------------------
# Rules: text drawn from the grammar, over the drawn fields, dims and parameters


def rules_for(models: list[FieldModel], dims: list[str], params: list[str], clean: bool) -> st.SearchStrategy:
    g = Grammar(models, dims, params, clean)

    @st.composite
    def rule(draw):
        text = g.reads_a_field(draw(g.boolean(2)), draw)
        odd = draw(st.integers(0, 11))
        if odd == 1:  # a newline inside a rule (inside parentheses, where Python allows one)
            text = f"({text.replace(' ', chr(10), 1)})"
        if draw(st.integers(0, 2)) == 0:
            text += " where " + draw(g.boolean(1))
        if odd == 0:
            text += draw(st.sampled_from(RULE_COMMENTS))
        elif odd == 2:
            text = g.reads_a_field(draw(g.value(1)), draw)  # not a boolean: a value as the rule
        if draw(st.booleans()):
            return text
        out: dict[str, Any] = {"rule": text}
        if draw(st.booleans()):
            codes = ["box_corners", "my_code", "all_ignored", "rule_failed", "dim_bound"]
            out["code"] = draw(st.sampled_from(codes if clean else [*codes, "bad code", ""]))
        if draw(st.integers(0, 2)) == 0:
            out["field"] = draw(st.sampled_from([m.name for m in models] + ([] if clean else ["nope"])))
        if draw(st.integers(0, 2)) == 0:
            out["hint"] = draw(st.sampled_from(HINT_TEXTS))
        return out

    return rule()


@dataclass
class Grammar:
    """Rule text over one spec's names: values and booleans from the whole grammar of `tritoncheck/expr.py`.

    A clean grammar indexes only within a field's rank (and a fixed axis's size) and reduces
    only over dims of the fields it names, so that most rules resolve; the other goes anywhere.
    """

    models: list[FieldModel]
    dims: list[str]
    params: list[str]
    clean: bool

    def index(self, m: FieldModel) -> st.SearchStrategy[str]:
        @st.composite
        def draw_index(draw) -> str:
            if not self.clean:
                k = draw(st.sampled_from(["0", "1", "-1", "2", "3", "4"]))
                form = draw(st.sampled_from(["{f}[..., {k}]", "{f}[{k}]", "{f}[:, {k}]", "{f}[{k}, ...]",
                                             "{f}[..., {k}, :]", "{f}[:, :, {k}]", "{f}[{k}, {k}]"]))
                return form.format(f=m.name, k=k)
            usable = [a for a, (kind, v) in enumerate(m.axes) if not (kind == "size" and v == 0)]
            if not usable:
                return m.name
            axis = draw(st.sampled_from(usable))
            kind, v = m.axes[axis]
            choices = list(range(-v, v)) if kind == "size" else [0, 1, -1, 2]
            k = draw(st.sampled_from(choices))
            rank = len(m.axes)
            forms = ["{f}[" + ", ".join([":"] * axis + ["{k}"] + [":"] * (rank - axis - 1)) + "]"]
            if axis == rank - 1:
                forms.append("{f}[..., {k}]")
            if axis == 0:
                forms += ["{f}[{k}]", "{f}[{k}, ...]"]
            return draw(st.sampled_from(forms)).format(f=m.name, k=k)

        return draw_index()

    def fields_in(self, text: str) -> list[FieldModel]:
        return [m for m in self.models if re.search(rf"(?<![\w.]){re.escape(m.name)}(?!\w)", text)]

    def reads_a_field(self, text: str, draw) -> str:
        """A clean rule with `arange` reads a field too (arange alone has no meaning, SpecError)."""
        if not self.clean or "arange(" not in text or self.fields_in(text):
            return text
        return f"({text}) | ({draw(st.sampled_from(self.models)).name} < 0)"

    def dim_kw(self, text: str) -> st.SearchStrategy[str]:
        """`, dim=...` for a reduction over `text` (or nothing: reduce every axis)."""
        if self.clean:
            named = {n for m in self.fields_in(text) for kind, n in m.axes if kind == "dim"}
            named |= {d for d in self.dims if f"arange({d})" in text}
            if not named and not any(kind == "size" for m in self.fields_in(text) for kind, _ in m.axes):
                return st.just("")
            axis = st.sampled_from(sorted(named) + ["0", "-1"])
        else:
            axis = st.one_of(st.sampled_from(self.dims), st.sampled_from(["0", "1", "-1", "2", "5"]))
        pair = st.lists(st.sampled_from(self.dims), min_size=2, max_size=2, unique=True)
        return st.one_of(st.just(""), axis.map(lambda d: f", dim={d}"),
                         pair.map(lambda ds: f", dim=({ds[0]}, {ds[1]})") if len(self.dims) >= 2 else st.just(""))

    def value(self, depth: int) -> st.SearchStrategy[str]:
        @st.composite
        def draw_value(draw) -> str:
            if depth <= 0 or draw(st.integers(0, 2)) == 0:
                kind = draw(st.sampled_from(["field", "field", "index", "index", "const", "dim", "param", "arange"]))
                m = draw(st.sampled_from(self.models))
                if kind == "field":
                    return m.name
                if kind == "index" and m.axes:
                    return draw(self.index(m))
                if kind == "dim":
                    return draw(st.sampled_from(self.dims))
                if kind == "param" and self.params:
                    return draw(st.sampled_from(self.params))
                if kind == "arange":
                    return f"arange({draw(st.sampled_from(self.dims))})"
                return draw(st.sampled_from(CONSTS[:-2] if self.clean else CONSTS))
            kind = draw(st.sampled_from(["arith", "arith", "abs", "neg", "sum", "isfinite_mod"]))
            a = draw(self.value(depth - 1))
            if kind == "abs":
                return f"abs({a})"
            if kind == "neg":
                return f"-({a})"
            if kind == "sum":
                return f"sum({a}{draw(self.dim_kw(a))})"
            if kind == "isfinite_mod":
                return f"isfinite({a}) % 2"
            b = draw(self.value(depth - 1))
            return f"({a} {draw(st.sampled_from(['+', '-', '*', '//', '%']))} {b})"

        return draw_value()

    def boolean(self, depth: int) -> st.SearchStrategy[str]:
        @st.composite
        def draw_bool(draw) -> str:
            kinds = ["cmp", "cmp", "cmp", "chain", "isfinite", "own_sum"] + (["and", "or", "not", "any", "all"] if depth > 0 else [])
            kind = draw(st.sampled_from(kinds))
            if kind == "own_sum":  # a value against a reduction over the axis it is compared along
                m = draw(st.sampled_from(self.models))
                named = [v for kind_, v in m.axes if kind_ == "dim"]
                dim = draw(st.sampled_from(["", *(f", dim={d}" for d in named)]))
                op = draw(st.sampled_from(["<=", "<", ">", ">=", "==", "!="]))
                text = f"{m.name} {op} sum({m.name}{dim})"
                if named and draw(st.booleans()):  # reduced again over the axis: any(x > sum(x, dim=B), dim=B)
                    text = f"{draw(st.sampled_from(['any', 'all']))}({text}, dim={draw(st.sampled_from(named))})"
                return text
            if kind in ("cmp", "chain"):
                a, b = draw(self.value(depth)), draw(self.value(depth - 1))
                text = f"{a} {draw(st.sampled_from(['==', '!=', '<', '<=', '>', '>=']))} {b}"
                if kind == "chain":
                    text += f" {draw(st.sampled_from(['<', '<=', '!=']))} {draw(self.value(0))}"
                return text
            if kind == "isfinite":
                return f"isfinite({draw(self.value(depth - 1))})"
            a = draw(self.boolean(depth - 1))
            if kind == "not":
                return draw(st.sampled_from(["~({a})", "not ({a})"])).format(a=a)
            if kind in ("any", "all"):
                return f"{kind}({a}{draw(self.dim_kw(a))})"
            b = draw(self.boolean(depth - 1))
            spelled = draw(st.sampled_from(["&", "and"] if kind == "and" else ["|", "or"]))
            return f"({a}) {spelled} ({b})"

        return draw_bool()


# ---------------------------------------------------------------------------------------------
# Batches


def _param_size(text: Any, params: dict[str, Any]) -> int:
    """The size a parameter shape entry means, for the batch (the spec rejects any that is not >= 0)."""
    if not isinstance(text, str):
        return 1
    name, _, rest = text.partition(" ")
    if name.isdigit():  # "2 * P"
        name = rest.split()[-1]
    v = params.get(name)
    if not isinstance(v, int) or isinstance(v, bool):
        return 1
    for fmt, fn in ((f"{name} + 1", lambda x: x + 1), (f"2 * {name}", lambda x: 2 * x), (f"{name} // 2", lambda x: x // 2),
                    (f"{name} - 1", lambda x: x - 1), (f"{name} % 3", lambda x: x % 3), (name, lambda x: x)):
        if text == fmt:
            return max(0, min(fn(v), 64))
    return 1


SIZES = [2, 3, 1, 4, 5, 0, 7, 16, 17, 33]
BIG_SIZES = [1025, 1030, 2049]
HUGE_EMPTY = 2**31 + 5  # a dim past int32 whose fields are all empty (another of their dims is 0)
HUGE_EXPANDED = 70_000  # a dim past 65,536 that every field spanning it stores once (an expanded view)
# A rule over fields with different axes runs over the product of their axes, which Triton's
# interpreter walks at some microseconds per element, and a reduction under an element-wise
# operation (`x > 0 | any(y)`) is redone per output element: the product of every axis stays
# below MAX_SPACE, and its square below MAX_REDUCE_COST where rules reduce.
MAX_SPACE = 50_000
MAX_REDUCE_COST = 2_000_000

def _sizes(m: FieldModel, params: dict[str, Any], dims: dict[str, int]) -> list[int]:
    return [dims.get(v, 1) if k == "dim" else v if k == "size" else _param_size(v, params) for k, v in m.axes if k != "raw"]


_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
          ast.Mod: operator.mod}


def _known(node: ast.AST, names: dict[str, int | float]) -> int | float | None:
    """The value of `node` where it reads only numbers, `abs` and `names` (parameters and dims), in
    Python's arithmetic (a spec's constants are Python numbers); None where it reads anything else."""
    if isinstance(node, ast.Constant):
        v = node.value
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _known(node.operand, names)
        return None if v is None else -v if isinstance(node.op, ast.USub) else v
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "abs"
            and len(node.args) == 1 and not node.keywords):
        v = _known(node.args[0], names)
        return None if v is None else abs(v)
    if isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
        a, b = _known(node.left, names), _known(node.right, names)
        if a is None or b is None:
            return None
        try:
            return _ARITH[type(node.op)](a, b)
        except (ZeroDivisionError, OverflowError):  # (x // 0 is 0 on the backends: not an edge worth drawing)
            return None
    return None


def _tree(text: str) -> ast.AST | None:
    """The expression `text` parses to (as the spec parses it), or None."""
    try:
        return ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def known_values(text: Any, names: dict[str, int | float]) -> list[int | float]:
    """The values of the largest parts of a bound or rule text that read no field, once `names`
    (parameters and dims) are known: `vocab_size * 0.5` in `x < vocab_size * 0.5`, `L - 1`, `3`.
    Index positions and `dim=` arguments are not values a field is compared with."""
    out: list[int | float] = []
    parts = re.split(r"\s+where\s+", text) if isinstance(text, str) else []  # (split as the spec splits a rule)
    stack = [t for t in map(_tree, parts) if t is not None]
    while stack:
        node = stack.pop()
        v = _known(node, names)
        if v is not None:
            out.append(v)
        elif isinstance(node, ast.Subscript):
            stack.append(node.value)
        elif isinstance(node, ast.Call):
            stack += node.args
        else:
            stack += ast.iter_child_nodes(node)
    return out


def resolved(m: FieldModel, names: dict[str, int | float], rules: list[str] = ()) -> FieldModel:
    """`m` once the batch's dims are drawn: a min/max written as an expression (`num_labels - 1`,
    `L // 2`) becomes its value, for values drawn inside the bounds, and joins the edges, with the
    parts of the rules that read no field (`vocab_size * 0.5`)."""
    bounds = {k: v for k in ("min", "max")
              if isinstance(text := getattr(m, k), str) and (v := _known(_tree(text), names)) is not None}
    extra = [*bounds.values(), *(v for r in rules for v in known_values(r, names))]
    edges = list({repr(v): v for v in [*m.edges, *extra]}.values())  # (repr keeps 0 and -0.0 apart)
    return replace(m, edges=edges, **bounds)


def cost(sizes: list[int], reduces: bool) -> float:
    """The most elements a check can visit over axes of these sizes, in units of MAX_SPACE."""
    space = math.prod(max(s, 1) for s in sizes)
    if not reduces:
        return space
    return max(space, space * space * MAX_SPACE / MAX_REDUCE_COST)


@st.composite
def batches(draw, models: list[FieldModel], params: dict[str, Any], reduces: bool,
            positional: frozenset[str] = frozenset(), huge: bool | str = False,
            rules: list[str] = ()) -> dict[str, Any]:
    dims = {}
    for m in models:
        for kind, v in m.axes:
            if kind == "dim" and v not in dims:
                dims[v] = draw(st.sampled_from(SIZES))
    expanded = None  # a dim past 65,536 along which every field is an expanded view
    # (huge="empty": past 65,536 only where no rule reduces, which Triton's interpreter would walk in full)
    if (huge is True or (huge == "empty" and not reduces)) and dims and draw(st.integers(0, 4)) == 0:
        expanded = draw(st.sampled_from(sorted(dims)))
        dims = {d: min(n, 4) for d, n in dims.items()}
        dims[expanded] = HUGE_EXPANDED
    if not huge:
        positional = frozenset(dims)  # no huge dims for a backend that walks every logical position
    if dims and draw(st.integers(0, 5)) == 0:  # one dim past a block size
        d = draw(st.sampled_from(sorted(dims)))
        dims[d] = draw(st.sampled_from(BIG_SIZES))
    if dims and draw(st.integers(0, 3)) == 0:  # a dim past 2**31 whose every field is empty
        d = draw(st.sampled_from(sorted(dims)))  # (never one a rule walks with arange: 2**31 positions)
        spanning = [m for m in models if ("dim", d) in m.axes and d not in positional]
        others = {v for m in spanning for kind, v in m.axes if kind == "dim" and v != d}
        if (spanning and expanded not in others | {d}  # (an expanded dim is stored at size 1, never 0)
                and all(any(kind == "dim" and v != d for kind, v in m.axes) for m in spanning)):
            dims.update(dict.fromkeys(others, 0))
            dims[d] = HUGE_EMPTY
    fixed = [max(s, 1) for m in models for s in _sizes(m, params, {})]
    while dims and cost(fixed + [n for d, n in dims.items() if n != HUGE_EMPTY and d != expanded], reduces) > MAX_SPACE:
        d = max((k for k in dims if dims[k] != HUGE_EMPTY and k != expanded), key=dims.get)
        dims[d] //= 2
    names = {**{p: v for p, v in params.items() if type(v) in (int, float)}, **dims}
    models = [resolved(m, names, rules) for m in models]  # expression bounds and rule parts, evaluated
    # mostly-valid batch: values inside the declared bounds (never for a spec whose fields a rule reduces beside
    # their bounds, `FieldModel.reduced`: Hypothesis drew 53-56% of batches valid, not a third, at two seeds)
    valid = draw(st.integers(0, 2)) == 0 and not any(m.reduced for m in models)
    batch: dict[str, Any] = {}
    for m in models:
        form = "tensor" if valid else draw(st.sampled_from(["tensor"] * 24 + ["missing", "none", "numpy", "list"]))
        if form == "missing":
            continue
        if form == "none":
            batch[m.name] = None
            continue
        shape = _sizes(m, params, dims)
        if not valid and draw(st.integers(0, 9)) == 0:
            wrong = draw(st.sampled_from([shape + [1], shape[:-1], [s + 1 for s in shape], list(reversed(shape))]))
            if 0 in wrong or max(wrong, default=0) < HUGE_EMPTY:  # (never drop the 0 that keeps a huge dim empty)
                shape = wrong
        accepted = [d for n in m.dtypes for d in GROUPS.get(n, [n]) if d in TORCH_DTYPES]
        if accepted and (valid or draw(st.integers(0, 5))):
            dtype_name = draw(st.sampled_from(accepted))
        else:
            dtype_name = draw(st.sampled_from(DTYPE_NAMES))
        seed = draw(st.integers(0, 2**32 - 1))
        odd = 0.0 if valid else draw(st.sampled_from([0.0, 0.01, 0.2, 1.0]))
        at_edges = 0.0 if valid else draw(st.sampled_from([0.3, 1.0] if m.reduced else [0.0, 0.0, 0.3, 1.0]))
        along = [i for i, (kind, v) in enumerate(m.axes) if kind == "dim" and v == expanded and i < len(shape)]
        stored = [1 if i in along else n for i, n in enumerate(shape)]
        t = make_values(m, TORCH_DTYPES[dtype_name], stored, seed, odd, at_edges)
        t = draw(layouts(t)).expand(shape) if along else draw(layouts(t))
        if form == "numpy" and t.dtype != torch.bfloat16:
            arr = t.resolve_neg().numpy()  # (a bool's bytes stay as they are: numpy bools from bytes)
            batch[m.name] = np.flip(arr, 0) if arr.ndim and draw(st.booleans()) else arr
        elif form == "list" and t.numel() <= 2**16 and max(t.shape, default=0) <= 2**16:  # (a list of 2**31 empty rows: 24 GB)
            batch[m.name] = t.tolist()
        else:
            batch[m.name] = t
    if draw(st.integers(0, 9)) == 0:
        batch[draw(st.sampled_from(["extra", "out", "i", "ñ"]))] = torch.zeros(2)
    return batch


def specials(dtype: torch.dtype) -> list[int | float]:
    """Values that break kernels: non-finite, signed zero, denormals, extremes of the dtype."""
    if dtype == torch.bool:
        return [0, 1]
    if dtype.is_floating_point:
        fi = torch.finfo(dtype)
        denormal = fi.smallest_normal * fi.eps  # the smallest subnormal of the dtype
        return [NAN, INF, -INF, -0.0, 0.0, denormal, -denormal, fi.tiny, fi.max, fi.min, 0.5, -1.0, 1e20, -100.0, 1.0]
    ii = torch.iinfo(dtype)
    return [v for v in (ii.min, ii.max, 0, -1, 1, -100, 127, 128, 255, 256, ii.min + 1) if ii.min <= v <= ii.max]


def _inside(m: FieldModel, dtype: torch.dtype) -> tuple[int | float, int | float]:
    """A range of values of `dtype` that satisfies the field's numeric min/max (when they are numbers)."""
    if dtype == torch.bool:
        return 0, 1
    lo, hi = 0.0, 9.0
    if isinstance(m.min, (int, float)) and not isinstance(m.min, bool) and math.isfinite(m.min):
        lo = m.min
    if isinstance(m.max, (int, float)) and not isinstance(m.max, bool) and math.isfinite(m.max):
        hi = m.max
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    lo = min(max(lo, info.min), info.max)
    hi = min(max(hi, lo), info.max)
    if dtype.is_floating_point:
        return float(lo), float(min(hi, lo + 1000) if math.isfinite(lo + 1000) else hi)
    lo, hi = math.ceil(lo), math.floor(hi)
    return lo, max(lo, min(hi, lo + 1000))


def step(x: float, dtype: torch.dtype, up: bool) -> float:
    """The next value of the float `dtype` after `x` (one of its values) upward or downward."""
    if math.isnan(x) or (math.isinf(x) and (x > 0) == up):
        return x
    itype = {2: torch.int16, 4: torch.int32, 8: torch.int64}[torch.finfo(dtype).bits // 8]
    bits = int(torch.tensor([x], dtype=dtype).view(itype))
    if x == 0:  # past either zero: the smallest subnormal of the direction's sign
        bits = 1 if up else -(2 ** (torch.finfo(dtype).bits - 1)) + 1
    else:
        bits += 1 if (x > 0) == up else -1
    return float(torch.tensor([bits], dtype=itype).view(dtype))


def edge_values(edges: list, dtype: torch.dtype) -> list[int | float]:
    """Per number: the values of `dtype` just below and above it (equal where it holds the number),
    and one step past each: where a bound rounded the wrong way, or not at all, shows. (A float16 or
    bfloat16 field is compared in float32, which holds every value of it: the values it can store
    around the number's float32 rounding are these.)"""
    out: list[int | float] = []
    for e in edges:
        try:
            f = float(e)
        except OverflowError:
            continue
        if dtype == torch.bool or math.isnan(f):
            continue
        if dtype.is_floating_point:
            r = float(torch.tensor(f, dtype=torch.float64).to(dtype))
            down = r if r <= e else step(r, dtype, False)
            up = r if r >= e else step(r, dtype, True)
            out += [step(down, dtype, False), down, up, step(up, dtype, True)]
        elif math.isfinite(f):
            ii = torch.iinfo(dtype)
            lo, hi = math.floor(e), math.ceil(e)
            out += [v for v in (lo - 1, lo, hi, hi + 1) if ii.min <= v <= ii.max]
    return out


def make_values(m: FieldModel, dtype: torch.dtype, shape: list[int], seed: int, odd: float,
                at_edges: float = 0.0) -> torch.Tensor:
    """Values inside the field's bounds or set, with a share `odd` replaced by special values and a
    share `at_edges` by values at and around its bounds and the rules' constants (`edge_values`)."""
    g = torch.Generator().manual_seed(seed)
    n = math.prod(shape)
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype) if dtype != torch.bool else None
    members = [v for v in (m.values or []) if isinstance(v, (int, float)) and not isinstance(v, bool)
               and math.isfinite(v) and (dtype.is_floating_point or float(v).is_integer())
               and (info is None or info.min <= v <= info.max) and (dtype != torch.bool or v in (0, 1))]
    if members:
        pool = torch.tensor(members, dtype=torch.float64).to(wide)
        x = pool[torch.randint(len(members), (n,), generator=g)]
    elif dtype.is_floating_point:
        lo, hi = _inside(m, dtype)
        x = lo + (hi - lo) * torch.rand(n, generator=g, dtype=torch.float64)
    else:
        lo, hi = _inside(m, dtype)
        x = lo + torch.randint(0, hi - lo + 1, (n,), generator=g, dtype=torch.int64)
    x = x.to(dtype)
    if odd and n:
        sp = specials(dtype)
        pick = torch.randint(len(sp), (n,), generator=g)
        where = torch.rand(n, generator=g) < odd
        x = torch.where(where, torch.tensor(sp, dtype=wide).to(dtype)[pick], x)
    near = edge_values(m.edges, dtype) if at_edges and n else []
    if near:
        pick = torch.randint(len(near), (n,), generator=g)
        where = torch.rand(n, generator=g) < at_edges
        x = torch.where(where, torch.tensor(near, dtype=wide).to(dtype)[pick], x)
    return x.reshape(shape)


@st.composite
def layouts(draw, t: torch.Tensor) -> torch.Tensor:
    """The same logical tensor (or an expanded one) with odd strides and storage offsets."""
    kinds = ["contiguous", "transposed", "stepped", "expanded", "offset", "broadcast", "neg", "conj", "bool_bytes"]
    kind = draw(st.sampled_from(kinds + ["bool_bytes"] * 8 if t.dtype == torch.bool else kinds))
    shape = list(t.shape)
    signed = t.dtype.is_floating_point or t.dtype in (torch.int8, torch.int16, torch.int32, torch.int64)
    if kind in ("neg", "conj", "bool_bytes"):  # also seen through a layout that keeps the bit or the bytes
        view = draw(st.sampled_from(["none", "expanded", "transposed"]))
        base = t.transpose(0, -1).contiguous().transpose(0, -1) if view == "transposed" and t.dim() >= 2 else t
        lazy = None
        if kind == "neg" and signed:  # the lazy negation bit: torch reads -stored
            lazy = torch._neg_view(-base)
        if kind == "conj" and t.dtype in (torch.float32, torch.float64):  # z.conj().imag: strided, negation bit
            lazy = torch.complex(torch.zeros_like(base), -base).conj().imag
        if kind == "bool_bytes" and t.dtype == torch.bool:  # bytes other than 0/1 (a uint8 view, numpy from bytes)
            lazy = (base.to(torch.uint8) * draw(st.sampled_from([2, 7, 255]))).view(torch.bool)
        wide = [a for a, s in enumerate(shape) if s > 1]
        if lazy is not None and view == "expanded" and wide:
            return lazy.narrow(draw(st.sampled_from(wide)), 0, 1).expand(shape)
        if lazy is not None:
            return lazy
    if kind == "transposed" and t.dim() >= 2:
        return t.transpose(0, -1).contiguous().transpose(0, -1)
    if kind == "stepped" and t.dim() >= 1:
        axis, step = draw(st.integers(0, t.dim() - 1)), draw(st.sampled_from([2, 3]))
        big_shape = list(shape)
        big_shape[axis] = shape[axis] * step
        big = torch.zeros(big_shape, dtype=t.dtype)
        index = [slice(None)] * t.dim()
        index[axis] = slice(None, None, step)
        big[tuple(index)] = t
        return big[tuple(index)]
    if kind == "expanded" and t.dim() >= 1 and any(s > 1 for s in shape):
        axis = draw(st.sampled_from([a for a, s in enumerate(shape) if s > 1]))
        return t.narrow(axis, 0, 1).expand(shape)
    if kind == "broadcast" and t.numel():  # every axis zero-stride: one stored value
        return t.reshape(-1)[:1].reshape([1] * t.dim()).expand(shape)
    if kind == "offset":
        off = draw(st.integers(1, 7))
        flat = torch.zeros(t.numel() + off, dtype=t.dtype)
        flat[off:] = t.reshape(-1)
        return flat[off:].view(shape)
    return t


@st.composite
def cases(draw, huge: bool | str = False) -> Case:
    """A spec and a batch; `huge` adds dims no backend may walk in full: past 2**31 with every field
    empty, and past 65,536 with every field expanded (with huge="empty" only where no rule reduces:
    Triton's interpreter walks a dim a rule sums over in full, at some microseconds per element)."""
    data, models, params = draw(spec_models())
    reduces = any(f"{op}(" in str(r) for r in data.get("rules", ()) for op in ("any", "all", "sum"))
    assume(cost([s for m in models for s in _sizes(m, params, {})], reduces) <= MAX_SPACE)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=draw(st.booleans()))
    positional = frozenset(re.findall(r"arange\((\w+)\)", str(data.get("rules", ()))))
    rules = [r["rule"] if isinstance(r, dict) else r for r in data.get("rules", ())]
    return Case(text, draw(batches(models, params, reduces, positional, huge, rules)), params)


# ---------------------------------------------------------------------------------------------
# Reproducers


def _num(v: Any) -> str:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return repr(v)


def _list_code(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_list_code(x) for x in v) + "]"
    return _num(v)


def tensor_code(t: torch.Tensor) -> str:
    """Python that rebuilds `t` exactly: its whole storage, then sizes, strides and offset."""
    dtype = torch.uint8 if t.dtype == torch.bool else t.dtype  # a bool's bytes, 0/1 or not
    storage = torch.empty(0, dtype=dtype).set_(t.untyped_storage())
    values = storage.tolist()
    if len(values) > 8 and len({_num(v) for v in values}) == 1:
        code = f"torch.full(({len(values)},), {_num(values[0])}, dtype={dtype})"
    else:
        code = f"torch.tensor({_list_code(values)}, dtype={dtype})"
    if t.dtype == torch.bool:
        code += ".view(torch.bool)"
    if t.is_contiguous() and t.storage_offset() == 0 and storage.numel() == t.numel():
        code = f"{code}.reshape({tuple(t.shape)})"
    else:
        code = f"{code}.as_strided({tuple(t.shape)}, {t.stride()}, {t.storage_offset()})"
    return f"torch._neg_view({code})" if t.is_neg() else code


def batch_code(batch: dict[str, Any]) -> str:
    """The batch as a Python dict expression (with `nan`, `inf` from math, `np` for numpy arrays)."""
    parts = []
    for k, v in batch.items():
        if isinstance(v, torch.Tensor):
            code = tensor_code(v)
        elif isinstance(v, np.ndarray):
            if any(s < 0 for s in v.strides):  # drawn as np.flip(arr, 0)
                code = f"np.flip({tensor_code(torch.from_numpy(np.flip(v, 0)))}.numpy(), 0)"
            else:
                code = f"{tensor_code(torch.from_numpy(v))}.numpy()"
        else:
            code = _list_code(v) if isinstance(v, list) else repr(v)
        parts.append(f"{k!r}: {code}")
    return "{" + ",\n ".join(parts) + "}"
