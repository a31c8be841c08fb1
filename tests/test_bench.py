"""Smoke tests of the benchmark harness at tiny sizes: contenders agree, the CSV keeps its schema,
the README's table is the one the newest recorded run gives.

No speed is asserted here; timings live in benchmarks/results/.
"""

import csv
import dataclasses
import importlib.util
import sys
import time
from pathlib import Path

import pytest
import torch

import tritoncheck as tc
from tritoncheck import bench
from tritoncheck.cli import main

ROOT = Path(__file__).resolve().parents[1]

# (scenario, field the broken batch breaks, violation code expected)
BROKEN = {
    "bert": ("input_ids", "above_max"),
    "bert-b1": ("input_ids", "above_max"),
    "layoutlmv3": ("pixel_values", "non_finite"),
    "bart": ("labels", "below_min"),
    "ctc": ("targets", None),  # the blank inside a target: a rule, whatever code the spec gives it
    "big": ("bbox", "below_min"),
}
CPU_CONTENDERS = [c.name for c in bench.default_contenders() if c.skip_reason(torch.device("cpu")) is None]


@pytest.fixture(scope="module", params=[s.name for s in bench.SCENARIOS])
def case(request):
    return request.param, bench.scenario(request.param).build(True)


def test_broken_batch_breaks_the_intended_rule(case):
    name, c = case
    assert tc.check(c.batch, c.spec, backend="torch").ok
    report = tc.check(c.bad, c.spec, backend="torch")
    field, code = BROKEN[name]
    assert {v.field for v in report.violations} == {field}
    if code is not None:
        assert code in {v.code for v in report.violations}


@pytest.mark.parametrize("contender", bench.default_contenders(), ids=lambda c: c.name)
def test_every_contender_agrees_on_the_verdict(case, contender, device):
    """On the device a GPU run times them on (the C backend takes CPU tensors only)."""
    _, c = case
    if contender.name == "tc-triton" and device == "cpu":
        pytest.importorskip("triton", reason="pip install triton (in the test extra)")  # not timed without a GPU, but its verdict is checked in the interpreter
    on = "cpu" if contender.name == "tc-c" else device
    batch, bad = ({k: v.to(on) for k, v in b.items()} for b in (c.batch, c.bad))
    try:
        fn, bad_fn = contender.prepare(c, batch), contender.prepare(c, bad)
    except Exception as exc:
        if contender.name == "hand-compiled" and type(exc).__module__.startswith(("torch._dynamo", "torch._inductor")):
            pytest.skip(f"torch.compile does not work here: {type(exc).__name__}")
        if contender.name == "tc-c" and "fell back" in str(exc):
            pytest.skip("no C compiler here")
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


def test_b1_scenario_is_one_sample_of_16_tokens():
    c = bench.scenario("bert-b1").build(False)
    assert c.batch["input_ids"].shape == (1, 16) and c.name == "bert-1x16"


def test_every_tiny_scenario_with_every_cpu_contender_writes_the_csv_schema(tmp_path):
    opts = bench.Options(scenarios=[s.name for s in bench.SCENARIOS], rounds=1, tiny=True, budget_s=0.5)
    rows = bench.run_benchmarks(opts)
    path = tmp_path / "r.csv"
    bench.append_csv(path, rows)
    bench.append_csv(path, rows[:1])  # appending again adds rows, not a second header
    with open(path, newline="") as f:
        assert csv.DictReader(f).fieldnames == [f.name for f in dataclasses.fields(bench.Result)]
    got = bench.read_csv(path)
    assert len(got) == len(rows) + 1 and [r.contender for r in got[:-1]] == [r.contender for r in rows]
    assert bench.latest_run(got) == got  # one run: one timestamp
    by = {(r.scenario, r.contender): r for r in got}
    names = {bench.scenario(s).build(True).name for s in opts.scenarios}
    for scenario in names:
        have_c = "fell back" not in by[scenario, "tc-c"].note  # without a C compiler the row says so, untimed
        timed = [*bench.FLOORS, *(c for c in CPU_CONTENDERS if have_c or c != "tc-c")]
        for name in [*timed, "collate"]:
            r = by[scenario, name]
            assert r.median_ms > 0, (scenario, name, r.note)
            assert r.clock == "thread" and r.threads == 1
        for name in timed:
            r = by[scenario, name]
            assert r.rounds >= bench.MIN_ROUNDS  # a budget of 0.5 s and rounds=1 still give MIN_ROUNDS
            assert r.x_hand_assert > 0 and r.x_floor_read > 0 and r.x_floor_aminmax > 0 and r.gb_per_s > 0
        assert by[scenario, "hand-assert"].x_hand_assert == pytest.approx(1)
        assert by[scenario, "floor-read"].x_floor_read == pytest.approx(1)
        assert by[scenario, "floor-aminmax"].x_floor_aminmax == pytest.approx(1)
        assert by[scenario, "hand-assert"].syncs > by[scenario, "hand-1sync"].syncs == 1
        assert not have_c or by[scenario, "tc-c"].syncs == 0  # one call into the compiled kernel: no host read of a tensor
        if not torch.cuda.is_available():
            assert by[scenario, "tc-triton"].median_ms is None
            assert by[scenario, "tc-triton"].note.startswith("skipped: no GPU")
    table = bench.markdown_table(rows).splitlines()
    assert len(table) == 2 + len(rows)
    assert all(line.count("|") == table[0].count("|") for line in table)


