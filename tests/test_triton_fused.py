"""Element-wise checks fused into a reduction that reads their field (issue 22: each field read once).

`codegen.program_groups` moves an element-wise check into the loop of a reduction that loads its
field (4 bytes an element or more) whole over the same elements (the causal LM's `attention_mask in [0, 1]` into
`any(attention_mask != 0, dim=L)`, its labels' bounds into `any((labels != -100) & (arange(L) > 0))`),
so the kernel reads each field once. The reports must stay the torch backend's, value for value,
on one program per row and with rows split across programs.
"""

from __future__ import annotations

import pytest
import torch

import tritoncheck as tc
from tritoncheck.kernel import ir
from tritoncheck.plan.lower import bind, compile_plan

pytest.importorskip("triton", reason="pip install triton (in the test extra)")

from tritoncheck.backends import triton as tb  # noqa: E402
from tritoncheck.codegen import triton as codegen  # noqa: E402

CAUSAL = {"vocab_size": 100, "max_position_embeddings": 64}


def _key(report):
    return [(v.field, v.code, v.samples, v.count, v.index, str(v.value)) for v in report.violations]


def _fields_per_group(program: codegen.Program) -> list[set[str]]:
    parts = codegen.program_groups(program.kernel)
    assert len(parts) == len(program.groups)
    out = []
    for g, fused in parts:
        names = set(g.fields) | (set(fused.group.fields) if fused is not None else set())
        out.append(names)
    return out


@pytest.mark.parametrize("mask_dtype", [torch.int64, torch.bool])
def test_the_causal_lm_kernel_reads_each_wide_field_in_one_group(mask_dtype):
    """Every field of 4 bytes an element is read by one program group; a bool mask stays read by two
    (its element-wise check and its row's any): a few percent of the bytes, and fused it made ptxas spill."""
    plan = compile_plan(tc.load_spec("causal-lm", **CAUSAL))
    batch = {"input_ids": torch.zeros(4, 64, dtype=torch.int64), "attention_mask": torch.ones(4, 64, dtype=mask_dtype),
             "position_ids": torch.zeros(4, 64, dtype=torch.int64), "labels": torch.zeros(4, 64, dtype=torch.int64)}
    program = tb.program_for(plan, bind(plan, batch))
    groups = _fields_per_group(program)
    for name, t in batch.items():
        assert sum(name in g for g in groups) == (1 if t.element_size() >= 4 else 2), (name, groups)
    fused = [f for _, f in codegen.program_groups(program.kernel) if f is not None]
    fields = ("attention_mask", "labels") if mask_dtype == torch.int64 else ("labels",)
    assert sorted(c for f in fused for c, _ in f.group.checks) == [
        k for k, c in enumerate(program.kernel.checks) if getattr(c, "field", None) in fields and len(c.axes) == 2]


def test_a_float_sum_takes_no_fused_check():
    """A float sum's group is never split, so element-wise checks of its field stay in their own group."""
    spec = tc.BatchSpec.model_validate({"name": "fsum", "fields": {"x": {"dtype": "float32", "shape": ["B", "L"],
                                                                         "finite": True}},
                                        "rules": ["sum(x, dim=L) <= 1e9"]})
    plan = compile_plan(spec)
    sigs = {"x": ir.FieldSig("x", torch.float32, ("B", "L"), True)}
    kernel = ir.lower(plan, plan.checks, sigs)
    assert all(f is None for _, f in codegen.program_groups(kernel))


def _batches(seed: int):
    g = torch.Generator().manual_seed(seed)
    for B, L in [(3, 37), (4, 16), (2, 300), (5, 7), (1, 1030), (6, 129), (2, 3000), (17, 5)]:
        ids = torch.randint(0, 100, (B, L), generator=g)
        mask = torch.randint(0, 2, (B, L), generator=g)
        labels = torch.randint(0, 100, (B, L), generator=g)
        labels[torch.rand(B, L, generator=g) < 0.3] = -100
        for bad in range(4):
            m, lab = mask.clone(), labels.clone()
            if bad & 1:
                m.view(-1)[torch.randint(0, B * L, (3,), generator=g)] = 2
            if bad & 2:
                lab.view(-1)[torch.randint(0, B * L, (3,), generator=g)] = -5
                lab.view(-1)[torch.randint(0, B * L, (2,), generator=g)] = 1000
            yield {"input_ids": ids, "attention_mask": m if bad & 1 else m.bool(), "labels": lab}
            yield {"input_ids": ids, "attention_mask": m, "labels": lab}  # an int64 mask: its check is fused
        # strided fields: positions along the rows come from the row, not a flat index
        yield {"input_ids": ids.t().contiguous().t(), "attention_mask": m.t().contiguous().t(), "labels": lab.t().contiguous().t()}


