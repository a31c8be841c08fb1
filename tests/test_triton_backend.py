"""The Triton backend against the torch reference: reports must be equal, field for field.

Runs the generated kernel under TRITON_INTERPRET=1 on machines without a GPU (see conftest).
Batches are built from each built-in spec's plan by a small helper below (valid values from the
range/value-set checks, then a few spec-specific fix-ups for cross-field rules), and broken by
corruptions that each target one check.
"""

from __future__ import annotations

import logging
import math
import os
import re
import threading

import pytest
import torch

import tritoncheck as tc
from tritoncheck.dtypes import dtype_name, torch_dtypes
from tritoncheck.spec.schema import spec_from_dict
from tritoncheck.expr import Ref
from tritoncheck.plan.lower import FiniteCheck, RangeCheck, RuleCheck, ValueSetCheck, bind, compact, compile_plan, evaluate_scalar
from tritoncheck.spec.extends import read_spec

pytest.importorskip("triton", reason="pip install triton (in the test extra)")

from tritoncheck.backends import triton as tb  # noqa: E402

PARAMS = {
    "vocab_size": 50,
    "max_position_embeddings": 16,
    "pad_token_id": 1,
    "type_vocab_size": 2,
    "num_labels": 5,
    "max_2d_position_embeddings": 1001,
    "num_channels": 3,
    "input_size": 4,
    "in_channels": 3,
    "num_classes": 4,
    "min_length": 2,
}
DTYPES = [torch.int64, torch.int32, torch.bool, torch.float32, torch.float16, torch.bfloat16, torch.float64]


def spec_for(name: str) -> tc.BatchSpec:
    needed = set(read_spec(name).params)
    return tc.load_spec(name, **{k: v for k, v in PARAMS.items() if k in needed})


def _dims(plan, sizes: dict[str, int]) -> dict[str, int]:
    dims = {}
    for f in plan.fields:
        for s in f.shape:
            if isinstance(s, str):
                dims.setdefault(s, sizes.get(s, 3))
    return dims


def make_batch(spec: tc.BatchSpec, dtype: torch.dtype | None = None, sizes: dict[str, int] | None = None, seed: int = 0,
               layout: str = "contiguous") -> dict[str, torch.Tensor]:
    """A valid batch for `spec`: every field present, in `dtype` where the field accepts it."""
    g = torch.Generator().manual_seed(seed)
    plan = compile_plan(spec)
    dims = _dims(plan, {plan.batch_dim: 3, "L": 7, "T": 6, "S": 4, "C": 5, "D": 3, **(sizes or {})})
    batch = {}
    for f in plan.fields:
        dt = dtype if dtype_name(dtype) in f.dtypes else torch_dtypes()[f.dtypes[0]]  # (a plan holds dtype names)
        shape = [dims[s] if isinstance(s, str) else s for s in f.shape]
        lo, hi, values = None, None, None
        for c in plan.checks:
            if getattr(c, "field", None) != f.name:
                continue
            if isinstance(c, RangeCheck):
                v = evaluate_scalar(c.bound, dims)
                lo, hi = (v, hi) if c.kind == "min" else (lo, v)
            elif isinstance(c, ValueSetCheck):
                values = c.values
        if values is not None:
            t = torch.tensor(values)[torch.randint(len(values), shape, generator=g)]
        elif dt.is_floating_point:
            lo_f = lo if lo is not None else (hi - 2 if hi is not None else -2.0)
            hi_f = hi if hi is not None else lo_f + 4
            t = lo_f + (hi_f - lo_f) * torch.rand(shape, generator=g, dtype=torch.float64)
        else:
            lo_i = int(lo) if lo is not None else 0
            hi_i = int(hi) if hi is not None else lo_i + 9
            t = torch.randint(lo_i, hi_i + 1, shape, generator=g)
        batch[f.name] = t.to(dt)
    _fix_rules(spec.name, batch, dims, g)
    for c in plan.checks:  # a rule `a <= b` between two whole fields: sort each pair
        if isinstance(c, RuleCheck) and c.where is None and getattr(c.expr, "op", None) in ("<=", ">="):
            a, b = c.expr.a, c.expr.b
            if isinstance(a, Ref) and isinstance(b, Ref) and set(a.index) == set(b.index) == {None}:
                lo, hi = (a.field, b.field) if c.expr.op == "<=" else (b.field, a.field)
                x, y = batch[lo], batch[hi]
                batch[lo], batch[hi] = torch.minimum(x, y), torch.maximum(x, y)
    return {k: _layout(v, layout) for k, v in batch.items()}


