"""The benchmark harness: tritoncheck against the checks users write by hand, in one run.

It lives in the repository's `benchmarks/`, not in the package (no check needs it): the scripts
here (`run.py`: the full run, the CSV history, the README table; `profile_check.py`,
`gpu_profile.py`) import it as `harness`, and `tritoncheck bench` (tritoncheck/cli/bench.py, a thin
entry point) parses its arguments and runs its quick set from a checkout.

Each scenario builds a spec and a realistic valid batch for a built-in family, plus the same
contract written by hand as a generator of per-rule checks. Every contender turns
`(case, batch)` into a callable returning `ok: bool`, and must say valid / invalid on the valid
batch and a broken copy before it is timed:

- `hand-assert`: a `.all()` per rule with a host read each (`assert (ids < V).all()`);
- `hand-1sync`: the same rules, stacked, one host read at the end;
- `hand-best`: the best hand-written torch: one `aminmax` pass per range or finiteness check
  (aminmax propagates NaN), the other rules in as few ops, one host read;
- `hand-compiled`: the one-sync version under `torch.compile`;
- `tc-torch` / `tc-c` / `tc-triton`: `tc.check(batch, spec, backend=...)`: the torch reference,
  the contract compiled to C (CPU tensors), the generated Triton kernel (GPU only); a compiled
  backend is timed only where its whole report equals the torch backend's, valid and broken;
- `tc-c-contiguous`: beside a strided batch, the C backend on a contiguous copy of it;
- `floor-read`: one `sum` per tensor, a plain read of every byte, the cost no validator beats;
  `floor-aminmax`: one `aminmax` per tensor, the least a range check reads; a scenario may add
  its own (`one-sum-16`: one `sum` of 16 ids, the fixed cost of a single torch op).

A scenario may time its broken batch instead (`timed_bad`: 1% bad ids), or give every call a new
copy of the batch (`fresh`: what a DataLoader hands out). `Options.scaling` adds a sweep of
causal-LM batches from 4 KiB up (`scaling-*` rows: C or Triton, torch backend, floors).

Method: one thread; on CPU each contender's time is this thread's CPU time (`time.thread_time`:
the time other processes hold the core is left out), every round times every contender (so load
drift hits all alike), and a row is the median of at least `MIN_ROUNDS` rounds. Each row's
ratios (`x_hand_assert`, `x_floor_read`, `x_floor_aminmax`) come from medians of that one run.

Beside the timed scenarios, `startup_rows` measures what a DataLoader pays before its first
check: the first batch's validation in each of two forked workers with a warm disk cache, and a
cold compile of built-in contracts, each in a fresh process.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

Batch = dict[str, torch.Tensor]
Rules = Callable[[Batch, Mapping[str, Any]], Iterator[Any]]  # yields a 0-d bool tensor or a host bool per rule

MIN_ROUNDS = 5
FLOORS = ("floor-read", "floor-aminmax")
DATALOADER_WORKERS = 2


# --------------------------------------------------------------------------- results


@dataclass
class Result:
    """One CSV row: one contender (or startup measurement) on one scenario. Field order = CSV schema."""

    timestamp: str  # one per run: every row of a run shares it
    device: str
    threads: int
    clock: str  # "thread" (thread CPU time), "wall", "cuda" (do_bench), "cpu" (process + children CPU time)
    load_avg: float | None  # 1-minute load average when the row was measured
    torch_version: str
    triton_version: str
    tritoncheck_version: str
    scenario: str
    contender: str
    batch_bytes: int
    rounds: int | None = None  # timed rounds behind the median
    median_ms: float | None = None  # startup rows: the slowest worker's first batch; CPU per kernel compiled
    p20_ms: float | None = None
    p80_ms: float | None = None
    gb_per_s: float | None = None  # batch bytes / median time
    x_hand_assert: float | None = None  # hand-assert time / this time: how many times faster than it
    x_floor_read: float | None = None  # this time / floor-read time: 1.0 = as fast as one read of the batch
    x_floor_aminmax: float | None = None  # this time / floor-aminmax time
    launches: int | None = None  # GPU: kernels launched per check; CPU: torch ops dispatched per check
    syncs: int | None = None  # host reads of a tensor value per check (a device sync each on GPU)
    share_of_step: float | None = None  # this time / a training step (forward + backward) on the same batch
    share_of_collate: float | None = None  # this time / default_collate over the batch's samples
    note: str = ""


COLUMNS = [f.name for f in dataclasses.fields(Result)]


def append_csv(path: str | os.PathLike, rows: list[Result]) -> None:
    """Append rows to `path`, writing the header when the file is new."""
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        if new:
            w.writeheader()
        for r in rows:
            w.writerow({k: _fmt(v) for k, v in dataclasses.asdict(r).items()})


def read_csv(path: str | os.PathLike) -> list[Result]:
    """The rows `append_csv` wrote, typed again (empty cells are None)."""
    kinds = {f.name: str(f.type) for f in dataclasses.fields(Result)}
    with open(path, newline="") as f:
        return [Result(**{k: _parse(kinds[k], v) for k, v in row.items()}) for row in csv.DictReader(f)]


def latest_run(rows: list[Result], device: str | None = None) -> list[Result]:
    """The rows of the newest run (one timestamp), on `device` if given."""
    rows = [r for r in rows if device is None or r.device == device]
    if not rows:
        return []
    stamp = max(r.timestamp for r in rows)
    return [r for r in rows if r.timestamp == stamp]


def _fmt(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


def _parse(kind: str, text: str) -> Any:
    if text == "" and "None" in kind:
        return None
    if kind.startswith("int"):
        return int(text)
    if kind.startswith("float"):
        return float(text)
    return text


def markdown_table(rows: list[Result]) -> str:
    """Per timed scenario, each contender's time and its ratios to hand-assert and to both floors."""
    out = [
        ("| scenario | contender | median ms | vs hand-assert | / floor-read | / floor-aminmax | GB/s "
         "| ops/launches | syncs | of step | of collate | note |"),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if is_startup(r) or is_scaling(r):
            continue
        out.append(
            "| " + " | ".join([
                r.scenario, r.contender, _num(r.median_ms, 3), ratio_text(r.x_hand_assert), ratio_text(r.x_floor_read),
                ratio_text(r.x_floor_aminmax), _num(r.gb_per_s, 2), _num(r.launches, 0), _num(r.syncs, 0),
                _pct(r.share_of_step), _pct(r.share_of_collate), r.note.replace("|", "/"),
            ]) + " |"
        )
    return "\n".join(out)


def startup_table(rows: list[Result]) -> str:
    """The DataLoader first-batch and cold-compile rows ("" when the run has none)."""
    startup = [r for r in rows if is_startup(r)]
    if not startup:
        return ""
    out = ["| scenario / spec | measurement | ms | note |", "|---|---|---:|---|"]
    for r in startup:
        out.append(f"| {r.scenario} | {r.contender} | {_num(r.median_ms, 1)} | {r.note.replace('|', '/')} |")
    return "\n".join(out)


def is_startup(r: Result) -> bool:
    return r.contender.startswith("dataloader-") or r.contender == "cold-compile"


def _num(v: float | int | None, digits: int) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def ratio_text(v: float | None) -> str:
    """A ratio as every table shows it: two decimals below 10x, one above."""
    return "" if v is None else f"{v:.{2 if v < 10 else 1}f}x"


def _pct(v: float | None) -> str:
    if v is None:
        return ""
    pct = 100 * v
    return f"{pct:.{1 if pct >= 1 else 2 if pct >= 0.1 else 3}f}%"


# --------------------------------------------------------------------------- scenarios


@dataclass
class Case:
    """A built scenario: spec, a valid batch, a broken copy, the contract written by hand."""

    name: str
    spec: Any
    batch: Batch
    bad: Batch
    rules: Rules
    params: Mapping[str, Any]
    model_step: Callable[[Batch], Callable[[], Any]] | None = None  # batch -> one training step
    step_note: str = ""
    best_rules: Rules | None = None  # the same contract as few, cheap torch ops as a skilled hand writes it
    timed_bad: bool = False  # time the broken copy (a batch with bad data), not the valid batch
    fresh: bool = False  # every call gets a new copy of the batch, as a DataLoader hands out new tensors
    extra_floors: dict[str, Callable[[Batch], Any]] = field(default_factory=dict)  # name -> fn(batch), timed as floors

    @property
    def timed(self) -> Batch:
        return self.bad if self.timed_bad else self.batch


@dataclass
class Scenario:
    name: str
    build: Callable[[bool], Case]  # build(tiny) -> Case; tiny sizes are for the smoke test
    big: bool = False  # hundreds of MB: in the full run (benchmarks/run.py), not in the quick set
    description: str = ""


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _lengths(n: int, lo: int, hi: int, g: torch.Generator) -> torch.Tensor:
    return torch.randint(lo, hi + 1, (n,), generator=g)


def _pad_mask(lengths: torch.Tensor, L: int) -> torch.Tensor:
    return (torch.arange(L)[None, :] < lengths[:, None]).to(torch.int64)


def _bad_copy(batch: Batch, name: str, index: tuple[int, ...], value: Any) -> Batch:
    bad = {k: v.clone() for k, v in batch.items()}
    bad[name][index] = value
    return bad


def aminmax_within(t: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
    """lo <= t <= hi from one `aminmax` pass, as a skilled hand writes a range check."""
    mn, mx = torch.aminmax(t)
    return (mn >= lo) & (mx <= hi)


def aminmax_finite(t: torch.Tensor) -> torch.Tensor:
    """No NaN or Inf, from one `aminmax` pass: a NaN anywhere makes both NaN (aminmax propagates it), an
    Inf is the max or the min. Far cheaper than `torch.isfinite(t).all()`, which writes a bool per element."""
    mn, mx = torch.aminmax(t)
    return torch.isfinite(mn) & torch.isfinite(mx)


def labels_within(y: torch.Tensor, n: int, ignore: int = -100) -> torch.Tensor:
    """Each label is `ignore` or in [0, n): the ignored ones replaced by 0, then one range pass."""
    return aminmax_within(torch.where(y == ignore, 0, y), 0, n - 1)


# BERT -------------------------------------------------------------------------


BERT = dict(vocab_size=30522, max_position_embeddings=512, type_vocab_size=2, num_labels=3)


def _bert_rules(b: Batch, p: Mapping[str, Any]) -> Iterator[Any]:
    ids, am, tt, y = b["input_ids"], b["attention_mask"], b["token_type_ids"], b["labels"]
    yield ids.shape == am.shape == tt.shape and y.shape == ids.shape[:1]
    yield ids.shape[1] <= p["max_position_embeddings"]
    yield (ids >= 0).all()
    yield (ids < p["vocab_size"]).all()
    yield ((am == 0) | (am == 1)).all()
    yield (tt >= 0).all()
    yield (tt < p["type_vocab_size"]).all()
    yield (y >= 0).all()
    yield (y < p["num_labels"]).all()
    yield (am != 0).any(dim=1).all()


def _bert_best(b: Batch, p: Mapping[str, Any]) -> Iterator[Any]:
    ids, am, tt, y = b["input_ids"], b["attention_mask"], b["token_type_ids"], b["labels"]
    yield ids.shape == am.shape == tt.shape and y.shape == ids.shape[:1]
    yield ids.shape[1] <= p["max_position_embeddings"]
    yield aminmax_within(ids, 0, p["vocab_size"] - 1)
    yield aminmax_within(am, 0, 1)  # an integer mask in [0, 1] is 0 or 1
    yield aminmax_within(tt, 0, p["type_vocab_size"] - 1)
    yield aminmax_within(y, 0, p["num_labels"] - 1)
    yield am.any(dim=1).all()


def _bert_case(B: int, L: int, name: str) -> Case:
    import tritoncheck as tc

    g = _gen(1)
    n = _lengths(B, max(4, L // 8), L, g)
    am = _pad_mask(n, L)
    ids = torch.randint(1000, BERT["vocab_size"], (B, L), generator=g) * am  # [PAD] = 0
    ids[:, 0] = 101  # [CLS]
    ids[torch.arange(B), n - 1] = 102  # [SEP]
    tt = ((torch.arange(L)[None, :] >= (n // 2)[:, None]) & (am == 1)).to(torch.int64)  # second segment
    y = torch.randint(0, BERT["num_labels"], (B,), generator=g)
    batch = dict(input_ids=ids, attention_mask=am, token_type_ids=tt, labels=y)
    spec = tc.load_spec("bert-sequence-classification", **BERT)
    return Case(name, spec, batch, _bad_copy(batch, "input_ids", (B - 1, 1), BERT["vocab_size"]), _bert_rules, BERT,
                _bert_step, "BertForSequenceClassification, 2 layers, hidden 128 (bert-tiny size)", _bert_best)


def _bert(tiny: bool) -> Case:
    return _bert_case(4, 16, "bert-tiny") if tiny else _bert_case(32, 128, "bert-32x128")


def _bert_b1(tiny: bool) -> Case:
    """One sample of 16 tokens: host overhead decides (the size is already tiny). One more floor: a
    single `sum` of its 16 ids, the fixed cost of one torch op."""
    return dataclasses.replace(_bert_case(1, 16, "bert-1x16"), extra_floors={"one-sum-16": lambda b: b["input_ids"].sum()})


def _bert_step(batch: Batch) -> Callable[[], Any]:
    from transformers import BertConfig, BertForSequenceClassification

    cfg = BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512, **BERT)
    return _train_step(BertForSequenceClassification(cfg), batch)


# LayoutLMv3 --------------------------------------------------------------------


LAYOUTLMV3 = dict(vocab_size=50265, max_position_embeddings=514, pad_token_id=1, type_vocab_size=1,
                  max_2d_position_embeddings=1024, num_channels=3, input_size=224, num_labels=7)


def _layoutlmv3_rules(b: Batch, p: Mapping[str, Any]) -> Iterator[Any]:
    ids, bbox, am, tt = b["input_ids"], b["bbox"], b["attention_mask"], b["token_type_ids"]
    px, y = b["pixel_values"], b["labels"]
    B, L = ids.shape
    yield bbox.shape == (B, L, 4) and am.shape == tt.shape == y.shape == (B, L)
    yield px.shape == (B, p["num_channels"], p["input_size"], p["input_size"]) and px.dtype == torch.float32
    yield (ids >= 0).all()
    yield (ids < p["vocab_size"]).all()
    yield (bbox >= 0).all()
    yield (bbox < p["max_2d_position_embeddings"]).all()
    yield (bbox <= 1000).all()  # the documented 0-1000 grid (a warning in the contract)
    yield ((am == 0) | (am == 1)).all()
    yield (tt >= 0).all()
    yield (tt < p["type_vocab_size"]).all()
    yield torch.isfinite(px).all()
    yield ((y == -100) | ((y >= 0) & (y < p["num_labels"]))).all()
    yield (bbox[..., 0] <= bbox[..., 2]).all()
    yield (bbox[..., 1] <= bbox[..., 3]).all()
    yield ((ids != p["pad_token_id"]).sum(dim=1) <= p["max_position_embeddings"] - p["pad_token_id"] - 1).all()
    yield (am != 0).any(dim=1).all()
    yield (y != -100).any()


def _layoutlmv3_best(b: Batch, p: Mapping[str, Any]) -> Iterator[Any]:
    ids, bbox, am, tt = b["input_ids"], b["bbox"], b["attention_mask"], b["token_type_ids"]
    px, y = b["pixel_values"], b["labels"]
    B, L = ids.shape
    yield bbox.shape == (B, L, 4) and am.shape == tt.shape == y.shape == (B, L)
    yield px.shape == (B, p["num_channels"], p["input_size"], p["input_size"]) and px.dtype == torch.float32
    yield aminmax_within(ids, 0, p["vocab_size"] - 1)
    yield aminmax_within(bbox, 0, min(1000, p["max_2d_position_embeddings"] - 1))
    yield aminmax_within(am, 0, 1)
    yield aminmax_within(tt, 0, p["type_vocab_size"] - 1)
    yield aminmax_finite(px)
    yield labels_within(y, p["num_labels"])
    yield (bbox[..., 2:] - bbox[..., :2]).min() >= 0  # x0 <= x1 and y0 <= y1 in one pass
    yield (ids != p["pad_token_id"]).sum(dim=1).max() <= p["max_position_embeddings"] - p["pad_token_id"] - 1
    yield am.any(dim=1).all()
    yield (y != -100).any()


def _layoutlmv3_batch(B: int, L: int, S: int, g: torch.Generator) -> Batch:
    n = _lengths(B, max(4, L // 4), L, g)
    am = _pad_mask(n, L)
    pad = LAYOUTLMV3["pad_token_id"]
    ids = torch.where(am == 1, torch.randint(3, LAYOUTLMV3["vocab_size"], (B, L), generator=g), pad)
    ids[:, 0] = 0  # <s>
    x0 = torch.randint(0, 900, (B, L, 1), generator=g)
    y0 = torch.randint(0, 980, (B, L, 1), generator=g)
    bbox = torch.cat([x0, y0, x0 + torch.randint(0, 100, (B, L, 1), generator=g),
                      y0 + torch.randint(0, 20, (B, L, 1), generator=g)], dim=-1) * am[..., None]
    y = torch.where(am == 1, torch.randint(0, LAYOUTLMV3["num_labels"], (B, L), generator=g), -100)
    y[:, 0] = -100  # special tokens are ignored
    px = torch.rand(B, 3, S, S, generator=g) * 2 - 1  # normalised with mean 0.5, std 0.5
    tt = torch.zeros(B, L, dtype=torch.int64)
    return dict(input_ids=ids, bbox=bbox, attention_mask=am, token_type_ids=tt, pixel_values=px, labels=y)


def _layoutlmv3(tiny: bool) -> Case:
    import tritoncheck as tc

    B, L, S = (2, 16, 32) if tiny else (8, 512, 224)
    params = dict(LAYOUTLMV3, input_size=S)
    batch = _layoutlmv3_batch(B, L, S, _gen(2))
    spec = tc.load_spec("layoutlmv3-token-classification", **params)
    return Case("layoutlmv3-8x512" if not tiny else "layoutlmv3-tiny", spec, batch,
                _bad_copy(batch, "pixel_values", (B - 1, 2, S - 1, S - 1), float("nan")), _layoutlmv3_rules,
                params, _layoutlmv3_step, "LayoutLMv3ForTokenClassification, 2 layers, hidden 128", _layoutlmv3_best)


def _layoutlmv3_step(batch: Batch) -> Callable[[], Any]:
    from transformers import LayoutLMv3Config, LayoutLMv3ForTokenClassification

    p = dict(LAYOUTLMV3, input_size=batch["pixel_values"].shape[-1])
    cfg = LayoutLMv3Config(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
                           coordinate_size=22, shape_size=20, **p)  # 4 * 22 + 2 * 20 = hidden_size
    return _train_step(LayoutLMv3ForTokenClassification(cfg), batch)


# BART ------------------------------------------------------------------------


BART = dict(vocab_size=50265, max_position_embeddings=1024)


def _bart_rules(b: Batch, p: Mapping[str, Any]) -> Iterator[Any]:
    ids, am, y = b["input_ids"], b["attention_mask"], b["labels"]
    yield ids.shape == am.shape and y.shape[0] == ids.shape[0]
    yield ids.shape[1] <= p["max_position_embeddings"] and y.shape[1] <= p["max_position_embeddings"]
    yield (ids >= 0).all()
    yield (ids < p["vocab_size"]).all()
    yield ((am == 0) | (am == 1)).all()
    yield ((y == -100) | ((y >= 0) & (y < p["vocab_size"]))).all()
    yield (am != 0).any(dim=1).all()
    yield (y != -100).any()


def _bart_best(b: Batch, p: Mapping[str, Any]) -> Iterator[Any]:
    ids, am, y = b["input_ids"], b["attention_mask"], b["labels"]
    yield ids.shape == am.shape and y.shape[0] == ids.shape[0]
    yield ids.shape[1] <= p["max_position_embeddings"] and y.shape[1] <= p["max_position_embeddings"]
    yield aminmax_within(ids, 0, p["vocab_size"] - 1)
    yield aminmax_within(am, 0, 1)
    yield labels_within(y, p["vocab_size"])
    yield am.any(dim=1).all()
    yield (y != -100).any()


def _bart(tiny: bool) -> Case:
    import tritoncheck as tc

    B, L, T = (2, 32, 8) if tiny else (16, 1024, 128)
    g = _gen(3)
    am = _pad_mask(_lengths(B, L // 2, L, g), L)
    ids = torch.where(am == 1, torch.randint(4, BART["vocab_size"], (B, L), generator=g), 1)  # <pad> = 1
    ids[:, 0] = 0
    y = torch.where(_pad_mask(_lengths(B, T // 2, T, g), T) == 1,
                    torch.randint(4, BART["vocab_size"], (B, T), generator=g), -100)
    batch = dict(input_ids=ids, attention_mask=am, labels=y)
    spec = tc.load_spec("bart-seq2seq", **BART)
    return Case("bart-16x1024" if not tiny else "bart-tiny", spec, batch,
                _bad_copy(batch, "labels", (0, 1), -1), _bart_rules, BART, _bart_step,
                "BartForConditionalGeneration, 2+2 layers, d_model 128, target 128", _bart_best)


def _bart_step(batch: Batch) -> Callable[[], Any]:
    from transformers import BartConfig, BartForConditionalGeneration

    cfg = BartConfig(d_model=128, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                     decoder_attention_heads=2, encoder_ffn_dim=512, decoder_ffn_dim=512, **BART)
    return _train_step(BartForConditionalGeneration(cfg), batch)


# CTC -------------------------------------------------------------------------


def _ctc_rules(b: Batch, p: Mapping[str, Any]) -> Iterator[Any]:
    lp, tg, il, tl = b["log_probs"], b["targets"], b["input_lengths"], b["target_lengths"]
    T, N, C = lp.shape
    S = tg.shape[1]
    yield tg.shape[0] == N and il.shape == tl.shape == (N,)
    yield 0 <= p["blank"] < C
    yield torch.isfinite(lp).all()
    yield (lp <= 0).all()
    yield (il >= 1).all()
    yield (il <= T).all()
    yield (tl >= 0).all()
    yield (tl <= S).all()
    yield (tl <= il).all()
    inside = torch.arange(S, device=tg.device)[None, :] < tl[:, None]
    yield ((tg != p["blank"]) | ~inside).all()
    yield ((tg >= 0) | ~inside).all()
    yield ((tg < C) | ~inside).all()


def _ctc_best(b: Batch, p: Mapping[str, Any]) -> Iterator[Any]:
    lp, tg, il, tl = b["log_probs"], b["targets"], b["input_lengths"], b["target_lengths"]
    T, N, C = lp.shape
    S = tg.shape[1]
    yield tg.shape[0] == N and il.shape == tl.shape == (N,)
    yield 0 <= p["blank"] < C
    mn, mx = torch.aminmax(lp)  # finite and <= 0 from one pass (a NaN makes both NaN)
    yield torch.isfinite(mn) & (mx <= 0)
    yield aminmax_within(il, 1, T)
    yield aminmax_within(tl, 0, S)
    yield (tl <= il).all()
    inside = torch.arange(S, device=tg.device)[None, :] < tl[:, None]
    t = torch.where(inside, tg, (p["blank"] + 1) % C)  # padding replaced by a valid non-blank class
    yield aminmax_within(t, 0, C - 1) & (t != p["blank"]).all()


def _ctc(tiny: bool) -> Case:
    import tritoncheck as tc

    T, N, C, S = (20, 3, 5, 6) if tiny else (400, 16, 32, 100)
    g = _gen(4)
    lp = torch.randn(T, N, C, generator=g).log_softmax(-1)
    il = _lengths(N, T * 3 // 4, T, g)
    tl = _lengths(N, S // 2, S, g)
    tg = torch.where(_pad_mask(tl, S) == 1, torch.randint(1, C, (N, S), generator=g), 0)
    batch = dict(log_probs=lp, targets=tg, input_lengths=il, target_lengths=tl)
    spec = tc.load_spec("ctc", blank=0)
    return Case(f"ctc-T{T}-N{N}-C{C}-S{S}", spec, batch, _bad_copy(batch, "targets", (N - 1, 0), 0), _ctc_rules,
                {"blank": 0}, _ctc_step, "F.ctc_loss forward + backward (the loss step only)", _ctc_best)


def _ctc_step(batch: Batch) -> Callable[[], Any]:
    import torch.nn.functional as F

    lp = batch["log_probs"].detach().clone().requires_grad_(True)

    def step() -> None:
        lp.grad = None
        F.ctc_loss(lp, batch["targets"], batch["input_lengths"], batch["target_lengths"]).backward()

    return step


# 256 MB -----------------------------------------------------------------------


def _big(tiny: bool) -> Case:
    import tritoncheck as tc

    B, L, S = (2, 16, 32) if tiny else (400, 512, 224)  # 400 page images of 3 x 224 x 224 float32: 254 MB in all
    params = dict(LAYOUTLMV3, input_size=S)
    batch = _layoutlmv3_batch(B, L, S, _gen(5))
    spec = tc.load_spec("layoutlmv3-token-classification", **params)
    name = "big-tiny" if tiny else f"layoutlmv3-{B}x{L}-{batch_bytes(batch) / 1e6:.0f}MB"
    return Case(name, spec, batch, _bad_copy(batch, "bbox", (B - 1, L - 1, 2), -5), _layoutlmv3_rules, params,
                best_rules=_layoutlmv3_best)


# issue 23: fresh tensors, half precision, strides, bad data, 256 MB of tokens -------------------


def _bert_fresh(tiny: bool) -> Case:
    """BERT 32 x 128, a new copy of the batch for every call: what a DataLoader hands out."""
    case = _bert_case(4, 16, "bert-tiny-fresh") if tiny else _bert_case(32, 128, "bert-32x128-fresh")
    return dataclasses.replace(case, fresh=True, model_step=None)


def _bert_bad_ids(tiny: bool) -> Case:
    """BERT 4096 x 16 with 1% of the ids past the vocabulary; the broken batch is the one timed."""
    B, L = (64, 16) if tiny else (4096, 16)
    case = _bert_case(B, L, "bert-tiny-1pct-bad" if tiny else f"bert-{B}x{L}-1pct-bad")
    bad = {k: v.clone() for k, v in case.batch.items()}
    n = B * L // 100
    where = torch.randperm(B * L, generator=_gen(7))[:n]
    bad["input_ids"].view(-1)[where] = BERT["vocab_size"] + torch.randint(0, 1000, (n,), generator=_gen(8))
    return dataclasses.replace(case, bad=bad, timed_bad=True, model_step=None, step_note="")


CAUSAL_LM = dict(vocab_size=32000)


def _causal_lm_rules(b: Batch, p: Mapping[str, Any]) -> Iterator[Any]:
    ids, am, y = b["input_ids"], b["attention_mask"], b["labels"]
    L = ids.shape[1]
    yield am.shape == y.shape == ids.shape
    yield L <= p["max_position_embeddings"]
    yield (ids >= 0).all()
    yield (ids < p["vocab_size"]).all()
    yield ((am == 0) | (am == 1)).all()
    yield ((y == -100) | ((y >= 0) & (y < p["vocab_size"]))).all()
    yield (am != 0).any(dim=1).all()
    yield L >= 2
    yield ((y != -100) & (torch.arange(L, device=y.device) > 0)).any()


def _causal_lm_best(b: Batch, p: Mapping[str, Any]) -> Iterator[Any]:
    ids, am, y = b["input_ids"], b["attention_mask"], b["labels"]
    L = ids.shape[1]
    yield am.shape == y.shape == ids.shape and 2 <= L <= p["max_position_embeddings"]
    yield aminmax_within(ids, 0, p["vocab_size"] - 1)
    yield aminmax_within(am, 0, 1)
    yield labels_within(y, p["vocab_size"])
    yield am.any(dim=1).all()
    yield (y[:, 1:] != -100).any()


def causal_lm_case(B: int, L: int, name: str) -> Case:
    """A causal-LM batch: ids, an all-ones mask, labels = ids with an ignored prompt (-100); the broken
    copy has one label past the vocabulary."""
    import tritoncheck as tc

    g = _gen(6)
    ids = torch.randint(0, CAUSAL_LM["vocab_size"], (B, L), generator=g)
    y = ids.clone()
    y[:, : L // 8] = -100
    batch = dict(input_ids=ids, attention_mask=torch.ones(B, L, dtype=torch.int64), labels=y)
    params = dict(CAUSAL_LM, max_position_embeddings=L)
    spec = tc.load_spec("causal-lm", **params)
    bad = _bad_copy(batch, "labels", (B - 1, L - 1), CAUSAL_LM["vocab_size"])
    return Case(name, spec, batch, bad, _causal_lm_rules, params, best_rules=_causal_lm_best)


def _causal_lm_256(tiny: bool) -> Case:
    """2730 x 4096 tokens of int64 ids, mask and labels: 256 MiB, far out of cache."""
    return causal_lm_case(2, 16, "causal-lm-tiny") if tiny else causal_lm_case(2730, 4096, "causal-lm-2730x4096-256MiB")


IMAGE_SPEC = {
    "name": "image-classification",
    "description": "An image classifier (ViT, ResNet): finite pixels of the model's dtype, one class per image.",
    "params": {"num_channels": 3, "image_size": None, "num_labels": None, "dtype": "float32"},
    "fields": {
        "pixel_values": {"dtype": ["dtype"], "shape": ["B", "num_channels", "image_size", "image_size"], "finite": True},
        "labels": {"dtype": "int64", "shape": ["B"], "min": 0, "max": "num_labels - 1"},
    },
}


def _image_rules(b: Batch, p: Mapping[str, Any]) -> Iterator[Any]:
    px, y = b["pixel_values"], b["labels"]
    yield px.shape[1:] == (p["num_channels"], p["image_size"], p["image_size"]) and y.shape == px.shape[:1]
    yield px.dtype == getattr(torch, p["dtype"])
    yield torch.isfinite(px).all()
    yield (y >= 0).all()
    yield (y < p["num_labels"]).all()


def _image_best(b: Batch, p: Mapping[str, Any]) -> Iterator[Any]:
    px, y = b["pixel_values"], b["labels"]
    yield px.shape[1:] == (p["num_channels"], p["image_size"], p["image_size"]) and y.shape == px.shape[:1]
    yield px.dtype == getattr(torch, p["dtype"])
    yield aminmax_finite(px)
    yield aminmax_within(y, 0, p["num_labels"] - 1)


def image_case(B: int, S: int, dtype: torch.dtype, channels_last: bool, name: str) -> Case:
    """Normalised images (mean 0.5, std 0.5) and labels; the broken copy has one NaN pixel."""
    import tritoncheck as tc

    g = _gen(9)
    px = (torch.rand(B, 3, S, S, generator=g) * 2 - 1).to(dtype)
    if channels_last:
        px = px.contiguous(memory_format=torch.channels_last)
    params = dict(num_channels=3, image_size=S, num_labels=1000, dtype=str(dtype).removeprefix("torch."))
    batch = dict(pixel_values=px, labels=torch.randint(0, 1000, (B,), generator=g))
    spec = tc.BatchSpec.model_validate(IMAGE_SPEC).with_params(None, **params)
    bad = {k: v.clone() for k, v in batch.items()}  # clone keeps the memory format
    bad["pixel_values"][B - 1, 1, S // 2, S // 3] = float("nan")
    return Case(name, spec, batch, bad, _image_rules, params, best_rules=_image_best)


def _images_fp16(tiny: bool) -> Case:
    B, S = (2, 8) if tiny else (64, 224)
    return image_case(B, S, torch.float16, False, f"images-fp16-{B}x3x{S}x{S}")


def _images_channels_last(tiny: bool) -> Case:
    """float32 images in channels_last; the `tc-c-contiguous` contender checks the same images contiguous."""
    B, S = (2, 8) if tiny else (64, 224)
    return image_case(B, S, torch.float32, True, f"images-channels-last-{B}x3x{S}x{S}")


SCENARIOS = [
    Scenario("bert", _bert, description="bert-sequence-classification, 32 x 128"),
    Scenario("bert-b1", _bert_b1, description="bert-sequence-classification, 1 x 16"),
    Scenario("layoutlmv3", _layoutlmv3, description="layoutlmv3-token-classification, 8 x 512, 224 x 224 images"),
    Scenario("bart", _bart, description="bart-seq2seq, 16 x 1024 source, 16 x 128 target"),
    Scenario("ctc", _ctc, description="ctc, T=400 N=16 C=32 S=100"),
    Scenario("big", _big, big=True, description="layoutlmv3-token-classification, 400 x 512 + 400 images: 254 MB"),
    Scenario("bert-fresh", _bert_fresh, description="bert-sequence-classification, 32 x 128, a new copy every call"),
    Scenario("bert-bad", _bert_bad_ids, description="bert-sequence-classification, 4096 x 16, 1% of the ids bad"),
    Scenario("images-fp16", _images_fp16, description="image classification, 64 x 3 x 224 x 224 float16"),
    Scenario("images-channels-last", _images_channels_last,
             description="image classification, 64 x 3 x 224 x 224 float32 channels_last (and contiguous)"),
    Scenario("causal-lm-256", _causal_lm_256, big=True, description="causal-lm, 2730 x 4096: 256 MiB"),
]
DATALOADER_SCENARIOS = ("layoutlmv3", "bert")

# every parameter a built-in spec may take; each spec picks its own from this "config"
BUILTIN_PARAMS = dict(LAYOUTLMV3, type_vocab_size=2, in_channels=3, num_classes=4, min_length=2)


def scenario(name: str) -> Scenario:
    for s in SCENARIOS:
        if s.name == name:
            return s
    raise ValueError(f"unknown scenario {name!r}; choose from {sorted(s.name for s in SCENARIOS)}")


# the scaling sweep: check time against batch bytes, one family (causal LM: int64 ids, mask, labels)
SCALING_BYTES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 512 << 20]
SCALING_CONTENDERS = ("tc-torch", "tc-c", "tc-triton")  # tc-c times CPU batches, tc-triton CUDA ones


def size_text(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g}{unit}"
    return f"{nbytes}B"


def scaling_case(nbytes: int) -> Case:
    """A causal-LM batch of about `nbytes` (24 bytes a token): one row below 4096 tokens, rows of 512 above."""
    tokens = max(2, nbytes // 24)
    L = tokens if tokens < 4096 else 512
    return causal_lm_case(tokens // L, L, f"scaling-{size_text(nbytes)}")


def is_scaling(r: Result) -> bool:
    return r.scenario.startswith("scaling-")


def scaling_table(rows: list[Result]) -> str:
    """The scaling sweep's rows: per batch size, the plain read, the compiled backend of the run's device (C on
    CPU, Triton on CUDA) and the torch backend ("" if none)."""
    by = {(r.scenario, r.contender): r for r in rows if is_scaling(r)}
    sizes = sorted({(r.batch_bytes, r.scenario) for r in rows if is_scaling(r)})
    if not sizes:
        return ""
    timed = {c for (_, c), r in by.items() if r.median_ms}
    compiled, short = ("tc-triton", "Triton") if "tc-triton" in timed else ("tc-c", "C")
    out = [f"| batch | bytes | floor-read ms | {compiled} ms | tc-torch ms | {short} / floor-read | torch / floor-read "
           f"| {short} GB/s |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for nbytes, s in sizes:
        def get(c: str, column: str) -> Any:
            return getattr(by.get((s, c)), column, None)

        out.append(f"| {s} | {nbytes} | {_num(get('floor-read', 'median_ms'), 4)} "
                   f"| {_num(get(compiled, 'median_ms'), 4)} | {_num(get('tc-torch', 'median_ms'), 4)} "
                   f"| {ratio_text(get(compiled, 'x_floor_read'))} | {ratio_text(get('tc-torch', 'x_floor_read'))} "
                   f"| {_num(get(compiled, 'gb_per_s'), 2)} |")
    return "\n".join(out)


def _train_step(model: torch.nn.Module, batch: Batch) -> Callable[[], Any]:
    model.to(next(iter(batch.values())).device).train()
    params = [p for p in model.parameters() if p.requires_grad]

    def step() -> None:
        for p in params:
            p.grad = None
        model(**batch).loss.backward()

    return step


def samples_of(case: Case) -> list[dict[str, torch.Tensor]]:
    """The per-sample dicts that `default_collate` would have stacked into this batch."""
    bd = case.spec.batch_dim
    axes = {k: list(case.spec.fields[k].shape).index(bd) for k in case.batch}
    n = next(iter(case.batch.values())).shape[axes[next(iter(case.batch))]]
    return [{k: v.select(axes[k], i).contiguous() for k, v in case.batch.items()} for i in range(n)]


def batch_bytes(batch: Mapping[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in batch.values())


# --------------------------------------------------------------------------- contenders


class Contender:
    """`prepare_each(case, sample)` returns a callable that checks a batch shaped like `sample` and
    returns ok: bool; `prepare(case, batch)` binds it to one batch."""

    name = "?"

    def skip_reason(self, device: torch.device) -> str | None:
        return None

    def wants(self, case: Case) -> bool:
        """Whether this contender belongs in the scenario's rows at all."""
        return True

    def prepare_each(self, case: Case, sample: Batch) -> Callable[[Batch], bool]:
        raise NotImplementedError

    def prepare(self, case: Case, batch: Batch) -> Callable[[], bool]:
        return functools.partial(self.prepare_each(case, batch), batch)


class HandAssert(Contender):
    name = "hand-assert"

    def prepare_each(self, case: Case, sample: Batch) -> Callable[[Batch], bool]:
        def fn(batch: Batch) -> bool:
            for ok in case.rules(batch, case.params):  # bool() on a tensor: one host read (sync) per rule
                if not bool(ok):
                    return False  # what `assert` does, without the exception
            return True

        return fn


class HandOneSync(Contender):
    name = "hand-1sync"

    def rules(self, case: Case) -> Rules:
        return case.rules

    def prepare_each(self, case: Case, sample: Batch) -> Callable[[Batch], bool]:
        rules = self.rules(case)

        def fn(batch: Batch) -> bool:
            host, dev = [], []
            for ok in rules(batch, case.params):
                (dev if isinstance(ok, torch.Tensor) else host).append(ok)
            return all(host) and bool(torch.stack(dev).all())

        return fn


class HandBest(HandOneSync):
    """The best hand-written torch: one `aminmax` pass per range or finiteness check, one host read."""

    name = "hand-best"

    def rules(self, case: Case) -> Rules:
        if case.best_rules is None:
            raise ValueError(f"{case.name} has no best hand-written rules")
        return case.best_rules


_COMPILES = itertools.count()


def _own_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` with a code object of its own. torch.compile caches per code object: every scenario's
    `all_rules` sharing one hit its recompile limit (8) in a full run, after which it ran eager
    under the compiled contender's name."""
    code = fn.__code__.replace(co_name=f"{fn.__name__}_{next(_COMPILES)}")
    return types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)


class HandCompiled(Contender):
    name = "hand-compiled"

    def prepare_each(self, case: Case, sample: Batch) -> Callable[[Batch], bool]:
        def all_rules(b: Batch) -> torch.Tensor:
            host, dev = True, []
            for ok in case.rules(b, case.params):  # host bools (shapes) become constants of the graph
                if isinstance(ok, torch.Tensor):
                    dev.append(ok)
                else:
                    host = host and bool(ok)
            return torch.stack(dev).all() & host

        compiled = torch.compile(_own_code(all_rules), dynamic=False)
        compiled(sample)  # compile now, outside the timed region; raises if compile does not work here
        return lambda b: bool(compiled(b))


def _comparable(value: Any) -> Any:
    """A report's dict with NaN equal to itself and 1, 1.0 and True kept apart."""
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_comparable(v) for v in value]
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else repr(value))
    if isinstance(value, (bool, int)):
        return (type(value).__name__, value)
    return value


def same_report_as_torch(batch: Batch, spec: Any, backend: str) -> bool:
    """Whether `backend`'s whole report on `batch` (violations, counts, first indices, values) is the
    torch backend's."""
    import tritoncheck as tc

    got, ref = (tc.check(batch, spec, backend=b).to_dict() | {"backend": "-"} for b in (backend, "torch"))
    return _comparable(got) == _comparable(ref)


class TritonCheck(Contender):
    def __init__(self, backend: str):
        self.backend = backend
        self.name = f"tc-{backend}"

    def skip_reason(self, device: torch.device) -> str | None:
        if self.backend == "triton" and device.type != "cuda":
            return "skipped: no GPU (under TRITON_INTERPRET the kernel is too slow to time meaningfully)"
        if self.backend == "c" and device.type != "cpu":
            return "skipped: the C backend checks CPU tensors"
        return None

    def prepare_each(self, case: Case, sample: Batch) -> Callable[[Batch], bool]:
        import tritoncheck as tc

        backend, spec = self.backend, case.spec
        ran = tc.check(sample, spec, backend=backend).backend  # compiles now, outside the timed region
        if ran != backend:  # a fallback (no C compiler) is not timed under this backend's name
            raise RuntimeError(f"backend={backend!r} fell back to {ran!r}")
        if backend != "torch" and not same_report_as_torch(sample, spec, backend):
            raise RuntimeError(f"backend={backend!r}: its report differs from the torch backend's")
        return lambda b: tc.check(b, spec, backend=backend).ok


class TritonCheckContiguous(TritonCheck):
    """The C backend on a contiguous copy of a strided batch (made once, untimed): what the strided
    batch's own check is held to."""

    def __init__(self) -> None:
        super().__init__("c")
        self.name = "tc-c-contiguous"

    def wants(self, case: Case) -> bool:
        return not case.fresh and not all(t.is_contiguous() for t in case.batch.values())

    def prepare(self, case: Case, batch: Batch) -> Callable[[], bool]:
        contiguous = {k: v.contiguous() for k, v in batch.items()}
        return functools.partial(self.prepare_each(case, contiguous), contiguous)


def default_contenders() -> list[Contender]:
    return [HandAssert(), HandOneSync(), HandBest(), HandCompiled(), TritonCheck("torch"), TritonCheck("c"),
            TritonCheckContiguous(), TritonCheck("triton")]


def floor_each(case: Case) -> dict[str, Callable[[Batch], Any]]:
    """The floors as functions of a batch: one `sum` per tensor (a plain read), one `aminmax` per tensor
    (bools read as bytes), and the scenario's own."""

    def tensors(b: Batch) -> list[torch.Tensor]:
        return [t.view(torch.uint8) if t.dtype == torch.bool else t for t in b.values()]

    return {"floor-read": lambda b: [t.sum() for t in tensors(b)],
            "floor-aminmax": lambda b: [torch.aminmax(t) for t in tensors(b)], **case.extra_floors}


def floor_fns(batch: Batch) -> dict[str, Callable[[], Any]]:
    """The two floors: one `sum` per tensor (a plain read) and one `aminmax` per tensor (bools as bytes)."""
    ts = [t.view(torch.uint8) if t.dtype == torch.bool else t for t in batch.values()]
    return {"floor-read": lambda: [t.sum() for t in ts], "floor-aminmax": lambda: [torch.aminmax(t) for t in ts]}


# --------------------------------------------------------------------------- timing


FRESH_CHUNK = 8  # fresh batches made (untimed) between two reads of the clock: a few, so they stay in cache


def time_cpu(fns: Mapping[str, Callable[..., Any]], rounds: int, *, clock: str = "thread", budget_s: float = 20.0,
             sample_ms: float = 2.0, fresh: Callable[[], Any] | None = None) -> dict[str, list[float]]:
    """Milliseconds per call of each fn, one sample per round; each round times every fn in turn.

    A sample is `n` back-to-back calls divided by `n`, with `n` fixed per fn so that a sample
    lasts about `sample_ms`: a 20 us check is not measured with a clock that costs about 1 us to
    read. `rounds` shrinks to fit `budget_s`, never below `MIN_ROUNDS`. clock "thread" is this
    thread's CPU time (`time.thread_time`), which leaves out the time other processes hold the
    core; "wall" is `time.perf_counter`. With `fresh`, each fn takes a batch and every call gets a
    new one from `fresh()`, made outside the clock, `FRESH_CHUNK` at a time.
    """
    now = {"thread": time.thread_time, "wall": time.perf_counter}[clock]

    def one(fn: Callable[..., Any]) -> Any:
        return fn() if fresh is None else fn(fresh())

    def sample(fn: Callable[..., Any], n: int) -> float:
        if fresh is None:
            t0 = now()
            for _ in range(n):
                fn()
            return now() - t0
        spent = 0.0
        for start in range(0, n, FRESH_CHUNK):
            batches = [fresh() for _ in range(min(FRESH_CHUNK, n - start))]
            t0 = now()
            for b in batches:
                fn(b)
            spent += now() - t0
        return spent

    calls: dict[str, int] = {}
    per_round = 0.0
    for name, fn in fns.items():
        one(fn)  # warm: first-call costs (allocations, caches) are not what a steady state pays
        t0 = time.perf_counter()
        one(fn)
        once = max(time.perf_counter() - t0, 1e-7)
        calls[name] = max(1, min(10_000, int(sample_ms * 1e-3 / once)))
        per_round += calls[name] * once
    rounds = max(MIN_ROUNDS, min(rounds, int(budget_s / per_round)))
    out: dict[str, list[float]] = {n: [] for n in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            out[name].append(sample(fn, calls[name]) * 1e3 / calls[name])
    return out


def time_gpu(fn: Callable[[], Any]) -> list[float]:
    """(median, p20, p80) in ms from triton's do_bench, or from CUDA events without triton."""
    try:
        from triton.testing import do_bench
    except ImportError:
        do_bench = None
    if do_bench is not None:
        return list(do_bench(fn, quantiles=[0.5, 0.2, 0.8]))
    for _ in range(5):
        fn()
    times = []
    for _ in range(50):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return _quantiles(times)


def wall_per_call(fn: Callable[[], Any], calls: int = 50) -> float:
    """Median wall time of one call followed by a device synchronise, calls back to back.

    do_bench times the device between two events and flushes the L2 cache before each call; the
    host's work before a launch overlaps that flush and is not counted. This is what a step pays.
    """
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _quantiles(ms: list[float]) -> list[float]:
    s = sorted(ms)

    def q(p: float) -> float:
        return s[min(len(s) - 1, int(round(p * (len(s) - 1))))]

    return [statistics.median(s), q(0.2), q(0.8)]


PROFILED = "tritoncheck-profiled"  # the profiler range around the calls being counted
DEVICE_SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")


@dataclass
class DeviceCounts:
    """What the profiled calls did on a GPU, in all (divide by the calls for per-call figures)."""

    kernels: int = 0
    dtoh: int = 0  # device-to-host copies
    htod: int = 0
    memsets: int = 0
    syncs: int = 0  # host calls that wait on the device, made inside the profiled range
    kernel_times: list[tuple[str, float]] = field(default_factory=list)  # (name, device us) of each kernel


def device_counts(events: Any) -> DeviceCounts:
    """Count a profile's device work and the host's synchronisations inside the `PROFILED` range.

    Only syncs inside the range count: the profiler and the synchronize that ends a profile make
    their own (a GPU run of 2026-11-26 counted one too many per check without this). The range's
    own annotation on the device timeline is not a kernel.
    """
    cuda = torch.autograd.DeviceType.CUDA
    marks = [e.time_range for e in events if e.name == PROFILED and e.device_type != cuda]
    out = DeviceCounts()
    for e in events:
        if e.name == PROFILED:
            continue
        if e.device_type == cuda:
            if e.name.startswith("Memcpy DtoH"):
                out.dtoh += 1
            elif e.name.startswith("Memcpy HtoD"):
                out.htod += 1
            elif e.name.startswith("Memset"):
                out.memsets += 1
            elif not e.name.startswith("Memcpy"):
                out.kernels += 1
                out.kernel_times.append((e.name, e.time_range.elapsed_us()))
        elif e.name in DEVICE_SYNCS and any(m.start <= e.time_range.start and e.time_range.end <= m.end
                                            for m in marks):
            out.syncs += 1
    return out


def profile_device(fn: Callable[[], Any], calls: int = 1) -> tuple[DeviceCounts, Any]:
    """`calls` calls of fn under torch.profiler on a GPU: their `DeviceCounts` and the events."""
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function(PROFILED):
            for _ in range(calls):
                fn()
        torch.cuda.synchronize()  # every kernel ends inside the profile
    events = prof.events()
    return device_counts(events), events


def count_ops(fn: Callable[[], Any], device: torch.device) -> tuple[int, int]:
    """(launches, syncs) for one call, from torch.profiler.

    GPU: device kernels (memcpy/memset excluded) and host synchronisations (`device_counts`). CPU:
    top-level aten ops dispatched, and host reads of a tensor value (`aten::_local_scalar_dense`:
    `.item()`, `bool(t)`), each of which is a sync on a GPU.
    """
    from torch.profiler import ProfilerActivity, profile

    if device.type == "cuda":
        counts, events = profile_device(fn)
        reads = sum(1 for e in events if e.name == "aten::_local_scalar_dense")
        return counts.kernels, max(counts.syncs, reads)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    events = prof.events()
    reads = sum(1 for e in events if e.name == "aten::_local_scalar_dense")
    top = 0
    for e in events:
        if e.name.startswith("aten::"):
            p = e.cpu_parent
            while p is not None and not p.name.startswith("aten::"):
                p = p.cpu_parent
            top += p is None
    return top, reads


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # not on every platform
        return None


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# --------------------------------------------------------------------------- startup: DataLoader, cold compile


class _TimedCollate:
    """default_collate that keeps its own thread CPU time, so the validation around it can be told apart."""

    def __init__(self) -> None:
        from torch.utils.data import default_collate

        self.collate = default_collate
        self.ms = 0.0

    def __call__(self, samples: list[Any]) -> Any:
        t0 = time.thread_time()
        batch = self.collate(samples)
        self.ms = (time.thread_time() - t0) * 1e3
        return batch


class _ValidationTimer:
    """A DataLoader collate_fn: `ValidatingCollate` (made here, in the parent, so it warms up before the
    fork), returning per batch the worker's pid and what validation cost (its time minus the collate's)."""

    def __init__(self, spec: Any, warmup: bool):
        import tritoncheck as tc

        self.inner = _TimedCollate()
        self.collate = tc.ValidatingCollate(spec, collate_fn=self.inner, warmup=warmup)
        self.spec = spec

    def __call__(self, samples: list[Any]) -> dict[str, Any]:
        import tritoncheck as tc

        w0, t0 = time.perf_counter(), time.thread_time()
        batch = self.collate(samples)
        cpu_ms, wall_ms = (time.thread_time() - t0) * 1e3, (time.perf_counter() - w0) * 1e3
        backend = tc.check(batch, self.spec).backend  # untimed: which backend the collate used
        return {"pid": os.getpid(), "ms": cpu_ms - self.inner.ms, "wall_ms": wall_ms - self.inner.ms, "backend": backend}


def first_batches(scenario_name: str, tiny: bool, warmup: bool, per_worker: int = 3) -> list[dict[str, Any]]:
    """In this (fresh) process: a DataLoader with two forked workers over the scenario's samples,
    collated and checked by `ValidatingCollate`; per batch, in order, what `_ValidationTimer` returns."""
    from torch.utils.data import DataLoader

    torch.set_num_threads(1)
    case = scenario(scenario_name).build(tiny)
    samples = samples_of(case)
    timer = _ValidationTimer(case.spec, warmup)
    loader = DataLoader(samples * (DATALOADER_WORKERS * per_worker), batch_size=len(samples),
                        num_workers=DATALOADER_WORKERS, multiprocessing_context="fork", collate_fn=timer)
    return list(loader)


def cold_compile(spec_name: str, cache_dir: str) -> dict[str, Any]:
    """In this (fresh) process, with an empty cache: `tc.warmup(spec, backend="c")`, and the CPU
    seconds it cost this process and the compiler processes it ran."""
    import resource

    os.environ["TRITONCHECK_CACHE_DIR"] = cache_dir
    import tritoncheck as tc

    spec = tc.load_spec(spec_name, config=BUILTIN_PARAMS)
    kids0, cpu0, wall0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.process_time(), time.perf_counter()
    backend = tc.warmup(spec, backend="c")
    kids1, cpu1, wall1 = resource.getrusage(resource.RUSAGE_CHILDREN), time.process_time(), time.perf_counter()
    kids = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
    libraries = sum(name.endswith(".so") for _, _, names in os.walk(cache_dir) for name in names)
    return {"backend": backend, "self_s": cpu1 - cpu0, "children_s": kids, "wall_s": wall1 - wall0, "libraries": libraries}


def _in_fresh_process(function: str, *args: Any) -> Any:
    """`function(*args)` of this module, run in a new interpreter; its JSON result."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = (f"import json, sys; sys.path.insert(0, {here!r}); from harness import {function}; "
            f"print(json.dumps({function}(*json.loads(sys.argv[1]))))")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(args)], capture_output=True, text=True,
                          timeout=600, check=False)
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{function} failed in a fresh process: {tail[:200]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def startup_rows(opts: Options, row: Callable[..., Result], log: Callable[[str], None]) -> list[Result]:
    """DataLoader first batches (`opts.dataloader` scenarios) and cold compiles (`opts.cold_compile` specs)."""
    import tritoncheck as tc

    rows = []
    for name in opts.dataloader:
        case = scenario(name).build(opts.tiny)
        tc.warmup(case.spec, case.batch)  # the disk cache is warm: this signature and the warm-up's are built
        tc.warmup(case.spec)
        for warm in (True, False):
            what = "dataloader-first-batch" + ("" if warm else "-no-warmup")
            try:
                got = _in_fresh_process("first_batches", name, opts.tiny, warm)
            except (RuntimeError, subprocess.SubprocessError) as exc:
                rows.append(row(case.name, what, batch_bytes(case.batch), note=f"skipped: {exc}"))
                continue
            firsts: dict[int, dict[str, Any]] = {}
            for b in got:
                firsts.setdefault(b["pid"], b)
            later = [b["ms"] for b in got if firsts[b["pid"]] is not b]
            worst = max(firsts.values(), key=lambda b: b["ms"])
            parent = "ValidatingCollate warmed up in the parent" if warm else "no warm-up: each worker loads the kernel"
            cpu = ", ".join(f"{b['ms']:.2f}" for b in firsts.values())
            wall = ", ".join(f"{b['wall_ms']:.2f}" for b in firsts.values())
            note = (f"slowest of {len(firsts)} forked workers' first batch, thread CPU ms ({cpu}; wall {wall}); "
                    f"later batches: median {statistics.median(later):.3f} ms; backend {worst['backend']}; "
                    f"{parent}; warm disk cache")
            rows.append(row(case.name, what, batch_bytes(case.batch), rounds=1, median_ms=worst["ms"], note=note))
            log(f"  {what}: {worst['ms']:.2f} ms")
    for spec_name in opts.cold_compile:
        with tempfile.TemporaryDirectory(prefix="tc-cold-") as cache:
            try:
                got = _in_fresh_process("cold_compile", spec_name, cache)
            except (RuntimeError, subprocess.SubprocessError) as exc:
                rows.append(row(spec_name, "cold-compile", 0, note=f"skipped: {exc}"))
                continue
        total, kernels = got["self_s"] + got["children_s"], max(got["libraries"], 1)
        note = (f"CPU per kernel of tc.warmup(spec, backend='c') with an empty cache: {got['libraries']} kernel(s), "
                f"{total:.2f} s CPU in all (this process {got['self_s']:.2f} + compiler {got['children_s']:.2f}), "
                f"wall {got['wall_s']:.2f} s; backend {got['backend']}")
        rows.append(row(spec_name, "cold-compile", 0, clock="cpu", rounds=1, median_ms=1e3 * total / kernels, note=note))
        log(f"  cold compile {spec_name}: {total:.2f} s CPU, {got['libraries']} kernel(s)")
    return rows


# --------------------------------------------------------------------------- run


@dataclass
class Options:
    scenarios: list[str] = field(default_factory=lambda: [s.name for s in SCENARIOS if not s.big])
    device: str = "cpu"
    rounds: int = 30
    threads: int = 1
    tiny: bool = False
    step: bool = False  # time a small model's training step on each batch
    contenders: list[str] | None = None  # names; None = all
    budget_s: float = 20.0  # per scenario, CPU timing
    clock: str = "thread"  # CPU: "thread" (thread CPU time) or "wall" (perf_counter)
    dataloader: list[str] = field(default_factory=list)  # scenarios to measure in forked DataLoader workers
    cold_compile: list[str] = field(default_factory=list)  # built-in spec names to compile cold
    stamp: str | None = None  # the run's timestamp (default: now); a run made of several calls passes one
    scaling: list[int] = field(default_factory=list)  # batch bytes of the scaling sweep (SCALING_BYTES in a full run)


def run_benchmarks(opts: Options, log: Callable[[str], None] = lambda s: None) -> list[Result]:
    """Build each scenario, check every contender agrees on a valid and a broken batch, time them."""
    import tritoncheck as tc

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = ""
    device = torch.device(opts.device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"--device must be cpu or cuda, got {opts.device!r}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda asked for, but torch sees no CUDA device")
    torch.set_num_threads(opts.threads)
    stamp = opts.stamp or time.strftime("%Y-%m-%dT%H:%M:%S")
    dname = device_name(device)
    clock = "cuda" if device.type == "cuda" else opts.clock
    contenders = [c for c in default_contenders() if opts.contenders is None or c.name in opts.contenders]

    def row(scenario_name: str, contender: str, nbytes: int, **kw: Any) -> Result:
        kw.setdefault("clock", clock)
        return Result(stamp, dname, opts.threads, load_avg=load_average(), torch_version=torch.__version__,
                      triton_version=triton_version, tritoncheck_version=tc.__version__, scenario=scenario_name,
                      contender=contender, batch_bytes=nbytes, **kw)

    rows: list[Result] = []
    for sname in opts.scenarios:
        rows += _scenario_rows(scenario(sname).build(opts.tiny), opts, device, contenders, row, log)
    sweep = [c for c in default_contenders() if c.name in SCALING_CONTENDERS]
    for nbytes in opts.scaling:
        rows += _scenario_rows(scaling_case(nbytes), opts, device, sweep, row, log, extras=False)
    rows += startup_rows(opts, row, log)
    return rows


def _scenario_rows(case: Case, opts: Options, device: torch.device, contenders: list[Contender],
                   row: Callable[..., Result], log: Callable[[str], None], extras: bool = True) -> list[Result]:
    """The scenario's rows: every contender and floor timed on it; with `extras`, also the collate and
    (with `opts.step`) a training step on the same batch."""
    batch = {k: v.to(device) for k, v in case.batch.items()}
    bad = {k: v.to(device) for k, v in case.bad.items()}
    nbytes = batch_bytes(batch)
    log(f"{case.name}: {nbytes / 1e6:.1f} MB")
    timed_batch = bad if case.timed_bad else batch
    fresh = case.fresh and device.type == "cpu"
    fns: dict[str, Callable[[], bool]] = {}  # each bound to the timed batch
    each: dict[str, Callable[[Batch], bool]] = {}  # fresh scenarios: each taking the batch of the call
    skipped: dict[str, str] = {}
    for c in contenders:
        if not c.wants(case):
            continue
        reason = c.skip_reason(device)
        if reason is None:
            try:
                fn, bad_fn = c.prepare(case, batch), c.prepare(case, bad)
                verdicts = (fn(), bad_fn())
                if verdicts != (True, False):
                    reason = f"disagrees: valid -> {verdicts[0]}, broken -> {verdicts[1]}"
                elif fresh:
                    each[c.name] = c.prepare_each(case, batch)
            except Exception as exc:  # noqa: BLE001 - a contender that cannot run here is recorded, not fatal
                reason = f"skipped: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
        if reason is None:
            fns[c.name] = bad_fn if case.timed_bad else fn
        else:
            skipped[c.name] = reason
            log(f"  {c.name}: {reason}")

    floors = {**floor_fns(timed_batch),
              **{n: functools.partial(f, timed_batch) for n, f in case.extra_floors.items()}}
    timed_fns = {**floors, **fns}
    walls: dict[str, float] = {}
    notes = []
    if case.timed_bad:
        notes.append("timed on the broken batch")
    if case.fresh:
        notes.append("a new copy of the batch for every call (made untimed)" if fresh else
                     "the same batch every call (fresh copies only on CPU)")
    if device.type == "cuda":
        timed = {n: time_gpu(f) for n, f in timed_fns.items()}
        walls = {n: wall_per_call(f) for n, f in timed_fns.items()}
        rounds = None
    else:
        if fresh:
            raw = time_cpu({**floor_each(case), **each}, opts.rounds, clock=opts.clock, budget_s=opts.budget_s,
                           fresh=lambda: {k: v.clone() for k, v in timed_batch.items()})
        else:
            raw = time_cpu(timed_fns, opts.rounds, clock=opts.clock, budget_s=opts.budget_s)
        timed = {n: _quantiles(v) for n, v in raw.items()}
        rounds = len(raw["floor-read"])

    collate_ms = step_ms = None
    step_note = ""
    if device.type == "cpu" and extras:
        from torch.utils.data import default_collate

        samples = samples_of(case)
        collate_ms = _quantiles(time_cpu({"c": lambda: default_collate(samples)}, 20, clock=opts.clock,
                                         budget_s=10)["c"])[0]
    if opts.step and extras and case.model_step is not None:
        try:
            step = case.model_step(batch)
            if device.type == "cuda":
                step_ms = time_gpu(step)[0]
            else:
                step_ms = _quantiles(time_cpu({"s": step}, MIN_ROUNDS, clock=opts.clock, budget_s=30)["s"])[0]
            step_note = case.step_note
        except Exception as exc:  # noqa: BLE001
            step_note = f"step skipped: {type(exc).__name__}: {exc}"[:160]
        log(f"  step {step_ms} ms ({step_note})")

    hand = timed["hand-assert"][0] if "hand-assert" in timed else None
    floor_read, floor_aminmax = timed["floor-read"][0], timed["floor-aminmax"][0]
    rows = []
    for name, (med, p20, p80) in timed.items():
        launches = syncs = None
        if name in fns:
            launches, syncs = count_ops(fns[name], device)
        rows.append(row(case.name, name, nbytes, rounds=rounds, median_ms=med, p20_ms=p20, p80_ms=p80,
                        gb_per_s=nbytes / (med * 1e-3) / 1e9, x_hand_assert=hand / med if hand else None,
                        x_floor_read=med / floor_read, x_floor_aminmax=med / floor_aminmax,
                        launches=launches, syncs=syncs, share_of_step=med / step_ms if step_ms else None,
                        share_of_collate=med / collate_ms if collate_ms else None,
                        note="; ".join([*notes, *([f"wall {walls[name]:.4f} ms a call, synchronised, back to back"]
                                                  if walls else [])])))
        log(f"  {name:14s} {med:9.4f} ms" + (f", wall {walls[name]:.4f} ms" if walls else ""))
    for name, reason in skipped.items():
        rows.append(row(case.name, name, nbytes, note=reason))
    if collate_ms is not None:
        rows.append(row(case.name, "collate", nbytes, median_ms=collate_ms,
                        note="default_collate over the batch's samples"))
    if step_ms is not None:
        rows.append(row(case.name, "train-step", nbytes, median_ms=step_ms, note=step_note))
    return rows


__all__ = ["COLUMNS", "SCALING_BYTES", "SCENARIOS", "Options", "Result", "append_csv", "is_scaling", "latest_run",
           "markdown_table", "ratio_text", "read_csv", "run_benchmarks", "scaling_table", "startup_table"]