@pytest.mark.parametrize("max_steps", [codegen.MAX_STEPS, 1], ids=["whole-rows", "split-rows"])
def test_fused_checks_report_as_the_torch_backend(monkeypatch, max_steps):
    monkeypatch.setattr(codegen, "MAX_STEPS", max_steps)
    spec = tc.load_spec("causal-lm", **CAUSAL)
    failing = 0
    for batch in _batches(max_steps):
        ref = tc.check(batch, spec, backend="torch")
        got = tc.check(batch, spec, backend="triton")
        assert got.backend == "triton" and _key(got) == _key(ref), {k: tuple(v.shape) for k, v in batch.items()}
        failing += any(v.field in ("attention_mask", "labels") and v.code in ("not_in_set", "below_min", "above_max")
                       for v in ref.violations)
    assert failing >= 16  # the fused checks' violation path ran


def test_two_reductions_of_one_group_lose_no_element_wise_check():
    """`any(a != 0)` and `any(b != 0)` over L are one group of two reductions, each loading a field whose
    bounds are element-wise checks over [B, L]: a part of a group runs one set of fused checks, so one
    reduction takes them and the other field's stay in their own group. (Both reductions took theirs
    and the printer ran the last one's: `a`'s bounds ran nowhere, and Triton passed a = 7.)"""
    spec = tc.BatchSpec.model_validate({"name": "two", "rules": ["any(a != 0, dim=L)", "any(b != 0, dim=L)"], "fields": {
        "a": {"dtype": "int32", "shape": ["B", "L"], "min": 0, "max": 1},
        "b": {"dtype": "int32", "shape": ["B", "L"], "min": 0, "max": 1}}})
    a, b = torch.ones(4, 300, dtype=torch.int32), torch.ones(4, 300, dtype=torch.int32)
    a[1, 3], b[2, 5] = 7, -1
    plan = compile_plan(spec)
    kernel = tb.program_for(plan, bind(plan, {"a": a, "b": b})).kernel
    ran = [c for part, fused in codegen.program_groups(kernel) for c, _ in part.checks + (fused.group.checks if fused else ())]
    assert sorted(ran) == list(range(len(kernel.checks)))
    ref = tc.check({"a": a, "b": b}, spec, backend="torch")
    got = tc.check({"a": a, "b": b}, spec, backend="triton")
    assert {v.field for v in ref.violations} == {"a", "b"} and _key(got) == _key(ref)


def test_a_check_fused_into_a_reduction_that_its_rule_folds_away_still_runs():
    """`sum(m, dim=B) != 0.5` folds to True (an integer sum is never 0.5), so no check needs the sum;
    `m <= 9`, fused into the sum's loop, ran nowhere and Triton passed m = 12, which torch and C
    report (found by the differential fuzz's shared-axes specs)."""
    spec = tc.BatchSpec.model_validate({"name": "folded", "batch_dim": "P", "rules": ["sum(m, dim=B) != 0.5"],
                                        "fields": {"m": {"dtype": "int32", "shape": ["P", "B"], "max": 9}}})
    m = torch.full((33, 8), 2, dtype=torch.int32)
    m[0, 7] = 12
    plan = compile_plan(spec)
    kernel = tb.program_for(plan, bind(plan, {"m": m})).kernel
    ran = [c for part, fused in codegen.program_groups(kernel) for c, _ in part.checks + (fused.group.checks if fused else ())]
    assert sorted(ran) == list(range(len(kernel.checks)))
    ref = tc.check({"m": m}, spec, backend="torch")
    assert [(v.code, v.index) for v in ref.violations] == [("above_max", (0, 7))]
    assert _key(tc.check({"m": m}, spec, backend="triton")) == _key(ref)
