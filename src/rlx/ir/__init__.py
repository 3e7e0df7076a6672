"""The rlx graph IR: dtypes, shapes, ops, nodes, graphs, verification, text and JSON forms.

Names load on first use (`rlx._lazy`): a module that needs only `rlx.ir.dtype` or
`rlx.ir.shape` (feed checks, a warm engine load) does not import every op class. Every op
name is `rlx.ir.ops`'s, as its family module declares it: none is written again here.
"""

# ruff: noqa: F401, F403  (imports for type checkers; star imports of the op families)
from typing import TYPE_CHECKING

from rlx._lazy import lazy_exports

_LAZY = {
    "DType": "rlx.ir.dtype",
    **dict.fromkeys((
        "Dim", "Shape", "UNKNOWN", "broadcast_dims", "normalize_axis",
    ), "rlx.ir.shape"),
    **dict.fromkeys(("Graph", "Node"), "rlx.ir.graph"),
    **dict.fromkeys(("format_graph", "format_node"), "rlx.ir.printer"),
    **dict.fromkeys((
        "graph_from_dict", "graph_from_json", "graph_to_dict", "graph_to_json",
    ), "rlx.ir.serialize"),
    "ops": "rlx.ir.ops",
    "verify": "rlx.ir.verification",
}
if TYPE_CHECKING:  # what type checkers see: the names, imported as they are
    from rlx.ir import ops
    from rlx.ir.dtype import DType
    from rlx.ir.graph import Graph, Node
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
    from rlx.ir.printer import format_graph, format_node
    from rlx.ir.serialize import graph_from_dict, graph_from_json, graph_to_dict, graph_to_json
    from rlx.ir.shape import UNKNOWN, Dim, Shape, broadcast_dims, normalize_axis
    from rlx.ir.verification import verify

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, rest="rlx.ir.ops")
