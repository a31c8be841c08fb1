"""ValidatingCollate in real DataLoader workers: raise, skip and quarantine, under fork and spawn."""

import json
import pickle
import sys

import pytest
import torch
from torch.utils.data import DataLoader

import tritoncheck as tc
from tritoncheck.spec.schema import spec_from_dict
from tritoncheck.integrations.data import Indexed, split_bad
from tritoncheck.plan.lower import compile_plan

VOCAB, NUM_LABELS, N = 50, 3, 24
BAD_IDS = {3, 7}  # a token id >= vocab_size
BAD_LABEL = {10}  # a label >= num_labels
ALL_IGNORED = {20, 21, 22, 23}  # the last batch of 4: every label is -100, so the loss would be NaN
BAD = BAD_IDS | BAD_LABEL | ALL_IGNORED


def make_spec():
    return tc.BatchSpec.model_validate({
        "name": "toy-classification",
        "params": {"vocab_size": None, "num_labels": None},
        "fields": {
            "input_ids": {"dtype": "int64", "shape": ["B", "L"], "min": 0, "max": "vocab_size - 1"},
            "labels": {"dtype": "int64", "shape": ["B"], "min": 0, "max": "num_labels - 1", "allow": [-100]},
        },
        "rules": [{"rule": "any(labels != -100)", "code": "all_ignored"}],
    }).with_params(vocab_size=VOCAB, num_labels=NUM_LABELS)


class ToyDataset:
    """Sample i carries i in input_ids[1], so the yielded batches say which samples they hold."""

    def __len__(self):
        return N

    def __getitem__(self, i):
        ids = torch.tensor([1, i, 2, 3, 4], dtype=torch.int64)
        if i in BAD_IDS:
            ids[3] = VOCAB + 7
        label = 1 if i != 5 else -100  # one ignored label inside a good batch is fine
        if i in BAD_LABEL:
            label = NUM_LABELS + 2
        if i in ALL_IGNORED:
            label = -100
        return {"input_ids": ids, "labels": torch.tensor(label)}


class Probe:
    """Wraps a collate to report, from inside the worker, whether CUDA or Triton were touched."""

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, samples):
        batch = self.inner(samples)
        return batch, {"cuda_initialized": torch.cuda.is_initialized(), "triton_imported": "triton" in sys.modules}


def loader(collate, workers=2, context="fork"):
    return DataLoader(tc.IndexedDataset(ToyDataset()), batch_size=4, num_workers=workers, collate_fn=collate,
                      multiprocessing_context=context if workers else None)


def seen_indices(batches):
    return sorted(i for b in batches if b is not None for i in b["input_ids"][:, 1].tolist())


def test_collate_pickles_and_keeps_working():
    collate = pickle.loads(pickle.dumps(tc.ValidatingCollate(make_spec())))
    batch = collate([ToyDataset()[0], ToyDataset()[1]])
    assert batch["input_ids"].shape == (2, 5)
    with pytest.raises(tc.BatchValidationError, match="input_ids"):
        collate([ToyDataset()[0], ToyDataset()[3]])


def test_raise_reaches_main_process_with_full_report():
    with pytest.raises(tc.BatchValidationError) as info:
        list(loader(tc.ValidatingCollate(make_spec(), on_error="raise")))
    err = info.value
    # the real report, not the traceback text torch's ExceptionWrapper would rebuild it from
    assert isinstance(err.report, tc.Report)
    assert [(e["field"], e["code"], e["rows"]) for e in err.errors()] == [("input_ids", "above_max", [3])]
    assert err.dataset_indices == (0, 1, 2, 3)
    assert "dataset indices of the bad samples: 3 (sample 3)" in err.__notes__
    assert any("DataLoader worker process" in n for n in err.__notes__)


def test_raise_in_main_process_without_workers():
    with pytest.raises(tc.BatchValidationError, match="above_max") as info:
        list(loader(tc.ValidatingCollate(make_spec()), workers=0))
    assert info.value.dataset_indices == (0, 1, 2, 3)


