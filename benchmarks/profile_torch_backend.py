"""Where tc.check(backend="torch") spends its time on one scenario: per stage and per check.

    python benchmarks/profile_torch_backend.py layoutlmv3 [--fast-module /path/to/variant.py]

Times, inside the same loop the backend runs, each check's mask (summary, exact pass, rule
evaluation) and its locate step, with this thread's CPU time; medians over 300 runs, 1 thread.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections import defaultdict

import torch

from tritoncheck import _torch_backend
from tritoncheck._plan import bind, compile_plan, describe
from tritoncheck.bench import SCENARIOS


def ms(fn, reps: int = 300) -> float:
    for _ in range(10):
        fn()
    out = []
    for _ in range(reps):
        t0 = time.thread_time()
        fn()
        out.append((time.thread_time() - t0) * 1e3)
    return statistics.median(out)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("scenario", nargs="?", default="layoutlmv3", choices=[s.name for s in SCENARIOS])
    p.add_argument("--fast-module", help="a variant of _torch_backend.py to profile instead")
    args = p.parse_args()
    tb = _torch_backend
    if args.fast_module:
        spec = importlib.util.spec_from_file_location("variant", args.fast_module)
        tb = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tb)
    torch.set_num_threads(1)
    case = {s.name: s for s in SCENARIOS}[args.scenario].build(False)
    plan = compile_plan(case.spec)
    bound = bind(plan, case.batch)
    print(f"{case.name}: bind {ms(lambda: bind(plan, case.batch)):.3f} ms, "
          f"run {ms(lambda: tb.run(plan, bound)):.3f} ms")
    acc: dict[str, list[tuple[float, float]]] = defaultdict(list)

    def run() -> None:
        ctx = tb._Context(plan, bound)
        for check in bound.runnable:
            t0 = time.thread_time()
            bad = ctx.bad_mask(check)
            t1 = time.thread_time()
            if bad is not None:
                tb.locate(bad, check.axes, plan.batch_dim)
            acc[f"{type(check).__name__:14s} {describe(check)[:70]}"].append((t1 - t0, time.thread_time() - t1))

    for _ in range(310):
        run()
    print("   mask ms  locate ms  check")
    for name, v in acc.items():
        mask = statistics.median(x[0] for x in v[10:]) * 1e3
        loc = statistics.median(x[1] for x in v[10:]) * 1e3
        print(f"  {mask:8.3f} {loc:9.3f}  {name}")


if __name__ == "__main__":
    main()
