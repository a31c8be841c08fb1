"""The warm path of `tc.check` on the C backend: a batch with the signature of the spec's last C check
skips `bind` (torch's tensor guard says the signature is the same) and, when its data pass, returns
one shared report. Every report here is compared with the torch backend's, field for field, after
a batch of another signature too (dtype, shape, strides, a lazy bit, an odd tensor or value): such
a batch must be bound again, never crash the process, and never change the next batch's verdict.
"""

from __future__ import annotations

import pickle
import threading

import pytest
import torch
import yaml
from report_compare import comparable

import tritoncheck as tc
from tritoncheck.api import core
from tritoncheck.backends import c as c_backend
from tritoncheck.plan import lower
from tritoncheck.spec.schema import spec_from_dict

pytestmark = pytest.mark.skipif(not c_backend.available(), reason="no C compiler")

SPEC_YAML = """
name: warm
fields:
  ids: {dtype: [int64, int32], shape: [B, L], min: 0, max: 9, severity: {above_max: warning}}
  mask: {dtype: int64, shape: [B, L], values: [0, 1]}
  x: {dtype: float32, shape: [B, 3], finite: true}
  labels: {dtype: int64, shape: [B], min: 0, max: 4, optional: true}
rules:
  - rule: L <= 6
    severity: warning
"""


def fresh_spec() -> tc.BatchSpec:
    """A spec object of its own: no warm entry from another test."""
    return spec_from_dict(yaml.safe_load(SPEC_YAML), "warm.yaml")


def batch(B: int = 2, L: int = 4) -> dict:
    return {"ids": torch.arange(B * L).reshape(B, L) % 10, "mask": torch.ones(B, L, dtype=torch.int64),
            "x": torch.zeros(B, 3), "labels": torch.arange(B) % 5}


def like_torch(b, spec, strict: bool = False) -> tc.Report:
    report = tc.check(b, spec, backend="c", strict=strict)
    reference = tc.check(b, spec, backend="torch", strict=strict)
    assert comparable(report.to_dict() | {"backend": "-"}) == comparable(reference.to_dict() | {"backend": "-"})
    return report


def warmed() -> tc.BatchSpec:
    spec = fresh_spec()
    assert like_torch(batch(), spec).ok
    return spec


def test_this_torch_has_the_guard_the_warm_path_relies_on():
    # without it, the warm path compares `bind`'s key instead (`test_without_the_guard_...`): correct, but the
    # fixed cost of a small batch's check is three times as large
    assert lower._guard_works()


def test_a_warm_check_binds_nothing_and_finds_what_the_kernel_finds(monkeypatch):
    spec = warmed()
    calls = []
    bind = core.bind
    monkeypatch.setattr(core, "bind", lambda *args: calls.append(1) or bind(*args))
    report = tc.check(batch(), spec, backend="c")  # new tensors, the same signature
    assert report.ok and not report.violations and calls == []
    bad = batch()
    bad["mask"][1, 2] = 7
    bad["x"][0, 1] = float("nan")
    report = like_torch(bad, spec)  # the kernel finds them; binding again (to decode) is allowed
    assert sorted(v.code for v in report.violations) == ["non_finite", "not_in_set"] and calls
    assert like_torch(batch(), spec).ok


def test_a_field_bound_as_a_view_of_its_data_keeps_the_warm_path(monkeypatch):
    """`bind` drops a field's optional size-1 axis as a view (`x[..., 0]`) at the batch tensor's data pointer,
    which is what the C kernel reads: the warm path stays (`core.remember` compares data pointers for C)."""
    spec = spec_from_dict({"name": "unit", "fields": {"x": {"dtype": "int64", "shape": ["B", "1?"], "min": 0}}},
                          "unit.yaml")
    assert like_torch({"x": torch.zeros(3, 1, dtype=torch.int64)}, spec).ok
    calls = []
    bind = core.bind
    monkeypatch.setattr(core, "bind", lambda *args: calls.append(1) or bind(*args))
    assert tc.check({"x": torch.zeros(3, 1, dtype=torch.int64)}, spec, backend="c").ok and calls == []
    bad = torch.zeros(3, 1, dtype=torch.int64)
    bad[2, 0] = -1
    assert [(v.code, v.index) for v in like_torch({"x": bad}, spec).violations] == [("below_min", (2,))]


def test_each_length_of_dynamic_padding_has_its_warm_check(monkeypatch):
    spec = warmed()
    assert like_torch(batch(L=5), spec).ok and like_torch(batch(L=3), spec).ok
    calls = []
    bind = core.bind
    monkeypatch.setattr(core, "bind", lambda *args: calls.append(1) or bind(*args))
    for L in (4, 5, 3, 5, 4):  # each a signature seen before, none the last one's
        assert tc.check(batch(L=L), spec, backend="c").dims["L"] == (L, "ids")
    assert calls == []
    bad = batch(L=5)
    bad["labels"][0] = -1
    assert [v.code for v in like_torch(bad, spec).violations] == ["below_min"]


def test_warm_reports_keep_warnings_and_strictness_apart():
    spec = warmed()
    long = batch(L=8)  # the dim rule warns
    for _ in range(2):  # cold, then warm
        assert like_torch(long, spec).ok and [v.severity for v in like_torch(long, spec).violations] == ["warning"]
        assert not like_torch(long, spec, strict=True).ok
    above = batch()
    above["ids"][0, 0] = 12  # a data warning
    for _ in range(2):
        report = like_torch(above, spec)
        assert report.ok and [v.code for v in report.warnings] == ["above_max"]
        assert not like_torch(above, spec, strict=True).ok
    assert like_torch(batch(), spec).ok and like_torch(batch(), spec, strict=True).ok


