"""Synthetic CNNs shaped like the detectors and recognisers the size profile must handle,
as ONNX models for onnxruntime to check against.

Trained-like where quantisation cares: convolutions followed by BatchNormalization whose
running statistics are measured on real activations (onnxruntime, layer by layer), and whose
gammas spread over 1e-2..1e1, so the folded weights' channel ranges lie 10^3-10^5 apart, as
in MobileNet-style backbones. Depthwise-separable blocks with row lengths that are not whole
blocks (16, 24, 40 input channels; 3x3 and 5x5 depthwise), first and last layers, nearest
upsampling and ConvTranspose heads.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

Feeds = Callable[[int], dict[str, np.ndarray]]


class CnnBuilder:
    """Nodes and initializers of one graph, named in order."""

    def __init__(self, seed: int, gamma: tuple[float, float] = (1e-2, 1e1)):
        self.rng = np.random.default_rng(seed)
        self.gamma = gamma
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.batchnorms: list[onnx.NodeProto] = []

    def _name(self, prefix: str) -> str:
        return f"{prefix}{len(self.nodes) + len(self.inits)}"

    def init(self, prefix: str, value: np.ndarray, dtype: type = np.float32) -> str:
        name = self._name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self._name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def act(self, x: str, act: str | None) -> str:
        return x if act is None else self.node(act, [x])

    def batchnorm(self, x: str, channels: int) -> str:
        lo, hi = np.log(self.gamma[0]), np.log(self.gamma[1])
        gamma = np.exp(self.rng.uniform(lo, hi, channels))
        gamma *= self.rng.choice([-1, 1], channels, p=[0.1, 0.9])
        names = [self.init("gamma", gamma), self.init("beta", self.rng.normal(0, 0.3, channels)),
                 self.init("mean", np.zeros(channels)), self.init("var", np.ones(channels))]
        y = self.node("BatchNormalization", [x, *names], epsilon=1e-5)
        self.batchnorms.append(self.nodes[-1])
        return y

    def conv(self, x: str, cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1,
             act: str | None = "Relu", bn: bool = True) -> str:
        fan_in = cin // groups * k * k
        w = self.rng.standard_normal((cout, cin // groups, k, k)) * np.sqrt(2 / fan_in)
        inputs = [x, self.init("w", w)] + ([] if bn else [self.init("b", np.zeros(cout))])
        y = self.node("Conv", inputs, kernel_shape=[k, k], strides=[stride] * 2,
                      pads=[k // 2] * 4, group=groups)
        return self.act(self.batchnorm(y, cout) if bn else y, act)

    def conv_transpose(self, x: str, cin: int, cout: int, act: str | None = "Relu",
                       bn: bool = True) -> str:
        w = self.rng.standard_normal((cin, cout, 2, 2)) * np.sqrt(2 / cin)
        y = self.node("ConvTranspose", [x, self.init("wt", w), self.init("bt", np.zeros(cout))],
                      kernel_shape=[2, 2], strides=[2, 2])
        return self.act(self.batchnorm(y, cout) if bn else y, act)

    def upsample(self, x: str, factor: int) -> str:
        scales = self.init("scales", [1, 1, factor, factor])
        return self.node("Resize", [x, "", scales], mode="nearest")

    def separable(self, x: str, cin: int, cout: int, k: int, stride: int) -> str:
        """MobileNetV3's block: 1x1 expand, k x k depthwise, 1x1 project (+ residual)."""
        hidden = cin * 4
        y = self.conv(x, cin, hidden, 1, act="HardSwish")
        y = self.conv(y, hidden, hidden, k, stride, groups=hidden, act="HardSwish")
        y = self.conv(y, hidden, cout, 1, act=None)
        return self.node("Add", [x, y]) if stride == 1 and cin == cout else y

    def backbone(self, x: str, widths: tuple[int, ...]) -> list[tuple[str, int]]:
        """A stride-2 stem, then a stride-2 separable block per stage: its feature maps."""
        y, c = self.conv(x, 3, widths[0], 3, 2, act="HardSwish"), widths[0]
        feats = []
        for i, w in enumerate(widths[1:]):
            y, c = self.separable(y, c, w, 3 if i % 2 == 0 else 5, 2), w
            feats.append((y, c))
        return feats

    def model(self, shape: list[int], outputs: list[str]) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
            self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        _measure_batchnorms(model, self.batchnorms, [image_feeds(shape)(s) for s in (90, 91)])
        return model


