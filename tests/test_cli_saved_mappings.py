"""A collator's output saved as is (`torch.save(batch)` of a `BatchEncoding`, a `UserDict`) is read by
`check`, `infer` and `scan` with weights_only kept on; any other class is refused in one clean line
(issue 21). Run as a user runs them: the command in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import UserDict

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="pip install transformers (in the test extra)")
BatchEncoding, PreTrainedTokenizerFast = transformers.BatchEncoding, transformers.PreTrainedTokenizerFast

pytestmark = pytest.mark.slow  # each test starts the command (torch's import)


def tritoncheck(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tritoncheck.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "COLUMNS": "200"})


def ce(bad: bool) -> dict[str, torch.Tensor]:
    return {"input": torch.randn(3, 4), "target": torch.tensor([0, 9 if bad else 1, 2])}


@pytest.fixture
def saved(tmp_path):
    (tmp_path / "data").mkdir()
    torch.save(BatchEncoding(ce(bad=True)), tmp_path / "data" / "encoding.pt")
    torch.save(UserDict(ce(bad=True)), tmp_path / "data" / "userdict.pt")
    return tmp_path


def test_check_reads_a_saved_batch_encoding(saved):
    done = tritoncheck("check", "cross-entropy", "data/encoding.pt", "--backend", "torch", cwd=saved)
    assert done.returncode == 1, done.stderr
    assert "target[1]: target <= C - 1 or one of [-100] = 3 (C=4 from input) (found 9)" in done.stdout


def test_scan_reads_saved_batch_encodings_and_user_dicts(saved):
    done = tritoncheck("scan", "cross-entropy", "data", "--backend", "torch", cwd=saved)
    assert done.returncode == 1, done.stderr
    assert "2 bad samples of 6 samples in 2 files" in done.stdout
    assert "unreadable" not in done.stdout


def test_infer_reads_them_too(saved):
    done = tritoncheck("infer", "data/encoding.pt", "data/userdict.pt", cwd=saved)
    assert done.returncode == 0, done.stderr
    assert "input:" in done.stdout and "target:" in done.stdout


def test_any_other_class_is_refused_in_one_clean_line(tmp_path):
    """A tokenizer's own output keeps its `tokenizers.Encoding` objects: those are not unpickled."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    tok = Tokenizer(WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    encoded = PreTrainedTokenizerFast(tokenizer_object=tok)(["a b", "b a"], return_tensors="pt")
    torch.save(encoded, tmp_path / "encoded.pt")
    done = tritoncheck("check", "cross-entropy", "encoded.pt", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == ("tritoncheck: error: cannot read batch file encoded.pt: it holds a tokenizers.Encoding, "
                           "which tritoncheck does not unpickle (torch.load with weights_only=True runs no code from "
                           "a file); save a dict of tensors: torch.save(dict(batch), path)\n")
