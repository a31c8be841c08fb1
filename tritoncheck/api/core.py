"""`check`: bind the batch on the host, then run the data checks on a backend; and what `validate`,
deferred mode and `failure_cases` share with it (backend choice, warnings logged once, the verdict agreed
across ranks).

A C or Triton check of a batch with the signature of the spec's last such check takes the warm path
(`_warm_check`, `_warm_triton`): no `bind`, the compiled program called (C) or the compiled kernel
launched (Triton) with the batch's data pointers, and for a batch whose data pass one shared
(immutable) report; about 2 us for a few small fields on C.
"""

from __future__ import annotations

import itertools
import logging
import math
import operator
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal, NamedTuple

import torch

from tritoncheck.backends import torch as _torch_backend
from tritoncheck.backends import BACKENDS
from tritoncheck.backends import c as c_backend
from tritoncheck.backends import codecache as build
from tritoncheck.checks.registry import message
from tritoncheck.kernel.ir import Unsupported
from tritoncheck.plan import lower
from tritoncheck.plan.lower import NO_KEY, RuleCheck, bind, compile_plan, seen, signature_guard
from tritoncheck.report import MAX_SAMPLES_SHOWN, BatchValidationError, Dims, FailureCases, Report, Violation, jsonable, printable
from tritoncheck.spec.schema import BatchSpec, SpecError

