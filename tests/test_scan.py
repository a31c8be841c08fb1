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
    assert report["summary"] == [{"code": "above_max", "field": "target", "severity": "error", "samples": 1},
                                 {"code": "below_min", "field": "target", "severity": "error", "samples": 1}]
    shown = capsys.readouterr().out
    assert "2 bad samples of 16 samples in 4 files" in shown and "above_max" in shown and "d.pt sample 1" in shown


def test_the_json_report_has_a_line_per_violation_and_reads_back_as_the_report(batches, tmp_path, capsys):
    """`--output` and `--json` write the report a key a line and a violation (or summary row) a line, each compact
    (json's C encoder, not the indented dump's Python one): the text reads back as `tc.scan`'s report, every key in
    its order, and as an indented dump of it would; text that JSON escapes (quotes, control characters, non-ASCII,
    NaN) comes back as it was."""
    import tritoncheck as tc
    from tritoncheck.scanning.engine import report_parts

    out = tmp_path / "report.json"
    assert scan(batches, "--output", out, "--json") == 1
    printed, written = capsys.readouterr().out, out.read_text()
    report = tc.scan(tc.load_spec("cross-entropy"), batches)
    assert printed == written and list(json.loads(written)) == list(report)
    assert json.loads(written) == json.loads(json.dumps(report, indent=2)) == report
    lines = written.splitlines()
    assert [line.strip() for line in lines[lines.index('  "violations": [') + 1:][:3]] == [
        json.dumps(v) + "," for v in report["violations"][:1]] + [json.dumps(report["violations"][1]), "],"]
    odd = {"a": [], "b": {}, "c": [{"m": 'q"\\\n\x01 é \u2028', "v": float("nan")}, [1, [2.5, None]], "x"],
           "d": {"e": [1, {"f": True}]}, "g": -0.0, "h": float("inf")}
    back = json.loads("".join(report_parts(odd)))
    assert json.dumps(back) == json.dumps(odd) and list(back) == list(odd)


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


WARN_SPEC = """
name: warned
batch_dim: N
fields:
  input: {dtype: float, shape: [N, C]}
  target: {dtype: int64, shape: [N], min: 0, max: C - 1, severity: {above_max: warning}}
"""


def test_rows_with_only_warnings_are_listed_as_warnings(tmp_path, capsys):
    (tmp_path / "warned.yaml").write_text(WARN_SPEC)
    spec = str(tmp_path / "warned.yaml")
    torch.save(ce_batch([0, 7, 2, 1]), tmp_path / "a.pt")  # sample 1: a warning only
    assert main(["scan", spec, str(tmp_path / "a.pt"), "--json"]) == 0  # as `check`: warnings do not fail
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["bad_samples"] == 1
    assert [(e["sample"], e["code"], e["severity"], e["value"]) for e in report["violations"]] == [
        (1, "above_max", "warning", 7)]
    torch.save(ce_batch([0, 7, -2, 9]), tmp_path / "a.pt")  # and an error
    assert main(["scan", spec, str(tmp_path / "a.pt"), "--format", "text"]) == 1
    out = capsys.readouterr().out
    assert "above_max in target: 2 bad samples (warning)" in out and "below_min in target: 1 bad sample\n" in out


def test_unreadable_file_is_reported_not_fatal(batches, tmp_path, capsys):
    (batches / "broken.pt").write_bytes(b"not a torch file")
    (batches / "part2" / "d.pt").unlink()
    assert scan(batches, "--json") == 1
    report = json.loads(capsys.readouterr().out)
    assert [(e["source"].rsplit("/", 1)[1], e["sample"], e["code"]) for e in report["violations"]] == [
        ("broken.pt", None, "unreadable")
    ]
    # a file not read at all holds samples nobody knows the number of: none is claimed (it had counted 1)
    assert (report["unread_samples"], report["samples"], report["batches"]) == (0, 12, 3)
    assert scan(batches, "--format", "text") == 1
    assert "could not be read" not in capsys.readouterr().out.splitlines()[0]


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
    datasets = pytest.importorskip("datasets", reason="pip install datasets (in the test extra)")
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


# --- datasets: renames, fields the data lacks, progress, wording, padded chunks -------------------

BERT = [f"--param={p}" for p in ("vocab_size=50", "max_position_embeddings=16", "type_vocab_size=2", "num_labels=3")]


def save_ds(tmp_path, rows, name="ds"):
    datasets = pytest.importorskip("datasets", reason="pip install datasets (in the test extra)")
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / name))
    return str(tmp_path / name)


def scan_ds(spec, path, *argv, params=BERT):
    return main(["scan", spec, path, *params, "--json", *argv])


def found(report):
    rows = [(e["sample"], e["field"], e["code"], e["value"]) for e in report["violations"]]
    return sorted(rows, key=lambda r: (-1 if r[0] is None else r[0], *map(str, r[1:])))


