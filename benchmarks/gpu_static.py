"""A static GPU report: what Triton compiles for an H100 from each built-in spec, read without a GPU.

    python benchmarks/gpu_static.py --out benchmarks/results/gpu-static-triton-3.9.0.csv
    python benchmarks/gpu_static.py --spec causal-lm --quick   # one signature, aligned sizes only

Nothing is launched. For every built-in spec (`tc.builtin_spec_names()`, loaded by `load_plan`),
every dtype signature of `VARIANTS` and both size sets of `SIZES`, it builds a zero batch on the
CPU, binds it, takes the program the Triton backend would run (`backend.program_for`) and the
arguments its launch would pass (`launch_args` below), runs Triton's own JIT binder over those
arguments for `TARGET` (so pointer alignment 16, divisibility by 16 of int arguments, int
arguments equal to 1 as constexprs, and every constexpr and option are what the JIT would use),
and compiles that `ASTSource` with `triton.compile`. One CSV row per compiled kernel:

- `indices`: int32, or int64 for the row of a batch past 2**31 elements (one per spec: the
  REPRESENTATIVE signature at aligned sizes, compiled with the arguments of a wide launch).
- `compile_s`: wall seconds of that `triton.compile`, ptxas included (on this machine, which may be
  busy: a figure to compare within one run). A kernel's first batch waits this long.
- `registers`, `spills`: from ptxas's own log of that compile (`Used N registers`, `N bytes spill
  stores`), with Triton's cache bypassed so ptxas runs.
- `load_bits_min`: the narrowest global load (`LDG`) in the SASS (`nvdisasm -gi` over the cubin)
  among the loads of *streamed* fields: a load of a whole contiguous field (no selection, no
  `x[i-1]`) over exactly the iteration space it sits in (the group's axes, plus the reduced axes
  inside a reduction). Each SASS load takes its line from the line table (the innermost frame
  in the generated file), matched through the PTX load of the same width shown on that line to
  the PTX's own `.loc` of the load (triton 3.9 shifts the line table of its inline-asm loads by
  one line per result register); lines map to fields by the IR op each line defines. 128 is the
  16-byte vector load; 8/16/32/64 mean narrower loads.
- `int_div_on_valid_path`: integer `div`/`rem` instructions in the PTX (`div.s32`, `rem.u64`,
  ...; PTX, because SASS has no divide instruction, only expanded sequences) none of whose
  source frames (the `.loc` line and the lines it is `inlined_at`) lies inside a violation
  branch: an `if` whose body writes the result buffer (`tl.atomic_*`/`tl.store`) and whose test
  does not read `pid` (the group dispatch does). An instruction at line 0 takes its basic block's
  nearest location; one without any counts as on the valid path. Constant divisors become
  shifts or multiplies before PTX and are not counted; a spec rule that itself divides integers
  (`x // y`) is.
- `max_tiles_per_program`: the most loop steps any one program walks for the row's own batch
  (`SIZES`): steps run one after another, each a memory round trip, so on a small batch this,
  not the bytes, sets the kernel's time.
- `max_tiles_per_program_1gb`, `programs_1gb`: for a batch of about 1 GB (the batch dim scaled,
  the other dims as in the row's size set), the launch grid the backend would use and the most
  loop steps (tiles) any one program walks (`geometry` below).
- `reads_per_byte_1gb`: bytes the kernel's tiles load for that batch (every group's programs times
  their loop steps times a step's bytes, the last tile's padding included), over the batch's
  bytes: 1 where each field is read once; a field two groups read counts twice (the second read
  may come from the L2 cache, which the model does not see).
- `bytes_in_flight_per_sm`, `est_bandwidth_fraction`: a Little's-law model; the bytes in flight are
  those of the group that reads the most bytes of that 1 GB batch. Programs resident per SM are limited by registers (64 Ki
  32-bit registers per SM, allocated per warp in units of 256), threads (2048), blocks (32) and
  shared memory (228 KB, 1 KB reserved per block); each resident program has one tile's loads
  in flight (a tile's loads are issued together, and none across loop steps: the kernels' SASS
  has no asynchronous copies, LDGSTS, that pipelining would use). Little's law gives 3.35 TB/s x
  ~650 ns / 132 SMs = ~16 KB in flight per SM, but the H100 run at 745deb7 read bf16 LayoutLMv3
  pixels (16 KB in flight here) at 0.63 of its copy bandwidth and fp32 ones (32 KB) at 0.99: the
  model takes 24 KB: a group reads at min(1, its bytes in flight / 24 KB) of copy bandwidth, and
  `est_bandwidth_fraction` is the batch's bytes over the time every group takes to read its own
  (`bandwidth_fraction`), so a field two groups read costs its bytes twice: the H100 read the
  causal LM at 745deb7 (1.36-1.54 reads per byte) at 0.62 of copy bandwidth. It is an estimate of
  the steady state: it ignores the serial tail that `max_tiles_per_program_1gb` shows, L2 hits
  and the instruction cost per byte.

Each compile runs in this process with `TRITON_INTERPRET` unset; the tests run it in a subprocess
(`tests/test_gpu_static.py`), because the interpreter replaces Triton's language in-process.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import io
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

TARGET = ("cuda", 90, 32)  # GPUTarget arguments: an H100 (sm_90)
COLUMNS = ["spec", "signature", "aligned", "indices", "triton", "compile_s", "registers", "spills", "load_bits_min", "int_div_on_valid_path",
           "max_tiles_per_program", "max_tiles_per_program_1gb", "programs_1gb", "reads_per_byte_1gb", "bytes_in_flight_per_sm",
           "est_bandwidth_fraction"]

# dtype signatures users hit: (integer ids, masks (fields that may be bool), floats)
VARIANTS = {
    "i64": (torch.int64, torch.int64, torch.float32),  # what HF tokenizers and image processors return
    "i64-bool": (torch.int64, torch.bool, torch.float32),  # a collator's boolean masks
    "i32-bool-fp16": (torch.int32, torch.bool, torch.float16),
    "i64-bf16": (torch.int64, torch.int64, torch.bfloat16),
}
REPRESENTATIVE = "i64-bool"  # the CI check's signature: int64 and fp32 weigh on registers, bool on load width
# every dim a built-in spec names; aligned: multiples of 16 elements; unaligned: not
SIZES = {
    True: {"B": 32, "L": 512, "T": 128, "N": 32, "D": 1024, "C": 1024, "S": 64},
    False: {"B": 30, "L": 509, "T": 125, "N": 30, "D": 1001, "C": 1001, "S": 61},
}
GB = 2**30
# sm_90 per-SM limits for the occupancy model
SM_REGISTERS, SM_THREADS, SM_BLOCKS, SM_SHARED, BLOCK_SHARED_RESERVED = 65536, 2048, 32, 228 * 1024, 1024
BYTES_NEEDED_PER_SM = 24 * 1024  # measured on the H100, see the docstring


def pick(dtypes: tuple[torch.dtype, ...], variant: str) -> torch.dtype:
    """The field's dtype under `variant`: the variant's choice for its category, where allowed."""
    ids, mask, floating = VARIANTS[variant]
    want = mask if torch.bool in dtypes else floating if any(d.is_floating_point for d in dtypes) else ids
    return want if want in dtypes else next((d for d in (torch.int64, torch.float32) if d in dtypes), dtypes[0])


def load_plan(spec_name: str, variant: str) -> Any:
    """The spec's plan, its parameters from `harness.BUILTIN_PARAMS` and the model dtype (a spec
    whose float field takes the model's compute dtype, like LayoutLMv3's pixels) the variant's float."""
    import tritoncheck as tc
    from tritoncheck.plan.lower import compile_plan
    from harness import BUILTIN_PARAMS  # benchmarks/harness.py (this folder is sys.path[0])

    return compile_plan(tc.load_spec(spec_name, config={**BUILTIN_PARAMS, "dtype": VARIANTS[variant][2]}))


