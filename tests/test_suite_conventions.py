"""The suite runs whole on the README's install, and degrades to named skips on a smaller one.

Kept by walking the test modules' own imports (derived, not listed): every package a test imports
is a dependency or in the `test` extra; one outside the library's dependencies is imported through
`pytest.importorskip` with a reason naming `pip install` (what .ci/no_missing_packages.py looks for);
every package directory ships; the README's quick start is the two commands CI runs.
"""

import ast
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml: Python 3.11+, or pip install tomli")

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# the suite's own modules, and the benchmarks' that tests and their child scripts put on sys.path
LOCAL = {p.stem for p in (ROOT / "tests").glob("*.py")} | {p.stem for p in (ROOT / "benchmarks").glob("*.py")}
LOCAL |= {"tritoncheck"}
SUITE = {"pytest", "hypothesis"}  # what the suite is built on, like pytest itself


def distribution(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def imports(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(top-level packages imported at module level directly, packages imported anywhere via importorskip)."""
    direct, skipped = set(), set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            direct |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            direct.add(node.module.split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "importorskip" and node.args:
            skipped.add(node.args[0].value.split(".")[0])
    return direct, skipped


def modules() -> dict[str, ast.Module]:
    return {p.name: ast.parse(p.read_text(), str(p)) for p in sorted((ROOT / "tests").glob("*.py"))}


def imported_by_pytest(name: str, trees: dict[str, ast.Module]) -> bool:
    """A test module, conftest, or a module one of them imports; not a script a test runs as a child."""
    stems = set().union(*(imports(tree)[0] for tree in trees.values()))
    return name.startswith("test_") or name == "conftest.py" or name.removesuffix(".py") in stems


def third_party(name: str) -> bool:
    return name not in sys.stdlib_module_names and name not in LOCAL


def test_every_package_a_test_imports_is_installed_by_the_test_extra():
    to_dist = importlib.metadata.packages_distributions()
    declared = {distribution(r) for r in PYPROJECT["project"]["dependencies"]}
    declared |= {distribution(r) for r in PYPROJECT["project"]["optional-dependencies"]["test"]}
    missing = {}
    for name, tree in modules().items():
        direct, skipped = imports(tree)
        for package in filter(third_party, direct | skipped):
            dists = {d.lower() for d in to_dist.get(package, [package])}
            if not dists & declared:
                missing.setdefault(package, []).append(name)
    assert not missing, f"imported by tests but in neither the dependencies nor the `test` extra: {missing}"


def test_optional_packages_are_imported_through_importorskip():
    core = {distribution(r) for r in PYPROJECT["project"]["dependencies"]} | SUITE
    to_dist = importlib.metadata.packages_distributions()
    direct_optional = {}
    trees = modules()
    for name, tree in trees.items():
        if not imported_by_pytest(name, trees):
            continue  # a child script a test starts after its own importorskip: importorskip means nothing there
        for package in filter(third_party, imports(tree)[0]):
            if not {d.lower() for d in to_dist.get(package, [package])} & core:
                direct_optional.setdefault(name, []).append(package)
    assert not direct_optional, f"import these through pytest.importorskip(..., reason=...): {direct_optional}"


def test_every_importorskip_names_what_to_install():
    bare = []
    for name, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "importorskip":
                reason = next((k.value.value for k in node.keywords if k.arg == "reason"), "")
                if "pip install" not in reason:
                    bare.append(f"{name}:{node.lineno}")
    assert not bare, f"importorskip without a reason naming `pip install`: {bare}"


def test_every_package_directory_ships():
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "tritoncheck").rglob("__init__.py")
    }
    assert found <= listed, f"packages missing from pyproject's [tool.setuptools] packages: {sorted(found - listed)}"


def test_readme_quick_start_is_what_ci_runs():
    out = subprocess.run([sys.executable, str(ROOT / ".ci" / "readme_commands.py")], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    install, tests = out
    assert install.startswith('pip install "torch==2.13.0" -e ".[test]" && tritoncheck check '), install
    assert tests == "python -m pytest -q"
    ci = (ROOT / ".ci" / "run").read_text()
    assert "readme_commands.py" in ci and "no_missing_packages.py" in ci


def test_readme_sample_output_is_what_the_quick_start_prints():
    """The report excerpt at the top of the README is the quick-start command's real output, line for line."""
    readme = (ROOT / "README.md").read_text()
    sample = readme.split("```\n", 2)[1].split("```", 1)[0]
    command = (ROOT / "README.md").read_text().split("<!-- ci:quickstart:begin -->", 1)[1].splitlines()[2]
    args = command.split(" && tritoncheck ", 1)[1].split()
    run = subprocess.run([sys.executable, "-m", "tritoncheck.cli", *args, "--format", "text"], cwd=ROOT,
                         capture_output=True, text=True, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert run.returncode == 1, run.stderr
    printed = run.stdout.splitlines()
    lines = [line for line in sample.splitlines() if line.strip() != "..."]
    assert lines[0] == printed[0]
    missing = [line for line in lines if line not in printed]
    assert not missing, f"README sample lines the command does not print: {missing}"
