"""`tritoncheck bench`: tritoncheck against the checks users write by hand, in one run.

Everything the command needs lives here, so it works from an installed package; the scripts
in the repository's `benchmarks/` (full run with model steps, the 1 GB batch, CSV history,
plots) call into this module.

Each scenario builds a spec and a realistic valid batch for a built-in family, plus the same
contract written by hand as a generator of per-rule checks. Every contender turns
`(case, batch)` into a callable returning `ok: bool`, and is timed on the same batch in the same
run, rounds interleaved so that a noisy neighbour slows every contender alike:

- `hand-assert`: a `.all()` per rule with a host read each (`assert (ids < V).all()`);
- `hand-1sync`: the same rules, stacked, one host read at the end;
- `hand-compiled`: the one-sync version under `torch.compile`;
- `tc-torch` / `tc-triton`: `tc.check(batch, spec, backend=...)`;
- `floor`: one read of every byte of the batch (`aminmax` per tensor on CPU; bytes over the
  measured device-copy bandwidth on GPU), the cost no validator can beat.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

Batch = dict[str, torch.Tensor]
Rules = Callable[[Batch, Mapping[str, Any]], Iterator[Any]]  # yields a 0-d bool tensor or a host bool per rule


# --------------------------------------------------------------------------- results


@dataclass
class Result:
    """One CSV row: one contender on one scenario. The column order is the CSV schema."""

    timestamp: str
    device: str
    threads: int
    torch_version: str
    triton_version: str
    tritoncheck_version: str
    scenario: str
    contender: str
    batch_bytes: int
    median_ms: float | None = None
    p20_ms: float | None = None
    p80_ms: float | None = None
    gb_per_s: float | None = None
    floor_fraction: float | None = None  # floor time / this time; 1.0 = reads the batch once at full speed
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


def _fmt(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


def markdown_table(rows: list[Result]) -> str:
    """A README table: per scenario, each contender's time, speed-up over hand-assert, GB/s and shares."""
    hand = {r.scenario: r.median_ms for r in rows if r.contender == "hand-assert" and r.median_ms}
    out = [
        "| scenario | contender | median ms | vs hand-assert | GB/s | of floor | ops/launches | syncs "
        "| of step | of collate | note |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        timed = r.median_ms and r.scenario in hand and r.contender not in ("collate", "train-step")
        speed = f"{hand[r.scenario] / r.median_ms:.1f}x" if timed else ""
        out.append(
            "| " + " | ".join([
                r.scenario, r.contender, _num(r.median_ms, 3), speed, _num(r.gb_per_s, 2),
                _pct(r.floor_fraction), _num(r.launches, 0), _num(r.syncs, 0), _pct(r.share_of_step),
                _pct(r.share_of_collate), r.note.replace("|", "/"),
            ]) + " |"
        )
    return "\n".join(out)


def _num(v: float | int | None, digits: int) -> str:
    return "" if v is None else f"{v:.{digits}f}"


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


@dataclass
class Scenario:
    name: str
    build: Callable[[bool], Case]  # build(tiny) -> Case; tiny sizes are for the smoke test
    big: bool = False  # needs about 1 GB; off unless asked for
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


def _bert(tiny: bool) -> Case:
    import tritoncheck as tc

    B, L = (4, 16) if tiny else (32, 128)
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
    return Case("bert-32x128" if not tiny else "bert-tiny", spec, batch,
                _bad_copy(batch, "input_ids", (B - 1, 1), BERT["vocab_size"]), _bert_rules, BERT,
                _bert_step, "BertForSequenceClassification, 2 layers, hidden 128 (bert-tiny size)")


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
    yield px.shape == (B, p["num_channels"], p["input_size"], p["input_size"])
    yield (ids >= 0).all()
    yield (ids < p["vocab_size"]).all()
    yield (bbox >= 0).all()
    yield (bbox < p["max_2d_position_embeddings"]).all()
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
                params, _layoutlmv3_step, "LayoutLMv3ForTokenClassification, 2 layers, hidden 128")


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
                "BartForConditionalGeneration, 2+2 layers, d_model 128, target 128")


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
                {"blank": 0}, _ctc_step, "F.ctc_loss forward + backward (the loss step only)")


def _ctc_step(batch: Batch) -> Callable[[], Any]:
    import torch.nn.functional as F

    lp = batch["log_probs"].detach().clone().requires_grad_(True)

    def step() -> None:
        lp.grad = None
        F.ctc_loss(lp, batch["targets"], batch["input_lengths"], batch["target_lengths"]).backward()

    return step


# 1 GB -------------------------------------------------------------------------


