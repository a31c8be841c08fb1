"""The built-in loss and conv1d specs against the torch functions and modules they describe.

Each family has a table of batches: valid ones at the edges of the contract, and corrupted ones.
The function is the oracle: every batch that makes it raise or return a non-finite loss must be
flagged as an error with the expected field and code, and every valid batch must pass the spec AND
give a finite loss. The Hugging Face model specs are checked against the real models in
tests/test_model_agreement.py.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import tritoncheck as tc

B = 2


def outcome(fn) -> str:
    """'ok', 'nonfinite' or 'raised: ...' for one forward pass."""
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loss = fn()
    except Exception as exc:  # the oracle: any error the model raises counts
        return f"raised: {type(exc).__name__}: {exc}"
    return "ok" if bool(torch.isfinite(loss).all()) else "nonfinite"


def assert_case(spec, batch, run, expected):
    report = tc.check(batch, spec, backend="torch")
    result = outcome(lambda: run(batch))
    found = {(v.field, v.code) for v in report.violations}
    if expected is None:
        assert report.ok, str(report)
        assert result == "ok", result
        return
    assert expected in found, f"expected {expected}, got {found}; model: {result}"
    if result != "ok":
        assert expected in {(v.field, v.code) for v in report.errors}


def _set(field, index, value):
    def mutate(b):
        b[field][index] = value
        return b

    return mutate


def _replace(field, make):
    def mutate(b):
        b[field] = make(b)
        return b

    return mutate


def _drop(field):
    def mutate(b):
        del b[field]
        return b

    return mutate


def _chain(*fns):
    def mutate(b):
        for f in fns:
            b = f(b)
        return b

    return mutate


# ---------------------------------------------------------------------------------------------
# Conv1d classifier


@pytest.fixture(scope="module")
def conv1d():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv1d(4, 8, kernel_size=3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(),
        torch.nn.Linear(8, 3),
    ).eval()
    spec = tc.load_spec("conv1d-classifier", in_channels=4, num_classes=3, min_length=3)
    return model, spec


def conv_batch(length=16):
    g = torch.Generator().manual_seed(4)
    return {"inputs": torch.randn(B, 4, length, generator=g), "labels": torch.tensor([0, 2])}


CONV_CASES = {
    "shortest input": (lambda b: conv_batch(3), None),
    "float64 input": (lambda b: {"inputs": b["inputs"].double().float(), "labels": b["labels"]}, None),
    "channels last": (_replace("inputs", lambda b: b["inputs"].transpose(1, 2).contiguous()), ("inputs", "shape")),
    "missing channel axis": (_replace("inputs", lambda b: b["inputs"][:, 0]), ("inputs", "rank")),
    "too short": (lambda b: conv_batch(2), ("inputs", "dim_bound")),
    "NaN input": (_set("inputs", (1, 2, 3), float("nan")), ("inputs", "non_finite")),
    "label == num_classes": (_set("labels", 0, 3), ("labels", "above_max")),
    "label -1": (_set("labels", 0, -1), ("labels", "below_min")),
}


@pytest.mark.parametrize("case", list(CONV_CASES))
def test_conv1d(conv1d, case):
    model, spec = conv1d
    mutate, expected = CONV_CASES[case]
    assert_case(spec, mutate(conv_batch()), lambda b: F.cross_entropy(model(b["inputs"]), b["labels"]), expected)


# ---------------------------------------------------------------------------------------------
# Losses: fields named as torch names the arguments

N, C = 4, 5


def ce_batch():
    g = torch.Generator().manual_seed(5)
    return {"input": torch.randn(N, C, generator=g), "target": torch.tensor([0, 4, -100, 2])}


def nll_batch():
    b = ce_batch()
    b["input"] = b["input"].log_softmax(-1)
    return b


def bce_batch(logits=False):
    g = torch.Generator().manual_seed(6)
    x = torch.randn(N, 3, generator=g)
    return {"input": x if logits else x.sigmoid(), "target": torch.randint(0, 2, (N, 3), generator=g).float()}


CLASS_CASES = {
    "edges": (lambda b: b, None),
    "target == C": (_set("target", 0, C), ("target", "above_max")),
    "target -1": (_set("target", 0, -1), ("target", "below_min")),
    "all ignored": (_replace("target", lambda b: torch.full((N,), -100)), ("target", "all_ignored")),
    "NaN input": (_set("input", (1, 1), float("nan")), ("input", "non_finite")),
    "float target": (_replace("target", lambda b: b["target"].clamp(min=0).float()), ("target", "dtype")),
    "(N, 1) target": (_replace("target", lambda b: b["target"][:, None]), ("target", "rank")),
    "N mismatch": (_replace("target", lambda b: torch.tensor([0, 1, 2])), ("target", "dim_mismatch")),
}


@pytest.mark.parametrize("case", list(CLASS_CASES))
@pytest.mark.parametrize("loss", ["cross-entropy", "nll"])
def test_class_losses(loss, case):
    spec = tc.load_spec(loss)
    mutate, expected = CLASS_CASES[case]
    fn = F.cross_entropy if loss == "cross-entropy" else F.nll_loss
    batch = mutate(ce_batch() if loss == "cross-entropy" else nll_batch())
    assert_case(spec, batch, lambda b: fn(b["input"], b["target"]), expected)


def test_nll_rejects_probabilities():
    batch = ce_batch()
    batch["input"] = batch["input"].softmax(-1)
    report = tc.check(batch, tc.load_spec("nll"))
    assert ("input", "above_max") in {(v.field, v.code) for v in report.violations}


BCE_CASES = {
    "edges": (lambda b: b, None),
    "probability 0 and 1": (_chain(_set("input", (0, 0), 0.0), _set("input", (0, 1), 1.0)), None),
    "input above 1": (_set("input", (0, 0), 1.5), ("input", "above_max")),
    "negative input": (_set("input", (0, 0), -0.5), ("input", "below_min")),
    "NaN input": (_set("input", (0, 0), float("nan")), ("input", "non_finite")),
    "target 2": (_set("target", (0, 0), 2.0), ("target", "above_max")),
    "NaN target": (_set("target", (0, 0), float("nan")), ("target", "non_finite")),
    "shape mismatch": (_replace("target", lambda b: b["target"][:, :1]), ("target", "dim_mismatch")),
}


@pytest.mark.parametrize("case", list(BCE_CASES))
def test_bce(case):
    mutate, expected = BCE_CASES[case]
    assert_case(tc.load_spec("bce"), mutate(bce_batch()), lambda b: F.binary_cross_entropy(b["input"], b["target"]), expected)


BCE_LOGIT_CASES = {
    "edges": (lambda b: b, None),
    "inf logit": (_set("input", (0, 0), float("inf")), ("input", "non_finite")),
    "NaN logit": (_set("input", (0, 0), float("nan")), ("input", "non_finite")),
    "target 2": (_set("target", (0, 0), 2.0), ("target", "above_max")),
    "NaN target": (_set("target", (0, 0), float("nan")), ("target", "non_finite")),
}


@pytest.mark.parametrize("case", list(BCE_LOGIT_CASES))
def test_bce_with_logits(case):
    mutate, expected = BCE_LOGIT_CASES[case]
    batch = mutate(bce_batch(logits=True))
    assert_case(tc.load_spec("bce-with-logits"), batch, lambda b: F.binary_cross_entropy_with_logits(b["input"], b["target"]), expected)


MSE_CASES = {
    "edges": (lambda b: b, None),
    "NaN target": (_set("target", (0, 0), float("nan")), ("target", "non_finite")),
    "inf input": (_set("input", (0, 0), float("inf")), ("input", "non_finite")),
    "(N,) against (N, 1)": (_replace("target", lambda b: b["target"][:, 0]), ("target", "rank")),
    "int target": (_replace("target", lambda b: b["target"].long()), ("target", "dtype")),
}


@pytest.mark.parametrize("case", list(MSE_CASES))
def test_mse(case):
    mutate, expected = MSE_CASES[case]
    batch = mutate({"input": torch.randn(N, 1), "target": torch.randn(N, 1)})
    assert_case(tc.load_spec("mse"), batch, lambda b: F.mse_loss(b["input"], b["target"]), expected)


def ctc_batch():
    g = torch.Generator().manual_seed(7)
    T, S = 12, 5
    return {
        "log_probs": torch.randn(T, N, C, generator=g).log_softmax(-1),
        "targets": torch.randint(1, C, (N, S), generator=g),
        "input_lengths": torch.tensor([12, 10, 8, 5]),
        "target_lengths": torch.tensor([5, 3, 0, 2]),
    }


CTC_CASES = {
    "edges": (lambda b: b, None),
    "padding holds junk": (_set("targets", (1, 4), -7), None),
    "input length > T": (_set("input_lengths", 0, 13), ("input_lengths", "above_max")),
    "target length > S": (_set("target_lengths", 0, 6), ("target_lengths", "above_max")),
    "target longer than input": (_set("input_lengths", 3, 1), ("target_lengths", "rule_failed")),
    "blank in target": (_set("targets", (0, 1), 0), ("targets", "rule_failed")),
    "target >= C": (_set("targets", (0, 1), C), ("targets", "above_max")),
    "negative target": (_set("targets", (0, 1), -1), ("targets", "below_min")),
    "probabilities, not log": (_replace("log_probs", lambda b: b["log_probs"].exp()), ("log_probs", "above_max")),
    "NaN log prob": (_set("log_probs", (0, 0, 0), float("nan")), ("log_probs", "non_finite")),
    "zero input length": (_set("input_lengths", 2, 0), ("input_lengths", "below_min")),
}


@pytest.mark.parametrize("case", list(CTC_CASES))
def test_ctc(case):
    mutate, expected = CTC_CASES[case]

    def run(b):
        return F.ctc_loss(b["log_probs"], b["targets"], b["input_lengths"], b["target_lengths"])

    assert_case(tc.load_spec("ctc"), mutate(ctc_batch()), run, expected)
