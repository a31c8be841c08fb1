"""`tritoncheck scan SPEC DATA`: check a whole dataset offline and list every bad sample.

DATA is a saved batch file (.pt, .safetensors, .npz), a directory of them (searched recursively),
or a dataset saved with `datasets.Dataset.save_to_disk` (read in chunks of --batch-size rows;
only the columns the spec names are checked). A bad batch is narrowed down to its bad samples
(see `tritoncheck._data.split_bad`), and each is checked alone so that its reported value is its
own. A batch that cannot be read, or whose check fails with any exception, is recorded (source,
error type, one line) and the scan goes on. Exit code 0: clean; 1: bad samples (or unreadable
files); 2: usage or spec error; 3: some batch could not be checked (an internal error: please report).

Columns are renamed as the Hugging Face collators rename them (`label` and `label_ids` become
`labels`) when the spec names the new name and not the old one; `--rename OLD=NEW` adds more.
A contract field the data lacks is reported once: a required one as `missing_field`, an optional
one in `absent_fields`, so that nothing goes unchecked without a word.

Ragged rows (token lists of different lengths) are padded per chunk, as a collator pads them:
`*input_ids` with the spec's `pad_token_id` (else 0), a field that allows a sentinel such as
-100 with it, every other field with 0. The result stays what checking each row alone gives:
a row the padded chunk flags is checked alone (its own values, no padding); a row whose fields
disagree on a padded length, or that breaks a rule over dims (`L >= min_length`) at its own
length, is checked alone too; and rows are grouped by their length in any dim a data check
reads (`arange(L)`, `lengths <= T`) so that no padding changes such a check.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._api import BACKENDS
from ._cli_commands import (
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_VIOLATIONS,
    UsageError,
    _add_param_args,
    _guarded,
    _load_spec,
    add_output_args,
    closest,
    console,
    load_batch,
    output_format,
    say,
    write_json,
)
from ._report import fitted_table, printable

BATCH_SUFFIXES = (".pt", ".pth", ".safetensors", ".npz")
# Problems of a tensor's metadata: a saved batch has them as a whole, so no sample is to blame.
METADATA_CODES = frozenset({"not_a_mapping", "unexpected_field", "missing_field", "not_a_tensor", "device_mismatch",
                            "empty_batch", "dtype", "rank", "shape", "dim_mismatch"})
# What the Hugging Face collators (default_data_collator, DataCollatorWithPadding) rename.
HF_RENAMES = {"label": "labels", "label_ids": "labels"}
SHOWN = 10  # violations printed; the JSON report has them all


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
    add_output_args(p)
    p.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                   help="check column or key OLD as the spec's field NEW (repeatable); label and label_ids "
                   "become labels unless the spec names them")
    p.add_argument("--batch-size", type=int, default=256, help="rows per check for a `datasets` dataset (default 256)")
    p.add_argument("--backend", choices=list(BACKENDS), default="auto", help="default: auto (the C kernel on CPU)")
    p.set_defaults(run=_guarded(run_scan))


@dataclass
class _Item:
    """One unit of work: a batch (or a ragged chunk, or the error that stopped reading it) and its rows."""

    source: str
    offset: int  # the dataset row (or file sample) of its first row
    data: Any  # a mapping, a _Ragged chunk, a UsageError (unreadable file) or another exception
    rows: int  # progress: rows for a dataset, 1 per file


def run_scan(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {args.batch_size}")
    spec = _load_spec(args)
    renames = _renames(args.rename, spec)
    scan = _Scan(spec, args.backend)
    items, total, unit, absent = _sources(Path(args.data), spec, args.batch_size, renames)
    for source, fields in absent.items():  # said once, not once per chunk
        for name in fields["required"]:
            scan.entries.append(_entry(source, None, name, "missing_field", fields["message"][name]))
    err = Console(stderr=True)
    columns = (TextColumn(f"scanning {unit}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True, disable=not err.is_terminal) as progress:
        task = progress.add_task("scan", total=total)
        for item in items:
            scan.add(item)
            progress.advance(task, item.rows)
    report = _summary(spec.name, str(args.data), unit, scan, renames, absent)
    if args.output:
        write_json(args.output, json.dumps(report, indent=2))
    fmt = output_format(args)
    if fmt == "json":
        print(json.dumps(report, indent=2))
    else:
        _show(report, table=fmt == "table")
    return EXIT_INTERNAL if scan.errors else EXIT_VIOLATIONS if scan.entries else EXIT_OK


class _Scan:
    """Checks items one by one and collects bad samples (`entries`) and checks that failed (`errors`)."""

    def __init__(self, spec: Any, backend: str):
        self.spec, self.backend = spec, backend
        self.entries: list[dict[str, Any]] = []
        self.errors: list[dict[str, Any]] = []
        self.checks = self.samples = 0

    def add(self, item: _Item) -> None:
        if isinstance(item.data, UsageError):  # an unreadable file is a finding, not a reason to stop
            self.entries.append(_entry(item.source, None, None, "unreadable", str(item.data)))
            return
        if isinstance(item.data, Exception):
            self.errors.append(_error(item.source, item.offset, item.data))
            return
        try:
            if isinstance(item.data, _Ragged):
                found, size = item.data.scan(self.spec, self.backend)
            else:
                found, size = scan_batch(item.data, self.spec, self.backend)
        except Exception as exc:  # a bug in one batch's check must not hide the rest of the data
            self.errors.append(_error(item.source, item.offset, exc))
            return
        self.checks += 1
        self.samples += size
        for pos, v in found:
            self.entries.append(_entry(item.source, None if pos is None else item.offset + pos, v.field, v.code,
                                       v.message, v.to_dict()["value"], v.index))


def scan_batch(batch: Any, spec: Any, backend: str = "torch",
               take: Callable[[list[int]], Any] | None = None) -> tuple[list[tuple[int | None, Any]], int]:
    """The bad samples of one batch as (position or None, violation) pairs, and the batch size.

    Position None marks a violation of the batch as a whole: a metadata problem (a missing field,
    a wrong dtype or shape), which no slice of the batch can be blamed for; then the data checks
    that did run are reported batch-level too. `take(positions)` makes the batch of those samples
    (default: the batch indexed along its batch dim).
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
        part = take(positions) if take is not None else _take(batch, plan, positions)
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


