"""The `rlx-bake` command (also `python -m rlx`): thin functions over the public API.

Each command lives in the module named after it (`bake`, `inspect`, `tensors`, `run`,
`verify`, `demo`, `export`, `sign`, `serve`; `transform` holds relayout, encrypt, decrypt,
convert and import-onnx); this module owns the parser and the exit codes, the same for
every command (see `ui`): 0 success,
1 a failed check, 2 bad usage (one line, with "did you mean" for a mistyped command or
option), 3 an error (`RlxError`, or an OS error on a path the user gave: one line
`error: ...` on stderr). With --json the error is also a JSON
object on stdout. Anything else is a bug and stays a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence

from rlx.cli import bake, demo, export, inspect, run, serve, sign, tensors, transform, verify
from rlx.cli.formatting import one_line
from rlx.cli.ui import EXIT_ERROR, EXIT_USAGE, Ui, UsageError
from rlx.errors import RlxError
from rlx.version import __version__

__all__ = ["EXAMPLES", "build_parser", "main"]

EXAMPLES = """examples:
  rlx-bake demo                                   train, bake and run a small MLP
  rlx-bake bake model.onnx -o model.rlx --profile size
  rlx-bake inspect model.rlx
  rlx-bake run model.rlx --input x=x.npy --repeat 10
  rlx-bake verify model.rlx --onnx model.onnx
  rlx-bake run model.rlx --inputs feeds.npz --engine auto -v
  rlx-bake export model.rlx -o model.onnx
  rlx-bake keygen -o release.key && rlx-bake sign model.rlx --key release.key
  rlx-bake verify-signature model.rlx --pubkey release.key.pub
  rlx-bake serve model.rlx --port 8000 --replicas 2   HTTP with Ray Serve (rlx[ray])
  rlx-bake <command> --help                       options of one command

exit codes (every command):
  0  success
  1  a check failed (verify found a mismatch, a checksum or signature is wrong)
  2  bad usage (an unknown command or option, a bad value)
  3  an error (bad input, a missing file: one line on stderr; with --json also a JSON
     object {"error": {...}} on stdout)
"""


EXIT_CODES_SHORT = ("exit codes: 0 success, 1 a check failed, 2 bad usage, 3 an error "
                    "(see 'rlx-bake --help')")


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors raise `UsageError` (one line, exit 2, with a "did you
    mean" for a mistyped command or option) instead of exiting."""

    def error(self, message: str):
        chosen = _chosen_command(self)
        raise UsageError(one_line(message) + _suggestion(message, self),
                         self.prog if chosen is None else chosen.prog)


_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")
_UNKNOWN = re.compile(r"unrecognized arguments: (.*)")


def _suggestion(message: str, parser: argparse.ArgumentParser) -> str:
    """` (did you mean X?)` for a mistyped choice (a command) or option, else ""."""
    found = _CHOICE.search(message)
    if found:
        choices = re.findall(r"'([^']*)'", found.group(2))
        return _did_you_mean(found.group(1), choices)
    found = _UNKNOWN.search(message)
    words = [w.split("=")[0] for w in found.group(1).split() if w.startswith("-")] \
        if found else []
    if not words:
        return ""
    chosen = _chosen_command(parser)
    own = [o for a in parser._actions for o in a.option_strings]
    theirs = [] if chosen is None else [o for a in chosen._actions for o in a.option_strings]
    if words[0] in theirs and words[0] not in own:  # `rlx-bake --json inspect ...`
        name = chosen.prog.split()[-1]  # type: ignore[union-attr]
        return f" ({words[0]} is an option of '{name}': put it after the command)"
    return _did_you_mean(words[0], own + theirs)


