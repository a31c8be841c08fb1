"""Compiling generated C into a shared library, caching it on disk, loading it with ctypes.

The compiler is the one the Python build names (`sysconfig`'s CC), else `cc` or `gcc`. Flags:
`-O3 -march=native` (fast code for this CPU), `-ffp-contract=off` (no fused multiply-add: float32
math rounds after every op, as torch's does) and never `-ffast-math`.

Because of `-march=native`, a library is only valid on the CPU it was built for, so the cache key
is the sha256 of the source, the compiler command, the compiler's version and the CPU identity
(model name and feature flags). Libraries live in `$TRITONCHECK_CACHE_DIR/c/` (default
`~/.cache/tritoncheck/c/`). A build compiles into a unique temporary name and renames it into
place (`os.replace` is atomic), under an exclusive `flock` on a per-key lock file, so several
processes (DataLoader workers) compiling the same kernel compile it once, and a reader never sees
half a file. The library's size and sha256 are recorded beside it at build and checked before
every `dlopen`: a library truncated or changed since is rebuilt, never mapped. The directory keeps
the `MAX_CACHED_KERNELS` most recently used kernels; a process keeps mapped only the libraries a
live program calls into and the `MAX_LOADED_LIBRARIES` most recently loaded, and unmaps the rest.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import threading
import weakref

try:
    import fcntl
except ImportError:  # Windows: the atomic rename alone keeps the cache consistent
    fcntl = None

FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-fast-math", "-std=c11", "-fPIC", "-shared")
LIBS = ("-lm",)
COMPILE_TIMEOUT_S = 120


class CompileError(RuntimeError):
    """No C compiler, or the compiler rejected generated source (a bug: please report it)."""


def cache_dir() -> str:
    root = os.environ.get("TRITONCHECK_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tritoncheck")
    return os.path.join(root, "c")


@functools.lru_cache(maxsize=None)
def compiler() -> tuple[str, ...] | None:
    """The compiler command (the Python build's CC, else cc, else gcc), or None if there is none."""
    candidates = []
    cc = sysconfig.get_config_var("CC")
    if cc:
        candidates.append(tuple(shlex.split(cc)))
    candidates += [("cc",), ("gcc",)]
    for cmd in candidates:
        if cmd and shutil.which(cmd[0]):
            return cmd
    return None


@functools.lru_cache(maxsize=None)
def compiler_version(cmd: tuple[str, ...]) -> str:
    """The first line the compiler prints for --version (part of the cache key)."""
    try:
        done = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CompileError(f"cannot run the C compiler {cmd[0]!r}: {exc}") from None
    return (done.stdout or done.stderr).strip().splitlines()[0] if (done.stdout or done.stderr).strip() else ""


@functools.lru_cache(maxsize=None)
def cpu_identity() -> str:
    """What makes a `-march=native` binary valid here: the CPU model and its feature flags."""
    model, flags = "", ""
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "Processor", "CPU part") and not model:
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = " ".join(sorted(value.split()))
                if model and flags:
                    break
    return f"{platform.machine()}|{platform.processor()}|{model}|{flags}"


def cache_key(source: str) -> str:
    cmd = compiler()
    if cmd is None:
        raise CompileError("no C compiler found (looked for the Python build's CC, cc and gcc)")
    parts = [source, shlex.join([*cmd, *FLAGS, *LIBS]), compiler_version(cmd), cpu_identity()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


MAX_LOADED_LIBRARIES = 16  # libraries kept mapped for reuse after no program calls into them
MAX_FAILED = 256  # failed builds remembered (oldest forgotten first)
# Libraries this process has mapped: `_loaded` keeps the most recently used MAX_LOADED_LIBRARIES
# alive (oldest first in the dict); `_alive` finds any other one still held by a function pointer
# (a ctypes function keeps its library object alive), so a key is never mapped twice. A library
# object that nothing holds any more is unmapped (`_unmap`): 80 specs no longer leave 80 mapped.
_loaded: dict[str, ctypes.CDLL] = {}
_alive: weakref.WeakValueDictionary[str, ctypes.CDLL] = weakref.WeakValueDictionary()
_failed: dict[str, CompileError] = {}  # a build that failed is not retried in this process
_lock = threading.Lock()


def load(source: str) -> ctypes.CDLL:
    """The compiled library for `source`, from the cache or compiled now (once per key across processes).

    Any fault of the environment (no compiler, a cache path under a file, a read-only, full or
    `noexec` cache dir, a compile past `COMPILE_TIMEOUT_S`) raises `CompileError`, which the caller
    turns into the torch backend with one warning; the failure is remembered, so later checks do
    not wait for the compiler again. Call into the library only through functions taken from the
    returned object (`lib[name]`, `getattr`), never through a raw address: a function object keeps
    its library mapped, and a library nothing holds is unmapped.
    """
    key = cache_key(source)
    with _lock:
        if key in _failed:
            raise _failed[key]
        lib = _loaded.pop(key, None)
        if lib is None:
            lib = _alive.get(key)
        if lib is None:
            try:
                lib = _load_or_build(key, source)
            except OSError as exc:
                _remember_failure(key, CompileError(f"the kernel cache at {cache_dir()!r} cannot be used: {exc}"))
                raise _failed[key] from None
            except CompileError as exc:
                _remember_failure(key, exc)
                raise
            _alive[key] = lib
            if _dlclose is not None:
                # unmapped once no object can call into it; never at exit, where a daemon thread may still run
                weakref.finalize(lib, _dlclose, lib._handle).atexit = False
        _loaded[key] = lib  # (re)inserted last: the most recently used
        while len(_loaded) > MAX_LOADED_LIBRARIES:
            _loaded.pop(next(iter(_loaded)))
        return lib


def _remember_failure(key: str, exc: CompileError) -> None:
    _failed[key] = exc
    while len(_failed) > MAX_FAILED:
        _failed.pop(next(iter(_failed)))


def _find_dlclose():
    """libc's `dlclose`, or None where there is none (Windows: a library then stays mapped)."""
    try:
        fn = ctypes.CDLL(None).dlclose
    except (AttributeError, OSError, TypeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_void_p], ctypes.c_int
    return fn


# Unmapping is safe: a generated library holds no state, starts no thread, registers nothing
# (no constructors, atexit or TLS destructors) and hands out no pointer into itself; it is unmapped
# only when its `CDLL` object is collected, which happens after the last function object taken
# from it (a running call holds one) is gone.
_dlclose = _find_dlclose()


def _load_or_build(key: str, source: str) -> ctypes.CDLL:
    directory = cache_dir()
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, f"tc_{key[:40]}.so")
    lib = _load_verified(path)
    if lib is not None:
        return lib
    with _file_lock(path + ".lock"):
        lib = _load_verified(path)  # another process built it while we waited
        if lib is not None:
            return lib
        _build(source, path)
        _prune(directory, keep=path)
    lib = _load_verified(path)
    if lib is None:
        raise CompileError(f"the library just built at {path!r} does not match its recorded size and hash")
    return lib


