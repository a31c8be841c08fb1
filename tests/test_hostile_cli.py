"""Hostile text and odd inputs at the command line (issue 10 items 6-scan, 7, 8, 10).

Spec and batch text is printed literally (no rich markup) with control characters escaped;
internal errors exit 3; non-finite parameters are usage errors; exceptions pickle whole;
`infer` and `scan` survive what they are given.
"""

from __future__ import annotations

import copy
import json
import math
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import tritoncheck as tc
from tritoncheck.cli import main

ROOT = Path(__file__).resolve().parent.parent
# ESC (colour, clear screen, OSC 8 hyperlink), BEL, CR (overwrite the line), CSI as one C1 character, DEL, bidi override
CONTROL = ["\x1b", "\x07", "\r", "\x9b", "\x7f", "\u202e"]
HOSTILE = "[link=https://evil.example]click[/link] [bold]b[/bold] \x1b[31mred\x07 \r over \x9b2J \x7f \u202e " \
          "\x1b]8;;https://evil.example\x1b\\x\x1b]8;;\x1b\\ :smile:"


def write_spec(path: Path, name: str = "evil[/x] \x1b[2J", hint: str = HOSTILE) -> Path:
    spec = {
        "name": name,
        "batch_dim": "N",
        "fields": {
            "input": {"dtype": ["float"], "shape": ["N", "C"]},
            "target": {"dtype": ["int64"], "shape": ["N"], "min": 0, "max": 2, "hints": {"above_max": hint}},
        },
        "rules": [{"rule": "target >= 0  # [/x] \x1b[31m comment", "hint": hint, "code": "evil_rule"}],
    }
    path.write_text(yaml.safe_dump(spec, allow_unicode=True), encoding="utf-8")
    return path


def save(path: Path, batch) -> str:
    torch.save(batch, path)
    return str(path)


def assert_no_control(*texts: str) -> None:
    for text in texts:
        for ch in CONTROL:
            assert ch not in text, (ch, text)


@pytest.fixture
def evil(tmp_path):
    spec = write_spec(tmp_path / "evil.yaml")
    good = save(tmp_path / "good.pt", {"input": torch.randn(2, 3), "target": torch.tensor([0, 1])})
    bad = save(tmp_path / "bad.pt", {"input": torch.randn(2, 3), "target": torch.tensor([0, 5]),
                                     "[bold]k[/bold] \x1b[31m": torch.zeros(2)})
    return str(spec), good, bad


# --- item 7: markup and control characters ---------------------------------------------------------


def test_markup_in_spec_name_on_a_valid_batch_is_printed_literally(evil, capsys):
    spec, good, _ = evil
    assert main(["check", spec, good]) == 0
    out = capsys.readouterr().out
    assert "batch is valid for evil[/x] \\x1b[2J" in out


@pytest.mark.parametrize("fmt, columns", [("text", "80"), ("table", "200"), ("table", "80"), ("table", "50")])
def test_markup_and_control_characters_in_hints_rules_and_field_names(evil, capsys, monkeypatch, fmt, columns):
    spec, _, bad = evil
    monkeypatch.setenv("COLUMNS", columns)  # the table: one column per item, three, or the text form
    assert main(["check", spec, bad, "--format", fmt]) == 1
    captured = capsys.readouterr()
    assert_no_control(captured.out, captured.err)
    words = captured.out.split()  # the table folds long cells at spaces: compare word by word
    for literal in ("[link=https://evil.example]click[/link]", "[bold]b[/bold]", "\\x1b[31mred\\x07", "\\r",
                    "\\x9b2J", "\\x7f", "\\u202e", ":smile:", "[bold]k[/bold]", "evil[/x]"):
        assert literal in words, literal

    assert main(["check", spec, bad, "--json"]) == 1  # JSON stays exact
    raw = capsys.readouterr().out
    assert_no_control(raw)  # JSON escapes them itself ...
    report = json.loads(raw)  # ... and gives them back exactly
    assert report["spec"] == "evil[/x] \x1b[2J"
    assert {v["code"]: v["hint"] for v in report["violations"]}["above_max"] == HOSTILE
    assert "[bold]k[/bold] \x1b[31m" in {v["field"] for v in report["violations"]}


