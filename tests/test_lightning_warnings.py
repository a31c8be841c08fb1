"""The Lightning callback in skip mode logs the warnings of the samples it keeps, at their places in the
batch and with their dataset indices, and no message repeats the logger's name (as ValidatingCollate)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch

import tritoncheck as tc

pytest.importorskip("lightning", reason="pip install lightning (in the test extra)")

SPEC = {"name": "toy", "fields": {"target": {"dtype": "int64", "shape": ["B"], "min": 0, "max": 3,
                                             "severity": {"above_max": "warning"}}}}


def test_skip_logs_the_kept_samples_warnings_with_their_dataset_indices(caplog):
    from tritoncheck.integrations.lightning import TritoncheckCallback

    callback = TritoncheckCallback(tc.BatchSpec.model_validate(SPEC), index="idx", on_error="skip")
    # dataset rows 10..13: row 11 (position 1) is an error, row 12 (position 2) a warning
    batch = {"idx": torch.tensor([10, 11, 12, 13]), "target": torch.tensor([0, -1, 7, 1])}
    with caplog.at_level("WARNING", logger="tritoncheck"):
        callback.on_train_batch_start(SimpleNamespace(sanity_checking=False), None, batch, 0)
    assert batch["idx"].tolist() == [10, 12, 13]
    form = logging.Formatter(logging.BASIC_FORMAT)
    lines = [form.format(r) for r in caplog.records if r.name == "tritoncheck"]
    assert len(lines) == 2, lines
    assert lines[0].startswith("WARNING:tritoncheck:train batch_idx 0: dropped 1 bad sample(s) of 4: "
                               "sample 1 = dataset index 11 (below_min)")
    assert lines[1].startswith("WARNING:tritoncheck:toy: warning: target[2]: target <= 3 (found 7)")
    assert "in sample(s) 2 (dataset index 12)" in lines[1], lines[1]