def test_skip_yields_exactly_the_good_samples(tmp_path):
    collate = tc.ValidatingCollate(make_spec(), on_error="skip", log_dir=tmp_path)
    batches = list(loader(collate))
    assert seen_indices(batches) == sorted(set(range(N)) - BAD)
    assert batches[-1] is None  # the all-ignored batch has no good sample left
    stats = collate.stats()
    assert stats["samples"] == len(BAD) and stats["indices"] == sorted(BAD)
    assert stats["codes"] == {"above_max": 3, "all_ignored": 4}
    assert not list(tmp_path.glob("*.pt"))  # skip records, it does not keep the tensors


def test_quarantine_leaves_exactly_the_bad_samples_on_disk(tmp_path):
    qdir = tmp_path / "quarantine"
    collate = tc.ValidatingCollate(make_spec(), on_error="quarantine", quarantine_dir=qdir)
    assert seen_indices(loader(collate)) == sorted(set(range(N)) - BAD)
    records = {r["index"]: r for r in collate.records()}
    assert sorted(records) == sorted(BAD)
    for index, rec in records.items():
        saved = torch.load(qdir / rec["sample"], weights_only=True)
        expected = ToyDataset()[index]
        assert all(torch.equal(saved[k], expected[k]) for k in ("input_ids", "labels"))
        codes = {(v["field"], v["code"]) for v in rec["violations"]}
        if index in BAD_IDS:
            assert codes == {("input_ids", "above_max")}
            assert rec["violations"][0]["value"] == VOCAB + 7  # this sample's own value
        elif index in BAD_LABEL:
            assert codes == {("labels", "above_max")}
        else:
            assert codes == {("labels", "all_ignored")}
        on_disk = json.loads((qdir / f"{rec['record'].rsplit('/', 1)[1]}").read_text())
        assert on_disk["position"] == index % 4
    collate.clear()
    assert collate.records() == [] and not list(qdir.iterdir())


@pytest.mark.slow  # two spawned workers, each importing torch and tritoncheck afresh
def test_skip_under_spawn_touches_neither_cuda_nor_triton(tmp_path):
    collate = tc.ValidatingCollate(make_spec(), on_error="skip", log_dir=tmp_path)
    out = list(loader(Probe(collate), context="spawn"))
    assert seen_indices(b for b, _ in out) == sorted(set(range(N)) - BAD)
    assert all(not flags["cuda_initialized"] and not flags["triton_imported"] for _, flags in out)
    assert collate.stats()["indices"] == sorted(BAD)


def test_disable_env_lets_a_bad_batch_through(monkeypatch):
    monkeypatch.setenv("TRITONCHECK_DISABLE", "1")
    batch = tc.ValidatingCollate(make_spec())([ToyDataset()[3]])
    assert batch["input_ids"][0, 3] == VOCAB + 7


def test_dtype_problem_is_pinned_on_the_culprit_sample(tmp_path):
    # a float sample makes the whole stacked batch float: a batch-level violation with no samples,
    # so each sample is checked alone and only the float one is dropped
    samples = [Indexed(i, ToyDataset()[i]) for i in (0, 1, 2, 4)]
    samples[2].sample["input_ids"] = samples[2].sample["input_ids"].float()
    collate = tc.ValidatingCollate(make_spec(), on_error="skip", log_dir=tmp_path)
    batch = collate(samples)
    assert batch["input_ids"][:, 1].tolist() == [0, 1, 4]
    assert [(r["index"], {v["code"] for v in r["violations"]}) for r in collate.records()] == [(2, {"dtype"})]


def test_split_bad_drops_samples_that_fail_only_together():
    # every sample passes alone but any two fail together: nothing may pass
    def check_subset(positions):
        bad = len(positions) > 1
        violations = (tc.Violation("labels", "rule_failed", "only together"),) if bad else ()
        return tc.Report("toy", violations, {"B": (len(positions), "labels")}), positions

    first, _ = check_subset([0, 1, 2])
    good, bad, batch = split_bad(3, check_subset, first, [0, 1, 2], compile_plan(make_spec()))
    assert good == [] and sorted(bad) == [0, 1, 2] and batch is None


