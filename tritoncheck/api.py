"""`check` and `validate`: bind the batch on the host, then run the data checks on a backend."""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Sequence
from typing import Any, Literal

from tritoncheck.backends import torch as _torch_backend
from tritoncheck.backends import codecache as build
from tritoncheck.plan.lower import bind, compile_plan
from tritoncheck.report import MAX_SAMPLES_SHOWN, BatchValidationError, Report, Violation, printable
from tritoncheck.spec.schema import BatchSpec, SpecError

Backend = Literal["auto", "torch", "c", "triton"]
BACKENDS = ("auto", "torch", "c", "triton")
logger = logging.getLogger("tritoncheck")


def check(batch: Any, spec: BatchSpec, *, backend: Backend = "auto", strict: bool = False) -> Report:
    """Check `batch` against `spec` and return a `Report`; never raises for bad data.

    Args:
        batch: a mapping of field name to tensor (numpy arrays are viewed without a copy).
        spec: a `BatchSpec` with its parameters filled (see `load_spec`).
        backend: "torch" (the reference; CPU or CUDA), "c" (the contract compiled to one C
            function; CPU tensors), "triton" (one fused kernel launch; CUDA tensors), or "auto":
            Triton for CUDA tensors, C for CPU tensors where a C compiler exists, torch
            otherwise. A compiled backend that cannot take a plan hands it to torch with one
            warning; `report.backend` always names the backend that ran.
        strict: count warnings (data bugs the model runs through, such as a box past the
            documented 0..1000 grid) as errors, so that `report.ok` is False for them too.
    """
    if not isinstance(spec, BatchSpec):
        raise TypeError(f"spec must be a BatchSpec (from tc.load_spec or tc.spec_for), got {type(spec).__name__}")
    plan, bound, chosen = prepare(batch, spec, backend)
    data, ran = run_data_checks(plan, bound, chosen)
    report = Report(plan.spec_name, tuple(bound.violations + data), dict(bound.dims), tuple(bound.skipped), ran)
    return report.strict() if strict else report


def run_data_checks(plan: Any, bound: Any, chosen: str) -> tuple[list[Violation], str]:
    """The data checks on `chosen`, or on torch when a compiled backend cannot take them: (violations, backend that ran)."""
    if chosen == "c":
        from tritoncheck.backends import c as c_backend
        from tritoncheck.kernel import ir
        try:
            return c_backend.run(plan, bound), "c"
        except (ir.Unsupported, build.CompileError) as exc:
            _warn_fallback("c", exc)
    elif chosen == "triton":
        from tritoncheck.backends import triton as triton_backend
        pending = triton_backend.launch(plan, bound)
        return pending.result(), pending.backend  # "torch" where the kernel could not take the plan
    return _torch_backend.run(plan, bound), "torch"


_warned: set[tuple[str, str]] = set()


def _warn_fallback(backend: str, exc: BaseException) -> None:
    """Say once per process and reason that a compiled backend handed a plan to the torch backend."""
    key = (backend, type(exc).__name__)
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"tritoncheck: the {backend} backend cannot check this batch ({exc}); "
                      "the torch backend checks it instead (same verdicts, slower)", RuntimeWarning, stacklevel=4)


def warmup(spec: BatchSpec, batch: Any = None, *, backend: Backend = "auto") -> str:
    """Compile the contract's kernel now, e.g. in the parent before DataLoader workers fork.

    Forked workers inherit the compiled kernel, and spawned ones find it in the on-disk cache, so
    the first batch in each worker costs a check, not a compile. Give a real `batch` (say, the
    first one) where the data's dtypes may differ from the spec's likeliest ones; without one, a
    zero batch of each field's likeliest dtype stands in, once for every combination of the
    optional fields present (at most `MAX_WARMUP_KERNELS`; beyond that, all and none of them).
    Returns the backend that will check such a batch.
    """
    if batch is not None:
        return check(batch, spec, backend=backend).backend
    optional = [f.name for f in compile_plan(spec).fields if f.optional]
    if 2 ** len(optional) <= MAX_WARMUP_KERNELS:
        subsets = [{n for i, n in enumerate(optional) if mask >> i & 1} for mask in range(2 ** len(optional))]
    else:
        subsets = [set(), set(optional)]
    for present in subsets:
        ran = check(example_batch(spec, present), spec, backend=backend).backend
    return ran


MAX_WARMUP_KERNELS = 4  # each cold compile costs 0.1-0.4 s of CPU: warm the likeliest few