def _renames(items: list[str], spec: Any) -> dict[str, str]:
    """--rename OLD=NEW pairs, plus the Hugging Face collators' renames the spec has a field for."""
    out = {old: new for old, new in HF_RENAMES.items() if new in spec.fields and old not in spec.fields}
    for item in items:
        old, sep, new = (part.strip() for part in item.partition("="))
        if not sep or not old or not new:
            raise UsageError(f"--rename takes OLD=NEW, got {item!r}")
        if new not in spec.fields:
            raise UsageError(f"--rename {item}: the spec has no field {new!r}{closest(new, spec.fields)}; "
                             f"its fields: {', '.join(spec.fields)}")
        out = {k: v for k, v in out.items() if v != new}  # an explicit rename replaces a default one
        out[old] = new
    return out


def _renamed(batch: Any, renames: dict[str, str]) -> Any:
    """A mapping's keys renamed where the new name is not taken; anything else as it is."""
    if not isinstance(batch, Mapping) or not renames:
        return batch
    keys = set(batch)
    return {renames[k] if k in renames and renames[k] not in keys else k: v for k, v in batch.items()}


def _sources(data: Path, spec: Any, batch_size: int, renames: dict[str, str]
             ) -> tuple[Iterator[_Item], int, str, dict[str, dict[str, Any]]]:
    """The items to check, the progress total, its unit, and per dataset split the contract fields it lacks."""
    if not data.exists():
        raise UsageError(f"data not found: {data}")
    if data.is_dir() and _is_hf_dataset(data):
        return _dataset_items(data, spec, batch_size, renames)
    if data.is_file():
        files = [data]
    else:
        files = sorted(p for p in data.rglob("*") if p.is_file() and p.suffix in BATCH_SUFFIXES)
        if not files:
            raise UsageError(f"no batch files ({', '.join(BATCH_SUFFIXES)}) under {data}")

    def gen() -> Iterator[_Item]:
        for path in files:
            try:
                yield _Item(str(path), 0, _renamed(load_batch(str(path)), renames), 1)
            except UsageError as exc:
                yield _Item(str(path), 0, exc, 1)

    return gen(), len(files), "files", {}


