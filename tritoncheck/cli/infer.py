"""`tritoncheck infer BATCH_FILE... > spec.yaml`: a draft contract from example batches.

The draft is what the examples show, with a YAML comment on every inferred line saying so, and it
always accepts the examples it came from (checked before it is printed). What is inferred:
- dtypes as seen; any float for float fields (mixed precision changes them); masks also accept
  int32/int64/bool;
- dims: the first axis shared by the most fields is B; other axes whose sizes agree in every
  batch get one name (L, T, ...) when they vary between batches or appear in two fields;
  a size that never varies and belongs to one field stays a number (bbox's 4, image channels);
- integer ranges: exactly the observed max; the min is widened to 0 when nothing was negative
  (an id or label of 0 that happens not to appear is no error). One negative value below an
  otherwise non-negative field is a sentinel (-100) and goes to `allow`;
- {0, 1}-valued integer fields get `values: [0, 1]`; floats without NaN/Inf get `finite: true`,
  and floats inside [0, 1] get that range; other float ranges are only reported in a comment;
- fields missing from some batches are optional;
- fields the spec format cannot describe (float8, complex, uint16 and other dtypes outside
  `DTYPE_NAMES`, sparse tensors, overlapping strided views) are left out, named on stderr and in the
  draft, which then ignores unexpected fields.
Values are read through a compact view: an expanded tensor's repeated axes are read once, so
inferring from `torch.zeros(1).expand(10**12)` costs one element, not a terabyte.
"""

from __future__ import annotations

import argparse
import itertools
import keyword
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tritoncheck.cli.commands import EXIT_OK, UsageError, guarded, load_batch, say
from tritoncheck.dtypes import DTYPE_NAMES, GROUPS, dtype_name
from tritoncheck.plan.lower import as_tensor
from tritoncheck.report import printable
from tritoncheck.spec.schema import SpecError

DIM_NAMES = ("L", "T", "S", "D", "E", "F", "G", "K", "M", "P", "Q", "R")
SHOWN = 4  # sizes listed per dim in a comment
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "infer",
        help="draft a spec from example batches",
        description="Print a draft YAML spec inferred from example batches (torch.save dicts, .safetensors, .npz). "
        "Every inferred bound carries a comment; review them before use. Exit code 2 on unreadable input.",
    )
    p.add_argument("batches", nargs="+", metavar="BATCH_FILE", help="example batches; a .pt file may hold a list of batches")
    p.add_argument("--name", default="inferred", help="the spec's name (default: inferred)")
    p.set_defaults(run=guarded(run_infer))


def run_infer(args: argparse.Namespace) -> int:
    batches: list[Mapping[str, Any]] = []
    for path in args.batches:
        data = load_batch(path)
        items = list(data) if isinstance(data, (list, tuple)) else [data]
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                where = path if len(items) == 1 else f"{path}[{i}]"
                raise UsageError(f"{where}: a batch must be a mapping of field name to tensor, got {type(item).__name__}")
            batches.append(item)
    text, left_out = _draft(batches, [Path(p).name for p in args.batches], name=args.name)
    for reason in left_out:
        say(f"tritoncheck infer: left out of the draft: {printable(reason)}", file=sys.stderr)
    sys.stdout.write(text)
    return EXIT_OK


@dataclass
class _Axis:
    field: str
    axis: int
    sizes: list[int | None]  # per batch; None where the field is absent


@dataclass
class _Group:
    axes: list[_Axis] = field(default_factory=list)
    sizes: list[int | None] = field(default_factory=list)
    name: str | int | None = None

    def accepts(self, ax: _Axis) -> bool:
        if any(a.field == ax.field for a in self.axes):
            return False  # one field never repeats a dim
        overlap = [(a, b) for a, b in zip(self.sizes, ax.sizes, strict=True) if a is not None and b is not None]
        return bool(overlap) and all(a == b for a, b in overlap)

    def add(self, ax: _Axis) -> None:
        self.axes.append(ax)
        if not self.sizes:
            self.sizes = ax.sizes[:]
        else:
            self.sizes = [a if a is not None else b for a, b in zip(self.sizes, ax.sizes, strict=True)]


