"""The full benchmark: every scenario, model training steps, CSV history, README table.

    python benchmarks/run.py                 # CPU, single thread; add --big for the 1 GB batch
    python benchmarks/run.py --device cuda   # on a GPU: adds the Triton backend, do_bench timings
    python benchmarks/plot.py                # PNG from the CSV

Appends to benchmarks/results/results.csv and writes benchmarks/results/latest-<device>.md.
The harness itself is tritoncheck/bench.py (also `tritoncheck bench`, the quick set).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

import torch

from tritoncheck import bench

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--big", action="store_true", help="add the 1 GB batch (slow on CPU: minutes, ~6 GB RAM)")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--clock", choices=["wall", "thread"], default="wall",
                   help="CPU timer (thread: CPU time, for a loaded machine)")
    p.add_argument("--no-step", action="store_true", help="skip the model training steps")
    p.add_argument("--scenario", action="append", dest="scenarios", choices=[s.name for s in bench.SCENARIOS])
    args = p.parse_args(argv)
    scenarios = args.scenarios or [s.name for s in bench.SCENARIOS if args.big or not s.big]
    opts = bench.Options(scenarios=scenarios, device=args.device, reps=args.reps, threads=args.threads,
                         step=not args.no_step, budget_s=60.0, clock=args.clock)
    rows = bench.run_benchmarks(opts, log=lambda s: print(s, file=sys.stderr, flush=True))
    RESULTS.mkdir(exist_ok=True)
    bench.append_csv(RESULTS / "results.csv", rows)
    table = bench.markdown_table(rows)
    r = rows[0]
    header = (f"{r.device}, {r.threads} thread(s); torch {r.torch_version}, triton {r.triton_version or '-'}, "
              f"tritoncheck {r.tritoncheck_version}; {r.timestamp}\n\n")
    slug = re.sub(r"[^a-z0-9]+", "-", args.device.lower()).strip("-")
    (RESULTS / f"latest-{slug}.md").write_text(header + table + "\n")
    print(header + table)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    sys.exit(main())