Backend = Literal["auto", "torch", "c", "triton"]
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

    Raises:
        UncheckableBatchError: a rule's exact verdict would walk far more positions than the
            batch stores (an expanded view, e.g. `arange` summed along a stride-0 dim); every backend
            refuses it alike, at once, and the message names the rule (docs/security.md).
    """
    warm = _warm.get(id(spec))  # (found: `spec` is the entry's, which keeps it alive)
    key = NO_KEY
    if warm is not None and warm.backend == backend and warm.strict == strict:
        report = warm.run(batch)
        if report is not None:
            return report
        # another signature: one seen before has a warm check of its own (dynamic padding: one per length)
        key, pair = _seen_warm(warm, batch)
        report = None if pair is None else pair[0](batch)
        if report is not None:
            _warm[id(spec)] = Warm(backend, strict, warm.ran, *pair, spec, warm.plan)
            return report
    if not isinstance(spec, BatchSpec):
        raise TypeError(f"spec must be a BatchSpec (from tc.load_spec or tc.spec_for), got {type(spec).__name__}")
    plan, bound, chosen = prepare(batch, spec, backend, key)
    data, ran = run_data_checks(plan, bound, chosen)
    if ran in WARM_BACKENDS and bound.runnable:
        remember(spec, plan, batch, bound, backend, ran, strict)
    return _report(plan, bound, data, ran, strict)


def warm_start(batch: Any, spec: BatchSpec, backend: str, strict: bool) -> tuple[Any, Callable[[], Report]] | None:
    """Launch the Triton check of a batch with a signature of the spec's warm entry (deferred mode):
    (the event its verdict waits for, or None when it is known already; a call that returns its
    report), or None where the batch takes the full path (`bind`, then a launch)."""
    warm = _warm.get(id(spec))
    if warm is None or warm.start is None or warm.backend != backend or warm.strict != strict:
        return None
    started = warm.start(batch)
    if started is None:  # dynamic padding: the warm launch of a signature seen before
        _, pair = _seen_warm(warm, batch)
        started = None if pair is None else pair[1](batch)
        if started is not None:
            _warm[id(spec)] = Warm(backend, strict, warm.ran, *pair, spec, warm.plan)
    return started


def _seen_warm(warm: Warm, batch: Any) -> tuple[Any, tuple[Callable, Callable] | None]:
    """(bind's key of the batch's signature, the warm (check, start) pair kept for it, if any)."""
    key, memo = seen(warm.plan, batch)
    return key, None if memo is None else memo.get(("warm", warm.ran, warm.strict))


def _report(plan: Any, bound: Any, data: list[Violation], ran: str, strict: bool) -> Report:
    report = Report(plan.spec_name, tuple(bound.violations + data), Dims(bound.dims), tuple(bound.skipped), ran)
    return report.strict() if strict else report


def _warm_check(plan: Any, guard: Callable[[Any], tuple | None], bound: Any, strict: bool) -> Callable[[Any], Report | None]:
    """`run(batch)`: the C check of a batch of `bound`'s signature (`guard` says which), or None for another
    signature. It reuses the program's prepared call and, for a batch whose data checks pass, one report: it
    binds nothing and builds no `Bound`, except to decode what the kernel found."""
    program, call, launch = bound.memo["c"], bound.memo["c_call"], bound.memo["c_launch"]
    n = len(program.ptr_fields)  # the guard returns those fields' tensors first
    passed = _report(plan, bound, [], "c", strict)

    def run(batch: Any) -> Report | None:
        tensors = guard(batch)
        if tensors is None:
            return None
        out = launch(list(map(_data_ptr, tensors[:n])))
        if out is None:
            return passed  # (immutable: its dims are `Dims`)
        bound = bind(plan, batch)  # (a signature seen: `bind` replays its verdict)
        return _report(plan, bound, program.decoded(out, call, bound), "c", strict)

    return run


def _warm_triton(plan: Any, guard: Callable[[Any], tuple | None], bound: Any,
                 strict: bool) -> tuple[Callable[[Any], Report | None], Callable[[Any], Any]]:
    """(`run(batch)`, `start(batch)`): the Triton check of a batch of `bound`'s signature, blocking (a
    `Report`) or launched (`warm_start`'s pair), or None for another signature. The guard's tensors go
    straight to the signature's launch (`triton.start`); a batch whose data pass gets one shared report;
    the batch is bound only to decode what the kernel found (deferred: the batch as it was submitted,
    a shallow copy, so a dict refilled for the next step is not the one decoded)."""
    from tritoncheck.backends import triton as triton_backend

    memo = bound.memo
    n = len(memo["triton"][0].fields)  # the guard returns the launch's fields first, in its order
    passed = _report(plan, bound, [], "triton", strict)

    def verdict(pending: Any) -> Report:
        data = pending.result()
        return passed if not data else _report(plan, pending.bound, data, "triton", strict)

    def run(batch: Any) -> Report | None:
        tensors = guard(batch)
        if tensors is None:
            return None
        return verdict(triton_backend.start(memo, tensors[:n], lambda: bind(plan, batch)))

    def start(batch: Any) -> tuple[Any, Callable[[], Report]] | None:
        tensors = guard(batch)
        if tensors is None:
            return None
        submitted = dict(batch)
        pending = triton_backend.start(memo, tensors[:n], lambda: bind(plan, submitted))
        return pending.event, lambda: verdict(pending)

    return run, start


class Warm(NamedTuple):
    """A spec's warm entry: the backend and strictness its last compiled check was asked for, the backend
    that ran it, that signature's warm check (`run`) and, for Triton, warm launch (`start`), the spec (kept
    alive: its id stays its own) and its plan."""

    backend: str
    strict: bool
    ran: str
    run: Callable[[Any], Report | None]
    start: Callable[[Any], Any] | None
    spec: BatchSpec
    plan: Any


WARM_BACKENDS = ("c", "triton")
_warm: dict[int, Warm] = {}  # id(spec) -> its warm entry
_warm_lock = threading.Lock()
_data_ptr = torch.Tensor.data_ptr


def _same_data(a: torch.Tensor, b: torch.Tensor) -> bool:
    return _data_ptr(a) == _data_ptr(b)


def remember(spec: BatchSpec, plan: Any, batch: Any, bound: Any, backend: str, ran: str, strict: bool) -> None:
    """Let the next check of `spec` on a batch of this one's signature take the warm path, where it can: a dict
    whose signature `bind` keys, every field a tensor read where `bind` left it (C: no copy, no view that moves
    its data pointer; Triton: the very tensor, since a launch through Triton's JIT reads its dtype and strides).
    What it needs is made once per signature and backend, in `bound.memo`."""
    memo = bound.memo
    if ("guard", ran) not in memo:
        if ran == "c":  # (ran is one of WARM_BACKENDS)
            program = memo.get("c")
            fields, same = program and program.ptr_fields, _same_data
        else:
            launch = memo.get("triton", (None,))[0]
            fields, same = launch and launch.fields, operator.is_
        guard = None if fields is None else signature_guard(plan, batch, fields)
        if guard is not None and not all(same(batch[f], bound.tensors[f]) for f in fields):
            guard = None
        memo[("guard", ran)] = guard
    guard = memo[("guard", ran)]
    if guard is None or (ran == "c" and "c_launch" not in memo):
        return
    pair = memo.get(("warm", ran, strict))
    if pair is None:
        pair = (_warm_check(plan, guard, bound, strict), None) if ran == "c" else _warm_triton(plan, guard, bound, strict)
        memo[("warm", ran, strict)] = pair
    # bounded by the plans' own bound, read now (a warm entry keeps its plan, and so its library, alive)
    if id(spec) not in _warm and len(_warm) >= lower.MAX_PLANS:
        with _warm_lock:
            _warm.pop(next(iter(_warm)), None)  # oldest first
    _warm[id(spec)] = Warm(backend, strict, ran, *pair, spec, plan)  # (the entry keeps its spec alive: the id stays its own)


def run_data_checks(plan: Any, bound: Any, chosen: str) -> tuple[list[Violation], str]:
    """The data checks on `chosen`, or on torch when a compiled backend cannot take them: (violations, backend that ran)."""
    if chosen == "c":
        try:
            return c_backend.run(plan, bound), "c"
        except (Unsupported, build.CompileError) as exc:
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

    from tritoncheck.dtypes import torch_dtypes

    plan = compile_plan(spec)
    likely = ("int64", "float32", "bool")
    out = {}
    for f in plan.fields:
        if f.optional and optional is not None and f.name not in optional:
            continue
        dtype = next((d for d in likely if d in f.dtypes), f.dtypes[0])
        out[f.name] = torch.zeros([s if isinstance(s, int) else dim_size for s in f.shape], dtype=torch_dtypes()[dtype])
    return out


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


def disabled() -> bool:
    """True when TRITONCHECK_DISABLE=1: every check is off (read at every call: the environment may change)."""
    if _ENVIRON is not None:
        return _ENVIRON.get(_DISABLE_KEY) == _ONE
    return os.environ.get("TRITONCHECK_DISABLE") == "1"


# `os.environ`'s own store, where CPython keeps one (a dict of encoded keys and values, which
# `os.environ[...] = ...` and `del` update): one lookup, where `os.environ.get` encodes the key first
# (0.07 us against 0.65, on a check that costs a few us)
_ENVIRON = getattr(os.environ, "_data", None)
try:
    _DISABLE_KEY, _ONE = os.environ.encodekey("TRITONCHECK_DISABLE"), os.environ.encodevalue("1")  # type: ignore[attr-defined]
except AttributeError:  # (another Python's os.environ)
    _ENVIRON = None
if not isinstance(_ENVIRON, dict):
    _ENVIRON = None


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


def prepare(batch: Any, spec: BatchSpec, backend: Backend, key: Any = NO_KEY):
    """Compile the plan, run the host checks, and pick the backend for the data checks (`key`: the batch's
    signature key, where `seen` gave it)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
    plan = compile_plan(spec)
    bound = bind(plan, batch, key)
    chosen = backend
    on_cuda = any(t.is_cuda for t in bound.tensors.values())
    if backend == "auto":
        if on_cuda:
            chosen = "triton" if _triton_available() else "torch"
        else:
            chosen = "c" if _c_available() else "torch"
    elif backend == "c" and not _c_available():
        chosen = "torch"
    if on_cuda and chosen != "triton":  # (the Triton backend asks at launch, where it knows the device)
        _torch_backend.refuse_capture()
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


def failure_cases(report: Report, batch: Any, spec: BatchSpec, *, limit: int | None = 1000) -> FailureCases:
    """The failing elements of each violated check (pandera's `failure_cases`), not only the first: all of
    them with `limit=None`, else at most `limit` per check (`capped` says which were cut).

    A report keeps no reference to its batch (it may be pickled to another process, or outlive
    GPU memory), so the batch and spec it was made from are passed with it. They are checked again
    with the torch backend (a different batch or spec is a ValueError: its records would
    contradict the report), then the violated data checks list their elements; a valid report
    costs nothing.

    Args:
        batch, spec: what `tc.check` or `tc.validate` checked to make `report`.
        limit: at most this many elements per violated check (row-major over the stored values);
            None for all of them. A check cut short is named in the result's `capped`, with the
            number of its elements listed and the number failing in all.

    Returns one record per failing element (field, code, severity, rule, row: its batch position,
    index, value), `FailureCases.to_pandas()` as a DataFrame. A violation without elements (a
    dtype, a missing field, a length past a limit) is one record with its own index and value.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
        raise TypeError(f"limit must be an int or None, got {type(limit).__name__}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    if not report.violations:
        return FailureCases()
    if not isinstance(spec, BatchSpec):
        raise TypeError(f"spec must be a BatchSpec (the one the report was made with), got {type(spec).__name__}")
    if spec.name != report.spec or _found(check(batch, spec, backend="torch")) != _found(report):
        # Records of another batch would contradict the report's own counts and indices.
        raise ValueError(f"failure_cases: these are not the batch and spec this report was made from "
                         f"({printable(spec.name)} finds other violations in this batch than the report lists)")
    plan = compile_plan(spec)
    bound = bind(plan, batch)
    ctx = _torch_backend.Context(plan, bound)
    severity = {(v.field, v.code): v.severity for v in report.violations}
    out = FailureCases()
    elementwise = set()
    for data_check in bound.runnable:
        key = (data_check.field, data_check.code)
        if key not in severity:
            continue
        bad = ctx.bad_mask(data_check)
        if bad is None:
            continue
        elementwise.add(key)
        rule_check = isinstance(data_check, RuleCheck)
        values = ctx.values(data_check.subject, data_check.axes) if rule_check else ctx.stored(data_check.field)
        rule = message(data_check, bound)
        row_axis = data_check.axes.index(plan.batch_dim) if plan.batch_dim in data_check.axes else None
        sizes, listed = [ctx.sizes[a] for a in data_check.axes], len(out)
        for index, value in _failing(bad, values, sizes, limit):
            out.append({"field": data_check.field, "code": data_check.code, "severity": severity[key], "rule": rule,
                        "row": None if row_axis is None else index[row_axis], "index": index, "value": value})
        # every failing element: a stored entry of an expanded (size-1) axis stands for the whole axis
        total = int(bad.sum()) * math.prod(n for m, n in zip(bad.shape, sizes) if m == 1 and n > 1)
        if total > len(out) - listed:
            out.capped.append({"field": data_check.field, "code": data_check.code, "rule": rule,
                               "listed": len(out) - listed, "total": total})
    for v in report.violations:
        if (v.field, v.code) not in elementwise:
            row = v.samples[0] if len(v.samples) == 1 else None
            out.append({"field": v.field, "code": v.code, "severity": v.severity, "rule": v.rule, "row": row,
                        "index": None if v.index is None else list(v.index), "value": jsonable(v.value)})
    return out


def _found(report: Report) -> list[tuple[Any, ...]]:
    """What a report found, whatever its severities (strict) or the ranks' verdict (rank_failed) say."""
    return sorted((v.field, v.code, v.count, tuple(v.index or ()), tuple(v.samples)) for v in report.violations
                  if v.code != "rank_failed")


def _failing(bad: Any, values: Any, sizes: list[int], limit: int | None) -> Any:
    """(index, value) of each True entry of `bad`, at most `limit`. `bad` and `values` may keep size 1
    along an axis of larger `sizes` (an expanded view): an entry there stands for the whole axis, so
    indices are spread over it lazily, never allocating the view's logical size."""
    found = torch.nonzero(bad)
    if limit is not None:
        found = found[:limit]  # enough: each stored entry gives at least one element
    if len(found) == 0:
        return
    stored = values[tuple(found[:, d] if values.shape[d] > 1 else torch.zeros_like(found[:, d])
                          for d in range(found.shape[1]))].reshape(-1)  # a size-1 axis holds one value for all
    spread = [range(n) if m == 1 and n > 1 else None for m, n in zip(bad.shape, sizes)]
    emitted = 0
    for position, value in zip(found.tolist(), stored.tolist()):
        axes = [r if r is not None else (p,) for p, r in zip(position, spread)]
        for index in itertools.product(*axes):
            if limit is not None and emitted >= limit:
                return
            emitted += 1
            yield list(index), jsonable(value)
