"""A scripted session, checked line by line as a user reads it (issue 21): a scan, then training on what it found.

6,000 rows in three Parquet shards of 2,000 (row groups of 500): known bad rows in each, the label column
misspelled (`lables`), and the second shard damaged in its second row group (its metadata still reads).
The scan stops on the misspelling, then reports every bad row it can read and the damage; re-exported,
the damaged shard gives up the row it hid. A notebook then trains a Hugging Face Trainer on the same
rows: in raise mode it stops at the scan's first bad row, with the report's table; in skip mode it trains
through, dropping exactly the rows the scan calls errors. Every row number, exit code and message printed
is asserted.
"""

import html
import json
import logging
import re
import shutil

import pytest

from tritoncheck.cli import main

pa = pytest.importorskip("pyarrow", reason="scans read Parquet: pip install pyarrow (in the test extra)")
pq = pytest.importorskip("pyarrow.parquet", reason="scans read Parquet: pip install pyarrow (in the test extra)")

PARAMS = ["--param=vocab_size=50", "--param=max_position_embeddings=16", "--param=type_vocab_size=2",
          "--param=num_labels=3"]
# global row -> what is wrong with it; 2600 lies in the damaged row group, so it cannot be found
BAD = {5: "ids", 1999: "mask", 2207: "label", 2600: "ids", 4001: "mask", 5999: "ids"}


@pytest.fixture(scope="module")
def repaired(tmp_path_factory):
    """The three shards as written, before the damage (what re-exporting the damaged one gives back)."""
    path = tmp_path_factory.mktemp("session") / "repaired"
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
    return path


@pytest.fixture(scope="module")
def data(repaired):
    path = repaired.parent / "data"
    shutil.copytree(repaired, path)
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


def test_rescan_after_the_damaged_shard_is_re_exported_finds_the_row_it_hid(repaired, capsys):
    code, out, err = run(capsys, repaired, "--rename", "lables=labels", "--format", "text")
    p0, p1, p2 = (repaired / f"part-{s}.parquet" for s in range(3))
    assert (code, err) == (1, "")
    assert out.splitlines() == [
        "6 bad rows of 6000 rows for bert-sequence-classification",
        "  checked lables as labels",
        f"  not in {repaired} (optional, so not checked): token_type_ids, position_ids",
        "  above_max in input_ids: 3 bad rows",
        "  above_max in labels: 1 bad row",
        "  no_attended_position in attention_mask: 2 bad rows (warning)",
        f"  row 5 ({p0} row 5): input_ids[5, 2]: input_ids <= vocab_size - 1 = 49 (found 50); "
        "1 element(s) in sample(s) 5",
        HINT_IDS,
        f"  row 1999 ({p0} row 1999): warning: attention_mask[1999]: any(attention_mask != 0, dim=L) (found False); "
        "1 element(s) in sample(s) 1999",
        HINT_MASK,
        f"  row 2207 ({p1} row 207): labels[2207]: labels <= num_labels - 1 = 2 (found 7); "
        "1 element(s) in sample(s) 2207",
        "    hint: a label id >= num_labels; check label2id against config.num_labels (1-based labels?)",
        f"  row 2600 ({p1} row 600): input_ids[2600, 2]: input_ids <= vocab_size - 1 = 49 (found 50); "
        "1 element(s) in sample(s) 2600",
        HINT_IDS,
        f"  row 4001 ({p2} row 1): warning: attention_mask[4001]: any(attention_mask != 0, dim=L) (found False); "
        "1 element(s) in sample(s) 4001",
        HINT_MASK,
        f"  row 5999 ({p2} row 1999): input_ids[5999, 6]: input_ids <= vocab_size - 1 = 49 (found 50); "
        "1 element(s) in sample(s) 5999",
        HINT_IDS,
    ]


# The same rows trained on in a notebook, as a user would after the scan: the Parquet shards loaded with
# `datasets`, the column renamed as the scan said, a Hugging Face Trainer over a tiny BERT whose config
# gives the scan's parameters, rows drawn in order (1000 a step) so that every printed number is fixed.
SETUP = """\
import datasets, tokenizers, torch, transformers
import tritoncheck as tc
from tritoncheck.integrations.hf import ValidatingDataCollator

files = sorted(str(f) for f in shards.glob("*.parquet"))
ds = datasets.load_dataset("parquet", data_files=files, split="train", cache_dir=cache)
ds = ds.rename_column("lables", "labels")  # as the scan said
words = {"[PAD]": 0, "[UNK]": 1, **{f"w{i}": i + 2 for i in range(48)}}
tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizers.Tokenizer(tokenizers.models.WordLevel(
    words, unk_token="[UNK]")), pad_token="[PAD]", unk_token="[UNK]")
config = transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=37, max_position_embeddings=16, type_vocab_size=2, num_labels=3)
spec = tc.load_spec("bert-sequence-classification", config=config)

def trainer(collator):
    torch.manual_seed(0)
    args = transformers.TrainingArguments(
        output_dir=out, use_cpu=True, report_to=[], per_device_train_batch_size=1000, num_train_epochs=1,
        train_sampling_strategy="sequential", save_strategy="no", logging_strategy="no", disable_tqdm=True)
    return transformers.Trainer(model=transformers.BertForSequenceClassification(config), args=args,
                                train_dataset=tc.IndexedDataset(ds), data_collator=collator)"""