def infer_yaml(batches: Sequence[Mapping[str, Any]], sources: Sequence[str] = (), name: str = "inferred") -> str:
    """A draft spec (YAML text with comments) that accepts every batch in `batches`."""
    return _draft(batches, sources, name)[0]


def _draft(batches: Sequence[Mapping[str, Any]], sources: Sequence[str], name: str) -> tuple[str, list[str]]:
    """The draft, and the fields left out of it, each with the reason."""
    if not batches:
        raise UsageError("infer needs at least one batch")
    n = len(batches)
    skipped: list[str] = []
    tensors: dict[str, list[torch.Tensor | None]] = {}  # as given: their shapes name the dims
    compact: dict[str, list[torch.Tensor | None]] = {}  # the same values, each stored element read once
    for key in dict.fromkeys(k for b in batches for k in b):
        if not isinstance(key, str) or not _IDENT.match(key) or keyword.iskeyword(key):
            skipped.append(f"{key!r} (not an identifier)")
            continue
        values, reason = _field_values(key, [b.get(key) for b in batches])
        if reason:
            skipped.append(f"{key} ({reason})")
            continue
        tensors[key] = values
        compact[key] = [None if v is None else _compact(v).detach().cpu() for v in values]
    if not any(next(v for v in vs if v is not None).dim() for vs in tensors.values()):
        raise UsageError("infer needs at least one field with a batch axis (a tensor of rank >= 1)")

    batch_dim, shapes = _name_dims(tensors, n)
    lines = [
        f"# Draft contract inferred by `tritoncheck infer` from {n} example batch(es)"
        + (f": {printable(', '.join(sources))}" if sources else "") + ".",
        "# Review every bound: integer maxima are exactly the observed ones, so widen them to the real",
        "# limits (e.g. vocab_size - 1, num_labels - 1) where you know them.",
        f"name: {_yaml_str(name)}",
        f"description: {_yaml_str(f'Inferred from {n} example batch(es); a draft to review.')}",
        f"batch_dim: {batch_dim}",
    ]
    if skipped:
        lines.append("unexpected_fields: ignore  # fields left out of the draft: " + printable(", ".join(skipped)))
    lines.append("fields:")
    rules: list[str] = []
    for key, values in compact.items():
        lines += _field_lines(key, values, shapes[key], n, rules)
    if rules:
        lines.append("rules:")
        lines += rules
    text = "\n".join(lines) + "\n"
    _self_check(text, batches)
    return text, skipped


def _field_values(key: str, raw: list[Any]) -> tuple[list[torch.Tensor | None], str]:
    """One field's tensors per batch (None where absent), or the reason the draft cannot describe it."""
    values: list[torch.Tensor | None] = []
    for value in raw:
        tensor, why = as_tensor(value) if value is not None else (None, "")
        if value is not None and tensor is None:
            return [], why
        values.append(tensor)
    present = [v for v in values if v is not None]
    unsupported = sorted({dtype_name(v.dtype) for v in present} - set(DTYPE_NAMES))
    if unsupported:
        return [], f"dtype {', '.join(unsupported)} is not one a spec can name; supported: {', '.join(DTYPE_NAMES)}"
    if len({v.dim() for v in present}) != 1:
        return [], "its rank differs between batches"
    if any(_compact(v).numel() > _span(v) for v in present):
        return [], "an overlapping strided view (as_strided); pass a .contiguous() copy"
    return values, ""


def _compact(t: torch.Tensor) -> torch.Tensor:
    """`t` with every expanded (stride 0) axis narrowed to one entry: the same values, read once.

    Per-sample any/all over the other axes is unchanged too, since the narrowed entries are copies.
    """
    for axis in range(t.dim()):
        if t.stride(axis) == 0 and t.shape[axis] > 1:
            t = t.narrow(axis, 0, 1)
    return t


def _span(t: torch.Tensor) -> int:
    """How many stored elements `t` reaches: fewer than its numel only for overlapping views."""
    if t.numel() == 0:
        return 0
    return 1 + sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride(), strict=True))


