"""The deferred-mode queue emptied around each test of a module that imports `empty_queue`: a verdict left
pending by one test would otherwise be raised in the next."""

from __future__ import annotations

import pytest

import tritoncheck as tc


def drain() -> None:
    for _ in range(100):
        try:
            tc.wait()
            return
        except tc.BatchValidationError:
            pass


@pytest.fixture(autouse=True)
def empty_queue():
    drain()
    yield
    drain()
