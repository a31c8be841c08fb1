"""The scan reads data files through their Arrow buffers only: hostile column types run nothing, ragged
columns cost memory in proportion to the data, and one damaged shard is recorded while the rest is scanned."""

import json
import pickle

import pytest
import torch

pa = pytest.importorskip("pyarrow", reason="scans read Parquet and Arrow: pip install pyarrow (in the test extra)")
pq = pytest.importorskip("pyarrow.parquet", reason="scans read Parquet: pip install pyarrow (in the test extra)")

import tritoncheck as tc  # noqa: E402
from tritoncheck._scan import scan  # noqa: E402
from tritoncheck._scan_arrow import read_column, refusal  # noqa: E402
from tritoncheck.cli import main  # noqa: E402

PARAMS = {"vocab_size": 50, "max_position_embeddings": 16, "type_vocab_size": 2, "num_labels": 3}
BERT = [f"--param={k}={v}" for k, v in PARAMS.items()]


def bert():
    return tc.load_spec("bert-sequence-classification", **PARAMS)


class Payload:
    """Unpickling it creates the file `marker` (what a hostile pickle would do, harmlessly)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


class PickledType(pa.ExtensionType):
    """An extension type whose values unpickle on conversion, as Ray Data's `arrow_pickled_object` does."""

    def __init__(self):
        super().__init__(pa.large_binary(), "tritoncheck.test.pickled")

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
    class Numbers(pa.ExtensionType):
        def __init__(self):
            super().__init__(pa.int64(), "tritoncheck.test.numbers")

        def __arrow_ext_serialize__(self):
            return b""

        @classmethod
        def __arrow_ext_deserialize__(cls, storage_type, serialized):
            return cls()

    assert "extension type" in refusal(Numbers()) and "extension type" in refusal(pa.list_(pickled_type))


def test_columns_read_from_buffers_are_what_torch_makes_of_the_rows():
    ragged = pa.array([[1, 2, 3], [4], [5, 6], []], pa.list_(pa.int16()))
    cases = [
        (pa.array([1, -2, 3], pa.int32()), [[1, -2, 3]]), (pa.array([0.1, 2.5]), None),
        (pa.array([True, False]), None), (ragged, None), (ragged.slice(1, 2), None),
        (pa.chunked_array([pa.array([[7], [8, 9]]), pa.array([[10, 11, 12]])]), None),
        (pa.array([[[1, 2], [3, 4]], [[5, 6]]], pa.list_(pa.list_(pa.int64(), 2))).slice(1), None),
        (pa.array([[[1, 2], [3, 4]], [[5, 6]], []]), None),
        (pa.array([1, 2, 1]).dictionary_encode(), None),
    ]
    for column, _ in cases:
        col = read_column(column)
        rows = column.to_pylist()  # (plain types: the test's own reference)
        for r, row in enumerate(rows):
            own = col.take(torch.tensor([r]), 0)[0]
            expected = torch.tensor(row)
            assert own.dtype == (torch.float32 if expected.is_floating_point() else expected.dtype) or not row
            assert own.tolist() == (expected.float() if expected.is_floating_point() else expected).tolist() or (
                not row and own.numel() == 0), (column, r)
        assert not col.nulls.any() and not col.jagged.any()


def test_nulls_and_jagged_rows_are_marked():
    col = read_column(pa.array([[1, None], None, [3], [4, 5]]))
    assert col.nulls.tolist() == [True, True, False, False]
    col = read_column(pa.array([[[1, 2], [3]], [[1, 2], [3, 4]], [[5]]]))
    assert col.jagged.tolist() == [True, False, False]
    assert col.sizes.tolist()[1:] == [[2, 2], [1, 1]]


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
