"""The generated kernel source: golden text, header, cache file, and a compile for a real GPU target."""

from __future__ import annotations

import inspect
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tritoncheck as tc
from tritoncheck.plan.lower import describe
from tritoncheck.kernel import ir
from tritoncheck.plan.lower import bind, compile_plan

pytest.importorskip("triton", reason="pip install triton (in the test extra)")

from tritoncheck.backends import triton as tb  # noqa: E402
from tritoncheck.codegen import triton as codegen  # noqa: E402

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
        assert describe(check) in header
    assert "bytes read, at least (each field once): 2*T*N*C + 8*N*S + 4*N + 8*N" in header
    assert "writes: nothing on a valid batch" in header
    body = program.source[len(header):]
    for section in ("# loads", "# checks", "# store"):
        assert section in body


def test_a_contiguous_group_streams_one_flat_index():
    """Contiguous fields pass no strides and load at `offs`, unmasked in a full tile; positions
    come from `_divmod` (a multiply and a shift, no division), and the sample index of group 0
    only on the violation path. Strided fields take their strides as arguments."""
    _, flat = ctc_program()
    assert "_stride" not in flat.source and "v0 = tl.load(log_probs_ptr + offs)" in flat.source
    lines = flat.source.splitlines()
    assert {lines[n - 1].split(" = ")[0].strip() for n in flat.streamed} >= {"v0"}
    assert all("mask=" not in lines[n - 1] for n in flat.streamed)
    assert set(flat.streamed.values()) == {"log_probs", "targets", "input_lengths", "target_lengths"}
    group0 = flat.source.split("def group_0")[1].split("def group_1")[0]
    assert group0.index("_divmod(") > group0.index("# store")
    assert " // n_" not in flat.source and " % n_" not in flat.source
    _, strided = ctc_program(contiguous=False)
    assert "log_probs_stride0," in strided.source and "tl.load(log_probs_ptr + offs" not in strided.source
    assert not strided.streamed


def _wide_program(n: int) -> codegen.Program:
    """n int64 [B, L] fields, each with a range, a rule over it and its neighbour, and a sum per row."""
    fields = {f"f{i}": {"dtype": "int64", "shape": ["B", "L"], "min": 0, "max": "L + 1"} for i in range(n)}
    rules = [f"f{i} + f{i + 1} <= 2 * L + 2" for i in range(n - 1)] + ["sum(f0 >= 0, dim=L) == L"]
    plan = compile_plan(tc.BatchSpec.model_validate({"name": "wide", "fields": fields, "rules": rules}))
    sigs = {f.name: ir.FieldSig(f.name, torch.int64, f.axes, True) for f in plan.fields}
    return codegen.generate(ir.lower(plan, plan.checks, sigs))


def test_recorded_values_load_through_scalar_pointers():
    """Triton's coalescing pass slices the whole kernel once per load or atomic through a block of
    pointers: the violation path's loads of recorded values made 17 fields take 40 s in
    make_ttgir for sm_90. A recorded value loads one element through a scalar pointer, so the
    loads through blocks of pointers are the valid path's, whatever the number of checks."""
    for n in (3, 12):
        lines = _wide_program(n).source.splitlines()
        recorded = [line for line in lines if "volatile=True" in line]
        assert len(recorded) >= 3 * n - 1 and all("tl.sum(" in line for line in recorded), n
        block_loads = [line for line in lines if "tl.load(" in line and "volatile=True" not in line]
        # the element-wise checks run fused in the row sum's loop (`program_groups`): each field at a
        # full step and at the ragged one, and once more where the fused checks' violation path walks again
        assert len(block_loads) == 3 * n, n


