"""Regression tests for findings of a review of severity, bind's signature cache, present(), '1?' and
the strategies. Every compiled backend's report is compared with the torch backend's."""

from __future__ import annotations

import types

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from report_compare import comparable

import tritoncheck as tc
from tritoncheck.spec.schema import spec_from_dict

PRESENCE = {
    "name": "presence",
    "fields": {
        "input_ids": {"dtype": "int64", "shape": ["B", "L"]},
        "labels": {"dtype": "int64", "shape": ["B", "T"], "optional": True},
    },
    "rules": [
        # applies only with labels of more than 2 steps: without labels, T is unbound, yet the
        # rule clearly does not apply
        {"rule": "input_ids >= 1 where present(labels) & (T > 2)", "code": "starts_at_one"},
        # without labels the `where` holds whatever T is: the bound applies
        {"rule": "L <= 2 where (not present(labels)) | (T > 2)", "code": "sequence_too_long"},
        # a size bound over an absent field's dim that does not apply: nothing to skip
        {"rule": "T <= 5 where present(labels)", "code": "dim_bound"},
    ],
}


def ids(*shape):
    return torch.zeros(*shape, dtype=torch.int64)


def reference(batch, spec):
    return comparable(tc.check(batch, spec, backend="torch").to_dict())


def test_a_where_decided_by_presence_alone_needs_no_other_dim(backend):
    spec = spec_from_dict(PRESENCE, "presence.yaml")
    report = tc.check({"input_ids": ids(2, 3)}, spec, backend=backend)
    assert [(v.field, v.code, v.value) for v in report.violations] == [("input_ids", "sequence_too_long", 3)]
    assert report.skipped == ()
    assert comparable(report.to_dict()) | {"backend": None} == reference({"input_ids": ids(2, 3)}, spec) | {"backend": None}
    # with labels of 4 steps both rules over data apply, and fail
    report = tc.check({"input_ids": ids(2, 2), "labels": ids(2, 4)}, spec, backend=backend)
    assert [v.code for v in report.violations] == ["starts_at_one"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(b=tc.strategies.valid_batches(spec_from_dict(PRESENCE, "presence.yaml")))
def test_valid_batches_of_a_presence_where_pass(b):
    spec = spec_from_dict(PRESENCE, "presence.yaml")
    for backend in ("torch", "c", "triton"):
        assert not tc.check(b, spec, backend=backend).violations, backend


WARNED = {
    "name": "toy-warned",
    "fields": {"features": {"dtype": "float32", "shape": ["B", 3], "max": 10, "severity": {"above_max": "warning"}},
               "target": {"dtype": "int64", "shape": ["B"], "min": 0, "max": 3}},
}


def warned_batch(features=(0.0, 0.0, 0.0, 0.0), targets=(0, 1, 2, 3)):
    return {"features": torch.tensor(features).repeat(3, 1).T.contiguous(), "target": torch.tensor(targets)}


def test_lightning_names_only_samples_with_errors_as_bad():
    pytest.importorskip("lightning", reason="pip install lightning (in the test extra)")
    from tritoncheck.integrations.lightning import TritoncheckCallback

    callback = TritoncheckCallback(spec_from_dict(WARNED, "w.yaml"))
    batch = warned_batch(features=(50.0, 0.0, 0.0, 0.0), targets=(0, 1, 9, 3))  # sample 0 warns, sample 2 errs
    batch["idx"] = torch.tensor([10, 11, 12, 13])
    callback.index = "idx"
    with pytest.raises(tc.BatchValidationError) as info:
        callback.on_validation_batch_start(types.SimpleNamespace(sanity_checking=False), None, batch, 0)
    assert info.value.__notes__ == ["in Lightning validate batch_idx 0; dataset indices of the bad samples: 12 (sample 2)"]


def test_lightning_logs_warnings_and_strict_raises_for_them(caplog):
    pytest.importorskip("lightning", reason="pip install lightning (in the test extra)")
    from tritoncheck.integrations.lightning import TritoncheckCallback

    spec = spec_from_dict(WARNED, "w.yaml")
    trainer = types.SimpleNamespace(sanity_checking=False)
    batch = warned_batch(features=(50.0, 0.0, 0.0, 0.0))
    with caplog.at_level("WARNING", logger="tritoncheck"):
        TritoncheckCallback(spec).on_train_batch_start(trainer, None, batch, 0)
    assert "warning: features" in caplog.text
    with pytest.raises(tc.BatchValidationError, match="features"):
        TritoncheckCallback(spec, strict=True).on_train_batch_start(trainer, None, batch, 0)


def test_hf_collator_takes_strict():
    pytest.importorskip("transformers", reason="pip install transformers (in the test extra)")
    from tritoncheck.integrations.hf import ValidatingDataCollator

    spec = spec_from_dict(WARNED, "w.yaml")
    rows = [{"features": torch.tensor([50.0, 0.0, 0.0]), "target": torch.tensor(1)},
            {"features": torch.zeros(3), "target": torch.tensor(2)}]
    collate = ValidatingDataCollator(lambda samples: torch.utils.data.default_collate(samples), spec)
    assert collate(rows)["target"].tolist() == [1, 2]  # a warning passes
    strict = ValidatingDataCollator(lambda samples: torch.utils.data.default_collate(samples), spec, strict=True)
    with pytest.raises(tc.BatchValidationError, match="features"):
        strict(rows)


def test_scan_strict_messages_read_as_errors(tmp_path, capsys):
    import json

    from tritoncheck.cli import main

    (tmp_path / "warned.yaml").write_text(
        "name: warned\nfields:\n  input: {dtype: float, shape: [B, C]}\n"
        "  target: {dtype: int64, shape: [B], min: 0, max: C - 1, severity: {above_max: warning}}\n")
    torch.save({"input": torch.zeros(2, 3), "target": torch.tensor([0, 7])}, tmp_path / "a.pt")
    assert main(["scan", str(tmp_path / "warned.yaml"), str(tmp_path / "a.pt"), "--json", "--strict"]) == 1
    (entry,) = json.loads(capsys.readouterr().out)["violations"]
    assert entry["severity"] == "error" and entry["message"].startswith("target[1]: ")


def test_specs_built_in_a_loop_do_not_pile_up_in_the_caches():
    from tritoncheck.plan import lower as _plan
    from tritoncheck.backends import c as c_backend
    base = spec_from_dict({"name": "n", "params": {"k": 1}, "fields": {"x": {"dtype": "int64", "shape": ["B"], "max": "k"}}},
                          "n.yaml")
    for k in range(_plan.MAX_PLANS + 5):  # a new plan each time (of the same text: one compile)
        report = tc.check({"x": torch.tensor([0, k + 1])}, base.with_params(k=1), backend="c")
        assert [v.value for v in report.violations] == [k + 1] if k else not report.violations
    assert len(_plan._signatures) <= _plan.MAX_PLANS and len(c_backend._entries) <= _plan.MAX_PLANS


# A rule on a selection (`ids[:, 0] == 1`, a CLS token) constrains only that selection: the rest of
# the field keeps its range, so a token budget over pads (`sum(ids != 0) <= 4`) can still be met.
SELECTED = spec_from_dict({
    "name": "selected",
    "fields": {"ids": {"dtype": "int64", "shape": ["B", "L"], "min": 0, "max": 9}},
    "rules": [{"rule": "sum(ids != 0, dim=L) <= 4", "code": "budget"}, {"rule": "ids[:, 0] == 1", "code": "cls_first"}],
}, "selected.yaml")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(b=tc.strategies.valid_batches(SELECTED, L=(1, 12)))
def test_a_rule_on_a_selection_leaves_the_rest_of_the_field_free(b):
    for backend in ("torch", "c", "triton"):
        assert not tc.check(b, SELECTED, backend=backend).violations, backend


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=tc.strategies.malformed_batches(SELECTED, L=(1, 12)))
def test_malformed_batches_of_a_rule_on_a_selection(case):
    b, expected = case
    want = reference(b, SELECTED)
    assert [(v["field"], v["code"], tuple(v["rows"])) for v in tc.check(b, SELECTED).to_dict()["violations"]] == [
        (expected.field, expected.code, expected.samples)]
    for backend in ("c", "triton"):
        assert comparable(tc.check(b, SELECTED, backend=backend).to_dict()) | {"backend": None} == want | {"backend": None}


