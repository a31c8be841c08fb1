"""`tritoncheck scan SPEC DATA` and `scan()`: check a whole dataset offline and list every bad sample.

DATA is a saved batch file (.pt, .safetensors, .npz), a directory of them (searched recursively),
Parquet or Arrow files (one, or a directory of shards, searched recursively and taken in sorted
path order), or a dataset saved with `datasets.Dataset.save_to_disk` (read as the Arrow files its
state.json lists, each split numbered from 0). Tables are read in chunks of about CHUNK_BYTES as
tensors and check results (or of --batch-size rows), a part at a time, so that memory is bounded by the chunk and not
by a Parquet row group (a chunk never spans two shards; a column chunk is read 1 MiB at a time), only
the columns the spec names, through their Arrow buffers only (`tritoncheck.scanning.arrow`: a column of any other type is refused, never converted). Every number
is global: a row's `sample` is the rows of the shards before it (from each file's metadata) plus
its row in its shard (`row`), and a violation's samples, index and message count from there too.
Shards can be checked on Ray Data (`--engine ray`, see `tritoncheck.scanning.ray`) with the same
code and the same report; `--bad-rows DIR` writes the bad rows of shards to Parquet. A bad batch
is narrowed down to its bad samples, and each gets the report checking it alone gives: where every
check decides a sample from its own values (`_per_sample`), the samples the batch's violations name
are the bad ones (otherwise `tritoncheck.integrations.data.split_bad` narrows); a sample that breaks
only checks of one value per field (`_one_value`: bounds, value sets, `lo <= hi`) gets its report
from the batch's check, any other is checked alone. A file,
or part of one, that cannot be read is recorded
(`unreadable`: which file, which rows, why) and the scan goes on; so is a batch whose check fails
inside tritoncheck (under `unchecked`). A sample with only warnings is listed as well, its entries
marked `severity: warning`. Exit code 0: clean, or warnings only; 1: errors, or data that cannot
be read; 2: usage or spec error (before the scan starts); 3: a batch whose check failed inside
tritoncheck (an internal error: please report).

Columns are renamed as the Hugging Face collators rename them (`label` and `label_ids` become
`labels`) when the spec names the new name and not the old one; `--rename OLD=NEW` adds more (a
column the data lacks is a usage error). A column that no field takes and that is close to a
field the data lacks (`lables`) is a usage error too: it is almost surely that field, misspelled.
A contract field the data lacks is reported once: a required one as `missing_field`, an optional
one in `absent_fields`, so that nothing goes unchecked without a word.

Ragged rows (token lists of different lengths) are padded as a collator pads them, only among
the rows checked together: `*input_ids` with the spec's `pad_token_id` (else 0), a field that
allows a sentinel such as -100 with it, every other field with 0. Rows are grouped by their length
in any dim a data check reads (`arange(L)`, `lengths <= T`) so that no padding changes such a
check, and a group is split by length where padding would more than double it, so memory follows
the data (one long row does not make its chunk as long). The result stays what checking each row
alone gives: a row the padded group flags is checked alone (its own values, no padding); a row
whose fields disagree on a padded length, or that breaks a rule over dims (`L >= min_length`) at
its own length, is checked alone too. One case is left to the pad values: a rule that a pad value
itself satisfies (`any(x == 0, dim=L)` with 0 padding) holds for the padded row, as it does for
the same row padded by the collator in training.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tritoncheck.backends import BACKENDS
from tritoncheck.cli.commands import (
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_VIOLATIONS,
    UsageError,
    add_output_args,
    add_param_args,
    console,
    guarded,
    load_batch,
    one_line,
    output_format,
    say,
    spec_from_args,
    write_json,
)
from tritoncheck.report import WARNING_PREFIX, Violation, batch_coordinates, fitted_table, moved, printable, report_json
from tritoncheck.scanning.arrow import Column, Scratch, read_column, refusal
from tritoncheck.spec.schema import close_match, closest

BATCH_SUFFIXES = (".pt", ".pth", ".safetensors", ".npz")
TABLE_SUFFIXES = (".parquet", ".arrow", ".feather")  # Arrow: the IPC file (Feather v2) or stream format
ENGINES = ("local", "ray")
# The columns a bad-rows file adds to the data's own: the row's global index and its codes.
ROW_COLUMN, CODES_COLUMN = "tritoncheck_row", "tritoncheck_codes"
# Problems of a tensor's metadata: a saved batch has them as a whole, so no sample is to blame.
METADATA_CODES = frozenset({"not_a_mapping", "unexpected_field", "missing_field", "not_a_tensor", "device_mismatch",
                            "empty_batch", "dtype", "rank", "shape", "dim_mismatch"})
# Of those, the problems of one field alone (not of the batch's shape as a whole): the rest can be checked without it.
FIELD_PROBLEMS = frozenset({"unexpected_field", "not_a_tensor", "device_mismatch", "dtype", "rank", "shape"})
# What makes a row of a column unchecked (`Column`'s marks), its code and rule; a row is reported for the first
# that holds, per column.
FLAWS = (
    ("nulls", "null", "a null (missing value) in the row; the row is not checked further"),
    ("jagged", "not_a_tensor", "its lists differ in length inside the row, so it is not a tensor; the row is not "
                               "checked further"),
    ("past_int64", "past_int64", "a uint64 value past 2**63 - 1 in the row, which no torch integer batch holds; the "
                                 "row is not checked further"),
)
# What the Hugging Face collators (default_data_collator, DataCollatorWithPadding) rename.
HF_RENAMES = {"label": "labels", "label_ids": "labels"}
SHOWN = 10  # violations printed; the JSON report has them all
# Rows checked together are padded to the longest of them only while that stays small (elements, all columns)
# or at most twice their own size; else they are split by length (see _Ragged._buckets).
PADDED_ENOUGH = 1 << 16
# A dataset's chunk (rows checked together) by default: as many rows as take about this many bytes as tensors and
# as the check's result (an int64 per row for each check over the batch dim), so that a chunk of numbers has many
# rows and one of long token lists few; read a part at a time, so that a large Parquet row group costs no more
# memory than its chunk. 8 MiB: 40,000 rows of the 10-column numeric benchmark with 16 checks, 3,800 of its token
# lists; against 16 MiB of tensors alone, peak RSS at 10M numeric rows 412 -> 350 MiB, 1M token rows 373 -> 339 MiB,
# CPU time the same within the noise (benchmarks/scan/README.md).
CHUNK_BYTES = 8 << 20
MAX_CHUNK_ROWS = 1 << 20
# Element checks of ragged rows read a column's values in blocks of this many (one result slot per block; a row
# holding a value of a failing block is checked alone), under a dim of this name.
ELEMENT_BLOCK, ELEMENTS = 1024, "tritoncheck_elements"
# Rules over the dims of ragged rows (`L <= 512`) are decided per distinct size and kept in a table by size, where
# one dim is free and every size is below this.
LOOKUP_SIZES = 1 << 16
# The rule of a scan's findings about files and columns (`unreadable`, `unsupported_type`), in words.
READABLE = "the data can be read as Parquet, Arrow or a batch file"
READ_TYPES = "a column of bools, integers or floats (any width), dictionary-encoded ones, or lists of them"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "scan",
        help="check every sample of a dataset offline",
        description="Check a directory of saved batches (.pt, .safetensors, .npz), a dataset saved with "
        "`datasets`, or Parquet or Arrow shards against a spec, and list every bad sample. Exit code 0: clean "
        "(or warnings only); 1: errors: bad rows or samples, or a file, shard or column that cannot be read (each "
        "listed; the rest is scanned); 2: usage or spec error (found before the scan starts); 3: internal error: "
        "a batch whose check failed in tritoncheck itself (the rest are scanned; please report it). The JSON report "
        "(--json, --output) has a key a line and a violation a line.",
    )
    p.add_argument("spec", help="a built-in spec name (see `tritoncheck specs`) or a YAML spec file")
    p.add_argument("data", help="a batch file, a directory of batch files, a `datasets` save_to_disk directory, "
                   "or a Parquet or Arrow file or directory of them (shards)")
    add_param_args(p)
    add_output_args(p)
    p.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                   help="check column or key OLD as the spec's field NEW (repeatable); label and label_ids "
                   "become labels unless the spec names them")
    p.add_argument("--ignore-column", action="append", default=[], metavar="COLUMN",
                   help="leave out data column COLUMN (repeatable): a column close to the name of a contract field "
                   "that the data lacks (lables for labels) otherwise stops the scan before it starts")
    p.add_argument("--batch-size", type=int, default=None,
                   help="rows per check for a dataset (default: as many as take about 8 MiB as tensors and results)")
    p.add_argument("--backend", choices=list(BACKENDS), default="auto", help="default: auto (the C kernel on CPU)")
    p.add_argument("--engine", choices=ENGINES, default="local",
                   help="local (this process) or ray (Parquet or Arrow shards as Ray Data tasks, one per "
                   "shard; RAY_ADDRESS picks a running cluster); the report is the same")
    p.add_argument("--engine-logs", action="store_true",
                   help="with --engine ray: show Ray's own logs and progress bars (default: only the scan's progress)")
    p.add_argument("--bad-rows", metavar="DIR",
                   help="write the bad rows of Parquet or Arrow shards to DIR (new or empty) as Parquet, all "
                   f"columns plus {ROW_COLUMN} (global row index) and {CODES_COLUMN}")
    p.set_defaults(run=guarded(run_scan))


@dataclass(frozen=True)
class _Found:
    """Entries found while reading (a refused column), ready as they are: never data to check (a saved batch
    file may hold a list)."""

    entries: list[dict[str, Any]]


@dataclass
class _Item:
    """One unit of work: a batch (or a ragged chunk, or the error that stopped reading it) and its rows."""

    source: str  # the file it comes from
    offset: int | None  # the global row (dataset) or file sample of its first row; None: unknown (see Shard)
    data: Any  # a batch as loaded, a _Ragged chunk, _Found entries, a UsageError (unreadable) or another exception
    rows: int  # progress: rows for a dataset, 1 per file
    spec: Any = None  # the spec to check it against, where it differs from the command's
    row: int = 0  # its first row in `source`
    known: bool = True  # its rows are counted (an unreadable batch file's samples are not known: not unread_samples)


def run_scan(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    with _frozen_start(), _arrow_pool():
        report = scan(spec, args.data, engine=args.engine, backend=args.backend, batch_size=args.batch_size,
                      rename=_rename_pairs(args.rename), ignore=args.ignore_column, bad_rows=args.bad_rows,
                      progress=True, strict=args.strict, engine_logs=args.engine_logs)
        if args.output:
            write_json(args.output, report_parts(report))
        fmt = output_format(args)
        if fmt == "json":
            sys.stdout.writelines(report_parts(report))
            sys.stdout.write("\n")
        else:
            _show(report, table=fmt == "table")
    return EXIT_INTERNAL if report["unchecked"] else EXIT_OK if report["ok"] else EXIT_VIOLATIONS


@contextlib.contextmanager
def _frozen_start() -> Iterator[None]:
    """The objects of the command's start (torch's among them: 180,000) kept out of the garbage collector's passes
    while it scans and writes, which a report's many violations trigger (10,000 bad rows: 0.08 s of passes over
    them); then collectable again (objects still frozen at exit are never freed: nanobind reports them leaked)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@contextlib.contextmanager