def test_divisor_magic_divides_exactly():
    """`_divmod`'s magic numbers give n // d for every int32 index n (checked at the edges and at random)."""
    rng = random.Random(0)
    divisors = [1, 2, 3, 7, 224, 509, 512, 1000, 2**31 - 1] + [rng.randrange(1, 2**31) for _ in range(300)]
    for d in divisors:
        magic, shift = tb.divisor_magic(d)
        assert -(2**31) <= magic < 2**31 and 0 <= shift <= 31
        m = magic % 2**32
        for n in [0, 1, d - 1, d, d + 1, 2**31 - 1, (2**31 - 1) // d * d, *(rng.randrange(2**31) for _ in range(50))]:
            if 0 <= n < 2**31:
                assert ((n * m >> 32) + n) >> shift == n // d, (n, d)


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


def test_programs_are_cached_by_plan_text_least_recently_used_first(monkeypatch):
    """The cache key is the plan's text, not its id: an equal plan built again
    finds the program; the oldest entries go first past MAX_PROGRAMS."""
    p1, p2 = compile_plan(tc.load_spec("mse")), compile_plan(tc.load_spec("mse"))
    assert p1 is not p2 and p1 == p2
    batch32 = {"input": torch.zeros(2, 3), "target": torch.zeros(2, 3)}
    first = tb.program_for(p1, bind(p1, batch32))
    assert tb.program_for(p2, bind(p2, batch32)) is first
    monkeypatch.setattr(tb, "MAX_PROGRAMS", 1)
    other = tc.BatchSpec.model_validate({"name": "lru", "fields": {"x": {"dtype": "float32", "shape": ["B"]}},
                                         "rules": ["x != 123.456"]})
    p3 = compile_plan(other)
    tb.program_for(p3, bind(p3, {"x": torch.zeros(3)}))  # a new entry: the older ones go
    assert tb.program_for(p1, bind(p1, batch32)) is not first


def test_plans_equal_only_by_value_get_their_own_programs():
    """0.0 == -0.0, so plans differing only there are ==, but `x // Z` with Z = -0.0 is -inf where
    with Z = 0.0 it is inf, and a report quotes a value set as written: the program cache tells
    them apart (a differential fuzz finding: the report showed the other plan's `-0.0`)."""
    def spec(zero: float) -> tc.BatchSpec:
        return tc.BatchSpec.model_validate({"name": "zero", "params": {"Z": zero}, "rules": ["x // Z > 0"],
                                            "fields": {"x": {"dtype": "float32", "shape": ["B"], "values": [zero, 2.0]}}})

    assert compile_plan(spec(0.0)) == compile_plan(spec(-0.0))
    batch = {"x": torch.tensor([1.0, 2.0, 5.0])}
    reports = []
    for zero in (0.0, -0.0):
        got, want = tc.check(batch, spec(zero), backend="triton"), tc.check(batch, spec(zero), backend="torch")
        assert got.backend == "triton" and got.violations == want.violations
        reports.append(got)
    assert [v.rule for v in reports[0].violations] == ["x in [0.0, 2.0]"]  # 1 // 0.0 is inf > 0
    assert [v.rule for v in reports[1].violations] == ["x in [-0.0, 2.0]", "x // Z > 0"]


_SPECIALISATION_SCRIPT = r"""
import json, torch
import tritoncheck as tc
from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from triton.runtime.jit import create_function_from_signature
from tritoncheck.plan.lower import bind, compile_plan
from tritoncheck.backends import triton as backend
spec = tc.load_spec("bert-token-classification", vocab_size=50, type_vocab_size=2, max_position_embeddings=512,
                    num_labels=5)
plan = compile_plan(spec)
keys = []
for b, l in [(1, 13), (7, 21), (32, 509), (3, 16), (5, 512)]:  # dynamic padding, B = 1 included
    batch = {"input_ids": torch.zeros(b, l, dtype=torch.int64), "attention_mask": torch.ones(b, l, dtype=torch.bool),
             "labels": torch.zeros(b, l, dtype=torch.int64)}
    bound = bind(plan, batch)
    program = backend.program_for(plan, bound)
    out = torch.zeros(backend.launch_for(program, bound).length, dtype=torch.int64)
    args, kwargs, _ = backend.launch_args(program, bound, out)
    binder = create_function_from_signature(program.fn.signature, program.fn.params, make_backend(GPUTarget("cuda", 90, 32)))
    _, specialization, _ = binder(*args, **kwargs)
    keys.append(repr(specialization))
print(json.dumps(keys))
"""


def test_one_compiled_kernel_serves_dynamic_padding(tmp_path):
    """The JIT's own binder gives batches of different B and L the same specialisation (what it
    compiles a kernel for): sizes, host scalars and program ranges are not specialised on their
    values; only ALIGN (rows a multiple of 16 elements, for 128-bit row loads) makes a second one."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITONCHECK_CACHE_DIR"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", _SPECIALISATION_SCRIPT], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    keys = json.loads(proc.stdout.strip().splitlines()[-1])
    assert keys[0] == keys[1] == keys[2] and keys[3] == keys[4] and keys[0] != keys[3]


_COMPILE_SCRIPT = r"""
import json, torch, triton
import tritoncheck as tc
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import create_function_from_signature
from tritoncheck.plan.lower import bind, compile_plan
from tritoncheck.spec.schema import spec_from_dict
from tritoncheck.backends import triton as backend
TARGET = GPUTarget("cuda", 90, 32)  # an H100


def ptx(spec, batch):
    # exactly what a launch passes, through the JIT's own binder: its signature, constexprs and
    # alignment attributes, as the JIT would compile the kernel for this batch
    plan = compile_plan(spec)
    bound = bind(plan, batch)
    program = backend.program_for(plan, bound)
    out = torch.zeros(backend.launch_for(program, bound).length, dtype=torch.int64)
    args, kwargs, _ = backend.launch_args(program, bound, out)
    fn, target_backend = program.fn, make_backend(TARGET)
    binder = create_function_from_signature(fn.signature, fn.params, target_backend)
    bound_args, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(target_backend, options, bound_args, specialization, options)
    compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=TARGET, options=options.__dict__)
    return compiled.asm["ptx"]


