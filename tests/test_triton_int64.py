"""The int64-index kernel (a batch past 2**31 elements) divides by magic numbers, as the int32 one does.

`_divmod` takes (magic, shift) from `backend.divisor_magic` in the width of the indices: 64-bit
ones for int64 indices, so the valid path has no division instruction (issue 22). A batch that
large does not fit this machine's tests, so the launch is made wide by lowering the backend's
int32 limit: the same kernel and arguments a batch past 2**31 elements gets, on a small batch,
whose reports must equal the torch backend's.
"""

from __future__ import annotations

import random

import pytest
import torch

import tritoncheck as tc
from tritoncheck.plan.lower import bind, compile_plan

pytest.importorskip("triton", reason="pip install triton (in the test extra)")

from tritoncheck.backends import triton as tb  # noqa: E402


def test_64_bit_magic_divides_exactly():
    """n // d == (umulhi(n, magic) + n) >> shift in unsigned 64-bit arithmetic for 0 <= n < 2**63."""
    rng = random.Random(0)
    divisors = [1, 2, 3, 7, 509, 2**31 - 1, 2**31, 2**31 + 1, 2**40 + 3, 2**62 + 1, 2**63 - 1]
    divisors += [rng.randrange(1, 2**63) for _ in range(300)] + [rng.randrange(1, 2**20) for _ in range(300)]
    for d in divisors:
        magic, shift = tb.divisor_magic(d, 64)
        assert -(2**63) <= magic < 2**63 and 0 <= shift <= 63
        m = magic % 2**64
        for n in [0, 1, d - 1, d, d + 1, 2**63 - 1, (2**63 - 1) // d * d, *(rng.randrange(2**63) for _ in range(30))]:
            if 0 <= n < 2**63:
                total = (n * m >> 64) + n
                assert total < 2**64 and total >> shift == n // d, (n, d)


def _key(report):
    return [(v.field, v.code, v.samples, v.count, v.index, str(v.value)) for v in report.violations]


@pytest.fixture
def wide(monkeypatch):
    monkeypatch.setattr(tb, "INT32_LIMIT", 0)


def _same(batch, spec):
    ref = tc.check(batch, spec, backend="torch")
    got = tc.check(batch, spec, backend="triton")
    assert got.backend == "triton" and _key(got) == _key(ref)
    return ref


def test_a_wide_launch_passes_64_bit_magic(wide):
    spec = tc.load_spec("causal-lm", vocab_size=100, max_position_embeddings=64)
    plan = compile_plan(spec)
    batch = {"input_ids": torch.zeros(3, 37, dtype=torch.int64), "labels": torch.zeros(3, 37, dtype=torch.int64)}
    program = tb.program_for(plan, bind(plan, batch))
    launch = tb.launch_for(program, bind(plan, batch))
    assert launch.wide and program.divisors == ("L",)
    at = len(program.kernel.sizes) + sum(len(f.axes) for f in program.kernel.fields if not f.contiguous)
    assert launch.rest[at:at + 2] == tb.divisor_magic(37, 64) != tb.divisor_magic(37, 32)


def test_wide_kernels_report_as_the_torch_backend(wide):
    """Positions from `_divmod` in 64 bits: arange along L (the causal LM's shift), the sample of an
    element-wise violation, and strided LayoutLMv3 fields walked by position."""
    g = torch.Generator().manual_seed(0)
    causal = tc.load_spec("causal-lm", vocab_size=100, max_position_embeddings=512)
    for B, L in [(3, 37), (2, 130)]:
        labels = torch.full((B, L), -100, dtype=torch.int64)
        labels[-1, 0] = 5  # only position 0 is labelled: all ignored after the shift (arange(L) > 0)
        ids = torch.randint(0, 100, (B, L), generator=g)
        ids.view(-1)[torch.randint(0, B * L, (3,), generator=g)] = 200
        ref = _same({"input_ids": ids, "labels": labels}, causal)
        assert {v.code for v in ref.violations} == {"above_max", "all_ignored"}
        labels[-1, 1] = 7
        ref = _same({"input_ids": ids, "labels": labels, "attention_mask": torch.ones(B, L, dtype=torch.int64)}, causal)
        assert {v.code for v in ref.violations} == {"above_max"}
    layout = tc.load_spec("layoutlmv3-token-classification", num_labels=5, max_2d_position_embeddings=1024,
                          vocab_size=100, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1,
                          num_channels=3, input_size=224)
    B, L = 2, 19
    bbox = torch.randint(0, 500, (B, L, 4), generator=g)
    bbox[..., 2:] += bbox[..., :2]
    bbox[1, 3, 0] = bbox[1, 3, 2] + 1  # x0 > x1
    batch = {"input_ids": torch.randint(0, 100, (B, L), generator=g), "bbox": bbox.transpose(0, 1).contiguous().transpose(0, 1),
             "attention_mask": torch.ones(B, L, dtype=torch.int64), "labels": torch.randint(0, 5, (B, L), generator=g)}
    ref = _same(batch, layout)
    assert ref.violations
