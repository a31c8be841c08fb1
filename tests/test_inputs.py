"""Bad input to the validator itself: `check` reports it and never raises; `validate` raises one error type."""

from __future__ import annotations

import pickle
import random

import numpy as np
import pytest
import torch

import tritoncheck as tc
from tritoncheck.plan.lower import bind, compile_plan

CE = tc.load_spec("cross-entropy")


def good():
    return {"input": torch.randn(4, 5), "target": torch.tensor([0, 4, -100, 2])}


def codes(batch, spec=CE):
    return sorted((v.field, v.code) for v in tc.check(batch, spec, backend="torch").violations)


@pytest.mark.parametrize("batch", [[torch.zeros(2)], (torch.zeros(2),), torch.zeros(3), None, "input", 3])
def test_batch_not_a_mapping(batch):
    report = tc.check(batch, CE)
    assert [(v.field, v.code) for v in report.violations] == [("<batch>", "not_a_mapping")]
    assert report.skipped


def test_list_batch_gets_a_hint():
    v = tc.check([torch.zeros(2)], CE).violations[0]
    assert "dict(zip(field_names, batch))" in v.hint


def test_a_list_of_samples_is_told_to_collate(capsys):
    """Issue 21: a list of sample dicts (a DataLoader without a collator) got the tuple hint."""
    samples = [{"input": torch.randn(5), "target": torch.tensor(0)}, {"input": torch.randn(5), "target": torch.tensor(4)}]
    report = tc.check(samples, CE)
    [v] = report.violations
    assert v.hint == ("a list of samples, not a batch: collate them first (torch.utils.data.default_collate(samples) "
                      "or your collator; tc.ValidatingCollate(spec) does this in a DataLoader)")
    print(report)
    assert "collate them first" in capsys.readouterr().out


def test_a_too_long_sequence_names_the_parameter_and_its_value():
    """Issue 21: the dims were named, the limit's value was not."""
    from tritoncheck.spec.schema import spec_from_dict

    s = spec_from_dict({"name": "t", "params": {"max_position_embeddings": 8, "other": 3},
                        "fields": {"input_ids": {"dtype": "int64", "shape": ["B", "L"]}},
                        "rules": ["L <= max_position_embeddings where B >= 1"]}, "t")
    [v] = tc.check({"input_ids": torch.zeros(2, 10, dtype=torch.int64)}, s).violations
    assert v.message == ("input_ids: L <= max_position_embeddings where B >= 1 fails with B=2 (from input_ids), "
                         "L=10 (from input_ids), max_position_embeddings=8 (found 10)")


@pytest.mark.parametrize("value", [[0, 1, 2, 3], "abc", 3.0, {"a": 1}, np.float32(1.0), np.array([[1, None]] * 4, dtype=object)])
def test_value_not_a_tensor(value):
    batch = good()
    batch["input"] = value
    assert codes(batch) == [("input", "not_a_tensor")]


def test_numpy_arrays_are_viewed_without_a_copy():
    arr_in = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    arr_t = np.array([0, 4, -100, 7])
    bound = bind(compile_plan(CE), {"input": arr_in, "target": arr_t})
    assert np.shares_memory(bound.tensors["input"].numpy(), arr_in)
    assert np.shares_memory(bound.tensors["target"].numpy(), arr_t)
    report = tc.check({"input": arr_in, "target": arr_t}, CE)
    assert [(v.location, v.code, v.value) for v in report.violations] == [("target[3]", "above_max", 7)]


def test_missing_and_unexpected_fields():
    assert codes({"input": torch.randn(2, 3)}) == [("target", "missing_field")]
    assert codes({"input": torch.randn(2, 3), "target": None}) == [("target", "missing_field")]
    batch = {**good(), "weights": torch.ones(4)}
    assert codes(batch) == [("weights", "unexpected_field")]
    lenient = CE.model_copy(update={"unexpected_fields": "ignore"})
    assert codes(batch, lenient) == []


