"""Pack quant: MatMul weights become GGUF Q8_0 (lossy: 8-bit codes, one f16 scale per 32).

Runs after `pack_ternary`, which has already turned its MatMuls into DequantMatMuls, so a
weight is never packed twice. See `rlx.passes.packing` for which weights qualify.
"""

from __future__ import annotations

from rlx.codecs import quantize_q8_0
from rlx.ir.graph import Graph
from rlx.ir.ops.linalg import QuantScheme
from rlx.passes.packing import pack_matmuls

__all__ = ["pack_quant"]


def pack_quant(graph: Graph) -> tuple[Graph, int]:
    """MatMuls over finite f32 `[K, N]` weights -> DequantMatMul(gguf_q8_0); (graph, count)."""
    return pack_matmuls(graph, QuantScheme.GGUF_Q8_0, quantize_q8_0, require_ternary=False,
                        pass_name="pack_quant")
