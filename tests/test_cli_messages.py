"""Messages that finish the sentence, as the command prints them (issue 21): a misspelled key of a spec
file, function or name in a rule, or parameter in a bound names the one that was meant."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

SPEC = """\
name: typo
params: {vocab_size: 10}
fields:
  input_ids: {dtpye: int64, shape: [B, L], max: vocab_size - 1}
  labels: {dtype: int64, shape: [B], optinal: true}
rules:
  - rule: lables >= 0
"""


@pytest.mark.slow  # starts the command
def test_misspelled_spec_keys_get_the_key_that_was_meant(tmp_path):
    (tmp_path / "typo.yaml").write_text(SPEC)
    torch.save({"input_ids": torch.zeros(2, 3, dtype=torch.long)}, tmp_path / "b.pt")
    done = subprocess.run([sys.executable, "-m", "tritoncheck.cli", "check", "typo.yaml", "b.pt"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stdout == ""
    keys = "dtype, shape, optional, min, max, allow, values, finite, hints, severity, description"
    # every mistake in one run: the misspelled keys and the rule's misspelled field name
    assert done.stderr.splitlines() == [
        "tritoncheck: error: typo.yaml: 4 error(s) in spec",
        "  fields.input_ids.dtype: Field required",
        f"  fields.input_ids.dtpye: unknown key (did you mean 'dtype'?); known: {keys}, monotonic, multiple_of",
        f"  fields.labels.optinal: unknown key (did you mean 'optional'?); known: {keys}, monotonic, multiple_of",
        "  rules.0: unknown name(s) ['lables'] in 'lables >= 0' (did you mean 'labels'?)",
    ]
    (tmp_path / "typo.yaml").write_text(SPEC.replace("dtpye", "dtype").replace("optinal", "optional"))
    done = subprocess.run([sys.executable, "-m", "tritoncheck.cli", "check", "typo.yaml", "b.pt"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.stderr == ("tritoncheck: error: typo.yaml: 1 error(s) in spec\n"
                           "  rules.0: unknown name(s) ['lables'] in 'lables >= 0' (did you mean 'labels'?)\n")


def test_misspelled_functions_parameters_and_fields_of_rules_and_bounds_get_the_name_that_was_meant(tmp_path, capsys):
    from tritoncheck.cli import main

    spec = tmp_path / "names.yaml"
    torch.save({"input_ids": torch.zeros(2, 3, dtype=torch.long), "mask": torch.ones(2, 3, dtype=torch.long)},
               tmp_path / "b.pt")
    only = "only the functions any, all, sum, abs, arange, isfinite, present may be called"
    # each mistake as a user makes it, one at a time: the message names what was meant
    cases = [
        ("rules: [{rule: isfnite(input_ids)}]",
         f"rules.0.rule: unknown function 'isfnite' (did you mean 'isfinite'?); {only}"),
        ("rules: [{rule: 'mask.sume(dim=L) > 0'}]",
         f"rules.0.rule: a method such as mask.sume() cannot be called; {only} (write it as the function: sum(mask))"),
        ("rules: [{rule: 'input_ids < vocab_sise'}]",
         "rules.0: unknown name(s) ['vocab_sise'] in 'input_ids < vocab_sise' (did you mean 'vocab_size'?)"),
        ("rules: [{rule: 'input_ids >= 0 where mask_ == 1'}]",
         "rules.0: unknown name(s) ['mask_'] in 'input_ids >= 0 where mask_ == 1' (did you mean 'mask'?)"),
        ("rules: [{rule: 'input_ids >= 0', field: input_id}]",
         "rules.0: field 'input_id' is not in the spec (did you mean 'input_ids'?)"),
    ]
    for rules, line in cases:
        spec.write_text("name: names\nparams: {vocab_size: 10}\nfields:\n"
                        "  input_ids: {dtype: int64, shape: [B, L], max: vocab_size - 1}\n"
                        f"  mask: {{dtype: int64, shape: [B, L]}}\n{rules}\n")
        assert main(["check", str(spec), str(tmp_path / "b.pt")]) == 2
        assert capsys.readouterr() == ("", f"tritoncheck: error: {spec}: 1 error(s) in spec\n  {line}\n"), rules
    spec.write_text("name: names\nparams: {vocab_size: 10}\nfields:\n"
                    "  input_ids: {dtype: int64, shape: [B, L], max: vocab_sise - 1}\n")
    assert main(["check", str(spec), str(tmp_path / "b.pt")]) == 2
    assert capsys.readouterr().err.splitlines()[1] == (
        "  fields.input_ids.max: unknown name(s) ['vocab_sise'] (did you mean 'vocab_size'?); "
        "a bound may use parameters (vocab_size) and dims")
