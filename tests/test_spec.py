"""Specs: YAML round trips, mistakes reported with file and key path, hostile files, parameters."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch
import yaml

import tritoncheck as tc
from tritoncheck.spec.schema import spec_from_dict
from tritoncheck.spec.extends import read_spec
from tritoncheck.plan.lower import compile_plan


@pytest.mark.parametrize("name", tc.builtin_spec_names())
def test_builtin_round_trips_through_yaml(name, tmp_path):
    spec = read_spec(name)
    path = tmp_path / f"{name}.yaml"
    path.write_text(spec.to_yaml())
    assert read_spec(path) == spec
    assert yaml.safe_load(spec.to_yaml())["name"] == name


def test_builtin_names_are_the_documented_ones():
    assert set(tc.builtin_spec_names()) >= set([
        "layoutlmv3-token-classification", "bart-seq2seq", "t5-seq2seq", "bert-sequence-classification",
        "roberta-sequence-classification", "conv1d-classifier", "cross-entropy", "nll", "bce", "bce-with-logits", "mse",
        "ctc",
    ])


def write(tmp_path, text: str):
    path = tmp_path / "my_spec.yaml"
    path.write_text(text)
    return path


GOOD = """\
name: mine
params: {vocab_size: null}
fields:
  input_ids: {dtype: int64, shape: [B, L], min: 0, max: vocab_size - 1}
