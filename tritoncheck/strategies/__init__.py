"""Hypothesis strategies built from a spec: valid batches, and batches with exactly one violation.

Values are *constructed* to satisfy the contract, never filtered: each field gets a value domain
narrowed by its checks (min/max with their `allow` sentinels, value sets, and rules of the form
`field <op> scalar`), dims are drawn inside intervals narrowed by the host dim rules, and a few
rule shapes recognised structurally are repaired in place (sort box corners, force one attended
position, pad the tail past a token budget, clip a length to another). Large tensors are filled
from one drawn seed with a torch generator, so a 1M-element batch costs one draw.

Each check kind's valid-data constraint, repair and mutation are registered with the kind itself
(each a module of `tritoncheck.checks`), and reach this module's machinery through the draw context;
`RULE_SHAPES` does the same for rule shapes. A test walks every
built-in plan and asserts nothing is missing.

    from hypothesis import given
    import tritoncheck as tc

    @given(tc.strategies.valid_batches(spec, B=(1, 4), L=(1, 32)))
    def test_forward(batch):
        model(**batch)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

try:
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("tritoncheck.strategies needs hypothesis: pip install 'tritoncheck[strategies]'") from exc

from tritoncheck.plan.lower import FieldPlan, Plan, RuleCheck, compile_plan
from tritoncheck.checks import VIOLATION_CODES
from tritoncheck.spec.schema import BatchSpec, closest
from tritoncheck.strategies.domains import DEFAULT_SPAN, MAX_TRIES, Domain, Infeasible, pick
from tritoncheck.strategies.draw import DEFAULT_BATCH, DEFAULT_DIM, Draw, UnsatisfiableSpecError, applies, dim_intervals, draw_batch
from tritoncheck.strategies.mutate import mutate
from tritoncheck.strategies.shapes import RULE_SHAPES, RuleShape, rule_shape

__all__ = ["Expected", "UnsatisfiableSpecError", "malformed_batches", "valid_batches"]
# (also importable, as before the split: Domain, pick, mutate, rule_shape, RuleShape, RULE_SHAPES,
# DEFAULT_BATCH, DEFAULT_DIM, DEFAULT_SPAN, MAX_TRIES)


@dataclass(frozen=True)
class Expected:
    """What a malformed batch must be reported for: exactly one violation, of `code` on `field`, and no
    other (no warning either).

    Attributes:
        field: the field the violation is reported on.
        code: the violation code the mutation causes.
        samples: the batch positions it must name (empty for batch-level and metadata violations).
        mutation: what was done, in words, for failure messages.
    """

    field: str
    code: str
    samples: tuple[int, ...]
    mutation: str



# draws without a mutation of the codes asked for, none found yet, before saying none can be made: fewer than
# the 50 filtered draws after which Hypothesis's health check fails the test without naming the codes
MAX_MISSES = 40


def _check_spec(spec: BatchSpec) -> Plan:
    if not isinstance(spec, BatchSpec):
        raise TypeError(f"spec must be a BatchSpec (from tc.load_spec), got {type(spec).__name__}")
    return compile_plan(spec)


def _parse_bounds(plan: Plan, dim_bounds: dict[str, Any]) -> dict[str, tuple[int, int]]:
    out = {}
    for name, b in dim_bounds.items():
        if isinstance(b, int):
            b = (b, b)
        if not (isinstance(b, tuple) and len(b) == 2 and all(isinstance(x, int) for x in b) and 0 <= b[0] <= b[1]):
            raise ValueError(f"{name}={b!r}: a dim bound is an int or a (lo, hi) tuple with 0 <= lo <= hi")
        out[name] = b
    return out


def _valid(draw, spec: BatchSpec, plan: Plan, intervals, overrides=None, force_present=frozenset()) -> Draw:
    """A valid batch; retries a few fresh draws for rules no shape covers, then gives up loudly."""
    from tritoncheck.api import check

    problem = ""
    unknown = [c.text for c in plan.checks if isinstance(c, RuleCheck) and rule_shape(c) is None]
    for _ in range(MAX_TRIES):
        try:
            ctx = draw_batch(draw, plan, intervals, overrides, force_present)
        except Infeasible as exc:
            problem = str(exc)
            continue
        report = check(ctx.batch, spec, backend="torch")
        if not report.violations:  # valid means clean: no error and no warning either
            return ctx
        problem = "; ".join(f"{v.code} on {v.field}: {v.rule}" for v in report.violations)
        if not all(any(v.rule.startswith(t) for t in unknown) for v in report.violations):
            raise UnsatisfiableSpecError(f"{plan.spec_name}: built a batch that breaks the contract ({problem}); "
                                         "this is a bug in tritoncheck.strategies")
    raise UnsatisfiableSpecError(f"{plan.spec_name}: could not build a valid batch in {MAX_TRIES} tries: {problem}")


def valid_batches(spec: BatchSpec, *, require: Iterable[str] = (),
                  **dim_bounds: int | tuple[int, int]) -> st.SearchStrategy[dict[str, torch.Tensor]]:
    """Batches (field name -> tensor) that satisfy every rule of `spec`.

    Args:
        spec: a filled `BatchSpec` (built-in or your own YAML, via `tc.load_spec`).
        require: optional fields to always include (e.g. `("labels",)` when your forward computes a loss).
        **dim_bounds: sizes for named dims, as `(lo, hi)` or an int, e.g. `B=(1, 4), L=(1, 32)`.
            Defaults: the batch dim in [1, 4], every other dim in [1, 8]; the spec's dim rules
            (`L <= max_position_embeddings`) narrow them further.

    Each dim is drawn once and shared by every field naming it; optional fields are sometimes
    left out; dtypes are drawn from each field's list. Raises `UnsatisfiableSpecError` (naming
    the rule) when a rule cannot be satisfied, rather than filtering forever.
    """
    plan = _check_spec(spec)
    intervals = dim_intervals(plan, spec, _parse_bounds(plan, dim_bounds))
    required = set(require) if not isinstance(require, str) else {require}
    unknown = required - {fp.name for fp in plan.fields}
    if unknown:
        raise ValueError(f"{plan.spec_name}: require names {sorted(unknown)}, which are not fields of the spec")

    @st.composite
    def build(draw):
        batch = _valid(draw, spec, plan, intervals, force_present=required).batch
        _unit_tails(draw, plan, batch)
        return batch

    return build()


def _unit_tails(draw: Any, plan: Plan, batch: dict[str, torch.Tensor], keep: str | None = None) -> None:
    """A field whose shape ends in '1?' comes both ways: [B] and [B, 1] (but `keep`, whose metadata a mutation broke)."""
    for fp in plan.fields:
        t = batch.get(fp.name)
        if fp.unit_tail and fp.name != keep and t is not None and t.dim() == len(fp.shape) \
                and draw(st.booleans(), label=f"{fp.name} with its size-1 axis"):
            batch[fp.name] = t.unsqueeze(-1)


def malformed_batches(spec: BatchSpec, *, codes: Iterable[str] | None = None,
                      **dim_bounds: int | tuple[int, int]) -> st.SearchStrategy[tuple[dict[str, torch.Tensor], Expected]]:
    """`(batch, expected)`: a valid batch with exactly one registered mutation applied.

    Args:
        spec: a filled `BatchSpec`.
        codes: only mutations causing one of these codes (default: any check of the spec).
        **dim_bounds: as for `valid_batches`.

    `expected` (an `Expected`) names the field, code and samples the report must show: checking
    the batch gives violations of that one code on that one field, and nothing else.
    """
    plan = _check_spec(spec)
    intervals = dim_intervals(plan, spec, _parse_bounds(plan, dim_bounds))
    wanted = None if codes is None else set(codes)
    own = {c.code for c in (*plan.checks, *plan.dim_checks)}  # (a rule's own code among them)
    unknown = sorted(wanted - own - set(VIOLATION_CODES)) if wanted is not None else []
    if unknown:  # (else every draw is rejected, and Hypothesis says only that nothing could be drawn)
        raise ValueError(f"malformed_batches: no code {unknown[0]!r}{closest(unknown[0], sorted(own | set(VIOLATION_CODES)))}; "
                         f"this spec's checks have {', '.join(sorted(own))}")
    targets: list[Any] = [*plan.checks, *plan.dim_checks, *plan.fields]
    if wanted is not None:
        targets = [t for t in targets if isinstance(t, FieldPlan) or t.code in wanted]
    misses = {"draws": 0, "found": False}  # draws without a mutation of a wanted code; whether one was ever made

    @st.composite
    def build(draw):
        rng = draw(st.randoms(use_true_random=False))
        order = list(targets)
        rng.shuffle(order)
        ctx = _valid(draw, spec, plan, intervals)
        ctx.redraw = lambda overrides, present, breaking, absent=frozenset(): draw_batch(
            draw, plan, {n: iv for n, iv in intervals.items() if n not in overrides}, overrides, present, breaking, absent)
        for target in order:
            if not applies(target, ctx):
                continue
            snapshot = {k: v.clone() for k, v in ctx.batch.items()}
            out = mutate(target, ctx, rng)
            if out is not None and (wanted is None or out[2] in wanted):
                misses["found"] = True  # the codes can be broken: no later draw raises
                what, name, code, samples = out
                _unit_tails(draw, plan, ctx.batch, keep=target.name if isinstance(target, FieldPlan) else None)
                return ctx.batch, Expected(name, code, samples, what)
            ctx.batch = snapshot
        from hypothesis import reject

        misses["draws"] += 1
        # where no draw can break the codes asked for, say so (else Hypothesis says only that its filters failed)
        if wanted is not None and not misses["found"] and misses["draws"] >= MAX_MISSES:
            raise UnsatisfiableSpecError(
                f"malformed_batches({plan.spec_name}, codes={sorted(wanted)}): in {MAX_MISSES} draws no batch broke "
                "a check of these codes alone: breaking each broke another check too (a warning "
                "counts: e.g. QA's start positions all past the sequence, all ignored, are each past their bound too), or "
                "left a field it reads absent; a check no batch breaks alone is never mutated (see Expected)")
        reject()  # no mutation applies to this draw (e.g. every field it could break is absent)

    return build()

