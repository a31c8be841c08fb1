"""tc.guard: a forward pre-hook that stops a bad batch before the model runs."""

import importlib.util
import warnings

import pytest
import torch

import tritoncheck as tc
from tritoncheck.integrations import guard as guard_module
from tritoncheck.integrations.guard import _deferred_available

transformers = pytest.importorskip("transformers", reason="pip install transformers (in the test extra)")


@pytest.fixture(scope="module")
def bert():
    cfg = transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=37, max_position_embeddings=16, type_vocab_size=2, num_labels=3)
    torch.manual_seed(0)
    return transformers.BertForSequenceClassification(cfg).eval()


@pytest.fixture
def spec(bert):
    return tc.load_spec("bert-sequence-classification", config=bert.config)


@pytest.fixture
def calls(bert):
    """How many times the model's embeddings ran: 0 proves the forward never started."""
    count = [0]
    handle = bert.bert.embeddings.register_forward_pre_hook(lambda *_: count.__setitem__(0, count[0] + 1))
    yield count
    handle.remove()


def good():
    return {"input_ids": torch.randint(0, 50, (2, 8)), "attention_mask": torch.ones(2, 8, dtype=torch.long),
            "labels": torch.tensor([0, 2])}


def bad():
    batch = good()
    batch["input_ids"][1, 4] = 77  # past the vocabulary: an index error in the embedding on CPU
    return batch


def test_guard_stops_a_bad_batch_before_forward(bert, spec, calls):
    handle = tc.guard(bert, spec)
    try:
        with pytest.raises(tc.BatchValidationError) as info:
            bert(**bad())
        assert calls[0] == 0
        assert [(v.field, v.code, v.samples, v.value) for v in info.value.report.violations] == [
            ("input_ids", "above_max", (1,), 77)
        ]
        # None values and flags the spec does not name are left out of the check
        out = bert(**good(), token_type_ids=None, output_attentions=False)
        assert calls[0] == 1 and out.loss is not None
    finally:
        handle.remove()


def test_positional_arguments_are_mapped_to_parameter_names(bert, spec, calls):
    handle = tc.guard(bert, spec, strict=True)  # a mask of 2 is a warning: strict raises for it
    try:
        b = bad()
        with pytest.raises(tc.BatchValidationError, match="input_ids"):
            bert(b["input_ids"], b["attention_mask"])
        with pytest.raises(tc.BatchValidationError, match="attention_mask"):
            bert(good()["input_ids"], torch.full((2, 8), 2))
        assert calls[0] == 0
    finally:
        handle.remove()


def test_remove_and_disable_take_the_guard_off(bert, spec, calls, monkeypatch):
    handle = tc.guard(bert, spec)
    monkeypatch.setenv("TRITONCHECK_DISABLE", "1")
    with pytest.raises(IndexError):  # the model's own failure: the guard let the batch through
        bert(**bad())
    assert calls[0] == 1
    monkeypatch.delenv("TRITONCHECK_DISABLE")
    with pytest.raises(tc.BatchValidationError):
        bert(**bad())
    assert calls[0] == 1
    handle.remove()
    with pytest.raises(IndexError):
        bert(**bad())
    assert calls[0] == 2


def test_guard_without_a_spec_uses_the_models_contract(bert, calls):
    if importlib.util.find_spec("tritoncheck.derive") is None:
        with pytest.raises(NotImplementedError, match="pass one"):
            tc.guard(bert)
    else:
        handle = tc.guard(bert)
        try:
            with pytest.raises(tc.BatchValidationError, match="input_ids"):
                bert(**bad())
            assert calls[0] == 0
        finally:
            handle.remove()