RAISE = "trainer(ValidatingDataCollator(transformers.DataCollatorWithPadding(tok), spec)).train()"
SKIP = """\
skip = ValidatingDataCollator(transformers.DataCollatorWithPadding(tok), spec, on_error="skip", log_dir=skipped)
trainer(skip).train().global_step"""
STATS = "skip.stats()"


def test_trainer_in_a_notebook_raises_on_the_scans_first_row_and_skips_exactly_the_scans_error_rows(
        repaired, tmp_path, monkeypatch, caplog, capsys):
    pytest.importorskip("transformers", reason="the session trains: pip install transformers (in the test extra)")
    pytest.importorskip("accelerate", reason="the Trainer needs it: pip install accelerate (in the test extra)")
    pytest.importorskip("datasets", reason="the session loads Parquet: pip install datasets (in the test extra)")
    pytest.importorskip("tokenizers", reason="the session pads: pip install tokenizers (in the test extra)")
    from notebook_cells import run_notebook

    caplog.set_level(logging.DEBUG, logger="tritoncheck")
    skipped = tmp_path / "skipped"
    cells = run_notebook([SETUP, RAISE, SKIP, STATS], monkeypatch, shards=repaired, cache=str(tmp_path / "cache"),
                         out=str(tmp_path / "out"), skipped=str(skipped))
    assert cells[0][1] == []

    # raise: the first step stops at row 5, named in the table the notebook shows, with a one-line summary
    shown, error = cells[1][1]
    assert html.unescape(re.sub(r"<[^>]+>", "", error)) == (
        "BatchValidationError: 1 violation for bert-sequence-classification (B=1000 (from input_ids), "
        "L=7 (from input_ids)) (the table above)\n"
        '  File "<cell 1>", line 1, in <module>')
    rows = [[html.unescape(re.sub(r"<[^>]+>", " ", td)).split() for td in re.findall(r"<td[^>]*>(.*?)</td>", tr)]
            for tr in re.findall(r"<tr class='tritoncheck-\w+'.*?</tr>", shown)]
    assert rows == [[["error"], ["input_ids[5,", "2]"], ["above_max"],
                     "input_ids <= vocab_size - 1 = 49 hint: ids past the vocabulary usually mean tokens were added "
                     "to the tokenizer without model.resize_token_embeddings(len(tokenizer))".split(), ["50"], ["1"],
                     ["5", "(dataset", "index", "5)"]]]
    assert "<p>dataset indices of the bad samples: 5 (sample 5)</p>" in shown

    # skip: every step runs (6 of 1000 rows); each drop and each warning names the batch position and the dataset
    # row the scan gave
    printed, steps = cells[2][1]
    assert "&#x27;epoch&#x27;: &#x27;1&#x27;}" in printed  # the Trainer's own print of its metrics
    assert steps == "<div class='jp-RenderedText' data-mime-type='text/plain'><pre>6</pre></div>"
    assert cells[3][1] == ["<div class='jp-RenderedText' data-mime-type='text/plain'><pre>{&#x27;mode&#x27;: "
                           "&#x27;skip&#x27;, &#x27;samples&#x27;: 4, &#x27;indices&#x27;: [5, 2207, 2600, 5999], "
                           "&#x27;codes&#x27;: {&#x27;above_max&#x27;: 4}, &#x27;failed_writes&#x27;: 0}</pre></div>"]
    code, out, _ = run(capsys, repaired, "--rename", "lables=labels", "--json")
    scanned = [e["sample"] for e in json.loads(out)["violations"] if e["severity"] == "error"]
    assert (code, scanned) == (1, [5, 2207, 2600, 5999])  # the rows the scan gives are the rows the Trainer skips
    repeats = " (repeats of this warning are logged at DEBUG)"
    logged = [r.getMessage().removesuffix(repeats) for r in caplog.records if r.name == "tritoncheck"]
    assert logged == [
        f"dropped 1 bad sample(s) of 1000: skipped: sample 5 = dataset index 5 (above_max input_ids); "
        f"records in {skipped}",
        "bert-sequence-classification: warning: attention_mask[999]: any(attention_mask != 0, dim=L) (found False); "
        "1 element(s) in sample(s) 999 (dataset index 1999)\n" + HINT_MASK,
        "dropped 2 bad sample(s) of 1000: skipped: sample 207 = dataset index 2207 (above_max labels), "
        f"sample 600 = dataset index 2600 (above_max input_ids); records in {skipped}",
        "bert-sequence-classification: warning: attention_mask[1]: any(attention_mask != 0, dim=L) (found False); "
        "1 element(s) in sample(s) 1 (dataset index 4001)\n" + HINT_MASK,
        f"dropped 1 bad sample(s) of 1000: skipped: sample 999 = dataset index 5999 (above_max input_ids); "
        f"records in {skipped}",
    ]