def test_scan_narrows_a_batch_whose_unit_tail_field_has_its_size_1_axis():
    from tritoncheck.scanning.engine import scan_batch

    spec = spec_from_dict({"name": "cls", "fields": {
        "input_ids": {"dtype": "int64", "shape": ["B", "L"], "min": 0},
        "labels": {"dtype": "int64", "shape": ["B", "1?"], "min": 0, "max": 2}}}, "cls.yaml")
    for labels in (torch.tensor([0, 5, 1, 7]), torch.tensor([[0], [5], [1], [7]])):
        found, _, _ = scan_batch({"input_ids": ids(4, 3), "labels": labels}, spec, "torch")
        assert [(p, v.code, v.value) for p, v in found] == [(1, "above_max", 5), (3, "above_max", 7)], labels.shape


UNIT = spec_from_dict({"name": "cls", "fields": {
    "input_ids": {"dtype": "int64", "shape": ["B", "L"], "min": 0},
    "labels": {"dtype": "int64", "shape": ["B", "1?"], "min": 0, "max": 2, "severity": {"below_min": "warning"}}},
    "rules": [{"rule": "labels != 1", "code": "no_ones"}]}, "cls.yaml")


def test_malformed_batches_come_with_the_size_1_axis_too():
    from hypothesis import find

    b, expected = find(tc.strategies.malformed_batches(UNIT, codes=["above_max"]), lambda c: c[0]["labels"].dim() == 2,
                       settings=settings(database=None, max_examples=200))
    for backend in ("torch", "c", "triton"):
        found = [(v.field, v.code, v.samples) for v in tc.check(b, UNIT, backend=backend).violations]
        assert found == [(expected.field, "above_max", expected.samples)], backend


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=tc.strategies.malformed_batches(UNIT))
def test_malformed_unit_tail_batches_agree_on_every_backend(case):
    b, expected = case
    report = tc.check(b, UNIT)
    assert [(v.field, v.code, v.samples) for v in (report.errors or report.violations)] == [
        (expected.field, expected.code, expected.samples)], expected.mutation
    for backend in ("c", "triton"):
        got = comparable(tc.check(b, UNIT, backend=backend).to_dict())
        assert got | {"backend": None} == comparable(report.to_dict()) | {"backend": None}, backend