def _arrow_pool() -> Iterator[None]:
    """pyarrow's allocations from jemalloc while the command scans, on Linux (pyarrow's wheels there have it), where
    pyarrow is not loaded yet (its pool is chosen once, from ARROW_DEFAULT_MEMORY_POOL, when it loads) and the
    variable is not set. Its default, mimalloc, keeps more of what each chunk's read frees: peak RSS of `scan` on
    one thread, 10M numeric rows 353 -> 328 MiB, 1M token rows 340 -> 320 MiB, the same CPU time
    (benchmarks/scan/README.md); glibc's malloc (pyarrow's "system" pool) gave 328 and 361 MiB, and 6% more CPU
    time on the token table. Choosing the pool after pyarrow loads (`pyarrow.set_memory_pool`) left the Parquet
    reader's buffers in mimalloc, both pools holding memory: 362 MiB."""
    chosen = (sys.platform.startswith("linux") and "pyarrow" not in sys.modules
              and "ARROW_DEFAULT_MEMORY_POOL" not in os.environ)
    if chosen:
        os.environ["ARROW_DEFAULT_MEMORY_POOL"] = "jemalloc"
    try:
        yield
    finally:
        if chosen:  # (pyarrow, if it loaded, keeps its pool; a later process gets the default)
            os.environ.pop("ARROW_DEFAULT_MEMORY_POOL", None)


def report_parts(report: dict[str, Any]) -> Iterator[str]:
    """The scan's report as JSON text, in parts (joined, `json.loads` gives `report` back): one key a line, and
    one line per entry of a list (a violation, a summary row), each written compact by json's C encoder. An
    indented dump of the whole takes Python's own encoder: 0.11 s per 10,000 bad rows, against 0.05 s."""
    yield "{"
    for k, (key, value) in enumerate(report.items()):
        yield f"{',' if k else ''}\n  {json.dumps(key)}: "
        if isinstance(value, list) and value:
            yield "["
            for i, entry in enumerate(value):
                yield f"{',' if i else ''}\n    {json.dumps(entry)}"
            yield "\n  ]"
        else:
            yield json.dumps(value)
    yield "\n}"


def scan(spec: Any, data: str | os.PathLike[str], *, engine: str = "local", backend: str = "auto",
         batch_size: int | None = None, rename: Mapping[str, str] | None = None, ignore: Iterable[str] = (),
         bad_rows: str | os.PathLike[str] | None = None, progress: bool = False, strict: bool = False,
         engine_logs: bool = False) -> dict[str, Any]:
    """Check every sample of `data` against `spec` and return the report (the JSON that `scan --json` prints).

    Args:
        spec: the contract, a `BatchSpec` with its parameters (`tc.load_spec(...)`).
        data: saved batch files, a `datasets` save_to_disk directory, or Parquet or Arrow shards.
        engine: "local" (this process) or "ray": each shard a Ray Data task, in the running Ray
            instance (or cluster) if there is one, else a local one. Only for Parquet or Arrow data
            (a `datasets` directory holds Arrow files); the report is the same either way.
        backend: as for `tc.check`; "auto" runs the compiled C kernel where a compiler exists.
        batch_size: rows per check of a dataset or shard; None: as many as take about CHUNK_BYTES as
            tensors (many rows of numbers, few of long token lists), read part by part.
        rename: column -> contract field, on top of the Hugging Face renames (`label` -> `labels`);
            a column the data lacks is a usage error.
        ignore: data columns to leave out, where one would otherwise stop the scan as a likely
            misspelling of a contract field the data lacks (`lables` for `labels`).
        bad_rows: a new or empty directory to write the bad rows of Parquet or Arrow shards to.
        progress: show a progress bar on stderr when it is a terminal.
        strict: count warnings as errors (`ok` is then False for them too).
        engine_logs: let Ray print its own logs and progress bars (off: the scan's progress only).
    """
    if engine not in ENGINES:
        raise UsageError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if batch_size is not None and batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {batch_size}")
    if backend == "triton" and os.environ.get("TRITON_INTERPRET") != "1":
        raise UsageError("--backend triton checks CUDA tensors, and a scan reads its data into host memory: use "
                         "--backend auto (the C kernel) or torch (TRITON_INTERPRET=1 runs the Triton kernel on the CPU)")
    renames = _renames(rename or {}, spec)
    result = _Scan(spec, backend)
    applied: dict[str, str] = {}  # the renames some batch or column actually needed
    path = Path(data)
    shards = _shards(path)
    if shards is None and (engine == "ray" or bad_rows is not None):
        option = "--engine ray" if engine == "ray" else "--bad-rows"
        raise UsageError(f"{option} reads Parquet or Arrow files ({', '.join(TABLE_SUFFIXES)}) or a `datasets` "
                         f"directory; {data} has none")
    if shards is not None:
        job, found, absent = _table_job(path, shards, spec, backend, batch_size, renames, dict(rename or {}),
                                        set(ignore), applied, bad_rows)
        result.entries += found
        total, unit = sum(s.rows for s in job.shards), "rows"
    else:
        items, total, unit, absent = _sources(path, spec, renames, applied)
    for source, fields in absent.items():  # said once, not once per chunk
        for name in fields["required"]:
            result.entries.append(_entry(source, name, "missing_field", fields["message"][name],
                                         f"required field {name} is missing from the dataset"))
    with _progress(f"scanning {unit}", total, progress) as advance, _one_torch_thread():
        if shards is None:
            for item in items:
                result.add(item)
                advance(item.rows)
        elif engine == "ray":
            from tritoncheck.scanning.ray import run_shards

            for part in run_shards(job, advance, logs=engine_logs):
                result.merge(part)
        else:
            for shard in job.shards:
                result.merge(job.run(shard, advance))
    if strict:  # as `Report.strict`: every warning becomes an error, its message too
        for entry in result.entries:
            if entry["severity"] == "warning":
                entry["severity"], entry["message"] = "error", entry["message"].removeprefix(WARNING_PREFIX)
    return _summary(spec.name, str(data), unit, result, applied, absent)


@contextlib.contextmanager
def _one_torch_thread() -> Iterator[None]:
    """torch's ops on one thread while the scan runs, then as before. The scan is one thread by design (more cores:
    `--engine ray`); its torch ops are small (a chunk's widening, the rows of a failing check), and on more intra-op
    threads they cost more than they save: at 10M numeric rows on 2 cores, 2.3x the CPU time and 3x the wall time
    (OpenMP's threads wait spinning between ops)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def _progress(what: str, total: int, show: bool) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr (only on a terminal) and the function that advances it. Off a terminal rich is
    not imported at all (0.09 s of CPU, most of a 1M-row scan's own work)."""
    if not (show and _terminal(sys.stderr)):
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    err = Console(stderr=True)
    columns = (TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True, disable=not (show and err.is_terminal)) as bar:
        task = bar.add_task("scan", total=total)
        yield lambda n: bar.advance(task, n)


def _terminal(stream: Any) -> bool:
    """Whether rich takes `stream` for a terminal, decided as rich's `Console.is_terminal` does
    (TTY_COMPATIBLE 0 or 1, then FORCE_COLOR set and not empty, then isatty) without importing it;
    False means plain text, rich not needed."""
    tty_compatible = os.environ.get("TTY_COMPATIBLE", "")
    if tty_compatible in ("0", "1"):
        return tty_compatible == "1"
    force_color = os.environ.get("FORCE_COLOR")
    if force_color is not None:
        return force_color != ""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty is not None and isatty())
    except ValueError:  # (a closed stream)
        return False


