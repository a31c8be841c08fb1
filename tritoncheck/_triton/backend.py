"""The Triton backend: one generated kernel launch per `check`, one small read-back.

`launch` looks up the program for the batch's signature (the runnable checks, each field's
dtype, contiguity and device), fills the kernel's arguments in the kernel IR's order (pointers,
strides of non-contiguous fields, dim sizes, host scalars, then the groups' program ranges and
the result buffer), launches once and starts the device-to-host copy of the buffer.
`Pending.result` waits for it and decodes it with the backend-neutral decoder the C backend uses
(`tritoncheck/_kernel/decode.py`), so the reports agree with the torch backend's exactly.

What the kernel cannot take goes to the torch backend, and `Pending.backend` says so: a plan the
IR or this generator does not lower (`Unsupported`, e.g. a reduction inside a reduction), an
expanded (zero-stride) view past 2**31 - 1 elements -- the kernel would walk its logical size, the
torch backend reads its stored values once; smaller ones run here through their strides, like the
C backend -- and a host scalar past int64.
"""

from __future__ import annotations

import contextlib
import math
import os
import struct
import threading
from typing import Any

import torch
import triton.language as tl

from .. import _torch_backend
from .._kernel import ir
from .._kernel.decode import axis_size, decode
from .._plan import Bound, DataCheck, Plan, referenced_fields
from .._report import Violation
from . import codegen
from .codegen import Program

INT32_LIMIT = 2**31 - 1
_lock = threading.Lock()
_interpreter_lock = threading.Lock()  # Triton's CPU interpreter patches global state: one launch at a time
_programs: dict[int, tuple[Plan, dict, dict]] = {}  # id(plan) -> (plan, programs, fields read)


def run(plan: Plan, bound: Bound) -> list[Violation]:
    """Every runnable data check of `plan`, as violations (blocks until the verdict is read)."""
    return launch(plan, bound).result()


def _fields(plan: Plan, entry: tuple, checks: tuple[DataCheck, ...]) -> tuple[tuple[str, ...], tuple]:
    ids = tuple(map(id, checks))
    fields = entry[2].get(ids)
    if fields is None:
        fields = entry[2][ids] = tuple(sorted({f for c in checks for f in referenced_fields(c)}))
    return fields, ids


def program_for(plan: Plan, bound: Bound) -> Program | None:
    """The loaded program for this plan, these runnable checks and this field signature (cached);
    None when the plan is not lowered for Triton (the torch backend runs it).

    The key uses the ids of the plan's own check objects (the plan is kept alive in the cache
    entry, so ids are not reused), so a cache hit hashes no expression trees.
    """
    entry = _programs.get(id(plan))
    if entry is None or entry[0] is not plan:
        with _lock:
            entry = _programs[id(plan)] = (plan, {}, {})
    checks = tuple(bound.runnable)
    fields, ids = _fields(plan, entry, checks)
    tensors = bound.tensors
    sig = tuple((tensors[f].dtype, tensors[f].is_contiguous(), tensors[f].device.type) for f in fields)
    key = (ids, sig)
    programs = entry[1]
    if key in programs:
        return programs[key]
    with _lock:  # lowering, generation and import happen once per key, even with many threads
        if key not in programs:
            sigs = {f: ir.FieldSig(f, dtype, plan.field(f).axes, contiguous)
                    for f, (dtype, contiguous, _) in zip(fields, sig, strict=True)}
            try:
                program = codegen.load(codegen.generate(ir.lower(plan, checks, sigs)))
            except ir.Unsupported:
                program = None
            programs[key] = program
        return programs[key]


class Pending:
    """A launched check whose verdict has not been read yet. `backend` names what checks it:
    "triton", or "torch" where the kernel could not take the batch."""

    def __init__(self, bound: Bound, program: Program | None = None, slot: Any = None, event: Any = None,
                 result: list[Violation] | None = None):
        self.bound, self.program, self.slot, self.event = bound, program, slot, event
        self.backend = "triton" if program is not None else "torch"
        self._result = result

    def result(self) -> list[Violation]:
        if self._result is None:
            if self.event is not None:
                self.event.synchronize()
            values = self.slot.host.tolist()
            _pool.release(self.slot, dirty=any(values))
            self._result = decode(self.program.kernel, values, self.bound)
        return self._result


