"""Trainer integrations: a Hugging Face data collator and a Lightning callback, on tiny real models."""

import types

import pytest
import torch

import tritoncheck as tc

VOCAB = 50


def bert_config(transformers):
    return transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=37, max_position_embeddings=16, type_vocab_size=2, num_labels=3)


class Features(torch.utils.data.Dataset):
    """Tokenised features as a Trainer sees them; sample i has input_ids[0] == i."""

    def __init__(self, n, bad=()):
        self.n, self.bad = n, set(bad)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        ids = [i, 5, 6, 7, 8, 9]
        if i in self.bad:
            ids[2] = VOCAB + 3
        return {"input_ids": ids, "attention_mask": [1] * 6, "label": i % 3}


@pytest.fixture(scope="module")
def hf():
    transformers = pytest.importorskip("transformers", reason="pip install transformers (in the test extra)")
    from tritoncheck.integrations.hf import ValidatingDataCollator

    return transformers, ValidatingDataCollator


def test_hf_collator_standalone(hf, tmp_path):
    transformers, ValidatingDataCollator = hf
    spec = tc.load_spec("bert-sequence-classification", config=bert_config(transformers))
    feats = [Features(4, bad={2})[i] for i in range(4)]
    with pytest.raises(tc.BatchValidationError, match="input_ids") as info:
        ValidatingDataCollator(None, spec)(feats)
    collated = transformers.default_data_collator(feats)
    assert info.value.report.backend == tc.check(collated, spec).backend  # C where a compiler exists, as documented
    collate = ValidatingDataCollator(None, spec, on_error="skip", log_dir=tmp_path)
    batch = collate(feats)  # default_data_collator turns "label" into "labels"
    assert batch["input_ids"][:, 0].tolist() == [0, 1, 3] and batch["labels"].tolist() == [0, 1, 0]
    assert collate.stats()["samples"] == 1
    with pytest.raises(tc.BatchValidationError):  # the Trainer cannot take an empty step
        collate([feats[2]])


def _trainer(transformers, tmp_path, dataset, collator, steps):
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(bert_config(transformers))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), use_cpu=True, report_to=[], max_steps=steps, per_device_train_batch_size=4,
        save_strategy="no", logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
    )
    return transformers.Trainer(model=model, args=args, train_dataset=dataset, data_collator=collator)


def test_hf_trainer_stops_on_a_bad_batch_and_trains_with_skip(hf, tmp_path):
    pytest.importorskip("accelerate", reason="pip install accelerate (in the test extra)")  # transformers' Trainer needs it
    transformers, ValidatingDataCollator = hf
    spec = tc.load_spec("bert-sequence-classification", config=bert_config(transformers))
    data = Features(8, bad={1, 6})
    trainer = _trainer(transformers, tmp_path, data, ValidatingDataCollator(None, spec), steps=1)
    with pytest.raises(tc.BatchValidationError, match="above_max"):
        trainer.train()
    collate = ValidatingDataCollator(None, spec, on_error="skip", log_dir=tmp_path / "skipped")
    # IndexedDataset carries dataset indices through the Trainer's shuffling sampler to the records
    trainer = _trainer(transformers, tmp_path, tc.IndexedDataset(data), collate, steps=2)
    out = trainer.train()
    assert out.global_step == 2  # one epoch of 8 samples: every sample was drawn once
    assert collate.stats() == {"mode": "skip", "samples": 2, "indices": [1, 6], "codes": {"above_max": 2}, "failed_writes": 0}


def word_tokenizer(transformers):
    """A real fast tokenizer built here (no download): w0..w47 are ids 2..49, [PAD] is 0."""
    tokenizers = pytest.importorskip("tokenizers", reason="pip install tokenizers (in the test extra)")
    vocab = {"[PAD]": 0, "[UNK]": 1, **{f"w{i}": i + 2 for i in range(VOCAB - 2)}}
    inner = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab, unk_token="[UNK]"))
    inner.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=inner, pad_token="[PAD]", unk_token="[UNK]")


