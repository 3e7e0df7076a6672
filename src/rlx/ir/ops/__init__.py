"""Every op type, grouped by family. `OPS` maps serialised names to classes."""

from rlx.ir.ops.base import *  # noqa: F401,F403
from rlx.ir.ops.control import *  # noqa: F401,F403
from rlx.ir.ops.elementwise import *  # noqa: F401,F403
from rlx.ir.ops.linalg import *  # noqa: F401,F403
from rlx.ir.ops.multi import *  # noqa: F401,F403
from rlx.ir.ops.nn import *  # noqa: F401,F403
from rlx.ir.ops.packed import *  # noqa: F401,F403
from rlx.ir.ops.reduce import *  # noqa: F401,F403
from rlx.ir.ops.shaping import *  # noqa: F401,F403
from rlx.ir.ops.sources import *  # noqa: F401,F403

from rlx.ir.ops import (  # noqa: E402
    base, control, elementwise, linalg, multi, nn, packed, reduce, shaping, sources,
)

__all__ = [name for module in (base, control, elementwise, linalg, multi, nn, packed, reduce,
                               shaping, sources) for name in module.__all__]
