"""`load_graph`: a graph JSON file, a bundle folder, and the errors naming what is wrong."""

from __future__ import annotations

import json
import re

import pytest

from rlx.errors import ModelImportError
from rlx.frontends.graph_loader import load_graph
from rlx.ir import BinaryOp, Graph, Shape, graph_to_json


def _graph() -> Graph:
    g = Graph("mul")
    x = g.input("x", Shape([3]))
    w = g.param("w", Shape([3]))
    g.set_outputs([g.binary(BinaryOp.MUL, x, w)])
    return g


def _check_graph(graph: Graph) -> None:
    """The loaded graph is the one written, its param still waiting for weights."""
    assert graph_to_json(graph) == graph_to_json(_graph())
    assert [n.op.name for n in graph.params()] == ["w"]


def test_json_file(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(graph_to_json(_graph()))
    loaded = load_graph(str(path))
    _check_graph(loaded.graph)
    assert loaded.default_weights is None and loaded.source == f"json:{path}"


@pytest.mark.parametrize("graph_file", ["model.json", "graph.json"])
def test_bundle_dir_with_weights(tmp_path, graph_file):
    (tmp_path / graph_file).write_text(graph_to_json(_graph()))
    (tmp_path / "weights.safetensors").write_bytes(b"")
    loaded = load_graph(tmp_path)
    _check_graph(loaded.graph)
    assert loaded.default_weights == tmp_path / "weights.safetensors"
    assert loaded.source == f"bundle:{tmp_path}"


def test_bundle_prefers_model_json(tmp_path):
    (tmp_path / "model.json").write_text(graph_to_json(_graph()))
    (tmp_path / "graph.json").write_text("not json")
    assert load_graph(tmp_path).graph.name == "mul"


def test_bundle_dir_without_weights(tmp_path):
    (tmp_path / "model.json").write_text(graph_to_json(_graph()))
    assert load_graph(tmp_path).default_weights is None


def test_bundle_dir_missing_model_json(tmp_path):
    (tmp_path / "weights.safetensors").write_bytes(b"")
    with pytest.raises(ModelImportError,
                       match=f"bundle dir {re.escape(str(tmp_path))} missing model.json"):
        load_graph(tmp_path)


def test_neither_file_nor_dir(tmp_path):
    path = tmp_path / "missing.json"
    with pytest.raises(ModelImportError,
                       match=f"{re.escape(str(path))} is not a file or directory"):
        load_graph(path)


def _bad_shape() -> str:
    body = json.loads(graph_to_json(_graph()))
    body["graph"]["nodes"][-1]["shape"] = {"dims": [4], "dtype": "f32"}
    return json.dumps(body)


@pytest.mark.parametrize("text, match", [
    ("{not json", "not valid JSON"),
    (b"\xff\xfe\x00", "not valid JSON"),
    ('{"format": "rlx-graph", "version": 99, "graph": {}}', "version 99"),
    ('{"nodes": [{"op": "NoSuchOp", "shape": {"dims": [], "dtype": "f32"}}]}', "NoSuchOp"),
    ("[1, 2]", "JSON object"),
])
def test_parse_errors_name_the_file(tmp_path, text, match):
    path = tmp_path / "bad.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ModelImportError, match=f"{re.escape(str(path))}: .*{match}"):
        load_graph(path)


def test_inconsistent_graph_is_refused(tmp_path):
    path = tmp_path / "model.json"
    path.write_text(_bad_shape())
    with pytest.raises(ModelImportError, match=re.escape(str(path))):
        load_graph(tmp_path)


def test_onnx_is_not_read_here(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"\x08\x07")
    with pytest.raises(ModelImportError, match="is an ONNX model, not graph JSON"):
        load_graph(path)
