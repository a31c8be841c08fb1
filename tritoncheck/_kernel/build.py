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
half a file.
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
import subprocess
import sysconfig
import tempfile
import threading

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


_loaded: dict[str, ctypes.CDLL] = {}
_lock = threading.Lock()


def load(source: str) -> ctypes.CDLL:
    """The compiled library for `source`, from the cache or compiled now (once per key across processes)."""
    key = cache_key(source)
    lib = _loaded.get(key)
    if lib is not None:
        return lib
    with _lock:
        if key not in _loaded:
            _loaded[key] = _load_or_build(key, source)
        return _loaded[key]


def _load_or_build(key: str, source: str) -> ctypes.CDLL:
    directory = cache_dir()
    os.makedirs(directory, mode=0o700, exist_ok=True)
    path = os.path.join(directory, f"tc_{key[:40]}.so")
    if os.path.exists(path):
        with contextlib.suppress(OSError):
            return ctypes.CDLL(path)  # a damaged file is rebuilt below
    with _file_lock(path + ".lock"):
        if os.path.exists(path):  # another process built it while we waited
            with contextlib.suppress(OSError):
                return ctypes.CDLL(path)
        _build(source, path)
    return ctypes.CDLL(path)


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
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            raise CompileError(f"the C compiler failed to run: {exc}") from None
        if done.returncode != 0:
            raise CompileError(f"the C compiler rejected generated source ({shlex.join(cmd)}):\n{done.stderr[-4000:]}")
        os.replace(src, path[: -len(".so")] + ".c")  # kept beside the library, for reading
        os.replace(lib, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


__all__ = ["CompileError", "FLAGS", "cache_dir", "cache_key", "compiler", "cpu_identity", "load"]
