"""The scan benchmark's README section and its bounds (benchmarks/scan/run.py); no timing here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _scan_run():
    spec = importlib.util.spec_from_file_location("benchmarks_scan_run", ROOT / "benchmarks" / "scan" / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_readme_scan_section_is_the_recorded_results():
    """README.md's scan block is what `python benchmarks/scan/run.py --readme` makes of the result files."""
    run = _scan_run()
    readme = run.README.read_text()
    assert readme.count(run.BEGIN) == 1 and readme.count(run.END) == 1
    block = readme.split(run.BEGIN)[1].split(run.END)[0].strip()
    assert block == run.readme_block() and "| numeric | tritoncheck |" in block


def test_bounds_are_the_ratios_of_the_medians():
    run = _scan_run()
    medians = {("numeric", "tritoncheck"): (2.0, 300.0), ("numeric", "duckdb"): (0.25, 100.0),
               ("numeric", "polars"): (2.0, 120.0), ("tokens", "tritoncheck"): (3.0, 300.0),
               ("tokens", "duckdb"): (3.0, 600.0)}
    assert run.bounds(medians, 1000) == [
        "| bound (issue 28, one thread) | measured | met |", "|---|---:|---|",
        "| numeric, 1,000 rows: CPU <= 1.0x DuckDB | 8.00x | **no** |",
        "| numeric, 1,000 rows: CPU <= 1.5x Polars | 1.00x | yes |",
        "| tokens, 1,000 rows: CPU under DuckDB's | 1.00x | **no** |",  # (equal is not under)
        "| numeric, 1,000 rows: peak RSS <= 1.5x DuckDB's | 3.00x | **no** |",
        "| tokens, 1,000 rows: peak RSS <= 1.5x DuckDB's | 0.50x | yes |",
    ]
