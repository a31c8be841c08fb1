"""tc.spec_for: contracts derived from tiny in-process models (never downloaded weights).

Each family's valid batch sits exactly at its length bound, so an off-by-one in a derived bound
fails either the contract or the real model; the real model must run on it with a finite loss.
"""

from __future__ import annotations

import copy
import logging
import warnings

import pytest
import torch
from torch import nn

import tritoncheck as tc

T = pytest.importorskip("transformers", reason="pip install transformers (in the test extra)")

V = 100  # vocabulary rows of every tiny model
B = 2
ENC = {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 20}
S2S = {"vocab_size": V, "d_model": 16, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
       "decoder_attention_heads": 2, "encoder_ffn_dim": 20, "decoder_ffn_dim": 20, "max_position_embeddings": 32}


def _ids(length, low=2, high=V, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, (B, length), generator=g)


def _classify(length, num_labels=3, types=True):
    batch = {"input_ids": _ids(length), "attention_mask": torch.ones(B, length, dtype=torch.int64),
             "labels": torch.tensor([0, num_labels - 1])}
    if types:
        batch["token_type_ids"] = torch.zeros(B, length, dtype=torch.int64)
    return batch


def _seq2seq(length, target):
    labels = _ids(target, seed=1)
    labels[:, -1] = -100
    return {"input_ids": _ids(length), "attention_mask": torch.ones(B, length, dtype=torch.int64), "labels": labels}


def _causal(length):
    ids = _ids(length)
    labels = ids.clone()
    labels[:, 0] = -100
    return {"input_ids": ids, "attention_mask": torch.ones(B, length, dtype=torch.int64), "labels": labels}


def _layoutlmv3(length):
    g = torch.Generator().manual_seed(0)
    x0 = torch.randint(0, 500, (B, length, 2), generator=g)
    bbox = torch.cat([x0, x0 + torch.randint(0, 500, (B, length, 2), generator=g)], dim=-1)
    labels = torch.randint(0, 5, (B, length), generator=g)
    labels[:, 0] = -100
    return {"input_ids": _ids(length), "bbox": bbox, "attention_mask": torch.ones(B, length, dtype=torch.int64),
            "pixel_values": torch.randn(B, 3, 32, 32, generator=g), "labels": labels}


# name: (model factory, valid batch at the length bound, over-long batch or None, label field, label bound)
FAMILIES = {
    "layoutlmv3": (lambda: T.LayoutLMv3ForTokenClassification(T.LayoutLMv3Config(
        vocab_size=V, max_position_embeddings=34, input_size=32, patch_size=16, num_labels=5,
        coordinate_size=2, shape_size=4, **ENC)),
        lambda: _layoutlmv3(32), lambda: _layoutlmv3(33), "labels", 5),
    "bart": (lambda: T.BartForConditionalGeneration(T.BartConfig(**S2S)),
             lambda: _seq2seq(32, 32), lambda: _seq2seq(33, 8), "labels", V),
    "mbart": (lambda: T.MBartForConditionalGeneration(T.MBartConfig(**S2S)),
              lambda: _seq2seq(32, 32), lambda: _seq2seq(8, 33), "labels", V),
    "t5": (lambda: T.T5ForConditionalGeneration(T.T5Config(
        vocab_size=V, d_model=16, d_kv=8, d_ff=20, num_layers=1, num_heads=2, decoder_start_token_id=0)),
        lambda: _seq2seq(80, 40), None, "labels", V),
    "bert": (lambda: T.BertForSequenceClassification(T.BertConfig(
        vocab_size=V, max_position_embeddings=32, num_labels=3, **ENC)),
        lambda: _classify(32), lambda: _classify(33), "labels", 3),
    "roberta": (lambda: T.RobertaForSequenceClassification(T.RobertaConfig(
        vocab_size=V, max_position_embeddings=34, type_vocab_size=1, num_labels=3, **ENC)),
        lambda: _classify(32), lambda: _classify(33), "labels", 3),
    "xlm-roberta": (lambda: T.XLMRobertaForSequenceClassification(T.XLMRobertaConfig(
        vocab_size=V, max_position_embeddings=34, type_vocab_size=1, num_labels=3, **ENC)),
        lambda: _classify(32), lambda: _classify(33), "labels", 3),
    "distilbert": (lambda: T.DistilBertForSequenceClassification(T.DistilBertConfig(
        vocab_size=V, max_position_embeddings=32, dim=16, n_layers=1, n_heads=2, hidden_dim=20, num_labels=3)),
        lambda: _classify(32, types=False), lambda: _classify(33, types=False), "labels", 3),
    "electra": (lambda: T.ElectraForSequenceClassification(T.ElectraConfig(
        vocab_size=V, max_position_embeddings=32, embedding_size=8, num_labels=3, **ENC)),
        lambda: _classify(32), lambda: _classify(33), "labels", 3),
    "deberta-v2": (lambda: T.DebertaV2ForSequenceClassification(T.DebertaV2Config(
        vocab_size=V, max_position_embeddings=32, num_labels=3, **ENC)),
        lambda: _classify(32), lambda: _classify(33), "labels", 3),
    "deberta-v2-relative": (lambda: T.DebertaV2ForSequenceClassification(T.DebertaV2Config(
        vocab_size=V, max_position_embeddings=32, num_labels=3, position_biased_input=False,
        relative_attention=True, type_vocab_size=0, **ENC)),
        lambda: _classify(48), None, "labels", 3),
    "gpt2": (lambda: T.GPT2LMHeadModel(T.GPT2Config(vocab_size=V, n_positions=32, n_embd=16, n_layer=1, n_head=2)),
             lambda: _causal(32), lambda: _causal(33), "labels", V),
    "llama": (lambda: T.LlamaForCausalLM(T.LlamaConfig(vocab_size=V, max_position_embeddings=32, num_key_value_heads=2, **ENC)),
              lambda: _causal(32), lambda: _causal(33), "labels", V),
    # not in any table: MPNet's RoBERTa-style offset is found from its position table's padding_idx
    "mpnet": (lambda: T.MPNetForSequenceClassification(T.MPNetConfig(
        vocab_size=V, max_position_embeddings=34, num_labels=3, **ENC)),
        lambda: _classify(32, types=False), lambda: _classify(33, types=False), "labels", 3),
}


