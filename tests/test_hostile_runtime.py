"""Deferred validation under a training loop that catches errors and goes on (issue 10, item 3).

Every submitted batch is checked, every bad verdict raises exactly once naming its step, verdicts
of every spec share one queue, and a queued verdict does not keep its batch alive.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

import tritoncheck as tc
from deferred_queue import empty_queue  # noqa: F401  (autouse: the queue is empty around each test)
from tritoncheck.backends import triton as triton_backend
SPEC = {"name": "ids", "fields": {"ids": {"dtype": "int64", "shape": ["B", "L"], "min": 0, "max": 9}}}


def make_spec() -> tc.BatchSpec:
    return tc.BatchSpec.model_validate(SPEC)


def good(device: str = "cpu") -> dict[str, torch.Tensor]:
    return {"ids": torch.ones(2, 3, dtype=torch.int64, device=device)}


def bad(value: int = 42, device: str = "cpu") -> dict[str, torch.Tensor]:
    batch = good(device)
    batch["ids"][1, 2] = value
    return batch


def found(exc: tc.BatchValidationError) -> list:
    return [v.value for v in exc.report.violations]


@pytest.fixture
def where(backend, device) -> str:
    """The batch's device for `backend`: the C backend reads CPU tensors, the others `device`'s."""
    return "cpu" if backend == "c" else device


def test_a_call_that_raises_still_checks_its_own_batch(backend, where):
    spec = make_spec()
    tc.validate(bad(41, where), spec, deferred=True, backend=backend)
    with pytest.raises(tc.BatchValidationError) as first:
        tc.validate(bad(42, where), spec, deferred=True, backend=backend)  # raises for 41; 42 is checked too
    assert found(first.value) == [41]
    with pytest.raises(tc.BatchValidationError) as second:
        tc.validate(good(where), spec, deferred=True, backend=backend)
    assert found(second.value) == [42]
    assert second.value.step == first.value.step + 1
    assert f"batch submitted at step {second.value.step} (deferred)" in second.value.__notes__
    tc.wait()  # the good batch was checked, and nothing is raised twice


def test_a_fresh_spec_per_step_still_raises_at_the_next_step(backend, where):
    tc.validate(bad(device=where), make_spec(), deferred=True, backend=backend)
    with pytest.raises(tc.BatchValidationError) as info:
        tc.validate(good(where), make_spec(), deferred=True, backend=backend)
    assert found(info.value) == [42]


def test_a_loop_that_catches_and_goes_on_sees_every_bad_batch_once(backend, where):
    spec = make_spec()
    values = [41, None, 10, 12, None, None, 13]
    raised = []
    steps = []
    for value in values:
        try:
            tc.validate(good(where) if value is None else bad(value, where), spec, deferred=True, backend=backend)
        except tc.BatchValidationError as exc:
            raised += found(exc)
            steps.append(exc.step)
    with pytest.raises(tc.BatchValidationError) as info:
        tc.wait()
    raised += found(info.value)
    steps.append(info.value.step)
    tc.wait()
    assert raised == [41, 10, 12, 13]
    assert [s - steps[0] for s in steps] == [0, 2, 3, 6]


def test_a_queued_verdict_does_not_keep_the_batch_alive(backend, where):
    spec = make_spec()
    batch = bad(device=where)
    ref = weakref.ref(batch["ids"])
    tc.validate(batch, spec, deferred=True, backend=backend)
    del batch
    gc.collect()
    launched = backend == "triton" and where != "cpu"  # a CUDA launch keeps its tensors until it is read
    assert (ref() is None) != launched
    with pytest.raises(tc.BatchValidationError) as info:
        tc.wait()
    assert found(info.value) == [42]  # the report kept what the error needs
    gc.collect()
    assert ref() is None


class FakeEvent:
    def __init__(self):
        self.done = False

    def query(self) -> bool:
        return self.done


class FakeLaunch:
    """Stands for a CUDA launch: the verdict is readable once the event completes."""

    def __init__(self, tensors, launch):
        self.event = FakeEvent()
        self.tensors = tensors
        self.read = 0
        pending = launch()
        self.data, self.backend = pending.result(), pending.backend
        self.bound = pending.bound if self.data else None  # (what a failing batch's report is built from)

    def result(self):
        self.read += 1
        return self.data


@pytest.fixture
def launches(monkeypatch):
    """Triton launches that behave like CUDA ones: unfinished until the test says so. A batch of a
    signature launched before takes the warm path (`start`, no bind): it is faked the same way."""
    made = []
    real, real_start = triton_backend.launch, triton_backend.start

    def launch(plan, bound):
        made.append(FakeLaunch(bound.tensors, lambda: real(plan, bound)))
        return made[-1]

    def start(memo, tensors, bound):
        made.append(FakeLaunch(tensors, lambda: real_start(memo, tensors, bound)))
        return made[-1]

    monkeypatch.setattr(triton_backend, "launch", launch)
    monkeypatch.setattr(triton_backend, "start", start)
    return made


def test_an_unfinished_launch_never_blocks_and_is_freed_once_read(launches, device):
    spec = make_spec()
    tc.validate(bad(device=device), spec, deferred=True, backend="triton")
    tc.validate(good(device), spec, deferred=True, backend="triton")  # the first is not finished: no wait, no raise
    assert launches[0].read == 0
    launches[0].event.done = True
    ref = weakref.ref(launches.pop(0))
    with pytest.raises(tc.BatchValidationError) as info:
        tc.validate(good(device), spec, deferred=True, backend="triton")
    assert found(info.value) == [42]
    gc.collect()
    assert ref() is None  # read, so the launch and its tensors are let go
    tc.wait()  # blocks on the rest (both good)
    assert [launch.read for launch in launches] == [1, 1]


def test_the_first_error_names_the_later_bad_steps(launches, device):
    spec = make_spec()
    tc.validate(bad(41, device), spec, deferred=True, backend="triton")
    tc.validate(bad(43, device), spec, deferred=True, backend="triton")
    with pytest.raises(tc.BatchValidationError) as info:
        tc.wait()
    step = info.value.step
    assert found(info.value) == [41]
    assert f"the batches submitted at steps {step + 1} were bad too" in " ".join(info.value.__notes__)
    with pytest.raises(tc.BatchValidationError) as later:
        tc.wait()
    assert later.value.step == step + 1 and found(later.value) == [43]
    tc.wait()


def test_a_verdict_agreed_across_ranks_is_settled_at_the_next_call(tmp_path):
    import torch.distributed as dist

    if not dist.is_available() or dist.is_initialized():
        pytest.skip("needs torch.distributed, not already initialised")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        spec = make_spec()
        tc.validate(bad(), spec, deferred=True, group=True)
        with pytest.raises(tc.BatchValidationError) as info:
            tc.validate(good(), spec, deferred=True, group=True)
        assert found(info.value) == [42]
        tc.wait()
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("cpu_backend", ["torch", "c"])
def test_a_bad_cpu_batch_is_not_silent_before_it_raises(cpu_backend):
    """A verdict known at once (no GPU to wait for) is queued as documented, but a bad one warns at once,
    naming its step, since the caller goes on with the batch before the error is raised."""
    import warnings

    spec = make_spec()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        tc.validate(good(), spec, deferred=True, backend=cpu_backend)
        tc.validate(bad(), spec, deferred=True, backend=cpu_backend)
    assert len(said) == 1 and said[0].filename == __file__
    with pytest.raises(tc.BatchValidationError) as info:
        tc.wait()
    assert str(said[0].message) == (
        f"tc.validate(deferred=True): the batch of step {info.value.step} is bad for ids (ids[1, 2]: above_max); "
        "its verdict was known at once (checked on the host, no kernel launch to wait for), and raises at the next "
        "deferred validate or tc.wait(); validate with deferred=False to stop a bad batch before it is used")


@pytest.mark.parametrize("cpu_backend", ["torch", "c"])
def test_a_warning_made_an_error_never_hides_an_earlier_bad_batch(cpu_backend):
    """Under -W error the bad-now warning raises; it was raised inside the queue's lock before the earlier bad
    batch's error, so the second bad batch said only its own warning and the first waited."""
    import warnings

    spec = make_spec()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="is bad for ids"):
            tc.validate(bad(), spec, deferred=True, backend=cpu_backend)
        with pytest.raises(tc.BatchValidationError) as info:  # the first bad batch, now
            tc.validate(bad(11), spec, deferred=True, backend=cpu_backend)
    assert "found 42" in str(info.value)
    with pytest.raises(tc.BatchValidationError) as info:  # the second, still queued
        tc.wait()
    assert "found 11" in str(info.value)
