"""The C backend: a plan's data checks as one compiled C function, called once per `check`.

`run(plan, bound)` looks up the program for the batch's *signature* — the runnable checks, each
field's dtype, contiguity and memory order, and whether sizes need 64-bit loop indices — in an
in-process cache (a warm call hashes no source and walks no expression). The int64 argument array
(pointers, strides of non-contiguous fields, dim sizes, host scalars) is prepared once per batch
signature (`Program.prepare`); a call writes only the data pointers into it, calls the function
once, and decodes the small result buffer only when it reports a failure. The first call for a
signature lowers the plan to the kernel IR, generates C, and compiles it or loads it from the
on-disk cache (`build.py`).

Only CPU tensors: the function reads the tensors' memory directly. Memory is allocated in
proportion to the number of checks and the batch size the kernel walks (the result buffer, kept
zeroed for the next call: a valid batch allocates and writes nothing), never to the data; an expanded (zero-stride) dim is walked at size 1 where no rule reads positions along
it (`ir.loop_sizes`), so a batch costs what it stores, not its logical size. A batch dim that must be
walked in full although no field stores a value per sample goes to the torch backend
(`ir.check_result_backed`), and so does an expanded view walked past 2**31 - 1 elements.

Building and loading a program needs no torch (`ir.FieldSig` holds dtype names); decoding a failing
call's result does (`kernel/decode.py`), and imports it then.
"""

from __future__ import annotations

import ctypes
import math
import threading
from typing import Any

from tritoncheck.plan.lower import MAX_PLANS, Bound, DataCheck, Plan, referenced_fields
from tritoncheck.report import Violation
from tritoncheck.backends import codecache as build
from tritoncheck.codegen import c
from tritoncheck.kernel import ir

INT32_LIMIT = 2**31 - 1
# A result buffer up to this many entries (32 MiB) is kept for the next call; a larger one is freed after its call.
SPARE_ENTRIES = 1 << 22
_decode: Any = None  # kernel.decode.decode, imported by the first failing call: it needs torch, a program does not


def available() -> bool:
    """True when a C compiler is on PATH (the backend can build kernels)."""
    return build.compiler() is not None


