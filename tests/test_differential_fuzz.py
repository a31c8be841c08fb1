"""Differential fuzz (issue 10): random YAML specs x random batches, every backend, one report.

For each example, `tc.load_spec` on the written YAML may raise only `tc.SpecError`; a spec that
loads must give a report from `tc.check` on every backend this machine has (torch; Triton, under
its interpreter without a GPU; "c" where `check` accepts it) without raising, and the reports must
be identical but for `backend`. Specs and batches come from tests/fuzz_specs.py. The one exception
`check` may raise is `tc.UncheckableBatchError` (a rule that would walk an expanded dim's logical
size), with the same message on every backend.

Batches include lazy negation/conjugation views, bool tensors holding bytes other than 0/1,
expanded views, signed zeros and float rounding edges in bounds and rules (and values at and one
step around each), rules that compare a value with a reduction over its own axis, dims past 2**31
whose fields are empty, and dims past 65,536 stored once (on Triton only where no rule reduces).
Some specs have fields of one shape, each bounded and reduced along an axis by a rule, with values
past their bounds: the checks the Triton printer fuses into a reduction's loop.
The torch report is also compared with the torch report of the batch materialized contiguous.
CI runs a bounded, derandomized search. A longer run, with a fresh random seed (printed, and
added to the failure) and no example database, is one command:

    TRITONCHECK_FUZZ_EXAMPLES=20000 TRITONCHECK_FUZZ_SEED=random python -m pytest -q -s -n 0 tests/test_differential_fuzz.py

(`-n 0`: in one process, so that `-s` shows the seed and the counts.)

`TRITONCHECK_FUZZ_MINUTES=N` makes each of the two parametrizations go on for N minutes (or until
TRITONCHECK_FUZZ_EXAMPLES examples are run, where it is given), in searches of ROUND examples each
seeded from the run's seed; a failure names the seed and example count that replay it:
`TRITONCHECK_FUZZ_SEED=<int> TRITONCHECK_FUZZ_EXAMPLES=<n>` (without MINUTES) replays one search.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fuzz_specs import Case, FieldModel, batches, cases
from hypothesis import HealthCheck, Phase, find, given, seed, settings
from hypothesis import strategies as st
from report_compare import comparable

import tritoncheck as tc
from tritoncheck.backends import torch as torch_backend

MINUTES = float(os.environ.get("TRITONCHECK_FUZZ_MINUTES", "0"))  # go on for this long (each parametrization)
# (a timed run is bounded by its minutes alone unless TRITONCHECK_FUZZ_EXAMPLES is given too)
EXAMPLES = int(os.environ.get("TRITONCHECK_FUZZ_EXAMPLES", "150" if not MINUTES else str(10**9)))
ROUND = 200  # examples per seed of a timed run
# a batch is also checked materialized up to this many logical elements: an expanded 70,000 x 1025
# x 2 field materialized took the torch backend 130 s and 2.3 GB (the view itself: 0.6 s, 45 MiB)
MATERIALIZE_LIMIT = 2**22
_SEED_ENV = os.environ.get("TRITONCHECK_FUZZ_SEED")
SEED = None if _SEED_ENV is None else random.randrange(2**32) if _SEED_ENV == "random" else int(_SEED_ENV)
if SEED is not None:
    print(f"differential fuzz: TRITONCHECK_FUZZ_SEED={SEED}", file=sys.stderr)

SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=SEED is None,
    database=None,
    deadline=None,
    print_blob=SEED is not None,
    # no shrinking: each smaller example generates and interprets a new kernel, which took Hypothesis
    # over five minutes; the first failing example is printed whole (spec text, batch as code)
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                           HealthCheck.large_base_example],
)
TRIVIAL_SPEC = {"name": "probe", "fields": {"x": {"dtype": "float32", "shape": ["B"]}}}


def available_backends() -> list[str]:
    """torch always; triton when it imports; "c" when `check` accepts it (it raises ValueError otherwise)."""
    out = ["torch"]
    try:
        import triton  # noqa: F401
        out.append("triton")
    except ImportError:
        pass
    try:
        tc.check({"x": torch.zeros(1)}, tc.BatchSpec.model_validate(TRIVIAL_SPEC), backend="c")
        out.append("c")
    except ValueError:
        pass
    return out


BACKENDS = available_backends()


def on_device(batch: dict[str, Any], backend: str) -> dict[str, Any]:
    """Triton's batch goes to the GPU where one exists and the interpreter is off; others stay on CPU.

    A numpy array goes too when torch can view it (else it stays, and is `not_a_tensor` everywhere),
    so that no field is left behind on the CPU to make a device mismatch of its own.
    """
    if backend != "triton" or not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        return batch
    return {k: _to_cuda(v) for k, v in batch.items()}


def _to_cuda(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        try:
            value = torch.from_numpy(value)
        except (TypeError, ValueError):
            return value
    return value.cuda() if isinstance(value, torch.Tensor) else value


def report_of(batch: dict[str, Any], spec: tc.BatchSpec, backend: str) -> dict[str, Any]:
    try:
        report = tc.check(on_device(batch, backend), spec, backend=backend)
    except tc.UncheckableBatchError as exc:  # (a rule would walk an expanded dim: refused alike everywhere)
        return {"refused": str(exc)}
    except Exception as exc:
        exc.add_note(f"tc.check(batch, spec, backend={backend!r}) raised")
        raise
    d = report.to_dict()
    d.pop("backend")
    return comparable(d)


@pytest.fixture(scope="module")
def spec_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz-specs")


def check_case(case: Case, spec_dir: Path, backends: tuple[str, ...] = BACKENDS) -> bool:
    """The property: only SpecError at load; no exception from check; the same report everywhere.
    False where the spec did not load."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", dir=spec_dir, delete=False, encoding="utf-8") as f:
        f.write(case.yaml_text)
    try:
        spec = tc.load_spec(f.name)
    except tc.SpecError:
        return False
    finally:
        os.unlink(f.name)
    reports = {b: report_of(case.batch, spec, b) for b in backends}
    if "refused" not in reports["torch"] and sum(
            v.numel() for v in case.batch.values() if isinstance(v, torch.Tensor)) <= MATERIALIZE_LIMIT:
        reports["torch, the batch materialized"] = report_of(materialized(case.batch), spec, "torch")
    reference = reports["torch"]
    for b, r in reports.items():
        assert r == reference, f"backend {b!r} disagrees with torch:\n{_diff(reference, r)}"
    return True


