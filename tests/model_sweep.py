"""The (architecture, head) pairs of transformers' own auto-model mappings, and probes whose truth is the forward.

Issue 19: `tc.spec_for` is tried as a new user would, on every head class whose tiny config builds and
runs a forward on CPU within a budget, not on a hand-written list. Per pair:

- the model is built from its config class's defaults, shrunk (`SMALL`: one layer, width 16, ...);
  a pair that does not build or has more than `MAX_PARAMETERS` is left out (and counted as such);
- its contract is `tc.spec_for(model)`; a pair where that raises counts as a failed derivation;
- the probes are mutations of the batch the derivation traced (`spec.example`), each run through the
  real model: a probe the model raises on or turns into a non-finite loss is *breaking*, and must get
  an error; one it runs cleanly must get none (else a false alarm). A shape probe (an axis dropped, a
  length changed) is also breaking where the model runs on it but raises once the same change is made
  to a variant of the batch that itself runs (one more sample, the changed dim one shorter, the field's
  first value 0): a shape is wrong for every batch, and the traced one can run by luck of its sizes.

`python scripts/models_table.py --sweep` runs it and writes docs/models_sweep.json, which
docs/models.md's figures are rendered from; the slow test re-runs it and compares.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

HEADS = ("SEQUENCE_CLASSIFICATION", "TOKEN_CLASSIFICATION", "QUESTION_ANSWERING", "MASKED_LM", "CAUSAL_LM",
         "MULTIPLE_CHOICE", "IMAGE_CLASSIFICATION", "CTC", "SEQ_TO_SEQ_CAUSAL_LM", "AUDIO_CLASSIFICATION")
SMALL = {
    "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 32,
    "vocab_size": 99, "max_position_embeddings": 64, "d_model": 16, "encoder_layers": 1, "decoder_layers": 1,
    "encoder_attention_heads": 2, "decoder_attention_heads": 2, "encoder_ffn_dim": 32, "decoder_ffn_dim": 32,
    "n_layer": 1, "n_head": 2, "n_embd": 16, "num_layers": 1, "num_heads": 2, "d_ff": 32, "d_kv": 8, "dim": 16,
    "n_layers": 1, "n_heads": 2, "hidden_dim": 32, "embedding_size": 16, "head_dim": 8, "num_decoder_layers": 1,
    "ffn_dim": 32, "projection_dim": 16, "image_size": 32, "patch_size": 8, "num_labels": 3,
}
STEP = 3  # the sweep takes every third pair of the sorted list (about 230 of 700): minutes, not an hour
MAX_PARAMETERS = 3_000_000
BIG = 10**6  # an id past any tiny table


@dataclass
class Probe:
    name: str
    field: str | None  # the field it mutates (None: the whole batch)
    batch: dict
    # a shape probe: the mutation itself, re-applied to variants of the batch (a shape breaks the model if the
    # forward raises for some sizes or values a valid batch can hold, not only for the traced batch's)
    mutate: Callable[[dict], dict] | None = None
    dim: str | None = None  # the dim the mutation changes (a variant makes it one shorter)


@dataclass
class Result:
    """One pair's outcome: `status` is 'ok', 'skipped: why' or 'derivation failed: why'."""

    pair: str
    status: str
    breaking: int = 0
    caught: int = 0
    clean: int = 0
    false_alarms: int = 0
    missed: tuple[str, ...] = ()
    alarms: tuple[str, ...] = ()
    fallback: bool = False
    why: str = ""  # a fallback pair: why its forward could not be traced (from the spec's description)
    on_variant: int = 0  # breaking shape probes the forward runs on, but raises on for a variant of the batch


def pairs() -> list[tuple[str, str, str]]:
    """(head, model_type, class name) for every head mapping in HEADS, sorted."""
    from transformers.models.auto import modeling_auto

    out = set()
    for head in HEADS:
        mapping = getattr(modeling_auto, f"MODEL_FOR_{head}_MAPPING_NAMES", {})
        for model_type, cls in mapping.items():
            for name in (cls if isinstance(cls, (tuple, list)) else (cls,)):
                out.add((head, model_type, name))
    return sorted(out)


def _shrink(config, keep: frozenset[str] = frozenset()) -> None:
    for key, value in SMALL.items():
        if key in keep:
            continue
        if hasattr(config, key) and isinstance(getattr(config, key), int) and not isinstance(getattr(config, key), bool):
            try:
                setattr(config, key, value)
            except Exception:  # a read-only property: keep the default
                pass
    for key in list(vars(config)):
        sub = getattr(config, key, None)
        if hasattr(sub, "to_dict") and hasattr(sub, "model_type") and sub is not config:
            _shrink(sub, keep)