class Program:
    """A compiled kernel and what a call needs to fill its arguments."""

    def __init__(self, kernel: ir.Kernel, source: c.CSource, fn: Any):
        self.kernel, self.source, self.fn = kernel, source, fn
        self.ptr_fields = tuple(f.name for f in kernel.fields)
        self.stride_fields = tuple(f.name for f in kernel.fields if not f.contiguous)
        self.size_dims = kernel.sizes
        self.int_scalars = tuple(kernel.scalars[s] for s in kernel.int_slots)
        self.float_scalars = tuple(kernel.scalars[s] for s in kernel.float_slots)
        self.int_array = ctypes.c_int64 * len(kernel.int_args())  # ctypes array types, made once
        self.float_array = ctypes.c_double * len(self.float_scalars)
        self.spare: list[Any] = []  # zeroed result buffers for the next calls (see `launch`)
        self.positional = ir.positional_axes(kernel)
        # selections like x[:, 1] along a dim: bind reports one past the dim; never read past it here
        axes = {f.name: f.axes for f in kernel.fields}
        self.selections = tuple((f, pos, sel, axes[f][pos]) for f, pos, sel in kernel.selections()
                                if axes[f][pos] not in kernel.fixed)

    def __call__(self, bound: Bound) -> list[Violation]:
        memo = bound.memo  # what the batch's signature implies, prepared on its first call
        launch = memo.get("c_launch")
        if launch is None:
            launch = memo["c_launch"] = self.launcher(memo.setdefault("c_call", self.prepare(bound)))
        tensors = bound.tensors
        out = launch([tensors[f].data_ptr() for f in self.ptr_fields])
        return [] if out is None else self.decoded(out, memo["c_call"], bound)

    def launcher(self, call: tuple) -> Any:
        """`launch(pointers)`: call the function on a batch of `call`'s signature (`prepare`), given its fields'
        data pointers in `ptr_fields` order; None where it found nothing, else the result buffer for `decoded`.
        (A closure: a warm check of a small batch is mostly attribute lookups otherwise.)"""
        walked, template, floats, batch, length, pool = call
        fn, spare, int_array, result_array = self.fn, self.spare, self.int_array, ctypes.c_int64 * length

        def launch(pointers: list[int]) -> Any:
            try:
                packed = pool.pop()  # (atomic: two threads never take the same array)
            except IndexError:
                packed = int_array(*template)
            packed[:len(pointers)] = pointers  # only the data pointers change between batches of one signature
            # a zeroed result buffer of at least `length` entries (the layout reads only its first `length`): a
            # spare one kept from an earlier call where it is long enough, so a valid batch allocates and zeroes nothing
            try:
                out = spare.pop()  # (atomic: two threads never take the same buffer)
                if len(out) < length:
                    out = result_array()
            except IndexError:
                out = result_array()
            failed = fn(packed, floats, out)
            pool.append(packed)
            if not failed:
                if len(out) <= SPARE_ENTRIES and len(spare) < 2:  # (`_give_back`, inline)
                    spare.append(out)  # a valid batch wrote nothing: still all zero
                return None
            return out

        return launch

    def decoded(self, out: Any, call: tuple, bound: Bound) -> list[Violation]:
        """The violations in a result buffer `launch` returned for `bound`; the buffer is zeroed and kept."""
        global _decode
        if _decode is None:  # (a from-import on every call costs 0.5 us)
            from tritoncheck.kernel.decode import decode as _decode
        found = _decode(self.kernel, out, bound, call[0])
        self._clear(out, call[3])
        self._give_back(out)
        return found

    def prepare(self, bound: Bound) -> tuple:
        """What every call on batches of this signature shares: the walked sizes, the int64 arguments after
        the data pointers (strides, sizes, int host scalars; the pointers are 0 here), the double arguments, the
        walked batch size, the result buffer's length, and a pool of argument arrays to refill with pointers only. Raises for a selection
        out of range (`x[:, 5]` on a dim of 3), on every call of the signature."""
        tensors, dims = bound.tensors, bound.dims
        for f, pos, sel, axis in self.selections:
            size = tensors[f].shape[pos]
            if not -size <= sel < size:
                raise IndexError(f"{f}: index {sel} is out of range for axis {axis} of size {size}")
        walked = self.walked(bound)
        args = [0] * len(self.ptr_fields)
        for f in self.stride_fields:
            args.extend(tensors[f].stride())
        args.extend(walked[d] for d in self.size_dims)
        floats = None
        if self.int_scalars or self.float_scalars:
            values = bound.dim_values()
            args.extend(h.value(values) for h in self.int_scalars)
            floats = self.float_array(*(h.value(values) for h in self.float_scalars))  # (only read by the kernel)
        batch = walked.get(self.kernel.batch_dim, dims[self.kernel.batch_dim][0] if self.kernel.batch_dim in dims else 0)
        return walked, tuple(args), floats, batch, self.kernel.layout.length(batch), []

    def _give_back(self, out: Any) -> None:
        """Keep `out` (all zero again) for the next call, unless it is large or enough are kept already."""
        if len(out) <= SPARE_ENTRIES and len(self.spare) < 2:
            self.spare.append(out)

    def _clear(self, out: Any, batch: int) -> None:
        """Zero what a failing call wrote: the slots of the checks whose first-index slot is set (a check writes
        nothing else without setting it), in time proportional to the failing checks."""
        layout, base = self.kernel.layout, ctypes.addressof(out)
        for k in range(layout.n_checks):
            if out[layout.first(k)]:
                out[layout.first(k)] = out[layout.count(k)] = 0
                start, row = layout.sample_base(k)
                if row >= 0:
                    ctypes.memset(base + 8 * (start + row * batch), 0, 8 * batch)

    def walked(self, bound: Bound) -> dict[str, int]:
        """The dim sizes the kernel walks (`ir.loop_sizes`: an expanded dim at size 1). A field whose
        expanded view still spans more than 2**31 - 1 walked elements is left to the torch backend,
        which reads its stored values only."""
        sizes = ir.loop_sizes(self.kernel, self.positional, bound.tensors, bound.dim_values())
        for f in self.kernel.fields:
            t = bound.tensors[f.name]
            if 0 in t.stride() and math.prod(sizes.get(a, self.kernel.fixed.get(a, 1)) for a in f.axes) > INT32_LIMIT:
                raise ir.Unsupported("an expanded (zero-stride) view of more than 2**31 - 1 elements, along an axis "
                                     "whose positions a rule reads")
        ir.check_result_backed(self.kernel, bound.tensors, sizes, hoists=True)  # (codegen/c.py: `invariant_ops`)
        return sizes


