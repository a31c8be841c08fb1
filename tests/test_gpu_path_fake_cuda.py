"""The Triton backend's CUDA host path on a CPU-only machine: what a warm check waits for and
allocates, and what it does inside CUDA graph capture (issue 22).

The harness patches what the launch path asks of `torch.cuda` -- the device guard, events,
streams, `is_current_stream_capturing`, `synchronize` -- with recording fakes, routes the result
buffer pool's allocation to CPU tensors (counting them), watches every `Tensor.copy_`, and tells
the launch path that the batch is on `cuda:0` through bind's memo (the entry a first check of the
signature fills). The kernel itself runs in Triton's interpreter on the CPU tensors, so the
verdicts are real. What is proven: the host code's calls (no wait, no allocation, no blocking
copy on a warm valid check; a reset queued on the stream; capture refused before anything is
queued). What is not: that the device honours them, which only a GPU run shows.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import tritoncheck as tc
from tritoncheck.plan.lower import bind, compile_plan

pytest.importorskip("triton", reason="pip install triton (in the test extra)")

from tritoncheck.backends import triton as tb  # noqa: E402
from tritoncheck.api import deferred  # noqa: E402

CUDA = torch.device("cuda", 0)


class Log:
    """What the host asked of the (fake) device."""

    def __init__(self):
        self.allocations = self.waits = self.stream_waits = self.device_reads = 0
        self.blocking_copies: list[tuple] = []
        self.capturing = False
        self.busy = False  # while set, the GPU has not reached what is recorded: events stay unfinished


class FakeEvent:
    """A CUDA event whose work is done once recorded (the interpreter ran the kernel already), unless
    recorded while the GPU is `busy` (it is then held until the test clears `held`); `synchronize` on
    an unfinished event is a host wait."""

    def __init__(self, log: Log, held: list):
        self.log, self.held, self.recorded = log, held, False

    def record(self, stream=None):
        self.recorded = True
        if self.log.busy:
            self.held.append(self)

    def query(self) -> bool:
        return self.recorded and self not in self.held

    def synchronize(self):
        if not self.query():
            self.log.waits += 1
            with contextlib.suppress(ValueError):
                self.held.remove(self)


class FakeStream:
    def __init__(self, log: Log):
        self.log = log

    def wait_event(self, event):
        self.log.stream_waits += 1  # a device-side wait: the host goes on


@pytest.fixture
def fake_cuda(monkeypatch):
    log, held = Log(), []
    log.held = held  # the events the GPU has not reached yet
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "Event", lambda *a, **k: FakeEvent(log, held))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: FakeStream(log))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: log.capturing)

    def synchronize(device=None):
        log.waits += 1

    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    buffers: list[torch.Tensor] = []
    real_allocate = tb._Pool.allocate

    def allocate(self, length, head, device):
        if device != CUDA:  # the first check of a signature, on the CPU
            return real_allocate(self, length, head, device)
        log.allocations += 1
        buf = torch.zeros(length, dtype=torch.int64)
        buffers.append(buf)
        return tb._Slot(buf, torch.zeros(length, dtype=torch.int64), head, torch.cuda.Event())

    monkeypatch.setattr(tb._Pool, "allocate", allocate)
    monkeypatch.setattr(tb, "_pool", tb._Pool())  # this test's buffers only
    real_copy = torch.Tensor.copy_

    def copy_(self, src, non_blocking=False):
        if not non_blocking:
            log.blocking_copies.append((tuple(self.shape), tuple(src.shape)))
        return real_copy(self, src, non_blocking)

    monkeypatch.setattr(torch.Tensor, "copy_", copy_)
    for name in ("item", "tolist", "__bool__"):  # reading a device buffer's value waits for the device
        real = getattr(torch.Tensor, name)

        def read(self, *a, _real=real, **k):
            if any(self.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() for b in buffers):
                log.device_reads += 1
            return _real(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, read)
    return log


SPEC = {"fields": {"ids": {"dtype": "int64", "shape": ["B", "L"], "min": 0, "max": 9},
                   "mask": {"dtype": "bool", "shape": ["B", "L"]}},
        "rules": ["any(mask, dim=L)"]}


def on_cuda(spec, batch, monkeypatch):
    """Check `batch` once (compiling, on the CPU), then mark its signature's launch as a CUDA one."""
    plan = compile_plan(spec)
    bound = bind(plan, batch)
    assert tc.check(batch, spec, backend="triton").backend == "triton"
    launch, _ = bound.memo["triton"]
    monkeypatch.setitem(bound.memo, "triton", (launch, CUDA))
    return plan


def batch(value=1, length=16):
    ids = torch.ones(4, length, dtype=torch.int64)
    ids[2, 3] = value
    return {"ids": ids, "mask": torch.ones(4, length, dtype=torch.bool)}