"""


@pytest.mark.parametrize(
    "text, where, what",
    [
        (GOOD.replace("dtype: int64", "dtype: int65"), "fields.input_ids.dtype", "unknown dtype 'int65'"),
        (GOOD.replace("[B, L]", "[B, -3]"), "fields.input_ids.shape", "a fixed size must be >= 0"),
        (GOOD.replace("[B, L]", "[B, 'L +']"), "fields.input_ids.shape", "not a valid expression"),
        (GOOD.replace("min: 0", "minimum: 0"), "fields.input_ids.minimum", "unknown key (did you mean 'min'?)"),
        (GOOD.replace("name: mine", "name: mine\nfeilds: {}"), "feilds", "unknown key (did you mean 'fields'?)"),
        ("extend: cross-entropy\n" + GOOD, "extend", "unknown key (did you mean 'extends'?)"),
        (GOOD.replace("dtype: int64", "dtpye: int64"), "fields.input_ids.dtpye", "unknown key (did you mean 'dtype'?)"),
        (GOOD.replace("min: 0", "optinal: true"), "fields.input_ids.optinal", "unknown key (did you mean 'optional'?)"),
        (GOOD + "rules: [{rule: 'input_ids >= 0', feild: input_ids}]", "rules.0.feild", "(did you mean 'field'?)"),
        (GOOD + "rules: ['input_ids < vocab_sise']", "rules.0", "unknown name(s) ['vocab_sise'] in 'input_ids < vocab_sise' "
         "(did you mean 'vocab_size'?)"),
        (GOOD + "rules: ['input_idz >= 0']", "rules.0", "unknown name(s) ['input_idz'] in 'input_idz >= 0' "
         "(did you mean 'input_ids'?)"),
        (GOOD + "rules: [{rule: 'input_ids >= 0', field: input_id}]", "rules.0",
         "field 'input_id' is not in the spec (did you mean 'input_ids'?)"),
        (GOOD.replace("max: vocab_size - 1", "max: vocab - 1"), "fields.input_ids.max", "unknown name(s) ['vocab']"),
        (GOOD.replace("max: vocab_size - 1", "max: vocab_sise - 1"), "fields.input_ids.max",
         "unknown name(s) ['vocab_sise'] (did you mean 'vocab_size'?); a bound may use parameters (vocab_size) and dims"),
        (GOOD + "rules: [{rule: 'input_ids >= 0', code: 'not a code'}]", "rules.0.code", "must be an identifier"),
        (GOOD.replace("min: 0", "min: 0, hints: {too_big: x}"), "fields.input_ids.hints", "unknown violation code 'too_big'"),
        (GOOD.replace("[B, L]", "[B, L, B]"), "fields.input_ids.shape", "repeats a dim"),
    ],
)
def test_mistakes_name_file_and_key_path(tmp_path, text, where, what):
    path = write(tmp_path, text)
    with pytest.raises(tc.SpecError) as err:
        tc.load_spec(path, vocab_size=10)
    msg = str(err.value)
    assert str(path) in msg or "mine" in msg
    assert where in msg and what in msg


@pytest.mark.parametrize("build", [
    lambda: tc.BatchSpec(name="mine", fields={"ids": {"dtype": "int64", "shape": ["B"], "mx": 3}}),
    lambda: tc.BatchSpec.model_validate({"name": "mine", "fields": {"ids": {"dtype": "int64", "shape": ["B"], "mx": 3}}}),
    lambda: tc.BatchSpec(name="mine", fields={"ids": tc.FieldSpec(dtype="int64", shape=["B"], mx=3)}),
])
def test_a_spec_built_in_python_raises_spec_error_with_the_suggestion(build):
    with pytest.raises(tc.SpecError) as err:
        build()
    assert "mx: unknown key (did you mean 'max'?); known: dtype, shape, optional, min, max" in str(err.value)
    assert "pydantic" not in str(err.value)


def test_python_built_spec_errors_name_the_spec_and_key_path():
    with pytest.raises(tc.SpecError) as err:
        tc.BatchSpec(name="mine", fields={"ids": {"dtype": "int64", "shape": ["B"]}}, rules=["idz >= 0"])
    assert str(err.value) == ("mine: 1 error(s) in spec\n"
                              "  rules.0: unknown name(s) ['idz'] in 'idz >= 0' (did you mean 'ids'?)")
    with pytest.raises(tc.SpecError, match=r"^RuleSpec: 1 error\(s\) in spec\n  severity: "):
        tc.RuleSpec(rule="ids >= 0", severity="fatal")


@pytest.mark.parametrize("config", ["config.json", Path("model/config.json")])
def test_a_config_path_is_reported_as_a_path(config):
    with pytest.raises(tc.SpecError) as err:
        tc.load_spec("bert-sequence-classification", config=config)
    assert f"config is a path ({str(config)!r}), not a config; pass the config itself" in str(err.value)
    assert "missing parameter" not in str(err.value)


def test_yaml_syntax_error_names_the_file(tmp_path):
    path = write(tmp_path, "name: [unclosed\n")
    with pytest.raises(tc.SpecError, match="my_spec.yaml: not valid YAML"):
        read_spec(path)


def test_top_level_must_be_a_mapping(tmp_path):
    with pytest.raises(tc.SpecError, match="a spec must be a mapping"):
        read_spec(write(tmp_path, "- just\n- a list\n"))


def test_missing_file_and_unknown_builtin():
    with pytest.raises(tc.SpecError, match="spec file not found"):
        read_spec("/no/such/spec.yaml")
    with pytest.raises(tc.SpecError, match="no built-in spec named 'bert'; built-ins: bart-seq2seq"):
        read_spec("bert")


HOSTILE = [
    "__import__('os').system('touch {marker}')",
    "input_ids.__class__",
    "input_ids.__class__.__bases__[0].__subclasses__()",
    "9**9**9",
    "(" * 10000 + "input_ids" + ")" * 10000,
    "-" * 60 + "input_ids",
    "(lambda: 1)()",
    "[x for x in input_ids]",
    "input_ids if input_ids else 0",
    "input_ids > '" + "a" * 100_000 + "'",
    "open('{marker}', 'w')",
    "input_ids[0:2] > 0",
    "input_ids @ input_ids",
    "input_ids > 99999999999999999999999",
    "sum(input_ids, dim=__import__('os'))",
    "abs(input_ids, x=1)",
]


@pytest.mark.parametrize("rule", HOSTILE)
def test_hostile_rules_are_rejected_before_anything_runs(tmp_path, rule):
    marker = tmp_path / "pwned"
    data = {"name": "evil", "fields": {"input_ids": {"dtype": "int64", "shape": ["B"]}},
            "rules": [rule.replace("{marker}", str(marker))]}
    with pytest.raises(tc.SpecError) as err:
        spec_from_dict(data, "evil.yaml")
    assert "evil.yaml" in str(err.value) and "rules.0" in str(err.value)
    assert len(str(err.value)) < 2000  # a very long input is not echoed back whole
    assert not marker.exists()


def test_hostile_bounds_and_shapes_are_rejected():
    for field in ({"dtype": "int64", "shape": ["B"], "max": "__import__('os').getpid()"},
                  {"dtype": "int64", "shape": ["9**9**9"]},
                  {"dtype": "int64", "shape": ["B"], "min": "x.__class__"}):
        with pytest.raises(tc.SpecError):
            spec_from_dict({"name": "evil", "fields": {"x": field}}, "evil.yaml")


def test_huge_constant_products_are_refused_when_folded():
    spec = spec_from_dict({"name": "big", "params": {"n": None},
                           "fields": {"x": {"dtype": "int64", "shape": ["B"], "max": "n * n * n * n"}}}, "big.yaml")
    with pytest.raises(tc.SpecError, match="out of range"):
        tc.check({"x": torch.zeros(2, dtype=torch.long)}, spec.with_params(n=2**40))


def test_missing_params_are_named():
    with pytest.raises(tc.SpecError, match=r"missing parameter\(s\) vocab_size, max_position_embeddings"):
        tc.load_spec("bart-seq2seq")


def test_unknown_keyword_param_is_an_error():
    with pytest.raises(tc.SpecError, match=r"unknown parameter\(s\) \['vocab_sise'\]"):
        tc.load_spec("t5-seq2seq", vocab_size=10, vocab_sise=10)


def test_config_object_and_dict_give_the_same_spec():
    fields = dict(vocab_size=30, max_position_embeddings=16, type_vocab_size=2, num_labels=3, hidden_size=99,
                  architectures=["Bert"], some_unrelated=object())
    from_obj = tc.load_spec("bert-sequence-classification", config=types.SimpleNamespace(**fields))
    from_dict = tc.load_spec("bert-sequence-classification", config=fields)
    assert from_obj == from_dict
    assert from_obj.params == {"vocab_size": 30, "max_position_embeddings": 16, "type_vocab_size": 2, "num_labels": 3}


def test_keywords_override_config_and_id2label_gives_num_labels():
    spec = tc.load_spec("bert-sequence-classification",
                        config={"vocab_size": 30, "max_position_embeddings": 16, "type_vocab_size": 2,
                                "id2label": {"0": "a", "1": "b"}},
                        vocab_size=40)
    assert spec.params["vocab_size"] == 40 and spec.params["num_labels"] == 2


def test_config_property_that_raises_is_treated_as_absent():
    class Config:
        vocab_size = 10

        @property
        def max_position_embeddings(self):
            raise AttributeError("unset")

    spec = read_spec("bart-seq2seq").with_params(Config())
    assert spec.missing_params() == ["max_position_embeddings"]


def test_non_scalar_param_is_refused():
    with pytest.raises(tc.SpecError, match="must be a number or string"):
        tc.load_spec("t5-seq2seq", vocab_size=[1, 2])


def test_with_params_does_not_reuse_a_plan_compiled_for_other_params():
    spec = tc.load_spec("conv1d-classifier", in_channels=4, num_classes=3)
    batch = {"inputs": torch.randn(2, 4, 8), "labels": torch.tensor([0, 4])}
    assert tc.check(batch, spec).codes == {"above_max"}
    assert tc.check(batch, spec.with_params(num_classes=5)).ok


def test_equality_ignores_the_cached_plan():
    a = tc.load_spec("cross-entropy")
    tc.check({"input": torch.zeros(2, 3), "target": torch.tensor([0, 1])}, a)
    assert a == tc.load_spec("cross-entropy")


def test_pretty_lists_fields_and_checks():
    text = compile_plan(tc.load_spec("cross-entropy")).pretty()
    assert text.splitlines()[0] == "plan for cross-entropy (batch dim N)"
    assert "  field target: int64 [N]" in text
    assert "data   above_max            target <= C - 1 or one of [-100]   over [N]" in text


def test_unexpected_fields_ignore_round_trips():
    spec = spec_from_dict({"name": "s", "unexpected_fields": "ignore",
                           "fields": {"x": {"dtype": "float", "shape": ["B"]}}}, "s")
    assert spec_from_dict(yaml.safe_load(spec.to_yaml()), "s").unexpected_fields == "ignore"


# ---------------------------------------------------------------------------------------------
# A field's dtype may name a parameter: the model's compute dtype.

DTYPE_PARAM_YAML = """
name: pixels
params: {dtype: float32}
fields:
  pixel_values: {dtype: [dtype], shape: [B, 3], finite: true}
