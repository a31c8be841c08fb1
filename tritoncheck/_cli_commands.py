"""`tritoncheck check` and `tritoncheck specs`: check a saved batch, list and show built-in specs.

Every user mistake (a missing file, an unknown spec, a missing parameter) ends in one message on
stderr and exit code 2, never a traceback; a batch that breaks its contract ends in exit code 1.
Spec and batch text is printed literally: `rich` gets `Text`, never markup, and control characters
are escaped (`printable`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from ._api import BACKENDS
from ._report import printable

EXIT_OK, EXIT_VIOLATIONS, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


class UsageError(Exception):
    """A problem with the command line or the files it names (exit code 2)."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="check a saved batch against a spec",
        description="Check a saved batch (torch.save dict, .safetensors or .npz) against a spec. "
        "Exit code 0: valid; 1: violations; 2: usage or spec error; 3: internal error.",
    )
    p.add_argument("spec", help="a built-in spec name (see `tritoncheck specs`) or a YAML spec file")
    p.add_argument("batch", help="the batch: a torch.save'd dict of tensors (.pt), .safetensors or .npz")
    _add_param_args(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--backend", choices=list(BACKENDS), default="auto", help="default: auto (C on CPU, Triton on CUDA)")
    p.set_defaults(run=_guarded(run_check))

    s = sub.add_parser("specs", help="list built-in specs, or show one", description="List built-in specs, or show one.")
    s.add_argument("name", nargs="?", help="a built-in spec name or a YAML file: show its YAML and its plan")
    _add_param_args(s)
    s.set_defaults(run=_guarded(run_specs))


def _add_param_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--param", "-p", action="append", default=[], metavar="NAME=VALUE",
                   help="a spec parameter, e.g. --param vocab_size=50265 (repeatable; int/float/bool/str)")
    p.add_argument("--config", "-c", metavar="FILE",
                   help="a JSON or YAML file of parameters, e.g. a Hugging Face config.json (extra keys are ignored)")


def _guarded(fn):
    """Turn the errors a user can cause into one line on stderr and exit code 2."""
    from ._spec import SpecError

    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except (UsageError, SpecError) as exc:
            say(f"tritoncheck: error: {exc}", file=sys.stderr)
            return EXIT_USAGE

    return run


def say(text: str, file=None) -> None:
    """Print `text` with its line breaks kept and every other control character escaped."""
    print("\n".join(printable(line) for line in str(text).split("\n")), file=file or sys.stdout)


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


def load_batch(path: str) -> Any:
    """A batch from a file: safetensors by suffix, numpy .npz, else torch.load(weights_only=True)."""
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

        return torch.load(p, map_location="cpu", weights_only=True)
    except ImportError as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    except Exception as exc:  # a corrupt or foreign file: any loader error is a usage error
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"cannot read batch file {path}: {first[:300]}") from None


def _load_spec(args: argparse.Namespace, fill: bool = True):
    from ._spec import load_spec, read_spec

    params = parse_params(args.param)
    config = read_config(args.config)
    if fill:
        spec = load_spec(args.spec if hasattr(args, "spec") else args.name, config=config, **params)
    else:
        spec = read_spec(args.name)
        spec = spec.with_params(config, **params) if (params or config) else spec
    for name, value in spec.params.items():  # 1e400 parses as inf: never a vocabulary size
        if isinstance(value, float) and not math.isfinite(value):
            raise UsageError(f"parameter {name} must be a finite number, got {value} (from --param or --config)")
    return spec


def run_check(args: argparse.Namespace) -> int:
    from ._api import check

    spec = _load_spec(args)
    batch = load_batch(args.batch)
    try:
        report = check(batch, spec, backend=args.backend)
    except (ValueError, ImportError, RuntimeError) as exc:
        if args.backend == "torch":
            raise  # the reference backend reports bad data instead of raising: anything else is a bug
        raise UsageError(f"backend {args.backend!r} cannot check this batch: {exc}") from None
    if args.json:
        print(report.to_json(indent=2))  # exact: JSON escapes control characters itself
    else:
        from rich.text import Text

        console = _console()
        if report.ok:
            console.print(Text(str(report), style="green"))
        else:
            console.print(report.table())
            if report.skipped:
                console.print(Text(f"not checked because of the above: {printable('; '.join(report.skipped))}"))
    return EXIT_OK if report.ok else EXIT_VIOLATIONS


def _console():
    """A rich console for `Text` and tables; piped output is not cut to 80 columns, so it stays greppable."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 200, markup=False, emoji=False, highlight=False)


def run_specs(args: argparse.Namespace) -> int:
    from ._spec import builtin_spec_names, read_spec

    if args.name is None:
        from rich.table import Table
        from rich.text import Text

        table = Table(title="built-in specs", title_justify="left")
        table.add_column("name", no_wrap=True)
        table.add_column("description", overflow="fold")
        table.add_column("parameters", overflow="fold")
        for name in builtin_spec_names():
            spec = read_spec(name)
            params = ", ".join(k if v is None else f"{k}={v}" for k, v in spec.params.items())
            table.add_row(*(Text(printable(c)) for c in (name, " ".join(spec.description.split()), params or "-")))
        _console().print(table)
        return EXIT_OK
    spec = _load_spec(args, fill=False)
    say(spec.to_yaml().rstrip())
    print()
    missing = spec.missing_params()
    if missing:
        say(f"(pass {' '.join(f'--param {m}=...' for m in missing)} or --config FILE to see the compiled plan)")
    else:
        say(spec.pretty())
    return EXIT_OK
