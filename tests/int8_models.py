"""Synthetic int8 models, quantised by onnxruntime's own tools, for the integer tests and
`benchmarks/int8_ratio.py`.

`t5_decoder` is a T5-style decoder (pre-RMSNorm blocks of self-attention, cross-attention
over encoder states and a ReLU feed-forward, then a 32k-word output layer) written with
onnx.helper in float32; `quantize_dynamic` turns its MatMuls into DynamicQuantizeLinear +
MatMulInteger (standard ONNX domain), as a distilled encoder-decoder's decoder ships.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["t5_decoder", "mlp", "cnn", "qoperator_cnn", "quantized", "quantized_static",
           "decoder_feeds"]

_F32 = TensorProto.FLOAT


class _Writer:
    """Nodes and initializers of one float32 graph, with fresh names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = f"{op.lower()}_{len(self.nodes)}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def const(self, value: np.ndarray, hint: str = "w") -> str:
        name = f"{hint}_{len(self.inits)}"
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, rows: int, cols: int) -> str:
        scale = 1.0 / np.sqrt(rows)
        return self.const((self.rng.standard_normal((rows, cols)) * scale).astype(np.float32))

    def rms_norm(self, x: str, d: int) -> str:
        mean = self.node("ReduceMean", [self.node("Mul", [x, x]),
                                        self.const(np.array([-1], np.int64), "axes")])
        rms = self.node("Sqrt", [self.node("Add", [mean, self.const(np.float32(1e-6), "eps")])])
        gain = self.const((1 + 0.1 * self.rng.standard_normal(d)).astype(np.float32), "g")
        return self.node("Mul", [self.node("Div", [x, rms]), gain])

    def heads(self, x: str, n_heads: int, d: int) -> str:
        """[1, S, d] -> [1, heads, S, d / heads]."""
        shape = self.const(np.array([0, -1, n_heads, d // n_heads], np.int64), "shape")
        return self.node("Transpose", [self.node("Reshape", [x, shape])], perm=[0, 2, 1, 3])

    def attention(self, x: str, memory: str, n_heads: int, d: int) -> str:
        q = self.heads(self.node("MatMul", [x, self.weight(d, d)]), n_heads, d)
        k = self.heads(self.node("MatMul", [memory, self.weight(d, d)]), n_heads, d)
        v = self.heads(self.node("MatMul", [memory, self.weight(d, d)]), n_heads, d)
        kt = self.node("Transpose", [k], perm=[0, 1, 3, 2])
        probs = self.node("Softmax", [self.node("MatMul", [q, kt])], axis=-1)
        merged = self.node("Transpose", [self.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        merged = self.node("Reshape", [merged, self.const(np.array([0, -1, d], np.int64), "s")])
        return self.node("MatMul", [merged, self.weight(d, d)])


def t5_decoder(layers: int = 2, d: int = 512, d_ff: int = 2048, vocab: int = 32128,
               n_heads: int = 8, seed: int = 0) -> onnx.ModelProto:
    """The float32 decoder: inputs `hidden` [1, seq, d], `encoder` [1, enc, d]; output
    `logits` [1, seq, vocab]."""
    w = _Writer(seed)
    h = "hidden"
    for _ in range(layers):
        normed = w.rms_norm(h, d)
        h = w.node("Add", [h, w.attention(normed, normed, n_heads, d)])
        h = w.node("Add", [h, w.attention(w.rms_norm(h, d), "encoder", n_heads, d)])
        up = w.node("Relu", [w.node("MatMul", [w.rms_norm(h, d), w.weight(d, d_ff)])])
        h = w.node("Add", [h, w.node("MatMul", [up, w.weight(d_ff, d)])])
    w.node("MatMul", [w.rms_norm(h, d), w.weight(d, vocab)])
    return _model(w, "t5_decoder", [("hidden", [1, "seq", d]), ("encoder", [1, "enc", d])],
                  ("logits", [1, "seq", vocab]))


def mlp(sizes: tuple[int, ...] = (256, 512, 384, 256), seed: int = 0) -> onnx.ModelProto:
    """x [batch, sizes[0]] through MatMul + bias (+ Relu between) layers."""
    w = _Writer(seed)
    h = "x"
    for i, (rows, cols) in enumerate(zip(sizes, sizes[1:])):
        h = w.node("Add", [w.node("MatMul", [h, w.weight(rows, cols)]),
                           w.const(w.rng.standard_normal(cols).astype(np.float32), "b")])
        if i < len(sizes) - 2:
            h = w.node("Relu", [h])
    return _model(w, "mlp", [("x", ["batch", sizes[0]])], ("y", ["batch", sizes[-1]]))


def cnn(channels: tuple[int, ...] = (3, 32, 64, 64), classes: int = 1000,
        seed: int = 0) -> onnx.ModelProto:
    """x [batch, C, 16, 16] through 3x3 Conv + Relu layers, a global average and a
    MatMul classifier."""
    w = _Writer(seed)
    h = "x"
    for c_in, c_out in zip(channels, channels[1:]):
        kernel = w.rng.standard_normal((c_out, c_in, 3, 3)) / np.sqrt(9 * c_in)
        h = w.node("Relu", [w.node("Conv", [h, w.const(kernel.astype(np.float32)),
                                            w.const(np.zeros(c_out, np.float32), "b")],
                                   pads=[1, 1, 1, 1])])
    pooled = w.node("Flatten", [w.node("GlobalAveragePool", [h])])
    w.node("MatMul", [pooled, w.weight(channels[-1], classes)])
    return _model(w, "cnn", [("x", ["batch", channels[0], 16, 16])], ("y", ["batch", classes]))


def qoperator_cnn(seed: int = 0) -> onnx.ModelProto:
    """x [batch, 3, 16, 16] through the float ops `quantize_static`'s QOperator format turns
    into onnxruntime's com.microsoft int8 ops: Sigmoid, LeakyRelu, Add, Mul, Concat,
    AveragePool, GlobalAveragePool, Gemm and Softmax (around QLinearConvs)."""
    w = _Writer(seed)

    def conv(x: str, c_in: int, c_out: int) -> str:
        kernel = w.rng.standard_normal((c_out, c_in, 3, 3)) / np.sqrt(9 * c_in)
        return w.node("Conv", [x, w.const(kernel.astype(np.float32)),
                               w.const(w.rng.standard_normal(c_out).astype(np.float32), "b")],
                      pads=[1, 1, 1, 1])

    a = conv("x", 3, 8)
    gated = w.node("Mul", [a, w.node("Sigmoid", [conv(a, 8, 8)])])
    leaky = w.node("LeakyRelu", [conv(gated, 8, 8)], alpha=0.1)
    joined = w.node("Concat", [w.node("Add", [gated, leaky]), conv(a, 8, 4)], axis=1)
    pooled = w.node("AveragePool", [joined], kernel_shape=[2, 2], strides=[2, 2])
    flat = w.node("Flatten", [w.node("GlobalAveragePool", [conv(pooled, 12, 16)])])
    logits = w.node("Gemm", [flat, w.weight(16, 10),
                             w.const(w.rng.standard_normal(10).astype(np.float32), "b")])
    w.node("Softmax", [logits], axis=-1)
    return _model(w, "qoperator_cnn", [("x", ["batch", 3, 16, 16])], ("y", ["batch", 10]))


def _model(w: _Writer, name: str, inputs, output) -> onnx.ModelProto:
    """The graph of `w`'s nodes, its last node's output renamed to be the graph's."""
    w.nodes[-1].output[0] = output[0]
    graph = helper.make_graph(
        w.nodes, name, [helper.make_tensor_value_info(n, _F32, d) for n, d in inputs],
        [helper.make_tensor_value_info(output[0], _F32, output[1])], w.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def quantized(model: onnx.ModelProto, folder: Path, name: str, *, per_channel: bool = False,
              weight_type: str = "QInt8") -> Path:
    """`model` written to `folder` and quantised there by onnxruntime's `quantize_dynamic`
    (MatMulInteger + DynamicQuantizeLinear); the quantised file's path."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source, target = folder / f"{name}.f32.onnx", folder / f"{name}.onnx"
    onnx.save(model, source)
    quantize_dynamic(source, target, per_channel=per_channel,
                     weight_type=getattr(QuantType, weight_type))
    return target


def quantized_static(model: onnx.ModelProto, folder: Path, name: str,
                     feeds: list[dict[str, np.ndarray]], *, qdq: bool = True,
                     per_channel: bool = False) -> Path:
    """`model` quantised by onnxruntime's `quantize_static`, calibrated on `feeds`: QDQ
    pairs (QuantizeLinear / DequantizeLinear) or, with `qdq=False`, the QOperator format
    (QLinearConv, QLinearMatMul)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter(feeds)

        def get_next(self):
            return next(self.feeds, None)

    source, target = folder / f"{name}.f32.onnx", folder / f"{name}.onnx"
    onnx.save(model, source)
    quantize_static(source, target, Reader(), per_channel=per_channel,
                    quant_format=QuantFormat.QDQ if qdq else QuantFormat.QOperator)
    return target


def decoder_feeds(seq: int = 8, enc: int = 16, d: int = 512,
                  seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"hidden": rng.standard_normal((1, seq, d)).astype(np.float32),
            "encoder": rng.standard_normal((1, enc, d)).astype(np.float32)}
