"""onnxruntime's QOperator `com.microsoft` ops are kept whole (`Composite`): every engine
gives plain onnxruntime's bits, onnxruntime gets the nodes back (its fused int8 kernels),
OpenVINO (which has no com.microsoft ops) gets their bodies, and the file keeps them."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import rlx
from rlx import BakeOptions, BakeProfile, bake
from rlx.artifact import write_rlx
from rlx.ir import Composite, graph_from_json, graph_to_json
from rlx.onnx import import_onnx
from rlx.onnx.export import build_onnx
from rlx.runtime import Session
from rlx.runtime.inline import inline_composites
from tests.engines.conftest import require
from tests.frontends.contrib.oracle import Const, one_node
from tests.frontends.contrib.test_quant import q, scale, weights, zero
from tests.int8_models import qoperator_cnn, quantized_static

MS = "com.microsoft"
KEPT = {"QLinearSigmoid", "QLinearMul", "QLinearLeakyRelu", "QLinearAdd", "QLinearConcat",
        "QLinearAveragePool", "QLinearGlobalAveragePool", "QGemm", "QLinearSoftmax"}
DYNAMIC = {"MatMulIntegerToFloat", "DynamicQuantizeMatMul", "QAttention"}  # float outputs
# QAttention's softmax and float products are MLAS's (its exp, its summation order) on
# onnxruntime, numpy's on the numpy engine: float32 ulps apart, never bits.
_FLOAT_ATTENTION = {"QAttention": 1e-6}


def _feeds(seed: int, batch: int = 2) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)}


@pytest.fixture(scope="module")
def qoperator(tmp_path_factory) -> tuple[Path, Path, object]:
    """(the QOperator model, its exact .rlx, the baked file)."""
    folder = tmp_path_factory.mktemp("qop")
    calibration = [_feeds(seed, 1) for seed in range(11, 15)]
    path = quantized_static(qoperator_cnn(), folder, "qop", calibration, qdq=False)
    graph, bindings = import_onnx(path)
    file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))
    rlx_path = folder / "qop.rlx"
    write_rlx(rlx_path, file)
    return path, rlx_path, file


def _plain_onnxruntime(model, feeds) -> np.ndarray:
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _microsoft_ops(model: onnx.ModelProto) -> collections.Counter:
    return collections.Counter(n.op_type for n in model.graph.node if n.domain == MS)


def test_the_model_has_every_kept_op(qoperator):
    path, _, file = qoperator
    assert set(_microsoft_ops(onnx.load(path))) == KEPT
    kept = {n.op.op_type for n in file.into_runtime_graph().nodes()
            if isinstance(n.op, Composite)}
    assert kept == KEPT


@pytest.mark.parametrize("engine", ["numpy", "onnxruntime"])
def test_the_engines_give_plain_onnxruntimes_bits(qoperator, engine):
    path, rlx_path, _ = qoperator
    model = rlx.load(rlx_path, engine=engine, threads=1)
    for seed in range(3):
        feeds = _feeds(seed)
        np.testing.assert_array_equal(model.run(feeds)[0], _plain_onnxruntime(path, feeds))


def test_openvino_runs_the_bodies_to_plain_onnxruntimes_bits(qoperator):
    """OpenVINO runs the inlined bodies; tables computed at import (no division by a
    constant scale left for it to turn into a product with the reciprocal) give the bits."""
    require("openvino")
    path, rlx_path, _ = qoperator
    model = rlx.load(rlx_path, engine="openvino", threads=1)
    for seed in range(3):
        feeds = _feeds(seed)
        np.testing.assert_array_equal(model.run(feeds)[0], _plain_onnxruntime(path, feeds))


def test_the_numpy_engine_splices_the_bodies_in(qoperator):
    """Spliced in (no subgraph call per node), the bodies compute the same bits."""
    path, _, file = qoperator
    graph = file.into_runtime_graph()
    flat = inline_composites(graph)
    assert not any(isinstance(n.op, Composite) for n in flat.nodes())
    assert inline_composites(flat) is flat
    feeds = _feeds(6)
    np.testing.assert_array_equal(Session().compile(flat).run(feeds)[0],
                                  Session().compile(graph).run(feeds)[0])
    np.testing.assert_array_equal(Session().compile(flat).run(feeds)[0],
                                  _plain_onnxruntime(path, feeds))


def test_onnxruntime_gets_the_nodes_back_and_openvino_their_bodies(qoperator):
    path, _, file = qoperator
    graph = file.into_runtime_graph()
    as_written = build_onnx(graph).model
    assert _microsoft_ops(as_written) == _microsoft_ops(onnx.load(path))
    inlined = build_onnx(graph, domains=()).model
    assert not _microsoft_ops(inlined)
    assert all(o.domain in ("", "ai.onnx") for o in inlined.opset_import)
    onnx.checker.check_model(inlined, full_check=True)
    feeds = _feeds(5)
    want = _plain_onnxruntime(path, feeds)
    for model in (as_written, inlined):  # both forms compute the model, here in onnxruntime
        np.testing.assert_array_equal(_plain_onnxruntime(model, feeds), want)


def test_the_graph_json_keeps_the_composites(qoperator):
    path, _, file = qoperator
    graph = file.into_runtime_graph()
    again = graph_from_json(graph_to_json(graph))
    before = [n.op for n in graph.nodes() if isinstance(n.op, Composite)]
    after = [n.op for n in again.nodes() if isinstance(n.op, Composite)]
    assert [(op.domain, op.op_type, op.attributes, op.slots) for op in after] == \
        [(op.domain, op.op_type, op.attributes, op.slots) for op in before]
    feeds = _feeds(7)
    np.testing.assert_array_equal(Session().compile(again).run(feeds)[0],
                                  _plain_onnxruntime(path, feeds))


def _node_cases(dtype) -> dict[str, tuple[list, dict]]:
    """One node of each kept op, with `dtype` activations (onnxruntime's test shapes)."""
    z = 128 if dtype == np.uint8 else 0
    every = np.arange(256).astype(np.uint8).view(dtype).reshape(4, 64)
    binary = [q((2, 3, 4, 5), dtype, 1), scale(0.0173), zero(z, dtype), q((5,), dtype, 2),
              scale(0.0291), zero(z - 7, dtype)]
    pool = [q((1, 3, 7, 6), dtype, 1), scale(0.03), zero(z + 2, dtype), scale(0.021),
            zero(z - 7, dtype)]
    return {
        "QLinearAdd": (binary + [scale(0.031), zero(z + 5, dtype)], {}),
        "QLinearMul": (binary + [scale(0.21), zero(z + 5, dtype)], {}),
        "QLinearSigmoid": ([every, scale(0.05), zero(z, dtype), scale(1 / 255),
                            zero(z - 128, dtype)], {}),
        "QLinearLeakyRelu": ([every, scale(0.05), zero(z - 8, dtype), scale(0.04),
                              zero(z - 8, dtype)], {"alpha": 0.1}),
        "QLinearConcat": ([scale(0.02), zero(z, dtype), q((1, 4, 3), dtype, 1), scale(0.02),
                           zero(z, dtype), every.reshape(1, 4, 64), scale(0.035),
                           zero(z - 10, dtype)], {"axis": 2}),
        "QLinearGlobalAveragePool": (pool, {"channels_last": 0}),
        "QLinearAveragePool": (pool, {"kernel_shape": [3, 3], "strides": [2, 2],
                                      "pads": [1, 1, 1, 1]}),
        # 128 rows: OpenVINO 2026.4 miscomputes an int32 ReduceMax then Sub from 128 rows on
        "QLinearSoftmax": ([q((16, 8, 64), dtype, 1), scale(0.23951402), zero(z + 20, dtype),
                            scale(1 / 256), zero(z - 128, dtype)], {"opset": 13, "axis": -1}),
        "QGemm": ([q((4, 16), dtype, 1), scale(0.02), zero(z + 10, dtype),
                   Const(weights((6, 16), np.int8, 2)), scale(0.005), zero(0, np.int8),
                   Const(np.arange(-3, 3).astype(np.int32) * 500), scale(0.07),
                   zero(z - 3, dtype)], {"transB": 1, "alpha": 0.9}),
    }


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op_type", sorted(KEPT | DYNAMIC))
def test_each_op_reaches_onnxruntime_as_itself(tmp_path, op_type, dtype):
    inputs, attrs = _every_case(op_type, dtype)
    model, feeds = one_node(op_type, inputs, **attrs)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    graph, bindings = import_onnx(model)
    file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))
    exported = build_onnx(file.into_runtime_graph()).model
    assert [(n.domain, n.op_type) for n in exported.graph.node] == [(MS, op_type)]
    write_rlx(tmp_path / "node.rlx", file)
    got = rlx.load(tmp_path / "node.rlx", engine="onnxruntime").run(feeds)[0]
    np.testing.assert_array_equal(got, want)
    got = rlx.load(tmp_path / "node.rlx", engine="numpy").run(feeds)[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=_FLOAT_ATTENTION.get(op_type, 0.0))



