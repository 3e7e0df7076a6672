"""Shared test helpers: run one op through rlx, and the same op through an independent oracle."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rlx.ir import DType, Graph, Shape, verify
from rlx.ir.ops.base import Op
from rlx.runtime import Session


def build_op_graph(op: Op, inputs: Sequence[np.ndarray], *, constant: Sequence[bool] = ()):
    """A graph applying `op` to fresh inputs (or constants where `constant[i]` is true)."""
    g = Graph(f"one_{type(op).__name__}")
    ids, feeds = [], {}
    for i, value in enumerate(inputs):
        value = np.asarray(value)
        if i < len(constant) and constant[i]:
            ids.append(g.constant(value, name=f"c{i}"))
        else:
            ids.append(g.input(f"in{i}", Shape(value.shape, DType.from_numpy(value.dtype))))
            feeds[f"in{i}"] = value
    node = g.add_node(op, ids)
    outs = g.unpack(node) if g.node(node).is_tuple else [node]
    g.set_outputs(outs)
    verify(g)
    return g, feeds


def run_op(op: Op, inputs: Sequence[np.ndarray], *, constant: Sequence[bool] = ()) -> list:
    """Run `op` on `inputs`; assert each output's real shape/dtype is what inference said."""
    g, feeds = build_op_graph(op, inputs, constant=constant)
    outs = Session().compile(g).run(feeds)
    for o, value in zip(g.outputs, outs):
        declared = g.node(o).shape
        assert isinstance(value, np.ndarray), f"{type(op).__name__} returned {type(value)}"
        assert value.dtype == declared.dtype.numpy, (value.dtype, declared)
        assert value.ndim == declared.rank, (value.shape, declared)
        for got, want in zip(value.shape, declared.dims):
            assert isinstance(want, str) or got == want, (value.shape, declared)
    return outs


def onnx_reference(op_type: str, inputs: Sequence[np.ndarray], n_outputs: int = 1,
                   opset: int = 21, **attrs) -> list[np.ndarray]:
    """Outputs of ONNX's reference evaluator for one node (an oracle rlx did not write).

    An input given as None is an omitted optional input.
    """
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs) if x is not None],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: x for n, x in zip(names, inputs) if x is not None}
    return list(ReferenceEvaluator(model).run(None, feeds))