def test_quarantine_keeps_a_record_when_the_sample_cannot_be_saved(tmp_path):
    sample = ToyDataset()[3]
    sample["note"] = lambda: None  # torch.save cannot pickle it

    def collate_fn(samples):
        return torch.utils.data.default_collate([{k: v for k, v in s.items() if k != "note"} for s in samples])

    collate = tc.ValidatingCollate(make_spec(), collate_fn, on_error="quarantine", quarantine_dir=tmp_path)
    assert collate([Indexed(0, ToyDataset()[0]), Indexed(3, sample)])["input_ids"].shape == (1, 5)
    (rec,) = collate.records()
    assert rec["index"] == 3 and rec["sample"] is None and "sample_error" in rec
    assert sorted(p.name for p in tmp_path.iterdir()) == [rec["record"].rsplit("/", 1)[1]]  # no stray temp file


def test_unbatched_input_is_a_clear_error():
    with pytest.raises(TypeError, match="list of samples"):
        tc.ValidatingCollate(make_spec())(ToyDataset()[0])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"on_error": "drop"}, "on_error"),
        ({"on_error": "quarantine"}, "quarantine_dir"),
        ({"backend": "cuda"}, "backend"),
    ],
)
def test_bad_arguments_are_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tc.ValidatingCollate(make_spec(), **kwargs)


def bad_pair(first=0, second=3):
    """Indexed samples: a good one and a bad one (token id past the vocabulary)."""
    return [Indexed(first, ToyDataset()[0]), Indexed(second, ToyDataset()[3])]