def test_specs_command_and_error_messages_escape_control_characters(evil, tmp_path, capsys):
    spec, good, _ = evil
    assert main(["specs", spec]) == 0
    captured = capsys.readouterr()
    assert_no_control(captured.out, captured.err)
    assert "evil_rule" in captured.out
    hostile_file = tmp_path / "x\x1b[2J\x07.pt"
    assert main(["check", spec, str(hostile_file)]) == 2  # not found: the message names the file
    err = capsys.readouterr().err
    assert_no_control(err)
    assert "batch file not found" in err and "x\\x1b[2J\\x07.pt" in err


def test_report_text_escapes_control_characters_in_values_and_names():
    v = tc.Violation(field="f\x1b[2J", code="rule_failed", rule="r\rr", index=(0,), value="v\x07\x9b", hint="h\x1b]8;;u\x07")
    report = tc.Report(spec="s\x1b", violations=(v,), skipped=("k\x07",))
    assert_no_control(v.message, str(report))
    assert v.to_dict()["field"] == "f\x1b[2J" and v.to_dict()["hint"] == "h\x1b]8;;u\x07"  # data stays exact
    from rich.console import Console

    for width in (200, 60, 30):  # the table, its three-column form, the text form; and the notebook's HTML
        console = Console(record=True, width=width, color_system=None)
        console.print(report.table())
        console.print(report)
        assert_no_control(console.export_text())
    assert_no_control(report._repr_html_())


def test_control_characters_never_reach_a_real_terminal_stream(evil):
    """Through a real process: the bytes on stdout and stderr hold no ESC, BEL, CR or C1 CSI."""
    spec, _, bad = evil
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-m", "tritoncheck.cli", "check", spec, bad, "--format", "table"],
                          capture_output=True, env=env, timeout=300)
    assert proc.returncode == 1, proc.stderr.decode(errors="replace")
    for stream in (proc.stdout, proc.stderr):
        for raw in (b"\x1b", b"\x07", b"\r", "\x9b".encode(), b"\x7f", "\u202e".encode()):
            assert raw not in stream, (raw, stream[-400:])
    assert b"[link=https://evil.example]click[/link]" in b" ".join(proc.stdout.split())


# --- item 7: exit codes ----------------------------------------------------------------------------


class Bug(Exception):
    """Stands for any bug in tritoncheck: not a type any command handles."""


def boom(*args, **kwargs):
    raise Bug("boom\x1b[2J\nsecond line")


@pytest.mark.parametrize("command", ["check", "specs", "infer", "bench"])
def test_an_internal_error_exits_3_in_every_subcommand(command, evil, monkeypatch, capsys):
    spec, good, _ = evil
    argv = {
        "check": ["check", "--backend", "torch", spec, good],
        "specs": ["specs"],
        "infer": ["infer", good],
        "bench": ["bench", "--tiny", "--scenario", "ctc"],
    }[command]
    target = {"check": "tritoncheck.api.check", "specs": "tritoncheck.spec.schema.builtin_spec_names",
              "infer": "tritoncheck.cli.infer._draft", "bench": "tritoncheck.cli.bench.run_benchmarks"}[command]
    monkeypatch.setattr(target, boom)
    monkeypatch.delenv("TRITONCHECK_DEBUG", raising=False)
    assert main(argv) == 3
    err = capsys.readouterr().err
    assert "internal error: please report" in err and "Traceback" not in err
    assert_no_control(err)
    assert main(["--debug", *argv]) == 3
    assert "Traceback" in capsys.readouterr().err
    assert main([*argv, "--debug"]) == 3
    assert "Traceback" in capsys.readouterr().err


