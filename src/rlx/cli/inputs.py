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

__all__ = ["load_array", "load_npz", "non_negative_float", "parsed", "positive_int",
           "refuse_overwriting"]


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
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


_NUMPY_MAGICS = (b"\x93NUMPY", b"PK\x03\x04")  # .npy, and the zip archive of an .npz


def load_array(path: str) -> Any:
    """np.load without pickles; a file numpy cannot read is a user error naming it. (For
    any other file np.load would talk about pickles, hence the magic check first.)"""
    with open(path, "rb") as f:
        if not f.read(6).startswith(_NUMPY_MAGICS):
            raise CliError(f"{path} is not a .npy or .npz file")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, EOFError, zipfile.BadZipFile) as err:
        raise CliError(f"cannot read {path} as .npy/.npz: {one_line(err)}") from None


def load_npz(path: str) -> dict[str, np.ndarray]:
    archive = load_array(path)
    if isinstance(archive, np.ndarray):
        raise CliError(f"{path} holds one array; expected an .npz archive of arrays by name")
    with archive:
        try:  # members are read here, lazily: a pickled one fails only now
            return {name: archive[name] for name in archive.files}
        except ValueError as err:
            raise CliError(f"cannot read {path}: {one_line(err)}") from None


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
