"""The `rlx-bake` command (also `python -m rlx`): thin functions over the public API.

The subcommands live in `cli_artifact` (bake, inspect, relayout, encrypt, decrypt) and
`cli_run` (run, verify, demo); this module owns the parser and the exit codes: a user error
(`RlxError`, or an OS error on a path the user gave) prints one line `error: ...` on stderr
and exits 1, bad usage exits 2 (with a one-line message too), success 0.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Iterator

from rlx.cli_artifact import add_commands as add_artifact_commands
from rlx.cli_run import add_commands as add_run_commands
from rlx.cli_ui import Ui, one_line
from rlx.errors import RlxError
from rlx.version import __version__

__all__ = ["EXAMPLES", "build_parser", "main"]

EXAMPLES = """examples:
  rlx-bake demo                                   train, bake and run a small MLP
  rlx-bake bake model.onnx -o model.rlx --profile size
  rlx-bake inspect model.rlx
  rlx-bake run model.rlx --input x=x.npy --repeat 10
  rlx-bake verify model.rlx --onnx model.onnx
  rlx-bake <command> --help                       options of one command
"""


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, `error: ... (see 'prog --help')`, exit 2."""

    def error(self, message: str):
        self.exit(2, f"error: {one_line(message)} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    shared = common.add_argument_group("output")
    shared.add_argument("--json", action="store_true",
                        help="print one JSON object on stdout and nothing else there")
    shared.add_argument("-q", "--quiet", action="store_true",
                        help="print nothing on stdout but --json output; errors still show")
    shared.add_argument("-v", "--verbose", action="store_true",
                        help="log what each step decides (on stderr)")
    parser = _Parser(prog="rlx-bake", epilog=EXAMPLES,
                     description="Bake an ML model and its weights into one .rlx artifact, "
                                 "inspect it, and run it on the CPU.",
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"rlx-bake {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_artifact_commands(sub, common)
    add_run_commands(sub, common)
    return parser


@contextlib.contextmanager
def _logging(quiet: bool, verbose: bool) -> Iterator[None]:
    """Route rlx's logs to the current stderr for this call only (main may run many times
    in one process, as the tests do)."""
    logger = logging.getLogger("rlx")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LevelFormatter())
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if verbose else logging.ERROR if quiet else logging.WARNING)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


class _LevelFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {one_line(record.getMessage())}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version, or a usage error (2)
        return done.code if isinstance(done.code, int) else 0
    ui = Ui(as_json=args.json, quiet=args.quiet)
    with _logging(args.quiet, args.verbose):
        try:
            return ui.finish(args.run(args, ui))
        except RlxError as err:
            return _fail(str(err))
        except OSError as err:
            where = f"{err.filename}: " if err.filename else ""
            return _fail(f"{where}{err.strerror or err}")
        except KeyboardInterrupt:
            return _fail("interrupted", code=130)


def _fail(message: str, code: int = 1) -> int:
    print(f"error: {one_line(message)}", file=sys.stderr)
    return code