def _big(tiny: bool) -> Case:
    import tritoncheck as tc

    B, L, S = (2, 16, 32) if tiny else (1664, 512, 224)  # 1664 page images of 3x224x224 float32 = 1.0 GB
    params = dict(LAYOUTLMV3, input_size=S)
    batch = _layoutlmv3_batch(B, L, S, _gen(5))
    spec = tc.load_spec("layoutlmv3-token-classification", **params)
    return Case(f"layoutlmv3-{B}x{L}-1GB" if not tiny else "big-tiny", spec, batch,
                _bad_copy(batch, "bbox", (B - 1, L - 1, 2), -5), _layoutlmv3_rules, params)


SCENARIOS = [
    Scenario("bert", _bert, description="bert-sequence-classification, 32 x 128"),
    Scenario("layoutlmv3", _layoutlmv3, description="layoutlmv3-token-classification, 8 x 512, 224 x 224 images"),
    Scenario("bart", _bart, description="bart-seq2seq, 16 x 1024 source, 16 x 128 target"),
    Scenario("ctc", _ctc, description="ctc, T=400 N=16 C=32 S=100"),
    Scenario("big", _big, big=True, description="layoutlmv3-token-classification, 1664 x 512 + 1 GB of images"),
]


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
    """`prepare(case, batch)` returns a callable that checks `batch` and returns ok: bool."""

    name = "?"

    def skip_reason(self, device: torch.device) -> str | None:
        return None

    def prepare(self, case: Case, batch: Batch) -> Callable[[], bool]:
        raise NotImplementedError


class HandAssert(Contender):
    name = "hand-assert"

    def prepare(self, case: Case, batch: Batch) -> Callable[[], bool]:
        def fn() -> bool:
            for ok in case.rules(batch, case.params):  # bool() on a tensor: one host read (sync) per rule
                if not bool(ok):
                    return False  # what `assert` does, without the exception
            return True

        return fn


class HandOneSync(Contender):
    name = "hand-1sync"

    def prepare(self, case: Case, batch: Batch) -> Callable[[], bool]:
        def fn() -> bool:
            host, dev = [], []
            for ok in case.rules(batch, case.params):
                (dev if isinstance(ok, torch.Tensor) else host).append(ok)
            return all(host) and bool(torch.stack(dev).all())

        return fn


class HandCompiled(Contender):
    name = "hand-compiled"

    def prepare(self, case: Case, batch: Batch) -> Callable[[], bool]:
        def all_rules(b: Batch) -> torch.Tensor:
            host, dev = True, []
            for ok in case.rules(b, case.params):  # host bools (shapes) become constants of the graph
                if isinstance(ok, torch.Tensor):
                    dev.append(ok)
                else:
                    host = host and bool(ok)
            return torch.stack(dev).all() & host

        compiled = torch.compile(all_rules, dynamic=False)
        compiled(batch)  # compile now, outside the timed region; raises if compile does not work here
        return lambda: bool(compiled(batch))


class TritonCheck(Contender):
    def __init__(self, backend: str):
        self.backend = backend
        self.name = f"tc-{backend}"

    def skip_reason(self, device: torch.device) -> str | None:
        if self.backend == "triton" and device.type != "cuda":
            return "skipped: no GPU (under TRITON_INTERPRET the kernel is too slow to time meaningfully)"
        return None

    def prepare(self, case: Case, batch: Batch) -> Callable[[], bool]:
        import tritoncheck as tc

        backend = self.backend
        return lambda: tc.check(batch, case.spec, backend=backend).ok


def default_contenders() -> list[Contender]:
    return [HandAssert(), HandOneSync(), HandCompiled(), TritonCheck("torch"), TritonCheck("triton")]


# --------------------------------------------------------------------------- timing


