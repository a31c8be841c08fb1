"""`check` and `validate`: bind the batch on the host, then run the data checks on a backend."""

from __future__ import annotations

import os
from typing import Any, Literal

from . import _torch_backend
from ._plan import bind, compile_plan
from ._report import BatchValidationError, Report, Violation
from ._spec import BatchSpec, SpecError

Backend = Literal["auto", "torch", "triton"]


def check(batch: Any, spec: BatchSpec, *, backend: Backend = "auto") -> Report:
    """Check `batch` against `spec` and return a `Report`; never raises for bad data.

    Args:
        batch: a mapping of field name to tensor (numpy arrays are viewed without a copy).
        spec: a `BatchSpec` with its parameters filled (see `load_spec`).
        backend: "torch" (reference; CPU or CUDA), "triton" (one fused kernel launch), or "auto":
            Triton for CUDA tensors, torch otherwise.
    """
    if not isinstance(spec, BatchSpec):
        raise TypeError(f"spec must be a BatchSpec (from tc.load_spec or tc.spec_for), got {type(spec).__name__}")
    plan, bound, chosen = prepare(batch, spec, backend)
    if chosen == "triton":
        from ._triton import backend as triton_backend

        data = triton_backend.run(plan, bound)
    else:
        data = _torch_backend.run(plan, bound)
    return Report(plan.spec_name, tuple(bound.violations + data), dict(bound.dims), tuple(bound.skipped), chosen)


def validate(batch: Any, spec: BatchSpec, *, backend: Backend = "auto", group: Any = None, deferred: bool = False) -> Any:
    """Return `batch` unchanged if it satisfies `spec`; otherwise raise `BatchValidationError`.

    Args:
        group: a torch.distributed process group (or `True` for the default group). The verdict
            is agreed across its ranks, so when any rank's batch is bad every rank raises and
            none is left waiting in the next collective. Every rank must call `validate`.
        deferred: check the batch and return at once, without waiting for the GPU; a bad batch
            raises at the next deferred `validate` (of any spec) or at `tc.wait()`, naming the
            step it was submitted at (see `tritoncheck/_triton/deferred.py`).

    `TRITONCHECK_DISABLE=1` in the environment turns validation off (the batch is returned as is).
    """
    if disabled():
        return batch
    if group is not None:
        require_process_group(group)
    if deferred:
        if not isinstance(spec, BatchSpec):
            raise TypeError(f"spec must be a BatchSpec (from tc.load_spec or tc.spec_for), got {type(spec).__name__}")
        from ._triton import deferred as _deferred

        return _deferred.submit(batch, spec, backend=backend, group=group)
    report = check(batch, spec, backend=backend)
    if group is not None:
        report = agree(report, group)
    if not report.ok:
        raise BatchValidationError(report)
    return batch


def disabled() -> bool:
    """True when TRITONCHECK_DISABLE=1: every check is off."""
    return os.environ.get("TRITONCHECK_DISABLE") == "1"


def require_process_group(group: Any) -> None:
    """`group=` agrees the verdict through torch.distributed: say how to set it up before any collective.

    A RuntimeError, not a ValueError: code that catches bad data (BatchValidationError is a
    ValueError) must not swallow a setup mistake.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError(f"group={group!r} agrees the verdict across ranks through torch.distributed, which is not "
                           "initialised in this process: call torch.distributed.init_process_group(...) on every rank "
                           "first, or leave group=None in a single process")


def agree(report: Report, group: Any) -> Report:
    """All-reduce the verdict; a rank whose own batch is fine reports the ranks that failed."""
    import torch
    import torch.distributed as dist

    require_process_group(group)

    pg = None if group is True else group
    world = dist.get_world_size(pg)
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend(pg) == "nccl" else torch.device("cpu")
    flags = torch.zeros(world, dtype=torch.int32, device=device)
    flags[dist.get_rank(pg)] = 0 if report.ok else 1
    dist.all_reduce(flags, group=pg)
    bad_ranks = [r for r, f in enumerate(flags.tolist()) if f]
    if not bad_ranks or not report.ok:
        return report
    note = Violation("<batch>", "rank_failed", f"the batch on rank(s) {bad_ranks} broke the contract; stopping every rank together",
                     value=bad_ranks)
    return Report(report.spec, (note,), report.dims, report.skipped, report.backend)


def prepare(batch: Any, spec: BatchSpec, backend: Backend):
    """Compile the plan, run the host checks, and pick the backend for the data checks."""
    if backend not in ("auto", "torch", "triton"):
        raise ValueError(f"backend must be 'auto', 'torch' or 'triton', got {backend!r}")
    plan = compile_plan(spec)
    bound = bind(plan, batch)
    chosen = backend
    if backend == "auto":
        on_cuda = any(t.is_cuda for t in bound.tensors.values())
        chosen = "triton" if on_cuda and _triton_available() else "torch"
    return plan, bound, chosen


def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


__all__ = ["check", "validate", "SpecError"]