lm = tc.load_spec("layoutlmv3-token-classification", vocab_size=50, max_position_embeddings=16, pad_token_id=1,
                  type_vocab_size=1, max_2d_position_embeddings=1001, num_channels=3, input_size=4, num_labels=5)
B, L = 2, 12  # L not a multiple of 16: the full tiles still load 128 bits at a time
lm_batch = {"input_ids": torch.zeros(B, L, dtype=torch.int32), "bbox": torch.zeros(B, L, 4, dtype=torch.int64),
            "attention_mask": torch.ones(B, L, dtype=torch.bool), "token_type_ids": torch.zeros(B, L, dtype=torch.int64),
            "position_ids": torch.zeros(B, L, dtype=torch.int64), "pixel_values": torch.zeros(B, 3, 4, 4, dtype=torch.bfloat16),
            "labels": torch.zeros(B, L, dtype=torch.int64)}
strided = {k: torch.zeros(*v.shape, 2, dtype=v.dtype)[..., 0] for k, v in lm_batch.items()}
floats = {"x": {"dtype": "float32", "shape": ["B", "L"]}, "y": {"dtype": "float32", "shape": ["B"]}}
xy = {"x": torch.zeros(3, 5), "y": torch.ones(3)}
muladd = spec_from_dict({"name": "m", "fields": floats, "rules": ["x * 2 - y + 1 != 3"]}, "m")
div = spec_from_dict({"name": "d", "fields": floats, "rules": ["x // y != 7"]}, "d")
out = {"lm": ptx(lm, lm_batch), "lm_strided": ptx(lm, strided), "muladd": ptx(muladd, xy), "div": ptx(div, xy)}
print(json.dumps(out))
"""


def test_compiles_for_an_sm90_gpu_without_one(tmp_path):
    """triton.compile for GPUTarget("cuda", 90, 32) needs no GPU: the source lowers to PTX, with
    the signature, constexprs and alignment the JIT's own binder derives from a launch's arguments.

    It runs in a subprocess because the interpreter (TRITON_INTERPRET=1, set for the other
    tests on GPU-less machines) replaces Triton's language functions in this process.
    """
    pytest.importorskip("triton.backends.compiler", reason="pip install triton (in the test extra)")
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
    assert ".ftz" not in out["lm"] and ".ftz" not in out["lm_strided"]
    # contiguous fields stream 128 bits at a time in full tiles; integer division only by constants
    assert "ld.global.v2.b64" in out["lm"] and "ld.global.v4.b32" in out["lm"]
    assert not re.search(r"\b(div|rem)\.[su](32|64)\b", out["lm"])
    # torch rounds a * b + c twice, and divides to nearest: no fused multiply-add, no approximate division
    assert "fma.rn" not in out["muladd"] and "sub.rn.f32" in out["muladd"]
    assert "div.full" not in out["div"] and "div.approx" not in out["div"] and "div.rn.f32" in out["div"]
