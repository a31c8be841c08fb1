"""Messages that finish the sentence, as the command prints them (issue 21): a misspelled key of a spec
file names the key that was meant."""

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
    assert done.stderr.splitlines()[:4] == [
        "tritoncheck: error: typo.yaml: 3 error(s) in spec",
        "  fields.input_ids.dtype: Field required",
        f"  fields.input_ids.dtpye: unknown key (did you mean 'dtype'?); known: {keys}, monotonic",
        f"  fields.labels.optinal: unknown key (did you mean 'optional'?); known: {keys}, monotonic",
    ]
    (tmp_path / "typo.yaml").write_text(SPEC.replace("dtpye", "dtype").replace("optinal", "optional"))
    done = subprocess.run([sys.executable, "-m", "tritoncheck.cli", "check", "typo.yaml", "b.pt"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.stderr == ("tritoncheck: error: typo.yaml: 1 error(s) in spec\n"
                           "  rules.0: unknown name(s) ['lables'] in 'lables >= 0' (did you mean 'labels'?)\n")
