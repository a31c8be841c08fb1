"""Half-precision tiles of 16 elements a thread, their violations walked again (issue 22: >= 24 KB in
flight per SM).

A lone half-precision field gets 16 elements a thread (two 128-bit loads, 4 KB a tile; 8 kept
bf16 LayoutLMv3 at 16 KB in flight per SM, 0.66 of copy bandwidth modelled), and its group writes
its violations, and walks its ragged last tile, one element a thread a step (`walk_again`), so
the wide tile does not raise the kernel's registers through its rare path (under triton 3.6, 16
fp16 elements a thread written the plain way took LayoutLMv3's kernel to 92 registers: 20 KB in
flight, 0.81). Other tiles keep the plain path. The reports stay the torch backend's.
"""

from __future__ import annotations

import pytest
import torch

import tritoncheck as tc
from tritoncheck.kernel import ir
from tritoncheck.plan.lower import compile_plan

pytest.importorskip("triton", reason="pip install triton (in the test extra)")

from tritoncheck.backends import triton as tb  # noqa: E402
from tritoncheck.codegen import triton as codegen  # noqa: E402

WALK = "walk it again"


def test_a_lone_half_precision_field_takes_16_elements_a_thread():
    assert codegen.per_thread([2]) == 16 and codegen.per_thread([2, 2]) == 8
    assert codegen.per_thread([4]) == 8 and codegen.per_thread([1]) == 16 and codegen.per_thread([2, 8]) == 4
    assert codegen.per_thread([8]) == 8 and codegen.per_thread([8, 8]) == 4
    assert codegen.per_thread([2], wide=False) == 8  # a field of a few elements a sample


def _key(report):
    return [(v.field, v.code, v.samples, v.count, v.index, str(v.value)) for v in report.violations]


def _group_source(program: codegen.Program, g_i: int) -> str:
    return program.source.split(f"def group_{g_i}(")[1].split("\n# group ")[0]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_wide_tile_writes_its_violations_from_a_second_walk(dtype):
    spec = tc.load_spec("nll")
    plan = compile_plan(spec)
    sigs = {"input": ir.FieldSig("input", dtype, ("N", "C"), True), "target": ir.FieldSig("target", torch.int64, ("N",), True)}
    program = codegen.generate(ir.lower(plan, plan.checks, sigs))
    assert program.groups[0].block == 16 * 32 * codegen.WARPS
    assert WALK in _group_source(program, 0) and "in range(0, 2048, 128):" in _group_source(program, 0)
    g = torch.Generator().manual_seed(0)
    for n, c in [(3, 1000), (2, 2048)]:
        x = -torch.rand(n, c, generator=g).to(dtype)
        x.view(-1)[torch.randint(0, n * c, (6,), generator=g)] = 0.5  # above max
        x.view(-1)[torch.randint(0, n * c, (3,), generator=g)] = float("nan")
        batch = {"input": x, "target": torch.randint(0, c, (n,), generator=g)}
        ref = tc.check(batch, spec, backend="torch")
        got = tc.check(batch, spec, backend="triton")
        assert got.backend == "triton" and _key(got) == _key(ref)
        assert {v.code for v in ref.violations} == {"above_max", "non_finite"}


SPEC = tc.BatchSpec.model_validate({"name": "tiles", "rules": ["a <= b"], "fields": {
    "h": {"dtype": ["float16", "bfloat16"], "shape": ["B", "L"], "min": 0, "max": 1, "finite": True},
    "s": {"dtype": "float16", "shape": ["B", 3], "min": 0},
    "m": {"dtype": "uint8", "shape": ["B", "L"], "min": 0, "max": 1},
    "a": {"dtype": "int64", "shape": ["B", "L"], "min": 0},
    "b": {"dtype": "int64", "shape": ["B", "L"], "max": 9}}})


def test_only_wide_half_precision_tiles_walk_again():
    """A lone half-precision field of many elements a sample takes 16 elements a thread and walks its
    violations and its ragged last tile again; one of a few elements a sample (3) keeps 8 a thread;
    a byte mask (16 a thread) and two int64 fields (4) keep the plain path."""
    plan = compile_plan(SPEC)
    for dtype in (torch.float16, torch.bfloat16):
        sigs = {"h": ir.FieldSig("h", dtype, ("B", "L"), True), "s": ir.FieldSig("s", torch.float16, ("B", "s.1"), True),
                "m": ir.FieldSig("m", torch.uint8, ("B", "L"), True),
                "a": ir.FieldSig("a", torch.int64, ("B", "L"), True), "b": ir.FieldSig("b", torch.int64, ("B", "L"), True)}
        program = codegen.generate(ir.lower(plan, plan.checks, sigs))
        parts = [g for g, _ in codegen.program_groups(program.kernel)]
        blocks = {g.fields[0]: (g_i, p.block) for g_i, (g, p) in enumerate(zip(parts, program.groups, strict=True))}
        threads = 32 * codegen.WARPS
        assert {f: b for f, (_, b) in blocks.items()} == {"h": 16 * threads, "s": 8 * threads, "m": 16 * threads, "a": 4 * threads}
        for name in blocks:
            source = _group_source(program, blocks[name][0])
            assert (WALK in source) == (name == "h") and ("the ragged last tile" in source) == (name == "h"), name


def _batches(dtype, seed):
    g = torch.Generator().manual_seed(seed)
    for B, L in [(2, 2100), (5, 13)]:  # two full tiles of h and a ragged one; one ragged tile
        h = torch.rand(B, L, generator=g).to(dtype)
        s = torch.rand(B, 3, generator=g).half()
        m = torch.randint(0, 2, (B, L), generator=g).to(torch.uint8)
        a = torch.randint(0, 5, (B, L), generator=g)
        b = a + torch.randint(0, 5, (B, L), generator=g)
        for bad in range(4):
            hb, sb, mb, ab, bb = h.clone(), s.clone(), m.clone(), a.clone(), b.clone()
            if bad & 1:
                hb.view(-1)[torch.randint(0, B * L, (5,), generator=g)] = 2.0
                hb.view(-1)[-1] = float("nan")
                sb[-1, 2] = -1.0
            if bad & 2:
                hb.view(-1)[torch.randint(0, B * L, (3,), generator=g)] = -0.5
                mb.view(-1)[torch.randint(0, B * L, (4,), generator=g)] = 7
                ab.view(-1)[torch.randint(0, B * L, (4,), generator=g)] = 10
                bb.view(-1)[-2] = -1
            yield bad, {"h": hb, "s": sb, "m": mb, "a": ab, "b": bb}


@pytest.mark.parametrize(("dtype", "indices"), [(torch.float16, "int32"), (torch.bfloat16, "int64")])
def test_walked_tiles_report_as_the_torch_backend(monkeypatch, dtype, indices):
    """Violations in several 128-element steps of one tile, in full tiles and the ragged last one,
    across samples; with int64 indices too (the launch of a batch past 2**31 elements)."""
    if indices == "int64":
        monkeypatch.setattr(tb, "INT32_LIMIT", 0)
    for bad, batch in _batches(dtype, 1):
        ref = tc.check(batch, SPEC, backend="torch")
        got = tc.check(batch, SPEC, backend="triton")
        assert got.backend == "triton" and _key(got) == _key(ref), (tuple(batch["h"].shape), bad)
        assert bool(ref.violations) == bool(bad)
