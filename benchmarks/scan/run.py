"""`tritoncheck scan` against DuckDB and Polars on the same checks of the same Parquet files (issue 28).

Two tables, each written once to Parquet (pyarrow's defaults) with planted bad rows:
- numeric: PyDeequ's shape, 10 columns and 16 checks (bounds, value sets, finiteness,
  non-negativity, one cross-column rule); each check has its own planted rows, and each planted
  row breaks exactly one check.
- tokens: `input_ids` list<int32> of 32-512 tokens; checks: 0 <= id < VOCAB and length <= 512.

Every engine runs in a fresh process (its start and import included) on one thread, and reports
the rows that break each check; the harness checks those against the planted rows (every row, no
more, no fewer), and takes the child's CPU time (user + system) and peak RSS from `os.wait4`.
Rounds interleave the engines; the medians go to stdout as a Markdown table and, with --out, to a
result file with the machine, date and load average.

    python benchmarks/scan/run.py --rows 1000000 --rounds 3 --out benchmarks/results/scan-cpu.md
    python benchmarks/scan/run.py --rows 10000000 ...      # the 10M table (written once, ~1 GB)
    TRITONCHECK_SRC=/tmp/old python benchmarks/scan/run.py ...   # tritoncheck from another checkout's tree

DuckDB and Polars are this benchmark's own packages (pip install duckdb polars), not tritoncheck's.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VOCAB, MAX_LEN, PLANTED = 32000, 512, 16
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "POLARS_MAX_THREADS": "1", "RAYON_NUM_THREADS": "1",
              "ARROW_NUM_THREADS": "1", "ARROW_IO_THREADS": "1"}
ENGINES = ("duckdb", "polars", "tritoncheck")

# The numeric table's 16 checks: name -> (column, SQL condition a valid row meets, tritoncheck (field, code)).
# A bound on a float column holds for NaN: NaN is the finiteness check's (as in tritoncheck's report). In SQL that
# is `NOT isfinite(x) OR ...`: DuckDB 2.0's isnan() is false for the NaNs it reads from Parquet (no inf is planted
# in a bounded column).
NUMERIC = {
    "id_nonneg": ("id", "id >= 0", "below_min"),
    "qty_min": ("qty", "qty >= 0", "below_min"),
    "qty_max": ("qty", "qty <= 1000", "above_max"),
    "price_finite": ("price", "isfinite(price)", "non_finite"),
    "price_nonneg": ("price", "NOT isfinite(price) OR price >= 0", "below_min"),
    "discount_min": ("discount", "discount >= 0", "below_min"),
    "discount_max": ("discount", "discount <= 1", "above_max"),
    "status_set": ("status", "status IN (0, 1, 2, 3)", "not_in_set"),
    "category_set": ("category", "category IN (1, 2, 3, 5, 8, 13, 21)", "not_in_set"),
    "score_finite": ("score", "isfinite(score)", "non_finite"),
    "score_min": ("score", "NOT isfinite(score) OR score >= -100", "below_min"),
    "score_max": ("score", "NOT isfinite(score) OR score <= 100", "above_max"),
    "rating_min": ("rating", "rating >= 1", "below_min"),
    "rating_max": ("rating", "rating <= 5", "above_max"),
    "hi_finite": ("hi", "isfinite(hi)", "non_finite"),
    "lo_le_hi": ("lo", "lo <= hi", "lo_le_hi"),
}
TOKENS = {
    "id_min": ("input_ids", "list_min(input_ids) >= 0", "below_min"),
    "id_max": ("input_ids", f"list_max(input_ids) < {VOCAB}", "above_max"),
    "length": ("input_ids", f"len(input_ids) <= {MAX_LEN}", "sequence_too_long"),
}
CHECKS = {"numeric": NUMERIC, "tokens": TOKENS}

NUMERIC_SPEC = """\
name: deequ-numeric
fields:
  id: {dtype: int, shape: [B], min: 0}
  qty: {dtype: int, shape: [B], min: 0, max: 1000}
  price: {dtype: float64, shape: [B], min: 0, finite: true}
  discount: {dtype: float32, shape: [B], min: 0, max: 1}
  status: {dtype: int, shape: [B], values: [0, 1, 2, 3]}
  category: {dtype: int, shape: [B], values: [1, 2, 3, 5, 8, 13, 21]}
  score: {dtype: float64, shape: [B], min: -100, max: 100, finite: true}
  rating: {dtype: int, shape: [B], min: 1, max: 5}
  lo: {dtype: float32, shape: [B]}
  hi: {dtype: float32, shape: [B], finite: true}
