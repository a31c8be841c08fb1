"""Reports and messages, tested line by line (as jaxtyping tests its messages)."""

from __future__ import annotations

import json

import pytest
import torch

import tritoncheck as tc

LV3 = dict(vocab_size=50, max_position_embeddings=20, pad_token_id=1, type_vocab_size=1, max_2d_position_embeddings=1024,
           num_channels=3, input_size=8, num_labels=3)


def lv3_batch(b=8, n=6):
    return {"input_ids": torch.full((b, n), 7), "bbox": torch.tensor([10, 20, 30, 40]).repeat(b, n, 1),
            "labels": torch.zeros(b, n, dtype=torch.long)}


@pytest.fixture(scope="module")
def lv3():
    return tc.load_spec("layoutlmv3-token-classification", **LV3)


def test_messages_line_by_line(lv3):
    b = lv3_batch()
    b["input_ids"][2, 3] = 50
    b["input_ids"][4, 0] = 51
    b["labels"][5, 1] = -1
    b["bbox"][3, 0] = torch.tensor([100, 200, 30, 10])
    b["attention_mask"] = torch.ones(8, 7, dtype=torch.long)
    lines = str(tc.check(b, lv3)).splitlines()
    assert lines == [
        "3 errors, 2 warnings for layoutlmv3-token-classification (B=8 (from input_ids), L=6 (from input_ids))",
        "  attention_mask.shape[1]: attention_mask axis 1 is L=7, but L=6 (from input_ids); shape (8, 7) (found 7)",
        "    [code=dim_mismatch, count=1, value=7]",
        "  input_ids[2, 3]: input_ids <= vocab_size - 1 = 49 (found 50); 2 element(s) in sample(s) 2, 4",
        "    hint: ids past the vocabulary usually mean tokens were added to the tokenizer without "
        "model.resize_token_embeddings(len(tokenizer)), or tokenizer and model come from different checkpoints",
        "    [code=above_max, count=2, value=50]",
        "  labels[5, 1]: labels >= 0 or one of [-100] (found -1); 1 element(s) in sample(s) 5",
        "    hint: -1 where -100 was meant? -100 is the ignore index of PyTorch's cross-entropy and Hugging Face models",
        "    [code=below_min, count=1, value=-1]",
        "  warning: bbox[3, 0]: bbox[..., 0] <= bbox[..., 2] (found 100); 1 element(s) in sample(s) 3",
        "    hint: x1 < x0 - boxes may be (x, y, width, height) instead of (x0, y0, x1, y1)",
        "    [code=box_corners, count=1, value=100]",
        "  warning: bbox[3, 0]: bbox[..., 1] <= bbox[..., 3] (found 200); 1 element(s) in sample(s) 3",
        "    hint: y1 < y0 - boxes may be (x, y, width, height) instead of (x0, y0, x1, y1)",
        "    [code=box_corners, count=1, value=200]",
        "  not checked because of the above: attention_mask in [0, 1]; any(attention_mask != 0, dim=L)",
    ]


def test_shape_error_names_the_bound_dims():
    spec = tc.load_spec("cross-entropy")
    report = tc.check({"input": torch.randn(8, 3), "target": torch.zeros(6, dtype=torch.long)}, spec)
    (v,) = report.violations
    assert (v.code, v.location, v.value) == ("dim_mismatch", "target.shape[0]", 6)
    assert v.rule == "target axis 0 is N=6, but N=8 (from input); shape (6,)"
    assert str(report).splitlines()[0] == "1 violation for cross-entropy (N=8 (from input), C=3 (from input))"


def test_fixed_size_names_its_parameter(lv3):
    b = lv3_batch(2, 4)
    b["pixel_values"] = torch.zeros(2, 3, 16, 16)
    v, w = tc.check(b, lv3).violations
    assert w.location == "pixel_values.shape[3]"
    assert v.message == "pixel_values.shape[2]: pixel_values axis 2 must be 8 (input_size), got 16 (shape (2, 3, 16, 16)) (found 16)"


def test_sample_list_is_capped():
    target = torch.full((30,), 9)
    v = tc.check({"input": torch.randn(30, 3), "target": target}, tc.load_spec("cross-entropy")).violations[0]
    assert v.count == 30 and len(v.samples) == 30
    assert v.message.endswith("30 element(s) in sample(s) 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 ... and 20 more\n"
                              "    hint: a class index >= C, the number of classes in input (1-based labels?)")


