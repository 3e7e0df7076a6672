"""What the `rlx-bake` commands share: output (rich tables, JSON), progress, passwords.

Every command builds one JSON-able dict (what `--json` prints) and a renderer that draws the
same dict as tables, so both views always say the same thing. Human output goes to stdout;
warnings, logs and progress go to stderr, progress only when stderr is a terminal. Colour
only on a terminal (and never with NO_COLOR set); piped tables are as wide as their
content (no name is ever cut) and carry no trailing spaces.

Exit codes, for every command: 0 success, 1 a check failed (verify found a mismatch, a
checksum or signature is wrong), 2 bad usage (the line says what, and suggests the
command or option meant), 3 an error (an `RlxError`: bad input, missing file; one line).
With `--json` an error is also a JSON object on stdout: `{"error": {...}}`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
    track,
)
from rich.table import Table
from rich.text import Text

from rlx.cli.formatting import jsonable, one_line
from rlx.errors import RlxError

__all__ = [
    "EXIT_CHECK_FAILED", "EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "PROGRESS_LOGGER", "CliError",
    "Outcome", "Ui", "UsageError", "add_password_options", "error_object",
    "password_from",
]

EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # verify mismatch, bad checksum or signature
EXIT_USAGE = 2  # the command line itself is wrong
EXIT_ERROR = 3  # an RlxError (or an OS error on a path the user gave)

PLAIN_WIDTH = 1_000_000  # a file or pipe: tables as wide as their content, nothing folded
PROGRESS_LOGGER = "rlx.progress"
"""Long work (passes, packing, writing) logs what it is doing here at DEBUG; the command
line shows it under its spinner, on a terminal only. A record whose `progress` attribute
(`extra={"progress": (done, total)}`) counts its work gets a bar with percentage and time
left; records of one message template are one bar."""

_SHORT_CELL = 16  # a column whose cells are all this short never wraps
_STYLES = {"OK": "bold green", "yes": "green", "NO": "bold red", "FAILED": "bold red"}


class CliError(RlxError):
    """A user error the command line finds itself (password source, missing tool, paths)."""


class UsageError(Exception):
    """Bad usage found by the parser: the message, and the `prog` whose --help to see."""

    def __init__(self, message: str, prog: str):
        super().__init__(message)
        self.prog = prog


def error_object(kind: str, message: str, code: int, error: BaseException | None = None
                 ) -> dict[str, Any]:
    """What `--json` prints on stdout for an error (the same line goes to stderr)."""
    return {"error": {"kind": kind, "type": type(error).__name__ if error else None,
                      "message": message, "exit_code": code}}


@dataclass
class Outcome:
    """A command's result: the JSON object, how to draw it, and the exit code."""

    data: dict[str, Any]
    render: Callable[[dict[str, Any], Ui], None]
    code: int = 0


@dataclass
class Ui:
    as_json: bool = False
    quiet: bool = False
    out: Console = field(default_factory=lambda: _console(sys.stdout))
    err: Console = field(default_factory=lambda: _console(sys.stderr))

    @property
    def interactive(self) -> bool:
        """Show progress: only for a person watching a terminal."""
        return not self.quiet and self.err.is_terminal

    def warn(self, message: str) -> None:
        """Warnings are shown even with --quiet and --json (they go to stderr)."""
        print(f"warning: {one_line(message)}", file=sys.stderr)

    def fail(self, message: str, code: int, kind: str = "error",
             error: BaseException | None = None) -> int:
        """Report an error: one line on stderr (red on a terminal) and, with --json, the
        error object on stdout. Returns `code`."""
        line = Text(f"error: {one_line(message)}")
        line.stylize("bold red", 0, 6)
        self.err.print(line, soft_wrap=True)
        if self.as_json:
            print(json.dumps(error_object(kind, one_line(message), code, error), indent=2))
        return code

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[Callable[[str], None]]:
        """A spinner while a long step runs; yields a function that changes its text. What
        the library logs on `PROGRESS_LOGGER` meanwhile shows too (see there)."""
        if not self.interactive:
            yield lambda _: None
            return
        columns = (SpinnerColumn(style="green"), TextColumn("{task.description}", markup=False),
                   BarColumn(), TaskProgressColumn(), TimeRemainingColumn())
        with Progress(*columns, console=self.err, transient=True,
                      refresh_per_second=12.5) as bars:
            lines = _ProgressLines(bars, text)
            with _progress_to(lines.record):
                yield lines.show

    def track(self, items: Sequence, text: str) -> Iterable:
        """A progress bar over `items` (several repeats, say), when interactive."""
        if not self.interactive or len(items) < 2:
            return items
        return track(items, description=text, console=self.err, transient=True)

    def styled(self, value: Any) -> Text:
        """A cell as text; verdicts (OK, yes, NO, FAILED...) in colour (a terminal only)."""
        text = Text("" if value is None else str(value))
        style = _STYLES.get(text.plain.split(":")[0])
        if style:
            text.stylize(style)
        return text

    def finish(self, outcome: Outcome) -> int:
        if self.as_json:
            print(json.dumps(jsonable(outcome.data), indent=2))
        elif not self.quiet:
            outcome.render(outcome.data, self)
        return outcome.code

    # -- drawing ---------------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.out.print(self.styled(text), highlight=False, soft_wrap=True)

    def table(self, title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
              numeric: Sequence[str] = (), header: bool = True) -> None:
        """A table; the `numeric` columns are right-aligned, the others left-aligned.

        Cells are `Text`, never markup: names and notes such as "[metadata-only]" print as
        they are. A cell too long for a terminal wraps (`fold`): a name is never cut."""
        table = Table(title=None if title is None else Text(title, style="bold"),
                      box=box.SIMPLE_HEAD, title_justify="left", highlight=False,
                      show_header=header, header_style="bold",
                      min_width=len(title) if title else None)  # a title never wraps
        cells = [[self.styled(v) for v in row] for row in rows]
        for i, name in enumerate(columns):
            # short columns (numbers, encodings, shapes) stay on one line; the long ones
            # (names, notes) take the folding when a terminal is too narrow
            longest = max((len(row[i].plain) for row in cells if i < len(row)), default=0)
            table.add_column(Text(name), justify="right" if name in numeric else "left",
                             overflow="fold", no_wrap=longest <= _SHORT_CELL)
        for row in cells:
            table.add_row(*row)
        self._print(table)

    def _print(self, renderable: Any) -> None:
        if self.out.is_terminal:
            self.out.print(renderable)
            return
        with self.out.capture() as captured:  # rich pads cells: strip the line ends
            self.out.print(renderable)
        self.out.file.write("".join(line.rstrip() + "\n"
                                    for line in captured.get().splitlines()))

    def pairs(self, title: str | None, items: Iterable[tuple[str, Any]]) -> None:
        """A two-column table of labels and values."""
        self.table(title, ("", ""), items, header=False)


