"""`rlx.onnx.ort_fusions.fold_integer_matmul_bias` on QDQ graphs written with onnx.helper:
where it applies, onnxruntime runs the rewritten model to the same outputs as the original
with one MatMulIntegerToFloat and no Add; where it must not (the MatMul's output read
twice, a computed bias, a per-row weight scale), the graph is left as it was."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rlx.onnx.ort_fusions import fold_integer_matmul_bias

K, N = 48, 48  # square, so that a per-row weight scale has N entries too


def _model(*, weight_axis: int = 1, per_column: bool = True, second_reader: bool = False,
           computed_bias: bool = False) -> onnx.ModelProto:
    """x [1, 8, K] -> QuantizeLinear -> DequantizeLinear; int8 W [K, N] -> DequantizeLinear;
    MatMul; + bias [N] -> y (and the MatMul's output as a second output: `second_reader`)."""
    rng = np.random.default_rng(0)
    scales = rng.uniform(0.002, 0.02, N if per_column else 1).astype(np.float32)
    consts = {"xs": np.array(0.03, np.float32), "xz": np.array(120, np.uint8),
              "w": rng.integers(-127, 128, (K, N)).astype(np.int8),
              "ws": scales if per_column else scales.reshape(()),
              "wz": np.zeros(N if per_column else (), np.int8),
              "b": rng.standard_normal(N).astype(np.float32)}
    n = helper.make_node
    nodes = [n("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             n("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             n("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=weight_axis),
             n("MatMul", ["xd", "wd"], ["m"])]
    bias = "b"
    if computed_bias:
        nodes.append(n("Neg", ["b"], ["nb"]))
        bias = "nb"
    nodes.append(n("Add", ["m", bias], ["y"]))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, N])]
    if second_reader:
        outputs.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, [1, 8, N]))
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, K])],
        outputs, [numpy_helper.from_array(a, k) for k, a in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"],
                                   disabled_optimizers=["MatMulAddFusion"])
    return session.run(None, {"x": x})


def _x(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 8, K)).astype(np.float32) * 2


@pytest.mark.parametrize("per_column", [True, False])
def test_a_quantised_matmul_takes_its_bias(per_column):
    original = _model(per_column=per_column)
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(original)
    assert fold_integer_matmul_bias(rewritten) == 1
    onnx.checker.check_model(rewritten)
    kinds = collections.Counter(node.op_type for node in rewritten.graph.node)
    assert kinds == {"QuantizeLinear": 1, "MatMulIntegerToFloat": 1}
    fused = rewritten.graph.node[-1]
    assert fused.domain == "com.microsoft" and fused.input[6] == "b"
    for seed in range(3):
        want, got = _run(original, _x(seed)), _run(rewritten, _x(seed))
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", [{"second_reader": True}, {"computed_bias": True},
                                  {"weight_axis": 0}])
def test_other_graphs_are_left_alone(case):
    model = _model(**case)
    before = model.SerializeToString()
    assert fold_integer_matmul_bias(model) == 0
    assert model.SerializeToString() == before
