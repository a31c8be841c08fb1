"""Contracts derived from the model itself: `tc.spec_for(model)`.

The stages, each a module, each importing only downward:
- `signature`: which inputs `forward` accepts (every tensor parameter becomes a field);
- `hints`: the per-family knowledge (config, head class, first/last layers): names, messages and the
  rules no trace shows; also the fallback where a forward cannot be traced;
- `example`: a small real batch built from the signature and the hints;
- `trace`: one forward under a TorchFunctionMode recording which op bounds which field;
- `rules`: the findings folded into the spec, each with its origin (`to_yaml()` prints them);
- `probes`: clean-run checks, float dtype probes and the self-check;
- `cache`: one derivation per (model class, config, parameter shapes).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import logging
import re
import warnings
from typing import Any

import torch
from torch import nn

from tritoncheck import expr as _expr
from tritoncheck.dtypes import dtype_name
from tritoncheck.spec.schema import BatchSpec, ParamValue, SpecError, split_where
from tritoncheck.derive import cache
from tritoncheck.derive import example
from tritoncheck.derive import hints
from tritoncheck.derive import probes
from tritoncheck.derive import rules
from tritoncheck.derive import signature
from tritoncheck.derive import trace
logger = logging.getLogger("tritoncheck")
PROBLEM_TYPES = hints.PROBLEM_TYPES
LABEL_FIELDS = ("labels", "start_positions", "end_positions")
MASK_DTYPES = hints.MASK_DTYPES
EVERY_DTYPE = ["bool", "int", "float"]
COPY_LIMIT = 20_000_000  # parameters: a smaller model is traced on a copy
HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs",
         "_forward_hooks_always_called", "_backward_hooks", "_backward_pre_hooks")


def spec_for(model: Any, *, problem_type: str | None = None, **params: ParamValue) -> BatchSpec:
    """The batch contract of `model`, derived from what its forward does.

    Args:
        model: any `torch.nn.Module` (a Hugging Face model or your own). One forward on a small batch
            built from its signature is traced: each op that indexes with an input (an embedding, a
            gather, a loss target) bounds it, each tensor parameter of `forward` is a field; the
            per-family hints add names, messages and the rules no trace shows. Where the forward
            cannot be traced, today's list-based derivation is used and the spec says so (its name,
            `spec.derivation`, and the first line of `to_yaml()`). What could not be derived is named
            in the description and logged; a `UserWarning` only for a likely crash cause. Cached per
            (model class, config, parameter shapes): a second call costs no forward.
        problem_type: for a sequence-classification head, overrides `config.problem_type`
            ("single_label_classification", "multi_label_classification" or "regression").
        **params: override a derived parameter, such as `max_position_embeddings=8192`, or
            `dtype="float"` for float inputs under autocast (by default they must have the dtype of
            the model's parameters where the model does not cast them itself).

    Raises:
        SpecError: nothing at all could be derived, or an unknown parameter or problem type.
    """
    if problem_type is not None and problem_type not in PROBLEM_TYPES:
        raise SpecError(f"problem_type must be one of {', '.join(PROBLEM_TYPES)}, got {problem_type!r}")
    if not isinstance(model, nn.Module):
        raise TypeError(f"spec_for needs a torch.nn.Module (a Hugging Face model or your own), got {type(model).__name__}")
    meta = next((n for n, t in itertools.chain(model.named_parameters(), model.named_buffers()) if t.is_meta), None)
    if meta is not None:  # the probes run the forward and read its values, which a meta tensor has none of
        name = type(model).__name__
        hf = (", or load a built-in spec: tc.load_spec(name, config=model.config), the names listed by "
              "`tritoncheck specs`") if hasattr(model, "config") else ""
        raise SpecError(f"spec_for({name}) runs the model's forward on small batches and needs its weights, but they "
                        f"are on the meta device ({meta}; built under torch.device('meta')): materialize the model "
                        f"first (model.to_empty(device='cpu'), then load or initialise its weights){hf}")
    key = cache.key(model, problem_type)
    hit = cache.get(key)
    if hit is None:
        with warnings.catch_warnings():  # the model's own warnings on probe batches are not the user's
            warnings.simplefilter("ignore")
            hit = _derive(model, problem_type)
        cache.put(key, hit)
    spec, notes = hit
    _tell(type(model).__name__, notes)
    return spec.with_params(**params)


def _tell(name: str, notes: list[tuple[str, bool]]) -> None:
    if not notes:
        return
    logger.info("spec_for(%s): could not derive: %s", name, "; ".join(n for n, _ in notes))
    crashes = [n for n, crash in notes if crash]
    if crashes:  # harmless gaps (a float input's range, no length bound where nothing overflows) are only logged
        warnings.warn(f"spec_for({name}): left unchecked, a likely crash cause: " + "; ".join(crashes), UserWarning,
                      stacklevel=3)


def _derive(model: nn.Module, problem_type: str | None) -> tuple[rules.DerivedSpec, list[tuple[str, bool]]]:
    name = type(model).__name__
    try:
        data, notes = hints.derive(model, problem_type)
        failure: SpecError | None = None
    except SpecError as exc:
        data, notes, failure = None, [], exc
    accepted = signature.tensor_params(model)
    hf = hasattr(getattr(model, "config", None), "model_type")
    open_ended = not hf and signature.forward_args(model)[1]  # a plain forward taking **kwargs takes any key
    base = copy.deepcopy(data) if data is not None else {
        "name": f"{name}-derived", "description": f"Derived by tc.spec_for from a trace of {name}.forward.",
        "params": {}, "fields": {}, "rules": []}
    messages: dict[str, dict] = {}
    if not hf and data is not None:
        _rename_input(data, accepted)  # the fallback keeps the hints' guess of the input
        messages = _drop_input_guess(base, accepted)  # the trace shapes it by the layer that takes it
    with _untouched(model) as copy_of_model:
        derivation = _Tracing(copy_of_model, base, accepted, hf, messages)
        traced = derivation.run()
    if traced is None:
        if data is None:
            raise failure or SpecError(f"spec_for({name}): nothing to derive")
        how = (f"derived by fallback: the per-family lists only ({name}.forward could not be traced on a batch built "
               f"from its signature: {derivation.why})")
        data["name"] = f"{data['name']} (derived by fallback)"
        data["description"] += f" Derived by fallback: {derivation.why}."
        unknown = [p.name for p in accepted if p.name not in data["fields"]]
        if unknown:  # the forward takes them: never an unexpected_field, but nothing of them is checked
            data["unexpected_fields"] = "ignore"
            notes = [*notes, (f"{', '.join(unknown)} (no batch built from the signature ran: let through unchecked)",
                              True)]
        return rules.build(_described(data, notes, signature.flags(model), open_ended), {}, how, f"spec_for({name})"), notes
    data, origins, dropped = traced
    if failure is not None:  # the hints knew nothing; the trace did: their complaint is void
        notes = []
    if not hf:  # the trace found the input and probed its sizes: only the hints' notes on labels and ranges stand
        notes = [("the value range of inputs (only finiteness is checked)", n[1]) if "minimum image size" in n[0] else n
                 for n in notes if not n[0].startswith("the input (")]
        data["description"] = f"Derived by tc.spec_for from a trace of {name}.forward." + (
            f" labels: one class index per sample of the final Linear's {data['params']['num_classes']} outputs, "
            "for a loss outside the model." if "labels" in data["fields"] and "num_classes" in data["params"]
            and "labels" not in derivation.probed else "")
    if "labels" in derivation.probed:  # the hints' "labels (no known head)" is void: a probe fed them to the loss
        notes = [n for n in notes if n[0] != "labels" and not n[0].startswith("labels (")]
    if derivation.min_sized:  # the hints' "the smallest image size" is void
        notes = [n for n in notes if n[0] != "the smallest image size the model takes"]
    if derivation.length_probed:  # the hints' "no bound on L" is void
        notes = [n for n in notes if "bound on L" not in n[0]]
    data["description"] += (f" Traced: one forward of {name} on a batch of "
                            + ", ".join(f"{k} {list(v.shape)}" for k, v in derivation.batch.items()) + ".")
    if dropped:
        data["description"] += " Dropped by the self-check (they rejected a batch the model ran cleanly): " + "; ".join(dropped) + "."
    how = (f"derived by tc.spec_for from a trace of {name}.forward ({derivation.forwards} forwards); "
           "'#' lines name the module and op each bound came from")
    spec = rules.build(_described(data, notes, signature.flags(model), open_ended), origins, how, f"spec_for({name})")
    spec._example = {k: v.detach().cpu() for k, v in derivation.batch.items()}
    return spec, notes


@contextlib.contextmanager
def _untouched(model: nn.Module):
    """The model to trace: a copy where it is small (forwards mutate some models: sinusoidal tables regrow,
    Swin rewrites its window size), the model itself otherwise; its config's values are restored after
    (heads set `config.problem_type` on their first forward with labels)."""
    config = getattr(model, "config", None)
    saved = dict(vars(config)) if config is not None and hasattr(config, "__dict__") else None
    small = sum(p.numel() for p in model.parameters()) <= COPY_LIMIT
    target = copy.deepcopy(model) if small else model
    hooks = [(m, name, getattr(m, name)) for m in target.modules() for name in HOOKS if getattr(m, name, None)]
    for m, name, _ in hooks:  # the user's hooks (a tc.guard, a counter, a logger) never see the probe forwards
        setattr(m, name, type(getattr(m, name))())
    try:
        yield target
    finally:
        for m, name, value in hooks:
            setattr(m, name, value)
        if saved is not None:
            vars(config).clear()
            vars(config).update(saved)


def _module_state(model: nn.Module) -> list[tuple[nn.Module, dict[str, Any], dict[str, Any]]]:
    """Each module's own plain attributes (copies of lists and dicts) and its buffers, by reference: what a
    forward may rebind (a window size, a regrown sinusoidal table)."""
    plain = (list, dict, set)
    return [(m, {k: copy.copy(v) if isinstance(v, plain) else v for k, v in vars(m).items()
                 if not k.startswith("_") and not isinstance(v, (nn.Module, torch.Tensor))}, dict(m._buffers))
            for m in model.modules()]


def _restore_modules(state: list[tuple[nn.Module, dict[str, Any], dict[str, Any]]]) -> None:
    for m, attributes, buffers in state:
        for k, v in attributes.items():
            if vars(m).get(k, object()) is not v:
                vars(m)[k] = v
        if m._buffers.keys() != buffers.keys() or any(m._buffers[k] is not t for k, t in buffers.items()):
            m._buffers.clear()
            m._buffers.update(buffers)


def _described(data: dict[str, Any], notes: list[tuple[str, bool]], flags: list[str], open_ended: bool) -> dict[str, Any]:
    """`data` with its notes in the description, as options the forward's flags that are not fields, and, for a
    plain module whose forward takes `**kwargs` (`open_ended`), other keys let through as the forward takes them."""
    options = [f for f in flags if f not in data["fields"]]
    if options:
        data["options"] = options
    if open_ended and data.get("unexpected_fields") != "ignore":
        data["unexpected_fields"] = "ignore"
        data["description"] += " Keys the contract does not name are let through: forward takes **kwargs."
    if notes:
        data["description"] += " Not derived (add these to the contract yourself): " + "; ".join(n for n, _ in notes) + "."
    return data


def _drop_input_guess(data: dict[str, Any], accepted: list[signature.Param]) -> dict[str, dict]:
    """Remove the hints' guess of a plain module's input from `data`; its messages, by forward's name."""
    required = [p.name for p in accepted if p.required]
    guessed = next((k for k in (*required[:1], "input_ids", "inputs") if k in data["fields"]), None)
    if guessed is None or not required:
        return {}
    return {required[0]: data["fields"].pop(guessed).get("hints", {})}


def _rename_input(data: dict[str, Any], accepted: list[signature.Param]) -> None:
    """A plain module's hint names its input `input_ids` or `inputs`; the contract uses forward's own name
    (what `tc.guard` binds a call's arguments to)."""
    required = [p.name for p in accepted if p.required]
    guessed = [k for k in ("input_ids", "inputs") if k in data["fields"]]
    if required and guessed and guessed[0] != required[0] and required[0] not in data["fields"]:
        data["fields"] = {(required[0] if k == guessed[0] else k): v for k, v in data["fields"].items()}
        for r in data["rules"]:
            r.setdefault("field", required[0]) if guessed[0] in r["rule"] else None


class _Tracing:
    """Find a batch the forward runs cleanly on, trace it, and fold what it shows into the spec."""

    def __init__(self, model: nn.Module, data: dict[str, Any], accepted: list[signature.Param], hf: bool,
                 messages: dict[str, dict]):
        self.model, self.data, self.hf, self.messages = model, data, hf, messages
        self.accepted = accepted
        self.names = {p.name for p in accepted}
        # a training step's forward: no generation cache (hybrid and MLA caches refuse some batches in eval mode)
        self.flags = {"use_cache": False} if "use_cache" in signature.forward_args(model)[0] else {}
        param = next((p for p in model.parameters() if p.is_floating_point()), None)
        self.compute = param.dtype if param is not None else torch.get_default_dtype()
        self.device = param.device if param is not None else torch.device("cpu")
        self.why = "no batch built from its signature ran cleanly"
        self.batch: dict[str, torch.Tensor] = {}
        self.forwards = 0
        self.shapes: dict[str, tuple[str, list[int | str]]] = {}
        self.origins: dict[str, list[str]] = {}  # spec path -> where its bound came from
        self.probed: list[str] = []  # optional inputs no hint describes that a probe forward fed
        self.first: dict[str, str] = {}  # input -> the module that first took it
        self.weighted = False  # whether a layer with weights took an input no hint describes
        self.length_probed = False  # whether probe forwards found a length limit
        self.min_sized = False  # whether probe forwards found a smallest size of some dim
        self.limit: tuple[str, int, list[str]] | None = None  # (dim, the longest that runs, inputs giving positions)
        self.hinted = set(data["fields"])  # fields the per-family lists describe (their dtypes were measured)

    def call(self, batch: dict[str, torch.Tensor]) -> Any:
        """One forward; the config and every module's own attributes and buffers are restored after it (a head
        sets `config.problem_type` from the first labels it sees: a float probe of `labels` would make every later
        int one a multi-label target; Swin shrinks its window to a small probe image, and every later forward of
        another size, the user's own where the model is too large to copy, then fails)."""
        self.forwards += 1
        config = getattr(self.model, "config", None)
        saved = dict(vars(config)) if config is not None and hasattr(config, "__dict__") else None
        modules = _module_state(self.model)
        try:
            return self.model(**{k: v for k, v in batch.items() if k in self.names}, **self.flags)
        finally:
            if saved is not None:
                vars(config).clear()
                vars(config).update(saved)
            _restore_modules(modules)

    def run(self) -> tuple[dict[str, Any], dict[str, list[str]], list[str]] | None:
        """(spec mapping, origins, what the self-check dropped), or None (`why` says why) where no batch built
        from the signature runs cleanly or the trace shows nothing."""
        if not self.accepted:
            self.why = "forward takes no named tensor parameter"
            return None
        was_training = self.model.training
        self.model.eval()  # dropout off: the trace and probes see one deterministic forward
        try:
            batch = self._find_batch()
            if batch is None:
                return None
            self.batch = batch
            return self._fold(batch)
        finally:
            self.model.train(was_training)

    def _candidates(self) -> list[dict[str, dict]]:
        fields = {k: v for k, v in self.data["fields"].items() if k in self.names}
        required = {p.name for p in self.accepted if p.required}
        labelled = {k: v for k, v in fields.items() if not v.get("optional") or k in required or k in LABEL_FIELDS}
        bare = {k: v for k, v in fields.items() if not v.get("optional") or k in required}
        out = []
        for subset in (fields, labelled, bare, _choices(labelled)):
            if subset not in out:
                out.append(subset)
        return out

    def _find_batch(self) -> dict[str, torch.Tensor] | None:
        for sizes in example.SIZES:
            batch = self._try(sizes)
            if batch is not None:
                return batch
        why = self.why
        batch = self._try(example.ONE)
        if batch is None:
            self.why = why
            return None
        first = next(iter(batch))
        self.data["rules"].append({"rule": "B <= 1", "code": "dim_bound", "field": first,
                                   "hint": f"the model raises on every batch of {example.B} samples ({why}); "
                                   "pass one sample per batch, or fix the config"})
        self.origins["rules.B <= 1"] = [f"probe forwards: every batch of {example.B} samples raises, one sample runs"]
        return batch

    def _try(self, sizes: dict[str, int]) -> dict[str, torch.Tensor] | None:
        for subset in self._candidates():
            made = example.from_fields(subset, self.data["params"], self.data["rules"], sizes, self.compute)
            batch = self._complete(made, sizes)
            if batch is not None:
                self.data["fields"].update(subset)  # the shapes that ran (a choices axis, where one was needed)
                return batch
        return None

    def _complete(self, batch: dict[str, torch.Tensor], sizes: dict[str, int]) -> dict[str, torch.Tensor] | None:
        """`batch` plus the required inputs no hint describes, each shaped by the module that first takes it."""
        missing = [p.name for p in self.accepted if p.required and p.name not in batch]
        shapes = {p: ("int", ["B", "L"]) for p in missing}
        # ids the first layer takes at any rank: one id per sample for some of them (a two-tower model's item
        # ids [B] beside its query ids [B, L]), the fewest first
        flattenings = iter([set(c) for k in range(1, len(missing) + 1) for c in itertools.combinations(missing, k)])
        for _ in range(3 * len(missing) + 2 ** min(len(missing), 6)):
            made = {p: example.make(*shapes[p], sizes, self.compute, seed=i) for i, p in enumerate(missing)}
            # on the model's device from the start: the trace follows these very tensors
            full = {k: v.to(self.device) for k, v in {**batch, **made}.items()}
            watcher = example.FirstUse(full)
            failure = watcher.watch(lambda full=full: self.call(full)) or probes.clean(self.call, full)
            if failure is None:
                self.shapes = {p: shapes[p] for p in missing}
                paths = {id(m): n for n, m in self.model.named_modules()}
                self.first = {p: paths.get(id(m), type(m).__name__) for p, m in watcher.first.items()}
                self.weighted = any(next(m.parameters(), None) is not None for m in watcher.first.values())
                return full
            self.why = f"{type(failure).__name__}: {str(failure).splitlines()[0][:200] if str(failure) else ''}"
            changed = False
            for p in missing:
                module = watcher.first.get(p)
                want = example.first_use_shape(module) if module is not None else None
                if want is not None and want != shapes[p]:
                    shapes[p], changed = want, True
            if not changed:
                ids = [p for p in missing if shapes[p] in (("int", ["B", "L"]), ("int", ["B"]))]
                flat = next((f for f in flattenings if f <= set(ids)), None)
                if flat is None:
                    return None
                shapes.update({p: ("int", ["B"] if p in flat else ["B", "L"]) for p in ids})
        return None

    def _fold(self, batch: dict[str, torch.Tensor]) -> tuple[dict[str, Any], dict[str, list[str]], list[str]] | None:
        data = self.data
        fields = data["fields"]
        for p, (kind, shape) in self.shapes.items():
            if "L" in shape and any("L" in f.get("shape", ()) for f in fields.values()):
                shape = self._own_dims(p, batch, shape)  # a second sequence of its own length (seq2seq's target)
                self.shapes[p] = (kind, shape)
            elif shape == ["B"] and any(q != p and batch[q].dim() for q in self.shapes):
                shape = self._own_length(p, batch)  # flat ids of their own count (an EmbeddingBag's, with offsets)
                self.shapes[p] = (kind, shape)
            fields[p] = self._new_field(p, kind, shape, batch[p])
        found = trace.run(self.model, lambda: self.call(batch), batch)
        self.forwards += 1
        if not (found.findings or self.weighted or self.data["fields"].keys() - self.shapes.keys()):
            self.why = "nothing to derive: no op bounds an input, and no layer with weights takes one"
            return None
        origins = self.origins
        for p, kind_shape in self.shapes.items():
            origins[f"fields.{p}"] = [f"shape {kind_shape[1]}: the input of {self.first.get(p) or 'forward'}"]
        findings = found.findings + self._optional_inputs(batch, fields, origins)
        rules.merge_findings(data, findings, origins, batch)
        floats = [p for p in batch if batch[p].is_floating_point()]
        for p, dtypes in probes.float_dtypes(self.call, batch, floats).items():
            self.forwards += 1
            self.forwards += 1
            if p in self.hinted and dtypes != ["float"] and len(dtypes) == 1:
                continue  # the hints' dtype stands (a parameter reference, or a list the forward was not fed)
            # the probes try float dtypes only: integer ones the hints list stand (regression targets a loss casts;
            # an image is never probed with integers: a ViT casts them too, and trains on unnormalised pixels)
            ints = [d for d in fields[p].get("dtype", []) if p in self.hinted and d in ("int64", "int32")]
            fields[p]["dtype"] = dtypes + ints
            origins.setdefault(f"fields.{p}", []).append(
                ("dtype: the forward runs on every float dtype (it casts)" if dtypes == ["float"]
                 else f"dtype: the forward runs on {', '.join(dtypes)} and raises on the other float dtypes")
                + (f"; {', '.join(ints)} as the hints say" if ints else ""))
        for p in probes.nan_ignored(self.call, batch, floats):
            self.forwards += 1
            fields[p].setdefault("severity", {})["non_finite"] = "warning"
            origins[f"fields.{p}"].append("non_finite: a warning, the forward runs cleanly with a NaN in its first value")
        self._probe_values(batch, findings, origins)
        self._finite_when_float(batch, origins)
        self._max_length(batch, findings, found.tables or {}, origins)
        self._counts(batch, findings, origins)
        self._value_sets(batch, findings, origins)
        self._empty_rows(batch, origins)
        self._ranks(batch, origins)
        for p, messages in self.messages.items():
            if p in fields and fields[p].get("max") is not None and messages:
                fields[p].setdefault("hints", {}).update(messages)
        if not self.hf:
            self._own_loss(fields, findings)
            self._min_sizes(batch, origins)
        elif "pixel_values" in batch:  # an image model of any size (Swin, ConvNeXt): its smallest H and W
            self._min_sizes(batch, origins, only="pixel_values")
        self._accept_the_rest(fields, origins)
        source = f"spec_for({type(self.model).__name__})"
        dropped = probes.self_check(data, [batch], lambda d: rules.build(d, {}, "", source))
        return data, origins, dropped

    def _finite_when_float(self, batch: dict[str, torch.Tensor], origins: dict[str, list[str]]) -> None:
        """An integer field the forward also takes as float (ids it casts with `.long()`, a regression target)
        gets `finite`: a NaN becomes int64's minimum as an index, and a NaN loss as a target; a warning only
        where the forward runs cleanly with a NaN there."""
        fields = self.data["fields"]
        cast = [p for p, t in batch.items() if not t.is_floating_point() and t.dtype != torch.bool
                and "float" in fields[p].get("dtype", ()) and not fields[p].get("finite")]
        as_float = {**batch, **{p: batch[p].to(self.compute) for p in cast}}
        harmless = set(probes.nan_ignored(self.call, as_float, cast))
        self.forwards += len(cast)
        for p in cast:
            fields[p]["finite"] = True
            if p in harmless:
                fields[p].setdefault("severity", {})["non_finite"] = "warning"
            origins.setdefault(f"fields.{p}", []).append(
                "finite: the forward takes it as float too, and " + (
                    "runs cleanly with a NaN (a warning)" if p in harmless else "a NaN there breaks it"))

    def _probe_values(self, batch: dict[str, torch.Tensor], findings: list[trace.Finding],
                      origins: dict[str, list[str]]) -> None:
        """Integer fields: the dtypes the forward takes; for a bound no traced op puts on the field (a hint's),
        a warning instead of an error on each side the forward runs past."""
        fields, params = self.data["fields"], self.data["params"]
        indexed = {f.field for f in findings}
        for name, t in batch.items():
            if t.is_floating_point() or t.dtype == torch.bool:
                continue
            field = fields[name]
            dtypes = probes.int_dtypes(self.call, batch, name, name in indexed)
            self.forwards += 3
            if set(field["dtype"]) <= {"int64", "int32"} or name not in self.hinted or set(dtypes) - set(field["dtype"]):
                field["dtype"] = sorted(set(field["dtype"]) | set(dtypes)) if name in self.hinted else dtypes
            if name in indexed or name in LABEL_FIELDS:
                continue
            low, high = example.evaluate(field.get("min"), params), example.evaluate(field.get("max"), params)
            soft = probes.value_severity(self.call, batch, name, low, high)
            self.forwards += 2
            for code in soft:
                if field.get("severity", {}).get(code) != "warning":
                    field.setdefault("severity", {})[code] = "warning"
                    origins.setdefault(f"fields.{name}", []).append(
                        f"{code}: a warning, the forward runs past it (no op indexes with {name})")

    def _new_field(self, name: str, kind: str, shape: list[int | str], t: torch.Tensor) -> dict[str, Any]:
        required = any(q.required for q in self.accepted if q.name == name)
        if kind == "float":
            return {"dtype": [dtype_name(t.dtype)], "shape": shape, "optional": not required, "finite": True}
        return {"dtype": list(hints.INT_IDS), "shape": shape, "optional": not required}

    def _traced(self, batch: dict[str, torch.Tensor]) -> trace.Trace | None:
        """The trace of one forward on `batch`, or None where it does not run cleanly."""
        try:
            with torch.no_grad():
                found = trace.run(self.model, lambda: self.call(batch), batch)
        except Exception:  # the probe's answer: this input does not fit
            return None
        return found if probes.finite(found.output) else None

    def _optional_inputs(self, batch: dict[str, torch.Tensor], fields: dict[str, dict],
                         origins: dict[str, list[str]]) -> list[trace.Finding]:
        """Try each optional tensor parameter no hint describes (and `labels` where the hints only guessed them:
        a plain module's, or any the example could not feed), shaped like an input the batch has; one the forward
        runs with and reads joins the batch (sharing that input's dims unless a longer one runs too). Labels try
        integer shapes first: one per sample, one per token, one per pixel (`[B, H, W]` of an image input)."""
        like = {kind: next((k for k, t in batch.items() if t.dim() >= 2 and t.is_floating_point() == (kind == "float")), None)
                for kind in ("int", "float")}
        like["spatial"] = next((k for k, t in batch.items() if t.dim() >= 3 and t.is_floating_point()), None)
        classes = self.data["params"].get("num_classes")
        out: list[trace.Finding] = []
        for p in self.accepted:
            guess = p.name == "labels" and (not self.hf or p.name not in batch)
            if p.required or (p.name in fields and not guess) or "head_mask" in p.name:
                continue
            for kind in ("flat", "int", "spatial", "multi", "float") if guess else ("int", "float", "flat"):
                source = like[kind] if kind == "spatial" else like.get(kind) or like["int"]  # a float per token: like the ids
                template = batch.get(source or "") if kind not in ("flat", "multi") else None
                shape = fields[source]["shape"] if template is not None else ["B"]
                if kind not in ("flat", "multi") and template is None or kind == "multi" and not isinstance(classes, int):
                    continue
                size = list(template.shape) if template is not None else [example.B]
                if kind == "spatial":  # [B, C, H, W] -> [B, H, W]
                    shape, size = [shape[0], *shape[2:]], [size[0], *size[2:]]
                if kind == "multi":  # a float per class of the final Linear: a multi-label (BCE) target
                    shape, size = ["B", "num_classes"], [example.B, classes]
                made = example.make("float" if kind in ("float", "multi") else "int", size, {"*": 1}, self.compute, seed=7).to(self.device)
                if kind == "multi":
                    made = made.sigmoid()  # targets in (0, 1), as a BCE's are
                found = self._traced({**batch, p.name: made})
                self.forwards += 1
                if found is None or p.name not in found.used:
                    continue
                made, found = self._fewest_axes(p.name, batch, made, found)
                batch[p.name] = made
                self.probed.append(p.name)
                shape = self._own_dims(p.name, batch, list(shape)[:made.dim()])
                fields[p.name] = self._new_field(p.name, "float" if kind in ("float", "multi") else "int", shape, made)
                origins[f"fields.{p.name}"] = [f"shape {shape}: probed (the forward runs with it and reads it)"]
                out += [f for f in found.findings if f.field == p.name]
                break
        return out + self._inputs_together(batch, fields, origins)

    def _inputs_together(self, batch: dict[str, torch.Tensor], fields: dict[str, dict],
                         origins: dict[str, list[str]]) -> list[trace.Finding]:
        """The optional inputs no probe fed alone, tried all at once, one integer per sample: a multi-task
        model's label fields, which its loss reads only together (each alone made the forward raise)."""
        left = [p.name for p in self.accepted if not p.required and p.name not in batch and p.name not in fields
                and "head_mask" not in p.name]
        if len(left) < 2:
            return []
        made = {name: example.make("int", [example.B], {"*": 1}, self.compute, seed=7 + i).to(self.device)
                for i, name in enumerate(left)}
        found = self._traced({**batch, **made})
        self.forwards += 1
        if found is None or not set(left) <= found.used:
            return []
        for name in left:
            batch[name] = made[name]
            self.probed.append(name)
            fields[name] = self._new_field(name, "int", ["B"], made[name])
            origins[f"fields.{name}"] = [f"shape ['B']: probed with {', '.join(n for n in left if n != name)} "
                                         "(the forward runs with them together and reads each)"]
        return [f for f in found.findings if f.field in left]

    def _fewest_axes(self, name: str, batch: dict[str, torch.Tensor], made: torch.Tensor,
                     found: trace.Trace) -> tuple[torch.Tensor, trace.Trace]:
        """`made` with its last axes dropped while the forward still runs with it and reads it: a borrowed shape
        has as many axes as the input it copies, but a per-sample input (XLM's `lengths`, `[B]`) takes fewer."""
        while made.dim() > 1:
            fewer = made[..., 0].contiguous()
            self.forwards += 1
            again = self._traced({**batch, name: fewer})
            if again is None or name not in again.used:
                break
            made, found = fewer, again
        return made, found

    def _own_dims(self, name: str, batch: dict[str, torch.Tensor], shape: list[int | str]) -> list[int | str]:
        """`shape` (borrowed from another input), with its dims made the field's own where a longer one runs too."""
        t = batch[name]
        if t.dim() < 2:
            return list(shape)
        longer = torch.cat([t, t[:, -1:]], dim=1)
        self.forwards += 1
        if self._traced({**batch, name: longer}) is None:
            return list(shape)
        return ["B", *(f"{name}_{i}" for i in range(1, t.dim()))]

    def _own_length(self, name: str, batch: dict[str, torch.Tensor]) -> list[int | str]:
        """A flat input's axis: the batch dim, or its own where the forward runs with one element more (the
        flat ids an `nn.EmbeddingBag` takes with offsets: N ids, however many samples)."""
        t = batch[name]
        self.forwards += 1
        longer = self._traced({**batch, name: torch.cat([t, t[-1:]])})
        return [f"{name}_0"] if longer is not None and name in longer.used else ["B"]

    def _own_loss(self, fields: dict[str, dict], findings: list[trace.Finding]) -> None:
        """A plain module that computes its loss from an input of its own: the hints' `labels` (a guess from the
        final Linear, for a loss outside the model) is not its target."""
        if "labels" in fields and "labels" not in self.names and any(f.target for f in findings):
            del fields["labels"]
            self.data["params"].pop("num_classes", None)

    def _min_sizes(self, batch: dict[str, torch.Tensor], origins: dict[str, list[str]], only: str | None = None) -> None:
        """Each dim of a plain module's inputs (or of the field `only`) without a lower bound yet: the smallest
        size the forward takes, by bisection over probe forwards (conv and pool stacks raise on inputs shorter
        than their window). Each dim is cut alone, the others at the example's size."""
        fields, params = self.data["fields"], self.data["params"]
        dims: dict[str, tuple[str, int]] = {}  # dim -> (first field, example size)
        for name, t in batch.items() if only is None else [(only, batch[only])]:
            for axis, entry in enumerate(fields[name]["shape"]):
                if isinstance(entry, str) and entry != "B" and entry.isidentifier() and entry not in params:
                    dims.setdefault(entry, (name, t.shape[axis]))
        for dim, (first, size) in dims.items():
            listed = [r for r in self.data["rules"] if r["rule"].startswith(f"{dim} >= ")]
            wrong = [r for r in listed if (at := example.evaluate(r["rule"].split(" >= ", 1)[1], params)) is not None
                     and size < at]  # the lists' bound past a size the forward just ran (parallel convolutions)
            for r in wrong:
                self.data["rules"].remove(r)
                used = set().union(*(_rule_names(other["rule"]) for other in self.data["rules"]))
                for k in _rule_names(r["rule"]) & params.keys() - used:
                    params.pop(k)  # (the lists' min_length, which no other rule names)
            if (listed and not wrong) or size <= 1:
                continue

            def runs(n: int, dim: str = dim) -> bool:
                self.forwards += 1
                return probes.clean_unmasked(self.call, _narrowed(batch, fields, dim, n)) is None

            if runs(1):
                continue
            low, high = 1, size  # low raises, high runs
            while high - low > 1:
                mid = (low + high) // 2
                low, high = (low, mid) if runs(mid) else (mid, high)
            rule = f"{dim} >= {high}"
            self.min_sized = True
            self.data["rules"].append({"rule": rule, "code": "dim_bound", "field": first,
                                       "hint": f"shorter than the smallest {dim} the model takes; pad short inputs"})
            origins[f"rules.{rule}"] = [f"probe forwards: {dim} = {high} runs, {dim} = {low} raises",
                                        *(f"replaces the lists' {r['rule']} (the forward ran at {dim} = {size})" for r in wrong)]

    def _max_length(self, batch: dict[str, torch.Tensor], findings: list[trace.Finding], tables: dict[int, str],
                    origins: dict[str, list[str]]) -> None:
        """A length limit from the model. Candidates: each embedding table the trace saw indexed by positions (not by
        a field's own values), and each table an optional input indexes (`position_ids`: left out, the model makes
        its own positions). Probe forwards without the inputs that index that table, at lengths up to its rows,
        find the longest sequence that runs, and the next one must raise. A limit the lists give stands where the
        model takes it (the probe is noted in its origin); one longer than the model takes is replaced; the lists'
        RoBERTa-style rule (non-pad tokens) is left alone."""
        fields, params = self.data["fields"], self.data["params"]

        def seq_dim(name: str) -> str | None:  # the last named axis: L of [B, L] and of [B, C, L]
            shape = fields[name]["shape"]
            last = shape[-1] if len(shape) >= 2 and shape[0] == "B" else None
            return last if isinstance(last, str) and last.isidentifier() and last not in params else None

        first = next((k for k, t in batch.items() if t.dim() >= 2 and t.dtype in (torch.int32, torch.int64) and seq_dim(k)), None)
        if first is None:
            return
        dim, size = seq_dim(first), batch[first].shape[-1]
        if any(r.get("severity", "error") == "error" and re.match(rf"sum\(.*dim={dim}\) <=", r["rule"]) for r in self.data["rules"]):
            return  # RoBERTa-style: the lists count non-pad tokens, finer than any length probe
        listed = next((r for r in self.data["rules"] if r.get("severity", "error") == "error"
                       and re.match(rf"{dim} <= ", r["rule"])), None)
        listed_at = example.evaluate(split_where(listed["rule"])[0].split(" <= ", 1)[1], params) if listed else None
        given: dict[int, list[str]] = {}  # rows -> the optional inputs that index a table of that many rows
        for f in findings:
            if (f.high is not None and f.target is None and f.field != first and fields.get(f.field, {}).get("optional")
                    and dim in fields[f.field]["shape"] and f.field not in given.get(f.high + 1, [])):
                given.setdefault(f.high + 1, []).append(f.field)
                tables = {f.high + 1: f.origin, **tables}
        candidates = sorted(n for n in tables if n >= size)

        def runs(n: int, rows: int) -> bool:
            base = {k: v for k, v in batch.items() if k not in given.get(rows, [])}
            return probes.clean(self.call, _resized(base, fields, dim, n)) is None

        if candidates and not runs(size + 1, candidates[-1]):
            return  # a batch made one longer does not run: these probes cannot tell a table's limit
        for rows in candidates:
            if runs(rows + 1, rows):
                continue
            low, high = size, rows + 1  # low runs, high raises
            if runs(rows, rows):
                low = rows
            while high - low > 1:
                mid = (low + high) // 2
                low, high = (mid, high) if runs(mid, rows) else (low, mid)
            explicit = given.get(rows, [])[:1]
            if explicit and probes.clean(self.call, _resized(batch, fields, dim, low + 1)) is not None:
                explicit = []  # it raises past `low` with positions given too (GPT-Neo's causal-mask buffer)
            unless = "".join(f" where not present({f})" for f in explicit)
            self.limit = (dim, low, given.get(rows, []))
            if listed is not None and (not isinstance(listed_at, int) or (low >= listed_at and (unless or " where " not in listed["rule"]))):
                origins.setdefault(f"rules.{listed['rule']}", []).append(
                    f"probe forwards: {dim} = {low} runs, {dim} = {low + 1} raises")
                return  # the lists' limit holds (or is stricter)
            ints = {k: v for k, v in params.items() if isinstance(v, int) and not isinstance(v, bool)}
            param = next((k for k, v in ints.items() if v == low), None)
            table = next((k for k, v in ints.items() if v == rows), None)
            bound = param or (f"{table} - {rows - low}" if table else str(low))
            rule = f"{dim} <= {bound}{unless}"
            if listed is not None:
                self.data["rules"].remove(listed)
            self.data["rules"].append({"rule": rule, "code": "sequence_too_long", "field": first,
                                       "hint": f"the model raises past {dim} = {low}; truncate (truncation=True, max_length=...)"})
            origins[f"rules.{rule}"] = [
                *([f"replaces the per-family lists' {listed['rule']}"] if listed else []),
                *([f"it raises past {dim} = {low} with {', '.join(given[rows])} given too"] if given.get(rows) and not unless else []),
                f"probe forwards: {dim} = {low} runs, {dim} = {low + 1} raises (probed up to the {rows} rows of "
                f"{tables[rows]})"]
            self.length_probed = True
            return

    def _counts(self, batch: dict[str, torch.Tensor], findings: list[trace.Finding], origins: dict[str, list[str]]) -> None:
        """An integer field with no upper bound that the forward raises on past some value (XLM's `lengths`, which it
        asserts against the sequence length): a bound by a dim of the batch, where the value equal to the dim runs
        and one more raises."""
        fields, params = self.data["fields"], self.data["params"]
        indexed = {f.field for f in findings}
        dims: dict[str, int] = {}
        for name, t in batch.items():
            for axis, dim in enumerate(fields[name]["shape"]):
                if isinstance(dim, str) and dim.isidentifier() and dim != "B" and dim not in params and axis < t.dim():
                    dims.setdefault(dim, t.shape[axis])
        for name, t in batch.items():
            field = fields[name]
            if (t.dtype not in (torch.int32, torch.int64) or not t.numel() or name in indexed or name in LABEL_FIELDS
                    or field.get("max") is not None or field.get("values") is not None):
                continue

            def runs(value: int, name: str = name, t: torch.Tensor = t) -> bool:
                poked = t.clone()
                poked[(-1,) * poked.dim()] = value
                return probes.clean(self.call, {**batch, name: poked}) is None

            if runs(10**6):
                continue
            dim = next((d for d, size in dims.items() if runs(size) and not runs(size + 1)), None)
            if dim is None:
                continue
            rule = f"{name} <= {dim}"
            self.data["rules"].append({"rule": rule, "code": "above_max", "field": name,
                                       "hint": f"{name} counts positions along {dim}: at most {dim}"})
            origins[f"rules.{rule}"] = [f"probe forwards: {name} = {dim} runs, {dim} + 1 raises"]

    def _value_sets(self, batch: dict[str, torch.Tensor], findings: list[trace.Finding], origins: dict[str, list[str]]) -> None:
        """An integer field with a value set (a mask's 0/1) whose other values are an error: where the forward runs with
        every value out of the set, a warning, unless a row of the longest length it takes, left without the inputs
        that give positions, then raises (OPT's positions are the mask's running sum): an error there, as a rule
        `where not present(position_ids)`; with no such input the error stands."""
        fields = self.data["fields"]
        indexed = {f.field for f in findings}
        for name, t in batch.items():
            field = fields[name]
            values = field.get("values")
            if (not values or name in indexed or t.dtype not in (torch.int32, torch.int64)
                    or field.get("severity", {}).get("not_in_set") == "warning"):
                continue
            bad = int(max(values)) + 1
            if probes.clean(self.call, {**batch, name: torch.full_like(t, bad)}) is not None:
                continue  # it raises: the error stands
            notes = [f"not_in_set: a warning, the forward runs with every value {bad}"]
            if self.limit is not None:
                dim, low, given = self.limit
                long = _resized({k: v for k, v in batch.items() if k not in given}, fields, dim, low)
                long[name] = torch.full_like(long[name], bad)
                if probes.clean(self.call, long) is not None:
                    if not given:
                        continue
                    rule = " | ".join(f"({name} == {v})" for v in values) + f" where not present({given[0]})"
                    self.data["rules"].append({"rule": rule, "code": "not_in_set", "field": name,
                                               "hint": f"without {given[0]} the model makes positions from {name}: "
                                               f"a value other than {', '.join(map(str, values))} walks off the position table"})
                    origins[f"rules.{rule}"] = [f"probe forwards: every value {bad} on a row of {dim} = {low} raises "
                                                f"without {given[0]}, runs with it"]
            field.setdefault("severity", {})["not_in_set"] = "warning"
            origins.setdefault(f"fields.{name}", []).extend(notes)

    def _empty_rows(self, batch: dict[str, torch.Tensor], origins: dict[str, list[str]]) -> None:
        """A mask ([B, L] of zeros and ones) no rule bounds per row yet: where one sample's row all 0 (or all 1,
        a padding mask's "pad") makes the forward raise or its loss or output NaN (a mean over no positions,
        attention with every key masked), a rule that each row keeps a position."""
        fields = self.data["fields"]
        for name, t in batch.items():
            dim = fields[name]["shape"][1] if t.dim() == 2 and len(fields[name]["shape"]) == 2 else None
            if (not isinstance(dim, str) or t.shape[1] < 1 or not bool(((t == 0) | (t == 1)).all())
                    or any(re.search(rf"\b{name}\b", r["rule"]) and "any(" in r["rule"] for r in self.data["rules"])):
                continue
            for value in (0, 1):
                row = t.clone()
                row[0] = value
                self.forwards += 1
                if probes.clean(self.call, {**batch, name: row}) is None:
                    continue
                rule = f"any({name} != {value}, dim={dim})"
                keeps = "keeps no position" if value == 0 else "masks every position"
                self.data["rules"].append({"rule": rule, "code": "no_attended_position", "field": name,
                                           "hint": f"a row of {name} that {keeps} breaks the forward (NaN or an "
                                           "error); drop empty samples"})
                origins[f"rules.{rule}"] = [f"probe forwards: one row of {name} all {value} makes the forward raise or "
                                            "its output not finite"]
                break

    def _ranks(self, batch: dict[str, torch.Tensor], origins: dict[str, list[str]]) -> None:
        """Each field of several axes, probed with its last axis dropped: where the forward runs on that (and on the
        variants `probes.shape_runs` tries), it broadcasts it (GPT-2 views a [B] mask as [B, 1]; DeBERTa ignores
        token types): a wrong rank is almost surely a data bug, but not a crash. The origin says so, and the rank is a
        warning (`severity: {rank: warning}`)."""
        fields = self.data["fields"]
        for name, t in batch.items():
            if t.dim() < 2 or not probes.shape_runs(self.call, batch, name, lambda x: x[..., 0].contiguous()):
                continue
            shape = list(t.shape[:-1])
            fields[name].setdefault("severity", {})["rank"] = "warning"
            origins.setdefault(f"fields.{name}", []).append(
                f"rank: the forward also runs with the last axis dropped ({shape}, every variant probed): a warning")

    def _accept_the_rest(self, fields: dict[str, dict], origins: dict[str, list[str]]) -> None:
        """Every tensor parameter of forward is a field: one no probe could feed gets every dtype and a rank
        guessed from its name, and a warning when a batch carries it (its values are not checked)."""
        for p in self.accepted:
            if p.name in fields or "head_mask" in p.name:
                continue
            fields[p.name] = {"dtype": MASK_DTYPES if "mask" in p.name else EVERY_DTYPE,
                              "shape": _guess_shape(p.name), "optional": True, "severity": {"rank": "warning"},
                              "description": "accepted by forward; not traced (its rank is guessed from its name)"}
            rule = f"not present({p.name})"
            self.data["rules"].append({
                "rule": rule, "code": "untraced_field", "field": p.name, "severity": "warning",
                "hint": f"forward accepts {p.name}, but no probe forward could feed it, so its values are unchecked; "
                "describe it in a YAML contract (tc.load_spec) if you use it"})
            origins[f"fields.{p.name}"] = ["a parameter of forward, not traced: any dtype, rank guessed from the name "
                                           "(another rank a warning: a guess is no contract)"]
            origins[f"rules.{rule}"] = [f"{p.name} is accepted but unchecked: a warning, never unexpected_field"]


def _choices(fields: dict[str, dict]) -> dict[str, dict]:
    """The fields with a choices axis after B (`[B, C, L]`), for heads that score several candidates per sample
    (multiple choice): every `[B, L, ...]` field gets one."""
    out = {}
    for name, f in fields.items():
        shape = f["shape"]
        out[name] = {**f, "shape": ["B", "C", *shape[1:]]} if len(shape) >= 2 and shape[1] == "L" else f
    return out


def _rule_names(text: str) -> set[str]:
    """The names a rule uses, its `where` included."""
    return set().union(*(_expr.names(_expr.parse(part)) for part in split_where(text)))


def _resized(batch: dict[str, torch.Tensor], fields: dict[str, dict], dim: str, n: int) -> dict[str, torch.Tensor]:
    """`batch` with every axis named `dim` repeated (or cut) to `n` entries: the same values, longer."""
    out = {}
    for name, t in batch.items():
        for axis, entry in enumerate(fields[name]["shape"]):
            if entry == dim and axis < t.dim() and t.shape[axis]:
                reps = [1] * t.dim()
                reps[axis] = -(-n // t.shape[axis])
                t = t.repeat(*reps).narrow(axis, 0, n).contiguous()
        out[name] = t
    return out


def _narrowed(batch: dict[str, torch.Tensor], fields: dict[str, dict], dim: str, n: int) -> dict[str, torch.Tensor]:
    """`batch` with every axis named `dim` cut to its first `n` entries."""
    out = {}
    for name, t in batch.items():
        for axis, entry in enumerate(fields[name]["shape"]):
            if entry == dim:
                t = t.narrow(axis, 0, n)
        out[name] = t
    return out


def _guess_shape(name: str) -> list[str]:
    axes = 3 if "embeds" in name or ("pixel" in name and "mask" not in name) else 2
    axes = 4 if "pixel_values" in name else axes
    return ["B", *(f"{name}_{i}" for i in range(1, axes))]

