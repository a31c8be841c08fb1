"""`tritoncheck scan SPEC DATA`: check a whole dataset offline and list every bad sample.

DATA is a saved batch file (.pt, .safetensors, .npz), a directory of them (searched recursively),
or a dataset saved with `datasets.Dataset.save_to_disk` (read in chunks of --batch-size rows;
only the columns the spec names are checked). A bad batch is narrowed down to its bad samples
(see `tritoncheck._data.split_bad`), and each is checked alone so that its reported value is its
own. A batch that cannot be read, or whose check fails with any exception, is recorded (source,
error type, one line) and the scan goes on. Exit code 0: clean; 1: bad samples (or unreadable
files); 2: usage or spec error; 3: some batch could not be checked (an internal error: please report).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ._cli_commands import (
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_VIOLATIONS,
    UsageError,
    _add_param_args,
    _guarded,
    _load_spec,
    load_batch,
    say,
)
from ._api import BACKENDS
from ._report import printable

BATCH_SUFFIXES = (".pt", ".pth", ".safetensors", ".npz")
# Problems of a tensor's metadata: a saved batch has them as a whole, so no sample is to blame.
METADATA_CODES = frozenset({"not_a_mapping", "unexpected_field", "missing_field", "not_a_tensor", "device_mismatch",
                            "empty_batch", "dtype", "rank", "shape", "dim_mismatch"})


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "scan",
        help="check every sample of a dataset offline",
        description="Check a directory of saved batches (.pt, .safetensors, .npz) or a dataset saved with "
        "`datasets` against a spec, and list every bad sample. Exit code 0: clean; 1: bad samples; "
        "2: usage or spec error; 3: a batch could not be checked (the rest are; see the report).",
    )
    p.add_argument("spec", help="a built-in spec name (see `tritoncheck specs`) or a YAML spec file")
    p.add_argument("data", help="a batch file, a directory of batch files, or a `datasets` save_to_disk directory")
    _add_param_args(p)
    p.add_argument("--json", metavar="OUT",
                   help="write the full report (every bad sample) as JSON to OUT ('-' for stdout)")
    p.add_argument("--batch-size", type=int, default=256, help="rows per check for a `datasets` dataset (default 256)")
    p.add_argument("--backend", choices=list(BACKENDS), default="auto", help="default: auto (the C kernel on CPU)")
    p.set_defaults(run=_guarded(run_scan))


def run_scan(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    spec = _load_spec(args)
    sources, total = _sources(Path(args.data), spec, args.batch_size)
    entries: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    n_batches = n_samples = 0
    err = Console(stderr=True)
    columns = (TextColumn("scanning"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task("scan", total=total)
        for source, offset, batch in sources:
            progress.advance(task)
            if isinstance(batch, UsageError):  # an unreadable file is a finding, not a reason to stop
                entries.append(_entry(source, None, None, "unreadable", str(batch)))
                continue
            if isinstance(batch, Exception):
                errors.append(_error(source, offset, batch))
                continue
            try:
                found, size = scan_batch(batch, spec, args.backend)
            except Exception as exc:  # a bug in one batch's check must not hide the rest of the data
                errors.append(_error(source, offset, exc))
                continue
            n_batches += 1
            n_samples += size
            for pos, v in found:
                entries.append(_entry(source, None if pos is None else offset + pos, v.field, v.code, v.message,
                                      v.to_dict()["value"], v.index))
    report = _summary(spec.name, str(args.data), n_batches, n_samples, entries, errors)
    if args.json:
        text = json.dumps(report, indent=2)
        if args.json == "-":
            print(text)
        else:
            try:
                Path(args.json).write_text(text + "\n", encoding="utf-8")
            except OSError as exc:
                raise UsageError(f"cannot write {args.json}: {exc.strerror or exc}") from None
    if args.json != "-":
        _print_table(report)
    return EXIT_INTERNAL if errors else EXIT_VIOLATIONS if entries else EXIT_OK


def scan_batch(batch: Any, spec: Any, backend: str = "torch") -> tuple[list[tuple[int | None, Any]], int]:
    """The bad samples of one batch as (position or None, violation) pairs, and the batch size.

    Position None marks a violation of the batch as a whole: a metadata problem (a missing field,
    a wrong dtype or shape), which no slice of the batch can be blamed for; then the data checks
    that did run are reported batch-level too.
    """
    from ._api import check
    from ._data import split_bad
    from ._plan import compile_plan

    report = check(batch, spec, backend=backend)
    plan = compile_plan(spec)
    size = report.dims.get(plan.batch_dim, (0, ""))[0]
    if report.ok:
        return [], size
    meta = any(v.code in METADATA_CODES for v in report.violations)
    if meta or not isinstance(batch, Mapping) or plan.batch_dim not in report.dims:
        return [(None, v) for v in report.violations], size

    def subset(positions: list[int]) -> tuple[Any, Any]:
        part = _take(batch, plan, positions)
        return check(part, spec, backend=backend), part

    _, bad, _ = split_bad(size, subset, report, batch, plan)
    return [(pos, v) for pos, vs in bad.items() for v in vs], size


def _take(batch: Mapping, plan: Any, positions: list[int]) -> dict[str, Any]:
    """The batch restricted to `positions` along the batch dim, in every field whose rank fits."""
    import torch

    from ._plan import as_tensor

    index = torch.tensor(positions, dtype=torch.long)
    known = {f.name: f for f in plan.fields}
    out = {}
    for name, value in batch.items():
        fp = known.get(name)
        tensor = as_tensor(value)[0] if fp is not None and value is not None else None
        if tensor is not None and tensor.ndim == len(fp.axes) and plan.batch_dim in fp.axes:
            out[name] = tensor.index_select(fp.axes.index(plan.batch_dim), index.to(tensor.device))
        else:
            out[name] = value
    return out


def _sources(data: Path, spec: Any, batch_size: int) -> tuple[Iterator[tuple[str, int, Any]], int]:
    """(source name, row offset, batch or UsageError) for each batch in `data`, and how many there are."""
    if not data.exists():
        raise UsageError(f"data not found: {data}")
    if data.is_dir() and _is_hf_dataset(data):
        return _dataset_batches(data, spec, batch_size)
    if data.is_file():
        files = [data]
    else:
        files = sorted(p for p in data.rglob("*") if p.is_file() and p.suffix in BATCH_SUFFIXES)
        if not files:
            raise UsageError(f"no batch files ({', '.join(BATCH_SUFFIXES)}) under {data}")

    def gen() -> Iterator[tuple[str, int, Any]]:
        for path in files:
            try:
                yield str(path), 0, load_batch(str(path))
            except UsageError as exc:
                yield str(path), 0, exc

    return gen(), len(files)


def _is_hf_dataset(path: Path) -> bool:
    saved_dataset = (path / "state.json").is_file() and (path / "dataset_info.json").is_file()
    return saved_dataset or (path / "dataset_dict.json").is_file()


def _dataset_batches(path: Path, spec: Any, batch_size: int) -> tuple[Iterator[tuple[str, int, Any]], int]:
    try:
        import datasets
    except ImportError:
        raise UsageError(f"{path} is a `datasets` dataset; reading it needs: pip install datasets") from None
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:  # a damaged or foreign save: datasets raises many types
        raise UsageError(f"cannot read dataset {path}: {_one_line(exc)}") from None
    splits = dict(loaded) if isinstance(loaded, datasets.DatasetDict) else {"": loaded}
    columns = {name: [c for c in ds.column_names if c in spec.fields] for name, ds in splits.items()}
    total = sum(-(-len(ds) // batch_size) for ds in splits.values())

    def gen() -> Iterator[tuple[str, int, Any]]:
        for split, ds in splits.items():
            source = f"{path}[{split}]" if split else str(path)
            for start in range(0, len(ds), batch_size):
                try:
                    rows = ds.select_columns(columns[split])[start:start + batch_size]
                except Exception as exc:  # a damaged chunk is recorded, and the scan goes on
                    yield source, start, exc
                    continue
                batch = _to_batch(rows)
                if batch is not None:
                    yield source, start, batch
                    continue
                # ragged rows (unpadded token lists) cannot share a tensor: check them one by one
                for r in range(len(next(iter(rows.values()), []))):
                    row = {name: [values[r]] for name, values in rows.items()}
                    yield source, start + r, _to_batch(row) or row

    return gen(), total


def _to_batch(rows: dict[str, list[Any]]) -> dict[str, Any] | None:
    """Columns as tensors, or None if one of them is ragged or not numeric."""
    import torch

    out = {}
    for name, values in rows.items():
        try:
            out[name] = torch.tensor(values)
        except (TypeError, ValueError, RuntimeError):
            return None
    return out


def _entry(source: str, sample: int | None, field: str | None, code: str, message: str, value: Any = None,
           index: Any = None) -> dict[str, Any]:
    return {"source": source, "sample": sample, "field": field, "code": code, "value": value,
            "index": None if index is None else list(index), "message": message}


def _error(source: str, offset: int, exc: BaseException) -> dict[str, Any]:
    """A batch that could not be checked: where (source, first row), the error type and its first line."""
    return {"source": source, "offset": offset, "error": type(exc).__name__, "message": _one_line(exc)}


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


def _summary(spec: str, data: str, n_batches: int, n_samples: int, entries: list[dict[str, Any]],
             errors: list[dict[str, Any]]) -> dict[str, Any]:
    bad = {(e["source"], e["sample"]) for e in entries}
    per: Counter[tuple[str, str]] = Counter()
    for key in {(e["source"], e["sample"], e["code"], e["field"]) for e in entries}:
        per[(key[2], key[3] or "")] += 1
    return {
        "spec": spec,
        "data": data,
        "ok": not entries and not errors,
        "batches": n_batches,
        "samples": n_samples,
        "bad_samples": len(bad),
        "failed_batches": len(errors),
        "summary": [{"code": c, "field": f, "samples": n} for (c, f), n in sorted(per.items())],
        "violations": entries,
        "errors": errors,
    }


def _print_table(report: dict[str, Any]) -> None:
    """The summary for people: every piece of spec or data text is literal `Text`, control characters escaped."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(width=None if sys.stdout.isatty() else 160, markup=False, emoji=False, highlight=False)
    head = printable(f"{report['bad_samples']} bad sample(s) of {report['samples']} in {report['batches']} batch(es) "
                     f"for {report['spec']}")
    if report["ok"]:
        console.print(Text(head, style="green"))
        return
    console.print(Text(head))
    if report["summary"]:
        table = Table()
        for col in ("code", "field", "bad samples"):
            table.add_column(col)
        for row in report["summary"]:
            table.add_row(*(Text(printable(c)) for c in (row["code"], row["field"], row["samples"])))
        console.print(table)
    for e in report["violations"][:10]:
        where = e["source"] if e["sample"] is None else f"{e['source']} sample {e['sample']}"
        say(f"  {where}: {e['message']}")  # the message keeps its hint on its own line
    if len(report["violations"]) > 10:
        console.print(Text(f"  ... and {len(report['violations']) - 10} more (see --json)"))
    if report["errors"]:
        console.print(Text(f"{len(report['errors'])} batch(es) could not be checked (internal error: please report):",
                           style="red"))
        for e in report["errors"][:10]:
            where = e["source"] + (f" from row {e['offset']}" if e["offset"] else "")
            console.print(Text(printable(f"  {where}: {e['error']}: {e['message']}")))


__all__ = ["add_parser", "run_scan", "scan_batch"]