def _spec(model, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a known family must derive without "could not derive" warnings
        return tc.spec_for(model, **kwargs)


def _codes(batch, spec):
    report = tc.check(batch, spec, backend="torch")
    return {(v.field, v.code) for v in report.violations}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    torch.manual_seed(0)
    make_model, valid, long, label_field, label_bound = FAMILIES[request.param]
    model = make_model().eval()
    return request.param, model, _spec(model), valid, long, label_field, label_bound


def test_valid_batch_passes_and_the_model_runs(family):
    name, model, spec, valid, *_ = family
    batch = valid()
    report = tc.check(batch, spec, backend="torch")
    assert report.ok, f"{name}: {report}"
    with torch.no_grad():
        loss = model(**batch).loss
    assert loss is not None and torch.isfinite(loss), name


def test_ids_past_the_vocabulary_are_flagged(family):
    _, model, spec, valid, *_ = family
    batch = valid()
    batch["input_ids"][1, 3] = V
    assert ("input_ids", "above_max") in _codes(batch, spec)
    with pytest.raises(IndexError):  # the real model crashes on it
        model(**batch)


def test_over_long_sequences_are_flagged_where_bounded(family):
    name, _, spec, _, long, *_ = family
    has_rule = any(r.code == "sequence_too_long" for r in spec.rules)
    assert has_rule == (long is not None), name
    if long is None:
        return  # relative positions: no length bound, and no rule (asserted above)
    assert "sequence_too_long" in {code for _, code in _codes(long(), spec)}


def test_out_of_range_labels_are_flagged(family):
    _, _, spec, valid, _, field, bound = family
    batch = valid()
    batch[field].view(-1)[1] = bound
    assert (field, "above_max") in _codes(batch, spec)


def test_position_traps_by_family():
    bert = FAMILIES["bert"][0]()
    assert tc.spec_for(bert).params["max_position_embeddings"] == 32
    roberta = _spec(FAMILIES["roberta"][0]())
    assert roberta.params["pad_token_id"] == 1 and roberta.params["type_vocab_size"] == 1
    # padding does not count: 40 columns of which 32 are tokens is fine for RoBERTa
    batch = _classify(40)
    batch["input_ids"][:, 32:] = 1
    assert tc.check(batch, roberta, backend="torch").ok
    ignored = _spec(FAMILIES["distilbert"][0]()).fields["token_type_ids"]  # not an input: forward(**kwargs) drops it
    assert ignored.max is None and "ignored" in ignored.description
    bart = _spec(FAMILIES["bart"][0]())
    assert bart.params["max_position_embeddings"] == 32  # 34 rows minus BART's offset of 2
    t5 = _spec(FAMILIES["t5"][0]())
    assert "max_position_embeddings" not in t5.params


def test_type_vocab_size_of_one_rejects_pair_encodings():
    spec = _spec(FAMILIES["roberta"][0]())
    batch = _classify(8)
    batch["token_type_ids"][:, 4:] = 1
    assert ("token_type_ids", "above_max") in _codes(batch, spec)


def test_gpt2_token_types_share_the_word_embeddings():
    spec = _spec(FAMILIES["gpt2"][0]())
    assert spec.fields["token_type_ids"].max == "vocab_size - 1"


def test_llama_length_bound_is_soft_and_can_be_raised():
    model = FAMILIES["llama"][0]().eval()
    batch = _causal(40)
    with torch.no_grad():
        assert torch.isfinite(model(**batch).loss)  # rotary: the model runs past its context ...
    report = tc.check(batch, _spec(model), backend="torch")  # ... so the contract warns
    assert report.ok and [(v.code, v.severity) for v in report.violations] == [("sequence_too_long", "warning")]
    assert not tc.check(batch, _spec(model), backend="torch", strict=True).ok
    assert not tc.check(batch, _spec(model, max_position_embeddings=64), backend="torch").violations


def test_resized_embeddings_bound_ids_by_the_real_rows():
    model = FAMILIES["bert"][0]()
    model.resize_token_embeddings(120)
    model.config.vocab_size = V  # a stale config must not matter
    spec = _spec(model)
    assert spec.params["vocab_size"] == 120
    batch = _classify(8)
    batch["input_ids"][0, 0] = 119
    assert tc.check(batch, spec, backend="torch").ok
    batch["input_ids"][0, 0] = 120
    assert ("input_ids", "above_max") in _codes(batch, spec)


def _bert(num_labels, problem_type=None):
    cfg = T.BertConfig(vocab_size=V, max_position_embeddings=32, num_labels=num_labels, problem_type=problem_type, **ENC)
    return T.BertForSequenceClassification(cfg).eval()


def test_multi_label_problem_type():
    model = _bert(3, "multi_label_classification")
    spec = _spec(model)
    batch = _classify(8)
    batch["labels"] = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    assert tc.check(batch, spec, backend="torch").ok
    with torch.no_grad():
        assert torch.isfinite(model(**batch).loss)
    batch["labels"][0, 1] = 2.0
    assert ("labels", "above_max") in _codes(batch, spec)
    batch["labels"] = torch.tensor([0, 2])  # class indices where multi-hot rows are needed
    assert {"dtype", "rank"} & {code for _, code in _codes(batch, spec)}


@pytest.mark.parametrize("problem_type", [None, "regression"])
def test_regression_labels(problem_type):
    model = _bert(1, problem_type)  # problem_type None with one output is regression in Hugging Face
    spec = _spec(model)
    batch = _classify(8)
    batch["labels"] = torch.tensor([0.5, -3.0])
    assert tc.check(batch, spec, backend="torch").ok
    with torch.no_grad():
        assert torch.isfinite(model(**batch).loss)
    batch["labels"][1] = float("nan")
    assert ("labels", "non_finite") in _codes(batch, spec)
    batch["labels"] = torch.tensor([3, 0])  # integer targets: Hugging Face's MSELoss casts them, and trains
    with torch.no_grad():
        assert torch.isfinite(model(**batch).loss)
    assert tc.check(batch, spec, backend="torch").ok  # (the float probes had dropped the hints' int64)


def test_images_stay_float_where_the_model_would_cast_integers():
    """A ViT casts integer pixel_values and runs: unnormalised 0-255 images, a data bug the contract keeps
    reporting (only a hint's integer dtypes are kept beside the float probes)."""
    model = T.ViTForImageClassification(T.ViTConfig(image_size=16, patch_size=8, hidden_size=16, num_hidden_layers=1,
                                                    num_attention_heads=2, intermediate_size=32, num_labels=3)).eval()
    spec = _spec(model)
    batch = {"pixel_values": torch.randint(0, 256, (2, 3, 16, 16)), "labels": torch.tensor([0, 2])}
    with torch.no_grad():
        model(**batch)  # (it runs)
    assert ("pixel_values", "dtype") in _codes(batch, spec)


def test_probe_forwards_leave_the_model_as_they_found_it(monkeypatch):
    """Swin shrinks its window size to a small probe image (a plain attribute its forward rebinds): every later
    probe of another size failed, so the derivation fell back to the family lists (a -100 label then an error),
    and a model too large to copy, traced itself, was left unable to run at all."""
    import tritoncheck.derive as derive

    monkeypatch.setattr(derive, "COPY_LIMIT", 0)  # as for a model of over 20M parameters: traced itself
    model = T.SwinForImageClassification(T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                                      num_heads=[2, 2], window_size=2, num_labels=3)).eval()
    before = [(m.window_size, m.shift_size) for m in model.modules() if hasattr(m, "shift_size")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(model)
    assert "Traced:" in spec.description
    assert [(m.window_size, m.shift_size) for m in model.modules() if hasattr(m, "shift_size")] == before
    batch = {"pixel_values": torch.randn(2, 3, 32, 32), "labels": torch.tensor([0, -100])}
    with torch.no_grad():
        assert torch.isfinite(model(**batch).loss)
    assert tc.check(batch, spec, backend="torch").ok


def test_the_forwards_flags_are_options_a_batch_may_carry(backend, tmp_path):
    """CLIP's collators put `return_loss=True` in the batch, and `model(**batch)` takes it: it was an
    unexpected_field, an error on every valid batch. The forward's parameters a tensor cannot fill are the
    contract's options: let through on every backend, kept by the YAML, and named when a key is misspelt."""
    cfg = T.CLIPConfig(text_config=dict(vocab_size=100, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, max_position_embeddings=16),
                       vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                          num_attention_heads=2, image_size=32, patch_size=16), projection_dim=8)
    model = T.CLIPModel(cfg).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(model)
    batch = {"input_ids": torch.randint(0, 99, (2, 8)), "attention_mask": torch.ones(2, 8, dtype=torch.long),
             "pixel_values": torch.randn(2, 3, 32, 32), "return_loss": True}
    with torch.no_grad():
        assert torch.isfinite(model(**batch).loss)
    assert "return_loss" in spec.options and "pixel_values" not in spec.options
    assert tc.check(batch, spec, backend=backend).ok
    (tmp_path / "clip.yaml").write_text(spec.to_yaml())
    assert tc.load_spec(tmp_path / "clip.yaml").options == spec.options
    report = tc.check({**batch, "return_los": True}, spec, backend=backend)
    assert [v.code for v in report.violations] == ["unexpected_field"]
    assert "did you mean 'return_loss'?" in str(report) and "options: " in str(report)


