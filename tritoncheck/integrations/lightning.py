"""A Lightning callback that checks each training batch before `training_step` sees it.

    from tritoncheck.integrations.lightning import TritoncheckCallback
    trainer = L.Trainer(callbacks=[TritoncheckCallback(spec)])

It runs in `on_train_batch_start`, after the batch is on the module's device, so on a GPU the
Triton backend checks it in one launch. Under DDP the verdict is agreed across ranks, so every
rank stops together. Needs `lightning` (pip install tritoncheck[lightning]).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._api import Backend, validate
from .._spec import BatchSpec

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # the older package name
    try:
        from pytorch_lightning.callbacks import Callback
    except ImportError as exc:
        raise ImportError(
            "tritoncheck.integrations.lightning needs Lightning: pip install tritoncheck[lightning]"
        ) from exc


class TritoncheckCallback(Callback):
    """Validate every training batch against `spec` in `on_train_batch_start`.

    Args:
        spec: the contract of the batch.
        fields: names for the items of a tuple or list batch, e.g. ("inputs", "labels");
            a mapping batch is used as is.
        backend: "auto" (Triton for CUDA tensors, torch otherwise), "torch" or "triton".
        sync: under torch.distributed, agree the verdict across ranks so that all raise together.
    """

    def __init__(self, spec: BatchSpec, *, fields: Sequence[str] | None = None, backend: Backend = "auto",
                 sync: bool = True):
        if not isinstance(spec, BatchSpec):
            raise TypeError(f"spec must be a BatchSpec (from tc.load_spec or tc.spec_for), got {type(spec).__name__}")
        self.spec = spec
        self.fields = tuple(fields) if fields is not None else None
        self.backend = backend
        self.sync = sync

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self.fields is not None and isinstance(batch, (tuple, list)):
            if len(batch) != len(self.fields):
                raise ValueError(f"the batch has {len(batch)} items but fields names {len(self.fields)}: {self.fields}")
            batch = dict(zip(self.fields, batch))
        validate(batch, self.spec, backend=self.backend, group=True if self.sync and _distributed() else None)


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
