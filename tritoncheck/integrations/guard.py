"""`tc.guard(model)`: check a module's inputs in a forward pre-hook, before its forward runs;
`@tc.checked(spec)`: the same for a plain function (pandera's `check_input`, jaxtyping's `@jaxtyped`).

The hook maps positional and keyword arguments to `forward`'s parameter names, keeps the ones the
spec names (flags such as `output_attentions=False` and `None` values are left out), and
validates them. A bad batch raises `BatchValidationError` before a single kernel of the model runs.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from tritoncheck.api import BACKENDS, Backend, disabled, validate
from tritoncheck.report import BatchValidationError
from tritoncheck.spec.schema import BatchSpec


def guard(
    model: Any,
    spec: BatchSpec | None = None,
    *,
    deferred: bool = False,
    backend: Backend = "auto",
    group: Any = None,
    strict: bool = False,
) -> Any:
    """Validate every call's inputs to `model` against `spec` before its forward runs.

    Args:
        model: a `torch.nn.Module`.
        spec: the contract of the forward's inputs; by default the model's own (`tc.spec_for(model)`).
        deferred: check without waiting for the GPU; a bad call raises at the next call (of this or
            any guarded model, or any deferred `tc.validate`) or at `tc.wait()`, naming the step it
            was submitted at. Every call is checked, even one that raises for an earlier call.
            Falls back to checking synchronously (with a warning, once) where deferred mode is not
            available, and for inputs on no CUDA device: there is no GPU to wait for, and a bad CPU batch
            must not reach the model.
        backend: "auto" (Triton for CUDA tensors, the C kernel for CPU ones), "torch", "c" or "triton".
        group: a torch.distributed process group, or True for the default one: every rank raises
            together when any rank's batch is bad (see `tc.validate`).
        strict: raise for warnings too (data bugs the model runs through); otherwise they are logged.

    Returns:
        the hook's handle; `handle.remove()` takes the guard off. `TRITONCHECK_DISABLE=1` turns the
        check off without removing it.
    """
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"guard needs a torch.nn.Module, got {type(model).__name__}")
    if spec is None:
        spec = _model_spec(model)
    if not isinstance(spec, BatchSpec):
        raise TypeError(f"spec must be a BatchSpec (from tc.load_spec or tc.spec_for), got {type(spec).__name__}")
    _known_backend(backend)
    if deferred and not _deferred_available():
        warnings.warn(
            "tc.guard(deferred=True) needs the Triton backend's deferred mode, which is not available here; "
            "checking synchronously instead",
            stacklevel=2,
        )
        deferred = False
    signature = inspect.signature(model.forward)
    fields = set(spec.fields)
    warned = [False]

    def hook(module: Any, args: tuple, kwargs: dict) -> None:
        if disabled():
            return None
        inputs = _inputs(signature, fields, args, kwargs)
        later = deferred and _on_cuda(inputs)
        if deferred and not later and not warned[0]:
            warned[0] = True
            warnings.warn(
                f"tc.guard(deferred=True): the inputs of {type(module).__name__} are on no CUDA device, where "
                "deferred checking has nothing to wait for; checking them synchronously (a bad batch raises "
                "before forward runs)",
                stacklevel=_outside_torch(),
            )
        extra = {"deferred": True} if later else {}
        validate(inputs, spec, backend=backend, group=group, strict=strict, **extra)
        return None

    return model.register_forward_pre_hook(hook, with_kwargs=True, prepend=True)


F = TypeVar("F", bound=Callable[..., Any])


def checked(spec: BatchSpec, *, backend: Backend = "auto", group: Any = None, strict: bool = False) -> Callable[[F], F]:
    """Decorate a function so that its batch is validated against `spec` before each call.

        @tc.checked(spec)
        def train_step(model, batch): ...            # the one mapping argument is the batch

        @tc.checked(spec)
        def loss(input_ids, labels, attention_mask=None): ...   # or the arguments the spec names

    The arguments are read as `tc.guard` reads a forward's: those the spec names, by parameter name
    (None left out); where there are none, the one mapping among the arguments. A bad batch raises
    `BatchValidationError` (a note names the function), a call that holds no batch (no such argument,
    and not exactly one mapping) a TypeError; either way the function does not run.

    Args:
        spec: the contract of the batch.
        backend, group, strict: as for `tc.validate`.
    """
    if not isinstance(spec, BatchSpec):
        hint = " (write @tc.checked(spec), with the spec)" if callable(spec) else ""
        raise TypeError(f"checked needs a BatchSpec (from tc.load_spec or tc.spec_for){hint}, got {type(spec).__name__}")
    _known_backend(backend)
    fields = set(spec.fields)

    def decorate(fn: F) -> F:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if not disabled():
                try:
                    signature.bind(*args, **kwargs)
                except TypeError:
                    return fn(*args, **kwargs)  # Python says why the call does not fit; the body does not run
                named = _arguments(signature, args, kwargs)
                if not fields & {k for k, v in named.items() if v is not None} and _batch_mapping(named, fields) is None:
                    mappings = sum(isinstance(v, Mapping) for v in named.values())
                    raise TypeError(f"@tc.checked({spec.name}) found no batch in the call to {fn.__qualname__}: no "
                                    f"argument is named like a field ({', '.join(spec.fields)}), and of its {mappings} "
                                    "mapping arguments not exactly one holds them")
                try:
                    validate(_inputs(signature, fields, args, kwargs), spec, backend=backend, group=group, strict=strict)
                except BatchValidationError as exc:
                    if hasattr(exc, "add_note"):  # Python >= 3.11
                        exc.add_note(f"(the batch passed to {fn.__qualname__})")
                    raise
            return fn(*args, **kwargs)

        return call  # type: ignore[return-value]

    return decorate


def _inputs(signature: inspect.Signature, fields: set[str], args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments that the spec names, by parameter name; None values are left out."""
    named = _arguments(signature, args, kwargs)
    picked = {k: v for k, v in named.items() if k in fields and v is not None}
    batch = None if picked else _batch_mapping(named, fields)
    if batch is not None:  # forward(self, batch) called with the whole batch as one mapping
        picked = {k: v for k, v in batch.items() if k in fields and v is not None}
    return picked