def test_an_option_may_not_also_be_a_field():
    with pytest.raises(tc.SpecError, match="named both a field and an option"):
        tc.BatchSpec.model_validate({"name": "s", "fields": {"x": {"dtype": "int64", "shape": ["B"]}}, "options": ["x"]})


class _Tagger(nn.Module):
    """A user's token tagger: a learned position table of 64 rows cut to the batch's length, its loss inside."""

    def __init__(self, per_token: bool = True):
        super().__init__()
        self.emb, self.pos = nn.Embedding(100, 16), nn.Parameter(torch.randn(1, 64, 16))
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 1)
        self.fc, self.per_token = nn.Linear(16, 5), per_token

    def forward(self, input_ids, labels=None):
        h = self.enc(self.emb(input_ids) + self.pos[:, :input_ids.size(1)])
        logits = self.fc(h) if self.per_token else self.fc(h.mean(1))
        if labels is None:
            return logits
        return nn.functional.cross_entropy(logits.reshape(-1, 5), labels.reshape(-1))


def test_a_position_parameter_cut_to_the_length_bounds_it():
    """`self.pos[:, :L]` of a 64-row Parameter: the forward raises past L = 64 (a broadcast), which no embedding
    table shows; the slice is a candidate for the length probes, as an embedding's rows are."""
    model = _Tagger().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(model)
    assert [r.rule for r in spec.rules if r.code == "sequence_too_long"] == ["L <= 64"]
    assert tc.check({"input_ids": torch.randint(0, 100, (2, 64))}, spec, backend="torch").ok
    with pytest.raises(RuntimeError):
        model(torch.randint(0, 100, (2, 65)))
    report = tc.check({"input_ids": torch.randint(0, 100, (2, 65))}, spec, backend="torch")
    assert [(v.field, v.code) for v in report.violations] == [("input_ids", "sequence_too_long")]


@pytest.mark.parametrize("per_token", [True, False])
def test_a_plain_modules_own_labels_are_probed_not_guessed(per_token):
    """A plain module taking `labels` into its own loss: the hints' guess (one class per sample, for a loss
    outside the model) made every valid per-token batch a rank error. Probed like any optional input, labels
    take the loss's shape, classes and ignore index."""
    model = _Tagger(per_token).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(model)
    shape = (2, 10) if per_token else (2,)
    labels = torch.randint(0, 5, shape)
    batch = {"input_ids": torch.randint(0, 100, (2, 10)), "labels": labels}
    with torch.no_grad():
        assert torch.isfinite(model(**batch))
    assert tc.check(batch, spec, backend="torch").ok, tc.check(batch, spec, backend="torch")
    assert spec.fields["labels"].shape == (["B", "L"] if per_token else ["B"])
    assert "for a loss outside the model" not in spec.description
    labels.view(-1)[0] = 5  # past the head: cross_entropy raises
    assert [(v.field, v.code) for v in tc.check(batch, spec, backend="torch").violations] == [("labels", "above_max")]


def test_per_pixel_labels_are_probed_with_the_images_dims():
    """Segformer's labels are [B, H, W], which the example did not feed: the rank guessed from the name
    ([B, labels_1]) made every valid labelled batch a rank warning and left the classes unchecked (label 7 of
    3 classes: IndexError in the loss). Labels are probed per sample, per token and per pixel of the image."""
    cfg = T.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
                            patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                            decoder_hidden_size=16, num_labels=3)
    model = T.SegformerForSemanticSegmentation(cfg).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(model)
    labels = torch.randint(0, 3, (2, 32, 32))
    labels[0, :4] = 255  # the loss's ignore index
    batch = {"pixel_values": torch.randn(2, 3, 32, 32), "labels": labels}
    with torch.no_grad():
        assert torch.isfinite(model(**batch).loss)
    assert not tc.check(batch, spec, backend="torch").violations
    labels[1, 5, 5] = 7
    with pytest.raises(IndexError), torch.no_grad():
        model(**batch)
    report = tc.check(batch, spec, backend="torch")
    assert [(v.field, v.code, v.samples) for v in report.violations] == [("labels", "above_max", (1,))]


@pytest.mark.parametrize("cls, cfg", [
    ("SwinForImageClassification", dict(image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 2],
                                        window_size=2, num_labels=3)),
    ("ConvNextForImageClassification", dict(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2, num_labels=3))])
