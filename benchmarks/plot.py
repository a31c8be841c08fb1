"""Plot the latest run per device from benchmarks/results/results.csv (matplotlib, the `bench` extra).

    python benchmarks/plot.py  # writes benchmarks/results/<device>.png and scaling-<device>.png

`<device>.png`: per scenario, one bar per contender: time relative to the hand-written
assert-per-rule checks (log scale, lower is better); the two floors (a plain read, an aminmax) are
drawn as bars too. `scaling-<device>.png`: check time against batch bytes (log-log) for the C
(or, on CUDA, Triton) backend, the torch backend and the plain read, from the run's scaling sweep (`scaling-*` rows).
`python benchmarks/run.py` (and `--readme`) regenerate both with the tables.
"""

from __future__ import annotations

import csv
import re
import sys
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ORDER = ["floor-read", "floor-aminmax", "hand-assert", "hand-1sync", "hand-best", "hand-compiled", "tc-torch", "tc-c",
         "tc-triton"]
SCALING = {"floor-read": "plain read (one sum per tensor)", "tc-torch": "torch backend", "tc-c": "C backend", "tc-triton": "Triton backend"}


def size(nbytes: float) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g} {unit}"
    return f"{nbytes:g} B"


def slug(device: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", device).strip("-").lower()


def main(csv_path: Path | None = None) -> int:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed; no plot (pip install -e '.[bench]')", file=sys.stderr)
        return 1
    csv_path = csv_path or RESULTS / "results.csv"
    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    latest: dict[bool, str] = {}  # the newest GPU run and the newest CPU run, as run.py's pages take them
    for r in rows:
        if r["clock"] != "cpu":  # a run's timed rows, not its compile rows
            gpu = r["clock"] == "cuda"
            latest[gpu] = max(latest.get(gpu, ""), r["timestamp"])
    for stamp in latest.values():
        run = [r for r in rows if r["timestamp"] == stamp and r["median_ms"]]
        device = run[0]["device"]
        clock = next((f"{r['clock']} clock" for r in run if r["contender"] in ORDER), "")
        title = f"{device} - {stamp} {clock}".strip()
        print(bars(plt, run, title, csv_path.parent / f"{slug(device)}.png"))
        sweep = [r for r in run if r["scenario"].startswith("scaling-")]
        if sweep:
            print(scaling(plt, sweep, title, csv_path.parent / f"scaling-{slug(device)}.png"))
    return 0


def bars(plt, run: list[dict[str, str]], title: str, out: Path) -> Path:  # noqa: ANN001 - matplotlib.pyplot
    ms: dict[str, dict[str, float]] = defaultdict(dict)
    for r in run:
        if r["contender"] in ORDER and not r["scenario"].startswith("scaling-"):
            ms[r["scenario"]][r["contender"]] = float(r["median_ms"])
    scenarios = [s for s in ms if "hand-assert" in ms[s]]
    fig, ax = plt.subplots(figsize=(2.2 * len(scenarios) + 2, 4.5))
    width = 0.8 / len(ORDER)
    for i, name in enumerate(ORDER):
        xs = [j + i * width for j, s in enumerate(scenarios) if name in ms[s]]
        ys = [ms[s][name] / ms[s]["hand-assert"] for s in scenarios if name in ms[s]]
        if xs:
            ax.bar(xs, ys, width, label=name)
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks([j + width * (len(ORDER) - 1) / 2 for j in range(len(scenarios))], scenarios, rotation=20,
                  ha="right", fontsize=8)
    ax.set_ylabel("time / hand-assert (log; lower is better)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def scaling(plt, sweep: list[dict[str, str]], title: str, out: Path) -> Path:  # noqa: ANN001 - matplotlib.pyplot
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, label in SCALING.items():
        points = sorted((int(r["batch_bytes"]), float(r["median_ms"])) for r in sweep if r["contender"] == name)
        if points:
            ax.plot([b for b, _ in points], [m for _, m in points], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(lambda v, _: size(v))
    ax.set_yscale("log")
    ax.set_xlabel("batch bytes (causal LM: int64 ids, mask, labels)")
    ax.set_ylabel("ms per check (median, log)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
