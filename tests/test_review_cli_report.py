"""An adversarial review of the CLI, the report and the spec's Python API (issues 20.6 and 21), as a
user meets them: every number printed true, a clear error for every bad input, nothing silent."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections import UserDict
import json

import pytest
import torch
from rich.console import Console

import tritoncheck as tc
from tritoncheck.cli import main


def test_a_float_found_past_its_bound_is_never_printed_as_the_bound(backend):
    """fp32 1.0000001 breaks `input <= 1`; printed to 6 digits it read `(found 1)`, a number that is
    not true. A float is printed with as many digits as it takes to be itself (in fp32 where it is one)."""
    spec = tc.load_spec("bce")
    batch = {"input": torch.tensor([[0.5, 1.0000001, 1234567.8]]), "target": torch.tensor([[0.0, 1.0, 1.0]])}
    report = tc.check(batch, spec, backend=backend)
    text = str(report)
    assert "input[0, 1]: input <= 1 = 1.0 (found 1.0000001); 2 element(s) in sample(s) 0" in text
    assert "[code=above_max, count=2, value=1.0000001]" in text
    assert "1.0000001" in report.html()
    table = Console(file=io.StringIO(), width=60, color_system=None)
    table.print(report)
    assert "1.0000001" in table.file.getvalue()
    small = tc.check({"input": torch.tensor([[0.25, -1e-9]]), "target": torch.tensor([[0.0, 1.0]])}, spec,
                     backend=backend)
    assert "(found -1e-09)" in str(small)  # short where short is exact (in the data's fp32)
    double = tc.check({"input": torch.tensor([[0.5, 1 + 2**-40]], dtype=torch.float64),
                       "target": torch.tensor([[0.0, 1.0]], dtype=torch.float64)}, spec, backend=backend)
    assert f"(found {1 + 2**-40!r})" in str(double)


def test_a_spec_from_json_raises_spec_error_not_pydantics():
    """Every way pydantic builds a spec reports a mistake as tc.SpecError, with the key that was meant."""
    data = {"name": "s", "fields": {"x": {"dtpye": "int64", "shape": ["B"]}}}
    with pytest.raises(tc.SpecError, match=r"BatchSpec: 2 error\(s\) in spec\n.*\n  fields\.x\.dtpye: unknown key \(did you mean 'dtype'\?\)"):
        tc.BatchSpec.model_validate_json(json.dumps(data))
    with pytest.raises(tc.SpecError, match=r"  optinal: unknown key \(did you mean 'optional'\?\)"):
        tc.FieldSpec.model_validate_json(json.dumps({"dtype": "int64", "shape": ["B"], "optinal": True}))
    with pytest.raises(tc.SpecError, match=r"BatchSpec: 1 error\(s\) in spec\n  Invalid JSON: key must be a string"):
        tc.BatchSpec.model_validate_json("{not json")
    with pytest.raises(tc.SpecError, match="fields: Field required"):
        tc.BatchSpec.model_validate_strings({"name": "s"})
    spec = tc.BatchSpec.model_validate_json(json.dumps({"name": "s", "fields": {"x": {"dtype": "int64", "shape": ["B"]}}}))
    assert tc.check({"x": torch.zeros(2, dtype=torch.long)}, spec).ok


@pytest.mark.parametrize(("content", "reason"), [
    (b"garbage", "not a torch.save file, .safetensors or .npz (torch: Unsupported operand 103)"),  # not its advice
    # to turn weights_only off
    (b"", "the file is empty or cut short"),  # was the bare 'EOFError'
    (b"PK\x03\x04junk", "PytorchStreamReader failed reading zip archive: not a ZIP archive."),  # one sentence, not cut
])
def test_an_unreadable_batch_file_is_one_whole_line_without_torchs_advice(tmp_path, capsys, content, reason):
    (tmp_path / "batch.pt").write_bytes(content)
    assert main(["check", "cross-entropy", str(tmp_path / "batch.pt")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"tritoncheck: error: cannot read batch file {tmp_path / 'batch.pt'}: {reason}\n"


def test_failure_cases_refuses_a_batch_or_spec_the_report_was_not_made_from():
    """The report keeps no batch, so a different one (the next batch, a fixed copy) or another spec
    gave records that the report's numbers contradict: a clean batch listed a failing element."""
    spec = tc.load_spec("cross-entropy")
    bad = {"input": torch.randn(6, 4), "target": torch.tensor([0, 9, 2, 7, 1, 5])}
    report = tc.check(bad, spec)
    assert [c["index"] for c in tc.failure_cases(report, bad, spec)] == [[1], [3], [5]]
    assert [c["index"] for c in tc.failure_cases(report.strict(), bad, spec)] == [[1], [3], [5]]
    for batch in ({"input": bad["input"], "target": torch.zeros(6, dtype=torch.long)},
                  {"input": bad["input"], "target": torch.tensor([0, 9, 2, 1, 1, 1])}):
        with pytest.raises(ValueError, match="not the batch and spec this report was made from"):
            tc.failure_cases(report, batch, spec)
    with pytest.raises(ValueError, match="not the batch and spec this report was made from"):
        tc.failure_cases(report, bad, tc.load_spec("bce"))
    with pytest.raises(TypeError, match="spec must be a BatchSpec"):
        tc.failure_cases(report, bad, "cross-entropy")
    with pytest.raises(TypeError, match="limit must be an int or None, got float"):
        tc.failure_cases(report, bad, spec, limit=2.5)


