"""A Hugging Face `Trainer` data collator that checks every batch it builds.

    from tritoncheck.integrations.hf import ValidatingDataCollator
    spec = tc.load_spec("bert-sequence-classification", config=model.config)
    trainer = Trainer(model, args, train_dataset=tc.IndexedDataset(ds),
                      data_collator=ValidatingDataCollator(DataCollatorWithPadding(tok), spec, on_error="skip"))

It runs wherever the Trainer's DataLoader runs the collator (its workers with
`dataloader_num_workers > 0`), on CPU tensors: the contract compiled to C, as `tc.ValidatingCollate`
does (the torch backend where no C compiler exists).

`tc.IndexedDataset(ds)` is optional: it makes skip records and errors name dataset rows. On a
`datasets.Dataset` it returns a `datasets.Dataset`, so the Trainer still removes the columns the
model does not take (`remove_unused_columns`), text columns included, before the collator runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tritoncheck.integrations.data import OnError, ValidatingCollate
from tritoncheck.report import Report
from tritoncheck.spec.schema import BatchSpec


class ValidatingDataCollator(ValidatingCollate):
    """Wrap `data_collator` (default: `transformers.default_data_collator`) with a batch check.

    Args:
        data_collator: the Trainer's collator, e.g. `DataCollatorWithPadding(tokenizer)`.
        spec: the contract of the collated batch.
        on_error: "raise" (default), "skip" or "quarantine", as for `tc.ValidatingCollate`.
            The Trainer cannot take an empty step, so a batch whose every sample is bad raises
            `BatchValidationError` in every mode.
        quarantine_dir, log_dir, backend, strict: as for `tc.ValidatingCollate`.
    """

    def __init__(
        self,
        data_collator: Callable[[list[Any]], Any] | None,
        spec: BatchSpec,
        on_error: OnError = "raise",
        quarantine_dir: Any = None,
        *,
        log_dir: Any = None,
        backend: Any = "auto",
        strict: bool = False,
    ):
        if data_collator is None:
            from transformers import default_data_collator

            data_collator = default_data_collator
        super().__init__(spec, data_collator, on_error, quarantine_dir, log_dir=log_dir, backend=backend, strict=strict)

    def _all_bad(self, report: Report, indices: list[int | None]) -> Any:
        # every sample is recorded already; the Trainer cannot take an empty step, so stop here
        return self._reject(report, indices)


__all__ = ["ValidatingDataCollator"]
