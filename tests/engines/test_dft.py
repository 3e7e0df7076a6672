"""ONNX DFT of a static length: rlx's DFT op, through import -> bake -> `rlx.load`.

Oracles: onnx.reference on the same model (the numpy engine runs the FFT as it does, in
the signal's precision: within float32 rounding of it) and numpy's float64 FFT (the
onnxruntime and OpenVINO engines run the export's float64 cosine/sine products).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import rlx
from rlx import BakeOptions, bake
from rlx.artifact import write_rlx
from rlx.ir import DFT
from rlx.onnx import import_onnx
from tests.engines.conftest import ENGINES, require

RNG = np.random.default_rng(8)
SHAPE = (2, 12, 3)  # [batch, signal, channels] before the real/imaginary axis

# name: (parts of the signal, axis, length or None, inverse, onesided)
CASES = {
    "forward_complex": (2, 1, None, False, False),
    "forward_real_onesided_padded": (1, 1, 16, False, True),
    "inverse_complex_cropped": (2, 1, 9, True, False),
    "inverse_real_axis2": (1, -2, None, True, False),
    "irfft": (2, 1, 20, True, True),
    "forward_axis0": (2, 0, 5, False, False),
}


def _model(name: str) -> onnx.ModelProto:
    parts, axis, length, inverse, onesided = CASES[name]
    inits = [numpy_helper.from_array(np.array(axis, np.int64), "axis")]
    if length is not None:
        inits.append(numpy_helper.from_array(np.array(length, np.int64), "length"))
    node = helper.make_node("DFT", ["x", "length" if length else "", "axis"], ["y"],
                            inverse=int(inverse), onesided=int(onesided))
    graph = helper.make_graph(
        [node], name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [*SHAPE, parts])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _float64_truth(name: str, x: np.ndarray) -> np.ndarray:
    parts, axis, length, inverse, onesided = CASES[name]
    wide = x.astype(np.float64)
    signal = wide[..., 0] if parts == 1 else wide[..., 0] + 1j * wide[..., 1]
    axis %= x.ndim
    if inverse and onesided:
        return np.fft.irfft(signal, length, axis)[..., None]
    y = (np.fft.ifft if inverse else np.fft.fft)(signal, length, axis)
    if onesided:
        y = y.take(range(y.shape[axis] // 2 + 1), axis)
    return np.stack([y.real, y.imag], -1)


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dft")
    files = {}
    for name in CASES:
        graph, bindings = import_onnx(_model(name))
        assert any(isinstance(n.op, DFT) for n in graph.nodes())
        file, _ = bake(graph, bindings, BakeOptions.from_profile("exact"))
        write_rlx(folder / f"{name}.rlx", file)
        files[name] = folder / f"{name}.rlx"
    return files


@pytest.mark.parametrize("name", sorted(CASES))
def test_numpy_engine_computes_as_the_reference(baked, name):
    x = RNG.standard_normal((*SHAPE, CASES[name][0])).astype(np.float32)
    (want,) = ReferenceEvaluator(_model(name)).run(None, {"x": x})
    (got,) = rlx.load(baked[name], engine="numpy").run({"x": x})
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-7 * np.abs(want).max())


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_engine_is_within_float32_rounding_of_the_exact_transform(baked, name, engine):
    require(engine)
    x = RNG.standard_normal((*SHAPE, CASES[name][0])).astype(np.float32)
    want = _float64_truth(name, x)
    (got,) = rlx.load(baked[name], engine=engine, precision="exact").run({"x": x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * np.abs(want).max())


def test_infer_refuses_the_real_imaginary_axis():
    from rlx.errors import ShapeError
    from rlx.ir import DType, Graph, Shape

    g = Graph("dft")
    x = g.input("x", Shape((4, 2), DType.F32))
    with pytest.raises(ShapeError, match="real/imaginary axis"):
        g.add_node(DFT(axis=-1, length=4), [x])
