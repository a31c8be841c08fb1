"""The scan reads data files through their Arrow buffers only: hostile column types run nothing, ragged
columns cost memory in proportion to the data, and one damaged shard is recorded while the rest is scanned."""

import json
import os
import pickle
import subprocess
import sys

import pytest
import torch

pa = pytest.importorskip("pyarrow", reason="scans read Parquet and Arrow: pip install pyarrow (in the test extra)")
pq = pytest.importorskip("pyarrow.parquet", reason="scans read Parquet: pip install pyarrow (in the test extra)")

from hostile_payload import Payload  # noqa: E402
import tritoncheck as tc  # noqa: E402
from tritoncheck.scanning.engine import scan  # noqa: E402
from tritoncheck.scanning.arrow import read_column, refusal  # noqa: E402
from tritoncheck.cli import main  # noqa: E402

PARAMS = {"vocab_size": 50, "max_position_embeddings": 16, "type_vocab_size": 2, "num_labels": 3}
BERT = [f"--param={k}={v}" for k, v in PARAMS.items()]


def bert():
    return tc.load_spec("bert-sequence-classification", **PARAMS)


class PickledType(pa.ExtensionType):
    """An extension type whose values unpickle on conversion, as Ray Data's `arrow_pickled_object` does
    (or, given another storage type, any extension type)."""

    def __init__(self, storage=None, name="tritoncheck.test.pickled"):
        super().__init__(storage or pa.large_binary(), name)

    def __arrow_ext_serialize__(self):
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type, serialized):
        return cls()

    def __arrow_ext_scalar_class__(self):
        return PickledScalar


class PickledScalar(pa.ExtensionScalar):
    def as_py(self, **kwargs):
        return None if self.value is None else pickle.loads(self.value.as_py())


@pytest.fixture
def pickled_type():
    pa.register_extension_type(PickledType())
    yield PickledType()
    pa.unregister_extension_type("tritoncheck.test.pickled")


def ray_pickled_type():
    pytest.importorskip("ray.data", reason="pip install 'tritoncheck[ray]'")
    from ray.data._internal.object_extensions.arrow import ArrowPythonObjectType

    return ArrowPythonObjectType()


def hostile_shards(path, kind, marker):
    """Two Parquet shards; the second's `labels` column holds pickles that create `marker` when loaded."""
    path.mkdir()
    pq.write_table(pa.table({"input_ids": pa.array([[1, 2], [3, 60]]), "labels": pa.array([0, 1])}), path / "a.parquet")
    storage = pa.array([pickle.dumps(Payload(marker))] * 3, pa.large_binary())
    evil = pa.ExtensionArray.from_storage(kind, storage)
    pq.write_table(pa.table({"input_ids": pa.array([[4], [5, 6], [99]]), "labels": evil}), path / "b.parquet")
    return path


def assert_refused(report, path, marker):
    assert not marker.exists()  # nothing was unpickled
    shard = str(path / "b.parquet")
    refused = [e for e in report["violations"] if e["code"] == "unsupported_type"]
    assert [(e["source"], e["sample"], e["field"]) for e in refused] == [(shard, None, "labels")]
    assert "extension type" in refused[0]["message"] and "not checked" in refused[0]["message"]
    # the shard's other columns are still checked, with global rows
    assert sorted((e["sample"], e["field"], e["code"]) for e in report["violations"] if e["sample"] is not None) == [
        (1, "input_ids", "above_max"), (4, "input_ids", "above_max")]
    assert not report["ok"]


def test_pickled_extension_column_is_refused_never_unpickled(tmp_path, pickled_type):
    marker = tmp_path / "marker"
    path = hostile_shards(tmp_path / "data", pickled_type, marker)
    pq.read_table(path / "b.parquet").column("labels")[0].as_py().close()  # the payload is live:
    assert marker.exists()  # converting one value ran it
    marker.unlink()
    assert_refused(scan(bert(), path, backend="torch"), path, marker)
    assert main(["scan", "bert-sequence-classification", str(path), *BERT, "--json", "--bad-rows",
                 str(tmp_path / "bad")]) == 1
    assert not marker.exists()


def test_ray_pickled_column_is_refused_after_import_ray_data(tmp_path, capsys):
    kind = ray_pickled_type()  # imports ray.data: its extension type is registered in this process
    marker = tmp_path / "marker"
    path = hostile_shards(tmp_path / "data", kind, marker)
    assert_refused(tc.scan(bert(), path), path, marker)
    assert main(["scan", "bert-sequence-classification", str(path), *BERT, "--json"]) == 1
    assert_refused(json.loads(capsys.readouterr().out), path, marker)


@pytest.mark.parametrize("kind, readable", [
    (pa.int8(), True), (pa.uint64(), True), (pa.float16(), True), (pa.bool_(), True),
    (pa.list_(pa.int32()), True), (pa.large_list(pa.float64()), True), (pa.list_(pa.int64(), 4), True),
    (pa.list_(pa.list_(pa.int16(), 4)), True), (pa.dictionary(pa.int32(), pa.int64()), True),
    (pa.string(), False), (pa.binary(), False), (pa.date32(), False), (pa.timestamp("s"), False),
    (pa.decimal128(5, 2), False), (pa.struct([("a", pa.int8())]), False), (pa.list_(pa.string()), False),
    (pa.dictionary(pa.int32(), pa.string()), False), (pa.map_(pa.int8(), pa.int8()), False),
    (pa.list_view(pa.int8()), False), (pa.null(), False),
])
def test_only_numbers_bools_and_lists_of_them_are_read(kind, readable):
    assert (refusal(kind) is None) == readable, refusal(kind)


def test_extension_type_over_numbers_is_refused_too(pickled_type):
    numbers = PickledType(pa.int64(), "tritoncheck.test.numbers")
    assert "extension type" in refusal(numbers) and "extension type" in refusal(pa.list_(pickled_type))