def example_batch(spec: BatchSpec, optional: set[str] | None = None, dim_size: int = 8) -> dict[str, Any]:
    """A zero batch of `spec`'s required fields and the `optional` ones named (all, if None).

    Each field takes its likeliest dtype (int64, float32, bool, else the first listed), and every
    dim is `dim_size` long.
    """
    import torch

    plan = compile_plan(spec)
    likely = (torch.int64, torch.float32, torch.bool)
    out = {}
    for f in plan.fields:
        if f.optional and optional is not None and f.name not in optional:
            continue
        dtype = next((d for d in likely if d in f.dtypes), f.dtypes[0])
        out[f.name] = torch.zeros([s if isinstance(s, int) else dim_size for s in f.shape], dtype=dtype)
    return out


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
            step it was submitted at (see `tritoncheck/backends/deferred.py`).

    Inside a `torch.compile`d function (`fullgraph=True` included) the check is one custom op that
    runs at every call of the compiled code, without a graph break (`tritoncheck/backends/graph_op.py`).

    `TRITONCHECK_DISABLE=1` in the environment turns validation off (the batch is returned as is).
    """
    if disabled():
        return batch
    if _compiling():  # inside a torch.compile'd step: one custom op, no graph break
        if not isinstance(spec, BatchSpec):
            raise TypeError(f"spec must be a BatchSpec (from tc.load_spec or tc.spec_for), got {type(spec).__name__}")
        from tritoncheck.backends import graph_op

        return graph_op.validate(batch, spec, backend=backend, group=group, deferred=deferred, strict=strict)
    if group is not None:
        require_process_group(group)
    if deferred:
        if not isinstance(spec, BatchSpec):
            raise TypeError(f"spec must be a BatchSpec (from tc.load_spec or tc.spec_for), got {type(spec).__name__}")
        from tritoncheck.backends import deferred as _deferred
        return _deferred.submit(batch, spec, backend=backend, group=group, strict=strict)
    report = check(batch, spec, backend=backend, strict=strict)
    if group is not None:
        report = agree(report, group)
    if not report.ok:
        raise BatchValidationError(report)
    if report.violations:
        log_warnings(report)
    return batch


_logged: set[tuple[str, str, str]] = set()


def log_warnings(report: Report, dataset_indices: Sequence[Any] = ()) -> None:
    """Log a passing report's warnings: the first of each (spec, field, code) at WARNING, repeats at DEBUG.

    `dataset_indices` gives each batch position's index in the dataset, where the loader knows it
    (`tc.IndexedDataset`); each warning then names the dataset indices of its samples too.
    """
    for v in report.warnings:
        key = (report.spec, v.field, v.code)
        level = logging.DEBUG if key in _logged else logging.WARNING
        _logged.add(key)
        logger.log(level, "%s: %s%s", report.spec, _with_dataset_indices(v, dataset_indices),
                   "" if level == logging.DEBUG else " (repeats of this warning are logged at DEBUG)")


def _with_dataset_indices(v: Violation, dataset_indices: Sequence[Any]) -> str:
    """`v.message`, its first line ending in the dataset indices of the samples it names where all are known:
    `...; 1 element(s) in sample(s) 999 (dataset index 1999)`."""
    shown = v.samples[:MAX_SAMPLES_SHOWN]
    if not shown or not all(p < len(dataset_indices) and dataset_indices[p] is not None for p in shown):
        return v.message
    first, newline, rest = v.message.partition("\n")  # the samples end the first line; a hint follows
    named = ", ".join(printable(repr(dataset_indices[p])) for p in shown)
    more = ", ..." if len(v.samples) > len(shown) else ""
    return f"{first} (dataset {'index' if len(v.samples) == 1 else 'indices'} {named}{more}){newline}{rest}"


def _compiling() -> bool:
    """True while torch.compile (Dynamo) traces the caller."""
    import torch

    return torch.compiler.is_compiling()


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
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    plan = compile_plan(spec)
    bound = bind(plan, batch)
    chosen = backend
    if backend == "auto":
        on_cuda = any(t.is_cuda for t in bound.tensors.values())
        if on_cuda:
            chosen = "triton" if _triton_available() else "torch"
        else:
            chosen = "c" if _c_available() else "torch"
    elif backend == "c" and not _c_available():
        chosen = "torch"
    return plan, bound, chosen


def _c_available() -> bool:
    """A C compiler exists; if not, say once that the torch backend checks CPU batches."""
    if build.compiler() is not None:  # cached: a warm check pays a dict lookup
        return True
    _warn_fallback("c", build.CompileError("no C compiler (cc, gcc or the Python build's CC) on PATH"))
    return False


def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


__all__ = ["check", "validate", "warmup", "SpecError"]
