"""A/B the torch backend against a variant of `_torch_backend.py`, in one run, same batches.

    cp tritoncheck/_torch_backend.py /tmp/variant.py && (cd /tmp && patch -p1 ...)   # or any edit
    python benchmarks/compare_torch_backend.py /tmp/variant.py --clock thread

Checks first that both give the same report (valid and broken batch of every scenario), then times
hand-assert, the floor, the current backend and the variant, rounds interleaved, 1 thread.
"""

from __future__ import annotations

import argparse
import importlib.util

import torch

import tritoncheck as tc
from tritoncheck import _api, _torch_backend
from tritoncheck.bench import SCENARIOS, HandAssert, _quantiles, floor_fn, time_cpu


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("variant", help="path to a modified copy of tritoncheck/_torch_backend.py")
    p.add_argument("--scenario", action="append", dest="scenarios", choices=[s.name for s in SCENARIOS])
    p.add_argument("--clock", choices=["wall", "thread"], default="wall")
    p.add_argument("--reps", type=int, default=100)
    args = p.parse_args()
    spec = importlib.util.spec_from_file_location("tritoncheck._torch_backend_variant", args.variant)
    variant = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(variant)
    torch.set_num_threads(1)
    current = _torch_backend

    def check(batch, case, module):
        _api._torch_backend = module
        try:
            return tc.check(batch, case.spec, backend="torch")
        finally:
            _api._torch_backend = current

    for s in SCENARIOS:
        if (args.scenarios and s.name not in args.scenarios) or (not args.scenarios and s.big):
            continue
        case = s.build(False)
        for batch in (case.batch, case.bad):
            a, b = check(batch, case, current), check(batch, case, variant)
            if repr(a.violations) != repr(b.violations):  # repr: NaN values compare unequal
                raise SystemExit(f"{case.name}: reports differ\n{a}\n{b}")
        raw = time_cpu({"floor": floor_fn(case.batch), "hand-assert": HandAssert().prepare(case, case.batch),
                        "tc-torch": lambda: check(case.batch, case, current).ok,
                        "tc-torch-variant": lambda: check(case.batch, case, variant).ok},
                       args.reps, budget_s=30, clock=args.clock)
        ms = {k: _quantiles(v)[0] for k, v in raw.items()}
        hand = ms["hand-assert"]
        print(f"{case.name:24s} " + "  ".join(f"{k} {v:.3f} ms ({hand / v:.2f}x)" for k, v in ms.items()))


if __name__ == "__main__":
    main()