def test_columns_read_from_buffers_are_their_rows():
    ragged = pa.array([[1, 2, 3], [4], [5, 6], []], pa.list_(pa.int16()))
    cases = [  # (column, the dtype a batch gets: every integer type int64, as a collator makes them)
        (pa.array([1, -2, 3], pa.int32()), torch.int64), (pa.array([0.1, 2.5]), torch.float64),
        (pa.array([0.5, 2.5], pa.float32()), torch.float32), (pa.array([True, False]), torch.bool),
        (ragged, torch.int64), (ragged.slice(1, 2), torch.int64),
        (pa.chunked_array([pa.array([[7], [8, 9]]), pa.array([[10, 11, 12]])]), torch.int64),
        (pa.array([[[1, 2], [3, 4]], [[5, 6]]], pa.list_(pa.list_(pa.uint8(), 2))).slice(1), torch.int64),
        (pa.array([[[1, 2], [3, 4]], [[5, 6]], []]), torch.int64),
        (pa.array([1, 2, 1]).dictionary_encode(), torch.int64),
    ]
    for column, dtype in cases:
        col = read_column(column)
        assert not col.nulls.any() and not col.jagged.any() and not col.flawed
        for r, row in enumerate(column.to_pylist()):  # (plain types: the test's own reference)
            own = col.take(torch.tensor([r]), 0)[0]
            assert own.dtype == dtype and col.take(torch.arange(len(column)), 0).dtype == dtype
            assert own.tolist() == row or (row == [] and own.numel() == 0), (column, r)
        every = col.take(torch.arange(len(column)), -1)  # padded with -1, each row in its corner
        for r, row in enumerate(column.to_pylist()):
            assert (every[r].tolist() if every.dim() == 1 else _unpad(every[r].tolist())) == row, (column, r)


def _unpad(value):
    if isinstance(value, list):
        return [_unpad(v) for v in value if v != -1 and v != [-1] * len(v if isinstance(v, list) else [])]
    return value


def test_nulls_and_jagged_rows_are_marked():
    col = read_column(pa.array([[1, None], None, [3], [4, 5]]))
    assert col.nulls.tolist() == [True, True, False, False] and col.flawed
    col = read_column(pa.array([[[1, 2], [3]], [[1, 2], [3, 4]], [[5]]]))
    assert col.jagged.tolist() == [True, False, False] and col.flawed
    assert col.sizes.tolist()[1:] == [[2, 2], [1, 1]]
    col = read_column(pa.array([1.5, None, 2.0]))  # a column of scalars
    assert col.nulls.tolist() == [False, True, False] and col.flawed


def _proc_kib(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))


def peak_growth_mib(fn):
    """The most this process's resident memory grew while `fn` ran (Linux: VmHWM, reset through clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets the high-water mark to the current RSS
    except OSError:
        pytest.skip("needs Linux's /proc/self/clear_refs to measure peak memory")
    before = _proc_kib("VmRSS")
    result = fn()
    return (_proc_kib("VmHWM") - before) / 1024, result


def test_one_long_row_does_not_make_every_row_of_its_chunk_as_long(tmp_path):
    # 2**18 tokens in one row (2 MiB as int64), 255 short rows: padding the chunk to it would take 1 GiB
    long = 2**18
    ids = pa.array([[1] * 3] * 100 + [[1] * long] + [[2] * 5] * 155, pa.list_(pa.int64()))
    mask = pa.array([[1] * len(row) for row in ([0] * 3,) * 100] + [[1] * long] + [[1] * 5] * 155, pa.list_(pa.int64()))
    pq.write_table(pa.table({"input_ids": ids, "attention_mask": mask, "labels": [0] * 256}),
                   tmp_path / "x.parquet", compression="zstd")
    assert (tmp_path / "x.parquet").stat().st_size < 4096  # a tiny file
    grew, report = peak_growth_mib(lambda: scan(bert(), tmp_path / "x.parquet", backend="torch"))
    assert [(e["sample"], e["field"], e["code"]) for e in report["violations"]] == [
        (100, "input_ids", "sequence_too_long")]
    assert grew < 64, f"peak memory grew by {grew:.0f} MiB"


# --- one bad shard is recorded, the rest scanned -------------------------------------------------------------


def rows(start, n, bad=()):
    """Rows start .. start+n-1 (of 4 tokens); `bad` rows get a token past the vocabulary (50)."""
    return {"text": [f"row {r}" for r in range(start, start + n)],
            "input_ids": [[1, 2, 3, 50 if r in bad else 4] for r in range(start, start + n)],
            "labels": [r % 3 for r in range(start, start + n)]}


def damage(path, old, new):
    """Replace the one occurrence of int32 values `old` in the file with `new` (offsets of a list or string)."""
    import numpy as np

    data = path.read_bytes()
    was, now = np.array(old, "<i4").tobytes(), np.array(new, "<i4").tobytes()
    assert data.count(was) == 1
    path.write_bytes(data.replace(was, now))


def arrow_file(path, table):
    with pa.ipc.new_file(path, table.schema) as f:
        f.write_table(table)


def test_a_value_pyarrow_cannot_convert_is_refused_and_the_scan_goes_on(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    pq.write_table(pa.table(rows(0, 4, bad={1})), tmp_path / "d" / "a.parquet")
    day = pa.array([2**31 - 1, 0, 0, 0], pa.int32()).view(pa.date32())  # past Python's date range
    table = pa.table(rows(4, 4, bad={6})).set_column(2, "labels", day)
    pq.write_table(table, tmp_path / "d" / "b.parquet")
    assert main(["scan", "bert-sequence-classification", str(tmp_path / "d"), *BERT, "--json",
                 "--bad-rows", str(tmp_path / "bad")]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [(e["source"].rsplit("/", 1)[1], e["sample"], e["field"], e["code"]) for e in report["violations"]] == [
        ("a.parquet", 1, "input_ids", "above_max"), ("b.parquet", None, "labels", "unsupported_type"),
        ("b.parquet", 6, "input_ids", "above_max")]
    assert "Arrow type date32[day] is not read by the scan" in report["violations"][1]["message"]
    assert report["unchecked"] == []
    written = [pq.read_table(f).column("tritoncheck_row").to_pylist() for f in sorted((tmp_path / "bad").iterdir())]
    assert written == [[1], [6]]  # the bad row of b.parquet copied with its date column as it is (not converted)


def test_damaged_list_offsets_are_recorded_and_the_next_chunk_and_shard_scanned(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    table = pa.table(rows(0, 6, bad={0, 5}))
    arrow_file(tmp_path / "d" / "a.arrow", table)
    damage(tmp_path / "d" / "a.arrow", [0, 4, 8, 12, 16, 20, 24], [0, 4, 8, 2**20, 16, 20, 24])  # input_ids' offsets
    pq.write_table(pa.table(rows(6, 3, bad={7})), tmp_path / "d" / "b.parquet")
    code = main(["scan", "bert-sequence-classification", str(tmp_path / "d"), *BERT, "--json", "--batch-size=2"])
    report = json.loads(capsys.readouterr().out)
    found = [(e["source"].rsplit("/", 1)[1], e["sample"], e["row"], e["code"]) for e in report["violations"]]
    # the damaged offset is row 2's end (row 3's start): rows 2-3 are unreadable, not checked on garbage
    assert found == [("a.arrow", 0, 0, "above_max"), ("a.arrow", None, None, "unreadable"),
                     ("a.arrow", 5, 5, "above_max"), ("b.parquet", 7, 1, "above_max")]
    assert report["violations"][1]["message"].startswith(f"cannot read rows 2-3 of {tmp_path / 'd' / 'a.arrow'}: ")
    assert code == 1 and report["unchecked"] == [] and report["samples"] == 7  # rows checked: all but 2 and 3


DAMAGED_SCAN = """
import sys
import numpy as np, pyarrow as pa
from tritoncheck.cli import main