def time_cpu(fns: Mapping[str, Callable[[], Any]], reps: int, warmup: int = 3,
             budget_s: float = 20.0, clock: str = "wall") -> dict[str, list[float]]:
    """Milliseconds per call for each fn; rounds interleave the fns so load drift hits all alike.

    clock "wall" is time.perf_counter; "thread" is this thread's CPU time (time.thread_time), which
    leaves out the time other processes hold the core: use it on a shared, loaded machine.
    """
    now = time.perf_counter if clock == "wall" else time.thread_time
    first: dict[str, float] = {}
    for name, fn in fns.items():
        t0 = time.perf_counter()
        fn()
        first[name] = time.perf_counter() - t0
        for _ in range(warmup - 1 if first[name] < 0.1 else 0):  # slow calls (the 1 GB batch) warm up once
            fn()
    per_round = sum(first.values())
    reps = min(reps, max(3, int(budget_s / max(per_round, 1e-9))))  # at least 3 unless fewer were asked for
    out: dict[str, list[float]] = {n: [] for n in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t0 = now()
            fn()
            out[name].append((now() - t0) * 1e3)
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


def _quantiles(ms: list[float]) -> list[float]:
    s = sorted(ms)

    def q(p: float) -> float:
        return s[min(len(s) - 1, int(round(p * (len(s) - 1))))]

    return [statistics.median(s), q(0.2), q(0.8)]


def count_ops(fn: Callable[[], Any], device: torch.device) -> tuple[int, int]:
    """(launches, syncs) for one call, from torch.profiler.

    GPU: device kernels (memcpy/memset excluded) and host synchronisations. CPU: top-level aten
    ops dispatched, and host reads of a tensor value (`aten::_local_scalar_dense`: `.item()`,
    `bool(t)`), each of which is a sync on a GPU.
    """
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
    events = prof.events()
    reads = sum(1 for e in events if e.name == "aten::_local_scalar_dense")
    if device.type == "cuda":
        kernels = sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA
                      and not e.name.startswith(("Memcpy", "Memset")))
        syncs = sum(1 for e in events if e.name in ("cudaStreamSynchronize", "cudaDeviceSynchronize",
                                                    "cudaEventSynchronize", "cudaMemcpy"))
        return kernels, max(syncs - 1, reads)  # minus the synchronize above
    top = 0
    for e in events:
        if e.name.startswith("aten::"):
            p = e.cpu_parent
            while p is not None and not p.name.startswith("aten::"):
                p = p.cpu_parent
            top += p is None
    return top, reads


def floor_fn(batch: Batch) -> Callable[[], Any]:
    """One read of every byte: aminmax per tensor (bools viewed as bytes)."""
    ts = [t.view(torch.uint8) if t.dtype == torch.bool else t for t in batch.values()]
    return lambda: [torch.aminmax(t) for t in ts]


