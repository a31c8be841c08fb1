"""Deferred validation: launch now, read the verdict later, so the host never waits on the GPU.

`tc.validate(batch, spec, deferred=True)` checks the batch and returns it at once. Each call is one
*step*: submissions are numbered from 0 in this process (with one deferred validate per training
step, the number is the loop's step). Verdicts wait in one first-in, first-out queue, whatever
their spec. The next deferred `validate` (of any spec) first checks its own batch, then reads every
earlier verdict that is ready and raises `BatchValidationError` for the earliest bad one; `tc.wait()`
waits for all of them and does the same. Every submitted batch is checked, and every bad verdict
is raised exactly once: one error per bad batch, the rest stay queued for the next call. The error
names its step in a note ("batch submitted at step 17 (deferred)") and in `exc.step`.

What a queued verdict holds:
- computed at once (the torch backend, or Triton's interpreter on CPU): only the `Report`; the
  batch is not kept alive. Such a verdict is queued like any other, but a bad one is not silent:
  `submit` warns at once (a `UserWarning` naming the step and the first error), since the caller
  goes on with the batch before the error is raised. To stop a bad CPU batch where it is, validate
  it with `deferred=False` (`tc.guard(deferred=True)` does so for inputs on no CUDA device).
- launched on CUDA: the launch (its bound tensors and result buffer) until its event has completed
  and the verdict has been read at the next deferred `validate` or `tc.wait()`; reading it needs
  the tensors to name the first offending value. It never blocks: an unfinished launch stays
  queued. Then only the `Report` is kept, and only if the batch was bad.
With `group` (torch.distributed), the verdict is agreed across ranks at the next deferred call,
blocking if needed, so that every rank runs the same collectives in the same order.
"""

from __future__ import annotations

import itertools
import threading
import warnings
from collections.abc import Callable
from typing import Any

from tritoncheck.api import core
from tritoncheck.report import BatchValidationError, Report

_lock = threading.Lock()  # guards the queue, and reading verdicts, so each is read and raised once
_steps = itertools.count()
_queue: list[_Entry] = []  # in submission order


class _Entry:
    """One submitted batch: its step and its verdict, or what is still needed to settle it.

    `report` is the local verdict once known; `finish` (CUDA) reads it from the launch; `group`
    is cleared once the verdict has been agreed across ranks. Settled: `finish` and `group` None.
    """

    __slots__ = ("step", "report", "finish", "event", "group")

    def __init__(self, step: int, report: Report | None, finish: Callable[[], Report] | None, event: Any, group: Any):
        self.step, self.report, self.finish, self.event, self.group = step, report, finish, event, group


def submit(batch: Any, spec: Any, *, backend: str = "auto", group: Any = None, strict: bool = False) -> Any:
    """Check this batch (its verdict is queued), then raise for the earliest bad earlier batch.

    `strict` counts warnings as errors in this batch's verdict (`Report.strict`), as `check` does.
    """
    started = core.warm_start(batch, spec, backend, strict)  # a Triton batch of a signature seen: no bind
    if started is not None:
        event, finish = started
        done = None
        if event is None:  # (the CPU interpreter: the verdict is known now)
            done, finish = finish(), None
    else:
        done, finish, event = _launch(batch, spec, backend, strict)
    with _lock:
        earlier = len(_queue)
        step = next(_steps)
        _queue.append(_Entry(step, done, finish, event, group))
        if earlier:
            _raise_earliest(_queue[:earlier], block=False)
    if done is not None and not done.ok:  # (outside the lock: under -W error the warning raises, the queue is whole)
        _warn_bad_now(done, step)
    return batch


def _warn_bad_now(report: Report, step: int) -> None:
    """A verdict known at submission (no GPU launch to wait for) that is bad: say so now, before the caller
    hands the batch on; it still raises at the next deferred validate or `tc.wait()`."""
    first = report.errors[0]
    more = f" and {len(report.errors) - 1} more" if len(report.errors) > 1 else ""
    warnings.warn(
        f"tc.validate(deferred=True): the batch of step {step} is bad for {report.spec} ({first.location}: "
        f"{first.code}{more}); its verdict was known at once (checked on the host, no kernel launch to wait for), "
        "and raises at the next deferred validate or tc.wait(); validate with deferred=False to stop a bad batch "
        "before it is used",
        stacklevel=4,
    )


def _launch(batch: Any, spec: Any, backend: str, strict: bool) -> tuple[Report | None, Callable[[], Report] | None, Any]:
    """Bind the batch and check it, or launch its Triton check: (the report, or how to read it and the
    event it waits for). A Triton launch lets the next batch of its signature take the warm path."""
    plan, bound, chosen = core.prepare(batch, spec, backend)

    def report(data: list, ran: str = chosen) -> Report:
        out = Report(plan.spec_name, tuple(bound.violations + data), dict(bound.dims), tuple(bound.skipped), ran)
        return out.strict() if strict else out

    if chosen != "triton":
        return report(*core.run_data_checks(plan, bound, chosen)), None, None
    from tritoncheck.backends import triton as triton_backend

    pending = triton_backend.launch(plan, bound)
    if pending.backend == "triton" and bound.runnable:
        core.remember(spec, plan, batch, bound, backend, "triton", strict)
    if pending.event is None:  # nothing to wait for (the CPU interpreter, or no data checks)
        return report(pending.result(), pending.backend), None, None
    return None, lambda: report(pending.result(), pending.backend), pending.event


def wait() -> None:
    """Read every queued verdict (waiting for the GPU); raise for the earliest bad batch."""
    with _lock:
        _raise_earliest(list(_queue), block=True)


def _raise_earliest(entries: list[_Entry], *, block: bool) -> None:
    """Settle the `entries` that are ready (all, with `block`), drop the good ones, raise for the first bad one.

    Called with `_lock` held; `entries` are in `_queue`, oldest first.
    """
    bad: list[_Entry] = []
    for entry in entries:
        if entry.finish is not None or entry.group is not None:  # (not settled)
            # ready: settling it now would not block the host (a group must settle at the next call on every rank)
            if not block and entry.group is None and entry.event is not None and not entry.event.query():
                continue
            _settle(entry)
        report = entry.report
        if not report.violations:  # (the common case, read first)
            _queue.remove(entry)
        elif report.ok:
            core.log_warnings(report)  # as a synchronous validate logs a passing batch's warnings
            _queue.remove(entry)
        else:
            if not bad:
                _queue.remove(entry)
            bad.append(entry)
    if bad:
        first = bad[0]
        exc = BatchValidationError(first.report)
        exc.step = first.step  # type: ignore[attr-defined]
        exc.add_note(f"batch submitted at step {first.step} (deferred)")
        if len(bad) > 1:
            steps = ", ".join(str(e.step) for e in bad[1:])
            exc.add_note(f"the batches submitted at steps {steps} were bad too; each raises at the next deferred validate or tc.wait()")
        raise exc


def _settle(entry: _Entry) -> None:
    """Read a launched check's verdict (freeing the launch) and agree on it across ranks."""
    try:
        if entry.finish is not None:
            entry.report, entry.finish, entry.event = entry.finish(), None, None
        if entry.group is not None:
            entry.report, entry.group = core.agree(entry.report, entry.group), None
    except BaseException as exc:  # an internal error: raised once, not again at every later call
        _queue.remove(entry)
        exc.add_note(f"while reading the verdict of the batch submitted at step {entry.step} (deferred)")
        raise