@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op_type", sorted(DYNAMIC))
def test_openvino_runs_the_float_ops_bodies(tmp_path, op_type, dtype):
    """OpenVINO's export holds no com.microsoft node and computes the op within 1e-4."""
    require("openvino")
    inputs, attrs = _every_case(op_type, dtype)
    model, feeds = one_node(op_type, inputs, **attrs)
    want = _plain_onnxruntime(model, feeds)
    graph, bindings = import_onnx(model)
    file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))
    assert not _microsoft_ops(build_onnx(file.into_runtime_graph(), domains=()).model)
    write_rlx(tmp_path / "node.rlx", file)
    got = rlx.load(tmp_path / "node.rlx", engine="openvino", threads=1).run(feeds)[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op_type", sorted(KEPT))
def test_openvino_gives_plain_onnxruntimes_bits_for_each_op(tmp_path, op_type, dtype):
    """The bodies on OpenVINO, bit for bit: LeakyRelu and Concat's requantisation read
    tables (OpenVINO divided by a constant scale as a product with its reciprocal: 7 of the
    256 LeakyRelu codes moved a step on ties), Softmax's index is computed in float32."""
    require("openvino")
    inputs, attrs = _every_case(op_type, dtype)
    model, feeds = one_node(op_type, inputs, **attrs)
    graph, bindings = import_onnx(model)
    file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))
    write_rlx(tmp_path / "node.rlx", file)
    got = rlx.load(tmp_path / "node.rlx", engine="openvino", threads=1).run(feeds)[0]
    np.testing.assert_array_equal(got, _plain_onnxruntime(model, feeds))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_average_pool_adds_the_zero_point_before_rounding(tmp_path, dtype):
    """onnxruntime's QLinearAveragePool rounds avg / y_scale + y_zero (half to even): with
    an odd zero point a tie rounds the other way than round(avg / y_scale) + y_zero (13 of
    these 15,360 outputs did). OpenVINO divides by a constant y_scale as a product with its
    reciprocal (1 of them landed a step off on a tie): the body reads thresholds instead."""
    inputs, attrs = _every_case("QLinearAveragePool", dtype)
    inputs[0] = q((4, 16, 31, 30), dtype, 9)
    model, feeds = one_node("QLinearAveragePool", inputs, **attrs)
    want = _plain_onnxruntime(model, feeds)
    graph, bindings = import_onnx(model)
    file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))
    write_rlx(tmp_path / "pool.rlx", file)
    np.testing.assert_array_equal(rlx.load(tmp_path / "pool.rlx", engine="numpy").run(feeds)[0],
                                  want)
    require("openvino")
    got = rlx.load(tmp_path / "pool.rlx", engine="openvino", threads=1).run(feeds)[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("scales", [(0.03, 0.06), (0.07, 0.07)])
def test_average_pool_ties_on_every_engine(tmp_path, scales, dtype):
    """2x2 windows whose averages over y_scale fall on many halves: dividing by the constant
    y_scale as a product with its reciprocal put up to 860 of 32,768 (int8, 0.03 / 0.06)
    a step off on OpenVINO; the thresholds give onnxruntime's bits on every engine."""
    z = 128 if dtype == np.uint8 else 0
    inputs = [q((2, 16, 64, 64), dtype, 3), scale(scales[0]), zero(z + 1, dtype),
              scale(scales[1]), zero(z + 3, dtype)]
    model, feeds = one_node("QLinearAveragePool", inputs, kernel_shape=[2, 2], strides=[2, 2])
    want = _plain_onnxruntime(model, feeds)
    graph, bindings = import_onnx(model)
    file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))
    write_rlx(tmp_path / "pool.rlx", file)
    require("openvino")
    for engine in ("numpy", "onnxruntime", "openvino"):
        got = rlx.load(tmp_path / "pool.rlx", engine=engine, threads=1).run(feeds)[0]
        np.testing.assert_array_equal(got, want, err_msg=engine)