ids = pa.array([[1, 2], None, [3, 60]])  # the null row's end offset past the values
bad = pa.py_buffer(np.array([0, 2, 2**20, 4], np.int32).tobytes())
damaged = pa.Array.from_buffers(ids.type, 3, [ids.buffers()[0], bad], children=[ids.values])
table = pa.table({"input_ids": damaged, "labels": pa.array([0, 1, 2])})
with pa.ipc.new_file(sys.argv[1], table.schema) as f:
    f.write_table(table)
sys.exit(main(["scan", "bert-sequence-classification", sys.argv[1], *sys.argv[2:], "--json"]))
"""


def test_damaged_offsets_after_a_null_row_are_recorded_not_a_crash(tmp_path):
    # (a subprocess: pyarrow aborted the process) a default chunk's width was measured by flattening its lists,
    # which slices each row that is not null by its offsets, unchecked
    out = subprocess.run([sys.executable, "-c", DAMAGED_SCAN, str(tmp_path / "x.arrow"), *BERT],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert [(e["sample"], e["code"]) for e in report["violations"]] == [(None, "unreadable")]
    assert "cannot read rows 0-2" in report["violations"][0]["message"] and report["unchecked"] == []


def test_a_damaged_column_the_spec_does_not_read_costs_only_its_bad_rows_file(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    table = pa.table(rows(0, 4, bad={2}))  # text: "row 0" .. "row 3", offsets 0, 5, 10, 15, 20
    arrow_file(tmp_path / "d" / "a.arrow", table)
    damage(tmp_path / "d" / "a.arrow", [0, 5, 10, 15, 20], [0, 5, 2**24, 15, 20])
    pq.write_table(pa.table(rows(4, 4, bad={5})), tmp_path / "d" / "b.parquet")
    assert main(["scan", "bert-sequence-classification", str(tmp_path / "d"), *BERT, "--json",
                 "--bad-rows", str(tmp_path / "bad")]) == 1
    report = json.loads(capsys.readouterr().out)
    found = [(e["source"].rsplit("/", 1)[1], e["sample"], e["code"]) for e in report["violations"]]
    assert found == [("a.arrow", 2, "above_max"), ("a.arrow", None, "unreadable"), ("b.parquet", 5, "above_max")]
    assert "--bad-rows: cannot read the bad rows of" in report["violations"][1]["message"]
    assert [p.name for p in (tmp_path / "bad").iterdir()] == ["bad-rows-00001.parquet"]
    assert pq.read_table(tmp_path / "bad").column("tritoncheck_row").to_pylist() == [5]


# --- each value checked as the file holds it; nulls are findings of their own -----------------------------


def test_float64_columns_are_checked_as_float64(tmp_path):
    values = [[0.5, 0.25], [1.00000001, 0.0], [0.5, 3.5e38], [1.0, 0.0]]  # 1.00000001 is 1.0 in float32; 3.5e38 inf
    pq.write_table(pa.table({"input": pa.array(values, pa.list_(pa.float64(), 2)),
                             "target": pa.array(values, pa.list_(pa.float64(), 2))}), tmp_path / "x.parquet")
    report = scan(tc.load_spec("bce"), tmp_path / "x.parquet", backend="torch")
    got = {(e["sample"], e["field"], e["code"], e["value"]) for e in report["violations"]}
    assert got == {(1, f, "above_max", 1.00000001) for f in ("input", "target")} | {
        (2, f, "above_max", 3.5e38) for f in ("input", "target")}


def test_a_null_is_a_finding_of_its_own_with_its_global_row(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    pq.write_table(pa.table(rows(0, 5, bad={0})), tmp_path / "d" / "a.parquet")
    table = pa.table({"input_ids": pa.array([[1, 2], [3, None], [4, 60], None, [5]]),
                      "labels": pa.array([0, 1, None, 2, 9])})
    pq.write_table(table, tmp_path / "d" / "b.parquet")
    assert main(["scan", "bert-sequence-classification", str(tmp_path / "d"), *BERT, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    got = [(e["source"].rsplit("/", 1)[1], e["sample"], e["row"], e["field"], e["code"]) for e in report["violations"]]
    assert got == [("a.parquet", 0, 0, "input_ids", "above_max"), ("b.parquet", 6, 1, "input_ids", "null"),
                   ("b.parquet", 7, 2, "labels", "null"), ("b.parquet", 8, 3, "input_ids", "null"),
                   ("b.parquet", 9, 4, "labels", "above_max")]
    assert report["violations"][1]["message"] == (
        "input_ids: a null (missing value) in the row; the row is not checked further; 1 element(s) in sample(s) 6")
    assert report["batches"] == 2  # one chunk per shard: a null sends nothing row by row


def test_a_null_held_in_a_dictionary_is_a_null_not_a_zero(tmp_path):
    # the index is valid, the value it points to is null: main read it as 0 and checked it as a value
    values = pa.array([None, 9, 1], pa.int64())
    labels = pa.DictionaryArray.from_arrays(pa.array([2, 0, 1], pa.int32()), values)
    ids = pa.DictionaryArray.from_arrays(pa.array([0, 1, 2, 0, 1, 2], pa.int32()), pa.array([1, None, 3]))
    assert read_column(labels).nulls.tolist() == [False, True, False]  # labels 1, null, 9
    ids = pa.ListArray.from_arrays(pa.array([0, 2, 4, 6], pa.int32()), ids)  # [1, null], [3, 1], [null, 3]
    assert read_column(ids).nulls.tolist() == [True, False, True]
    arrow_file(tmp_path / "x.arrow", pa.table({"input_ids": [[1, 2], [3, 60], [4]], "labels": labels}))
    report = scan(bert(), tmp_path / "x.arrow", backend="torch")  # (Parquet cannot hold such a dictionary)
    assert [(e["sample"], e["field"], e["code"]) for e in report["violations"]] == [
        (1, "labels", "null"), (2, "labels", "above_max")]


@pytest.mark.parametrize("rule, bad", [(None, []), ("x <= 3 + 0 * sum(x)", [(1, 4), (2, 5)])])
def test_a_pad_value_a_field_forbids_is_no_finding(tmp_path, rule, bad):
    # ragged rows are padded with 0, which `min: 1` forbids: main reported the short rows below_min with value 0,
    # a value they do not hold (with a rule over the batch too, whose narrowing kept the padded group's finding)
    fields = {"x": {"dtype": "int", "shape": ["B", "L"], "min": 1}}
    spec = tc.BatchSpec.model_validate({"name": "s", "fields": fields, "rules": [rule] if rule else []})
    pq.write_table(pa.table({"x": [[1, 2, 3], [4], [5, 6]]}), tmp_path / "x.parquet")
    report = scan(spec, tmp_path / "x.parquet", backend="torch")
    assert [(e["sample"], e["value"]) for e in report["violations"]] == bad


def test_float16_dictionaries_of_several_record_batches_keep_their_values(tmp_path):
    # pyarrow unifies dictionaries that differ (NaN is not NaN) through their values' uint16 bits: -3.0 was read
    # (and reported) as 49664.0
    spec = tc.BatchSpec.model_validate({"name": "s", "fields": {"x": {"dtype": "float16", "shape": ["B"], "min": -1}}})
    table = pa.table({"x": pa.array([0.5, -3.0, float("nan"), -2.5], pa.float16()).dictionary_encode()})
    with pa.ipc.new_file(tmp_path / "x.arrow", table.schema) as f:
        f.write_table(table.slice(0, 2))
        f.write_table(table.slice(2))
    report = scan(spec, tmp_path / "x.arrow", backend="torch")
    assert [(e["sample"], e["value"]) for e in report["violations"]] == [(1, -3.0), (3, -2.5)]


def test_a_whole_chunk_problem_is_said_once_per_file_with_global_rows(tmp_path):
    ids = [[1, 2, 3]] * 600
    ids[300] = [1, 2, 60]
    pq.write_table(pa.table({"input_ids": ids, "labels": pa.array([0.0] * 600)}), tmp_path / "x.parquet")
    report = scan(bert(), tmp_path / "x.parquet", backend="torch")  # three chunks of 256, labels float64 in each
    got = [(e["sample"], e["code"], e["index"], e["message"].split("\n")[0]) for e in report["violations"]]
    assert got == [
        (None, "dtype", None, "labels: labels must have dtype int64, got float64"),
        # the other fields of a chunk with a problem of one field are still checked row by row: row 300 is named
        (300, "above_max", [300, 2], "input_ids[300, 2]: input_ids <= vocab_size - 1 = 49 (found 60); "
                                     "1 element(s) in sample(s) 300")]


def _reference(row):
    """(has a null, is jagged) of a Python row, as read_column must mark it."""
    if row is None:
        return True, False
    if not isinstance(row, list):
        return False, False
    marks = [_reference(v) for v in row]
    null = any(n for n, _ in marks)
    inner = {len(v) if isinstance(v, list) else -1 for v in row if v is not None}
    return null, any(j for _, j in marks) or len(inner) > 1


@pytest.mark.parametrize("seed", range(16))
def test_random_nested_columns_read_as_python_reads_them(seed):
    import random

    rng = random.Random(seed)
    depth, fixed = rng.choice([0, 1, 2]), rng.random() < 0.3  # fixed: the innermost list is fixed_size_list(3)

    def value(level, width=None):
        if rng.random() < 0.08:
            return None
        if level == depth:
            return rng.randint(-5, 5)
        n = 3 if fixed and level == depth - 1 else width if width is not None else rng.randint(0, 5)
        inner = rng.randint(0, 4) if rng.random() < 0.7 else None  # most rows rectangular, some jagged
        return [value(level + 1, inner) for _ in range(n)]

    kind = pa.int64()
    for level in range(depth):  # innermost first
        kind = pa.list_(kind, 3) if fixed and level == 0 else pa.large_list(kind) if rng.random() < 0.5 else pa.list_(kind)
    column = pa.array([value(0) for _ in range(rng.randint(1, 30))], kind)
    if rng.random() < 0.5 and len(column) > 2:
        column = column.slice(1, len(column) - 2)
    if rng.random() < 0.5 and len(column) > 1:
        column = pa.chunked_array([column.slice(0, 1), column.slice(1)])
    col = read_column(column)
    expected = column.to_pylist()  # (plain int64 lists: the test's own reference)
    marks = [_reference(row) for row in expected]
    assert col.nulls.tolist() == [null for null, _ in marks]
    assert col.flawed == any(null or jagged for null, jagged in marks)
    assert [j for j, (null, _) in zip(col.jagged.tolist(), marks, strict=True) if not null] == [
        jagged for null, jagged in marks if not null]
    for r, row in enumerate(expected):
        if not any(marks[r]):
            own = col.take(torch.tensor([r]), 0)[0]
            assert own.tolist() == row or (own.numel() == 0 and not torch.tensor(row).numel()), (row, own)
    good = [r for r in range(len(expected)) if not any(marks[r])]
    picked = rng.sample(good, len(good))  # out of order: each row found by its own start, then padded
    if len(picked) > 1:
        together = col.take(torch.tensor(picked), -7)
        for k, r in enumerate(picked):
            alone = col.take(torch.tensor([r]), -7)[0]
            assert together[k][tuple(slice(0, n) for n in alone.shape)].equal(alone)
            assert int((together[k] != -7).sum()) == alone.numel() - int((alone == -7).sum())


def test_a_shard_with_no_column_to_read_ends(tmp_path):
    # both spec columns are text: refused, and nothing else of the spec to read (a table of no columns
    # sliced without a length keeps its rows: the chunk loop must not spin on it)
    pq.write_table(pa.table({"input_ids": pa.array(["a", "b"]), "labels": pa.array(["x", "y"])}), tmp_path / "x.parquet")
    report = scan(bert(), tmp_path / "x.parquet", backend="torch")
    assert [(e["field"], e["code"]) for e in report["violations"]] == [
        ("input_ids", "unsupported_type"), ("labels", "unsupported_type")]
    assert (report["samples"], report["ok"]) == (0, False)
    # no spec column at all (main: the chunk loop never ended)
    pq.write_table(pa.table({"text": pa.array(["a", "b", "c"])}), tmp_path / "y.parquet")
    report = scan(bert(), tmp_path / "y.parquet", backend="torch", batch_size=2)
    assert [(e["field"], e["code"]) for e in report["violations"]] == [("input_ids", "missing_field")]


def test_chunks_of_a_table_of_no_columns_end():
    from tritoncheck.scanning.engine import _chunks

    from tritoncheck.scanning.engine import _Piece

    table = pa.table({"a": [1, 2, 3, 4, 5]})
    piece = _Piece(5, table.select, lambda cols, rows: iter([table.select(cols)]), lambda cols: 8.0)
    assert [n for n, _ in _chunks([piece], [], 2)] == [2, 2, 1]


def test_chunks_by_bytes_split_a_large_piece_evenly_and_never_join_it_to_another(monkeypatch):
    # 600 rows a chunk by bytes: a 1000-row piece (a Parquet row group) is read as 500 + 500 rows, each a slice of
    # its own batch; joining the rest of one piece to the next (400 + 200 rows) copied every column (combine_chunks)
    from tritoncheck.scanning import engine

    monkeypatch.setattr(engine, "CHUNK_BYTES", 600 * 8)

    def piece(first: int, rows: int) -> engine._Piece:
        table = pa.table({"a": pa.array(range(first, first + rows), pa.int64())})

        def stream(cols, size):
            return (table.slice(start, size).select(cols) for start in range(0, rows, size))

        return engine._Piece(rows, table.select, stream, lambda cols: 8.0)

    pieces = [piece(0, 1000), piece(1000, 1000), piece(2000, 250), piece(2250, 250), piece(2500, 1300)]
    chunks = list(engine._chunks(pieces, ["a"], None))
    assert [n for n, _ in chunks] == [500, 500, 500, 500, 500, 434, 434, 432]  # (the two small pieces joined)
    assert [t.column("a").num_chunks for _, t in chunks[:4]] == [1, 1, 1, 1]
    assert pa.concat_tables([t for _, t in chunks]).column("a").to_pylist() == list(range(3800))
    assert [n for n, _ in engine._chunks(pieces, ["a"], 600)] == [600] * 6 + [200]  # --batch-size: as asked


def test_a_group_of_a_chunk_reports_rows_of_the_dataset(tmp_path):
    # the long row 100 splits chunk 0 into groups by length; labels float64 is a problem of the whole group, the
    # rest of it checked row by row: row 200 is the dataset's (the short rows' group has it at its 199th place)
    ids = [[1, 2, 3]] * 300
    ids[100], ids[200] = [1] * 70_000, [1, 2, 60]
    pq.write_table(pa.table({"input_ids": ids, "labels": pa.array([0.0] * 300)}), tmp_path / "x.parquet")
    report = scan(bert(), tmp_path / "x.parquet", backend="torch")
    above = [(e["sample"], e["index"], e["message"].split("\n")[0]) for e in report["violations"]
             if e["code"] == "above_max"]
    assert above == [(200, [200, 2], "input_ids[200, 2]: input_ids <= vocab_size - 1 = 49 (found 60); "
                                     "1 element(s) in sample(s) 200")]


def test_a_datasets_directory_is_read_only_from_its_own_files(tmp_path, capsys):
    (tmp_path / "ds").mkdir()
    arrow_file(tmp_path / "outside.arrow", pa.table(rows(0, 2, bad={0})))
    (tmp_path / "ds" / "dataset_info.json").write_text("{}")
    (tmp_path / "ds" / "state.json").write_text(json.dumps({"_data_files": [{"filename": "../outside.arrow"}]}))
    assert main(["scan", "bert-sequence-classification", str(tmp_path / "ds"), *BERT]) == 2
    assert f"{tmp_path / 'ds' / 'state.json'} names data files that are not in {tmp_path / 'ds'}" in capsys.readouterr().err
    (tmp_path / "ds" / "state.json").write_text("{not json")
    assert main(["scan", "bert-sequence-classification", str(tmp_path / "ds"), *BERT]) == 2
    assert "cannot read" in capsys.readouterr().err
    (tmp_path / "dd").mkdir()
    (tmp_path / "dd" / "dataset_dict.json").write_text(json.dumps({"splits": ["../ds"]}))
    assert main(["scan", "bert-sequence-classification", str(tmp_path / "dd"), *BERT]) == 2
    assert "names splits that are not folders of" in capsys.readouterr().err


def test_rows_after_a_shard_that_cannot_be_counted_claim_no_global_number(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.parquet").write_bytes(b"PAR1 truncated")
    pq.write_table(pa.table(rows(0, 3, bad={1})), tmp_path / "d" / "b.parquet")
    argv = ["scan", "bert-sequence-classification", str(tmp_path / "d"), *BERT, "--format", "text"]
    assert main([*argv, "--bad-rows", str(tmp_path / "bad")]) == 1
    lines = capsys.readouterr().out.splitlines()
    shard = tmp_path / "d" / "b.parquet"
    assert lines[-2].startswith(f"  {shard} row 1: input_ids[1, 3]: input_ids <= vocab_size - 1 = 49 (found 50)"), lines
    assert lines[-3].startswith(f"  {tmp_path / 'd' / 'a.parquet'}: cannot read ") and lines[-3].endswith(
        "; the rows of later files are numbered within their file")
    written = pq.read_table(tmp_path / "bad" / "bad-rows-00000.parquet").to_pydict()
    assert (written["tritoncheck_row"], written["text"]) == ([None], ["row 1"])


VIOLATION_KEYS = ["field", "code", "severity", "rule", "hint", "count", "value", "index", "rows", "rows_total",
                  "message"]


def test_check_and_scan_print_one_json_schema(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    table = pa.table(rows(0, 4, bad={1}))
    table = table.set_column(1, "input_ids", pa.array([[1, 2], None, [3, 60], [4]], pa.list_(pa.int64())))
    pq.write_table(table, tmp_path / "d" / "a.parquet")
    day = pa.array([0, 0], pa.int32()).view(pa.date32())
    pq.write_table(pa.table(rows(4, 2)).set_column(2, "labels", day), tmp_path / "d" / "b.parquet")
    (tmp_path / "d" / "c.parquet").write_bytes(b"not parquet")
    torch.save({"input_ids": torch.tensor([[1, 60]]), "labels": torch.tensor([0])}, tmp_path / "batch.pt")
    assert main(["check", "bert-sequence-classification", str(tmp_path / "batch.pt"), *BERT, "--format=json"]) == 1
    checked = json.loads(capsys.readouterr().out)
    assert main(["scan", "bert-sequence-classification", str(tmp_path / "d"), *BERT, "--format=json"]) == 1
    scanned = json.loads(capsys.readouterr().out)
    shared = ["schema", "kind", "spec", "ok", "errors", "warnings"]
    assert list(checked)[:6] == list(scanned)[:6] == shared and list(checked)[-2:] == list(scanned)[-2:] == [
        "violations", "unchecked"]
    assert (checked["schema"], checked["kind"], scanned["kind"]) == (scanned["schema"], "check", "scan")
    assert scanned["errors"] == len(scanned["violations"]) == 4 and scanned["unchecked"] == []
    assert sorted(v["code"] for v in scanned["violations"]) == ["above_max", "null", "unreadable", "unsupported_type"]
    for v in scanned["violations"]:  # scan-only codes too: every key of a check's violation, then where it is
        assert list(v) == VIOLATION_KEYS + ["source", "sample", "row"], v
    by_code = {v["code"]: v for v in scanned["violations"]}
    assert {k: by_code["above_max"][k] for k in ("value", "index", "rows", "count", "sample", "row")} == {
        "value": 60, "index": [2, 1], "rows": [2], "count": 1, "sample": 2, "row": 2}
    assert (by_code["null"]["rows"], by_code["null"]["sample"], by_code["unreadable"]["rows"]) == ([1], 1, [])
    assert by_code["unsupported_type"]["field"] == "labels" and by_code["unreadable"]["field"] is None
    assert all(isinstance(by_code[c]["rule"], str) and by_code[c]["count"] == 1 for c in by_code)


# --- chunks sized by bytes, read a part at a time (issue 28) ----------------------------------------------------

TOKENS = {"name": "tokens", "fields": {"input_ids": {"dtype": "int", "shape": ["B", "L"], "min": 0, "max": 9}}}


def token_rows(rows, length, random=False):
    """`rows` rows of `length` int32 tokens (all 1, or random in [0, 2**31)), built from buffers (fast at
    millions of tokens)."""
    import numpy as np

    offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * length)
    values = np.random.default_rng(0).integers(0, 2**31, rows * length, np.int32) if random else np.ones(
        rows * length, np.int32)
    return pa.ListArray.from_arrays(offsets, pa.array(values))


def test_default_chunks_are_sized_by_bytes_not_rows(tmp_path):
    numbers = {"x": {"dtype": "int", "shape": ["B"], "min": 0}, "y": {"dtype": "float", "shape": ["B"], "finite": True}}
    spec = tc.BatchSpec.model_validate({"name": "numbers", "fields": numbers})
    pq.write_table(pa.table({"x": range(5000), "y": [0.5] * 5000}), tmp_path / "n.parquet")
    report = scan(spec, tmp_path / "n.parquet", backend="torch")
    assert (report["batches"], report["samples"], report["ok"]) == (1, 5000, True)  # 256-row chunks: 20
    pq.write_table(pa.table({"input_ids": token_rows(64, 2**16)}), tmp_path / "t.parquet")  # 32 MiB as int64
    report = scan(tc.BatchSpec.model_validate(TOKENS), tmp_path / "t.parquet", backend="torch")
    assert (report["samples"], report["ok"]) == (64, True) and 4 <= report["batches"] <= 8  # (8 MiB chunks)


def test_default_chunks_count_the_check_results_bytes(tmp_path, monkeypatch):
    """A row's bytes are its values' and its check's result, an int64 per check over the batch dim (the numeric
    benchmark's 16 checks: 128 bytes a row, more than its 10 numbers): more checks, fewer rows a chunk."""
    from tritoncheck.scanning import engine

    monkeypatch.setattr(engine, "CHUNK_BYTES", 16 * 1000 + 100)  # (and 24 bytes a column: 0.004 a row)
    pq.write_table(pa.table({"x": pa.array(range(6000), pa.int64())}), tmp_path / "n.parquet")
    for checks, rows in (({"min": 0}, 1000), ({"min": 0, "max": 10**6, "values": list(range(6000))}, 500)):
        spec = tc.BatchSpec.model_validate({"name": "n", "fields": {"x": {"dtype": "int", "shape": ["B"], **checks}}})
        report = scan(spec, tmp_path / "n.parquet", backend="torch")  # 8 + 8 or 8 + 24 bytes a row
        assert (report["batches"], report["samples"], report["ok"]) == (6000 // rows, 6000, True)


def test_a_large_row_group_is_read_a_part_at_a_time(tmp_path):
    # one row group: 128 MiB of int32 (256 MiB as int64), random, so that its compressed column chunk is as large
    table = pa.table({"input_ids": token_rows(8192, 4096, random=True)})
    pq.write_table(table, tmp_path / "x.parquet", row_group_size=8192)
    del table
    assert pq.ParquetFile(tmp_path / "x.parquet").metadata.num_row_groups == 1
    assert (tmp_path / "x.parquet").stat().st_size > 120 << 20
    spec = {**TOKENS, "fields": {"input_ids": {**TOKENS["fields"]["input_ids"], "max": 2**31 - 1}}}
    grew, report = peak_growth_mib(lambda: scan(tc.BatchSpec.model_validate(spec), tmp_path / "x.parquet",
                                                backend="torch"))
    assert (report["samples"], report["ok"]) == (8192, True)
    assert grew < 80, f"peak memory grew by {grew:.0f} MiB"  # (chunks of 8 MiB as int64, and the check's own)


def test_a_scan_imports_no_pandas(tmp_path):
    # pyarrow's to_numpy imports pandas where it is installed (seconds of a scan's start), and so do its compute
    # functions (is_null, fill_null: 0.2 s at a scan's first null); buffers and bitmaps need none. On Linux the
    # command has pyarrow allocate from jemalloc (less peak memory than mimalloc, its default), chosen before
    # pyarrow loads, and leaves the environment as it was.
    table = pa.table(rows(0, 4, bad={1}))
    table = table.set_column(2, "labels", pa.array([0, 1, None, 0], pa.int64()))  # (a null: a row of its own)
    pq.write_table(table, tmp_path / "a.parquet")
    # Off a terminal (a pipe), neither its progress nor its text needs rich (0.09 s of CPU to import).
    code = ("import os, sys; from tritoncheck.cli import main\n"
            f"args = ['scan', 'bert-sequence-classification', {str(tmp_path / 'a.parquet')!r}, *{BERT!r}]\n"
            "text = main([*args, '--format=text'])\n"
            "code = main([*args, '--format=json'])\n"
            "import pyarrow as pa\n"
            "print(code, text, 'pandas' in sys.modules, 'rich' in sys.modules, pa.default_memory_pool().backend_name, "
            "os.environ.get('ARROW_DEFAULT_MEMORY_POOL'))")
    env = {k: v for k, v in os.environ.items() if k not in ("ARROW_DEFAULT_MEMORY_POOL", "FORCE_COLOR", "TTY_COMPATIBLE")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    pool = "jemalloc" if sys.platform.startswith("linux") else pa.default_memory_pool().backend_name
    assert out.stdout.splitlines()[-1] == f"1 1 False False {pool} None", out.stderr
    assert out.stdout.startswith("2 bad rows of 4 rows for ")
    report = json.loads("{" + out.stdout.rsplit("\n", 2)[0].split("\n{", 1)[1])
    assert sorted((e["row"], e["field"], e["code"]) for e in report["violations"]) == [
        (1, "input_ids", "above_max"), (2, "labels", "null")]


def test_ragged_rows_under_element_checks_are_checked_without_padding(tmp_path, monkeypatch):
    # bounds, value sets and finiteness decide each element alone: the chunk's flat values are checked as they are,
    # and only the rows holding a bad element (or breaking a rule over dims) are taken, each alone
    from tritoncheck.scanning.arrow import Column

    taken = []
    take = Column.take
    monkeypatch.setattr(Column, "take",
                        lambda self, rows, *a, **k: taken.append(len(rows)) or take(self, rows, *a, **k))
    spec = {**TOKENS, "rules": ["L <= 4"]}
    ids = [[1, 2], [3], [], [4, 5, 6, 7, 8], [9, 10], [0, 1, 2, 3], [5]]  # 10 is past max 9; row 3 is longer than 4
    pq.write_table(pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32()))}), tmp_path / "x.parquet")
    report = scan(tc.BatchSpec.model_validate(spec), tmp_path / "x.parquet", backend="torch")
    assert [(e["sample"], e["code"], e["value"]) for e in report["violations"]] == [
        (3, "dim_bound", 5), (4, "above_max", 10)]
    assert taken and max(taken) == 1  # every take is one row: nothing padded


