"""auto_pad SAME_UPPER / SAME_LOWER over symbolic spatial sizes: the pads depend on the size
(stride above 1), so each engine works them out at run time from the actual input.

Oracle: onnxruntime on the original one-node ONNX model, at several sizes (odd and even) of
one baked file, through import -> bake -> `rlx.load` on every engine. A dilated Conv is
checked against onnx.reference: onnxruntime refuses dilation with SAME ("Dilation not
supported for AutoPadType::SAME_UPPER"), so the export pads first (a Pad of pads computed
from the input's shape) and convolves without auto_pad. Dilated SAME pooling is left out:
onnxruntime and onnx.reference both work its pads out from the undilated kernel (against
the spec's formula, which rlx follows) and still disagree on the values.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import rlx
from rlx import BakeOptions, bake
from rlx.artifact import write_rlx
from rlx.onnx import import_onnx
from tests.engines.conftest import ENGINES, require

RNG = np.random.default_rng(3)
SIZES = ((9, 12), (16, 7), (5, 5))
CHANNELS = 4

# (op, attributes, weight shape or None)
CASES = {
    "conv_upper_s2": ("Conv", {"kernel_shape": [3, 3], "strides": [2, 2]}, (6, CHANNELS, 3, 3)),
    "conv_lower_s3": ("Conv", {"kernel_shape": [3, 2], "strides": [3, 2]}, (6, CHANNELS, 3, 2)),
    "conv_upper_s1_even": ("Conv", {"kernel_shape": [4, 2]}, (3, CHANNELS, 4, 2)),
    "maxpool_upper_s2": ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2]}, None),
    "maxpool_lower_s3": ("MaxPool", {"kernel_shape": [3, 3], "strides": [3, 2]}, None),
    "avgpool_upper_s2": ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2]}, None),
    "avgpool_lower_include_pad": ("AveragePool", {"kernel_shape": [3, 4], "strides": [3, 2],
                                                  "count_include_pad": 1}, None),
    "lppool_upper_s2": ("LpPool", {"kernel_shape": [3, 2], "strides": [2, 2], "p": 2}, None),
    "convtranspose_upper_s2": ("ConvTranspose", {"kernel_shape": [3, 3], "strides": [2, 2]},
                               (CHANNELS, 5, 3, 3)),
    "convtranspose_lower_s3": ("ConvTranspose", {"kernel_shape": [4, 4], "strides": [3, 2]},
                               (CHANNELS, 2, 4, 4)),
}


DILATED = ("Conv", {"kernel_shape": [3, 2], "strides": [2, 3], "dilations": [2, 3]},
           (6, CHANNELS, 3, 2))


def _model(name: str, case: tuple | None = None) -> onnx.ModelProto:
    op, attrs, weight = case or CASES[name]
    auto = "SAME_LOWER" if "lower" in name else "SAME_UPPER"
    inputs, inits = ["x"], []
    if weight is not None:
        inputs.append("w")
        inits.append(numpy_helper.from_array(RNG.standard_normal(weight).astype(np.float32), "w"))
    node = helper.make_node(op, inputs, ["y"], auto_pad=auto, **attrs)
    graph = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CHANNELS, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    folder = tmp_path_factory.mktemp("same")
    files = {}
    for name in CASES:
        model = _model(name)
        onnx.save(model, folder / f"{name}.onnx")
        graph, bindings = import_onnx(folder / f"{name}.onnx")
        file, _ = bake(graph, bindings, BakeOptions.from_profile("exact"))
        write_rlx(folder / f"{name}.rlx", file)
        files[name] = (model, folder / f"{name}.rlx")
    return files


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_onnxruntime_at_every_size(baked, name, engine):
    require(engine)
    model, path = baked[name]
    oracle = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    runner = rlx.load(path, engine=engine, precision="exact")
    for h, w in SIZES:
        x = RNG.standard_normal((1, CHANNELS, h, w)).astype(np.float32)
        (want,) = oracle.run(None, {"x": x})
        (got,) = runner.run({"x": x})
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("auto", ["upper", "lower"])
def test_dilated_conv_matches_the_reference(tmp_path, auto, engine):
    require(engine)
    from onnx.reference import ReferenceEvaluator

    model = _model(f"conv_{auto}_dilated", DILATED)
    onnx.save(model, tmp_path / "m.onnx")
    graph, bindings = import_onnx(tmp_path / "m.onnx")
    file, _ = bake(graph, bindings, BakeOptions.from_profile("exact"))
    write_rlx(tmp_path / "m.rlx", file)
    runner = rlx.load(tmp_path / "m.rlx", engine=engine, precision="exact")
    oracle = ReferenceEvaluator(model)
    for h, w in SIZES:
        x = RNG.standard_normal((1, CHANNELS, h, w)).astype(np.float32)
        (want,) = oracle.run(None, {"x": x})
        (got,) = runner.run({"x": x})
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
