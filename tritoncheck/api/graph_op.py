"""`tc.validate` inside a `torch.compile`d step: the check as one `torch.library` custom op.

Dynamo cannot trace a check: it reads values on the host (`.item()` in the torch backend, Triton's
Python launcher). Under compilation `validate` therefore calls one opaque operator,
`tritoncheck::validate(Tensor[] tensors, int key) -> ()`, which the graph keeps (an ordered effect:
never dead-code eliminated though it returns nothing, never reordered across another effectful op)
and which runs eagerly on the real tensors at every call of the compiled step. Its fake
implementation does nothing, so `fullgraph=True` holds: no graph break.

`key` stands for what is not a tensor (the spec, the field names, backend, strict, deferred, group).
It is found by `key_for`, which the compiler runs once per trace and bakes in as a constant,
guarding on the spec's identity (another spec object retraces).

At run time the op is an eager `validate`: with `deferred=True` it launches the check and queues
its verdict, so a bad batch raises at the next deferred validate (inside the compiled step or
outside it) or at `tc.wait()`; without it, the op checks and raises `BatchValidationError` out of
the compiled step. The op is tagged `cudagraph_unsafe`: under `mode="reduce-overhead"` Inductor
leaves it out of its CUDA graphs (a replay would not run the host half of the check).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

_lock = threading.Lock()
_entries: list[tuple[Any, ...]] = []  # key -> (eager, spec, names, backend, group, deferred, strict)
_keys: dict[tuple[Any, ...], int] = {}  # (id(eager), id(spec), names, ...) -> key; the spec is kept alive in _entries


@torch.compiler.assume_constant_result
def key_for(eager: Callable[..., Any], spec: Any, names: tuple[str, ...], backend: str, group: Any, deferred: bool,
            strict: bool) -> int:
    """The op's `key` for these arguments (run at trace time only; the compiler keeps the number)."""
    ident = (id(eager), id(spec), names, backend, id(group), deferred, strict)
    with _lock:
        key = _keys.get(ident)
        if key is None:
            key = _keys[ident] = len(_entries)
            _entries.append((eager, spec, names, backend, group, deferred, strict))
        return key


@torch.library.custom_op("tritoncheck::validate", mutates_args=(), tags=(torch.Tag.cudagraph_unsafe,))
def validate_op(tensors: list[torch.Tensor], key: int) -> None:
    """An eager `validate` of the batch these tensors make (run by the compiled graph)."""
    eager, spec, names, backend, group, deferred, strict = _entries[key]
    eager(dict(zip(names, tensors, strict=True)), spec, backend=backend, group=group, deferred=deferred, strict=strict)


@validate_op.register_fake
def _validate_fake(tensors: list[torch.Tensor], key: int) -> None:
    return None


validate_op.register_effect(torch.library.EffectType.ORDERED)


def validate(batch: Any, spec: Any, *, eager: Callable[..., Any], backend: str, group: Any, deferred: bool,
             strict: bool) -> Any:
    """`tc.validate` while Dynamo traces: one call of the custom op on the batch's tensors, which calls
    `eager` (`tc.validate` itself) on them at run time."""
    names = tuple(name for name, value in batch.items() if isinstance(value, torch.Tensor))
    key = key_for(eager, spec, names, backend, group, deferred, strict)
    torch.ops.tritoncheck.validate([batch[name] for name in names], key)
    return batch


__all__ = ["key_for", "validate", "validate_op"]