@pytest.mark.parametrize("lookup", [1 << 16, 24])
def test_rules_over_the_lengths_of_ragged_rows_are_decided_per_row_across_chunks(tmp_path, monkeypatch, lookup):
    # `L <= 20` and `L >= 3` at each row's own length, chunk after chunk (each new length decided once, kept in a
    # table by length that grows as longer rows come), or per distinct length where a length is past the table's
    # reach (a lookup of 24)
    from tritoncheck.scanning import engine

    monkeypatch.setattr(engine, "LOOKUP_SIZES", lookup)
    import numpy as np

    lengths = np.random.default_rng(1).integers(0, 12, 300) * np.repeat([1, 2, 3], 100)  # longer rows later on
    ids = [[1] * int(n) for n in lengths]
    pq.write_table(pa.table({"input_ids": pa.array(ids, pa.list_(pa.int32()))}), tmp_path / "x.parquet")
    spec = tc.BatchSpec.model_validate({**TOKENS, "rules": ["L <= 20", "L >= 3"]})
    report = scan(spec, tmp_path / "x.parquet", backend="torch", batch_size=32)
    found = sorted((e["sample"], e["value"]) for e in report["violations"])
    assert found == [(r, int(n)) for r, n in enumerate(lengths) if n > 20 or n < 3] and report["batches"] == 10
    assert any(n > 24 for n in lengths) and any(n < 3 for n in lengths)


