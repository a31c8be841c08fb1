"""The Triton backend's warm host path (issue 22): a batch of a signature checked before skips `bind`
and launches the compiled kernel directly.

Under the interpreter (TRITON_INTERPRET=1, as the suite runs): the warm path of `tc.check` and of
deferred validation binds nothing for a batch whose data pass, and every report equals the torch
backend's, also after a signature change, for a failing batch, with warnings and `strict`.

Without the interpreter, in a process of its own (`direct_launch_checks.py`): the kernel compiled for
sm_90 and launched through Triton's own launcher into a stand-in libcuda (`benchmarks/stub_cuda.py`).
The direct launch hands the launcher exactly the arguments a launch through Triton's JIT does; a
warm check launches once, through no JIT, allocates nothing and waits for nothing; the JIT launches
instead for a misaligned pointer, a launch hook, another current device and a Triton whose launch
API is not 3.6's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from report_compare import comparable

import tritoncheck as tc
from tritoncheck.api import core
from tritoncheck.spec.schema import spec_from_dict

pytest.importorskip("triton", reason="pip install triton (in the test extra)")

from test_gpu_path_fake_cuda import SPEC, fake_cuda, on_cuda  # noqa: E402,F401 (a fixture)

ROOT = Path(__file__).resolve().parent.parent
SPEC_YAML = """
name: warm-triton
fields:
  ids: {dtype: [int64, int32], shape: [B, L], min: 0, max: 9, severity: {above_max: warning}}
  mask: {dtype: int64, shape: [B, L], values: [0, 1]}
  labels: {dtype: int64, shape: [B], min: 0, max: 4, optional: true}
rules:
  - any(mask, dim=L)
  - rule: L <= 6
    severity: warning
"""


def fresh_spec() -> tc.BatchSpec:
    """A spec object of its own: no warm entry from another test."""
    return spec_from_dict(yaml.safe_load(SPEC_YAML), "warm-triton.yaml")


def batch(B: int = 2, L: int = 4, device: str = "cpu") -> dict:
    """On `device` (the `device` fixture: CUDA where a GPU runs the compiled kernel, so the warm path
    launches it directly there; else the CPU, and Triton's interpreter)."""
    return {"ids": torch.arange(B * L, device=device).reshape(B, L) % 10,
            "mask": torch.ones(B, L, dtype=torch.int64, device=device), "labels": torch.arange(B, device=device) % 5}


def like_torch(b, spec, strict: bool = False) -> tc.Report:
    report = tc.check(b, spec, backend="triton", strict=strict)
    reference = tc.check(b, spec, backend="torch", strict=strict)
    assert report.backend == "triton"
    assert comparable(report.to_dict() | {"backend": "-"}) == comparable(reference.to_dict() | {"backend": "-"})
    return report


@pytest.fixture
def binds(monkeypatch):
    """Counts the binds of the warm path's own module (the cold path binds through `core.prepare`)."""
    calls = []
    real = core.bind
    monkeypatch.setattr(core, "bind", lambda *args: calls.append(1) or real(*args))
    return calls


def test_a_warm_check_binds_nothing_and_a_failing_one_reports_like_torch(binds, device):
    spec = fresh_spec()
    assert like_torch(batch(device=device), spec).ok
    binds.clear()
    report = tc.check(batch(device=device), spec, backend="triton")  # new tensors, the same signature
    assert report.ok and report.backend == "triton" and binds == []
    for _ in range(2):  # (on CUDA: the first launch of a signature goes through the JIT, the next ones directly)
        bad = batch(device=device)
        bad["mask"][1, 2] = 7
        bad["labels"][0] = -1
        report = like_torch(bad, spec)  # binding again to decode is allowed
        assert sorted(report.codes) == ["below_min", "not_in_set"] and binds
        assert like_torch(batch(device=device), spec).ok


def test_a_field_bound_as_a_view_is_bound_at_every_check(binds, device):
    """`bind` drops a field's optional size-1 axis as a view (`x[..., 0]`): not the tensor the launch was made
    for (a launch through Triton's JIT reads its shape and strides), so `core.remember` keeps no warm path."""
    spec = spec_from_dict({"name": "unit", "fields": {"x": {"dtype": "int64", "shape": ["B", "1?"], "min": 0}}},
                          "unit.yaml")
    for _ in range(2):
        assert like_torch({"x": torch.zeros(3, 1, dtype=torch.int64, device=device)}, spec).ok
    binds.clear()
    assert tc.check({"x": torch.zeros(3, 1, dtype=torch.int64, device=device)}, spec, backend="triton").ok and binds
    bad = torch.zeros(3, 1, dtype=torch.int64, device=device)
    bad[2, 0] = -1
    assert [(v.code, v.index) for v in like_torch({"x": bad}, spec).violations] == [("below_min", (2,))]


def test_dynamic_padding_strictness_and_another_signature_stay_exact(binds, device):
    spec = fresh_spec()
    for L in (4, 5, 8):  # L = 8: the dim rule warns
        like_torch(batch(L=L, device=device), spec)
    binds.clear()
    for L in (5, 4, 8, 4):
        assert tc.check(batch(L=L, device=device), spec, backend="triton").dims["L"] == (L, "ids")
    assert binds == []
    assert not like_torch(batch(L=8, device=device), spec, strict=True).ok and like_torch(batch(L=8, device=device), spec).ok
    above = batch(device=device)
    above["ids"][0, 0] = 12  # a data warning
    assert [v.code for v in like_torch(above, spec).warnings] == ["above_max"]
    assert not like_torch(above, spec, strict=True).ok
    int32 = batch(device=device) | {"ids": batch(device=device)["ids"].int()}  # another dtype: another program
    like_torch(int32, spec)
    like_torch({k: v for k, v in batch(device=device).items() if k != "labels"}, spec)
    assert like_torch(batch(device=device), spec).ok


def test_deferred_steps_take_the_warm_path_and_raise_for_a_bad_batch(binds, device):
    spec = fresh_spec()
    tc.validate(batch(device=device), spec, backend="triton", deferred=True)
    tc.wait()
    binds.clear()
    for _ in range(3):
        tc.validate(batch(device=device), spec, backend="triton", deferred=True)
    tc.wait()
    assert binds == []
    bad = batch(device=device)
    bad["ids"][1, 3] = -4
    want = comparable(tc.check(bad, spec, backend="torch").to_dict() | {"backend": "-"})
    tc.validate(bad, spec, backend="triton", deferred=True)
    with pytest.raises(tc.BatchValidationError) as info:
        tc.wait()
    assert comparable(info.value.report.to_dict() | {"backend": "-"}) == want
    tc.wait()


def test_a_warm_entry_is_kept_per_backend():
    """A CPU batch checked by C and by Triton (the interpreter) in turn: each backend's warm check is its own."""
    from tritoncheck.backends import c as c_backend

    if not c_backend.available():
        pytest.skip("no C compiler")
    spec = fresh_spec()
    bad = batch()
    bad["labels"][1] = 9
    for backend in ("c", "triton", "c", "triton", "c"):
        for b in (batch(), bad, batch()):
            report = tc.check(b, spec, backend=backend)
            reference = tc.check(b, spec, backend="torch")
            assert report.backend == backend
            assert comparable(report.to_dict() | {"backend": "-"}) == comparable(reference.to_dict() | {"backend": "-"})


def _direct_checks() -> dict[str, dict]:
    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("no C compiler: Triton's driver module and the stand-in libcuda are built with one")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "direct_launch_checks.py")], capture_output=True,
                          text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {line.pop("check"): line for line in lines}