class DictModel(torch.nn.Module):
    """A model whose forward takes the whole batch as one mapping."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(50, 4)
        self.runs = 0

    def forward(self, batch):
        self.runs += 1
        return self.emb(batch["input_ids"]).sum()


def test_a_forward_taking_one_mapping_is_checked(spec):
    model = DictModel()
    handle = tc.guard(model, spec)
    with pytest.raises(tc.BatchValidationError, match="above_max"):
        model(bad())
    assert model.runs == 0
    model(good())
    assert model.runs == 1
    handle.remove()


def test_deferred_raises_at_wait(bert, spec, calls, monkeypatch):
    monkeypatch.setattr(guard_module, "_on_cuda", lambda inputs: True)  # as if the inputs were on a GPU
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # where deferred mode is unavailable guard falls back, with a warning
        handle = tc.guard(bert, spec, deferred=True, strict=True)
    batch = good()
    batch["attention_mask"][0, 0] = 2  # not a crash for the model (a warning): only the strict contract catches it
    try:
        if _deferred_available():
            bert(**batch)  # launched, not waited on
            assert calls[0] == 1
            with pytest.raises(tc.BatchValidationError, match="attention_mask"):
                tc.wait()
        else:
            with pytest.raises(tc.BatchValidationError, match="attention_mask"):
                bert(**batch)
    finally:
        handle.remove()


def test_deferred_guard_checks_cpu_inputs_at_once_with_one_warning(bert, spec, calls):
    """Deferred checking waits for nothing on the CPU: a bad CPU batch raises before forward (not at the
    next call, after the model's own IndexError), and the fallback is said once."""
    with pytest.warns(UserWarning) as said:
        handle = tc.guard(bert, spec, deferred=True)
        try:
            with pytest.raises(tc.BatchValidationError, match="input_ids") as info:
                bert(**bad())
            assert calls[0] == 0 and not hasattr(info.value, "step")
            bert(**good())
            with pytest.raises(tc.BatchValidationError):
                bert(**bad())
        finally:
            handle.remove()
    assert [str(w.message) for w in said] == [
        "tc.guard(deferred=True): the inputs of BertForSequenceClassification are on no CUDA device, where deferred "
        "checking has nothing to wait for; checking them synchronously (a bad batch raises before forward runs)"]
    assert said[0].filename == __file__
    tc.wait()  # nothing was queued


def test_guard_rejects_what_is_not_a_module(spec):
    with pytest.raises(TypeError, match="nn.Module"):
        tc.guard(lambda x: x, spec)
    with pytest.raises(TypeError, match="BatchSpec"):
        tc.guard(DictModel(), {"fields": {}})


def test_deferred_guard_checks_every_call_even_one_that_raises(bert, spec, calls, monkeypatch):
    """A loop that catches the error and goes on: each bad call raises once, at the next call."""
    monkeypatch.setattr(guard_module, "_on_cuda", lambda inputs: True)  # as if the inputs were on a GPU
    handle = tc.guard(bert, spec, deferred=True, strict=True)
    masks = []
    try:
        for value in (2, 3, None):
            batch = good()
            if value is not None:
                batch["attention_mask"][0, 0] = value  # not a crash for the model (a warning): strict catches it
            try:
                bert(**batch)
            except tc.BatchValidationError as exc:
                masks.append((exc.report.violations[0].value, exc.step))
        tc.wait()
    finally:
        handle.remove()
    assert [m[0] for m in masks] == [2, 3] and masks[1][1] == masks[0][1] + 1


def test_a_warning_passes_the_guard_and_is_logged(bert, spec, calls, caplog):
    handle = tc.guard(bert, spec)
    try:
        batch = good()
        batch["attention_mask"][0, 0] = 2  # BERT multiplies the mask in: it runs, but it is a data bug
        with caplog.at_level("WARNING", logger="tritoncheck"):
            bert(**batch)
        assert calls[0] == 1 and "attention_mask" in caplog.text
    finally:
        handle.remove()


# --- @tc.checked: a plain function's batch, validated before the call (issue 21) ------------------


def test_checked_validates_a_batch_argument_before_the_call(spec):
    runs = []

    @tc.checked(spec)
    def train_step(model, batch, step=0):
        """Docstring kept."""
        runs.append(step)
        return "ran"

    assert train_step(None, good(), step=1) == "ran"
    with pytest.raises(tc.BatchValidationError, match="above_max") as info:
        train_step(None, bad(), step=2)
    assert runs == [1]  # the bad batch never reached the function
    assert info.value.__notes__[-1] == "(the batch passed to test_checked_validates_a_batch_argument_before_the_call.<locals>.train_step)"
    assert train_step.__name__ == "train_step" and train_step.__doc__ == "Docstring kept."


def test_checked_reads_the_arguments_the_spec_names(spec, monkeypatch):
    @tc.checked(spec, backend="torch")
    def loss(input_ids, attention_mask=None, labels=None):
        return input_ids.shape

    assert loss(**good()) == good()["input_ids"].shape
    with pytest.raises(tc.BatchValidationError, match="input_ids"):
        loss(bad()["input_ids"], attention_mask=good()["attention_mask"])
    monkeypatch.setenv("TRITONCHECK_DISABLE", "1")
    assert loss(bad()["input_ids"]) == bad()["input_ids"].shape


def test_checked_needs_a_spec():
    with pytest.raises(TypeError, match=r"write @tc.checked\(spec\)"):
        @tc.checked
        def f(batch):
            return batch
