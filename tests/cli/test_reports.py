"""Reports in the user's terms: ONNX op types and node names, computing-node counts, the
per-op-type bake table, `inspect --graph`, `--input-shapes` / `--dim`."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rlx.artifact import read_rlx
from rlx.ir import format_graph
from rlx.ir.naming import computing_nodes, is_computing
from tests.cli.conftest import assert_error
from tests.real_models import FEEDS, MODELS, fetch


def _onnx_counts(model: onnx.ModelProto) -> Counter:
    """The oracle: the ONNX file's nodes by op type, straight from the protobuf."""
    counts: Counter = Counter()

    def visit(graph):
        for node in graph.node:
            if node.op_type != "Constant":
                counts[node.op_type] += 1
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    visit(attr.g)
                for g in attr.graphs:
                    visit(g)

    visit(model.graph)
    return counts


def _origins(model: onnx.ModelProto) -> set[str]:
    """What a user can find in Netron: node names, and the first output of unnamed ones."""
    names: set[str] = set()

    def visit(graph):
        for node in graph.node:
            names.add(node.name or node.output[0])
            for attr in node.attribute:
                for g in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else []) + \
                        list(attr.graphs):
                    visit(g)

    visit(model.graph)
    return names


def test_bake_op_table_against_the_onnx_file(cli, files, tmp_path):
    out = tmp_path / "m.rlx"
    d = cli("bake", files.onnx, "-o", out, "--json").json()
    rows = {r["op"]: r for r in d["op_types"]}
    onnx_counts = _onnx_counts(onnx.load(files.onnx))
    assert {op: r["onnx"] for op, r in rows.items() if r["onnx"]} == onnx_counts
    # w1 is exactly ternary: the exact profile stores it as TQ2_0 (K = 784 is not whole
    # blocks, so behind DecodeWeight, a stored weight rather than a computing node)
    assert {op: r["after"] for op, r in rows.items() if r["after"]} == {
        "MatMul": 2, "Add": 2, "Relu": 1}
    nodes = d["computing_nodes"]
    assert nodes["onnx"] == 5 and nodes["after"] == computing_nodes(read_rlx(out).graph) == 5
    assert "graph inputs" in nodes["counted"]
    text = cli("bake", files.onnx, "-o", out).out
    assert "computing nodes by op type" in text and "ONNX file" in text
    assert "MatMul" in text and "Relu" in text and "Binary(" not in text


def test_bake_of_graph_json_has_no_onnx_column(cli, files, tmp_path):
    d = cli("bake", files.graph_json, "-w", files.npz, "-o", tmp_path / "m.rlx",
            "--json").json()
    assert d["computing_nodes"]["onnx"] is None
    assert all(r["onnx"] is None for r in d["op_types"])
    assert d["computing_nodes"]["before"] == 5  # 2 MatMul, 2 Add, 1 Relu (of 10 IR nodes)


def test_inspect_graph_and_slowest_nodes_use_onnx_names(cli, files, tmp_path):
    out = tmp_path / "m.rlx"
    cli("bake", files.onnx, "-o", out)
    names = _origins(onnx.load(files.onnx))  # the MLP's nodes are unnamed: their outputs
    d = cli("inspect", out, "--graph", "--json").json()
    file = read_rlx(out)
    assert len(d["graph_text"]) == len(format_graph(file.graph).splitlines())
    text = cli("inspect", out, "--graph").out
    assert d["graph_text"] == text.strip().splitlines()[-len(d["graph_text"]):]
    for name in names:
        assert f"from {name}" in text or f"# {name}" in text
    np.save(tmp_path / "x.npy", files.x)
    profile = cli("run", out, "--input", f"x={tmp_path / 'x.npy'}", "--profile-ops",
                  "--top", "5", "--json").json()["profile"]
    assert {r["node"] for r in profile["slowest"]} <= names
    assert all(r["ir_node"].startswith("%") for r in profile["slowest"])


