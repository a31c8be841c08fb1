"""The value a Triton report shows is the value the kernel saw (issue 22).

Deferred mode reads a verdict when a later call comes; a batch changed in place meanwhile (the
next step reusing its buffers) used to be reported with its new value (`above_max ... found 5`,
5 being valid). The kernel now records, per violated check, the value at the first offending
index, beside the index, in the result buffer. Here every check of every built-in spec fails,
the batch is overwritten after the launch and before the verdict is read, and the report must
be the one the torch backend gives for the batch as launched.
"""

from __future__ import annotations

import pytest
import torch

import tritoncheck as tc
from tritoncheck.kernel.decode import decode
from tritoncheck.plan.lower import bind, compile_plan
from tritoncheck.spec.schema import spec_from_dict

pytest.importorskip("triton", reason="pip install triton (in the test extra)")

from test_triton_backend import SPECS, corruptions, key, make_batch, spec_for  # noqa: E402

from tritoncheck.backends import triton as tb  # noqa: E402


def reduces(kernel, k: int) -> bool:
    """A rule whose shown value holds a reduction (`sum(mask, dim=L)`): the decoder computes it from the batch."""
    return k in kernel.subjects and any(op.name in ("reduction", "load_prev") for op in kernel.subjects[k].ops)


def failing(pending) -> list[int]:
    """The checks the launch found violated, in order (as `decode` lists them)."""
    kernel, values = pending.program.kernel, pending.slot.host
    batch = pending.spec.walked.get(kernel.batch_dim, 0)
    out = []
    for k in range(len(kernel.checks)):
        base, row = kernel.layout.sample_base(k)
        n = values[base + row * batch: base + (row + 1) * batch].sum() if row >= 0 else values[kernel.layout.count(k)]
        if n:
            out.append(k)
    return out


@pytest.mark.parametrize("name", SPECS)
def test_a_batch_changed_after_the_launch_is_reported_as_launched(name, device):
    spec = spec_for(name)
    batch = make_batch(spec)
    for _, mutate in corruptions(spec, batch):
        mutate()
    batch = {k: v.to(device) for k, v in batch.items()}
    launched = {k: v.clone() for k, v in batch.items()}
    plan = compile_plan(spec)
    bound = bind(plan, batch)
    pending = tb.launch(plan, bound)
    assert pending.backend == "triton"
    kernel = pending.program.kernel
    checks = failing(pending)
    values = pending.slot.host.clone()
    # the next step's data lands in the same tensors before the verdict is read
    for k, v in batch.items():
        v.copy_(make_batch(spec, seed=7)[k].to(device) if v.dtype != torch.bool else ~v)
    got = [key(v) for v in pending.result()]
    want = [key(v) for v in tc.check(launched, spec, backend="torch").violations]
    late = [key(v) for v in decode(kernel, values, bound, pending.spec.walked)]  # read from the batch, as before
    assert len(got) == len(want) == len(late) == len(checks)
    changed = 0
    for k, g, w, old in zip(checks, got, want, late, strict=True):
        if k in pending.program.recorded:
            assert g == w, (kernel.checks[k], g, w)
            changed += old != w
        else:  # a rule over a reduction: its value is still computed from the batch when the verdict is read
            assert reduces(kernel, k) and g == old
    assert changed, "the overwrite changed no value shown: the test proves nothing for this spec"


RULES = {"name": "rules", "fields": {"x": {"dtype": ["int64", "float32", "bfloat16"], "shape": ["B", "L"]},
                                      "y": {"dtype": ["int64", "float32"], "shape": ["B"]},
                                      "m": {"dtype": "bool", "shape": ["B", "L"]}},
         "rules": ["x[:, 0] <= y", "x * 3 + 1 != 40", "abs(x) < 50 where m", "sum(x, dim=L) <= 100"]}


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.bfloat16])
def test_each_rule_shows_its_subject_as_launched(dtype, device):
    """Element-wise rules record their subject in the kernel; a rule over a reduction is computed
    from the batch when read (its value then follows the batch: the one case left to the decoder)."""
    spec = tc.BatchSpec.model_validate(RULES)
    x = torch.arange(-6, 6).reshape(3, 4).to(dtype) * 13
    batch = {"x": x, "y": torch.tensor([-100, 5, 1]).to(torch.float32 if dtype.is_floating_point else torch.int64),
             "m": torch.tensor([[1, 0, 1, 0]] * 3, dtype=torch.bool)}
    batch = {k: v.to(device) for k, v in batch.items()}
    launched = {k: v.clone() for k, v in batch.items()}
    plan = compile_plan(spec)
    pending = tb.launch(plan, bind(plan, batch))
    kernel = pending.program.kernel
    assert sorted(kernel.checks[k].text for k in pending.program.recorded) == sorted(RULES["rules"][:3])
    batch["x"].fill_(1)
    batch["y"].fill_(2)
    got = {v.rule: key(v) for v in pending.result()}
    want = {v.rule: key(v) for v in tc.check(launched, spec, backend="torch").violations}
    assert set(got) == set(want)
    for rule in RULES["rules"][:3]:
        assert got[rule] == want[rule], rule


def test_a_check_whose_field_the_kernel_never_reads_records_nothing(backend, device):
    """`finite: true` on an integer field is never violated, so the kernel does not read that field; the
    recording of shown values skipped it only after looking the field up (StopIteration from the Triton
    printer; the differential fuzz found it)."""
    spec = spec_from_dict({"name": "t", "fields": {"first": {"dtype": "int64", "shape": ["B"], "finite": True},
                                                   "x": {"dtype": "float32", "shape": ["B"], "min": 0}}}, "t.yaml")
    on = device if backend == "triton" else "cpu"
    batch = {"first": torch.tensor([1, 2], device=on), "x": torch.tensor([-1.0, 1.0], device=on)}
    report = tc.check(batch, spec, backend=backend)
    assert report.backend == backend
    assert report.violations == tc.check({k: v.cpu() for k, v in batch.items()}, spec, backend="torch").violations
    assert [(v.field, v.code, v.index, v.value) for v in report.violations] == [("x", "below_min", (0,), -1.0)]