class _Scan:
    """Checks items one by one and collects bad samples (`entries`) and batches whose check failed (`unchecked`)."""

    def __init__(self, spec: Any, backend: str):
        self.spec, self.backend = spec, backend
        self.entries: list[dict[str, Any]] = []
        self.unchecked: list[dict[str, Any]] = []
        self.checks = self.samples = self.unread = 0  # unread: rows (or files) that could not be read
        self.said: set[tuple[Any, ...]] = set()
        self.backends: set[str] = set()  # what actually ran (auto: "c", or "torch" where no compiler exists)
        self.places: dict[int, tuple[Any, dict[tuple[str, str, int], int]]] = {}  # id(spec) -> (spec, its places)

    def add(self, item: _Item) -> None:
        if isinstance(item.data, _Found):
            self.entries += item.data.entries
            return
        if isinstance(item.data, UsageError):  # an unreadable file is a finding, not a reason to stop
            self.entries.append(_entry(item.source, None, "unreadable", str(item.data), READABLE))
            self.unread += item.rows if item.known else 0
            return
        if isinstance(item.data, Exception):
            self.unchecked.append(_error(item.source, item.offset, item.data))
            return
        spec = item.spec or self.spec
        try:
            if isinstance(item.data, _Ragged):
                found, size, ran = item.data.scan(spec, self.backend, self._places(spec))
            else:
                found, size, ran = scan_batch(item.data, spec, self.backend)
        except Exception as exc:  # a bug in one batch's check must not hide the rest of the data
            self.unchecked.append(_error(item.source, item.offset, exc))
            return
        self.checks += 1
        self.samples += size
        self.backends.add(ran)
        for e in _entries(item, found, self._places(spec)):  # a problem of a whole chunk (a dtype) is said once per file
            key = (e["source"], e["field"], e["code"], e["message"])
            if e["row"] is None and key in self.said:
                continue
            self.said.add(key)
            self.entries.append(e)

    def _places(self, spec: Any) -> dict[tuple[str, str, int], int]:
        """`batch_coordinates` of the spec's plan, made once per spec (it was 70 us a chunk)."""
        from tritoncheck.plan.lower import compile_plan

        known = self.places.get(id(spec))
        if known is None or known[0] is not spec:
            known = self.places[id(spec)] = (spec, batch_coordinates(compile_plan(spec)))
        return known[1]

    def part(self) -> dict[str, Any]:
        """What `merge` takes: JSON-able, so that a shard's result travels from a Ray task as it is."""
        return {"entries": self.entries, "unchecked": self.unchecked, "checks": self.checks, "samples": self.samples,
                "unread": self.unread, "backends": sorted(self.backends)}

    def merge(self, part: dict[str, Any]) -> None:
        self.entries += part["entries"]
        self.unchecked += part["unchecked"]
        self.checks += part["checks"]
        self.samples += part["samples"]
        self.unread += part["unread"]
        self.backends.update(part["backends"])


def scan_batch(batch: Any, spec: Any, backend: str = "torch",
               take: Callable[[list[int]], Any] | None = None) -> tuple[list[tuple[int | None, Any]], int, str]:
    """The bad samples of one batch as (position or None, violation) pairs, the batch size, the backend that ran.

    A sample with only warnings is a bad sample too: it is found as one with errors is (`split_bad` on
    the strict reports), and listed with its own violations, each with its own severity. Position None marks a violation of the batch as a whole: a metadata problem (a missing field,
    a wrong dtype or shape), which no slice of the batch can be blamed for; then the data checks
    that did run are reported batch-level too. `take(positions)` makes the batch of those samples
    (default: the batch indexed along its batch dim); given, the batch is rows padded together, and a row
    is bad only if it fails alone.
    """
    from tritoncheck.api import check
    from tritoncheck.integrations.data import relocate, split_bad
    from tritoncheck.plan.lower import compile_plan

    report = check(batch, spec, backend=backend)
    plan = compile_plan(spec)
    size = report.dims.get(plan.batch_dim, (0, ""))[0]
    if not report.violations:
        return [], size, report.backend
    meta = [v for v in report.violations if v.code in METADATA_CODES]
    if meta or not isinstance(batch, Mapping) or plan.batch_dim not in report.dims:
        whole = 0 if size == 1 else None  # (one sample: to blame)
        fields = {v.field for v in meta}
        if (meta and len(meta) < len(report.violations) and isinstance(batch, Mapping)
                and all(v.code in FIELD_PROBLEMS for v in meta) and fields <= batch.keys()):
            # the fields with a problem of their own set aside, the rest of the batch is checked sample by sample:
            # a dtype or a stray key must not turn the other fields' bad samples into a problem of the whole batch.
            # Taken only where the rest finds what the whole batch found (without those fields a dim may go unbound,
            # or a rule on `present(...)` hold otherwise)
            def without(b: Mapping) -> dict[str, Any]:
                return {k: t for k, t in b.items() if k not in fields}

            found, rest_size, ran = scan_batch(without(batch), _optional(spec, [f for f in fields if f in spec.fields]),
                                               backend, None if take is None else lambda pos: without(take(pos)))
            same = {(v.field, v.code) for _, v in found} == {(v.field, v.code) for v in report.violations
                                                               if v.code not in METADATA_CODES}
            if same and rest_size == size and all(pos is not None for pos, _ in found):
                return [(whole, v) for v in meta] + found, size, ran
        return [(whole, v) for v in report.violations], size, report.backend

    if _per_sample(plan) and all(v.samples for v in report.violations):
        # each sample's verdict is its own: the samples the batch's violations name are the bad ones, and the rest
        # need no second check; each bad one is checked alone, so that its reported value is its own
        each: list[tuple[int | None, Any]] = []
        row = take  # (made at the first sample checked alone: most chunks have none)
        # (padded rows too: a field of one value per sample holds no padding)
        own_values = _own_values(batch, plan, report.violations)
        for pos in sorted({int(s) for v in report.violations for s in v.samples}):
            if own_values is not None and pos in own_values:
                each += [(pos, v) for v in own_values[pos]]
                continue
            row = row or _rows(batch, plan)
            one = row([pos])
            own = check(one, spec, backend=backend).violations
            if not own and take is None:  # (not for a check of one sample's values; split_bad settles it if it does)
                break
            # (padded rows, `take`: one that passes alone failed only on its padding, a value it does not hold)
            each += [(pos, relocate(v, pos, plan)) for v in own]
        else:
            return each, size, report.backend

    alone: dict[int, Any] = {}  # each sample's own report, warnings still warnings

    def subset(positions: list[int]) -> tuple[Any, Any]:
        part = take(positions) if take is not None else _take(batch, plan, positions)
        checked = check(part, spec, backend=backend)
        if len(positions) == 1:
            alone[positions[0]] = checked
        return checked.strict(), part

    _, bad, _ = split_bad(size, subset, report.strict(), batch, plan)
    found: list[tuple[int | None, Any]] = []
    for pos, vs in bad.items():  # (a sample that passes alone, dropped with its group, keeps the group's)
        own = alone[pos].violations if pos in alone and alone[pos].violations else None
        if own is None and take is not None and pos in alone:
            continue  # padded rows: it failed only on its padding (a pad value below a field's min), not on its values
        found += [(pos, v) for v in vs] if own is None else [(pos, relocate(v, pos, plan)) for v in own]
    return found, size, report.backend


def _own_values(batch: Mapping, plan: Any, violations: list[Any]) -> dict[int, list[Any]] | None:
    """Per bad sample that breaks only checks of one value per sample, its own report as checking that sample alone
    gives it and `relocate` moves it to its position, built from the batch without a check per sample (~0.1 ms
    each: 1% bad rows cost more than the rest of the scan). Such a check (`_one_value`) reads one value of each
    field it reads per sample, and nothing else of the batch: a sample fails it alone exactly where it fails it in
    the batch, once (count 1), showing its own value (a field's element, or a rule's subject evaluated at the
    sample), in the kind's message (which reads only the fields' dtypes); it must be the only check of its field
    and code (so `relocate` moves its index too). Its violations keep the order of the batch's (the checks'
    order). None: no such sample."""
    import torch

    from tritoncheck.backends.torch import Context
    from tritoncheck.checks.registry import message, violation
    from tritoncheck.dtypes import compute_dtype
    from tritoncheck.plan.lower import RuleCheck, bind

    named: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for c in plan.checks:
        named[(c.field, c.code)].append(c)
    own: dict[Any, Any] = {}  # violation -> its check, where the check is one of one value per sample
    for v in violations:
        checks = named.get((v.field, v.code), [])
        if len(checks) == 1 and type(v.samples) is tuple and _one_value(checks[0], plan):
            own[id(v)] = checks[0]
    if not own:
        return None
    others = {int(s) for v in violations if id(v) not in own for s in v.samples}  # checked alone, as before
    bound = bind(plan, dict(batch))  # (the batch's signature was bound by its check: a cache hit)
    ctx = None
    found: dict[int, list[Any]] = defaultdict(list)
    for v in violations:
        c = own.get(id(v))
        if c is None:
            continue
        positions = [int(s) for s in v.samples if s not in others]
        if not positions:
            continue
        if isinstance(c, RuleCheck):  # its subject at each sample, as the torch backend shows it (every backend agrees)
            ctx = ctx or Context(plan, bound)
            t = ctx.values(c.subject, c.axes).reshape(-1)  # (one value where the subject is the same for all)
        else:
            t = bound.tensors[c.field]
        at = torch.tensor(positions if len(t) > 1 else [0] * len(positions), dtype=torch.long, device=t.device)
        values = t.index_select(0, at)
        values = (values if isinstance(c, RuleCheck) else values.to(compute_dtype(t.dtype))).tolist()
        rule = message(c, bound)  # (the same for every sample: it reads no value)
        for pos, value in zip(positions, values, strict=True):
            found[pos].append(violation(c, bound, 1, (pos,), (pos,), value, rule))
    return found or None


def _one_value(c: Any, plan: Any) -> bool:
    """Whether check `c` decides each sample from one value per field it reads (axes [B] alone, no dim, no index),
    as element-wise kinds (a bound, a value set, finiteness) on a [B] field do, and rules of such fields combined
    element-wise (`lo <= hi`, `a + b < 5 where m`): no reduction, no position, no size."""
    from tritoncheck.checks import kind_of
    from tritoncheck.expr import Binary, Const, Present, Ref, Unary, nodes
    from tritoncheck.plan.lower import RuleCheck

    b = plan.batch_dim
    axes = {f.name: f.axes for f in plan.fields}
    fields, dims = kind_of(c).reads(c)
    if c.axes != (b,) or dims or any(axes.get(f) != (b,) for f in fields):
        return False
    if kind_of(c).value_fails is not None:
        return True
    if not isinstance(c, RuleCheck):
        return False
    for e in (c.expr, c.where, c.subject, c.when):
        for n in nodes(e):
            if isinstance(n, Ref) and (axes.get(n.field) != (b,) or any(i is not None for i in n.index or ())):
                return False
            if not isinstance(n, (Const, Present, Ref, Unary, Binary)):
                return False
    return True