def test_datasets_label_column_is_checked_as_labels(tmp_path, capsys):
    # a `datasets` dataset calls it `label`; the collator renames it to `labels` later
    path = save_ds(tmp_path, {"input_ids": [[1, 2], [3, 4, 5], [6]], "label": [0, -1, 2]})
    assert scan_ds("bert-sequence-classification", path) == 1
    report = json.loads(capsys.readouterr().out)
    assert found(report) == [(1, "labels", "below_min", -1)]
    assert report["renamed"] == {"label": "labels"}
    assert main(["scan", "bert-sequence-classification", path, *BERT, "--format", "text"]) == 1
    assert "checked label as labels" in capsys.readouterr().out


def test_rename_option_maps_any_column_and_rejects_unknown_fields(tmp_path, capsys):
    path = save_ds(tmp_path, {"input_ids": [[1, 2], [3, 4]], "class_id": [7, 1]})
    assert scan_ds("bert-sequence-classification", path, "--rename", "class_id=labels") == 1
    assert found(json.loads(capsys.readouterr().out)) == [(0, "labels", "above_max", 7)]
    assert scan_ds("bert-sequence-classification", path, "--rename", "class_id=label") == 2
    assert "no field 'label' (did you mean 'labels'?)" in capsys.readouterr().err


def test_every_field_the_data_lacks_is_reported_once(tmp_path, capsys):
    # input_ids (required) is misspelled: a usage error before the scan, unless the column is left out
    path = save_ds(tmp_path, {"input_id": [[1, 2]] * 5, "labels": [0, 1, 5, 2, 1]})
    assert scan_ds("bert-sequence-classification", path, "--batch-size=2") == 2
    assert ("column 'input_id' is not a field of bert-sequence-classification, and its field 'input_ids' is not in "
            "the data: a misspelling? --rename input_id=input_ids") in capsys.readouterr().err
    assert scan_ds("bert-sequence-classification", path, "--batch-size=2", "--ignore-column=input_id") == 1
    report = json.loads(capsys.readouterr().out)
    missing = [e for e in report["violations"] if e["code"] == "missing_field"]
    assert [(e["sample"], e["field"]) for e in missing] == [(None, "input_ids")]  # once, not once per chunk
    assert found(report)[-1] == (2, "labels", "above_max", 5)  # the rest is still checked row by row
    assert report["absent_fields"] == {path: {"required": ["input_ids"],
                                              "optional": ["attention_mask", "token_type_ids", "position_ids"]}}


def test_progress_counts_rows_against_rows_and_output_says_rows(tmp_path, monkeypatch, capsys):
    from rich.progress import Progress

    seen = {"total": None, "done": 0}
    add_task, advance = Progress.add_task, Progress.advance

    def record_add(self, description, *args, total=None, **kwargs):
        seen["total"] = total
        return add_task(self, description, *args, total=total, **kwargs)

    def record_advance(self, task, amount=1):
        seen["done"] += amount
        return advance(self, task, amount)

    monkeypatch.setattr(Progress, "add_task", record_add)
    monkeypatch.setattr(Progress, "advance", record_advance)
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # (off a terminal there is no progress bar, nor rich)
    path = save_ds(tmp_path, {"input_ids": [[1, 2, 3][: 1 + i % 3] for i in range(50)], "labels": [0] * 49 + [9]})
    assert main(["scan", "bert-sequence-classification", path, *BERT, "--batch-size=16"]) == 1
    assert seen == {"total": 50, "done": 50}
    out = capsys.readouterr().out
    assert out.startswith("1 bad row of 50 rows for bert-sequence-classification") and "batch" not in out
    assert "row 49" in out


def test_ragged_rows_are_padded_per_chunk_not_checked_one_by_one(tmp_path, monkeypatch, capsys):
    import tritoncheck.api as api

    calls = []
    real = api.check
    monkeypatch.setattr(api, "check", lambda batch, spec, **kw: calls.append(1) or real(batch, spec, **kw))
    rows = {"input_ids": [[1] * (1 + i % 7) for i in range(60)], "labels": [i % 3 for i in range(60)]}
    assert scan_ds("bert-sequence-classification", save_ds(tmp_path, rows), "--batch-size=20") == 0
    assert json.loads(capsys.readouterr().out)["samples"] == 60
    assert len(calls) == 3  # one check per chunk of 20 rows


def hf_rows(rng, n, bad):
    """Ragged tokenised rows; `bad` puts in errors of every kind padding could hide or invent."""
    rows = {"input_ids": [], "attention_mask": [], "labels": []}
    for i in range(n):
        length = int(rng.integers(1, 9))
        ids = [int(x) for x in rng.integers(2, 50, length)]
        mask = [1] * length
        label = int(rng.integers(0, 3))
        kind = i % 9 if bad else -1
        if kind == 0:
            ids[-1] = 50  # past the vocabulary
        elif kind == 1:
            mask = [0] * length  # attends nowhere: padding with 0 must not hide it
        elif kind == 2:
            mask = mask[:-1] or [1, 1]  # fields disagree on L: padding both must not hide it
        elif kind == 3:
            ids, mask = ids + [1] * 20, mask + [1] * 20  # too long for max_position_embeddings=16
        elif kind == 4:
            label = -1
        rows["input_ids"].append(ids)
        rows["attention_mask"].append(mask)
        rows["labels"].append(label)
    return rows


