"""The Triton backend: one generated kernel launch per `check`, one small read-back.

`launch` fills the kernel's arguments from the bound batch (pointers, strides, sizes, runtime
bounds, program ranges), launches once and starts the device-to-host copy of the result buffer;
`Pending.result` waits for it and turns counts and first indices into violations with the same
host function as the torch backend, so the two reports agree exactly.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from typing import Any

import torch
import triton.language as tl

from .. import _torch_backend
from .._plan import Bound, Plan, referenced_fields
from .._report import Violation
from . import codegen
from .codegen import BIG, Program, Unsupported

_lock = threading.Lock()
_interpreter_lock = threading.Lock()  # Triton's CPU interpreter patches global state: one launch at a time
_programs: dict[int, tuple[Plan, dict, dict]] = {}  # id(plan) -> (plan, programs, fields read)


def run(plan: Plan, bound: Bound) -> list[Violation]:
    """Every runnable data check of `plan`, as violations (blocks until the verdict is read)."""
    return launch(plan, bound).result()


def program_for(plan: Plan, bound: Bound) -> Program | None:
    """The compiled program for this plan, these runnable checks and these dtypes (cached).

    The key uses the ids of the plan's own check objects (the plan is kept alive in the cache
    entry, so ids are not reused), so a cache hit hashes no expression trees.
    """
    entry = _programs.get(id(plan))
    if entry is None or entry[0] is not plan:
        with _lock:
            entry = _programs[id(plan)] = (plan, {}, {})
    _, programs, field_cache = entry
    checks = tuple(bound.runnable)
    ids = tuple(map(id, checks))
    fields = field_cache.get(ids)
    if fields is None:
        fields = field_cache[ids] = tuple(sorted({f for c in checks for f in referenced_fields(c)}))
    tensors = bound.tensors
    key = (ids, tuple((tensors[f].dtype, tensors[f].device.type) for f in fields))
    if key in programs:
        return programs[key]
    with _lock:  # generation and import happen once per key, even with many threads
        if key not in programs:
            try:
                program = codegen.load(codegen.generate(plan, checks, {f: tensors[f].dtype for f in fields}))
            except Unsupported:
                program = None  # the torch backend runs this plan instead
            programs[key] = program
        return programs[key]


class Pending:
    """A launched check whose verdict has not been read yet."""

    def __init__(self, plan: Plan, bound: Bound, program: Program | None, ctx: Any, slot: Any, event: Any, batch: int):
        self.plan, self.bound, self.program, self.ctx = plan, bound, program, ctx
        self.slot, self.event, self.batch = slot, event, batch
        self._result: list[Violation] | None = None if program is not None else []

    def result(self) -> list[Violation]:
        if self._result is None:
            if self.event is not None:
                self.event.synchronize()
            values = self.slot.host.tolist()
            _pool.release(self.slot, dirty=any(values))
            self._result = decode(self.program, self.ctx, values, self.batch)
        return self._result


def launch(plan: Plan, bound: Bound) -> Pending:
    """Launch the plan's kernel on the bound batch; return at once (no host sync on CUDA)."""
    if not bound.runnable:
        return Pending(plan, bound, None, None, None, None, 0)
    # Refuse before generating: a kernel JIT-ed without the interpreter must not be cached for CPU use.
    device = next(iter(bound.tensors.values())).device
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(f"backend='triton' needs CUDA tensors (the batch is on {device}); use backend='torch', "
                         "or set TRITON_INTERPRET=1 to run the kernel on the CPU")
    program = program_for(plan, bound)
    if program is None:
        done = Pending(plan, bound, None, None, None, None, 0)
        done._result = _torch_backend.run(plan, bound)
        return done
    ctx = _torch_backend._Context(plan, bound)
    axes = set(program.sizes) | {a for g in program.groups for a in g.axes} | {a for _, red in program.reduces for a in red}
    sizes = {a: ctx.sizes.get(a, ctx.dims.get(a, 0)) for a in axes | {plan.batch_dim}}
    args: dict[str, Any] = {}
    for f, ptr in program.fields.items():
        t = bound.tensors[f]
        args[ptr] = t
        for name, stride in zip(program.strides[f], t.stride(), strict=True):
            args[name] = stride
    for a, name in program.sizes.items():
        args[name] = sizes[a]
    for name, axes in program.reduces:
        args[name] = math.prod(sizes[a] for a in axes)
    for k, name in program.limits.items():
        args[name] = ctx.bound_value(program.checks[k])
    end = 0
    for i, g in enumerate(program.groups):
        numel = math.prod(sizes[a] for a in g.axes)
        args[program.numels[i]] = numel
        end += -(-numel // g.block)
        args[program.ends[i]] = end
    device = next(iter(bound.tensors[f] for f in program.fields)).device
    batch = sizes.get(plan.batch_dim, ctx.dims.get(plan.batch_dim, 0)) if program.batch_checks else 0
    slot = _pool.acquire(program, program.buffer_len(batch), device)
    args["out_ptr"] = slot.device
    args["IDX"] = tl.int64 if _needs_int64(program, bound, sizes, args, end) else tl.int32
    event = None
    if end > 0:
        with _interpreter_lock if device.type != "cuda" else contextlib.nullcontext():
            program.kernel[(end,)](**args)
    if device.type == "cuda":
        slot.host.copy_(slot.device, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
    return Pending(plan, bound, program, ctx, slot, event, batch)


INT32_LIMIT = 2**31 - 1


def _needs_int64(program: Program, bound: Bound, sizes: dict[str, int], args: dict[str, Any], programs: int) -> bool:
    """True when an index, an element offset or a program's tile start could pass 2**31 - 1."""
    limit = INT32_LIMIT
    counts = [args[n] for n in program.numels] + [args[n] for n, _ in program.reduces]
    counts += [programs * max((g.block for g in program.groups), default=1)] + [codegen.BLOCK_RED + c for c in counts]
    if any(c >= limit for c in counts):
        return True
    for f in program.fields:
        t = bound.tensors[f]
        if sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride(), strict=True) if n) >= limit:
            return True
    return False