def _outside_torch() -> int:
    """The stack level of the first frame outside torch (the model's caller), for a hook's warning."""
    import torch

    frame, level, inside = sys._getframe(1), 1, os.path.dirname(torch.__file__)
    while frame is not None and (frame.f_code.co_filename.startswith(inside) or frame.f_code.co_filename == __file__):
        frame, level = frame.f_back, level + 1
    return level


def _on_cuda(inputs: dict[str, Any]) -> bool:
    """Whether any input tensor is on a CUDA device (only there does a deferred check not wait)."""
    return any(getattr(getattr(v, "device", None), "type", None) == "cuda" for v in inputs.values())


def _batch_mapping(named: dict[str, Any], fields: set[str]) -> Mapping | None:
    """The one mapping among the arguments, or among several the one holding spec fields (`step(batch,
    config)`); None where there is no such one."""
    mappings = [v for v in named.values() if isinstance(v, Mapping)]
    if len(mappings) > 1:
        mappings = [m for m in mappings if any(f in m for f in fields)]
    return mappings[0] if len(mappings) == 1 else None


def _arguments(signature: inspect.Signature, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The call's arguments by parameter name, those in **kwargs by their own."""
    try:
        bound = signature.bind_partial(*args, **kwargs).arguments
    except TypeError:  # the call does not fit forward's signature: forward itself will say why
        bound = dict(kwargs)
    named: dict[str, Any] = {}
    for name, value in bound.items():
        param = signature.parameters.get(name)
        if param is not None and param.kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        else:
            named[name] = value
    return named


def _known_backend(backend: Any) -> None:
    """A misspelled backend is refused when the check is set up, not at the first batch."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {backend!r}")


def _model_spec(model: Any) -> BatchSpec:
    try:
        from tritoncheck.derive import spec_for
    except ModuleNotFoundError as exc:
        if exc.name != "tritoncheck.derive":
            raise
        raise NotImplementedError(
            "tc.guard(model) without a spec needs tc.spec_for, which this installation lacks; "
            "pass one: tc.guard(model, tc.load_spec(...))"
        ) from None
    return spec_for(model)


def _deferred_available() -> bool:
    try:
        import tritoncheck.api.deferred  # noqa: F401
    except ImportError:
        return False
    return "deferred" in inspect.signature(validate).parameters