class _PlanEntry:
    def __init__(self, plan: Plan):
        self.plan = plan  # kept alive, so the ids of its checks stay unique
        self.fields: dict[tuple[int, ...], tuple[str, ...]] = {}
        self.programs: dict[tuple, Program] = {}
        self.lock = threading.Lock()


_entries: dict[int, _PlanEntry] = {}
_entries_lock = threading.Lock()


def program_for(plan: Plan, bound: Bound) -> Program:
    """The compiled program for this plan, these runnable checks and this field signature (cached).

    A batch whose signature `bind` has seen finds its program in `bound.memo` (one dict lookup);
    otherwise the program is looked up by what it depends on, so batches that differ only in
    their sizes (dynamic padding) share one.
    """
    program = bound.memo.get("c")
    if program is None:
        program = bound.memo["c"] = _program_by_layout(plan, bound)
    return program


def _program_by_layout(plan: Plan, bound: Bound) -> Program:
    entry = _entries.get(id(plan))
    if entry is None or entry.plan is not plan:
        with _entries_lock:
            entry = _entries[id(plan)] = _PlanEntry(plan)
            while len(_entries) > MAX_PLANS:  # oldest first: specs built in a loop must not pile up
                _entries.pop(next(iter(_entries)))
    checks = bound.runnable
    # runnable checks keep the plan's order, so all of them is the common key; else their ids
    ids = () if len(checks) == len(plan.checks) else tuple(map(id, checks))
    fields = entry.fields.get(ids)
    if fields is None:
        fields = entry.fields[ids] = tuple(sorted({f for ch in checks for f in referenced_fields(ch)}))
    ts = [bound.tensors[f] for f in fields]
    # per field: dtype, contiguity, device, and past 2**31 - 1 elements (loop indices must be
    # int64) whether it is an expanded view (2); a device or a huge expanded view is refused below,
    # on the first call of its signature
    # and, for a non-contiguous field stored as one dense block, its axes in memory order (`ir.memory_order`)
    sig = tuple([(t.dtype, t.is_contiguous(), t.is_cpu, t.numel() > INT32_LIMIT and 1 + (0 in t.stride()),
                  ir.memory_order(t)) for t in ts])
    # a dim past 2**31 - 1 needs int64 loop bounds even where every field it sizes is empty
    wide = any(size > INT32_LIMIT for size, _ in bound.dims.values())
    key = (ids, sig, wide)
    program = entry.programs.get(key)
    if program is None:
        for f, (_, _, cpu, _, _) in zip(fields, sig, strict=True):
            if not cpu:  # the kernel reads host memory: never hand it a device pointer
                raise ValueError(f"backend='c' needs CPU tensors; {f} is on {bound.tensors[f].device}")
        with entry.lock:  # lowering, generation and compilation happen once per key, even with threads
            program = entry.programs.get(key)
            if program is None:
                program = entry.programs[key] = _compile(plan, tuple(checks), dict(zip(fields, sig, strict=True)), wide)
    return program


def _compile(plan: Plan, checks: tuple[DataCheck, ...], sig: dict[str, tuple], wide: bool) -> Program:
    fields = {f: ir.FieldSig(f, dtype, plan.field(f).axes, contiguous, order)
              for f, (dtype, contiguous, _, _, order) in sig.items()}
    big = wide or any(b for _, _, _, b, _ in sig.values())
    kernel = ir.lower(plan, checks, fields)
    source = c.generate(kernel, index_bits=64 if big else 32)
    # the function object keeps its library mapped while this program lives (`lib[name]`, unlike
    # getattr, caches nothing on the library: once the program goes, so can the library)
    fn = build.load(source.text)[c.FUNCTION]
    # no argtypes: ctypes then passes the argument arrays as pointers without checking each call's types
    # (1.5 us of a 10 us check); every call passes (c_int64 array, c_double array or None, c_int64 array)
    fn.restype = ctypes.c_int64
    return Program(kernel, source, fn)


def run(plan: Plan, bound: Bound) -> list[Violation]:
    """Every runnable data check of `plan` on the bound (CPU) batch, as violations."""
    if not bound.runnable:
        return []
    return program_for(plan, bound)(bound)


__all__ = ["Program", "available", "program_for", "run"]
