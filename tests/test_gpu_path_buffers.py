"""A valid batch leaves the result buffer clean, so no reset is needed on the valid path (issue 22).

Rows longer than `codegen.MAX_STEPS` steps (an int sum over L > 8,192) are split across programs
that meet in scratch slots of the result buffer. A part that only saw padding (`any(labels !=
-100)`) or any part of a sum left its partials there on a *valid* batch, and the host reset the
buffer with a blocking host-to-device copy after every such batch. Now the last part of a row
zeroes the slots it met in, inside the kernel (no memset, one launch), and after a bad batch the
host zeroes the buffer on the stream. These run at the real MAX_STEPS,
under the interpreter on CPU.
"""

from __future__ import annotations

import pytest
import torch

import tritoncheck as tc
from tritoncheck.plan.lower import bind, compile_plan

pytest.importorskip("triton", reason="pip install triton (in the test extra)")

from test_triton_backend import key  # noqa: E402

from tritoncheck.backends import triton as tb  # noqa: E402
from tritoncheck.codegen import triton as codegen  # noqa: E402

SPEC = {"name": "long-context", "fields": {
    "attention_mask": {"dtype": ["bool", "int64"], "shape": ["B", "L"]},
    "labels": {"dtype": "int64", "shape": ["B", "L"]}},
    "rules": ["sum(attention_mask, dim=L) >= 1", "any(labels != -100, dim=L)", "all(labels < 7, dim=L)"]}
LENGTH = 3 * codegen.MAX_STEPS * 128 + 5  # three int sums' worth of 8,192-element parts, and a ragged one


def long_batch(device, dtype=torch.bool):
    mask = torch.zeros(2, LENGTH, dtype=dtype)
    mask[:, :100] = 1
    labels = torch.full((2, LENGTH), -100)
    labels[:, :50] = 3  # the later parts see only padding: they cannot decide `any` alone
    return {"attention_mask": mask.to(device), "labels": labels.to(device)}


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64])
def test_a_valid_long_context_batch_leaves_the_buffer_clean(device, dtype):
    spec = tc.BatchSpec.model_validate(SPEC)
    plan = compile_plan(spec)
    batch = long_batch(device, dtype)
    bound = bind(plan, batch)
    pending = tb.launch(plan, bound)
    assert [g.split for g in tb.geometry(pending.program, pending.spec.walked)] >= [2]  # rows split 4 ways at least
    values = pending.slot.host if pending.event is None else (pending.event.synchronize(), pending.slot.host)[1]
    assert not values.any(), values.nonzero().flatten().tolist()  # nothing left to reset
    assert pending.result() == []


def test_a_bad_long_batch_then_a_valid_one(device):
    """A bad batch dirties the buffer (counts, first index, value), the host zeroes it; the verdicts
    equal the torch backend's, and the valid batch after it leaves the buffer clean."""
    spec = tc.BatchSpec.model_validate(SPEC)
    plan = compile_plan(spec)
    bad = long_batch(device)
    bad["attention_mask"][1].zero_()
    bad["labels"][0, :50] = -100
    bad["labels"][1, 9000] = 8
    got = tc.check(bad, spec, backend="triton")
    assert [key(v) for v in got.violations] == [key(v) for v in tc.check(bad, spec, backend="torch").violations]
    assert len(got.violations) == 3
    pending = tb.launch(plan, bind(plan, long_batch(device)))
    assert not pending.slot.host.any() and pending.result() == []
