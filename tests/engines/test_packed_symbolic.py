"""Size-profile files whose packed weights meet symbolic activation dims run on every engine.

The graph reshapes a [1, C, H, width] map into [1, width, C * H] with a target whose last
entry is fed at run time (`cols`, -1: no shape inference can know K, as in recognisers whose
reshapes read tensors), then a MatMul; baked with the size profile its weight becomes a Q8_0
DequantMatMul whose K only the weight fixes.
Oracles: onnxruntime on the original ONNX model (bounds of Q8_0 rounding) and rlx's numpy
engine on the same file (the same decoded weights: float rounding only).
"""

from __future__ import annotations

import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import rlx
from rlx import BakeOptions, bake
from rlx.artifact import write_rlx
from rlx.engines import auto
from rlx.errors import ExportError
from rlx.ir import DequantMatMul
from rlx.onnx import import_onnx
from tests.engines.conftest import ENGINES, require

RNG = np.random.default_rng(5)
CHANNELS, HEIGHT, N = 64, 4, 96


def _model() -> onnx.ModelProto:
    k = CHANNELS * HEIGHT
    ints = {"zero": [0], "two": [2]}
    inits = [numpy_helper.from_array((RNG.standard_normal((k, N)) / 16).astype(np.float32),
                                     "w"),
             numpy_helper.from_array(RNG.standard_normal(N).astype(np.float32), "b"),
             *(numpy_helper.from_array(np.array(v, np.int64), name) for name, v in ints.items())]
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
             helper.make_node("Shape", ["t"], ["shape"]),
             helper.make_node("Slice", ["shape", "zero", "two"], ["head"]),
             helper.make_node("Concat", ["head", "cols"], ["target"], axis=0),
             helper.make_node("Reshape", ["t", "target"], ["rows"]),
             helper.make_node("MatMul", ["rows", "w"], ["product"]),
             helper.make_node("Add", ["product", "b"], ["y"])]
    graph = helper.make_graph(
        nodes, "symbolic_k",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, CHANNELS, HEIGHT, "width"]),
         helper.make_tensor_value_info("cols", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    folder = tmp_path_factory.mktemp("packed")
    model = _model()
    onnx.save(model, folder / "m.onnx")
    graph, bindings = import_onnx(folder / "m.onnx")
    file, _ = bake(graph, bindings, BakeOptions.from_profile("size"))
    packed = [n for n in file.graph.nodes() if isinstance(n.op, DequantMatMul)]
    assert len(packed) == 1
    assert not isinstance(file.graph.node(packed[0].inputs[0]).tensor_shape.dims[-1], int)
    write_rlx(folder / "m.rlx", file)
    return model, folder / "m.rlx"


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.mark.parametrize("engine", ENGINES)
def test_runs_at_every_width(baked, engine):
    require(engine)
    model, path = baked
    original = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"])
    runner = rlx.load(path, engine=engine, precision="exact")
    reference = rlx.load(path, engine="numpy")
    for width in (7, 24):
        feeds = {"x": RNG.standard_normal((1, CHANNELS, HEIGHT, width)).astype(np.float32),
                 "cols": np.array([-1], np.int64)}
        (got,) = runner.run(feeds)
        (want,) = original.run(None, feeds)
        assert got.shape == (1, width, N)
        assert _cosine(got, want) >= 0.9999
        assert np.abs(got - want).max() <= 0.02 * np.abs(want).max()
        np.testing.assert_allclose(got, reference.run(feeds)[0], rtol=1e-4, atol=1e-4)


def test_auto_warns_why_an_engine_cannot_take_the_file(baked, tmp_path, monkeypatch, caplog):
    _, path = baked
    real = auto._build

    def refusing(name, *args, **kwargs):
        if name != "numpy":
            raise ExportError(f"{name} refuses this file")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(auto, "_build", refusing)
    for _ in range(2):  # the measuring load, then the one reading the cache
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="rlx.engines"):
            assert rlx.load(path, cache_dir=tmp_path / "cache").engine == "numpy"
        warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("onnxruntime" in m and "refuses this file" in m for m in warned)