@pytest.mark.parametrize("spec, params", [
    ("bert-sequence-classification", BERT),
    ("roberta-sequence-classification", [*BERT, "--param=pad_token_id=1"]),
])
def test_padded_chunks_find_exactly_what_row_by_row_finds(tmp_path, capsys, spec, params):
    rng = np.random.default_rng(0)
    path = save_ds(tmp_path, hf_rows(rng, 45, bad=True))
    assert main(["scan", spec, path, *params, "--json", "--batch-size=1"]) == 1  # one row per check: no padding
    alone = json.loads(capsys.readouterr().out)
    assert main(["scan", spec, path, *params, "--json", "--batch-size=16"]) == 1
    padded = json.loads(capsys.readouterr().out)
    assert found(padded) == found(alone)
    assert {e["code"] for e in padded["violations"]} >= {"above_max", "no_attended_position", "dim_mismatch",
                                                         "below_min"}
    assert padded["bad_samples"] == alone["bad_samples"]


def test_padding_never_hides_a_row_too_short_for_a_dim_rule(tmp_path, capsys):
    # conv1d inputs (C, L): one short row among long ones breaks L >= min_length only at its own length
    inputs = [np.zeros((2, 12)).tolist()] * 3 + [np.zeros((2, 3)).tolist()]
    path = save_ds(tmp_path, {"inputs": inputs, "labels": [0, 1, 0, 1]})
    params = ["-p", "in_channels=2", "-p", "num_classes=2", "-p", "min_length=5"]
    assert main(["scan", "conv1d-classifier", path, *params, "--json"]) == 1
    assert [(e["sample"], e["code"]) for e in json.loads(capsys.readouterr().out)["violations"]] == [(3, "dim_bound")]


# --- Parquet and Arrow shards (the data `--engine ray` scans; tests/test_scan_ray.py) -------------------

BERT_PARAMS = {"vocab_size": 50, "max_position_embeddings": 16, "type_vocab_size": 2, "num_labels": 3}
# what breaks row r of the shards below: its code, by r % 7 (5 and 6: a good row)
KINDS = {0: ("input_ids", "above_max"), 1: ("attention_mask", "no_attended_position"),
         2: ("attention_mask", "dim_mismatch"), 3: ("labels", "below_min"), 4: ("input_ids", "sequence_too_long")}


def shard_rows(start, n, padded_to=None):
    """Rows start .. start+n-1 of a tokenised dataset, ragged (or padded with 0 to `padded_to`, as a tokeniser
    with padding="max_length" leaves them); row r breaks KINDS[r % 7] and says `row r` in its text column."""
    rng = np.random.default_rng(start)
    rows = {"text": [], "input_ids": [], "attention_mask": [], "label": []}
    for r in range(start, start + n):
        length = int(rng.integers(1, 9))
        ids, mask, label = [int(x) for x in rng.integers(2, 50, length)], [1] * length, int(rng.integers(0, 3))
        kind = r % 7
        if kind == 0:
            ids[-1] = 50  # past the vocabulary
        elif kind == 1:
            mask = [0] * length  # attends nowhere
        elif kind == 2 and padded_to is None:
            mask = mask[:-1] or [1, 1]  # fields disagree on L
        elif kind == 3:
            label = -1  # the `datasets` column is `label`: checked as `labels`
        elif kind == 4 and padded_to is None:
            ids, mask = ids + [1] * 20, mask + [1] * 20  # longer than max_position_embeddings=16
        if padded_to is not None:
            ids, mask = ids + [0] * (padded_to - length), mask + [0] * (padded_to - length)
        rows["text"].append(f"row {r}")
        rows["input_ids"].append(ids)
        rows["attention_mask"].append(mask)
        rows["label"].append(label)
    return rows