def _is_hf_dataset(path: Path) -> bool:
    saved_dataset = (path / "state.json").is_file() and (path / "dataset_info.json").is_file()
    return saved_dataset or (path / "dataset_dict.json").is_file()


def _dataset_items(path: Path, spec: Any, batch_size: int, renames: dict[str, str]
                   ) -> tuple[Iterator[_Item], int, str, dict[str, dict[str, Any]]]:
    try:
        import datasets
    except ImportError:
        raise UsageError(f"{path} is a `datasets` dataset; reading it needs: pip install datasets") from None
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:  # a damaged or foreign save: datasets raises many types
        raise UsageError(f"cannot read dataset {path}: {_one_line(exc)}") from None
    splits = dict(loaded) if isinstance(loaded, datasets.DatasetDict) else {"": loaded}
    sources = {split: f"{path}[{split}]" if split else str(path) for split in splits}
    columns: dict[str, dict[str, str]] = {}  # per split: column -> field
    absent: dict[str, dict[str, Any]] = {}
    specs: dict[str, Any] = {}
    for split, ds in splits.items():
        taken = {c: renames.get(c, c) for c in ds.column_names}
        taken = {c: f for c, f in taken.items() if f in spec.fields and (c == f or f not in ds.column_names)}
        columns[split] = taken
        lacking = [f for f in spec.fields if f not in taken.values()]
        required = [f for f in lacking if not spec.fields[f].optional]
        others = [c for c in ds.column_names if c not in taken]
        absent[sources[split]] = {
            "required": required, "optional": [f for f in lacking if f not in required],
            "message": {f: f"{f}: the contract requires it, but the dataset has no such column"
                           f"{closest(f, others)} (columns: {', '.join(ds.column_names)}; --rename OLD={f} maps one)"
                        for f in required},
        }
        # the missing required fields are reported once above; the chunks are checked without them
        fields = {k: f.model_copy(update={"optional": True}) if k in required else f for k, f in spec.fields.items()}
        specs[split] = spec.model_copy(update={"fields": fields}) if required else spec

    def gen() -> Iterator[_Item]:
        for split, ds in splits.items():
            view = ds.select_columns(list(columns[split]))
            for start in range(0, len(ds), batch_size):
                n = min(batch_size, len(ds) - start)
                try:
                    rows = {columns[split][c]: v for c, v in view[start:start + n].items()}
                except Exception as exc:  # a damaged chunk is recorded, and the scan goes on
                    yield _Item(sources[split], start, exc, n)
                    continue
                yield from _chunk_items(sources[split], start, rows, n, specs[split])

    total = sum(len(ds) for ds in splits.values())
    return gen(), total, "rows", {k: v for k, v in absent.items() if v["required"] or v["optional"]}


def _chunk_items(source: str, start: int, rows: dict[str, list[Any]], n: int, spec: Any) -> Iterator[_Item]:
    """A chunk as one batch; padded if ragged; row by row only if a column is not numeric."""
    batch = _to_batch(rows)
    if batch is not None:
        yield _Item(source, start, batch, n)
        return
    ragged = _Ragged.build(rows, n, spec)
    if ragged is not None:
        yield _Item(source, start, ragged, n)
        return
    for r in range(n):  # text or mixed-rank values: each row as it is
        row = {name: [values[r]] for name, values in rows.items()}
        yield _Item(source, start + r, _to_batch(row) or row, 1)


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


