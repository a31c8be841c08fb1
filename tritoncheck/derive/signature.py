"""What a forward accepts: its parameters, which are required, and which can be batch tensors."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from torch import nn

# Annotations that name something other than one tensor (caches, tuples of tensors, flags).
_NOT_A_TENSOR = ("Cache", "tuple", "Tuple", "list", "List", "dict", "Dict", "bool", "str")


@dataclass(frozen=True)
class Param:
    """One named parameter of `forward` that a batch may fill with a tensor."""

    name: str
    required: bool


def _parameters(model: nn.Module) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return []


def forward_args(model: nn.Module) -> tuple[set[str], bool]:
    """The named parameters of `forward`, and whether it also takes **kwargs."""
    parameters = _parameters(model)
    named = {p.name for p in parameters if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    return named, any(p.kind == p.VAR_KEYWORD for p in parameters)


def tensor_params(model: nn.Module) -> list[Param]:
    """The parameters a batch field can fill, in order: those without a default, and those defaulting
    to None whose annotation (if any) names a tensor. Flags (`return_dict: bool = None`), caches and
    tuples of tensors are left out: a batch never carries them."""
    out = []
    for p in _parameters(model):
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        if p.default is p.empty:
            out.append(Param(p.name, True))
            continue
        if p.default is not None:
            continue
        note = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", str(p.annotation))
        if p.annotation is p.empty or ("Tensor" in note and not any(word in note for word in _NOT_A_TENSOR)):
            out.append(Param(p.name, False))
    return out


def flags(model: nn.Module) -> list[str]:
    """The named parameters of `forward` a batch cannot fill with a tensor (`return_loss`, `return_dict`, a
    cache), in order: a batch may carry them as they are (CLIP's collators add `return_loss=True`)."""
    tensors = {p.name for p in tensor_params(model)}
    return [p.name for p in _parameters(model) if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and p.name not in tensors]
