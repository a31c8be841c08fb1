"""Rule expressions: parsed with `ast` into a small frozen tree, never evaluated.

A spec file is untrusted input, so the parser accepts a whitelist of node types (comparisons,
arithmetic, boolean logic, subscripts with ints and `...`, and a few named functions) and
rejects everything else — attribute access, calls to anything but the whitelist, `**`, lambdas,
comprehensions — before anything runs. Names are resolved later against the spec (fields,
parameters, dims), so one parse serves both validation of a spec file and plan compilation.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, Union

MAX_EXPR_CHARS = 400
MAX_EXPR_DEPTH = 24
MAX_INT = 2**62

CompareOp = Literal["==", "!=", "<", "<=", ">", ">="]
ArithOp = Literal["+", "-", "*", "//", "%"]
LogicOp = Literal["&", "|"]
ReduceOp = Literal["any", "all", "sum"]

_COMPARE = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_ARITH = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}
_LOGIC = {ast.BitAnd: "&", ast.BitOr: "|"}
REDUCTIONS = ("any", "all", "sum")


class ExprError(ValueError):
    """A rule expression that is not allowed or does not make sense for the spec."""


@dataclass(frozen=True, slots=True)
class Const:
    value: int | float | bool
    kind: Literal["const"] = "const"


@dataclass(frozen=True, slots=True)
class Sym:
    """An unresolved name: a field, a parameter or a dim, decided by `resolve`."""

    name: str
    kind: Literal["sym"] = "sym"


@dataclass(frozen=True, slots=True)
class Dim:
    """The runtime size of a named dim, bound from the batch's shapes."""

    name: str
    kind: Literal["dim"] = "dim"


@dataclass(frozen=True, slots=True)
class Ref:
    """A field's values; `index` has one entry per field axis: None keeps it, an int selects."""

    field: str
    index: tuple[int | None, ...] | None = None  # None until resolved against the field's rank
    kind: Literal["ref"] = "ref"


@dataclass(frozen=True, slots=True)
class RawIndex:
    """A subscript as written (`bbox[..., 0]`): ints, `:` (None) and `...` (Ellipsis)."""

    field: str
    items: tuple[object, ...]
    kind: Literal["raw_index"] = "raw_index"


@dataclass(frozen=True, slots=True)
class Arange:
    """Positions 0..size-1 along a named dim, for rules like `arange(S) < target_lengths`."""

    dim: str
    kind: Literal["arange"] = "arange"


@dataclass(frozen=True, slots=True)
class Present:
    """`present(labels)`: whether the batch holds an (optional) field; known on the host, like a size."""

    field: str
    kind: Literal["present"] = "present"


@dataclass(frozen=True, slots=True)
class Unary:
    op: Literal["neg", "not", "abs", "isfinite"]
    x: Expr
    kind: Literal["unary"] = "unary"


@dataclass(frozen=True, slots=True)
class Binary:
    op: str  # CompareOp | ArithOp | LogicOp
    a: Expr
    b: Expr
    kind: Literal["binary"] = "binary"


@dataclass(frozen=True, slots=True)
class Reduce:
    """any/all/sum over named dims; `dims=None` reduces every axis (a batch-level verdict)."""

    op: ReduceOp
    x: Expr
    dims: tuple[str | int, ...] | None
    kind: Literal["reduce"] = "reduce"


Expr = Union[Const, Sym, Dim, Ref, RawIndex, Arange, Present, Unary, Binary, Reduce]


