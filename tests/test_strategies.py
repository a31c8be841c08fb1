"""Property tests of tritoncheck.strategies over every built-in spec and a user-written YAML spec."""

from __future__ import annotations

import importlib.util
import time

import pytest
import torch
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import tritoncheck as tc
from tritoncheck.checks.registry import REGISTRY
from tritoncheck.plan.lower import RuleCheck, compile_plan
from tritoncheck.spec.extends import read_spec
from tritoncheck.strategies import (
    RULE_SHAPES,
    Expected,
    UnsatisfiableSpecError,
    malformed_batches,
    rule_shape,
    valid_batches,
)

# Small parameters: every built-in spec takes what it needs from this.
SMALL = dict(
    vocab_size=11, max_position_embeddings=12, pad_token_id=1, type_vocab_size=2, max_2d_position_embeddings=1024,
    num_channels=3, input_size=4, num_labels=5, in_channels=3, num_classes=4, min_length=3,
)
NAMES = tc.builtin_spec_names()


def small_spec(name: str) -> tc.BatchSpec:
    params = read_spec(name).params
    return tc.load_spec(name, **{k: v for k, v in SMALL.items() if k in params})


def long_l(spec: tc.BatchSpec) -> dict:
    """L up to 16, so that token-budget rules (10 non-pad tokens here) can be broken."""
    return {"L": (1, 16)} if "L" in spec.dim_names() else {}


def _triton_ready() -> bool:
    try:
        return importlib.util.find_spec("tritoncheck.backends.triton") is not None
    except ImportError:
        return False


def found(report: tc.Report) -> list[tuple]:
    """Every violation, warnings included: a mutation breaks one check and nothing else (docs/strategies.md's
    recipe unpacks `(v,) = tc.check(batch, spec).violations`)."""
    return [(v.field, v.code, v.samples) for v in report.violations]


def test_registry_covers_every_builtin_check_kind():
    """A new check kind (or rule shape) in a built-in spec cannot ship without strategies."""
    for name in NAMES:
        plan = compile_plan(small_spec(name))
        kinds = {c.kind for c in plan.checks} | {"dim_bound" for _ in plan.dim_checks}
        assert kinds <= REGISTRY.keys(), (name, kinds - REGISTRY.keys())
        for c in plan.checks:
            if isinstance(c, RuleCheck):
                assert rule_shape(c) is not None, f"{name}: no rule shape in RULE_SHAPES matches {c.text!r}"
    assert {s.name for s in RULE_SHAPES} == {"field_cmp_scalar", "any_along", "count_bound", "pair_order"}


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_valid_batches_pass(name, data):
    spec = small_spec(name)
    batch = data.draw(valid_batches(spec, **long_l(spec)))
    report = tc.check(batch, spec, backend="torch")
    assert not report.violations, str(report)


@pytest.mark.parametrize("name", NAMES)
@settings(derandomize=True, database=None)  # the same draws on every run: a failure here is never luck
@given(data=st.data())
def test_malformed_batches_flagged_exactly(name, data):
    """docs/strategies.md's recipe, on every built-in spec: the report holds one violation, the expected one (a bbox
    below 0 written at x1 also broke box_corners, a warning the mutation let through)."""
    spec = small_spec(name)
    batch, expected = data.draw(malformed_batches(spec, **long_l(spec)))
    report = tc.check(batch, spec, backend="torch")
    (v,) = report.violations
    assert (v.field, v.code, v.samples) == (expected.field, expected.code, expected.samples), f"{expected.mutation}\n{report}"


@pytest.mark.skipif(not _triton_ready(), reason="the triton backend is not in this checkout")
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=4)  # the interpreter is slow on CPU; the torch tests above run the full profile, and
# test_triton_backend.py compares Triton with torch on every built-in spec and dtype
@given(data=st.data())
def test_triton_backend_agrees(name, data):
    spec = small_spec(name)
    batch = data.draw(valid_batches(spec, **long_l(spec)))
    report = tc.check(batch, spec, backend="triton")
    assert not report.violations, str(report)
    batch, expected = data.draw(malformed_batches(spec, **long_l(spec)))
    report = tc.check(batch, spec, backend="triton")
    assert found(report) == [(expected.field, expected.code, expected.samples)], f"{expected.mutation}\n{report}"


