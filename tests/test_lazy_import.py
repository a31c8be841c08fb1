"""`import tritoncheck` imports nothing heavy, not even torch (1.5 s of CPU): `tritoncheck.__version__` and a
command's start cost only what they use; every public name still resolves, once, on first use."""

import subprocess
import sys


def test_import_and_version_need_no_torch():
    code = ("import sys, tritoncheck\n"
            "print(tritoncheck.__version__, sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'numpy', 'pydantic')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    version, loaded = out.stdout.split(" ", 1)
    assert version and loaded.strip() == "[]"


def test_a_public_name_resolves_once_to_its_module_attribute():
    import tritoncheck as tc
    from tritoncheck.api import check

    assert tc.check is check and "check" in vars(tc)  # (kept: later uses do not go through __getattr__)
    from tritoncheck import BatchValidationError

    assert BatchValidationError.__module__ == "tritoncheck"


def test_the_version_command_answers_without_torch():
    code = ("import sys\nfrom tritoncheck.cli import main\nsys.argv = ['tritoncheck', '--version']\ncode = main()\n"
            "print(code, sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'pydantic')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    import tritoncheck

    assert out.stdout.splitlines() == [f"tritoncheck {tritoncheck.__version__}", "0 []"], out.stdout
