"""Every op type, grouped by family; a family module loads when one of its ops is first used.

Each family module declares its names once, in its own `__all__`; this package's names are
all of them (`__all__` is theirs, in `FAMILY_NAMES` order), loaded on first use (PEP 562):
asking for an op name, `OPS` or `FAMILIES` imports every family. Reading a graph asks for
its ops by name through `rlx.ir.ops.base.op_type`, which imports only the family declaring
each one, so a model without control flow or quantised ops never imports those (~0.4 MiB of
code and classes with their kernels, issue 35).
"""

# ruff: noqa: F403  (star imports of the families' literal `__all__` lists, for type checkers)
from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers see: every family's names, as declared there
    from rlx.ir.ops.base import *
    from rlx.ir.ops.blocks import *
    from rlx.ir.ops.channelwise import *
    from rlx.ir.ops.control import *
    from rlx.ir.ops.dequant import *
    from rlx.ir.ops.einsum import *
    from rlx.ir.ops.elementwise import *
    from rlx.ir.ops.generators import *
    from rlx.ir.ops.indexing import *
    from rlx.ir.ops.linalg import *
    from rlx.ir.ops.logic import *
    from rlx.ir.ops.multi import *
    from rlx.ir.ops.nn import *
    from rlx.ir.ops.packed import *
    from rlx.ir.ops.quant import *
    from rlx.ir.ops.reduce import *
    from rlx.ir.ops.resize import *
    from rlx.ir.ops.shaping import *
    from rlx.ir.ops.slicing import *
    from rlx.ir.ops.sources import *
    from rlx.ir.ops.spectral import *
    from rlx.ir.ops.windows import *

FAMILY_NAMES = ("base", "blocks", "channelwise", "control", "dequant", "einsum", "elementwise",
                "generators", "indexing", "linalg", "logic", "multi", "nn", "packed", "quant",
                "reduce", "resize", "shaping", "slicing", "sources", "spectral", "windows")
"""The op family modules, whose `__all__` lists make this package's."""


def _families() -> tuple[ModuleType, ...]:
    return tuple(importlib.import_module(f"{__name__}.{name}") for name in FAMILY_NAMES)


def __getattr__(name: str) -> Any:
    value: Any
    if name in FAMILY_NAMES:  # `from rlx.ir.ops import nn`: that family alone
        value = importlib.import_module(f"{__name__}.{name}")
    elif name == "FAMILIES":
        value = _families()
    elif name == "__all__":
        value = [n for family in _families() for n in family.__all__]
    else:
        owner = None if name.startswith("_") else next(
            (f for f in _families() if name in f.__all__), None)
        if owner is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(owner, name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*FAMILY_NAMES, "FAMILIES", *__getattr__("__all__")})
