"""Step batching: many small products of one constant over slices of one tensor -> one product.

An unrolled recurrent export (an LSTM or GRU traced step by step) projects every time step's
input on its own: `Gather(x, t) @ W` for t = 0..T-1, each a small MatMul with the same
constant `W`, and the bias Add after each. A row selection of `x` (Gather, static Slice, a
Split piece, a Squeeze) that leaves `x`'s last axis alone commutes with `@ W` and with an
elementwise op by a constant that broadcasts along that last axis only, so

    sel_1(x) @ W, ..., sel_N(x) @ W   ->   y = x @ W;  sel_1(y), ..., sel_N(y)

and `sel_i(y) + b` alike -> `z = y + b; sel_i(z)`. Each output element is the same dot
product of the same row of `x` with the same column of `W` (the same sum in float32), and an
elementwise op computes the same value per element, so the rewrite is exact up to the BLAS
kernel's blocking of the rows (M), not of the sum. One MatMul of T*M rows runs at BLAS speed
where T calls of M rows each pay dispatch and a poorly filled kernel.

Rules for a group (one root tensor, one op, one constant operand on one side):
- at least two members, whose selections together hold at least half of the root's elements
  (the batched op does at most twice the work of the members);
- MatMul: a rank-2 constant right operand; elementwise: a `Binary` whose constant has rank
  <= 1 and whose output has its selection operand's shape.

The batched Adds appear after the MatMuls are batched (a member's operand is then a selection
of the new product), so the pass sweeps until nothing changes. Constants match by content
(as `dedupe_identical_constants` merges them): folding a Gemm's transposed weight leaves one
copy per step until the dedupe at the end of the bake. The batched product reads the first.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from fractions import Fraction
from typing import NamedTuple

from rlx.ir.graph import Graph, Node
from rlx.ir.ops.elementwise import Binary
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.multi import TupleGet
from rlx.ir.ops.shaping import Gather, Squeeze
from rlx.ir.ops.slicing import Slice, Split, slice_plan
from rlx.ir.ops.sources import Constant
from rlx.ir.rewrite import Rewriter
from rlx.ir.shape import Shape, normalize_axis
from rlx.passes.dedupe_constants import constant_key, same_constant

__all__ = ["batch_step_products"]

log = logging.getLogger(__name__)


class _Member(NamedTuple):
    """One product to batch: `node` computes op(chain(root), constant) (or the sides swapped)."""

    node: Node
    root: int
    chain: tuple[int, ...]  # the selection nodes from the root's reader down to the operand


def batch_step_products(graph: Graph) -> tuple[Graph, int]:
    """Batch the groups of step products (module doc) until none is left; returns (graph,
    products rewritten as selections of a batched one)."""
    total = 0
    while True:
        graph, count = _sweep(graph)
        if not count:
            break
        total += count
    log.info("batch_step_products %r: %d product(s) batched", graph.name, total)
    return graph, total


def _sweep(graph: Graph) -> tuple[Graph, int]:
    groups = _groups(graph)
    first = {members[0].node.id: members for members in groups}
    later = {m.node.id: members for members in groups for m in members[1:]}
    rw = Rewriter(graph)
    batched: dict[int, int] = {}  # first member's id -> new id of the batched product
    # (batched product, selection node id) -> the selection's twin over that product
    replayed: dict[tuple[int, int], int] = {}
    count = 0
    for node in graph.nodes():
        members = first.get(node.id) or later.get(node.id)
        if members is None:
            rw.copy(node)
            continue
        lead = members[0]
        if node.id == lead.node.id:
            inputs = [rw.id(lead.root) if i == lead.chain[-1] else rw.id(i)
                      for i in lead.node.inputs]
            batched[lead.node.id] = rw.emit(lead.node.op, inputs)
            log.debug("batch_step_products: %d products of %s batched over %s", len(members),
                      lead.node.label, graph.node(lead.root).label)
        member = next(m for m in members if m.node.id == node.id)
        _replay(rw, member, batched[lead.node.id], replayed)
        count += 1
    return rw.finish(), count


def _replay(rw: Rewriter, member: _Member, product: int,
            replayed: dict[tuple[int, int], int]) -> None:
    """Apply the member's selections to the batched product; the last stands for the member
    (and takes its name). A selection shared by members (a Split) is replayed once."""
    parent = product
    for sel_id in member.chain[:-1]:
        key = (product, sel_id)
        if key not in replayed:
            sel = rw.source.node(sel_id)
            replayed[key] = rw.emit(sel.op, (parent, *(rw.id(i) for i in sel.inputs[1:])))
        parent = replayed[key]
    last = rw.source.node(member.chain[-1])
    rw.substitute(member.node, last.op, (parent, *(rw.id(i) for i in last.inputs[1:])),
                  member.node.shape)


def _groups(graph: Graph) -> list[list[_Member]]:
    """The groups worth batching, each in graph order."""
    found: dict[tuple, list[_Member]] = defaultdict(list)
    for node in graph.nodes():
        keyed = _keyed_member(graph, node)
        if keyed is not None:
            found[keyed[0]].append(keyed[1])
    groups = ([m for m in members if _same_operand(graph, members[0], m)]
              for members in found.values())
    return [members for members in groups if _worth_batching(graph, members)]


def _operand(member: _Member) -> int:
    """The member's constant operand (the one input that is not its selection)."""
    return next(i for i in member.node.inputs if i != member.chain[-1])


