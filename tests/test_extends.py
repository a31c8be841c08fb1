"""`extends:` in spec files: field-by-field overrides, removals, appended rules, clear errors."""

from __future__ import annotations

import os
import textwrap
import traceback

import pytest
import torch

import tritoncheck as tc
from tritoncheck.spec.extends import read_spec


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
    (tmp_path / "sub" / "common").mkdir(parents=True)
    _write(tmp_path / "sub" / "common" / "base.yml", """\
        name: base
        fields:
          x: {dtype: float, shape: [B, D], min: 0, max: 1, finite: true}
        """)
    _write(tmp_path / "sub" / "mid.yaml", """\
        extends: common/base.yml
        name: mid
        fields: {x: {max: null}}
        """)
    leaf = _write(tmp_path / "leaf.yaml", """\
        extends: sub/mid.yaml
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


BASE = "name: base\nfields:\n  x: {dtype: float, shape: [B]}\n"


@pytest.fixture
def outside(tmp_path):
    """A spec directory, and a valid base spec outside it."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "elsewhere").mkdir()
    _write(tmp_path / "elsewhere" / "base.yaml", BASE)
    return tmp_path


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_a_base_outside_the_specs_directory_needs_the_opt_in(outside, monkeypatch, how):
    monkeypatch.delenv("TRITONCHECK_EXTENDS_ANYWHERE", raising=False)
    base = outside / "elsewhere" / "base.yaml"
    ref = {"dotdot": "../elsewhere/base.yaml", "absolute": str(base), "symlink": "link.yaml"}[how]
    if how == "symlink":
        os.symlink(base, outside / "specs" / "link.yaml")
    path = _write(outside / "specs" / "mine.yaml", f"extends: {ref}\nname: mine\n")
    with pytest.raises(tc.SpecError, match=r"mine\.yaml: extends .*outside the directory of mine\.yaml.*TRITONCHECK_EXTENDS_ANYWHERE=1"):
        read_spec(path)
    monkeypatch.setenv("TRITONCHECK_EXTENDS_ANYWHERE", "1")
    assert set(read_spec(path).fields) == {"x"}


def test_a_symlink_inside_the_directory_is_followed(tmp_path):
    (tmp_path / "v2").mkdir()
    _write(tmp_path / "v2" / "base.yaml", BASE)
    os.symlink(tmp_path / "v2" / "base.yaml", tmp_path / "current.yaml")
    assert set(read_spec(_write(tmp_path / "mine.yaml", "extends: current.yaml\nname: m\n")).fields) == {"x"}


@pytest.mark.parametrize("name", ["credentials", "base.json", "id_rsa.pub", "base.yaml.bak"])
def test_only_yaml_files_are_read_even_with_the_opt_in(tmp_path, monkeypatch, name):
    monkeypatch.setenv("TRITONCHECK_EXTENDS_ANYWHERE", "1")
    _write(tmp_path / name, BASE)
    path = _write(tmp_path / "mine.yaml", f"extends: {name}\nname: mine\n")
    with pytest.raises(tc.SpecError, match=r"mine\.yaml: extends .*(only \.yaml and \.yml|no built-in spec)"):
        read_spec(path)


def test_a_symlink_to_a_file_that_is_not_yaml_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITONCHECK_EXTENDS_ANYWHERE", "1")
    _write(tmp_path / "notes.txt", BASE)
    os.symlink(tmp_path / "notes.txt", tmp_path / "base.yaml")
    with pytest.raises(tc.SpecError, match=r"only \.yaml and \.yml"):
        read_spec(_write(tmp_path / "mine.yaml", "extends: base.yaml\nname: mine\n"))


def test_a_large_base_is_refused_before_it_is_read(tmp_path, monkeypatch):
    big = tmp_path / "big.yaml"
    big.write_text(BASE + "# " + "x" * (2 << 20) + "\n")  # valid YAML, 2 MiB
    path = _write(tmp_path / "mine.yaml", "extends: big.yaml\nname: mine\n")
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda file, *a, **k: opened.append(file) or real_open(file, *a, **k))
    with pytest.raises(tc.SpecError, match=r"big\.yaml: \d+ bytes; a spec file may hold at most 1048576"):
        read_spec(path)
    assert big not in opened and str(big) not in opened


def test_a_base_that_grows_after_the_size_check_is_read_no_further(tmp_path, monkeypatch):
    from tritoncheck.spec import extends as _extends
    _write(tmp_path / "base.yaml", BASE + "# " + "x" * 200 + "\n")
    monkeypatch.setattr(_extends, "MAX_BYTES", 100)
    real_stat = os.stat_result
    monkeypatch.setattr("pathlib.Path.stat", lambda self, **k: real_stat((0o100644, 0, 0, 1, 0, 0, 10, 0, 0, 0)))
    with pytest.raises(tc.SpecError, match=r"more than 100 bytes"):
        _extends.read_yaml(tmp_path / "base.yaml", "base.yaml")


SECRET = "AKIAIOSFODNN7EXAMPLE"


@pytest.mark.parametrize("content", [
    f"aws_access_key_id: {SECRET}\n  oops: [\n",                      # a YAML syntax error
    f"[default]\naws_secret_access_key = {SECRET}\n",                # an INI credentials file
    f"key: !!python/object:os.system {SECRET}\n",                    # a tag safe_load refuses
    f"token: {SECRET}\n\tindented: 1\n",                              # a tab where YAML forbids it
])
def test_an_error_in_a_base_never_quotes_its_content(outside, monkeypatch, content):
    monkeypatch.setenv("TRITONCHECK_EXTENDS_ANYWHERE", "1")
    (outside / "elsewhere" / "creds.yaml").write_text(content)
    path = _write(outside / "specs" / "mine.yaml", "extends: ../elsewhere/creds.yaml\nname: mine\n")
    with pytest.raises(tc.SpecError) as info:
        read_spec(path)
    text = "".join(traceback.format_exception(info.value))
    assert "creds.yaml" in str(info.value) and SECRET not in text
    if "line" in str(info.value):
        assert "not valid YAML at line" in str(info.value)


def test_a_base_that_is_not_utf8_is_named_not_quoted(tmp_path):
    (tmp_path / "base.yaml").write_bytes(b"name: \xff" + SECRET.encode())
    with pytest.raises(tc.SpecError, match=r"base\.yaml: not UTF-8 text \(at byte 6\)") as info:
        read_spec(_write(tmp_path / "mine.yaml", "extends: base.yaml\nname: mine\n"))
    assert SECRET not in str(info.value) and "xff" not in str(info.value)


@pytest.mark.parametrize("text", [
    "name: s\nfields:\n  x: {dtype: int64, shape: [B]}\n  x: {dtype: int32, shape: [B]}\n",
    "name: s\nfields:\n  x: {dtype: int64, shape: [B], max: 3, max: 9}\n",
    "name: s\nname: t\nfields:\n  x: {dtype: int64, shape: [B]}\n",
])
def test_a_key_given_twice_is_a_spec_error_not_the_last_one_silently(tmp_path, text):
    """YAML loaders keep the last of two equal keys: a field written twice (or `max` twice) was the
    second one without a word."""
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(tc.SpecError, match=r"s\.yaml: a key appears twice in one mapping \(lines \d+ and \d+\)"):
        read_spec(tmp_path / "s.yaml")
