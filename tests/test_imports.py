"""`import tritoncheck` stays light (a CPU DataLoader worker needs none of the optional stacks),
and every public name imports."""

from __future__ import annotations

import json
import subprocess
import sys

import tritoncheck as tc

HEAVY = ["triton", "hypothesis", "yaml", "transformers", "rich", "safetensors"]
DOCUMENTED = ["check", "validate", "load_spec", "builtin_spec_names", "BatchSpec", "FieldSpec", "RuleSpec", "SpecError",
              "Report", "Violation", "BatchValidationError", "VIOLATION_CODES", "strategies", "spec_for",
              "ValidatingCollate", "IndexedDataset", "guard", "wait"]


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True, timeout=120)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_pulls_in_no_optional_stack():
    loaded = _modules_after("import tritoncheck")
    assert not {m for m in loaded for h in HEAVY if m == h or m.startswith(h + ".")}


def test_checking_with_a_builtin_spec_still_needs_no_triton():
    code = ("import torch, tritoncheck as tc\n"
            "r = tc.check({'input': torch.randn(2, 3), 'target': torch.tensor([0, 1])}, tc.load_spec('cross-entropy'))\n"
            "assert r.ok")
    loaded = _modules_after(code)
    assert "triton" not in loaded and "hypothesis" not in loaded and "transformers" not in loaded


def test_public_names_import():
    eager = [n for n in DOCUMENTED if n not in tc._LAZY]
    for name in eager:
        assert getattr(tc, name) is not None, name
    assert set(tc._LAZY) <= set(dir(tc))


def test_lazy_names_import_in_a_fresh_process():
    """Each lazy name resolves; one whose module is not written yet is reported, not hidden."""
    code = ("import tritoncheck as tc, importlib.util, json\n"
            "res = {}\n"
            "for name, (mod, attr) in tc._LAZY.items():\n"
            "    if importlib.util.find_spec(mod) is None:\n"
            "        res[name] = 'absent'; continue\n"
            "    getattr(tc, name); res[name] = 'ok'\n"
            "print(json.dumps(res))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert set(res) == set(tc._LAZY)


def test_unknown_attribute_is_an_attribute_error():
    try:
        tc.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_every_subpackage_is_packaged():
    """A non-editable install ships only the packages pyproject lists: a new subpackage must be listed."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(root).parts) for p in (root / "tritoncheck").rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)