def write_shards(path):
    """Four shards in sorted path order: Parquet of 3-row row groups, an empty one, an Arrow stream (as
    `datasets` writes) of 4-row batches, and an Arrow file (Feather v2) of padded rows in a subfolder that
    sorts last.
    Returns every row, in global order, and the (row, field, code) that are bad."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyarrow import feather

    path.mkdir()
    (path / "part-3").mkdir()
    parts = [shard_rows(0, 10), shard_rows(10, 0), shard_rows(10, 11), shard_rows(21, 9, padded_to=8)]
    schema = pa.schema([("text", pa.string()), ("input_ids", pa.list_(pa.int64())),
                        ("attention_mask", pa.list_(pa.int64())), ("label", pa.int64())])
    tables = [pa.table(rows, schema=schema) for rows in parts]
    pq.write_table(tables[0], path / "part-0.parquet", row_group_size=3)
    pq.write_table(tables[1], path / "part-1.parquet")
    with pa.ipc.new_stream(path / "part-2.arrow", schema) as stream:
        stream.write_table(tables[2], max_chunksize=4)
    feather.write_feather(tables[3], path / "part-3" / "data.arrow")
    every = pa.concat_tables(tables).to_pylist()
    padded = set(range(21, 30))
    bad = sorted((r, *KINDS[r % 7]) for r in range(len(every)) if r % 7 in KINDS and not (r in padded and r % 7 in (2, 4)))
    return every, bad


@pytest.fixture
def shards(tmp_path):
    return tmp_path / "shards", *write_shards(tmp_path / "shards")


def bert():
    import tritoncheck as tc

    return tc.load_spec("bert-sequence-classification", **BERT_PARAMS)


def test_parquet_and_arrow_shards_report_global_rows_as_row_by_row_does(shards, tmp_path):
    from tritoncheck.scanning.engine import scan as scan_data

    path, every, bad = shards
    report = scan_data(bert(), path, batch_size=4)
    assert sorted((e["sample"], e["field"], e["code"]) for e in report["violations"]) == bad
    assert (report["samples"], report["unit"], report["renamed"]) == (30, "rows", {"label": "labels"})
    assert report["batches"] == 3 + 3 + 3  # chunks of 4 rows never span shards; the empty one has none
    assert {every[e["sample"]]["text"] for e in report["violations"]} == {f"row {r}" for r, _, _ in bad}
    # the same rows as one `datasets` dataset, each row checked alone: no padding, no shards
    alone = scan_data(bert(), save_ds(tmp_path, {k: [row[k] for row in every] for k in every[0]}), batch_size=1)
    assert found(report) == found(alone)


def test_bad_rows_are_written_as_parquet_with_global_row_and_codes(shards, tmp_path):
    import pyarrow.parquet as pq

    from tritoncheck.scanning.engine import scan as scan_data

    path, every, _ = shards
    report = scan_data(bert(), path, batch_size=4, bad_rows=tmp_path / "bad")
    assert sorted(p.name for p in (tmp_path / "bad").iterdir()) == [
        "bad-rows-00000.parquet", "bad-rows-00002.parquet", "bad-rows-00003.parquet"]  # one per shard with any
    written = pq.read_table(tmp_path / "bad").to_pylist()
    codes = {}
    for e in report["violations"]:
        codes.setdefault(e["sample"], set()).add(e["code"])
    assert [row.pop("tritoncheck_row") for row in written] == sorted(codes)
    assert [set(row.pop("tritoncheck_codes")) for row in written] == [codes[r] for r in sorted(codes)]
    assert written == [every[r] for r in sorted(codes)]  # every column, the text too


def test_unreadable_shard_is_reported_and_the_rest_scanned(shards, capsys):
    path, _, bad = shards
    (path / "part-1.parquet").write_bytes(b"not parquet")  # its row count is unknown now (it was empty)
    assert scan_ds("bert-sequence-classification", str(path)) == 1
    report = json.loads(capsys.readouterr().out)
    whole = [e for e in report["violations"] if e["row"] is None]
    assert [(e["source"], e["code"]) for e in whole] == [(str(path / "part-1.parquet"), "unreadable")]
    assert "the rows of later files are numbered within their file" in whole[0]["message"]
    # rows before it keep their global number; after it, no global number is claimed, each row is its file's
    first = {str(path / "part-0.parquet"): 0, str(path / "part-2.arrow"): 10, str(path / "part-3" / "data.arrow"): 21}
    got = sorted((first[e["source"]] + e["row"], e["sample"], e["field"], e["code"])
                 for e in report["violations"] if e["row"] is not None)
    assert got == [(r, r if r < 10 else None, f, c) for r, f, c in bad]


@pytest.mark.parametrize("argv, message", [
    (["--engine", "ray"], "--engine ray reads Parquet or Arrow files"),
    (["--bad-rows", "{tmp}/out"], "--bad-rows reads Parquet or Arrow files"),
])
def test_shard_options_on_batch_files_are_usage_errors(batches, tmp_path, capsys, argv, message):
    assert scan(batches, *(a.format(tmp=tmp_path) for a in argv)) == 2
    assert message in capsys.readouterr().err


def test_bad_rows_directory_must_be_new_or_empty(shards, tmp_path, capsys):
    path = shards[0]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "old.parquet").write_bytes(b"")
    assert scan_ds("bert-sequence-classification", str(path), "--bad-rows", str(tmp_path / "bad")) == 2
    assert "give a new or empty directory" in capsys.readouterr().err


def test_engine_ray_without_ray_names_the_extra(shards, monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as where it is not installed
    monkeypatch.setitem(sys.modules, "ray.data", None)
    assert scan_ds("bert-sequence-classification", str(shards[0]), "--engine", "ray") == 2
    err = capsys.readouterr().err
    assert "pip install 'tritoncheck[ray]'" in err and "Traceback" not in err


# --- a failing chunk costs its bad rows, not a second pass (issue 28) ---------------------------------------------

PER_SAMPLE = [("y >= 0", True), ("x[:, 0] <= y", True), ("any(m == 1, dim=L)", True), ("sum(x, dim=L) < 5", True),
              ("y < L", True), ("x <= y", True), ("y <= sum(y)", False), ("y[0] <= y", False), ("y < B", False),
              ("all(y > 0)", False), ("sum(x) < 3", False)]


def three_fields(rule):
    import tritoncheck as tc

    fields = {"x": {"dtype": "float", "shape": ["B", "L"]}, "y": {"dtype": "float", "shape": ["B"]},
              "m": {"dtype": "int", "shape": ["B", "L"]}}
    return tc.BatchSpec.model_validate({"name": "s", "fields": fields, "rules": [rule]})


@pytest.mark.parametrize("rule, own", PER_SAMPLE)
def test_a_rule_decides_each_sample_alone_only_without_a_batch_wide_term(rule, own):
    from tritoncheck.plan.lower import compile_plan
    from tritoncheck.scanning.engine import _per_sample

    assert _per_sample(compile_plan(three_fields(rule))) is own


# per-sample checks: the batch, then each bad row alone (none for a rule of one value per row); a batch-wide term
# needs the good rows checked again
CHECKED = [("y <= 0.5", [8]), ("y <= 0.5 + 0 * sum(x, dim=L)", [8, 1, 1]), ("y <= 0.5 + 0 * sum(y)", [8, 6, 1, 1])]


@pytest.mark.parametrize("rule, checked", CHECKED)
def test_a_failing_batch_of_per_sample_checks_is_checked_once_then_its_bad_rows(rule, checked, monkeypatch):
    import tritoncheck.api as api
    from tritoncheck.scanning.engine import scan_batch

    sizes = []
    check = api.check
    monkeypatch.setattr(api, "check", lambda batch, *a, **k: sizes.append(len(batch["y"])) or check(batch, *a, **k))
    y = torch.tensor([0.1, 0.9, 0.2, 0.8, 0.3, 0.1, 0.2, 0.1], dtype=torch.float64)  # rows 1 and 3 are bad either way
    batch = {"x": torch.zeros(8, 2), "y": y, "m": torch.ones(8, 2, dtype=torch.long)}
    found, size, _ = scan_batch(batch, three_fields(rule), "torch")
    assert sorted({p for p, _ in found}) == [1, 3] and size == 8
    assert sizes == checked


def test_the_scan_runs_torch_ops_on_one_thread_and_restores_the_count(tmp_path, monkeypatch):
    """The scan is one thread by design; on more intra-op threads its small torch ops cost 2.3x the CPU time (10M
    numeric rows, 2 cores). The caller's setting is restored afterwards."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import tritoncheck as tc
    from tritoncheck.scanning import engine

    seen = []
    add = engine._Scan.add
    monkeypatch.setattr(engine._Scan, "add", lambda self, item: seen.append(torch.get_num_threads()) or add(self, item))
    pq.write_table(pa.table({"x": pa.array([1, 2, -3], pa.int64())}), tmp_path / "a.parquet")
    spec = tc.BatchSpec.model_validate({"name": "s", "fields": {"x": {"dtype": "int", "shape": ["B"], "min": 0}}})
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        report = tc.scan(spec, tmp_path / "a.parquet")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == {1} and report["bad_samples"] == 1


