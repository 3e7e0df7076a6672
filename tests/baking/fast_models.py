"""Small ONNX models for the fast profile's tests: a CNN ending in class probabilities, an
MLP ending in logits and a CRNN (Convs, then an unrolled LSTM) ending in per-step scores,
written with onnx.helper so onnxruntime runs the original as the independent f32
reference. `outlier=True` gives the MLP a hidden unit whose huge constant activation (a
bias of 1000, its part in the next layer cancelled by that layer's bias) changes nothing in
f32 but takes a per-tensor u8 scale's whole range, or, smoothed (`rlx.baking.smoothing`),
its weight row takes the whole range of every output channel's scale: the next layer is
the sensitive node."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper, save

from rlx.artifact import read_rlx

__all__ = ["small_cnn", "mlp", "small_crnn", "small_detector", "image_feeds", "vector_feeds",
           "line_feeds"]


def _model(nodes, inits, x_shape, output: str, path: Path, opset: int = 17,
           elem: int = TensorProto.FLOAT) -> Path:
    graph = helper.make_graph(
        nodes, path.stem, [helper.make_tensor_value_info("x", elem, x_shape)],
        [helper.make_tensor_value_info(output, elem, None)],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


def small_cnn(folder: Path, seed: int = 0) -> Path:
    """x [1, 3, 32, 32] -> Conv 16 -> Relu -> Conv 64 /2 -> Relu -> Conv 64 -> Relu ->
    GlobalAveragePool -> Flatten -> Gemm 10 -> Softmax ("probs"). The first Conv sums 27
    terms: too few for int8 (`rlx.baking.int8.MIN_REDUCTION`); the other three may."""
    rng = np.random.default_rng(seed)

    def conv(cout, cin):
        return (rng.standard_normal((cout, cin, 3, 3)) * (2 / (9 * cin)) ** 0.5).astype(
            np.float32), (rng.standard_normal(cout) * 0.1).astype(np.float32)

    inits = {}
    nodes = []
    x = "x"
    for i, (cout, cin, stride) in enumerate(((16, 3, 1), (64, 16, 2), (64, 64, 1))):
        inits[f"w{i}"], inits[f"b{i}"] = conv(cout, cin)
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1] * 4,
                                   strides=[stride] * 2),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        x = f"r{i}"
    inits["fc"] = (rng.standard_normal((10, 64)) * 0.5).astype(np.float32)
    inits["fcb"] = (rng.standard_normal(10) * 0.1).astype(np.float32)
    nodes += [helper.make_node("GlobalAveragePool", [x], ["gap"]),
              helper.make_node("Flatten", ["gap"], ["flat"]),
              helper.make_node("Gemm", ["flat", "fc", "fcb"], ["logits"], transB=1),
              helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)]
    return _model(nodes, inits, [1, 3, 32, 32], "probs", folder / "small_cnn.onnx")


def mlp(folder: Path, seed: int = 0, outlier: bool = False) -> Path:
    """x [8, 64] -> (MatMul + Add -> Relu) x 2 -> MatMul + Add ("logits", 10 classes)."""
    rng = np.random.default_rng(seed)
    sizes = (64, 128, 128, 10)
    inits, nodes, x = {}, [], "x"
    for i, (k, n) in enumerate(zip(sizes, sizes[1:])):
        inits[f"w{i}"] = (rng.standard_normal((k, n)) * (2 / k) ** 0.5).astype(np.float32)
        inits[f"b{i}"] = (rng.standard_normal(n) * 0.1).astype(np.float32)
        last = i == len(sizes) - 2
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], ["logits" if last else f"a{i}"])]
        if not last:
            nodes.append(helper.make_node("Relu", [f"a{i}"], [f"h{i}"]))
            x = f"h{i}"
    if outlier:
        inits["b0"][0] = 1000.0  # hidden unit 0 of layer 1: always 1000
        inits["b1"] -= 1000.0 * inits["w1"][0]  # ... whose part layer 2's bias cancels
    name = "mlp_outlier.onnx" if outlier else "mlp.onnx"
    return _model(nodes, inits, [8, 64], "logits", folder / name)


def small_detector(folder: Path, seed: int = 0, dtype=np.float32) -> Path:
    """A YOLO-style detector in miniature (`dtype` float64: the same model for a float64
    reference): x [1, 3, 32, 32] -> Conv 3x3 /2 (27 terms) -> SiLU -> Conv 3x3 32 -> SiLU ->
    Split into two halves; the second -> Conv 1x1 (16 terms) -> SiLU -> + itself -> Relu
    (a residual block) -> Concat with both halves -> Conv 1x1 (48 terms) -> SiLU -> MaxPool 3x3
    -> Concat with its input -> depthwise Conv 3x3 (9 terms) -> SiLU -> Conv 1x1 64 /2 ->
    SiLU -> nearest Resize x2 -> Concat with the 3x3 Conv's SiLU -> Conv 3x3 32 -> SiLU ->
    Conv 1x1 to 10 maps ("maps", the output). SiLU is written as Sigmoid and Mul, as
    exporters write it."""
    rng = np.random.default_rng(seed)
    inits: dict[str, np.ndarray] = {"scales": np.array([1, 1, 2, 2], dtype),
                                    "halves": np.array([16, 16], np.int64)}
    nodes = []

    def conv(x, name, cout, cin, k, stride=1, groups=1, silu=True):
        inits[name + ".w"] = (rng.standard_normal((cout, cin // groups, k, k))
                              * (2 / (k * k * cin / groups)) ** 0.5).astype(dtype)
        inits[name + ".b"] = (rng.standard_normal(cout) * 0.1).astype(dtype)
        nodes.append(helper.make_node("Conv", [x, name + ".w", name + ".b"], [name], name,
                                      pads=[k // 2] * 4, strides=[stride] * 2, group=groups))
        if not silu:
            return name
        nodes.extend([helper.make_node("Sigmoid", [name], [name + ".sig"]),
                      helper.make_node("Mul", [name, name + ".sig"], [name + ".silu"])])
        return name + ".silu"

    def node(op, inputs, output, **attrs):
        nodes.append(helper.make_node(op, inputs, [output], **attrs))
        return output

    stem = conv(conv("x", "stem", 16, 3, 3, stride=2), "c1", 32, 16, 3)
    nodes.append(helper.make_node("Split", [stem, "halves"], ["a", "b"], axis=1))
    res = node("Relu", [node("Add", ["b", conv("b", "m", 16, 16, 1)], "sum")], "res")
    fused = conv(node("Concat", ["a", "b", res], "cat", axis=1), "c2", 32, 48, 1)
    pooled = node("Concat", [fused, node("MaxPool", [fused], "pool", kernel_shape=[3, 3],
                                         pads=[1] * 4)], "spp", axis=1)
    down = conv(conv(pooled, "dw", 64, 64, 3, groups=64), "pw", 64, 64, 1, stride=2)
    up = node("Resize", [down, "", "scales"], "up", mode="nearest")
    head = conv(node("Concat", [up, stem], "neck", axis=1), "c3", 32, 96, 3)
    conv(head, "maps", 10, 32, 1, silu=False)
    elem = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    name = "small_detector64.onnx" if dtype == np.float64 else "small_detector.onnx"
    return _model(nodes, inits, [1, 3, 32, 32], "maps", folder / name, opset=18, elem=elem)


def image_feeds(seed: int, n: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)} for _ in range(n)]


def vector_feeds(seed: int, n: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((8, 64)).astype(np.float32)} for _ in range(n)]


def small_crnn(folder: Path, seed: int = 0, steps: int = 8) -> Path:
    """A text-line recogniser in miniature, as exporters write one: x [1, 3, 16, 16] -> two
    3x3 Convs, each followed by its BatchNorm as a per-channel Mul and Add, and a Relu ->
    columns [steps, 1, 512] -> an LSTM (64 units) unrolled into `steps` cells that all
    read one input weight and one recurrent weight (Gemm, transB=1) -> MatMul to 12
    classes -> LogSoftmax over the classes ("scores" [steps, 1, 12], a CTC output)."""
    rng = np.random.default_rng(seed)
    inits: dict[str, np.ndarray] = {}
    nodes = []

    def normal(*shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    x = "x"
    for i, (cout, cin, stride) in enumerate(((32, 3, 1), (64, 32, 2))):
        inits[f"w{i}"] = normal(cout, cin, 3, 3, scale=(2 / (9 * cin)) ** 0.5)
        inits[f"s{i}"] = (rng.uniform(0.5, 1.5, (cout, 1, 1))).astype(np.float32)
        inits[f"t{i}"] = normal(cout, 1, 1, scale=0.1)
        nodes += [helper.make_node("Conv", [x, f"w{i}"], [f"c{i}"], pads=[1] * 4,
                                   strides=[stride] * 2),
                  helper.make_node("Mul", [f"c{i}", f"s{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"t{i}"], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"])]
        x = f"r{i}"
    hidden, features = 64, 64 * 8
    inits["columns"] = np.array([1, features, steps], np.int64)
    inits["w_ih"] = normal(4 * hidden, features, scale=features ** -0.5)
    inits["w_hh"] = normal(4 * hidden, hidden, scale=hidden ** -0.5)
    inits["b_ih"], inits["b_hh"] = normal(4 * hidden, scale=0.1), normal(4 * hidden, scale=0.1)
    inits["zero"] = np.zeros((1, hidden), np.float32)
    inits["head"] = normal(hidden, 12, scale=hidden ** -0.5 * 3)
    nodes += [helper.make_node("Reshape", [x, "columns"], ["flat"]),
              helper.make_node("Transpose", ["flat"], ["seq"], perm=[2, 0, 1])]
    h, c, outs = "zero", "zero", []
    for t in range(steps):
        inits[f"i{t}"] = np.array(t, np.int64)
        p = f"cell{t}/"
        nodes += [helper.make_node("Gather", ["seq", f"i{t}"], [p + "x"], axis=0),
                  helper.make_node("Gemm", [p + "x", "w_ih", "b_ih"], [p + "gi"], transB=1),
                  helper.make_node("Gemm", [h, "w_hh", "b_hh"], [p + "gh"], transB=1),
                  helper.make_node("Add", [p + "gi", p + "gh"], [p + "g"]),
                  helper.make_node("Split", [p + "g"], [p + k for k in "ifco"], axis=1,
                                   num_outputs=4),
                  *[helper.make_node("Sigmoid", [p + k], [p + k + "s"]) for k in "ifo"],
                  helper.make_node("Tanh", [p + "c"], [p + "ct"]),
                  helper.make_node("Mul", [p + "fs", c], [p + "keep"]),
                  helper.make_node("Mul", [p + "is", p + "ct"], [p + "new"]),
                  helper.make_node("Add", [p + "keep", p + "new"], [p + "cell"]),
                  helper.make_node("Tanh", [p + "cell"], [p + "cellt"]),
                  helper.make_node("Mul", [p + "os", p + "cellt"], [p + "h"]),
                  helper.make_node("Unsqueeze", [p + "h", "axis0"], [p + "out"])]
        h, c = p + "h", p + "cell"
        outs.append(p + "out")
    inits["axis0"] = np.array([0], np.int64)
    nodes += [helper.make_node("Concat", outs, ["hs"], axis=0),
              helper.make_node("MatMul", ["hs", "head"], ["logits"]),
              helper.make_node("LogSoftmax", ["logits"], ["scores"], axis=-1)]
    return _model(nodes, inits, [1, 3, 16, 2 * steps], "scores",
                  folder / "small_crnn.onnx", opset=18)


def line_feeds(seed: int, n: int = 1, steps: int = 8) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(0, 1, (1, 3, 16, 2 * steps)).astype(np.float32)}
            for _ in range(n)]


def onnxruntime_kernels(path, folder) -> collections.Counter:
    """The op types onnxruntime runs for the fast file at `path` after its own fusions
    (its optimised model, written to `folder`): QLinearConv / QGemm where int8 kernels run."""
    from rlx.engines.onnxruntime_engine import disabled_optimizers, export_for_ort

    file = read_rlx(path)
    graph = file.into_runtime_graph()
    model_bytes, placer, _ = export_for_ort(file, graph)
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(folder / "optimized.onnx")
    bound = placer.bind(so, in_place=False)  # the weights, alive until the session is made
    ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"],
                         disabled_optimizers=disabled_optimizers(graph))
    del bound
    optimized = onnx.load(so.optimized_model_filepath, load_external_data=False)
    return collections.Counter(n.op_type for n in optimized.graph.node)

