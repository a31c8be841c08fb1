"""One forward under a `TorchFunctionMode` that records what each batch field feeds.

Every tensor the forward makes is tagged with the batch fields it derives from. A tensor whose
values are a field's own values (viewed, sliced, cast, padded, or shifted by a constant) is
*direct*: when it reaches an op that indexes with it (an embedding, a gather, a loss target), the
op's bound is a bound on the field, shifted back by the constant. Other tensors only carry the
names of the fields they depend on. Module paths come from global forward hooks, so each finding
says which module ran the op. Measured on 159 tiny Hugging Face models (docs/derive.md): this
traces every one of them, where torch.export, fake and meta tensors did not.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

INT_IDS = ("int64", "int32")


@dataclass(frozen=True)
class Finding:
    """What one op says about one field: `low <= field <= high` (None: unbounded), plus allowed values.

    `dtypes` are the integer dtypes the op takes; `ignore` is a loss's ignore index (every value
    ignored gives a NaN mean); `origin` is the module path and op, for the contract's comments.
    """

    field: str
    low: int | None
    high: int | None
    dtypes: tuple[str, ...]
    origin: str
    ignore: int | None = None
    target: str | None = None  # 'classes', 'probabilities' or 'values' for a loss target


@dataclass(frozen=True)
class _Direct:
    field: str
    offset: int  # the tensor holds field + offset


# Ops that keep a tensor's values (a view, a slice, a cast, a copy): direct in, direct out.
_KEEP = {
    "view", "reshape", "flatten", "contiguous", "clone", "to", "long", "int", "unsqueeze", "squeeze", "expand",
    "expand_as", "transpose", "permute", "t", "__getitem__", "narrow", "select", "detach", "repeat", "view_as",
    "reshape_as", "type", "pad", "cpu", "cuda", "unflatten", "movedim", "swapaxes",
}
_LOSSES = {"cross_entropy": "classes", "nll_loss": "classes", "binary_cross_entropy": "probabilities",
           "binary_cross_entropy_with_logits": "probabilities", "mse_loss": "values", "l1_loss": "values",
           "smooth_l1_loss": "values", "huber_loss": "values"}


def _name(func: Callable) -> str:
    return getattr(func, "__name__", "") or ""


class Recorder(TorchFunctionMode):
    """Tags tensors with the fields they come from and records the bounds index ops put on them."""

    def __init__(self, batch: dict[str, torch.Tensor], paths: dict[int, str]):
        super().__init__()
        # Tags by id, each with a weak reference that proves the id still names the tensor it was given to
        # (a freed activation's id may be reused): nothing is kept alive, so a large model's trace holds no
        # more activations than its forward does.
        self.direct: dict[int, tuple[weakref.ref, _Direct]] = {}
        self.depends: dict[int, tuple[weakref.ref, frozenset[str]]] = {}
        for k, t in batch.items():
            self._tag(self.direct, t, _Direct(k, 0))
            self._tag(self.depends, t, frozenset({k}))
        self.paths = paths
        self.stack: list[str] = []
        self.findings: list[Finding] = []
        self.casts: set[str] = set()  # float fields the model casts before any other use
        self.used: set[str] = set()  # fields some op read
        # embedding tables indexed by something other than a field's own values (positions made from the length,
        # or from a mask's cumsum), and tables of the model's own cut to a batch length: rows -> origin; each a
        # candidate length limit for the probes
        self.tables: dict[int, str] = {}
        self.lengths = {n for t in batch.values() for n in t.shape[1:]}  # the batch's sizes past its first axis

    @staticmethod
    def _tag(table: dict, tensor: torch.Tensor, value: Any) -> None:
        table[id(tensor)] = (weakref.ref(tensor), value)

    @staticmethod
    def _get(table: dict, tensor: Any) -> Any:
        entry = table.get(id(tensor))
        return entry[1] if entry is not None and entry[0]() is tensor else None

    # -- module paths ----------------------------------------------------------------------
    def enter(self, module: nn.Module, *_: Any) -> None:
        self.stack.append(self.paths.get(id(module), type(module).__name__))

    def leave(self, *_: Any) -> None:
        if self.stack:
            self.stack.pop()

    def where(self, op: str) -> str:
        path = self.stack[-1] if self.stack and self.stack[-1] else "forward"
        return f"{path} ({op})"

    # -- the mode ----------------------------------------------------------------------------
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = _name(func)
        flat = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        sources = frozenset().union(*(self._get(self.depends, a) or frozenset() for a in flat)) if flat else frozenset()
        if sources:
            self.used |= sources
            self._observe(name, args, kwargs)
        if name == "embedding" and len(args) > 1 and isinstance(args[1], torch.Tensor) and self._field(args[0]) is None:
            self.tables.setdefault(args[1].shape[0], self.where("embedding"))
        elif name in ("__getitem__", "narrow") and not sources and args and isinstance(args[0], torch.Tensor):
            self._sliced_table(name, args)
        if sources and isinstance(out, torch.Tensor):
            self._tag(self.depends, out, sources)
            first = args[0] if args and isinstance(args[0], torch.Tensor) else None
            direct = self._get(self.direct, first) if first is not None else None
            if direct is not None:
                kept = self._kept(name, direct, first, out, args)
                if kept is not None:
                    self._tag(self.direct, out, kept)
        return out

    def _sliced_table(self, name: str, args: tuple) -> None:
        """A table of the model's own (a position `nn.Parameter`, a buffer) cut to a length some batch axis has
        (`self.pos[:, :L]`): its size along that axis is a candidate length limit, as an embedding's rows are."""
        source = args[0]
        if name == "narrow":
            cuts = [(args[1], args[3])] if len(args) > 3 and isinstance(args[1], int) and isinstance(args[3], int) else []
        else:
            items = args[1] if isinstance(args[1], tuple) else (args[1],)
            cuts = [(axis, item.stop) for axis, item in enumerate(items) if isinstance(item, slice)
                    and item.start in (None, 0) and isinstance(item.stop, int) and axis < source.dim()]
        for axis, stop in cuts:
            if stop in self.lengths and 0 < stop < source.shape[axis]:
                self.tables.setdefault(source.shape[axis], self.where("slice"))

    def _kept(self, name: str, direct: _Direct, first: torch.Tensor, out: torch.Tensor, args: tuple) -> _Direct | None:
        """The direct tag of `out` where `name` keeps the values of `first` (up to a constant)."""
        if name in _KEEP or name in ("float", "half", "double", "bfloat16", "type_as"):
            if first.is_floating_point() and name in ("to", "type", "float", "half", "double", "bfloat16", "type_as"):
                self.casts.add(direct.field)  # the model casts it: its dtype is the model's business
            return direct
        other = args[1] if len(args) > 1 else None
        if name in ("add", "__add__", "__radd__", "sub", "__sub__") and isinstance(other, int) and not isinstance(other, bool):
            return _Direct(direct.field, direct.offset + (other if "sub" not in name else -other))
        return None

    def _field(self, tensor: Any) -> _Direct | None:
        return self._get(self.direct, tensor) if isinstance(tensor, torch.Tensor) else None

    def _bound(self, index: Any, low: int | None, high: int | None, dtypes: tuple[str, ...], op: str, **extra: Any) -> None:
        d = self._field(index)
        if d is None or index.is_floating_point() or index.dtype == torch.bool:
            return
        shift = -d.offset
        self.findings.append(Finding(d.field, None if low is None else low + shift, None if high is None else high + shift,
                                     dtypes, self.where(op), **extra))

    def _observe(self, name: str, args: tuple, kwargs: dict) -> None:
        def arg(i: int, key: str, default: Any = None) -> Any:
            return args[i] if len(args) > i else kwargs.get(key, default)

        if name == "embedding":
            weight = arg(1, "weight")
            self._bound(arg(0, "input"), 0, weight.shape[0] - 1, INT_IDS, "embedding")
        elif name == "embedding_bag":
            weight = arg(1, "weight")
            self._bound(arg(0, "input"), 0, weight.shape[0] - 1, INT_IDS, "embedding_bag")
        elif name == "one_hot":
            classes = arg(1, "num_classes", -1)
            if classes is not None and classes >= 0:
                self._bound(arg(0, "tensor"), 0, classes - 1, ("int64",), "one_hot")
        elif name in ("gather", "take_along_dim"):
            source, dim, index = arg(0, "input"), arg(1, "dim"), arg(2, "index")
            if isinstance(source, torch.Tensor) and isinstance(dim, int):
                self._bound(index, 0, source.shape[dim] - 1, ("int64",), name)
        elif name == "index_select":
            source, dim, index = arg(0, "input"), arg(1, "dim"), arg(2, "index")
            self._bound(index, 0, source.shape[dim] - 1, INT_IDS, "index_select")
        elif name == "__getitem__":
            self._getitem(args)
        elif name in _LOSSES:
            self._loss(name, arg(0, "input"), arg(1, "target"), kwargs)

    def _getitem(self, args: tuple) -> None:
        source, index = args[0], args[1]
        items = index if isinstance(index, tuple) else (index,)
        axis = 0
        for item in items:
            if item is Ellipsis:  # count from the end for the items after it
                axis = source.dim() - (len(items) - items.index(item) - 1)
                continue
            if item is None:
                continue
            if isinstance(item, torch.Tensor) and item.dtype != torch.bool and not item.is_floating_point() and axis < source.dim():
                self._bound(item, 0, source.shape[axis] - 1, INT_IDS, "index")
            axis += 1

    def _loss(self, name: str, logits: Any, target: Any, kwargs: dict) -> None:
        d = self._field(target)
        if d is None:
            return
        kind = _LOSSES[name]
        origin = self.where(name)
        if kind == "classes" and not target.is_floating_point():
            classes = logits.shape[1] if logits.dim() > 1 else logits.shape[0]
            ignore = kwargs.get("ignore_index", -100)
            mean = kwargs.get("reduction", "mean") == "mean"
            self.findings.append(Finding(d.field, -d.offset, classes - 1 - d.offset, ("int64",), origin,
                                         ignore=ignore - d.offset if mean else None, target="classes"))
        elif target.is_floating_point():
            low, high = (0, 1) if kind == "probabilities" else (None, None)
            self.findings.append(Finding(d.field, low, high, (), origin, target=kind))


@dataclass
class Trace:
    """What one forward showed: findings per field, casts, the fields it read, its outputs' health."""

    findings: list[Finding]
    casts: set[str]
    used: set[str]
    output: Any = None
    tables: dict[int, str] | None = None  # rows -> origin of tables not indexed by a field's own values


def run(model: nn.Module, call: Callable[[], Any], batch: dict[str, torch.Tensor]) -> Trace:
    """Run `call()` (one forward of `model` on `batch`) under the recorder. Raises what the forward raises."""
    paths = {id(m): name for name, m in model.named_modules()}
    recorder = Recorder(batch, paths)
    pre = nn.modules.module.register_module_forward_pre_hook(recorder.enter)
    post = nn.modules.module.register_module_forward_hook(recorder.leave, always_call=True)
    try:
        with recorder:
            output = call()
    finally:
        pre.remove()
        post.remove()
    return Trace(recorder.findings, recorder.casts, recorder.used, output, recorder.tables)

