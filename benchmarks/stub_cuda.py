"""A CUDA machine's host side on a machine without a GPU, for timing and testing the Triton backend's
host path (issue 22): everything tritoncheck and Triton do on the host runs for real, and only the
driver does nothing.

- **Triton**: its own CUDA driver module (`driver.c`, built by Triton as on a GPU machine) and, under
  triton 3.6, each kernel's generated C launcher, linked against `stub_libcuda.c` (built here into
  a temporary folder and loaded first, so it stands in for `libcuda.so.1`). Kernels are compiled for
  sm_90 (ptxas included) and "loaded"; a launch runs Triton's whole Python and C launch path (the
  JIT's binder, its cache key, argument extraction, `data_ptr()` and `cuPointerGetAttribute` of
  every tensor) up to `cuLaunchKernelEx`, which counts the launch and returns.
- **torch**: a CPU build lacks the CUDA runtime, so the few entry points the launch path calls are
  stubbed: the current device and stream (`torch._C._cuda_getDevice`, `_cuda_getCurrentRawStream`,
  `torch.cuda._exchange_device`), events (`record`/`query`/`synchronize` do nothing) and streams
  (`wait_event`). The result buffer and its "pinned" host copy are CPU tensors, so the copy back
  and the scratch's `zero_` dispatch through torch as on a GPU and copy a few KB on the CPU: their
  host cost is counted, the DMA and the kernel are not.

`install()` must run before `tritoncheck` generates a kernel and with `TRITON_INTERPRET` unset (the
interpreter replaces Triton's language in-process), and before anything starts the CUDA runtime (on a
GPU machine it would find the stand-in): run it in a process of its own.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CUDA = None  # torch.device("cuda", 0), set by install()


class StubEvent:
    """A CUDA event whose work is done as soon as it is recorded (nothing runs on the device)."""

    __slots__ = ("recorded",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.recorded = False

    def record(self, stream: Any = None) -> None:
        self.recorded = True

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class StubStream:
    def wait_event(self, event: Any) -> None:
        pass


class Stub:
    """The installed stand-ins: `launches` counts the kernel launches that reached the driver."""

    def __init__(self, lib: ctypes.CDLL, folder: str):
        self.lib, self.folder = lib, folder

    @property
    def launches(self) -> int:
        return ctypes.c_uint64.in_dll(self.lib, "stub_launches").value


def build_libcuda(folder: str) -> str:
    """Compile stub_libcuda.c into `folder`/libcuda.so.1 (its soname, so the loader takes it for the real one)."""
    path = os.path.join(folder, "libcuda.so.1")
    cc = os.environ.get("CC", "cc")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", path, str(HERE / "stub_libcuda.c")],
                   check=True, capture_output=True)
    return path


def install() -> Stub:
    """Load the stand-in libcuda, make Triton's CUDA driver the active one, stub torch's CUDA entry points."""
    global CUDA
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError("stub_cuda.install(): TRITON_INTERPRET=1 is set; run in a process without it")
    folder = tempfile.mkdtemp(prefix="tritoncheck-stub-cuda-")
    atexit.register(shutil.rmtree, folder, True)  # (Triton links against it while the process compiles)
    lib = ctypes.CDLL(build_libcuda(folder), mode=ctypes.RTLD_GLOBAL)  # loaded first: `libcuda.so.1` is this one
    os.environ["TRITON_LIBCUDA_PATH"] = folder  # where Triton links its driver module and launchers
    import torch
    import triton
    from triton.backends.nvidia.driver import CudaDriver

    driver = CudaDriver()  # builds Triton's driver.c against the stand-in
    driver.get_current_device = lambda: 0  # (torch.cuda.current_device: a CPU build of torch has no device)
    driver.get_current_stream = lambda device: 0
    driver.get_device_capability = lambda device=None: (9, 0)
    triton.runtime.driver.set_active(driver)

    # replaced even where this torch has them (a CUDA build on a GPU machine): the real ones would start the
    # CUDA runtime, which would find the stand-in libcuda and fail
    torch._C._cuda_getDevice = lambda: 0
    torch._C._cuda_getCurrentRawStream = lambda device: 0
    torch.cuda._exchange_device = lambda device: 0 if device >= 0 else -1
    torch.cuda._maybe_exchange_device = lambda device: 0 if device >= 0 else -1
    torch.cuda.current_device = lambda: 0
    torch.cuda.Event = StubEvent
    torch.cuda.current_stream = lambda device=None: StubStream()
    torch.cuda.is_current_stream_capturing = lambda: False
    torch.cuda.synchronize = lambda device=None: None
    CUDA = torch.device("cuda", 0)
    _route_buffers_to_cpu()
    return Stub(lib, folder)


def _route_buffers_to_cpu() -> None:
    """The result buffer pool allocates CPU tensors for "cuda:0" (its one allocation; not on a warm path)."""
    import torch
    from tritoncheck.backends import triton as tb

    def allocate(self: Any, length: int, head: int, device: Any) -> Any:
        return tb._Slot(torch.zeros(length, dtype=torch.int64), torch.zeros(length, dtype=torch.int64), head,
                        torch.cuda.Event())

    tb._Pool.allocate = allocate


def on_cuda(spec: Any, batch: dict[str, Any]) -> Any:
    """Bind `batch` (CPU tensors) and let its signature launch as on cuda:0; returns the plan.

    The batch's tensors stay on the CPU (their data pointers are what the launcher passes to the
    stand-in driver); bind's memo of the signature says "cuda:0", as a CUDA batch's would.
    """
    from tritoncheck.backends import triton as tb
    from tritoncheck.plan.lower import bind, compile_plan

    plan = compile_plan(spec)
    bound = bind(plan, batch)
    bound.memo["triton"] = (tb._prepare(plan, bound, CUDA), CUDA)
    return plan