def test_help_documents_the_exit_codes(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "exit codes" in out and "3  internal error" in out and "2  usage or spec error" in out
    from tritoncheck import cli
    assert "3  internal error" in cli.__doc__


def test_non_finite_parameters_are_usage_errors(tmp_path, capsys):
    spec = tmp_path / "scaled.yaml"
    spec.write_text("name: scaled\nparams: {scale: null}\nfields:\n  x: {dtype: [float], shape: [B], max: scale}\n")
    path = save(tmp_path / "x.pt", {"x": torch.zeros(3)})
    config = tmp_path / "config.json"
    for value in ("1e400", "-1e400", "inf", "nan"):
        assert main(["check", str(spec), path, "--param", f"scale={value}"]) == 2, value
        assert "finite" in capsys.readouterr().err
        config.write_text('{"scale": %s}' % {"inf": "Infinity", "nan": "NaN"}.get(value, value))
        assert main(["check", str(spec), path, "--config", str(config)]) == 2, value
    assert main(["check", str(spec), path, "--param", "scale=1e300"]) == 0  # large but finite is fine
    ids = save(tmp_path / "b.pt", {"input_ids": torch.zeros(2, 4, dtype=torch.long)})
    params = ["-p", "vocab_size=1e400", "-p", "max_position_embeddings=16", "-p", "type_vocab_size=2", "-p", "num_labels=3"]
    assert main(["check", "bert-sequence-classification", ids, *params]) == 2
    assert "Traceback" not in capsys.readouterr().err


# --- item 8: pickling ------------------------------------------------------------------------------


def roundtrips(obj):
    return [pickle.loads(pickle.dumps(obj, protocol=p)) for p in (2, pickle.HIGHEST_PROTOCOL)] + \
        [copy.copy(obj), copy.deepcopy(obj)]


def test_text_only_batch_validation_error_keeps_its_text():
    # how torch's DataLoader rebuilds a worker's exception: type(exc)(traceback_text)
    for exc in roundtrips(tc.BatchValidationError("Caught BatchValidationError in DataLoader worker process 0")):
        assert str(exc) == "Caught BatchValidationError in DataLoader worker process 0" and exc.report is None


def test_batch_validation_error_keeps_report_indices_notes_and_attributes():
    report = tc.check({"input": torch.randn(2, 3), "target": torch.tensor([0, 9])}, tc.load_spec("cross-entropy"))
    exc = tc.BatchValidationError(report)
    exc.dataset_indices = (17, 23)
    exc.add_note("while loading shard 3")
    exc.step = 41
    for copied in roundtrips(exc):
        assert type(copied) is tc.BatchValidationError and str(copied) == str(exc)
        assert copied.report == report and copied.errors() == exc.errors()
        assert copied.dataset_indices == (17, 23) and copied.__notes__ == ["while loading shard 3"]
        assert copied.step == 41


ODD_VALUES = [float("nan"), float("inf"), -float("inf"), b"\x1b[2J", (1, 2), 2**100, -(2**70), "s\x07", True, None]


def test_reports_with_odd_values_pickle_serialise_and_print():
    def no_constants(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    for value in ODD_VALUES:
        v = tc.Violation("f", "above_max", "f <= 1", samples=(0,), index=(0,), value=value, hint="h")
        report = tc.Report(spec="s", violations=(v,), dims={"B": (1, "f")})
        for copied in [*roundtrips(report), *(e.report for e in roundtrips(tc.BatchValidationError(report)))]:
            (w,) = copied.violations
            same = w.value == value or (isinstance(value, float) and math.isnan(w.value))
            assert same and copied.dims == report.dims and copied.spec == "s", value
        data = json.loads(report.to_json(), parse_constant=no_constants)  # strict JSON: no NaN / Infinity tokens
        assert data["violations"][0]["field"] == "f"
        assert_no_control(str(report), v.message)  # a str value holding BEL is escaped in text


# --- item 10: infer --------------------------------------------------------------------------------


def infer_then_check(tmp_path, capsys, batch, name="b.pt"):
    """Infer a draft from one saved batch via the CLI; the draft must load and accept that batch."""
    path = save(tmp_path / name, batch)
    assert main(["infer", path]) == 0
    captured = capsys.readouterr()
    draft = tmp_path / "draft.yaml"
    draft.write_text(captured.out)
    assert main(["check", str(draft), path]) == 0, capsys.readouterr().out
    return yaml.safe_load(captured.out), captured.err


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2, torch.complex64, torch.uint16], ids=str)
def test_infer_leaves_out_unsupported_dtypes_naming_the_field(dtype, tmp_path, capsys):
    batch = {"odd": torch.zeros(2, 3).to(dtype), "labels": torch.tensor([0, 1])}
    draft, err = infer_then_check(tmp_path, capsys, batch)
    assert set(draft["fields"]) == {"labels"} and draft["unexpected_fields"] == "ignore"
    assert "odd" in err and str(dtype).removeprefix("torch.") in err