rules:
  - {rule: "lo <= hi", code: lo_le_hi}
"""
TOKENS_SPEC = f"""\
name: token-table
fields:
  input_ids: {{dtype: int, shape: [B, L], min: 0, max: {VOCAB - 1}}}
rules:
  - {{rule: "L <= {MAX_LEN}", code: sequence_too_long}}
"""
SPECS = {"numeric": NUMERIC_SPEC, "tokens": TOKENS_SPEC}


# --- the data ------------------------------------------------------------------------------------------------


def planted_rows(rows: int, checks: list[str], seed: int) -> dict[str, list[int]]:
    """PLANTED distinct rows per check, no row in two checks."""
    import numpy as np

    picked = np.random.default_rng(seed).choice(rows, size=PLANTED * len(checks), replace=False)
    return {c: sorted(picked[i * PLANTED:(i + 1) * PLANTED].tolist()) for i, c in enumerate(checks)}


def write_numeric(path: Path, rows: int) -> dict[str, list[int]]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    lo = rng.uniform(-50, 50, rows).astype(np.float32)
    cols = {
        "id": np.arange(rows, dtype=np.int64),
        "qty": rng.integers(0, 1001, rows, dtype=np.int32),
        "price": rng.uniform(0, 500, rows),
        "discount": rng.uniform(0, 1, rows).astype(np.float32),
        "status": rng.integers(0, 4, rows, dtype=np.int8),
        "category": rng.choice(np.array([1, 2, 3, 5, 8, 13, 21], dtype=np.int16), rows),
        "score": rng.uniform(-100, 100, rows),
        "rating": rng.integers(1, 6, rows, dtype=np.int32),
        "lo": lo,
        "hi": lo + rng.uniform(0, 10, rows).astype(np.float32),
    }
    planted = planted_rows(rows, list(NUMERIC), 1)
    bad = {"id_nonneg": ("id", -1), "qty_min": ("qty", -3), "qty_max": ("qty", 1001), "price_finite": ("price", np.nan),
           "price_nonneg": ("price", -0.01), "discount_min": ("discount", -0.5), "discount_max": ("discount", 1.5),
           "status_set": ("status", 7), "category_set": ("category", 4), "score_finite": ("score", np.nan),
           "score_min": ("score", -100.5), "score_max": ("score", 100.000001), "rating_min": ("rating", 0),
           "rating_max": ("rating", 6), "hi_finite": ("hi", np.inf)}  # lo <= inf holds
    for check, (column, value) in bad.items():
        cols[column][planted[check]] = value
    r = planted["lo_le_hi"]
    cols["lo"][r] = cols["hi"][r] + 1
    pq.write_table(pa.table(cols), path)
    return planted


def write_tokens(path: Path, rows: int) -> dict[str, list[int]]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    planted = planted_rows(rows, list(TOKENS), 2)
    lengths = rng.integers(32, MAX_LEN + 1, rows)
    lengths[planted["length"]] = MAX_LEN + 88
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    values = rng.integers(0, VOCAB, int(offsets[-1]), dtype=np.int32)
    for r in planted["id_min"]:
        values[offsets[r] + rng.integers(lengths[r])] = -1
    for r in planted["id_max"]:
        values[offsets[r] + rng.integers(lengths[r])] = VOCAB
    column = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values)).cast(pa.list_(pa.int32()))
    pq.write_table(pa.table({"input_ids": column}), path)
    return planted


# --- the engines, each run in a child process --------------------------------------------------------------------


def found_duckdb(table: str, path: str) -> dict[str, list[int]]:
    import duckdb

    con = duckdb.connect(config={"threads": 1})
    checks = CHECKS[table]
    flags = ", ".join(f"NOT ({cond}) AS {name}" for name, (_, cond, _) in checks.items())
    every = " AND ".join(f"({cond})" for _, cond, _ in checks.values())
    rows = con.execute(f"SELECT file_row_number, {flags} FROM read_parquet(?, file_row_number=true) "
                       f"WHERE NOT ({every})", [path]).fetchall()
    return {name: sorted(r[0] for r in rows if r[1 + k]) for k, name in enumerate(checks)}


def found_polars(table: str, path: str) -> dict[str, list[int]]:
    import polars as pl

    c = pl.col
    if table == "numeric":
        def finite(x):
            return c(x).is_finite()

        def nan_or(x, cond):
            return c(x).is_nan() | cond

        conds = {
            "id_nonneg": c("id") >= 0, "qty_min": c("qty") >= 0, "qty_max": c("qty") <= 1000,
            "price_finite": finite("price"), "price_nonneg": nan_or("price", c("price") >= 0),
            "discount_min": c("discount") >= 0, "discount_max": c("discount") <= 1,
            "status_set": c("status").is_in([0, 1, 2, 3]), "category_set": c("category").is_in([1, 2, 3, 5, 8, 13, 21]),
            "score_finite": finite("score"), "score_min": nan_or("score", c("score") >= -100),
            "score_max": nan_or("score", c("score") <= 100), "rating_min": c("rating") >= 1,
            "rating_max": c("rating") <= 5, "hi_finite": finite("hi"), "lo_le_hi": c("lo") <= c("hi"),
        }
    else:
        ids = c("input_ids").list
        conds = {"id_min": ids.min() >= 0, "id_max": ids.max() < VOCAB, "length": ids.len() <= MAX_LEN}
    fails = {name: ~cond for name, cond in conds.items()}
    out = (pl.scan_parquet(path).with_row_index("rid").with_columns(**fails)
           .filter(pl.any_horizontal(list(fails))).select("rid", *fails).collect())
    return {name: sorted(out.filter(c(name))["rid"].to_list()) for name in fails}


def found_tritoncheck(table: str, path: str) -> dict[str, list[int]]:
    """`tritoncheck scan SPEC DATA` with its defaults, as the CLI runs it (its `main`, in this fresh process);
    its JSON report read back."""
    from tritoncheck.cli import main as cli

    with tempfile.TemporaryDirectory() as tmp:
        spec, out = Path(tmp) / "spec.yaml", Path(tmp) / "report.json"
        spec.write_text(SPECS[table])
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            try:
                cli(["scan", str(spec), path, "--format=text", "--output", str(out)])
            except SystemExit:
                pass
        report = json.loads(out.read_text())
    by_code = {(column, code): name for name, (column, _, code) in CHECKS[table].items()}
    found: dict[str, set[int]] = {name: set() for name in CHECKS[table]}
    for v in report["violations"]:
        name = by_code.get((v["field"], v["code"]), f"unexpected {v['field']}/{v['code']}")
        found.setdefault(name, set()).add(v["sample"])
    return {name: sorted(rows, key=str) for name, rows in found.items()}


def child(engine: str, table: str, path: str, out: str) -> None:
    """One engine's findings, and this process's peak RSS (VmHWM: this process's own, unlike `ru_maxrss`,
    which keeps the forking parent's), to `out`."""
    found = {"duckdb": found_duckdb, "polars": found_polars, "tritoncheck": found_tritoncheck}[engine](table, path)
    status = Path("/proc/self/status").read_text()
    peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
    Path(out).write_text(json.dumps({"found": found, "rss_mib": peak / 1024}))


def measure(engine: str, table: str, path: Path, tmp: Path, base: str | None = None
            ) -> tuple[float, float, float, dict[str, list[int]]]:
    """(CPU s, wall s, peak RSS MiB, findings) of one fresh process: start, imports, reading and checking.
    Engine "base": tritoncheck from the source tree `base` (the same code before a change)."""
    out = tmp / f"{engine}.json"
    env = {**os.environ, **ONE_THREAD}
    if engine == "base":
        engine, env["TRITONCHECK_SRC"] = "tritoncheck", str(base)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, __file__, "--child", engine, table, str(path), str(out)], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"{engine} on {table} failed (status {status})")
    result = json.loads(out.read_text())
    return usage.ru_utime + usage.ru_stime, wall, result["rss_mib"], result["found"]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        if os.environ.get("TRITONCHECK_SRC"):  # measure another checkout (say, main before a change)
            sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
            sys.path.insert(0, os.environ["TRITONCHECK_SRC"])
        child(*sys.argv[2:6])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tables", default="numeric,tokens")
    p.add_argument("--engines", default=",".join(ENGINES))
    p.add_argument("--data", default=str(Path(tempfile.gettempdir()) / "tritoncheck-scan-bench"),
                   help="where the Parquet files are written (kept, and reused when their rows match)")
    p.add_argument("--out", help="write the result table (Markdown) here")
    p.add_argument("--note", default="", help="a line for the result file (what changed)")
    p.add_argument("--base", help="also run tritoncheck from this source tree (e.g. `git archive REV tritoncheck` "
                   "unpacked), as engine 'base', interleaved with the others")
    args = p.parse_args()
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    lines = [f"# tritoncheck scan vs DuckDB and Polars: {args.rows:,} rows, one thread, CPU time",
             "", f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {platform.node()}; "
             f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; load average before: "
             f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}; {args.note}".rstrip("; "), "",
             "| table | engine | CPU s (median) | CPU s (rounds) | wall s | peak RSS MiB | planted rows found |",
             "|---|---|---|---|---|---|---|"]
    for table in args.tables.split(","):
        path = data / f"{table}-{args.rows}.parquet"
        truth_path = path.with_suffix(".planted.json")
        if not (path.exists() and truth_path.exists()):
            planted = (write_numeric if table == "numeric" else write_tokens)(path, args.rows)
            truth_path.write_text(json.dumps(planted))
        planted = json.loads(truth_path.read_text())
        engines = args.engines.split(",") + (["base"] if args.base else [])
        runs: dict[str, list[tuple[float, float, float]]] = {e: [] for e in engines}
        agree: dict[str, str] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for _ in range(args.rounds):
                for engine in runs:  # interleaved: a slow minute of the machine costs every engine alike
                    cpu, wall, rss, found = measure(engine, table, path, Path(tmp), args.base)
                    runs[engine].append((cpu, wall, rss))
                    wrong = {c: sorted(set(found.get(c, [])) ^ set(rows), key=str)[:5] for c, rows in planted.items()
                             if set(found.get(c, [])) != set(rows)}
                    wrong.update({c: rows[:5] for c, rows in found.items() if c not in planted and rows})
                    agree[engine] = "all" if not wrong else f"WRONG: {wrong}"
        for engine, r in runs.items():
            cpus = [x[0] for x in r]
            lines.append(f"| {table} | {engine} | {statistics.median(cpus):.2f} | {', '.join(f'{x:.2f}' for x in cpus)} | "
                         f"{statistics.median(x[1] for x in r):.2f} | {statistics.median(x[2] for x in r):.0f} | "
                         f"{agree[engine]} ({sum(map(len, planted.values()))}) |")
        print("\n".join(lines[-len(runs):]), flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
