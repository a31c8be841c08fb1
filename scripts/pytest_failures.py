"""A pytest plugin for scripts/gpu_checks.sh: each failing test goes to the file $GPU_FAILURES as
soon as it is reported (its id, then the end of its traceback), so a run stopped before pytest
prints its summary still says what failed. Under pytest-xdist only the controller writes."""

import os

_path: str | None = None


def pytest_configure(config):
    global _path
    if not hasattr(config, "workerinput"):  # an xdist worker's reports reach the controller too
        _path = os.environ.get("GPU_FAILURES")


def pytest_runtest_logreport(report):
    if _path and report.failed:
        with open(_path, "a") as f:
            f.write(f"FAILED {report.nodeid} ({report.when})\n{report.longreprtext[-1500:]}\n\n")