def _same_operand(graph: Graph, lead: _Member, member: _Member) -> bool:
    """Whether `member`'s constant is the lead's, or holds the same bytes (a key collision
    otherwise)."""
    a, b = graph.node(_operand(lead)), graph.node(_operand(member))
    return a.id == b.id or same_constant(a, b)


def _keyed_member(graph: Graph, node: Node) -> tuple[tuple, _Member] | None:
    """(group key, member) when `node` is a product by a constant of a selection, else None."""
    side = _selection_side(graph, node)
    if side is None:
        return None
    chain = _selection_chain(graph, node.inputs[side])
    if not chain:
        return None
    root = graph.node(chain[0]).inputs[0]
    constant = graph.node(node.inputs[1 - side])
    assert isinstance(constant.op, Constant)  # checked by _selection_side
    content = ("node", constant.id) if constant.op.is_stripped else constant_key(constant)
    return (root, node.op, side, content), _Member(node, root, chain)


def _selection_side(graph: Graph, node: Node) -> int | None:
    """Which input of a MatMul by a rank-2 constant, or of an elementwise op by a constant
    of rank <= 1 that keeps the other input's shape, may be a selection (None: neither)."""
    if isinstance(node.op, MatMul):
        return 0 if _is_constant(graph, node.inputs[1], max_rank=2, min_rank=2) else None
    if not isinstance(node.op, Binary) or node.is_tuple:
        return None
    return next((s for s in (0, 1) if _is_constant(graph, node.inputs[1 - s], max_rank=1)
                 and graph.node(node.inputs[s]).shape == node.shape), None)


def _is_constant(graph: Graph, node_id: int, *, max_rank: int, min_rank: int = 0) -> bool:
    node = graph.node(node_id)
    return isinstance(node.op, Constant) and not node.is_tuple \
        and min_rank <= node.tensor_shape.rank <= max_rank


def _selection_chain(graph: Graph, node_id: int) -> tuple[int, ...]:
    """The selections leading from a root tensor to `node_id` (outermost first), each keeping
    the last axis in place; empty when `node_id` is not such a selection."""
    chain: list[int] = []
    node = graph.node(node_id)
    while _keeps_last_axis(graph, node):
        chain.append(node.id)
        node = graph.node(node.inputs[0])
    while chain and isinstance(graph.node(chain[-1]).op, TupleGet):
        chain.pop()  # a piece of a Split along the last axis: not a selection
    return tuple(reversed(chain))


def _keeps_last_axis(graph: Graph, node: Node) -> bool:
    """Whether `node` selects elements of its first input without touching its last axis."""
    op = node.op
    if not node.inputs:
        return False
    if isinstance(op, TupleGet):
        return isinstance(graph.node(node.inputs[0]).op, Split)
    source = graph.node(node.inputs[0])
    if source.is_tuple:
        return False
    rank = source.tensor_shape.rank
    last = rank - 1
    if isinstance(op, Gather):
        return isinstance(graph.node(node.inputs[1]).op, Constant) \
            and normalize_axis(op.axis, rank) != last
    if isinstance(op, Split):
        return normalize_axis(op.axis, rank) != last
    if isinstance(op, Squeeze):
        return op.axes is not None and len(node.inputs) == 1 \
            and all(normalize_axis(a, rank) != last for a in op.axes)
    if isinstance(op, Slice) and op.starts is not None and op.ends is not None:
        plan = slice_plan(rank, op.starts, op.ends, op.axes, op.steps)
        return all(axis != last for axis, *_ in plan)
    return False


def _worth_batching(graph: Graph, members: Sequence[_Member]) -> bool:
    """Two or more members whose selections hold at least half the root's elements."""
    if len(members) < 2:
        return False
    root = graph.node(members[0].root).tensor_shape
    shares = [_share(graph.node(m.chain[-1]).tensor_shape, root) for m in members]
    return all(s is not None for s in shares) and sum(s for s in shares if s) >= Fraction(1, 2)


def _share(part: Shape, whole: Shape) -> Fraction | None:
    """`part`'s element count over `whole`'s, or None when symbolic dims do not cancel."""
    fraction = Fraction(1)
    symbols = [d for d in whole.dims if not isinstance(d, int)]
    for dim in part.dims:
        if isinstance(dim, int):
            fraction *= dim
        elif dim in symbols:
            symbols.remove(dim)
        else:
            return None
    if symbols:
        return None
    for dim in whole.dims:
        if isinstance(dim, int):
            if dim == 0:
                return None
            fraction /= dim
    return fraction