def test_hf_trainer_on_a_datasets_dataset_with_a_text_column_records_dataset_indices(hf, tmp_path):
    """The Trainer drops the text column of an IndexedDataset-wrapped datasets.Dataset as it would of the
    dataset itself, so DataCollatorWithPadding never sees it, and skipped rows are named by dataset index."""
    pytest.importorskip("accelerate", reason="pip install accelerate (in the test extra)")
    datasets = pytest.importorskip("datasets", reason="pip install datasets (in the test extra)")
    transformers, ValidatingDataCollator = hf
    tok = word_tokenizer(transformers)
    texts = [" ".join(f"w{(i + j) % 40}" for j in range(2 + i % 3)) for i in range(8)]  # ragged: 2 to 4 tokens
    ds = datasets.Dataset.from_dict({"text": texts, "label": [i % 3 for i in range(8)]})
    ds = ds.map(lambda rows: tok(rows["text"]), batched=True)
    bad_rows = {2, 5}
    ds = ds.map(lambda row, i: {"input_ids": [VOCAB + 3] + row["input_ids"][1:] if i in bad_rows else row["input_ids"]},
                with_indices=True)
    assert ds.column_names == ["text", "label", "input_ids", "attention_mask"]

    indexed = tc.IndexedDataset(ds)
    assert isinstance(indexed, datasets.Dataset) and indexed[3] == ds[3]  # still the user's dataset to the Trainer
    spec = tc.load_spec("bert-sequence-classification", config=bert_config(transformers))
    collate = ValidatingDataCollator(transformers.DataCollatorWithPadding(tok), spec, on_error="skip",
                                     log_dir=tmp_path / "skipped")
    trainer = _trainer(transformers, tmp_path, indexed, collate, steps=2)
    assert trainer.train().global_step == 2  # one epoch: every row drawn once
    assert collate.stats() == {"mode": "skip", "samples": 2, "indices": sorted(bad_rows), "codes": {"above_max": 2},
                               "failed_writes": 0}
    assert all(v["field"] == "input_ids" for r in collate.records() for v in r["violations"])


TOY_SPEC = {
    "name": "toy-classifier",
    "fields": {"features": {"dtype": "float", "shape": ["B", 3], "finite": True},
               "target": {"dtype": "int64", "shape": ["B"], "min": 0, "max": 3}},
}


@pytest.fixture(scope="module")
def lit():
    L = pytest.importorskip("lightning", reason="pip install lightning (in the test extra)")
    from tritoncheck.integrations.lightning import TritoncheckCallback

    class Classifier(L.LightningModule):
        """Remembers what each step saw: the dataset indices (dict batches) or the batch size."""

        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(3, 4)
            self.seen = {"train": [], "validate": [], "test": []}

        def _step(self, stage, batch):
            if isinstance(batch, dict):
                self.seen[stage].append(batch["idx"].tolist())
                x, y = batch["features"], batch["target"]
            else:
                x, y = batch
                self.seen[stage].append(len(y))
            assert len(x) == len(y)
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def training_step(self, batch, batch_idx):
            return self._step("train", batch)

        def validation_step(self, batch, batch_idx):
            self.seen["validate"].append(batch["idx"].tolist() if isinstance(batch, dict) else len(batch[1]))

        def test_step(self, batch, batch_idx):
            self.seen["test"].append(batch["idx"].tolist())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def trainer(callback, **kwargs):
        return L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[callback], **kwargs)

    return TritoncheckCallback, Classifier, trainer


class Rows(torch.utils.data.Dataset):
    """Dict rows with their dataset index under "idx"; rows in `bad` have target 4 (classes are 0..3)."""

    def __init__(self, n, bad=()):
        self.n, self.bad = n, set(bad)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"idx": i, "features": torch.full((3,), float(i)), "target": 4 if i in self.bad else i % 4}


def rows(n, bad=()):
    return torch.utils.data.DataLoader(Rows(n, bad), batch_size=4)


def test_lightning_callback_validates_each_training_batch(lit):
    TritoncheckCallback, Classifier, trainer = lit
    spec = tc.BatchSpec.model_validate(TOY_SPEC)

    def fit(targets):
        data = torch.utils.data.TensorDataset(torch.randn(8, 3), targets)
        model = Classifier()
        trainer(TritoncheckCallback(spec, fields=("features", "target")), max_steps=2).fit(
            model, torch.utils.data.DataLoader(data, batch_size=4))
        return model

    assert fit(torch.tensor([0, 1, 2, 3] * 2)).seen["train"] == [4, 4]
    bad = torch.tensor([0, 1, 2, 3, 0, 4, 1, 2])  # class 4 of 0..3, in the second batch
    with pytest.raises(tc.BatchValidationError, match="target") as info:
        fit(bad)
    assert info.value.report.violations[0].samples == (1,)
    assert (info.value.stage, info.value.batch_idx) == ("train", 1)
    assert "in Lightning train batch_idx 1" in info.value.__notes__[0]