def _did_you_mean(word: str, candidates: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, candidates, n=2, cutoff=0.6)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def _chosen_command(parser: argparse.ArgumentParser) -> argparse.ArgumentParser | None:
    """The subcommand's parser named on this command line, when `parser` is the top one
    (it reports the options no parser took, so it looks into the chosen one)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return next((action.choices[w] for w in getattr(parser, "argv", ())
                         if w in action.choices), None)
    return None


# in the order `--help` lists their commands
_COMMAND_MODULES = (bake, inspect, tensors, transform, run, verify, demo, export, sign, serve)


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
    for module in _COMMAND_MODULES:
        module.add_commands(sub, common)
    for command in sub.choices.values():  # every command, whoever added it
        command.epilog = (command.epilog or "").rstrip("\n") + "\n\n" + EXIT_CODES_SHORT
        command.set_defaults(prog=command.prog)  # for usage errors found while running
    return parser


def with_default_command(argv: list[str], commands: set[str]) -> list[str]:
    """The reference's bare form `rlx-bake GRAPH -o OUT [flags]` means `rlx-bake bake ...`:
    a first argument that is neither an option nor a command is the bake input."""
    first = argv[0] if argv else ""
    # a path, not a misspelt command (`insepct` gets "did you mean" from the parser)
    looks_like_path = os.path.exists(first) or "/" in first or "." in first
    if first and not first.startswith("-") and first not in commands and looks_like_path:
        return ["bake", *argv]
    return argv


@contextlib.contextmanager
def _logging() -> Iterator[Callable[[bool, bool], None]]:
    """Route rlx's logs to the current stderr for this call only (main may run many times
    in one process, as the tests do); warnings from the start (parsing an option can warn),
    the level of -q / -v once they are known, set by the function this yields."""
    logger = logging.getLogger("rlx")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LevelFormatter())
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)

    def set_level(quiet: bool, verbose: bool) -> None:
        logger.setLevel(logging.INFO if verbose else logging.ERROR if quiet else logging.WARNING)

    try:
        yield set_level
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


class _LevelFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {one_line(record.getMessage())}"


def main(argv: Sequence[str] | None = None) -> int:
    _safe_streams()
    parser = build_parser()
    commands = set(next(a for a in parser._actions
                        if isinstance(a, argparse._SubParsersAction)).choices)
    argv = with_default_command(list(sys.argv[1:] if argv is None else argv), commands)
    parser.argv = argv  # type: ignore[attr-defined]  # for the "did you mean" of options
    with _logging() as set_level:
        try:
            args = parser.parse_args(argv)
        except UsageError as err:
            ui = Ui(as_json="--json" in argv)
            return ui.fail(f"{err} (see '{err.prog} --help')", EXIT_USAGE, "usage")
        except SystemExit as done:  # --help, --version
            return done.code if isinstance(done.code, int) else 0
        set_level(args.quiet, args.verbose)
        return _run(args, Ui(as_json=args.json, quiet=args.quiet))


def _run(args: argparse.Namespace, ui: Ui) -> int:
    """The command, its outcome drawn; errors as one line and their exit code."""
    try:
        return ui.finish(args.run(args, ui))
    except UsageError as err:  # options that clash, found once their values are known
        return ui.fail(f"{err} (see '{err.prog} --help')", EXIT_USAGE, "usage")
    except RlxError as err:
        return ui.fail(str(err), EXIT_ERROR, error=err)
    except BrokenPipeError:  # `rlx-bake inspect x.rlx --graph | head`: not an error
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as err:
        where = f"{err.filename}: " if err.filename else ""
        return ui.fail(f"{where}{err.strerror or err}", EXIT_ERROR, error=err)
    except KeyboardInterrupt:
        return ui.fail("interrupted", 130, "interrupted")


def _safe_streams() -> None:
    """Any string prints: a name holding a lone surrogate (or bytes a terminal's encoding
    lacks) comes out escaped instead of raising UnicodeEncodeError mid-report."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")

EXIT_BROKEN_PIPE = 141  # what a shell reports for a process a closed pipe stopped (128 + 13)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError):
        os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
