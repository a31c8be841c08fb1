"""The Triton backend: one generated kernel launch per `check`, one small read-back; on a failing
batch, per violation, one more small copy: the value it shows, read from the batch at its first
offending index (for a rule, computed there with torch ops on the device).

`launch` finds the batch's *launch* -- the program for its signature and every argument but the
tensors' pointers -- in `bound.memo` (shared by every batch of the signature `bind` has seen), so
a warm call packs pointers and launches. On CUDA a signature's first launch goes through Triton's
JIT, and every later one through the compiled kernel's own launcher (`Direct`: what the JIT does
per call -- binding, specialising, the cache key -- done once per signature); `start` is that
launch for the warm path of `api/core.py`, which hands it the guard's tensors without a `bind`. A
host cost of a few us per check (`benchmarks/host_path.py`). A new signature looks the program up in an LRU cache
keyed by the plan's text (`plan_text`), the runnable checks and each field's dtype and
contiguity: batches that differ only in their sizes (dynamic padding) share one program, and the
kernel takes sizes, host scalars and program ranges as runtime arguments the JIT does not
specialise on, so they share one compiled kernel too. The launch runs on the batch's device and
that device's current stream, and starts the device-to-host copy of the result buffer;
`Pending.result` waits for it and decodes it with the backend-neutral decoder the C backend uses
(`tritoncheck/kernel/decode.py`), so the reports agree with the torch backend's exactly.

What the kernel cannot take goes to the torch backend, and `Pending.backend` says so: a plan the
IR or this generator does not lower (`Unsupported`, e.g. a reduction inside a reduction), an
expanded (zero-stride) view the kernel would walk past 2**24 elements, and a host scalar past
int64. An expanded or empty dim that no rule reads positions along is walked at size 1
(`ir.loop_sizes`, as in the C backend) and scaled back by `decode`, so such a view costs what it
stores; along a positional dim the kernel walks it through its zero strides up to 2**24 elements,
past that the torch backend reads its stored values once.
"""

from __future__ import annotations

import functools
import math
import operator
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy
import torch
import triton.language as tl

from tritoncheck.backends import torch as _torch_backend
from tritoncheck.kernel import ir
from tritoncheck.kernel.decode import axis_size, decode
from tritoncheck.plan.lower import Bound, Plan, referenced_fields
from tritoncheck.report import Violation
from tritoncheck.codegen import triton as codegen
from tritoncheck.codegen.triton import Program

INT32_LIMIT = 2**31 - 1
MAX_PROGRAMS = 64  # generated programs kept (least recently used dropped first)
# walked elements of an expanded view along a positional axis; the torch backend checks a larger one's stored values
EXPANDED_WALK_LIMIT = 2**24
WAVE = 132  # programs a reduction's rows are split into at least, where they have the steps: one per SM of an H100
_lock = threading.Lock()
_interpreter_lock = threading.Lock()  # Triton's CPU interpreter patches global state: one launch at a time
_programs: OrderedDict[tuple, Program | None] = OrderedDict()  # (plan text, checks, field signature) -> program
_plan_texts: OrderedDict[int, tuple[Plan, str]] = OrderedDict()  # id(plan) -> (plan, its text), the same bound


def run(plan: Plan, bound: Bound) -> list[Violation]:
    """Every runnable data check of `plan`, as violations (blocks until the verdict is read)."""
    return launch(plan, bound).result()


def plan_text(plan: Plan) -> str:
    """The plan as text (its repr), the program cache's key: equal plans share programs, but not
    plans that are only `==` (0.0 == -0.0 and 1 == 1.0 == True, yet `x // -0.0` is not `x // 0.0`,
    and a report quotes the rule as written). Memoised per plan object."""
    with _lock:
        hit = _plan_texts.get(id(plan))
        if hit is not None and hit[0] is plan:
            return hit[1]
    text = repr(plan)
    with _lock:
        _plan_texts[id(plan)] = (plan, text)
        while len(_plan_texts) > MAX_PROGRAMS:
            _plan_texts.popitem(last=False)
    return text


