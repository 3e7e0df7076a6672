"""Import-time folding computes what the runtime computes: both use rlx.kernels.

The oracle for the values is numpy in float64 / C-style integer semantics; the runtime is
the numpy engine running the same op on the same values fed as inputs (not folded).
"""

from __future__ import annotations

import numpy as np
import pytest

from rlx.ir import (
    Binary,
    BinaryOp,
    Compare,
    CompareOp,
    DType,
    Gather,
    Graph,
    Range,
    Reduce,
    ReduceOp,
    Shape,
)
from rlx.ir.ops.base import Op
from rlx.onnx.fold import fold
from rlx.runtime import Session


def _run(op: Op, values: list[np.ndarray]) -> np.ndarray:
    g = Graph("g")
    ids = [g.input(f"v{i}", Shape(list(v.shape), DType.from_numpy(v.dtype)))
           for i, v in enumerate(values)]
    g.set_outputs([g.add_node(op, ids)])
    return Session("cpu").compile(g).run({f"v{i}": v for i, v in enumerate(values)})[0]


def _fold(op: Op, values: list[np.ndarray]) -> np.ndarray | None:
    g = Graph("g")
    ids = [g.constant(v) for v in values]
    return fold(op, values, g.infer(op, ids))


def test_integer_div_folds_as_the_runtime_divides_even_by_zero():
    a = np.array([7, -7, 7, -7, 5, 0], np.int64)
    b = np.array([2, 2, -2, -2, 0, 3], np.int64)
    op = Binary(BinaryOp.DIV)
    folded = _fold(op, [a, b])
    assert folded is not None  # the old import-time rule refused a zero divisor
    np.testing.assert_array_equal(folded, _run(op, [a, b]))
    nonzero = b != 0
    np.testing.assert_array_equal(folded[nonzero], np.trunc(a[nonzero] / b[nonzero]))  # C


@pytest.mark.parametrize("op, values, expected", [
    (Binary(BinaryOp.MOD), [np.array([7, -7], np.int64), np.array([3, 3], np.int64)],
     np.array([1, 2])),  # sign of the divisor, as Python's %
    (Compare(CompareOp.LT), [np.array([1, 5], np.int64), np.array([3, 3], np.int64)],
     np.array([True, False])),
    (Gather(axis=0), [np.array([10, 20, 30], np.int64), np.array([-1, 0], np.int64)],
     np.array([30, 10])),
    (Range(), [np.array(2, np.int64), np.array(11, np.int64), np.array(3, np.int64)],
     np.array([2, 5, 8])),
    (Reduce(ReduceOp.PROD, axes=(0,), keepdims=False), [np.array([2, 3, 4], np.int64)],
     np.array(24)),
])
def test_shape_arithmetic_folds_to_the_runtime_value(op, values, expected):
    folded = _fold(op, values)
    np.testing.assert_array_equal(folded, expected)
    np.testing.assert_array_equal(folded, _run(op, values))


def test_float_values_are_left_to_the_bake():
    values = [np.array([1.5], np.float32), np.array([2.0], np.float32)]
    assert _fold(Binary(BinaryOp.ADD), values) is None


def test_evaluated_computes_a_float_cone_of_constants_and_refuses_an_input():
    """A quantising table (float32 divide, round half to even, saturate), as float64 numpy
    computes it (a float64 quotient of float32 operands rounds to the float32 quotient); a
    cone reaching an Input has no value yet."""
    from rlx.ir import Activation, Clamp, Unary
    from rlx.onnx.fold import evaluated

    g = Graph("g")
    codes = np.arange(-128, 128, dtype=np.float32) * np.float32(0.05)
    y = g.add_node(Binary(BinaryOp.DIV), [g.constant(codes), g.constant(np.float32(0.04))])
    y = g.add_node(Clamp(-128.0, 127.0), [g.add_node(Unary(Activation.ROUND), [y])])
    quotient = (codes.astype(np.float64) / np.float64(np.float32(0.04))).astype(np.float32)
    want = np.clip(np.rint(quotient.astype(np.float64)), -128, 127)
    np.testing.assert_array_equal(evaluated(g, y), want)
    fed = g.add_node(Binary(BinaryOp.ADD), [y, g.input("x", Shape([256], DType.F32))])
    assert evaluated(g, fed) is None
