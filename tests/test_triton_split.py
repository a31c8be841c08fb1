"""Reductions split across programs (issue 12) against the torch backend, report for report.

A row of a reduction longer than `codegen.MAX_STEPS` loop steps is shared by 2**split programs.
These tests set MAX_STEPS to 1, so a few thousand elements split as a 1 GB batch would: a part
that decides a row alone (`any` found a true value, `all` a false one) settles it; rows no
part decides are combined through scratch slots by the last program to arrive, which zeroes
them again: a valid batch is one launch and leaves the buffer clean.
"""

from __future__ import annotations

import pytest
import torch

import tritoncheck as tc
from tritoncheck.plan.lower import bind, compile_plan

pytest.importorskip("triton", reason="pip install triton (in the test extra)")

from tritoncheck.backends import triton as tb  # noqa: E402
from tritoncheck.codegen import triton as codegen  # noqa: E402


@pytest.fixture(autouse=True)
def one_step_per_program(monkeypatch):
    monkeypatch.setattr(codegen, "MAX_STEPS", 1)


def _spec(rules, fields):
    return tc.BatchSpec.model_validate({"name": "split", "fields": fields, "rules": rules})


def _key(report):
    return [(v.field, v.code, v.samples, v.count, v.index, str(v.value)) for v in report.violations]


def same(batch, spec, device):
    """The Triton report equals torch's; returns (report, the launch's groups' geometry)."""
    batch = {k: v.to(device) for k, v in batch.items()}
    ref = tc.check(batch, spec, backend="torch")
    got = tc.check(batch, spec, backend="triton")
    assert got.backend == "triton" and _key(got) == _key(ref)
    plan = compile_plan(spec)
    bound = bind(plan, batch)
    return ref, tb.geometry(tb.program_for(plan, bound), bound.dim_values())


LABELS = {"y": {"dtype": "int64", "shape": ["B", "L"]}}


def test_a_whole_batch_any_split_across_programs(device):
    spec = _spec(["any(y != -100)"], LABELS)
    y = torch.full((5, 1000), -100)
    y[4, 999] = 3  # only the last part sees a label: the others leave the row open
    ref, geometry = same({"y": y}, spec, device)
    assert not ref.violations and geometry[0].split >= 2 and geometry[0].tiles == 1
    y[4, 999] = -100  # every part open: the last to arrive reads the totals and reports once
    ref, _ = same({"y": y}, spec, device)
    assert [(v.rule, v.count) for v in ref.violations] == [("any(y != -100)", 1)]
    y[:, ::7] = 1  # every part decides: valid again, after a dirty buffer was reset
    assert not same({"y": y}, spec, device)[0].violations


def _fills(fn):
    """`fn()`, and the names of the fill and zero ops torch ran meanwhile (a memset on CUDA)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = fn()
    return out, [e.name for e in prof.events() if e.name in ("aten::zero_", "aten::fill_", "aten::zeros")]


@pytest.mark.parametrize("y_of", [lambda: torch.ones(5, 1000, dtype=torch.int64),  # every part decides alone
                                  lambda: torch.full((5, 1000), -100).index_fill_(1, torch.tensor([999]), 3)])
def test_a_valid_split_batch_is_one_launch_that_leaves_the_buffer_clean(device, y_of):
    """Each part of a split row adds to the scratch and counts itself in; the last zeroes the slots.
    So a valid batch queues the kernel and the copy back, no memset, and its buffer ends all zero
    (the `Layout`'s and values' slots, poisoned, keep their poison: nothing writes them)."""
    spec = _spec(["any(y != -100)"], LABELS)
    plan = compile_plan(spec)
    batch = {"y": y_of().to(device)}
    first = tb.launch(plan, bind(plan, batch))
    slot = first.slot
    assert first.result() == [] and tb.geometry(first.program, {"B": 5, "L": 1000})[0].split >= 2
    scratch = tb.geometry(first.program, {"B": 5, "L": 1000})[0].scratch
    slot.device[:scratch].fill_(-7)  # poison all but the scratch: a launch that writes nothing there leaves the poison
    pending, fills = _fills(lambda: tb.launch(plan, bind(plan, batch)))
    assert pending.slot is slot and fills == []
    assert set(slot.device[:scratch].tolist()) == {-7} and set(slot.device[scratch:].tolist()) == {0}
    # on CUDA the launch already queued the copy back, so the host copy holds the poison too (the
    # `tolist` above waited for it): clean both, as the kernel would have left them on a valid batch
    slot.device.zero_()
    slot.host.zero_()
    assert pending.result() == []


def test_a_row_several_parts_decide_bad_is_counted_once(device):
    """`all(y <= 0)` fails in every part that finds a positive value; one of them writes."""
    spec = _spec(["all(y <= 0)", "any(y == 5)"], LABELS)
    y = torch.zeros(5, 1000, dtype=torch.int64)
    y[0, 3] = y[2, 500] = y[4, 998] = 1  # three parts decide "all" false
    y[1, 1] = 5
    ref, _ = same({"y": y}, spec, device)
    assert [v.count for v in ref.violations] == [1]


def test_rows_split_along_their_length(device):
    """Per-row reductions over a long L: a sum is never decided by a part; an any may be."""
    fields = {"ids": {"dtype": "int64", "shape": ["B", "L"]}, "mask": {"dtype": ["bool", "int64"], "shape": ["B", "L"]}}
    spec = _spec(["sum(ids != 1, dim=L) <= 700", "any(mask != 0, dim=L)", "sum(mask, dim=L) >= 2"], fields)
    ids = torch.ones(3, 1500, dtype=torch.int64)
    ids[1, :701] = 7  # 701 counted tokens, spread over several parts
    ids[2, 800:1499] = 9  # 699: fine
    for dtype in (torch.bool, torch.int64):
        mask = torch.zeros(3, 1500, dtype=dtype)
        mask[0, 1400] = 1  # one attended position, in the last part: "sum >= 2" fails
        mask[2, 10] = mask[2, 1300] = 1
        ref, geometry = same({"ids": ids, "mask": mask}, spec, device)
        assert [(v.rule, v.samples) for v in ref.violations] == [
            ("sum(ids != 1, dim=L) <= 700", (1,)), ("any(mask != 0, dim=L)", (1,)), ("sum(mask, dim=L) >= 2", (0, 1))]
        assert all(g.split >= 2 for g in geometry)
    valid = {"ids": torch.ones(3, 1500, dtype=torch.int64), "mask": torch.ones(3, 1500, dtype=torch.bool)}
    assert not same(valid, spec, device)[0].violations