def _measure_batchnorms(model: onnx.ModelProto, batchnorms: list[onnx.NodeProto],
                        feeds: list[dict[str, np.ndarray]]) -> None:
    """Each BatchNormalization's running mean and variance: those of its input on `feeds`
    (in graph order, so each sees the statistics set before it), as training leaves them."""
    inits = {t.name: t for t in model.graph.initializer}
    for bn in batchnorms:
        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        probe.graph.output.append(helper.make_tensor_value_info(bn.input[0], TensorProto.FLOAT,
                                                                None))
        session = ort.InferenceSession(probe.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        xs = [session.run([bn.input[0]], f)[0] for f in feeds]
        flat = np.concatenate([x.swapaxes(0, 1).reshape(x.shape[1], -1) for x in xs], axis=1)
        for name, value in ((bn.input[3], flat.mean(axis=1)), (bn.input[4], flat.var(axis=1))):
            inits[name].CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))


def image_feeds(shape: list[int]) -> Feeds:
    """Normalised images (about N(0, 1) per channel), seeded."""
    def feeds(seed: int) -> dict[str, np.ndarray]:
        return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}
    return feeds


def db_detector(seed: int = 0, size: int = 64,
                widen: int = 1) -> tuple[onnx.ModelProto, Feeds]:
    """A DB-style text detector: backbone, FPN (1x1 laterals, upsample-add, 3x3 outputs
    concatenated at 1/4), a head of conv and two ConvTranspose up to full size, sigmoid.
    `widen` multiplies every width but the image's and the probability map's."""
    b = CnnBuilder(seed)
    feats = b.backbone("x", tuple(w * widen for w in (16, 24, 40, 80, 160)))
    fpn, out = 64 * widen, 16 * widen
    lateral = [b.conv(f, c, fpn, 1, act=None, bn=False) for f, c in feats]
    for i in range(len(lateral) - 2, -1, -1):
        lateral[i] = b.node("Add", [lateral[i], b.upsample(lateral[i + 1], 2)])
    outs = [b.conv(x, fpn, out, 3, act=None, bn=False) for x in lateral]
    fused = b.node("Concat", [b.upsample(o, 2 ** i) if i else o for i, o in enumerate(outs)],
                   axis=1)
    head = b.conv_transpose(b.conv(fused, 4 * out, out, 3), out, out)
    probability = b.conv_transpose(head, out, 1, act="Sigmoid", bn=False)
    shape = [1, 3, size, size]
    return b.model(shape, [probability]), image_feeds(shape)


def crnn(seed: int = 0, height: int = 32, width: int = 128, classes: int = 64,
         hidden: int = 48) -> tuple[onnx.ModelProto, Feeds]:
    """A CRNN-style recogniser: a separable conv backbone pooled to one row, a
    bidirectional LSTM, a MatMul to the classes, softmax (CTC probabilities)."""
    b = CnnBuilder(seed)
    y, c = b.conv("x", 3, 16, 3, act="HardSwish"), 16
    for w, stride in ((24, 2), (40, 2), (80, 1), (96, 1)):
        y, c = b.separable(y, c, w, 3, stride), w
    seq = b.node("Transpose", [b.node("ReduceMean", [y], axes=[2], keepdims=0)],
                 perm=[2, 0, 1])  # [W, 1, C]
    scale = 1 / np.sqrt(c)
    lstm = b._name("lstm")
    b.nodes.append(helper.make_node(
        "LSTM", [seq, b.init("lw", b.rng.standard_normal((2, 4 * hidden, c)) * scale),
                 b.init("lr", b.rng.standard_normal((2, 4 * hidden, hidden)) * hidden ** -0.5),
                 b.init("lb", b.rng.normal(0, 0.1, (2, 8 * hidden)))],
        [lstm], hidden_size=hidden, direction="bidirectional", name=lstm))
    both = b.node("Reshape", [b.node("Transpose", [lstm], perm=[0, 2, 1, 3]),
                              b.init("shape", [0, 0, -1], np.int64)])  # [W, 1, 2H]
    fc = b.rng.standard_normal((2 * hidden, classes)) * 3 / np.sqrt(2 * hidden)
    probabilities = b.node("Softmax", [b.node("MatMul", [both, b.init("fc", fc)])], axis=-1)
    shape = [1, 3, height, width]
    return b.model(shape, [probabilities]), image_feeds(shape)