def parse(text: str) -> Expr:
    """Parse a rule or bound expression into an unresolved tree; raise ExprError if not allowed."""
    if not isinstance(text, str):
        raise ExprError(f"expected an expression string, got {type(text).__name__}")
    if len(text) > MAX_EXPR_CHARS:
        raise ExprError(f"expression longer than {MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, RecursionError, MemoryError, ValueError) as exc:
        raise ExprError(f"not a valid expression: {text!r} ({exc.__class__.__name__})") from None
    return _convert(tree.body, depth=0)


def _convert(node: ast.AST, depth: int) -> Expr:
    if depth > MAX_EXPR_DEPTH:
        raise ExprError(f"expression nested deeper than {MAX_EXPR_DEPTH} levels")
    d = depth + 1
    if isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool) or (isinstance(v, (int, float)) and not isinstance(v, complex)):
            if isinstance(v, int) and abs(v) > MAX_INT:
                raise ExprError(f"integer constant {v} is out of range")
            return Const(v)
        raise ExprError(f"constant {v!r} is not a number")
    if isinstance(node, ast.Name):
        return Sym(node.id)
    if isinstance(node, ast.Compare):
        # a <= b < c  ->  (a <= b) & (b < c)
        parts, left = [], _convert(node.left, d)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            if type(op) not in _COMPARE:
                raise ExprError(f"comparison {type(op).__name__} is not allowed")
            right = _convert(right_node, d)
            parts.append(Binary(_COMPARE[type(op)], left, right))
            left = right
        out = parts[0]
        for p in parts[1:]:
            out = Binary("&", out, p)
        return out
    if isinstance(node, ast.BoolOp):
        op = "&" if isinstance(node.op, ast.And) else "|"
        out = _convert(node.values[0], d)
        for v in node.values[1:]:
            out = Binary(op, out, _convert(v, d))
        return out
    if isinstance(node, ast.BinOp):
        op_type = type(node.op)
        if op_type in _ARITH:
            return Binary(_ARITH[op_type], _convert(node.left, d), _convert(node.right, d))
        if op_type in _LOGIC:
            return Binary(_LOGIC[op_type], _convert(node.left, d), _convert(node.right, d))
        raise ExprError(f"operator {op_type.__name__} is not allowed")
    if isinstance(node, ast.UnaryOp):
        x = _convert(node.operand, d)
        if isinstance(node.op, ast.USub):
            return Const(-x.value) if isinstance(x, Const) and not isinstance(x.value, bool) else Unary("neg", x)
        if isinstance(node.op, ast.UAdd):
            return x
        if isinstance(node.op, (ast.Not, ast.Invert)):
            return Unary("not", x)
    if isinstance(node, ast.Subscript):
        if not isinstance(node.value, ast.Name):
            raise ExprError("only a field can be indexed, as in bbox[..., 0]")
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        return RawIndex(node.value.id, tuple(_index_item(e) for e in elts))
    if isinstance(node, ast.Call):
        return _call(node, d)
    raise ExprError(f"{type(node).__name__} is not allowed in an expression")


def _index_item(node: ast.AST) -> object:
    if isinstance(node, ast.Constant) and node.value is Ellipsis:
        return Ellipsis
    if isinstance(node, ast.Slice) and node.lower is node.upper is node.step is None:
        return None
    if isinstance(node, ast.Constant) and type(node.value) is int and abs(node.value) < MAX_INT:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _index_item(node.operand)
        if type(inner) is int:
            return -inner
    raise ExprError("an index may hold only integers, ':' and '...'")


def _call(node: ast.Call, depth: int) -> Expr:
    allowed = (*REDUCTIONS, "abs", "arange", "isfinite", "present")
    only = f"only the functions {', '.join(allowed)} may be called"
    if isinstance(node.func, ast.Attribute):  # x.sum(): a method, as torch and numpy spell it
        meant = difflib.get_close_matches(node.func.attr, allowed, n=1, cutoff=0.6)
        receiver = ast.unparse(node.func.value)
        raise ExprError(f"a method such as {receiver}.{node.func.attr}() cannot be called; {only}"
                        + (f" (write it as the function: {meant[0]}({receiver}))" if meant else ""))
    name = node.func.id if isinstance(node.func, ast.Name) else None
    if name not in allowed:
        meant = difflib.get_close_matches(name, allowed, n=1, cutoff=0.6) if name else []
        raise ExprError((f"unknown function {name!r}" + (f" (did you mean {meant[0]!r}?)" if meant else "") + "; "
                         if name else "") + only)
    if len(node.args) != 1:
        raise ExprError(f"{name}() takes exactly one positional argument")
    kwargs = {k.arg: k.value for k in node.keywords}
    if name in ("abs", "isfinite", "arange", "present") and kwargs:
        raise ExprError(f"{name}() takes no keyword arguments")
    if name == "arange":
        if not isinstance(node.args[0], ast.Name):
            raise ExprError("arange() takes a dim name, as in arange(S)")
        return Arange(node.args[0].id)
    if name == "present":
        if not isinstance(node.args[0], ast.Name):
            raise ExprError("present() takes a field name, as in present(labels)")
        return Present(node.args[0].id)
    x = _convert(node.args[0], depth)
    if name in ("abs", "isfinite"):
        return Unary(name, x)
    if set(kwargs) - {"dim"}:
        raise ExprError(f"{name}() accepts only the keyword 'dim'")
    dims = None
    if "dim" in kwargs:
        dnode = kwargs["dim"]
        items = dnode.elts if isinstance(dnode, ast.Tuple) else [dnode]
        dims = tuple(_dim_item(i) for i in items)
    return Reduce(name, x, dims)


