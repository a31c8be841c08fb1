"""`extends:` in spec files: field-by-field overrides, removals, appended rules, clear errors."""

from __future__ import annotations

import textwrap

import pytest
import torch

import tritoncheck as tc
from tritoncheck._spec import read_spec


def _write(path, text):
    path.write_text(textwrap.dedent(text))
    return path


def test_extends_a_builtin_with_overrides(tmp_path):
    path = _write(tmp_path / "mine.yaml", """\
        extends: bert-sequence-classification
        name: my-classifier
        params: {num_labels: 7, max_len: 16}
        fields:
          token_type_ids: null
          labels: {max: num_labels - 2, hints: {below_min: labels start at 0}}
        rules:
          - rule: L <= max_len
            code: sequence_too_long
        """)
    spec = tc.load_spec(path, vocab_size=100, max_position_embeddings=32, type_vocab_size=2)
    base = tc.load_spec("bert-sequence-classification", vocab_size=100, max_position_embeddings=32,
                        type_vocab_size=2, num_labels=7)
    assert spec.name == "my-classifier"
    assert "token_type_ids" not in spec.fields
    labels = spec.fields["labels"]
    assert labels.max == "num_labels - 2" and labels.dtype == base.fields["labels"].dtype  # other keys kept
    assert labels.hints["below_min"] == "labels start at 0" and "above_max" in labels.hints  # hints merge per code
    assert [r.rule for r in spec.rules] == [r.rule for r in base.rules] + ["L <= max_len"]
    batch = {"input_ids": torch.ones(2, 20, dtype=torch.int64), "labels": torch.tensor([0, 6])}
    codes = {v.code for v in tc.check(batch, spec, backend="torch").violations}
    assert codes == {"above_max", "sequence_too_long"}  # label 6 > 7 - 2, and L=20 > max_len
    batch["token_type_ids"] = torch.zeros(2, 20, dtype=torch.int64)
    assert "unexpected_field" in {v.code for v in tc.check(batch, spec, backend="torch").violations}


def test_removing_a_field_drops_the_rules_that_name_it(tmp_path):
    path = _write(tmp_path / "nomask.yaml", """\
        extends: bert-sequence-classification
        fields: {attention_mask: null}
        """)
    spec = read_spec(path)
    assert spec.name == "bert-sequence-classification"  # inherited when not overridden
    assert all("attention_mask" not in r.rule for r in spec.rules) and spec.rules


def test_relative_chain_and_null_key_resets(tmp_path):
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "base.yaml", """\
        name: base
        fields:
          x: {dtype: float, shape: [B, D], min: 0, max: 1, finite: true}
        """)
    _write(tmp_path / "sub" / "mid.yaml", """\
        extends: ../base.yaml
        name: mid
        fields: {x: {max: null}}
        """)
    leaf = _write(tmp_path / "sub" / "leaf.yaml", """\
        extends: mid.yaml
        name: leaf
        fields: {y: {dtype: int64, shape: [B]}}
        """)
    spec = read_spec(leaf)
    assert spec.name == "leaf" and spec.fields["x"].max is None and spec.fields["x"].min == 0
    assert set(spec.fields) == {"x", "y"}


def test_cycle_is_a_spec_error_naming_the_files(tmp_path):
    _write(tmp_path / "a.yaml", "extends: b.yaml\nname: a\n")
    _write(tmp_path / "b.yaml", "extends: a.yaml\nname: b\n")
    with pytest.raises(tc.SpecError, match=r"a\.yaml: extends cycle: .*a\.yaml -> .*b\.yaml -> .*a\.yaml"):
        read_spec(tmp_path / "a.yaml")


def test_missing_base_is_a_spec_error_naming_the_file(tmp_path):
    path = _write(tmp_path / "orphan.yaml", "extends: no-such-spec\nname: orphan\n")
    with pytest.raises(tc.SpecError, match=r"orphan\.yaml: extends 'no-such-spec': no such file"):
        read_spec(path)
    path = _write(tmp_path / "bad.yaml", "extends: [bert-sequence-classification]\nname: bad\n")
    with pytest.raises(tc.SpecError, match=r"bad\.yaml: extends must be"):
        read_spec(path)


def test_merged_result_is_validated_as_one_spec(tmp_path):
    path = _write(tmp_path / "typo.yaml", """\
        extends: bert-sequence-classification
        fields: {labels: {dtype: int65}}
        """)
    with pytest.raises(tc.SpecError, match=r"(?s)typo\.yaml: .*fields\.labels\.dtype"):
        read_spec(path)
