"""docs/errors.md and VIOLATION_CODES stay in step, and every runnable example produces its code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import tritoncheck as tc

DOC = Path(__file__).resolve().parent.parent / "docs" / "errors.md"
NOT_RUNNABLE = {"device_mismatch", "rank_failed"}  # need a GPU / several processes; shown as ```text


def sections() -> dict[str, str]:
    parts = re.split(r"^## `([a-z_]+)`\s*$", DOC.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_every_code_has_a_section_and_every_section_a_code():
    assert list(sections()) == list(tc.VIOLATION_CODES)


@pytest.mark.parametrize("code", [c for c in tc.VIOLATION_CODES if c not in NOT_RUNNABLE])
def test_example_produces_its_code(code):
    blocks = re.findall(r"```python\n(.*?)```", sections()[code], flags=re.DOTALL)
    assert len(blocks) == 1, f"## `{code}` needs exactly one python example"
    scope = {"torch": torch, "tc": tc}
    exec(compile(blocks[0], f"errors.md#{code}", "exec"), scope)  # our own doc, not user input
    assert code in scope["report"].codes, str(scope["report"])


@pytest.mark.parametrize("code", sorted(NOT_RUNNABLE))
def test_unrunnable_examples_are_marked_as_text(code):
    assert "```python" not in sections()[code] and "```text" in sections()[code]
