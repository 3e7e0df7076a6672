"""What the `rlx-bake` commands share: output (rich tables, JSON), progress, passwords.

Every command builds one JSON-able dict (what `--json` prints) and a renderer that draws the
same dict as tables, so both views always say the same thing. Human output goes to stdout;
warnings, logs and progress go to stderr, progress only when stderr is a terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import enum
import json
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich import box
from rich.console import Console
from rich.progress import track
from rich.table import Table
from rich.text import Text

from rlx.errors import RlxError

__all__ = [
    "CliError", "Outcome", "Ui", "add_password_options", "check_output", "fmt_bytes", "fmt_ms",
    "fmt_shape", "jsonable", "one_line", "parsed", "password_from", "positive_int",
]

PLAIN_WIDTH = 120  # tables written to a file or pipe: wide enough not to fold columns


class CliError(RlxError):
    """A user error the command line finds itself (password source, missing tool, paths)."""


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

    @contextlib.contextmanager
    def step(self, text: str) -> Iterator[Callable[[str], None]]:
        """A spinner while a long step runs; yields a function that changes its text."""
        if not self.interactive:
            yield lambda _: None
            return
        with self.err.status(text) as status:
            yield lambda new: status.update(new)

    def track(self, items: Sequence, text: str) -> Iterable:
        """A progress bar over `items` (several repeats, say), when interactive."""
        if not self.interactive or len(items) < 2:
            return items
        return track(items, description=text, console=self.err, transient=True)

    def finish(self, outcome: Outcome) -> int:
        if self.as_json:
            print(json.dumps(jsonable(outcome.data), indent=2))
        elif not self.quiet:
            outcome.render(outcome.data, self)
        return outcome.code

    # -- drawing ---------------------------------------------------------------------------
    def line(self, text: str) -> None:
        self.out.print(text, markup=False, highlight=False, soft_wrap=True)

    def table(self, title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
              numeric: Sequence[str] = (), header: bool = True) -> None:
        """A table; the `numeric` columns are right-aligned, the others left-aligned.

        Cells are `Text`, never markup: names and notes such as "[metadata-only]" print as
        they are."""
        table = Table(title=None if title is None else Text(title), box=box.SIMPLE_HEAD,
                      title_justify="left", highlight=False, show_header=header)
        for name in columns:
            table.add_column(Text(name), justify="right" if name in numeric else "left")
        for row in rows:
            table.add_row(*(Text("" if v is None else str(v)) for v in row))
        self.out.print(table)

    def pairs(self, title: str | None, items: Iterable[tuple[str, Any]]) -> None:
        """A two-column table of labels and values."""
        self.table(title, ("", ""), items, header=False)


def _console(stream) -> Console:
    tty = stream.isatty()
    return Console(file=stream, width=None if tty else PLAIN_WIDTH, highlight=False,
                   soft_wrap=False)


def check_output(path: str | Path) -> None:
    """Fail before any work when an output file cannot be created where the user asked."""
    folder = Path(path).parent
    if not folder.is_dir():
        raise CliError(f"cannot write {path}: folder {folder} does not exist")
    if Path(path).is_dir():
        raise CliError(f"cannot write {path}: it is a folder")


# --- formatting ---------------------------------------------------------------------------


def one_line(text: object) -> str:
    """Messages from other libraries can span lines; the CLI prints errors on one."""
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def fmt_bytes(n: int | None) -> str:
    return "" if n is None else f"{n:,}"


def fmt_ms(ms: float | None) -> str:
    return "" if ms is None else f"{ms:.2f} ms"


def fmt_shape(dims: Sequence[Any]) -> str:
    return f"[{', '.join(str(d) for d in dims)}]"


def jsonable(value: Any) -> Any:
    """Plain JSON types: numpy scalars to Python, non-finite floats to null, paths to text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    return value


# --- argument types ----------------------------------------------------------------------


def parsed(parse: Callable[[str], Any], what: str) -> Callable[[str], Any]:
    """An argparse type from one of rlx's `parse` functions: a bad value is a usage error."""
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except RlxError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    convert.__name__ = what  # argparse names the type in its messages
    return convert


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


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


def password_from(args, ui: Ui) -> str | None:
    """The password the options name, or None when none was given."""
    if args.password is not None:
        ui.warn("--password is visible to other users of this machine (process list, shell "
                "history); prefer --password-env VAR or --password-file PATH")
        return _non_empty(args.password, "--password")
    if args.password_env is not None:
        value = os.environ.get(args.password_env)
        if value is None:
            raise CliError(f"environment variable {args.password_env} is not set "
                           "(--password-env names the variable, not the password)")
        return _non_empty(value, f"environment variable {args.password_env}")
    if args.password_file is not None:
        try:
            text = Path(args.password_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise CliError(f"cannot read password file {args.password_file}: "
                           f"{getattr(err, 'strerror', None) or err}") from None
        return _non_empty(text.removesuffix("\n").removesuffix("\r"),
                          f"password file {args.password_file}")
    return None


def _non_empty(password: str, source: str) -> str:
    if not password:
        raise CliError(f"{source} is empty")
    return password
