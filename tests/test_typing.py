"""A user's script type-checks against tritoncheck: `py.typed` ships, and the names loaded on first
use (`spec_for`, `ValidatingCollate`, ...) have their real types for mypy, not `Any`.

mypy reads tritoncheck as an installed package (from a directory on the path, as site-packages
is), so it needs the `py.typed` marker; torch and the other heavy dependencies are skipped
(treated as Any) to keep this test at a few seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "tritoncheck"
CONFIG = """[mypy]
[mypy-torch.*,triton.*,numpy.*,transformers.*,hypothesis.*,datasets.*,lightning.*,safetensors.*]
follow_imports = skip
follow_imports_for_stubs = True
"""
USER_SCRIPT = """
import torch
from torch.utils.data import DataLoader
import tritoncheck as tc

model = torch.nn.Sequential(torch.nn.Linear(4, 3))
spec: tc.BatchSpec = tc.spec_for(model, problem_type="single_label_classification")
spec = tc.load_spec("cross-entropy")
collate = tc.ValidatingCollate(spec, on_error="skip")
loader = DataLoader(tc.IndexedDataset([1, 2]), collate_fn=collate)
report: tc.Report = tc.check({"input": torch.zeros(2, 3), "target": torch.zeros(2, dtype=torch.long)}, spec)
codes: set[str] = report.codes
handle = tc.guard(model, spec)
reveal_type(tc.spec_for)
reveal_type(collate)
reveal_type(tc.strategies.valid_batches)
"""
MISTAKES = """
import torch
import tritoncheck as tc

spec = tc.spec_for(torch.nn.Linear(4, 3), problem_type=3)
n: int = tc.ValidatingCollate(spec)
tc.ValidatingCollate(spec, on_eror="skip")
"""


def mypy(tmp_path: Path, sources: dict[str, str]) -> subprocess.CompletedProcess:
    """One mypy run over `sources` (file name: text): mypy's start-up is most of its time."""
    pytest.importorskip("mypy", reason="pip install mypy (in the test extra)")
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    link = site / "tritoncheck"
    if not link.exists():
        link.symlink_to(PACKAGE, target_is_directory=True)
    (tmp_path / "mypy.ini").write_text(CONFIG)
    for name, source in sources.items():
        (tmp_path / name).write_text(source)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--config-file", "mypy.ini", *sources],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_py_typed_is_shipped_and_packaged():
    assert (PACKAGE / "py.typed").is_file()
    pyproject = (PACKAGE.parent / "pyproject.toml").read_text()
    assert '"tritoncheck" = ["py.typed"]' in pyproject


def test_a_user_script_type_checks_with_real_types_and_its_mistakes_are_caught(tmp_path):
    done = mypy(tmp_path, {"user.py": USER_SCRIPT, "mistakes.py": MISTAKES})
    assert done.returncode == 1, done.stdout + done.stderr  # the mistakes, and only they, are errors
    out = done.stdout
    assert "user.py" in out and not [line for line in out.splitlines() if line.startswith("user.py") and ": error:" in line], out
    assert 'Revealed type is "def (model: Any, *, problem_type: str | None =' in out
    assert "-> tritoncheck.spec.schema.BatchSpec" in out
    assert 'Revealed type is "tritoncheck.integrations.data.ValidatingCollate"' in out
    assert "def (spec: tritoncheck.spec.schema.BatchSpec" in out  # the strategies module is typed too
    mistakes = "\n".join(line for line in out.splitlines() if line.startswith("mistakes.py"))
    assert 'Argument "problem_type" to "spec_for" has incompatible type "int"' in mistakes
    assert 'expression has type "ValidatingCollate", variable has type "int"' in mistakes
    assert 'Unexpected keyword argument "on_eror" for "ValidatingCollate"' in mistakes