def _reachable_codes():
    """(spec, code) for every code a built-in plan can raise, bar one whose break needs an empty dim."""
    cases = []
    for name in NAMES:
        plan = compile_plan(small_spec(name))
        for code in sorted({c.code for c in plan.checks} | {c.code for c in plan.dim_checks}):
            if (name, code) == ("ctc", "dim_bound"):  # blank < C breaks only with C == 0 (no classes at all)
                continue
            if (name, code) == ("bert-question-answering", "all_ignored"):  # every position past the sequence is
                continue  # past its bound too (above_max, a warning): no batch breaks it alone
            cases.append((name, code))
    return cases


@pytest.mark.parametrize(("name", "code"), _reachable_codes())
@settings(max_examples=2)
@given(data=st.data())
def test_every_check_has_a_working_mutation(name, code, data):
    spec = small_spec(name)
    batch, expected = data.draw(malformed_batches(spec, codes={code}, **long_l(spec)))
    assert expected.code == code
    assert found(tc.check(batch, spec, backend="torch")) == [(expected.field, code, expected.samples)]


@settings(max_examples=10)
@given(data=st.data())
def test_dims_are_shared_and_bounded(data):
    spec = small_spec("layoutlmv3-token-classification")
    batch = data.draw(valid_batches(spec, B=(2, 3), L=(5, 7)))
    b, length = batch["input_ids"].shape
    assert 2 <= b <= 3 and 5 <= length <= 7
    assert batch["bbox"].shape == (b, length, 4)
    for name in ("attention_mask", "token_type_ids", "position_ids", "labels"):
        if name in batch:
            assert batch[name].shape == (b, length)
    if "pixel_values" in batch:
        assert batch["pixel_values"].shape == (b, 3, 4, 4)


@settings(max_examples=10)
@given(data=st.data())
def test_dim_rules_narrow_the_dim_draw(data):
    bert = tc.load_spec("bert-sequence-classification", vocab_size=5, max_position_embeddings=4, type_vocab_size=1,
                        num_labels=2)
    assert data.draw(valid_batches(bert, L=(1, 32)))["input_ids"].shape[1] <= 4
    conv = tc.load_spec("conv1d-classifier", in_channels=2, num_classes=3, min_length=6)
    assert data.draw(valid_batches(conv, L=(1, 32)))["inputs"].shape[2] >= 6


def test_optional_fields_and_sentinels_are_both_drawn():
    spec = small_spec("t5-seq2seq")
    seen = {"with": False, "without": False, "sentinel": False}

    @settings(max_examples=60, database=None)
    @given(valid_batches(spec))
    def collect(batch):
        seen["with" if "labels" in batch else "without"] = True
        if "labels" in batch and bool((batch["labels"] == -100).any()):
            seen["sentinel"] = True

    collect()
    assert all(seen.values()), seen


def test_large_float_tensors_are_cheap():
    spec = tc.load_spec("mse")
    start = time.perf_counter()

    @settings(max_examples=5, database=None)
    @given(valid_batches(spec, N=(256, 256), D=(4096, 4096)))
    def draw_big(batch):
        assert batch["input"].shape == (256, 4096)
        assert bool(torch.isfinite(batch["input"].float()).all())

    draw_big()
    assert time.perf_counter() - start < 30


def test_sentinel_misuse_is_a_registered_mutation():
    """labels = -1 where -100 is allowed: below_min on labels, with the -100 hint, and nothing else."""
    spec = small_spec("cross-entropy")

    @settings(max_examples=10, database=None)
    @given(malformed_batches(spec, codes={"below_min"}))
    def check_one(pair):
        batch, expected = pair
        assert expected == Expected("target", "below_min", expected.samples, expected.mutation)
        (v,) = tc.check(batch, spec).violations
        assert v.value == -1 and "-100" in v.hint

    check_one()


def test_bad_dim_bounds_are_rejected():
    spec = small_spec("mse")
    with pytest.raises(ValueError, match="not dims of the spec"):
        valid_batches(spec, L=(1, 4))
    with pytest.raises(ValueError, match="dim bound"):
        valid_batches(spec, N=(4, 1))
    with pytest.raises(TypeError, match="BatchSpec"):
        valid_batches({"fields": {}})