def test_infer_reads_expanded_tensors_without_materialising_them(tmp_path, capsys):
    batch = {"x": torch.zeros(1).expand(2**40), "mask": torch.ones(1, 1, dtype=torch.long).expand(2**40, 7),
             "labels": torch.tensor([[-100, 3]]).expand(2**40, 2)}  # 4, 56 and 16 TiB if materialised
    draft, _ = infer_then_check(tmp_path, capsys, batch)
    f = draft["fields"]
    assert f["x"]["shape"] == ["B"] and f["x"]["max"] == 1 and f["mask"]["values"] == [0, 1]
    assert f["labels"]["allow"] == [-100] and f["labels"]["max"] == 3


def test_infer_leaves_out_overlapping_views():
    from tritoncheck.cli.infer import infer_yaml

    batch = {"x": torch.zeros(2**20 + 2**20).as_strided((2**20, 2**20), (1, 1)), "y": torch.zeros(3)}
    draft = yaml.safe_load(infer_yaml([batch]))
    assert set(draft["fields"]) == {"y"} and "x (an overlapping" in infer_yaml([batch])


def test_infer_with_fields_named_like_dims(tmp_path, capsys):
    names = ["B", "N", "batch", "batch_", "B1", "L", "T", "S", "D1"]
    batch = {n: torch.zeros(2, 3 + i, dtype=torch.long) for i, n in enumerate(names)}
    batch["attention_mask"] = torch.ones(2, 5, dtype=torch.long)
    draft, _ = infer_then_check(tmp_path, capsys, batch)
    assert draft["batch_dim"] not in names and set(draft["fields"]) == {*names, "attention_mask"}


def test_infer_escapes_file_names_and_spec_names(tmp_path, capsys):
    path = save(tmp_path / "a\n- [ \x1b.pt", {"x": torch.zeros(2, 3)})
    assert main(["infer", path, "--name", "n\x1b[2J\n😀: [/x]"]) == 0
    text = capsys.readouterr().out
    assert_no_control(text)
    assert yaml.safe_load(text)["name"] == "n\x1b[2J\n😀: [/x]"


# --- item 6 (scan): one failure never aborts a scan -----------------------------------------------


def ce(target):
    return {"input": torch.randn(len(target), 3), "target": torch.tensor(target)}


def test_scan_records_a_failing_check_and_goes_on(tmp_path, monkeypatch, capsys):
    import tritoncheck.api as api
    import tritoncheck.integrations.data  # noqa: F401  (imported now, it binds the real check, not the patched one below)

    real = api.check

    def check(batch, spec, **kw):
        if batch["input"].shape[0] == 5:
            raise MemoryError("cannot allocate 4 TiB\nsecond line")
        return real(batch, spec, **kw)

    monkeypatch.setattr(api, "check", check)
    save(tmp_path / "a_crash.pt", ce([0, 1, 2, 0, 1]))
    save(tmp_path / "b_bad.pt", ce([0, 7, 1]))
    save(tmp_path / "c_good.pt", ce([2, 2]))
    assert main(["scan", "cross-entropy", str(tmp_path), "--json"]) == 3
    report = json.loads(capsys.readouterr().out)
    assert report["unchecked"] == [{"source": str(tmp_path / "a_crash.pt"), "offset": 0, "error": "MemoryError",
                                 "message": "cannot allocate 4 TiB"}]
    assert report["failed_batches"] == 1 and report["batches"] == 2 and not report["ok"]
    assert [(Path(e["source"]).name, e["sample"], e["code"]) for e in report["violations"]] == [("b_bad.pt", 1, "above_max")]
    assert main(["scan", "cross-entropy", str(tmp_path)]) == 3  # the table says so too
    out = capsys.readouterr().out
    assert "1 batch could not be checked" in out and "a_crash.pt: MemoryError: cannot allocate 4 TiB" in out