def make_batch(plan: Any, variant: str, dims: dict[str, int], empty: bool = False) -> dict[str, torch.Tensor]:
    """Every field of `plan` (optional ones too: the heaviest kernel), zeros of the variant's dtypes."""
    from tritoncheck.dtypes import torch_dtypes  # (a plan holds dtype names)

    new = torch.empty if empty else torch.zeros
    return {f.name: new([s if isinstance(s, int) else dims[s] for s in f.shape], dtype=pick(tuple(torch_dtypes()[d] for d in f.dtypes), variant))
            for f in plan.fields}


def signature_text(batch: dict[str, torch.Tensor]) -> str:
    return " ".join(f"{n}:{str(t.dtype).removeprefix('torch.')}" for n, t in batch.items())


# ------------------------------------------------------------------------------------------------
# What the backend would launch: its own public functions (`launch_for`, `launch_args`,
# `geometry`, `Program.streamed`), so the report cannot drift from the launch.


def launch_args(program: Any, bound: Any, wide: bool = False) -> tuple[list[Any], dict[str, Any]]:
    """The positional arguments and keyword options `backend.launch` passes to `program.fn[grid]`.
    `wide`: as for a batch past 2**31 elements (int64 indices and 64-bit magic numbers): the backend's
    int32 limit lowered to 0 for this call, so the small batch gets the wide launch's arguments."""
    from tritoncheck.backends import triton as backend
    limit = backend.INT32_LIMIT
    backend.INT32_LIMIT = 0 if wide else limit
    try:
        out = torch.zeros(backend.launch_for(program, bound).length, dtype=torch.int64)
        args, kwargs, _ = backend.launch_args(program, bound, out)
    finally:
        backend.INT32_LIMIT = limit
    return args, kwargs