def build(model_type: str, cls_name: str, head: str = ""):
    """The tiny model, or a string saying why not. A question-answering head keeps its config's `num_labels`
    (2: it splits its logits into start and end; 3 makes every forward raise)."""
    import transformers
    from transformers import CONFIG_MAPPING

    cls = getattr(transformers, cls_name, None)
    if cls is None:
        return f"skipped: {cls_name} is not importable"
    try:
        config = CONFIG_MAPPING[model_type]()
        _shrink(config, frozenset({"num_labels"}) if head == "QUESTION_ANSWERING" else frozenset())
        torch.manual_seed(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = cls(config).eval()
    except Exception as exc:  # a config our shrinking breaks, an optional dependency missing
        return f"skipped: does not build ({type(exc).__name__})"
    if sum(p.numel() for p in model.parameters()) > MAX_PARAMETERS:
        return "skipped: too large when shrunk"
    return model


def outcome(model, batch: dict) -> str:
    """'runs' (loss, or every float output, finite), 'raises' or 'nan'; as a training step calls it (no cache)."""
    import inspect

    flags = {"use_cache": False} if "use_cache" in inspect.signature(model.forward).parameters else {}
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = model(**batch, **flags)
    except Exception:  # the oracle: any error the model raises counts
        return "raises"
    loss = out.get("loss") if hasattr(out, "get") else None
    values = [loss] if isinstance(loss, torch.Tensor) else [
        v for v in (out.values() if hasattr(out, "values") else [out]) if isinstance(v, torch.Tensor) and v.is_floating_point()]
    return "runs" if all(bool(torch.isfinite(v).all()) for v in values) else "nan"


def _edit(batch: dict, name: str, change: Callable[[torch.Tensor], torch.Tensor]) -> dict:
    return {**{k: v.clone() for k, v in batch.items()}, name: change(batch[name].clone())}


def _poke(value) -> Callable[[torch.Tensor], torch.Tensor]:
    def change(t):
        t.view(-1)[-1] = value
        return t

    return change


def _dropped(name: str) -> Callable[[dict], dict]:
    return lambda batch: _edit(batch, name, lambda t: t[..., 0].contiguous())


def _longer(longest: list[str], times: int) -> Callable[[dict], dict]:
    """Every [B, L] int field as long as the first one, `times` longer."""
    def change(batch: dict) -> dict:
        size = batch[longest[0]].shape[1]
        return {k: (v.repeat(1, times) if k in longest and v.shape[1] == size else v.clone()) for k, v in batch.items()}

    return change


def probes(example: dict, required: set[str], dims: dict[str, list] | None = None) -> list[Probe]:
    """Mutations of a batch the model ran cleanly on: some break it, some do not; the forward decides.
    `dims`: each field's spec shape (so that a shape probe's variants change the right dim)."""
    dims = dims or {}
    out = [Probe("the traced batch", None, example)]
    ints = [k for k, v in example.items() if not v.is_floating_point() and v.dtype != torch.bool]
    floats = [k for k, v in example.items() if v.is_floating_point()]
    for k in ints:
        out += [Probe(f"{k}: a value past any table", k, _edit(example, k, _poke(BIG))),
                Probe(f"{k}: -7", k, _edit(example, k, _poke(-7))),
                Probe(f"{k}: float", k, _edit(example, k, lambda t: t.float())),
                Probe(f"{k}: int32", k, _edit(example, k, lambda t: t.int()))]
        if "mask" in k:
            out.append(Probe(f"{k}: bool", k, _edit(example, k, lambda t: t.bool())))
    for k in floats:
        out += [Probe(f"{k}: NaN", k, _edit(example, k, _poke(float("nan")))),
                Probe(f"{k}: float16", k, _edit(example, k, lambda t: t.half()))]
    for k, v in example.items():
        if v.dim() >= 2:
            drop = _dropped(k)
            out.append(Probe(f"{k}: last axis dropped", k, drop(example), drop, dims.get(k, [None])[-1]))
        if k in required:
            out.append(Probe(f"{k}: left out", k, {q: w for q, w in example.items() if q != k}))
    longest = [k for k, v in example.items() if v.dim() == 2 and not v.is_floating_point()]
    if longest:
        dim = dims.get(longest[0], [None, None])[1]
        for times in (8, 9):  # at and past the shrunk position tables (64 rows; the traced L is 8)
            longer = _longer(longest, times)
            out.append(Probe(f"every [B, L] field {times}x longer", None, longer(example), longer, dim))
    if next(iter(example.values())).shape[0] > 1:
        out.append(Probe("one sample", None, {k: v[:1].clone() for k, v in example.items()}))
    return out


def sweep_pair(head: str, model_type: str, cls_name: str) -> Result:
    import tritoncheck as tc

    pair = f"{cls_name}"
    model = build(model_type, cls_name, head)
    if isinstance(model, str):
        return Result(pair, model)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            spec = tc.spec_for(model)
    except Exception as exc:  # counted: a pair where derivation fails
        return Result(pair, f"derivation failed: {type(exc).__name__}: {str(exc)[:160]}")
    example = spec.example
    if example is None:
        why = spec.description.partition("Derived by fallback: ")[2].partition(". Not derived")[0]
        return Result(pair, "ok", fallback=True, why=why[:200])
    if outcome(model, example) != "runs":
        return Result(pair, "skipped: does not run on its own traced batch")
    required = {k for k, f in spec.fields.items() if not f.optional}
    dims = {k: list(f.shape) for k, f in spec.fields.items()}
    result = Result(pair, "ok")
    missed, alarms = [], []
    for probe in probes(example, required, dims):
        truth = outcome(model, probe.batch)
        if truth == "runs" and probe.mutate is not None:
            variant = breaking_variant(model, example, probe, dims)
            if variant:
                truth = f"raises {variant}"
                result.on_variant += 1
        errors = tc.check(probe.batch, spec, backend="torch").errors
        if truth == "runs":
            result.clean += 1
            if errors:
                result.false_alarms += 1
                alarms.append(f"{probe.name}: {sorted({(v.field, v.code) for v in errors})}")
        else:
            result.breaking += 1
            if errors:
                result.caught += 1
            else:
                missed.append(f"{probe.name} ({truth})")
    result.missed, result.alarms = tuple(missed), tuple(alarms)
    return result


def variants(example: dict, field: str | None, dim: str | None, dims: dict[str, list]) -> list[tuple[str, dict]]:
    """Other batches of the traced batch's layout: one more sample, `dim` one shorter in every field that has it,
    the field's first value 0 (a [B] mask of ones runs where the model skips an all-ones mask)."""
    out = []
    batched = [k for k in example if dims.get(k, [None])[0] == "B"]
    if batched:
        out.append(("with one more sample", {k: torch.cat([v, v[:1]]) if k in batched else v.clone() for k, v in example.items()}))
    if isinstance(dim, str) and dim != "B" and dim.isidentifier():
        shorter = {}
        for k, v in example.items():
            for axis, entry in enumerate(dims.get(k, [])):
                if entry == dim and axis < v.dim() and v.shape[axis] > 1:
                    v = v.narrow(axis, 0, v.shape[axis] - 1)
            shorter[k] = v.clone()
        if any(shorter[k].shape != example[k].shape for k in example):
            out.append((f"with {dim} one shorter", shorter))
    if field is not None and example[field].numel():
        out.append(("with its first value 0", _edit(example, field, _first(0))))
    return out


def breaking_variant(model, example: dict, probe: Probe, dims: dict[str, list]) -> str:
    """A shape probe the forward ran cleanly: the first variant of the batch that runs cleanly itself but raises
    (or gives a non-finite loss) once mutated the same way; '' where none does."""
    for why, batch in variants(example, probe.field, probe.dim, dims):
        if outcome(model, batch) == "runs" and outcome(model, probe.mutate(batch)) != "runs":
            return why
    return ""


def _first(value) -> Callable[[torch.Tensor], torch.Tensor]:
    def change(t):
        t.view(-1)[0] = value
        return t

    return change


def swept() -> list[tuple[str, str, str]]:
    return pairs()[::STEP]


def to_json(r: Result) -> dict:
    return {"pair": r.pair, "status": r.status, "breaking": r.breaking, "caught": r.caught, "clean": r.clean,
            "false_alarms": r.false_alarms, "missed": list(r.missed), "alarms": list(r.alarms), "fallback": r.fallback,
            "on_variant": r.on_variant, "why": r.why}


def summary(results: list[Result]) -> dict:
    ok = [r for r in results if r.status == "ok"]
    breaking = sum(r.breaking for r in ok)
    clean = sum(r.clean for r in ok)
    return {
        "pairs": len(ok), "skipped": sum(r.status.startswith("skipped") for r in results),
        "derivation_failed": sum(r.status.startswith("derivation failed") for r in results),
        "fallback": sum(r.fallback for r in ok),
        "breaking": breaking, "caught": sum(r.caught for r in ok), "clean": clean,
        "false_alarms": sum(r.false_alarms for r in ok),
        "on_variant": sum(r.on_variant for r in ok),
    }