def _fix_rules(name: str, b: dict[str, torch.Tensor], dims: dict[str, int], g: torch.Generator) -> None:
    """Make the cross-field rules of the built-in specs hold."""
    for key in ("attention_mask", "decoder_attention_mask"):
        if key in b:
            b[key][:, 0] = 1
    if "bbox" in b:
        box = b["bbox"]
        lo = torch.minimum(box[..., :2], box[..., 2:])
        hi = torch.maximum(box[..., :2], box[..., 2:])
        b["bbox"] = torch.cat([lo, hi], dim=-1)
    if name == "ctc":
        t_len = dims["T"]
        b["input_lengths"] = torch.randint(1, t_len + 1, b["input_lengths"].shape, generator=g).to(b["input_lengths"].dtype)
        b["target_lengths"] = torch.minimum(b["target_lengths"], b["input_lengths"].to(b["target_lengths"].dtype))
        b["targets"] = torch.randint(1, dims["C"], b["targets"].shape, generator=g).to(b["targets"].dtype)


def _layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The same values in a contiguous, a strided (every other element) or a transposed layout."""
    if layout == "strided":
        out = torch.zeros(*t.shape, 2, dtype=t.dtype)[..., 1]
    elif layout == "transposed" and t.dim() >= 2:
        out = torch.zeros(*reversed(t.shape), dtype=t.dtype).permute(*reversed(range(t.dim())))
    else:
        return t.clone()
    out.copy_(t)
    return out


def corruptions(spec: tc.BatchSpec, batch: dict[str, torch.Tensor]) -> list[tuple[str, callable]]:
    """(name, in-place mutation) pairs, each breaking one data check of the spec at one position."""
    plan = compile_plan(spec)
    dims = {k: v for k, v in _dims(plan, {}).items()}
    for f in plan.fields:
        for s, n in zip(f.shape, batch[f.name].shape, strict=True):
            if isinstance(s, str):
                dims[s] = n
    out = []

    def last(name):
        t = batch[name]
        return tuple(n - 1 for n in t.shape)

    for c in plan.checks:
        if isinstance(c, RangeCheck):
            t = batch[c.field]
            bound = evaluate_scalar(c.bound, dims)
            delta = 1 if not t.dtype.is_floating_point else 0.5
            value = (math.ceil(bound) - delta) if c.kind == "min" else (math.floor(bound) + delta)
            if t.dtype.is_floating_point:
                value = bound - delta if c.kind == "min" else bound + delta
            out.append((f"{c.field}:{c.code}", lambda t=t, v=value: t.__setitem__(last_index(t), v)))
        elif isinstance(c, ValueSetCheck) and batch[c.field].dtype != torch.bool:
            t = batch[c.field]
            out.append((f"{c.field}:not_in_set", lambda t=t: t.__setitem__(mid_index(t), 2)))
        elif isinstance(c, FiniteCheck) and batch[c.field].dtype.is_floating_point:
            t = batch[c.field]
            out.append((f"{c.field}:nan", lambda t=t: t.__setitem__(mid_index(t), float("nan"))))
            out.append((f"{c.field}:inf", lambda t=t: t.__setitem__(last_index(t), float("-inf"))))
    if "attention_mask" in batch:
        out.append(("attention_mask:empty_row", lambda t=batch["attention_mask"]: t[t.shape[0] - 1].zero_()))
    if "labels" in batch and batch["labels"].dim() == 2:
        out.append(("labels:all_ignored", lambda t=batch["labels"]: t.fill_(-100)))
    if "target" in batch and spec.name in ("cross-entropy", "nll"):
        out.append(("target:all_ignored", lambda t=batch["target"]: t.fill_(-100)))
    if "bbox" in batch:
        out.append(("bbox:corners", lambda t=batch["bbox"]: t[0, -1].copy_(torch.tensor([900, 900, 100, 100]))))
    if spec.name == "ctc":
        out.append(("ctc:blank", lambda t=batch["targets"]: t.__setitem__((0, 0), 0)))
        out.append(("ctc:longer", lambda b=batch: b["target_lengths"].__setitem__(-1, int(b["input_lengths"][-1]) + 1)))
        out.append(("ctc:class", lambda t=batch["targets"]: t.__setitem__((-1, 0), 99)))
    if spec.name in ("roberta-sequence-classification", "layoutlmv3-token-classification") and batch["input_ids"].shape[1] > 13:
        out.append(("too_long", lambda t=batch["input_ids"]: t[0].fill_(7)))
    return out


def last_index(t):
    return tuple(n - 1 for n in t.shape)


def mid_index(t):
    return tuple(n // 2 for n in t.shape)


def key(v: tc.Violation):
    """A violation as a tuple, with NaN made comparable (NaN != NaN would fail a plain ==)."""
    value = v.value
    if isinstance(value, float) and math.isnan(value):
        value = "nan"
    return (v.field, v.code, v.rule, v.samples, v.count, v.index, value, v.hint)


def to_device(batch: dict[str, torch.Tensor], device: str) -> dict[str, torch.Tensor]:
    """The batch on `device`, each tensor with its own strides (a strided view stays strided, an
    expanded one expanded: its stored values are copied, then expanded again)."""
    out = {}
    for k, t in batch.items():
        if t.device.type == torch.device(device).type:
            out[k] = t
            continue
        stored = compact(t)
        out[k] = torch.empty_strided(stored.shape, stored.stride(), dtype=t.dtype, device=device)
        out[k].copy_(stored)
        out[k] = out[k].expand(t.shape)
    return out


def assert_same(batch, spec, device="cpu", ran="triton"):
    batch = to_device(batch, device)
    ref = tc.check(batch, spec, backend="torch")
    got = tc.check(batch, spec, backend="triton")
    assert got.backend == ran
    assert [key(v) for v in got.violations] == [key(v) for v in ref.violations]
    assert got.skipped == ref.skipped and got.dims == ref.dims
    return ref


SPECS = tc.builtin_spec_names()


def _dtype_cases():
    cases = []
    for name in SPECS:
        plan = compile_plan(spec_for(name))
        for dt in DTYPES:
            if any(dtype_name(dt) in f.dtypes for f in plan.fields):
                cases.append(pytest.param(name, dt, id=f"{name}-{str(dt).removeprefix('torch.')}"))
    return cases


@pytest.mark.parametrize(("name", "dtype"), _dtype_cases())
def test_every_spec_and_dtype_valid_and_broken_in_several_fields(name, dtype, device):
    spec = spec_for(name)
    batch = make_batch(spec, dtype, seed=hash(name) % 1000)
    ref = assert_same(batch, spec, device)
    assert not ref.violations, ref
    muts = corruptions(spec, batch)
    assert muts, f"no corruption for {name}"
    for _, mutate in muts:
        mutate()
    ref = assert_same(batch, spec, device)
    assert len(ref.violations) >= 2  # several fields at once


# each spec in one non-contiguous layout, the two layouts alternating over the specs
@pytest.mark.parametrize(("name", "layout"), [(n, ("strided", "transposed")[i % 2]) for i, n in enumerate(SPECS)])
def test_each_corruption_alone_on_non_contiguous_inputs(name, layout, device):
    spec = spec_for(name)
    clean = make_batch(spec, seed=1, layout=layout)
    assert any(not t.is_contiguous() for t in clean.values())
    assert_same(clean, spec, device)
    for label, _ in corruptions(spec, clean):
        batch = {k: _layout(v, layout) for k, v in clean.items()}
        dict(corruptions(spec, batch))[label]()
        ref = assert_same(batch, spec, device)
        assert ref.violations, label  # warnings too (a spec may make a check a warning)


@pytest.mark.parametrize(("sizes", "name"), [
    ({"B": 1, "L": 1}, "layoutlmv3-token-classification"),
    ({"B": 2, "L": 150, "T": 130}, "t5-seq2seq"),            # reduce loop over > 128 columns
    ({"N": 1, "C": 1}, "cross-entropy"),
    ({"N": 37, "D": 29}, "bce"),                              # 1073 elements: two programs, ragged tail
    ({"B": 1, "L": 13}, "roberta-sequence-classification"),
    ({"T": 3, "N": 1, "S": 1, "C": 2}, "ctc"),
])
def test_batch_size_one_and_ragged_sizes(sizes, name, device):
    spec = spec_for(name)
    batch = make_batch(spec, sizes=sizes, seed=3)
    assert not assert_same(batch, spec, device).violations
    for _, mutate in corruptions(spec, batch):
        mutate()
    assert assert_same(batch, spec, device).violations


def test_layoutlmv3_large_pixel_tensor_crosses_program_boundary(device):
    spec = spec_for("layoutlmv3-token-classification").with_params(input_size=16)
    batch = make_batch(spec, sizes={"B": 2, "L": 15})
    del batch["position_ids"]                           # the token budget applies without them
    batch["input_ids"][:, :2] = 1                       # pad tokens: 13 counted tokens <= 14
    batch["pixel_values"][1, 2, 15, 3] = float("inf")   # flat index 1536 + 512 + 243: third program
    batch["pixel_values"][1, 2, 15, 9] = float("nan")
    batch["input_ids"][0].fill_(9)                      # 15 non-pad tokens > 16 - 1 - 1
    ref = assert_same(batch, spec, device)
    assert {v.code for v in ref.violations} == {"non_finite", "sequence_too_long"}


def _custom(rules, fields=None, **kw):
    fields = fields or {"x": {"dtype": ["int64", "float32", "float64"], "shape": ["B", "L"]},
                        "y": {"dtype": ["int64", "float32", "float64"], "shape": ["B"]}}
    return tc.BatchSpec.model_validate({"name": "custom", "fields": fields, "rules": rules, **kw})


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.float64])
def test_floor_division_remainder_and_logic_follow_torch(dtype, device):
    spec = _custom([
        "x // 3 != -1",
        "x % 3 != 2",
        "(x % -4 == 0) | (x > 5) & ~(x < 8)",
        "abs(-x) <= 6",
        "x * 2 - y + 1 != 3",
        "sum(x % 2 == 1, dim=L) >= y",
        "all(x > -9, dim=1)",
        "any(x // 2 == y)",
    ])
    x = torch.arange(-8, 8, dtype=dtype).reshape(2, 8)
    y = torch.tensor([1, 5], dtype=dtype)
    assert not assert_same({"x": x, "y": y}, spec, device).ok


def test_more_checks_than_one_flag_word_holds(device):
    """A group of 40 checks keeps their bits in two int32 words (31 a word): every check still
    counts its own violations and first index, the 32nd onwards too."""
    spec = _custom([f"x != {k}" for k in range(40)], fields={"x": {"dtype": "int64", "shape": ["B", "L"]}})
    plan = compile_plan(spec)
    program = tb.program_for(plan, bind(plan, {"x": torch.zeros(2, 3, dtype=torch.int64) - 1}))
    assert len(re.findall(r"^ +flags\w* = bad_", program.source, re.M)) == 2
    x = torch.tensor([[0, 30, 31], [39, 5, 31]], device=device)
    report = assert_same({"x": x}, spec, device)
    assert len(report.violations) == 5


@pytest.fixture(params=["installed", "0 - x"])
def negation(request, monkeypatch):
    """Triton's float negation as installed, and as Triton 3.6 compiles it for GPUs: `0 - x`, which
    makes -(+0.0) +0.0 (3.9 emits an fneg). The interpreter runs the second spelling too, so code
    that would lose a zero's sign on a 3.6 GPU fails here. (On a GPU the compiler's own counts.)"""
    if request.param != "installed":
        if os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("the compiled kernel negates as the installed Triton does")
        from triton.language.semantic import TritonSemantic

        def zero_minus_x(self, x):
            scalar = x.type.scalar
            make = getattr(self, "make_tensor", None) or self.tensor  # (3.6 calls it `tensor`)
            return self.sub(make(self.builder.get_null_value(scalar.to_ir(self.builder)), scalar), x, True)

        monkeypatch.setattr(TritonSemantic, "minus", zero_minus_x)
    return request.param


_FMOD_KERNEL = """
import triton
import triton.language as tl