# bind caches its verdict per batch signature (and the compiled program on it): two batches that
# differ in one respect only must not share an entry. Batch B is checked right after batch A on
# the same spec, and its report compared with an uncached reference (a mapping that is not a
# dict is never cached) on a fresh spec.
CACHED = {
    "name": "cached",
    "fields": {
        "ids": {"dtype": ["int64", "int32"], "shape": ["B", "L"], "min": 0, "max": 9},
        "mask": {"dtype": ["int64", "bool"], "shape": ["B", "L"], "values": [0, 1], "optional": True},
        "labels": {"dtype": "int64", "shape": ["B", "1?"], "min": 0, "max": 2},
    },
    "rules": [{"rule": "ids[:, 2] >= 1", "code": "third"},
              {"rule": "any(mask != 0, dim=L)", "code": "no_attended_position"},
              {"rule": "sum(ids != 0, dim=L) <= 2 where not present(mask)", "code": "budget"}],
}


def _cached_pair(kind):
    ids_ = torch.tensor([[1, 0, 5, 7], [3, 4, 0, 2]])
    labels = torch.tensor([0, 5])
    a = {"ids": ids_, "labels": labels}
    if kind == "dtype":
        return a, {"ids": ids_.int(), "labels": labels}
    if kind == "strides":
        wide = torch.tensor([[1, 9, 0, 9, 5, 9, 7, 9], [3, 9, 4, 9, 0, 9, 2, 9]])
        return a, {"ids": wide[:, ::2], "labels": labels}
    if kind == "presence":
        return a, {"ids": ids_, "mask": torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]]), "labels": labels}
    if kind == "unit_tail":
        return a, {"ids": ids_, "labels": labels[:, None]}
    if kind == "unit_tail_strided":
        return {"ids": ids_, "labels": labels[:, None]}, {"ids": ids_, "labels": torch.stack([labels, labels], 1)[:, :1]}
    if kind == "index_past_end":  # L = 2: ids[:, 2] is past the end
        return a, {"ids": ids_[:, :2].contiguous(), "labels": labels}
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["dtype", "strides", "presence", "unit_tail", "unit_tail_strided", "index_past_end"])
def test_a_batch_differing_in_one_respect_binds_afresh(kind, backend):
    from types import MappingProxyType

    a, b = _cached_pair(kind)
    spec = spec_from_dict(CACHED, "cached.yaml")
    tc.check(a, spec, backend=backend)
    got = comparable(tc.check(b, spec, backend=backend).to_dict()) | {"backend": None}
    want = comparable(tc.check(MappingProxyType(b), spec_from_dict(CACHED, "cached.yaml"), backend="torch").to_dict())
    assert got == want | {"backend": None}


