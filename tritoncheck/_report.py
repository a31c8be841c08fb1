"""Violations, the report they make up, and the exception that carries a report.

Violations are structured data from the backend to the message: code and parameters are fields,
never parsed back out of strings. `docs/errors.md` documents every code in `VIOLATION_CODES`
(a test keeps the two in step).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

# Every code tritoncheck itself emits. A rule in a spec may name its own code as well.
VIOLATION_CODES: tuple[str, ...] = (
    "not_a_mapping",
    "not_a_tensor",
    "missing_field",
    "unexpected_field",
    "dtype",
    "rank",
    "shape",
    "dim_mismatch",
    "empty_batch",
    "device_mismatch",
    "below_min",
    "above_max",
    "not_in_set",
    "non_finite",
    "dim_bound",
    "rule_failed",
    "sequence_too_long",
    "all_ignored",
    "no_attended_position",
    "box_corners",
    "rank_failed",
)
MAX_SAMPLES_SHOWN = 10
_AXIS_CODES = ("shape", "dim_mismatch")  # their `index` is (axis,)


@dataclass(frozen=True)
class Violation:
    """One broken rule of the contract.

    Attributes:
        field: the field the violation is reported on.
        code: a stable, machine-readable code (see docs/errors.md).
        rule: the rule in words, with its bound resolved (`labels <= num_labels - 1 = 6`).
        samples: batch positions that break it; empty when it concerns the batch as a whole.
        count: how many elements (or samples, for per-sample rules) break it.
        index: the first offending position (row-major), or None for metadata violations.
        value: the value found there (for a rule, its left-hand side).
        hint: a likely cause, where a known mistake fits.
    """

    field: str
    code: str
    rule: str
    samples: tuple[int, ...] = ()
    count: int = 1
    index: tuple[int, ...] | None = None
    value: Any = None
    hint: str | None = None

    @property
    def location(self) -> str:
        """`input_ids[2, 17]` for a value, `bbox.shape[2]` for a size, the bare field otherwise."""
        if self.index is None or len(self.index) == 0:
            return self.field
        if self.code in _AXIS_CODES:  # the index names an axis, not an element
            return f"{self.field}.shape[{self.index[0]}]"
        return f"{self.field}[{', '.join(map(str, self.index))}]"

    @property
    def message(self) -> str:
        """One paragraph: where, what rule, how often, and a hint if one fits."""
        text = f"{self.location}: {self.rule}"
        if self.value is not None and self.index is not None:
            text += f" (found {_fmt(self.value)})"
        if self.samples:
            shown = ", ".join(map(str, self.samples[:MAX_SAMPLES_SHOWN]))
            more = f" ... and {len(self.samples) - MAX_SAMPLES_SHOWN} more" if len(self.samples) > MAX_SAMPLES_SHOWN else ""
            text += f"; {self.count} element(s) in sample(s) {shown}{more}"
        if self.hint:
            text += f"\n    hint: {self.hint}"
        return text

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["samples"] = list(self.samples)
        d["index"] = None if self.index is None else list(self.index)
        d["value"] = _jsonable(self.value)
        d["message"] = self.message
        return d


@dataclass(frozen=True)
class Report:
    """The verdict on one batch. `ok` is True when nothing is wrong.

    Attributes:
        spec: the spec's name.
        violations: every broken rule (all are collected, not just the first).
        dims: the named dims bound from the batch, as {name: (size, field it was taken from)}.
        skipped: checks that could not run because a field they need was missing or malformed
            (each already reported), so that nothing is dropped without a trace.
        backend: which backend produced the data checks ("torch" or "triton").
    """

    spec: str
    violations: tuple[Violation, ...] = ()
    dims: dict[str, tuple[int, str]] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()
    backend: str = "torch"

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def codes(self) -> set[str]:
        return {v.code for v in self.violations}

    def dims_text(self) -> str:
        return ", ".join(f"{k}={size} (from {src})" for k, (size, src) in self.dims.items())

    def __str__(self) -> str:
        if self.ok:
            return f"batch is valid for {self.spec}" + (f" ({self.dims_text()})" if self.dims else "")
        n = len(self.violations)
        head = f"{n} violation{'s' if n != 1 else ''} for {self.spec}"
        if self.dims:
            head += f" ({self.dims_text()})"
        lines = [head]
        for v in self.violations:
            lines.append(f"  {v.message}")
            tail = f"count={v.count}" + (f", value={_fmt(v.value)}" if v.value is not None else "")
            lines.append(f"    [code={v.code}, {tail}]")
        if self.skipped:
            lines.append(f"  not checked because of the above: {'; '.join(self.skipped)}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "ok": self.ok,
            "backend": self.backend,
            "dims": {k: {"size": s, "from": f} for k, (s, f) in self.dims.items()},
            "violations": [v.to_dict() for v in self.violations],
            "skipped": list(self.skipped),
        }

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def table(self):
        """A `rich` table of the violations, for terminals."""
        from rich.table import Table

        title = str(self).splitlines()[0]
        table = Table(title=title, title_justify="left", show_lines=False)
        for col in ("location", "code", "rule", "found", "count", "samples"):
            table.add_column(col, overflow="fold")
        for v in self.violations:
            samples = ", ".join(map(str, v.samples[:MAX_SAMPLES_SHOWN])) + (" ..." if len(v.samples) > MAX_SAMPLES_SHOWN else "")
            rule = v.rule + (f"\n[dim]hint: {v.hint}[/dim]" if v.hint else "")
            table.add_row(v.location, v.code, rule, "" if v.value is None else _fmt(v.value), str(v.count), samples)
        return table


class BatchValidationError(ValueError):
    """Raised by `validate` for a batch that breaks its contract; `.report` holds every violation."""

    def __init__(self, report: Report | str):
        # torch's DataLoader re-raises a worker's exception as `type(exc)(traceback_text)`, so a
        # bare message must be accepted too; the structured report is then gone (report is None).
        self.report = report if isinstance(report, Report) else None
        super().__init__(str(report))

    def errors(self) -> list[dict[str, Any]]:
        """The violations as plain dicts (field, code, rule, samples, count, index, value, hint, message)."""
        return [] if self.report is None else [v.to_dict() for v in self.report.violations]

    def __reduce__(self):
        # DataLoader workers pickle exceptions to re-raise them in the main process.
        return (type(self), (self.report,))


BatchValidationError.__module__ = "tritoncheck"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, (int, float, bool, str)) or value is None:
        return value
    return str(value)