def test_valid_report_str_and_dict(lv3):
    report = tc.check(lv3_batch(2, 4), lv3, backend="torch")
    assert report.ok and report.codes == set()
    assert str(report) == "batch is valid for layoutlmv3-token-classification (B=2 (from input_ids), L=4 (from input_ids))"
    assert report.to_dict() == {
        "schema": "tritoncheck.report/1", "kind": "check",
        "spec": "layoutlmv3-token-classification", "ok": True, "errors": 0, "warnings": 0, "backend": "torch",
        "dims": {"B": {"size": 2, "from": "input_ids"}, "L": {"size": 4, "from": "input_ids"}},
        "skipped": [], "violations": [], "unchecked": [],
    }


def test_to_json_handles_nan_tuples_and_none():
    b = {"input": torch.tensor([[0.0, float("nan")], [1.0, 2.0]]), "target": torch.tensor([[0], [1]])}
    data = json.loads(tc.check(b, tc.load_spec("cross-entropy")).to_json())
    assert [(v["code"], v["index"], v["value"]) for v in data["violations"]] == [
        ("rank", None, "(2, 1)"), ("non_finite", [0, 1], "nan")]
    assert data["violations"][0]["hint"].startswith("an extra size-1 axis")


@pytest.mark.parametrize(
    "name, mutate, code, hint",
    [
        ("boxes in pixels", lambda b: b["bbox"].__setitem__((0, 0, 2), 1700), "above_max", "bbox looks like pixels"),
        ("xywh boxes", lambda b: b["bbox"].__setitem__((0, 0), torch.tensor([500, 500, 40, 12])), "box_corners",
         "(x, y, width, height)"),
        ("-1 for -100", lambda b: b["labels"].__setitem__((1, 2), -1), "below_min", "-1 where -100 was meant?"),
        ("id past vocab", lambda b: b["input_ids"].__setitem__((1, 1), 50), "above_max", "resize_token_embeddings"),
        ("float ids", lambda b: b.__setitem__("input_ids", b["input_ids"].float()), "dtype", "must be integers"),
    ],
)
def test_hints_for_known_mistakes(lv3, name, mutate, code, hint):
    b = lv3_batch(2, 4)
    mutate(b)
    hints = {v.code: v.hint for v in tc.check(b, lv3).violations}
    assert hint in hints[code]


def test_channels_last_conv_input_gets_the_transposed_axes_hint():
    spec = tc.load_spec("conv1d-classifier", in_channels=4, num_classes=2)
    (v,) = tc.check({"inputs": torch.randn(2, 16, 4), "labels": torch.tensor([0, 1])}, spec).violations
    assert (v.code, v.location) == ("shape", "inputs.shape[1]")
    assert v.hint == "axis 2 has the expected size 4: the axes look transposed (channels-last input?)"


def test_rank_hints_for_an_extra_or_missing_unit_axis():
    (v,) = tc.check({"input": torch.randn(4, 3), "target": torch.zeros(4, 1, dtype=torch.long)},
                    tc.load_spec("cross-entropy")).violations
    assert v.hint == "an extra size-1 axis, e.g. (N, 1) where (N,) is expected: squeeze it (.squeeze(1))"
    (v,) = tc.check({"input": torch.randn(4, 1), "target": torch.randn(4)}, tc.load_spec("mse")).violations
    assert v.code == "rank" and v.hint.startswith("one axis is missing")


def test_int32_target_hint():
    (v,) = tc.check({"input": torch.randn(2, 3), "target": torch.tensor([0, 1], dtype=torch.int32)},
                    tc.load_spec("cross-entropy")).violations
    assert v.code == "dtype" and ".long()" in v.hint


def test_error_exposes_structured_errors():
    with pytest.raises(tc.BatchValidationError) as err:
        tc.validate({"input": torch.randn(2, 3), "target": torch.tensor([0, 3])}, tc.load_spec("cross-entropy"))
    (e,) = err.value.errors()
    assert {k: e[k] for k in ("field", "code", "rows", "count", "index", "value")} == {
        "field": "target", "code": "above_max", "rows": [1], "count": 1, "index": [1], "value": 3}
    assert str(err.value).startswith("1 violation for cross-entropy")
    assert type(err.value).__module__ == "tritoncheck"


def test_rich_table_has_a_row_per_violation():
    from rich.console import Console

    report = tc.check({"input": torch.randn(2, 3), "target": torch.tensor([5, 3])}, tc.load_spec("cross-entropy"))
    console = Console(width=200, record=True)
    console.print(report.table())
    text = console.export_text()
    assert "target[0]" in text and "above_max" in text and "0, 1" in text


