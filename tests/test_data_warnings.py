"""What ValidatingCollate logs, as a user reads it with Python's default log format (issue 21): in skip and
quarantine modes the warnings of the samples kept are logged too (once per field and code, as `validate`
logs them), every warning names the dataset indices of its samples where the loader knows them, and no
message repeats the logger's name."""

from __future__ import annotations

import logging

import pytest
import torch
from torch.utils.data import DataLoader

import tritoncheck as tc

REPEATS = " (repeats of this warning are logged at DEBUG)"


def make_spec(tmp_path, name):
    """x in 0..3: below 0 is an error, above 3 a warning (a data bug the step runs through)."""
    path = tmp_path / "spec.yaml"
    path.write_text(f"name: {name}\nfields:\n  x: {{dtype: int64, shape: [B, L], min: 0, max: 3, "
                    "severity: {above_max: warning}}\n")
    return tc.load_spec(path)


def rows(bad=(), warn=()):
    """20 rows of two values; row i holds [0, 1], but -1 at bad rows and 7 at rows with a warning."""
    return [{"x": torch.tensor([0, -1 if i in bad else 7 if i in warn else 1])} for i in range(20)]


def logged(caplog):
    """Each record of the "tritoncheck" logger as Python's default format prints it."""
    form = logging.Formatter(logging.BASIC_FORMAT)
    return [form.format(r) for r in caplog.records if r.name == "tritoncheck"]


@pytest.mark.parametrize("mode", ["skip", "quarantine"])
def test_the_warnings_of_kept_samples_are_logged_with_their_dataset_indices(mode, tmp_path, caplog):
    # dataset rows 10..19 in one batch of 10: row 12 (position 2) has an error, row 17 (position 7) a warning
    spec = make_spec(tmp_path, f"kept-warnings-{mode}")
    collate = tc.ValidatingCollate(spec, on_error=mode, log_dir=tmp_path / "log", quarantine_dir=tmp_path / "log")
    loader = DataLoader(tc.IndexedDataset(rows(bad={12}, warn={17})), batch_size=10, sampler=range(10, 20),
                        collate_fn=collate)
    caplog.set_level(logging.DEBUG, logger="tritoncheck")
    (batch,) = list(loader)
    assert batch["x"][:, 1].tolist() == [1, 1, 1, 1, 1, 1, 7, 1, 1]  # row 17 kept: a warning does not drop
    done = {"skip": "skipped", "quarantine": "quarantined"}[mode]
    assert logged(caplog) == [
        f"WARNING:tritoncheck:dropped 1 bad sample(s) of 10: {done}: sample 2 = dataset index 12 (below_min x); "
        f"records in {tmp_path / 'log'}",
        f"WARNING:tritoncheck:kept-warnings-{mode}: warning: x[7, 1]: x <= 3 (found 7); 1 element(s) in sample(s) 7 "
        f"(dataset index 17){REPEATS}",
    ]


def test_a_kept_warning_is_logged_once_per_field_and_code_then_at_debug(tmp_path, caplog):
    spec = make_spec(tmp_path, "kept-warnings-twice")
    collate = tc.ValidatingCollate(spec, on_error="skip", log_dir=tmp_path)
    loader = DataLoader(tc.IndexedDataset(rows(bad={2, 12}, warn={7, 15, 16})), batch_size=10, collate_fn=collate)
    caplog.set_level(logging.DEBUG, logger="tritoncheck")
    assert [len(b["x"]) for b in loader] == [9, 9]
    assert logged(caplog) == [
        f"WARNING:tritoncheck:dropped 1 bad sample(s) of 10: skipped: sample 2 = dataset index 2 (below_min x); "
        f"records in {tmp_path}",
        f"WARNING:tritoncheck:kept-warnings-twice: warning: x[7, 1]: x <= 3 (found 7); 1 element(s) in sample(s) 7 "
        f"(dataset index 7){REPEATS}",
        f"WARNING:tritoncheck:dropped 1 bad sample(s) of 10: skipped: sample 2 = dataset index 12 (below_min x); "
        f"records in {tmp_path}",
        "DEBUG:tritoncheck:kept-warnings-twice: warning: x[5, 1]: x <= 3 (found 7); 2 element(s) in sample(s) 5, 6 "
        "(dataset indices 15, 16)",
    ]


def test_a_batch_with_only_warnings_names_dataset_indices_and_positions_without_them(tmp_path, caplog):
    spec = make_spec(tmp_path, "only-warnings")
    data = rows(warn={13})
    caplog.set_level(logging.DEBUG, logger="tritoncheck")
    list(DataLoader(tc.IndexedDataset(data), batch_size=10, sampler=range(10, 20),
                    collate_fn=tc.ValidatingCollate(spec)))
    list(DataLoader(data, batch_size=10, sampler=range(10, 20), collate_fn=tc.ValidatingCollate(spec)))  # no indices
    assert logged(caplog) == [
        f"WARNING:tritoncheck:only-warnings: warning: x[3, 1]: x <= 3 (found 7); 1 element(s) in sample(s) 3 "
        f"(dataset index 13){REPEATS}",
        "DEBUG:tritoncheck:only-warnings: warning: x[3, 1]: x <= 3 (found 7); 1 element(s) in sample(s) 3",
    ]


def test_a_failed_write_names_no_logger_twice(tmp_path, caplog, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    spec = make_spec(tmp_path, "full-disk")
    collate = tc.ValidatingCollate(spec, on_error="quarantine", quarantine_dir=tmp_path / "q")
    caplog.set_level(logging.DEBUG, logger="tritoncheck")
    list(DataLoader(tc.IndexedDataset(rows(bad={1})), batch_size=2, sampler=[0, 1], collate_fn=collate))
    assert logged(caplog) == [
        f"ERROR:tritoncheck:could not save the tensors of dropped sample 1 = dataset index 1 to {tmp_path / 'q'} "
        "(OSError: [Errno 28] No space left on device); only its record is kept",
        "WARNING:tritoncheck:dropped 1 bad sample(s) of 2: recorded but NOT saved: sample 1 = dataset index 1 "
        f"(below_min x); records in {tmp_path / 'q'}",
    ]