def test_scan_goes_on_past_an_8_byte_file_expanded_to_2_to_the_40(tmp_path, capsys):
    save(tmp_path / "a_huge.pt", {"input": torch.zeros(1, 1).expand(2**40, 3),
                                  "target": torch.zeros(1, dtype=torch.long).expand(2**40)})
    save(tmp_path / "b_bad.pt", ce([0, 7, 1]))
    code = main(["scan", "cross-entropy", str(tmp_path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == (3 if report["unchecked"] else 1)
    assert ("b_bad.pt", 1, "above_max") in [(Path(e["source"]).name, e["sample"], e["code"]) for e in report["violations"]]


@pytest.mark.parametrize("fmt", ["text", "table"])
def test_scan_output_prints_spec_and_field_text_literally(tmp_path, capsys, fmt):
    spec = write_spec(tmp_path / "evil.yaml")
    data = tmp_path / "data"
    data.mkdir()
    save(data / "x\x1b[2J.pt", {"input": torch.randn(2, 3), "target": torch.tensor([0, 5]),
                                "[bold]k[/bold]\x1b[31m": torch.zeros(2)})
    assert main(["scan", str(spec), str(data), "--format", fmt, "--rename", "target=[bold]k[/bold]\x1b[31m"]) == 2
    assert_no_control(capsys.readouterr().err)
    assert main(["scan", str(spec), str(data), "--format", fmt]) == 1
    captured = capsys.readouterr()
    assert_no_control(captured.out, captured.err)
    assert "evil[/x]" in captured.out and "x\\x1b[2J.pt: [bold]k[/bold]\\x1b[31m" in captured.out
    assert "(and 1 source with problems of a whole batch)" in captured.out


class WritesMarker:
    """Unpickling this calls open(marker, 'w'): a payload that leaves a file behind if it runs."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickle_payloads_in_batch_files_never_run(tmp_path, capsys):
    marker = tmp_path / "marker"
    pt = tmp_path / "data" / "evil.pt"
    pt.parent.mkdir()
    torch.save({"input": WritesMarker(marker), "target": torch.zeros(2)}, pt)
    torch.load(pt, weights_only=False)  # the payload is live: unguarded loading runs it
    assert marker.exists()
    marker.unlink()
    npz = tmp_path / "data" / "evil.npz"
    np.savez(npz, input=np.array([WritesMarker(marker)], dtype=object))
    with np.load(npz, allow_pickle=True) as data:
        data["input"]
    assert marker.exists()
    marker.unlink()

    assert main(["check", "cross-entropy", str(pt)]) == 2
    assert main(["check", "cross-entropy", str(npz)]) == 2
    assert main(["infer", str(pt)]) == 2
    assert main(["scan", "cross-entropy", str(pt.parent), "--json"]) == 1
    out = capsys.readouterr().out
    report = json.loads(out[out.index("{"):])
    assert sorted(Path(e["source"]).name for e in report["violations"] if e["code"] == "unreadable") == ["evil.npz", "evil.pt"]
    assert not marker.exists()


def test_a_closed_pipe_is_not_an_internal_error(monkeypatch, capsys):
    """`tritoncheck specs | head -1`: the reader went away; exit quietly, not with exit code 3."""
    import io

    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("sys.stdout", ClosedPipe())
    from tritoncheck.cli import main

    assert main(["specs", "cross-entropy"]) == 0
    assert "internal error" not in capsys.readouterr().err