def test_error_rebuilt_from_text_as_torch_dataloader_does_keeps_message_without_report():
    # torch.utils.data re-raises a worker's exception as type(exc)(traceback_text)
    err = tc.BatchValidationError("Caught BatchValidationError in DataLoader worker process 0.\n...")
    assert err.report is None
    assert err.errors() == []
    assert "DataLoader worker" in str(err)


# --- terminals and notebooks ------------------------------------------------------------------------

EXAMPLES = __import__("pathlib").Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def example_report():
    """The README's bad LayoutLMv3 batch: long rules, hints and names such as config.num_labels."""
    config = json.loads((EXAMPLES / "layoutlmv3_config.json").read_text())
    batch = torch.load(EXAMPLES / "layoutlmv3_bad_batch.pt", weights_only=True)
    report = tc.check(batch, tc.load_spec("layoutlmv3-token-classification", config=config), backend="torch")
    assert not report.ok
    return report


def rendered(obj, width):
    from rich.console import Console

    console = Console(width=width, record=True, file=__import__("io").StringIO())
    console.print(obj)
    return console.export_text()


@pytest.mark.parametrize("width", [200, 100, 80, 60, 40])
def test_report_at_any_width_splits_no_word(example_report, width):
    text = rendered(example_report, width)
    assert max(map(len, text.splitlines())) <= width
    parts = [p for v in example_report.violations for p in (v.location, v.code, v.rule, v.hint, str(v.value))]
    words = {w.strip(",;:()") for p in parts for w in p.split() if len(w) <= width - 6}
    missing = sorted(w for w in words if w not in text)
    assert not missing, f"split at {width} columns: {missing}"
    assert "config.num_labels" in text


def test_report_at_80_columns_is_still_a_table(example_report):
    text = rendered(example_report, 80)
    assert "┃ where" in text and "no_attended_position" in text
    assert "┃ location" in rendered(example_report, 200)  # one column per item when there is room


def test_notebook_html_escapes_everything():
    v = tc.Violation(field="<img src=x onerror=alert(1)>", code="above_max", rule="x <= 1 & <u>", samples=(0,),
                     index=(0,), value="<script>", hint="<script>alert(1)</script>")
    html = tc.Report(spec="s<em>", violations=(v,))._repr_html_()
    assert "<script" not in html and "<img" not in html and "<u>" not in html and "<em>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<table>" in html
    assert tc.Report(spec="ok-spec")._repr_html_().startswith("<p style='color:green'>batch is valid")


def test_validation_error_renders_its_report_in_notebooks_and_rich():
    with pytest.raises(tc.BatchValidationError) as err:
        tc.validate({"input": torch.randn(2, 3), "target": torch.tensor([0, 3])}, tc.load_spec("cross-entropy"))
    assert "<table>" in err.value._repr_html_() and "target[1]" in err.value._repr_html_()
    assert "above_max" in rendered(err.value, 80)
    bare = tc.BatchValidationError("Caught BatchValidationError in worker\n\x1b[31mred")
    assert "\\x1b[31mred" in rendered(bare, 80) and "\\x1b" in bare._repr_html_()


def test_an_optional_field_passed_as_none_reads_as_left_out():
    """`labels=None` printed 'batch is valid' then 'not checked because of the above: labels >= 0; ...' with
    nothing above, where the absent key printed nothing; the HTML left the note out."""
    spec = tc.load_spec("bert-sequence-classification", vocab_size=100, max_position_embeddings=16,
                        type_vocab_size=2, num_labels=3)
    ids = torch.ones(2, 4, dtype=torch.long)
    none, absent = tc.check({"input_ids": ids, "labels": None}, spec), tc.check({"input_ids": ids}, spec)
    assert str(none) == str(absent) == "batch is valid for bert-sequence-classification (B=2 (from input_ids), L=4 (from input_ids))"
    assert none.skipped == absent.skipped == () and none._repr_html_() == absent._repr_html_()


def test_checks_not_run_on_a_valid_batch_say_why_in_text_and_html():
    spec = tc.BatchSpec.model_validate({"name": "t", "fields": {
        "a": {"dtype": "int64", "shape": ["B", "T"], "optional": True}, "b": {"dtype": "int64", "shape": ["B"]}},
        "rules": [{"rule": "T <= 8"}, {"rule": "b <= T"}]})
    report = tc.check({"b": torch.ones(2, dtype=torch.long)}, spec)
    note = "not checked (they need a size that no field of this batch gives): T <= 8; b <= T"
    assert str(report) == f"batch is valid for t (B=2 (from b))\n  {note}"
    assert f"<p>{note.replace('<', '&lt;')}</p>" in report._repr_html_()