def _console(stream) -> Console:
    tty = stream.isatty()
    return Console(file=stream, width=None if tty else PLAIN_WIDTH, highlight=False,
                   soft_wrap=False)


class _ProgressLines:
    """A step's lines while it runs: its own (its text, then what the library says it is
    doing), and a bar per kind of counted work (message template): the first kind (a
    bake's passes) and below it the latest other one (weights encoded, calibration runs,
    bytes written), so each phase is one line however many records it sends."""

    def __init__(self, bars: Progress, text: str):
        self.bars, self.text = bars, text
        self.own = bars.add_task(text, total=None)
        self.kinds: dict[str, TaskID] = {}

    def show(self, text: str) -> None:  # drawn now: a fast step's message is seen too
        self.bars.update(self.own, description=text)
        self.bars.refresh()

    def record(self, record: logging.LogRecord) -> None:
        message = one_line(record.getMessage())
        counts = getattr(record, "progress", None)
        if counts is None:
            self.show(f"{self.text}: {message}")
            return
        done, total = counts
        kind = str(record.msg)
        task = self.kinds.get(kind)
        if task is None:
            task = self.kinds[kind] = self.bars.add_task(message, total=total)
        first = next(iter(self.kinds.values()))
        for other in self.kinds.values():
            self.bars.update(other, visible=other in (first, task))
        self.bars.update(task, description=message, completed=done, total=total)
        self.bars.refresh()


class _ProgressHandler(logging.Handler):
    def __init__(self, show: Callable[[logging.LogRecord], None]):
        super().__init__(logging.DEBUG)
        self.show = show

    def emit(self, record: logging.LogRecord) -> None:
        self.show(record)


@contextlib.contextmanager
def _progress_to(show: Callable[[logging.LogRecord], None]) -> Iterator[None]:
    """Send `PROGRESS_LOGGER`'s messages to `show` while the block runs (only there: the
    logger is silent, and never reaches the -v log, otherwise)."""
    logger = logging.getLogger(PROGRESS_LOGGER)
    handler = _ProgressHandler(show)
    old = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old[0])
        logger.propagate = old[1]


# --- passwords ----------------------------------------------------------------------------


def add_password_options(parser, required: bool = False) -> None:
    """--password-env / --password-file (and the discouraged --password), one of them."""
    group = parser.add_mutually_exclusive_group(required=required)
    group.add_argument("--password-env", metavar="VAR",
                       help="read the password from environment variable VAR")
    group.add_argument("--password-file", metavar="PATH",
                       help="read the password from a file (one trailing newline is ignored)")
    group.add_argument("--password", metavar="TEXT",
                       help="the password itself (discouraged: other users of the machine can "
                            "see it in the process list)")


def password_from(args, ui: Ui) -> str | bytes | None:
    """The password the options name, or None when none was given. One from the
    environment that is not valid UTF-8 is used as its raw bytes."""
    if args.password is not None:
        ui.warn("--password is visible to other users of this machine (process list, shell "
                "history); prefer --password-env VAR or --password-file PATH")
        return _non_empty(args.password, "--password")
    if args.password_env is not None:
        value = os.environ.get(args.password_env)
        if value is None:
            raise CliError(f"environment variable {args.password_env} is not set "
                           "(--password-env names the variable, not the password)")
        value = _non_empty(value, f"environment variable {args.password_env}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # os.environ decodes undecodable bytes to surrogates
            return os.fsencode(value)
        return value
    if args.password_file is not None:
        from rlx.safeio import read_small_text  # devices, FIFOs, big files refused unread

        text = read_small_text(args.password_file, CliError, "password file")
        return _non_empty(text.removesuffix("\n").removesuffix("\r"),
                          f"password file {args.password_file}")
    return None


def _non_empty(password: str, source: str) -> str:
    if not password:
        raise CliError(f"{source} is empty")
    return password
