"""The `tritoncheck` command: check saved batches, list built-in specs, and more.

Exit codes, the same for every subcommand:
  0  valid (or nothing to report)
  1  violations found (`scan`: bad samples or unreadable files)
  2  usage or spec error, said in one line on stderr (also: stdout could not be written, e.g. a full disk)
  3  internal error: a bug in tritoncheck, please report it; `--debug` or TRITONCHECK_DEBUG=1
     prints the traceback (`scan` also exits 3 when a batch could not be checked, after
     scanning the rest)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from collections.abc import Sequence
from importlib import import_module
from typing import Any

from tritoncheck import __version__

# Each subcommand: the module whose add_parser(subparsers) adds it and sets its `run` default, and its help
# line. A command imports only its own module, and `tritoncheck --help` lists the others from this table:
# `scan` and `infer` import torch (over a second of CPU), `check` only when it runs. `bench` is not among
# them: its harness is imported only when `tritoncheck bench` runs (see _add_bench).
COMMANDS = {
    "check": ("tritoncheck.cli.commands", "check a saved batch against a spec"),
    "specs": ("tritoncheck.cli.commands", "list built-in specs, or show one"),
    "scan": ("tritoncheck.scanning.engine", "check every sample of a dataset offline"),
    "infer": ("tritoncheck.cli.infer", "draft a spec from example batches"),
}
EPILOG = """exit codes:
  0  valid (or nothing to report)
  1  violations found (scan: bad samples or unreadable files)
  2  usage or spec error
  3  internal error: please report it (--debug or TRITONCHECK_DEBUG=1 shows the traceback)"""


def main(argv: Sequence[str] | None = None) -> int:
    if list(sys.argv[1:] if argv is None else argv) == ["--version"]:
        print(f"tritoncheck {__version__}")
        return 0
    from tritoncheck.cli.commands import EXIT_USAGE, say

    pipe = sys.stdout = _ClosablePipe(sys.stdout)
    try:
        with _ascii_under_c_locale(sys.stderr):
            code = _main(argv)
    finally:
        sys.stdout = pipe.close()
    if pipe.failed is not None:  # a full disk, not a reader gone: the output was lost, so never 0
        say(f"tritoncheck: error: cannot write to stdout: {pipe.failed.strerror or pipe.failed}", file=sys.stderr)
        return code or EXIT_USAGE
    return code


def _main(argv: Sequence[str] | None) -> int:
    from tritoncheck.cli.commands import EXIT_INTERNAL, EXIT_VIOLATIONS, say
    from tritoncheck.report import printable

    parser = argparse.ArgumentParser(prog="tritoncheck", description="Check training batches against a contract.",
                                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="print the traceback of an internal error")
    parser.add_argument("--version", action="version", version=f"tritoncheck {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    named = _command_named(sys.argv[1:] if argv is None else argv)
    if named in COMMANDS:
        import_module(COMMANDS[named][0]).add_parser(sub)  # adds the command (and any other of its module)
    for name, (_, text) in COMMANDS.items():
        if name not in sub.choices:
            sub.add_parser(name, help=text)  # listed by --help; not the command named, so never run
    _add_bench(sub)
    for command in sub.choices.values():  # `tritoncheck check --debug ...` works too
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    try:
        args, rest = parser.parse_known_args(argv)
        if rest and args.command != "bench":
            parser.error(f"unrecognized arguments: {printable(' '.join(rest))}")
        args.rest = rest
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    try:
        return int(args.run(args))
    except BrokenPipeError:  # a write past _ClosablePipe (none is known): the verdict was not reached
        return EXIT_VIOLATIONS  # never 0 for a batch that was not seen through: a CI step must not pass
    except Exception as exc:  # every user mistake is handled below this: what is left is a bug
        if args.debug or os.environ.get("TRITONCHECK_DEBUG", "") not in ("", "0"):
            say(traceback.format_exc().rstrip(), file=sys.stderr)
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        say(f"tritoncheck: internal error: please report: {type(exc).__name__}: {first}", file=sys.stderr)
        return EXIT_INTERNAL


def _command_named(argv: Sequence[str]) -> str | None:
    """The subcommand on a command line: its first argument that is not an option (no option before the
    subcommand takes a value)."""
    return next((a for a in argv if not a.startswith("-")), None)


class _ClosablePipe:
    """stdout that a reader may close (`tritoncheck check BAD | head -1`): the rest of the output is
    dropped and the command still exits with its verdict (CI under `pipefail` sees exit code 1).

    Text the stream cannot encode (a non-UTF-8 file name under a UTF-8 locale, anything past ASCII
    under the C locale) is written as backslash escapes, never raw bytes or a crash. A stdout closed
    from the start (`>&-`, where sys.stdout is None) takes nothing; any other failed write (a full
    disk) drops the rest too, and is kept in `failed` for `main` to report.
    """

    def __init__(self, stream: Any):
        self._given = stream
        self._stream = stream if stream is not None else open(os.devnull, "w")  # noqa: SIM115
        self.failed: OSError | None = None
        self._errors = getattr(stream, "errors", None)
        self._encoding = getattr(stream, "encoding", None)
        # Under the C locale Python writes UTF-8 anyway (PEP 540), whose bytes 0x80-0x9f an 8-bit
        # terminal obeys as C1 controls: ASCII there (rich then draws its tables in ASCII too).
        ascii_only = {"encoding": "ascii"} if _c_locale() else {}
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.reconfigure(errors="backslashreplace", **ascii_only)

    def close(self) -> Any:
        """Flush, and give back the stream it was given as it was (for callers of `main` in-process)."""
        self.flush()
        if self._stream is not self._given:  # the /dev/null this pipe opened in its place
            self._stream.close()
        with contextlib.suppress(AttributeError, ValueError, OSError, TypeError, LookupError):
            self._given.reconfigure(errors=self._errors, encoding=self._encoding)
        return self._given

    def write(self, text: str) -> int:
        with self._closed_pipe_dropped():
            self._stream.write(text)
        return len(text)

    def flush(self) -> None:
        with self._closed_pipe_dropped():
            self._stream.flush()

    @contextlib.contextmanager
    def _closed_pipe_dropped(self):
        try:
            yield
        except OSError as exc:
            if not isinstance(exc, BrokenPipeError) and self.failed is None:
                self.failed = exc
            # The file descriptor now points to /dev/null, so the buffered rest (and the interpreter's
            # final flush) goes nowhere instead of failing again; a stream with no descriptor is replaced.
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())
            except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation is both
                self._stream = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the command

    def __getattr__(self, name: str) -> Any:  # isatty, encoding, fileno, ...: the real stream's
        return getattr(self._stream, name)


@contextlib.contextmanager
def _ascii_under_c_locale(stream: Any):
    """stderr as _ClosablePipe makes stdout: ASCII under the C locale, anything else escaped."""
    before = (getattr(stream, "encoding", None), getattr(stream, "errors", None))
    changed = False
    if _c_locale():
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.reconfigure(encoding="ascii", errors="backslashreplace")
            changed = True
    try:
        yield
    finally:
        if changed:
            with contextlib.suppress(AttributeError, ValueError, OSError, LookupError):
                stream.reconfigure(encoding=before[0], errors=before[1])


def _c_locale() -> bool:
    """Whether the locale that names the character set is C or POSIX (LC_ALL=C), not chosen UTF-8."""
    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = os.environ.get(name)
        if value:
            return value in ("C", "POSIX")
    return True  # no locale at all is the C locale


def _add_bench(sub: argparse._SubParsersAction) -> None:
    """`bench` as a stub that takes any arguments, so that other commands never import the harness."""
    p = sub.add_parser("bench", add_help=False,
                       help="time tritoncheck against hand-written checks on realistic batches")
    p.set_defaults(run=_run_bench)


def _run_bench(args: argparse.Namespace) -> int:
    """Parse the arguments with the harness's own parser (tritoncheck.cli.bench.add_parser), then run it."""
    from tritoncheck.cli import bench
    parser = argparse.ArgumentParser(prog="tritoncheck")
    bench.add_parser(parser.add_subparsers())
    try:
        real = parser.parse_args(["bench", *args.rest])
    except SystemExit as exc:  # usage errors exit 2, --help 0, as for every other command
        return int(exc.code or 0)
    return int(real.run(real))


if __name__ == "__main__":
    sys.exit(main())