def _dim_item(node: ast.AST) -> str | int:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Constant) and type(node.value) is int and abs(node.value) < 64:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -_dim_item(node.operand)
    raise ExprError("dim= takes a dim name or an integer axis")


def names(expr: Expr) -> set[str]:
    """Every name an unresolved expression refers to (fields, parameters, dims)."""
    if isinstance(expr, Sym):
        return {expr.name}
    if isinstance(expr, RawIndex):
        return {expr.field}
    if isinstance(expr, Arange):
        return {expr.dim}
    if isinstance(expr, Present):
        return {expr.field}
    if isinstance(expr, Unary):
        return names(expr.x)
    if isinstance(expr, Binary):
        return names(expr.a) | names(expr.b)
    if isinstance(expr, Reduce):
        return names(expr.x) | {d for d in expr.dims or () if isinstance(d, str)}
    return set()


def nodes(expr: Expr | None) -> Iterator[Expr]:
    """Every node of a resolved expression, the root first (nothing for None)."""
    if expr is None:
        return
    yield expr
    if isinstance(expr, (Unary, Reduce)):
        yield from nodes(expr.x)
    elif isinstance(expr, Binary):
        yield from nodes(expr.a)
        yield from nodes(expr.b)


def has_arange(expr: Expr) -> bool:
    """True when `arange(...)` appears in the expression."""
    return any(isinstance(n, Arange) for n in nodes(expr))


def is_host(expr: Expr) -> bool:
    """True for an expression over constants and dims only (no field data, no positions):
    its value is known on the host once the batch's sizes are."""
    return all(isinstance(n, (Const, Dim, Unary, Binary)) for n in nodes(expr))


def fold(expr: Expr) -> Expr:
    """Fold constant sub-expressions (parameters are constants once a spec is filled)."""
    if isinstance(expr, Unary):
        x = fold(expr.x)
        if isinstance(x, Const) and expr.op == "neg":
            return Const(-x.value)
        if isinstance(x, Const) and expr.op == "abs":
            return Const(abs(x.value))
        return Unary(expr.op, x)
    if isinstance(expr, Binary):
        a, b = fold(expr.a), fold(expr.b)
        if isinstance(a, Const) and isinstance(b, Const) and expr.op in _PY_OPS:
            if expr.op in ("//", "%") and b.value == 0:
                raise ExprError("division by zero in a constant expression")
            value = _PY_OPS[expr.op](a.value, b.value)
            if isinstance(value, int) and abs(value) > MAX_INT:
                raise ExprError("constant expression is out of range")
            return Const(value)
        return Binary(expr.op, a, b)
    if isinstance(expr, Reduce):
        x = fold(expr.x)
        if isinstance(x, Const) and expr.dims is None:  # over a single value: sum is the value, any/all its truth
            return Const(int(x.value) if expr.op == "sum" and isinstance(x.value, bool) else
                         x.value if expr.op == "sum" else x.value != 0)
        return Reduce(expr.op, x, expr.dims)
    return expr


_PY_OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": lambda a, b: a // b,
    "%": lambda a, b: a % b,
}


def to_text(expr: Expr) -> str:
    """Render a tree back to source, for messages and for the generated kernel's header."""
    if isinstance(expr, Const):
        return repr(expr.value)
    if isinstance(expr, (Sym, Dim)):
        return expr.name
    if isinstance(expr, Arange):
        return f"arange({expr.dim})"
    if isinstance(expr, Present):
        return f"present({expr.field})"
    if isinstance(expr, (Ref, RawIndex)):
        items = expr.items if isinstance(expr, RawIndex) else expr.index
        if not items or all(i is None for i in items):
            return expr.field
        parts = ["..." if i is Ellipsis else ":" if i is None else str(i) for i in items]
        return f"{expr.field}[{', '.join(parts)}]"
    if isinstance(expr, Unary):
        if expr.op == "neg":
            return f"-{_wrap(expr.x)}"
        if expr.op == "not":
            return f"~{_wrap(expr.x)}"
        return f"{expr.op}({to_text(expr.x)})"
    if isinstance(expr, Binary):
        return f"{_wrap(expr.a)} {expr.op} {_wrap(expr.b)}"
    if isinstance(expr, Reduce):
        dims = "" if expr.dims is None else ", dim=" + (
            str(expr.dims[0]) if len(expr.dims) == 1 else "(" + ", ".join(map(str, expr.dims)) + ")"
        )
        return f"{expr.op}({to_text(expr.x)}{dims})"
    raise TypeError(expr)


def _wrap(expr: Expr) -> str:
    return f"({to_text(expr)})" if isinstance(expr, Binary) else to_text(expr)
