"""Fusion: replace op chains that exporters spell out by the one op they compute.

Each pattern turns several steps (each a pass over memory and a new buffer at run time)
into one node. Patterns are matched at their LAST node, whose inputs are already in the new
graph; the chain's inner nodes must have no other reader (else nothing is saved), and are
left for dead-code elimination.

- HardSwish: `x * clip(x + 3, 0, 6) / 6` (also with the product and the `/ 6` as `* 1/6`
  in either order) -> `Unary(hard_swish)(x)`;
- GELU, tanh form: `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))` (BERT-style
  exports; the factors in any order) -> `Unary(gelu_approx)(x)`;
- GELU, exact: `0.5 * x * (1 + erf(x / sqrt 2))` with the product in any grouping and
  order, `* 0.5` or `/ 2`, and `/ sqrt 2` or `* (1/sqrt 2)`, constants on either side
  (PyTorch writes `((1 + erf(x / 1.4142)) * x) * 0.5`) -> `Unary(gelu)(x)`;
- SiLU / Swish: `x * sigmoid(x)` (either order) -> `Unary(silu)(x)`;
- Mish: `x * tanh(softplus(x))`, softplus also as `log(1 + exp(x))` -> `Unary(mish)(x)`;
- convolution bias: `Conv(x, w[, b]) + c` with a constant `c` that varies only along the
  channel axis -> `Conv(x, w, b + c)`.

Constants must match to float32 rounding: a pattern with other numbers is something else.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import numpy as np

from rlx.ir.graph import Graph, Node
from rlx.ir.ops.elementwise import Activation, Binary, BinaryOp, Clamp, Unary
from rlx.ir.ops.windows import Conv
from rlx.ir.rewrite import Rewriter, constant_value, rewrite_nodes
from rlx.ir.shape import Shape

__all__ = ["fuse_patterns"]

log = logging.getLogger(__name__)


def fuse_patterns(graph: Graph) -> tuple[Graph, int]:
    """Fuse the patterns above in one forward sweep; returns (graph, chains fused)."""
    users, outputs = graph.users(), set(graph.outputs)

    def fuse(rw: Rewriter, node: Node) -> bool:
        rule = _RULES.get(type(node.op))
        return rule is not None and rule(_Match(rw, users, outputs), node)

    new, count = rewrite_nodes(graph, fuse)
    log.info("fuse_patterns %r: %d chain(s) fused", graph.name, count)
    return new, count


class _Match:
    """Pattern matching over the source graph: which node an input is, and what it holds."""

    def __init__(self, rw: Rewriter, users: list[list[int]], outputs: set[int]):
        self.rw, self.users, self.outputs = rw, users, outputs

    def node(self, node_id: int) -> Node:
        return self.rw.source.node(node_id)

    def inner(self, node_id: int, op_type: type, op: BinaryOp | None = None) -> Node | None:
        """The source node `node_id` if it is an `op_type` (a Binary: with `op`) that only
        the chain reads: an inner link."""
        node = self.node(node_id)
        if not isinstance(node.op, op_type) or len(self.users[node_id]) != 1 \
                or node_id in self.outputs:
            return None
        return node if op is None or isinstance(node.op, Binary) and node.op.op is op else None

    def scalar(self, node_id: int) -> float | None:
        """The value of a one-element float constant, else None."""
        node = self.node(node_id)
        if not isinstance(node.shape, Shape) or node.shape.numel != 1:
            return None  # not read: a large weight is no scalar
        value = constant_value(node)
        if value is None or value.size != 1 or value.dtype.kind != "f":
            return None
        return float(value.reshape(-1)[0])

    def split(self, node: Node, value: float) -> int | None:
        """For a commutative Binary with the scalar constant `value` on one side: the
        other input."""
        for side in (0, 1):
            if _close(self.scalar(node.inputs[side]), value):
                return node.inputs[1 - side]
        return None

    def operand(self, node_id: int, op: BinaryOp, value: float) -> int | None:
        """x, when inner node `node_id` is `x <op> value` or `value <op> x` (add, mul)."""
        node = self.inner(node_id, Binary, op)
        return None if node is None else self.split(node, value)


def _close(got: float | None, want: float) -> bool:
    return got is not None and math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-12)


def _emit_unary(m: _Match, node: Node, kind: Activation, x: int, why: str) -> bool:
    if m.node(x).shape != node.shape:  # broadcasting in the chain: not this function
        return False
    m.rw.substitute(node, Unary(kind), (m.rw.id(x),), node.shape)
    log.debug("fuse: %s is %s of %s", node.label, why, m.node(x).label)
    return True


# -- HardSwish ------------------------------------------------------------------------------
def _hard_swish_end(m: _Match, node: Node) -> bool:
    """`(x * clip(x + 3, 0, 6)) / 6` or `* (1/6)`, matched at the division."""
    assert isinstance(node.op, Binary)  # chains end at a Binary (_ENDS)
    product: int | None
    if node.op.op is BinaryOp.DIV and _close(m.scalar(node.inputs[1]), 6.0):
        product = node.inputs[0]
    elif node.op.op is BinaryOp.MUL:
        product = m.split(node, 1 / 6)
    else:
        return False
    mul = None if product is None else m.inner(product, Binary, BinaryOp.MUL)
    if mul is None:
        return False
    for side in (0, 1):
        x, clamp = mul.inputs[side], m.inner(mul.inputs[1 - side], Clamp)
        if clamp is not None and isinstance(clamp.op, Clamp) and _close(clamp.op.min, 0.0) \
                and _close(clamp.op.max, 6.0) \
                and m.operand(clamp.inputs[0], BinaryOp.ADD, 3.0) == x:
            return _emit_unary(m, node, Activation.HARD_SWISH, x, "hard_swish")
    return False


# -- GELU (tanh) ----------------------------------------------------------------------------
_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def _gelu_tanh_end(m: _Match, node: Node) -> bool:
    """`(0.5 * x) * (1 + tanh(...))` or `x * (0.5 * (1 + tanh(...)))`, at the last Mul."""
    assert isinstance(node.op, Binary)  # chains end at a Binary (_ENDS)
    if node.op.op is not BinaryOp.MUL:
        return False
    for side in (0, 1):
        a, b = node.inputs[side], node.inputs[1 - side]
        x = m.operand(a, BinaryOp.MUL, 0.5)
        if x is not None and _one_plus_tanh_of(m, b) == x:
            return _emit_unary(m, node, Activation.GELU_APPROX, x, "gelu (tanh)")
        inner = m.operand(b, BinaryOp.MUL, 0.5)
        if inner is not None and _one_plus_tanh_of(m, inner) == a:
            return _emit_unary(m, node, Activation.GELU_APPROX, a, "gelu (tanh)")
    return False


def _one_plus_tanh_of(m: _Match, node_id: int) -> int | None:
    """x, when node `node_id` is `1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))`."""
    arg = m.operand(node_id, BinaryOp.ADD, 1.0)
    tanh = None if arg is None else m.inner(arg, Unary)
    if tanh is None or not isinstance(tanh.op, Unary) or tanh.op.kind is not Activation.TANH:
        return None
    poly = m.operand(tanh.inputs[0], BinaryOp.MUL, _SQRT_2_OVER_PI)
    total = None if poly is None else m.inner(poly, Binary, BinaryOp.ADD)
    if total is None:
        return None
    for side in (0, 1):
        x = total.inputs[side]
        cube = m.operand(total.inputs[1 - side], BinaryOp.MUL, 0.044715)
        if cube is not None and _is_cube_of(m, cube, x):
            return x
    return None


def _is_cube_of(m: _Match, node_id: int, x: int) -> bool:
    """`x ** 3`, or `x * x * x` in either grouping."""
    pow_node = m.inner(node_id, Binary, BinaryOp.POW)
    if pow_node is not None:
        return pow_node.inputs[0] == x and _close(m.scalar(pow_node.inputs[1]), 3.0)
    mul = m.inner(node_id, Binary, BinaryOp.MUL)
    if mul is None or x not in mul.inputs:
        return False
    square = m.inner(mul.inputs[1] if mul.inputs[0] == x else mul.inputs[0], Binary,
                     BinaryOp.MUL)
    return square is not None and square.inputs == (x, x)


# -- products (GELU exact, SiLU, Mish) --------------------------------------------------------
def _factors(m: _Match, node: Node) -> tuple[float, list[int]] | None:
    """`node` (a Mul, or a Div by a constant) as a constant times a list of non-constant
    factors: inner Muls and Divs by a scalar constant are opened up, in any grouping."""
    scale, leaves = 1.0, []

    def walk(node: Node) -> bool:
        nonlocal scale
        assert isinstance(node.op, Binary)  # the chain's end, or an inner Binary (leaf)
        if node.op.op is BinaryOp.DIV:
            c = m.scalar(node.inputs[1])
            if not c:
                return False
            scale /= c
            return leaf(node.inputs[0])
        return node.op.op is BinaryOp.MUL and all(leaf(i) for i in node.inputs)

    def leaf(i: int) -> bool:
        nonlocal scale
        c = m.scalar(i)
        if c is not None:
            scale *= c
            return True
        inner = m.inner(i, Binary)
        if inner is not None and isinstance(inner.op, Binary) \
                and inner.op.op in (BinaryOp.MUL, BinaryOp.DIV) \
                and m.node(i).shape == node.shape:
            return walk(inner)
        leaves.append(i)
        return True

    return (scale, leaves) if walk(node) else None


def _unary_of(m: _Match, node_id: int, kind: Activation) -> int | None:
    """x, when inner node `node_id` is `Unary(kind)(x)`."""
    node = m.inner(node_id, Unary)
    return node.inputs[0] if node is not None and isinstance(node.op, Unary) \
        and node.op.kind is kind \
        and node.op.alpha is None and node.op.beta is None else None


def _erf_gelu_arg(m: _Match, node_id: int) -> int | None:
    """x, when node `node_id` is `1 + erf(x / sqrt 2)` (or `* (1/sqrt 2)`)."""
    arg = m.operand(node_id, BinaryOp.ADD, 1.0)
    inner = None if arg is None else _unary_of(m, arg, Activation.ERF)
    scaled = None if inner is None else m.inner(inner, Binary)
    if scaled is None or not isinstance(scaled.op, Binary) \
            or scaled.op.op not in (BinaryOp.MUL, BinaryOp.DIV):
        return None
    parts = _factors(m, scaled)
    if parts is None or len(parts[1]) != 1 or not _close(parts[0], 1 / math.sqrt(2)):
        return None
    return parts[1][0]


def _softplus_of(m: _Match, node_id: int) -> int | None:
    """x, when inner node `node_id` is `softplus(x)` or `log(1 + exp(x))`."""
    x = _unary_of(m, node_id, Activation.SOFTPLUS)
    if x is not None:
        return x
    arg = _unary_of(m, node_id, Activation.LOG)
    one_plus = None if arg is None else m.operand(arg, BinaryOp.ADD, 1.0)
    return None if one_plus is None else _unary_of(m, one_plus, Activation.EXP)


def _product_end(m: _Match, node: Node) -> bool:
    """GELU (exact), SiLU and Mish, matched at the last Mul (or Div) of their product."""
    assert isinstance(node.op, Binary)  # chains end at a Binary (_ENDS)
    if node.op.op not in (BinaryOp.MUL, BinaryOp.DIV) or not node.tensor_shape.dtype.is_float:
        return False
    parts = _factors(m, node)
    if parts is None or len(parts[1]) != 2:
        return False
    scale, (a, b) = parts
    for x, other in ((a, b), (b, a)):
        if _close(scale, 0.5) and _erf_gelu_arg(m, other) == x:
            return _emit_unary(m, node, Activation.GELU, x, "gelu (erf)")
        if not _close(scale, 1.0):
            continue
        if _unary_of(m, other, Activation.SIGMOID) == x:
            return _emit_unary(m, node, Activation.SILU, x, "silu")
        tanh = _unary_of(m, other, Activation.TANH)
        if tanh is not None and _softplus_of(m, tanh) == x:
            return _emit_unary(m, node, Activation.MISH, x, "mish")
    return False


# -- convolution bias -----------------------------------------------------------------------
def _conv_bias(m: _Match, node: Node) -> bool:
    """`Conv(x, w[, b]) + c`, c constant along all axes but the channel axis (1)."""
    assert isinstance(node.op, Binary)  # chains end at a Binary (_ENDS)
    if node.op.op is not BinaryOp.ADD:
        return False
    for side in (0, 1):
        conv = m.inner(node.inputs[side], Conv)
        add = constant_value(m.node(node.inputs[1 - side]))
        if conv is None or add is None or conv.shape != node.shape:
            continue
        channels = _per_channel(add, conv.tensor_shape.rank, conv.tensor_shape.dims[1])
        old = constant_value(m.node(conv.inputs[2])) if len(conv.inputs) == 3 else 0
        if channels is None or old is None:
            continue
        bias = (channels + old).astype(node.tensor_shape.dtype.numpy)
        rw = m.rw
        inputs = (rw.id(conv.inputs[0]), rw.id(conv.inputs[1]), rw.emit_constant(bias))
        rw.substitute(node, conv.op, inputs, node.shape)
        log.debug("fuse: %s is a bias of %s", node.label, conv.label)
        return True
    return False


def _per_channel(value: np.ndarray, rank: int, channels) -> np.ndarray | None:
    """`value` as a `[channels]` vector, if it broadcasts over a rank-`rank` convolution
    output varying along axis 1 at most; else None."""
    if value.ndim > rank or not isinstance(channels, int):
        return None
    shape = (1,) * (rank - value.ndim) + value.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(value.reshape(-1), (channels,))


def _binary_end(m: _Match, node: Node) -> bool:
    return any(rule(m, node)
               for rule in (_hard_swish_end, _gelu_tanh_end, _product_end, _conv_bias))


_RULES: dict[type, Callable[[_Match, Node], bool]] = {Binary: _binary_end}
