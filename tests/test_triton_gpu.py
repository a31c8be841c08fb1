"""What a check costs on a GPU, measured with the profiler: one kernel launch and one device-to-host
copy per check on the batch's own device, and on a failing batch one more small copy per
violation (the value it shows, read from the batch at its first offending index).

GPU-only by nature (it counts what the device ran), so every test here is marked `gpu` and skips
where torch.cuda.is_available() is False (tests/conftest.py).
"""

from __future__ import annotations

import pytest
import torch

import tritoncheck as tc

pytestmark = pytest.mark.gpu

PARAMS = {"vocab_size": 50, "type_vocab_size": 2, "max_position_embeddings": 512, "num_labels": 5}


def _batch(device: str) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    b = {"input_ids": torch.randint(5, 50, (32, 128), generator=g), "attention_mask": torch.ones(32, 128, dtype=torch.bool),
         "labels": torch.randint(0, 5, (32, 128), generator=g)}
    return {k: v.to(device) for k, v in b.items()}


def _profile(batch, spec) -> tuple[tc.Report, list[str], int]:
    """The report, the CUDA kernels launched, and the device-to-host copies of one check."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        report = tc.check(batch, spec, backend="triton")
        torch.cuda.synchronize()
    kernels, copies = [], 0
    for e in prof.events():
        if e.device_type.name != "CUDA":
            continue
        if "Memcpy DtoH" in e.name:
            copies += 1
        elif "Memcpy" not in e.name and "Memset" not in e.name:
            kernels.append(e.name)
    return report, kernels, copies


def test_one_kernel_and_one_copy_per_check():
    spec = tc.load_spec("bert-token-classification", **PARAMS)
    batch = _batch("cuda")
    assert tc.check(batch, spec, backend="triton").ok  # compiled and warm
    report, kernels, copies = _profile(batch, spec)
    assert report.ok and report.backend == "triton"
    assert kernels == ["tritoncheck_kernel"] and copies == 1
    batch["labels"][3, 7] = 99
    report, kernels, copies = _profile(batch, spec)
    assert [v.code for v in report.violations] == ["above_max"]
    # the kernel records counts, the first index and the value there: one copy back; the dirty buffer
    # is then zeroed on the stream by torch's fill kernel (no host wait), the failure path's one extra launch
    assert kernels[0] == "tritoncheck_kernel" and copies == 1
    assert len(kernels) == 2 and "FillFunctor" in kernels[1]


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_the_kernel_runs_on_the_batchs_device():
    spec = tc.load_spec("bert-token-classification", **PARAMS)
    batch = _batch("cuda:1")
    batch["labels"][0, 0] = -5
    with torch.cuda.device(0):
        report = tc.check(batch, spec, backend="triton")
        assert report.backend == "triton" and [v.code for v in report.violations] == ["below_min"]
        assert report.violations == tc.check(batch, spec, backend="torch").violations


def test_float_remainder_and_floor_division_follow_torch_on_the_device():
    """torch on CUDA computes float32 `%` with an exact fmod; the kernel's must agree where Triton's
    own `%` (a - trunc(a / b) * b) does not: quotients rounded up across an integer, past 2**24,
    overflowing, and denormals (which tl.floor flushes to zero)."""
    fields = {"x": {"dtype": "float32", "shape": ["B"]}, "y": {"dtype": "float32", "shape": ["B"]}}
    spec = tc.BatchSpec.model_validate({"name": "div", "fields": fields,
                                        "rules": ["x % y < 0.25 * y", "x // y != 3", "x // y >= -1e38"]})
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(4096, generator=g) * 1e30, torch.tensor([2.9999998, 16777217.0, 1e30, -1e-40, 3.0])])
    y = torch.cat([torch.randn(4096, generator=g) * 1e-3, torch.tensor([1.0, 0.1, 3.3, 7e-45, 0.1])])
    batch = {"x": x.cuda(), "y": y.cuda()}
    got, want = tc.check(batch, spec, backend="triton"), tc.check(batch, spec, backend="torch")
    assert got.backend == "triton" and got.violations == want.violations
