"""Packages that load each public name from its module on first use (PEP 562).

`import rlx` or reading a file must not pay for the bake pipeline, the weight loaders (and
gguf) or the graph passes: a package built with `lazy_exports` imports those only when one
of their names is used. The export table is a dict `_LAZY` of name -> module, which
tests/test_layering.py reads as imports.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any],
                                                                  Callable[[], list[str]]]:
    """`(__getattr__, __dir__)` for `package`, whose name `n` lives in `exports[n]` (or is
    the submodule `exports[n]` when that is `package.n`)."""
    module = sys.modules[package]

    def __getattr__(name: str) -> Any:
        try:
            source = exports[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = importlib.import_module(source)
        if source != f"{package}.{name}":  # a name in a module, not the submodule itself
            value = getattr(value, name)
        module.__dict__[name] = value  # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__