def test_lightning_skip_drops_bad_samples_of_training_and_validation_batches_and_records_them(lit, caplog):
    TritoncheckCallback, Classifier, trainer = lit
    callback = TritoncheckCallback(tc.BatchSpec.model_validate(TOY_SPEC), index="idx", on_error="skip")
    model = Classifier()
    with caplog.at_level("WARNING", logger="tritoncheck"):
        trainer(callback, max_epochs=1, num_sanity_val_steps=0).fit(model, rows(8, bad={2, 5}), rows(8, bad={1, 6, 7}))
        trainer(callback).test(model, rows(4, bad={3}))
    assert model.seen["train"] == [[0, 1, 3], [4, 6, 7]]
    assert model.seen["validate"] == [[0, 2, 3], [4, 5]]
    assert model.seen["test"] == [[0, 1, 2]]
    got = [(r["stage"], r["batch_idx"], r["position"], r["index"], [v["code"] for v in r["violations"]])
           for r in callback.records()]
    assert got == [("train", 0, 2, 2, ["above_max"]), ("train", 1, 1, 5, ["above_max"]),
                   ("validate", 0, 1, 1, ["above_max"]), ("validate", 1, 2, 6, ["above_max"]),
                   ("validate", 1, 3, 7, ["above_max"]), ("test", 0, 3, 3, ["above_max"])]
    assert "validate batch_idx 1: dropped 2 bad sample(s) of 4: sample 2 = dataset index 6 (above_max)" in caplog.text


def test_lightning_raise_names_stage_batch_idx_and_dataset_indices_of_a_validation_batch(lit):
    TritoncheckCallback, Classifier, trainer = lit
    callback = TritoncheckCallback(tc.BatchSpec.model_validate(TOY_SPEC), index="idx")
    with pytest.raises(tc.BatchValidationError, match="above_max") as info:
        trainer(callback).validate(Classifier(), rows(8, bad={6}))
    assert (info.value.stage, info.value.batch_idx, info.value.dataset_indices) == ("validate", 1, (4, 5, 6, 7))
    assert info.value.__notes__ == ["in Lightning validate batch_idx 1; dataset indices of the bad samples: 6 (sample 2)"]
    only_train = TritoncheckCallback(tc.BatchSpec.model_validate(TOY_SPEC), index="idx", stages=["train"])
    model = Classifier()
    trainer(only_train).validate(model, rows(8, bad={6}))  # validation batches are not checked
    assert model.seen["validate"] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_lightning_skip_raises_when_no_sample_is_left_or_the_batch_cannot_change(lit):
    TritoncheckCallback, Classifier, trainer = lit
    spec = tc.BatchSpec.model_validate(TOY_SPEC)
    callback = TritoncheckCallback(spec, index="idx", on_error="skip")
    with pytest.raises(tc.BatchValidationError, match="above_max") as info:
        trainer(callback, max_steps=1).fit(Classifier(), rows(4, bad={0, 1, 2, 3}))
    assert "found no good sample" in info.value.__notes__[1] and callback.records() == []

    class TupleLoader(torch.utils.data.DataLoader):
        def __iter__(self):
            return (tuple(b) for b in super().__iter__())

    data = torch.utils.data.TensorDataset(torch.randn(4, 3), torch.tensor([0, 4, 1, 2]))
    callback = TritoncheckCallback(spec, fields=("features", "target"), on_error="skip")
    with pytest.raises(tc.BatchValidationError, match="above_max") as info:
        trainer(callback).validate(Classifier(), TupleLoader(data, batch_size=4))
    assert "which a tuple batch does not allow" in info.value.__notes__[1]

    mismatched = {"idx": torch.arange(4), "features": torch.randn(4, 3), "target": torch.tensor([0, 4, 1])}
    callback = TritoncheckCallback(spec, index="idx", on_error="skip")
    with pytest.raises(tc.BatchValidationError) as info:  # called as Lightning would, outside a Trainer
        callback.on_validation_batch_start(types.SimpleNamespace(sanity_checking=False), None, mismatched, 3)
    assert "disagree on (or lack) the B dim" in info.value.__notes__[1] and len(mismatched["target"]) == 3


def test_lightning_list_batch_without_fields_says_how_to_name_its_items(lit):
    TritoncheckCallback, Classifier, trainer = lit
    data = torch.utils.data.TensorDataset(torch.randn(4, 3), torch.tensor([0, 1, 2, 3]))
    with pytest.raises(tc.BatchValidationError) as info:
        trainer(TritoncheckCallback(tc.BatchSpec.model_validate(TOY_SPEC)), max_steps=1).fit(
            Classifier(), torch.utils.data.DataLoader(data, batch_size=4))
    (violation,) = info.value.report.violations
    assert violation.code == "not_a_mapping"
    assert violation.hint == ("a 2-item batch: name its items, in their order, with TritoncheckCallback(spec, "
                              "fields=...), e.g. fields=('features', 'target'); or return a dict from the collate_fn")
    assert "hint: a 2-item batch: name its items" in str(info.value)