{helper}

@triton.jit
def fmod_kernel(x_ptr, y_ptr, o_ptr, n):
    offs = tl.program_id(0) * 1024 + tl.arange(0, 1024)
    live = offs < n
    x = tl.load(x_ptr + offs, mask=live, other=1.0)
    y = tl.load(y_ptr + offs, mask=live, other=1.0)
    tl.store(o_ptr + offs, _fmod_f(x, y), mask=live)
"""


_FMOD_EDGES = [(-4.0, 2.0), (2.9999998, 1.0), (16777217.0, 0.1), (1e30, 3.3), (-1e30, 0.1), (3.0, 0.1), (-0.0, 2.0), (0.0, -3.0),
               (float("inf"), 2.0), (5.0, float("inf")), (7.0, 0.0), (1e-40, 3e-41), (-1e-40, 7e-45), (float("nan"), 1.0),
               (1.0, float("nan")), (-7.5, -2.0)]
_FMOD_EDGES_64 = [(1e308, 5e-324), (-1.7976931348623157e308, 3e-310), (2.0**53 + 2, 0.1), (1e300, 3.3),
                  (9007199254740993.0, 3.0), (1e-300, 1e-310), (4.9e-324, 4.9e-324), (1e16, 1e-16)]


@pytest.mark.parametrize(("dtype", "bits"), [(torch.float32, torch.int32), (torch.float64, torch.int64)])
def test_fmod_is_exact(tmp_path, device, dtype, bits, negation):
    """The kernel's float fmod (behind `%` and `//`) is C's fmod to the bit, however large the
    quotient (Triton's own `%` is a - trunc(a / b) * b on GPUs, wrong when a / b rounds across an
    integer or overflows); checked against numpy's fmod over random bit patterns and edge cases,
    a zero result with the dividend's sign (-0.0 from -0.0 or -4.0) under either negation."""
    import importlib.util

    import numpy as np
    from tritoncheck.codegen import triton as codegen
    name = "_fmod_f" if dtype == torch.float32 else "_fmod_d"
    path = tmp_path / "fmod_kernel.py"
    path.write_text(_FMOD_KERNEL.format(helper=codegen._HELPERS[name]).replace("_fmod_f(x, y)", f"{name}(x, y)"))
    spec = importlib.util.spec_from_file_location("fmod_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    g = torch.Generator().manual_seed(0)
    info = torch.iinfo(bits)
    x, y = (torch.randint(info.min, info.max, (4000,), generator=g, dtype=torch.int64).to(bits).view(dtype)
            for _ in range(2))
    edges = _FMOD_EDGES + (_FMOD_EDGES_64 if dtype == torch.float64 else [])
    x = torch.cat([x, torch.tensor([a for a, _ in edges], dtype=dtype)])
    y = torch.cat([y, torch.tensor([b for _, b in edges], dtype=dtype)])
    out = torch.empty_like(x)
    xd, yd, od = x.to(device), y.to(device), out.to(device)
    module.fmod_kernel[(-(-len(x) // 1024),)](xd, yd, od, len(x))
    with np.errstate(all="ignore"):
        want = torch.from_numpy(np.fmod(x.numpy(), y.numpy()))
    got = od.cpu()
    same = (got.view(bits) == want.view(bits)) | (got.isnan() & want.isnan())
    assert bool(same.all()), (x[~same][:5], y[~same][:5], got[~same][:5], want[~same][:5])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_zeros_sign_follows_torch(device, dtype, negation):
    """-(+0.0) is -0.0 and a zero remainder has the dividend's sign, as in torch; `1 // z` tells the
    zeros apart (-inf or +inf), so a kernel that loses the sign gives another verdict."""
    spec = _custom(["1 // -y >= 0", "1 // (y % 2) >= 0", "1 // (y % -3) <= 0"],
                   fields={"y": {"dtype": dtype, "shape": ["B"]}})
    y = torch.tensor([0.0, -4.0, 3.0, -0.0, 6.0], dtype=getattr(torch, dtype), device=device)
    report = assert_same({"y": y}, spec, device)
    assert [(v.rule, v.count, v.index) for v in report.violations] == [
        ("1 // -y >= 0", 3, (0,)), ("1 // (y % 2) >= 0", 2, (1,)), ("1 // (y % -3) <= 0", 3, (0,))]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_nan_and_fractional_bounds_follow_torch(dtype, device):
    fields = {"x": {"dtype": "float", "shape": ["B", "L"], "min": -0.1, "max": 0.3, "allow": [-1.5]},
              "m": {"dtype": ["int", "float"], "shape": ["B", "L"], "min": 0.5, "max": 2.5, "values": [1, 2, 7]},
              "v": {"dtype": "float", "shape": ["B"], "values": [0.1, 0.2], "finite": True}}
    spec = _custom(["x < v + 0.2 where m != 1", "x == x"], fields)
    # 0.3000000001 lies between 0.3 and float32(0.3): only a float64 comparison flags it
    x = torch.tensor([[0.1, float("nan"), -1.5, 0.3], [-0.1, 0.3000000001, float("inf"), -0.2]], dtype=dtype)
    m = torch.tensor([[1, 2, 3, 0], [2, 2, 1, 7]])
    v = torch.tensor([0.1, float("nan")], dtype=dtype)
    assert_same({"x": x, "m": m, "v": v}, spec, device)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_bounds_that_depend_on_dims_are_runtime_arguments(dtype, device):
    fields = {"x": {"dtype": "float", "shape": ["B", "L"], "max": "L * 0.1", "min": "-L"},
              "m": {"dtype": "int", "shape": ["B", "L"], "max": "L * 0.5", "min": "L * -0.5"}}
    spec = _custom([], fields)
    for length in (3, 5):
        x = torch.full((2, length), length * 0.1, dtype=torch.float64)
        x[1, -1] = length * 0.1 + 1e-12
        x[0, 0] = -length - 1e-12
        m = torch.tensor([[length // 2 + 1, -(length // 2) - 1] + [0] * (length - 2)] * 2)
        report = assert_same({"x": x.to(dtype), "m": m}, spec, device)
        assert {v.code for v in report.violations} == {"above_max", "below_min"}


def test_negative_indices_and_bool_fields(device):
    fields = {"box": {"dtype": "int", "shape": ["B", 4]}, "keep": {"dtype": "bool", "shape": ["B"]}}
    spec = _custom(["box[:, -1] >= box[:, 1] where keep", "box[..., -4] <= box[:, 2]"], fields)
    box = torch.tensor([[0, 5, 3, 4], [1, 1, 0, 2], [0, 0, 9, 9]])
    keep = torch.tensor([True, False, True])
    assert not assert_same({"box": box, "keep": keep}, spec, device).ok


def test_nested_reduction_falls_back_to_the_torch_backend(device):
    spec = _custom(["any(sum(x > 0, dim=L) > 2)"])
    batch = to_device({"x": torch.zeros(2, 3, dtype=torch.int64), "y": torch.zeros(2, dtype=torch.int64)}, device)
    plan = compile_plan(spec)
    assert tb.program_for(plan, bind(plan, batch)) is None
    assert tb.launch(plan, bind(plan, batch)).backend == "torch"
    assert not assert_same(batch, spec, device, ran="torch").ok


def test_huge_expanded_views_and_host_scalars_past_int64_are_left_to_the_torch_backend(device):
    """An expanded dim no rule reads positions along is walked once (2**31 here); one along a
    positional dim past EXPANDED_WALK_LIMIT goes to torch, which reads its stored values once.
    A dim expression past int64 computes as a float in torch: no int64 kernel says that."""
    spec = _custom(["x < L * 4611686018427387904"])
    plan = compile_plan(spec)
    x = torch.tensor([[3], [2**63 - 1]], device=device)  # L = 1: the bound is 2**62
    y = torch.zeros(2, dtype=torch.int64, device=device)
    for batch, ran in [({"x": x, "y": y}, "triton"), ({"x": x[1:].expand(2, 1), "y": y}, "triton"),
                       ({"x": x[1:].expand(2**31, 1), "y": y.new_zeros(1).expand(2**31)}, "triton"),  # walked once
                       ({"x": x.expand(2, 2), "y": y}, "torch"),  # L = 2: the bound is 2**63
                       ({"x": x.repeat(1, 2), "y": y}, "torch")]:
        pending = tb.launch(plan, bind(plan, batch))
        assert pending.backend == ran
        assert pending.result() == list(tc.check(batch, spec, backend="torch").violations)
    spec = _custom(["x[:, 0] <= sum(y)"])  # the sum reads y's positions along B
    plan = compile_plan(spec)
    # (the kernel sums y at each of the n positions: n + n**2 within ir.KERNEL_WALK_LIMIT at 2**7, not at 2**10)
    for n, ran in [(2**7, "triton"), (2**10, "torch"), (tb.EXPANDED_WALK_LIMIT + 1, "torch")]:
        batch = {"x": torch.tensor([[3]], device=device).expand(n, 1), "y": y.new_ones(1).expand(n)}
        pending = tb.launch(plan, bind(plan, batch))
        assert pending.backend == ran
        assert pending.result() == list(tc.check(batch, spec, backend="torch").violations)


def test_expanded_views_run_on_the_kernel(device):
    """A small expanded view is read through its zero strides, with the torch backend's report."""
    spec = _custom(["x[:, 0] <= y"])
    row = torch.tensor([[0, 5, 2]], device=device)
    y = torch.tensor([1], device=device).expand(4)
    batch = {"x": row.expand(4, 3), "y": y}
    assert tb.launch(compile_plan(spec), bind(compile_plan(spec), batch)).backend == "triton"
    assert assert_same(batch, spec, device).ok
    bad = {"x": torch.tensor([[2], [0]], device=device).expand(2, 3), "y": torch.ones(2, dtype=torch.int64,
                                                                                       device=device)}
    assert not assert_same(bad, spec, device).ok


def _count_launches(monkeypatch, spec, batch):
    """Check `batch` once (compiled and warm), then count the launches: each through Triton's JIT
    (its keyword arguments recorded) and, on CUDA, each through the compiled kernel's own launcher
    (`Direct`, recorded as "direct")."""
    tc.check(batch, spec, backend="triton")
    program = tb.program_for(compile_plan(spec), bind(compile_plan(spec), batch))
    calls = []
    cls = type(program.fn)
    original, original_direct = cls.run, tb.Direct.__call__

    def counting(self, *args, **kwargs):
        calls.append(kwargs)
        return original(self, *args, **kwargs)

    def counting_direct(self, *args):
        launched = original_direct(self, *args)
        if launched:
            calls.append("direct")
        return launched

    monkeypatch.setattr(cls, "run", counting)
    monkeypatch.setattr(tb.Direct, "__call__", counting_direct)
    return calls


@pytest.mark.parametrize("name", ["layoutlmv3-token-classification", "ctc"])
def test_exactly_one_launch_per_check_valid_or_not(monkeypatch, name, device):
    spec = spec_for(name)
    batch = make_batch(spec)
    calls = _count_launches(monkeypatch, spec, to_device(batch, device))
    assert tc.check(to_device(batch, device), spec, backend="triton").ok
    assert len(calls) == 1
    assert calls[0] == "direct" if device == "cuda" else calls[0]["enable_fp_fusion"] is False  # torch rounds a * b + c twice
    for _, mutate in corruptions(spec, batch):
        mutate()
    report = tc.check(to_device(batch, device), spec, backend="triton")
    assert len(report.violations) > 3
    assert len(calls) == 2


def test_a_dirty_buffer_is_reset_before_reuse(device):
    spec = spec_for("bert-sequence-classification")
    plan = compile_plan(spec)
    good = to_device(make_batch(spec), device)
    bad = make_batch(spec)
    bad["labels"][0] = 99
    bad = to_device(bad, device)
    assert [v.code for v in tb.run(plan, bind(plan, bad))] == ["above_max"]
    assert tb.run(plan, bind(plan, good)) == []
    assert [v.code for v in tb.run(plan, bind(plan, bad))] == ["above_max"]


def test_a_valid_batch_writes_nothing(device):
    spec = spec_for("mse")
    plan = compile_plan(spec)
    good = to_device(make_batch(spec), device)
    first = tb.launch(plan, bind(plan, good))
    slot = first.slot
    assert first.result() == []  # the slot goes back to the pool
    slot.device.fill_(-7)        # poison it: a launch that writes nothing leaves the poison
    pending = tb.launch(plan, bind(plan, good))
    assert pending.slot is slot
    assert set(slot.device.tolist()) == {-7}
    if pending.event is not None:  # on a GPU the launch also started the copy back, which read the poison
        pending.event.synchronize()
    assert set(slot.host.tolist()) == {-7}
    slot.device.zero_()          # unpoison what result() reads, so the slot goes back to the pool clean
    slot.host.zero_()
    assert pending.result() == []
    bad = make_batch(spec)
    bad["input"][1, 1] = float("nan")
    pending = tb.launch(plan, bind(plan, to_device(bad, device)))
    assert set(pending.slot.device.tolist()) != {0}  # and a bad one does write
    assert [v.code for v in pending.result()] == ["non_finite"]


def test_threads_get_their_own_buffers(device):
    spec = spec_for("cross-entropy")
    batches = []
    for i in range(6):
        b = make_batch(spec, seed=i)
        if i % 2:
            b["target"][i % 3] = 5 + i
        batches.append(to_device(b, device))
    expected = [[key(v) for v in tc.check(b, spec, backend="torch").violations] for b in batches]
    results: dict[int, list] = {}

    def work(i):
        results[i] = [key(v) for v in tc.check(batches[i], spec, backend="triton").violations]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[i] for i in range(6)] == expected


def test_deferred_validate_raises_at_next_call_or_wait(device):
    spec = spec_for("cross-entropy")
    good = to_device(make_batch(spec), device)
    bad = make_batch(spec)
    bad["target"][1] = 42
    bad = to_device(bad, device)
    assert tc.validate(good, spec, deferred=True, backend="triton") is good
    assert tc.validate(bad, spec, deferred=True, backend="triton") is bad  # no raise yet
    with pytest.raises(tc.BatchValidationError) as info:
        tc.validate(good, spec, deferred=True, backend="triton")
    assert [key(v) for v in info.value.report.violations] == [key(v) for v in tc.check(bad, spec).violations]
    tc.wait()  # the good batch that followed is fine
    tc.validate(bad, spec, deferred=True)  # the auto backend raises deferred too
    with pytest.raises(tc.BatchValidationError):
        tc.wait()
    tc.wait()  # nothing pending any more


def test_deferred_validate_logs_a_passing_batchs_warnings(device, caplog):
    """Deferred validation logs the warnings of a batch that passes, as validate does (the first of
    each field and code at WARNING, repeats at DEBUG)."""
    spec = spec_from_dict({"name": "deferred-warning", "fields": {"x": {
        "dtype": "int64", "shape": ["B"], "max": 3, "severity": {"above_max": "warning"}}}}, "w.yaml")
    batch = {"x": torch.tensor([0, 7], device=device)}
    with caplog.at_level(logging.DEBUG, logger="tritoncheck"):
        assert tc.validate(batch, spec, backend="triton", deferred=True) is batch
        tc.wait()
    assert any("x[1]" in r.getMessage() and "deferred-warning" in r.getMessage() for r in caplog.records)


def test_deferred_strict_counts_warnings(device):
    """A batch with only a warning passes deferred validation, and raises with `strict`."""
    from tritoncheck.api import deferred
    spec = spec_for("bert-token-classification")
    batch = make_batch(spec)
    batch["attention_mask"][0].zero_()  # a row that attends to nothing: a warning
    batch = to_device(batch, device)
    report = tc.check(batch, spec, backend="triton")
    assert report.ok and report.violations and report.violations[0].severity == "warning"
    deferred.submit(batch, spec, backend="triton")
    tc.wait()  # not an error
    deferred.submit(batch, spec, backend="triton", strict=True)
    with pytest.raises(tc.BatchValidationError) as info:
        tc.wait()
    assert [v.severity for v in info.value.report.violations] == ["error"]


def test_cpu_tensors_without_the_interpreter_get_a_clear_error(monkeypatch):
    spec = spec_for("mse")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="needs CUDA tensors"):
        tc.check(make_batch(spec), spec, backend="triton")


@pytest.mark.parametrize("name", ["layoutlmv3-token-classification", "ctc"])
def test_int64_indexing_path_gives_the_same_report(monkeypatch, name, device):
    """Batches past 2**31 elements index in int64; force that path with a tiny limit."""
    spec = spec_for(name)
    batch = make_batch(spec, layout="transposed")
    for _, mutate in corruptions(spec, batch):
        mutate()
    plan = compile_plan(spec)
    bound = bind(plan, to_device(batch, device))
    program = tb.program_for(plan, bound)
    assert tb.launch_for(program, bound).wide is False  # int32 indices
    monkeypatch.setattr(tb, "INT32_LIMIT", 4)
    assert tb.launch_for(program, bound).wide is True
    assert not assert_same(batch, spec, device).ok


@pytest.mark.parametrize("dtype, rule, x", [
    ("int64", "((-0.5 > arange(B)) & isfinite(2)) | (x < 0)", torch.arange(5)),
    ("int16", "(x < 0.5) & (1 <= -1) & (x > 0)", torch.arange(2).to(torch.int16)),
    ("int64", "any(((x < 0.5) & (1 <= -1)) | (x > 1), dim=B) | (x >= 0)", torch.arange(4)),
    # a 0-d constant numerator of a float64 floor division (the fuzz finding's `abs(0.1 // N) != N`)
    ("int32", "abs(0.1 // x) != x", torch.tensor([1, -2, 3, 0], dtype=torch.int32)),
    ("float64", "(0.1 // x != 0.5 % x) | (x < 0)", torch.tensor([1.0, -2.0, 0.0, float("nan")], dtype=torch.float64)),
    ("float32", "(3 // x >= 0) & ((B * 0.5 > 1) | isfinite(B * 0.5)) & (2 % x < 1)", torch.tensor([1.0, -2.0, 0.0])),
    ("int64", "((-3 % x) * (7 // x) < 2) | (B * 0.5 != B * 0.5)", torch.tensor([1, -2, 0, 5])),
])
def test_constant_booleans_combine_with_blocks(device, dtype, rule, x):
    """Constants and host scalars meet blocks (under `&`, `|`, `~`, and inside the floor-division and
    remainder helpers): every value is a block of its scope's shape, so the interpreter never widens
    a broadcast 0-d bool and raises InterpreterError in bitwise_and / bitwise_or)."""
    spec = spec_from_dict({"name": "s", "fields": {"x": {"dtype": dtype, "shape": ["B"]}}, "rules": [rule]},
                                   "<t>")
    batch = to_device({"x": x}, device)
    got, ref = tc.check(batch, spec, backend="triton"), tc.check(batch, spec, backend="torch")
    assert got.backend == "triton"
    assert got.to_dict() | {"backend": "-"} == ref.to_dict() | {"backend": "-"}


def test_fuzz_finding_constant_operands_across_groups(device):
    """The differential fuzz's spec (issue 10): each rule alone passed; together, or with an int32
    N, `0.1 // N` raised InterpreterError (bitwise_and on a widened bool) inside `_floordiv_d`. (The
    fuzz's first rule was `... | (N < 0)`, over tl too: a reduction over the check's own axis now goes
    to the torch backend, so it is written over i here.)"""
    rules = ["(all(arange(tl) >= 0.5, dim=0)) | (i < 0)", "(-(-100) * isfinite(255) % 2) < 0.5 <= N[:, :, -1]",
             "isfinite(abs(N)) % 2 < i where not (N == N <= i[-1])", "abs(0.1 // N) != N != tl"]
    spec = spec_from_dict({"name": "s", "batch_dim": "K", "rules": rules, "fields": {
        "N": {"dtype": ["float16", "int32"], "shape": ["K", "B", "tl"]}, "i": {"dtype": "int", "shape": [1]}}}, "<t>")
    for n in (torch.tensor([[[1, -2, 3]], [[0, 5, 2]]], dtype=torch.int32),
              torch.tensor([[[1.0, -2.0, 3.0]], [[0.0, float("inf"), 0.1]]], dtype=torch.float16)):
        assert not assert_same({"N": n, "i": torch.tensor([1])}, spec, device).ok


def test_a_small_batch_splits_its_rows_to_fill_a_wave(device):
    """Causal LM at 2 x 2048: the row reductions (`any` per row, `any` over the batch) were one
    program walking every step of the rows; they now split until each program walks one step
    (`tb.WAVE`), and every report, valid or not, equals the torch backend's."""
    spec = tc.load_spec("causal-lm", vocab_size=50, max_position_embeddings=2048)
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 50, (2, 2048), generator=g)
    labels = ids.clone()
    labels[:, :700] = -100
    valid = {"input_ids": ids, "attention_mask": torch.ones(2, 2048, dtype=torch.int64), "labels": labels}
    plan = compile_plan(spec)
    bound = bind(plan, to_device(valid, device))
    reductions = [gl for p, gl in zip(tb.program_for(plan, bound).groups, tb.geometry(tb.program_for(plan, bound),
                                                                                     bound.dim_values()), strict=True)
                  if p.reduce]
    assert [(gl.split, gl.tiles) for gl in reductions] == [(4, 1), (2, 1)]  # 16 and 4 steps of a row, 1 a program
    assert assert_same(valid, spec, device).ok
    broken = []
    for change in ("no attended position in row 1", "every label ignored", "a padded row, a label past the vocabulary"):
        b = {k: v.clone() for k, v in valid.items()}
        if change == "no attended position in row 1":
            b["attention_mask"][1] = 0
        elif change == "every label ignored":
            b["labels"][:] = -100
        else:
            b["attention_mask"][0, 1500:] = 0  # parts of row 0 see only padding: they leave `any` open
            b["labels"][1, 1999] = 50
        broken.append([v.code for v in assert_same(b, spec, device).violations])
    assert broken == [["no_attended_position"], ["all_ignored"], ["above_max"]]
    pending = tb.launch(plan, bind(plan, to_device(valid, device)))  # after the bad ones: clean, and valid
    values = pending.slot.host if pending.event is None else (pending.event.synchronize(), pending.slot.host)[1]
    assert not values.any() and pending.result() == []