def test_narrow_integers_are_checked_as_the_int64_a_batch_holds(tmp_path):
    # the reader keeps int8/16/32 in their width (checked as they are where no padding is needed); every batch of
    # rows widens them, so a spec asking for int64 gets int64: uniform chunks, padded ones, and rows alone
    fields = {"x": {"dtype": "int64", "shape": ["B"], "max": 5},
              "ids": {"dtype": "int64", "shape": ["B", "L"], "max": 5}}
    spec = tc.BatchSpec.model_validate({"name": "s", "fields": fields, "rules": ["x <= sum(ids, dim=L) + 9"]})
    for kind in (pa.int8(), pa.int16(), pa.int32()):
        for ids in ([[1, 2], [3, 4], [6, 0]], [[1, 2], [3], [6, 0, 1]]):  # uniform, ragged
            pq.write_table(pa.table({"x": pa.array([1, 7, 2], kind), "ids": pa.array(ids, pa.list_(kind))}),
                           tmp_path / "x.parquet")
            for rule in ([], spec.rules):  # element checks only (no padding), and a rule that pads
                report = scan(spec.model_copy(update={"rules": rule}), tmp_path / "x.parquet", backend="torch")
                assert [(e["sample"], e["field"], e["code"]) for e in report["violations"]] == [
                    (1, "x", "above_max"), (2, "ids", "above_max")], (kind, ids, rule)


