"""A Lightning callback that checks each batch before the step sees it.

    from tritoncheck.integrations.lightning import TritoncheckCallback
    trainer = L.Trainer(callbacks=[TritoncheckCallback(spec, on_error="skip", index="idx")])

It runs in `on_{train,validation,test}_batch_start`, after the batch is on the module's device, so
on a GPU the Triton backend checks it in one launch. Errors and skip records name the stage, the
`batch_idx` and, where the batch carries them, the dataset indices. Under DDP the verdict is
agreed across ranks, so every rank stops together. Needs `lightning` (pip install tritoncheck[lightning]).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any, Literal

from tritoncheck.api import Backend, agree, check, disabled, log_warnings
from tritoncheck.integrations.data import renumber, split_bad
from tritoncheck.plan.lower import compile_plan
from tritoncheck.report import BatchValidationError, Report
from tritoncheck.spec.schema import BatchSpec

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    try:
        from pytorch_lightning.callbacks import Callback
    except ImportError as exc:
        raise ImportError(
            "tritoncheck.integrations.lightning needs Lightning: pip install tritoncheck[lightning]"
        ) from exc

Stage = Literal["train", "validate", "test", "predict"]
STAGES = ("train", "validate", "test", "predict")
logger = logging.getLogger("tritoncheck")


class TritoncheckCallback(Callback):
    """Validate every batch of the chosen stages against `spec` before the step runs.

    Args:
        spec: the contract of the batch.
        fields: names for the items of a tuple or list batch, e.g. ("inputs", "labels");
            a mapping batch is used as is.
        index: the batch entry (a key, or one of `fields`) that holds each sample's dataset index,
            e.g. "idx"; it is left out of the check and named in errors and records.
        stages: which batches to check: "train", "validate" (also the sanity check), "test", "predict".
        on_error: "raise" (default): raise `BatchValidationError`. "skip": drop the bad samples from
            the batch in place, so the step runs on the good ones; each dropped sample is logged and
            kept in `records()`. Lightning cannot skip a step from a callback, so a batch with no good
            sample left raises, and so does a tuple batch, which cannot be changed in place.
        backend: "auto" (Triton for CUDA tensors, the C kernel for CPU ones), "torch", "c" or "triton".
        sync: under torch.distributed, agree the verdict across ranks so that all raise together.
        strict: count warnings (data bugs the model runs through) as errors; otherwise a batch with
            only warnings goes through and each (spec, field, code) is logged once, as `tc.validate` does.

    In skip mode, entries the spec names lose the bad samples along its batch dim; other entries
    (the index, a list of texts) along their first dim when it has the batch's size, as a
    DataLoader collates them; any other entry is left as it is.
    """

    def __init__(self, spec: BatchSpec, *, fields: Sequence[str] | None = None, index: str | None = None,
                 stages: Sequence[Stage] = ("train", "validate", "test"), on_error: Literal["raise", "skip"] = "raise",
                 backend: Backend = "auto", sync: bool = True, strict: bool = False):
        if not isinstance(spec, BatchSpec):
            raise TypeError(f"spec must be a BatchSpec (from tc.load_spec or tc.spec_for), got {type(spec).__name__}")
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
        if isinstance(stages, str) or not set(stages) <= set(STAGES):
            raise ValueError(f"stages must be a list of {', '.join(STAGES)}; got {stages!r}")
        if index is not None and fields is not None and index not in fields:
            raise ValueError(f"index {index!r} must be one of fields {tuple(fields)}")
        self.spec = spec
        self.fields = tuple(fields) if fields is not None else None
        self.index = index
        self.stages = tuple(stages)
        self.on_error = on_error
        self.backend = backend
        self.sync = sync
        self.strict = strict
        self._records: list[dict[str, Any]] = []

    def records(self) -> list[dict[str, Any]]:
        """Every sample dropped so far on this rank: stage, batch_idx, dataloader_idx, position, index, violations."""
        return list(self._records)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._check("train", trainer, batch, batch_idx, 0)

    def on_validation_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        self._check("validate", trainer, batch, batch_idx, dataloader_idx)

    def on_test_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int,
                            dataloader_idx: int = 0) -> None:
        self._check("test", trainer, batch, batch_idx, dataloader_idx)

    def on_predict_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int,
                               dataloader_idx: int = 0) -> None:
        self._check("predict", trainer, batch, batch_idx, dataloader_idx)

    def _check(self, stage: Stage, trainer: Any, batch: Any, batch_idx: int, dataloader_idx: int) -> None:
        if stage not in self.stages or disabled():
            return
        entries = self._entries(batch)
        checked = {k: v for k, v in entries.items() if k != self.index} if isinstance(entries, dict) else entries
        report = check(checked, self.spec, backend=self.backend, strict=self.strict)
        if self.fields is None and isinstance(batch, (tuple, list)):
            report = self._fields_hint(report, len(batch))
        where = {"stage": "sanity_check" if getattr(trainer, "sanity_checking", False) else stage,
                 "batch_idx": batch_idx, "dataloader_idx": dataloader_idx}
        indices = None
        why = None
        if not report.ok:  # read the indices only now: on a GPU that is a host sync
            indices = _as_list(entries[self.index]) if self.index is not None else None
            if self.on_error == "skip":
                report, why = self._drop_bad(batch, entries, checked, report, indices, where)
        if self.sync and _distributed():
            report = agree(report, True)
        if not report.ok:
            raise _named(BatchValidationError(report), report, indices, where, why)
        if report.warnings:
            log_warnings(report, indices or ())

    def _fields_hint(self, report: Report, items: int) -> Report:
        """A tuple or list batch: the hint says how this callback names its items (`fields=`)."""
        names = ", ".join(repr(n) for n in list(self.spec.fields)[:items])
        hint = (f"a {items}-item batch: name its items, in their order, with TritoncheckCallback(spec, fields=...), "
                f"e.g. fields=({names}{',' if items == 1 else ''}); or return a dict from the collate_fn")
        return replace(report, violations=tuple(replace(v, hint=hint) if v.code == "not_a_mapping" else v
                                                for v in report.violations))

    def _entries(self, batch: Any) -> Any:
        """The batch as a dict of name to value (a copy), or as it is when it cannot be one."""
        if self.fields is not None and isinstance(batch, (tuple, list)):
            if len(batch) != len(self.fields):
                raise ValueError(f"the batch has {len(batch)} items but fields names {len(self.fields)}: {self.fields}")
            entries = dict(zip(self.fields, batch))
        elif isinstance(batch, Mapping):
            entries = dict(batch)
        else:
            return batch  # check() says what it is, with a hint to name the items with `fields`
        if self.index is not None and self.index not in entries:
            raise ValueError(f"the batch has no entry {self.index!r} (index=) to read dataset indices from; "
                             f"it has {', '.join(map(str, entries))}")
        return entries

    def _drop_bad(self, batch: Any, entries: Any, checked: Any, report: Report, indices: list | None,
                  where: dict[str, Any]) -> tuple[Report, str | None]:
        """Drop the bad samples from `batch` (whose items are `entries`, less the index: `checked`) in place.

        Each dropped sample is logged and recorded. Returns the report of what is left, or the
        failing report and why no sample could be kept.
        """
        if not isinstance(entries, dict):
            return report, None  # not a batch of named fields: the report says so
        if not isinstance(batch, (list, MutableMapping)):
            return report, f"on_error='skip' drops samples in place, which a {type(batch).__name__} batch does not allow"
        plan = compile_plan(self.spec)
        n = report.dims.get(plan.batch_dim, (None, ""))[0]
        axes = {f.name: f.axes.index(plan.batch_dim) if plan.batch_dim in f.axes else None for f in plan.fields}
        if n is None or not _splittable(checked, axes, n):
            return report, f"on_error='skip' cannot tell the samples apart: the fields disagree on (or lack) the {plan.batch_dim} dim"

        def check_subset(keep: list[int]) -> tuple[Report, Any]:
            subset = {k: _take(v, axes.get(k), keep) for k, v in checked.items()}
            return check(subset, self.spec, backend=self.backend, strict=self.strict), None

        good, bad, _ = split_bad(n, check_subset, report, checked, plan)
        if not good:
            return report, "on_error='skip' found no good sample, and Lightning cannot skip a step from a callback"
        for pos, violations in bad.items():
            self._records.append({**where, "position": pos, "index": _index_at(indices, pos),
                                  "spec": self.spec.name, "violations": [v.to_dict() for v in violations]})
        named = "; ".join(f"sample {p}" + ("" if indices is None else f" = dataset index {_index_at(indices, p)!r}")
                          + f" ({', '.join(sorted({v.code for v in vs}))})" for p, vs in bad.items())
        logger.warning("%s batch_idx %d: dropped %d bad sample(s) of %d: %s; records in callback.records()",
                       where["stage"], where["batch_idx"], len(bad), n, named)
        for pos, (name, value) in enumerate(entries.items()):
            axis = axes[name] if name in axes else (0 if _length(value) == n else None)
            batch[pos if isinstance(batch, list) else name] = _take(value, axis, good)
        kept = check_subset(good)[0]  # what is left: its warnings are logged, at their places in the batch
        return replace(kept, violations=tuple(renumber(v, good, plan) for v in kept.violations)), None


def _splittable(entries: dict[str, Any], axes: dict[str, int | None], n: int) -> bool:
    """Whether every field the spec names has its batch dim where the spec says, of size n."""
    for name, value in entries.items():
        axis = axes.get(name)
        if axis is None:
            continue
        shape = getattr(value, "shape", None)
        if shape is None or len(shape) <= axis or shape[axis] != n:
            return False
    return True


def _take(value: Any, axis: int | None, keep: list[int]) -> Any:
    """The samples at positions `keep` along `axis` (None: the value is not per sample, kept whole)."""
    import torch

    if axis is None:
        return value
    if isinstance(value, torch.Tensor):
        return value.index_select(axis, torch.tensor(keep, dtype=torch.long, device=value.device))
    if hasattr(value, "take"):  # a numpy array
        return value.take(keep, axis=axis)
    return [value[i] for i in keep]


def _length(value: Any) -> int | None:
    """The size of the first dim of a tensor, array or list; None for anything else."""
    shape = getattr(value, "shape", None)
    if shape is not None:
        return shape[0] if len(shape) else None
    return len(value) if isinstance(value, (list, tuple)) else None


def _index_at(indices: list | None, position: int) -> Any:
    return indices[position] if indices is not None and position < len(indices) else None


def _as_list(value: Any) -> list:
    return value.tolist() if hasattr(value, "tolist") else list(value)


def _named(exc: BatchValidationError, report: Report, indices: list | None, where: dict[str, Any],
           why: str | None) -> BatchValidationError:
    """Name the stage, batch_idx and dataset indices of the bad samples on the error."""
    exc.stage, exc.batch_idx, exc.dataset_indices = where["stage"], where["batch_idx"], tuple(indices or ())
    text = f"in Lightning {where['stage']} batch_idx {where['batch_idx']}"
    if where["dataloader_idx"]:
        text += f" of dataloader {where['dataloader_idx']}"
    positions = sorted({p for v in report.errors for p in v.samples})  # a sample with only warnings is not bad
    if indices is not None and positions:
        text += "; dataset indices of the bad samples: " + ", ".join(
            f"{_index_at(indices, p)!r} (sample {p})" for p in positions)
    if hasattr(exc, "add_note"):
        exc.add_note(text)
        if why:
            exc.add_note(why)
    return exc


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


__all__ = ["TritoncheckCallback"]