@pytest.fixture(scope="module")
def direct():
    return _direct_checks()


def test_the_direct_launch_passes_the_launcher_what_the_jit_passes(direct):
    got = direct["arguments"]
    assert got["built"] == "Direct"
    assert got["direct_head"] == got["plain_head"]  # grid, stream, function, packed metadata
    assert got["direct_args"] == got["plain_args"]  # pointers (as ints), sizes, scalars, the buffer, its dtype
    assert got["direct_meta"] == ["None", "None", "None"] and got["hooks"] == ["[]", "[]"]  # no hook was set


def test_warm_checks_launch_once_without_the_jit_an_allocation_or_a_wait(direct):
    busy = direct["warm deferred"]["busy"]  # four deferred steps while the GPU has reached none of them
    assert busy == {"jit": 0, "launches": 4, "allocations": 3, "waits": 0}  # four buffers in flight, one was pooled
    assert direct["warm deferred"]["after"]["waits"] == 0
    assert direct["warm check"] == {"ok": True, "jit": 0, "launches": 1, "allocations": 0, "waits": 0}


def test_the_jit_launches_where_the_direct_launch_does_not_apply(direct):
    unaligned = direct["unaligned"]
    assert unaligned["ptr_mod_16"] == 8 and unaligned["jit"] == 1 and unaligned["launches"] == 1
    hook = direct["launch hook"]
    assert hook["hooked"]["jit"] == 1 and hook["hook_calls"] == 1 and hook["unhooked"]["jit"] == 0
    assert direct["other device"]["jit"] == 1 and direct["other device"]["launches"] == 1


def test_another_triton_launch_api_falls_back_to_the_jit(direct):
    got = direct["other triton"]
    assert got["built"] == "False" and got["oks"] == [True, True, True]
    assert got["jit"] == 3 and got["launches"] == 3


def test_a_warm_entry_keeps_no_tensor_of_a_batch_alive(device):
    import gc
    import weakref

    spec = fresh_spec()
    batches = [batch(device=device), batch(device=device), batch(L=5, device=device)]
    refs = [weakref.ref(t) for b in batches for t in b.values()]
    for b in batches:
        assert tc.check(b, spec, backend="triton").ok
        tc.validate(b, spec, backend="triton", deferred=True)
    tc.wait()
    del batches, b
    gc.collect()
    assert [r for r in refs if r() is not None] == []


def test_a_deferred_warm_batch_is_decoded_as_submitted(fake_cuda, monkeypatch, request):
    """On (fake) CUDA the verdict is read at a later step: a dict refilled with the next step's tensors
    in the meantime must not be what the failing batch is decoded from."""
    log = fake_cuda
    spec = tc.BatchSpec.model_validate({"name": f"decoded-as-submitted-{request.node.name}", **SPEC})
    good = {"ids": torch.ones(4, 16, dtype=torch.int64), "mask": torch.ones(4, 16, dtype=torch.bool)}
    on_cuda(spec, good, monkeypatch)
    tc.validate(good, spec, backend="triton", deferred=True)
    tc.wait()
    log.busy = True  # the GPU has not reached the next launch when the step after it comes
    step = {k: v.clone() for k, v in good.items()}
    step["ids"][2, 3] = 42
    tc.validate(step, spec, backend="triton", deferred=True)
    step.update(ids=torch.ones(2, 8, dtype=torch.int64), mask=torch.ones(2, 8, dtype=torch.bool))  # the next step's
    log.busy = False
    log.held.clear()
    with pytest.raises(tc.BatchValidationError) as info:
        tc.wait()
    report = info.value.report
    assert [(v.code, v.index, v.value) for v in report.violations] == [("above_max", (2, 3), 42)]
    assert report.dims == {"B": (4, "ids"), "L": (16, "ids")}