USER_SPEC = """
name: spans
params:
  vocab: 20
fields:
  tokens: {dtype: [int64, int32], shape: [B, L], min: 0, max: vocab - 1}
  mask: {dtype: [bool, int64], shape: [B, L], values: [0, 1]}
  start: {dtype: int64, shape: [B], min: 0}
  end: {dtype: int64, shape: [B]}
  score: {dtype: float32, shape: [B], min: 0.1, max: 0.9, finite: true, optional: true}
rules:
  - rule: start <= end
    code: span_order
  - rule: end < L
  - rule: any(mask, dim=L)
    code: no_attended_position
"""


@pytest.fixture
def user_spec(tmp_path):
    path = tmp_path / "spans.yaml"
    path.write_text(USER_SPEC)
    return tc.load_spec(path)


def test_user_yaml_spec_valid_and_malformed(user_spec):
    @settings(max_examples=25, database=None)
    @given(valid_batches(user_spec, L=(1, 6)))
    def valid(batch):
        report = tc.check(batch, user_spec)
        assert not report.violations, str(report)
        assert bool((batch["end"] < batch["tokens"].shape[1]).all())

    @settings(max_examples=25, database=None)
    @given(malformed_batches(user_spec, L=(1, 6)))
    def malformed(pair):
        batch, expected = pair
        assert found(tc.check(batch, user_spec)) == [(expected.field, expected.code, expected.samples)], expected

    @settings(max_examples=5, database=None)
    @given(malformed_batches(user_spec, codes={"span_order"}, L=(2, 6)))
    def broken_order(pair):
        batch, expected = pair
        assert (expected.field, expected.code) == ("start", "span_order")
        assert found(tc.check(batch, user_spec)) == [("start", "span_order", expected.samples)]

    valid()
    malformed()
    broken_order()


def test_unknown_rule_shape_fails_loudly_not_forever(tmp_path):
    path = tmp_path / "odd.yaml"
    path.write_text(
        "name: odd\nfields:\n  x: {dtype: int64, shape: [B, L], min: 0, max: 9}\n"
        "rules:\n  - rule: x % 2 == 1\n    code: odd_only\n"
    )
    spec = tc.load_spec(path)

    @settings(max_examples=3, database=None, phases=[Phase.generate])
    @given(valid_batches(spec, L=(8, 8)))
    def draw(batch):
        pass

    start = time.perf_counter()
    with pytest.raises(UnsatisfiableSpecError, match="x % 2 == 1"):
        draw()
    assert time.perf_counter() - start < 30


def test_malformed_batches_of_an_unknown_code_is_a_clear_error_at_once():
    """A misspelled code made every draw a rejection, and Hypothesis ended with its own 'Unable to satisfy'."""
    from tritoncheck.strategies import malformed_batches

    spec = tc.load_spec("bert-sequence-classification", vocab_size=50, max_position_embeddings=16,
                        type_vocab_size=2, num_labels=3)
    with pytest.raises(ValueError, match=r"no code 'above_maxx' \(did you mean 'above_max'\?\); this spec's checks "
                                         r"have above_max, below_min"):
        malformed_batches(spec, codes={"above_maxx"})
    user = tc.BatchSpec.model_validate({"name": "u", "fields": {"lo": {"dtype": "float32", "shape": ["B"]},
                                        "hi": {"dtype": "float32", "shape": ["B"]}},
                                        "rules": [{"rule": "lo <= hi", "code": "span_order"}]})
    malformed_batches(user, codes={"span_order"})  # a rule's own code is a code of this spec


def test_codes_no_batch_breaks_alone_is_an_error_that_says_so():
    """QA's `any(start_positions < L)` (all_ignored) cannot break alone: every start position past the sequence is
    past its bound too (a warning). Asked for only that code, every draw was rejected and Hypothesis ended with
    `Unsatisfiable: ... failed a .filter() or assume()`, which names neither the code nor why."""
    spec = tc.load_spec("bert-question-answering", vocab_size=100, max_position_embeddings=64, type_vocab_size=2)

    @settings(max_examples=20, deadline=None, database=None)
    @given(tc.strategies.malformed_batches(spec, codes=["all_ignored"]))
    def draw(case):
        pass

    with pytest.raises(tc.strategies.UnsatisfiableSpecError, match=r"codes=\['all_ignored'\]\): in 40 draws no batch broke"):
        draw()
