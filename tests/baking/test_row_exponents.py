"""Row exponents: convolutions whose output channels' ranges lie far apart (BatchNorm folded
in) keep every channel through Q8_0.

References are independent of rlx's codecs: the exponents from Python's math.frexp, the
blocks from the `gguf` package, the convolutions from onnxruntime on the decoded weights.
"""

from __future__ import annotations

import math

import gguf
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from gguf.quants import dequantize, quantize
from onnx import TensorProto, helper, numpy_helper

import rlx
from rlx import BakeOptions, bake
from rlx.artifact import write_rlx
from rlx.ir import Constant, DecodeWeight, DType
from rlx.onnx import import_onnx
from rlx.runtime import Session

Q8 = gguf.GGMLQuantizationType.Q8_0


def _spread(rng: np.random.Generator, channels: int) -> np.ndarray:
    """Per-channel gains log-uniform over 1e-3..1e2, as folded BatchNorm leaves them."""
    return np.exp(rng.uniform(np.log(1e-3), np.log(1e2), channels))


def _gguf_one_row(stored: np.ndarray) -> np.ndarray:
    """What gguf decodes from Q8_0 of `stored` as one row, zero-padded to 32 at its end."""
    flat = stored.astype(np.float32).reshape(1, -1)
    padded = np.pad(flat, ((0, 0), (0, -flat.size % 32)))
    return dequantize(quantize(padded, Q8), Q8)[:, :flat.size].reshape(stored.shape)


def _with_exponents(stored: np.ndarray) -> np.ndarray:
    """The `[C, L]` rows divided by 2^e (e from math.frexp of each row's largest |value|),
    stored as one Q8_0 row by gguf, decoded and multiplied back."""
    exps = np.array([math.frexp(float(np.abs(r).max()))[1] for r in stored], np.float64)
    scale = 2.0 ** exps[:, None]
    return (_gguf_one_row((stored / scale).astype(np.float32)) * scale).astype(np.float32)


def _row_errors(want: np.ndarray, got: np.ndarray) -> np.ndarray:
    return np.linalg.norm(want - got, axis=1) / np.linalg.norm(want, axis=1)


def _depthwise(rng):
    w = rng.standard_normal((64, 1, 3, 3)) * _spread(rng, 64)[:, None, None, None]
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=64, pads=[1, 1, 1, 1])
    return node, w.astype(np.float32), [1, 64, 8, 8], [1, 64, 8, 8], (0, 1, 2, 3)


def _pointwise_transpose(rng):
    # ConvTranspose [C_in, C_out, kH, kW]: stored transposed, a row per output channel
    w = rng.standard_normal((16, 48, 1, 1)) * _spread(rng, 48)[None, :, None, None]
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"])
    return node, w.astype(np.float32), [1, 16, 5, 5], [1, 48, 5, 5], (1, 0, 2, 3)


def _model(node, w, x_shape, y_shape) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node], "spread", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ort(model: onnx.ModelProto, feeds: dict) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize("case", [_depthwise, _pointwise_transpose],
                         ids=["depthwise-conv", "conv-transpose"])
def test_spread_channels_are_stored_with_row_exponents(case, tmp_path):
    rng = np.random.default_rng(7)
    node, w, x_shape, y_shape, perm = case(rng)
    model = _model(node, w, x_shape, y_shape)
    onnx.save(model, tmp_path / "m.onnx")
    file, _ = bake(*import_onnx(tmp_path / "m.onnx"), BakeOptions.from_profile("size"))

    stored = w.transpose(perm).reshape(w.shape[perm[0]], -1)
    plain, want = _gguf_one_row(stored), _with_exponents(stored)
    # as one plain Q8_0 row the small channels round to zero; with exponents none is lost
    assert _row_errors(stored, plain).max() > 0.5
    assert _row_errors(stored, want).max() < 0.02
    (decode,) = [n for n in file.graph.nodes() if isinstance(n.op, DecodeWeight)]
    exponents = file.graph.node(decode.inputs[1])
    assert isinstance(exponents.op, Constant) and exponents.tensor_shape.dtype is DType.I8
    assert exponents.tensor_shape.dims == (len(stored),)
    assert file.weight("w").encoding == "gguf_q8_0"
    assert file.weight("w").nbytes == -(-stored.size // 32) * 34
    decoded = want.reshape(tuple(w.shape[p] for p in perm)).transpose(np.argsort(perm))
    np.testing.assert_array_equal(file.tensor("w"), decoded)

    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    reference = _ort(_model(node, decoded, x_shape, y_shape), feeds)
    (out,) = Session().compile(file.into_runtime_graph()).run(feeds)
    np.testing.assert_allclose(out, reference, rtol=1e-5, atol=1e-5 * np.abs(reference).max())
    write_rlx(tmp_path / "m.rlx", file)  # exported to ONNX with the decoded weight
    (exported,) = rlx.load(tmp_path / "m.rlx", engine="onnxruntime").run(feeds)
    np.testing.assert_allclose(exported, reference, rtol=1e-5,
                               atol=1e-5 * np.abs(reference).max())


def test_channels_of_one_range_need_no_exponents(tmp_path):
    """Rows of one range lose nothing to their neighbours: plain Q8_0, no exponents."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((64, 1, 3, 3)).astype(np.float32)
    w /= np.abs(w).reshape(64, -1).max(axis=1)[:, None, None, None]  # every row's max is 1
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=64, pads=[1, 1, 1, 1])
    onnx.save(_model(node, w, [1, 64, 8, 8], [1, 64, 8, 8]), tmp_path / "m.onnx")
    file, report = bake(*import_onnx(tmp_path / "m.onnx"), BakeOptions.from_profile("size"))
    (decode,) = [n for n in file.graph.nodes() if isinstance(n.op, DecodeWeight)]
    assert len(decode.inputs) == 1
    np.testing.assert_array_equal(file.tensor("w"), _gguf_one_row(w))
    (row,) = report.accuracy.tensors
    assert row.encoding == "gguf_q8_0" and row.packed_bytes == 18 * 34
