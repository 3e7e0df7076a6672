"""Pack ternary: MatMul weights of exactly -1/0/+1 become GGUF TQ2_0 (lossless).

TQ2_0 stores each 256-value block as 2-bit codes plus an f16 scale `max|x|`, which is 1 (or
0) for ternary blocks, so the packed weight decodes to exactly the original values. See
`rlx.passes.packing` for which weights qualify and how names are kept.
"""

from __future__ import annotations

from collections import Counter

from rlx.codecs import quantize_tq2_0
from rlx.ir.graph import Graph
from rlx.ir.ops.linalg import QuantScheme
from rlx.passes.packing import pack_matmuls

__all__ = ["pack_ternary"]


def pack_ternary(graph: Graph, not_packed: Counter | None = None) -> tuple[Graph, int]:
    """MatMuls over ternary f32 `[K, N]` weights -> DequantMatMul(gguf_tq2_0); (graph, count).
    `not_packed` counts the MatMuls left dense by reason (`pack_matmuls`)."""
    return pack_matmuls(graph, QuantScheme.GGUF_TQ2_0, quantize_tq2_0, require_ternary=True,
                        pass_name="pack_ternary", not_packed=not_packed)
