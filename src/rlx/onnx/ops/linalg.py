"""MatMul, Gemm (as MatMul with the scalings and bias spelled out) and Einsum."""

from __future__ import annotations

from rlx.ir import Einsum
from rlx.onnx.node import NodeContext
from rlx.onnx.registry import converter

__all__ = ["matmul", "gemm", "einsum", "det"]


def _requantised(n: NodeContext) -> bool:
    """Whether the product reads a DequantizeLinear (a QDQ graph): then it sums K in
    onnxruntime's blocks (`MatMul.mlas_blocks`)."""
    return any(n.produced_by(i) == "DequantizeLinear" for i in (0, 1))


@converter("MatMul")
def matmul(n: NodeContext) -> int:
    return n.s.matmul(n.input(0), n.input(1), mlas_blocks=_requantised(n))


@converter("Gemm")
def gemm(n: NodeContext) -> int:
    """`alpha * A' @ B' + beta * C` as Transpose / MatMul / Mul / Add, so that the bake can
    fold the transposes into the weights and pack them like any MatMul weight."""
    s = n.s
    a, b = n.input(0), n.input(1)
    for operand, name in ((a, "A"), (b, "B")):
        if s.rank(operand) != 2:  # as onnxruntime: Gemm is no batched MatMul
            raise n.fail(f"{name} must have rank 2, got {s.shape(operand)}")
    if n.attr("transA", 0):
        a = s.transpose(a, (1, 0))
    if n.attr("transB", 0):
        b = s.transpose(b, (1, 0))
    y = s.matmul(a, b, mlas_blocks=_requantised(n))
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    if alpha != 1.0:
        y = s.mul(y, s.like(alpha, y))
    if n.has(2) and beta != 0.0:
        c = n.input(2)
        if beta != 1.0:
            c = s.mul(c, s.like(beta, c))
        y = s.add(y, c)
    return y


@converter("Einsum")
def einsum(n: NodeContext) -> int:
    return n.s.emit(Einsum(n.attr("equation", "")), *n.all_inputs())


_MAX_DET_ORDER = 4


@converter("Det")
def det(n: NodeContext) -> int:
    """Laplace expansion along the first row, for the small static orders models use."""
    s = n.s
    x = n.input(0)
    order = s.shape(x).dims[-1]
    if not isinstance(order, int) or order > _MAX_DET_ORDER or s.shape(x).dims[-2] != order:
        raise n.fail(f"needs square matrices of static order <= {_MAX_DET_ORDER}, got "
                     f"{s.shape(x)}")
    entries = {(i, j): s.take(s.take(x, i, -2), j, -1)
               for i in range(order) for j in range(order)}

    def minor(rows: tuple[int, ...], cols: tuple[int, ...]) -> int:
        if len(rows) == 1:
            return entries[rows[0], cols[0]]
        total: int | None = None
        for k, col in enumerate(cols):
            term = s.mul(entries[rows[0], col], minor(rows[1:], cols[:k] + cols[k + 1:]))
            total = term if total is None else (s.sub if k % 2 else s.add)(total, term)
        assert total is not None  # cols is not empty
        return total

    return minor(tuple(range(order)), tuple(range(order)))
