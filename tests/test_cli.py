"""The `tritoncheck` command: exit codes, file formats, parameters, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tritoncheck.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def ce_batch(bad=False):
    target = torch.tensor([0, 4, -100, 2])
    if bad:
        target[1] = 5
    return {"input": torch.randn(4, 5), "target": target}


@pytest.fixture
def saved(tmp_path):
    def save(batch, suffix=".pt"):
        path = tmp_path / f"batch{suffix}"
        if suffix == ".safetensors":
            from safetensors.torch import save_file

            save_file(batch, str(path))
        elif suffix == ".npz":
            np.savez(path, **{k: v.numpy() for k, v in batch.items()})
        else:
            torch.save(batch, path)
        return str(path)

    return save


@pytest.mark.parametrize("suffix", [".pt", ".safetensors", ".npz"])
def test_formats_and_exit_codes(saved, suffix, capsys):
    assert main(["check", "cross-entropy", saved(ce_batch(), suffix)]) == 0
    assert "valid" in capsys.readouterr().out
    assert main(["check", "cross-entropy", saved(ce_batch(bad=True), suffix)]) == 1
    out = capsys.readouterr().out
    assert "target[1]" in out and "above_max" in out


def test_json_output(saved, capsys):
    assert main(["check", "cross-entropy", saved(ce_batch(bad=True)), "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False
    assert [(v["field"], v["code"], v["index"], v["value"]) for v in data["violations"]] == [("target", "above_max", [1], 5)]


def test_params_are_typed(saved, capsys):
    batch = {"inputs": torch.randn(2, 4, 8), "labels": torch.tensor([0, 2])}
    path = saved(batch)
    args = ["check", "conv1d-classifier", path, "--param", "in_channels=4", "-p", "num_classes=3"]
    assert main(args) == 0
    assert main([*args[:-2], "-p", "num_classes=2", "--json"]) == 1
    assert json.loads(capsys.readouterr().out.split("\n", 1)[1])["violations"][0]["code"] == "above_max"


def test_config_file(saved, tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"in_channels": 4, "id2label": {"0": "a", "1": "b", "2": "c"}, "hidden_size": 99}))
    batch = {"inputs": torch.randn(2, 4, 8), "labels": torch.tensor([0, 3])}
    assert main(["check", "conv1d-classifier", saved(batch), "--config", str(config), "-p", "num_classes=3", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["violations"][0]["rule"].startswith("labels <= num_classes - 1 = 2")


@pytest.mark.parametrize(
    "args, message",
    [
        (["check", "no-such-spec", "{batch}"], "no built-in spec named 'no-such-spec'"),
        (["check", "conv1d-classifier", "{batch}"], "missing parameter(s) in_channels, num_classes"),
        (["check", "cross-entropy", "{batch}", "-p", "nope=1"], "unknown parameter(s) nope; this spec takes none"),
        (["check", "cross-entropy", "{batch}", "-p", "novalue"], "--param takes NAME=VALUE"),
        (["check", "cross-entropy", "/no/such/file.pt"], "batch file not found"),
        (["check", "cross-entropy", "{junk}"], "cannot read batch file"),
        (["check", "cross-entropy", "{batch}", "-c", "/no/config.json"], "config file not found"),
        (["check", "{badspec}", "{batch}"], "fields.x.dtype"),
        (["check", "cross-entropy", "{batch}", "--backend", "nope"], "invalid choice: 'nope'"),
    ],
)
def test_usage_errors_exit_2_with_one_message(args, message, saved, tmp_path, capsys):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a pickle at all")
    badspec = tmp_path / "bad.yaml"
    badspec.write_text("name: bad\nfields:\n  x: {dtype: int65, shape: [B]}\n")
    subs = {"{batch}": saved(ce_batch()), "{junk}": str(junk), "{badspec}": str(badspec)}
    assert main([subs.get(a, a) for a in args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_triton_backend_on_cpu_tensors_is_a_usage_error(saved, capsys, monkeypatch):
    pytest.importorskip("triton", reason="pip install triton (in the test extra)")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    if torch.cuda.is_available():
        pytest.skip("with a GPU, CPU tensors would still be refused, but the message differs")
    assert main(["check", "cross-entropy", saved(ce_batch()), "--backend", "triton"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tritoncheck: error: backend 'triton' cannot check this batch") and "Traceback" not in err


def test_pickled_code_is_refused(tmp_path, capsys):
    """weights_only=True: a batch file cannot run code when it is loaded."""

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    path = tmp_path / "evil.pt"
    torch.save({"input": Evil()}, path)
    assert main(["check", "cross-entropy", str(path)]) == 2
    captured = capsys.readouterr()
    assert "pwned" not in captured.out
    assert "cannot read batch file" in captured.err


def test_not_a_mapping_is_a_violation(saved, capsys):
    path = saved([torch.zeros(2)])
    assert main(["check", "cross-entropy", path, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["violations"][0]["code"] == "not_a_mapping"


def test_specs_lists_every_builtin(capsys):
    import tritoncheck as tc

    assert main(["specs"]) == 0
    out = capsys.readouterr().out
    for name in tc.builtin_spec_names():
        assert name in out
    assert "max_2d_position_embeddings" in out


def test_specs_shows_yaml_and_plan(capsys):
    assert main(["specs", "cross-entropy"]) == 0
    out = capsys.readouterr().out
    assert "name: cross-entropy" in out
    assert "plan for cross-entropy" in out and "target <= C - 1" in out
    assert main(["specs", "conv1d-classifier"]) == 0
    assert "--param in_channels=..." in capsys.readouterr().out
    assert main(["specs", "conv1d-classifier", "-p", "in_channels=2", "-p", "num_classes=3"]) == 0
    assert "inputs: float16|bfloat16|float32|float64 [B, in_channels, L]" in capsys.readouterr().out
    assert main(["specs", "nope"]) == 2


def test_readme_quick_start():
    """The exact command of the README quick start, as a subprocess through the console script."""
    exe = Path(sys.executable).with_name("tritoncheck")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "tritoncheck.cli"]
    bad = subprocess.run(
        [*cmd, "check", "layoutlmv3-token-classification", "examples/layoutlmv3_bad_batch.pt", "-c", "examples/layoutlmv3_config.json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert bad.returncode == 1, bad.stderr
    for needle in ("bbox[1, 1, 2]", "labels[0, 3]", "labels[0, 5]", "pixel_values[2, 0, 10, 10]", "box_corners", "no_attended_position"):
        assert needle in bad.stdout
    good = subprocess.run(
        [*cmd, "check", "layoutlmv3-token-classification", "examples/layoutlmv3_good_batch.pt", "-c", "examples/layoutlmv3_config.json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert good.returncode == 0, good.stdout + good.stderr


def test_example_batches_are_what_the_script_makes(tmp_path):
    """The committed .pt files are reproducible from examples/make_layoutlmv3_batches.py."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        import make_layoutlmv3_batches as mk
    finally:
        sys.path.remove(str(EXAMPLES))
    config = json.loads((EXAMPLES / "layoutlmv3_config.json").read_text())
    saved_bad = torch.load(EXAMPLES / "layoutlmv3_bad_batch.pt", weights_only=True)
    for k, v in mk.bad_batch(config).items():
        assert torch.equal(v.nan_to_num(), saved_bad[k].nan_to_num()), k


