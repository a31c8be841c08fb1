"""Violations, the report they make up, and the exception that carries a report.

Violations are structured data from the backend to the message: code and parameters are fields,
never parsed back out of strings. `docs/errors.md` documents every code in
`tritoncheck.checks.VIOLATION_CODES` (a test keeps the two in step).

Spec and batch text (names, rules, hints, values) is untrusted: every human-readable form
(`message`, `str(report)`, `table()`) passes it through `printable`, so control characters never
reach a terminal and `rich` never reads it as markup; `to_dict`/`to_json` keep it exact.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

# Every code tritoncheck itself emits is `tritoncheck.checks.VIOLATION_CODES`: these codes, then each
# registered check kind's (below_min, ..., rule_failed), then CONTRACT_CODES. A rule in a spec may name
# its own code as well.
HOST_CODES: tuple[str, ...] = (  # found on the host from a batch's structure, before any data check
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
)
CONTRACT_CODES: tuple[str, ...] = (  # the built-in contracts' rule codes, and another rank's failure
    "sequence_too_long",
    "all_ignored",
    "no_attended_position",
    "box_corners",
    "rank_failed",
)
REPORT_SCHEMA = "tritoncheck.report/1"  # the JSON report's version: a change of its keys or their meaning bumps it
MAX_SAMPLES_SHOWN = 10
# the most batch positions one violation lists in the JSON report; `rows_total` always says how many
# there are (an expanded batch axis may hold 2**40 bad samples, stored as one)
MAX_JSON_ROWS = 100_000
WARNING_PREFIX = "warning: "  # how a warning's message starts (an error's starts with its location)
_AXIS_CODES = ("shape", "dim_mismatch")  # their `index` is (axis,)
# C0, DEL and C1 controls (ESC, CSI, OSC, BEL, CR, ...), the bidi overrides that reorder a line, and
# lone surrogates: the bytes of a non-UTF-8 file name or key, which a C-locale stdout writes back raw
# (0x9b is CSI) and a UTF-8 one refuses to encode.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def printable(text: Any) -> str:
    """`str(text)` with every control character shown as its escape (`\\x1b`, `\\n`), for terminals.

    A terminal obeys what reaches it (ESC sequences recolour, move, retitle; OSC 8 makes links;
    CR overwrites a line), so spec and batch text is shown escaped, never executed.
    """
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def printable_lines(text: str) -> str:
    """`text` with its line breaks kept and every other control character escaped."""
    return "\n".join(printable(line) for line in text.split("\n"))


class SampleRange(Sequence[int]):
    """The samples 0..n-1 in constant space: every sample of an expanded (zero-stride) batch axis.

    Equal to any sequence of the same positions (the tuple the same batch materialized gives), so
    reports compare as they read; a batch of 2**40 expanded samples lists them without 2**40 ints.
    """

    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        picked = range(self.n)[i]
        return tuple(picked) if isinstance(i, slice) else picked

    def __iter__(self):
        return iter(range(self.n))

    def __contains__(self, x: object) -> bool:
        return x in range(self.n)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SampleRange):
            return other.n == self.n
        if isinstance(other, (tuple, list, range)):
            return len(other) == self.n and all(a == i for i, a in enumerate(other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(range(self.n))) if self.n <= 2**16 else hash((SampleRange, self.n))

    def __repr__(self) -> str:
        return f"SampleRange({self.n})"


class SampleRuns(Sequence[int]):
    """Samples as sorted, disjoint runs `((start, stop), ...)`, in space that grows with the runs: the
    bad samples of a rule evaluated piecewise along an expanded batch axis (`arange(B) > x` with x
    stored once: samples x+1 .. B-1). Equal to any sequence of the same positions."""

    __slots__ = ("runs", "n")

    def __init__(self, runs: Sequence[tuple[int, int]]):
        self.runs = tuple(runs)
        self.n = sum(stop - start for start, stop in self.runs)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return tuple(itertools.islice(self, *i.indices(self.n)))
        i = range(self.n)[i]
        for start, stop in self.runs:
            if i < stop - start:
                return start + i
            i -= stop - start
        raise IndexError(i)

    def __iter__(self):
        return itertools.chain.from_iterable(range(start, stop) for start, stop in self.runs)

    def __contains__(self, x: object) -> bool:
        return any(x in range(start, stop) for start, stop in self.runs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SampleRuns):
            return other.runs == self.runs
        if isinstance(other, SampleRange):
            return self.runs == (((0, other.n),) if other.n else ())
        if isinstance(other, (tuple, list, range)):
            return len(other) == self.n and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self)) if self.n <= 2**16 else hash((SampleRuns, self.runs))

    def __repr__(self) -> str:
        return f"SampleRuns({self.runs})"


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
        severity: "error" (the model will crash or its loss is garbage) or "warning" (almost
            surely a data bug, but the training step runs); the spec chooses per rule.
    """

    field: str
    code: str
    rule: str
    samples: tuple[int, ...] = ()
    count: int = 1
    index: tuple[int, ...] | None = None
    value: Any = None
    hint: str | None = None
    severity: str = "error"

    @property
    def is_error(self) -> bool:
        return self.severity != "warning"

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
        if not self.is_error:
            text = WARNING_PREFIX + text
        if self.value is not None and self.index is not None:
            text += f" (found {_fmt(self.value)})"
        if self.samples:
            shown = ", ".join(map(str, self.samples[:MAX_SAMPLES_SHOWN]))
            more = f" ... and {len(self.samples) - MAX_SAMPLES_SHOWN} more" if len(self.samples) > MAX_SAMPLES_SHOWN else ""
            text += f"; {self.count} element(s) in sample(s) {shown}{more}"
        if self.hint:
            text += f"\n    hint: {printable(self.hint)}"
        return text

    def to_dict(self, **where: Any) -> dict[str, Any]:
        """The violation as the JSON report lists it (`REPORT_SCHEMA`): field, code, severity, rule, hint,
        count, value, index, rows (the batch positions, `samples`: the first `MAX_JSON_ROWS`), rows_total
        (how many) and message; `where` adds the scan's keys (source, sample, row)."""
        return {"field": self.field, "code": self.code, "severity": self.severity, "rule": self.rule,
                "hint": self.hint, "count": self.count, "value": jsonable(self.value),
                "index": None if self.index is None else list(self.index),
                "rows": list(itertools.islice(self.samples, MAX_JSON_ROWS)), "rows_total": len(self.samples),
                "message": self.message, **where}


