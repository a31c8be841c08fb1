"""`tritoncheck check` and `tritoncheck specs`: check a saved batch, list and show built-in specs.

Every user mistake (a missing file, an unknown spec, a missing parameter) ends in one message on
stderr and exit code 2, never a traceback; a batch that breaks its contract ends in exit code 1.
Spec and batch text is printed literally: `rich` gets `Text`, never markup, and control characters
are escaped (`printable`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import sys
import tempfile
from collections import UserDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tritoncheck.backends import BACKENDS
from tritoncheck.report import fitted_table, printable, printable_lines

EXIT_OK, EXIT_VIOLATIONS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
FORMATS = ("text", "table", "json")


class UsageError(Exception):
    """A problem with the command line or the files it names (exit code 2)."""


def one_line(exc: BaseException) -> str:
    """An exception's first line (at most 300 characters), for a report or an error of one line."""
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="check a saved batch against a spec",
        description="Check a saved batch (torch.save dict, .safetensors or .npz) against a spec. "
        "Exit code 0: valid; 1: violations; 2: usage or spec error; 3: internal error.",
    )
    p.add_argument("spec", help="a built-in spec name (see `tritoncheck specs`) or a YAML spec file")
    p.add_argument("batch", help="the batch: a torch.save'd dict of tensors (.pt), .safetensors or .npz")
    add_param_args(p)
    add_output_args(p)
    p.add_argument("--backend", choices=list(BACKENDS), default="auto", help="default: auto (C on CPU, Triton on CUDA)")
    p.set_defaults(run=guarded(run_check))

    s = sub.add_parser("specs", help="list built-in specs, or show one", description="List built-in specs, or show one.")
    s.add_argument("name", nargs="?", help="a built-in spec name or a YAML file: show its YAML and its plan")
    add_param_args(s)
    s.set_defaults(run=guarded(run_specs))


def add_param_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE",
                   help="a spec parameter, e.g. --param vocab_size=50265 (repeatable; int/float/bool/str)")
    p.add_argument("--config", "-c", metavar="FILE",
                   help="a JSON or YAML file of parameters, e.g. a Hugging Face config.json (extra keys are ignored)")


def add_output_args(p: argparse.ArgumentParser) -> None:
    """One convention for every command that reports: --format picks what stdout shows, --output writes JSON."""
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="text, table or json on stdout (default: table on a terminal, text when piped)")
    p.add_argument("--json", action="store_const", const="json", dest="format", help="the same as --format json")
    p.add_argument("--output", "-o", metavar="FILE", help="also write the full report as JSON to FILE")
    p.add_argument("--strict", action="store_true",
                   help="count warnings (data bugs the model runs through) as errors: exit code 1 for them too")


def output_format(args: argparse.Namespace) -> str:
    return args.format or ("table" if sys.stdout.isatty() else "text")


def write_json(path: str, text: str | Iterable[str]) -> None:
    """Write `text` (or its parts, in order: a long report need not be one string) to a temporary file beside
    `path`, then rename it over `path`: a failed write (a full disk) leaves the previous report whole, never half
    a file."""
    target = Path(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.writelines([text] if isinstance(text, str) else text)
            f.write("\n")
        mask = os.umask(0)  # mkstemp makes the file private; a report gets the usual permissions
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)
        os.replace(tmp, target)
    except OSError as exc:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


def refuse_to_overwrite_inputs(args: argparse.Namespace) -> None:
    """`--output` naming a file the command reads (the batch, the data, the spec, the config) would
    destroy it: a usage error before any work is done. A data directory's files count too. So is
    an empty name, which would write nothing without a word."""
    out = getattr(args, "output", None)
    if out == "":
        raise UsageError("--output needs a file name, got ''")
    if not out:
        return
    target = Path(out).resolve()
    if not target.exists():
        return
    for name in ("batch", "data", "spec", "config"):
        given = getattr(args, name, None)
        if not given or not Path(given).exists():
            continue  # a built-in spec name, or a missing file that its command reports
        source = Path(given).resolve()
        if os.path.samefile(target, source) or (source.is_dir() and source in target.parents):
            raise UsageError(f"--output {out} would overwrite the input {given}; write the report elsewhere")


def guarded(fn):
    """Turn the errors a user can cause into one line on stderr and exit code 2."""
    from tritoncheck.spec.schema import SpecError

    def run(args: argparse.Namespace) -> int:
        try:
            refuse_to_overwrite_inputs(args)
            return fn(args)
        except (UsageError, SpecError) as exc:
            say(f"tritoncheck: error: {exc}", file=sys.stderr)
            return EXIT_USAGE

    return run


