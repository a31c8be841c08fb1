"""What the command prints and writes, run as a user runs it (a subprocess): non-UTF-8 names under
any locale (issue 20 item 6), `--output` written atomically and never over an input, and a closed
stdout that keeps the verdict's exit code (issue 21)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # each test starts the command (torch's import) a few times

# The bytes of a non-UTF-8 file name: 0x9b is CSI, an 8-bit control that a terminal obeys.
RAW_NAME = os.fsdecode(b"bad\xff\x9b.pt")
C1_BYTES = re.compile(rb"[\x80-\x9f]")
LOCALES = {"utf-8": {"PYTHONIOENCODING": "utf-8:strict"},  # what a UTF-8 locale (en_US.UTF-8) gives stdout
           "C": {"LC_ALL": "C", "LANG": "C"}}


def tritoncheck(*args: str, cwd: Path, env: dict[str, str] | None = None, stdout: int | None = None,
                prelude: str = "") -> subprocess.CompletedProcess:
    code = f"import sys; {prelude}from tritoncheck.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env={**os.environ, **(env or {})},
                          stdout=subprocess.PIPE if stdout is None else stdout, stderr=subprocess.PIPE, timeout=300)


def ce_batch(bad: bool, key: str = "input") -> dict[str, torch.Tensor]:
    return {key: torch.randn(2, 3), "target": torch.tensor([0, 7 if bad else 1])}


@pytest.mark.parametrize("locale", LOCALES)
def test_non_utf8_file_names_and_keys_print_escaped(tmp_path, locale):
    torch.save({**ce_batch(bad=True), "k\udc9b\udcff": torch.zeros(2)}, tmp_path / RAW_NAME)
    (tmp_path / "data").mkdir()
    torch.save(ce_batch(bad=True), tmp_path / "data" / RAW_NAME)
    for command in (["check", "cross-entropy", RAW_NAME], ["scan", "cross-entropy", "data"]):
        done = tritoncheck(*command, "--backend", "torch", cwd=tmp_path, env=LOCALES[locale])
        assert done.returncode == 1, done.stderr.decode(errors="replace")
        assert not C1_BYTES.search(done.stdout + done.stderr)  # no raw 8-bit control reaches the terminal
        out = done.stdout.decode("ascii", errors="replace")
        assert "target[1]" in out
        assert "\\udcff\\udc9b.pt" in out if command[0] == "scan" else "k\\udc9b\\udcff" in out


def test_output_is_replaced_whole_or_not_at_all(tmp_path):
    torch.save(ce_batch(bad=True), tmp_path / "bad.pt")
    (tmp_path / "report.json").write_text("the previous report\n")
    # A write limit of 200 bytes fails the report's write part-way, as a full disk does.
    limited = "import resource; resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200)); "
    done = tritoncheck("check", "cross-entropy", "bad.pt", "--backend", "torch", "-o", "report.json",
                       cwd=tmp_path, prelude=limited)
    assert done.returncode == 2
    assert done.stderr.decode().strip() == "tritoncheck: error: cannot write report.json: File too large"
    assert (tmp_path / "report.json").read_text() == "the previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.pt", "report.json"]  # no temporary file left


def test_output_never_overwrites_an_input(tmp_path):
    torch.save(ce_batch(bad=True), tmp_path / "bad.pt")
    (tmp_path / "data").mkdir()
    torch.save(ce_batch(bad=True), tmp_path / "data" / "0.pt")
    before = {p: p.read_bytes() for p in (tmp_path / "bad.pt", tmp_path / "data" / "0.pt")}
    for command, target, input_ in ((["check", "cross-entropy", "bad.pt"], "bad.pt", "bad.pt"),
                                    (["scan", "cross-entropy", "data"], "data/0.pt", "data")):
        done = tritoncheck(*command, "--output", target, cwd=tmp_path)
        assert done.returncode == 2
        assert done.stderr.decode().strip() == (f"tritoncheck: error: --output {target} would overwrite the input "
                                                f"{input_}; write the report elsewhere")
    assert {p: p.read_bytes() for p in before} == before


@pytest.mark.parametrize("command, bad, code", [("check", True, 1), ("check", False, 0), ("scan", True, 1)])
def test_a_closed_stdout_keeps_the_verdict(tmp_path, command, bad, code):
    """`tritoncheck check BAD | head -1` under `set -o pipefail` must fail the CI step."""
    torch.save(ce_batch(bad=bad), tmp_path / "b.pt")
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line is written
    try:
        done = tritoncheck(command, "cross-entropy", "b.pt", "--backend", "torch", cwd=tmp_path, stdout=write)
    finally:
        os.close(write)
    assert done.returncode == code
    assert done.stderr == b""