def _ce(bad: bool) -> dict[str, torch.Tensor]:
    return {"input": torch.randn(2, 3), "target": torch.tensor([0, 7 if bad else 1])}


@pytest.mark.parametrize(("bad", "code"), [(True, 1), (False, 0)])
def test_a_stdout_closed_from_the_start_keeps_the_verdict(tmp_path, capsys, monkeypatch, bad, code):
    """`tritoncheck check BAD >&-` (cron, a daemon): Python's sys.stdout is None; it was an internal
    error with a traceback, exit code 120."""
    torch.save(_ce(bad), tmp_path / "b.pt")
    monkeypatch.setattr(sys, "stdout", None)
    assert main(["check", "cross-entropy", str(tmp_path / "b.pt"), "--backend", "torch"]) == code
    assert sys.stdout is None
    assert capsys.readouterr().err == ""


@pytest.mark.slow  # starts the command (torch's import)
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize(("bad", "code"), [(True, 1), (False, 2)])
def test_a_stdout_that_cannot_be_written_is_one_line_on_stderr(tmp_path, bad, code):
    """stdout on a full disk: one line on stderr, and never exit code 0 for output that was lost (it was
    'internal error: please report', exit code 3)."""
    torch.save(_ce(bad), tmp_path / "b.pt")
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "tritoncheck.cli", "check", "cross-entropy", "b.pt",
                               "--backend", "torch"], cwd=tmp_path, stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=300)
    assert done.stderr == "tritoncheck: error: cannot write to stdout: No space left on device\n"
    assert done.returncode == code