def test_narrow_integer_columns_under_element_checks_are_checked_as_stored(tmp_path, monkeypatch):
    # widening int8/16/32 to int64 (as a collator makes a batch) cost 0.14 s at 10M numeric rows; a column only
    # compared element by element is checked as stored, and the report is the one the widened batch gives
    from tritoncheck.scanning import engine

    seen = []
    scan_batch = engine.scan_batch
    monkeypatch.setattr(engine, "scan_batch", lambda batch, *a, **k: seen.append(
        {f: t.dtype for f, t in batch.items()}) or scan_batch(batch, *a, **k))
    fields = {"a": {"dtype": "int", "shape": ["B"], "min": -5, "max": 100},
              "b": {"dtype": "int", "shape": ["B"], "values": [1, 2, 300]},
              "c": {"dtype": "int", "shape": ["B"], "max": 7}, "d": {"dtype": "int", "shape": ["B"]}}
    spec = tc.BatchSpec.model_validate({"name": "n", "fields": fields, "rules": ["c + d <= 10"]})
    columns = {"a": ([1, -6, 127, 100, -128], 8), "b": ([1, 300, 44, 2, -32768], 16),
               "c": ([7, 8, 3, 2**31 - 1, 0], 32), "d": ([3, 1, 1, 1, 11], 32)}
    widths = {8: (pa.int8(), torch.int8), 16: (pa.int16(), torch.int16), 32: (pa.int32(), torch.int32),
              64: (pa.int64(), torch.int64)}
    reports = []
    for width in widths:
        at = {k: max(width, least) for k, (_, least) in columns.items()}  # each column as narrow as it fits
        path = tmp_path / f"{width}.parquet"
        pq.write_table(pa.table({k: pa.array(v, widths[at[k]][0]) for k, (v, _) in columns.items()}), path)
        for backend in ("c", "torch"):
            seen.clear()
            report = scan(spec, path, backend=backend)
            reports.append([{k: v for k, v in e.items() if k != "source"} for e in report["violations"]])
            # a and b: element checks only, checked as stored; c and d are read by the rule: widened
            assert seen[0] == {"a": widths[at["a"]][1], "b": widths[at["b"]][1], "c": torch.int64, "d": torch.int64}
    assert all(r == reports[-1] for r in reports)
    assert sorted({(e["sample"], e["field"], e["code"], e["value"]) for e in reports[-1]}) == [
        (1, "a", "below_min", -6), (1, "c", "above_max", 8), (2, "a", "above_max", 127), (2, "b", "not_in_set", 44),
        (3, "c", "above_max", 2**31 - 1), (3, "c", "rule_failed", 2**31), (4, "a", "below_min", -128),
        (4, "b", "not_in_set", -32768), (4, "c", "rule_failed", 11)]  # (c + d in int64: 2**31, no int32 wrap)
    # a spec that takes int64 only: the batch a collator makes (int64), not the stored int8
    only = tc.BatchSpec.model_validate({"name": "m", "fields": {"a": {**fields["a"], "dtype": "int64"}}})
    seen.clear()
    assert scan(only, tmp_path / "8.parquet", backend="c")["bad_samples"] == 3
    assert seen[0] == {"a": torch.int64}