@pytest.mark.parametrize("layout", ["rows first", "rows second", "strided"])
def test_each_bad_sample_of_a_batch_is_reported_as_checked_alone(layout):
    """The bad samples of a batch are checked one by one (a view of each where the batch dim comes first and the
    tensors are contiguous, else copies): every layout gives each sample's own report."""
    import tritoncheck as tc
    from tritoncheck.scanning.engine import scan_batch

    fields = {"x": {"dtype": "int", "shape": ["B"], "max": 5},
              "y": {"dtype": "float", "shape": ["T", "B"] if layout == "rows second" else ["B", "T"], "min": 0}}
    spec = tc.BatchSpec.model_validate({"name": "s", "fields": fields})
    x, y = torch.tensor([1, 9, 2, 7, 3]), torch.tensor([[0.5, 1.0], [0.0, 2.0], [-1.0, 0.0], [3.0, -2.5], [1.0, 1.0]])
    if layout == "rows second":
        y = y.t().contiguous()
    if layout == "strided":
        x, y = torch.stack([x, x], dim=1)[:, 0], torch.stack([y, y], dim=2)[..., 0]
        assert not x.is_contiguous() and not y.is_contiguous()
    found, size, _ = scan_batch({"x": x, "y": y}, spec, "c")
    rows = [{"x": x[i:i + 1], "y": y[:, i:i + 1] if layout == "rows second" else y[i:i + 1]} for i in range(5)]
    alone = [(i, v.field, v.code, v.value) for i in range(5) for v in tc.check(rows[i], spec, backend="c").violations]
    assert size == 5 and [(i, v.field, v.code, v.value) for i, v in found] == alone
    assert [i for i, *_ in alone] == [1, 2, 3, 3]


