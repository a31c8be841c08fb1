"""Plot the latest run per device from benchmarks/results/results.csv (matplotlib).

    python benchmarks/plot.py  # writes benchmarks/results/<device>.png

Per scenario, one bar per contender: time relative to the hand-written assert-per-rule checks
(log scale, lower is better); the two floors (a plain read, an aminmax) are drawn as bars too.
"""

from __future__ import annotations

import csv
import re
import sys
from collections import defaultdict
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ORDER = ["floor-read", "floor-aminmax", "hand-assert", "hand-1sync", "hand-compiled", "tc-torch", "tc-c", "tc-triton"]


def main() -> int:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed; no plot (pip install matplotlib)", file=sys.stderr)
        return 1
    with open(RESULTS / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    latest: dict[str, str] = {}
    for r in rows:
        latest[r["device"]] = max(latest.get(r["device"], ""), r["timestamp"])
    for device, stamp in latest.items():
        ms: dict[str, dict[str, float]] = defaultdict(dict)
        for r in rows:
            if r["device"] == device and r["timestamp"] == stamp and r["median_ms"] and r["contender"] in ORDER:
                ms[r["scenario"]][r["contender"]] = float(r["median_ms"])
        scenarios = list(ms)
        clock = next((f"{r['clock']} clock" for r in rows if r["timestamp"] == stamp and r["contender"] in ORDER), "")
        fig, ax = plt.subplots(figsize=(2.2 * len(scenarios) + 2, 4.5))
        width = 0.8 / len(ORDER)
        for i, name in enumerate(ORDER):
            xs = [j + i * width for j, s in enumerate(scenarios) if name in ms[s]]
            ys = [ms[s][name] / ms[s]["hand-assert"] for s in scenarios if name in ms[s]]
            if xs:
                ax.bar(xs, ys, width, label=name)
        ax.set_yscale("log")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xticks([j + width * (len(ORDER) - 1) / 2 for j in range(len(scenarios))], scenarios, rotation=15)
        ax.set_ylabel("time / hand-assert (log; lower is better)")
        ax.set_title(f"{device} - {stamp} {clock}".strip(), fontsize=9)
        ax.legend(fontsize=8, ncol=3)
        fig.tight_layout()
        out = RESULTS / (re.sub(r"[^A-Za-z0-9]+", "-", device).strip("-").lower() + ".png")
        fig.savefig(out, dpi=120)
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
