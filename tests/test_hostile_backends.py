"""The C backend's compiler and kernel cache under a hostile environment and hostile specs.

Every fault of the environment ends in the torch backend with one warning (`report.backend`
says so), never a traceback; a failed build is not retried; a timed-out compiler leaves no
process behind; a damaged cached library is never mapped; a spec too big to compile is refused
at load.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
import warnings

import pytest
import torch

import tritoncheck as tc
from tritoncheck.plan.lower import MAX_DATA_CHECKS, compile_plan
from tritoncheck.api import core as _api
from tritoncheck.backends import codecache as build
from tritoncheck.backends import c as c_backend
from tritoncheck.spec.schema import spec_from_dict

pytestmark = pytest.mark.skipif(not c_backend.available(), reason="no C compiler")


def spec(name: str = "t", rules: list | None = None) -> tc.BatchSpec:
    """A spec of its own name: a kernel no other test has compiled (its header comment differs)."""
    return spec_from_dict({"name": name, "fields": {"x": {"dtype": "int64", "shape": ["B"], "min": 0}},
                           "rules": rules or []}, "t.yaml")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache dir, nothing loaded or failed in this process, every fallback warned again."""
    monkeypatch.setenv("TRITONCHECK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(build, "_loaded", {})
    monkeypatch.setattr(build, "_alive", build.weakref.WeakValueDictionary())
    monkeypatch.setattr(build, "_failed", {}, raising=False)
    monkeypatch.setattr(c_backend, "_entries", {})
    monkeypatch.setattr(_api, "_warned", set())
    return tmp_path


def checked(s: tc.BatchSpec) -> tuple[tc.Report, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        report = tc.check({"x": torch.tensor([1, -2])}, s, backend="c")
    return report, [str(w.message) for w in caught]


def assert_fell_back(report: tc.Report, said: list[str], what: str) -> None:
    assert report.backend == "torch"
    assert [(v.code, v.count) for v in report.violations] == [("below_min", 1)]
    assert len(said) == 1 and "the torch backend checks it instead" in said[0] and what in said[0], said


def test_a_cache_path_under_a_file_falls_back_to_torch(fresh, monkeypatch):
    (fresh / "file").write_text("not a directory")
    monkeypatch.setenv("TRITONCHECK_CACHE_DIR", str(fresh / "file" / "cache"))
    assert_fell_back(*checked(spec("under_a_file")), "cannot be used")


def test_a_read_only_cache_dir_falls_back_to_torch(fresh, monkeypatch):
    monkeypatch.setenv("TRITONCHECK_CACHE_DIR", "/proc/self/tritoncheck-cache")  # read-only even for root
    assert_fell_back(*checked(spec("read_only")), "cannot be used")


def test_a_full_cache_dir_falls_back_to_torch(fresh, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(build.os, "replace", full)  # the build's rename into place
    assert_fell_back(*checked(spec("full")), "No space left")


def test_a_noexec_cache_dir_falls_back_to_torch(fresh, monkeypatch):
    def noexec(path, *args, **kwargs):
        raise OSError(f"{path}: failed to map segment from shared object")

    monkeypatch.setattr(build.ctypes, "CDLL", noexec)
    assert_fell_back(*checked(spec("noexec")), "failed to map segment")


def test_a_failed_build_is_remembered_not_retried(fresh, monkeypatch):
    calls = []

    def rejects(cmd):
        calls.append(cmd)
        return 1, "error: rejected"

    monkeypatch.setattr(build, "_run_compiler", rejects, raising=False)
    s = spec("remembered")
    for _ in range(3):
        report, _ = checked(s)
        assert report.backend == "torch" and not report.ok
    assert len(calls) == 1


FAKE_CC = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "fake-cc 1.0"; exit 0; fi
sleep 300 &
echo $! > "{pidfile}"
wait
"""


def test_a_compile_timeout_kills_the_compilers_whole_process_group(fresh, monkeypatch):
    pidfile = fresh / "child.pid"
    cc = fresh / "fake-cc"
    cc.write_text(FAKE_CC.format(pidfile=pidfile))
    cc.chmod(0o755)
    monkeypatch.setattr(build, "compiler", lambda: (str(cc),))
    monkeypatch.setattr(build, "COMPILE_TIMEOUT_S", 1)
    start = time.monotonic()
    report, said = checked(spec("timeout"))
    child = int(pidfile.read_text())
    time.sleep(0.2)
    gone = not os.path.exists(f"/proc/{child}") or "Z" in open(f"/proc/{child}/stat").read().split()[2]
    if not gone:
        os.kill(child, 9)
    assert gone, "the compiler's child (cc1) is still running"
    assert report.backend == "torch" and "more than 1 s" in said[0]
    assert time.monotonic() - start < 30


TRUNCATED = """
import torch
import tritoncheck as tc
from tritoncheck.spec.schema import spec_from_dict
s = spec_from_dict({"name": "truncated", "fields": {"x": {"dtype": "int64", "shape": ["B"], "min": 0}}}, "t.yaml")
r = tc.check({"x": torch.tensor([1, -2])}, s, backend="c")
print(r.backend, [v.code for v in r.violations])
"""


# seconds of processes or compilers: the slow set, which .ci/run runs (the README command stays under 3 minutes)
@pytest.mark.slow
def test_a_truncated_cached_library_is_rebuilt_never_mapped(fresh):
    cache = fresh / "shared"
    env = dict(os.environ, TRITONCHECK_CACHE_DIR=str(cache))
    run = [sys.executable, "-c", TRUNCATED]
    first = subprocess.run(run, capture_output=True, text=True, env=env, timeout=120)
    assert first.returncode == 0 and first.stdout.split() == ["c", "['below_min']"], first.stderr[-2000:]
    [lib] = (cache / "c").glob("*.so")
    os.truncate(lib, lib.stat().st_size // 3)  # a full disk or a killed copy leaves such a file
    second = subprocess.run(run, capture_output=True, text=True, env=env, timeout=120)
    assert second.returncode == 0, second.stderr[-2000:]  # SIGBUS at dlopen: returncode -7
    assert second.stdout.split() == ["c", "['below_min']"]
    assert lib.stat().st_size > 0 and open(str(lib) + ".sha256").read().split()[0] == str(lib.stat().st_size)


def test_a_spec_of_too_many_checks_is_refused_at_load():
    fields = {"x": {"dtype": "int64", "shape": ["B"]}}
    rules = [f"x != {i}" for i in range(MAX_DATA_CHECKS + 1)]
    with pytest.raises(tc.SpecError, match=r"257 data checks .* at most 256"):
        compile_plan(spec_from_dict({"name": "big", "fields": fields, "rules": rules}, "t.yaml"))
    compile_plan(spec_from_dict({"name": "big", "fields": fields, "rules": rules[:-1]}, "t.yaml"))


def test_the_cache_keeps_a_size_and_hash_beside_each_library(fresh):
    report, _ = checked(spec("digest"))
    assert report.backend == "c"
    d = build.cache_dir()
    libs = [f for f in os.listdir(d) if f.endswith(".so")]
    assert len(libs) == 1
    size, digest = open(os.path.join(d, libs[0] + ".sha256")).read().split()
    assert int(size) == os.path.getsize(os.path.join(d, libs[0])) and len(digest) == 64




def test_the_cache_directory_keeps_at_most_max_cached_kernels(fresh, monkeypatch):
    monkeypatch.setattr(build, "MAX_CACHED_KERNELS", 3)
    for i in range(6):
        assert checked(spec(f"pruned{i}"))[0].backend == "c"
    files = os.listdir(build.cache_dir())
    assert len([f for f in files if f.endswith(".so")]) == 3
    assert len(files) == 3 * 4  # each kernel: .so, .so.sha256, .c, .so.lock
    assert checked(spec("pruned0"))[0].backend == "c"  # a pruned kernel is built again
