"""The Triton backend's direct launch on the real host path, the driver stubbed (run by
tests/test_triton_host_path.py in a process of its own, without TRITON_INTERPRET).

The kernel of BERT 32x128 (`bert-sequence-classification`) is compiled for sm_90 and launched
through Triton's own launcher into benchmarks/stub_libcuda.c (`benchmarks/stub_cuda.py`). Nothing
runs on a device, so every verdict here is "valid" (the result buffer stays zeroed): what is checked
is the host path -- which launcher is called, with what, how often, and what it allocates and
waits for. (The verdicts of the kernel are the interpreter tests' and, on a GPU, the device
tests'.) Each check below prints one JSON line {"check": name, ...figures}; the test asserts on them.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import stub_cuda  # noqa: E402

stub = stub_cuda.install()

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.nvidia.driver import CudaLauncher  # noqa: E402

import harness as bench  # noqa: E402
import tritoncheck as tc  # noqa: E402
from tritoncheck.backends import triton as tb  # noqa: E402
from tritoncheck.plan.lower import bind, compile_plan  # noqa: E402


class Busy:
    """While set, events recorded are unfinished (the GPU has not reached them); a wait on one counts."""

    on = False
    held: list = []
    waits = 0


class Event(stub_cuda.StubEvent):
    __slots__ = ()

    def record(self, stream=None):
        self.recorded = True
        if Busy.on:
            Busy.held.append(self)

    def query(self):
        return self not in Busy.held

    def synchronize(self):
        if self in Busy.held:
            Busy.waits += 1
            Busy.held.remove(self)


torch.cuda.Event = Event
jit_runs, launcher_calls, allocations = [], [], []
real_run, real_call, real_allocate = triton.runtime.jit.JITFunction.run, CudaLauncher.__call__, tb._Pool.allocate


def spy_run(self, *args, **kwargs):
    jit_runs.append(1)
    return real_run(self, *args, **kwargs)


def spy_call(self, *args):
    launcher_calls.append(tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args))
    return real_call(self, *args)


def spy_allocate(self, *args):
    allocations.append(1)
    return real_allocate(self, *args)


triton.runtime.jit.JITFunction.run = spy_run
CudaLauncher.__call__ = spy_call
tb._Pool.allocate = spy_allocate


def report(check: str, **figures) -> None:
    print(json.dumps({"check": check, **figures}), flush=True)


def counts() -> tuple[int, int, int, int]:
    return len(jit_runs), stub.launches, len(allocations), Busy.waits


def delta(before: tuple[int, ...]) -> dict[str, int]:
    return dict(zip(("jit", "launches", "allocations", "waits"), (b - a for a, b in zip(before, counts()))))


case = bench.scenario("bert").build(False)
spec, batch = case.spec, case.batch
plan = stub_cuda.on_cuda(spec, batch)

# the first launch goes through the JIT; the launcher's arguments of a JIT launch and a direct one
tc.validate(batch, spec, backend="triton", deferred=True)
tc.wait()
plain = launcher_calls[-1]
tc.validate(batch, spec, backend="triton", deferred=True)
tc.wait()
direct = launcher_calls[-1]
memo = bind(plan, batch).memo
report("arguments", plain_head=list(plain[:6]), direct_head=list(direct[:6]), plain_args=list(map(str, plain[9:])),
       direct_args=list(map(str, direct[9:])), direct_meta=list(map(str, direct[6:9])),
       hooks=[str(getattr(h, "calls", h)) for h in plain[7:9]], built=type(tb.direct_of(memo)).__name__)

# warm deferred steps on a busy GPU: no JIT, one launch each, no wait; a buffer per launch in flight
before = counts()
Busy.on = True
for _ in range(4):
    tc.validate(dict(batch), spec, backend="triton", deferred=True)
busy = delta(before)
Busy.on = False
Busy.held.clear()
tc.validate(batch, spec, backend="triton", deferred=True)  # reads the four, waits for none
tc.wait()
report("warm deferred", busy=busy, after=delta(before))

# a blocking warm check: one launch, no JIT, no allocation
before = counts()
ok = tc.check(batch, spec, backend="triton").ok
report("warm check", ok=ok, **delta(before))

# a tensor 8 bytes off 16-byte alignment (same signature: the guard does not read storage offsets)
offset = dict(batch, input_ids=torch.zeros(batch["input_ids"].numel() + 1, dtype=torch.int64)[1:]
              .view_as(batch["input_ids"]).copy_(batch["input_ids"]))
before = counts()
ok = tc.check(offset, spec, backend="triton").ok
report("unaligned", ok=ok, ptr_mod_16=offset["input_ids"].data_ptr() % 16, **delta(before))

# a launch hook (a profiler's): the JIT launches, and calls it
seen = []
hook = seen.append
triton.knobs.runtime.launch_enter_hook.add(hook)
before = counts()
tc.check(batch, spec, backend="triton")
hooked = delta(before)
triton.knobs.runtime.launch_enter_hook.remove(hook)
before = counts()
tc.check(batch, spec, backend="triton")
report("launch hook", hooked=hooked, hook_calls=len(seen), unhooked=delta(before))

# another current device than the batch's: the JIT launches inside the batch's device context
launcher = tb.direct_of(memo)
launcher.device_now = lambda: 1
before = counts()
tc.check(batch, spec, backend="triton")
report("other device", **delta(before))
launcher.device_now = lambda: 0

# a Triton whose launch API is not 3.6's: every launch through the JIT, verdicts as before
version = triton.__version__
triton.__version__ = "3.5.0"
spec2 = tc.load_spec("bert-sequence-classification", **dict(bench.BERT, num_labels=4))  # another plan: not prepared yet
stub_cuda.on_cuda(spec2, batch)
before = counts()
oks = [tc.check(batch, spec2, backend="triton").ok for _ in range(3)]
report("other triton", oks=oks, built=str(tb.direct_of(bind(compile_plan(spec2), batch).memo)), **delta(before))
triton.__version__ = version
