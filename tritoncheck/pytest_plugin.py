"""pytest plugin: fuzz a model's forward with valid batches drawn from a spec.

Registered through the `pytest11` entry point, so it loads in every pytest session of an
environment where tritoncheck is installed. It therefore imports nothing heavy at load time:
hypothesis is imported only when a fixture is used, and a missing hypothesis fails that test
with an install hint instead of breaking pytest.

    def test_forward_never_crashes(tritoncheck_fuzz):
        model = MyModel(config).eval()
        spec = tc.load_spec("bert-sequence-classification", config=model.config)
        tritoncheck_fuzz(lambda batch: model(**batch), spec, max_examples=20, L=(1, 64))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


def _strategies():
    try:
        from tritoncheck import strategies
    except ImportError as exc:
        pytest.fail(f"tritoncheck fixtures need hypothesis: pip install 'tritoncheck[strategies]' ({exc})", pytrace=False)
    return strategies


def fuzz(forward: Callable[[dict], Any], spec: Any, *, max_examples: int = 20, require: tuple[str, ...] = (),
         finite: tuple[str, ...] = ("loss", "logits"), **dim_bounds: Any) -> None:
    """Call `forward(batch)` on valid batches from `spec`; fail on an exception or a non-finite output.

    Args:
        forward: takes a batch (field name -> tensor); typically `lambda b: model(**b)`.
        spec: a filled `BatchSpec`.
        max_examples: how many batches hypothesis draws (it shrinks a failing one to a minimal batch).
        require: optional fields to always include, e.g. `("labels",)` when the forward computes a loss.
        finite: output keys (of a dict or a transformers ModelOutput) that must be finite;
            a tensor output is checked whole.
        **dim_bounds: dim sizes, e.g. `B=(1, 4), L=(1, 64)`.
    """
    import torch
    from hypothesis import HealthCheck, given, settings

    strategies = _strategies()

    @settings(max_examples=max_examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(strategies.valid_batches(spec, require=require, **dim_bounds))
    def run(batch):
        out = forward(batch)
        values = {"output": out} if isinstance(out, torch.Tensor) else {}
        if hasattr(out, "get"):
            values = {k: out.get(k) for k in finite if out.get(k) is not None}
        for key, value in values.items():
            if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
                raise AssertionError(f"{key} is not finite for a batch that satisfies {spec.name}: {sorted(batch)}")

    run()


@pytest.fixture
def tritoncheck_fuzz() -> Callable[..., None]:
    """`fuzz(forward, spec, max_examples=20, require=(), **dim_bounds)`: see `tritoncheck.pytest_plugin.fuzz`."""
    _strategies()
    return fuzz


@pytest.fixture
def tritoncheck_strategies():
    """The `tritoncheck.strategies` module (valid_batches, malformed_batches), for use with `@given`."""
    return _strategies()
