"""What one `tc.check(..., backend="triton")` costs on a GPU, counted and timed with torch.profiler.

    python benchmarks/gpu_profile.py --out results/gpu-profile-cuda.md    # on a CUDA machine
    python benchmarks/gpu_profile.py --no-big --jit-launch   # the host path before the direct launch, to compare

Per case (issue 22's batches: BERT 32x128, BART 16x1024, causal LM 8x4096, LayoutLMv3 8x512, and
1 GiB of LayoutLMv3 with float32 and bfloat16 pixels and of causal LM), on a warm kernel:

- per check, from the profiler over `CALLS` checks (`bench.profile_device`): CUDA kernels
  launched, device-to-host and host-to-device copies, memsets, and the host's synchronisation
  calls (`cuda*Synchronize`, `cudaMemcpy`) inside the checks' own range, for the valid batch, a
  broken copy, and deferred validation of the valid batch. A call is counted whether or not it
  waits: deferred mode reads a verdict only once its event says it is done (`event.query()`),
  so its calls return at once;
- the kernel's device time (the median over those checks' kernel events), and its bandwidth:
  batch bytes / kernel time, as a share of the copy bandwidth measured in the same run
  (a 1 GiB `copy_`, bytes read plus bytes written, over its device time);
- the wall time of one whole check, back to back (each check waits for its own verdict);
- the host's cost of a deferred check: the thread CPU time of one `tc.validate(..., deferred=True)`
  (bind, launch, the copy back queued, the last verdict read if done), what a training loop's
  thread pays per step while the GPU works.

GPU only: it exits with a clear message where torch sees no CUDA device.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import tritoncheck as tc
import harness as bench  # benchmarks/harness.py, beside this script

CALLS = 20  # checks under the profiler per case
GIB = 2**30


@dataclass
class Case:
    name: str
    spec: Any
    batch: dict[str, torch.Tensor]
    field: str  # broken at `index` with `value` for the bad check
    index: tuple[int, ...]
    value: Any


def _on(batch: dict[str, torch.Tensor], device: str, repeat: int = 1) -> dict[str, torch.Tensor]:
    """The batch on the device, its samples repeated `repeat` times along the batch dim (dim 0)."""
    return {k: v.to(device).repeat(repeat, *[1] * (v.dim() - 1)) for k, v in batch.items()}


def _causal_lm(B: int, L: int) -> tuple[Any, dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(6)
    ids = torch.randint(0, 32000, (B, L), generator=g)
    labels = ids.clone()
    labels[:, : L // 8] = -100  # an ignored prompt
    spec = tc.load_spec("causal-lm", vocab_size=32000, max_position_embeddings=L)
    return spec, {"input_ids": ids, "attention_mask": torch.ones(B, L, dtype=torch.int64), "labels": labels}


def _repeat_to(batch: dict[str, torch.Tensor], nbytes: int) -> int:
    return max(1, nbytes // bench.batch_bytes(batch))


def _broken_at(c: bench.Case) -> tuple[str, tuple[int, ...], Any]:
    """The field, index and value where a scenario's broken copy differs from its valid batch."""
    for k, v in c.bad.items():
        diff = v != c.batch[k]  # a NaN differs from everything
        if diff.any():
            index = tuple(diff.nonzero()[0].tolist())
            return k, index, v[index].item()
    raise ValueError(f"{c.name}: the broken copy equals the valid batch")


def cases(device: str, big: bool) -> list[Case]:
    out = []
    for name in ("bert", "bert-b1", "bart", "layoutlmv3", "ctc"):
        c = bench.scenario(name).build(False)
        out.append(Case(c.name, c.spec, _on(c.batch, device), *_broken_at(c)))
    spec, b = _causal_lm(8, 4096)
    out.append(Case("causal-lm-8x4096", spec, _on(b, device), "labels", (3, 100), 32000))
    if big:
        lay = bench.scenario("layoutlmv3").build(False)
        n = _repeat_to(lay.batch, GIB)
        out.append(Case(f"layoutlmv3-fp32-{8 * n}x512-1GiB", lay.spec, _on(lay.batch, device, n),
                        "bbox", (5, 7, 2), -5))
        half = dict(lay.batch, pixel_values=lay.batch["pixel_values"].to(torch.bfloat16))
        n = _repeat_to(half, GIB)
        spec = tc.load_spec("layoutlmv3-token-classification", **dict(lay.params, dtype="bfloat16"))
        out.append(Case(f"layoutlmv3-bf16-{8 * n}x512-1GiB", spec, _on(half, device, n), "bbox", (5, 7, 2), -5))
        n = _repeat_to(b, GIB)
        out.append(Case(f"causal-lm-{8 * n}x4096-1GiB", _causal_lm(8, 4096)[0], _on(b, device, n),
                        "labels", (3, 100), 32000))
    return out


