"""Validation inside DataLoader workers: `ValidatingCollate` and `IndexedDataset`.

A worker checks each batch right after collating it, on the CPU with the contract compiled to C
(the torch backend where no C compiler exists), so a bad batch is caught before it is pinned,
copied to the GPU or seen by the model. What happens next is
`on_error`:

- "raise": the main process raises `BatchValidationError` with the full `Report`.
- "skip": the samples that break the contract are dropped and the rest re-collated; each dropped
  sample is recorded as a JSON file in `log_dir`.
- "quarantine": like "skip", and each dropped sample is also saved with `torch.save` next to its
  record in `quarantine_dir`, so it can be inspected and nothing is lost.

Workers are separate processes, so the record directory (not an in-memory counter) is the shared
source of truth: `collate.records()` and `collate.stats()` read it from any process.

Each dropped sample gets a key made of safe characters only (its dataset index, sanitised, and a
random suffix), so every file stays inside the directory. Its tensors (`<key>.pt`) are written
first and its record (`<key>.json`) last, each to a temporary file renamed into place, so a record
exists only once everything it names does. A write that fails is loud: an error on the
"tritoncheck" logger naming the sample, and a count in `stats()["failed_writes"]`, read from disk
(a record whose `sample` is None and says why in `sample_error`, or, when even the record cannot
be written, an empty `<key>.failed` marker). A `.pt` whose record failed is removed. `clear()`
also removes what a killed worker leaves behind (temporary files, a `.pt` without its record).
"""

from __future__ import annotations

import functools
import json
import logging
import operator
import os
import re
import sys
import tempfile
import uuid
from collections import Counter
from dataclasses import replace
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

from torch._utils import ExceptionWrapper

from tritoncheck.api import BACKENDS, Backend, check, disabled, log_warnings
from tritoncheck.api import warmup as compile_kernel
from tritoncheck.plan.lower import Plan, compile_plan
from tritoncheck.report import BatchValidationError, Report, Violation, batch_coordinates, moved, printable
from tritoncheck.spec.schema import BatchSpec

OnError = Literal["raise", "skip", "quarantine"]
logger = logging.getLogger("tritoncheck")


class Indexed(NamedTuple):
    """A sample with its index (or key) in the dataset, as `IndexedDataset` returns it."""

    index: Any
    sample: Any


class IndexedDataset:
    """Wrap a map-style dataset so each sample carries its dataset index through collation.

    `ValidatingCollate` unwraps the `Indexed(index, sample)` pairs, so skipped and quarantined
    samples, and the error raised for a bad batch, name dataset indices rather than batch positions.

    A Hugging Face `datasets.Dataset` stays a `datasets.Dataset`: `IndexedDataset(ds)` returns a
    view of it (the same Arrow tables, nothing copied) that differs only in what a DataLoader
    fetches: `Indexed` pairs from `__getitems__`. `ds[i]`, its columns and formats are unchanged, so
    the `transformers.Trainer` still removes the columns its model does not take (a text column)
    before the collator sees a row.
    """

    def __new__(cls, dataset: Any):
        if _is_hf_dataset(dataset):
            return _retype(dataset, _indexed_hf_class())
        return super().__new__(cls)

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Indexed:
        return Indexed(_key(index), self.dataset[index])

    def __reduce__(self):  # pickle through __new__ with the dataset (spawned DataLoader workers)
        return IndexedDataset, (self.dataset,)


def _key(index: Any) -> Any:
    """A dataset index as records show it: numpy and 0-d tensor ints become plain ints, other keys stay."""
    try:
        return operator.index(index)
    except TypeError:
        return index  # a key of a dict-like dataset, kept as it is


def _is_hf_dataset(dataset: Any) -> bool:
    datasets = sys.modules.get("datasets")  # a datasets.Dataset exists only once datasets is imported
    return datasets is not None and isinstance(dataset, getattr(datasets, "Dataset", ()))


def _retype(dataset: Any, cls: type) -> Any:
    """A shallow copy of `dataset` as an instance of `cls` (a datasets.Dataset class): same tables."""
    new = object.__new__(cls)
    new.__dict__.update(dataset.__dict__)
    return new


