"""Valid batches drawn from each built-in model spec never crash the real model or give a NaN loss.

This is the test that the contracts are tight enough: tiny models built from configs (no
weights downloaded), the spec loaded with `config=model.config`, a few examples each.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tritoncheck as tc
from tritoncheck.strategies import valid_batches

transformers = pytest.importorskip("transformers", reason="pip install transformers (in the test extra)")

TINY = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=20)


def _bert():
    config = transformers.BertConfig(vocab_size=30, max_position_embeddings=16, type_vocab_size=2, num_labels=3, **TINY)
    return transformers.BertForSequenceClassification(config)


def _roberta():
    config = transformers.RobertaConfig(vocab_size=30, max_position_embeddings=18, pad_token_id=1, type_vocab_size=1,
                                        num_labels=3, **TINY)
    return transformers.RobertaForSequenceClassification(config)


def _layoutlmv3():
    config = transformers.LayoutLMv3Config(
        vocab_size=30, max_position_embeddings=18, pad_token_id=1, type_vocab_size=1, max_2d_position_embeddings=64,
        coordinate_size=2, shape_size=4, input_size=32, patch_size=16, num_channels=3, num_labels=4,
        rel_pos_bins=8, max_rel_pos=16, rel_2d_pos_bins=8, max_rel_2d_pos=32, **TINY,
    )
    return transformers.LayoutLMv3ForTokenClassification(config)


def _bart():
    config = transformers.BartConfig(
        vocab_size=30, max_position_embeddings=16, d_model=16, encoder_layers=1, decoder_layers=1,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=20, decoder_ffn_dim=20,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
    )
    return transformers.BartForConditionalGeneration(config)


def _t5():
    config = transformers.T5Config(vocab_size=30, d_model=16, d_kv=8, d_ff=20, num_layers=1, num_decoder_layers=1,
                                   num_heads=2, pad_token_id=0, decoder_start_token_id=0)
    return transformers.T5ForConditionalGeneration(config)


class _Conv1dClassifier(torch.nn.Module):
    """Two convolutions of width 3, so inputs shorter than 5 leave nothing to slide over."""

    def __init__(self, in_channels: int = 3, num_classes: int = 4):
        super().__init__()
        self.config = {"in_channels": in_channels, "num_classes": num_classes, "min_length": 5}
        self.net = torch.nn.Sequential(
            torch.nn.Conv1d(in_channels, 8, 3), torch.nn.ReLU(), torch.nn.Conv1d(8, 8, 3),
            torch.nn.AdaptiveAvgPool1d(1), torch.nn.Flatten(), torch.nn.Linear(8, num_classes),
        )

    def forward(self, inputs, labels=None):
        logits = self.net(inputs.float())  # the conv1d-classifier contract takes any float dtype
        loss = None if labels is None else torch.nn.functional.cross_entropy(logits, labels)
        return {"logits": logits, "loss": loss}


MODELS = {
    "bert-sequence-classification": (_bert, {"L": (1, 20)}),
    "roberta-sequence-classification": (_roberta, {"L": (1, 20)}),
    "layoutlmv3-token-classification": (_layoutlmv3, {"L": (1, 20)}),
    "bart-seq2seq": (_bart, {"L": (1, 20), "T": (1, 20)}),
    "t5-seq2seq": (_t5, {"L": (1, 8), "T": (1, 8)}),
    "conv1d-classifier": (_Conv1dClassifier, {"L": (1, 12)}),
}


def _outputs(out) -> dict:
    """loss and logits from a dict or a transformers ModelOutput (itself a dict)."""
    return {k: out[k] for k in ("loss", "logits") if out.get(k) is not None}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODELS))
@settings(max_examples=10)
@given(data=st.data())
def test_valid_batches_run_through_the_model(name, data):
    factory, dims = MODELS[name]
    torch.manual_seed(0)
    model = factory().eval()
    spec = tc.load_spec(name, config=model.config)
    batch = data.draw(valid_batches(spec, B=(1, 3), **dims))  # float inputs: the contract holds the model's dtype
    with torch.no_grad():
        out = _outputs(model(**batch))
    for key, value in out.items():
        assert bool(torch.isfinite(value.float()).all()), f"{key} is not finite for {sorted(batch)}"


def test_pytest_plugin_fuzzes_a_forward(request):
    """The `tritoncheck_fuzz` fixture (from the pytest11 entry point) runs a forward on valid batches."""
    if "tritoncheck_fuzz" not in request.fixturenames and not request.config.pluginmanager.has_plugin("tritoncheck"):
        pytest.skip("the tritoncheck pytest plugin is not registered (reinstall with pip install -e .)")
    fuzz = request.getfixturevalue("tritoncheck_fuzz")
    model = _Conv1dClassifier().eval()
    spec = tc.load_spec("conv1d-classifier", config=model.config)
    calls = []
    fuzz(lambda b: calls.append(sorted(b)) or model(inputs=b["inputs"].float(), labels=b["labels"]), spec,
         max_examples=5, require=("labels",), L=(5, 9))
    assert calls and all(c == ["inputs", "labels"] for c in calls)

    def nan_forward(batch):
        return {"loss": torch.tensor(float("nan"))}

    with pytest.raises(AssertionError, match="loss is not finite"):
        fuzz(nan_forward, spec, max_examples=2)