class _Ragged:
    """A chunk whose rows differ in length: per-row tensors, padded into a batch for any subset of rows."""

    def __init__(self, rows: dict[str, list[Any]], pads: dict[str, float], n: int):
        self.rows, self.pads, self.n = rows, pads, n

    @classmethod
    def build(cls, rows: dict[str, list[Any]], n: int, spec: Any) -> _Ragged | None:
        """Each value as a tensor (None if one is not numeric or ranks differ within a column)."""
        import torch

        tensors: dict[str, list[Any]] = {}
        for name, values in rows.items():
            try:
                tensors[name] = [torch.tensor(v) for v in values]
            except (TypeError, ValueError, RuntimeError):
                return None
            if len({t.dim() for t in tensors[name]}) > 1:
                return None
        return cls(tensors, {name: _pad_value(name, spec) for name in rows}, n)

    def take(self, positions: list[int]) -> dict[str, Any]:
        """The rows at `positions` as one batch, each column padded to the longest of them."""
        import torch

        out = {}
        for name, values in self.rows.items():
            part = [values[i] for i in positions]
            dtype = part[0].dtype
            for t in part[1:]:
                dtype = torch.promote_types(dtype, t.dtype)
            shape = [max(sizes) for sizes in zip(*(t.shape for t in part), strict=True)]
            batch = torch.full((len(part), *shape), self.pads[name], dtype=dtype)
            for i, t in enumerate(part):
                batch[(i, *(slice(0, s) for s in t.shape))] = t
            out[name] = batch
        return out

    def scan(self, spec: Any, backend: str) -> tuple[list[tuple[int | None, Any]], int]:
        """The bad rows, each as checking it alone finds it; see the module docstring for why that holds."""
        from ._api import check
        from ._data import relocate
        from ._plan import bind, compile_plan

        plan = compile_plan(spec)
        axes = {f.name: f.axes for f in plan.fields}
        padded = {name: self._padded_axes(name, axes.get(name)) for name in self.rows}
        read = {d for fields, dims, needs in plan.needs for d in (*dims, *(need.dim for need in needs))}
        groups: dict[tuple, list[int]] = defaultdict(list)  # rows of equal length in every dim a data check reads
        for i in range(self.n):
            key = tuple(self.rows[name][i].shape[k] for name, dims in padded.items() for k, d in dims if d in read)
            groups[key].append(i)
        found: list[tuple[int | None, Any]] = []
        for members in groups.values():
            batch = self.take(members)
            rows, _ = scan_batch(batch, spec, backend, take=lambda pos, m=members: self.take([m[p] for p in pos]))
            bad = {members[p] for p, _ in rows if p is not None}
            found += [(None, v) if p is None else (members[p], relocate(v, members[p], plan)) for p, v in rows]
            if any(p is None for p, _ in rows):
                continue  # a metadata problem of the whole chunk: no row is to blame
            dims = bind(plan, batch).dims if plan.dim_checks else {}
            for i in members:
                if i not in bad and self._suspect(i, padded, plan, dims):
                    own = check(self.take([i]), spec, backend=backend)
                    found += [(i, relocate(v, i, plan)) for v in own.violations]
        return sorted(found, key=lambda f: -1 if f[0] is None else f[0]), self.n

    def _padded_axes(self, name: str, axes: tuple[str, ...] | None) -> list[tuple[int, str]]:
        """(row axis, dim name) of each axis along which this column's rows differ."""
        if axes is None:
            return []
        sizes = [t.shape for t in self.rows[name]]
        return [(k, axes[k + 1]) for k in range(len(sizes[0]))
                if len({s[k] for s in sizes}) > 1 and k + 1 < len(axes)]

    def _suspect(self, i: int, padded: dict[str, list[tuple[int, str]]], plan: Any, dims: dict) -> bool:
        """Row `i` could break a check only at its own lengths: its fields disagree, or a dim rule fails."""
        from ._plan import evaluate_scalar

        own: dict[str, set[int]] = defaultdict(set)
        for name, axes in padded.items():
            for k, d in axes:
                own[d].add(self.rows[name][i].shape[k])
        if any(len(sizes) > 1 for sizes in own.values()):
            return True
        values = {d: size for d, (size, _) in dims.items()} | {d: sizes.pop() for d, sizes in own.items()}
        for c in plan.dim_checks:
            try:
                if (c.where is None or evaluate_scalar(c.where, values)) and not evaluate_scalar(c.expr, values):
                    return True
            except KeyError:  # a dim this chunk does not bind: the padded check skipped it as well
                continue
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


