"""`tritoncheck infer`: drafts from example batches accept their examples and catch a corrupted copy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml
from hypothesis import given
from hypothesis import strategies as st

import tritoncheck as tc
from tritoncheck import cli
from tritoncheck.cli.commands import UsageError
from tritoncheck.cli.infer import infer_yaml
from tritoncheck.spec.schema import spec_from_dict


def _examples(tmp_path, sizes=((4, 12), (4, 9), (3, 15))):
    g = torch.Generator().manual_seed(0)
    paths = []
    for i, (b, length) in enumerate(sizes):
        labels = torch.randint(0, 9, (b, length), generator=g)
        labels[:, 0] = -100
        batch = {
            "input_ids": torch.randint(0, 500, (b, length), generator=g),
            "attention_mask": torch.ones(b, length, dtype=torch.int64),
            "labels": labels,
            "bbox": torch.randint(0, 1000, (b, length, 4), generator=g),
            "pixel_values": torch.randn(b, 3, 8, 8, generator=g),
        }
        if i:
            batch["targets"] = torch.rand(b, 5, generator=g)  # missing from the first batch: optional
        path = tmp_path / f"batch{i}.pt"
        torch.save(batch, path)
        paths.append(str(path))
    return paths


def _infer(capsys, *paths):
    assert cli.main(["infer", *paths]) == 0
    return capsys.readouterr().out


def test_draft_accepts_its_examples_via_the_cli(tmp_path, capsys):
    paths = _examples(tmp_path)
    draft = tmp_path / "draft.yaml"
    draft.write_text(_infer(capsys, *paths))
    for p in paths:
        assert cli.main(["check", str(draft), p]) == 0, capsys.readouterr().out


def test_corrupted_copy_is_flagged(tmp_path, capsys):
    paths = _examples(tmp_path)
    draft = tmp_path / "draft.yaml"
    draft.write_text(_infer(capsys, *paths))
    batch = torch.load(paths[1], weights_only=True)
    batch["labels"][2, 5] = 999
    bad = tmp_path / "bad.pt"
    torch.save(batch, bad)
    capsys.readouterr()
    assert cli.main(["check", "--json", str(draft), str(bad)]) == 1
    report = yaml.safe_load(capsys.readouterr().out)  # JSON is YAML
    assert {(v["field"], v["code"]) for v in report["violations"]} == {("labels", "above_max")}


def test_inferred_bounds_dims_and_comments(tmp_path, capsys):
    text = _infer(capsys, *_examples(tmp_path))
    spec = spec_from_dict(yaml.safe_load(text), "draft")
    f = spec.fields
    assert f["input_ids"].shape == ["B", "L"] and f["labels"].shape == ["B", "L"]
    assert f["bbox"].shape == ["B", "L", 4] and f["pixel_values"].shape == ["B", 3, 8, 8]
    assert f["labels"].allow == [-100] and f["labels"].min == 0 and f["labels"].max == 8
    assert f["attention_mask"].values == [0, 1] and "bool" in f["attention_mask"].dtype
    assert f["pixel_values"].finite and f["pixel_values"].min is None
    assert f["targets"].optional and (f["targets"].min, f["targets"].max) == (0, 1)
    assert not f["input_ids"].optional
    assert "# observed max over 3 batch(es)" in text and "L seen as 12, 9, 15" in text
    assert {r.code for r in spec.rules} == {"all_ignored", "no_attended_position"}


def test_fields_with_different_lengths_get_different_dims():
    batches = [{"src": torch.zeros(2, n, dtype=torch.int64), "tgt": torch.zeros(2, m, dtype=torch.int64)}
               for n, m in ((5, 7), (6, 3))]
    spec = spec_from_dict(yaml.safe_load(infer_yaml(batches)), "draft")
    assert spec.fields["src"].shape == ["B", "L"] and spec.fields["tgt"].shape == ["B", "T"]
    # a size that never varies but two fields share is still a dim; one field's constant stays a number
    batches = [{"a": torch.zeros(2, 16), "b": torch.zeros(2, 16), "c": torch.zeros(2, 16)}]
    spec = spec_from_dict(yaml.safe_load(infer_yaml(batches)), "draft")
    assert spec.fields["a"].shape == ["B", "L"] == spec.fields["c"].shape
    batches = [{"x": torch.zeros(2, 4, 4)}]  # one field never repeats a dim name
    assert spec_from_dict(yaml.safe_load(infer_yaml(batches)), "draft").fields["x"].shape == ["B", 4, 4]


def test_npz_safetensors_and_lists_of_batches(tmp_path, capsys):
    from safetensors.torch import save_file

    np.savez(tmp_path / "a.npz", x=np.arange(12, dtype=np.int32).reshape(3, 4), y=np.array([0.5, 1.5, -2.0]))
    save_file({"x": torch.arange(8, dtype=torch.int32).reshape(2, 4), "y": torch.tensor([1.0, 2.0])}, tmp_path / "b.safetensors")
    torch.save([{"x": torch.zeros(1, 4, dtype=torch.int32), "y": torch.zeros(1)}] * 2, tmp_path / "c.pt")
    text = _infer(capsys, str(tmp_path / "a.npz"), str(tmp_path / "b.safetensors"), str(tmp_path / "c.pt"))
    spec = spec_from_dict(yaml.safe_load(text), "draft")
    assert spec.fields["x"].dtype == ["int32"] and spec.fields["x"].shape == ["B", 4]
    assert spec.fields["x"].max == 11 and spec.fields["y"].dtype == ["float"]
    assert "float64" in text  # the dtype seen is reported even though any float is accepted


def test_nan_floats_and_skipped_fields_still_accept_the_examples():
    batches = [{"x": torch.tensor([[1.0, float("nan")]]), "not-a-name": torch.zeros(1), "meta": "text"}]
    text = infer_yaml(batches)
    spec = spec_from_dict(yaml.safe_load(text), "draft")
    assert not spec.fields["x"].finite and spec.unexpected_fields == "ignore"
    assert "'not-a-name' (not an identifier)" in text and "meta (expected a tensor or numpy array, got str)" in text
    assert tc.check(batches[0], spec, backend="torch").ok


def test_negative_ranges_without_a_sentinel():
    batches = [{"delta": torch.tensor([[-3, -1, 4]])}]
    spec = spec_from_dict(yaml.safe_load(infer_yaml(batches)), "draft")
    assert (spec.fields["delta"].min, spec.fields["delta"].max, spec.fields["delta"].allow) == (-3, 4, [])


@pytest.mark.parametrize("content", [b"not a batch", None])
def test_unreadable_input_is_a_usage_error(tmp_path, capsys, content):
    path = tmp_path / "x.pt"
    if content is not None:
        path.write_bytes(content)
    assert cli.main(["infer", str(path)]) == 2
    assert "tritoncheck: error" in capsys.readouterr().err


def test_batches_without_a_batch_axis_are_a_usage_error(tmp_path, capsys):
    torch.save({"x": torch.tensor(3)}, tmp_path / "s.pt")
    assert cli.main(["infer", str(tmp_path / "s.pt")]) == 2
    assert "batch axis" in capsys.readouterr().err


def test_awkward_field_names():
    batches = [{"on": torch.tensor([[1, 2]]), "B": torch.tensor([[0.5, 0.25]]), "null": torch.tensor([3])}]
    spec = spec_from_dict(yaml.safe_load(infer_yaml(batches)), "draft")
    assert set(spec.fields) == {"on", "B", "null"} and spec.batch_dim == "N"
    assert tc.check(batches[0], spec, backend="torch").ok


DTYPES = [torch.int64, torch.int32, torch.uint8, torch.bool, torch.float32, torch.float16, torch.float64]


def _random_batches(rnd):
    """Random fields: dtypes, ranks, shared and varying sizes, empty batches, NaN/Inf, sentinels, absences."""
    names = rnd.sample(["a", "b", "mask_x", "labels", "attention_mask", "on"], rnd.randint(1, 4))
    kinds = {k: (rnd.choice(DTYPES), rnd.randint(0, 3), [rnd.choice([0, 1, 2, 5]) for _ in range(3)]) for k in names}
    batches = []
    for _ in range(rnd.randint(1, 3)):
        size, batch = rnd.choice([0, 1, 3]), {}
        for k, (dt, rank, dims) in kinds.items():
            if rnd.random() < 0.2:
                continue
            dt = rnd.choice(DTYPES) if rnd.random() < 0.2 else dt  # a dtype that changes between batches
            x = torch.randn(([size] + [d if rnd.random() < 0.7 else rnd.randint(1, 4) for d in dims])[:rank])
            x = x * rnd.choice([0.5, 100])
            if x.numel() and rnd.random() < 0.3:
                x.view(-1)[0] = rnd.choice([float("nan"), float("inf"), -100.0])
            if dt == torch.bool:
                x = x > 0
            elif not dt.is_floating_point:
                x = torch.nan_to_num(x).clamp(0 if dt == torch.uint8 else -120, 120).round()
            batch[k] = x.to(dt)
        batches.append(batch)
    return batches


@given(st.randoms(use_true_random=False))
def test_any_examples_give_a_draft_that_accepts_them(rnd):
    batches = _random_batches(rnd)
    if not any(t.dim() for b in batches for t in b.values()):
        with pytest.raises(UsageError, match="batch axis"):  # the only error infer may raise here
            infer_yaml(batches)
    else:
        spec = spec_from_dict(yaml.safe_load(infer_yaml(batches)), "draft")
        for batch in batches:  # an empty example (B=0) is always flagged as such, and only as such
            assert {v.code for v in tc.check(batch, spec, backend="torch").violations} <= {"empty_batch"}


def test_the_int64_minimum_as_a_sentinel_still_gives_a_draft_that_loads():
    """`any(i != -9223372036854775808)` does not parse (the literal is past int64 before its minus):
    infer exited 3, 'internal error: please report', on a batch holding int64's minimum."""
    batches = [{"i": torch.tensor([[2**62, -2**63], [5, -2**63]])}]
    spec = spec_from_dict(yaml.safe_load(infer_yaml(batches)), "draft")
    assert spec.fields["i"].allow == [-2**63]
    assert tc.check(batches[0], spec, backend="torch").ok