_STDOUT = object()


def say(text: str, file: Any = _STDOUT) -> None:
    """Print `text` with its line breaks kept and every other control character escaped. A closed
    stream (`2>&-`: sys.stderr is None) takes nothing; print would send it to stdout instead."""
    if file is _STDOUT:
        file = sys.stdout
    if file is not None:
        print(printable_lines(str(text)), file=file)


def parse_value(text: str) -> Any:
    """`7` -> 7, `0.5` -> 0.5, `true` -> True, anything else stays a string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def parse_params(items: list[str]) -> dict[str, Any]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--param takes NAME=VALUE, got {item!r}")
        out[name.strip()] = parse_value(value)
    return out


def read_config(path: str | None) -> dict[str, Any] | None:
    if path is None:
        return None
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"config file not found: {path}")
    text = p.read_text(encoding="utf-8", errors="replace")
    try:
        if p.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # json/yaml each raise their own error types
        raise UsageError(f"{path}: cannot parse: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a config file must hold a mapping of parameter names to values")
    return data


# What a collator returns, saved as is with torch.save: mappings whose pickled state is a dict of
# tensors. They are read as a plain stand-in class, so no code of theirs (nor transformers) runs.
SAVED_MAPPINGS = ("collections.UserDict", "transformers.tokenization_utils_base.BatchEncoding",
                  "transformers.feature_extraction_utils.BatchFeature")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class _SavedMapping(UserDict):
    """Takes the place of every class in SAVED_MAPPINGS while a batch file is unpickled."""


def load_batch(path: str) -> Any:
    """A batch from a file: safetensors by suffix, numpy .npz, else torch.load(weights_only=True).

    A saved `BatchEncoding`/`BatchFeature`/`UserDict` comes back as a dict; weights_only stays on.
    """
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"batch file not found: {path}")
    try:
        if p.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(p))
        if p.suffix == ".npz":
            import numpy as np

            with np.load(p, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
        import torch

        allowed = getattr(torch.serialization, "safe_globals", None)  # torch >= 2.5
        with allowed([(_SavedMapping, name) for name in SAVED_MAPPINGS]) if allowed else contextlib.nullcontext():
            return _plain(torch.load(p, map_location="cpu", weights_only=True))
    except ImportError as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    except Exception as exc:  # a corrupt or foreign file: any loader error is a usage error
        raise UsageError(f"cannot read batch file {path}: {_load_error(exc)}") from None


def _plain(obj: Any) -> Any:
    """A saved mapping as a dict (in a list, tuple or dict too); anything else as it is."""
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(x) for x in obj)
    if isinstance(obj, _SavedMapping):
        data = obj.__dict__.get("data")
        if not isinstance(data, dict):
            raise ValueError(f"a saved mapping whose data is a {type(data).__name__}, not a dict")
        obj = data
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def _load_error(exc: Exception) -> str:
    """torch's refusal in one line: the class it would not unpickle and what to save instead."""
    text = _ANSI.sub("", str(exc))
    refused = re.search(r"Unsupported global: GLOBAL (\S+)", text)
    if refused:
        return (f"it holds a {refused.group(1)}, which tritoncheck does not unpickle (torch.load with "
                "weights_only=True runs no code from a file); save a dict of tensors: torch.save(dict(batch), path)")
    if isinstance(exc, EOFError):
        return "the file is empty or cut short"
    reason = re.search(r"WeightsUnpickler error:\s*(\S.*)", text)  # torch puts its reason on a line of its own
    line = reason.group(1) if reason else (text.strip().splitlines() or [type(exc).__name__])[0]
    line = re.sub(r"(?<=\.)\s.*", "", line.strip())[:300]  # its first sentence: the advice that follows is not ours
    if line.startswith("Unsupported operand"):  # the first byte is no pickle opcode: a text file, a CSV, ...
        return f"not a torch.save file, .safetensors or .npz (torch: {line})"
    return line