@pytest.fixture
def spec(request):
    """A spec of its own per test, so that bind's memo (where the harness says "cuda") is the test's alone."""
    return tc.BatchSpec.model_validate({"name": f"fake-cuda-{request.node.name}", **SPEC})


@pytest.fixture(autouse=True)
def empty_queue():
    yield
    for _ in range(10):
        try:
            tc.wait()
            return
        except tc.BatchValidationError:
            pass


def test_a_warm_valid_check_allocates_nothing_and_waits_once(spec, fake_cuda, monkeypatch):
    on_cuda(spec, batch(), monkeypatch)
    report = tc.check(batch(), spec, backend="triton")  # cold on "cuda": the pool allocates a slot
    assert report.ok and report.backend == "triton" and fake_cuda.allocations == 1
    fake_cuda.busy = True
    for _ in range(3):
        assert tc.check(batch(), spec, backend="triton").ok
    assert fake_cuda.allocations == 1  # warm: no allocation
    assert fake_cuda.waits == 3  # one per check: its verdict's read-back, nothing else
    assert fake_cuda.blocking_copies == [] and fake_cuda.device_reads == 0


def test_deferred_valid_steps_never_wait_nor_allocate(spec, fake_cuda, monkeypatch):
    on_cuda(spec, batch(), monkeypatch)
    tc.validate(batch(), spec, backend="triton", deferred=True)
    tc.wait()
    allocations = fake_cuda.allocations
    fake_cuda.busy = True  # the GPU has not reached a launch when the next step comes
    for _ in range(4):
        tc.validate(batch(), spec, backend="triton", deferred=True)
    assert len(deferred._queue) == 4  # nothing read: every launch is still running
    assert fake_cuda.waits == 0 and fake_cuda.blocking_copies == [] and fake_cuda.device_reads == 0
    assert fake_cuda.allocations == allocations + 3  # four launches in flight need four buffers (one was pooled)
    fake_cuda.busy = False
    fake_cuda.held.clear()  # the GPU catches up
    tc.validate(batch(), spec, backend="triton", deferred=True)  # reads the four, waits for none
    assert fake_cuda.waits == 0 and len(deferred._queue) == 1
    tc.wait()


def test_a_bad_batch_is_reset_on_the_stream_and_reported_as_launched(spec, fake_cuda, monkeypatch):
    """After a failing batch the buffer is zeroed on the stream (no host copy); the next launch's
    stream waits for that (the host does not). The late read shows the value launched, not the
    one written into the tensor since."""
    on_cuda(spec, batch(), monkeypatch)
    bad = batch(42)
    real_start = tb.start  # (a warm batch, of the signature checked before: launched by `start`, not bound again)
    launched = []
    monkeypatch.setattr(tb, "start", lambda *args: launched.append(real_start(*args)) or launched[-1])
    fake_cuda.busy = True
    tc.validate(bad, spec, backend="triton", deferred=True)
    bad["ids"][2, 3] = 5  # the next step reuses the tensor before the GPU got to it: 5 is valid
    fake_cuda.busy = False
    fake_cuda.held.clear()
    with pytest.raises(tc.BatchValidationError) as info:
        tc.validate(batch(), spec, backend="triton", deferred=True)
    assert [(v.code, v.index, v.value) for v in info.value.report.violations] == [("above_max", (2, 3), 42)]
    assert fake_cuda.blocking_copies == [] and fake_cuda.waits == 0
    slot = launched[0].slot
    assert slot.reset is not None and not slot.device.any()  # zeroed on the stream, an event after it
    waits = fake_cuda.stream_waits
    tc.validate(batch(), spec, backend="triton", deferred=True)
    assert fake_cuda.stream_waits > waits and slot.reset is None  # the stream waited for the reset, not the host
    tc.wait()


def test_capture_is_refused_before_anything_is_queued(spec, fake_cuda, monkeypatch):
    on_cuda(spec, batch(), monkeypatch)
    tc.check(batch(), spec, backend="triton")
    fake_cuda.capturing = True
    before = vars(fake_cuda).copy()
    launches = []
    monkeypatch.setattr(tb._Pool, "take", lambda *a: launches.append(a))
    for call in (lambda: tc.check(batch(), spec, backend="triton"),
                 lambda: tc.validate(batch(), spec, backend="triton"),
                 lambda: tc.validate(batch(), spec, backend="triton", deferred=True)):
        with pytest.raises(RuntimeError, match="inside CUDA graph capture") as info:
            call()
        assert "Validate the batch before the captured region" in str(info.value)
    assert launches == [] and vars(fake_cuda) == before


def test_the_compiled_op_is_kept_out_of_cuda_graphs():
    """Under torch.compile(mode="reduce-overhead"), Inductor leaves an op tagged cudagraph_unsafe out of
    its CUDA graphs (what a GPU run would show; here, the tag)."""
    from tritoncheck.api import graph_op  # noqa: F401

    assert torch.Tag.cudagraph_unsafe in torch.ops.tritoncheck.validate.default.tags
