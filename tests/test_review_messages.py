"""Messages a user read wrong in the user-level review (finding F): each hint gives the conversion its case needs,
a spec that does not compile prints no YAML, `tritoncheck bench` prints no profiler log lines, and a list of
batches is told it is one."""

from __future__ import annotations

import warnings

import pytest
import torch

import tritoncheck as tc
from tritoncheck.cli import main

P = dict(vocab_size=100, max_position_embeddings=16, type_vocab_size=2, num_labels=3)


def hint(batch: dict) -> str:
    spec = tc.load_spec("bert-sequence-classification", **P)
    return tc.check(batch, spec, backend="torch").violations[0].hint


def test_each_refused_tensor_gets_its_own_conversion():
    ids = torch.randint(0, 100, (2, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that nested tensors are a prototype
        nested = torch.nested.nested_tensor([torch.tensor([1, 2]), torch.tensor([3])])
    assert hint({"input_ids": ids.to_sparse()}) == "make it dense in the collate function: x.to_dense()"
    assert hint({"input_ids": torch.empty(2, 4, dtype=torch.long, device="meta")}) == (
        "a meta tensor has a shape but no values: build the batch on a real device (cpu or cuda)")
    assert hint({"input_ids": nested}) == "pad it in the collate function: torch.nested.to_padded_tensor(x, padding)"
    assert hint({"input_ids": ids, "labels": [0, 1]}) == "convert it with torch.as_tensor(...) in the collate function"


def test_a_complex_mask_is_not_told_to_be_floating_point():
    """The mask takes int, bool and float: 'must be floating point' was untrue."""
    assert hint({"input_ids": torch.ones(2, 4, dtype=torch.long), "attention_mask": torch.ones(2, 4, dtype=torch.complex64)}) == (
        "attention_mask cannot be complex: take its real part (.real) or build it as one of the dtypes above")
    spec = tc.BatchSpec.model_validate({"name": "f", "fields": {"x": {"dtype": "float", "shape": ["B"]}}})
    assert tc.check({"x": torch.ones(2, dtype=torch.long)}, spec).violations[0].hint == "x must be floating point: cast with .float()"


def test_specs_of_a_spec_that_does_not_compile_prints_no_yaml(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("name: s\nfields:\n  x: {dtype: float, shape: [B]}\n  z: {dtype: int64, shape: [B, L]}\n"
                    "rules:\n  - rule: sum(x, dim=L) <= 1\n")
    assert main(["specs", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "dim 'L' is not an axis of x" in err


def test_a_list_of_batches_is_told_it_is_one(tmp_path, capsys):
    batches = [{"input_ids": torch.ones(2, 4, dtype=torch.long)}, {"input_ids": torch.ones(3, 4, dtype=torch.long)}]
    assert hint(batches) == ("a list of batches, not a batch: check each one (tc.check(b, spec) for b in batches; "
                             "`tritoncheck check` takes one batch per file)")
    torch.save(batches, tmp_path / "batches.pt")
    args = [f"-p{k}={v}" for k, v in P.items()]
    assert main(["check", "bert-sequence-classification", str(tmp_path / "batches.pt"), *args]) == 1
    assert "a list of batches, not a batch" in capsys.readouterr().out


def test_bench_prints_no_profiler_log_lines(capfd):
    """kineto writes 'USDT: ... profiler_start' to fd 2 at each profile the harness takes to count ops."""
    assert main(["bench", "--tiny", "--rounds", "1", "--scenario", "bart", "--contender", "tc-torch",
                 "--device", "cpu"]) == 0
    out, err = capfd.readouterr()
    assert "| bart-tiny | tc-torch |" in out and "tc-torch" in err
    assert "USDT:" not in err and "profiler_start" not in out + err