def test_scalar_columns_with_nulls_are_checked_as_one_batch_as_stored(tmp_path, monkeypatch):
    # a null is a row of its own (`null`); the chunk's other rows are one batch, narrow integers as stored (the kernel
    # of the chunks without a null), not padded groups widened to int64 (a second kernel, 0.1 s at its first load)
    import tritoncheck.api as api

    x = pa.array([1, None, 9, 2, 3, -4, None, 5], pa.int32())
    y = pa.array([0.5, 0.1, None, 2.0, 0.2, 0.3, 0.4, float("nan")], pa.float64())
    pq.write_table(pa.table({"x": x, "y": y}), tmp_path / "a.parquet")
    fields = {"x": {"dtype": "int", "shape": ["B"], "min": 0, "max": 5},
              "y": {"dtype": "float", "shape": ["B"], "max": 1.0, "finite": True}}
    spec = tc.BatchSpec.model_validate({"name": "s", "fields": fields})
    seen = []
    check = api.check
    monkeypatch.setattr(api, "check", lambda b, *a, **k: seen.append((len(b["x"]), b["x"].dtype)) or check(b, *a, **k))
    report = scan(spec, tmp_path / "a.parquet")
    assert seen == [(5, torch.int32)]  # rows 0, 3, 4, 5, 7; each bad one reported from the batch
    assert sorted((e["row"], e["field"], e["code"], e["value"] if e["value"] == e["value"] else "nan")
                  for e in report["violations"]) == [
        (1, "x", "null", None), (2, "y", "null", None), (3, "y", "above_max", 2.0), (5, "x", "below_min", -4),
        (6, "x", "null", None), (7, "y", "non_finite", "nan")]