def materialized(batch: dict[str, Any]) -> dict[str, Any]:
    """The batch as plain contiguous tensors: lazy bits resolved, expanded and strided views copied
    (a bool's bytes stay as stored). Its report must equal the batch's."""
    return {k: v.resolve_conj().resolve_neg().contiguous() if isinstance(v, torch.Tensor) else v
            for k, v in batch.items()}


def _diff(a: dict, b: dict) -> str:
    lines = []
    for key in a.keys() | b.keys():
        if a.get(key) != b.get(key):
            lines.append(f"  {key}:\n    torch: {a.get(key)!r}\n    other: {b.get(key)!r}")
    return "\n".join(lines)


def fuzz(spec_dir: Path, backends: tuple[str, ...], examples: int, seed_value: int | None) -> dict[str, int]:
    """One Hypothesis search of `examples` cases (derandomized where `seed_value` is None); returns
    how many examples ran and how many specs loaded (those reached every backend)."""
    counts = {"examples": 0, "loaded": 0}

    @settings(SETTINGS, max_examples=examples, derandomize=seed_value is None)
    @given(data=st.data())
    def search(data):
        case = data.draw(cases(huge="empty" if "triton" in backends else True), label="case")
        counts["examples"] += 1
        try:
            counts["loaded"] += check_case(case, spec_dir, backends)
        except Exception as exc:
            if seed_value is not None:
                exc.add_note(f"replay: TRITONCHECK_FUZZ_SEED={seed_value} TRITONCHECK_FUZZ_EXAMPLES={examples}")
            raise

    (search if seed_value is None else seed(seed_value)(search))()
    return counts


