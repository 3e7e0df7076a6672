"""Packages that load each public name from its module on first use (PEP 562).

`import rlx` or reading a file must not pay for the bake pipeline, the weight loaders (and
gguf) or the graph passes: a package built with `lazy_exports` imports those only when one
of their names is used. The export table is a dict `_LAZY` of name -> module, which
tests/test_layering.py reads as imports. A package may also take every other public name from
one module (`rest`), so that names declared there are not written again in the package.
"""

from __future__ import annotations

import importlib
import sys

TYPE_CHECKING = False  # not typing's: `import rlx` alone imports neither typing nor re
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: dict[str, str], rest: str | None = None,
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`(__getattr__, __dir__)` for `package`, whose name `n` lives in `exports[n]` (or is
    the submodule `exports[n]` when that is `package.n`), or else is one of the names in
    the `__all__` of the module `rest`. With `rest`, `package.__all__` is `exports` then
    that `__all__` (the module loads on the first lookup that needs it)."""
    module = sys.modules[package]

    def rest_names() -> list[str]:
        return importlib.import_module(rest).__all__ if rest is not None else []

    def __getattr__(name: str) -> Any:
        value: Any
        if name in exports:
            source = exports[name]
            value = importlib.import_module(source)
            if source != f"{package}.{name}":  # a name in a module, not the submodule itself
                value = getattr(value, name)
        elif rest is not None and name == "__all__":
            value = [*exports, *rest_names()]
        elif rest is not None and not name.startswith("_") and name in rest_names():
            value = getattr(importlib.import_module(rest), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module.__dict__[name] = value  # the next lookup is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted({*exports, *rest_names()})

    return __getattr__, __dir__
