"""The registry core: `CheckKind`, `register`, the one dispatch `kind_of`, and what the kinds share.

Each check kind lives in its own module of `tritoncheck.checks` (range.py: min and max; values.py;
finite.py; monotonic.py; rules.py: rule and dim_bound; ...) and registers itself once
(pandera's `register_builtin_check`); `tritoncheck.checks` imports every such module. A
`CheckKind` binds, for one plan-node `kind`:

- `node`: its plan-node type (frozen, hashable, with `kind`, `code`, `field`, `axes`, `hint`);
- `order`: where its checks come among a field's, and its code among `VIOLATION_CODES`;
- `option`: the field option that declares it (`min: 0`), or None for rules (`rules:` list);
- `lower`: spec -> plan nodes (`lower(name, field_spec, field_plan, scope)`);
- `describe`: the rule in words; `message`: the rule with the batch's values resolved (a bound
  over dims); `reads`: the fields and dims it needs; `hint`: the hint shown;
- `settle`: True when the fields' (min, max) summaries and the dims prove it holds, so no
  backend reads data for it; `torch`: its evaluation as torch ops (a bool mask over its axes,
  True where it fails, or None); `ir`: its lowering to kernel-IR ops (the op true where it
  fails), from which the C and Triton generators emit code. Host kinds (`dim_bound`, checked
  by `bind` from sizes alone) have none of these three;
- `value_fails`: for element-wise kinds, whether one value breaks it (None: not element-wise);
- `per_sample(check, own, batch_dim)`: whether it decides each sample from that sample's own
  values (`own(expr)` tells that of an expression), so a scan may split a batch by sample;
- `constrain`, `repair`, `mutate`: its valid-data constraint and the mutation that breaks it,
  for `tritoncheck.strategies` (they use only the draw context passed in, so no check module
  needs hypothesis);
- `code` and `doc`: the violation code it reports and its entry in docs/errors.md.

`kind_of(check)` is the one dispatch: an unknown kind raises, never falls through.
`tests/test_registry.py` walks `REGISTRY` and fails when a kind lacks a part or a docs entry.
A new kind is one module in this folder plus its docs and tests: no other file names it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from tritoncheck import expr as _expr
from tritoncheck.expr import Arange, Binary, Const, Dim, Expr, ExprError, Reduce, Ref, Unary, nodes
from tritoncheck.report import Violation

if TYPE_CHECKING:
    import torch

# "error": the model will crash or its loss is garbage; "warning": almost surely a data bug, but the
# step runs. Every plan node carries one; a spec sets it per rule and per field code.
Severity = Literal["error", "warning"]
SEVERITIES: tuple[str, ...] = ("error", "warning")


class UnknownCheckKind(TypeError):
    """A plan node whose kind no `CheckKind` is registered for (a bug, never user input)."""


@dataclass(frozen=True)
class Option:
    """A field option that declares a check kind in a spec (`monotonic: L`).

    `annotation` is its type on `FieldSpec` (None: `FieldSpec` declares it itself); `check`, if
    given, sees every value at load and raises ValueError saying what is wrong with it.
    """

    name: str
    annotation: Any
    description: str
    check: Callable[[Any], Any] | None = None


def own_field(check: Any) -> tuple[set[str], set[str]]:
    """`reads` of a kind that reads its own field and no dim (the default)."""
    return {check.field}, set()


def spec_hint(check: Any, value: Any) -> str | None:
    """`hint`: the one the spec gave (the default)."""
    return check.hint


def described(check: Any, bound: Any) -> str:
    """`message` of a kind whose rule holds no runtime value: its description (the default)."""
    return kind_of(check).describe(check)


@dataclass(frozen=True)
class CheckKind:
    """Every part of one check kind; see the module docstring. `message`, `reads`, `hint` and `repair`
    default to the parts most field kinds share (the description, its own field, the spec's hint, none)."""

    kind: str
    node: type
    code: str
    doc: str
    order: int
    option: Option | None
    lower: Callable[..., tuple] | None
    describe: Callable[[Any], str]
    settle: Callable[[Any, Any], bool] | None
    torch: Callable[[Any, Any], Any] | None
    ir: Callable[[Any, Any], Any] | None
    value_fails: Callable[[Any, float, Any], bool] | None
    per_sample: Callable[[Any, Callable[[Any], bool], str], bool] | None
    constrain: Callable[[Any, Any], None]
    mutate: Callable[[Any, Any, random.Random], Any]
    message: Callable[[Any, Any], str] = described
    reads: Callable[[Any], tuple[set[str], set[str]]] = own_field
    hint: Callable[[Any, Any], str | None] = spec_hint
    repair: Callable[[Any, Any], None] | None = None


REGISTRY: dict[str, CheckKind] = {}


def register(kind: CheckKind) -> CheckKind:
    """Add a check kind; a kind registered twice is a bug."""
    if kind.kind in REGISTRY:
        raise ValueError(f"check kind {kind.kind!r} is already registered")
    REGISTRY[kind.kind] = kind
    return kind


def kinds() -> list[CheckKind]:
    """Every registered kind, in `order`."""
    return sorted(REGISTRY.values(), key=lambda k: k.order)


def kind_of(check: Any) -> CheckKind:
    """The registered kind of a plan node; raises `UnknownCheckKind` for any other object."""
    entry = REGISTRY.get(getattr(check, "kind", None))
    if entry is None or not isinstance(check, entry.node):
        raise UnknownCheckKind(f"no check kind is registered for {type(check).__name__} "
                               f"(kind {getattr(check, 'kind', None)!r})")
    return entry


def field_kinds() -> list[CheckKind]:
    """Kinds declared by a field option, in `order` (the order of a field's checks)."""
    return [k for k in kinds() if k.option is not None]


def field_codes() -> tuple[str, ...]:
    """The codes a field's own options report (below_min, above_max, ...): what `severity:` may name."""
    return tuple(k.code for k in field_kinds())


def kind_codes() -> tuple[str, ...]:
    """The code of every registered kind, in `order`."""
    return tuple(k.code for k in kinds())


def options() -> dict[str, Option]:
    """Every field option a registered kind declares, by name."""
    return {k.option.name: k.option for k in field_kinds()}


def describe(check: Any) -> str:
    """A check's rule in words (without runtime values)."""
    return kind_of(check).describe(check)


def message(check: Any, bound: Any) -> str:
    """The rule a failing check reports, with its bound resolved against the batch (`bound`: a `Bound`)."""
    return kind_of(check).message(check, bound)


def hint(check: Any, value: Any) -> str | None:
    """The hint shown for a failing check whose first offending value is `value`."""
    return kind_of(check).hint(check, value)


# ---------------------------------------------------------------------------------------------
# Expression walkers the kinds (and the plan and the IR) share.


def violation(check: Any, bound: Any, count: int, samples: Sequence[int], index: tuple[int, ...],
              value: Any, rule: str | None = None) -> Violation:
    """A failing check as the report shows it: the kind's message (a range check's bound resolved
    against the batch's dims, and where those dims came from), the value found at the first
    offending index, and the kind's hint. Every backend builds its violations here, so their
    reports cannot drift apart. `rule`: the kind's message for `bound`, where the caller made it once
    for many violations of one check (it reads no value)."""
    return Violation(check.field, check.code, message(check, bound) if rule is None else rule, samples, count, index,
                     value, hint(check, value), check.severity)


def expr_fields(expr: Expr | None) -> set[str]:
    """Fields an expression reads."""
    return {n.field for n in nodes(expr) if isinstance(n, Ref)}


def expr_dims(expr: Expr | None) -> set[str]:
    """Dims an expression needs bound (as values or arange sizes)."""
    return {n.name if isinstance(n, Dim) else n.dim for n in nodes(expr) if isinstance(n, (Dim, Arange))}


def expr_axes(expr: Expr | None, field_axes: Callable[[str], tuple[str, ...]]) -> tuple[str, ...]:
    """The named axes a resolved expression spans, in order of first appearance; `field_axes(name)`
    gives a field's axes. The plan orders a rule's axes by this, and the kernel IR its loops."""
    if expr is None or isinstance(expr, (Const, Dim)):
        return ()
    if isinstance(expr, Ref):
        return tuple(a for a, i in zip(field_axes(expr.field), expr.index, strict=True) if i is None)
    if isinstance(expr, Arange):
        return (expr.dim,)
    if isinstance(expr, Unary):
        return expr_axes(expr.x, field_axes)
    if isinstance(expr, Binary):
        a = expr_axes(expr.a, field_axes)
        return a + tuple(x for x in expr_axes(expr.b, field_axes) if x not in a)
    if isinstance(expr, Reduce):
        return () if expr.dims is None else tuple(a for a in expr_axes(expr.x, field_axes) if a not in expr.dims)
    raise ExprError(f"cannot use {type(expr).__name__} here")


# ---------------------------------------------------------------------------------------------
# Parts several kinds share.


def no_constraint(check: Any, ctx: Any) -> None:
    """Nothing to narrow before values are drawn."""


def always_per_sample(check: Any, own: Callable[[Any], bool], batch_dim: str) -> bool:
    """`per_sample` of an element-wise kind without a bound: each element decides alone."""
    return True


def allow_text(allow: tuple) -> str:
    """The `allow` sentinels as a rule says them."""
    return f" or one of {list(allow)}" if allow else ""


def except_allowed(bad: torch.Tensor, x: torch.Tensor, allow: tuple) -> torch.Tensor:
    """`bad`, except where `x` is one of the `allow` sentinels (as the field can hold them)."""
    for a in allow:  # a sentinel or two (-100): one compare each, where isin sorts
        bad &= x != a
    return bad


def break_with(check: Any, ctx: Any, rng: random.Random, values: Any, what: str):
    """`mutate` of an element-wise kind: the first of `values` that, written at one position, breaks
    `check` and nothing else (`ctx.set_breaking`); None where none does."""
    for v in values:
        out = ctx.set_breaking(check, v, rng, what)
        if out is not None:
            return out
    return None


def evaluate_scalar(expr: Expr, dims: Mapping[str, int]) -> Any:
    """Evaluate an expression over constants and dims (no field data) on the host."""
    if isinstance(expr, Const):
        return expr.value
    if isinstance(expr, Dim):
        return dims[expr.name]
    if isinstance(expr, Unary):
        x = evaluate_scalar(expr.x, dims)
        return {"neg": lambda: -x, "not": lambda: not x, "abs": lambda: abs(x), "isfinite": lambda: x == x and abs(x) != float("inf")}[expr.op]()
    if isinstance(expr, Binary):
        a, b = evaluate_scalar(expr.a, dims), evaluate_scalar(expr.b, dims)
        return _SCALAR_OPS[expr.op](a, b)
    if isinstance(expr, Reduce):  # over a scalar: any/all is its truth, sum is itself
        x = evaluate_scalar(expr.x, dims)
        return x if expr.op == "sum" else bool(x != 0)
    raise ExprError(f"{_expr.to_text(expr)} needs batch data")


def floor_div(a: float, b: float) -> int | float:
    """`a // b` as the backends compute it: integer division by zero gives 0, floats follow IEEE."""
    if isinstance(a, float) or isinstance(b, float):
        import torch

        return torch.div(torch.tensor(float(a), dtype=torch.float64), float(b), rounding_mode="floor").item()
    return int(a) // int(b) if b else 0


def mod(a: float, b: float) -> int | float:
    """`a % b` as the backends compute it: integer `a % 0` is `a` (so a == (a // b) * b + a % b), floats IEEE."""
    if isinstance(a, float) or isinstance(b, float):
        import torch

        return torch.remainder(torch.tensor(float(a), dtype=torch.float64), float(b)).item()
    return int(a) % int(b) if b else int(a)


_SCALAR_OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "//": floor_div,
    "%": mod,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "&": lambda a, b: bool(a) and bool(b),
    "|": lambda a, b: bool(a) or bool(b),
}