def _name_dims(tensors: dict[str, list[torch.Tensor | None]], n: int) -> tuple[str, dict[str, list[tuple[str | int, str]]]]:
    """The batch dim's name, and per field, per axis: its dim name (or fixed size) and a comment on the sizes seen."""
    axes = {k: [_Axis(k, i, [v.shape[i] if v is not None else None for v in vs]) for i in range(_rank(vs))]
            for k, vs in tensors.items()}
    firsts = _group([a[0] for a in axes.values() if a])
    batch = max(firsts, key=lambda g: len(g.axes))
    batch_dim = next(x for x in itertools.chain(("B", "N", "batch"), (f"B{i}" for i in itertools.count(1)))
                     if x not in tensors)
    batch.name = batch_dim
    rest = [a for g in firsts if g is not batch for a in g.axes] + [a for al in axes.values() for a in al[1:]]
    rest.sort(key=lambda a: (a.axis, list(axes).index(a.field)))
    names = iter(x for x in (*DIM_NAMES, *(f"D{i}" for i in range(1, 10_000))) if x not in tensors)
    groups = _group(rest)
    for g in groups:
        seen = {s for s in g.sizes if s is not None}
        g.name = next(names) if len(seen) > 1 or len({a.field for a in g.axes}) > 1 else seen.pop()
    out: dict[str, list[tuple[int, str | int, str]]] = {k: [] for k in tensors}
    for g in (batch, *groups):
        for a in g.axes:
            out[a.field].append((a.axis, g.name, _sizes_text(g.name, g.sizes, n)))
    return batch_dim, {k: [(name, text) for _, name, text in sorted(entries, key=lambda e: e[0])] for k, entries in out.items()}


def _group(axes: list[_Axis]) -> list[_Group]:
    groups: list[_Group] = []
    for ax in axes:
        target = next((g for g in groups if g.accepts(ax)), None)
        if target is None:
            target = _Group()
            groups.append(target)
        target.add(ax)
    return groups


def _sizes_text(name: str | int, sizes: list[int | None], n: int) -> str:
    if isinstance(name, int):
        return f"{name} in every batch"
    seen = [str(s) for s in sizes if s is not None]
    more = f", ... ({len(seen)} batches)" if len(seen) > SHOWN else ""
    return f"{name} seen as {', '.join(seen[:SHOWN])}{more}"


def _field_lines(key: str, values: list[torch.Tensor | None], shape: list[tuple[str | int, str]], n: int,
                 rules: list[str]) -> list[str]:
    present = [v for v in values if v is not None]
    seen = list(dict.fromkeys(dtype_name(v.dtype) for v in present))
    is_float = any(v.dtype.is_floating_point for v in present)
    is_bool = all(v.dtype == torch.bool for v in present)
    is_mask = "mask" in key.lower()
    if is_float:  # any float (mixed precision changes them), and whatever else was seen
        dtypes = ["float", *(d for d in seen if d not in GROUPS["float"])]
    else:
        dtypes = list(dict.fromkeys(["int64", "int32", "bool", *seen] if is_mask else seen))
    dnote = f"seen: {', '.join(seen)}" + ("; any float dtype accepted" if is_float else "")
    shape_text = ", ".join(str(s) for s, _ in shape)
    lines = [f"  {_yaml_key(key)}:", f"    dtype: [{', '.join(dtypes)}]  # {dnote}",
             f"    shape: [{shape_text}]" + (f"  # {'; '.join(c for _, c in shape)}" if shape else "  # a scalar")]
    if len(present) < n:
        lines.append(f"    optional: true  # missing from {n - len(present)} of {n} batches")
    nonempty = [v for v in present if v.numel()]
    if not nonempty:
        return lines + ["    # no values seen: no value bounds inferred"]
    # batch-level rules only when no example holds an empty tensor (any() over nothing is False)
    rules_ok = len(nonempty) == len(present)
    if is_float:
        lines += _float_lines(nonempty)
    elif not is_bool:
        lines += _int_lines(key, nonempty, shape, n, rules if rules_ok else [])
    return lines