def anchor_free_detector(seed: int = 0, size: int = 96, classes: int = 5, bins: int = 8,
                         widen: int = 1) -> tuple[onnx.ModelProto, Feeds]:
    """An anchor-free layout detector (PicoDet / GFL style): backbone, a PAN neck of 1x1
    laterals and depthwise-separable fusions (top-down by upsampling, bottom-up by stride-2
    depthwise convs), and per level a head of 5x5 depthwise + 1x1 convs ending in a
    `classes`-wide sigmoid and a `4 x bins` box-distribution branch, flattened and
    concatenated over the levels. `widen` multiplies the backbone's and the neck's widths."""
    b = CnnBuilder(seed)
    feats = b.backbone("x", tuple(w * widen for w in (16, 24, 40, 80, 160)))[1:]
    width = 64 * widen
    lateral = [b.conv(f, c, width, 1, act="HardSwish") for f, c in feats]
    for i in range(len(lateral) - 2, -1, -1):
        fused = b.node("Add", [lateral[i], b.upsample(lateral[i + 1], 2)])
        lateral[i] = b.separable(fused, width, width, 5, 1)
    for i in range(1, len(lateral)):
        down = b.conv(lateral[i - 1], width, width, 3, 2, groups=width, act="HardSwish")
        lateral[i] = b.separable(b.node("Add", [lateral[i], down]), width, width, 5, 1)
    scores, boxes = [], []
    for level in lateral:
        y = level
        for _ in range(2):
            y = b.conv(y, width, width, 5, groups=width, act="HardSwish")
            y = b.conv(y, width, width, 1, act="HardSwish")
        cls = b.conv(y, width, classes, 1, act=None, bn=False)
        reg = b.conv(y, width, 4 * bins, 1, act=None, bn=False)
        scores.append(b.node("Reshape", [cls, b.init("shape", [1, classes, -1], np.int64)]))
        boxes.append(b.node("Reshape", [reg, b.init("shape", [1, 4 * bins, -1], np.int64)]))
    score = b.node("Sigmoid", [b.node("Concat", scores, axis=2)])
    box = b.node("Concat", boxes, axis=2)
    shape = [1, 3, size, size]
    return b.model(shape, [score, box]), image_feeds(shape)


def ctc_recogniser(seed: int = 0, height: int = 32, width: int = 160, classes: int = 2000,
                   hidden: int = 96) -> tuple[onnx.ModelProto, Feeds]:
    """An SVTR-style recogniser without recurrence: a separable conv backbone pooled to one
    row, two token-mixing MatMul layers with biases and HardSwish, a LayerNorm, and a wide
    CTC head (a MatMul to `classes`, most of the weights), softmax."""
    b = CnnBuilder(seed)
    y, c = b.conv("x", 3, 16, 3, 2, act="HardSwish"), 16
    for w, stride in ((32, 2), (64, 1), (hidden, 1)):
        y, c = b.separable(y, c, w, 3, stride), w
    seq = b.node("Transpose", [b.node("ReduceMean", [y], axes=[2], keepdims=0)],
                 perm=[0, 2, 1])  # [1, W, C]
    for _ in range(2):
        w = b.rng.standard_normal((c, c)) * np.sqrt(2 / c)
        mixed = b.node("Add", [b.node("MatMul", [seq, b.init("mix", w)]),
                               b.init("bias", b.rng.normal(0, 0.1, c))])
        seq = b.node("Add", [seq, b.act(mixed, "HardSwish")])
    seq = b.node("LayerNormalization", [seq, b.init("ln_g", b.rng.uniform(0.5, 2, c)),
                                        b.init("ln_b", b.rng.normal(0, 0.1, c))], axis=-1)
    head = b.rng.standard_normal((c, classes)) * 3 / np.sqrt(c)
    probabilities = b.node("Softmax", [b.node("MatMul", [seq, b.init("ctc", head)])], axis=-1)
    shape = [1, 3, height, width]
    return b.model(shape, [probabilities]), image_feeds(shape)