def test_an_image_model_of_any_size_gets_its_smallest_size(cls, cfg):
    """Swin and ConvNeXt take images of any size down to what their windows and strides need; below it the
    forward raises (a broadcast, a convolution), which the contract passed. Each size's verdict now agrees with
    the model's (a fresh copy per size: Swin rewrites its window size on a small input)."""
    model_cls = getattr(T, cls)
    model = model_cls(getattr(T, cls.replace("ForImageClassification", "Config"))(**cfg)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(model)
    assert "smallest image size" not in spec.description
    verdicts = []
    for hw in ((4, 4), (7, 7), (8, 8), (9, 9), (8, 32), (32, 8), (32, 32)):
        images = torch.randn(1, 3, *hw)
        try:
            with torch.no_grad():
                copy.deepcopy(model)(pixel_values=images)
            ran = True
        except RuntimeError:
            ran = False
        verdicts.append((hw, ran, tc.check({"pixel_values": images}, spec, backend="torch").ok))
    assert all(ran == ok for _, ran, ok in verdicts), verdicts
    assert any(not ran for _, ran, _ in verdicts)  # (the sizes reach below the smallest one)


class _TwoTower(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.d = nn.Embedding(1000, 16), nn.Embedding(50, 16)

    def forward(self, query_ids, doc_ids):  # [B, L] and [B]
        return (self.q(query_ids).mean(1) * self.d(doc_ids)).sum(-1)


class _Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.e, self.d, self.fc = nn.Embedding(100, 8), nn.Embedding(60, 8), nn.Linear(8, 60)

    def forward(self, src, tgt):  # two sequences, each of its own length
        return self.fc(self.d(tgt) + self.e(src).mean(1, keepdim=True))


@pytest.mark.parametrize("model, good, bad", [
    (_TwoTower, {"query_ids": torch.randint(0, 1000, (4, 6)), "doc_ids": torch.tensor([1, 2, 3, 4])},
     {"query_ids": torch.randint(0, 1000, (1, 6)), "doc_ids": torch.tensor([50])}),
    (_Seq2Seq, {"src": torch.randint(0, 100, (2, 9)), "tgt": torch.randint(0, 60, (2, 4))},
     {"src": torch.randint(0, 100, (2, 9)), "tgt": torch.full((2, 4), 60)})])
def test_required_inputs_of_different_shapes(model, good, bad):
    """Every required input no hint knows was built as ids [B, L], one L for all: a two-tower model (query ids
    [B, L], item ids [B]) ran only on one sample, so the contract said `B <= 1` and a rank error on every valid
    batch; a seq2seq target of its own length was a dim_mismatch. Some ids now take one per sample, and a
    sequence the forward takes longer alone gets its own length."""
    m = model().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(m)
    with torch.no_grad():
        m(**good)
    assert tc.check(good, spec, backend="torch").ok and not tc.check(good, spec, backend="torch").violations
    with pytest.raises(IndexError), torch.no_grad():
        m(**bad)
    assert [v.code for v in tc.check(bad, spec, backend="torch").violations] == ["above_max"]


def test_a_fallback_contract_lets_the_forwards_inputs_through_and_warns():
    """A forward no batch built from its signature runs (it wants float64 weights): the fallback contract named
    only the hints' guess of its input, so every valid batch was an unexpected_field error for the other
    input, and only a log line said why."""

    class Weighted(nn.Module):
        def __init__(self):
            super().__init__()
            self.e, self.fc = nn.Embedding(50, 8), nn.Linear(8, 3)

        def forward(self, input_ids, weights):
            if weights.dtype != torch.float64:
                raise TypeError("weights must be float64")
            return self.fc(self.e(input_ids).mean(1)) * weights[:, None]

    with pytest.warns(UserWarning, match=r"weights \(no batch built from the signature ran: let through unchecked\)"):
        spec = tc.spec_for(Weighted())
    batch = {"input_ids": torch.randint(0, 50, (2, 4)), "weights": torch.ones(2, dtype=torch.float64)}
    assert "derived by fallback" in spec.name
    assert [v.code for v in tc.check(batch, spec, backend="torch").violations] == []


def test_the_models_own_warnings_on_probe_batches_are_not_shown():
    """The probes' batches made the model warn (a loss's broadcast of a probe-shaped target, torch's indexing
    deprecations): ten warnings about batches the user never built."""

    class Reg(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 1)

        def forward(self, x, y=None):
            out = self.fc(x)
            return out if y is None else nn.functional.mse_loss(out, y)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        tc.spec_for(Reg())
    assert not [str(w.message) for w in seen if "spec_for" not in str(w.message)]


def test_parallel_convolutions_get_the_length_the_forward_takes():
    """A text CNN with kernels 3, 4 and 5 side by side (a ModuleList): the lists summed them as one stack,
    `L >= 10`, an error on every batch of 5 to 9 tokens the model runs; the probe bisection now decides."""

    class TextCNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(100, 8)
            self.convs = nn.ModuleList([nn.Conv1d(8, 4, k) for k in (3, 4, 5)])
            self.fc = nn.Linear(12, 2)

        def forward(self, input_ids):
            x = self.emb(input_ids).transpose(1, 2)
            return self.fc(torch.cat([c(x).max(2).values for c in self.convs], 1))

    model = TextCNN().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(model)
    for length in (4, 5, 9):
        ids = torch.randint(0, 100, (2, length))
        try:
            model(ids)
            ran = True
        except RuntimeError:
            ran = False
        assert ran == tc.check({"input_ids": ids}, spec, backend="torch").ok, length


def test_the_self_check_drops_a_dim_rule_that_names_no_field():
    """A dims-only rule (`L >= 10`, no `field:`) that rejected the batch the model ran was 'not dropped (no
    derived rule to drop)': the violation's field (the dim's source) is not in the rule's text."""
    from tritoncheck.derive import probes, rules as derived

    data = {"name": "d", "params": {}, "fields": {"input_ids": {"dtype": ["int64"], "shape": ["B", "L"]}},
            "rules": [{"rule": "L >= 10", "code": "dim_bound"}]}
    dropped = probes.self_check(data, [{"input_ids": torch.zeros(2, 8, dtype=torch.int64)}],
                                lambda d: derived.build(d, {}, "", "test"))
    assert dropped == ["rule 'L >= 10'"] and data["rules"] == []


class _Regression(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(13, 1)

    def forward(self, x, y=None):
        out = self.fc(x).squeeze(-1)
        return out if y is None else nn.functional.mse_loss(out, y)


class _CastIds(nn.Module):
    def __init__(self):
        super().__init__()
        self.e, self.fc = nn.Embedding(60, 4), nn.Linear(4, 2)

    def forward(self, ids):
        return self.fc(self.e(ids.long()).mean(1))


@pytest.mark.parametrize("model, batch, field", [
    (_Regression, {"x": torch.randn(4, 13), "y": torch.tensor([1.0, float("nan"), 2.0, 3.0])}, "y"),
    (_CastIds, {"ids": torch.tensor([[1.0, float("nan")]])}, "ids")])
def test_a_nan_in_a_field_the_forward_also_takes_as_float_is_reported(model, batch, field):
    """Ids the forward casts with `.long()` (NaN becomes int64's minimum: IndexError) and a regression target
    (NaN loss) accepted float but passed a NaN: min and max alone let NaN through."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(model().eval())
    report = tc.check(batch, spec, backend="torch")
    assert [(v.field, v.code, v.severity) for v in report.violations] == [(field, "non_finite", "error")]
    batch[field] = torch.nan_to_num(batch[field], nan=1.0)
    assert not tc.check(batch, spec, backend="torch").violations


def test_flat_ids_of_their_own_count_beside_per_sample_inputs():
    """An nn.EmbeddingBag called with offsets takes N flat ids for B samples: the contract gave the ids the
    batch dim, `item_ids axis 0 is B=3, but B=2` on every batch with more than one item in a bag."""

    class Rec(nn.Module):
        def __init__(self):
            super().__init__()
            self.user, self.items = nn.Embedding(10, 4), nn.EmbeddingBag(20, 4)

        def forward(self, user_ids, item_ids, offsets):
            return (self.user(user_ids) * self.items(item_ids, offsets)).sum(-1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(Rec().eval())
    batch = {"user_ids": torch.tensor([1, 2]), "item_ids": torch.tensor([3, 4, 5]), "offsets": torch.tensor([0, 1])}
    Rec()(**batch)
    assert not tc.check(batch, spec, backend="torch").violations
    batch["item_ids"][2] = 20  # past the bag's table: IndexError
    assert [(v.field, v.code) for v in tc.check(batch, spec, backend="torch").violations] == [("item_ids", "above_max")]


def test_multi_label_targets_of_a_loss_inside_the_forward():
    """A BCE loss inside the forward: its labels were taken for class indices (the hints' guess), a dtype and a
    rank error on every valid batch of float [B, C] targets; a target of 2 (garbage to BCE) passed nothing."""

    class MultiLabel(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.fc = nn.Embedding(300, 16), nn.Linear(16, 5)

        def forward(self, input_ids, labels=None):
            logits = self.fc(self.tok(input_ids).mean(1))
            return logits if labels is None else nn.functional.binary_cross_entropy_with_logits(logits, labels)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(MultiLabel().eval())
    batch = {"input_ids": torch.randint(0, 300, (2, 6)), "labels": torch.randint(0, 2, (2, 5)).float()}
    assert not tc.check(batch, spec, backend="torch").violations
    batch["labels"][0, 0] = 2.0
    assert [(v.field, v.code) for v in tc.check(batch, spec, backend="torch").violations] == [("labels", "above_max")]


def test_label_fields_a_loss_reads_only_together_are_probed_together():
    """A multi-task model's two label fields: its loss reads both, so a probe of either alone raised, neither was
    traced, and a sentiment label of 5 for 3 classes (IndexError) gave warnings only, as every valid batch did."""

    class MultiTask(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.topic, self.sent = nn.Embedding(100, 16), nn.Linear(16, 6), nn.Linear(16, 3)

        def forward(self, input_ids, topic_labels=None, sentiment_labels=None):
            h = self.emb(input_ids).mean(1)
            t, s = self.topic(h), self.sent(h)
            if topic_labels is None:
                return t, s
            return nn.functional.cross_entropy(t, topic_labels) + nn.functional.cross_entropy(s, sentiment_labels)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(MultiTask().eval())
    batch = {"input_ids": torch.randint(0, 100, (4, 5)), "topic_labels": torch.tensor([0, 5, 2, 1]),
             "sentiment_labels": torch.tensor([0, 1, 2, 2])}
    assert not tc.check(batch, spec, backend="torch").violations
    batch["sentiment_labels"][3] = 5
    report = tc.check(batch, spec, backend="torch")
    assert [(v.field, v.code, v.severity) for v in report.violations] == [("sentiment_labels", "above_max", "error")]


class _PaddedEncoder(nn.Module):
    """nn.TransformerEncoder with a key padding mask (1: pad): a row all pad beside a padded row is NaN."""

    def __init__(self):
        super().__init__()
        self.emb, self.fc = nn.Embedding(50, 16), nn.Linear(16, 2)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 1)

    def forward(self, input_ids, pad_mask):
        return self.fc(self.enc(self.emb(input_ids), src_key_padding_mask=pad_mask.bool()).mean(1))


@pytest.mark.parametrize("model, empty", [(lambda: _Pooled(), 0), (_PaddedEncoder, 1)])
def test_a_mask_row_that_keeps_nothing_is_reported(model, empty):
    """A mask no hint knows: a row that keeps no position (all 0 of a kept-positions mask, all 1 of a padding
    mask) made the output NaN, and the contract passed it; and cutting the example to L = 1 made such a row,
    which the smallest-size probe read as 'L = 1 raises' (L >= 2 or 3 on the encoder)."""
    m = model().eval()
    mask = "attention_mask" if empty == 0 else "pad_mask"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(m)
    assert not [r.rule for r in spec.rules if r.code == "dim_bound"]
    # beside the empty row, a row with one pad first (the encoder's fast path then gives NaN, not zeros)
    rows = torch.tensor([[empty] * 6, [empty] + [1 - empty] * 5])
    batch = {"input_ids": torch.randint(0, 30, (2, 6)), mask: rows}
    with torch.no_grad():
        assert not torch.isfinite(m(**batch)).all()
    assert [(v.field, v.code, v.samples) for v in tc.check(batch, spec, backend="torch").violations] == [
        (mask, "no_attended_position", (0,))]
    one = {"input_ids": torch.randint(0, 30, (2, 1)), mask: torch.full((2, 1), 1 - empty)}
    assert not tc.check(one, spec, backend="torch").violations


def test_a_plain_forward_taking_kwargs_takes_any_key():
    class Pooled(nn.Module):
        def __init__(self):
            super().__init__()
            self.e, self.fc = nn.Embedding(50, 8), nn.Linear(8, 2)

        def forward(self, input_ids, **kwargs):
            return self.fc(self.e(input_ids).mean(1))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(Pooled())
    batch = {"input_ids": torch.randint(0, 50, (2, 4)), "attention_mask": torch.ones(2, 4)}
    assert not tc.check(batch, spec, backend="torch").violations and "**kwargs" in spec.description


def test_an_untraced_field_of_another_rank_is_a_warning_not_an_error():
    """An optional input no probe could feed is described with its rank guessed from its name; another rank is
    a warning beside untraced_field, as docs/derive.md promises, not an error on every valid batch."""

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x, volume=None):
            out = self.fc(x)
            return out if volume is None else out * volume.sum(dim=(1, 2, 3))[:, None]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(Scaled().eval())
    report = tc.check({"x": torch.randn(2, 4), "volume": torch.rand(2, 2, 2, 2)}, spec, backend="torch")
    assert report.ok and {(v.field, v.code, v.severity) for v in report.violations} == {
        ("volume", "rank", "warning"), ("volume", "untraced_field", "warning")}


class _Pooled(nn.Module):
    """A plain classifier: the mean of its tokens' embeddings over the mask (or a spread of them, `std`)."""

    def __init__(self, pool: str = "mean"):
        super().__init__()
        self.emb, self.fc, self.pool = nn.Embedding(30, 16), nn.Linear(16, 3), pool

    def forward(self, input_ids, attention_mask=None):
        h = self.emb(input_ids)
        if self.pool == "std":
            return self.fc(h.std(1))  # NaN for one token, whatever the data
        if attention_mask is not None:
            return self.fc((h * attention_mask[..., None]).sum(1) / attention_mask.sum(1, keepdim=True))
        return self.fc(h.mean(1))


def test_a_mask_row_of_zeros_in_a_narrowed_example_makes_no_length_bound():
    """The smallest-size probe cuts the example to L = 1; a mask row whose first value is 0 then keeps
    nothing, and the mean over it is NaN: read as 'L = 1 raises', that made L >= 2, an error on every
    valid 1-token batch. A forward that is NaN at L = 1 with every position kept still gives the bound."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(_Pooled().eval())
        spread = tc.spec_for(_Pooled("std").eval())
    assert not [r for r in spec.rules if r.code == "dim_bound"], [r.rule for r in spec.rules]
    ids = torch.randint(0, 30, (2, 1))
    assert tc.check({"input_ids": ids, "attention_mask": torch.ones(2, 1)}, spec, backend="torch").ok
    assert tc.check({"input_ids": ids}, spec, backend="torch").ok
    assert [r.rule for r in spread.rules if r.code == "dim_bound"] == ["L >= 2"]


def test_problem_type_keyword_overrides_the_config():
    spec = _spec(_bert(3), problem_type="multi_label_classification")
    assert spec.fields["labels"].shape == ["B", "num_labels"]
    with pytest.raises(tc.SpecError, match="problem_type"):
        tc.spec_for(_bert(3), problem_type="ranking")


def test_unknown_parameter_is_an_error():
    with pytest.raises(tc.SpecError, match="unknown parameter"):
        tc.spec_for(_bert(3), max_positions=8)


def test_derived_spec_round_trips_through_yaml(tmp_path):
    spec = _spec(FAMILIES["layoutlmv3"][0]())
    path = tmp_path / "derived.yaml"
    path.write_text(spec.to_yaml())
    assert tc.load_spec(path) == spec


# --- plain nn.Module ---------------------------------------------------------------------------


class EmbeddingClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8)
        self.head = nn.Linear(8, 4)

    def forward(self, input_ids):
        return self.head(self.emb(input_ids).mean(dim=1))


def harmless_gap(caplog, build, match):
    """A gap that crashes nothing is logged (INFO on the tritoncheck logger) and named in the description, not warned."""
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, logger="tritoncheck"):
        warnings.simplefilter("error")
        spec = build()
    assert any(match in r.getMessage() and "could not derive" in r.getMessage() for r in caplog.records), caplog.text
    assert match in spec.description
    return spec


def test_embedding_module(caplog):
    spec = harmless_gap(caplog, lambda: tc.spec_for(EmbeddingClassifier()), "an upper bound on L")
    assert "Not derived" in spec.description
    batch = {"input_ids": torch.randint(0, 50, (3, 7)), "labels": torch.tensor([0, 3, 1])}
    assert tc.check(batch, spec, backend="torch").ok
    batch["input_ids"][2, 6] = 50
    batch["labels"][0] = 4
    assert _codes(batch, spec) == {("input_ids", "above_max"), ("labels", "above_max")}


CONV_STACKS = {
    "plain": lambda: nn.Sequential(nn.Conv1d(3, 8, 5), nn.ReLU(), nn.MaxPool1d(2), nn.Conv1d(8, 8, 3, dilation=2)),
    "strided-padded": lambda: nn.Sequential(nn.Conv1d(3, 8, 7, stride=2, padding=1), nn.Conv1d(8, 8, 5, stride=3),
                                            nn.AvgPool1d(3, stride=2), nn.Conv1d(8, 8, 3, padding="same")),
}


@pytest.mark.parametrize("stack", sorted(CONV_STACKS))
def test_conv1d_min_length_matches_the_real_stack(stack, caplog):
    convs = CONV_STACKS[stack]()
    model = nn.Sequential(*convs, nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(8, 6))
    shortest = None
    for length in range(1, 80):  # the truth: the shortest input the stack accepts
        try:
            model(torch.randn(1, 3, length))
        except RuntimeError:
            continue
        shortest = length
        break
    spec = harmless_gap(caplog, lambda: tc.spec_for(model), "the value range of inputs")
    assert spec.params["min_length"] == shortest and spec.params["in_channels"] == 3
    assert spec.params["num_classes"] == 6
    # the field is named as forward names it (nn.Sequential: `input`), so tc.guard binds a call to it
    ok = {"input": torch.randn(2, 3, shortest), "labels": torch.tensor([0, 5])}
    assert tc.check(ok, spec, backend="torch").ok
    short = {"input": torch.randn(2, 3, shortest - 1)}
    assert ("input", "dim_bound") in _codes(short, spec)
    channels = {"input": torch.randn(2, 4, shortest)}
    assert ("input", "shape") in _codes(channels, spec)


def test_text_cnn_and_recurrent_first_layers(caplog):
    cnn = nn.Sequential(nn.Embedding(30, 4), nn.Conv1d(4, 4, 5), nn.AdaptiveMaxPool1d(1), nn.Flatten(), nn.Linear(4, 3))
    spec = harmless_gap(caplog, lambda: tc.spec_for(cnn), "an upper bound on L")
    assert spec.params["min_length"] == 5 and spec.params["vocab_size"] == 30
    # nothing checks the input of a model that starts with an LSTM: that is warned
    with pytest.warns(UserWarning, match="likely crash cause: the input \\(the first layer is a LSTM\\)"):
        spec = tc.spec_for(nn.Sequential(nn.LSTM(4, 8), nn.Linear(8, 5)))
    assert set(spec.fields) == {"labels"}  # the Linear after the LSTM is not mistaken for the input layer


def test_module_with_nothing_to_derive():
    with pytest.raises(tc.SpecError, match="nothing to derive"):
        tc.spec_for(nn.Sequential(nn.ReLU(), nn.Dropout()))
    with pytest.raises(TypeError, match="torch.nn.Module"):
        tc.spec_for(object())


def test_single_output_head_is_left_to_the_user(caplog):
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    spec = harmless_gap(caplog, lambda: tc.spec_for(model), "labels (the final Linear has one output")
    assert "labels" not in spec.fields and spec.params["in_features"] == 4


# --- the new built-in family specs agree with real heads and with spec_for ---------------------


def _bert_head(cls, **kw):
    return getattr(T, cls)(T.BertConfig(vocab_size=V, max_position_embeddings=32, **ENC, **kw)).eval()


def _qa(length):
    batch = _classify(length)
    del batch["labels"]
    batch["start_positions"], batch["end_positions"] = torch.tensor([1, 0]), torch.tensor([3, length - 1])
    return batch


def _tokens(length):
    batch = _classify(length)
    batch["labels"] = torch.randint(0, 3, (B, length))
    batch["labels"][:, 0] = -100
    return batch


def _multi(length):
    batch = _classify(length)
    batch["labels"] = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    return batch


BUILTIN_HEADS = {
    "causal-lm": (lambda: FAMILIES["gpt2"][0]().eval(), lambda: _causal(32), ("labels", "above_max", V)),
    "bert-token-classification": (lambda: _bert_head("BertForTokenClassification", num_labels=3), lambda: _tokens(32),
                                  ("labels", "above_max", 3)),
    "bert-question-answering": (lambda: _bert_head("BertForQuestionAnswering"), lambda: _qa(32),
                                ("end_positions", "above_max", 32)),
    "bert-sequence-classification-multi-label": (
        lambda: _bert_head("BertForSequenceClassification", num_labels=3, problem_type="multi_label_classification"),
        lambda: _multi(32), ("labels", "above_max", 2.0)),
}


@pytest.mark.parametrize("name", sorted(BUILTIN_HEADS))
def test_builtin_family_specs_match_the_real_heads(name):
    make_model, make_batch, (field, code, bad) = BUILTIN_HEADS[name]
    model = make_model()
    batch = make_batch()
    with torch.no_grad():
        assert torch.isfinite(model(**batch).loss)
    for spec in (tc.load_spec(name, config=model.config), _spec(model)):
        assert tc.check(batch, spec, backend="torch").ok, spec.name
        broken = make_batch()
        broken[field].view(-1)[-1] = bad
        assert (field, code) in _codes(broken, spec), spec.name


def test_architectures_outside_every_table_are_derived_from_their_modules():
    opt = T.OPTForCausalLM(T.OPTConfig(vocab_size=V, hidden_size=16, num_hidden_layers=1, ffn_dim=20,
                                       num_attention_heads=2, max_position_embeddings=20, word_embed_proj_dim=16)).eval()
    spec = _spec(opt)
    assert spec.params["max_position_embeddings"] == 20  # 22 rows minus OPT's offset of 2
    with torch.no_grad():
        assert torch.isfinite(opt(**_causal(20)).loss)
    assert tc.check(_causal(20), spec, backend="torch").ok and not tc.check(_causal(21), spec, backend="torch").ok
    vit = T.ViTForImageClassification(T.ViTConfig(image_size=8, patch_size=4, num_labels=3, **ENC)).eval()
    spec = _spec(vit)
    batch = {"pixel_values": torch.randn(2, 3, 8, 8), "labels": torch.tensor([0, 2])}
    assert tc.check(batch, spec, backend="torch").ok
    with torch.no_grad():
        assert torch.isfinite(vit(**batch).loss)
    batch["labels"][1], batch["pixel_values"][0, 0, 0, 0] = 3, float("nan")
    assert _codes(batch, spec) == {("labels", "above_max"), ("pixel_values", "non_finite")}


def test_opts_mask_values_are_a_warning_with_positions_given_and_an_error_without():
    """OPT makes positions from the mask's running sum when position_ids are absent: a mask of 2s runs on any row
    with position_ids (a warning), and walks off the position table on a long row without them (an error; a short
    one runs, and is an error too: the rule cannot see how far the running sum goes)."""
    opt = T.OPTForCausalLM(T.OPTConfig(vocab_size=V, hidden_size=16, num_hidden_layers=1, ffn_dim=20,
                                       num_attention_heads=2, max_position_embeddings=20, word_embed_proj_dim=16)).eval()
    spec = _spec(opt)
    for length, positions, truth in ((20, True, "runs"), (20, False, "raises")):
        batch = _causal(length)
        batch["attention_mask"] = torch.full((B, length), 2)
        if positions:
            batch["position_ids"] = torch.arange(length).expand(B, length)
        try:
            with torch.no_grad():
                ran = "runs" if torch.isfinite(opt(**batch).loss) else "nan"
        except IndexError:
            ran = "raises"
        assert ran == truth
        report = tc.check(batch, spec, backend="torch")
        assert ("attention_mask", "not_in_set") in {(v.field, v.code) for v in report.violations}
        assert report.ok == (truth == "runs"), report


class _Forecaster(nn.Module):
    """A model with a Hugging Face-like config whose inputs spec_for does not know."""

    config = type("Config", (), {"model_type": "forecaster"})()

    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 1)

    def forward(self, past_values, future_values=None):
        return self.head(past_values)


def test_model_with_inputs_no_list_knows_is_derived_from_its_forward():
    """Issue 19: the lists knew nothing of `past_values` (a SpecError before); the trace shapes it by the Linear
    that takes it, probes its dtype, and accepts the optional `future_values` instead of flagging it."""
    spec = tc.spec_for(_Forecaster())
    assert spec.fields["past_values"].shape == ["B", 4] and spec.fields["past_values"].dtype == ["float32"]
    assert spec.fields["future_values"].optional and not spec.fields["past_values"].optional
    ok = {"past_values": torch.randn(3, 4), "future_values": torch.randn(3, 2)}
    assert tc.check(ok, spec, backend="torch").ok
    assert _codes({"past_values": torch.randn(3, 5)}, spec) == {("past_values", "shape")}
    assert _codes({"past_values": torch.randn(3, 4).double()}, spec) == {("past_values", "dtype")}
    assert "# shape ['B', 4]: the input of head" in spec.to_yaml()


@pytest.mark.parametrize(("kernels", "strides"), [((4, 3), (3, 2)), ((10, 3, 3, 3, 3, 2, 2), (5, 2, 2, 2, 2, 2, 2))])
def test_wav2vec2_frames_match_the_feature_encoder(kernels, strides):
    """The derived minimum length and frame counts are Hugging Face's own arithmetic (wav2vec2-base's stack too)."""
    config = T.Wav2Vec2Config(vocab_size=12, conv_dim=(8,) * len(kernels), conv_kernel=kernels, conv_stride=strides,
                              num_conv_pos_embeddings=3, num_conv_pos_embedding_groups=1, **ENC)
    model = T.Wav2Vec2ForCTC(config).eval()
    spec = _spec(model)
    lengths = torch.arange(0, 900, 7)
    frames = model.wav2vec2._get_feat_extract_output_lengths(lengths)
    shortest = spec.params["min_length"]
    assert model.wav2vec2._get_feat_extract_output_lengths(torch.tensor([shortest - 1, shortest])).tolist() == [0, 1]
    for n, f in zip(lengths.tolist(), frames.tolist(), strict=True):
        if n < shortest:
            continue
        labels = torch.ones(1, max(f, 1), dtype=torch.int64)
        batch = {"input_values": torch.zeros(1, n), "labels": labels}
        assert tc.check(batch, spec, backend="torch").ok, (n, f)  # as many targets as frames: fine
        batch["labels"] = torch.ones(1, f + 1, dtype=torch.int64)
        assert "ctc_too_short" in tc.check(batch, spec, backend="torch").codes, (n, f)


def test_bloom_without_a_length_bound_is_logged_not_warned(caplog):
    """ALiBi has no position table, so no length overflows it: a gap, not a crash cause."""
    config = T.BloomConfig(vocab_size=V, hidden_size=8, n_layer=1, n_head=2)
    spec = harmless_gap(caplog, lambda: tc.spec_for(T.BloomForCausalLM(config).eval()), "a bound on L")
    assert spec.params["vocab_size"] == V


def test_float_inputs_take_the_models_dtype_unless_it_casts_them():
    """fp16 pixels crash an fp32 LayoutLMv3 (its patch embedding does not cast); ViT casts them."""
    lv3 = FAMILIES["layoutlmv3"][0]().eval()
    batch = _layoutlmv3(8)
    batch["pixel_values"] = batch["pixel_values"].half()
    assert ("pixel_values", "dtype") in _codes(batch, _spec(lv3))
    assert tc.check(batch, _spec(lv3, dtype="float"), backend="torch").ok  # under autocast, say so
    double = _spec(lv3.to(torch.float64))
    assert double.params["dtype"] == "float64" and ("pixel_values", "dtype") in _codes(_layoutlmv3(8), double)
    builtin = tc.load_spec("layoutlmv3-token-classification", config={**lv3.config.to_dict(), "dtype": "bfloat16"})
    assert builtin.params["dtype"] == "bfloat16"
    vit = T.ViTForImageClassification(T.ViTConfig(image_size=8, patch_size=4, num_labels=3, **ENC)).eval()
    image = {"pixel_values": torch.randn(2, 3, 8, 8).half(), "labels": torch.tensor([0, 2])}
    assert tc.check(image, _spec(vit), backend="torch").ok


def test_spectrogram_transformer_is_derived_from_its_config():
    """AST takes exactly max_length frames of num_mel_bins bins (a fixed position table): spec_for used to raise."""
    model = T.ASTForAudioClassification(T.ASTConfig(max_length=32, num_mel_bins=16, patch_size=8, num_labels=3, **ENC)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(model)
    assert spec.fields["input_values"].shape == ["B", "max_length", "num_mel_bins"]
    good = {"input_values": torch.randn(B, 32, 16), "labels": torch.tensor([0, 2])}
    assert torch.isfinite(model(**good).loss)
    assert tc.check(good, spec, backend="torch").ok
    short = {"input_values": torch.randn(B, 24, 16)}
    with pytest.raises(RuntimeError):
        model(**short)
    assert "shape" in {v.code for v in tc.check(short, spec, backend="torch").errors}



def test_a_model_that_raises_on_every_two_samples_is_traced_on_one():
    """GPT-2's classifier without a pad token raises on any batch of 2 (it cannot find each row's end): the
    trace runs on one sample and the probe's finding, B <= 1, is the contract's (it fell back before)."""
    model = T.GPT2ForSequenceClassification(T.GPT2Config(vocab_size=V, n_embd=16, n_layer=1, n_head=2, n_positions=32,
                                                         num_labels=3, pad_token_id=None)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(model)
    assert spec.example is not None and "fallback" not in spec.name
    two, one = _classify(8, types=False), {k: v[:1] for k, v in _classify(8, types=False).items()}
    with pytest.raises(ValueError, match="padding token"):
        model(**two)
    assert torch.isfinite(model(**one).loss)
    assert tc.check(one, spec, backend="torch").ok
    assert "dim_bound" in {v.code for v in tc.check(two, spec, backend="torch").errors}


def test_the_traced_batch_meets_the_contracts_own_minimum_length():
    """SEW needs N >= 400 samples (its feature encoder) and two frames for its squeeze: the batch to trace is
    sized from the rule, not from the fixed tries (all shorter), so it is traced rather than a fallback."""
    model = T.SEWForSequenceClassification(T.SEWConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                       intermediate_size=20, num_labels=3)).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = tc.spec_for(model)
    assert spec.example is not None and spec.example["input_values"].shape[1] >= 400
    assert torch.isfinite(model(**spec.example).logits).all()


def test_pixels_a_model_casts_take_any_float_dtype_by_probe():
    """ViT-MSN casts its pixels (no list names it): the fp16/fp64 probes run, so the hinted dtype widens to float."""
    model = T.ViTMSNForImageClassification(T.ViTMSNConfig(image_size=32, patch_size=8, num_labels=3, **ENC)).eval()
    spec = tc.spec_for(model)
    assert spec.fields["pixel_values"].dtype == ["float"]
    batch = {"pixel_values": torch.randn(B, 3, 32, 32).half(), "labels": torch.tensor([0, 2])}
    assert torch.isfinite(model(**batch).loss)
    assert tc.check(batch, spec, backend="torch").ok


def test_a_meta_device_model_is_a_clear_error_not_a_traceback():
    """A model built under torch.device('meta') has no values to probe: one SpecError says to materialize it
    (before, torch's 'Tensor.item() cannot be called on meta tensors' came out of a probe)."""
    with torch.device("meta"):
        model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 2))
    with pytest.raises(tc.SpecError) as info:
        tc.spec_for(model)
    assert str(info.value) == (
        "spec_for(Sequential) runs the model's forward on small batches and needs its weights, but they are on the "
        "meta device (0.weight; built under torch.device('meta')): materialize the model first "
        "(model.to_empty(device='cpu'), then load or initialise its weights)")
    with torch.device("meta"):
        bert = _bert(3)
    with pytest.raises(tc.SpecError, match=r"meta device .* tc.load_spec\(name, config=model.config\)"):
        tc.spec_for(bert)
