"""Errors that do not keep what was parsed alive."""

from __future__ import annotations

import contextlib
from typing import TypeVar

__all__ = ["detached"]

E = TypeVar("E", bound=BaseException)


def detached(err: E) -> E:
    """`err` with its traceback's frames cleared of their locals and without chained
    exceptions, ready to raise again.

    A traceback holds every frame it passed through, and each frame its locals: an error
    raised while reading a 4 MiB header kept the parsed header (178 MiB of objects) alive
    for as long as the caller held the error. The frames stay (file and line: where the
    check was, which the fuzzer's signatures use); what they held goes."""
    tb = err.__traceback__  # as traceback.clear_frames, without importing traceback
    while tb is not None:
        with contextlib.suppress(RuntimeError):  # a frame still running keeps its locals
            tb.tb_frame.clear()
        tb = tb.tb_next
    err.__cause__ = None
    err.__context__ = None
    err.__suppress_context__ = True
    return err
