"""The host-side tensor code of every backend, run on (fake) CUDA tensors on a CPU-only machine.

Triton's interpreter runs the kernel on CPU tensors, so the rest of a CUDA check (the torch
backend's evaluation, the decoder's evaluation at the offending position) never meets a CUDA
tensor in CI. Under torch's FakeTensorMode a `device="cuda"` tensor holds no data but takes part
in every op, and mixing it with a CPU tensor that is not 0-d raises, as it would on a GPU: a
`torch.arange` without `device=`, or a constant reshaped to the scope's rank, is caught here.
Data-dependent reads (`.item()`) cannot run on fake tensors, so each backend's pure tensor
evaluation is driven directly, stopping short of reading values.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch._subclasses import fake_tensor

import tritoncheck as tc
from tritoncheck.checks.registry import kind_of
from tritoncheck.kernel.decode import point_value
from tritoncheck.plan.lower import RuleCheck, bind, compile_plan
from tritoncheck.backends.torch import Context

pytest.importorskip("triton", reason="pip install triton (in the test extra)")

from test_triton_backend import SPECS, corruptions, make_batch, spec_for  # noqa: E402

from tritoncheck.backends import triton as tb  # noqa: E402


def _getitem(self, index):
    """Tensor indexing by ints and full slices, spelled as views: CPU builds of torch cannot
    index a fake CUDA tensor with `[]` (it sets a CUDA device guard first)."""
    out, dim = self, 0
    for i in index if isinstance(index, tuple) else (index,):
        if isinstance(i, slice) and i == slice(None):
            dim += 1
        else:
            out = out.select(dim, int(i))
    return out


FAKE_CUDA = "meta"  # stands for "cuda": CPU builds of torch can make fake tensors there, not on "cuda"


@pytest.fixture
def fake_cuda(monkeypatch):
    """A FakeTensorMode (to enter) in which reading a value (`.item()`, `bool()`) gives 1: a fake
    tensor holds none, and the backends read one only to decide what to evaluate next."""
    monkeypatch.setattr(fake_tensor.FakeTensor, "__getitem__", _getitem)
    monkeypatch.setattr(fake_tensor.FakeTensor, "item", lambda self: 1)
    monkeypatch.setattr(fake_tensor.FakeTensor, "__bool__", lambda self: True)
    return fake_tensor.FakeTensorMode(allow_non_fake_inputs=True)


def _cases():
    """(spec, batch): every built-in spec with every corruption applied (each check fails
    somewhere, so each runs to its data pass), and small specs over constants, ranges, `where`,
    selections and reductions, in an integer and a float dtype."""
    for name in SPECS:
        spec = spec_for(name)
        batch = make_batch(spec)
        for _, mutate in corruptions(spec, batch):
            mutate()
        yield pytest.param(spec, batch, id=name)
    fields = {"x": {"dtype": ["int64", "float32"], "shape": ["B", "L"]}, "y": {"dtype": ["int64", "float32"], "shape": ["B"]},
              "p": {"dtype": ["int64", "float32"], "shape": ["B", "L"], "monotonic": "L"}}
    for rule in RULES + CONSTANT_RULES:
        for dtype in (torch.int64, torch.float32):
            x = torch.arange(-8, 8).reshape(2, 8).to(dtype)
            spec = tc.BatchSpec.model_validate({"name": "custom", "rules": [rule], "fields": fields})
            yield pytest.param(spec, {"x": x, "y": torch.tensor([1, 5]).to(dtype), "p": x.flip(1)},
                               id=f"{rule}-{str(dtype).removeprefix('torch.')}")


RULES = [
    "x // 3 != -1", "x % 3 != 2", "(x % -4 == 0) | (x > 5) & ~(x < 8)", "abs(-x) <= 6", "x * 2 - y + 1 != 3",
    "sum(x % 2 == 1, dim=L) >= y", "all(x > -9, dim=1)", "any(x // 2 == y)", "x[:, 0] <= y",
    "sum(arange(L) < x, dim=L) >= 0", "any(x[:, -1] >= arange(B) + 0.5)", "(0.1 // y != 0.5 % y) | (y < 0)",
    "x - x[:, 0] >= -100 where x != 0", "sum(x, dim=L) <= L * 10 + y",
]
# a reduction of constants, or a rule of constants under `where`: the torch backend made a CPU
# tensor of it, reshaped to the rule's rank next to the fields
CONSTANT_RULES = ["any(2 > 1) | (x < 0)", "sum(3 > 1) + x >= 0", "all(2 > 1) & (y > 0)", "1 > 2 where x > 0"]
CASES = list(_cases())


def _bind(spec, batch, mode):
    """The plan, the bound batch on fake CUDA, and the Triton kernel's IR (its decoder's input)."""
    plan = compile_plan(spec)
    bound = bind(plan, batch)
    program = tb.program_for(plan, bound)
    assert bound.runnable and program is not None
    with mode:
        cuda = {k: torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=FAKE_CUDA) for k, t in bound.tensors.items()}
    return plan, dataclasses.replace(bound, tensors=cuda, memo={}), program.kernel


def test_a_cpu_tensor_meeting_a_fake_cuda_one_raises(fake_cuda):
    """The harness itself: the mix a GPU refuses is refused here too (and a 0-d CPU operand is not)."""
    with fake_cuda, pytest.raises(fake_tensor.FakeTensorDeviceMismatchError):
        x = torch.empty(3, device=FAKE_CUDA)
        assert (x + torch.tensor(1.0)).device.type == FAKE_CUDA
        x + torch.arange(3)


@pytest.mark.parametrize(("spec", "batch"), CASES)
def test_the_torch_backend_evaluates_every_check_on_cuda_tensors(spec, batch, fake_cuda):
    plan, bound, _ = _bind(spec, batch, fake_cuda)
    with fake_cuda:
        ctx = Context(plan, bound)
        for check in bound.runnable:
            bad = kind_of(check).torch(check, ctx)
            assert bad is None or bad.device.type == FAKE_CUDA
            if isinstance(check, RuleCheck):  # what the violation shows
                assert ctx.values(check.subject, check.axes).device.type == FAKE_CUDA


def test_the_decoder_evaluates_every_checks_value_on_cuda_tensors(fake_cuda):
    """Each check's value at position 0 as the decoder computes it (`point_value`), for every case at once."""
    failed = []
    for case in CASES:
        spec, batch = case.values
        _, bound, kernel = _bind(spec, batch, fake_cuda)
        with fake_cuda:
            for k, check in enumerate(kernel.checks):
                try:
                    point_value(kernel, k, (0,) * len(check.axes), bound)
                except fake_tensor.FakeTensorDeviceMismatchError as exc:
                    failed.append((case.id, check.field, check.code, str(exc)))
                except fake_tensor.DataDependentOutputException:
                    pass  # the value of a constant subject, made under the mode as a meta tensor: evaluated, not readable
    assert not failed, failed