# --- output formats, one JSON convention, version, lazy bench, errors in command-line terms ------------


def test_version(capsys):
    import tritoncheck as tc

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"tritoncheck {tc.__version__}"


def test_piped_output_is_text_json_and_table_on_request(saved, tmp_path, capsys, monkeypatch):
    path = saved(ce_batch(bad=True))
    assert main(["check", "cross-entropy", path]) == 1  # capsys is not a terminal: text
    assert capsys.readouterr().out.splitlines()[3] == "    [code=above_max, count=1, value=5]"
    assert main(["check", "cross-entropy", path, "--format", "json"]) == 1
    as_json = capsys.readouterr().out
    assert main(["check", "cross-entropy", path, "--json"]) == 1
    assert capsys.readouterr().out == as_json and json.loads(as_json)["violations"][0]["code"] == "above_max"
    monkeypatch.setenv("COLUMNS", "60")
    assert main(["check", "cross-entropy", path, "--format", "table"]) == 1
    table = capsys.readouterr().out
    assert "┃" in table and max(map(len, table.splitlines())) <= 60


def test_output_file_is_the_same_json_for_check_and_scan(saved, tmp_path, capsys):
    path = saved(ce_batch(bad=True))
    out = tmp_path / "report.json"
    assert main(["check", "cross-entropy", path, "--output", str(out)]) == 1
    assert "target[1]" in capsys.readouterr().out  # the report for people still goes to stdout
    assert json.loads(out.read_text())["violations"][0]["index"] == [1]
    assert main(["scan", "cross-entropy", path, "-o", str(out)]) == 1
    assert json.loads(out.read_text())["violations"][0]["sample"] == 1