def test_inspect_graph_says_which_table_row_holds_a_stripped_constant(cli, files, tmp_path):
    out = tmp_path / "m.rlx"
    cli("bake", files.onnx, "-o", out, "--memory", "compact")
    file = read_rlx(out)
    stripped = {w.node_id: w for w in file.weights
                if w.node_id is not None and file.graph.node(w.node_id).op.is_stripped}
    assert stripped  # the compact mode keeps the weight bytes in the table only
    lines = cli("inspect", out, "--graph").out.splitlines()
    for node_id, w in stripped.items():
        [line] = [t for t in lines if t.strip().startswith(f"%{node_id}: ")]
        dims = ", ".join(str(d) for d in w.shape)
        assert f"= -> weight '{w.name}' [{dims}] {w.encoding}" in line
    assert not [t for t in lines if "stripped" in t]


def _if_model() -> onnx.ModelProto:
    """y = Relu(If(c, x + 1, x * 2)): two of its four computing nodes are in subgraphs."""
    one = numpy_helper.from_array(np.ones(4, np.float32), "one")
    two = numpy_helper.from_array(np.full(4, 2, np.float32), "two")

    def branch(op, const, name):
        return helper.make_graph(
            [helper.make_node(op, ["x", const.name], [f"{name}_y"], name=f"/{name}")], name,
            [], [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [4])])

    nodes = [helper.make_node("If", ["c"], ["t"], name="/if",
                              then_branch=branch("Add", one, "then"),
                              else_branch=branch("Mul", two, "else")),
             helper.make_node("Relu", ["t"], ["y"], name="/relu")]
    graph = helper.make_graph(
        nodes, "branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4]),
                            helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [one, two])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_one_node_count_in_text_and_json_subgraphs_included(cli, tmp_path):
    """The bake's, inspect's and the ONNX file's counts are one count (computing nodes,
    subgraph nodes included on both sides); the IR's total is in no report."""
    path, out = tmp_path / "if.onnx", tmp_path / "if.rlx"
    model = _if_model()
    onnx.save(model, path)
    expected = sum(_onnx_counts(model).values())
    assert expected == 4
    d = cli("bake", path, "-o", out, "--json").json()
    assert "nodes_before" not in d["report"] and "nodes_after" not in d["report"]
    nodes = d["computing_nodes"]
    assert (nodes["onnx"], nodes["before"]) == (expected, expected)
    assert nodes["after"] == sum(r["after"] for r in d["op_types"])
    shown = cli("inspect", out, "--json").json()
    assert "nodes" not in shown["meta"]
    assert shown["computing_nodes"]["count"] == nodes["after"]
    text = cli("bake", path, "-o", out).out
    [line] = [t for t in text.splitlines() if t.strip().startswith("computing nodes  ")]
    assert line.endswith(f"ONNX file {expected}, imported {expected} -> baked {nodes['after']}")
    [inspected] = [t for t in cli("inspect", out).out.splitlines()
                   if t.strip().startswith("computing nodes  ")]
    assert inspected.split()[-1] == str(nodes["after"])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["minilm-l3", "ppocr-cls"])
def test_real_model_reports(cli, tmp_path, name):
    """Every computing node of the baked file names an ONNX node of the model, and the
    ONNX column is the file's own count."""
    path = fetch(name)
    model = onnx.load(path)
    out = tmp_path / "m.rlx"
    d = cli("bake", path, "-o", out, "--profile", "size", "--json").json()
    assert Counter({r["op"]: r["onnx"] for r in d["op_types"] if r["onnx"]}) == \
        _onnx_counts(model)
    graph = read_rlx(out).graph
    assert d["computing_nodes"]["after"] == computing_nodes(graph)
    origins = _origins(model)
    computing = [n for n in graph.nodes() if is_computing(n.op)]
    assert computing and all(n.origin in origins for n in computing)


# --- input shapes -------------------------------------------------------------------------


