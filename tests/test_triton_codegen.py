"""The generated kernel source: golden text, header, cache file, and a compile for a real GPU target."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tritoncheck as tc
from tritoncheck._plan import bind, compile_plan

pytest.importorskip("triton")

from tritoncheck._triton import backend as tb  # noqa: E402
from tritoncheck._triton import codegen  # noqa: E402

GOLDEN = Path(__file__).parent / "golden" / "ctc_kernel.txt"


def ctc_program(dtype=torch.float32):
    spec = tc.load_spec("ctc")
    plan = compile_plan(spec)
    dtypes = {"log_probs": dtype, "targets": torch.int64, "input_lengths": torch.int32, "target_lengths": torch.int64}
    return plan, codegen.generate(plan, plan.checks, dtypes)


def test_generated_source_matches_golden_file():
    """Set TRITONCHECK_UPDATE_GOLDEN=1 to rewrite the golden file after an intended change."""
    _, program = ctc_program()
    if os.environ.get("TRITONCHECK_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(program.source)
    assert program.source == GOLDEN.read_text()


def _header(source: str) -> str:
    """The leading `#` lines: the module has no docstring, so no spec text sits in a string."""
    lines = source.splitlines(keepends=True)
    n = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    return "".join(lines[:n])


def test_header_names_fields_checks_and_bytes():
    plan, program = ctc_program(torch.bfloat16)
    header = _header(program.source)
    assert '"' * 3 not in program.source and "'" * 3 not in program.source
    assert "spec ctc:" in header
    assert "log_probs: bfloat16 [T, N, C]" in header
    assert "input_lengths: int32 [N]" in header
    for check in plan.checks:
        assert tc._plan.describe(check) in header
    assert "bytes read, at least (each field once): 2*T*N*C + 8*N*S + 4*N + 8*N" in header
    assert "writes: nothing on a valid batch" in header
    body = program.source[len(header):]
    for section in ("# loads", "# checks", "# store"):
        assert section in body


def test_source_is_cached_in_a_real_file_written_atomically(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITONCHECK_CACHE_DIR", str(tmp_path))
    _, program = ctc_program(torch.float64)
    codegen.load(program)
    assert Path(program.path).parent == tmp_path
    assert Path(program.path).read_text() == program.source
    assert [p.name for p in tmp_path.iterdir()] == [Path(program.path).name]  # no temporary file left
    fn = getattr(program.kernel, "fn", program.kernel)
    assert "def tritoncheck_kernel(" in inspect.getsource(fn)  # what Triton's JIT needs
    _, again = ctc_program(torch.float64)
    codegen.load(again)
    assert again.path == program.path and again.kernel is program.kernel


def test_kernels_are_cached_per_plan_and_dtypes():
    spec = tc.load_spec("mse")
    plan = compile_plan(spec)
    batch32 = {"input": torch.zeros(2, 3), "target": torch.zeros(2, 3)}
    batch64 = {k: v.double() for k, v in batch32.items()}
    p32 = tb.program_for(plan, bind(plan, batch32))
    assert tb.program_for(plan, bind(plan, {k: v.clone() for k, v in batch32.items()})) is p32
    p64 = tb.program_for(plan, bind(plan, batch64))
    assert p64 is not p32 and "tl.float64" in p64.source and "tl.float64" not in p32.source


_COMPILE_SCRIPT = r"""
import torch, triton
import tritoncheck as tc
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tritoncheck._plan import compile_plan
from tritoncheck._triton import codegen

SIG = {torch.int64: "*i64", torch.int32: "*i32", torch.bool: "*i1", torch.float32: "*fp32",
       torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float64: "*fp64"}
spec = tc.load_spec("layoutlmv3-token-classification", vocab_size=50, max_position_embeddings=16, pad_token_id=1,
                    type_vocab_size=1, max_2d_position_embeddings=1001, num_channels=3, input_size=4, num_labels=5)
plan = compile_plan(spec)
dtypes = {"input_ids": torch.int32, "bbox": torch.int64, "attention_mask": torch.bool, "token_type_ids": torch.int64,
          "position_ids": torch.int64, "pixel_values": torch.bfloat16, "labels": torch.int64}
program = codegen.load(codegen.generate(plan, plan.checks, dtypes))
fn = program.kernel
field_of = {ptr: f for f, ptr in program.fields.items()}
signature = {name: SIG[dtypes[field_of[name]]] if name in field_of else ("*i64" if name == "out_ptr" else "i32")
             for name in fn.arg_names}
signature["IDX"] = "constexpr"
constexprs = {(fn.arg_names.index("IDX"),): triton.language.int32}
compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs), target=GPUTarget("cuda", 80, 32))
print(compiled.asm["ptx"])
"""


def test_compiles_for_an_sm80_gpu_without_one(tmp_path):
    """triton.compile for GPUTarget("cuda", 80, 32) needs no GPU: the source lowers to PTX.

    It runs in a subprocess because the interpreter (TRITON_INTERPRET=1, set for the other
    tests on GPU-less machines) replaces Triton's language functions in this process.
    """
    pytest.importorskip("triton.backends.compiler")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITONCHECK_CACHE_DIR"] = str(tmp_path)
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    proc = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0 and ("GPUTarget" in proc.stderr and "ImportError" in proc.stderr):
        pytest.skip(f"this Triton has no compile-only API: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert ".entry tritoncheck_kernel" in proc.stdout
    assert "atom.global" in proc.stdout  # the store section survived
    # compares keep denormals (torch compares exact IEEE values): no flush-to-zero instruction
    assert ".ftz" not in proc.stdout

