"""skip_zero_matmul: `x @ 0` (all-zero float constant weight) becomes a zero constant."""

from __future__ import annotations

import numpy as np
import pytest

from rlx.ir import DType, Graph, MatMul, Shape
from rlx.ir.ops.sources import Constant
from rlx.passes import skip_zero_matmul
from tests.passes.common import assert_same_results, checked, run


def _matmul(weight: np.ndarray, x_dims=(2, 4), left_constant=None) -> Graph:
    g = Graph("skip")
    dtype = DType.from_numpy(weight.dtype)
    if left_constant is None:
        x = g.input("x", Shape(x_dims, dtype))
    else:
        x = g.constant(left_constant, name="x")
    w = g.constant(weight, name="w")
    g.set_outputs([g.add_node(MatMul(), (x, w), name="y")])
    return g


def test_zero_weight_makes_the_output_a_named_constant():
    g = _matmul(np.zeros((4, 3), np.float32))  # the seed's test: [2,4] x [4,3]
    new, count = checked(skip_zero_matmul, g)
    assert count == 1
    out = new.node(new.outputs[0])
    assert isinstance(out.op, Constant) and out.name == "y"
    assert out.shape == Shape([2, 3], DType.F32)
    assert_same_results(g, new)


def test_negative_zeros_count_as_zero():
    new, count = checked(skip_zero_matmul, _matmul(np.full((4, 3), -0.0, np.float32)))
    assert count == 1


@pytest.mark.parametrize("graph", [
    _matmul(np.eye(4, 3, dtype=np.float32)),  # not all zeros
    _matmul(np.array([[0, 0, np.nan]] * 4, np.float32)),  # NaN is not zero
    _matmul(np.zeros((4, 3), np.int32)),  # integer matmul: not a float weight
    _matmul(np.zeros((4, 3), np.float32), x_dims=("batch", 4)),  # output shape not static
    _matmul(np.ones((4, 3), np.float32), left_constant=np.zeros((2, 4), np.float32)),  # left 0
])
def test_other_matmuls_are_left_alone(graph):
    new, count = checked(skip_zero_matmul, graph)
    assert new is graph and count == 0


def test_inf_in_x_is_the_documented_exception():
    g = _matmul(np.zeros((4, 3), np.float32))
    new, _ = skip_zero_matmul(g)
    x = np.full((2, 4), np.inf, np.float32)
    with np.errstate(invalid="ignore"):
        assert np.isnan(run(g, {"x": x})[0]).all()
    assert (run(new, {"x": x})[0] == 0).all()
