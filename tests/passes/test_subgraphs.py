"""Baking through control flow: `sink_constant_captures`, `in_subgraphs`,
`hoist_subgraph_weights`, and the bake pipeline using them. Every rewrite must leave what the
graph computes unchanged: results are compared with float64 numpy."""

from __future__ import annotations

import math

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize, quantize

from rlx import BakeOptions, MemoryMode, bake
from rlx.ir import DType, Graph, Shape
from rlx.ir.ops.control import If, Loop
from rlx.ir.ops.elementwise import Activation, BinaryOp
from rlx.ir.ops.linalg import MatMul
from rlx.ir.ops.slicing import Concat, Slice
from rlx.ir.ops.sources import Constant
from rlx.ir.verification import verify
from rlx.passes import (
    HOIST_MIN_BYTES,
    eliminate_dead_code,
    fold_constants,
    hoist_subgraph_weights,
    in_subgraphs,
    sink_constant_captures,
    unfold_weights,
)
from rlx.runtime import Session

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 64)).astype(np.float32)  # 1 KiB: a weight
X = RNG.standard_normal((2, 4)).astype(np.float32)
F32 = DType.F32


def _swap_halves(b: Graph, w: int) -> int:
    """concat(w[:, 32:], w[:, :32]): weight re-layout a bake can fold once w is known."""
    hi = b.add_node(Slice(starts=(32,), ends=(64,), axes=(1,)), [w])
    lo = b.add_node(Slice(starts=(0,), ends=(32,), axes=(1,)), [w])
    return b.add_node(Concat(axis=1), [hi, lo])


def _branch(name: str, body) -> Graph:
    b = Graph(name)
    x = b.input("x", Shape((2, 4), F32))
    w = b.input("w", Shape((4, 64), F32))
    b.set_outputs([body(b, x, w)])
    return b


def _nested_graph() -> Graph:
    """out = cond ? relu(inner(x, W)) : x @ swap(W), where inner is itself an If on cond2
    taking W as a capture: weights reach two levels down."""
    inner = If(_branch("inner then", lambda b, x, w: b.matmul(x, _swap_halves(b, w))),
               _branch("inner else", lambda b, x, w: b.matmul(x, w)))

    def then(b: Graph, x: int, w: int) -> int:
        flag = b.constant(np.array(True))
        (y,) = b.unpack(b.add_node(inner, [flag, x, w]))
        return b.unary(Activation.RELU, y)

    outer = If(_branch("then", then),
               _branch("else", lambda b, x, w: b.matmul(x, _swap_halves(b, w))))
    g = Graph("nested")
    cond = g.input("cond", Shape((), DType.BOOL))
    x = g.input("x", Shape((2, 4), F32))
    (out,) = g.unpack(g.add_node(outer, [cond, x, g.constant(W, name="W")]))
    g.set_outputs([out])
    return g


def _expected(cond: bool) -> np.ndarray:
    x, w = X.astype(np.float64), W.astype(np.float64)
    swapped = np.concatenate([w[:, 32:], w[:, :32]], axis=1)
    return np.maximum(x @ swapped, 0) if cond else x @ swapped


def _run(graph: Graph, cond: bool) -> np.ndarray:
    return Session().compile(graph).run({"cond": np.array(cond), "x": X})[0]


def _constants(graph: Graph, depth: int = 0):
    """(depth, node) for every Constant, subgraphs included."""
    for node in graph.nodes():
        if isinstance(node.op, Constant):
            yield depth, node
        for sub in node.op.subgraphs():
            yield from _constants(sub, depth + 1)