@functools.cache
def _indexed_hf_class() -> type:
    """The `datasets.Dataset` subclass that IndexedDataset returns, made once datasets is imported."""
    import datasets

    class IndexedHFDataset(datasets.Dataset):
        """A `datasets.Dataset` whose rows, as a DataLoader fetches them, are `Indexed(row, sample)`."""

        def __getitems__(self, keys: list) -> list:
            return [Indexed(_key(k), row) for k, row in zip(keys, super().__getitems__(keys))]

        def __reduce__(self):  # pickled (DataLoader workers) and deep-copied as IndexedDataset(plain dataset)
            return IndexedDataset, (_retype(self, datasets.Dataset),)

    return IndexedHFDataset


class ValidatingCollate:
    """A DataLoader `collate_fn` that collates, then checks the batch against `spec`.

    Picklable, so it works with any number of workers under fork or spawn. On CPU tensors it
    never initialises CUDA or imports Triton in a worker.

    Args:
        spec: the contract of the collated batch (see `tc.load_spec`).
        collate_fn: what builds the batch; `torch.utils.data.default_collate` by default. Samples
            are assumed to map one-to-one, in order, onto the spec's batch dim; when the collated
            batch size differs, culprits are found by checking each sample alone.
        on_error: "raise", "skip" or "quarantine" (see the module docstring).
        quarantine_dir: where "quarantine" writes each bad sample (`<key>.pt`) and its record
            (`<key>.json`: dataset index, batch position, violations). Required for "quarantine".
        log_dir: where "skip" writes its records; a fresh temporary directory by default.
        backend: the backend for the data checks. "auto" runs the contract compiled to C on CPU
            batches (the torch backend where no C compiler exists, with one warning).
        warmup: compile the kernel now, in the parent, so forked workers inherit it and spawned
            ones load it from the disk cache (see `tc.warmup`); a real first batch's dtypes may
            still differ, and then the first worker to see them compiles once for all.
        strict: treat warnings (data bugs the model runs through) as errors: raise, skip or
            quarantine for them too. Otherwise they are logged and the batch goes through.

    A batch whose every sample is bad has nothing left to yield: the collate returns `None`
    (a DataLoader needs a value), and the training loop should `continue` on it. Every dropped
    sample is recorded and logged as a warning on the "tritoncheck" logger, and so are the warnings
    of the samples kept, as `tc.validate` logs them, each naming its samples' dataset indices.

    A collated batch that is not a mapping (tuple samples collate to a list) is a TypeError in every
    mode, as in `@tc.checked`: a setup error, not bad data ("skip" would drop every batch).
    """

    def __init__(
        self,
        spec: BatchSpec,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        on_error: OnError = "raise",
        quarantine_dir: str | os.PathLike | None = None,
        *,
        log_dir: str | os.PathLike | None = None,
        backend: Backend = "auto",
        warmup: bool = True,
        strict: bool = False,
    ):
        if not isinstance(spec, BatchSpec):
            raise TypeError(f"spec must be a BatchSpec (from tc.load_spec or tc.spec_for), got {type(spec).__name__}")
        if on_error not in ("raise", "skip", "quarantine"):
            raise ValueError(f"on_error must be 'raise', 'skip' or 'quarantine', got {on_error!r}")
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")
        if on_error == "quarantine" and quarantine_dir is None:
            raise ValueError("on_error='quarantine' needs quarantine_dir, where bad samples are written")
        if collate_fn is None:
            from torch.utils.data import default_collate

            collate_fn = default_collate
        self.spec = spec
        self.collate_fn = collate_fn
        self.on_error = on_error
        self.backend = backend
        self.strict = strict
        self.record_dir: Path | None = None
        if on_error == "quarantine":
            self.record_dir = Path(quarantine_dir)  # type: ignore[arg-type]
        elif on_error == "skip":
            self.record_dir = Path(log_dir if log_dir is not None else tempfile.mkdtemp(prefix="tritoncheck-skipped-"))
        if self.record_dir is not None:
            self.record_dir.mkdir(parents=True, exist_ok=True)  # created here, before workers start
        if warmup and backend in ("auto", "c") and not disabled():
            compile_kernel(spec, backend=backend)  # before the workers fork

    def __call__(self, samples: Sequence[Any]) -> Any:
        if not isinstance(samples, (list, tuple)) or isinstance(samples, Indexed):
            raise TypeError(
                "ValidatingCollate collates a list of samples (DataLoader with a batch_size); "
                f"got {type(samples).__name__}. Without batching, call tc.validate on each batch instead"
            )
        samples = list(samples)
        indices: list[int | None] = [None] * len(samples)
        if samples and all(isinstance(s, Indexed) for s in samples):
            indices = [s.index for s in samples]
            samples = [s.sample for s in samples]
        batch = self.collate_fn(samples)
        if disabled():
            return batch
        if not isinstance(batch, Mapping):  # a setup error, not bad data: skipping would drop every batch
            names = tuple(self.spec.fields)
            raise TypeError(
                f"ValidatingCollate({self.spec.name}): the collated batch is a {type(batch).__name__}, not a mapping of "
                "field name to tensor, so no sample could ever pass; name the items: return a dict from the dataset "
                f"(e.g. {{{', '.join(f'{n!r}: ...' for n in names[:3])}}}), or pass a collate_fn that returns one "
                f"(a module-level function returning dict(zip({names!r}, default_collate(samples))))"
            )
        report = check(batch, self.spec, backend=self.backend, strict=self.strict)
        if report.ok:
            if report.violations:
                log_warnings(report, indices)
            return batch
        if self.on_error == "raise":
            return self._reject(report, indices, self._culprits(report, samples, batch))
        plan = compile_plan(self.spec)
        checked: dict[tuple[int, ...], Report] = {}
        check_subset = self._subset_checker(samples, checked)
        good, bad, good_batch = split_bad(len(samples), check_subset, report, batch, plan)
        outcomes: dict[str, list[str]] = {}
        for pos, violations in bad.items():
            outcome = self._record(pos, indices[pos], samples[pos], violations)
            why = ", ".join(sorted({f"{v.code} {v.field}" for v in violations}))
            outcomes.setdefault(outcome, []).append(f"{_sample_name(pos, indices[pos])} ({why})")
        logger.warning(  # no "tritoncheck:" in the text: the logger's name says it
            "dropped %d bad sample(s) of %d: %s; records in %s", len(bad), len(samples),
            "; ".join(f"{outcome}: {', '.join(names)}" for outcome, names in outcomes.items()), self.record_dir,
        )
        if not good:
            return self._all_bad(report, indices)
        kept = checked[tuple(good)] if tuple(good) in checked else check_subset(good)[0]  # split_bad checked them
        # the kept samples' warnings, at their positions in the whole batch, as the dropped ones are named
        log_warnings(replace(kept, violations=tuple(renumber(v, good, plan) for v in kept.violations)), indices)
        return good_batch

    def _all_bad(self, report: Report, indices: list[int | None]) -> Any:
        """What a batch with no good sample left becomes: None (subclasses may raise instead)."""
        return None

    def _subset_checker(self, samples: list[Any], checked: dict[tuple[int, ...], Report] | None = None,
                        ) -> Callable[[list[int]], tuple[Report, Any]]:
        """Checks the batch of the samples at some positions; each report is kept in `checked` by positions."""
        def run(positions: list[int]) -> tuple[Report, Any]:
            batch = self.collate_fn([samples[i] for i in positions])
            report = check(batch, self.spec, backend=self.backend, strict=self.strict)
            if checked is not None:
                checked[tuple(positions)] = report
            return report, batch

        return run

    def _culprits(self, report: Report, samples: list[Any], batch: Any) -> list[int]:
        """The positions of the bad samples. An error that names none (a padded length past the position
        table is the batch's, not a sample's) is traced to its samples as skip mode does, by checking
        each alone: the error then names the dataset index to look at."""
        if all(v.samples for v in report.errors):
            return sorted({p for v in report.errors for p in v.samples})
        _, bad, _ = split_bad(len(samples), self._subset_checker(samples), report, batch, compile_plan(self.spec))
        return sorted(bad)

    def _reject(self, report: Report, indices: list[int | None], culprits: list[int] | None = None) -> Any:
        from torch.utils.data import get_worker_info

        if culprits is None:
            culprits = sorted({p for v in report.errors for p in v.samples})  # warnings do not make a sample bad
        info = get_worker_info()
        if info is None:  # the main process (num_workers=0): raise here
            raise _with_indices(BatchValidationError(report), indices, culprits)
        return _RejectedBatch(report, indices, culprits, info.id)

    def _record(self, position: int, index: Any, sample: Any, violations: list[Violation]) -> str:
        """Write the sample's record (and, to quarantine, its tensors); return what happened, in words."""
        if self.record_dir is None:  # only skip and quarantine record, and both set record_dir
            return "dropped"
        name = _sample_name(position, index)
        key = f"{_safe(index)}-{uuid.uuid4().hex[:12]}"
        pt = self.record_dir / f"{key}.pt"
        record = {
            "index": index if index is None or isinstance(index, (int, str)) else repr(index),
            "position": position,
            "spec": self.spec.name,
            "mode": self.on_error,
            "violations": [v.to_dict() for v in violations],
            "sample": None,
        }
        if self.on_error == "quarantine":
            import torch

            try:
                _atomic_write(pt, lambda f: torch.save(sample, f))
                record["sample"] = pt.name
            except Exception as exc:  # a full disk, an unpicklable sample: keep the record, say why
                record["sample_error"] = f"{type(exc).__name__}: {exc}"
                logger.error("could not save the tensors of dropped %s to %s (%s); "
                             "only its record is kept", name, self.record_dir, record["sample_error"])
        try:  # the JSON file is written last: a record exists only once everything it names does
            text = json.dumps(record, indent=1)
            _atomic_write(self.record_dir / f"{key}.json", lambda f: f.write(text.encode()))
        except Exception as exc:
            pt.unlink(missing_ok=True)
            _mark_failed(self.record_dir / f"{key}.failed")
            logger.error("could not record dropped %s in %s (%s: %s); the sample is lost",
                         name, self.record_dir, type(exc).__name__, exc)
            return "NOT recorded"
        if self.on_error == "skip":
            return "skipped"
        return "quarantined" if record["sample"] else "recorded but NOT saved"

    def _files(self, suffix: str) -> list[Path]:
        """This collate's files in the record directory with `suffix`, and no one else's."""
        if self.record_dir is None or not self.record_dir.is_dir():
            return []
        return sorted(p for p in self.record_dir.iterdir() if _OWN.fullmatch(p.name) and p.name.endswith(suffix))

    def records(self) -> list[dict[str, Any]]:
        """Every skipped or quarantined sample recorded so far, by any worker (read from disk)."""
        out = []
        for path in self._files(".json"):
            rec = json.loads(path.read_text(encoding="utf-8"))
            rec["record"] = str(path)
            out.append(rec)
        return out

    def stats(self) -> dict[str, Any]:
        """Counts of dropped samples: total, dataset indices, samples per violation code, failed writes.

        `failed_writes` counts dropped samples whose tensors ("quarantine") or whose record could not
        be written; those without a record are counted there only.
        """
        recs = self.records()
        codes: Counter[str] = Counter()
        for r in recs:
            codes.update({v["code"] for v in r["violations"]})
        indices = sorted({r["index"] for r in recs if r["index"] is not None}, key=_index_order)
        unsaved = sum(1 for r in recs if r.get("mode") == "quarantine" and r.get("sample") is None)
        failed = unsaved + len(self._files(".failed"))
        return {"mode": self.on_error, "samples": len(recs), "indices": indices, "codes": dict(codes), "failed_writes": failed}

    def clear(self) -> None:
        """Forget the records (and quarantined samples) written so far, e.g. between epochs.

        Also removes what an interrupted write leaves: temporary files, `.pt` files without a record,
        and failure markers. Call it when no worker is writing.
        """
        for path in self._files(""):
            path.unlink(missing_ok=True)


