"""Violations, the report they make up, and the exception that carries a report.

Violations are structured data from the backend to the message: code and parameters are fields,
never parsed back out of strings. `docs/errors.md` documents every code in `VIOLATION_CODES`
(a test keeps the two in step).

Spec and batch text (names, rules, hints, values) is untrusted: every human-readable form
(`message`, `str(report)`, `table()`) passes it through `printable`, so control characters never
reach a terminal and `rich` never reads it as markup; `to_dict`/`to_json` keep it exact.
"""

from __future__ import annotations

import json
import re
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
# C0, DEL and C1 controls (ESC, CSI, OSC, BEL, CR, ...) and the bidi overrides that reorder a line.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: Any) -> str:
    """`str(text)` with every control character shown as its escape (`\\x1b`, `\\n`), for terminals.

    A terminal obeys what reaches it (ESC sequences recolour, move, retitle; OSC 8 makes links;
    CR overwrites a line), so spec and batch text is shown escaped, never executed.
    """
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


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
        """One paragraph: where, what rule, how often, and a hint if one fits (control characters escaped)."""
        text = f"{printable(self.location)}: {printable(self.rule)}"
        if self.value is not None and self.index is not None:
            text += f" (found {_fmt(self.value)})"
        if self.samples:
            shown = ", ".join(map(str, self.samples[:MAX_SAMPLES_SHOWN]))
            more = f" ... and {len(self.samples) - MAX_SAMPLES_SHOWN} more" if len(self.samples) > MAX_SAMPLES_SHOWN else ""
            text += f"; {self.count} element(s) in sample(s) {shown}{more}"
        if self.hint:
            text += f"\n    hint: {printable(self.hint)}"
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
        return printable(", ".join(f"{k}={size} (from {src})" for k, (size, src) in self.dims.items()))

    def __str__(self) -> str:
        """The report for people: one line if valid, else one paragraph per violation (control characters escaped)."""
        if self.ok:
            return f"batch is valid for {printable(self.spec)}" + (f" ({self.dims_text()})" if self.dims else "")
        n = len(self.violations)
        head = f"{n} violation{'s' if n != 1 else ''} for {printable(self.spec)}"
        if self.dims:
            head += f" ({self.dims_text()})"
        lines = [head]
        for v in self.violations:
            lines.append(f"  {v.message}")
            tail = f"count={v.count}" + (f", value={_fmt(v.value)}" if v.value is not None else "")
            lines.append(f"    [code={printable(v.code)}, {tail}]")
        if self.skipped:
            lines.append(f"  not checked because of the above: {printable('; '.join(self.skipped))}")
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
        """A `rich` table of the violations, for terminals: every cell is literal `Text`, never markup."""
        from rich.table import Table
        from rich.text import Text

        title = Text(str(self).splitlines()[0])
        table = Table(title=title, title_justify="left", show_lines=False)
        for col in ("location", "code", "rule", "found", "count", "samples"):
            table.add_column(col, overflow="fold")
        for v in self.violations:
            samples = ", ".join(map(str, v.samples[:MAX_SAMPLES_SHOWN])) + (" ..." if len(v.samples) > MAX_SAMPLES_SHOWN else "")
            rule = Text(printable(v.rule))
            if v.hint:
                rule.append(f"\nhint: {printable(v.hint)}", style="dim")
            found = "" if v.value is None else _fmt(v.value)
            table.add_row(Text(printable(v.location)), Text(printable(v.code)), rule, Text(found), Text(str(v.count)),
                          Text(samples))
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
        # Pickle (DataLoader workers, copy, deepcopy) rebuilds from the message text, then restores
        # every instance attribute: the report, `dataset_indices`, `__notes__`, anything set later.
        return (type(self), self.args, self.__dict__)


BatchValidationError.__module__ = "tritoncheck"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return printable(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, (int, float, bool, str)) or value is None:
        return value
    return str(value)