def _summary(spec: str, data: str, unit: str, scan: _Scan, renames: dict[str, str],
             absent: dict[str, dict[str, Any]]) -> dict[str, Any]:
    entries = scan.entries
    bad = {(e["source"], e["sample"]) for e in entries if e["sample"] is not None}
    per: Counter[tuple[str, str]] = Counter()
    for key in {(e["source"], e["sample"], e["code"], e["field"]) for e in entries}:
        per[(key[2], key[3] or "")] += 1
    return {
        "spec": spec,
        "data": data,
        "ok": not entries and not scan.errors,
        "unit": unit,  # "rows" of a dataset, or "files" of saved batches
        "batches": scan.checks,  # batch files, or dataset chunks, that were checked
        "samples": scan.samples,
        "bad_samples": len(bad),
        "failed_batches": len(scan.errors),
        "renamed": renames,
        "absent_fields": {src: {"required": a["required"], "optional": a["optional"]} for src, a in absent.items()},
        "summary": [{"code": c, "field": f, "samples": n} for (c, f), n in sorted(per.items())],
        "violations": entries,
        "errors": scan.errors,
    }


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {many or word + 's'}"


def _show(report: dict[str, Any], table: bool) -> None:
    """The summary for people, as text or with a table; all spec and data text is escaped (`say`, `Text`)."""
    from rich.text import Text

    if report["unit"] == "rows":
        head = (f"{_plural(report['bad_samples'], 'bad row')} of {_plural(report['samples'], 'row')} "
                f"for {report['spec']}")
    else:
        head = (f"{_plural(report['bad_samples'], 'bad sample')} of {_plural(report['samples'], 'sample')} "
                f"in {_plural(report['batches'], 'file')} for {report['spec']}")
    notes = [f"  checked {old} as {new}" for old, new in report["renamed"].items()]
    for src, fields in report["absent_fields"].items():
        if fields["optional"]:
            notes.append(f"  not in {src} (optional, so not checked): {', '.join(fields['optional'])}")
    out = console()
    if report["ok"]:
        out.print(Text(printable(head), style="green"))
        for line in notes:
            say(line)
        return
    say(head)
    for line in notes:
        say(line)
    label = "row" if report["unit"] == "rows" else "sample"
    summary = [(row["code"], row["field"], str(row["samples"])) for row in report["summary"]]
    t = fitted_table(None, ("code", "field", f"bad {label}s"),
                     [tuple(Text(printable(c)) for c in row) for row in summary], out.width) if table else None
    if t is not None:
        out.print(t)
    else:
        for code, field, n in summary:
            say(f"  {code} in {field or '-'}: {_plural(int(n), f'bad {label}')}")
    for e in report["violations"][:SHOWN]:
        where = e["source"] if e["sample"] is None else f"{e['source']} {label} {e['sample']}"
        say(f"  {where}: {e['message']}")  # the message keeps its hint on its own line
    if len(report["violations"]) > SHOWN:
        say(f"  ... and {len(report['violations']) - SHOWN} more (see --json or --output FILE)")
    if report["errors"]:
        say(f"{_plural(len(report['errors']), 'batch', 'batches')} could not be checked (internal error: please report):")
        for e in report["errors"][:SHOWN]:
            where = e["source"] + (f" from row {e['offset']}" if e["offset"] else "")
            say(f"  {where}: {e['error']}: {e['message']}")


__all__ = ["add_parser", "run_scan", "scan_batch"]