def test_a_round_times_many_calls_and_the_thread_clock_leaves_out_sleep():
    calls = []
    out = bench.time_cpu({"nap": lambda: time.sleep(0.005), "tick": lambda: calls.append(1)}, rounds=1, budget_s=0)
    assert len(out["nap"]) == len(out["tick"]) == bench.MIN_ROUNDS
    assert max(out["nap"]) < 2.0  # 5 ms asleep, almost no CPU time
    assert len(calls) > 10 * bench.MIN_ROUNDS  # a 1 us call is timed in batches, not one by one
    wall = bench.time_cpu({"nap": lambda: time.sleep(0.005)}, rounds=1, budget_s=0, clock="wall")
    assert min(wall["nap"]) >= 5.0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork and resource: Linux")
def test_startup_rows_dataloader_first_batches_and_a_cold_compile():
    opts = bench.Options(scenarios=[], tiny=True, dataloader=["bert"], cold_compile=["mse"])
    rows = bench.run_benchmarks(opts)
    by = {r.contender: r for r in rows}
    assert set(by) == {"dataloader-first-batch", "dataloader-first-batch-no-warmup", "cold-compile"}
    for name in ("dataloader-first-batch", "dataloader-first-batch-no-warmup"):
        r = by[name]
        assert r.scenario == "bert-tiny" and r.median_ms > 0, r.note
        assert f"slowest of {bench.DATALOADER_WORKERS} forked workers" in r.note
    compiled = by["cold-compile"]
    assert compiled.scenario == "mse" and compiled.clock == "cpu" and compiled.median_ms > 0, compiled.note
    assert "1 kernel(s)" in compiled.note
    if "backend c" in by["dataloader-first-batch"].note:  # a C compiler is here
        assert "backend c" in compiled.note
    table = bench.startup_table(rows).splitlines()
    assert len(table) == 2 + 3 and bench.markdown_table(rows).count("\n") == 1  # not mixed into the check table


def _run_module():
    spec = importlib.util.spec_from_file_location("benchmarks_run", ROOT / "benchmarks" / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_readme_table_is_the_newest_recorded_run():
    """README.md's benchmark block is what `python benchmarks/run.py --readme` makes of results.csv."""
    run = _run_module()
    recorded = bench.read_csv(run.RESULTS / "results.csv")
    rows = run.newest_run(recorded, cuda=False)
    readme = run.README.read_text()
    assert readme.count(run.BEGIN) == 1 and readme.count(run.END) == 1
    block = readme.split(run.BEGIN)[1].split(run.END)[0].strip()
    assert block == run.readme_block(recorded)
    assert "not measured" not in run.targets_table(rows)  # every target names a scenario the run has


def test_command_writes_csv(tmp_path, capsys):
    path = tmp_path / "out.csv"
    code = main(["bench", "--tiny", "--rounds", "1", "--scenario", "bart", "--contender", "tc-torch",
                 "--device", "cpu", "--csv", str(path)])
    assert code == 0
    assert "| bart-tiny | tc-torch |" in capsys.readouterr().out
    assert path.read_text().splitlines()[0].split(",") == bench.COLUMNS


def test_command_rejects_cuda_without_gpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["bench", "--tiny", "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
