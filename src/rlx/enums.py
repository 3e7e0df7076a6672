"""Enums chosen by text: one way to look a member up by its value, name or alias.

Command-line choices (profiles, memory modes, weight policies), dtypes, weight encodings,
op attributes in graph JSON and ONNX attributes are all parsed here, so the rules (trimmed,
case folded or exact, aliases) and the errors are the same everywhere. Each enum's `parse`
only says which error it raises.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

__all__ = ["lookup", "parse_enum"]

E = TypeVar("E", bound=enum.Enum)


def lookup(cls: type[E], text: str, aliases: Mapping[E, Sequence[str]] | None = None, *,
           exact: bool = False, names: bool = False) -> E | None:
    """The member of `cls` whose value (or, with `names`, name) or alias is `text`; None if
    there is none. Unless `exact`, `text` is trimmed and matched in lower case."""
    key = text if exact else text.strip().lower()
    if not aliases:
        return _members(cls, names).get(key)
    for member in cls:
        if key == str(member.value) or (names and key == member.name) \
                or aliases and key in aliases.get(member, ()):
            return member
    return None


@functools.cache
def _members(cls: type[E], names: bool) -> dict[str, E]:
    """Value (and, with `names`, name) -> member, the first member first: what `lookup`'s
    loop finds, in one dict lookup (graph JSON names a dtype and an enum per node)."""
    table: dict[str, E] = {}
    for member in cls:
        table.setdefault(str(member.value), member)
        if names:
            table.setdefault(member.name, member)
    return table


def parse_enum(cls: type[E], text: str, error: Callable[[str], Exception],
               aliases: Mapping[E, Sequence[str]] | None = None, *, exact: bool = False,
               names: bool = False) -> E:
    """`lookup`, raising `error(text)` when nothing matches."""
    found = lookup(cls, text, aliases, exact=exact, names=names)
    if found is None:
        raise error(text)
    return found
