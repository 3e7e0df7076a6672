"""What the commands read besides their files: argparse types for rlx's values, and arrays
from `.npy` / `.npz` files (run, verify, bake --calibrate), where a file numpy cannot read
is a user error naming it."""

from __future__ import annotations

import argparse
import math
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rlx.cli.formatting import one_line
from rlx.cli.ui import CliError, UsageError
from rlx.errors import RlxError
from rlx.safeio import open_regular

__all__ = ["load_array", "load_npz", "non_negative_float", "non_negative_int", "parsed",
           "positive_int", "refuse_overwriting"]


def parsed(parse: Callable[[str], Any], what: str) -> Callable[[str], Any]:
    """An argparse type from one of rlx's `parse` functions: a bad value is a usage error."""
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except RlxError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
    convert.__name__ = what  # argparse names the type in its messages
    return convert


def non_negative_float(text: str) -> float:
    """A finite float >= 0 (tolerances): `--rtol -1` or `nan` is a usage error."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _int_at_least(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    return _int_at_least(text, 0, "an integer >= 0")


def _int_at_least(text: str, least: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return value


_NUMPY_MAGICS = (b"\x93NUMPY", b"PK\x03\x04")  # .npy, and the zip archive of an .npz


def load_array(path: str) -> np.ndarray:
    """One array from an `.npy` file (never pickles); anything else is a user error naming
    it. The file is checked (a regular file: a device or a FIFO is refused before it is
    read, `rlx.safeio.open_regular`) and read through that one descriptor."""
    value = _load(path, lambda loaded: loaded)
    if not isinstance(value, np.ndarray):
        raise CliError(f"{path} is an .npz archive; expected one array (.npy)")
    return value


def load_npz(path: str) -> dict[str, np.ndarray]:
    """The arrays of an `.npz` archive by name, checked and read as `load_array` reads."""
    return _load(path, _members)


def _members(archive: Any) -> dict[str, np.ndarray]:
    if isinstance(archive, np.ndarray):
        raise CliError("it holds one array; expected an .npz archive of arrays by name")
    return {name: archive[name] for name in archive.files}  # read now: pickles fail here


def _load(path: str, take: Callable[[Any], Any]) -> Any:
    with os.fdopen(open_regular(path, CliError), "rb") as f:
        if not f.read(6).startswith(_NUMPY_MAGICS):  # else np.load would talk of pickles
            raise CliError(f"{path} is not a .npy or .npz file")
        f.seek(0)
        try:
            return take(np.load(f, allow_pickle=False))
        except (ValueError, EOFError, zipfile.BadZipFile) as err:
            raise CliError(f"cannot read {path} as .npy/.npz: {one_line(err)}") from None
        except CliError as err:
            raise CliError(f"{path}: {err}") from None


def refuse_overwriting(args: argparse.Namespace, output: str | None,
                       *inputs: str | None) -> None:
    """A usage error when the output names one of the inputs (the same file, or the same
    path once resolved): the write would replace what is being read."""
    for source in inputs:
        if output is not None and source is not None and _same_file(source, output):
            raise UsageError(f"the output {output} is the input {source}: write to another "
                             "file", args.prog)


def _same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    try:
        if os.path.samefile(a, b):  # hard links, and one file named two ways
            return True
    except OSError:  # the output does not exist yet
        pass
    return Path(a).resolve() == Path(b).resolve()
