"""The Triton backend's host cost per check, measured on a machine without a GPU (issue 22).

    python benchmarks/host_path.py      # writes benchmarks/results/host-path-triton-<version>.md

One warm BERT 32x128 check (`bert-sequence-classification`, the benchmark's batch), as a training
loop makes it: `tc.validate(batch, spec, backend="triton", deferred=True)`, the same batch
signature every step, each step reading the previous step's verdict. Everything tritoncheck, torch
and Triton do on the host runs for real; only the driver does nothing (`stub_cuda.py`: the kernel is
compiled for sm_90 and launched through Triton's own launcher into a stand-in libcuda whose
`cuLaunchKernelEx` returns at once; torch's CUDA stream, device and event calls are stubs, and
the result buffer is a CPU tensor, so its copy back is a host-side copy of a few KB).

Time: thread CPU time (`time.thread_time`), the median of interleaved rounds (`harness.time_cpu`).
The breakdown times each stage alone on the same warm state (its rows are not additive to the
digit: each is its own median; the last rows are differences of two medians); the first row is the
whole call.

Issue 22's bound: <= 10 us per check with the driver call stubbed.
"""

from __future__ import annotations

import argparse
import statistics
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

os.environ.pop("TRITON_INTERPRET", None)  # before triton is imported: this process launches compiled kernels

import stub_cuda  # benchmarks/stub_cuda.py, beside this script

BOUND_US = 10.0
WHOLE = "bert-32x128, the whole check: deferred `tc.validate`"
SUBMIT = "`deferred.submit` (the queue, the previous step's verdict read)"
WARM = "warm launch and read (`core.warm_start`, then its verdict)"
GUARD = "signature guard (`lower.signature_guard`'s, torch's TensorGuards)"
START = "launch and read (`triton.start(...).result()`)"
DIRECT = "direct launch (`triton.Direct`: pointers, their checks, the launcher)"
C_LAUNCHER = "Triton's launcher alone (`CompiledKernel.run`, cuLaunchKernelEx stubbed)"
COPY = "copy back dispatch (`Tensor.copy_` of the result head)"
BIND = "not on the warm path: bind (`core.prepare`: plan, `bind`, backend)"
JIT = "not on the warm path: Triton's JIT launch (`fn[grid](...)`)"
# stages found as differences of the measured ones: (name, plus, minus)
DERIVED = [
    ("`tc.validate`'s entry (whole - submit)", WHOLE, (SUBMIT,)),
    ("deferred queue (submit - warm launch and read)", SUBMIT, (WARM,)),
    ("warm entry and report (warm - guard - launch and read)", WARM, (GUARD, START)),
    ("pool, copy back, event, verdict read (launch and read - direct launch)", START, (DIRECT,)),
    ("pointers and the checks before the launcher (direct launch - launcher)", DIRECT, (C_LAUNCHER,)),
    ("Triton's JIT launch above its launcher: binder, cache key, metadata (JIT - launcher)", JIT, (C_LAUNCHER,)),
]


