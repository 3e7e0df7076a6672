"""The fast profile on a CRNN (Convs with BatchNorm exported as Mul + Add, then an LSTM
unrolled into cells sharing their weights), against onnxruntime f32 on the original."""

from __future__ import annotations

import collections

import numpy as np
import onnxruntime as ort
import pytest

import rlx
from rlx import BakeOptions, bake
from rlx.artifact import read_rlx, write_rlx
from rlx.ir.dtype import DType
from rlx.ir.ops.elementwise import Activation, Unary
from rlx.ir.ops.quant import DequantizeLinear, QuantizeLinear
from rlx.ir.ops.sources import Constant
from rlx.ir.ops.windows import Conv
from rlx.onnx import import_onnx
from tests.baking.fast_models import line_feeds, onnxruntime_kernels, small_crnn


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    """(the ONNX file, the fast file, the bake's report)."""
    folder = tmp_path_factory.mktemp("crnn")
    path = small_crnn(folder)
    graph, bindings = import_onnx(path)
    file, report = bake(graph, bindings, BakeOptions.from_profile("fast").replace(
        calibration=line_feeds(1, 4)))
    write_rlx(folder / "crnn.rlx", file)
    return path, folder / "crnn.rlx", report


def _cosine(a, b) -> float:
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_every_engine_meets_the_targets_on_held_out_lines(baked):
    path, out, report = baked
    # a Conv, the input projection of all 8 steps batched into one (batch_step_products),
    # the 7 cells' recurrent Gemms and the head
    assert report.precision.counts["int8"] >= 10
    reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = line_feeds(90, 4)
    wants = [reference.run(None, f)[0] for f in feeds]
    for engine in ("numpy", "onnxruntime", "openvino"):
        model = rlx.load(out, engine=engine, precision="fast")
        same = []
        for feed, want in zip(feeds, wants):
            got = model.run(feed)[0]
            assert _cosine(np.exp(want), np.exp(got)) >= 0.999  # the probabilities
            assert _cosine(want, got) >= 0.999
            same.append(np.argmax(want, -1) == np.argmax(got, -1))
        assert np.mean(same) >= 0.99, engine


def test_a_batchnorm_written_as_mul_and_add_folds_and_the_conv_quantises_after_relu(baked):
    graph = read_rlx(baked[1]).into_runtime_graph()
    users = graph.users()
    convs = [n for n in graph.nodes() if isinstance(n.op, Conv)]
    assert len(convs) == 2 and all(len(n.inputs) == 3 for n in convs)  # W*s, b*s + t
    for conv in convs:
        (reader,) = (graph.node(u) for u in users[conv.id])
        assert isinstance(reader.op, Unary) and reader.op.kind is Activation.RELU
    (int8_conv,) = (n for n in convs if isinstance(graph.node(n.inputs[1]).op, DequantizeLinear))
    relu = users[int8_conv.id][0]
    assert [type(graph.node(u).op) for u in users[relu]] == [QuantizeLinear]


def test_a_weight_every_cell_reads_is_stored_once_as_int8(baked):
    graph = read_rlx(baked[1]).into_runtime_graph()
    shapes = collections.Counter(
        (n.tensor_shape.dims, n.tensor_shape.dtype) for n in graph.nodes()
        if isinstance(n.op, Constant) and n.tensor_shape.rank == 2)
    assert shapes[((512, 256), DType.I8)] == 1  # the input weight (8 steps, batched)
    assert shapes[((64, 256), DType.I8)] == 1  # the recurrent weight, read by 7
    assert not any(dims in ((512, 256), (64, 256)) and dtype is DType.F32
                   for dims, dtype in shapes)


def test_onnxruntime_runs_every_int8_node_in_an_int8_kernel(baked, tmp_path):
    kinds = onnxruntime_kernels(baked[1], tmp_path)
    # the Convs' outputs are quantised; every MatMul's stays f32, its bias Add beside it
    int8_kernels = kinds["QLinearConv"] + kinds["MatMulIntegerToFloat"]
    assert int8_kernels == baked[2].precision.counts["int8"]
    assert kinds["MatMulIntegerToFloat"] >= 2 and not kinds["QGemm"]
    assert not kinds["Gemm"] and not kinds["MatMul"]