def test_optional_field_may_be_absent():
    spec = tc.load_spec("t5-seq2seq", vocab_size=10)  # attention_mask and decoder_input_ids left out
    assert codes({"input_ids": torch.tensor([[1, 2]]), "labels": torch.tensor([[1, 2]])}, spec) == []


@pytest.mark.parametrize("n", [0])
def test_empty_batch_is_one_violation(n):
    report = tc.check({"input": torch.zeros(n, 5), "target": torch.zeros(n, dtype=torch.long)}, CE)
    assert [(v.field, v.code) for v in report.violations] == [("input", "empty_batch")]


def test_empty_non_batch_axis_is_not_an_empty_batch():
    spec = tc.load_spec("ctc")
    batch = {"log_probs": torch.randn(5, 2, 3).log_softmax(-1), "targets": torch.zeros(2, 0, dtype=torch.long),
             "input_lengths": torch.tensor([5, 5]), "target_lengths": torch.tensor([0, 0])}
    assert codes(batch, spec) == []


def test_zero_dim_tensors_are_a_rank_violation():
    assert codes({"input": torch.tensor(1.0), "target": torch.tensor(1)}) == [("input", "rank"), ("target", "rank")]


def test_non_contiguous_views_are_checked_in_place():
    base = torch.randn(5, 4)
    target = torch.tensor([0, 1, 2, 9, 3, 3, 1, 0])
    report = tc.check({"input": base.t(), "target": target[::2]}, CE)  # (4, 5) transposed; target [0, 2, 3, 1]
    assert report.ok, str(report)
    report = tc.check({"input": base.t(), "target": target[1::2]}, CE)  # [1, 9, 3, 0]
    assert [(v.location, v.value) for v in report.violations] == [("target[1]", 9)]
    wide = torch.randn(4, 10)
    wide[2, 6] = float("nan")
    report = tc.check({"input": wide[:, ::2], "target": torch.tensor([0, 1, 2, 3])}, CE)
    assert [(v.location, v.code) for v in report.violations] == [("input[2, 3]", "non_finite")]
    expanded = torch.tensor([[0.0, float("inf"), 1.0]]).expand(3, 3)
    report = tc.check({"input": expanded, "target": torch.tensor([0, 1, 2])}, CE)
    assert report.violations[0].count == 3 and report.violations[0].samples == (0, 1, 2)


def test_sparse_and_meta_tensors_are_not_tensors_we_can_check():
    assert codes({"input": torch.randn(4, 5).to_sparse(), "target": torch.tensor([0, 1, 2, 3])}) == [("input", "not_a_tensor")]
    meta = {"input": torch.empty(4, 5, device="meta"), "target": torch.empty(4, dtype=torch.long, device="meta")}
    assert codes(meta) == [("input", "not_a_tensor"), ("target", "not_a_tensor")]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a second device is needed to mix devices")
def test_mixed_devices():
    assert codes({"input": torch.randn(4, 5).cuda(), "target": torch.tensor([0, 1, 2, 3])}) == [("target", "device_mismatch")]


def test_validate_raises_a_picklable_error():
    batch = good()
    assert tc.validate(batch, CE) is batch
    batch["target"][0] = 5
    with pytest.raises(tc.BatchValidationError) as err:
        tc.validate(batch, CE)
    again = pickle.loads(pickle.dumps(err.value))
    assert type(again) is tc.BatchValidationError
    assert again.report == err.value.report
    assert str(again) == str(err.value)
    assert again.errors()[0]["code"] == "above_max"


def test_validate_can_be_disabled(monkeypatch):
    monkeypatch.setenv("TRITONCHECK_DISABLE", "1")
    assert tc.validate([1, 2], CE) == [1, 2]


def test_check_rejects_a_non_spec_and_unknown_backend():
    with pytest.raises(TypeError, match="spec must be a BatchSpec"):
        tc.check(good(), "cross-entropy")
    with pytest.raises(ValueError, match="backend must be"):
        tc.check(good(), CE, backend="jax")


