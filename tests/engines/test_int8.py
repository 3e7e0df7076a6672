"""An int8 model (quantised by onnxruntime's `quantize_dynamic`) through rlx's onnxruntime
and OpenVINO engines: they receive the integer ops, so each computes what it computes on
the original ONNX file."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import openvino as ov
import pytest

import rlx
from rlx import BakeOptions, BakeProfile, bake
from rlx.artifact import write_rlx
from rlx.onnx import import_onnx
from tests.int8_models import mlp, quantized


@pytest.fixture(scope="module")
def int8_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("int8")
    path = quantized(mlp(), folder, "mlp", per_channel=True)
    graph, bindings = import_onnx(path)
    file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))
    write_rlx(folder / "mlp.rlx", file)
    feeds = {"x": np.random.default_rng(4).standard_normal((3, 256)).astype(np.float32)}
    return path, folder / "mlp.rlx", feeds


def test_onnxruntime_engine_is_bit_exact(int8_model):
    path, rlx_path, feeds = int8_model
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = rlx.load(rlx_path, engine="onnxruntime").run(feeds)
    assert np.array_equal(got[0], want[0])


def test_openvino_engine_matches_openvino_on_the_original(int8_model):
    path, rlx_path, feeds = int8_model
    config = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"}
    compiled = ov.Core().compile_model(str(path), "CPU", config)
    want = compiled.create_infer_request().infer(feeds)[compiled.outputs[0]]
    got = rlx.load(rlx_path, engine="openvino").run(feeds)
    np.testing.assert_allclose(got[0], want, atol=1e-4)