@pytest.mark.parametrize("backend", ["c", "torch"])
@pytest.mark.parametrize("padded", [False, True])
def test_bad_rows_of_one_value_checks_are_reported_from_the_batch_as_checked_alone(backend, padded, monkeypatch):
    """A bad row that breaks only checks of one value per row gets its report from the batch, not from a check of
    the row alone (0.1 ms a row: 1% bad rows cost more than the rest of a scan): bounds, value sets, finiteness on
    [B] fields, and rules over [B] fields combined element-wise (`lo <= hi`, arithmetic, `where`, a constant
    subject); a row that breaks any other check (a [B, L] field, a rule that reads a dim) is still checked alone.
    Either way each row's report is the one checking it alone gives. Rows padded together (`take`: a chunk with a
    null or ragged rows) too: a field of one value per row holds no padding."""
    import tritoncheck as tc
    import tritoncheck.api as api
    from tritoncheck.scanning.engine import scan_batch

    fields = {"i": {"dtype": "int", "shape": ["B"], "min": 0, "max": 5},
              "s": {"dtype": "int", "shape": ["B"], "values": [1, 2, 3], "severity": {"not_in_set": "warning"}},
              "f": {"dtype": "float", "shape": ["B"], "min": -1.5, "finite": True},
              "h": {"dtype": "float", "shape": ["B"], "max": 0.1},
              "w": {"dtype": "int", "shape": ["B", "L"], "min": 0}}
    rules = [{"rule": "i <= s + 3", "code": "i_le_s"},
             {"rule": "f <= h * 20 where i >= 1", "code": "f_le_h", "severity": "warning", "hint": "h is a share"},
             {"rule": "0 <= i", "code": "i_nonneg"},
             {"rule": "abs(f - 1) < 100", "code": "f_near"},
             {"rule": "i < L + 4", "code": "i_short"}]  # (reads a dim: its rows are checked alone)
    spec = tc.BatchSpec.model_validate({"name": "s", "fields": fields, "rules": rules})
    batch = {"i": torch.tensor([1, 9, 2, -7, 3, 5, 0, 6], dtype=torch.int32),
             "s": torch.tensor([1, 4, 2, 3, 9, 1, 1, 3], dtype=torch.int8),
             "f": torch.tensor([0.0, float("nan"), -2.0, 1.0, float("inf"), 0.5, -1.5, 2.0], dtype=torch.float64),
             "h": torch.tensor([0.1, 0.2, 0.0, 0.1, 1e30, 0.0, 0.1, 0.0], dtype=torch.float16),
             "w": torch.tensor([[1, 2], [0, 0], [3, -1], [0, 0], [1, 1], [2, 2], [0, 1], [1, 1]])}
    checked = []
    check = api.check
    monkeypatch.setattr(api, "check", lambda b, *a, **k: checked.append(len(b["i"])) or check(b, *a, **k))
    take = (lambda pos: {k: t[pos] for k, t in batch.items()}) if padded else None
    found, size, _ = scan_batch(batch, spec, backend, take=take)
    calls = list(checked)  # (before the rows alone below)
    alone = [(i, v) for i in range(8) for v in tc.check({k: t[i:i + 1] for k, t in batch.items()}, spec,
                                                        backend=backend).violations]
    from tritoncheck.integrations.data import relocate
    from tritoncheck.plan.lower import compile_plan

    plan = compile_plan(spec)
    assert size == 8 and [(i, repr(v)) for i, v in found] == [(i, repr(relocate(v, i, plan))) for i, v in alone]  # NaN
    assert sorted({i for i, _ in found}) == [1, 2, 3, 4, 5, 7]
    assert {v.code for _, v in found} >= {"i_le_s", "f_le_h", "i_nonneg", "f_near", "i_short"}
    # the batch, then only rows 1 and 7 (i < L + 4) and 2 (w < 0) alone: rows 3, 4 and 5 break one-value checks only
    assert calls == [8, 1, 1, 1]


# --- shards that differ in their columns ----------------------------------------------------------------


def write_parquet(path, columns):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({k: pa.array(v, pa.list_(pa.int64()) if isinstance(v[0], list) else pa.int64())
                             for k, v in columns.items()}), path)


def test_a_column_only_some_shards_hold_is_checked_where_it_is(tmp_path, capsys):
    """Each shard is checked on its own columns: a field one shard lacks is still checked in the shards that have
    it (the scan had kept the columns common to every shard: token_type_ids = 9, an embedding crash, went
    unchecked, and the report said the dataset lacked it), and what each shard lacks is said of that shard."""
    data = tmp_path / "opt"
    write_parquet(data / "a.parquet", {"input_ids": [[1, 2, 3]] * 3, "labels": [0, 1, 2]})
    write_parquet(data / "b.parquet", {"input_ids": [[1, 2, 3]] * 3, "labels": [0, 1, 2],
                                       "token_type_ids": [[0, 0, 0], [0, 0, 0], [0, 9, 0]]})
    assert scan_ds("bert-sequence-classification", str(data)) == 1
    report = json.loads(capsys.readouterr().out)
    assert [(e["source"], e["sample"], e["row"], e["field"], e["code"], e["value"]) for e in report["violations"]] == [
        (str(data / "b.parquet"), 5, 2, "token_type_ids", "above_max", 9)]
    assert report["absent_fields"] == {  # what every shard lacks, of the dataset; the rest of each shard
        str(data): {"required": [], "optional": ["attention_mask", "position_ids"]},
        str(data / "a.parquet"): {"required": [], "optional": ["token_type_ids"]}}
    assert main(["scan", "bert-sequence-classification", str(data), *BERT, "--format", "text"]) == 1
    shown = capsys.readouterr().out
    assert f"not in {data} (optional, so not checked): attention_mask, position_ids\n" in shown
    assert f"not in {data / 'a.parquet'} (optional, so not checked): token_type_ids\n" in shown
    assert "row 5 (" in shown and "token_type_ids" in shown


