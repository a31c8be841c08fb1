"""The generated kernel source: golden text, header, cache file, and a compile for a real GPU target."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tritoncheck as tc
from tritoncheck._kernel import ir
from tritoncheck._plan import bind, compile_plan

pytest.importorskip("triton")

from tritoncheck._triton import backend as tb  # noqa: E402
from tritoncheck._triton import codegen  # noqa: E402

GOLDEN = Path(__file__).parent / "golden" / "ctc_kernel.txt"


def ctc_program(dtype=torch.float32, contiguous=True):
    spec = tc.load_spec("ctc")
    plan = compile_plan(spec)
    dtypes = {"log_probs": dtype, "targets": torch.int64, "input_lengths": torch.int32, "target_lengths": torch.int64}
    fields = {f: ir.FieldSig(f, d, plan.field(f).axes, contiguous) for f, d in dtypes.items()}
    return plan, codegen.generate(ir.lower(plan, plan.checks, fields))


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
    assert "log_probs: bfloat16 [T, N, C], contiguous" in header
    assert "input_lengths: int32 [N], contiguous" in header
    for check in plan.checks:
        assert tc._plan.describe(check) in header
    assert "bytes read, at least (each field once): 2*T*N*C + 8*N*S + 4*N + 8*N" in header
    assert "writes: nothing on a valid batch" in header
    body = program.source[len(header):]
    for section in ("# loads", "# checks", "# store"):
        assert section in body


def test_a_contiguous_element_wise_group_walks_one_flat_index():
    """Contiguous fields pass no strides and load at `offs`; the sample index is unravelled only
    on the violation path. Strided fields take their strides as arguments."""
    _, flat = ctc_program()
    assert "_stride" not in flat.source and "tl.load(log_probs_ptr + offs," in flat.source
    group0 = flat.source.split("# group 0")[1].split("# group 1")[0]
    assert group0.index("% n_C") > group0.index("# store")  # i_N for the per-sample counts, after the check
    _, strided = ctc_program(contiguous=False)
    assert "log_probs_stride0," in strided.source and "+ offs," not in strided.source


def test_literals_are_exact_and_typed():
    assert codegen.literal(0.1, "d") == "tl.full((), 0.1, tl.float64)"
    assert codegen.literal(-0.0, "f") == "tl.full((), -0.0, tl.float32)"
    assert codegen.literal(-(2**63), "i") == "tl.full((), (-9223372036854775807 - 1), tl.int64)"
    assert codegen.literal(2**62, "i") == "tl.full((), 4611686018427387904, tl.int64)"
    assert codegen.literal(float("inf"), "f") == "tl.full((), 2139095040, tl.int32).to(tl.float32, bitcast=True)"
    assert codegen.literal(float("-inf"), "d").startswith("tl.full((), -4503599627370496, tl.int64)")
    assert codegen.literal(True, "b") == "tl.full((), 1, tl.int1)"


def test_source_is_cached_in_a_real_file_written_atomically(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITONCHECK_CACHE_DIR", str(tmp_path))
    _, program = ctc_program(torch.float64)
    codegen.load(program)
    assert Path(program.path).parent == tmp_path
    assert Path(program.path).read_text() == program.source
    assert [p.name for p in tmp_path.iterdir()] == [Path(program.path).name]  # no temporary file left
    fn = getattr(program.fn, "fn", program.fn)
    assert "def tritoncheck_kernel(" in inspect.getsource(fn)  # what Triton's JIT needs
    _, again = ctc_program(torch.float64)
    codegen.load(again)
    assert again.path == program.path and again.fn is program.fn


def test_kernels_are_cached_per_plan_and_dtypes():
    spec = tc.load_spec("mse")
    plan = compile_plan(spec)
    batch32 = {"input": torch.zeros(2, 3), "target": torch.zeros(2, 3)}
    batch64 = {k: v.double() for k, v in batch32.items()}
    p32 = tb.program_for(plan, bind(plan, batch32))
    assert tb.program_for(plan, bind(plan, {k: v.clone() for k, v in batch32.items()})) is p32
    p64 = tb.program_for(plan, bind(plan, batch64))
    assert p64 is not p32 and "input: float64" in p64.source and "input: float32" in p32.source


_COMPILE_SCRIPT = r"""
import json, torch, triton
import tritoncheck as tc
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from tritoncheck._kernel import ir
from tritoncheck._plan import compile_plan
from tritoncheck._spec import spec_from_dict
from tritoncheck._triton import codegen