def geometry(program: Any, dims: dict[str, int]) -> list[Any]:
    """Per group of the kernel, for these dim sizes: programs, tiles per program, bytes per tile."""
    from tritoncheck.backends import triton as backend
    return backend.geometry(program, dims)


def streamed_lines(program: Any) -> dict[int, str]:
    """Source line (1-based) -> field, for every load that streams a whole contiguous field over
    exactly the iteration space it sits in (the generator records them: `Program.streamed`)."""
    return dict(program.streamed)


# ------------------------------------------------------------------------------------------------
# Compiling as the JIT would, and reading the result.


def jit_compile(fn: Any, args: list[Any], options: dict[str, Any]) -> tuple[Any, str]:
    """`triton.compile` of `fn` for TARGET with the signature, constexprs and attributes the JIT
    derives from `args` (its own binder), and ptxas's log of that compile."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget(*TARGET)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    options = {**options, "debug": options.get("debug", fn.debug) or knobs.runtime.debug}  # as JITFunction.run
    bound_args, specialization, options = binder(*args, **options)
    options, signature, constexprs, attrs = fn._pack_args(backend, options, bound_args, specialization, options)
    log = io.StringIO()
    with knobs.compilation.scope(), knobs.nvidia.scope(), contextlib.redirect_stdout(log):
        knobs.compilation.always_compile = True  # ptxas must run for its log
        knobs.nvidia.dump_ptxas_log = True
        compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__)
    return compiled, log.getvalue()


def ptxas_figures(log: str) -> tuple[int, int]:
    """(registers, bytes of spill stores) from ptxas -v output."""
    regs = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores", log)
    if regs is None or spills is None:
        raise RuntimeError(f"no ptxas figures in its log: {log[-500:]!r}")
    return int(regs.group(1)), int(spills.group(1))


class Disassembly:
    """`nvdisasm -c -gi` of a cubin (SASS with line info), run in the background: it takes about a
    second and a half, which the next compile overlaps."""

    def __init__(self, cubin: bytes):
        from triton import knobs

        self.dir = tempfile.TemporaryDirectory()
        path = os.path.join(self.dir.name, "kernel.cubin")
        with open(path, "wb") as fh:
            fh.write(cubin)
        self.proc = subprocess.Popen([knobs.nvidia.nvdisasm.path, "-c", "-gi", path], stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)

    def text(self) -> str:
        out, err = self.proc.communicate()
        self.dir.cleanup()
        if self.proc.returncode:
            raise RuntimeError(f"nvdisasm failed: {err[-500:]}")
        return out


_SASS_LINE = re.compile(r'//## File "([^"]+)", line (\d+)')
_SASS_WIDTH = {"128": 128, "64": 64, "U8": 8, "S8": 8, "U16": 16, "S16": 16}  # no suffix: 32 bits
_PTX_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+(?:.*inlined_at\s+(\d+)\s+(\d+)\s+\d+)?")
_PTX_LOAD = re.compile(r"\bld\.global(?:\.[\w:]+?)*?(?:\.v(\d))?\.[bsuf](8|16|32|64)\s")
_PTX_DIV = re.compile(r"^\s*(?:@!?%p\d+\s+)?(?:div|rem)\.[su](?:16|32|64)\s")
_PTX_BLOCK = re.compile(r"^\s*(\$L__BB\d+_\d+:|// %bb\.\d+:)")


def sass_loads(text: str, source_path: str) -> list[tuple[int, int]]:
    """(line, bits) of every global load (LDG) in the SASS: each instruction takes the innermost
    frame in the generated file of the line-info block before it (a load inlined from a function
    of that file has its own line first, then `inlined at` the caller's)."""
    out, line, block_open = [], 0, False
    for raw in text.splitlines():
        m = _SASS_LINE.search(raw)
        if m:
            if not block_open:
                line = 0
            if not line and os.path.basename(m.group(1)) == os.path.basename(source_path):
                line = int(m.group(2))
            block_open = True
            continue
        block_open = False
        ins = re.search(r"\*/\s+(?:@!?U?P\w+\s+)?(LDG\S*)", raw)
        if ins:
            mods = ins.group(1).split(".")[1:]
            out.append((line, next((_SASS_WIDTH[m] for m in mods if m in _SASS_WIDTH), 32)))
    return out


def ptx_lines(ptx: str, source_path: str) -> Iterator[tuple[str, int, list[int]]]:
    """(PTX line, basic block, the generated-source lines of its location: innermost first, each
    `inlined_at` followed through the latest `.loc` of the caller's line; empty at line 0 or
    outside the generated file)."""
    files = re.finditer(r'^\s*\.file\s+(\d+)\s+"([^"]+)"', ptx, re.MULTILINE)
    ours = {m.group(1) for m in files if os.path.basename(m.group(2)) == os.path.basename(source_path)}
    caller: dict[tuple[str, str], tuple[str, str]] = {}  # (file, line) -> where it was last inlined
    block, chain = 0, []
    for raw in ptx.splitlines():
        m = _PTX_LOC.match(raw)
        if m:
            loc = (m.group(1), m.group(2))
            if m.group(3):
                caller[loc] = (m.group(3), m.group(4))
            else:
                caller.pop(loc, None)
            chain, seen = [], set()
            while loc is not None and loc not in seen:
                seen.add(loc)
                if loc[0] in ours and loc[1] != "0":
                    chain.append(int(loc[1]))
                loc = caller.get(loc)
        elif _PTX_BLOCK.match(raw):
            block += 1
        yield raw, block, chain


def ptx_loads(ptx: str, source_path: str) -> list[tuple[int, int, int]]:
    """(source line, line as the SASS shows it, bits) of every `ld.global` in the PTX.

    Triton emits a load as inline asm (`mov`s zeroing the result registers, then the predicated
    `ld`); triton 3.9 gives each line of that asm its own `.loc`, one source line further each, so
    the SASS shows a 128-bit load on the line after its own. A load's source line is the first
    `.loc` inside its asm block (or the one in effect where the block starts)."""
    out, in_asm, first = [], False, None
    for raw, _, chain in ptx_lines(ptx, source_path):
        line = chain[0] if chain else 0
        if _PTX_LOC.match(raw):
            if in_asm and first is None:
                first = line
        elif "// begin inline asm" in raw:
            in_asm, first = True, None
        elif "// end inline asm" in raw:
            in_asm = False
        elif ld := _PTX_LOAD.search(raw):
            source = first if in_asm and first is not None else line
            out.append((source, line, int(ld.group(1) or 1) * int(ld.group(2))))
    return out


def load_widths(ptx: str, sass_text: str, source_path: str) -> list[tuple[int, int]]:
    """(source line, bits) of every SASS global load, its source line found through the PTX load
    of the same width shown on the same line (any PTX load shown there, if ptxas changed a width)."""
    shown: dict[int, list[tuple[int, int]]] = {}
    for src, at, bits in ptx_loads(ptx, source_path):
        shown.setdefault(at, []).append((src, bits))
    out = []
    for at, bits in sass_loads(sass_text, source_path):
        candidates = shown.get(at, [])
        same = {src for src, b in candidates if b == bits} or {src for src, _ in candidates} or {at}
        out.extend((src, bits) for src in same)
    return out


def int_divisions(ptx: str, source_path: str) -> list[list[int]]:
    """For every integer div/rem in the PTX, the generated-source lines of its location, innermost
    first. An instruction LLVM placed at line 0 (code it moved, e.g. an index computation sunk into
    the violation branch) takes the location of the nearest located instruction in its basic
    block, the next one first; one with none has an empty list."""
    lines = list(ptx_lines(ptx, source_path))
    out = []
    for i, (raw, block, chain) in enumerate(lines):
        if _PTX_DIV.match(raw):
            after = (c for r, b, c in lines[i + 1:] if b == block and c and not _PTX_LOC.match(r))
            before = (c for r, b, c in reversed(lines[:i]) if b == block and c and not _PTX_LOC.match(r))
            out.append(chain or next(after, []) or next(before, []))
    return out


def violation_lines(source: str) -> set[int]:
    """Lines inside a violation branch: the body of an `if` that writes the result buffer and whose
    test does not read `pid` (the group dispatch does)."""
    def writes(node: ast.AST) -> bool:
        return any(isinstance(n, ast.Attribute) and (n.attr.startswith("atomic_") or n.attr == "store")
                   for n in ast.walk(node))

    lines: set[int] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "pid" not in {n.id for n in ast.walk(child.test) if isinstance(n, ast.Name)} \
                    and any(writes(s) for s in child.body):
                lines.update(range(child.body[0].lineno, child.body[-1].end_lineno + 1))
                for s in child.orelse:
                    visit(s)
            else:
                visit(child)

    visit(ast.parse(source))
    return lines


# ------------------------------------------------------------------------------------------------
# One row.


def occupancy(registers: int, num_warps: int, shared: int) -> int:
    """Programs (thread blocks) resident per SM on sm_90."""
    per_warp = -(-registers // 8) * 8 * 32
    by_regs = (SM_REGISTERS // per_warp) // num_warps if registers else SM_BLOCKS
    by_shared = SM_SHARED // (shared + BLOCK_SHARED_RESERVED)
    return max(0, min(by_regs, SM_THREADS // (32 * num_warps), SM_BLOCKS, by_shared))


def bandwidth_fraction(launches: list[Any], resident: int, batch_bytes: int) -> float:
    """The batch's bytes over the time the kernel's groups take to read theirs, as a share of copy
    bandwidth: each group reads at min(1, its bytes in flight per SM / BYTES_NEEDED_PER_SM) of it,
    and a field two groups read is read twice (at 1 GB the L2 cache holds none of it)."""
    time = 0.0
    for g in launches:
        read = g.programs * g.tiles * g.tile_bytes
        if read:
            time += read / min(1.0, resident * g.tile_bytes / BYTES_NEEDED_PER_SM)
    return min(1.0, batch_bytes / time) if time else 1.0


def launches_1gb(plan: Any, program: Any, variant: str, dims: dict[str, int]) -> tuple[list[Any], int]:
    """The launch (`geometry`) of a batch of about 1 GB, the batch dim scaled and the other dims as
    in `dims`, and that batch's bytes. Nothing is allocated (empty tensors are never touched)."""
    from tritoncheck.plan.lower import bind

    batch_dim = program.kernel.batch_dim
    batch = make_batch(plan, variant, dims, empty=True)
    per_sample = sum(t.element_size() * t.numel() // t.shape[[*f.shape].index(batch_dim)]
                     for f in plan.fields for t in [batch[f.name]] if batch_dim in f.shape)
    big = bind(plan, make_batch(plan, variant, {**dims, batch_dim: max(1, GB // per_sample)}, empty=True))
    return geometry(program, big.dim_values()), sum(t.numel() * t.element_size() for t in big.tensors.values())


def reads_per_byte(launches: list[Any], batch_bytes: int) -> float:
    """Bytes the launch's tiles load over the batch's bytes (`reads_per_byte_1gb`)."""
    return round(sum(g.programs * g.tiles * g.tile_bytes for g in launches) / batch_bytes, 2)


def start(spec_name: str, variant: str, aligned: bool, wide: bool = False) -> tuple[dict[str, Any], Any] | None:
    """Compile one spec (a built-in name or a YAML path), signature and size set (`wide`: with the
    int64 indices of a batch past 2**31 elements): its row without the SASS figure, and what
    `finish` needs; None when the backend would not run a kernel (a plan it does not lower goes to
    the torch backend)."""
    import triton

    from tritoncheck.plan.lower import bind
    from tritoncheck.backends import triton as backend
    plan = load_plan(spec_name, variant)
    dims = SIZES[aligned]
    batch = make_batch(plan, variant, dims)
    bound = bind(plan, batch)
    program = backend.program_for(plan, bound)
    if program is None:
        return None
    args, options = launch_args(program, bound, wide)
    began = time.perf_counter()
    compiled, log = jit_compile(program.fn, args, options)
    seconds = time.perf_counter() - began
    registers, spills = ptxas_figures(log)
    violation = violation_lines(program.source)
    # on the valid path: no frame of its location inside a violation branch (unknown ones count)
    divs = [chain for chain in int_divisions(compiled.asm["ptx"], program.path) if not violation.intersection(chain)]

    launches, batch_bytes = launches_1gb(plan, program, variant, dims)
    heaviest = max(launches, key=lambda g: g.programs * g.tiles * g.tile_bytes)
    resident = occupancy(registers, compiled.metadata.num_warps, compiled.metadata.shared)
    in_flight = resident * heaviest.tile_bytes
    row = {
        "spec": spec_name, "signature": signature_text(batch), "aligned": aligned, "indices": "int64" if wide else "int32",
        "triton": triton.__version__,
        "compile_s": round(seconds, 1), "registers": registers, "spills": spills, "load_bits_min": "", "int_div_on_valid_path": len(divs),
        "max_tiles_per_program": max(g.tiles for g in geometry(program, bound.dim_values())),
        "max_tiles_per_program_1gb": max(g.tiles for g in launches),
        "programs_1gb": sum(g.programs for g in launches),
        "reads_per_byte_1gb": reads_per_byte(launches, batch_bytes),
        "bytes_in_flight_per_sm": in_flight,
        "est_bandwidth_fraction": round(bandwidth_fraction(launches, resident, batch_bytes), 2),
    }
    return row, (program, compiled.asm["ptx"], Disassembly(compiled.asm["cubin"]))


def finish(row: dict[str, Any], pending: Any) -> dict[str, Any]:
    """The row with `load_bits_min`, once the SASS is there."""
    program, ptx, disassembly = pending
    streamed = streamed_lines(program)
    widths = [bits for line, bits in load_widths(ptx, disassembly.text(), program.path) if line in streamed]
    return {**row, "load_bits_min": min(widths) if widths else ""}


def cases(specs: list[str], variants: list[str], sizes: list[bool]) -> Iterator[tuple[str, str, bool, bool]]:
    """(spec, variant, aligned, wide) to compile; a variant giving a spec the same dtypes as an
    earlier one (a spec without masks or floats) is left out; per spec, one row with int64 indices
    (REPRESENTATIVE, aligned sizes) where those are compiled."""
    for spec_name in specs:
        for aligned in sizes:
            seen = set()
            for variant in variants:
                text = signature_text(make_batch(load_plan(spec_name, variant), variant, SIZES[aligned], empty=True))
                if text not in seen:
                    seen.add(text)
                    yield spec_name, variant, aligned, False
        if True in sizes and REPRESENTATIVE in variants:
            yield spec_name, REPRESENTATIVE, True, True


def rows(todo: Iterable[tuple[str, str, bool]], log: Any = sys.stderr) -> Iterator[dict[str, Any]]:
    """The row of each (spec, variant, aligned) in order; each kernel's SASS is read while the
    next one compiles."""
    waiting = None
    for case in [*todo, None]:
        started = start(*case) if case is not None else None
        if waiting is not None:
            r = finish(*waiting)
            print(" ".join(f"{k}={r[k]}" for k in COLUMNS if k != "triton"), file=log, flush=True)
            yield r
        waiting = started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="CSV file to write (default: stdout)")
    parser.add_argument("--spec", action="append", help="a built-in spec (repeatable; default: all)")
    parser.add_argument("--quick", action="store_true", help=f"only the {REPRESENTATIVE} signature, aligned sizes")
    opts = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        parser.error("unset TRITON_INTERPRET: the report compiles for a GPU, not for the interpreter")
    import tritoncheck as tc

    specs = opts.spec or tc.builtin_spec_names()
    unknown = sorted(set(specs) - set(tc.builtin_spec_names()))
    if unknown:
        parser.error(f"not a built-in spec: {', '.join(unknown)}")
    variants, sizes = ([REPRESENTATIVE], [True]) if opts.quick else (list(VARIANTS), [True, False])
    with open(opts.out, "w", newline="") if opts.out else contextlib.nullcontext(sys.stdout) as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        for r in rows(cases(specs, variants, sizes)):
            writer.writerow(r)
            fh.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