def test_a_required_field_one_shard_lacks_is_missing_there_only(tmp_path, capsys):
    data = tmp_path / "req"
    write_parquet(data / "a.parquet", {"labels": [0, 9]})
    write_parquet(data / "b.parquet", {"input_ids": [[1, 2]] * 2, "labels": [7, 1]})
    assert scan_ds("bert-sequence-classification", str(data)) == 1
    report = json.loads(capsys.readouterr().out)
    assert [(e["source"], e["sample"], e["field"], e["code"]) for e in report["violations"]] == [
        (str(data / "a.parquet"), None, "input_ids", "missing_field"), (str(data / "a.parquet"), 1, "labels", "above_max"),
        (str(data / "b.parquet"), 2, "labels", "above_max")]
    assert "the dataset has no such column (columns: labels;" in report["violations"][0]["message"]
    assert report["absent_fields"] == {
        str(data): {"required": [], "optional": ["attention_mask", "token_type_ids", "position_ids"]},
        str(data / "a.parquet"): {"required": ["input_ids"], "optional": []}}


def test_shards_that_lack_the_same_fields_say_so_once_whatever_their_other_columns(tmp_path, capsys):
    """Shards with the same columns in another order, or one more column the spec does not read, lack the same
    fields: said once, of the dataset (per shard, 3 shards and one with an extra column made 4 errors of 1)."""
    data = tmp_path / "same"
    write_parquet(data / "a.parquet", {"attention_mask": [[1, 1]], "labels": [0]})
    write_parquet(data / "b.parquet", {"labels": [1], "attention_mask": [[1, 1]]})
    write_parquet(data / "c.parquet", {"labels": [1], "attention_mask": [[1, 1]], "idx": [7]})
    assert scan_ds("bert-sequence-classification", str(data)) == 1
    report = json.loads(capsys.readouterr().out)
    assert [(e["source"], e["field"], e["code"]) for e in report["violations"]] == [(str(data), "input_ids",
                                                                                     "missing_field")]
    assert report["errors"] == 1 and list(report["absent_fields"]) == [str(data)]
    assert "(columns: attention_mask, labels, idx;" in report["violations"][0]["message"]


def test_shards_none_of_which_can_be_read_report_only_that(tmp_path, capsys):
    """No column was seen, so no field is said to be missing: one finding per file, errors counted once each."""
    data = tmp_path / "bad"
    data.mkdir()
    (data / "a.parquet").write_bytes(b"garbage")
    (data / "b.parquet").write_bytes(b"")
    assert scan_ds("bert-sequence-classification", str(data)) == 1
    report = json.loads(capsys.readouterr().out)
    assert [(e["source"], e["code"]) for e in report["violations"]] == [
        (str(data / "a.parquet"), "unreadable"), (str(data / "b.parquet"), "unreadable")]
    assert (report["errors"], report["absent_fields"]) == (2, {})


def test_a_rename_is_a_usage_error_only_where_no_shard_has_the_column(tmp_path, capsys):
    data = tmp_path / "ren"
    write_parquet(data / "a.parquet", {"input_ids": [[1, 2]] * 2, "labels": [0, 1]})
    write_parquet(data / "b.parquet", {"input_ids": [[1, 2]] * 2, "class_id": [7, 1]})
    assert scan_ds("bert-sequence-classification", str(data), "--rename", "class_id=labels") == 1
    assert [(e["sample"], e["field"], e["code"]) for e in json.loads(capsys.readouterr().out)["violations"]] == [
        (2, "labels", "above_max")]
    assert scan_ds("bert-sequence-classification", str(data), "--rename", "klass=labels") == 2
    assert "--rename klass=labels: the data has no column 'klass'" in capsys.readouterr().err


def test_a_scan_whose_batches_could_not_be_checked_never_reads_as_clean(batches, monkeypatch, capsys):
    """With no finding, the text had printed the green '0 bad samples' line and returned before the batches whose
    check failed inside tritoncheck: only the JSON and the exit code (3) said so."""
    import tritoncheck.scanning.engine as engine

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(engine, "scan_batch", broken)
    assert scan(batches, "--format", "text") == 3
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "0 bad samples of 0 samples in 0 files for cross-entropy; 4 batches could not be checked"
    assert out[1] == "4 batches could not be checked (internal error: please report):"
    assert out[2].endswith("a.pt: RuntimeError: a bug")


