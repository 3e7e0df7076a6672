"""One `com.microsoft` (or ONNX) node run by onnxruntime and by rlx, for node-level tests.

The oracle is onnxruntime itself: the contrib ops are its own, defined by its kernels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnxruntime as ort
from onnx import ValueInfoProto, helper, numpy_helper

from rlx.onnx import import_onnx
from rlx.runtime import Session

MS = "com.microsoft"


class Const:
    """An input given as an initializer (weights, scales, zero points)."""

    def __init__(self, value):
        self.value = np.asarray(value)


def one_node(op_type: str, inputs: Sequence, n_outputs: int = 1, domain: str = MS,
             onnx_opset: int = 17, unused: Sequence[int] = (), **attrs):
    """The model and the feeds: inputs are arrays (graph inputs), `Const`s (initializers)
    or None (omitted optional inputs)."""
    names, feeds, graph_inputs, inits = [], {}, [], []
    for i, x in enumerate(inputs):
        if x is None:
            names.append("")
            continue
        name = f"in{i}"
        names.append(name)
        if isinstance(x, Const):
            inits.append(numpy_helper.from_array(x.value, name))
        else:
            x = np.asarray(x)
            feeds[name] = x
            graph_inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape))
    outs = ["" if i in unused else f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op_type, names, outs, domain=domain, **attrs)
    graph = helper.make_graph([node], "g", graph_inputs,
                              [ValueInfoProto(name=o) for o in outs if o], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", onnx_opset),
                                                    helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model, feeds


def run_both(op_type: str, inputs: Sequence, n_outputs: int = 1, domain: str = MS,
             onnx_opset: int = 17, unused: Sequence[int] = (), **attrs,
             ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(rlx's outputs, onnxruntime's outputs) of one node (outputs in `unused` not asked)."""
    model, feeds = one_node(op_type, inputs, n_outputs, domain, onnx_opset, unused, **attrs)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    oracle = ort.InferenceSession(model.SerializeToString(), options,
                                  providers=["CPUExecutionProvider"])
    want = oracle.run(None, feeds)
    graph, bindings = import_onnx(model)
    from rlx import BakeOptions, BakeProfile, bake

    file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))
    got = Session().compile(file.into_runtime_graph()).run(feeds)
    return list(got), list(want)


def assert_same(got: Sequence[np.ndarray], want: Sequence[np.ndarray], atol: float = 0.0):
    """Integer outputs equal bit for bit; float outputs within `atol`."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        if w.dtype.kind in "iub" or atol == 0.0:
            if not np.array_equal(g, w):
                diff = np.abs(g.astype(np.float64) - w)
                raise AssertionError(f"{int((diff > 0).sum())} of {w.size} differ, by up to "
                                     f"{diff.max()}")
        else:
            np.testing.assert_allclose(g, w, rtol=0, atol=atol)