def stages(stub: stub_cuda.Stub) -> dict[str, Callable[[], Any]]:
    """The whole deferred check and each of its stages, as callables over one warm BERT 32x128 batch."""
    import harness as bench
    import tritoncheck as tc
    from tritoncheck.api import core, deferred
    from tritoncheck.backends import triton as tb
    from tritoncheck.plan.lower import bind

    case = bench.scenario("bert").build(False)
    spec, batch = case.spec, case.batch
    plan = stub_cuda.on_cuda(spec, batch)
    before = stub.launches
    for _ in range(3):
        tc.validate(batch, spec, backend="triton", deferred=True)
    tc.wait()
    if stub.launches - before != 3:
        raise RuntimeError(f"3 deferred checks reached the driver {stub.launches - before} times")
    bound = bind(plan, batch)
    memo = bound.memo
    launch = memo["triton"][0]
    direct, guard = tb.direct_of(memo), memo.get(("guard", "triton"))
    if not direct or guard is None:
        raise RuntimeError(f"no warm path: direct launch {direct}, guard {guard}")
    tensors = [bound.tensors[f] for f in launch.fields]
    held = tb.start(memo, tensors, bound)  # a launch as a check makes it: its slot serves the stages below
    slot = held.slot
    args, kwargs = launch.args(tensors, slot.device)
    ptrs = [t.data_ptr() for t in tensors]

    def deferred_check() -> None:
        tc.validate(batch, spec, backend="triton", deferred=True)

    def warm() -> None:
        core.warm_start(batch, spec, "triton", False)[1]()

    # timed in this order in every round: the two stages the warm path skips first, then the warm path from
    # the inside out, so that each stage follows one that ran the same code (the first stage of a round
    # pays for the caches the round's last left it: about 1-2 us here, charged to `bind`)
    fns = {
        BIND: lambda: core.prepare(batch, spec, "triton"),
        JIT: lambda: launch.program.fn[launch.grid](*args, **kwargs),
        COPY: lambda: slot.host_head.copy_(slot.device_head, non_blocking=True),
        C_LAUNCHER: lambda: direct.run(direct.grid, 1, 1, 0, direct.function, direct.packed, None, None, None, *ptrs,
                                       *direct.rest, slot.device_ptr, direct.dtype),
        DIRECT: lambda: direct(tensors, slot.device_ptr),
        START: lambda: tb.start(memo, tensors, bound).result(),
        GUARD: lambda: guard(batch),
        WARM: warm,
        SUBMIT: lambda: deferred.submit(batch, spec, backend="triton"),
        WHOLE: deferred_check,
    }
    fns["_cleanup"] = lambda: (tc.wait(), held.result())  # (a valid batch's verdict: the slot goes back to the pool)
    return fns


def measure(rounds: int) -> list[tuple[str, float, str]]:
    import harness as bench

    stub = stub_cuda.install()
    fns = stages(stub)
    cleanup = fns.pop("_cleanup")
    try:
        times = bench.time_cpu(fns, rounds, budget_s=60.0)
    finally:
        cleanup()
    us = {name: 1e3 * statistics.median(ms) for name, ms in times.items()}
    shown = [WHOLE, SUBMIT, WARM, GUARD, START, DIRECT, C_LAUNCHER, COPY, BIND, JIT]  # the whole check first
    out = [(name, us[name], "") for name in shown]
    out += [(name, us[plus] - sum(us[m] for m in minus), "difference of medians") for name, plus, minus in DERIVED]
    return out


def commit() -> str:
    """The measured tree's commit, with `+edits` where its tracked files differ from it (results pages aside:
    each version's run writes its own), or "no git"."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%h"], capture_output=True, text=True,
                              check=True).stdout.strip()
        edits = subprocess.run(["git", "-C", str(root), "status", "--short", "--untracked-files=no", "--", ".",
                                ":!benchmarks/results"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "no git"
    return head + ("+edits" if edits else "")


def page(rows: list[tuple[str, float, str]]) -> str:
    import torch
    import triton

    import tritoncheck as tc

    total = rows[0][1]
    verdict = "met" if total <= BOUND_US else "**not met**"
    lines = [f"# The Triton backend's host path, driver stubbed (triton {triton.__version__})", "",
             (f"`python benchmarks/host_path.py` at {commit()}, {time.strftime('%Y-%m-%dT%H:%M:%S')}: torch "
              f"{torch.__version__}, triton {triton.__version__}, tritoncheck {tc.__version__}; 1-minute load average "
              f"{os.getloadavg()[0]:.1f}. Thread CPU time per call, median of interleaved rounds; one warm deferred "
              "`tc.validate` of BERT 32x128 with the CUDA driver stubbed (`benchmarks/host_path.py`)."), "",
             "| stage | us per call | note |", "|---|---:|---|"]
    lines += [f"| {name} | {us:.1f} | {note} |" for name, us, note in rows]
    lines += ["", f"Issue 22's bound, <= {BOUND_US:g} us per BERT 32x128 check with the driver call stubbed: "
                  f"{total:.1f} us, {verdict}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="the Markdown page (default: results/host-path-triton-<version>.md)")
    p.add_argument("--rounds", type=int, default=30)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    text = page(measure(args.rounds))
    print(text)
    import triton

    out = args.out or Path(__file__).resolve().parent / "results" / f"host-path-triton-{triton.__version__}.md"
    out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
