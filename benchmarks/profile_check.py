"""Where a check's time goes: cProfile over many `tc.check` calls on one scenario's valid batch.

    python benchmarks/profile_check.py layoutlmv3              # the C backend (default)
    python benchmarks/profile_check.py bert-b1 --backend torch --calls 5000
    python benchmarks/profile_check.py layoutlmv3 --tiny      # a tiny batch: the host overhead alone

Prints the check's thread CPU time per call (one thread) beside the plain-read floors and the
scenario's own (bert-b1: `one-sum-16`, the fixed-cost goal's yardstick), then the functions taking
the most time of their own. A warm C check (a batch with the last one's signature) is `check`,
`run`, the signature `guard` (its `check` line: torch's C++ tensor guard) and `launch`, whose own
time includes the ctypes call of the compiled kernel (called from C, it gets no line of its own).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import pstats
import statistics

import torch

import harness as bench  # benchmarks/harness.py, beside this script


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=[s.name for s in bench.SCENARIOS])
    p.add_argument("--backend", default="c", choices=["c", "torch"])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--tiny", action="store_true", help="the tiny batch: host overhead alone")
    args = p.parse_args()
    torch.set_num_threads(1)
    case = bench.scenario(args.scenario).build(args.tiny)
    check = bench.TritonCheck(args.backend).prepare(case, case.batch)
    floors = {**bench.floor_fns(case.batch), **{k: functools.partial(f, case.batch) for k, f in case.extra_floors.items()}}
    timed = bench.time_cpu({"check": check, **floors}, 30)
    print(case.name + ": " + ", ".join(f"{k} {statistics.median(v) * 1e3:.1f} us" for k, v in timed.items()))
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(args.calls):
        check()
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