@pytest.mark.parametrize("backends", [tuple(b for b in BACKENDS if b != "triton"), BACKENDS], ids=["torch-c", "all"])
def test_random_specs_and_batches_give_one_report_on_every_backend(spec_dir, backends, monkeypatch):
    """See the module docstring; a failure prints the spec text and the batch as Python code.

    Every backend gets dims no backend may walk in full: past 2**31 with every field empty, and past
    65,536 with every field expanded (Triton only where no rule reduces). With
    TRITONCHECK_FUZZ_MINUTES, searches of ROUND examples, each with a seed of its own drawn from the
    run's seed, go on until that many minutes have passed. On the torch-c leg the torch backend
    evaluates piecewise every rule that it can (`PIECEWISE_FROM`), along dims a rule reads with `arange`
    and no field stores.
    """
    if "triton" not in backends:  # the torch backend evaluates piecewise every rule it can (past WALK_LIMIT only,
        # else), against C's walk of every position and the batch materialized; the other leg checks its usual path
        monkeypatch.setattr(torch_backend, "PIECEWISE_FROM", 0)
    start = time.monotonic()
    if not MINUTES:
        counts = fuzz(spec_dir, backends, EXAMPLES, SEED)
    else:
        seeds = random.Random(SEED)
        counts = {"examples": 0, "loaded": 0}
        while time.monotonic() - start < MINUTES * 60 and counts["examples"] < EXAMPLES:
            round_seed = seeds.randrange(2**32)
            for k, n in fuzz(spec_dir, backends, min(ROUND, EXAMPLES - counts["examples"]), round_seed).items():
                counts[k] += n
    print(f"differential fuzz {'+'.join(backends)}: seed {SEED}, {counts['examples']} examples "
          f"({counts['loaded']} specs loaded and checked), {time.monotonic() - start:.0f} s", file=sys.stderr)


def _float32_edges(c: float) -> set[float]:
    """The float32 values just below and above `c` (equal where float32 holds it) and one step past each."""
    r = np.float32(c)
    down = r if float(r) <= c else np.nextafter(r, np.float32(-np.inf))
    up = r if float(r) >= c else np.nextafter(r, np.float32(np.inf))
    return {float(np.nextafter(down, np.float32(-np.inf))), float(down), float(up),
            float(np.nextafter(up, np.float32(np.inf)))}


def test_expression_bounds_and_rule_parts_are_drawn_at_their_rounding_edges():
    """A bound or rule constant written as an expression gets batch values at and one float32 step
    around its value with the drawn parameters and dims, as a number does: `max: n - 1` with n = 2**24 + 2
    (float32 holds no n - 1), the rule `y < V * 0.1`, and `min: L // 2` on an int64 field (L drawn)."""
    models = [FieldModel("x", ["float32"], [("dim", "L")], max="n - 1"), FieldModel("y", ["float32"], [("dim", "L")]),
              FieldModel("z", ["int64"], [("dim", "L")], min="L // 2")]
    params = {"n": 2**24 + 2, "V": 3}
    wanted = {"x": _float32_edges(2**24 + 1), "y": _float32_edges(3 * 0.1)}
    assert wanted["x"] == {2**24 - 1, 2**24, 2**24 + 2, 2**24 + 4}
    drawn = batches(models, params, False, rules=["y < V * 0.1"])

    def has(batch: dict[str, Any], name: str) -> bool:
        t = batch.get(name)
        if not isinstance(t, torch.Tensor) or t.dim() != 1:
            return False
        values = set(t.tolist())
        if name == "z":
            return {t.shape[0] // 2 - 1, t.shape[0] // 2, t.shape[0] // 2 + 1} <= values
        return wanted[name] <= values

    for name in ("x", "y", "z"):
        find(drawn, lambda b, name=name: has(b, name),
             settings=settings(max_examples=3000, derandomize=True, database=None, phases=[Phase.generate]))