def test_an_empty_output_name_is_a_usage_error_not_a_report_silently_not_written(tmp_path, capsys):
    torch.save(_ce(True), tmp_path / "b.pt")
    assert main(["check", "cross-entropy", str(tmp_path / "b.pt"), "--output", ""]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", "tritoncheck: error: --output needs a file name, got ''\n")


def test_checked_says_when_a_call_holds_no_batch_instead_of_reporting_every_field_missing():
    """Two mappings, a tuple batch, a call that does not fit the signature: no batch can be read, which
    is not the same as a batch without fields ('2 violations: input is missing, target is missing')."""
    spec = tc.load_spec("cross-entropy")
    ran = []

    @tc.checked(spec)
    def step(batch, extra):
        ran.append(1)

    good = _ce(False)
    with pytest.raises(TypeError, match=r"@tc\.checked\(cross-entropy\) found no batch in the call to "
                                        r".*step: no argument is named like a field \(input, target\), "
                                        r"and of its 2 mapping arguments not exactly one holds them"):
        step(good, {"input": 1})
    with pytest.raises(TypeError, match="and of its 0 mapping arguments not exactly one holds them"):
        step((good["input"], good["target"]), None)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'extra'"):
        step(good)  # Python's own error for a call that does not fit, and the body does not run
    assert ran == []
    step(good, 3)
    assert ran == [1]
    with pytest.raises(tc.BatchValidationError, match="required field target is missing"):
        step({"input": good["input"]}, 3)  # one mapping: the batch, whatever it lacks
    with pytest.raises(tc.BatchValidationError, match=r"target\[1\]"):
        step({"lr": 0.1}, _ce(True))  # of several mappings, the one holding fields (was: every field missing)
    assert ran == [1]


def test_a_saved_mapping_inside_a_saved_mapping_is_read_as_a_dict_too(tmp_path, capsys):
    """A UserDict value of a UserDict was left as the loader's stand-in class, whose private name
    ('got _SavedMapping') reached the user."""
    torch.save(UserDict({"input": torch.randn(2, 3), "target": UserDict({"x": torch.tensor([0, 1])})}),
               tmp_path / "b.pt")
    assert main(["check", "cross-entropy", str(tmp_path / "b.pt"), "--backend", "torch"]) == 1
    out = capsys.readouterr().out
    assert "target: expected a tensor or numpy array, got dict" in out
    assert "_SavedMapping" not in out


@pytest.mark.parametrize(("alias", "meant"), [("long", "int64"), ("half", "float16"), ("double", "float64"),
                                              ("torch.int64", "int64"), ("torch.long", "int64"), ("fp16", "float16"),
                                              ("bf16", "bfloat16"), ("np.float32", "float32")])
def test_a_dtype_alias_gets_the_dtype_name_it_stands_for(alias, meant):
    """torch's and numpy's aliases, and the usual short forms, are what users write; difflib finds none
    of them near its name (the issue asked for dtype aliases to get the closest name)."""
    with pytest.raises(tc.SpecError, match=rf"unknown dtype '{alias}'.*\(did you mean '{meant}'\?\)"):
        tc.BatchSpec(name="s", fields={"x": {"dtype": alias, "shape": ["B"]}})


def test_a_torch_dtype_object_is_taken_as_its_name():
    """In Python, `dtype=torch.int64` is the natural spelling: it was 'Input should be a valid list'."""
    field = tc.FieldSpec(dtype=torch.int64, shape=["B"])
    assert field.dtype == ["int64"]
    assert tc.FieldSpec(dtype=[torch.float16, "bfloat16"], shape=["B"]).dtype == ["float16", "bfloat16"]
    spec = tc.BatchSpec(name="s", fields={"x": field})
    assert tc.check({"x": torch.zeros(2, dtype=torch.long)}, spec).ok
    with pytest.raises(tc.SpecError, match="unknown dtype 'complex64'"):
        tc.BatchSpec(name="s", fields={"x": {"dtype": torch.complex64, "shape": ["B"]}})


@pytest.mark.parametrize(("field", "extra", "message"), [
    ({"max": 5, "severity": {"above_maxx": "warning"}}, {},
     r"fields\.x\.severity: severity: 'above_maxx' is not a code this field's options report \(did you mean 'above_max'\?\)"),
    ({"max": 5, "hints": {"abov_max": "h"}}, {},
     r"fields\.x\.hints: unknown violation code 'abov_max' in hints \(did you mean 'above_max'\?\)"),
    ({}, {"batch_dim": "b"}, r"batch_dim 'b' does not appear in any field's shape \(did you mean 'B'\?\)"),
])
def test_codes_in_severity_and_hints_and_the_batch_dim_get_the_closest_name(field, extra, message):
    with pytest.raises(tc.SpecError, match=message):
        tc.BatchSpec(name="s", fields={"x": {"dtype": "int64", "shape": ["B"], **field}}, **extra)


@pytest.mark.parametrize("columns", ["0", "1"])
def test_a_table_at_a_width_of_nothing_still_prints_the_verdict(tmp_path, capsys, monkeypatch, columns):
    """COLUMNS=0 printed nothing at all (exit code 1 with no word of why); COLUMNS=1 one letter a line."""
    torch.save(_ce(True), tmp_path / "b.pt")
    monkeypatch.setenv("COLUMNS", columns)
    assert main(["check", "cross-entropy", str(tmp_path / "b.pt"), "--format", "table", "--backend", "torch"]) == 1
    out = capsys.readouterr().out
    assert "1 violation for cross-entropy" in " ".join(out.split())
    assert "target[1]" in out


def test_a_dataset_key_with_control_characters_reaches_the_errors_note_escaped():
    """Python prints an exception's notes as they are: a dataset keyed by file names put a raw ESC
    sequence on the terminal through 'dataset indices of the bad samples: ...'."""
    key = "doc\x1b]0;pwned\x07\x9b.json"
    dataset = {key: {"input": torch.randn(3), "target": torch.tensor(7)}}
    collate = tc.ValidatingCollate(tc.load_spec("cross-entropy"), backend="torch", warmup=False)
    loader = torch.utils.data.DataLoader(tc.IndexedDataset(dataset), batch_size=1, sampler=[key], collate_fn=collate)
    with pytest.raises(tc.BatchValidationError) as info:
        next(iter(loader))
    (note,) = info.value.__notes__
    assert note == "dataset indices of the bad samples: doc\\x1b]0;pwned\\x07\\x9b.json (sample 0)"


def test_guard_reads_the_batch_among_several_mapping_arguments():
    """forward(batch, options): guard validated nothing of the batch (two mappings: 'every field missing')."""

    class Model(torch.nn.Module):
        def forward(self, batch, options):
            return batch["input"]

    model = Model()
    handle = tc.guard(model, tc.load_spec("cross-entropy"), backend="torch")
    model(_ce(False), {"lr": 0.1})
    with pytest.raises(tc.BatchValidationError, match=r"target\[1\]: target <= C - 1"):
        model(_ce(True), {"lr": 0.1})
    handle.remove()


def test_a_closed_stderr_never_sends_messages_into_stdout(tmp_path, capsys, monkeypatch):
    """print(file=None) writes to stdout: with stderr closed (2>&-), infer's 'left out' notes landed in
    the YAML it prints, and an error line in check's output."""
    torch.save({"x": torch.ones(2, 3), "not a name": torch.zeros(2)}, tmp_path / "b.pt")
    monkeypatch.setattr(sys, "stderr", None)
    assert main(["infer", str(tmp_path / "b.pt")]) == 0
    out = capsys.readouterr().out
    assert "tritoncheck infer:" not in out and out.startswith("# Draft contract")
    assert main(["check", "cross-entropy", str(tmp_path / "missing.pt")]) == 2
    assert capsys.readouterr().out == ""


def test_a_spec_changed_with_model_copy_is_checked_as_a_new_one():
    """docs/errors.md adds a rule with model_copy(update=...), which pydantic does not validate: a field
    given as a dict stayed a dict ('dict' object has no attribute 'shape' at the first batch) and a
    misspelled key was kept without a word."""
    spec = tc.load_spec("cross-entropy")
    with pytest.raises(tc.SpecError, match=r"fields\.x\.shape: Field required"):
        spec.model_copy(update={"fields": {**spec.fields, "x": {"dtype": "int64"}}})
    with pytest.raises(tc.SpecError, match=r"rule: unknown key \(did you mean 'rules'\?\)"):
        spec.model_copy(update={"rule": []})
    with pytest.raises(tc.SpecError, match=r"rules\.1: unknown name\(s\) \['targt'\].*did you mean 'target'"):
        spec.model_copy(update={"rules": [*spec.rules, tc.RuleSpec(rule="targt >= 0")]})
    warned = spec.model_copy(update={"rules": [*spec.rules, {"rule": "target != 2", "severity": "warning"}]})
    assert isinstance(warned.rules[-1], tc.RuleSpec)
    report = tc.check({"input": torch.randn(2, 3), "target": torch.tensor([0, 2])}, warned)
    assert report.ok and [v.severity for v in report.warnings] == ["warning"]
    assert spec.model_copy(deep=True) == spec


def test_a_misspelled_backend_is_refused_when_guard_or_checked_is_set_up():
    """Not at the first batch, deep in a training run (ValidatingCollate already refuses it up front)."""
    spec = tc.load_spec("cross-entropy")
    with pytest.raises(ValueError, match="backend must be one of 'auto', 'torch', 'c', 'triton', got 'tritn'"):
        tc.checked(spec, backend="tritn")
    with pytest.raises(ValueError, match="got 'tritn'"):
        tc.guard(torch.nn.Linear(2, 2), spec, backend="tritn")


@pytest.mark.slow  # starts the command (torch's import)
def test_under_the_c_locale_the_table_is_ascii(tmp_path):
    """LC_ALL=C: Python writes UTF-8 anyway (PEP 540), so the table's box drawing put bytes 0x80-0x9f
    (C1 controls to an 8-bit terminal: 0x98 starts a string that swallows what follows) on stdout;
    docs/security.md says none reaches it. Under the C locale the output is ASCII, anything else escaped."""
    torch.save({**_ce(True), "caf\u00e9": torch.zeros(2)}, tmp_path / "b.pt")
    done = subprocess.run([sys.executable, "-m", "tritoncheck.cli", "check", "cross-entropy", "b.pt", "--format",
                           "table", "--backend", "torch"], cwd=tmp_path, capture_output=True, timeout=300,
                          env={**os.environ, "LC_ALL": "C", "LANG": "C", "COLUMNS": "120"})
    assert done.returncode == 1, done.stderr
    assert max(done.stdout) < 0x80
    assert b"target[1]" in done.stdout and b"caf\\xe9" in done.stdout
    missing = subprocess.run([sys.executable, "-m", "tritoncheck.cli", "check", "cross-entropy", "caf\u00e9\u2026.pt"],
                             cwd=tmp_path, capture_output=True, timeout=300, env={**os.environ, "LC_ALL": "C"})
    assert missing.stderr == b"tritoncheck: error: batch file not found: caf\\xe9\\u2026.pt\n"
