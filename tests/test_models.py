"""The built-in specs against the real models and losses they describe.

Each family has a table of batches: valid ones at the edges of the contract, and corrupted ones.
The model (built from a tiny config, on CPU) is the oracle: every batch that makes it raise or
return a non-finite loss must be flagged with the expected field and code, and every valid batch
must pass the spec AND run through the model with a finite loss.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import tritoncheck as tc

transformers = pytest.importorskip("transformers")

B, L = 2, 8
VOCAB = 100


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
        assert not report.ok


def hf_loss(model):
    return lambda batch: model(**batch).loss


# ---------------------------------------------------------------------------------------------
# LayoutLMv3


@pytest.fixture(scope="module")
def layoutlmv3():
    cfg = transformers.LayoutLMv3Config(
        vocab_size=VOCAB, hidden_size=36, coordinate_size=6, shape_size=6, num_hidden_layers=1,
        num_attention_heads=2, intermediate_size=37, max_position_embeddings=20, input_size=32,
        patch_size=16, num_labels=5, type_vocab_size=2,
    )
    torch.manual_seed(0)
    model = transformers.LayoutLMv3ForTokenClassification(cfg).eval()
    return model, tc.load_spec("layoutlmv3-token-classification", config=model.config)


def lv3_batch(length=L):
    g = torch.Generator().manual_seed(1)
    x0 = torch.randint(0, 900, (B, length), generator=g)
    y0 = torch.randint(0, 900, (B, length), generator=g)
    return {
        "input_ids": torch.randint(3, VOCAB, (B, length), generator=g),
        "bbox": torch.stack([x0, y0, x0 + 50, y0 + 20], dim=-1),
        "attention_mask": torch.ones(B, length, dtype=torch.long),
        "labels": torch.randint(0, 5, (B, length), generator=g),
        "pixel_values": torch.randn(B, 3, 32, 32, generator=g),
    }


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


LV3_CASES = {
    # valid edges
    "ignored labels": (_set("labels", (0, slice(0, 3)), -100), None),
    "last id": (_set("input_ids", (1, 2), VOCAB - 1), None),
    "boxes at 0 and 1000": (_set("bbox", (0, 1), torch.tensor([0, 0, 1000, 1000])), None),
    "box at 1023": (_set("bbox", (0, 1), torch.tensor([0, 0, 1023, 1023])), None),
    "zero-area box": (_set("bbox", (0, 1), torch.tensor([5, 5, 5, 5])), None),
    "bool mask": (_replace("attention_mask", lambda b: b["attention_mask"].bool()), None),
    "int32 ids": (_replace("input_ids", lambda b: b["input_ids"].int()), None),
    "no pixels": (_drop("pixel_values"), None),
    "longest row (max_pos - pad - 1)": (lambda b: lv3_batch(18), None),
    "longer row with padding": (lambda b: _set("input_ids", (slice(None), slice(-4, None)), 1)(lv3_batch(22)), None),
    # mistakes
    "id past vocab": (_set("input_ids", (0, 3), VOCAB), ("input_ids", "above_max")),
    "negative id": (_set("input_ids", (0, 3), -100), ("input_ids", "below_min")),
    "float ids": (_replace("input_ids", lambda b: b["input_ids"].float()), ("input_ids", "dtype")),
    "bbox in pixels": (_set("bbox", (1, 2, 2), 1650), ("bbox", "above_max")),
    "negative bbox": (_set("bbox", (1, 2, 0), -3), ("bbox", "below_min")),
    "x1 < x0": (_set("bbox", (0, 1), torch.tensor([400, 10, 80, 30])), ("bbox", "box_corners")),
    "label == num_labels": (_set("labels", (0, 0), 5), ("labels", "above_max")),
    "label -1": (_set("labels", (0, 0), -1), ("labels", "below_min")),
    "all labels ignored": (_replace("labels", lambda b: torch.full_like(b["labels"], -100)), ("labels", "all_ignored")),
    "NaN pixel": (_set("pixel_values", (1, 0, 3, 3), float("nan")), ("pixel_values", "non_finite")),
    "wrong image size": (_replace("pixel_values", lambda b: torch.randn(B, 3, 48, 48)), ("pixel_values", "shape")),
    "grey image": (_replace("pixel_values", lambda b: torch.randn(B, 1, 32, 32)), ("pixel_values", "shape")),
    "empty attention row": (_set("attention_mask", 1, 0), ("attention_mask", "no_attended_position")),
    "mask holds 2": (_set("attention_mask", (0, 0), 2), ("attention_mask", "not_in_set")),
    "token type 2": (_replace("token_type_ids", lambda b: torch.full((B, L), 2)), ("token_type_ids", "above_max")),
    "row too long": (lambda b: lv3_batch(19), ("input_ids", "sequence_too_long")),
    "position past table": (_replace("position_ids", lambda b: torch.arange(L).expand(B, L) + 13), ("position_ids", "above_max")),
    "boxes without the 4 axis": (_replace("bbox", lambda b: b["bbox"][..., 0]), ("bbox", "rank")),
    "pixel batch mismatch": (_replace("pixel_values", lambda b: torch.randn(B + 1, 3, 32, 32)), ("pixel_values", "dim_mismatch")),
}


@pytest.mark.parametrize("case", list(LV3_CASES))
def test_layoutlmv3(layoutlmv3, case):
    model, spec = layoutlmv3
    mutate, expected = LV3_CASES[case]
    assert_case(spec, mutate(lv3_batch()), hf_loss(model), expected)


# ---------------------------------------------------------------------------------------------
# BERT and RoBERTa sequence classification

SMALL = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37)


@pytest.fixture(scope="module", params=["bert", "roberta"])
def encoder(request):
    torch.manual_seed(0)
    if request.param == "bert":
        cfg = transformers.BertConfig(vocab_size=VOCAB, max_position_embeddings=20, num_labels=3, type_vocab_size=2, **SMALL)
        model = transformers.BertForSequenceClassification(cfg).eval()
    else:
        cfg = transformers.RobertaConfig(vocab_size=VOCAB, max_position_embeddings=20, num_labels=3, type_vocab_size=1, **SMALL)
        model = transformers.RobertaForSequenceClassification(cfg).eval()
    return request.param, model, tc.load_spec(f"{request.param}-sequence-classification", config=model.config)


def enc_batch(length=L):
    g = torch.Generator().manual_seed(2)
    return {
        "input_ids": torch.randint(3, VOCAB, (B, length), generator=g),
        "attention_mask": torch.ones(B, length, dtype=torch.long),
        "labels": torch.tensor([0, 2]),
    }


ENC_CASES = {
    "last id, last label": (_chain(_set("input_ids", (0, 1), VOCAB - 1), _set("labels", 0, 2)), None),
    "bool mask": (_replace("attention_mask", lambda b: b["attention_mask"].bool()), None),
    "int32 ids": (_replace("input_ids", lambda b: b["input_ids"].int()), None),
    "zero token types": (_replace("token_type_ids", lambda b: torch.zeros(B, L, dtype=torch.long)), None),
    "id past vocab": (_set("input_ids", (1, 1), VOCAB), ("input_ids", "above_max")),
    "label == num_labels": (_set("labels", 1, 3), ("labels", "above_max")),
    "label -1": (_set("labels", 1, -1), ("labels", "below_min")),
    "float labels": (_replace("labels", lambda b: b["labels"].float()), ("labels", "dtype")),
    "token type 2": (_replace("token_type_ids", lambda b: torch.full((B, L), 2)), ("token_type_ids", "above_max")),
    "position past table": (_replace("position_ids", lambda b: torch.arange(L).expand(B, L) + 13), ("position_ids", "above_max")),
    "empty attention row": (_set("attention_mask", 0, 0), ("attention_mask", "no_attended_position")),
    "mask holds 0.5": (_replace("attention_mask", lambda b: torch.full((B, L), 0.5)), ("attention_mask", "dtype")),
}


@pytest.mark.parametrize("case", list(ENC_CASES))
def test_encoder(encoder, case):
    name, model, spec = encoder
    mutate, expected = ENC_CASES[case]
    if name == "roberta" and case == "zero token types":
        pytest.skip("type_vocab_size is 1 for RoBERTa; covered by 'token type 2'")
    assert_case(spec, mutate(enc_batch()), hf_loss(model), expected)


@pytest.mark.parametrize("length", [19, 20, 21, 22])
def test_encoder_length_bounds(encoder, length):
    """BERT: L <= max_position_embeddings. RoBERTa: non-pad tokens <= max_pos - pad - 1 (= 18)."""
    name, model, spec = encoder
    assert_case(spec, enc_batch(length), hf_loss(model), _length_expectation(name, length))


def _length_expectation(name, length):
    too_long = length > 20 if name == "bert" else length > 18
    return ("input_ids", "sequence_too_long") if too_long else None


def test_roberta_padding_allows_longer_rows(encoder):
    name, model, spec = encoder
    if name != "roberta":
        pytest.skip("RoBERTa only: pad tokens keep position pad_token_id")
    batch = enc_batch(22)
    batch["input_ids"][:, -4:] = model.config.pad_token_id
    batch["attention_mask"][:, -4:] = 0
    assert_case(spec, batch, hf_loss(model), None)


# ---------------------------------------------------------------------------------------------
# BART and T5 seq2seq

S2S = dict(d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
           encoder_ffn_dim=37, decoder_ffn_dim=37)


@pytest.fixture(scope="module", params=["bart", "t5"])
def seq2seq(request):
    torch.manual_seed(0)
    if request.param == "bart":
        model = transformers.BartForConditionalGeneration(transformers.BartConfig(vocab_size=VOCAB, max_position_embeddings=20, **S2S))
    else:
        cfg = transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=37, num_layers=1, num_decoder_layers=1, num_heads=2,
                                    decoder_start_token_id=0, pad_token_id=0)
        model = transformers.T5ForConditionalGeneration(cfg)
    return request.param, model.eval(), tc.load_spec(f"{request.param}-seq2seq", config=model.config)


def s2s_batch(src=L, tgt=6):
    g = torch.Generator().manual_seed(3)
    return {
        "input_ids": torch.randint(3, VOCAB, (B, src), generator=g),
        "attention_mask": torch.ones(B, src, dtype=torch.long),
        "labels": torch.randint(3, VOCAB, (B, tgt), generator=g),
    }


S2S_CASES = {
    "ignored labels": (_set("labels", (0, slice(2, None)), -100), None),
    "last id": (_chain(_set("labels", (0, 0), VOCAB - 1), _set("input_ids", (0, 0), VOCAB - 1)), None),
    "bool mask": (_replace("attention_mask", lambda b: b["attention_mask"].bool()), None),
    "int32 ids": (_replace("input_ids", lambda b: b["input_ids"].int()), None),
    "longest source": (lambda b: s2s_batch(src=20), None),
    "longest target": (lambda b: s2s_batch(tgt=20), None),
    "id past vocab": (_set("input_ids", (0, 0), VOCAB), ("input_ids", "above_max")),
    "label past vocab": (_set("labels", (0, 0), VOCAB), ("labels", "above_max")),
    "label -1": (_set("labels", (1, 4), -1), ("labels", "below_min")),
    "all labels ignored": (_replace("labels", lambda b: torch.full_like(b["labels"], -100)), ("labels", "all_ignored")),
    "decoder ids -100": (_replace("decoder_input_ids", lambda b: torch.full_like(b["labels"], -100)), ("decoder_input_ids", "below_min")),
    "empty attention row": (_set("attention_mask", 1, 0), ("attention_mask", "no_attended_position")),
    "float ids": (_replace("input_ids", lambda b: b["input_ids"].float()), ("input_ids", "dtype")),
}


@pytest.mark.parametrize("case", list(S2S_CASES))
def test_seq2seq(seq2seq, case):
    name, model, spec = seq2seq
    mutate, expected = S2S_CASES[case]
    assert_case(spec, mutate(s2s_batch()), hf_loss(model), expected)


@pytest.mark.parametrize("side", ["input_ids", "labels"])
def test_seq2seq_length_bound(seq2seq, side):
    """BART's learned positions hold max_position_embeddings tokens per side; T5 has no such bound."""
    name, model, spec = seq2seq
    batch = s2s_batch(src=21) if side == "input_ids" else s2s_batch(tgt=21)
    expected = (side, "sequence_too_long") if name == "bart" else None
    assert_case(spec, batch, hf_loss(model), expected)


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
