"""Every op type, grouped by family. `OPS` maps serialised names to classes.

Each family module declares its names once, in its own `__all__`; this package takes them
all (a star import reads exactly that list, and type checkers follow it), so a new op is
written in its family module and nowhere else here or in `rlx.ir`.
"""

# ruff: noqa: F403  (star imports of the families' literal `__all__` lists, see above)
from __future__ import annotations

from rlx.ir.ops import (
    base,
    control,
    elementwise,
    linalg,
    multi,
    nn,
    packed,
    quant,
    reduce,
    shaping,
    sources,
)
from rlx.ir.ops.base import *
from rlx.ir.ops.control import *
from rlx.ir.ops.elementwise import *
from rlx.ir.ops.linalg import *
from rlx.ir.ops.multi import *
from rlx.ir.ops.nn import *
from rlx.ir.ops.packed import *
from rlx.ir.ops.quant import *
from rlx.ir.ops.reduce import *
from rlx.ir.ops.shaping import *
from rlx.ir.ops.sources import *

FAMILIES = (base, control, elementwise, linalg, multi, nn, packed, quant, reduce, shaping,
            sources)
"""The op family modules, whose `__all__` lists make this package's."""

__all__ = [name for family in FAMILIES for name in family.__all__]
