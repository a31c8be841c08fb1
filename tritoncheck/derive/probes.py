"""Forwards that test what the trace cannot see: whether a run is clean, which float inputs take
another dtype, and the self-check that drops any derived rule rejecting a batch the model ran cleanly."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

from tritoncheck.checks import field_kinds
from tritoncheck.dtypes import dtype_name

SELF_CHECK_ROUNDS = 6


def _floats(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out] if out.is_floating_point() else []
    if isinstance(out, Mapping):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for item in out for t in _floats(item)]
    return []


def clean(call: Callable[[dict], Any], batch: dict[str, torch.Tensor]) -> Exception | None:
    """None where the forward runs on `batch` with every float output finite; else why not."""
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = call(batch)
    except Exception as exc:  # any failure of the model's forward means "not clean"
        return exc
    return None if finite(out) else ValueError("a non-finite output")


def clean_unmasked(call: Callable[[dict], Any], batch: dict[str, torch.Tensor]) -> Exception | None:
    """`clean`, where a failing forward is tried again with every integer input of zeros and ones set to
    ones, then to zeros: a mask row that keeps nothing (a narrowed example's, whose kept positions were cut
    away; all ones of a padding mask) makes a mean or an attention over it NaN, or a nested tensor raise, at
    any length, which says nothing of the length; a failure with every position kept does."""
    failure = clean(call, batch)
    if failure is None:
        return None
    masks = [k for k, t in batch.items() if _zeros_and_ones(t)]
    for fill in (torch.ones_like, torch.zeros_like):  # ones keep every position; zeros, for a padding mask
        if masks and clean(call, {**batch, **{k: fill(batch[k]) for k in masks}}) is None:
            return None
    return failure


def _zeros_and_ones(t: torch.Tensor) -> bool:
    return not t.is_floating_point() and t.dtype != torch.bool and t.numel() > 0 and bool(((t == 0) | (t == 1)).all())


def finite(out: Any) -> bool:
    """Whether a forward's loss (or, without one, every float output) is finite."""
    loss = out.get("loss") if isinstance(out, Mapping) else None
    values = [loss] if isinstance(loss, torch.Tensor) else _floats(out)
    return all(bool(torch.isfinite(v).all()) for v in values)


FLOATS = (torch.float16, torch.float32, torch.float64)


def shape_runs(call: Callable[[dict], Any], batch: dict[str, torch.Tensor], name: str,
               change: Callable[[torch.Tensor], torch.Tensor]) -> bool:
    """Whether the forward runs cleanly with `change` made to field `name` (a length, a rank), on `batch` and on
    its variants that run themselves: one more sample, and the field's first value 0. A shape is wrong for
    every batch: a [B] mask of ones runs where the model skips an all-ones mask, and a 0 reaches the broadcast."""
    t = batch[name]
    if not t.numel():
        return False
    more = {k: torch.cat([v, v[:1]]) if v.dim() and v.shape[0] == t.shape[0] else v for k, v in batch.items()}
    zero = t.clone()
    zero[(0,) * zero.dim()] = 0
    for variant in (batch, more, {**batch, name: zero}):
        if variant is not batch and clean(call, variant) is not None:
            continue
        try:
            changed = change(variant[name])
        except (IndexError, RuntimeError):  # the change itself does not apply (an empty axis)
            return False
        if clean(call, {**variant, name: changed}) is not None:
            return False
    return True


def float_dtypes(call: Callable[[dict], Any], batch: dict[str, torch.Tensor], names: list[str]) -> dict[str, list[str]]:
    """Per float field: `["float"]` where the forward runs with it in every other float dtype (the model casts
    it), else its own dtype and those others it runs with (fp16 into an fp32 model runs where it only meets
    fp32 tensors by promotion; fp64 raises at the first Linear)."""
    out = {}
    for name in names:
        t = batch[name]
        ran = [d for d in FLOATS if d != t.dtype and clean(call, {**batch, name: t.to(d)}) is None]
        out[name] = ["float"] if len(ran) == len(FLOATS) - (t.dtype in FLOATS) else [dtype_name(d) for d in (t.dtype, *ran)]
    return out