class Dims(dict):
    """A report's dims, `{name: (size, field it was taken from)}`: a dict that cannot change, like the rest of
    the report, so that one report can stand for every valid batch of a signature (`tc.check`'s warm path)."""

    def _frozen(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a report's dims cannot change (copy them: dict(report.dims))")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _frozen

    def __reduce__(self) -> tuple:
        return Dims, (dict(self),)  # (pickle and copy would otherwise refill an empty one item by item)


@dataclass(frozen=True)
class Report:
    """The verdict on one batch. `ok` is True when no violation is an error (warnings may remain).

    Attributes:
        spec: the spec's name.
        violations: every broken rule (all are collected, not just the first), errors and warnings.
        dims: the named dims bound from the batch, as {name: (size, field it was taken from)}
            (a read-only dict, `Dims`).
        skipped: checks that could not run because a field they need was missing or malformed
            (each already reported), so that nothing is dropped without a trace.
        backend: which backend ran the data checks ("torch", "c" or "triton").
    """

    spec: str
    violations: tuple[Violation, ...] = ()
    dims: dict[str, tuple[int, str]] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()
    backend: str = "torch"

    def __post_init__(self) -> None:
        if type(self.dims) is not Dims:  # (frozen: the dataclass's own way to set a field)
            object.__setattr__(self, "dims", Dims(self.dims))

    @property
    def ok(self) -> bool:
        return not self.violations or not self.errors

    @property
    def errors(self) -> tuple[Violation, ...]:
        return tuple(v for v in self.violations if v.is_error)

    @property
    def warnings(self) -> tuple[Violation, ...]:
        return tuple(v for v in self.violations if not v.is_error)

    @property
    def codes(self) -> set[str]:
        return {v.code for v in self.violations}

    def strict(self) -> Report:
        """This report with every warning counted as an error (`strict=True` in `check`, `--strict` in the CLI)."""
        if not self.warnings:
            return self
        return replace(self, violations=tuple(replace(v, severity="error") for v in self.violations))

    def dims_text(self) -> str:
        return printable(", ".join(f"{k}={size} (from {src})" for k, (size, src) in self.dims.items()))

    def __str__(self) -> str:
        """The report for people: one line, then one paragraph per violation (control characters escaped)."""
        lines = [self.headline()]
        for v in self.violations:
            lines.append(f"  {v.message}")
            tail = f"count={v.count}" + (f", value={_fmt(v.value)}" if v.value is not None else "")
            lines.append(f"    [code={printable(v.code)}, {tail}]")
        if self.skipped:
            lines.append(f"  {self.skipped_text()}")
        return "\n".join(lines)

    def skipped_text(self) -> str:
        """The checks that did not run, and why: the violations above, or (with none) a size no field gives."""
        why = "because of the above" if self.violations else "(they need a size that no field of this batch gives)"
        return f"not checked {why}: {printable('; '.join(self.skipped))}"

    def headline(self) -> str:
        """`3 violations for <spec> (dims)`; with warnings among them `2 errors, 1 warning for ...`, or
        `batch is valid for <spec>, with 1 warning` when they are all warnings."""
        errors, warnings = len(self.errors), len(self.warnings)
        spec = printable(self.spec)
        if not warnings:
            head = f"{_count(errors, 'violation')} for {spec}" if errors else f"batch is valid for {spec}"
        elif errors:
            head = f"{_count(errors, 'error')}, {_count(warnings, 'warning')} for {spec}"
        else:
            head = f"batch is valid for {spec}, with {_count(warnings, 'warning')}"
        return head + (f" ({self.dims_text()})" if self.dims else "")

    def to_dict(self) -> dict[str, Any]:
        """The JSON report (`REPORT_SCHEMA`, the same as `tritoncheck scan`'s; see `report_json`)."""
        return report_json("check", self.spec, [v.to_dict() for v in self.violations], backend=self.backend,
                           dims={k: {"size": s, "from": f} for k, (s, f) in self.dims.items()},
                           skipped=list(self.skipped))

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def table(self, width: int | None = None):
        """A `rich` table of the violations, for terminals: every cell is literal `Text`, never markup.

        With `width`, no word is split: one column per item when that fits, else three (where,
        rule, found), else None (too narrow for a table).
        """
        title = self.headline()
        if width is None:
            return fitted_table(title, *self._wide_rows(), width=None)
        layouts = (self._wide_rows(), self._compact_rows())
        return next((t for cols, rows in layouts if (t := fitted_table(title, cols, rows, width)) is not None), None)

    def _wide_rows(self) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
        from rich.text import Text

        rows = []
        for v in self.violations:
            found = "" if v.value is None else _fmt(v.value)
            rows.append((Text(printable(v.location)), _code_text(v), _rule_text(v), Text(found),
                         Text(str(v.count)), Text(_samples_text(v))))
        return ("location", "code", "rule", "found", "count", "samples"), rows

    def _compact_rows(self) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
        from rich.text import Text

        rows = []
        for v in self.violations:
            where = Text(printable(v.location))
            where.append("\n")
            where.append_text(_code_text(v))
            found = [f"found {_fmt(v.value)}"] if v.value is not None else []
            found.append(f"count {v.count}")
            if v.samples:
                found.append(f"samples {_samples_text(v)}")
            rows.append((where, _rule_text(v), Text("\n".join(found))))
        return ("where", "rule", "found"), rows

    def __rich_console__(self, console: Any, options: Any) -> Any:
        """The report at the console's width: a table that splits no word, else one paragraph per violation."""
        from rich.padding import Padding
        from rich.text import Text

        if not self.violations:
            yield Text(str(self), style="green")
            return
        table = self.table(width=options.max_width)
        if table is None:  # too narrow for any table: the text form, wrapped at spaces, indents kept
            for line in str(self).splitlines():
                indent = len(line) - len(line.lstrip(" "))
                yield Padding(Text(line.lstrip(" ")), (0, 0, 0, indent))
            return
        yield table
        if self.skipped:
            yield Text(self.skipped_text())

    def _repr_html_(self) -> str:
        """The report as an HTML table, for notebooks; every piece of spec and batch text is escaped."""
        return self.html()

    def html(self, dataset_indices: Sequence[Any] = (), notes: Sequence[str] = ()) -> str:
        """The HTML table: errors on a red ground, warnings on an amber one with their severity
        spelled out; `dataset_indices` (a batch position's row in the dataset) beside each sample."""
        from html import escape

        head = escape(self.headline())
        tail = [f"<p>{escape(printable_lines(n))}</p>" for n in notes]
        if self.skipped:  # said as the text says it, with or without violations
            tail.insert(0, f"<p>{escape(self.skipped_text())}</p>")
        if not self.violations:
            return "\n".join([f"<p style='color:green'>{head}</p>", *tail])
        cells = ("severity", "location", "code", "rule", "found", "count", "samples")
        out = [f"<p><b>{head}</b></p>", "<table>", "<tr>" + "".join(f"<th style='text-align:left'>{c}</th>" for c in cells) + "</tr>"]
        for v in self.violations:
            rule = escape(printable(v.rule)) + (f"<br><i>hint: {escape(printable(v.hint))}</i>" if v.hint else "")
            found = "" if v.value is None else escape(_fmt(v.value))
            code = escape(printable(v.code)) + ("" if v.is_error else " <i>(warning)</i>")
            severity = "<b>error</b>" if v.is_error else "<b>warning</b>"
            row = (severity, escape(printable(v.location)), code, rule, found, str(v.count),
                   escape(_samples_text(v, dataset_indices)))
            style = _HTML_ERROR if v.is_error else _HTML_WARNING
            out.append(f"<tr class='tritoncheck-{v.severity if v.severity in ('error', 'warning') else 'error'}' "
                       f"style='{style}'>" + "".join(f"<td style='text-align:left'>{c}</td>" for c in row) + "</tr>")
        out.append("</table>")
        return "\n".join(out + tail)


_HTML_ERROR = "background-color:#fde2e1;color:#5c0000"  # a red ground: the step must not run
_HTML_WARNING = "background-color:#fff3cd;color:#4d3800"  # amber: a data bug the step runs through


class FailureCases(list):
    """The records of `tc.failure_cases`: a list of dicts, and a table with `to_pandas()`.

    `capped` names each check whose records stopped at `limit`: one dict per check (field, code,
    rule, listed: how many records it has here, total: how many elements fail it in all), empty
    when every failing element is listed.
    """

    COLUMNS = ("field", "code", "severity", "rule", "row", "index", "value")

    def __init__(self, records: Any = ()) -> None:
        super().__init__(records)
        self.capped: list[dict[str, Any]] = []

    def to_pandas(self) -> Any:
        """The records as a pandas DataFrame, one row per failing element (needs pandas)."""
        try:
            import pandas as pd
        except ImportError as exc:
            raise ImportError("failure_cases().to_pandas() needs pandas: pip install pandas") from exc
        return pd.DataFrame(list(self), columns=list(self.COLUMNS))


def report_json(kind: str, spec: str, violations: list[dict[str, Any]], *, unchecked: Sequence[Any] = (),
                **details: Any) -> dict[str, Any]:
    """One JSON report for `check` and `scan` (`kind`), versioned by its "schema" key (`REPORT_SCHEMA`).

    Every report has: schema, kind, spec, ok, errors and warnings (how many of `violations` are of
    each severity: "errors" always means the violations of severity error, as `report.errors`
    does), the kind's own `details` (check: backend, dims, skipped; scan: data, unit, sample
    counts, ...), violations (each as `Violation.to_dict` gives it) and unchecked (batches that
    could not be checked, each with source, offset, error and message; never any in `check`).
    `ok`: no error and nothing left unchecked.
    """
    errors = sum(v["severity"] != "warning" for v in violations)
    return {"schema": REPORT_SCHEMA, "kind": kind, "spec": spec, "ok": not errors and not unchecked,
            "errors": errors, "warnings": len(violations) - errors, **details,
            "violations": list(violations), "unchecked": list(unchecked)}


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' if n != 1 else ''}"


def _samples_text(v: Violation, dataset_indices: Sequence[Any] = ()) -> str:
    """`1, 3`; with the batch's dataset indices `1 (dataset index 17), 3 (dataset index 40)`."""
    def named(p: int) -> str:
        known = p < len(dataset_indices) and dataset_indices[p] is not None
        return f"{p} (dataset index {printable(dataset_indices[p])})" if known else str(p)

    return ", ".join(map(named, v.samples[:MAX_SAMPLES_SHOWN])) + (" ..." if len(v.samples) > MAX_SAMPLES_SHOWN else "")


def _code_text(v: Violation) -> Any:
    """The code, with `(warning)` under it for a warning: a table reader sees which rows stop a run."""
    from rich.text import Text

    text = Text(printable(v.code), style="bold")
    if not v.is_error:
        text.append("\n(warning)", style="yellow")
    return text


def _rule_text(v: Violation) -> Any:
    from rich.text import Text

    rule = Text(printable(v.rule))
    if v.hint:
        rule.append(f"\nhint: {printable(v.hint)}", style="dim")
    return rule


def fitted_table(title: str | None, columns: tuple[str, ...], rows: list[tuple[Any, ...]], width: int | None):
    """A `rich` table of `Text` cells that splits no word at `width`, or None if it cannot fit.

    Each column gets its longest word, then the narrow columns grow to their longest line and the
    widest (a rule, a description) takes what is left. `width=None`: rich's own layout.
    """
    from rich.table import Table
    from rich.text import Text

    def longest(cell: Any, words: bool) -> int:
        lines = cell.plain.split("\n")
        return max((len(w) for line in lines for w in (line.split() if words else [line])), default=0)

    widths: list[int | None] = [None] * len(columns)
    if width is not None:
        cells = [[Text(c), *(row[i] for row in rows)] for i, c in enumerate(columns)]
        mins = [max(longest(c, True) for c in col) for col in cells]
        maxs = [max(longest(c, False) for c in col) for col in cells]
        room = width - (3 * len(columns) + 1) - sum(mins)  # 2 padding + 1 border per column, 1 closing border
        if room < 0:
            return None
        widths = list(mins)
        for i in sorted(range(len(columns)), key=lambda i: maxs[i] - mins[i]):  # narrow columns first
            grow = min(room, maxs[i] - mins[i])
            widths[i] = mins[i] + grow
            room -= grow
    table = Table(title=None if title is None else Text(title), title_justify="left", show_lines=width is not None)
    for col, w in zip(columns, widths, strict=True):
        table.add_column(col, overflow="fold", width=w)
    for row in rows:
        table.add_row(*row)
    return table


class BatchValidationError(ValueError):
    """Raised by `validate` for a batch that breaks its contract; `.report` holds every violation."""

    def __init__(self, report: Report | str):
        # torch's DataLoader re-raises a worker's exception as `type(exc)(traceback_text)`, so a
        # bare message must be accepted too; the structured report is then gone (report is None).
        self.report = report if isinstance(report, Report) else None
        super().__init__(str(report))

    def errors(self) -> list[dict[str, Any]]:
        """The errors (violations of severity error, as `report.errors`) as the JSON report lists them."""
        return [] if self.report is None else [v.to_dict() for v in self.report.errors]

    def __rich__(self) -> Any:
        """In a terminal or notebook with rich: the report's table (the bare message if it was rebuilt from text)."""
        from rich.text import Text

        return self.report if self.report is not None else Text(printable_lines(str(self)))

    def _repr_html_(self) -> str:
        """In a notebook: the report as an HTML table with the dataset indices and notes (every piece
        of text escaped)."""
        from html import escape

        notes = getattr(self, "__notes__", ())
        if self.report is not None:
            return self.report.html(getattr(self, "dataset_indices", ()) or (), notes)
        return f"<pre>{escape(printable_lines(chr(10).join([str(self), *notes])))}</pre>"

    def _render_traceback_(self) -> list[str]:
        """IPython shows a raised exception through this, instead of its traceback: in a notebook
        (a Jupyter kernel) the HTML table is displayed and a one-line summary follows; in a
        terminal, the table as text. The line that raised it comes last, so it can still be found."""
        where = _raised_at(self)
        shell = _ipython()
        if getattr(shell, "kernel", None) is not None:  # a Jupyter kernel, not the terminal IPython
            from IPython.display import display

            # IPython calls this twice for one error: to show it, and to store it in the history
            # (IPython 9, _format_exception_for_storage); the table is shown once per cell run
            count = getattr(shell, "execution_count", None)
            if count is None or self.__dict__.get("_tritoncheck_shown_in") != count:
                display(self)  # text/html from _repr_html_, text/plain from repr
                self._tritoncheck_shown_in = count
            head = self.report.headline() if self.report is not None else printable((str(self).splitlines() or [""])[0])
            return [f"{type(self).__name__}: {head} (the table above)", *where]
        return [type(self).__name__ + ":", *self._terminal_lines(), *where]

    def _terminal_lines(self) -> list[str]:
        import io
        import shutil

        from rich.console import Console

        out = io.StringIO()
        console = Console(file=out, force_terminal=True, width=shutil.get_terminal_size().columns, markup=False,
                          emoji=False, highlight=False)
        console.print(self.__rich__())
        for note in getattr(self, "__notes__", ()):
            console.print(printable_lines(note))
        return out.getvalue().rstrip("\n").split("\n")

    def __reduce__(self):
        # Pickle (DataLoader workers, copy, deepcopy) rebuilds from the message text, then restores
        # every instance attribute: the report, `dataset_indices`, `__notes__`, anything set later.
        return (type(self), self.args, self.__dict__)


BatchValidationError.__module__ = "tritoncheck"


def _ipython() -> Any:
    """The running IPython shell, or None (IPython is only imported where it already is)."""
    import sys

    module = sys.modules.get("IPython")
    return None if module is None else module.get_ipython()


def _raised_at(exc: BaseException) -> list[str]:
    """Where the user's code raised or called into tritoncheck: the last frame outside this package
    and installed libraries (the DataLoader's own frames say nothing about which loop it was)."""
    import os
    import sysconfig
    import traceback

    paths = sysconfig.get_paths()
    libraries = [os.path.dirname(os.path.abspath(__file__)), *{paths[k] for k in ("purelib", "platlib", "stdlib")}]
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not any(os.path.abspath(f.filename).startswith(lib + os.sep) for lib in libraries)]
    if not frames:
        return []
    f = frames[-1]
    return [printable(f'  File "{f.filename}", line {f.lineno}, in {f.name}')] + (
        [printable(f"    {f.line}")] if f.line else [])


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return _float_text(value)
    return printable(value)


