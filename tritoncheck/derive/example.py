"""Small real batches to trace with, built from the forward's signature and what the hints know.

`dummy_inputs` runs on few models and encoder-decoders crash without labels, so the batch is built
here: fields the hints describe get values inside their bounds; a required input the hints do not
know starts as int64 ids in {0, 1} (valid for any table) and is reshaped by the first module that
takes it (a Linear wants `[B, in_features]` floats, a Conv1d `[B, in_channels, L]`, ...).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from tritoncheck.dtypes import DTYPE_NAMES, GROUPS, torch_dtypes

B = 2  # every example has two samples: a per-sample rule sees two rows
# Sizes of the dims besides B, tried in turn: equal, longer, and sequences long against their targets.
SIZES = ({"*": 8}, {"*": 32}, {"*": 4, "N": 64, "L": 16}, {"*": 128})
ONE = {"*": 8, "B": 1}  # tried last: a model that raises on every batch of two samples (no pad token to find ends)


def evaluate(text: int | float | str | None, names: dict[str, Any]) -> Any:
    """A bound or size from the spec (`vocab_size - 1`, `2 * max_source_positions`) with `names` filled;
    None where it names something unknown."""
    if text is None or isinstance(text, (int, float)):
        return text

    def walk(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name):
            value = names.get(node.id)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise KeyError(node.id)
            return value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv)):
            a, b = walk(node.left), walk(node.right)
            return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b}.get(type(node.op), a // b if b else 0)
        raise KeyError(ast.dump(node))

    try:
        return walk(ast.parse(str(text), mode="eval").body)
    except (KeyError, SyntaxError, TypeError):
        return None


def dtype_of(entries: list[str], params: dict[str, Any], compute: torch.dtype) -> torch.dtype:
    """The first dtype a field's entry list allows (a group gives its natural member)."""
    for entry in entries:
        name = params.get(entry, entry) if entry not in DTYPE_NAMES and entry not in GROUPS else entry
        if name == "float":
            return compute
        if name == "int":
            return torch.int64
        if name in DTYPE_NAMES:
            return torch_dtypes()[name]
    return compute


def from_fields(fields: dict[str, dict], params: dict[str, Any], rules: list[dict], sizes: dict[str, int],
                compute: torch.dtype, seed: int = 0) -> dict[str, torch.Tensor]:
    """One tensor per field of a spec mapping, inside its bounds, with dims sized by `sizes`."""
    g = torch.Generator().manual_seed(seed)
    dims: dict[str, int] = {"B": sizes.get("B", B)}
    sizes = {**sizes, **_lower_bounds(rules, params, sizes)}
    out = {}
    for name, f in fields.items():
        shape = []
        for entry in f["shape"]:
            if entry == "1?":
                continue
            value = evaluate(entry, {**params, **dims})
            if value is None and isinstance(entry, str) and entry.isidentifier():
                value = dims.setdefault(entry, sizes.get(entry, sizes["*"]))
            shape.append(int(value) if value is not None else sizes["*"])
        out[name] = _fill(f, shape, params, dims, compute, g)
    _place_required_tokens(out, params, rules)
    return out


def _lower_bounds(rules: list[dict], params: dict, sizes: dict[str, int]) -> dict[str, int]:
    """Dims a rule `DIM >= bound` holds above their size in `sizes` (a convolutional feature encoder's
    receptive field), raised to that bound times the size's step over the smallest (8): the example must meet
    the contract's own minimum, and the later tries are longer (a pooling after the encoder needs two frames)."""
    out = {}
    for r in rules:
        m = re.fullmatch(r"(\w+) >= (.+)", r["rule"])
        bound = evaluate(m.group(2), params) if m else None
        size = sizes.get(m.group(1), sizes["*"]) if m else 0
        if isinstance(bound, (int, float)) and bound > size:
            out[m.group(1)] = int(bound) * max(1, size // SIZES[0]["*"])
    return out


def _fill(f: dict, shape: list[int], params: dict, dims: dict, compute: torch.dtype, g: torch.Generator) -> torch.Tensor:
    dtype = dtype_of(f["dtype"], params, compute)
    if f.get("values"):
        return torch.full(shape, max(f["values"]), dtype=dtype)
    low, high = evaluate(f.get("min"), {**params, **dims}), evaluate(f.get("max"), {**params, **dims})
    if dtype == torch.bool:
        return torch.ones(shape, dtype=dtype)
    if dtype.is_floating_point:
        if low is not None and high is not None:
            return (torch.rand(shape, generator=g) * (high - low) + low).to(dtype)
        return torch.randn(shape, generator=g).to(dtype)
    low = 0 if low is None else int(low)
    high = low + 1 if high is None else int(high)
    return torch.randint(low, max(high, low) + 1, shape, generator=g).to(dtype)


def _place_required_tokens(batch: dict[str, torch.Tensor], params: dict, rules: list[dict]) -> None:
    """A rule `any(ids == token, dim=L)` (an <eos> every row must hold): end each row with the token, once."""
    for r in rules:
        m = re.fullmatch(r"any\((\w+) == (\w+), dim=\w+\)", r["rule"])
        if m and m.group(1) in batch and isinstance(params.get(m.group(2)), int):
            ids, token = batch[m.group(1)], params[m.group(2)]
            ids[ids == token] = token + 1 if token + 1 <= int(ids.max()) else max(token - 1, 0)
            ids[..., -1] = token


# --- inputs no hint describes: shaped by the module that first takes them ---------------------


def first_use_shape(module: nn.Module) -> tuple[str, list[int | str]] | None:
    """(dtype kind, shape) that `module` takes as its input, or None where any int ids will do."""
    if isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
        return None
    if isinstance(module, nn.Linear):
        return "float", ["B", module.in_features]
    if isinstance(module, nn.Conv1d):
        return "float", ["B", module.in_channels, "L"]
    if isinstance(module, nn.Conv2d):
        return "float", ["B", module.in_channels, "H", "W"]
    if isinstance(module, nn.RNNBase):
        return "float", ["B", "L", module.input_size] if module.batch_first else ["L", "B", module.input_size]
    if isinstance(module, nn.LayerNorm):
        return "float", ["B", "L", *module.normalized_shape]
    if isinstance(module, (nn.modules.batchnorm._NormBase,)):
        return "float", ["B", module.num_features, "L"]
    return "float", ["B", "L"]


def make(kind: str, shape: list[int | str], sizes: dict[str, int], compute: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    concrete = [sizes.get("B", B) if e == "B" else e if isinstance(e, int) else sizes.get(e, sizes["*"]) for e in shape]
    if kind == "float":
        return torch.randn(concrete, generator=g).to(compute)
    return torch.randint(0, 2, concrete, generator=g)


class FirstUse:
    """A global forward pre-hook noting the first module each batch tensor is passed to."""

    def __init__(self, batch: dict[str, torch.Tensor]):
        self.ids = {id(t): k for k, t in batch.items()}
        self.first: dict[str, nn.Module] = {}

    def __call__(self, module: nn.Module, args: tuple) -> None:
        for a in args:
            name = self.ids.get(id(a))
            if name is not None and name not in self.first and next(module.children(), None) is None:
                self.first[name] = module  # a leaf: the layer whose weights decide the shape

    def watch(self, call: Callable[[], Any]) -> Exception | None:
        handle = nn.modules.module.register_module_forward_pre_hook(self)
        try:
            call()
        except Exception as exc:  # the forward's own failure tells which input to reshape
            return exc
        finally:
            handle.remove()
        return None

