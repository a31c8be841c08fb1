"""Which backend runs: `auto` picks C for CPU batches, fallbacks are honest and said once, warm-up compiles."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import tritoncheck as tc
from tritoncheck.api import core as _api
from tritoncheck.backends import codecache as build
from tritoncheck.backends import c as c_backend
from tritoncheck.spec.schema import spec_from_dict

SPEC = dict(vocab_size=30, num_labels=2, max_position_embeddings=16, type_vocab_size=2)


def bert():
    return tc.load_spec("bert-sequence-classification", **SPEC)


def bert_batch(bad: bool = False):
    ids = torch.randint(3, 30, (4, 8))
    if bad:
        ids[2, 5] = 31
    return {"input_ids": ids, "attention_mask": torch.ones(4, 8, dtype=torch.int64), "labels": torch.tensor([0, 1, 1, 0])}


@pytest.fixture
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(_api, "_warned", set())


def test_auto_runs_the_c_kernel_on_cpu_and_the_report_says_so():
    report = tc.check(bert_batch(bad=True), bert())
    assert report.backend == "c"
    reference = tc.check(bert_batch(bad=True), bert(), backend="torch")
    assert reference.backend == "torch" and report.codes == {"above_max"}


def test_no_compiler_means_torch_with_one_warning(monkeypatch, tmp_path, fresh_warnings):
    monkeypatch.setenv("PATH", str(tmp_path))  # no cc, no gcc
    monkeypatch.setattr("sysconfig.get_config_var", lambda name: None)
    build.compiler.cache_clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            reports = [tc.check(bert_batch(bad=True), bert(), backend=b) for b in ("auto", "c", "auto")]
        assert [r.backend for r in reports] == ["torch"] * 3
        assert reports[0].codes == {"above_max"}
        said = [w for w in caught if "no C compiler" in str(w.message)]
        assert len(said) == 1, [str(w.message) for w in caught]
    finally:
        build.compiler.cache_clear()


def test_a_plan_the_kernel_cannot_take_falls_back_to_torch_and_says_which_ran(fresh_warnings):
    spec = tc.load_spec("cross-entropy")
    target = torch.tensor([1]).expand(2**31 + 5)  # an expanded view past 2**31 elements, walked at size 1
    batch = {"input": torch.zeros(1, 3).expand(2**31 + 5, 3), "target": target}
    assert tc.check(batch, spec, backend="c").backend == "c"
    # a rule that sums over it makes the kernel walk 2**31 + 5 elements: C hands it to torch, which
    # counts the stored value 2**31 + 5 times
    spec = spec_from_dict({"name": "positions", "fields": {"x": {"dtype": "int64", "shape": ["B"]}},
                           "rules": ["x <= sum(x)"]}, "t.yaml")
    with pytest.warns(RuntimeWarning, match="the c backend cannot check this batch"):
        report = tc.check({"x": target}, spec, backend="c")
    assert report.backend == "torch" and report.ok


def test_warmup_compiles_before_the_first_check(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITONCHECK_CACHE_DIR", str(tmp_path))
    spec = bert()
    # bert has 4 optional fields: past MAX_WARMUP_KERNELS, warmup builds none and all of them
    assert tc.warmup(spec) == "c"
    assert list((tmp_path / "c").glob("*.so")), "the kernel is in the disk cache"
    monkeypatch.setattr(build, "_build", lambda source, path: pytest.fail(f"compiled again: {path}"))
    everything = bert_batch() | {"token_type_ids": torch.zeros(4, 8, dtype=torch.int64),
                                 "position_ids": torch.arange(8).expand(4, 8).contiguous()}
    assert tc.check(everything, spec).backend == "c"  # found the warmed kernel
    assert tc.check({"input_ids": everything["input_ids"]}, spec).backend == "c"


def test_validating_collate_compiles_in_the_parent(monkeypatch):
    spec = bert()
    collate = tc.ValidatingCollate(spec)
    monkeypatch.setattr(build, "load", lambda source: pytest.fail("compiled after construction"))
    full = bert_batch() | {"token_type_ids": torch.zeros(4, 8, dtype=torch.int64),
                           "position_ids": torch.arange(8).expand(4, 8).contiguous()}
    samples = [{k: v[i] for k, v in full.items()} for i in range(4)]
    batch = collate(samples)  # what a forked worker does first: the kernel is already there
    assert set(batch) == set(full)
    assert tc.check(batch, spec).backend == "c"


def test_without_a_compiler_a_dataloader_with_workers_checks_on_torch(tmp_path):
    """A fresh process whose PATH holds no C compiler: everything works, and the report says torch."""
    code = textwrap.dedent("""
        import sysconfig, warnings, torch
        sysconfig.get_config_var = lambda name: None
        import tritoncheck as tc
        from torch.utils.data import DataLoader
        spec = tc.load_spec("cross-entropy")
        data = [{"input": torch.randn(3), "target": torch.tensor(i % 3)} for i in range(8)]
        data[5]["target"] = torch.tensor(7)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            collate = tc.ValidatingCollate(spec, on_error="skip", log_dir=LOG_DIR)
        loader = DataLoader(data, batch_size=4, num_workers=2, collate_fn=collate)
        sizes = [len(b["target"]) for b in loader]
        print(sizes, collate.stats()["samples"],
              tc.check(data[0] | {"input": torch.randn(1, 3), "target": torch.tensor([0])}, spec).backend,
              sum("no C compiler" in str(w.message) for w in caught))
    """).replace("LOG_DIR", repr(str(tmp_path / "skipped")))
    env = dict(os.environ, PATH=str(tmp_path), TRITONCHECK_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[4,", "3]", "1", "torch", "1"], out.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA tensor")
def test_the_c_backend_refuses_device_tensors():
    """A clear error, never a device pointer read on the host."""
    with pytest.raises(ValueError, match="backend='c' needs CPU tensors"):
        tc.check({k: v.cuda() for k, v in bert_batch().items()}, bert(), backend="c")


def test_this_machine_can_build_c_kernels():
    """CI has gcc: if this fails, every C test above ran on the torch fallback."""
    assert c_backend.available()


def test_a_triton_fallback_is_named_in_the_report():
    """Triton hands an expanded view it would walk in full (a rule sums over it) to torch; the
    report must not claim the kernel ran."""
    pytest.importorskip("triton", reason="pip install triton (in the test extra)")
    from tritoncheck.backends.triton import EXPANDED_WALK_LIMIT

    spec = tc.BatchSpec.model_validate({"name": "s", "fields": {"x": {"dtype": "int64", "shape": ["B"]}},
                                        "rules": ["x <= sum(x)"]})
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the interpreter on CPU (tests/conftest.py)
    report = tc.check({"x": torch.tensor([1], device=device).expand(EXPANDED_WALK_LIMIT + 1)}, spec, backend="triton")
    assert report.ok and report.backend == "torch"
    small = {"x": torch.tensor([1, 0, 2, 1], device=device)}
    assert tc.check(small, spec, backend="triton").backend == "triton"


@pytest.mark.parametrize("chosen", ["c", "triton"])
def test_a_reduction_over_the_checks_own_axis_goes_to_the_torch_backend(chosen, device, fresh_warnings):
    """`m <= sum(m, dim=L)` runs over [B, L] and sums over L: a kernel would redo the sum for every
    element (work growing with L squared), so the compiled backends hand it to the torch backend,
    with the same verdicts; a sum over L in a check over [B], or over the batch, stays compiled."""
    pytest.importorskip("triton", reason="pip install triton (in the test extra)")
    fields = {"m": {"dtype": "int64", "shape": ["B", "L"]}, "n": {"dtype": "int64", "shape": ["B"]}}
    quadratic = tc.BatchSpec.model_validate({"name": "q", "fields": fields, "rules": ["m * 4 <= sum(m, dim=L)"]})
    linear = tc.BatchSpec.model_validate({"name": "l", "fields": fields, "rules": ["n <= sum(m, dim=L)"]})
    where = "cpu" if chosen == "c" else device  # the C backend reads CPU tensors
    batch = {"m": torch.tensor([[1, 1, 1, 1], [0, 9, 0, 0]], device=where), "n": torch.tensor([4, 5], device=where)}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        report = tc.check(batch, quadratic, backend=chosen)
    assert report.backend == "torch"  # the report says who checked it; the C backend warns too (once)
    assert chosen == "triton" or any("square of its length" in str(w.message) for w in seen)
    assert not report.ok and report.violations == tc.check(batch, quadratic, backend="torch").violations
    assert tc.check(batch, linear, backend=chosen).backend == chosen
    # a batch total compared per sample (BART's eos count) costs a factor of the batch size: compiled
    total = tc.BatchSpec.model_validate({"name": "t", "fields": fields, "rules": ["n * 2 <= sum(m)"]})
    assert tc.check(batch, total, backend=chosen).backend == chosen
