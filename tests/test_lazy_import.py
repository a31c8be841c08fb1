"""`import tritoncheck` imports nothing heavy, not even torch (1.5 s of CPU): `tritoncheck.__version__` and a
command's start cost only what they use; every public name still resolves, once, on first use."""

import json
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


# A meta-path finder that refuses torch and its submodules, as on a machine without torch: what runs after
# it never imported torch, whatever else was in sys.modules before.
NO_TORCH = """import sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            raise ImportError(f"torch refused: {name}")
sys.meta_path.insert(0, NoTorch())
"""

SPEC_YAML = """name: tokens
params: {vocab_size: 100, dtype: int}
fields:
  input_ids: {dtype: [dtype], shape: [B, L], min: 0, max: vocab_size - 1, multiple_of: 2}
  scores: {dtype: [float16, float32], shape: [B, L], finite: true, values: [0.5, 1.0]}
rules: ["scores >= 0 where input_ids != 0"]
"""


def run_without_torch(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_TORCH + code, *args], capture_output=True, text=True, timeout=120)


def test_the_spec_layer_loads_and_validates_specs_without_torch(tmp_path):
    """dtypes, checks, spec and the command plumbing import without torch; every built-in spec and a YAML
    file load, and a spec's mistakes (an integer field given 0.5, a torch dtype alias) are still found."""
    from tritoncheck.spec.schema import builtin_spec_names

    path = tmp_path / "tokens.yaml"
    path.write_text(SPEC_YAML)
    code = """
import json
import tritoncheck.dtypes, tritoncheck.checks, tritoncheck.spec.schema, tritoncheck.cli.commands
from tritoncheck.spec.extends import read_spec
from tritoncheck.spec.schema import BatchSpec, SpecError, builtin_spec_names
specs = [read_spec(name) for name in builtin_spec_names()]
spec = read_spec(sys.argv[1])
errors = {}
for dtype, extra in (("int", {"allow": [0.5]}), ("torch.long", {}), ("half", {}), ("torch.float", {}), ("fp16", {})):
    try:
        BatchSpec.model_validate({"name": "s", "fields": {"x": {"dtype": [dtype], "shape": ["B"], **extra}}})
    except SpecError as exc:
        errors[dtype] = str(exc)
print(json.dumps({"specs": len(specs), "input_ids": spec.field_dtype_names("input_ids"),
                  "scores": spec.field_dtype_names("scores"), "errors": errors,
                  "torch": sorted(m for m in sys.modules if m.split(".")[0] == "torch")}))
"""
    out = run_without_torch(code, str(path))
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["specs"] == len(builtin_spec_names()) and got["torch"] == []
    assert got["input_ids"] == ["uint8", "int8", "int16", "int32", "int64"] and got["scores"] == ["float16", "float32"]
    errors = got["errors"]
    assert "fields.x.allow.0: 0.5 is not an integer, but x holds integers" in errors.pop("int")
    for alias, meant in {"torch.long": "int64", "half": "float16", "torch.float": "float32", "fp16": "float16"}.items():
        assert f"fields.x.dtype: unknown dtype {alias!r}" in errors[alias] and f"(did you mean {meant!r}?)" in errors.pop(alias)
    assert errors == {}