@pytest.mark.parametrize("where", ["", " where present(attention_mask)"])
def test_scan_finds_a_ragged_row_too_short_for_a_size_rule_with_a_presence_where(tmp_path, where):
    pa = pytest.importorskip("pyarrow", reason="pip install pyarrow (in the test extra)")
    import pyarrow.parquet as pq

    spec = spec_from_dict({"name": "r", "fields": {
        "input_ids": {"dtype": "int64", "shape": ["B", "L"], "min": 0},
        "attention_mask": {"dtype": "int64", "shape": ["B", "L"], "optional": True}},
        "rules": [{"rule": "L >= 3" + where, "code": "too_short"}]}, "r.yaml")
    rows = [[1, 2, 3, 4, 5], [1, 2], [1, 2, 3, 4]]  # row 1 alone has L = 2; the padded chunk has L = 5
    pq.write_table(pa.table({"input_ids": rows, "attention_mask": [[1] * len(r) for r in rows]}), tmp_path / "x.parquet")
    report = tc.scan(spec, tmp_path / "x.parquet", backend="torch")
    assert [(e["sample"], e["code"]) for e in report["violations"]] == [(1, "too_short")]


def test_scan_pads_no_row_into_a_rule_whose_presence_where_reads_a_size(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="pip install pyarrow (in the test extra)")
    import pyarrow.parquet as pq

    spec = spec_from_dict({"name": "r", "fields": {
        "input_ids": {"dtype": "int64", "shape": ["B", "L"], "min": 0},
        "labels": {"dtype": "int64", "shape": ["B", "T"], "optional": True}},
        "rules": [{"rule": "input_ids >= 1 where present(labels) & (T > 2)", "code": "starts"}]}, "r.yaml")
    # row 1 alone has T = 2, where the rule does not apply; padded beside row 0 it would have T = 4
    pq.write_table(pa.table({"input_ids": [[0, 2, 3], [0, 2, 3]], "labels": [[1, 2, 3, 4], [1, 2]]}), tmp_path / "y.parquet")
    report = tc.scan(spec, tmp_path / "y.parquet", backend="torch")
    assert [(e["sample"], e["code"]) for e in report["violations"]] == [(0, "starts")]


def test_threads_missing_bind_cache_together_do_not_break_it(monkeypatch):
    """Threads binding new signatures of one plan at once, with the per-plan cache full, evict and
    insert under one lock (the unlocked eviction raised 'dictionary changed size during iteration'
    in about half the runs of this test)."""
    import sys
    import threading

    from tritoncheck.plan import lower as _plan
    monkeypatch.setattr(_plan, "MAX_SIGNATURES", 2)
    spec = tc.BatchSpec.model_validate({"name": "race", "fields": {"x": {"dtype": "int64", "shape": ["B", "L"], "max": 5}}})
    plan = _plan.compile_plan(spec)
    errors: list[str] = []

    def work(t: int) -> None:
        try:
            for i in range(1500):
                length = 1 + (i * 7 + t) % 40
                bound = _plan.bind(plan, {"x": torch.zeros(2, length, dtype=torch.int64)})
                assert bound.dim_values()["L"] == length
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(repr(exc))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