def launch(plan: Plan, bound: Bound) -> Pending:
    """Launch the plan's kernel on the bound batch; return at once (no host sync on CUDA)."""
    if not bound.runnable:
        return Pending(bound, result=[])
    # Refuse before generating: a kernel JIT-ed without the interpreter must not be cached for CPU use.
    device = next(iter(bound.tensors.values())).device
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(f"backend='triton' needs CUDA tensors (the batch is on {device}); use backend='torch', "
                         "or set TRITON_INTERPRET=1 to run the kernel on the CPU")
    try:
        program = program_for(plan, bound)
        if program is None:
            raise ir.Unsupported("a plan the Triton generator does not lower")
        if any(_huge_expanded(bound.tensors[f.name]) for f in program.kernel.fields):
            raise ir.Unsupported(f"an expanded (zero-stride) view of more than {EXPANDED_WALK_LIMIT} elements")
        args, grid, batch, wide = arguments(program, bound)
    except ir.Unsupported:
        return Pending(bound, result=_torch_backend.run(plan, bound))
    kernel = program.kernel
    device = bound.tensors[kernel.fields[0].name].device if kernel.fields else device
    slot = _pool.acquire(program, kernel.layout.length(batch), device)
    event = None
    if grid > 0:
        with _interpreter_lock if device.type != "cuda" else contextlib.nullcontext():
            # no fused multiply-add: torch rounds `a * b + c` twice, so the kernel does too
            program.fn[(grid,)](*args, slot.device, tl.int64 if wide else tl.int32, enable_fp_fusion=False)
    if device.type == "cuda":
        slot.host.copy_(slot.device, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
    return Pending(bound, program, slot, event)


EXPANDED_WALK_LIMIT = 2**24  # logical elements; the torch backend checks a larger expanded view's stored values


def _huge_expanded(t: torch.Tensor) -> bool:
    """An expanded view the kernel should not walk element by element: the torch backend reads
    only its stored values, which costs far less than 2**24 logical elements would."""
    return t.numel() > EXPANDED_WALK_LIMIT and any(s == 0 and n > 1 for n, s in zip(t.shape, t.stride(), strict=True))


def arguments(program: Program, bound: Bound) -> tuple[list[Any], int, int, bool]:
    """(the kernel's arguments up to the result buffer, programs to launch, batch size, whether
    indices need int64), in the order of `Kernel.int_args()`, float scalars as their bits."""
    kernel, tensors, dims = program.kernel, bound.tensors, bound.dims
    for f, pos, sel in kernel.selections():
        size = tensors[f].shape[pos]
        if not -size <= sel < size:  # bind reports this as a violation; never read past the tensor here
            raise IndexError(f"{f}: index {sel} is out of range for an axis of size {size}")
    args: list[Any] = [tensors[f.name] for f in kernel.fields]
    for f in kernel.fields:
        if not f.contiguous:
            args.extend(tensors[f.name].stride())
    args.extend(dims[d][0] for d in kernel.sizes)
    values = bound.dim_values()
    args.extend(kernel.scalars[s].value(values) for s in kernel.int_slots)
    args.extend(struct.unpack("<q", struct.pack("<d", kernel.scalars[s].value(values)))[0] for s in kernel.float_slots)
    end, counts = 0, []
    for g, block in zip(kernel.groups, program.blocks, strict=True):
        numel = math.prod(axis_size(kernel, a, values) for a in g.axes)
        end += -(-numel // block)
        args.append(end)
        counts.append(-(-numel // block) * block)
    batch = values.get(kernel.batch_dim, 0)
    counts += [math.prod(axis_size(kernel, a, values) for a in axes) + codegen.BLOCK_RED for axes in program.reductions]
    counts.append(kernel.layout.length(batch))
    for f in kernel.fields:
        t = tensors[f.name]
        counts.append(sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride(), strict=True) if n))
    return args, end, batch, any(c >= INT32_LIMIT for c in counts)


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