def test_the_specs_command_and_the_help_run_without_torch():
    code = """
from tritoncheck.cli import main
codes = [main(["specs"]), main(["specs", "causal-lm"]), main(["--help"]), main(["check", "--help"]),
         main(["scan", "--help"])]
print("codes", codes)
"""
    out = run_without_torch(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "codes [0, 0, 0, 0, 0]"
    assert "check every sample of a dataset offline" in out.stdout or "--bad-rows DIR" in out.stdout
    assert "causal-lm\n" in out.stdout and "pass --param vocab_size=..." in out.stdout  # the list, the spec
    assert "check a saved batch against a spec" in out.stdout and "--backend {auto,torch,c,triton}" in out.stdout


def test_the_command_table_says_what_each_module_adds():
    """`tritoncheck --help` lists the commands it has not imported from COMMANDS: their help as the modules give it."""
    import argparse
    from importlib import import_module

    from tritoncheck.cli import COMMANDS

    sub = argparse.ArgumentParser().add_subparsers()
    for module in dict.fromkeys(m for m, _ in COMMANDS.values()):
        import_module(module).add_parser(sub)
    assert {a.dest: a.help for a in sub._choices_actions} == {name: text for name, (_, text) in COMMANDS.items()}


def test_the_torch_aliases_are_torchs_own():
    """TORCH_ALIASES (torch.long is int64), kept so that a spec validates without torch, is torch's own table."""
    import torch

    from tritoncheck.dtypes import DTYPE_NAMES, TORCH_ALIASES, dtype_name, torch_dtypes

    aliases = {k: dtype_name(v) for k, v in vars(torch).items() if isinstance(v, torch.dtype)
               and dtype_name(v) in DTYPE_NAMES and k != dtype_name(v)}
    assert aliases == TORCH_ALIASES
    assert torch_dtypes() == {name: getattr(torch, name) for name in DTYPE_NAMES}


# Every built-in spec's parameters (each spec takes the ones it names, as from a model config), its float dtype
# parameter a 16-bit float: a field of it compared with constants is tested on its bits (`c.key_interval`).
CONFIG = {"vocab_size": 50, "max_position_embeddings": 16, "pad_token_id": 1, "type_vocab_size": 2, "num_labels": 5,
          "max_2d_position_embeddings": 1001, "num_channels": 3, "input_size": 4, "in_channels": 3, "num_classes": 4,
          "min_length": 2, "dtype": "bfloat16"}

# The plans, and the C source of one kernel per spec (each field in its last accepted dtype, contiguous) built
# from a signature of dtype names and axes, no tensor: what a scan of Arrow buffers would compile.
SOURCES = """
import json, sys
import tritoncheck as tc
from tritoncheck.codegen import c
from tritoncheck.kernel import ir
from tritoncheck.plan.lower import compile_plan
from tritoncheck.spec.schema import builtin_spec_names

config, path = json.loads(sys.argv[1]), sys.argv[2]
torch = sys.modules.get("torch")  # where loaded: the dtypes as a bound batch gives them
specs = [tc.load_spec(name, config=config) for name in builtin_spec_names()] + [tc.load_spec(path, vocab_size=64)]
out = {}
for spec in specs:
    plan = compile_plan(spec)
    fields = {f.name: ir.FieldSig(f.name, getattr(torch, f.dtypes[-1]) if torch else f.dtypes[-1], f.axes, True)
              for f in plan.fields}
    kernel = ir.lower(plan, plan.checks, fields)
    out[spec.name] = [plan.pretty(), c.generate(kernel).text]
out["torch"] = sorted(m for m in sys.modules if m.split(".")[0] == "torch")
print(json.dumps(out))
"""


def test_specs_lower_and_their_c_source_builds_without_torch(tmp_path):
    """`tc.load_spec` (built-in names, a YAML file), `compile_plan`, the kernel IR and the C code generator run
    without torch, keyed on dtype names; the plans and sources are those of a process with torch loaded (a
    signature of torch dtypes there, as a bound batch gives it)."""
    from tritoncheck.spec.schema import builtin_spec_names

    path = tmp_path / "tokens.yaml"
    path.write_text(SPEC_YAML)
    args = (json.dumps(CONFIG), str(path))
    out = run_without_torch(SOURCES, *args)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got.pop("torch") == []
    with_torch = subprocess.run([sys.executable, "-c", "import torch\n" + SOURCES, *args], capture_output=True,
                                text=True, timeout=120)
    assert with_torch.returncode == 0, with_torch.stderr
    want = json.loads(with_torch.stdout)
    assert want.pop("torch") != []
    assert got == want and len(got) == len(builtin_spec_names()) + 1
    plan, source = got["tokens"]
    assert "field scores: float16|float32 [B, L]" in plan and "scores: float32 over [B, L], contiguous" in source
