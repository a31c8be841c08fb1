"""Smoke tests of the benchmark harness at tiny sizes: contenders agree, the CSV keeps its schema.

No speed is asserted here; timings live in benchmarks/results/.
"""

import csv
import dataclasses

import pytest
import torch

import tritoncheck as tc
from tritoncheck import bench
from tritoncheck.cli import main

# (scenario, field the broken batch breaks, violation code expected)
BROKEN = {
    "bert": ("input_ids", "above_max"),
    "layoutlmv3": ("pixel_values", "non_finite"),
    "bart": ("labels", "below_min"),
    "ctc": ("targets", None),  # the blank inside a target: a rule, whatever code the spec gives it
    "big": ("bbox", "below_min"),
}


@pytest.fixture(scope="module", params=[s.name for s in bench.SCENARIOS])
def case(request):
    return request.param, bench.SCENARIOS[[s.name for s in bench.SCENARIOS].index(request.param)].build(True)


def test_broken_batch_breaks_the_intended_rule(case):
    name, c = case
    assert tc.check(c.batch, c.spec, backend="torch").ok
    report = tc.check(c.bad, c.spec, backend="torch")
    field, code = BROKEN[name]
    assert {v.field for v in report.violations} == {field}
    if code is not None:
        assert code in {v.code for v in report.violations}


@pytest.mark.parametrize("contender", bench.default_contenders(), ids=lambda c: c.name)
def test_every_contender_agrees_on_the_verdict(case, contender):
    _, c = case
    if contender.name == "tc-triton" and not torch.cuda.is_available():
        pytest.importorskip("triton")  # not timed without a GPU, but its verdict is checked in the interpreter
    try:
        fn, bad_fn = contender.prepare(c, c.batch), contender.prepare(c, c.bad)
    except Exception as exc:
        if contender.name == "hand-compiled" and type(exc).__module__.startswith(("torch._dynamo", "torch._inductor")):
            pytest.skip(f"torch.compile does not work here: {type(exc).__name__}")
        raise
    assert fn() is True
    assert bad_fn() is False


def test_hand_rules_mirror_every_spec_rule_on_valid_batches(case):
    """Each hand-written rule holds on the valid batch, so the hand contenders are not vacuous."""
    _, c = case
    oks = list(c.rules(c.batch, c.params))
    assert len(oks) >= 6
    assert all(bool(ok) for ok in oks)
    assert not all(bool(ok) for ok in c.rules(c.bad, c.params))


def test_csv_schema_and_table(tmp_path):
    opts = bench.Options(scenarios=["ctc", "bert"], reps=1, tiny=True,
                         contenders=["hand-assert", "hand-1sync", "tc-torch", "tc-triton"])
    rows = bench.run_benchmarks(opts)
    path = tmp_path / "r.csv"
    bench.append_csv(path, rows)
    bench.append_csv(path, rows[:1])  # appending again adds rows, not a second header
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == [f.name for f in dataclasses.fields(bench.Result)]
        got = list(reader)
    assert len(got) == len(rows) + 1
    by = {(r["scenario"], r["contender"]): r for r in got}
    for scenario in ("ctc-T20-N3-C5-S6", "bert-tiny"):
        for name in ("floor", "hand-assert", "hand-1sync", "tc-torch", "collate"):
            assert float(by[scenario, name]["median_ms"]) > 0
        assert float(by[scenario, "tc-torch"]["gb_per_s"]) > 0
        assert float(by[scenario, "tc-torch"]["share_of_collate"]) > 0
        assert int(by[scenario, "hand-assert"]["syncs"]) > int(by[scenario, "hand-1sync"]["syncs"]) == 1
        if not torch.cuda.is_available():
            assert by[scenario, "tc-triton"]["median_ms"] == ""
            assert by[scenario, "tc-triton"]["note"].startswith("skipped: no GPU")
    table = bench.markdown_table(rows).splitlines()
    assert len(table) == 2 + len(rows)
    assert all(line.count("|") == table[0].count("|") for line in table)


def test_command_writes_csv(tmp_path, capsys):
    path = tmp_path / "out.csv"
    code = main(["bench", "--tiny", "--reps", "1", "--scenario", "bart", "--contender", "tc-torch",
                 "--device", "cpu", "--csv", str(path)])
    assert code == 0
    assert "| bart-tiny | tc-torch |" in capsys.readouterr().out
    assert path.read_text().splitlines()[0].split(",") == bench.COLUMNS


def test_command_rejects_cuda_without_gpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["bench", "--tiny", "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
