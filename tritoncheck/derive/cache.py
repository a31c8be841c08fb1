"""Derived contracts cached per (model class, config, parameter shapes), so `guard`, the Trainer
wrapper and the Lightning callback never trace a model twice.

The key is what the derivation reads: the class, the config's values (or, for a plain module, its
own plain attributes), the dtype and shape of every parameter and buffer (a resized embedding or a
model cast to fp16 derives anew) and the keywords that change the contract. Nothing is traced to
compute it: about 0.1 ms for a tiny model.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from torch import nn

MAX_ENTRIES = 64  # contracts kept; the oldest is dropped
_lock = threading.Lock()
_entries: OrderedDict[Any, Any] = OrderedDict()


def _plain(value: Any) -> bool:
    return isinstance(value, (int, float, str, bool, type(None))) or (
        isinstance(value, (tuple, list)) and all(_plain(v) for v in value))


def key(model: nn.Module, *extra: Any) -> Any:
    config = getattr(model, "config", None)
    source = config.__dict__ if config is not None and hasattr(config, "__dict__") else vars(model)
    settings = tuple(sorted((k, repr(v)) for k, v in source.items() if not k.startswith("_") and _plain(v)))
    tensors = tuple((n, tuple(t.shape), t.dtype) for n, t in (*model.named_parameters(), *model.named_buffers()))
    return type(model), settings, tensors, model.training, extra


def get(k: Any) -> Any:
    with _lock:
        value = _entries.get(k)
        if value is not None:
            _entries.move_to_end(k)
        return value


def put(k: Any, value: Any) -> None:
    with _lock:
        _entries[k] = value
        while len(_entries) > MAX_ENTRIES:
            _entries.popitem(last=False)


def clear() -> None:
    """Forget every cached contract (tests, or a model changed in a way the key does not see)."""
    with _lock:
        _entries.clear()