def spec_from_args(args: argparse.Namespace, fill: bool = True):
    """The spec named on the command line, its parameters from --param and --config.

    Errors speak the command line: a missing parameter names --param (and says which config
    file lacked it), an unknown one or a misspelled spec name gets the closest valid name.
    """
    from tritoncheck.spec.schema import builtin_spec_names, closest
    from tritoncheck.spec.extends import read_spec

    name = args.spec if hasattr(args, "spec") else args.name
    params = parse_params(args.param)
    config = read_config(args.config)
    if Path(name).suffix == "" and not Path(name).exists() and name not in builtin_spec_names():
        raise UsageError(f"no built-in spec named {name!r}{closest(name, builtin_spec_names())}; "
                         "`tritoncheck specs` lists them, or give a YAML file")
    spec = read_spec(name)
    unknown = sorted(set(params) - set(spec.params))
    if unknown:
        hint = closest(unknown[0], spec.params)
        raise UsageError(f"{name}: unknown parameter(s) {', '.join(unknown)}{hint}; "
                         f"this spec takes {', '.join(spec.params) or 'none'}")
    spec = spec.with_params(config, **params) if (params or config) else spec
    for key, value in spec.params.items():  # 1e400 parses as inf: never a vocabulary size
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"parameter {key} must be a finite number, got {value} (from --param or --config)")
    missing = spec.missing_params()
    if fill and missing:
        where = f"not in {args.config}: " if args.config else ""
        raise UsageError(f"{name}: missing parameter(s) {', '.join(missing)}; {where}give "
                         + " ".join(f"--param {m}=..." for m in missing)
                         + ("" if args.config else " or --config config.json"))
    if fill:
        from tritoncheck.plan.load import load_spec

        spec = load_spec(name, config=config, **params)  # compiles the plan: a bad size is a SpecError now
    return spec


def run_check(args: argparse.Namespace) -> int:
    from tritoncheck.api import check
    from tritoncheck.plan.lower import UncheckableBatchError

    spec = spec_from_args(args)
    batch = load_batch(args.batch)
    try:
        report = check(batch, spec, backend=args.backend, strict=args.strict)
    except UncheckableBatchError as exc:  # (every backend refuses such a batch alike, the reference too)
        raise UsageError(str(exc)) from None
    except (ValueError, ImportError, RuntimeError) as exc:
        if args.backend == "torch":
            raise  # the reference backend reports bad data instead of raising: anything else is a bug
        raise UsageError(f"backend {args.backend!r} cannot check this batch: {exc}") from None
    if args.output:
        write_json(args.output, report.to_json(indent=2))
    show_report(report, output_format(args))
    return EXIT_OK if report.ok else EXIT_VIOLATIONS


def show_report(report: Any, fmt: str) -> None:
    """A report on stdout: JSON (exact: JSON escapes control characters itself), text, or a table at the width."""
    if fmt == "json":
        print(report.to_json(indent=2))
    elif fmt == "text":
        say(str(report))
    else:
        console().print(report)


MIN_WIDTH = 40  # below it rich prints nothing (width 0) or splits every word; reports then wrap past it


def console():
    """A rich console for `Text` and reports: the terminal's width, or $COLUMNS (80 if unset) when piped;
    at least MIN_WIDTH."""
    from rich.console import Console

    out = Console(markup=False, emoji=False, highlight=False)
    out.width = max(out.width, MIN_WIDTH)
    return out


def run_specs(args: argparse.Namespace) -> int:
    from tritoncheck.spec.schema import builtin_spec_names
    from tritoncheck.spec.extends import read_spec

    if args.name is None:
        from rich.text import Text

        rows = []
        for name in builtin_spec_names():
            spec = read_spec(name)
            params = ", ".join(k if v is None else f"{k}={v}" for k, v in spec.params.items())
            rows.append((name, " ".join(spec.description.split()), params or "-"))
        out = console()
        table = fitted_table("built-in specs", ("name", "description", "parameters"),
                             [tuple(Text(printable(c)) for c in row) for row in rows], out.width)
        if table is not None and sys.stdout.isatty():
            out.print(table)
        else:  # piped, or too narrow for a table: one paragraph per spec
            for name, description, params in rows:
                say(f"{name}\n    {description}\n    parameters: {params}")
        return EXIT_OK
    spec = spec_from_args(args, fill=False)
    missing = spec.missing_params()
    if missing:
        plan = f"(pass {' '.join(f'--param {m}=...' for m in missing)} or --config FILE to see the compiled plan)"
    else:
        from tritoncheck.plan.lower import compile_plan

        plan = compile_plan(spec).pretty()  # before any output: a spec that does not compile prints no YAML
    say(spec.to_yaml().rstrip())
    print()
    say(plan)
    return EXIT_OK