def program_for(plan: Plan, bound: Bound) -> Program | None:
    """The loaded program for this plan, these runnable checks and this field signature (cached);
    None when the plan is not lowered for Triton (the torch backend runs it)."""
    checks = tuple(bound.runnable)
    position = {id(c): i for i, c in enumerate(plan.checks)}
    fields = tuple(sorted({f for c in checks for f in referenced_fields(c)}))
    tensors = bound.tensors
    sig = tuple((tensors[f].dtype, tensors[f].is_contiguous()) for f in fields)
    key = (plan_text(plan), tuple(position[id(c)] for c in checks), fields, sig)
    with _lock:  # lowering, generation and import happen once per key, even with many threads
        if key in _programs:
            _programs.move_to_end(key)
            return _programs[key]
        sigs = {f: ir.FieldSig(f, dtype, plan.field(f).axes, contiguous)
                for f, (dtype, contiguous) in zip(fields, sig, strict=True)}
        try:
            program = codegen.load(codegen.generate(ir.lower(plan, checks, sigs)))
        except ir.Unsupported:
            program = None
        _programs[key] = program
        while len(_programs) > MAX_PROGRAMS:
            _programs.popitem(last=False)
        return program


@dataclass(frozen=True)
class GroupLaunch:
    """One group's share of a launch: `programs` programs, each walking at most `tiles` loop steps
    of `tile_elements` elements (one tile for an element-wise group), whose loads read `tile_bytes`;
    `split`, `parts` and `scratch` as the group takes them (2**split programs per row block, `parts`
    of them with something to reduce; its scratch slots' offset in the result buffer)."""

    programs: int
    tiles: int
    tile_elements: int
    tile_bytes: int
    full: int = 0  # element-wise: programs whose tile is wholly in range
    split: int = 0
    parts: int = 1  # programs of a row block with something to reduce (the rest of the 2**split do nothing)
    scratch: int = 0
    scratch_slots: int = 0