@pytest.mark.parametrize("cond", [True, False])
def test_the_nested_graph_computes_what_numpy_does(cond):
    np.testing.assert_allclose(_run(_nested_graph(), cond), _expected(cond), rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("cond", [True, False])
def test_sink_moves_captured_constants_to_every_depth(cond):
    g, sunk = sink_constant_captures(_nested_graph())
    verify(g)
    assert sunk == 2  # W into the outer If, then (as a constant there) into the inner If
    assert not g.users()[g.find("W").id]  # the outer If no longer takes it (DCE's to drop)
    (if_node,) = [n for n in g.nodes() if isinstance(n.op, If)]
    assert len(if_node.inputs) == 2  # cond, x
    # the (now unread) original at the top, a copy in each subgraph level that reads it
    assert {d for d, n in _constants(g) if n.shape.dims == (4, 64)} == {0, 1, 2}
    np.testing.assert_allclose(_run(g, cond), _expected(cond), rtol=1e-5, atol=1e-5)


def _sunk_and_folded() -> tuple[Graph, int]:
    """The nested graph with captures sunk, folded and cleaned inside the subgraphs;
    returns (graph, nodes folded)."""
    g, _ = sink_constant_captures(_nested_graph())
    g, folded = in_subgraphs(fold_constants)(g)
    return in_subgraphs(eliminate_dead_code)(g)[0], folded


@pytest.mark.parametrize("cond", [True, False])
def test_folding_inside_subgraphs_removes_the_weight_relayout(cond):
    g, folded = _sunk_and_folded()
    assert folded == 2 * 3  # two Slices and a Concat, in the else branch and the inner then

    def count(graph: Graph, kind) -> int:
        return sum(isinstance(n.op, kind) + sum(count(s, kind) for s in n.op.subgraphs())
                   for n in graph.nodes())

    assert count(g, Slice) == count(g, Concat) == 0
    np.testing.assert_allclose(_run(g, cond), _expected(cond), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("cond", [True, False])
def test_hoist_brings_weights_to_the_top_and_keeps_small_constants(cond):
    g, hoisted = hoist_subgraph_weights(_sunk_and_folded()[0])
    verify(g)
    big = [(d, n) for d, n in _constants(g) if n.op.nbytes >= HOIST_MIN_BYTES]
    assert big and all(d == 0 for d, _ in big)
    # the flag of the inner If (1 byte) stays inside the subgraph that uses it
    assert any(d == 1 and n.shape.dtype is DType.BOOL for d, n in _constants(g))
    # each weight is one table row, found through the If that captures it
    rows = unfold_weights(g)
    assert {r.node_id for r in rows} == {n.id for _, n in big}
    assert hoisted >= len(big)
    np.testing.assert_allclose(_run(g, cond), _expected(cond), rtol=1e-5, atol=1e-5)


def test_loop_captures_sink_and_hoist_but_carried_values_stay():
    """acc = 0; repeat 3 times: acc = acc + x @ W. W is captured, acc is carried."""
    body = Graph("body")
    body.input("i", Shape((), DType.I64))
    keep = body.input("cond", Shape((), DType.BOOL))
    acc = body.input("acc", Shape((2, 64), F32))
    x = body.input("x", Shape((2, 4), F32))
    w = body.input("w", Shape((4, 64), F32))
    body.set_outputs([keep, body.binary(BinaryOp.ADD, acc, body.matmul(x, w))])
    g = Graph("loop")
    xi = g.input("x", Shape((2, 4), F32))
    trips, going = g.constant(np.array(3, np.int64)), g.constant(np.array(True))
    zeros = g.constant(np.zeros((2, 64), np.float32))
    (out,) = g.unpack(g.add_node(Loop(body, n_carried=1), [trips, going, zeros, xi,
                                                           g.constant(W)]))
    g.set_outputs([out])
    expected = 3 * (X.astype(np.float64) @ W.astype(np.float64))

    sunk, n_sunk = sink_constant_captures(g)
    assert n_sunk == 1  # W only: the carried zeros change every trip and stay an input
    hoisted, n_hoisted = hoist_subgraph_weights(sunk)
    assert n_hoisted == 1
    for graph in (sunk, hoisted):
        verify(graph)
        got = Session().compile(graph).run({"x": X})[0]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_bake_puts_subgraph_weights_in_the_table_and_memory_modes_apply():
    graph = _nested_graph()
    sizes = {}
    for memory in MemoryMode:
        file, report = bake(graph, {}, BakeOptions.from_profile("exact").replace(memory=memory))
        assert report.optimize.captures_sunk == 2 and report.optimize.weights_hoisted >= 1
        assert file.weights and all(w.shape == W.shape for w in file.weights)
        in_graph = sum(n.op.nbytes for _, n in _constants(file.graph))
        sizes[memory] = in_graph
        runnable = file.into_runtime_graph()
        for cond in (True, False):
            np.testing.assert_allclose(_run(runnable, cond), _expected(cond), rtol=1e-5,
                                       atol=1e-5)
    # compact strips the weight bytes from the graph; duplex and runtime keep them there
    assert sizes[MemoryMode.COMPACT] < HOIST_MIN_BYTES <= sizes[MemoryMode.RUNTIME]
    assert sizes[MemoryMode.DUPLEX] == sizes[MemoryMode.RUNTIME]


def test_matmul_reading_a_hoisted_weight_keeps_working_unpacked():
    """A weight captured by control flow is not packed for its MatMul (packing is
    top-level only); the size profile stores W^T as Q8_0, one row (its rows of K = 4 are
    not whole blocks), decoded before the If: the gguf package's decoding of that row,
    each row of W^T divided by 2^e first (its row exponent: e from math.frexp of its
    largest |value|), multiplied back after."""
    file, _ = bake(_nested_graph(), {}, BakeOptions.from_profile("size"))
    assert not any(isinstance(n.op, MatMul) for n in file.graph.nodes())  # all inside Ifs
    assert {w.encoding for w in file.weights} == {"gguf_q8_0"}
    q8 = gguf.GGMLQuantizationType.Q8_0
    scale = np.array([2.0 ** math.frexp(float(np.abs(r).max()))[1] for r in W.T])[:, None]
    normalised = (W.T / scale).astype(np.float32)
    decoded = (dequantize(quantize(normalised.reshape(1, -1), q8), q8).reshape(64, 4)
               * scale).T
    x, w = X.astype(np.float64), decoded.astype(np.float64)
    swapped = np.concatenate([w[:, 32:], w[:, :32]], axis=1)
    graph = file.into_runtime_graph()
    np.testing.assert_allclose(_run(graph, True), np.maximum(x @ swapped, 0), atol=1e-5)
    np.testing.assert_allclose(_run(graph, False), x @ swapped, atol=1e-5)