def _float_text(value: float) -> str:
    """The shortest text, 6 digits or more, that reads back as `value` (as an fp32 where it is one:
    the data's dtype is not known here). Six digits alone print fp32 1.0000001 past `<= 1` as `1`."""
    import struct

    try:
        as32 = struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:
        as32 = None
    for digits in range(6, 18):
        text = f"{value:.{digits}g}"
        back = float(text)
        if back == value or (as32 == value and struct.unpack("f", struct.pack("f", back))[0] == value):
            return text
    return repr(value)  # nan and inf


def jsonable(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, (int, float, bool, str)) or value is None:
        return value
    return str(value)


def batch_coordinates(plan: Any) -> dict[tuple[str, str, int], int]:
    """Per (field, code, index length): where a violation's index holds its batch coordinate, where that is
    certain: every check of that field and code whose index has that length iterates the same axes, the batch dim
    among them. A caller that moves many violations makes it once (per violation, 10,000 bad rows of a scan took
    0.1 s)."""
    axes: dict[tuple[str, str, int], set[tuple[str, ...]]] = defaultdict(set)
    for c in plan.checks:
        axes[(c.field, c.code, len(c.axes))].add(c.axes)
    return {key: only.index(plan.batch_dim) for key, found in axes.items() if len(found) == 1
            for only in found if plan.batch_dim in only}


def moved(v: Violation, place: Callable[[int], int], coordinates: Mapping[tuple[str, str, int], int]) -> Violation:
    """`v` with each of its samples `p` at `place(p)`, and its index's batch coordinate too where `coordinates`
    (`batch_coordinates`) says where it is; an index whose batch coordinate is not certain is dropped rather than
    left counting from the batch it was found in."""
    if not v.samples or all(place(s) == s for s in v.samples):
        return v
    index = v.index
    if index is not None:
        k = coordinates.get((v.field, v.code, len(index)))
        index = None if k is None else index[:k] + (place(index[k]),) + index[k + 1:]
    return replace(v, samples=tuple(dict.fromkeys(map(place, v.samples))), index=index)
