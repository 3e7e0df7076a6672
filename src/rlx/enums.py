"""Closed sets chosen by name on a command line: canonical names plus aliases."""

from __future__ import annotations

import enum
from typing import Mapping, TypeVar

E = TypeVar("E", bound=enum.Enum)


def lookup(cls: type[E], text: str, aliases: Mapping[E, tuple[str, ...]]) -> E | None:
    """The member whose value or alias is `text` (trimmed, any case), or None."""
    key = text.strip().lower()
    return next((m for m in cls if key == m.value or key in aliases[m]), None)