SIG = {torch.int64: "*i64", torch.int32: "*i32", torch.bool: "*i1", torch.float32: "*fp32",
       torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.float64: "*fp64"}


def ptx(spec, dtypes, contiguous=True, one=False):
    # the argument types the JIT gives: pointers by dtype, ints as i32, an int equal to 1 as a constexpr
    plan = compile_plan(spec)
    fields = {f.name: ir.FieldSig(f.name, dtypes[f.name], f.axes, contiguous) for f in plan.fields}
    program = codegen.load(codegen.generate(ir.lower(plan, plan.checks, fields)))
    fn = program.fn
    ptrs = dict(zip(fn.arg_names, (SIG[f.dtype] for f in program.kernel.fields)))
    signature, constexprs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in ptrs or name == "out_ptr":
            signature[name] = ptrs.get(name, "*i64")
        elif name == "IDX" or one:
            signature[name] = "constexpr"
            constexprs[(i,)] = triton.language.int32 if name == "IDX" else 1
        else:
            signature[name] = "i32"
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    return triton.compile(src, target=GPUTarget("cuda", 80, 32), options={"enable_fp_fusion": False}).asm["ptx"]


lm = tc.load_spec("layoutlmv3-token-classification", vocab_size=50, max_position_embeddings=16, pad_token_id=1,
                  type_vocab_size=1, max_2d_position_embeddings=1001, num_channels=3, input_size=4, num_labels=5)
lm_dtypes = {"input_ids": torch.int32, "bbox": torch.int64, "attention_mask": torch.bool, "token_type_ids": torch.int64,
             "position_ids": torch.int64, "pixel_values": torch.bfloat16, "labels": torch.int64}
floats = {"x": {"dtype": "float32", "shape": ["B", "L"]}, "y": {"dtype": "float32", "shape": ["B"]}}
muladd = spec_from_dict({"name": "m", "fields": floats, "rules": ["x * 2 - y + 1 != 3"]}, "m")
div = spec_from_dict({"name": "d", "fields": floats, "rules": ["x // y != 7"]}, "d")
out = {"lm": ptx(lm, lm_dtypes), "lm_strided_ones": ptx(lm, lm_dtypes, contiguous=False, one=True),
       "muladd": ptx(muladd, {"x": torch.float32, "y": torch.float32}),
       "div": ptx(div, {"x": torch.float32, "y": torch.float32}, one=True)}
print(json.dumps(out))
"""


def test_compiles_for_an_sm80_gpu_without_one(tmp_path):
    """triton.compile for GPUTarget("cuda", 80, 32) needs no GPU: the source lowers to PTX, with
    the argument types the JIT gives (an int argument equal to 1 becomes a constexpr).

    It runs in a subprocess because the interpreter (TRITON_INTERPRET=1, set for the other
    tests on GPU-less machines) replaces Triton's language functions in this process.
    """
    pytest.importorskip("triton.backends.compiler")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITONCHECK_CACHE_DIR"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    if proc.returncode != 0 and ("GPUTarget" in proc.stderr and "ImportError" in proc.stderr):
        pytest.skip(f"this Triton has no compile-only API: {proc.stderr[-300:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for name, ptx in out.items():
        assert ".entry tritoncheck_kernel" in ptx, name
        assert "atom.global" in ptx, name  # the store section survived
    # compares keep denormals (torch compares exact IEEE values): no flush-to-zero instruction
    assert ".ftz" not in out["lm"] and ".ftz" not in out["lm_strided_ones"]
    # torch rounds a * b + c twice, and divides to nearest: no fused multiply-add, no approximate division
    assert "fma.rn" not in out["muladd"] and "sub.rn.f32" in out["muladd"]
    assert "div.full" not in out["div"] and "div.approx" not in out["div"] and "div.rn.f32" in out["div"]