def geometry(program: Program, dims: dict[str, int]) -> list[GroupLaunch]:
    """Per group, the launch the backend makes for these dim sizes (`GroupLaunch`).

    A reduction's row block is split over 2**split programs, the least split that keeps every
    program within `codegen.MAX_STEPS` loop steps over all the group's reductions (a float sum is
    never split: the order of its additions must not depend on a race); then, on a small batch,
    further until the group has `WAVE` programs or each walks one step: the steps of a program
    run one after another, each a memory round trip (causal LM 8x4096: one program of 32 steps,
    21.7 us on an H100, where its bytes take 0.3 us to read).
    """
    kernel, out = program.kernel, []
    scratch = codegen.layout_length(kernel, dims.get(kernel.batch_dim, 0))
    for p in program.groups:
        numel = math.prod(axis_size(kernel, a, dims) for a in p.axes)
        if not p.reduce:
            out.append(GroupLaunch(-(-numel // p.block), 1, p.block, p.block * p.load_bytes, full=numel // p.block))
            continue
        steps = [-(-math.prod(axis_size(kernel, a, dims) for a in axes) // p.step) for axes in p.reductions]
        split, blocks = 0, -(-numel // p.block)
        while p.splittable and max(steps, default=0) > 2**split and (
                sum(-(-s // 2**split) for s in steps) > codegen.MAX_STEPS or blocks << split < WAVE):
            split += 1
        slots = numel * (2 + len(p.reductions)) if split else 0
        per = [-(-s // 2**split) for s in steps]
        parts = max((-(-s // n) for s, n in zip(steps, per, strict=True) if n), default=1)
        out.append(GroupLaunch((-(-numel // p.block)) << split, sum(per), p.block * p.step,
                               p.block * p.step * p.load_bytes, split=split,
                               parts=parts, scratch=scratch if split else 0, scratch_slots=slots))
        scratch += slots
    return out


@dataclass(frozen=True)
class Launch:
    """Everything a launch of `program` passes for one batch signature, but the tensors."""

    program: Program
    fields: tuple[str, ...]  # the tensors passed first, in order
    rest: tuple[Any, ...]  # strides, sizes, host scalars and the groups' arguments, in order
    grid: tuple[int]
    length: int  # result buffer slots: the `Layout`, the recorded values (`codegen.value_slot`), split rows' scratch
    head: int  # the slots before the scratch: what the host reads back (== length without split rows)
    wide: bool  # indices need int64
    walked: dict[str, int]  # the dim sizes the kernel walks (`ir.loop_sizes`), for `decode`

    def args(self, tensors: Sequence[torch.Tensor], out: torch.Tensor) -> tuple[list[Any], dict[str, Any]]:
        """The positional arguments and keyword options of `program.fn[grid](...)`, for `tensors` (`fields`, in order)."""
        args = [*tensors, *self.rest, out, tl.int64 if self.wide else tl.int32]
        # no fused multiply-add: torch rounds `a * b + c` twice, so the kernel does too
        return args, {"num_warps": codegen.WARPS, "enable_fp_fusion": False}


def launch_for(program: Program, bound: Bound) -> Launch:
    """The `Launch` of `program` for the bound batch (raises `Unsupported` for a host scalar past int64)."""
    kernel, tensors = program.kernel, bound.tensors
    for f, pos, sel in kernel.selections():
        size = tensors[f].shape[pos]
        if not -size <= sel < size:  # bind reports this as a violation; never read past the tensor here
            raise IndexError(f"{f}: index {sel} is out of range for an axis of size {size}")
    values = bound.dim_values()
    # an expanded or empty dim no rule reads positions along is walked at size 1, as in C
    walked = ir.loop_sizes(kernel, program.positional, tensors, values)
    for f in kernel.fields:
        t = tensors[f.name]
        if 0 in t.stride() and math.prod(walked.get(a, kernel.fixed.get(a, 1)) for a in f.axes) > EXPANDED_WALK_LIMIT:
            raise ir.Unsupported("an expanded view walked past EXPANDED_WALK_LIMIT elements")
    ir.check_result_backed(kernel, tensors, walked)
    rest: list[Any] = []
    for f in kernel.fields:
        if not f.contiguous:
            rest.extend(tensors[f.name].stride())
    rest.extend(walked[d] for d in kernel.sizes)
    magic_at = len(rest)  # the divisors' magic numbers go here, in the width of the indices (`wide`, below)
    rest.extend(kernel.scalars[s].value(values) for s in kernel.int_slots)
    rest.extend(struct.unpack("<q", struct.pack("<d", kernel.scalars[s].value(values)))[0] for s in kernel.float_slots)
    end, counts, aligns = 0, [], []
    launches = geometry(program, walked)
    for p, gl in zip(program.groups, launches, strict=True):
        end += gl.programs
        rest += [end, gl.split, gl.parts, gl.scratch] if p.reduce else [end, gl.full]
        counts.append(gl.programs * gl.tile_elements)
        if p.reduce:
            numel = math.prod(axis_size(kernel, a, walked) for a in p.axes)
            reduced = [math.prod(axis_size(kernel, a, walked) for a in axes) for axes in p.reductions]
            counts += [numel * r + (p.step << gl.split) for r in reduced]  # offs * R + r, and the parts' bounds
            if p.aligned:
                aligns.append(all(r % 16 == 0 for r in reduced))
    rest += aligns
    head = codegen.layout_length(kernel, walked.get(kernel.batch_dim, 0))
    length = head + sum(gl.scratch_slots for gl in launches)
    counts.append(length)
    for f in kernel.fields:
        t = tensors[f.name]
        counts.append(sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride(), strict=True) if n))
    wide = any(c >= INT32_LIMIT for c in counts)
    rest[magic_at:magic_at] = [m for d in program.divisors for m in divisor_magic(walked[d], 64 if wide else 32)]
    return Launch(program, tuple(f.name for f in kernel.fields), tuple(rest), (end,), length, head, wide, walked)


def divisor_magic(d: int, bits: int = 32) -> tuple[int, int]:
    """(magic, shift) such that n // d == (umulhi(n, magic) + n) >> shift for 0 <= n < 2**(bits - 1),
    in unsigned `bits`-bit arithmetic (Granlund and Montgomery's division by an invariant integer;
    magic as the signed int of its bits, so the JIT sees an int32 for 32 bits). d = 0 (an empty dim:
    nothing is divided) gives d = 1's."""
    d = max(d, 1)
    shift = (d - 1).bit_length()
    magic = (1 << (bits + shift)) // d - (1 << bits) + 1
    return (magic - (1 << bits) if magic >= 1 << (bits - 1) else magic), shift


def launch_args(program: Program, bound: Bound, out: torch.Tensor) -> tuple[list[Any], dict[str, Any], tuple[int]]:
    """(args, kwargs, grid): exactly what `launch` passes to `program.fn[grid](*args, **kwargs)`
    for this batch, with `out` as the result buffer (`launch_for(...).length` int64 zeros)."""
    spec = launch_for(program, bound)
    args, kwargs = spec.args([bound.tensors[f] for f in spec.fields], out)
    return args, kwargs, spec.grid


class Pending:
    """A launched check whose verdict has not been read yet. `backend` names what checks it:
    "triton", or "torch" where the kernel could not take the batch. `bound` may be a callable that
    binds the batch: the warm path (`api/core.py`) binds only to decode a failing batch."""

    __slots__ = ("_bound", "spec", "slot", "event", "_result")

    def __init__(self, bound: Bound | Callable[[], Bound], spec: Launch | None = None, slot: Any = None,
                 event: Any = None, result: list[Violation] | None = None):
        self._bound, self.spec, self.slot, self.event, self._result = bound, spec, slot, event, result

    @property
    def program(self) -> Program | None:
        return None if self.spec is None else self.spec.program

    @property
    def backend(self) -> str:
        return "torch" if self.spec is None else "triton"

    @property
    def bound(self) -> Bound:
        if not isinstance(self._bound, Bound):
            self._bound = self._bound()
        return self._bound

    def recorded(self, values: torch.Tensor) -> dict[int, int]:
        """Check -> the bits of the value the kernel saw at its first offending index, for the checks it records."""
        kernel, batch = self.program.kernel, self.spec.walked.get(self.program.kernel.batch_dim, 0)
        found = {k: codegen.recorded_bits(kernel, batch, values, k) for k in self.program.recorded}
        return {k: bits for k, bits in found.items() if bits is not None}

    def result(self) -> list[Violation]:
        if self._result is None:
            if self.event is not None:
                self.event.synchronize()
            slot = self.slot
            if not _count_nonzero(slot.host_values):  # a valid batch: nothing written, the buffer stays zeroed
                slot.home.append(slot)  # (back to the pool as it is)
                self._result = []
            else:
                values = slot.host_head.clone()
                _pool.release(slot)
                self._result = decode(self.program.kernel, values, self.bound, self.spec.walked, self.recorded(values))
        return self._result


def _prepare(plan: Plan, bound: Bound, device: torch.device) -> Launch | None:
    """The batch's `Launch`; None where the torch backend checks it instead."""
    if device.type != "cuda":
        _require_interpreter(device)  # before generating: a compiled kernel must not be cached for CPU use
    program = program_for(plan, bound)
    if program is None:
        return None
    try:
        return launch_for(program, bound)
    except ir.Unsupported:  # a host scalar past int64, or an expanded view walked past EXPANDED_WALK_LIMIT
        return None


def _require_interpreter(device: torch.device) -> None:
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(f"backend='triton' needs CUDA tensors (the batch is on {device}); use backend='torch', "
                         "or set TRITON_INTERPRET=1 to run the kernel on the CPU")


def launch(plan: Plan, bound: Bound) -> Pending:
    """Launch the plan's kernel on the bound batch; return at once (no host sync on CUDA).

    What a batch signature launches is memoised on bind's signature entry (`bound.memo`), so a
    warm call packs pointers, launches, and starts one copy back: no allocation (the result
    buffer, its pinned host copy and its event come from the pool) and no wait.
    """
    if not bound.runnable:
        return Pending(bound, result=[])
    memo = bound.memo
    prepared = memo.get("triton")
    if prepared is None:
        device = next(iter(bound.tensors.values())).device
        prepared = memo["triton"] = (_prepare(plan, bound, device), device)
    spec, device = prepared
    if device.type != "cuda":
        _require_interpreter(device)
    if spec is None:
        return Pending(bound, result=_torch_backend.run(plan, bound))
    return _start(memo, [bound.tensors[f] for f in spec.fields], bound)


class _Runner:
    """What the launches of one prepared signature (`memo["triton"]`: its `Launch` and device) reuse:
    the two, whether the device is CUDA (read once: `torch.device.type` costs 0.4 us), the pool's
    free list for its result buffers, and its `Direct` launch (None until a first CUDA launch has
    compiled the kernel; False where it does not apply)."""

    __slots__ = ("prepared", "spec", "device", "cuda", "free", "direct")

    def __init__(self, prepared: tuple[Launch, torch.device]):
        self.prepared = prepared
        self.spec, self.device = prepared
        self.cuda = self.device.type == "cuda"
        self.free = _pool.free_list(self.spec, self.device)
        self.direct: Direct | bool | None = None


def direct_of(memo: dict[str, Any]) -> Direct | bool | None:
    """The `Direct` launch of a prepared signature: None before its first CUDA launch, False where it does not apply."""
    runner = memo.get("triton_runner")
    return None if runner is None or runner.prepared is not memo.get("triton") else runner.direct


def start(memo: dict[str, Any], tensors: Sequence[torch.Tensor], bound: Bound | Callable[[], Bound]) -> Pending:
    """Queue the kernel of a prepared signature (`memo`: bind's memo of it, after `launch` filled it) on
    `tensors` (the launch's fields, in order), then the copy back, on the
    batch's device and its current stream; return at once. `bound`: the batch's `Bound`, or a
    callable that binds it (called only to decode a failing batch).

    On CUDA the first launch of a signature goes through Triton's JIT (`fn[grid](...)`), which
    compiles or finds the kernel; every later one through that compiled kernel's own launcher, its
    constant arguments packed once (`Direct`), where the launch allows (`Direct.__call__`).
    """
    prepared = memo["triton"]
    runner = memo.get("triton_runner")
    if runner is None or runner.prepared is not prepared:
        runner = memo["triton_runner"] = _Runner(prepared)
    if not runner.cuda:
        with _interpreter_lock:
            slot = _pool.take(runner)
            _launch_plain(runner.spec, tensors, slot)
        return Pending(bound, runner.spec, slot)
    if torch.cuda.is_current_stream_capturing():  # before anything is queued on the stream
        _torch_backend.refuse_capture()  # (raises, saying why)
    slot = _pool.take(runner)
    direct = runner.direct
    if direct and direct(tensors, slot.device_ptr):  # (the batch's device is the current one)
        # `_read_back`, written out: the JIT launch below runs it inside the batch's device context (the
        # event records on the current device's stream), which this path has no need to enter, so the two
        # share no tail; a call to `_read_back` here would add a Python call (about 15 ns) to each warm check
        slot.host_head.copy_(slot.device_head, True)
        event = slot.event
        event.record()
        return Pending(bound, runner.spec, slot, event)
    # the batch's device is the current one for the launch, the buffer and the copy; the stream is its current one
    with torch.cuda.device(runner.device):
        kernel = _launch_plain(runner.spec, tensors, slot)
        if direct is None:
            runner.direct = direct_launcher(kernel, runner.spec, runner.device) or False
        _read_back(slot)
    return Pending(bound, runner.spec, slot, slot.event)


_start = start  # what `launch` calls (a test that wraps `start`, the warm path's entry, leaves `launch` as it is)


def _launch_plain(spec: Launch, tensors: list[torch.Tensor], slot: _Slot) -> Any:
    """Launch through Triton's JIT (which binds, specialises and finds or compiles the kernel); its kernel."""
    if spec.grid[0] == 0:
        return None
    args, kwargs = spec.args(tensors, slot.device)
    return spec.program.fn[spec.grid](*args, **kwargs)


def _read_back(slot: _Slot) -> None:
    """After the kernel, on the stream: start the copy of the result head to pinned host memory, and
    record the event that marks it done (the kernel left the scratch where split rows met zeroed)."""
    slot.host_head.copy_(slot.device_head, True)  # (non_blocking, given positionally: 0.1 us less to parse)
    slot.event.record()


_DATA_PTR, _reduce, _or, _count_nonzero = torch.Tensor.data_ptr, functools.reduce, operator.or_, numpy.count_nonzero
DIRECT_TRITON = ((3, 6), (3, 9))  # the Triton versions whose launch API `Direct` follows (their JITFunction.run)
DIRECT = True  # False: Triton's JIT launches every time (`benchmarks/gpu_profile.py --jit-launch` weighs the two)


class Direct:
    """A signature's compiled kernel launched through its own launcher, as `JITFunction.run` ends:
    `kernel.run(grid, stream, kernel.function, kernel.packed_metadata, launch metadata, hooks,
    *arguments)` (triton 3.6 to 3.9). What `JITFunction.run` does before that is done once per
    signature here: binding the arguments to the signature, specialising them (dtypes, 16-byte
    alignment, ints equal to 1 or divisible by 16), the kernel cache's key and lookup. A call
    packs the tensors' data pointers with the signature's constant arguments; the C launcher reads
    pointers given as ints directly (no `data_ptr()` call, no driver query per tensor).
    """

    __slots__ = ("run", "function", "packed", "grid", "rest", "dtype", "index", "fn", "device_now", "stream_of",
                 "runtime", "enter", "leave", "enter_calls", "leave_calls")

    def __init__(self, kernel: Any, spec: Launch, index: int):
        self.run, self.function, self.packed = kernel.run, kernel.function, kernel.packed_metadata
        self.grid, self.rest, self.index, self.fn = spec.grid[0], spec.rest, index, spec.program.fn
        self.dtype = tl.int64 if spec.wide else tl.int32
        # torch's own C entry points where this torch has them (what Triton's driver asks), else the public API
        self.device_now = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        self.stream_of = raw or (lambda index: torch.cuda.current_stream(index).cuda_stream)
        from triton import knobs

        self.runtime = knobs.runtime
        # the launch hooks (HookChains in 3.6 to 3.9: lists of calls; a plain hook or None in others), read at a
        # launch as `calls` lists; one replaced by another object sends the launch to the JIT
        self.enter, self.leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        self.enter_calls = getattr(self.enter, "calls", self.enter is not None)
        self.leave_calls = getattr(self.leave, "calls", self.leave is not None)

    def __call__(self, tensors: list[torch.Tensor], out: int) -> bool:
        """Launch on the current stream, or return False (nothing launched) where the JIT must: another
        current device, a pointer not 16-byte aligned (the kernel may assume alignment: the JIT picks
        the variant), a launch hook (a profiler's) or a pre-run hook set."""
        if self.device_now() != self.index or self.fn.pre_run_hooks:
            return False
        runtime = self.runtime
        if runtime.launch_enter_hook is not self.enter or runtime.launch_exit_hook is not self.leave or \
                self.enter_calls or self.leave_calls:  # hooks set, or replaced since
            return False
        ptrs = list(map(_DATA_PTR, tensors))
        if _reduce(_or, ptrs, out) & 15:
            return False
        self.run(self.grid, 1, 1, self.stream_of(self.index), self.function, self.packed, None, None, None,
                 *ptrs, *self.rest, out, self.dtype)
        return True


def direct_launcher(kernel: Any, spec: Launch, device: torch.device) -> Direct | None:
    """The `Direct` launch of `kernel` (what the JIT returned for `spec`), or None where it does not
    apply and the JIT launches every time: a Triton outside `DIRECT_TRITON`, a kernel the JIT did
    not compile (the interpreter), a kernel reading globals (the JIT checks them at each launch),
    or parameters other than the ones `spec` passes."""
    import triton

    version = tuple(int(v) for v in triton.__version__.split(".")[:2] if v.isdigit())
    if not DIRECT or not DIRECT_TRITON[0] <= version <= DIRECT_TRITON[1]:
        return None
    if not all(getattr(kernel, a, None) is not None for a in ("run", "function", "packed_metadata")):
        return None
    fn = spec.program.fn
    if getattr(fn, "used_global_vals", None) or len(getattr(fn, "arg_names", ())) != len(spec.fields) + len(spec.rest) + 2:
        return None
    return Direct(kernel, spec, device.index if device.index is not None else torch.cuda.current_device())


class _Slot:
    """A result buffer on the device, its pinned host copy and the event that marks the copy done
    (None on the CPU, where `host` is the buffer itself), with the views a launch uses: the head the
    host reads back (`head` slots; after it, the scratch of split rows, which the kernel leaves
    zeroed), the host head as a numpy array. `reset`: an event after the buffer was zeroed on a
    stream, which the next user's stream waits for (a device-side wait, not the host's)."""

    __slots__ = ("device", "event", "host", "reset", "device_head", "host_head", "host_values", "device_ptr",
                 "home")

    def __init__(self, device: torch.Tensor, host: torch.Tensor, head: int, event: Any):
        self.device, self.host, self.event, self.reset = device, host, event, None
        self.device_head, self.host_head = device[:head], host[:head]
        self.host_values = self.host_head.numpy()
        self.device_ptr = device.data_ptr()
        self.home: list[_Slot] = []  # the free list it goes back to (the pool sets it)


class _Pool:
    """Persistent zeroed result buffers, one per concurrent use, so launches never share one.

    A buffer goes back zeroed: a valid batch leaves it so (the kernel's last part of a split row
    zeroes the scratch slots it met in; `Pending.result` puts it back as it is), and after
    a failing batch it is zeroed on the stream (`release`).
    """

    def __init__(self) -> None:
        self.free: dict[tuple, list[_Slot]] = {}

    def free_list(self, spec: Launch, device: torch.device) -> list[_Slot]:
        """The free slots of `spec`'s buffer size on `device` (one list per size, kept by its `_Runner`)."""
        return self.free.setdefault((spec.length, spec.head, device), [])

    def take(self, runner: _Runner) -> _Slot:
        """A zeroed slot from the runner's free list, or a new one."""
        try:
            slot = runner.free.pop()  # (atomic: no lock)
        except IndexError:
            slot = self.allocate(runner.spec.length, runner.spec.head, runner.device)
            slot.home = runner.free
            return slot
        if slot.reset is not None:  # zeroed on another stream, perhaps: this stream waits for it (the host does not)
            torch.cuda.current_stream(runner.device).wait_event(slot.reset)
            slot.reset = None
        return slot

    def allocate(self, length: int, head: int, device: torch.device) -> _Slot:
        """A new slot: the only allocation of the launch path (the first batch of a size, or a pool miss)."""
        buf = torch.zeros(length, dtype=torch.int64, device=device)
        if device.type != "cuda":
            return _Slot(buf, buf, head, None)
        return _Slot(buf, torch.empty(length, dtype=torch.int64, pin_memory=True), head, torch.cuda.Event())

    def release(self, slot: _Slot) -> None:
        """Put back a slot a failing batch wrote into, zeroed on the stream (a memset queued behind the
        read, never a blocking copy from the host)."""
        if slot.event is not None:
            with torch.cuda.device(slot.device.device):
                slot.device.zero_()
                slot.reset = torch.cuda.Event()
                slot.reset.record()
        else:
            slot.device.zero_()
        slot.home.append(slot)


_pool = _Pool()