def _changes() -> dict:
    """Batches of another signature than `batch()`, each made fresh."""

    def changed(**fields):
        return lambda: batch() | {k: v() for k, v in fields.items()}

    def without(name):
        return lambda: {k: v for k, v in batch().items() if k != name}

    def x_neg_bit():  # -0.0 as a lazily negated view: the same dtype, shape and strides as ever
        return torch.zeros(2, 3, dtype=torch.complex64).conj().imag

    ids_t = lambda: (torch.arange(8) % 10).reshape(4, 2).t()  # noqa: E731 (the same shape, transposed strides)
    return {
        "dtype": changed(ids=lambda: batch()["ids"].int()),
        "a wrong dtype": changed(mask=lambda: torch.ones(2, 4, dtype=torch.int32)),
        "shape": lambda: batch(3, 5),
        "strides": changed(ids=ids_t),
        "expanded": changed(mask=lambda: torch.ones(1, 4, dtype=torch.int64).expand(2, 4)),
        "negation bit": changed(x=x_neg_bit),
        "requires_grad": changed(x=lambda: torch.zeros(2, 3, requires_grad=True)),
        "optional field None": changed(labels=lambda: None),
        "optional field absent": without("labels"),
        "required field absent": without("mask"),
        "an extra key": changed(extra=lambda: torch.zeros(1)),
        "keys in another order": lambda: dict(reversed(list(batch().items()))),
        "numpy": changed(ids=lambda: batch()["ids"].numpy()),
        "a list": changed(labels=lambda: [0, 1]),
        "nested": changed(x=lambda: torch.nested.nested_tensor([torch.zeros(3), torch.zeros(3)])),
        "sparse": changed(x=lambda: torch.zeros(2, 3).to_sparse()),
        "a subclass": changed(x=lambda: torch.nn.Parameter(torch.zeros(2, 3))),
        "meta": changed(x=lambda: torch.zeros(2, 3, device="meta")),
        "one tensor for two fields": lambda: (lambda b: b | {"mask": b["ids"]})(batch()),
        "a dict subclass": lambda: type("D", (dict,), {})(batch()),
    }


CHANGES = _changes()


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("change", CHANGES)
def test_a_batch_of_another_signature_is_bound_again(change):
    spec = warmed()
    for _ in range(2):  # the changed batch cold, then (where it keeps a signature) warm itself
        like_torch(CHANGES[change](), spec)
        assert like_torch(batch(), spec).ok  # and the warm entry of the original still judges right


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_without_the_guard_the_key_is_compared(monkeypatch):
    monkeypatch.setattr(lower, "_guard_verdict", [False])
    spec = warmed()
    calls = []
    signature = lower._signature
    monkeypatch.setattr(lower, "_signature", lambda *args: calls.append(1) or signature(*args))
    assert like_torch(batch(), spec).ok and calls  # the warm path compared keys
    for change in ("dtype", "strides", "negation bit", "nested", "keys in another order"):
        like_torch(CHANGES[change](), spec)
        assert like_torch(batch(), spec).ok


def test_threads_share_a_warm_entry():
    spec = warmed()
    bad = batch()
    bad["labels"][1] = 9
    want_bad = comparable(tc.check(bad, spec, backend="torch").to_dict() | {"backend": "-"})
    failures = []

    def work():
        for i in range(200):
            b = bad if i % 3 == 0 else batch()
            got = comparable(tc.check(b, spec, backend="c").to_dict() | {"backend": "-"})
            if got != (want_bad if b is bad else comparable(tc.check(batch(), spec, backend="torch").to_dict() | {"backend": "-"})):
                failures.append(i)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []


def test_a_reports_dims_cannot_change_and_survive_pickle():
    spec = warmed()
    report = tc.check(batch(), spec, backend="c")
    assert report.dims == {"B": (2, "ids"), "L": (4, "ids")}
    with pytest.raises(TypeError, match="cannot change"):
        report.dims["B"] = (3, "ids")
    with pytest.raises(TypeError):
        report.dims.update(B=(3, "ids"))
    assert tc.check(batch(), spec, backend="c").dims == {"B": (2, "ids"), "L": (4, "ids")}
    again = pickle.loads(pickle.dumps(report))
    assert again == report and again.dims == report.dims and dict(again.dims) == {"B": (2, "ids"), "L": (4, "ids")}
    assert tc.Report("s", dims={"B": (1, "x")}).dims == {"B": (1, "x")}


def test_specs_built_in_a_loop_keep_a_bounded_number_of_warm_entries():
    for _ in range(lower.MAX_PLANS + 5):
        assert tc.check(batch(), fresh_spec(), backend="c").ok
    assert len(core._warm) <= lower.MAX_PLANS


def test_a_numpy_batch_is_never_warm():
    spec = fresh_spec()
    b = {k: v.numpy() for k, v in batch().items()}
    for _ in range(2):
        like_torch(b, spec)
    assert id(spec) not in core._warm


def test_a_warm_entry_keeps_no_tensor_of_a_batch_alive():
    import gc
    import weakref

    spec = fresh_spec()
    batches = [batch(), batch(), batch(L=5)]
    refs = [weakref.ref(t) for b in batches for t in b.values()]
    for b in batches:
        assert tc.check(b, spec, backend="c").ok
    del batches, b
    gc.collect()
    assert [r for r in refs if r() is not None] == []
