"""Deferred validation: launch now, read the verdict later, so the host never waits on the GPU.

`tc.validate(batch, spec, deferred=True)` launches the checks and returns the batch at once (on
CUDA the result buffer is copied to pinned memory with a non-blocking copy and an event). The
verdict is read at the next deferred `validate` with the same spec, or at `tc.wait()`; a bad
batch raises `BatchValidationError` then, with its full report. On CPU the checks run at once,
but the raise is still deferred, so code behaves the same on both.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from .._report import BatchValidationError, Report

_lock = threading.Lock()
_pending: dict[int, tuple[Any, Callable[[], Report], Any]] = {}  # id(spec) -> (spec, finish, group)


def submit(batch: Any, spec: Any, *, backend: str = "auto", group: Any = None) -> Any:
    """Raise for the previous batch of `spec` if it was bad; launch the checks of this one."""
    from .. import _api, _torch_backend

    _resolve(_take(id(spec)))
    plan, bound, chosen = _api.prepare(batch, spec, backend)
    if chosen == "triton":
        from . import backend as triton_backend

        pending = triton_backend.launch(plan, bound)
        result = pending.result
    else:
        data = _torch_backend.run(plan, bound)

        def result() -> list:
            return data

    def finish() -> Report:
        return Report(plan.spec_name, tuple(bound.violations + result()), dict(bound.dims), tuple(bound.skipped), chosen)

    with _lock:
        _pending[id(spec)] = (spec, finish, group)
    return batch


def wait() -> None:
    """Read every pending verdict; raise BatchValidationError for the first bad batch."""
    with _lock:
        entries = list(_pending.values())
        _pending.clear()
    errors = []
    for entry in entries:
        try:
            _resolve(entry)
        except BatchValidationError as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


def _take(key: int) -> tuple | None:
    with _lock:
        return _pending.pop(key, None)


def _resolve(entry: tuple | None) -> None:
    if entry is None:
        return
    from .. import _api

    _spec, finish, group = entry
    report = finish()
    if group is not None:
        report = _api._agree(report, group)
    if not report.ok:
        raise BatchValidationError(report)