def test_a_uint64_value_past_int64_is_a_finding_of_its_row_and_the_rest_is_checked(tmp_path, capsys):
    """A uint64 past 2**63 - 1 fits no torch integer batch: the chunk holding one was reported unreadable whole,
    and its other rows' findings (labels 7 here) were lost. Now the row is listed as `past_int64`, as a null is."""
    table = pa.table({"input_ids": pa.array([[1, 2], [3, 2**63 + 5], [4, 4], [5]], pa.list_(pa.uint64())),
                      "labels": pa.array([0, 1, 7, 2**64 - 1], pa.uint64())})
    pq.write_table(table, tmp_path / "u.parquet")
    assert main(["scan", "bert-sequence-classification", str(tmp_path / "u.parquet"), *BERT, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    got = [(e["sample"], e["row"], e["field"], e["code"], e["rows"]) for e in report["violations"]]
    assert got == [(1, 1, "input_ids", "past_int64", [1]), (2, 2, "labels", "above_max", [2]),
                   (3, 3, "labels", "past_int64", [3])]
    assert (report["samples"], report["unread_samples"]) == (4, 0)
    column = read_column(table.column("input_ids"))
    assert column.past_int64.tolist() == [False, True, False, False] and column.flawed
    assert column.values.tolist() == [1, 2, 3, 0, 4, 4, 5]  # (the value past int64 read as 0, its row not checked)
