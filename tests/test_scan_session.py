"""A scripted `tritoncheck scan` session, checked line by line as a user reads it (issue 21).

6,000 rows in three Parquet shards of 2,000 (row groups of 500): known bad rows in each, the label column
misspelled (`lables`), and the second shard damaged in its second row group (its metadata still reads).
Every row number, exit code and message the CLI prints is asserted.
"""

import json

import pytest

from tritoncheck.cli import main

pa = pytest.importorskip("pyarrow", reason="scans read Parquet: pip install pyarrow (in the test extra)")
pq = pytest.importorskip("pyarrow.parquet", reason="scans read Parquet: pip install pyarrow (in the test extra)")

PARAMS = ["--param=vocab_size=50", "--param=max_position_embeddings=16", "--param=type_vocab_size=2",
          "--param=num_labels=3"]
# global row -> what is wrong with it; 2600 lies in the damaged row group, so it cannot be found
BAD = {5: "ids", 1999: "mask", 2207: "label", 2600: "ids", 4001: "mask", 5999: "ids"}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("session") / "data"
    path.mkdir()
    for s in range(3):
        ids, mask, labels = [], [], []
        for r in range(2000 * s, 2000 * (s + 1)):
            n = 3 + r % 5
            row_ids, row_mask, label = [2 + (r + k) % 40 for k in range(n)], [1] * n, r % 3
            if BAD.get(r) == "ids":
                row_ids[-1] = 50  # past the vocabulary
            elif BAD.get(r) == "mask":
                row_mask = [0] * n  # attends to nothing (a warning in this spec)
            elif BAD.get(r) == "label":
                label = 7  # past num_labels
            ids.append(row_ids)
            mask.append(row_mask)
            labels.append(label)
        table = pa.table({"input_ids": ids, "attention_mask": mask, "lables": labels})
        pq.write_table(table, path / f"part-{s}.parquet", row_group_size=500)
    damaged = path / "part-1.parquet"
    at = pq.ParquetFile(damaged).metadata.row_group(1).column(0).data_page_offset
    raw = bytearray(damaged.read_bytes())
    raw[at:at + 16] = b"\xff" * 16  # the page header of row group 1 (rows 2500-2999): not thrift any more
    damaged.write_bytes(bytes(raw))
    return path


def run(capsys, *argv):
    code = main(["scan", "bert-sequence-classification", *map(str, argv), *PARAMS])
    out, err = capsys.readouterr()
    return code, out, err


def test_misspelled_column_stops_the_scan_before_it_starts(data, capsys):
    assert run(capsys, data) == (2, "", (
        "tritoncheck: error: column 'lables' is not a field of bert-sequence-classification, and its field 'labels' "
        "is not in the data: a misspelling? --rename lables=labels checks it as labels; --ignore-column lables scans "
        "without it\n"))
    assert run(capsys, data, "--rename", "lable=labels") == (2, "", (
        "tritoncheck: error: --rename lable=labels: the data has no column 'lable' (did you mean 'lables'?) "
        "(columns: input_ids, attention_mask, lables)\n"))


HINT_IDS = ("    hint: ids past the vocabulary usually mean tokens were added to the tokenizer without "
            "model.resize_token_embeddings(len(tokenizer))")
HINT_MASK = "    hint: a row that attends to nothing has no context (the model runs on garbage); drop empty samples"


def test_text_report_names_global_rows_and_shard_files(data, capsys):
    code, out, err = run(capsys, data, "--rename", "lables=labels", "--format", "text")
    p0, p1, p2 = (data / f"part-{s}.parquet" for s in range(3))
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        "5 bad rows of 4500 rows for bert-sequence-classification, 1500 rows could not be read "
        "(and 1 source with problems of a whole batch)",
        "  checked lables as labels",
        f"  not in {data} (optional, so not checked): token_type_ids, position_ids",
        "  above_max in input_ids: 2 bad rows",
        "  above_max in labels: 1 bad row",
        "  no_attended_position in attention_mask: 2 bad rows (warning)",
        "  unreadable: 1 file",
        f"  row 5 ({p0} row 5): input_ids[5, 2]: input_ids <= vocab_size - 1 = 49 (found 50); "
        "1 element(s) in sample(s) 5",
        HINT_IDS,
        f"  row 1999 ({p0} row 1999): warning: attention_mask[1999]: any(attention_mask != 0, dim=L) (found False); "
        "1 element(s) in sample(s) 1999",
        HINT_MASK,
        f"  row 2207 ({p1} row 207): labels[2207]: labels <= num_labels - 1 = 2 (found 7); "
        "1 element(s) in sample(s) 2207",
        "    hint: a label id >= num_labels; check label2id against config.num_labels (1-based labels?)",
        f"  {p1}: cannot read {p1} from its row 500: Couldn't deserialize thrift: don't know what type: \\x0f",
        f"  row 4001 ({p2} row 1): warning: attention_mask[4001]: any(attention_mask != 0, dim=L) (found False); "
        "1 element(s) in sample(s) 4001",
        HINT_MASK,
        f"  row 5999 ({p2} row 1999): input_ids[5999, 6]: input_ids <= vocab_size - 1 = 49 (found 50); "
        "1 element(s) in sample(s) 5999",
        HINT_IDS,
    ]


def test_json_report_and_bad_rows_use_the_same_global_rows(data, tmp_path, capsys):
    code, out, err = run(capsys, data, "--rename", "lables=labels", "--json", "--bad-rows", tmp_path / "bad")
    assert (code, err) == (1, "")
    report = json.loads(out)
    got = [(e["source"].rsplit("/", 1)[1], e["sample"], e["row"], e["field"], e["code"], e["index"], e["value"])
           for e in report["violations"]]
    assert got == [
        ("part-0.parquet", 5, 5, "input_ids", "above_max", [5, 2], 50),
        ("part-0.parquet", 1999, 1999, "attention_mask", "no_attended_position", [1999], False),
        ("part-1.parquet", 2207, 207, "labels", "above_max", [2207], 7),
        ("part-1.parquet", None, None, None, "unreadable", None, None),
        ("part-2.parquet", 4001, 1, "attention_mask", "no_attended_position", [4001], False),
        ("part-2.parquet", 5999, 1999, "input_ids", "above_max", [5999, 6], 50),
    ]
    assert (report["samples"], report["unread_samples"], report["bad_samples"], report["ok"]) == (4500, 1500, 5, False)
    assert report["unchecked"] == [] and report["renamed"] == {"lables": "labels"}
    written = {f.name: pq.read_table(f).column("tritoncheck_row").to_pylist() for f in (tmp_path / "bad").iterdir()}
    assert written == {"bad-rows-00000.parquet": [5, 1999], "bad-rows-00001.parquet": [2207],
                       "bad-rows-00002.parquet": [4001, 5999]}


def test_clean_rows_only_exit_0(data, tmp_path, capsys):
    # the shards past the damage, without their bad rows: `ok`, exit 0, and the count is every row
    table = pq.read_table(data / "part-2.parquet").filter(pa.array([r not in (1, 1999) for r in range(2000)]))
    pq.write_table(table, tmp_path / "clean.parquet")
    code, out, err = run(capsys, tmp_path / "clean.parquet", "--rename", "lables=labels", "--format", "text")
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == "0 bad rows of 1998 rows for bert-sequence-classification"


def test_help_gives_the_exit_codes_the_session_gets(capsys):
    assert main(["scan", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert ("Exit code 0: clean (or warnings only); 1: errors: bad rows or samples, or a file, shard or column that "
            "cannot be read (each listed; the rest is scanned); 2: usage or spec error (found before the scan "
            "starts); 3: internal error") in text