"""


def _dtype_spec(tmp_path, **params):
    path = tmp_path / "pixels.yaml"
    path.write_text(DTYPE_PARAM_YAML)
    return tc.load_spec(path, **params)


def test_a_dtype_parameter_is_the_models_compute_dtype(tmp_path):
    spec = _dtype_spec(tmp_path)
    half = {"pixel_values": torch.zeros(2, 3, dtype=torch.float16)}
    assert tc.check(half, spec).codes == {"dtype"}  # fp16 pixels into an fp32 model crash it
    assert tc.check({"pixel_values": torch.zeros(2, 3)}, spec).ok
    assert tc.check(half, _dtype_spec(tmp_path, dtype=torch.float16)).ok  # a torch.dtype keyword
    assert tc.check(half, _dtype_spec(tmp_path, dtype="float")).ok  # any float, e.g. under autocast


def test_a_dtype_parameter_is_read_from_a_config(tmp_path):
    from transformers import BertConfig

    spec = _dtype_spec(tmp_path)
    assert spec.with_params(BertConfig(dtype=torch.bfloat16)).params["dtype"] == "bfloat16"
    assert spec.with_params({"torch_dtype": "float16"}).params["dtype"] == "float16"  # a transformers 4 config.json
    assert spec.with_params(BertConfig()).params["dtype"] == "float32"  # a config built in-process says None: the default stays


def test_a_dtype_parameter_that_is_no_dtype_is_a_spec_error(tmp_path):
    with pytest.raises(tc.SpecError, match="fields.pixel_values.dtype names parameter dtype, whose value 'banana'"):
        _dtype_spec(tmp_path, dtype="banana")


def test_a_misspelled_dtype_names_its_key_and_the_closest_name(tmp_path):
    path = tmp_path / "typo.yaml"
    path.write_text("name: typo\nfields:\n  x: {dtype: [flaot32], shape: [B]}\n")
    with pytest.raises(tc.SpecError, match=r"fields\.x\.dtype: unknown dtype 'flaot32'.*did you mean 'float32'"):
        tc.load_spec(path)


def test_misspelled_names_get_the_closest_one_from_python():
    with pytest.raises(tc.SpecError, match="did you mean 'bert-sequence-classification'"):
        tc.load_spec("bert-sequence-clasification")
    with pytest.raises(tc.SpecError, match="did you mean 'vocab_size'"):
        tc.load_spec("bert-sequence-classification", vocab_sise=3)


def test_a_config_that_lacks_a_parameter_is_named_as_such():
    with pytest.raises(tc.SpecError, match="which the config does not have; pass them as keywords") as exc:
        tc.load_spec("bert-sequence-classification", config={"vocab_size": 100})
    assert "give config=" not in str(exc.value)


def test_a_misspelled_batch_key_is_named_in_both_violations():
    report = tc.check({"inputs": torch.randn(2, 3), "target": torch.tensor([0, 1])}, tc.load_spec("cross-entropy"))
    unexpected, missing = report.violations
    assert "did you mean 'input'?" in unexpected.rule
    assert missing.code == "missing_field" and missing.hint == "the batch has 'inputs': a misspelling of input?"
