"""Hostile inputs, round two (issue 20) and one verdict (issue 27): what the other files leave out.

The C backend's libraries: a process that checks many specs keeps a bounded number mapped (a
library nothing can call into any more is unmapped), the cache directory a bounded number of files,
and a program still held keeps its library however many others come and go.
"""

from __future__ import annotations

import gc
import os
import sys
import warnings

import pytest
import torch
from report_compare import comparable

import tritoncheck as tc
from tritoncheck import _api, _plan
from tritoncheck._kernel import build, c_backend
from tritoncheck._spec import spec_from_dict

needs_c = pytest.mark.skipif(not c_backend.available(), reason="no C compiler")
needs_proc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")


def spec(name: str) -> tc.BatchSpec:
    """A spec of its own name: a kernel no other spec shares (its header comment differs)."""
    return spec_from_dict({"name": name, "fields": {"x": {"dtype": "int64", "shape": ["B"], "min": 0}}}, "t.yaml")


BATCH = {"x": torch.tensor([1, -2, 3, -4])}


def verdict(report: tc.Report) -> list[tuple]:
    return [(v.code, v.count, v.samples, v.index, v.value) for v in report.violations]


EXPECTED = verdict(tc.check(BATCH, spec("reference"), backend="torch"))


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache dir, nothing loaded in this process, small limits on what is kept."""
    monkeypatch.setenv("TRITONCHECK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "_loaded", {})
    monkeypatch.setattr(build, "_alive", build.weakref.WeakValueDictionary())
    monkeypatch.setattr(build, "_failed", {})
    monkeypatch.setattr(c_backend, "_entries", {})
    monkeypatch.setattr(_plan, "_signatures", {})
    monkeypatch.setattr(_api, "_warned", set())
    monkeypatch.setattr(build, "MAX_LOADED_LIBRARIES", 4)
    monkeypatch.setattr(build, "MAX_CACHED_KERNELS", 8)
    monkeypatch.setattr(_plan, "MAX_PLANS", 4)  # plans whose programs (and so libraries) stay alive
    monkeypatch.setattr(c_backend, "MAX_PLANS", 4)
    return tmp_path


def mapped_kernels() -> set[str]:
    """The kernel libraries of this test's cache dir this process has mapped (deleted ones included);
    earlier tests' libraries stay mapped while the caches the fixture set aside hold their programs."""
    directory = build.cache_dir()
    out = set()
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            parts = line.split(maxsplit=5)
            path = parts[5].strip().removesuffix(" (deleted)") if len(parts) == 6 else ""
            if os.path.dirname(path) == directory and path.endswith(".so"):
                out.add(path)
    return out


@needs_c
@needs_proc
def test_80_specs_leave_a_bounded_number_of_libraries_mapped_and_files_cached(fresh):
    """Before: 80 specs left 80 libraries mapped (and 240 files). Now at most the libraries of the
    MAX_PLANS plans whose programs are kept plus the MAX_LOADED_LIBRARIES most recently loaded."""
    fds = len(os.listdir("/proc/self/fd"))
    for i in range(80):
        report = tc.check(BATCH, spec(f"many{i}"), backend="c")
        assert report.backend == "c" and verdict(report) == EXPECTED
    gc.collect()
    assert len(mapped_kernels()) <= 4 + 4
    assert len(os.listdir(build.cache_dir())) <= 8 * 4  # .so, .so.sha256, .c, .so.lock each
    assert len(os.listdir("/proc/self/fd")) == fds
    # the first spec's library was unmapped and pruned from disk: built again, the same verdict
    report = tc.check(BATCH, spec("many0"), backend="c")
    assert report.backend == "c" and verdict(report) == EXPECTED


@needs_c
@needs_proc
def test_a_program_still_held_keeps_its_library_mapped(fresh):
    """A library is unmapped only when nothing can call into it: a program held past the caches'
    limits still runs (an unmapped library would crash the process here)."""
    plan = _plan.compile_plan(spec("held"))
    bound = _plan.bind(plan, BATCH)
    program = c_backend.program_for(plan, bound)
    for i in range(12):  # pushes "held" out of every cache of plans, programs and libraries
        assert tc.check(BATCH, spec(f"churn{i}"), backend="c").backend == "c"
    gc.collect()
    assert mapped_kernels()
    assert [(v.code, v.count, v.index, v.value) for v in program(bound)] == [
        (code, count, index, value) for code, count, _, index, value in EXPECTED]
    before = mapped_kernels()
    del program, bound, plan
    gc.collect()
    assert len(mapped_kernels()) < len(before)  # the last holder gone, the library goes too


# -- a batch dim walked in full that no field stores a value per sample for -------------------------

def report(batch: dict, s: tc.BatchSpec, backend: str) -> list:
    return comparable([v.to_dict() for v in tc.check(batch, s, backend=backend).violations])


def materialized(batch: dict) -> dict:
    return {k: t.resolve_neg().resolve_conj().contiguous() for k, t in batch.items()}


UNBACKED = {
    # found by the differential fuzz (seed 52622526): the C result buffer, a count per sample, was
    # allocated for 2**31 + 5 samples of an empty field (MemoryError)
    "empty": ({"name": "u", "batch_dim": "tl", "fields": {"n": {"dtype": "int64", "shape": ["tl", "L"]}},
               "rules": ["n >= sum(n, dim=tl)"]}, {"n": torch.zeros(2**31 + 5, 0, dtype=torch.int64)}),
    "expanded": ({"name": "u", "fields": {"x": {"dtype": "float32", "shape": ["B"]}}, "rules": ["x * 70000 >= sum(x)"]},
                 {"x": torch.tensor([1.0]).expand(70_001)}),
}


@pytest.mark.parametrize("case", list(UNBACKED))
def test_a_batch_dim_no_field_stores_is_never_a_result_buffer_per_sample(backend, case):
    """A rule sums over the batch dim, so it is walked in full; where every field spanning it is empty
    or expanded, a count per sample would cost the logical size: the torch backend checks it from the
    stored values, with the report of the batch materialized."""
    data, batch = UNBACKED[case]
    s = spec_from_dict(data, "u.yaml")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (the fallback to torch is said once)
        got = report(batch, s, backend)
    assert got == report(materialized(batch), s, "torch")
    assert case == "empty" or [(v["code"], v["count"]) for v in got] == [("rule_failed", ("int", 70_001))]
