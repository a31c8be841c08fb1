"""A raised BatchValidationError in IPython and Jupyter (issue 21): IPython shows a raised exception through
its `_render_traceback_`, so the report's table is what the user sees, not a traceback; in a notebook the
HTML table is displayed, with the dataset indices, and warnings look unlike errors."""

from __future__ import annotations

import re
import sys
import types

import pytest
import torch

import tritoncheck as tc

SPEC = {"name": "toy", "fields": {
    "ids": {"dtype": "int64", "shape": ["B"], "min": 0, "max": 9},
    "mask": {"dtype": "int64", "shape": ["B"], "values": [0, 1], "severity": {"not_in_set": "warning"}}}}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def raised() -> tc.BatchValidationError:
    """The error a DataLoader raises for a batch of dataset rows 17, 40 and 41, two of them bad."""
    dataset = [{"ids": torch.tensor(3), "mask": torch.tensor(1)} for _ in range(50)]
    dataset[17] = {"ids": torch.tensor(12), "mask": torch.tensor(2)}  # an error and a warning
    dataset[41] = {"ids": torch.tensor(-1), "mask": torch.tensor(1)}
    collate = tc.ValidatingCollate(tc.BatchSpec.model_validate(SPEC), backend="torch")
    loader = torch.utils.data.DataLoader(tc.IndexedDataset(dataset), batch_size=3, sampler=[17, 40, 41],
                                         collate_fn=collate)
    with pytest.raises(tc.BatchValidationError) as info:
        next(iter(loader))
    return info.value


class Kernel:
    """Stands in for IPython in a Jupyter kernel: `get_ipython().kernel` is set, `display` shows HTML."""

    def __init__(self, monkeypatch):
        self.shown: list[str] = []
        ipython = types.ModuleType("IPython")
        display = types.ModuleType("IPython.display")
        ipython.get_ipython = lambda: types.SimpleNamespace(kernel=object())
        display.display = lambda obj: self.shown.append(obj._repr_html_())
        ipython.display = display
        monkeypatch.setitem(sys.modules, "IPython", ipython)
        monkeypatch.setitem(sys.modules, "IPython.display", display)


def test_in_a_terminal_the_traceback_is_the_reports_table(monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    monkeypatch.setenv("COLUMNS", "120")
    lines = [ANSI.sub("", line) for line in raised()._render_traceback_()]
    text = "\n".join(lines)
    assert lines[0] == "BatchValidationError:"
    assert "┃ location" in text and "above_max" in text and "below_min" in text and "(warning)" in text
    assert "dataset indices of the bad samples: 17 (sample 0), 41 (sample 2)" in text
    assert re.search(r'  File ".*test_report_notebook.py", line \d+, in raised', text)  # where it was raised


def test_in_a_notebook_the_html_table_is_displayed_with_dataset_indices(monkeypatch):
    kernel = Kernel(monkeypatch)
    lines = raised()._render_traceback_()
    assert lines[0] == "BatchValidationError: 2 errors, 1 warning for toy (B=3 (from ids)) (the table above)"
    (html,) = kernel.shown
    assert "<table>" in html
    assert "<th style='text-align:left'>severity</th>" in html  # JupyterLab right-aligns th; ours line up with the cells
    rows = {m.group(1): m.group(0) for m in re.finditer(r"<tr class='tritoncheck-(\w+)'[^>]*>.*?</tr>", html)}
    assert set(rows) == {"error", "warning"}
    assert "#fde2e1" in rows["error"] and "#fff3cd" in rows["warning"]  # red and amber grounds
    assert "<b>warning</b>" in rows["warning"] and "<b>error</b>" in rows["error"]
    assert "0 (dataset index 17)" in html and "2 (dataset index 41)" in html
    assert "<p>dataset indices of the bad samples: 17 (sample 0), 41 (sample 2)</p>" in html


def test_the_table_is_shown_once_per_cell_run_though_ipython_renders_the_error_twice(monkeypatch):
    """IPython 9 calls _render_traceback_ to show an error and again to store it in the history
    (_format_exception_for_storage): a real Jupyter kernel showed the table twice. Once per cell run;
    the same error raised again in a later cell shows it again."""
    kernel = Kernel(monkeypatch)
    shell = types.SimpleNamespace(kernel=object(), execution_count=7)
    sys.modules["IPython"].get_ipython = lambda: shell
    error = raised()
    assert error._render_traceback_() == error._render_traceback_()
    assert len(kernel.shown) == 1
    shell.execution_count = 8
    error._render_traceback_()
    assert len(kernel.shown) == 2


def test_an_error_rebuilt_from_text_still_renders():
    bare = tc.BatchValidationError("Caught BatchValidationError in DataLoader worker process 0\n\x1b[31mred")
    assert "\\x1b[31mred" in "\n".join(bare._render_traceback_())
    assert bare._repr_html_().startswith("<pre>Caught BatchValidationError")
