"""Shared fixtures. The Triton backend runs under TRITON_INTERPRET=1 when no GPU is present,
so the same kernel source is tested on CPU in CI."""

import importlib.util
import os
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

try:  # the suite is built on Hypothesis properties, as on pytest: not an optional package
    from hypothesis import HealthCheck, settings
except ImportError as exc:
    raise pytest.UsageError("tritoncheck's tests need Hypothesis: pip install -e '.[test]'") from exc

if importlib.util.find_spec("xdist") is None:  # pyproject's addopts run the suite on every core with `-n auto`
    raise pytest.UsageError("tritoncheck's tests run on pytest-xdist: pip install -e '.[test]'")

settings.register_profile(
    "ci", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.register_profile(
    "deep", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True, scope="session")
def _cache_dir(tmp_path_factory):
    """Generated kernels go to a temporary cache dir, not the user's: one for the whole session, so a
    kernel compiled by one test module (or a CLI subprocess) is reused by the next. A test that needs
    a cold or broken cache sets TRITONCHECK_CACHE_DIR to its own tmp_path."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITONCHECK_CACHE_DIR", str(tmp_path_factory.mktemp("tritoncheck-cache")))
        yield


@pytest.fixture(scope="session")
def run_tmp_path(tmp_path_factory) -> Path:
    """A folder of this run shared by every pytest-xdist worker (each worker's own temporary folders
    sit below it): for a costly result one worker computes and the others read, under a lock."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped where torch.cuda.is_available() is False)")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: it measures what the compiled kernel does on the device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device() -> str:
    """Where a backend test builds its tensors: CUDA where a GPU runs the compiled Triton kernel,
    else the CPU (the Triton kernel then runs in Triton's interpreter), so the same tests run on both."""
    return "cuda" if torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1" else "cpu"


@pytest.fixture(params=["torch", "c", "triton"])
def backend(request):
    """Every backend; on a machine without a GPU the Triton one runs in the interpreter."""
    if request.param == "triton":
        pytest.importorskip("triton", reason="pip install triton (in the test extra)")
    return request.param
