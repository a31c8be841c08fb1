"""Where tc.check(backend="torch") spends its time on one scenario: per stage and per check.

    python benchmarks/profile_torch_backend.py layoutlmv3
"""

import statistics
import sys
import time

import torch

from tritoncheck import _torch_backend as tb
from tritoncheck._plan import bind, compile_plan, describe
from tritoncheck.bench import SCENARIOS


def ms(fn, reps=200):
    for _ in range(5):
        fn()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(out)


def main(name: str = "layoutlmv3") -> None:
    torch.set_num_threads(1)
    case = {s.name: s for s in SCENARIOS}[name].build(False)
    spec, batch = case.spec, case.batch
    plan = compile_plan(spec)
    bound = bind(plan, batch)
    print(f"{case.name}: compile_plan {ms(lambda: compile_plan(spec)):.3f} ms, bind {ms(lambda: bind(plan, batch)):.3f} ms, "
          f"run {ms(lambda: tb.run(plan, bound)):.3f} ms")
    for f, t in batch.items():
        tt = t.view(torch.uint8) if t.dtype == torch.bool else t
        print(f"  aminmax {f:16s} {tuple(t.shape)!s:22s} {ms(lambda: torch.aminmax(tt)):.3f} ms")
    total = 0.0
    for check in bound.runnable:
        def one():
            ctx = tb._Context(plan, bound)
            if hasattr(check, "field") and not hasattr(check, "expr"):
                ctx._summary[check.field] = ctx.summary(check.field)  # summary measured above
            bad = ctx.bad_mask(check)
            if bad is not None:
                tb.locate(bad, check.axes, plan.batch_dim)

        def summary_only():
            ctx = tb._Context(plan, bound)
            if hasattr(check, "field") and not hasattr(check, "expr"):
                ctx.summary(check.field)

        t_all, t_sum = ms(one), ms(summary_only)
        total += t_all - t_sum
        print(f"  {t_all - t_sum:7.3f} ms (+ summary {t_sum:.3f}) {type(check).__name__:14s} {describe(check)}")
    print(f"  checks past their summary: {total:.3f} ms")


if __name__ == "__main__":
    main(*sys.argv[1:])