def nan_ignored(call: Callable[[dict], Any], batch: dict[str, torch.Tensor], names: list[str]) -> list[str]:
    """The float fields the forward runs cleanly with a NaN in their first value (it ignores their values, or
    masks them): a NaN there is a data bug, but not a crash."""
    out = []
    for name in names:
        t = batch[name].clone()
        t.view(-1)[0] = float("nan")
        if clean(call, {**batch, name: t}) is None:
            out.append(name)
    return out


def int_dtypes(call: Callable[[dict], Any], batch: dict[str, torch.Tensor], name: str, indexes: bool) -> list[str]:
    """The dtypes an integer field runs in: its own, int32/int64, float (an index the model casts with `.long()`
    first: DeBERTa's positions) and, for a mask no op indexes with, bool, where the forward takes them
    (`cross_entropy` targets take int64 only)."""
    t = batch[name]
    tries = [torch.int32 if t.dtype == torch.int64 else torch.int64, torch.float32]
    if not indexes and "mask" in name:
        tries.append(torch.bool)
    out = [dtype_name(t.dtype)]
    for dtype in tries:
        if clean(call, {**batch, name: t.to(dtype)}) is None:
            out.append("float" if dtype.is_floating_point else dtype_name(dtype))
    return out


def value_severity(call: Callable[[dict], Any], batch: dict[str, torch.Tensor], name: str, low: Any, high: Any) -> dict[str, str]:
    """For a bound the trace did not see an op put on the field: 'warning' for each side the forward runs past
    (rotary position ids, a mask value): the model takes it, but it is almost surely a data bug."""
    out = {}
    for code, value in (("below_min", low - 1 if isinstance(low, int) else None),
                        ("above_max", high + 1 if isinstance(high, int) else None)):
        if value is None:
            continue
        t = batch[name].clone()
        t.view(-1)[-1] = value
        if clean(call, {**batch, name: t}) is None:
            out[code] = "warning"
    return out


def self_check(data: dict[str, Any], batches: list[dict[str, torch.Tensor]], build: Callable[[dict], Any]) -> list[str]:
    """Drop from `data` (in place) every rule and field option that reports an error on a batch the model
    ran cleanly; returns what was dropped, in words."""
    from tritoncheck.api import check

    dropped: list[str] = []
    for _ in range(SELF_CHECK_ROUNDS):
        spec = build(data)
        errors = []
        for batch in batches:
            seen = {k: v for k, v in batch.items() if k in data["fields"]}
            errors += check(seen, spec, backend="torch").errors
        if not errors:
            return dropped
        progress = [what for v in errors if (what := _drop(data, v.field, v.code, batches, v.rule))]
        dropped += [w for w in progress if w not in dropped]
        if not progress:
            break
    left = sorted({f"{v.field} {v.code}" for v in errors})
    dropped.append("not dropped (no derived rule to drop): " + ", ".join(left))
    return dropped


def _drop(data: dict[str, Any], field: str | None, code: str, batches: list[dict], rule: str | None = None) -> str | None:
    f = data["fields"].get(field) if field else None
    options = {k.code: k.option.name for k in field_kinds()}  # below_min: min, ... (each kind's own option)
    if f is not None and code in options and f.get(options[code]) not in (None, False):
        f.pop(options[code])
        return f"fields.{field}.{options[code]}"
    if f is not None and code == "dtype":
        seen = {dtype_name(b[field].dtype) for b in batches if field in b}
        f["dtype"] = [*f["dtype"], *sorted(seen - set(f["dtype"]))]
        return f"fields.{field}.dtype (widened)"
    if f is not None and code == "missing_field":
        f["optional"] = True
        return f"fields.{field} required"
    if f is not None and code in ("rank", "shape", "dim_mismatch"):
        rank = next(b[field].dim() for b in batches if field in b)
        f["shape"] = ["B", *(f"{field}_{i}" for i in range(1, rank))]
        return f"fields.{field}.shape"
    for r in list(data["rules"]):
        if r.get("code", "rule_failed") == code and (field is None or r.get("field") == field or field in r["rule"]
                                                     or (rule or "").startswith(r["rule"])):
            data["rules"].remove(r)
            return f"rule {r['rule']!r}"
    return None

