"""dedupe_identical_constants: same dtype, shape and bytes -> one constant (the first)."""

from __future__ import annotations

import numpy as np

from rlx.ir import BinaryOp, DType, Graph, Shape
from rlx.ir.ops.sources import Constant
from rlx.passes import dedupe_identical_constants
from tests.passes.common import assert_same_results, checked, ops_of


def test_tied_weights_become_one_constant_named_after_the_first():
    w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    g = Graph("tied")
    x = g.input("x", Shape([2, 4]))
    embed = g.constant(w, name="embed")
    head = g.constant(w.copy(), name="head")  # same bytes, another buffer
    a = g.matmul(x, embed)
    g.set_outputs([g.binary(BinaryOp.ADD, a, g.matmul(x, head)), head])
    new, merged = checked(dedupe_identical_constants, g)
    assert merged == 1 and ops_of(new).count("Constant") == 1
    kept = new.find("embed")
    assert new.find("head") is None
    assert [new.node(i).inputs[1] for i in (2, 3)] == [kept.id, kept.id]
    assert new.outputs[1] == kept.id  # the output that was `head` reads the survivor
    assert_same_results(g, new)


def test_same_bytes_with_another_dtype_or_shape_are_kept_apart():
    g = Graph("apart")
    zeros = np.zeros(6, np.float32)
    ids = [
        g.constant(zeros, name="f32"),
        g.constant(zeros.view(np.int32), name="i32"),  # same bytes, another dtype
        g.constant(zeros.reshape(2, 3), name="f32_2x3"),  # same bytes, another shape
        g.add_node(Constant(b""), (), Shape([6], DType.F32), name="stripped_a"),
        g.add_node(Constant(b""), (), Shape([6], DType.F32), name="stripped_b"),
    ]
    g.set_outputs(ids)
    new, merged = checked(dedupe_identical_constants, g)
    assert new is g and merged == 0


def test_every_later_copy_merges_into_the_first():
    g = Graph("many")
    values = [np.array([1, 2], np.float32), np.array([3, 4], np.float32)]
    ids = [g.constant(values[i % 2], name=f"c{i}") for i in range(5)]
    g.set_outputs(ids)
    new, merged = checked(dedupe_identical_constants, g)
    assert merged == 3 and [n.name for n in new.nodes()] == ["c0", "c1"]
    assert new.outputs == [0, 1, 0, 1, 0]
    assert_same_results(g, new)
