"""The calls a training loop makes: `check`, `validate` (at once, deferred, or inside a compiled step),
`warmup` and `failure_cases`; the rest of the package reaches the checker through these names."""

from __future__ import annotations

from typing import Any

import torch

from tritoncheck.api import deferred as deferred_mode
from tritoncheck.api.core import (
    BACKENDS,
    Backend,
    agree,
    check,
    disabled,
    failure_cases,
    log_warnings,
    require_process_group,
    warmup,
)
from tritoncheck.report import BatchValidationError
from tritoncheck.spec.schema import BatchSpec


def validate(batch: Any, spec: BatchSpec, *, backend: Backend = "auto", group: Any = None, deferred: bool = False,
             strict: bool = False) -> Any:
    """Return `batch` unchanged if it has no errors against `spec`; otherwise raise `BatchValidationError`.

    Warnings (data bugs the model runs through) do not raise: each (spec, field, code) is logged
    once per process on the `tritoncheck` logger, its repeats at DEBUG. `strict=True` raises for
    them too.

    Args:
        group: a torch.distributed process group (or `True` for the default group). The verdict
            is agreed across its ranks, so when any rank's batch is bad every rank raises and
            none is left waiting in the next collective. Every rank must call `validate`.
        deferred: check the batch and return at once, without waiting for the GPU; a bad batch
            raises at the next deferred `validate` (of any spec) or at `tc.wait()`, naming the
            step it was submitted at (see `tritoncheck/api/deferred.py`). A bad batch whose verdict is
            known at once (CPU tensors) also warns at once, naming its step.

    Inside a `torch.compile`d function (`fullgraph=True` included) the check is one custom op that
    runs at every call of the compiled code, without a graph break (`tritoncheck/api/graph_op.py`).

    `TRITONCHECK_DISABLE=1` in the environment turns validation off (the batch is returned as is).
    """
    if disabled():
        return batch
    if torch.compiler.is_compiling():  # inside a torch.compile'd step: one custom op, no graph break
        if not isinstance(spec, BatchSpec):
            raise TypeError(f"spec must be a BatchSpec (from tc.load_spec or tc.spec_for), got {type(spec).__name__}")
        from tritoncheck.api import graph_op

        return graph_op.validate(batch, spec, eager=validate, backend=backend, group=group, deferred=deferred,
                                 strict=strict)
    if group is not None:
        require_process_group(group)
    if deferred:
        if not isinstance(spec, BatchSpec):
            raise TypeError(f"spec must be a BatchSpec (from tc.load_spec or tc.spec_for), got {type(spec).__name__}")
        return deferred_mode.submit(batch, spec, backend=backend, group=group, strict=strict)
    report = check(batch, spec, backend=backend, strict=strict)
    if group is not None:
        report = agree(report, group)
    if not report.ok:
        raise BatchValidationError(report)
    if report.violations:
        log_warnings(report)
    return batch


__all__ = ["BACKENDS", "Backend", "agree", "check", "disabled", "failure_cases", "log_warnings", "validate", "warmup"]
