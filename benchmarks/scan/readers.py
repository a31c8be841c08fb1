"""The Parquet readers a scan could use, on the scan benchmark's files (`run.py` writes them): CPU time to read
every column of a file into Arrow (after the reader's import), one thread, each in a fresh process, medians of
interleaved rounds.

    python benchmarks/scan/readers.py --rows 10000000 --tables numeric --out benchmarks/results/scan-readers.md

Readers: pyarrow's `iter_batches` a row group at a time, with 1 MiB buffered reads (how the scan reads) or
`pre_buffer` (a row group's columns fetched at once), `read_row_group` whole, `read_table`, Polars'
`read_parquet(...).to_arrow()` and DuckDB's Arrow export. The batch size is the scan's default chunk for the
table when the results were made (16 MiB as tensors, a row group cut in even parts: 174,763 numeric rows, about
7,600 token rows; 8 MiB of tensors and check results since: 40,000 numeric rows, about 3,800 token rows).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

READERS = ("iter_batches buffered", "iter_batches pre_buffer", "read_row_group", "read_table", "polars", "duckdb")
CHUNK_ROWS = {"numeric": 174_763, "tokens": 7_600}
ONE_THREAD = {"OMP_NUM_THREADS": "1", "POLARS_MAX_THREADS": "1", "RAYON_NUM_THREADS": "1", "ARROW_NUM_THREADS": "1",
              "ARROW_IO_THREADS": "1"}


def read(reader: str, path: str, rows: int) -> int:
    """Every column of `path` into Arrow with `reader`; the rows read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    n = 0
    if reader.startswith("iter_batches"):
        pre = reader.endswith("pre_buffer")
        with pq.ParquetFile(path, buffer_size=0 if pre else 1 << 20, pre_buffer=pre) as pf:
            for g in range(pf.metadata.num_row_groups):  # a row group at a time, as the scan reads
                for batch in pf.iter_batches(batch_size=rows, row_groups=[g], use_threads=False):
                    n += batch.num_rows
    elif reader == "read_row_group":
        with pq.ParquetFile(path) as pf:
            for g in range(pf.metadata.num_row_groups):
                n += pf.read_row_group(g, use_threads=False).num_rows
    elif reader == "read_table":
        n = pq.read_table(path, use_threads=False).num_rows
    elif reader == "polars":
        import polars as pl

        n = pl.read_parquet(path).to_arrow().num_rows
    elif reader == "duckdb":
        import duckdb

        con = duckdb.connect(config={"threads": 1})
        n = con.sql(f"SELECT * FROM read_parquet('{path}')").to_arrow_table().num_rows
    return n


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        reader, path, rows = sys.argv[2], sys.argv[3], int(sys.argv[4])
        import pyarrow.parquet  # noqa: F401  (the imports are not the read's)

        if reader in ("polars", "duckdb"):
            __import__(reader)
        start = time.process_time()
        n = read(reader, path, rows)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{time.process_time() - start} {peak} {n}")
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--tables", default="numeric,tokens")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--data", default=str(Path(tempfile.gettempdir()) / "tritoncheck-scan-bench"))
    p.add_argument("--readers", default=",".join(READERS))
    p.add_argument("--out")
    args = p.parse_args()
    lines = [f"# Parquet readers: every column into Arrow, one thread, CPU time ({args.rows:,} rows)", "",
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {platform.node()}; "
             f"{os.cpu_count()} cores; load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())}", "",
             "| table | reader | CPU s (median) | CPU s (rounds) | peak RSS MiB |", "|---|---|---|---|---|"]
    for table in args.tables.split(","):
        path = Path(args.data) / f"{table}-{args.rows}.parquet"
        if not path.exists():
            raise SystemExit(f"{path} is missing: run benchmarks/scan/run.py --rows {args.rows} first")
        runs: dict[str, list[tuple[float, float]]] = {r: [] for r in args.readers.split(",")}
        for _ in range(args.rounds):
            for reader in runs:
                out = subprocess.run([sys.executable, __file__, "--child", reader, str(path), str(CHUNK_ROWS[table])],
                                     capture_output=True, text=True, env={**os.environ, **ONE_THREAD}, check=True)
                cpu, peak, _ = out.stdout.split()
                runs[reader].append((float(cpu), float(peak)))
        for reader, r in runs.items():
            cpus = [x[0] for x in r]
            lines.append(f"| {table} | {reader} | {statistics.median(cpus):.2f} | {', '.join(f'{x:.2f}' for x in cpus)} | "
                         f"{statistics.median(x[1] for x in r):.0f} |")
        print("\n".join(lines[-len(runs):]), flush=True)
    lines += ["", f"Load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
