"""Notebook cells run as a Jupyter kernel runs them, and their outputs laid out as JupyterLab lays them out:
for tests of what a notebook user sees (tests/test_report_browser.py screenshots the page in Chromium;
tests/test_scan_session.py reads it). No Jupyter package is needed: the kernel's part is small, and
stood in for here (IPython's `get_ipython().kernel` set, `IPython.display.display`)."""

from __future__ import annotations

import ast
import contextlib
import html
import io
import sys
import traceback
import types

# What JupyterLab's stylesheets (rendermime/style/base.css, outputarea) do to an output's table and to
# an error output: striped and hover-coloured rows, right-aligned cells, a pink ground for stderr.
JUPYTERLAB_CSS = """
body { font-family: sans-serif; font-size: 13px; margin: 8px; }
.jp-InputArea pre { background: #f7f7f7; border: 1px solid #e0e0e0; padding: 4px; }
.jp-RenderedHTMLCommon table { border-collapse: collapse; border-spacing: 0; border: none; color: rgba(0,0,0,.87);
  table-layout: fixed; margin-left: auto; margin-right: auto; }
.jp-RenderedHTMLCommon td, .jp-RenderedHTMLCommon th, .jp-RenderedHTMLCommon tr { vertical-align: middle;
  padding: 0.5em; line-height: normal; white-space: normal; max-width: none; border: none; }
.jp-RenderedHTMLCommon tbody tr:nth-child(odd) { background: #fff; }
.jp-RenderedHTMLCommon tbody tr:nth-child(even) { background: #f5f5f5; }
.jp-RenderedHTMLCommon td, th { text-align: right; }
.jp-RenderedText[data-mime-type='application/vnd.jupyter.stderr'] { background: #fdd; }
.jp-RenderedText pre { margin: 0; padding: 2px; font-family: monospace; }
"""


def run_notebook(cells: list[str], monkeypatch, **variables) -> list[tuple[str, list[str]]]:
    """Each cell's source and its outputs as HTML, run as a Jupyter kernel (ipykernel + IPython) runs
    them: `get_ipython().kernel` is set, and its `execution_count` counts the cells run; `display(obj)`
    shows `obj._repr_html_()`; a cell's last expression is displayed; a raised exception shows
    `exc._render_traceback_()` where it has one, else the traceback, as an error output, and is then
    rendered once more to be stored in the history, as IPython 9 does (`_format_exception_for_storage`).
    `variables` are defined before the first cell runs."""
    outputs: list[str] = []

    def display(obj):
        outputs.append(f"<div class='jp-RenderedHTMLCommon' data-mime-type='text/html'>{obj._repr_html_()}</div>"
                       if hasattr(obj, "_repr_html_") else text_output(repr(obj), "text/plain"))

    ipython = types.ModuleType("IPython")
    shell = types.SimpleNamespace(kernel=object(), execution_count=0)
    ipython.get_ipython = lambda: shell
    ipython.display = types.ModuleType("IPython.display")
    ipython.display.display = display
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    monkeypatch.setitem(sys.modules, "IPython.display", ipython.display)
    namespace: dict = {"__name__": "__main__", **variables}
    shown = []
    for n, source in enumerate(cells):
        outputs = []
        shell.execution_count = n + 1
        tree = ast.parse(source)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        printed, raised, value = io.StringIO(), None, None
        try:
            with contextlib.redirect_stdout(printed):
                exec(compile(tree, f"<cell {n}>", "exec"), namespace)
                if last is not None:
                    value = eval(compile(ast.Expression(last.value), f"<cell {n}>", "eval"), namespace)
        except Exception as exc:  # noqa: BLE001 - a kernel shows whatever a cell raises
            raised = exc
        if printed.getvalue():  # what a cell prints is a stream output
            outputs.append(text_output(printed.getvalue(), "application/vnd.jupyter.stdout"))
        if raised is not None:
            render = getattr(raised, "_render_traceback_", None)
            lines = render() if render is not None else traceback.format_exception(raised)
            outputs.append(text_output("\n".join(line.rstrip("\n") for line in lines),
                                       "application/vnd.jupyter.stderr"))
            if render is not None:
                render()  # for the history: what it shows goes to the same cell
        elif value is not None:
            display(value)
        shown.append((source, outputs))
    return shown


def text_output(text: str, mime: str) -> str:
    return f"<div class='jp-RenderedText' data-mime-type='{mime}'><pre>{html.escape(text)}</pre></div>"


def notebook_page(cells: list[tuple[str, list[str]]]) -> str:
    body = "".join(f"<div class='jp-Cell'><div class='jp-InputArea'><pre>[{n + 1}]: {html.escape(src)}</pre></div>"
                   f"<div class='jp-OutputArea'>{''.join(outs)}</div></div>" for n, (src, outs) in enumerate(cells))
    return f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{JUPYTERLAB_CSS}</style></head><body>{body}</body></html>"