def _per_sample(plan: Any) -> bool:
    """Whether every data check decides each sample from that sample's own values: no reduction over the batch dim,
    no batch size or position along it, no value of another sample (`x[0]`). Then a batch's violations name
    exactly the samples that fail alone. Anything not known to be so (an unresolved name) is taken as not."""
    from tritoncheck.checks import kind_of
    from tritoncheck.expr import Arange, Binary, Const, Dim, Present, Reduce, Ref, Unary

    b = plan.batch_dim
    axes = {f.name: f.axes for f in plan.fields}

    def own(e: Any) -> bool:
        if isinstance(e, (Const, Present)):
            return True
        if isinstance(e, Dim):
            return e.name != b
        if isinstance(e, Arange):
            return e.dim != b
        if isinstance(e, Ref):
            at = axes.get(e.field, ())
            return e.index is None or b not in at or (len(e.index) == len(at) and e.index[at.index(b)] is None)
        if isinstance(e, Unary):
            return own(e.x)
        if isinstance(e, Binary):
            return own(e.a) and own(e.b)
        if isinstance(e, Reduce):
            return e.dims is not None and all(isinstance(d, str) and d != b for d in e.dims) and own(e.x)
        return False

    for c in plan.checks:  # each kind says whether its checks decide each sample alone (its `per_sample`)
        per_sample = kind_of(c).per_sample
        if b not in c.axes or per_sample is None or not per_sample(c, own, b):
            return False
    return True


def _rows(batch: Mapping, plan: Any) -> Callable[[list[int]], dict[str, Any]]:
    """`_take` for the bad samples of a batch, one at a time: each field's tensor found once, and a sample a view of
    it where every field holds the batch dim first and contiguously (as a row of a dataset chunk does)."""
    from tritoncheck.plan.lower import as_tensor

    known = {f.name: f for f in plan.fields}
    along: dict[str, Any] = {}
    views = True
    for name, value in batch.items():
        fp = known.get(name)
        tensor = as_tensor(value)[0] if fp is not None and value is not None else None
        if tensor is not None and tensor.ndim - len(fp.axes) in (0, fp.unit_tail) and plan.batch_dim in fp.axes:
            along[name] = tensor
            views = views and fp.axes.index(plan.batch_dim) == 0 and tensor.is_contiguous()

    def one(positions: list[int]) -> dict[str, Any]:
        if len(positions) != 1 or not views:
            return _take(batch, plan, positions)
        (pos,) = positions
        return {name: along[name][pos:pos + 1] if name in along else value for name, value in batch.items()}

    return one


def _take(batch: Mapping, plan: Any, positions: list[int]) -> dict[str, Any]:
    """The batch restricted to `positions` along the batch dim, in every field whose rank fits."""
    import torch

    from tritoncheck.plan.lower import as_tensor

    index = torch.tensor(positions, dtype=torch.long)
    known = {f.name: f for f in plan.fields}
    out = {}
    for name, value in batch.items():
        fp = known.get(name)
        tensor = as_tensor(value)[0] if fp is not None and value is not None else None
        # (a field whose shape ends in '1?' may come with its size-1 axis: labels [B, 1] for [B])
        if tensor is not None and tensor.ndim - len(fp.axes) in (0, fp.unit_tail) and plan.batch_dim in fp.axes:
            out[name] = tensor.index_select(fp.axes.index(plan.batch_dim), index.to(tensor.device))
        else:
            out[name] = value
    return out


def _rename_pairs(items: list[str]) -> dict[str, str]:
    """--rename OLD=NEW options as a mapping (a later OLD wins)."""
    out = {}
    for item in items:
        old, sep, new = (part.strip() for part in item.partition("="))
        if not sep or not old or not new:
            raise UsageError(f"--rename takes OLD=NEW, got {item!r}")
        out[old] = new
    return out


def _renames(pairs: Mapping[str, str], spec: Any) -> dict[str, str]:
    """The renames asked for, plus the Hugging Face collators' renames the spec has a field for."""
    out = {old: new for old, new in HF_RENAMES.items() if new in spec.fields and old not in spec.fields}
    for old, new in pairs.items():
        if new not in spec.fields:
            raise UsageError(f"--rename {old}={new}: the spec has no field {new!r}{closest(new, spec.fields)}; "
                             f"its fields: {', '.join(spec.fields)}")
        out = {k: v for k, v in out.items() if v != new}  # an explicit rename replaces a default one
        out[old] = new
    return out


def _renamed(batch: Any, renames: dict[str, str], applied: dict[str, str]) -> Any:
    """A mapping's keys renamed where the new name is not taken (noted in `applied`); anything else as it is."""
    if not isinstance(batch, Mapping) or not renames:
        return batch
    moved = {k: renames[k] for k in batch if k in renames and renames[k] not in batch}
    applied.update(moved)
    return {moved.get(k, k): v for k, v in batch.items()}


def _sources(data: Path, spec: Any, renames: dict[str, str], applied: dict[str, str]
             ) -> tuple[Iterator[_Item], int, str, dict[str, dict[str, Any]]]:
    """Saved batch files: the items to check, the progress total, its unit, and fields they lack (none: per batch)."""
    if not data.exists():
        raise UsageError(f"data not found: {data}")
    if data.is_file():
        files = [data]
    else:
        files = sorted(p for p in data.rglob("*") if p.is_file() and p.suffix in BATCH_SUFFIXES)
        if not files:
            raise UsageError(f"no batch files ({', '.join(BATCH_SUFFIXES)}) under {data}")

    def gen() -> Iterator[_Item]:
        for path in files:
            try:
                yield _Item(str(path), 0, _renamed(load_batch(str(path)), renames, applied), 1)
            except UsageError as exc:
                yield _Item(str(path), 0, exc, 1, known=False)

    return gen(), len(files), "files", {}


