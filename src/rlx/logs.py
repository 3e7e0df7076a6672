"""Loggers for the load path that do not import `logging` until a record can be seen.

Importing `logging` costs a small model's `rlx.load` about 10 ms (it brings `threading`,
`traceback`, `string` and compiles a dozen regular expressions), a third of the whole
import. A process that never imported `logging` has configured no handler and no level,
so a debug or info record would be dropped: those calls are skipped until some other code
imports `logging`. Warnings, which `logging`'s last-resort handler prints even
unconfigured, import it and are always emitted.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["Logger"]


class Logger:
    """The calls rlx makes of a `logging.Logger`, resolved by name at each call; records
    name the caller's line, as the logger's own would."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def debug(self, msg: str, *args: Any) -> None:
        if "logging" in sys.modules:
            self._logger().debug(msg, *args, stacklevel=2)

    def info(self, msg: str, *args: Any) -> None:
        if "logging" in sys.modules:
            self._logger().info(msg, *args, stacklevel=2)

    def warning(self, msg: str, *args: Any) -> None:
        self._logger().warning(msg, *args, stacklevel=2)

    def _logger(self):
        import logging

        return logging.getLogger(self.name)
