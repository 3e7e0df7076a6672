"""The rlx graph IR: dtypes, shapes, ops, nodes, graphs, verification, text and JSON forms."""

from rlx.ir.dtype import DType
from rlx.ir.graph import Graph, Node
from rlx.ir import ops
from rlx.ir.ops import *  # noqa: F401,F403
from rlx.ir.printer import format_graph, format_node
from rlx.ir.serialize import graph_from_dict, graph_from_json, graph_to_dict, graph_to_json
from rlx.ir.shape import UNKNOWN, Dim, Shape, broadcast_dims, normalize_axis
from rlx.ir.verify import verify

__all__ = [  # noqa: F405  (plus every op name, star-imported from rlx.ir.ops)
    "DType", "Dim", "Graph", "Node", "Shape", "UNKNOWN", "broadcast_dims", "format_graph",
    "format_node", "graph_from_dict", "graph_from_json", "graph_to_dict", "graph_to_json",
    "normalize_axis", "verify", *ops.__all__,
]