def test_scan_with_the_triton_backend_off_cuda_is_a_usage_error(shards, monkeypatch, capsys):
    """A scan reads its data into host memory; the Triton backend checks CUDA tensors: every batch would have
    failed inside the check (exit 3, '0 bad rows of 0 rows')."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert scan_ds("bert-sequence-classification", str(shards[0]), "--backend", "triton") == 2
    assert "--backend triton checks CUDA tensors" in capsys.readouterr().err


@pytest.mark.parametrize("held", [[ce_batch([0, 1])], []])
def test_a_batch_file_holding_a_list_is_a_finding_not_a_crash(batches, held, tmp_path, capsys):
    """A list loaded from a .pt was taken for the scan's own ready-made findings: KeyError 'row', exit 3, and every
    other file's findings lost (an empty list vanished: 'in 1 file', exit 0)."""
    torch.save(held, batches / "list.pt")
    out = tmp_path / "report.json"
    assert scan(batches, "--output", out) == 1
    report = json.loads(out.read_text())
    assert [(e["source"].rsplit("/", 1)[-1], e["sample"], e["code"]) for e in report["violations"]] == [
        ("list.pt", None, "not_a_mapping"), ("d.pt", 1, "above_max"), ("d.pt", 3, "below_min")]


def test_a_row_too_long_for_a_rule_over_dims_names_its_row(tmp_path, capsys):
    """`L <= max_position_embeddings` holds of a batch, not of a sample: found in a row checked alone, the entry
    said sample 3 but rows [] and rows_total 0."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = [[1, 2]] * 3 + [[1] * 20]
    pq.write_table(pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32())), "labels": [0, 1, 2, 1]}),
                   tmp_path / "long.parquet")
    assert scan_ds("bert-sequence-classification", str(tmp_path / "long.parquet")) == 1
    (e,) = json.loads(capsys.readouterr().out)["violations"]
    assert (e["code"], e["sample"], e["row"], e["rows"], e["rows_total"], e["value"]) == (
        "sequence_too_long", 3, 3, [3], 1, 20)


@pytest.mark.parametrize("extra", [{"token_type_ids": torch.ones(2, 4, dtype=torch.int16)}, {"text": ["a", "b"]}])
def test_a_problem_of_one_field_leaves_the_other_fields_bad_samples_named(extra, tmp_path, capsys):
    """A wrong dtype, or a stray key a collator kept (a list of texts), is a problem of the batch as a whole; the
    other fields' findings had become batch-level with it ('0 bad samples', labels' above_max 'in 1 file')."""
    torch.save({"input_ids": torch.randint(0, 50, (2, 4)), "labels": torch.tensor([0, 5]), **extra}, tmp_path / "x.pt")
    assert scan_ds("bert-sequence-classification", str(tmp_path / "x.pt")) == 1
    report = json.loads(capsys.readouterr().out)
    (name,) = extra
    assert [(e["sample"], e["field"], e["code"]) for e in report["violations"]] == [
        (None, name, "dtype" if name == "token_type_ids" else "unexpected_field"), (1, "labels", "above_max")]
    assert report["bad_samples"] == 1


def test_a_field_problem_keeps_every_finding_where_the_rest_alone_would_say_otherwise(tmp_path, capsys):
    """The fields with a problem set aside, the rest of the batch is another batch: a dim only they gave goes
    unbound (L from an int16 input_ids: sequence_too_long lost), a rule on present(position_ids) holds otherwise
    (sequence_too_long made up). Then every finding stays the whole batch's, as tc.check reports them."""
    lost = {"input_ids": torch.randint(0, 50, (2, 20), dtype=torch.int16), "labels": torch.tensor([0, 5])}
    made = {"input_ids": torch.randint(0, 50, (2, 20)), "labels": torch.tensor([0, 5]),
            "position_ids": (torch.arange(20, dtype=torch.int16) % 16).expand(2, 20).contiguous()}
    for batch, codes in ((lost, {"dtype", "sequence_too_long", "above_max"}), (made, {"dtype", "above_max"})):
        torch.save(batch, tmp_path / "x.pt")
        assert scan_ds("bert-sequence-classification", str(tmp_path / "x.pt")) == 1
        report = json.loads(capsys.readouterr().out)
        assert {e["code"] for e in report["violations"]} == codes
        assert {e["sample"] for e in report["violations"]} == {None}


def test_a_field_problem_in_a_ragged_chunk_leaves_the_other_fields_bad_rows_named(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = [[1, 2, 3][: 1 + r % 3] for r in range(20)]
    ids[7] = [1, 2, 49 + 11]
    pq.write_table(pa.table({"input_ids": ids, "labels": pa.array([0.0] * 20)}), tmp_path / "rg.parquet")
    assert scan_ds("bert-sequence-classification", str(tmp_path / "rg.parquet")) == 1
    report = json.loads(capsys.readouterr().out)
    assert [(e["sample"], e["field"], e["code"]) for e in report["violations"]] == [
        (None, "labels", "dtype"), (7, "input_ids", "above_max")]
