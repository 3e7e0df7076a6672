"""rlx.export_onnx: a checked, standard ONNX model onnxruntime runs with the same outputs
(op coverage is the conformance suite through the onnxruntime engine; this file covers the
export's own rules: names, packed-weight forms, external data, errors, lazy imports)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import rlx
from rlx.artifact import read_rlx, write_rlx
from rlx.codecs import Encoding
from rlx.errors import ExportError
from rlx.ir import DType, Graph, Shape
from rlx.ir.ops.elementwise import Cast
from rlx.onnx.export import EXPORT_OPSET, ExportSummary, export_onnx
from tests.engines.conftest import write_mlp
from tests.engines.test_model import _packed_file


def _run(model: onnx.ModelProto, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def test_export_keeps_names_and_runs(tmp_path):
    mlp = write_mlp(tmp_path / "mlp.rlx")
    model = rlx.export_onnx(read_rlx(mlp.path))
    onnx.checker.check_model(model, full_check=True)
    assert {o.domain: o.version for o in model.opset_import}[""] == EXPORT_OPSET >= 17
    assert [i.name for i in model.graph.input] == ["x"]
    assert [o.name for o in model.graph.output][1] == "probs"
    assert any(n.name == "probs" and n.op_type == "Softmax" for n in model.graph.node)
    x = np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)
    got = _run(model, {"x": x})
    for g, e in zip(got, mlp.oracle(x)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


def test_weight_names_come_from_the_weight_table(tmp_path):
    from rlx import BakeOptions, BakeProfile, bake
    from tests.cli.conftest import mlp_graph, mlp_weights  # noqa: F401 - the reference MLP

    baked, _ = bake(mlp_graph(), mlp_weights(), BakeOptions.from_profile(BakeProfile.FOLD))
    write_rlx(tmp_path / "m.rlx", baked)
    model = export_onnx(read_rlx(tmp_path / "m.rlx"))
    table = {w.name for w in read_rlx(tmp_path / "m.rlx").weights}
    assert {t.name for t in model.graph.initializer if len(t.raw_data) >= 1024} <= table


@pytest.mark.parametrize("scheme", [Encoding.GGUF_Q8_0, Encoding.GGUF_TQ2_0])
@pytest.mark.parametrize("form", ["nbits", "decompress", "dequantize"])
def test_packed_weight_forms(tmp_path, scheme, form):
    w = _packed_file(tmp_path / "p.rlx", scheme)
    summary = ExportSummary()
    model = export_onnx(read_rlx(tmp_path / "p.rlx"), packed=form, summary=summary)
    onnx.checker.check_model(model, full_check=True)
    (how,) = summary.packed
    assert {"nbits": "MatMulNBits", "decompress": "int8", "dequantize": "f32"}[form] in how
    assert any(n.op_type == "MatMulNBits" for n in model.graph.node) == (form == "nbits")
    x = np.random.default_rng(2).standard_normal((4, w.shape[0])).astype(np.float32)
    (got,) = _run(model, {"x": x})
    np.testing.assert_allclose(got, x.astype(np.float64) @ w, rtol=1e-3, atol=1e-3)


def test_path_writes_external_data_atomically(tmp_path):
    mlp = write_mlp(tmp_path / "mlp.rlx", k=256, hidden=512)
    out = tmp_path / "m.onnx"
    export_onnx(read_rlx(mlp.path), out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx", "m.onnx.data", "mlp.rlx"]
    assert out.stat().st_size < 64 * 1024 < (tmp_path / "m.onnx.data").stat().st_size
    onnx.checker.check_model(str(out), full_check=True)
    x = np.ones((1, 256), np.float32)
    got = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got[1], mlp.oracle(x)[1], rtol=1e-5, atol=1e-6)


def test_unexportable_ops_are_one_line_errors():
    g = Graph("bits")
    x = g.input("x", Shape((4,), DType.F32))
    g.set_outputs([g.add_node(Cast(DType.I32, bits=True), [x])])
    with pytest.raises(ExportError, match=r"%1 \(Cast\): a bit cast"):
        export_onnx(g)
    p = Graph("param")
    p.set_outputs([p.param("w", Shape((2,), DType.F32))])
    with pytest.raises(ExportError, match="param 'w' has no value"):
        export_onnx(p)
    with pytest.raises(ExportError, match="takes an RlxFile or a Graph"):
        export_onnx("model.rlx")


def test_exporting_does_not_import_the_importer():
    code = ("import sys\nfrom rlx.onnx import export_onnx\n"
            "print('rlx.onnx.importer' in sys.modules, 'onnx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "True"]


def test_running_on_numpy_never_imports_onnx(tmp_path):
    mlp = write_mlp(tmp_path / "mlp.rlx")
    code = ("import sys, numpy as np, rlx\n"
            f"m = rlx.load({str(mlp.path)!r}, engine='numpy')\n"
            "m.run({'x': np.ones((1, 64), np.float32)})\n"
            "print(any(k == 'onnx' or k.startswith(('onnx.', 'rlx.frontends', 'rlx.baking',"
            " 'rlx.passes')) for k in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False"]


@pytest.mark.parametrize("op_type", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize(("dims", "axis", "viewed"), [
    ([1, 16, 4, 21], 1, True),  # YOLO's DFL head in miniature: two axes follow
    (["n", 16, 4, "w"], 1, True),  # its first part copied (0), its last inferred (-1)
    ([2, 4, 16, "h", "w"], 2, True),
    (["n", "m", 16, 3, 5], 2, False),  # a symbolic first part of two axes: as it is
    ([2, "c", 3, 4], 1, False),  # the softmax axis itself symbolic: as it is
    ([4, 16, 21], 1, False),  # one axis follows: onnxruntime's own path is fast
    ([3, 7], -1, False),
])
def test_softmax_over_a_middle_axis_is_written_over_a_rank3_view(tmp_path, op_type, dims,
                                                                 axis, viewed):
    """onnxruntime's Softmax over an axis two or more axes follow is slow (export_ops); the
    rank-3 view gives the same values as onnxruntime on the original, bit for bit."""
    from onnx import TensorProto, helper

    from rlx.onnx import import_onnx
    from rlx.onnx.export import build_onnx

    graph = helper.make_graph(
        [helper.make_node(op_type, ["x"], ["y"], axis=axis)], "softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    original = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(original, tmp_path / "softmax.onnx")
    model = build_onnx(import_onnx(tmp_path / "softmax.onnx")[0]).model
    onnx.checker.check_model(model, full_check=True)
    (node,) = [n for n in model.graph.node if n.op_type == op_type]
    assert (onnx.helper.get_attribute_value(node.attribute[0]) == 1 and node.input[0] in {
        n.output[0] for n in model.graph.node if n.op_type == "Reshape"}) == viewed
    sizes = {"n": 2, "m": 3, "h": 5, "w": 6, "c": 16}
    x = np.random.default_rng(1).standard_normal(
        [sizes.get(d, d) for d in dims]).astype(np.float32) * 4
    (want,) = _run(original, {"x": x})
    (got,) = _run(model, {"x": x})
    np.testing.assert_array_equal(got, want)
