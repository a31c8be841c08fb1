"""Smoke tests of the benchmark harness at tiny sizes: contenders agree, the CSV keeps its schema,
the README's table is the one the newest recorded run gives.

No speed is asserted here; timings live in benchmarks/results/.
"""

import csv
import dataclasses
import importlib.util
import re
import subprocess
import sys
import time
from types import SimpleNamespace
from pathlib import Path

import pytest
import torch

import tritoncheck as tc
from tritoncheck.cli import bench as entry
from tritoncheck.cli import main

ROOT = Path(__file__).resolve().parents[1]
bench = entry.harness()  # benchmarks/harness.py, imported as its scripts import it

# (scenario, field the broken batch breaks, violation code expected)
BROKEN = {
    "bert": ("input_ids", "above_max"),
    "bert-b1": ("input_ids", "above_max"),
    "layoutlmv3": ("pixel_values", "non_finite"),
    "bart": ("labels", "below_min"),
    "ctc": ("targets", None),  # the blank inside a target: a rule, whatever code the spec gives it
    "big": ("bbox", "below_min"),
    "bert-fresh": ("input_ids", "above_max"),
    "bert-bad": ("input_ids", "above_max"),  # 1% of the ids, and this broken batch is the one timed
    "images-fp16": ("pixel_values", "non_finite"),
    "images-channels-last": ("pixel_values", "non_finite"),
    "causal-lm-256": ("labels", "above_max"),
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
    if not contender.wants(c):  # tc-c-contiguous: only beside a strided batch
        assert contender.name == "tc-c-contiguous" and all(t.is_contiguous() for t in c.batch.values())
        return
    if contender.name == "tc-triton" and device == "cpu":
        pytest.importorskip("triton", reason="pip install triton (in the test extra)")  # not timed without a GPU, but its verdict is checked in the interpreter
    on = "cpu" if contender.name.startswith("tc-c") else device
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
    """Each hand-written rule holds on the valid batch, so the hand contenders are not vacuous; the
    best hand-written rules (aminmax) hold and break alike."""
    _, c = case
    oks = list(c.rules(c.batch, c.params))
    assert len(oks) >= 4
    assert all(bool(ok) for ok in oks)
    assert not all(bool(ok) for ok in c.rules(c.bad, c.params))
    assert c.best_rules is not None
    assert all(bool(ok) for ok in c.best_rules(c.batch, c.params))
    assert not all(bool(ok) for ok in c.best_rules(c.bad, c.params))


def test_the_c_backends_report_is_the_torch_backends_on_every_batch(case):
    """What every C row is timed on: the same report as the torch backend's, valid and broken (the
    harness refuses to time a C contender whose report differs)."""
    _, c = case
    for batch in (c.batch, c.bad):
        assert tc.check(batch, c.spec, backend="c").backend == "c"
        assert bench.same_report_as_torch(batch, c.spec, "c")
    if not all(t.is_contiguous() for t in c.batch.values()):
        contiguous = {k: v.contiguous() for k, v in c.bad.items()}
        assert tc.check(contiguous, c.spec, backend="c").to_dict() == tc.check(c.bad, c.spec, backend="c").to_dict()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_best_finiteness_is_aminmax_and_catches_nan_and_both_infinities(dtype):
    """aminmax propagates NaN (both results are NaN), so its min and max being finite is finiteness."""
    x = torch.rand(3, 1000, dtype=torch.float32).to(dtype)
    assert bool(bench.aminmax_finite(x))
    for bad in (float("nan"), float("inf"), -float("inf")):
        y = x.clone()
        y[2, 517] = bad
        assert not bool(bench.aminmax_finite(y))
        assert not bool(bench.aminmax_finite(y.t()))  # strided too


def test_b1_scenario_is_one_sample_of_16_tokens():
    c = bench.scenario("bert-b1").build(False)
    assert c.batch["input_ids"].shape == (1, 16) and c.name == "bert-1x16"


# seconds of processes or compilers: the slow set, which .ci/run runs (the README command stays under 3 minutes)
@pytest.mark.slow
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
        cpu = [c for c in CPU_CONTENDERS if (have_c or not c.startswith("tc-c")) and (scenario, c) in by]
        timed = [*bench.FLOORS, *cpu]
        assert {"hand-assert", "hand-best", "tc-torch"} <= set(cpu)
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
        if not scenario.endswith("-bad"):  # a broken batch's report may read what it found
            assert not have_c or by[scenario, "tc-c"].syncs == 0  # one call into the compiled kernel: no host read of a tensor
        if not torch.cuda.is_available():
            assert by[scenario, "tc-triton"].median_ms is None
            assert by[scenario, "tc-triton"].note.startswith("skipped: no GPU")
    assert ("images-channels-last-2x3x8x8", "tc-c-contiguous") in by and ("bert-tiny", "tc-c-contiguous") not in by
    assert by["bert-1x16", "one-sum-16"].median_ms > 0  # issue 23's fixed-cost floor
    assert "a new copy of the batch for every call" in by["bert-tiny-fresh", "tc-c"].note
    assert "timed on the broken batch" in by["bert-tiny-1pct-bad", "tc-c"].note
    table = bench.markdown_table(rows).splitlines()
    assert len(table) == 2 + len(rows)
    assert all(line.count("|") == table[0].count("|") for line in table)


def test_the_bad_ids_batch_has_one_percent_bad_and_c_reports_them_as_torch_does():
    c = bench.scenario("bert-bad").build(True)
    ids = c.bad["input_ids"]
    assert c.timed_bad and (ids >= bench.BERT["vocab_size"]).sum() == ids.numel() // 100 >= 10
    report = tc.check(c.bad, c.spec, backend="c")
    assert [(v.field, v.code, v.count) for v in report.violations] == [("input_ids", "above_max", ids.numel() // 100)]


def test_fresh_timing_gives_every_call_a_new_batch_made_off_the_clock():
    seen = []

    def busy() -> list[int]:
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.002:  # 2 ms of CPU to make each batch
            pass
        return [0]

    out = bench.time_cpu({"f": seen.append}, rounds=1, budget_s=0, fresh=busy)
    assert len(out["f"]) == bench.MIN_ROUNDS and max(out["f"]) < 1.0  # the 2 ms a batch is not counted
    assert len({id(b) for b in seen}) == len(seen) > bench.MIN_ROUNDS


def test_the_scaling_sweep_times_c_torch_and_the_floor_on_growing_batches():
    opts = bench.Options(scenarios=[], rounds=1, budget_s=0.2, scaling=[4 << 10, 64 << 10])
    rows = bench.run_benchmarks(opts)
    by = {(r.scenario, r.contender): r for r in rows}
    assert {r.scenario for r in rows} == {"scaling-4KiB", "scaling-64KiB"}
    assert by["scaling-4KiB", "floor-read"].batch_bytes < by["scaling-64KiB", "floor-read"].batch_bytes <= 64 << 10
    for size in ("4KiB", "64KiB"):
        for name in ("floor-read", "tc-torch", "tc-c"):  # tc-c is timed only when its report equals torch's
            assert by[f"scaling-{size}", name].median_ms > 0, by[f"scaling-{size}", name].note
    assert bench.markdown_table(rows).count("\n") == 1  # the sweep has its own table
    table = bench.scaling_table(rows).splitlines()
    assert len(table) == 4 and table[2].startswith("| scaling-4KiB |")


def test_goals_are_ratios_of_two_rows_of_one_scenario():
    run = _run_module()
    rows = [_row("t", "cpu", "thread", "s", c, ms) for c, ms in [("tc-c", 2.0), ("ref", 1.0), ("tc-torch", 5.0)]]
    slower = run.Goal("as slow as", "s", "tc-c", "ref", "<=", 2)
    faster = run.Goal("faster", "s", "tc-c", "tc-torch", ">=", 3)
    assert slower.ratio(rows) == 2.0 and slower.met(2.0)
    assert faster.ratio(rows) == 2.5 and not faster.met(2.5)
    assert run.Goal("gone", "other", "tc-c", "ref", "<=", 2).ratio(rows) is None
    assert {g.scenario for g in run.GOALS} >= {"bert-1x16", "bert-32x128-fresh", "bert-4096x16-1pct-bad"}


def test_a_round_times_many_calls_and_the_thread_clock_leaves_out_sleep():
    calls = []
    out = bench.time_cpu({"nap": lambda: time.sleep(0.005), "tick": lambda: calls.append(1)}, rounds=1, budget_s=0)
    assert len(out["nap"]) == len(out["tick"]) == bench.MIN_ROUNDS
    assert max(out["nap"]) < 2.0  # 5 ms asleep, almost no CPU time
    assert len(calls) > 10 * bench.MIN_ROUNDS  # a 1 us call is timed in batches, not one by one
    wall = bench.time_cpu({"nap": lambda: time.sleep(0.005)}, rounds=1, budget_s=0, clock="wall")
    assert min(wall["nap"]) >= 5.0


@pytest.mark.slow  # forked DataLoader workers and a cold compile, each a few seconds of CPU: run by .ci/run
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
    assert "not measured" not in run.goals_table(rows)  # issue 23's goals too
    png = re.search(r"\[(benchmarks/results/scaling-[\w-]+\.png)\]", block)
    assert png and (ROOT / png.group(1)).is_file()  # the scaling plot of the same run


def test_command_writes_csv(tmp_path, capsys):
    path = tmp_path / "out.csv"
    code = main(["bench", "--tiny", "--rounds", "1", "--scenario", "bart", "--contender", "tc-torch",
                 "--device", "cpu", "--csv", str(path)])
    assert code == 0
    assert "| bart-tiny | tc-torch |" in capsys.readouterr().out
    assert path.read_text().splitlines()[0].split(",") == bench.COLUMNS


def test_the_harness_lives_in_benchmarks_not_in_the_package():
    assert Path(bench.__file__).resolve() == ROOT / "benchmarks" / "harness.py"
    assert not (ROOT / "tritoncheck" / "harness.py").exists() and not hasattr(entry, "SCENARIOS")


@pytest.mark.parametrize("argv", [["--tiny", "--scenario", "bart"], ["--help"], []])
def test_command_without_a_checkout_says_what_to_do(argv, tmp_path, monkeypatch, capsys):
    """Installed without a source checkout (no benchmarks/ beside the package): exit 2 and how to get one."""
    monkeypatch.setattr(entry, "BENCHMARKS", tmp_path)
    assert main(["bench", *argv]) == 2
    out = capsys.readouterr()
    assert out.err.startswith("tritoncheck bench: ") and "source checkout" in out.err and "pip install -e ." in out.err
    assert "Traceback" not in out.err + out.out


def test_command_rejects_cuda_without_gpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["bench", "--tiny", "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def _event(name, start, end, cuda=False):
    from torch.autograd.profiler_util import Interval

    kind = torch.autograd.DeviceType.CUDA if cuda else torch.autograd.DeviceType.CPU
    return SimpleNamespace(name=name, device_type=kind, time_range=Interval(start, end))


def test_device_counts_take_syncs_inside_the_profiled_range_only():
    """The synchronize that ends a profile, and the profiler's own, are not the check's: a GPU run
    counted them (2 syncs per Triton check, where the check makes 1). The range's annotation on the
    device timeline is not a kernel."""
    events = [
        _event("cudaDeviceSynchronize", 0, 1),  # the profiler's, before the range
        _event(bench.PROFILED, 10, 100),
        _event(bench.PROFILED, 12, 60, cuda=True),
        _event("tritoncheck_kernel", 20, 23, cuda=True),
        _event("Memcpy DtoH (Device -> Pinned)", 24, 25, cuda=True),
        _event("Memcpy HtoD (Pinned -> Device)", 26, 27, cuda=True),
        _event("cudaEventSynchronize", 30, 40),
        _event("cudaLaunchKernel", 15, 16),
        _event("cudaDeviceSynchronize", 101, 110),  # the one that ends the profile
    ]
    c = bench.device_counts(events)
    assert (c.kernels, c.dtoh, c.htod, c.memsets, c.syncs) == (1, 1, 1, 0, 1)
    assert c.kernel_times == [("tritoncheck_kernel", 3)]


def _row(stamp, device, clock, scenario, contender, ms, **kw):
    return bench.Result(stamp, device, 1, clock, 1.0, "2.x", "3.x", "0.1.0", scenario, contender, 100, median_ms=ms, **kw)


def test_readme_block_states_the_newest_gpu_run_with_its_device(tmp_path, monkeypatch):
    """A recorded GPU run gets its own table, the device named, wall times from its notes; without
    one the block says no GPU run is recorded. Issue 22's targets are judged from gpu_profile.py's page."""
    run = _run_module()
    cpu = [_row("2026-01-01T00:00:00", "Some CPU", "thread", "bert-32x128", c, ms, rounds=5, x_hand_assert=x)
           for c, ms, x in [("hand-assert", 0.2, 1.0), ("tc-c", 0.02, 10.0)]]
    assert "No GPU run is recorded" in run.readme_block(cpu)
    gpu = [_row("2026-01-02T00:00:00", "Some GPU", "cuda", "bert-32x128", c, ms, x_hand_assert=x, note=f"wall {w} ms a call")
           for c, ms, x, w in [("hand-assert", 0.3, 1.0, 0.37), ("tc-triton", 0.1, 3.0, 0.15)]]
    page = tmp_path / "gpu-profile-cuda.md"
    page.write_text("# The Triton backend on Other GPU\n\n`python benchmarks/gpu_profile.py` at abc1234, 2026-01-03T10:00:00: "
                    "torch 2.11\n\n| case | batch | MB | kernels / check | DtoH / check | syncs / check | kernel us (median) | GB/s "
                    "| of copy bandwidth | wall us / check | host CPU us / check |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
                    "| bert-32x128 | valid | 0.1 | 1 | 1 | 1 | 1.4 | 71.6 | 0.02 | 95.3 | |\n"
                    "| bert-32x128 | valid, deferred | 0.1 | 1 | 1 | 0 | 1.4 | 71.6 | 0.02 | | 24.5 |\n"
                    "| bert-32x128 | broken | 0.1 | 1 | 2 | 3 | 30.0 | 3.3 | 0.00 | 180.1 | |\n"
                    "| causal-lm-8x4096 | valid | 0.8 | 1 | 1 | 1 | 22.0 | 35.8 | 0.01 | 122.7 | |\n"
                    "| lay-1GiB | valid | 1071.7 | 1 | 1 | 1 | 307.2 | 3488.2 | 0.88 | 930.6 | |\n")
    monkeypatch.setattr(run, "PROFILE", page)
    block = run.readme_block(cpu + gpu)
    assert "No GPU run is recorded" not in block and "On a GPU (Some GPU)" in block
    assert "Per check on the Other GPU (2026-01-03 at abc1234;" in block  # the page's own device, not the CSV's
    assert "| bert-32x128 | 0.300 | 0.100 | **3.00x** |" in block and "| 0.15 | 0.37 |" in block
    assert "| 22.0 | causal-lm-8x4096 | **no** |" in block  # the worst valid row; the broken one's 30 us is not a check's cost
    assert "| 0.88 | lay-1GiB | yes |" in block and "one kernel per valid check | 1 | bert-32x128 | yes" in block
    assert "per deferred check (the driver's launch included) | 24.5 | bert-32x128 | **no** |" in block


def test_run_refuses_cuda_without_a_gpu_and_profile_says_why(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    run = _run_module()
    assert run.main(["--device", "cuda", "--scenario", "bert"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    spec = importlib.util.spec_from_file_location("gpu_profile", ROOT / "benchmarks" / "gpu_profile.py")
    profile = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = profile  # its dataclass looks its module up there
    spec.loader.exec_module(profile)
    assert profile.main([]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_the_gpu_script_parses_and_names_only_test_files_that_exist():
    """scripts/gpu_checks.sh is run on a GPU only: a renamed test file would drop out of it unnoticed."""
    script = ROOT / "scripts" / "gpu_checks.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    assert text.startswith("python3 -m pip install -q --no-index --no-deps")  # the line ../shared/gpu/prepare.sh prints
    named = set(re.findall(r"tests/test_\w+\.py", text))
    assert len(named) >= 5 and all((ROOT / f).exists() for f in named), named
    assert all((ROOT / f).exists() for f in re.findall(r"benchmarks/\w+\.py", text))


def test_big_adds_every_big_scenario_and_the_default_leaves_them_out(monkeypatch):
    from tritoncheck.cli import bench as bench_cli
    from tritoncheck.cli import main

    taken = []
    monkeypatch.setattr(bench_cli, "run_benchmarks", lambda opts, log: taken.append(opts.scenarios) or [])
    big = [s.name for s in bench_cli.harness().SCENARIOS if s.big]
    assert len(big) >= 2  # the 254 MB LayoutLMv3 batch and the 256 MiB causal LM
    assert main(["bench", "--tiny"]) == 0 and not set(big) & set(taken[-1])
    assert main(["bench", "--tiny", "--big"]) == 0 and set(big) <= set(taken[-1])
