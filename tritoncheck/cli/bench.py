"""`tritoncheck bench`: a thin entry point to the benchmark harness, `benchmarks/harness.py` in a
source checkout. The harness (realistic batches, hand-written contenders, timers) is no part of the
installed package, since no check needs it; installed without a checkout, the command says how to
get one instead of failing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
NO_CHECKOUT = (
    "tritoncheck bench runs the benchmark harness of a source checkout (benchmarks/harness.py), and this "
    "tritoncheck is installed without one: clone the repository, `pip install -e .` in it, then run "
    "`tritoncheck bench` (or `python benchmarks/run.py` for the full run) there"
)
HELP = "time tritoncheck against hand-written checks on realistic batches (from a source checkout)"


def harness() -> Any | None:
    """The checkout's `benchmarks/harness.py` (imported as `harness`, as its own scripts do), or None."""
    if not (BENCHMARKS / "harness.py").is_file():
        return None
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))  # appended: nothing already importable is shadowed
    return importlib.import_module("harness")


def run_benchmarks(opts: Any, log: Callable[[str], None] = lambda s: None) -> list[Any]:
    """The harness's `run_benchmarks` (the one call the command makes into it)."""
    return harness().run_benchmarks(opts, log)


def add_parser(sub: Any) -> None:
    h = harness()
    if h is None:
        p = sub.add_parser("bench", add_help=False, help=HELP, prefix_chars="\0")  # every argument, --help too, ...
        p.add_argument("rest", nargs="*")  # ... is taken as is: the answer is the same for all
        p.set_defaults(run=_no_checkout)
        return
    p = sub.add_parser("bench", help=HELP,
                       description="Time tritoncheck against hand-written checks (assert per rule, one sync, "
                       "torch.compile) and two floors (a plain read, an aminmax) on realistic batches of the "
                       "built-in families, in one run.")
    p.add_argument("--scenario", action="append", dest="scenarios",
                   choices=[s.name for s in h.SCENARIOS], help="repeatable; default: every scenario but the big ones (--big)")
    p.add_argument("--big", action="store_true", help="add the big scenarios (hundreds of MB each)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--rounds", type=int, default=30,
                   help=f"timed rounds on CPU (default 30, at least {h.MIN_ROUNDS})")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--step", action="store_true", help="also time a small model's training step (needs transformers)")
    p.add_argument("--contender", action="append", dest="contenders",
                   choices=[c.name for c in h.default_contenders()], help="repeatable; default: all")
    p.add_argument("--clock", choices=["thread", "wall"], default="thread",
                   help="CPU timer: this thread's CPU time (default) or wall clock")
    p.add_argument("--dataloader", action="store_true",
                   help="also measure the first batch in each of 2 forked DataLoader workers (layoutlmv3, bert)")
    p.add_argument("--cold-compile", action="store_true", help="also compile every built-in contract with an empty cache")
    p.add_argument("--csv", help="append the rows to this CSV file")
    p.add_argument("--tiny", action="store_true", help="tiny sizes (a smoke run)")
    p.set_defaults(run=_run)


def _no_checkout(args: argparse.Namespace) -> int:
    print(f"tritoncheck bench: {NO_CHECKOUT}", file=sys.stderr)
    return 2


def _run(args: argparse.Namespace) -> int:
    import torch

    import tritoncheck as tc

    h = harness()
    scenarios = args.scenarios or [s.name for s in h.SCENARIOS if not s.big]
    if args.big:
        scenarios += [s.name for s in h.SCENARIOS if s.big and s.name not in scenarios]
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    opts = h.Options(scenarios=scenarios, device=device, rounds=args.rounds, threads=max(1, args.threads),
                     tiny=args.tiny, step=args.step, contenders=args.contenders, clock=args.clock,
                     dataloader=list(h.DATALOADER_SCENARIOS) if args.dataloader else [],
                     cold_compile=tc.builtin_spec_names() if args.cold_compile else [])
    try:
        with _without_profiler_lines():
            rows = run_benchmarks(opts, log=lambda s: print(s, file=sys.stderr))
    except (RuntimeError, ValueError) as exc:
        print(f"tritoncheck bench: {exc}", file=sys.stderr)
        return 2
    if args.csv:
        h.append_csv(args.csv, rows)
    print(h.markdown_table(rows))
    startup = h.startup_table(rows)
    if startup:
        print("\n" + startup)
    return 0


# what torch.profiler's kineto writes to fd 2 at each profile the harness takes to count ops
# ("USDT:2026-11-28 01:03:50 6947:6947 SyncActivityProfilerHandler.cpp:52] profiler_start")
_PROFILER_LINE = re.compile(rb"^(USDT|STAGE):\d{4}-\d\d-\d\d [\d:]+ \d+:\d+ \w+\.cpp:\d+\] ")


@contextlib.contextmanager
def _without_profiler_lines() -> Any:
    """Keep kineto's own log lines out of the user's output (it writes them to fd 2 itself, past sys.stderr,
    and reads KINETO_LOG_LEVEL only when torch loads); every other line passes through as it comes."""
    sys.stderr.flush()
    saved = os.dup(2)
    read, write = os.pipe()
    os.dup2(write, 2)
    os.close(write)

    def pump() -> None:
        with os.fdopen(read, "rb") as source:
            for line in source:
                if not _PROFILER_LINE.match(line):
                    os.write(saved, line)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # closes fd 2's end of the pipe: the pump reads to its end
        thread.join(timeout=10)  # (a forked DataLoader worker still holding the pipe: give up waiting)
        os.close(saved)