def decode(program: Program, ctx: Any, values: list[int], batch: int) -> list[Violation]:
    """Counts and first indices from the result buffer -> violations, in the plan's order."""
    out = []
    n = len(program.checks)
    batch_slot = {k: j for j, k in enumerate(program.batch_checks)}
    for k, check in enumerate(program.checks):
        if k in batch_slot:
            base = 2 * n + batch_slot[k] * batch
            per_sample = values[base : base + batch]
            count = sum(per_sample)
            samples = tuple(i for i, v in enumerate(per_sample) if v)
        else:
            count, samples = values[n + k], ()
        if not count:
            continue
        flat = BIG - values[k]
        shape = [ctx.sizes.get(a, ctx.dims.get(a, 0)) for a in check.axes]
        index = []
        for size in reversed(shape):
            index.append(flat % size if size else 0)
            flat = flat // size if size else 0
        out.append(_torch_backend.make_violation(check, ctx, count, samples, tuple(reversed(index))))
    return out


class _Slot:
    __slots__ = ("device", "host", "key")

    def __init__(self, device: torch.Tensor, host: torch.Tensor, key: tuple):
        self.device, self.host, self.key = device, host, key


class _Pool:
    """Persistent zeroed result buffers, one per concurrent use, so launches never share one."""

    def __init__(self) -> None:
        self.free: dict[tuple, list[_Slot]] = {}
        self.zeros: dict[tuple, torch.Tensor] = {}
        self.lock = threading.Lock()

    def acquire(self, program: Program, n: int, device: torch.device) -> _Slot:
        key = (id(program), n, str(device))
        with self.lock:
            free = self.free.get(key)
            if free:
                return free.pop()
        buf = torch.zeros(n, dtype=torch.int64, device=device)
        host = torch.empty(n, dtype=torch.int64, pin_memory=True) if device.type == "cuda" else buf
        return _Slot(buf, host, key)

    def release(self, slot: _Slot, dirty: bool) -> None:
        if dirty:
            # failure path only: reset with a host-to-device copy from a zero tensor, not a kernel
            if slot.device.is_cuda:
                slot.device.copy_(self._zeros(slot.device.numel()))
            else:
                slot.device.zero_()
        with self.lock:
            self.free.setdefault(slot.key, []).append(slot)

    def _zeros(self, n: int) -> torch.Tensor:
        with self.lock:
            z = self.zeros.get(n)
            if z is None:
                z = self.zeros[n] = torch.zeros(n, dtype=torch.int64, pin_memory=True)
            return z


_pool = _Pool()