def _float_lines(values: list[torch.Tensor]) -> list[str]:
    finite = all(bool(torch.isfinite(v).all()) for v in values)
    lines = []
    if finite:
        lines.append(f"    finite: true  # no NaN or Inf in {len(values)} batch(es)")
    else:
        lines.append("    # NaN or Inf seen in the examples: finite is not required")
    fin = [v[torch.isfinite(v)].double() for v in values]
    fin = [v for v in fin if v.numel()]
    if not fin:
        return lines
    if not finite:  # NaN and Inf fail any range, so bounds would reject the examples
        return [*lines, "    # no min/max inferred: the examples hold NaN or Inf"]
    lo, hi = min(float(v.min()) for v in fin), max(float(v.max()) for v in fin)
    if lo >= 0 and hi <= 1:
        lines += [f"    min: 0  # observed min {lo:.4g}; all values in [0, 1]", f"    max: 1  # observed max {hi:.4g}"]
    else:
        lines.append(f"    # observed values in [{lo:.4g}, {hi:.4g}]; no min/max inferred for floats outside [0, 1]")
    return lines


def _int_lines(key: str, values: list[torch.Tensor], shape: list[tuple[str | int, str]], n: int,
               rules: list[str]) -> list[str]:
    flat = [v.reshape(-1).long() for v in values]
    negatives = torch.unique(torch.cat([v[v < 0] for v in flat]))
    rest_lo = [int(v[v >= 0].min()) for v in flat if bool((v >= 0).any())]
    hi = max(int(v.max()) for v in flat)
    sentinel = int(negatives[0]) if len(negatives) == 1 and rest_lo else None
    if sentinel is None and not len(negatives):
        distinct = torch.unique(torch.cat(flat))
        if set(distinct.tolist()) <= {0, 1}:
            lines = [f"    values: [0, 1]  # only {sorted(distinct.tolist())} seen: a binary mask or flag"]
            if "attention_mask" in key and len(shape) == 2 and isinstance(shape[1][0], str):
                dim = shape[1][0]
                if all(bool((v.reshape(v.shape[0], -1) != 0).any(dim=1).all()) for v in values if v.dim() == 2):
                    rules += [f"  - rule: any({key} != 0, dim={dim})  # held for every sample of the examples",
                              "    code: no_attended_position"]
            return lines
    lines = []
    if sentinel is not None:
        lo = min(rest_lo)
        lines.append(f"    min: 0  # observed min {lo} apart from the sentinel {sentinel}, widened to 0")
        lines.append(f"    max: {hi}  # observed max over {n} batch(es)")
        lines.append(f"    allow: [{sentinel}]  # sentinel: the only negative value, below the rest (ignored positions)")
        # int64's minimum cannot be written in a rule (its digits are past int64 before the minus)
        if sentinel > torch.iinfo(torch.int64).min and all(bool((v != sentinel).any()) for v in flat):
            rules += [f"  - rule: any({key} != {sentinel})  # held in every example batch",
                      "    code: all_ignored", f"    hint: every {key} value is {sentinel} (all positions ignored)"]
        return lines
    lo = min(int(v.min()) for v in flat)
    if lo >= 0:
        lines.append(f"    min: 0  # observed min {lo}, widened to 0")
    else:
        lines.append(f"    min: {lo}  # observed min over {n} batch(es)")
    lines.append(f"    max: {hi}  # observed max over {n} batch(es)")
    return lines


def _yaml_key(key: str) -> str:
    """Quote names YAML would read as something else (`on`, `no`, `null` are booleans or None)."""
    import yaml

    return key if yaml.safe_load(key) == key else _yaml_str(key)


def _yaml_str(text: str) -> str:
    """`text` as one double-quoted YAML scalar: control characters and non-ASCII escaped, nothing interpreted."""
    import yaml

    return yaml.safe_dump(text, default_style='"', width=2**31).strip().removesuffix("...").strip()


def _rank(values: list[torch.Tensor | None]) -> int:
    return next(v for v in values if v is not None).dim()


def _self_check(text: str, batches: Sequence[Mapping[str, Any]]) -> None:
    """The draft must accept the examples it came from; a failure here is a bug in infer."""
    import yaml

    from tritoncheck.api import check
    from tritoncheck.spec.schema import spec_from_dict

    try:
        spec = spec_from_dict(yaml.safe_load(text), "<inferred draft>")
    except SpecError as exc:
        raise RuntimeError(f"the inferred draft does not load: {exc}") from exc  # exit 3: a bug in infer
    for i, batch in enumerate(batches):
        report = check(batch, spec, backend="torch")
        if any(v.code != "empty_batch" for v in report.violations):  # an empty example is always flagged
            raise RuntimeError(f"the inferred draft rejects example batch {i}:\n{report}")