def device_copy_gbps(device: torch.device, nbytes: int = 1 << 28) -> float:
    """Measured device-to-device copy bandwidth (bytes read + written), GB/s."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    ms = time_gpu(lambda: dst.copy_(src))[0]
    return 2 * nbytes / (ms * 1e-3) / 1e9


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except (AttributeError, OSError):  # not on every platform
        return "n/a"


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


# --------------------------------------------------------------------------- run


@dataclass
class Options:
    scenarios: list[str] = field(default_factory=lambda: [s.name for s in SCENARIOS if not s.big])
    device: str = "cpu"
    reps: int = 30
    threads: int = 1
    tiny: bool = False
    step: bool = False  # time a small model's training step on each batch
    contenders: list[str] | None = None  # names; None = all
    budget_s: float = 20.0  # per scenario, CPU timing
    clock: str = "wall"  # CPU: "wall" (perf_counter) or "thread" (thread CPU time; for loaded machines)


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
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    dname = device_name(device)
    copy_gbps = device_copy_gbps(device) if device.type == "cuda" else None
    contenders = [c for c in default_contenders() if opts.contenders is None or c.name in opts.contenders]
    by_name = {s.name: s for s in SCENARIOS}
    rows: list[Result] = []
    for sname in opts.scenarios:
        if sname not in by_name:
            raise ValueError(f"unknown scenario {sname!r}; choose from {sorted(by_name)}")
        case = by_name[sname].build(opts.tiny)
        batch = {k: v.to(device) for k, v in case.batch.items()}
        bad = {k: v.to(device) for k, v in case.bad.items()}
        nbytes = batch_bytes(batch)
        log(f"{case.name}: {nbytes / 1e6:.1f} MB")

        def row(contender: str, **kw: Any) -> Result:
            return Result(stamp, dname, opts.threads, torch.__version__, triton_version, tc.__version__,
                          case.name, contender, nbytes, **kw)

        fns: dict[str, Callable[[], bool]] = {}
        skipped: dict[str, str] = {}
        for c in contenders:
            reason = c.skip_reason(device)
            if reason is None:
                try:
                    fn, bad_fn = c.prepare(case, batch), c.prepare(case, bad)
                    verdicts = (fn(), bad_fn())
                    if verdicts != (True, False):
                        reason = f"disagrees: valid -> {verdicts[0]}, broken -> {verdicts[1]}"
                except Exception as exc:  # noqa: BLE001 - a contender that cannot run here is recorded, not fatal
                    reason = f"skipped: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
            if reason is None:
                fns[c.name] = fn
            else:
                skipped[c.name] = reason
                log(f"  {c.name}: {reason}")

        # floor: one read of the batch, measured in the same run
        if device.type == "cuda":
            timed = {n: time_gpu(f) for n, f in fns.items()}
            floor_ms = nbytes / (copy_gbps * 1e9) * 1e3
            floor_note = f"bytes / device copy bandwidth ({copy_gbps:.0f} GB/s)"
            timed["floor"] = [floor_ms] * 3
        else:
            raw = time_cpu({"floor": floor_fn(batch), **fns}, opts.reps, budget_s=opts.budget_s, clock=opts.clock)
            timed = {n: _quantiles(v) for n, v in raw.items()}
            floor_ms = timed["floor"][0]
            floor_note = (f"aminmax over each tensor; {len(raw['floor'])} reps, {opts.clock} clock, "
                          f"load average {_load()}")

        collate_ms = step_ms = None
        step_note = ""
        if device.type == "cpu":
            from torch.utils.data import default_collate

            samples = samples_of(case)
            collate_ms = _quantiles(time_cpu({"c": lambda: default_collate(samples)}, 20, budget_s=10,
                                             clock=opts.clock)["c"])[0]
        if opts.step and case.model_step is not None:
            try:
                step = case.model_step(batch)
                if device.type == "cuda":
                    step_ms = time_gpu(step)[0]
                else:
                    step_ms = _quantiles(time_cpu({"s": step}, 5, warmup=1, budget_s=30, clock=opts.clock)["s"])[0]
                step_note = case.step_note
            except Exception as exc:  # noqa: BLE001
                step_note = f"step skipped: {type(exc).__name__}: {exc}"[:160]
            log(f"  step {step_ms} ms ({step_note})")

        for name, (med, p20, p80) in timed.items():
            launches = syncs = None
            if name != "floor":
                launches, syncs = count_ops(fns[name], device)
            note = floor_note if name == "floor" else ""
            rows.append(row(name, median_ms=med, p20_ms=p20, p80_ms=p80, gb_per_s=nbytes / (med * 1e-3) / 1e9,
                            floor_fraction=floor_ms / med, launches=launches, syncs=syncs,
                            share_of_step=med / step_ms if step_ms else None,
                            share_of_collate=med / collate_ms if collate_ms else None, note=note))
            log(f"  {name:14s} {med:9.3f} ms")
        for name, reason in skipped.items():
            rows.append(row(name, note=reason))
        if collate_ms is not None:
            rows.append(row("collate", median_ms=collate_ms, note="default_collate over the batch's samples"))
        if step_ms is not None:
            rows.append(row("train-step", median_ms=step_ms, note=step_note))
    return rows


# --------------------------------------------------------------------------- command


def add_parser(sub: Any) -> None:
    p = sub.add_parser("bench", help="time tritoncheck against hand-written checks on realistic batches",
                       description="Time tritoncheck against hand-written checks (assert per rule, one sync, "
                       "torch.compile) on realistic batches of the built-in families.")
    p.add_argument("--scenario", action="append", dest="scenarios",
                   choices=[s.name for s in SCENARIOS], help="repeatable; default: every scenario but 'big'")
    p.add_argument("--big", action="store_true", help="add the 1 GB scenario")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda if available)")
    p.add_argument("--reps", type=int, default=30, help="timed repetitions on CPU (default 30)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--step", action="store_true", help="also time a small model's training step (needs transformers)")
    p.add_argument("--contender", action="append", dest="contenders",
                   choices=[c.name for c in default_contenders()], help="repeatable; default: all")
    p.add_argument("--clock", choices=["wall", "thread"], default="wall",
                   help="CPU timer: wall (perf_counter) or thread CPU time, for a loaded machine")
    p.add_argument("--csv", help="append the rows to this CSV file")
    p.add_argument("--tiny", action="store_true", help="tiny sizes (a smoke run)")
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    import sys

    scenarios = args.scenarios or [s.name for s in SCENARIOS if not s.big]
    if args.big and "big" not in scenarios:
        scenarios.append("big")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    opts = Options(scenarios=scenarios, device=device, reps=max(1, args.reps), threads=max(1, args.threads),
                   tiny=args.tiny, step=args.step, contenders=args.contenders, clock=args.clock)
    try:
        rows = run_benchmarks(opts, log=lambda s: print(s, file=sys.stderr))
    except (RuntimeError, ValueError) as exc:
        print(f"tritoncheck bench: {exc}", file=sys.stderr)
        return 2
    if args.csv:
        append_csv(args.csv, rows)
    print(markdown_table(rows))
    return 0


__all__ = ["Result", "COLUMNS", "Options", "SCENARIOS", "run_benchmarks", "append_csv", "markdown_table"]