def test_check_never_imports_the_benchmark_harness(saved):
    code = ("import sys; from tritoncheck.cli import main; rc = main(['check', 'cross-entropy', sys.argv[1]]); "
            "print('bench imported:', 'tritoncheck.cli.bench' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code, saved(ce_batch())], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().endswith("bench imported: False"), done.stdout + done.stderr


def test_bench_arguments_reach_the_harness_parser(capsys):
    assert main(["bench", "--help"]) == 0
    assert "--scenario" in capsys.readouterr().out
    assert main(["bench", "--scenario", "nope"]) == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err
    assert main(["check", "--scenario", "x"]) == 2  # other commands still refuse unknown options


@pytest.mark.parametrize("args, says, never", [
    (["check", "conv1d-classifier", "{batch}"], "give --param in_channels=... --param num_classes=... or --config",
     "keywords"),
    (["check", "conv1d-classifier", "{batch}", "-c", "{config}"], "not in {config}: give --param num_classes=...",
     "config=model.config"),
    (["check", "cross-entropi", "{batch}"], "no built-in spec named 'cross-entropi' (did you mean 'cross-entropy'?)",
     "Traceback"),
    (["check", "conv1d-classifier", "{batch}", "-p", "in_chanels=3"], "in_chanels (did you mean 'in_channels'?)",
     "Traceback"),
])
def test_errors_speak_the_command_line_and_suggest_names(args, says, never, saved, tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"in_channels": 4}))
    subs = {"{batch}": saved(ce_batch()), "{config}": str(config)}
    assert main([subs.get(a, a) for a in args]) == 2
    err = capsys.readouterr().err
    assert says.format(config=config) in err and never not in err


WARN_SPEC = """
name: warned
fields:
  x: {dtype: int64, shape: [B], min: 0, max: 9, severity: {above_max: warning}}
"""


@pytest.mark.parametrize("command", ["check", "scan"])
def test_warnings_exit_0_and_strict_makes_them_errors(command, tmp_path, capsys):
    spec = tmp_path / "warned.yaml"
    spec.write_text(WARN_SPEC)
    (tmp_path / "data").mkdir()
    torch.save({"x": torch.tensor([1, 12])}, tmp_path / "data" / "b.pt")
    target = str(tmp_path / "data" / "b.pt") if command == "check" else str(tmp_path / "data")
    assert main([command, str(spec), target, "--format", "text"]) == 0
    assert "warning" in capsys.readouterr().out
    assert main([command, str(spec), target, "--format", "json", "--strict"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and {v["severity"] for v in data["violations"]} == {"error"}