MAX_CACHED_KERNELS = 64  # libraries kept in the cache directory; the least recently built or loaded go first
_SIDECARS = (".so", ".so.sha256", ".c", ".so.lock")


def _prune(directory: str, keep: str) -> None:
    """Remove the least recently used kernels past MAX_CACHED_KERNELS, each with its files: 80
    specs must not leave 320 files. A process that has one mapped keeps it (unlinking is safe);
    one that needs it again rebuilds it."""
    libs = [os.path.join(directory, f) for f in os.listdir(directory) if f.startswith("tc_") and f.endswith(".so")]
    if len(libs) <= MAX_CACHED_KERNELS:
        return
    libs.sort(key=lambda f: os.stat(f).st_mtime_ns if os.path.exists(f) else 0)
    for lib in libs[: len(libs) - MAX_CACHED_KERNELS]:
        if lib != keep:
            for suffix in _SIDECARS:
                with contextlib.suppress(OSError):
                    os.unlink(lib[: -len(".so")] + suffix)


def _digest(path: str) -> str:
    """`size sha256` of a file: what a build records beside its library, and a load checks first."""
    with open(path, "rb") as fh:
        data = fh.read()
    return f"{len(data)} {hashlib.sha256(data).hexdigest()}"


def _load_verified(path: str) -> ctypes.CDLL | None:
    """The cached library, or None where it is missing or does not match the size and hash recorded
    at build: a truncated library would kill the process (SIGBUS) when `dlopen` maps it."""
    try:
        with open(path + ".sha256", encoding="ascii") as fh:
            recorded = fh.read().strip()
        if _digest(path) != recorded:
            return None
        with contextlib.suppress(OSError):  # (a read-only cache is still read)
            os.utime(path)  # recently used: kept by `_prune`
    except (OSError, ValueError):
        return None
    return ctypes.CDLL(path)  # an OSError here (a noexec mount) is the caller's to report


@contextlib.contextmanager
def _file_lock(path: str):
    if fcntl is None:
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _build(source: str, path: str) -> None:
    """Compile into a unique temporary directory, then rename the library into place atomically."""
    directory = os.path.dirname(path)
    stem = os.path.basename(path)[: -len(".so")]
    tmp = tempfile.mkdtemp(prefix=".build-", dir=directory)
    try:
        src = os.path.join(tmp, f"{stem}.c")
        lib = os.path.join(tmp, f"{stem}.so")
        with open(src, "w", encoding="utf-8") as fh:
            fh.write(source)
        cmd = [*compiler(), *FLAGS, "-o", lib, src, *LIBS]
        returncode, stderr = _run_compiler(cmd)
        if returncode != 0:
            raise CompileError(f"the C compiler rejected generated source ({shlex.join(cmd)}):\n{stderr[-4000:]}")
        digest = os.path.join(tmp, "digest")
        with open(digest, "w", encoding="ascii") as fh:
            fh.write(_digest(lib))
        os.replace(src, path[: -len(".so")] + ".c")  # kept beside the library, for reading
        os.replace(lib, path)
        os.replace(digest, path + ".sha256")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_compiler(cmd: list[str]) -> tuple[int, str]:
    """Run the compiler in its own process group; past `COMPILE_TIMEOUT_S` the whole group is killed
    (the driver and its `cc1`/`as`), so a timed-out build leaves nothing running."""
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    except OSError as exc:
        raise CompileError(f"the C compiler failed to run: {exc}") from None
    try:
        _, stderr = proc.communicate(timeout=COMPILE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise CompileError(f"the C compiler took more than {COMPILE_TIMEOUT_S} s; the kernel is not built") from None
    return proc.returncode, stderr


__all__ = ["CompileError", "FLAGS", "cache_dir", "cache_key", "compiler", "cpu_identity", "load"]
