"""`scan --engine ray`: Parquet and Arrow shards checked in Ray Data tasks report exactly what the local scan does.

One local Ray instance for the module (`ray.init(num_cpus=2)`); the shards are those of tests/test_scan.py:
four files (Parquet, an empty one, an Arrow stream, an Arrow file in a subfolder), ragged and padded rows,
bad rows of five codes, and the `datasets` column name `label`.
"""

import json

import pytest

pq = pytest.importorskip("pyarrow.parquet", reason="the Ray scan tests write Parquet shards: pip install pyarrow")
ray = pytest.importorskip("ray", reason="`scan --engine ray` needs Ray Data: pip install 'ray[data]' (in the test extra)")

from test_scan import BERT, bert, write_shards  # noqa: E402

from tritoncheck.scanning.engine import scan  # noqa: E402
from tritoncheck.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def ray_instance():
    ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "shards"
    return path, *write_shards(path)


@pytest.fixture(scope="module")
def local(shards, tmp_path_factory):
    """The local scan on the torch backend (the reference), with its bad rows."""
    out = tmp_path_factory.mktemp("local") / "bad"
    return scan(bert(), shards[0], backend="torch", batch_size=4, bad_rows=out), out


@pytest.mark.slow  # a Ray instance takes seconds to start: the slow set, which .ci/run runs
def test_ray_scan_reports_exactly_what_the_local_scan_reports(ray_instance, shards, local, tmp_path):
    path, every, bad = shards
    expected, expected_dir = dict(local[0]), local[1]
    report = scan(bert(), path, engine="ray", batch_size=4, bad_rows=tmp_path / "bad")
    assert report.pop("backends") == ["c"]  # auto: the compiled C kernel, in the Ray workers
    assert expected.pop("backends") == ["torch"]
    assert report == expected  # every entry (global row, field, code, value, index, message), counts, summary
    assert sorted((e["sample"], e["field"], e["code"]) for e in report["violations"]) == bad
    assert report["renamed"] == {"label": "labels"} and report["samples"] == len(every) == 30
    assert {row["code"] for row in report["summary"]} == {"above_max", "no_attended_position", "dim_mismatch",
                                                          "below_min", "sequence_too_long"}
    # the bad rows: the same files, and in them every column of each bad row, its global index and codes
    names = sorted(p.name for p in (tmp_path / "bad").iterdir())
    assert names == sorted(p.name for p in expected_dir.iterdir()) == [
        "bad-rows-00000.parquet", "bad-rows-00002.parquet", "bad-rows-00003.parquet"]
    written = pq.read_table(tmp_path / "bad").to_pylist()
    assert written == pq.read_table(expected_dir).to_pylist()
    rows = sorted({r for r, _, _ in bad})
    assert [w.pop("tritoncheck_row") for w in written] == rows
    assert [set(w.pop("tritoncheck_codes")) for w in written] == [{c for r2, _, c in bad if r2 == r} for r in rows]
    assert written == [every[r] for r in rows]


@pytest.mark.slow  # a Ray instance takes seconds to start: the slow set, which .ci/run runs
def test_cli_engine_ray(ray_instance, shards, local, tmp_path, capsys):
    expected = dict(local[0])
    argv = ["scan", "bert-sequence-classification", str(shards[0]), *BERT, "--batch-size=4"]
    assert main([*argv, "--engine", "ray", "--json", "--bad-rows", str(tmp_path / "bad")]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report.pop("backends") == ["c"]
    assert report == {k: v for k, v in expected.items() if k != "backends"}
    assert len(list((tmp_path / "bad").iterdir())) == 3


def test_ray_that_cannot_start_is_a_usage_error(shards, monkeypatch, capsys):
    def unreachable(*args, **kwargs):
        raise ConnectionError("Could not find any running Ray instance.\nPlease specify the one to connect to.")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", unreachable)
    argv = ["scan", "bert-sequence-classification", str(shards[0]), *BERT, "--engine", "ray"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--engine ray: cannot start or reach Ray: Could not find any running Ray instance." in err
    assert "Traceback" not in err and "Please specify" not in err


@pytest.mark.slow  # a Ray instance takes seconds to start: the slow set, which .ci/run runs
def test_ray_pickled_column_runs_nothing_in_ray_workers(ray_instance, tmp_path):
    # Ray's own pickled-object extension type, registered in every worker (they import ray.data)
    from test_scan_arrow import assert_refused, hostile_shards, ray_pickled_type

    marker = tmp_path / "marker"
    path = hostile_shards(tmp_path / "data", ray_pickled_type(), marker)
    report = scan(bert(), path, engine="ray", bad_rows=tmp_path / "bad")
    assert_refused(report, path, marker)
    assert report == scan(bert(), path, engine="local", bad_rows=tmp_path / "bad2") | {"backends": report["backends"]}
    assert not marker.exists()


@pytest.mark.slow  # a Ray instance takes seconds to start: the slow set, which .ci/run runs
def test_ray_reads_a_datasets_directory_as_the_local_scan_does(ray_instance, tmp_path, capsys):
    datasets = pytest.importorskip("datasets", reason="pip install datasets (in the test extra)")
    from test_scan import shard_rows

    rows = shard_rows(0, 12)
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_dict(rows),
                               "test": datasets.Dataset.from_dict(shard_rows(12, 9))})
    dd.save_to_disk(str(tmp_path / "ds"), num_shards={"train": 3, "test": 2})  # several Arrow files per split
    argv = ["scan", "bert-sequence-classification", str(tmp_path / "ds"), *BERT, "--json", "--backend=torch"]
    assert main([*argv, "--engine", "ray"]) == 1
    on_ray = json.loads(capsys.readouterr().out)
    assert main(argv) == 1
    local = json.loads(capsys.readouterr().out)
    assert on_ray == local
    assert len({e["source"] for e in local["violations"]}) > 2  # entries name the Arrow files of each split
    # each split numbers its rows from 0, as ds[split][i] does
    train = sorted({e["sample"] for e in local["violations"] if "/train/" in e["source"]})
    test = sorted({e["sample"] for e in local["violations"] if "/test/" in e["source"]})
    assert train == [r for r in range(12) if r % 7 < 5] and test == [r - 12 for r in range(12, 21) if r % 7 < 5]


@pytest.mark.slow
def test_ray_keeps_its_own_output_quiet_unless_asked(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "shards"
    write_shards(path)
    argv = [sys.executable, "-m", "tritoncheck.cli", "scan", "bert-sequence-classification", str(path), *BERT]
    local = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    on_ray = subprocess.run([*argv, "--engine", "ray"], capture_output=True, text=True, timeout=300)
    assert (on_ray.returncode, on_ray.stdout, on_ray.stderr) == (1, local.stdout, "")