def _flatten_model() -> onnx.ModelProto:
    """y = Reshape(x, concat(shape(x)[0:1], [-1])) @ w: shape arithmetic on a symbolic
    batch, which only a known batch folds away."""
    w = numpy_helper.from_array(np.ones((32, 2), np.float32), "w")
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="/shape"),
        helper.make_node("Slice", ["s", "zero", "one"], ["b"], name="/slice"),
        helper.make_node("Concat", ["b", "minus_one"], ["target"], axis=0, name="/concat"),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="/reshape"),
        helper.make_node("MatMul", ["flat", "w"], ["y"], name="/matmul"),
    ]
    inits = [w, numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    graph = helper.make_graph(
        nodes, "flatten", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                         ["batch", 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def flatten_onnx(tmp_path):
    path = tmp_path / "flatten.onnx"
    onnx.save(_flatten_model(), path)
    return path


def test_dim_and_input_shapes_fix_symbolic_dims(cli, flatten_onnx, tmp_path):
    free = cli("bake", flatten_onnx, "-o", tmp_path / "a.rlx", "--json").json()
    by_dim = cli("bake", flatten_onnx, "-o", tmp_path / "b.rlx", "--dim", "batch=3",
                 "--json").json()
    by_shape = cli("bake", flatten_onnx, "-o", tmp_path / "c.rlx", "--input-shapes",
                   "x:3,4,8", "--json").json()
    assert read_rlx(tmp_path / "b.rlx").meta.inputs[0].shape == (3, 4, 8)
    assert read_rlx(tmp_path / "c.rlx").meta.inputs[0].shape == (3, 4, 8)
    assert read_rlx(tmp_path / "a.rlx").meta.inputs[0].shape == ("batch", 4, 8)
    # Shape/Slice/Concat fold away whether the batch is known or stays symbolic (the
    # symbolic Reshape target becomes [0, -1]-style): only Reshape and MatMul are left
    for d in (free, by_dim, by_shape):
        assert {r["op"]: r["after"] for r in d["op_types"] if r["after"]} == {
            "Reshape": 1, "MatMul": 1}
    assert by_dim["dims"] == {"batch": 3} and by_shape["input_shapes"] == {"x": [3, 4, 8]}


def test_input_shape_errors(cli, flatten_onnx, files, tmp_path):
    out = tmp_path / "m.rlx"
    assert_error(cli("bake", flatten_onnx, "-o", out, "--dim", "bacth=3"),
                 r"names no symbolic dim of the graph inputs: bacth \(declared: batch\)")
    assert_error(cli("bake", flatten_onnx, "-o", out, "--input-shapes", "x:3,4"),
                 r"does not fit the declared shape")
    # a name the model lacks: its real inputs listed (the flatten model has one, x)
    assert_error(cli("bake", flatten_onnx, "-o", out, "--input-shapes", "X:3,4,8"),
                 r"input_shapes names no graph input: X \(the model's inputs: x\)$")
    json_error = cli("bake", flatten_onnx, "-o", out, "--input-shapes", "X:3,4,8", "--json")
    assert json_error.json()["error"]["message"].endswith("(the model's inputs: x)")
    assert_error(cli("bake", flatten_onnx, "-o", out, "--input-shapes", "x=3"),
                 r"expected NAME:D,D", code=2)
    assert_error(cli("bake", "--input-shapes", "x:3,4,8", flatten_onnx, "-o", out),
                 r"got '.*flatten\.onnx' \(put the model before --input-shapes", code=2)
    assert_error(cli("bake", flatten_onnx, "-o", out, "--dim", "batch=-1"),
                 r"expected NAME=N", code=2)
    assert_error(cli("bake", files.graph_json, "-w", files.npz, "-o", out, "--dim",
                     "batch=1"), r"apply to ONNX models")
    assert not out.exists()


@pytest.mark.slow
def test_silero_bakes_with_or_without_its_input_shape(cli, tmp_path):
    """silero-vad branches on its input length (`squeeze(-1)` Ifs): fixed, the branches
    fold; symbolic, the ranks its LSTM takes are kept. Both verify against onnxruntime."""
    path = fetch("silero-vad")
    (name, dims), = MODELS["silero-vad"].input_shapes.items()
    shape = f"{name}:{','.join(str(d) for d in dims)}"
    np.savez(tmp_path / "feeds.npz", **FEEDS["silero-vad"](0))  # a real sample rate
    for out, fixed in (("a.rlx", []), ("b.rlx", ["--input-shapes", shape])):
        result = cli("bake", path, "-o", tmp_path / out, *fixed)
        assert result.code == 0, result.err
        verify = cli("verify", tmp_path / out, "--onnx", path, "--inputs",
                     tmp_path / "feeds.npz", "--json")
        assert verify.code == 0 and verify.json()["ok"]