def profile(fn: Any, calls: int) -> dict[str, Any]:
    """Per-call counts and the median time (us) of the check's own kernel over `calls` calls."""
    c, _ = bench.profile_device(fn, calls)
    own = [us for name, us in c.kernel_times if "tritoncheck" in name]  # not torch's (a broken batch's decode)
    per: dict[str, Any] = {k: getattr(c, k) / calls for k in ("kernels", "dtoh", "htod", "memsets", "syncs")}
    per["kernel_us"] = statistics.median(own) if own else None
    per["names"] = ",".join(sorted({name for name, _ in c.kernel_times}))
    return per


def median_us(fn: Any, calls: int, clock: Any = time.perf_counter_ns) -> float:
    """Median time of one call (us), back to back, each call timed alone: wall time by default;
    with `time.thread_time_ns`, the host thread's own work, not its waits on the device."""
    times = []
    for _ in range(calls):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    torch.cuda.synchronize()
    return statistics.median(times) / 1e3


def copy_gb_per_s() -> float:
    """Bytes read plus bytes written per second by a 1 GiB device-to-device copy (CUDA events, median)."""
    src = torch.rand(GIB // 4, device="cuda")
    dst = torch.empty_like(src)
    return 2 * GIB / (bench.time_gpu(lambda: dst.copy_(src))[0] * 1e-3) / 1e9


def measure(case: Case, copy_bw: float, log: Any) -> list[dict[str, Any]]:
    spec, batch = case.spec, case.batch
    nbytes = bench.batch_bytes(batch)

    def check() -> bool:
        return tc.check(batch, spec, backend="triton").ok

    first = tc.check(batch, spec, backend="triton")
    rows = []
    if not first.ok or first.backend != "triton":
        log(f"{case.name}: valid batch -> ok={first.ok}, backend={first.backend}: {first.codes}")
    check()
    calls = CALLS if nbytes < 64 * 2**20 else 5
    valid = profile(check, calls)
    valid.update(case=case.name, batch="valid", ok=first.ok, backend=first.backend, bytes=nbytes,
                 wall_us=median_us(check, 200 if nbytes < 64 * 2**20 else 10))
    rows.append(valid)
    old = batch[case.field][case.index].item()
    batch[case.field][case.index] = case.value
    try:
        bad = tc.check(batch, spec, backend="triton")
        prof = profile(check, calls)
        prof.update(case=case.name, batch="broken", ok=bad.ok, backend=bad.backend, bytes=nbytes,
                    wall_us=median_us(check, 50 if nbytes < 64 * 2**20 else 5), codes=",".join(sorted(bad.codes)))
        rows.append(prof)
    finally:
        batch[case.field][case.index] = old
    tc.wait()
    def submit() -> None:
        tc.validate(batch, spec, backend="triton", deferred=True)

    deferred = profile(submit, calls)
    tc.wait()
    host = median_us(submit, 200 if nbytes < 64 * 2**20 else 10, time.thread_time_ns)
    tc.wait()
    deferred.update(case=case.name, batch="valid, deferred", ok=True, backend="triton", bytes=nbytes, wall_us=None,
                    host_us=host)
    rows.append(deferred)
    for r in rows:
        k = r["kernel_us"]
        r["gb_per_s"] = nbytes / (k * 1e-6) / 1e9 if k else None
        r["of_copy"] = r["gb_per_s"] / copy_bw if k else None
        log(f"{case.name} {r['batch']}: {fmt_row(r)}; kernels: {r['names']}")
    return rows


def _n(v: Any, digits: int) -> str:
    return "" if v is None else f"{v:.{digits}f}"


def fmt_row(r: dict[str, Any]) -> str:
    return (f"kernels {r['kernels']:g}, DtoH {r['dtoh']:g}, HtoD {r['htod']:g}, memsets {r['memsets']:g}, "
            f"syncs {r['syncs']:g}, kernel {_n(r['kernel_us'], 1)} us, {_n(r['gb_per_s'], 1)} GB/s, "
            f"wall {_n(r['wall_us'], 1)} us, host CPU {_n(r.get('host_us'), 1)} us")


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| case | batch | MB | ok | backend | kernels / check | DtoH / check | HtoD / check | memsets / check "
           "| syncs / check | kernel us (median) | GB/s | of copy bandwidth | wall us / check | host CPU us / check |",
           "|---|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        share = "" if r["of_copy"] is None else f"{r['of_copy']:.2f}"
        out.append(f"| {r['case']} | {r['batch']} | {r['bytes'] / 1e6:.1f} | {r['ok']} | {r['backend']} "
                   f"| {r['kernels']:g} | {r['dtoh']:g} | {r['htod']:g} | {r['memsets']:g} | {r['syncs']:g} "
                   f"| {_n(r['kernel_us'], 1)} | {_n(r['gb_per_s'], 1)} | {share} | {_n(r['wall_us'], 1)} "
                   f"| {_n(r.get('host_us'), 1)} |")
    return "\n".join(out)


def commit() -> str:
    """The measured tree's commit (with `+edits` where it differs from it), or "no git"."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%h"], capture_output=True, text=True,
                              check=True).stdout.strip()
        edits = subprocess.run(["git", "-C", str(root), "status", "--short", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "no git"
    return head + ("+edits" if edits else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="write the Markdown page here too")
    p.add_argument("--no-big", action="store_true", help="skip the 1 GiB cases")
    p.add_argument("--wave", type=int, help="split small batches' reductions into this many programs at least "
                   "(the backend's WAVE; 1: split only rows past MAX_STEPS), to weigh the split against one program")
    p.add_argument("--jit-launch", action="store_true", help="launch through Triton's JIT every time (the backend's "
                   "DIRECT off): the host path before the direct launch, to weigh the two on one GPU")
    args = p.parse_args(argv)
    if args.jit_launch:
        from tritoncheck.backends import triton as triton_backend

        triton_backend.DIRECT = False  # before any kernel is launched: a signature's launch is decided at its first
    if args.wave is not None:
        from tritoncheck.backends import triton as triton_backend

        triton_backend.WAVE = args.wave  # before any kernel is launched: launches are memoised per signature
    if not torch.cuda.is_available():
        print("gpu_profile.py: torch sees no CUDA device; this profiles the Triton kernel on a GPU", file=sys.stderr)
        return 2

    def log(s: str) -> None:
        print(s, file=sys.stderr, flush=True)

    import triton

    copy_bw = copy_gb_per_s()
    log(f"copy bandwidth: {copy_bw:.0f} GB/s (read + written)")
    rows = []
    for case in cases("cuda", big=not args.no_big):
        try:
            rows += measure(case, copy_bw, log)
        except Exception as exc:  # noqa: BLE001 - one case failing is recorded, the others still run
            log(f"{case.name}: FAILED {type(exc).__name__}: {exc}")
            rows.append(dict(case=case.name, batch=f"FAILED: {type(exc).__name__}: {str(exc)[:200]}", ok=None,
                             backend="", bytes=bench.batch_bytes(case.batch), kernels=0, dtoh=0, htod=0, memsets=0,
                             syncs=0, kernel_us=None, gb_per_s=None, of_copy=None, wall_us=None))
        del case
        torch.cuda.empty_cache()
    page = "\n".join([
        f"# The Triton backend on {torch.cuda.get_device_name()}"
        + ("" if args.wave is None else f", small batches split into >= {args.wave} programs (WAVE)")
        + (", every launch through Triton's JIT" if args.jit_launch else ""), "",
        (f"`python benchmarks/gpu_profile.py` at {commit()}, {time.strftime('%Y-%m-%dT%H:%M:%S')}: torch {torch.__version__}, "
         f"triton {triton.__version__}, tritoncheck {tc.__version__}. Counts per check from torch.profiler over "
         f"{CALLS} warm checks (5 for the 1 GiB cases); kernel time: the median kernel event; bandwidth: batch bytes "
         f"/ kernel time, and its share of a 1 GiB device copy's {copy_bw:.0f} GB/s (bytes read + written), "
         "measured in the same run; wall: one whole `tc.check` (launch, copy back, verdict), median, back to back; host CPU: thread CPU time of one deferred `tc.validate`, median."),
        "", table(rows), ""])
    print(page)
    if args.out:
        args.out.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