def test_a_full_disk_is_loud_counted_and_never_called_quarantined(tmp_path, monkeypatch, caplog):
    import errno

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    collate = tc.ValidatingCollate(make_spec(), on_error="quarantine", quarantine_dir=tmp_path)
    with caplog.at_level("WARNING", logger="tritoncheck"):
        assert collate(bad_pair(0, 7))["input_ids"].shape == (1, 5)
    (rec,) = collate.records()
    assert rec["index"] == 7 and rec["sample"] is None and "No space left" in rec["sample_error"]
    assert collate.stats()["failed_writes"] == 1
    assert [p.suffix for p in tmp_path.iterdir()] == [".json"]  # no .pt, no temporary file
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "dataset index 7" in errors[0] and "No space left" in errors[0]
    (summary,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "quarantined" not in summary and "NOT saved: sample 1 = dataset index 7" in summary


def test_a_record_that_cannot_be_written_leaves_no_orphan_and_is_counted(tmp_path, monkeypatch, caplog):
    import builtins
    import errno

    real_open = builtins.open

    def open_(file, *args, **kwargs):
        if str(file).endswith(".json.tmp"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", open_)
    collate = tc.ValidatingCollate(make_spec(), on_error="quarantine", quarantine_dir=tmp_path)
    with caplog.at_level("WARNING", logger="tritoncheck"):
        collate(bad_pair(0, 3))
    assert collate.records() == [] and not list(tmp_path.glob("*.pt"))  # the tensors went with the record
    assert collate.stats()["failed_writes"] == 1 and collate.stats()["samples"] == 0
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "could not record dropped sample 1 = dataset index 3" in errors[0]
    (summary,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "quarantined" not in summary and "NOT recorded: sample 1 = dataset index 3" in summary
    collate.clear()
    assert not list(tmp_path.iterdir()) and collate.stats()["failed_writes"] == 0


def test_clear_removes_what_a_killed_write_left_and_nothing_else(tmp_path):
    collate = tc.ValidatingCollate(make_spec(), on_error="quarantine", quarantine_dir=tmp_path)
    collate(bad_pair())
    leftovers = [".3-0123456789ab.pt.tmp", ".3-0123456789ab.json.tmp", "3-aaaaaaaaaaaa.pt"]  # killed mid-write
    for name in leftovers:
        (tmp_path / name).write_bytes(b"partial")
    theirs = ["notes.txt", "model.pt", "config.json"]  # not ours: never touched
    for name in theirs:
        (tmp_path / name).write_text("{}")
    assert len(collate.records()) == 1
    collate.clear()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(theirs)


def test_dataset_keys_never_make_a_path_outside_the_directory(tmp_path):
    qdir, outside = tmp_path / "quarantine", tmp_path / "escaped"
    outside.mkdir()
    collate = tc.ValidatingCollate(make_spec(), on_error="quarantine", quarantine_dir=qdir)
    samples = [Indexed("ok", ToyDataset()[0]), Indexed("../escaped/x", ToyDataset()[3]),
               Indexed("/etc/y", ToyDataset()[7]), Indexed(10, ToyDataset()[10])]
    collate(samples)
    assert not list(outside.iterdir()) and sorted(p.parent for p in tmp_path.rglob("*.*")) == [qdir] * 6
    assert collate.stats()["indices"] == [10, "../escaped/x", "/etc/y"]
    for rec in collate.records():
        assert (qdir / rec["sample"]).is_file()


def test_indexed_dataset_keeps_keys_and_makes_integer_indices_ints():
    data = tc.IndexedDataset({"../escaped/x": 1, "ok": 2})
    assert data["ok"] == Indexed("ok", 2) and data["../escaped/x"].index == "../escaped/x"
    index = tc.IndexedDataset([5, 6, 7])[torch.tensor(2)].index
    assert index == 2 and type(index) is int


@pytest.mark.slow  # two spawned workers, each importing torch, datasets and tritoncheck afresh
def test_indexed_hf_dataset_stays_a_datasets_dataset_and_carries_indices_into_spawned_workers(tmp_path):
    """The Trainer's column removal (remove_columns) keeps the wrapper; workers get it pickled."""
    datasets = pytest.importorskip("datasets", reason="pip install datasets (in the test extra)")
    rows = [ToyDataset()[i] for i in range(N)]
    ds = datasets.Dataset.from_dict({
        "text": [f"sample {i}" for i in range(N)],
        "input_ids": [r["input_ids"].tolist() for r in rows],
        "labels": [int(r["labels"]) for r in rows],
    }).with_format("torch")
    indexed = tc.IndexedDataset(ds).remove_columns("text")
    assert isinstance(indexed, datasets.Dataset) and indexed.column_names == ["input_ids", "labels"]
    assert torch.equal(indexed[3]["input_ids"], ds[3]["input_ids"])  # rows read as before
    assert indexed.__getitems__([7, 1])[0].index == 7
    collate = tc.ValidatingCollate(make_spec(), on_error="skip", log_dir=tmp_path)
    batches = list(DataLoader(indexed, batch_size=4, num_workers=2, collate_fn=collate, multiprocessing_context="spawn"))
    assert seen_indices(batches) == sorted(set(range(N)) - BAD)
    assert collate.stats()["indices"] == sorted(BAD)


def test_the_skip_log_says_why_each_sample_was_dropped(tmp_path, caplog):
    collate = tc.ValidatingCollate(make_spec(), on_error="skip", log_dir=tmp_path)
    with caplog.at_level("WARNING", logger="tritoncheck"):
        collate(bad_pair(0, 7))
    (summary,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "skipped: sample 1 = dataset index 7 (above_max input_ids)" in summary and str(tmp_path) in summary


def test_raise_names_only_samples_with_errors_as_bad():
    """A sample with only a warning is not named among the bad samples of a raised batch."""
    spec = spec_from_dict({"name": "warn-and-error", "fields": {"x": {
        "dtype": "int64", "shape": ["B"], "min": 0, "max": 3, "severity": {"above_max": "warning"}}}}, "w.yaml")
    samples = [{"x": torch.tensor(v)} for v in (0, 7, 0, -1)]
    loader = DataLoader(tc.IndexedDataset(samples), batch_size=4, collate_fn=tc.ValidatingCollate(spec))
    with pytest.raises(tc.BatchValidationError) as info:
        next(iter(loader))
    assert "dataset indices of the bad samples: 3 (sample 3)" in info.value.__notes__


class Sequences:
    """Sample i is a sequence of 4 tokens; those in `long` have 12, past a position table of 8."""

    def __init__(self, long=()):
        self.long = set(long)

    def __len__(self):
        return 8

    def __getitem__(self, i):
        n = 12 if i in self.long else 4
        return {"input_ids": torch.ones(n, dtype=torch.long), "attention_mask": torch.ones(n, dtype=torch.long),
                "labels": torch.tensor(1)}


def pad(samples):
    """Pads to the longest sample, as DataCollatorWithPadding does: the batch, not a sample, is too long."""
    length = max(len(s["input_ids"]) for s in samples)
    out = {k: torch.stack([torch.nn.functional.pad(s[k], (0, length - len(s[k]))) for s in samples])
           for k in ("input_ids", "attention_mask")}
    out["labels"] = torch.stack([s["labels"] for s in samples])
    return out


@pytest.mark.parametrize("workers", [0, 1])
def test_a_raised_too_long_batch_names_the_dataset_index_of_the_long_sample(workers):
    spec = tc.load_spec("bert-sequence-classification", vocab_size=50, max_position_embeddings=8, type_vocab_size=2,
                        num_labels=2)
    loader = DataLoader(tc.IndexedDataset(Sequences(long={5})), batch_size=4, num_workers=workers,
                        collate_fn=tc.ValidatingCollate(spec, pad, backend="torch"))
    with pytest.raises(tc.BatchValidationError, match="sequence_too_long") as info:
        list(loader)
    assert "dataset indices of the bad samples: 5 (sample 1)" in info.value.__notes__
    without_indices = DataLoader(Sequences(long={5, 6}), batch_size=4, collate_fn=tc.ValidatingCollate(spec, pad))
    with pytest.raises(tc.BatchValidationError) as info:
        list(without_indices)
    assert info.value.__notes__ == ["bad samples of this batch: 1, 2 (wrap the dataset in tc.IndexedDataset to see "
                                    "their dataset indices)"]


def test_a_moved_violation_drops_an_index_whose_batch_coordinate_is_not_certain():
    """relocate/renumber move a violation's index along the batch dim where every check of its field and code
    iterates the same axes; where two such checks iterate different axes, which coordinate is the sample's is not
    known, and the index is dropped rather than left counting from the sub-batch it was found in (a false row)."""
    from types import SimpleNamespace

    from tritoncheck.integrations.data import relocate, renumber
    from tritoncheck.report import Violation

    def plan(*axes):
        return SimpleNamespace(batch_dim="B", checks=[SimpleNamespace(field="x", code="bad", axes=a) for a in axes])

    v = Violation("x", "bad", "x >= 0", samples=(0,), count=1, index=(0, 2), value=-1)
    assert relocate(v, 5, plan(("B", "L"))).index == (5, 2)
    assert relocate(v, 5, plan(("B", "L"))).samples == (5,)
    assert relocate(v, 5, plan(("B", "L"), ("L", "B"))).index is None
    w = Violation("x", "bad", "x >= 0", samples=(0, 1), count=2, index=(1, 3), value=-1)
    assert renumber(w, [4, 9], plan(("B", "L"))).index == (9, 3)
    assert renumber(w, [4, 9], plan(("B", "L"), ("B",))).index == (9, 3)  # (an index of two: only (B, L) fits it)
    assert renumber(w, [4, 9], plan(("B", "L"), ("L", "B"))).index is None


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_tuple_samples_are_a_setup_error_not_a_batch_to_drop(on_error, tmp_path):
    """Tuple samples collate to a list: no sample could ever pass, so "skip" would drop every batch and a
    `if batch is None: continue` loop would train on nothing. It is refused, saying how to name the items."""
    collate = tc.ValidatingCollate(make_spec(), on_error=on_error, log_dir=tmp_path if on_error == "skip" else None)
    ids = torch.tensor([1, 2, 3])
    with pytest.raises(TypeError) as info:
        collate([(ids, 1), (ids, 2)])
    assert str(info.value) == (
        "ValidatingCollate(toy-classification): the collated batch is a list, not a mapping of field name to tensor, "
        "so no sample could ever pass; name the items: return a dict from the dataset (e.g. {'input_ids': ..., "
        "'labels': ...}), or pass a collate_fn that returns one (a module-level function returning "
        "dict(zip(('input_ids', 'labels'), default_collate(samples))))")
    assert collate.records() == []