def split_bad(
    n: int,
    check_subset: Callable[[list[int]], tuple[Report, Any]],
    report: Report,
    batch: Any,
    plan: Plan,
) -> tuple[list[int], dict[int, list[Violation]], Any]:
    """Find which of `n` samples break the contract; return (good positions, {bad: violations}, good batch).

    `report` and `batch` are the check of all `n` samples, whose positions lie along the plan's batch
    dim; `check_subset(positions)` checks the batch made of just those samples.

    A violation that names its samples convicts exactly those; one that names none (a dtype, a
    batch-level rule such as all labels ignored) is resolved by checking each remaining sample
    alone, so no good sample is dropped for it. The good ones are checked again
    together, and if they still fail while each passes alone, they are all dropped: nothing bad
    passes. Each bad sample's violations come from checking it alone where that fails, so their
    values are its own; their sample and index are moved back to its position in the full batch.
    """
    batch_dim = plan.batch_dim
    alive = list(range(n))
    bad: dict[int, list[Violation]] = {}
    alone: dict[int, Report] = {}
    while True:
        if report.ok:
            break
        size = report.dims.get(batch_dim, (None, ""))[0]
        flagged: set[int] = set()
        if size == len(alive):
            for v in report.errors:
                for p in v.samples:
                    if 0 <= p < len(alive):
                        flagged.add(alive[p])
                        bad.setdefault(alive[p], []).append(v)
        if not flagged or size != len(alive) or any(not v.samples for v in report.errors):
            for i in alive:
                if i in flagged:
                    continue
                if i not in alone:
                    alone[i] = check_subset([i])[0]
                if not alone[i].ok:
                    flagged.add(i)
        if not flagged:  # every sample passes alone but not together: drop them all
            for i in alive:
                bad[i] = list(report.errors)
            alive = []
            break
        alive = [i for i in alive if i not in flagged]
        if not alive:
            break
        report, batch = check_subset(alive)
    for i in bad.keys() | {i for i, r in alone.items() if not r.ok}:
        own = alone[i] if i in alone else check_subset([i])[0]
        if not own.ok:
            bad[i] = [relocate(v, i, plan) for v in own.violations]
    return alive, dict(sorted(bad.items())), batch if alive else None


