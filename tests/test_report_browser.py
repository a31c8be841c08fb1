"""A raised BatchValidationError in a notebook, as a browser shows it (issue 21): a notebook's cells run
the way a Jupyter kernel runs them, its outputs are laid out as JupyterLab lays them out (with the
JupyterLab table style that could fight ours), and headless Chromium (Debian's package) takes a screenshot.
The pixels must show the report's table: its error row on a red ground and its warning row on an amber
one, not a plain traceback. CI installs Chromium (.ci/run); elsewhere the test skips with that reason."""

from __future__ import annotations

import html
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from notebook_cells import notebook_page, run_notebook

RED = (0xFD, 0xE2, 0xE1)  # the error row's ground (tritoncheck.report: _HTML_ERROR)
AMBER = (0xFF, 0xF3, 0xCD)  # the warning row's ground (_HTML_WARNING)

NOTEBOOK = [
    """import torch
import tritoncheck as tc
spec = tc.BatchSpec.model_validate({"name": "toy", "fields": {
    "ids": {"dtype": "int64", "shape": ["B"], "min": 0, "max": 9},
    "mask": {"dtype": "int64", "shape": ["B"], "values": [0, 1], "severity": {"not_in_set": "warning"}}}})
dataset = [{"ids": torch.tensor(3), "mask": torch.tensor(1)} for _ in range(50)]
dataset[17] = {"ids": torch.tensor(12), "mask": torch.tensor(2)}  # an error and a warning
loader = torch.utils.data.DataLoader(tc.IndexedDataset(dataset), batch_size=3, sampler=[17, 40, 41],
                                     collate_fn=tc.ValidatingCollate(spec, backend="torch"))""",
    "batch = next(iter(loader))",
]


def screenshot(page: Path, png: Path, browser: str) -> None:
    """Headless Chromium's screenshot of a local page (no sandbox and no /dev/shm: CI runs as root in a container)."""
    profile = png.parent / "chromium-profile"
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
           "--force-color-profile=srgb", "--force-device-scale-factor=1", f"--user-data-dir={profile}",
           "--window-size=1200,900", f"--screenshot={png}", page.as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and png.exists(), done.stderr[-2000:]


def png_pixels(data: bytes) -> list[tuple[int, int, int]]:
    """The RGB pixels of an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes), decoded with zlib."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        chunk = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    step = 3 if color == 2 else 4
    raw, stride = zlib.decompress(idat), width * step
    pixels, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):  # undo the row's filter (PNG spec, section 9)
            left = line[i - step] if i >= step else 0
            up, corner = previous[i], previous[i - step] if i >= step else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        pixels += [tuple(line[x:x + 3]) for x in range(0, stride, step)]
        previous = line
    return pixels


def test_png_decoder_reads_every_filter():
    """The decoder itself, on a 2x2 RGB image whose rows use filters Sub and Paeth."""
    rows = b"\x01" + bytes([10, 20, 30, 5, 5, 5]) + b"\x04" + bytes([1, 2, 3, 4, 5, 6])
    ihdr = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    chunk = lambda kind, body: struct.pack(">I", len(body)) + kind + body + b"\0\0\0\0"  # noqa: E731
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    assert png_pixels(png) == [(10, 20, 30), (15, 25, 35), (11, 22, 33), (19, 30, 41)]


def test_a_raised_error_in_a_notebook_shows_red_errors_and_amber_warnings(tmp_path, monkeypatch):
    browser = shutil.which("chromium")
    if browser is None:
        pytest.skip("needs Debian's headless browser: apt-get install chromium")
    cells = run_notebook(NOTEBOOK, monkeypatch)
    (_, setup), (_, raised) = cells
    assert setup == []
    assert len(raised) == 2 and "".join(raised).count("<table>") == 1  # the table once, then the summary line
    text = html.unescape("".join(raised))
    assert "Traceback (most recent call last)" not in text
    assert "BatchValidationError: 1 error, 1 warning for toy (B=3 (from ids)) (the table above)" in text
    assert "0 (dataset index 17)" in text
    page, png = tmp_path / "notebook.html", tmp_path / "notebook.png"
    page.write_text(notebook_page(cells), encoding="utf-8")
    screenshot(page, png, browser)
    pixels = png_pixels(png.read_bytes())
    red, amber = pixels.count(RED), pixels.count(AMBER)
    # each row of the table is hundreds of pixels wide and over 15 high
    assert red > 3000 and amber > 3000, (red, amber)
    first = {colour: pixels.index(colour) for colour in (RED, AMBER)}
    assert first[RED] < first[AMBER]  # the error row comes first, as in the report
