"""The `tritoncheck` command: check saved batches, list built-in specs, and more.

Exit codes: 0 valid, 1 violations found, 2 usage or spec errors.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import import_module

# One module per subcommand; each has add_parser(subparsers) that sets the `run` default.
COMMAND_MODULES = ["tritoncheck._cli_commands", "tritoncheck.bench", "tritoncheck._scan", "tritoncheck._infer"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tritoncheck", description="Check training batches against a contract.")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        import_module(module).add_parser(sub)  # each module adds its subcommand and sets `run`
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