def relocate(v: Violation, position: int, plan: Plan) -> Violation:
    """A violation found in a one-sample batch, moved to `position` of the full batch."""
    return moved(v, lambda p: position, batch_coordinates(plan))


def renumber(v: Violation, positions: Sequence[int], plan: Plan) -> Violation:
    """A violation found in the batch of the samples at `positions` of the full batch, moved to their places."""
    return moved(v, positions.__getitem__, batch_coordinates(plan))


def _with_indices(exc: BatchValidationError, indices: Sequence[int | None], culprits: Sequence[int]) -> BatchValidationError:
    """Attach the dataset indices of the batch (when known) and name the bad samples (`culprits`) in a note."""
    exc.dataset_indices = tuple(indices)  # type: ignore[attr-defined]
    positions = [p for p in culprits if p < len(indices)]
    if positions and any(i is not None for i in indices):
        _note(exc, "dataset indices of the bad samples: "  # a note is printed as it is: a key's controls escaped
              + ", ".join(f"{printable(indices[p])} (sample {p})" for p in positions))
    elif positions:
        _note(exc, f"bad samples of this batch: {', '.join(map(str, positions))} "
                   "(wrap the dataset in tc.IndexedDataset to see their dataset indices)")
    return exc


class _RejectedBatch(ExceptionWrapper):
    """A bad batch on its way from a worker to the main process, which raises it with its report.

    A worker's exception reaches the main process as a torch `ExceptionWrapper`, re-raised as
    `exc_type(traceback_text)`: a BatchValidationError rebuilt that way would hold a string, not
    the report. The DataLoader calls `.reraise()` on any ExceptionWrapper it receives, so
    returning this one instead lets the main process raise the real error, report and all.
    """

    def __init__(self, report: Report, indices: Sequence[int | None], culprits: Sequence[int], worker: int):
        self.report = report
        self.indices = tuple(indices)
        self.culprits = tuple(culprits)
        self.exc_type = BatchValidationError
        self.exc_msg = str(report)
        self.where = f"in DataLoader worker process {worker}"

    def reraise(self):
        exc = _with_indices(BatchValidationError(self.report), self.indices, self.culprits)
        _note(exc, f"(found {self.where})")
        raise exc


_OWN = re.compile(r"\.?[A-Za-z0-9_-]{1,32}-[0-9a-f]{12}\.(json|pt|failed)(\.tmp)?")  # the files _record writes


def _safe(index: Any) -> str:
    """A file-name part for a dataset index: letters, digits, `_` and `-` only, never a path."""
    return "x" if index is None else re.sub(r"[^A-Za-z0-9_-]", "_", str(index))[:32] or "x"


def _index_order(index: int | str) -> tuple:
    """Integer indices in order, then keys (a dataset indexed by strings), so mixed ones sort too."""
    return (0, index, "") if isinstance(index, int) else (1, 0, index)


def _sample_name(position: int, index: Any) -> str:
    return f"sample {position}" + ("" if index is None else f" = dataset index {index!r}")


def _mark_failed(path: Path) -> None:
    """Leave an empty marker so that stats() counts a record that could not be written (best effort)."""
    try:
        path.touch()
    except OSError:
        pass


def _note(exc: BaseException, text: str) -> None:
    if hasattr(exc, "add_note"):  # Python >= 3.11
        exc.add_note(text)


def _atomic_write(path: Path, write: Callable[[Any], Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
