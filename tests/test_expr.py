"""Rule expressions: what parses, what it parses to, and what is refused."""

from __future__ import annotations

import pytest

from tritoncheck import expr as _expr
from tritoncheck.expr import Arange, Binary, Const, ExprError, RawIndex, Reduce, Sym, Unary


@pytest.mark.parametrize(
    "text, tree",
    [
        ("x <= 3", Binary("<=", Sym("x"), Const(3))),
        ("0 <= x < n", Binary("&", Binary("<=", Const(0), Sym("x")), Binary("<", Sym("x"), Sym("n")))),
        ("x and not y", Binary("&", Sym("x"), Unary("not", Sym("y")))),
        ("-100", Const(-100)),
        ("-x", Unary("neg", Sym("x"))),
        ("bbox[..., 0]", RawIndex("bbox", (Ellipsis, 0))),
        ("bbox[:, -1]", RawIndex("bbox", (None, -1))),
        ("any(m != 0, dim=L)", Reduce("any", Binary("!=", Sym("m"), Const(0)), ("L",))),
        ("sum(m, dim=(1, -1))", Reduce("sum", Sym("m"), (1, -1))),
        ("all(isfinite(x))", Reduce("all", Unary("isfinite", Sym("x")), None)),
        ("arange(S) < n", Binary("<", Arange("S"), Sym("n"))),
        ("abs(x) % 2 == 1", Binary("==", Binary("%", Unary("abs", Sym("x")), Const(2)), Const(1))),
    ],
)
def test_parse(text, tree):
    assert _expr.parse(text) == tree


@pytest.mark.parametrize(
    "text", ["bbox[..., 0] <= bbox[..., 2]", "any(attention_mask != 0, dim=L)", "x // 2 + 1 >= -y", "sum(x, dim=(L, B))"]
)
def test_to_text_round_trips(text):
    tree = _expr.parse(text)
    assert _expr.parse(_expr.to_text(tree)) == tree


def test_names():
    assert _expr.names(_expr.parse("sum(ids != pad, dim=L) <= n - pad - 1")) == {"ids", "pad", "L", "n"}
    assert _expr.names(_expr.parse("arange(S) < t")) == {"S", "t"}


def test_fold():
    assert _expr.fold(Binary("-", Binary("*", Const(3), Const(4)), Const(1))) == Const(11)
    assert _expr.fold(Unary("neg", Unary("abs", Const(-2)))) == Const(-2)
    with pytest.raises(ExprError, match="division by zero"):
        _expr.fold(Binary("//", Const(1), Const(0)))
    with pytest.raises(ExprError, match="out of range"):
        _expr.fold(Binary("*", Const(2**40), Const(2**40)))


@pytest.mark.parametrize(
    "text, match",
    [
        ("x ** 2", "Pow is not allowed"),
        ("x.real", "Attribute is not allowed"),
        ("f(x)", "unknown function 'f'; only the functions any, all, sum, abs, arange, isfinite, present may be called"),
        ("isfnite(x)", "unknown function 'isfnite' (did you mean 'isfinite'?); only the functions"),
        ("any(x) & sume(x, dim=L) > 0", "unknown function 'sume' (did you mean 'sum'?)"),
        ("presnt(x) & (y >= 1)", "unknown function 'presnt' (did you mean 'present'?)"),
        ("x[0](1)", "only the functions any, all"),
        ("x.all()", "a method such as x.all() cannot be called; only the functions any, all, sum, abs, arange, "
                    "isfinite, present may be called (write it as the function: all(x))"),
        ("x[..., 0].sume(dim=1) > 0", "x[..., 0].sume() cannot be called; only the functions any, all, sum, abs, "
                                      "arange, isfinite, present may be called (write it as the function: sum(x[..., 0]))"),
        ("x.cuda()", "a method such as x.cuda() cannot be called; only the functions any, all, sum, abs, arange, "
                     "isfinite, present may be called"),
        ("x[1:2]", "an index may hold only"),
        ("x[y]", "an index may hold only"),
        ("x[0][1]", "only a field can be indexed"),
        ("'s'", "is not a number"),
        ("x in (1, 2)", "comparison In is not allowed"),
        ("x is None", "comparison Is is not allowed"),
        ("any(x, y)", "exactly one positional argument"),
        ("any(x, axis=1)", "only the keyword 'dim'"),
        ("abs(x, dim=1)", "takes no keyword arguments"),
        ("arange(3)", "arange() takes a dim name"),
        ("any(x, dim=x + 1)", "dim= takes a dim name"),
        ("x if y else z", "IfExp is not allowed"),
        ("(x := 1)", "NamedExpr is not allowed"),
        ("x < ", "not a valid expression"),
        ("[x]", "List is not allowed"),
        ("x" * 401, "longer than 400"),
        ("-" * 30 + "x", "nested deeper"),
        ("99999999999999999999 > x", "out of range"),
        ("x[99999999999999999999]", "an index may hold only"),
    ],
)
def test_refused(text, match):
    with pytest.raises(ExprError) as err:
        _expr.parse(text)
    assert match in str(err.value)


def test_non_string_is_refused():
    with pytest.raises(ExprError, match="expected an expression string"):
        _expr.parse(3)  # type: ignore[arg-type]


def test_expr_error_is_a_value_error():
    assert issubclass(ExprError, ValueError)


def test_trees_are_hashable_for_the_kernel_cache():
    a, b = _expr.parse("bbox[..., 0] <= bbox[..., 2]"), _expr.parse("bbox[..., 0] <= bbox[..., 2]")
    assert hash(a) == hash(b) and {a: 1}[b] == 1