# ---------------------------------------------------------------------------------------------
# fuzz: random junk never makes `check` raise

DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.complex64, torch.uint16, torch.float8_e4m3fn]
SPECS = {n: None for n in ("cross-entropy", "ctc", "mse", "bce")}
SPECS["layoutlmv3-token-classification"] = dict(
    vocab_size=50, max_position_embeddings=20, pad_token_id=1, type_vocab_size=1, max_2d_position_embeddings=1024,
    num_channels=3, input_size=8, num_labels=3)
SPECS["roberta-sequence-classification"] = dict(vocab_size=50, max_position_embeddings=20, pad_token_id=1,
                                                type_vocab_size=1, num_labels=3)


def junk_tensor(rng: random.Random):
    shape = tuple(rng.choice([0, 1, 2, 3, 4, 8]) for _ in range(rng.randint(0, 4)))
    dtype = rng.choice(DTYPES)
    values = [rng.choice([0, 1, -1, -100, 7, 1023, 1e30, float("nan"), float("inf"), -float("inf"), 0.5])
              for _ in range(int(np.prod(shape)) if shape else 1)]
    t = torch.tensor(values, dtype=torch.float64).reshape(shape)
    try:
        t = t.to(dtype)
    except (RuntimeError, TypeError):
        t = t.to(torch.float32)
    if t.dim() >= 2 and rng.random() < 0.3:
        t = t.transpose(0, -1)
    return t


def junk_value(rng: random.Random):
    kind = rng.random()
    if kind < 0.7:
        return junk_tensor(rng)
    if kind < 0.8:
        t = junk_tensor(rng)
        try:
            return t.contiguous().numpy()
        except TypeError:  # numpy has no bfloat16
            return np.zeros(3)
    return rng.choice([None, [1, 2], "x", 3, {"a": 1}, np.array(["a", "b"]), np.array([None]), b"raw", object()])


@pytest.mark.parametrize("seed", range(6))
def test_fuzz_check_never_raises(seed):
    rng = random.Random(seed)
    for name, params in SPECS.items():
        spec = tc.load_spec(name, **(params or {}))
        fields = list(spec.fields)
        for _ in range(40):
            batch = {f: junk_value(rng) for f in fields if rng.random() < 0.85}
            if rng.random() < 0.1:
                batch[rng.choice(["extra", 7, None])] = junk_value(rng)
            report = tc.check(batch, spec, backend="torch")
            str(report), report.to_json()  # the report renders whatever it holds


@pytest.mark.parametrize("seed", range(4))
def test_fuzz_well_shaped_junk_reaches_the_data_checks(seed):
    """Right shapes and dtypes, wild values: the data checks run and never raise."""
    rng = random.Random(seed)
    spec = tc.load_spec("layoutlmv3-token-classification", **SPECS["layoutlmv3-token-classification"])
    seen = set()
    for _ in range(30):
        b, n = rng.randint(1, 3), rng.randint(1, 25)
        ints = lambda *shape: torch.tensor(
            [rng.choice([0, 1, 2, -1, -100, 49, 50, 1023, 1024, 2**40]) for _ in range(int(np.prod(shape)))]).reshape(shape)
        batch = {"input_ids": ints(b, n), "bbox": ints(b, n, 4), "attention_mask": ints(b, n).clamp(0, 2),
                 "labels": ints(b, n), "token_type_ids": ints(b, n).int(),
                 "pixel_values": torch.tensor([rng.choice([0.0, float("nan"), float("inf"), 1e38])
                                               for _ in range(b * 3 * 64)]).reshape(b, 3, 8, 8)}
        report = tc.check(batch, spec, backend="torch")
        seen |= report.codes
        for v in report.violations:
            if v.index:
                assert isinstance(v.value, (int, float, bool))
    assert {"above_max", "below_min", "box_corners", "non_finite"} <= seen