def _dynamic_cases(dtype) -> dict[str, tuple[list, dict]]:
    """One node of each kept op with float outputs, its 8-bit operands of type `dtype` where
    onnxruntime has a kernel for it (quantize_dynamic's forms: constant B, per column)."""
    rng = np.random.default_rng(4)
    b_zero = Const(np.arange(5).astype(dtype))
    mask = np.ones((2, 4), np.int32)
    mask[1, 2:] = 0
    return {
        "MatMulIntegerToFloat": ([q((2, 3, 8), dtype, 1), Const(weights((8, 5), dtype, 2)),
                                  scale(0.02), Const((np.arange(5) * 0.001 + 0.01).astype(
                                      np.float32)), zero(7, dtype), b_zero,
                                  Const(np.arange(5, dtype=np.float32))], {}),
        "DynamicQuantizeMatMul": ([(rng.standard_normal((3, 16)) * 2).astype(np.float32),
                                   Const(weights((16, 8), dtype, 2)),
                                   Const((np.arange(8) * 0.001 + 0.01).astype(np.float32)),
                                   Const(np.full(8, 3, dtype)),
                                   Const(np.arange(8, dtype=np.float32))], {}),
        "QAttention": ([q((2, 4, 8), np.uint8, 1), Const(weights((8, 24), dtype, 2)),
                        Const(rng.standard_normal(24).astype(np.float32)), scale(0.02),
                        scale(0.01), mask, zero(128), zero(0 if dtype == np.int8 else 128, dtype)],
                       {"num_heads": 2}),
    }


def _every_case(op_type: str, dtype) -> tuple[list, dict]:
    cases = _dynamic_cases(dtype) if op_type in DYNAMIC else _node_cases(dtype)
    return cases[op_type]
