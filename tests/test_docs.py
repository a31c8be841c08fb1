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


def test_every_test_docs_security_names_exists():
    """docs/security.md keeps each promise by naming its test: every `tests/FILE.py[::name]` it names
    (and every `::name` after one, in the same file) is a file holding that test function."""
    root = DOC.parent.parent
    text = (root / "docs" / "security.md").read_text(encoding="utf-8")
    named, current, missing = 0, None, []
    for ref in re.findall(r"`((?:tests/[\w/]+\.py)?(?:::\w+)?)`", text):
        path, _, name = ref.partition("::")
        current = path or current
        if current is None:
            missing.append(ref)
            continue
        source = (root / current).read_text(encoding="utf-8") if (root / current).is_file() else None
        if source is None or (name and not re.search(rf"^def {name}\(", source, flags=re.MULTILINE)):
            missing.append(f"{current}::{name}")
        named += 1
    assert named >= 30 and not missing, f"docs/security.md names tests that do not exist: {missing}"
