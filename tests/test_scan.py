"""`tritoncheck scan`: every bad sample of a dataset on disk, with exit codes 0 / 1 / 2."""

import json

import numpy as np
import pytest
import torch

from tritoncheck.cli import main


def ce_batch(target):
    return {"input": torch.randn(len(target), 3), "target": torch.tensor(target)}


@pytest.fixture
def batches(tmp_path):
    """Three saved batches in three formats, one of them (nested in a subfolder) bad in samples 1 and 3."""
    from safetensors.torch import save_file

    data = tmp_path / "data"
    (data / "part2").mkdir(parents=True)
    torch.save(ce_batch([0, 1, 2, 1]), data / "a.pt")
    save_file(ce_batch([2, 2, -100, 0]), str(data / "b.safetensors"))
    good = ce_batch([1, 0, 0, 2])
    np.savez(data / "c.npz", **{k: v.numpy() for k, v in good.items()})
    torch.save(ce_batch([0, 7, 2, -3]), data / "part2" / "d.pt")
    return data


def scan(*argv):
    return main(["scan", "cross-entropy", *map(str, argv)])


def test_one_bad_file_exits_1_and_lists_its_bad_samples(batches, tmp_path, capsys):
    out = tmp_path / "report.json"
    assert scan(batches, "--output", out) == 1
    report = json.loads(out.read_text())
    assert (report["batches"], report["samples"], report["bad_samples"], report["ok"]) == (4, 16, 2, False)
    found = [(e["source"], e["sample"], e["field"], e["code"], e["value"], e["index"]) for e in report["violations"]]
    bad_file = str(batches / "part2" / "d.pt")
    assert found == [(bad_file, 1, "target", "above_max", 7, [1]), (bad_file, 3, "target", "below_min", -3, [3])]
    assert report["summary"] == [{"code": "above_max", "field": "target", "samples": 1},
                                 {"code": "below_min", "field": "target", "samples": 1}]
    shown = capsys.readouterr().out
    assert "2 bad samples of 16 samples in 4 files" in shown and "above_max" in shown and "d.pt sample 1" in shown


def test_clean_data_exits_0(batches, tmp_path, capsys):
    (batches / "part2" / "d.pt").unlink()
    assert scan(batches, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["violations"] == [] and report["samples"] == 12


def test_batch_level_violation_is_pinned_on_samples(tmp_path, capsys):
    # every target ignored: the rule fails for the batch as a whole, and for each sample alone
    torch.save(ce_batch([-100, -100]), tmp_path / "x.pt")
    assert scan(tmp_path / "x.pt", "--json") == 1
    report = json.loads(capsys.readouterr().out)
    assert [(e["sample"], e["code"]) for e in report["violations"]] == [(0, "all_ignored"), (1, "all_ignored")]


def test_unreadable_file_is_reported_not_fatal(batches, tmp_path, capsys):
    (batches / "broken.pt").write_bytes(b"not a torch file")
    (batches / "part2" / "d.pt").unlink()
    assert scan(batches, "--json") == 1
    report = json.loads(capsys.readouterr().out)
    assert [(e["source"].rsplit("/", 1)[1], e["sample"], e["code"]) for e in report["violations"]] == [
        ("broken.pt", None, "unreadable")
    ]


def test_unmappable_batch_reports_batch_level(tmp_path, capsys):
    torch.save({"input": torch.randn(2, 3)}, tmp_path / "x.pt")  # target missing: no sample to blame
    assert scan(tmp_path / "x.pt", "--json") == 1
    report = json.loads(capsys.readouterr().out)
    assert [(e["sample"], e["field"], e["code"]) for e in report["violations"]] == [(None, "target", "missing_field")]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["cross-entropy", "{tmp}/nope"], "data not found"),
        (["cross-entropy", "{tmp}"], "no batch files"),
        (["no-such-spec", "{tmp}"], "no built-in spec"),
        (["cross-entropy", "{tmp}", "--param", "vocab"], "NAME=VALUE"),
        (["cross-entropy", "{tmp}", "--batch-size", "0"], "batch-size"),
    ],
)
def test_usage_errors_exit_2(tmp_path, capsys, argv, message):
    assert main(["scan", *(a.format(tmp=tmp_path) for a in argv)]) == 2
    assert message in capsys.readouterr().err


def test_saved_hf_dataset_reports_rows(tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    rows = {
        "input_ids": [[1, 2, 3], [4, 5, 60], [7, 8], [1, 1, 1], [3, 3]],  # ragged, as tokenisers leave them
        "attention_mask": [[1, 1, 1], [1, 1, 1], [1, 1], [0, 0, 0], [1, 1]],
        "labels": [0, 1, 2, 9, 1],
        "text": ["a", "b", "c", "d", "e"],  # not in the spec: not checked
    }
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "ds"))
    params = [f"--param={p}" for p in ("vocab_size=50", "max_position_embeddings=16", "type_vocab_size=2", "num_labels=3")]
    code = main(["scan", "bert-sequence-classification", str(tmp_path / "ds"), *params, "--batch-size=2", "--json"])
    assert code == 1
    report = json.loads(capsys.readouterr().out)
    assert sorted((e["sample"], e["field"], e["code"], e["value"]) for e in report["violations"]) == [
        (1, "input_ids", "above_max", 60),
        (3, "attention_mask", "no_attended_position", False),
        (3, "labels", "above_max", 9),
    ]
    assert report["samples"] == 5 and report["bad_samples"] == 2
