"""`tc.validate` inside a `torch.compile(fullgraph=True)` training step (issue 22).

Under compilation the check is one `torch.library` custom op (`tritoncheck/api/graph_op.py`):
the graph has no break, and the op runs at every call of the compiled step on the real tensors, so
every batch is checked. Deferred, a bad batch raises at the next step (or `tc.wait()`), naming its
step and value; not deferred, it raises out of the step that got it. Triton runs in its
interpreter here (TRITON_INTERPRET=1); `backend="auto"` puts CPU tensors on the C backend.
Before this op, the Triton path failed with InternalTorchDynamoError and the torch path broke the
graph at `.item()`.
"""

from __future__ import annotations

import pytest
import torch

import tritoncheck as tc
from deferred_queue import empty_queue  # noqa: F401  (autouse: the queue is empty around each test)

SPEC = {"name": "ids", "fields": {"ids": {"dtype": "int64", "shape": ["B", "L"], "min": 0, "max": 9}}}
VALUES = [1, 2, 42, 3, 11, 12, 4]  # the value at ids[1, 2] in each step's batch; 42, 11 and 12 are bad


def batch_with(value: int, device: str, length: int = 3) -> dict[str, torch.Tensor]:
    ids = torch.ones(2, length, dtype=torch.int64)
    ids[1, 2] = value
    return {"ids": ids.to(device)}


def recording(graphs: list):
    """A torch.compile backend that keeps Dynamo's graph, then runs it through AOT autograd
    (functionalization and the op's fake implementation, as Inductor would) without compiling C++."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.aot_autograd import make_boxed_func

    def boxed(gm, example_inputs):
        return make_boxed_func(gm.forward)

    aot = aot_autograd(fw_compiler=boxed, bw_compiler=boxed)

    def backend(gm, example_inputs):
        graphs.append(gm)
        return aot(gm, example_inputs)

    return backend


def training_step(spec, backend: str, deferred: bool):
    """The forward and loss of a step (compiled); `run_steps` calls backward on the loss."""
    emb = torch.nn.Embedding(10, 4)

    def step(batch):
        batch = tc.validate(batch, spec, backend=backend, deferred=deferred)
        return emb(batch["ids"].clamp(0, 9)).sum()

    return step


def run_steps(compiled, device, values=VALUES, lengths=None):
    """Run every step; return (step, value shown) of each BatchValidationError raised, tc.wait()'s last."""
    raised = []
    for i, value in enumerate(values):
        try:
            compiled(batch_with(value, device, (lengths or {}).get(i, 3))).backward()
        except tc.BatchValidationError as exc:
            raised.append((getattr(exc, "step", None), [v.value for v in exc.report.violations]))
    try:
        tc.wait()
    except tc.BatchValidationError as exc:
        raised.append((exc.step, [v.value for v in exc.report.violations]))
    return raised


@pytest.mark.parametrize("backend", ["triton", "auto", "torch"])
def test_a_compiled_step_checks_every_batch_and_raises_for_each_bad_one(backend, device):
    spec = tc.BatchSpec.model_validate(SPEC)
    step = training_step(spec, backend, deferred=True)
    graphs: list = []
    compiled = torch.compile(step, fullgraph=True, backend=recording(graphs))
    raised = run_steps(compiled, device)
    first = raised[0][0]
    # 42 (step 2) raises at step 3; 11 (4) at step 5; 12 (5) at step 6, each naming its own step and value
    assert [(s - first, v) for s, v in raised] == [(0, [42]), (2, [11]), (3, [12])]
    ops = [n.target for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert any("tritoncheck.validate" in str(t) for t in ops)
    assert len(graphs) == 1  # compiled once (and fullgraph: no break)


def test_a_compiled_step_that_is_not_deferred_raises_out_of_the_bad_step(device):
    spec = tc.BatchSpec.model_validate(SPEC)
    step = training_step(spec, "triton", deferred=False)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    compiled(batch_with(3, device))
    with pytest.raises(tc.BatchValidationError) as info:
        compiled(batch_with(42, device))
    assert [v.value for v in info.value.report.violations] == [42]
    compiled(batch_with(4, device))


def test_every_spec_object_and_batch_size_is_its_own_check(device):
    """The op's key is a constant of the trace, guarded on the spec's identity: a second spec object
    (a tighter max) retraces rather than checking against the first; new sizes run the same graph."""
    loose = tc.BatchSpec.model_validate(SPEC)
    tight = tc.BatchSpec.model_validate({**SPEC, "fields": {"ids": {**SPEC["fields"]["ids"], "max": 2}}})

    def step(batch, spec):
        return tc.validate(batch, spec, backend="triton")["ids"].sum()

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    compiled(batch_with(5, device), loose)
    compiled(batch_with(5, device, 7), loose)
    with pytest.raises(tc.BatchValidationError):
        compiled(batch_with(5, device), tight)
    compiled(batch_with(2, device, 9), tight)
    compiled(batch_with(5, device, 9), loose)


@pytest.mark.slow
def test_a_step_compiled_by_inductor_checks_every_batch(device):
    """The default backend (Inductor, C++ on CPU: ~5 s to compile): the op survives its dead-code
    elimination and scheduling, and still runs at every step."""
    spec = tc.BatchSpec.model_validate(SPEC)
    step = training_step(spec, "triton", deferred=True)
    raised = run_steps(torch.compile(step, fullgraph=True), device)
    first = raised[0][0]
    assert [(s - first, v) for s, v in raised] == [(0, [42]), (2, [11]), (3, [12])]