def _dataset_files(path: Path) -> list[tuple[str, Path]] | None:
    """A `datasets` save_to_disk directory's Arrow files as (split, file), in the order its state.json lists
    them (its row order), or None if `path` is no such directory."""
    if (path / "dataset_dict.json").is_file():
        try:
            splits = json.loads((path / "dataset_dict.json").read_text())["splits"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"cannot read {path / 'dataset_dict.json'}: {one_line(exc)}") from None
        if not isinstance(splits, list) or any(Path(str(x)).name != str(x) or str(x) in ("", ".", "..") for x in splits):
            raise UsageError(f"{path / 'dataset_dict.json'} names splits that are not folders of {path}")
        return [(str(split), f) for split in splits for _, f in _dataset_files(path / str(split)) or []]
    if not ((path / "state.json").is_file() and (path / "dataset_info.json").is_file()):
        return None
    try:
        names = [entry["filename"] for entry in json.loads((path / "state.json").read_text())["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"cannot read {path / 'state.json'}: {one_line(exc)}") from None
    files = [path / name for name in names]
    if any(Path(name).name != name or not f.is_file() for name, f in zip(names, files, strict=True)):
        raise UsageError(f"{path / 'state.json'} names data files that are not in {path}")
    return [("", f) for f in files]


# --- Parquet and Arrow shards (and `datasets` directories): the same work for both engines ----------------


@dataclass(frozen=True)
class Shard:
    """One Parquet or Arrow file of a dataset, in row order, and where its rows start globally."""

    index: int
    path: str
    offset: int | None  # global index of its first row (rows of the shards before it, from their metadata);
    rows: int  # None when a shard before it cannot be counted (then rows are numbered within the shard only)
    layout: int = 0  # which of its job's `layouts` reads it (shards can differ in their columns)


@dataclass(frozen=True)
class ShardJob:
    """Everything needed to check one shard, picklable, so that a Ray task runs exactly what the local loop runs."""

    spec: Any  # the contract
    # per set of columns the shards have: (column -> contract field, the contract with the fields those columns
    # lack made optional: they are reported once, by the driver)
    layouts: tuple[tuple[dict[str, str], Any], ...]
    batch_size: int | None  # rows per chunk; None: by bytes (CHUNK_BYTES)
    backend: str
    bad_rows: str | None  # directory for the bad rows, or None
    shards: tuple[Shard, ...] = field(default=())

    def run(self, shard: Shard, advance: Callable[[int], None] | None = None) -> dict[str, Any]:
        """The shard checked in chunks (see `_chunks`), as `_Scan.part()`; its bad rows written if asked."""
        result = _Scan(self.spec, self.backend)
        for item in self._items(shard):
            result.add(item)
            if advance is not None:
                advance(item.rows)
        if self.bad_rows is not None:
            try:
                self._write_bad_rows(shard, result.entries)
            except Exception as exc:  # a damaged column the check did not read: the findings stand
                result.entries.append(_entry(shard.path, None, "unreadable",
                                             f"--bad-rows: cannot read the bad rows of {shard.path}, so none are "
                                             f"written: {one_line(exc)}", READABLE))
        return result.part()

    def _items(self, shard: Shard) -> Iterator[_Item]:
        """The shard's chunks; a column of a type the scan does not read is reported and left out, and a
        shard that cannot be read (from some row on) is reported from that row: the rows read so far stand."""
        start = 0
        taken, layout_spec = self.layouts[shard.layout]
        try:
            with _open_shard(shard.path) as (schema, pieces):
                refused = {c: refusal(schema.field(c).type) for c in taken if c in schema.names}
                refused = {c: why for c, why in refused.items() if why is not None}
                if refused:
                    yield _Item(shard.path, shard.offset, _Found([
                        _entry(shard.path, taken[c], "unsupported_type",
                               f"{taken[c]}: column {c!r} of {shard.path}: {why}; the column is not checked",
                               READ_TYPES)
                        for c, why in refused.items()]), 0)
                columns = {c: f for c, f in taken.items() if c not in refused}
                if not columns:  # nothing of the spec to read here: its rows are not checked (and not counted)
                    yield _Item(shard.path, shard.offset, _Found([]), shard.rows)
                    return
                spec = _optional(layout_spec, [taken[c] for c in refused])
                scratch = Scratch()  # (chunks are checked one after another: their padded batches share memory)
                for n, table in _chunks(pieces, list(columns), self.batch_size, _result_width(spec)):
                    offset = None if shard.offset is None else shard.offset + start
                    yield _chunk_item(shard.path, start, offset, table, columns, n, spec, scratch)
                    start += n
        except Exception as exc:  # a damaged or foreign shard (pyarrow raises many types)
            err = UsageError(f"cannot read {shard.path} from its row {start}: {one_line(exc)}")
            yield _Item(shard.path, None if shard.offset is None else shard.offset + start, err, shard.rows - start,
                        row=start)

    def _write_bad_rows(self, shard: Shard, entries: list[dict[str, Any]]) -> None:
        """The shard's bad rows, every column, as one Parquet file named by the shard's place (so sorted names
        are global row order); written whole under a temporary name, so a retried task leaves no half file."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        codes: dict[int, set[str]] = defaultdict(set)
        for e in entries:
            if e["row"] is not None:
                codes[e["row"]].add(e["code"])
        if not codes:
            return
        wanted, parts, start = sorted(codes), [], 0
        with _open_shard(shard.path) as (_, pieces):
            for p in pieces:  # only the pieces (Parquet row groups) that hold a bad row are read
                rows = p.rows
                local = [i - start for i in wanted if start <= i < start + rows]
                if local:
                    piece = p.read(None)
                    for column in piece.columns:  # damaged offsets or buffers: an error before `take` reads them
                        column.validate(full=True)
                    parts.append(piece.take(pa.array(local)))
                start += rows
        table = pa.concat_tables(parts)
        rows = [None if shard.offset is None else shard.offset + i for i in wanted]
        table = table.append_column(ROW_COLUMN, pa.array(rows, pa.int64()))
        table = table.append_column(CODES_COLUMN, pa.array([sorted(codes[i]) for i in wanted], pa.list_(pa.string())))
        width = max(5, len(str(len(self.shards) - 1)))
        out = Path(self.bad_rows or ".") / f"bad-rows-{shard.index:0{width}d}.parquet"
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, out)


def _shards(data: Path) -> list[tuple[str, Path]] | None:
    """DATA's Parquet or Arrow files as (numbering group, file) in row order, or None if it is other data (or none).
    Rows are numbered across the files of a group: all of them, or each split of a `datasets` directory."""
    if not data.exists():
        return None
    if data.is_dir():
        hf = _dataset_files(data)
        if hf is not None:
            return hf
    if data.is_file():
        return [("", data)] if data.suffix in TABLE_SUFFIXES else None
    files = sorted(p for p in data.rglob("*") if p.is_file() and not p.name.startswith(("_", ".")))
    tables = [p for p in files if p.suffix in TABLE_SUFFIXES]
    if tables and any(p.suffix in BATCH_SUFFIXES for p in files):
        raise UsageError(f"{data} holds both batch files ({', '.join(BATCH_SUFFIXES)}) and Parquet or Arrow "
                         "files: scan one kind at a time")
    return [("", p) for p in tables] or None


def _table_job(data: Path, files: list[tuple[str, Path]], spec: Any, backend: str, batch_size: int | None,
               renames: dict[str, str], explicit: dict[str, str], ignore: set[str], applied: dict[str, str],
               bad_rows: str | os.PathLike[str] | None
               ) -> tuple[ShardJob, list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The job over DATA's shards (offsets from each file's metadata), the entries for shards that cannot be
    read at all, and the contract fields the data lacks, per source: DATA for a field every readable shard lacks
    (said once), each shard for one that only some shards lack. Each shard is checked on the columns it has,
    whatever the others have (a column only some shards hold is checked where it is)."""
    shards: list[Shard] = []
    sets: dict[frozenset[str], tuple[int, tuple[str, ...]]] = {}  # each distinct set of columns -> its layout
    unreadable: list[dict[str, Any]] = []
    offset: int | None = 0
    group = None
    for split, path in files:
        if split != group:  # a new split of a `datasets` directory: its rows count from 0
            group, offset = split, 0
        try:
            with _open_shard(str(path)) as (schema, pieces):
                rows = sum(p.rows for p in pieces)
        except Exception as exc:  # not Parquet or Arrow after all, or damaged: pyarrow raises many types
            unreadable.append(_entry(str(path), None, "unreadable",
                                     f"cannot read {path}: {one_line(exc)}" + ("" if path == files[-1][1] else
                                     "; the rows of later files are numbered within their file"), READABLE))
            offset = None  # its row count is unknown: so is every later row's global index
            continue
        columns = tuple(c for c in schema.names if c not in ignore)
        layout, _ = sets.setdefault(frozenset(columns), (len(sets), columns))  # (in any order)
        shards.append(Shard(len(shards), str(path), offset, rows, layout))
        offset = None if offset is None else offset + rows
    every = list(dict.fromkeys(c for _, names in sets.values() for c in names))  # (in the order the shards have them)
    for old, new in explicit.items():  # (a column some shard has is renamed where it is)
        if old not in every:
            raise UsageError(f"--rename {old}={new}: the data has no column {old!r}{closest(old, every)} "
                             f"(columns: {', '.join(every)})")
    layouts = [_columns(list(names), spec, renames, applied) for _, names in sets.values()]
    out = None
    if bad_rows is not None:
        out = Path(bad_rows)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise UsageError(f"--bad-rows {bad_rows}: give a new or empty directory")
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"--bad-rows {bad_rows}: {exc.strerror or exc}") from None
    job = ShardJob(spec, tuple((taken, chunk_spec) for taken, _, chunk_spec in layouts), batch_size, backend,
                   None if out is None else str(out), tuple(shards))
    return job, unreadable, _lacking(str(data), shards, [absent for _, absent, _ in layouts],
                                     lambda: _columns(every, spec, renames, {})[1]["message"])


def _lacking(data: str, shards: list[Shard], absents: list[dict[str, Any]], messages: Callable[[], dict[str, str]]
             ) -> dict[str, dict[str, Any]]:
    """`absent_fields` per source from each layout's `_columns` findings: a field every layout lacks is said of the
    dataset once (`messages()`: its message naming every column the data has), one only some lack of each shard
    that lacks it."""
    kinds = ("required", "optional")
    everywhere = {k: [f for f in absents[0][k] if all(f in a[k] for a in absents)] if absents else [] for k in kinds}
    out = {}
    if everywhere["required"] or everywhere["optional"]:
        said = absents[0]["message"] if len(absents) == 1 else messages()
        out[data] = {**everywhere, "message": {f: said[f] for f in everywhere["required"]}}
    for shard in shards:
        absent = absents[shard.layout]
        own = {k: [f for f in absent[k] if f not in everywhere[k]] for k in kinds}
        if own["required"] or own["optional"]:
            out[shard.path] = {**own, "message": {f: absent["message"][f] for f in own["required"]}}
    return out


@dataclass(frozen=True)
class _Piece:
    """A Parquet row group or an Arrow record batch: its rows (from metadata), `read(columns)` (all if None) as one
    table, `stream(columns, rows)` as tables of at most `rows` rows (memory bounded by them, not by the piece),
    and `width(columns)`: the bytes a row of those columns takes as tensors (leaf values as 8 bytes, plus a
    row's start and sizes per column)."""

    rows: int
    read: Callable[[list[str] | None], Any]
    stream: Callable[[list[str], int], Iterator[Any]]
    width: Callable[[list[str]], float]


@contextlib.contextmanager
def _open_shard(path: str) -> Iterator[tuple[Any, list[_Piece]]]:
    """A shard's Arrow schema and its pieces (Parquet row groups, Arrow record batches), counted from metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.endswith(".parquet"):
        # (buffered: a column chunk is read 1 MiB at a time, not whole: a 500 MB chunk would be held at once; fetching
        # a small row group's columns at once, pre_buffer, took the same CPU time: benchmarks/scan/readers.py)
        with pq.ParquetFile(path, buffer_size=1 << 20, pre_buffer=False) as pf:
            meta = pf.metadata
            top = [meta.schema.column(i).path.split(".")[0] for i in range(meta.num_columns)]

            def width(cols: list[str], g: int) -> float:
                group = meta.row_group(g)
                leaves = sum(group.column(i).num_values for i, name in enumerate(top) if name in cols)
                return (8 * leaves + 24 * len(cols)) / max(group.num_rows, 1)

            def stream(cols: list[str], rows: int, g: int) -> Iterator[Any]:
                for b in pf.iter_batches(batch_size=rows, row_groups=[g], columns=cols, use_threads=False):
                    yield pa.Table.from_batches([b])

            yield pf.schema_arrow, [_Piece(meta.row_group(g).num_rows,
                                           lambda cols, g=g: pf.read_row_group(g, columns=cols, use_threads=False),
                                           lambda cols, rows, g=g: stream(cols, rows, g),
                                           lambda cols, g=g: width(cols, g)) for g in range(meta.num_row_groups)]
        return
    with pa.memory_map(path) as source:  # mapped, not copied: counting the batches reads their headers only
        try:
            reader = pa.ipc.open_file(source)
            batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        except pa.ArrowInvalid:  # not the file format: the stream format (what `datasets` writes)
            source.seek(0)
            reader = pa.ipc.open_stream(source)
            batches = list(reader)

        def table(b: Any, cols: list[str] | None) -> Any:
            return pa.Table.from_batches([b]).select(b.schema.names if cols is None else cols)

        yield reader.schema, [_Piece(b.num_rows, lambda cols, b=b: table(b, cols),
                                     lambda cols, rows, b=b: iter([table(b, cols)]),  # mapped: slicing reads it
                                     lambda cols, b=b: _arrow_width(table(b, cols))) for b in batches]


def _arrow_width(table: Any) -> float:
    """`_Piece.width` of an Arrow table, from the lengths of its lists' value arrays: no offset is read (a damaged
    one made `flatten` abort the process; `read_column` validates them before any is used)."""
    from pyarrow import types

    leaves = 0
    for column in table.columns:
        for chunk in column.chunks:
            while types.is_list(chunk.type) or types.is_large_list(chunk.type) or types.is_fixed_size_list(chunk.type):
                chunk = chunk.values  # (all of them, even where the array is a slice: a bound, not a count)
            leaves += len(chunk)
    return (8 * leaves + 24 * table.num_columns) / max(table.num_rows, 1)


def _chunks(pieces: list[_Piece], columns: list[str], size: int | None, extra: float = 0) -> Iterator[tuple[int, Any]]:
    """A shard's `columns` in tables of `size` rows (the last one shorter), whatever its pieces' sizes, each
    with its row count (a table of no columns has none). `size` None: as many rows as fit in CHUNK_BYTES
    (by the first piece's row width, plus `extra` bytes a row: its check's result), read piece by piece in parts of at most that many rows; a piece of more
    rows is split in even parts, none of them joined to another piece's rows (joining copies every column)."""
    import pyarrow as pa

    by_bytes, pending, have = size is None, [], 0
    for piece in pieces:
        if not piece.rows:
            continue
        if size is None:
            size = max(1, min(MAX_CHUNK_ROWS, int(CHUNK_BYTES // max(piece.width(columns) + extra, 1))))
        limit, alone = size, by_bytes and piece.rows >= size
        if alone:
            if pending:
                yield have, pending[0] if len(pending) == 1 else pa.concat_tables(pending)
                pending, have = [], 0
            limit = -(-piece.rows // -(-piece.rows // size))  # rows / parts, rounded up: parts of even size
        try:
            for table in piece.stream(columns, limit):
                while table.num_rows:
                    part = table.slice(0, min(limit - have, table.num_rows))
                    pending.append(part)
                    have += part.num_rows
                    # (lengths within the table: pyarrow does not clamp them for a table of no columns)
                    table = table.slice(part.num_rows, table.num_rows - part.num_rows)
                    if have == limit:
                        yield have, pending[0] if len(pending) == 1 else pa.concat_tables(pending)
                        pending, have = [], 0
        except Exception:  # a damaged piece: the rows read before it are checked, then the error is reported
            if pending:
                yield have, pa.concat_tables(pending)
            raise
        if alone and pending:  # its last part
            yield have, pending[0] if len(pending) == 1 else pa.concat_tables(pending)
            pending, have = [], 0
    if pending:
        yield have, pa.concat_tables(pending)


def _result_width(spec: Any) -> int:
    """The bytes a row adds to its chunk's check result: an int64 count for each check over the batch dim (the C
    and Triton kernels' result buffer, `tritoncheck.kernel.ir.Layout`): 128 bytes for 16 checks, more than the
    row's 10 numbers."""
    from tritoncheck.plan.lower import compile_plan

    plan = compile_plan(spec)
    return 8 * sum(plan.batch_dim in c.axes for c in plan.checks)


def _columns(names: list[str], spec: Any, renames: dict[str, str], applied: dict[str, str]
             ) -> tuple[dict[str, str], dict[str, Any], Any]:
    """The columns to check (column -> contract field), the fields they lack, and the spec to check chunks with.

    Before any row is read, a column no field takes that is close to a field the data lacks (`lables`,
    `labels`) is a usage error.
    """
    taken = {c: renames.get(c, c) for c in names}
    taken = {c: f for c, f in taken.items() if f in spec.fields and (c == f or f not in names)}
    lacking = [f for f in spec.fields if f not in taken.values()]
    others = [c for c in names if c not in taken]
    for c in others:
        near = close_match(c, lacking)
        if near is not None:
            raise UsageError(f"column {c!r} is not a field of {spec.name}, and its field {near!r} is not in the data: "
                             f"a misspelling? --rename {c}={near} checks it as {near}; --ignore-column {c} scans "
                             "without it")
    applied.update({c: f for c, f in taken.items() if c != f})
    required = [f for f in lacking if not spec.fields[f].optional]
    absent = {
        "required": required, "optional": [f for f in lacking if f not in required],
        "message": {f: f"{f}: the contract requires it, but the dataset has no such column"
                       f"{closest(f, others)} (columns: {', '.join(names)}; --rename OLD={f} maps one)"
                    for f in required},
    }
    # the missing required fields are reported once by the caller; the chunks are checked without them
    return taken, absent, _optional(spec, required)


def _optional(spec: Any, names: list[str]) -> Any:
    """`spec` with fields `names` made optional: the chunks are checked without them (reported elsewhere, once)."""
    if not names:
        return spec
    fields = {k: f.model_copy(update={"optional": True}) if k in names else f for k, f in spec.fields.items()}
    return spec.model_copy(update={"fields": fields})


def _chunk_item(source: str, row: int, offset: int | None, table: Any, columns: dict[str, str], n: int,
                spec: Any, scratch: Scratch | None = None) -> _Item:
    """A chunk (an Arrow table) as one batch, or as a _Ragged chunk when its rows differ
    in shape or some hold a null; its columns read from their buffers (see `tritoncheck.scanning.arrow`).

    A chunk that cannot be read (damaged offsets or buffers) is an unreadable item of its rows: the
    scan goes on with the next.
    """
    try:
        read = {f: read_column(table.column(c)) for c, f in columns.items()}
    except Exception as exc:  # pyarrow's ArrowInvalid and others: damaged data
        err = UsageError(f"cannot read rows {row}-{row + n - 1} of {source}: {one_line(exc)}")
        return _Item(source, offset, err, n, spec, row)
    from tritoncheck.plan.lower import compile_plan

    if all(not c.flawed and c.uniform() for c in read.values()):
        stored = _stored(spec, scratch)
        # (in `scratch`'s memory where a narrow integer is widened: the chunk before is checked, this one is next)
        batch = {f: c.values if not c.sizes.shape[1] and c.values.dtype in stored.get(f, ()) else
                 c.whole(_pad_value(f, spec), scratch, f) for f, c in read.items()}
        return _Item(source, offset, batch, n, spec, row)
    return _Item(source, offset, _Ragged(read, spec, compile_plan(spec), n, scratch), n, spec, row)


def _stored(spec: Any, scratch: Scratch | None) -> dict[str, tuple[Any, ...]]:
    """`_as_stored` of the spec's plan, once per shard (kept in `scratch`)."""
    from tritoncheck.plan.lower import compile_plan

    stored = (scratch or Scratch()).memo.get(("as stored", id(spec)))
    if stored is None:
        stored = _as_stored(compile_plan(spec))
        if scratch is not None:
            scratch.memo[("as stored", id(spec))] = stored
    return stored


def _as_stored(plan: Any) -> dict[str, tuple[Any, ...]]:
    """Per field whose column of narrow signed integers (int8, int16, int32) a whole chunk holds as stored rather than
    widened to int64 as a collator makes it (widening took 0.14 s of CPU at 10M numeric rows): the stored types its
    spec accepts. Only where every check that reads the field decides each value alone (an element-wise kind that
    reads no dim: a bound, a value set, finiteness; such comparisons are exact in any width) and each sample alone
    (`_per_sample`: each bad row is then reported from a batch of that row alone, with the same values), and where
    the spec accepts int64 and the stored type alike (no dtype finding either way)."""
    import torch

    from tritoncheck.checks import kind_of
    from tritoncheck.dtypes import dtype_name

    if not _per_sample(plan):
        return {}
    other: set[str] = set()  # fields some other check reads
    for c in plan.checks:
        fields, dims = kind_of(c).reads(c)
        if kind_of(c).value_fails is None or dims:
            other |= set(fields)
    narrow = (torch.int8, torch.int16, torch.int32)
    return {f.name: tuple(d for d in narrow if dtype_name(d) in f.dtypes) for f in plan.fields
            if f.name not in other and "int64" in f.dtypes}


class _Ragged:
    """A chunk whose rows differ in shape (or some hold a null): its columns' flat values and each row's sizes.

    Rows are padded only when checked together, in groups (see `scan`), never the whole chunk to its
    longest row: memory follows the data. Only the dims bound from the batch (L, T) are padded,
    every field that has one to the same length; a row that differs along any other axis (bbox's 4)
    is padded too, but checked alone. A row with a null, or whose inner lists differ in length, is
    reported (`null`, `not_a_tensor`) and not checked further.
    """

    def __init__(self, columns: dict[str, Column], spec: Any, plan: Any, n: int, scratch: Scratch | None = None):
        import torch

        self.columns, self.spec, self.plan, self.n = columns, spec, plan, n
        self.scratch = scratch or Scratch()
        axes = {f.name: f.axes for f in plan.fields}
        self.dims = {name: [axes[name][k + 1] if name in axes and k + 1 < len(axes[name]) else f"{name}.{k}"
                            for k in range(c.sizes.shape[1])] for name, c in columns.items()}
        self.free = {d for f in plan.fields for d in f.shape if isinstance(d, str)} - {plan.batch_dim}
        by_dim: dict[str, list[Any]] = defaultdict(list)
        for name, c in columns.items():
            for k, d in enumerate(self.dims[name]):
                by_dim[d].append(c.sizes[:, k])
        self.sizes = {d: torch.stack(cols, dim=1) for d, cols in by_dim.items()}  # per dim: [n, columns with it]

    def take(self, positions: list[int], reuse: bool = False) -> dict[str, Any]:
        """The rows at `positions` as one batch, each dim padded to the longest of them; one row as it is. `reuse`:
        in the scan's scratch memory (valid until the next such batch)."""
        import torch
        from torch.nn.functional import pad

        index = torch.tensor(positions, dtype=torch.long)
        if len(positions) == 1:
            return {name: c.take(index, 0) for name, c in self.columns.items()}
        longest = {d: int(sizes.index_select(0, index).max()) for d, sizes in self.sizes.items()}
        out = {}
        for name, c in self.columns.items():
            part = c.take(index, _pad_value(name, self.spec), self.scratch if reuse else None, name)
            grow = [longest[d] - have for d, have in zip(self.dims[name], part.shape[1:], strict=True)]
            if any(grow):  # another field is longer along a shared dim
                part = pad(part, [x for g in reversed(grow) for x in (0, g)], value=_pad_value(name, self.spec))
            out[name] = part
        return out

    def flaws(self) -> list[tuple[int, Violation]]:
        """The rows not checked, each with why (the first of `FLAWS` that holds, per column)."""
        import torch

        found = []
        for name, c in self.columns.items():
            seen = torch.zeros(self.n, dtype=torch.bool)
            for mark, code, rule in FLAWS:
                rows = (getattr(c, mark) & ~seen).nonzero().flatten().tolist()
                found += [(r, Violation(name, code, rule, samples=(r,))) for r in rows]
                seen |= getattr(c, mark)
        return found

    def scan(self, spec: Any, backend: str, places: dict[tuple[str, str, int], int]
             ) -> tuple[list[tuple[int | None, Any]], int, str]:
        """The bad rows, each as checking it alone finds it; see the module docstring for why that holds. `places`:
        the plan's `batch_coordinates`, made once per spec."""
        import torch

        from tritoncheck.api import check
        from tritoncheck.integrations.data import relocate
        from tritoncheck.plan.lower import bind, expr_dims

        plan = self.plan
        found: list[tuple[int | None, Any]] = self.flaws()
        checked = torch.ones(self.n, dtype=torch.bool)
        for c in self.columns.values():
            for mark, _, _ in FLAWS:
                checked &= ~getattr(c, mark)
        suspect = torch.zeros(self.n, dtype=torch.bool)
        if not self.sizes:  # columns of scalars, some rows with a null: the others are one batch (nothing to pad)
            rows = checked.nonzero().flatten()
            if not len(rows):
                return found, self.n, backend
            members, stored = rows.tolist(), _stored(spec, self.scratch)
            # (narrow integers as stored where a whole chunk keeps them so: the kernel of the chunks without a null)
            batch = {name: c.values.index_select(0, rows) if c.values.dtype in stored.get(name, ()) else
                     c.take(rows, _pad_value(name, self.spec)) for name, c in self.columns.items()}
            bad, _, ran = scan_batch(batch, spec, backend)
            found += [(None, moved(v, members.__getitem__, places)) if p is None else
                      (members[p], relocate(v, members[p], plan)) for p, v in bad]
            return sorted(found, key=lambda f: -1 if f[0] is None else f[0]), self.n, ran
        for d, sizes in self.sizes.items():
            suspect |= (sizes != sizes[:, :1]).any(dim=1)  # its fields disagree on d
            if d not in self.free:
                suspect |= sizes[:, 0] != sizes.max()  # shorter along a fixed axis (bbox's 4)
        flat = self._elementwise(spec, backend, checked)
        if flat is not None:  # no padding: the rows whose elements break a check, those suspect, and each alone
            flagged, dims, ran = flat
            members = checked.nonzero().flatten()
            again = (flagged | suspect).index_select(0, members) | self._breaks_dim_rule(members, dims)
            for i in members[again].tolist():
                found += [(i, relocate(v, i, plan)) for v in check(self.take([i]), spec, backend=backend).violations]
            return sorted(found, key=lambda f: -1 if f[0] is None else f[0]), self.n, ran
        read = {d for _, dims, needs in plan.needs for d in (*dims, *(n.dim for n in needs))}
        # and the sizes that decide whether a rule applies (`... where present(labels) & (T > 2)`)
        read |= {d for c in plan.checks if getattr(c, "when", None) is not None for d in expr_dims(c.when)}
        read = sorted(read & self.sizes.keys())
        # rows of equal length in every dim a data check reads, so that padding changes none of them
        keys = torch.stack([self.sizes[d][:, 0] for d in read], dim=1) if read else torch.zeros(self.n, 1)
        group_of = _distinct(keys)[1]
        group_of = torch.where(checked, group_of, -1)
        ran = backend  # every chunk has a group: replaced by what checked it
        for g in group_of.unique().tolist():
            for members in self._buckets((group_of == g).nonzero().flatten()) if g >= 0 else ():
                batch = self.take(members, reuse=True)  # (its group's only padded batch: the next reuses it)
                rows, _, ran = scan_batch(batch, spec, backend,
                                          take=lambda pos, m=members: self.take([m[p] for p in pos]))
                found += [(None, moved(v, members.__getitem__, places)) if p is None else
                          (members[p], relocate(v, members[p], plan)) for p, v in rows]
                if any(p is None for p, _ in rows):
                    continue  # a metadata problem of the whole group: no row is to blame
                bad = {members[p] for p, _ in rows}
                index = torch.tensor(members)
                again = suspect.index_select(0, index) | self._breaks_dim_rule(index, bind(plan, batch).dims)
                for i in (m for m, s in zip(members, again.tolist(), strict=True) if s and m not in bad):
                    found += [(i, relocate(v, i, plan)) for v in check(self.take([i]), spec, backend=backend).violations]
        return sorted(found, key=lambda f: -1 if f[0] is None else f[0]), self.n, ran

    def _elementwise(self, spec: Any, backend: str, checked: Any) -> tuple[Any, dict[str, Any], str] | None:
        """Where every data check is element-wise over one field and reads no dim (a constant bound, a value set,
        finiteness: the kinds with a `value_fails` part), each row's verdict is its elements': each column's flat
        values are checked as they are, in blocks (no padding), and a row is flagged where it holds a value of a
        block that fails. Returns the flagged rows, the dims of one row alone (for the rules over dims) and the
        backend that ran; None where the checks are others, or where one row alone shows a problem of every row
        (a column's dtype or rank: the padded path reports it for the chunk)."""
        import torch

        from tritoncheck.api import check
        from tritoncheck.checks import kind_of
        from tritoncheck.dtypes import dtype_name
        from tritoncheck.plan.lower import bind

        plan = self.plan
        # element-wise kinds (a `value_fails` part) whose check reads no dim: one value decides alone
        if not all(kind_of(c).value_fails is not None and not kind_of(c).reads(c)[1] for c in plan.checks):
            return None
        rows = checked.nonzero().flatten()
        if not len(rows):
            return None
        probe = self.take([int(rows[0])])
        first = check(probe, spec, backend=backend)
        if any(v.code in METADATA_CODES for v in first.violations):
            return None
        if ELEMENTS in spec.params:
            return None
        # +1 at the first row of a failing block's values, -1 past its last
        marks, ran = torch.zeros(self.n + 1, dtype=torch.long), first.backend
        for name in sorted({c.field for c in plan.checks} & self.columns.keys()):
            values = self.columns[name].values
            # (in the width the file holds: the probe checked the dtype a batch has; comparisons are exact in any width)
            flat = self.scratch.memo.get(("flat spec", id(spec), name, values.dtype))
            if flat is None:  # (made once per shard: each new spec is lowered and its kernel loaded again)
                field = spec.fields[name].model_copy(update={"shape": [plan.batch_dim, ELEMENTS],
                                                             "dtype": [dtype_name(values.dtype)]})
                flat = spec.model_copy(update={"fields": {name: field}, "rules": []})
                self.scratch.memo[("flat spec", id(spec), name, values.dtype)] = flat
            # the values in blocks of ELEMENT_BLOCK, one per sample (a result slot per block, not per element), and
            # the last block again, ending at the last value, where they do not divide evenly: (tensor, first value)
            whole = len(values) // ELEMENT_BLOCK * ELEMENT_BLOCK
            parts = [(values[:whole].view(-1, ELEMENT_BLOCK), 0)] if whole else []
            if len(values) > whole:
                start = max(len(values) - ELEMENT_BLOCK, 0)
                parts.append((values[start:].view(1, -1), start))
            for blocks, start in parts:
                report = check({name: blocks}, flat, backend=backend)
                if any(not v.samples for v in report.violations):
                    return None
                ran = report.backend
                if not report.violations:
                    continue
                bad = torch.unique(torch.cat([torch.as_tensor(v.samples, dtype=torch.long) for v in report.violations]))
                first_value = start + bad * blocks.shape[1]
                span = torch.stack([first_value, first_value + blocks.shape[1] - 1])  # each bad block's values
                starts = self.columns[name].starts  # (sorted; an empty row starts where the next one does)
                rows = span if starts is None else torch.searchsorted(starts, span, right=True) - 1
                marks.index_add_(0, rows[0], torch.ones_like(rows[0]))
                marks.index_add_(0, rows[1] + 1, -torch.ones_like(rows[1]))
        flagged = torch.cumsum(marks, 0)[:-1] > 0  # the rows holding a value of a failing block
        return flagged, bind(plan, probe).dims, ran

    def _buckets(self, members: Any) -> list[list[int]]:
        """`members` in groups whose padded size is at most twice their own (per padded dim), unless the whole
        group pads to few elements anyway: one long row must not make every short row as long."""
        import torch

        padded = real = 0
        for name, c in self.columns.items():
            sizes = c.sizes.index_select(0, members)
            real += int(sizes.prod(dim=1).sum())
            padded += len(members) * int(torch.tensor([int(self.sizes[d].index_select(0, members).max())
                                                       for d in self.dims[name]], dtype=torch.long).prod())
        if padded <= max(2 * real, PADDED_ENOUGH):
            return [members.tolist()]
        longest = torch.stack([s.index_select(0, members).max(dim=1).values for s in self.sizes.values()], dim=1)
        keys = torch.floor(torch.log2(longest.clamp(min=1).double())).long()  # sizes [2^k, 2^(k+1)) together
        bucket = _distinct(keys)[1]
        return [members[bucket == b].tolist() for b in bucket.unique().tolist()]

    def _breaks_dim_rule(self, members: Any, dims: dict[str, tuple[int, str]]) -> Any:
        """Per member: does a rule over dims (`L >= min_length`) fail at the row's own sizes?"""
        import torch

        from tritoncheck.plan.lower import evaluate_scalar, holds, presence_dim

        names = sorted(self.free & self.sizes.keys())
        if not self.plan.dim_checks or not names:
            return torch.zeros(len(members), dtype=torch.bool)
        own = torch.stack([self.sizes[d][:, 0].index_select(0, members) for d in names], dim=1)
        present = {presence_dim(f.name): f.name in self.columns for f in self.plan.fields}  # as bind sets them
        base = {d: size for d, (size, _) in dims.items() if d not in names} | present  # (names: each row's own)
        # each verdict kept for the shard's later chunks (their rows have the same few lengths)
        key = ("dim rules", id(self.plan), tuple(names), tuple(sorted(base.items())))
        known = self.scratch.memo.setdefault(key, {})

        def verdict(combo: tuple[int, ...]) -> bool:
            found = known.get(combo)
            if found is None:
                values = base | dict(zip(names, combo, strict=True))
                found = known[combo] = any(_fails(c, values, evaluate_scalar, holds) for c in self.plan.dim_checks)
            return found

        shortest, longest = (int(x) for x in torch.aminmax(own)) if len(own) else (0, 0)
        if len(names) == 1 and len(own) and 0 <= shortest and longest < LOOKUP_SIZES:
            # one dim (a token list's length): the verdicts as a table by size, filled where a size is new, read
            # for every row at once (a lookup per distinct length and chunk was 0.17 s of 1M token rows)
            lengths = own[:, 0]
            table = self.scratch.memo.get((*key, "table"))
            if table is None or len(table) <= longest:
                grown = torch.full((longest + 1,), -1, dtype=torch.int8)
                if table is not None:
                    grown[:len(table)] = table
                table = self.scratch.memo[(*key, "table")] = grown
            looked = table.index_select(0, lengths)
            new = looked < 0
            if bool(new.any()):  # (a later chunk of the shard: its lengths mostly seen, one lookup)
                for size in torch.unique(lengths[new]).tolist():
                    table[size] = verdict((size,))
                looked = table.index_select(0, lengths)
            return looked > 0
        combos, inverse = _distinct(own)
        return torch.tensor([verdict(combo) for combo in map(tuple, combos.tolist())]).index_select(0, inverse)


def _distinct(keys: Any) -> tuple[Any, Any]:
    """The distinct rows of `keys` [n, k] and, per row, the index of its own: torch.unique over rows, or over
    values where k is 1 (many times faster on a CPU)."""
    import torch

    if keys.shape[1] == 1:
        values, inverse = torch.unique(keys[:, 0], return_inverse=True)
        return values.view(-1, 1), inverse
    return torch.unique(keys, dim=0, return_inverse=True)


def _fails(c: Any, values: dict[str, int], evaluate: Callable[..., Any], holds: Callable[..., Any]) -> bool:
    try:
        return bool((c.where is None or holds(c.where, values)) and not evaluate(c.expr, values))
    except KeyError:  # a dim this chunk does not bind: the padded check skipped the rule as well
        return False


def _pad_value(name: str, spec: Any) -> float:
    """What a collator pads `name` with: the pad token for ids, a sentinel the field allows (-100), else 0."""
    field = spec.fields.get(name)
    pad_token = spec.params.get("pad_token_id")
    if name.endswith("input_ids") and isinstance(pad_token, int) and not isinstance(pad_token, bool):
        return pad_token
    if field is not None and field.allow:
        return field.allow[0]
    return 0


def _entry(source: str, field: str | None, code: str, message: str, rule: str) -> dict[str, Any]:
    """A finding of a whole file or column (unreadable, unsupported_type, a missing column): the keys of every
    violation (`Violation.to_dict`), no row (`sample`, `row` null), `message` as given."""
    return Violation(field, code, rule).to_dict(source=source, sample=None, row=None, message=message)  # type: ignore[arg-type]


def _entries(item: _Item, found: list[tuple[int | None, Any]], places: dict[tuple[str, str, int], int]
             ) -> list[dict[str, Any]]:
    """The entries of an item's violations, every number counted from the first row of the dataset (of the
    file where the global row is unknown): `sample`, `row`, and the violation's own samples, index and message
    (the index moved where `places`, its spec's `batch_coordinates`, says). `sample` is the global row (None for
    a problem of a whole batch, or where it is unknown), `row` its row in `source` itself."""
    first = item.row if item.offset is None else item.offset
    out = []
    for pos, v in found:
        if pos is not None and not v.samples:  # found in that sample alone by a check of no sample (`L <= 512`)
            v = replace(v, samples=(pos,))
        v = moved(v, lambda s: s + first, places)
        sample = None if pos is None or item.offset is None else item.offset + pos
        out.append(v.to_dict(source=item.source, sample=sample, row=None if pos is None else item.row + pos))
    return out


def _error(source: str, offset: int | None, exc: BaseException) -> dict[str, Any]:
    """A batch that could not be checked: where (source, first row), the error type and its first line."""
    return {"source": source, "offset": offset, "error": type(exc).__name__, "message": one_line(exc)}


def _summary(spec: str, data: str, unit: str, scan: _Scan, renamed: dict[str, str],
             absent: dict[str, dict[str, Any]]) -> dict[str, Any]:
    entries = scan.entries
    bad = {(e["source"], e["row"]) for e in entries if e["row"] is not None}
    whole = {e["source"] for e in entries if e["row"] is None}  # a metadata problem, a missing column, a file
    per: Counter[tuple[str, str, str]] = Counter()  # bad rows (or samples; a whole file counts one)
    for key in {(e["source"], e["row"], e["code"], e["field"], e["severity"]) for e in entries}:
        per[(key[2], key[3] or "", key[4])] += 1
    return report_json(
        "scan", spec, entries, unchecked=scan.unchecked,
        data=data,
        unit=unit,  # "rows" of a dataset, or "files" of saved batches
        batches=scan.checks,  # batch files, or dataset chunks, that were checked
        samples=scan.samples,  # checked; not those that could not be read:
        unread_samples=scan.unread,  # in files read in part (a file not read at all: unknown, not counted)
        bad_samples=len(bad),
        sources_with_batch_problems=len(whole),
        failed_batches=len(scan.unchecked),  # batches whose check failed inside tritoncheck (see `unchecked`)
        backends=sorted(scan.backends),  # what checked the data: "c" (the compiled kernel), "torch", ...
        renamed=renamed,
        absent_fields={src: {"required": a["required"], "optional": a["optional"]} for src, a in absent.items()},
        summary=[{"code": c, "field": f, "severity": sev, "samples": n} for (c, f, sev), n in sorted(per.items())],
    )


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"


def _counted(n: int, files: int, label: str) -> str:
    """`2 bad rows`, `1 file`, or both: what a summary line counts (n, of which `files` are whole files)."""
    parts = [_plural(n - files, f"bad {label}")] if n > files else []
    return ", ".join(parts + ([_plural(files, "file")] if files else []))


def _where(e: dict[str, Any], unit: str) -> str:
    """Where a finding is, for people: `row 4017 (data/part-2.parquet row 17)`, `a.pt sample 3`, or the file."""
    if e["row"] is None:
        return e["source"]
    if unit != "rows":
        return f"{e['source']} sample {e['sample']}"
    if e["sample"] is None:  # a shard before it could not be counted
        return f"{e['source']} row {e['row']}"
    return f"row {e['sample']} ({e['source']} row {e['row']})"


def _show(report: dict[str, Any], table: bool) -> None:
    """The summary for people, as text or with a table; all spec and data text is escaped (`say`, `Text`). Text
    off a terminal is printed without rich (its import is 0.09 s of CPU)."""
    if report["unit"] == "rows":
        head = (f"{_plural(report['bad_samples'], 'bad row')} of {_plural(report['samples'], 'row')} "
                f"for {report['spec']}")
    else:
        head = (f"{_plural(report['bad_samples'], 'bad sample')} of {_plural(report['samples'], 'sample')} "
                f"in {_plural(report['batches'], 'file')} for {report['spec']}")
    if report["unread_samples"]:
        head += f", {_plural(report['unread_samples'], report['unit'][:-1])} could not be read"
    if report["sources_with_batch_problems"]:
        n = report["sources_with_batch_problems"]
        head += f" (and {_plural(n, 'source')} with problems of a whole batch)"
    if report["unchecked"]:  # (never the green line of a clean scan: those batches' rows were not checked)
        head += f"; {_plural(len(report['unchecked']), 'batch', 'batches')} could not be checked"
    notes = [f"  checked {old} as {new}" for old, new in report["renamed"].items()]
    for src, fields in report["absent_fields"].items():
        if fields["optional"]:
            notes.append(f"  not in {src} (optional, so not checked): {', '.join(fields['optional'])}")
    if not report["violations"] and not report["unchecked"]:
        if table or _terminal(sys.stdout):
            from rich.text import Text

            console().print(Text(printable(head), style="green"))
        else:
            say(printable(head))
        for line in notes:
            say(line)
        return
    say(head)
    for line in notes:
        say(line)
    label = "row" if report["unit"] == "rows" else "sample"
    files: Counter[tuple[str, str, str]] = Counter()  # of each summary line's count: findings of a whole file
    for key in {(e["source"], e["code"], e["field"] or "", e["severity"]) for e in report["violations"] if e["row"] is None}:
        files[key[1:]] += 1
    summary = [(row["code"], row["field"], row["severity"], _counted(row["samples"], files[row["code"], row["field"],
                row["severity"]], label)) for row in report["summary"]]
    t = out = None
    if table:
        from rich.text import Text

        out = console()
        t = fitted_table(None, ("code", "field", "severity", "found in"),
                         [tuple(Text(printable(c)) for c in row) for row in summary], out.width)
    if t is not None and out is not None:
        out.print(t)
    else:
        for code, field, severity, n in summary:
            kind = "" if severity == "error" else f" ({severity})"
            say(f"  {code}{f' in {field}' if field else ''}: {n}{kind}")
    for e in report["violations"][:SHOWN]:
        say(f"  {_where(e, report['unit'])}: {e['message']}")  # the message keeps its hint on its own line
    if len(report["violations"]) > SHOWN:
        say(f"  ... and {len(report['violations']) - SHOWN} more (see --json or --output FILE)")
    if report["unchecked"]:
        failed = _plural(len(report["unchecked"]), "batch", "batches")
        say(f"{failed} could not be checked (internal error: please report):")
        for e in report["unchecked"][:SHOWN]:
            where = e["source"] + (f" from row {e['offset']}" if e["offset"] else "")
            say(f"  {where}: {e['error']}: {e['message']}")


__all__ = ["Shard", "ShardJob", "add_parser", "one_line", "run_scan", "scan", "scan_batch"]
