"""`import_onnx` on small models built with onnx.helper, each compared with onnxruntime.

Every opset and attribute quirk the importer resolves gets a model in the form each opset
writes it; the imported graph runs through rlx (weights bound with `specialize`) on seeded
inputs and must match onnxruntime. Also: names, symbolic dims, subgraph captures, external
data (and its containment rules), and the errors of unsupported and malformed models.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rlx.errors import ModelImportError, UnsupportedOpError
from rlx.frontends import import_onnx
from rlx.ir import Constant, Input, Param, verify
from rlx.passes import specialize
from rlx.runtime import Session
from tests.weights.support import is_mapped

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


# -- helpers -----------------------------------------------------------------------------------
def value(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, opset: int, initializers=(), ir_version: int | None = None):
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if ir_version is not None:
        proto.ir_version = ir_version
    return proto


def const(name: str, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def feeds_for(proto: onnx.ModelProto, seed: int = 0, **given) -> dict[str, np.ndarray]:
    """Seeded values for every graph input not given (float normal, int small, bool)."""
    rng = np.random.default_rng(seed)
    initialized = {t.name for t in proto.graph.initializer}
    feeds = {}
    for v in proto.graph.input:
        if v.name in initialized:
            continue
        if v.name in given:
            feeds[v.name] = np.asarray(given[v.name])
            continue
        t = v.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        if dtype == np.bool_:
            feeds[v.name] = rng.random(shape) > 0.5
        elif np.issubdtype(dtype, np.integer):
            feeds[v.name] = rng.integers(0, 4, shape).astype(dtype)
        else:
            feeds[v.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def run_rlx(proto: onnx.ModelProto, feeds) -> list[np.ndarray]:
    graph, bindings = import_onnx(proto)
    verify(graph)
    bound, _ = specialize(graph, bindings)
    return Session().compile(bound).run(feeds)


def check(proto: onnx.ModelProto, *, seed: int = 0, rtol: float = 1e-5, atol: float = 1e-6,
          **given) -> list[np.ndarray]:
    """rlx and onnxruntime agree on `proto` (outputs, shapes, dtypes, values)."""
    feeds = feeds_for(proto, seed, **given)
    expected = ort.InferenceSession(proto.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, feeds)
    got = run_rlx(proto, feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, g.shape, e.dtype, e.shape)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    return got


def one_node(op: str, inputs, outputs, opset: int, initializers=(), **attrs):
    """A one-node model: `inputs`/`outputs` are (name, elem, shape) triples; an input name
    matching an initializer is fed by it."""
    init_names = {t.name for t in initializers}
    node = helper.make_node(op, [i[0] for i in inputs], [o[0] for o in outputs], **attrs)
    return model([node], [value(*i) for i in inputs if i[0] not in init_names and i[0]],
                 [value(*o) for o in outputs], opset, initializers)


# -- opset and attribute quirks ----------------------------------------------------------------
@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 2), (11, -1), (13, 1), (13, -3)])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_family_flattens_before_opset_13(op, opset, axis):
    check(one_node(op, [("x", F, [2, 3, 4])], [("y", F, None)], opset, axis=axis))


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID", "NOTSET"])
@pytest.mark.parametrize("strides", [[1, 1], [2, 2]])
def test_conv_auto_pad(auto_pad, strides):
    w = np.random.default_rng(1).standard_normal((4, 3, 3, 2)).astype(np.float32)
    attrs = {"pads": [1, 0, 1, 1]} if auto_pad == "NOTSET" else {}
    check(one_node("Conv", [("x", F, [1, 3, 7, 6]), ("w", F, None)], [("y", F, None)], 13,
                   [const("w", w)], auto_pad=auto_pad, strides=strides, **attrs))


@pytest.mark.parametrize("attrs", [
    {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"output_shape": [9, 8], "strides": [3, 2]},
    {"pads": [1, 0, 0, 1], "output_padding": [1, 1], "strides": [2, 2]},
])
def test_conv_transpose_output_shape_and_padding(attrs):
    w = np.random.default_rng(2).standard_normal((2, 3, 3, 3)).astype(np.float32)
    check(one_node("ConvTranspose", [("x", F, [1, 2, 3, 4]), ("w", F, None)],
                   [("y", F, None)], 13, [const("w", w)], **attrs), atol=1e-5)


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ("MaxPool", {"kernel_shape": [2, 2], "ceil_mode": 1, "strides": [2, 2]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1],
                     "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER"}),
    ("LpPool", {"kernel_shape": [2, 2], "p": 3}),
])
def test_pooling(op, attrs):
    check(one_node(op, [("x", F, [1, 2, 7, 7])], [("y", F, None)], 18, **attrs), atol=1e-5)


def test_max_pool_indices():
    check(one_node("MaxPool", [("x", F, [1, 2, 5, 5])], [("y", F, None), ("i", I64, None)],
                   12, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))


@pytest.mark.parametrize("opset", [9, 14, 15])
def test_batch_norm_versions(opset):
    rng = np.random.default_rng(3)
    params = [const(n, rng.standard_normal(3).astype(np.float32)) for n in "sbm"]
    params.append(const("v", rng.uniform(0.5, 2, 3).astype(np.float32)))
    check(one_node("BatchNormalization", [("x", F, [2, 3, 4])] + [(n, F, [3]) for n in "sbmv"],
                   [("y", F, None)], opset, params, epsilon=1e-3))


def test_batch_norm_training_mode_outputs_running_stats():
    check(one_node("BatchNormalization", [("x", F, [2, 3, 4, 5])] +
                   [(n, F, [3]) for n in ("s", "b", "m", "v")],
                   [("y", F, None), ("rm", F, None), ("rv", F, None)], 15,
                   training_mode=1), v=np.ones(3, np.float32), atol=1e-5)


@pytest.mark.parametrize("opset", [7, 12, 13])
@pytest.mark.parametrize("with_mask", [False, True])
def test_dropout_is_identity_in_inference(opset, with_mask):
    mask_type = BOOL if opset >= 10 else F  # the mask had x's type before opset 10
    outputs = [("y", F, None)] + ([("mask", mask_type, None)] if with_mask else [])
    proto = one_node("Dropout", [("x", F, [3, 4])], outputs, opset)
    if opset >= 10:
        check(proto)
        return
    # before opset 10 the oracles disagree on the mask (onnxruntime: float zeros, ONNX's
    # reference: bool ones); rlx follows the spec's type (x's) and every later opset's
    # meaning (all kept): y must still match onnxruntime
    feeds = feeds_for(proto)
    y, *mask = run_rlx(proto, feeds)
    np.testing.assert_array_equal(y, feeds["x"])
    for m in mask:
        assert m.dtype == np.float32 and np.all(m == 1)


@pytest.mark.parametrize("opset", [10, 11, 13])
def test_clip_bounds_as_attributes_or_inputs(opset):
    if opset < 11:
        proto = one_node("Clip", [("x", F, [3, 4])], [("y", F, None)], opset, min=-0.5,
                         max=0.25)
    else:
        proto = one_node("Clip", [("x", F, [3, 4]), ("", F, None), ("hi", F, [])],
                         [("y", F, None)], opset, [const("hi", np.float32(0.3))])
    check(proto)


def test_clip_bounds_at_run_time():
    check(one_node("Clip", [("x", F, [3, 4]), ("lo", F, []), ("hi", F, [])],
                   [("y", F, None)], 13), lo=np.float32(-0.2), hi=np.float32(0.4))


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split_attribute_input_and_num_outputs(opset):
    outputs = [("a", F, None), ("b", F, None), ("c", F, None)]
    if opset < 13:
        proto = one_node("Split", [("x", F, [7, 2])], outputs, opset, axis=0, split=[2, 2, 3])
    elif opset < 18:
        proto = one_node("Split", [("x", F, [7, 2]), ("s", I64, [3])], outputs, opset,
                         [const("s", np.array([1, 4, 2]))], axis=-2)
    else:
        proto = one_node("Split", [("x", F, [7, 2])], outputs, opset, axis=0, num_outputs=3)
    check(proto)


def test_split_sizes_at_run_time():
    check(one_node("Split", [("x", F, [6, 2]), ("s", I64, [2])], [("a", F, None),
                                                               ("b", F, None)], 13),
          s=np.array([2, 4]))


@pytest.mark.parametrize("op,opset,dynamic", [
    (op, opset, dynamic) for op in ("Squeeze", "Unsqueeze") for opset, dynamic in
    ((11, False), (13, False), (13, True))])  # axes are an attribute before opset 13
def test_squeeze_unsqueeze_axes_forms(op, opset, dynamic):
    axes = [1, -1] if op == "Unsqueeze" else [0, -1]
    shape = [1, 3, 1] if op == "Squeeze" else [3, 2]
    if opset < 13:
        check(one_node(op, [("x", F, shape)], [("y", F, None)], opset, axes=axes))
        return
    inits = [] if dynamic else [const("axes", np.array(axes))]
    proto = one_node(op, [("x", F, shape), ("axes", I64, [2])], [("y", F, None)], opset, inits)
    check(proto, axes=np.array(axes))


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2",
                                "ReduceLogSumExp", "ReduceSumSquare"])
@pytest.mark.parametrize("opset", [11, 18])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_forms(op, opset, keepdims):
    axes_as_input = opset >= (13 if op == "ReduceSum" else 18)
    if not axes_as_input:
        proto = one_node(op, [("x", F, [2, 3, 4])], [("y", F, None)], opset, axes=[0, -1],
                         keepdims=keepdims)
        check(proto, rtol=1e-5, atol=1e-5)
        return
    proto = one_node(op, [("x", F, [2, 3, 4]), ("axes", I64, [2])], [("y", F, None)], opset,
                     keepdims=keepdims)
    check(proto, axes=np.array([0, -1]), atol=1e-5)


def test_top_k_and_cumsum_operands_at_run_time():
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1, largest=0),
             helper.make_node("CumSum", ["v", "axis"], ["c"], exclusive=1, reverse=1)]
    proto = model(nodes, [value("x", F, [3, 5]), value("k", I64, [1]), value("axis", I64, [])],
                  [value("c", F, None), value("i", I64, None)], 13)
    check(proto, k=np.array([3]), axis=np.array(-2), atol=1e-5)


@pytest.mark.parametrize("shape", [[2, 3], []])
def test_bit_cast_reinterprets_bytes(shape):
    check(one_node("BitCast", [("x", F, shape)], [("y", TensorProto.INT32, None)], 26,
                   to=TensorProto.INT32), rtol=0, atol=0)


@pytest.mark.parametrize("noop", [0, 1])
def test_reduce_empty_axes(noop):
    proto = one_node("ReduceSum", [("x", F, [2, 3]), ("axes", I64, [0])], [("y", F, None)],
                     13, noop_with_empty_axes=noop)
    check(proto, axes=np.zeros(0, np.int64))


@pytest.mark.parametrize("opset", [2, 11, 13, 18])
def test_pad_versions(opset):
    if opset < 11:  # opset 2 is read as 7: Pad did not change in between
        check(one_node("Pad", [("x", F, [2, 3])], [("y", F, None)], opset, mode="reflect",
                       pads=[0, 1, 1, 2]))
        return
    inputs = [("x", F, [2, 3]), ("pads", I64, None), ("v", F, [])]
    inits = [const("pads", np.array([1, 0, 0, 2])), const("v", np.float32(1.5))]
    if opset >= 18:
        inputs.append(("axes", I64, [2]))
        inits.append(const("axes", np.array([-2, 1])))
    check(one_node("Pad", inputs, [("y", F, None)], opset, inits))


def test_pad_everything_at_run_time():
    proto = one_node("Pad", [("x", F, [2, 3]), ("pads", I64, [2]), ("v", F, []),
                             ("axes", I64, [1])], [("y", F, None)], 18, mode="constant")
    check(proto, pads=np.array([2, 1]), v=np.float32(-1), axes=np.array([-1]))


@pytest.mark.parametrize("opset,attrs,operand", [
    (9, {"mode": "nearest"}, ("scales", [1, 1, 2, 3])),
    (10, {"mode": "linear"}, ("scales", [1, 1, 2, 2])),
    (13, {"mode": "cubic", "coordinate_transformation_mode": "align_corners"},
     ("sizes", [1, 1, 5, 7])),
    (19, {"mode": "linear", "axes": [3, 2], "antialias": 1}, ("scales", [0.6, 0.5])),
    (19, {"mode": "nearest", "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"},
     ("sizes", [7, 8])),
])
@pytest.mark.parametrize("dynamic", [False, True])
def test_upsample_and_resize_versions(opset, attrs, operand, dynamic):
    name, values = operand
    array = np.asarray(values, np.float32 if name == "scales" else np.int64)
    elem = F if name == "scales" else I64
    if opset == 9:
        op, inputs = "Upsample", [("x", F, [1, 1, 3, 4]), (name, elem, [len(values)])]
    elif opset == 10:
        op, inputs = "Resize", [("x", F, [1, 1, 3, 4]), (name, elem, [len(values)])]
    else:
        empty = ("", F, None)
        roi_scales = [empty, empty] if name == "sizes" else [empty]
        op, inputs = "Resize", [("x", F, [1, 1, 3, 4]), *roi_scales,
                                (name, elem, [len(values)])]
    inits = [] if dynamic else [const(name, array)]
    check(one_node(op, inputs, [("y", F, None)], opset, inits, **attrs),
          **{name: array}, atol=1e-5)


@pytest.mark.parametrize("attrs,with_c", [
    ({}, True), ({"transA": 1, "alpha": 0.5}, True), ({"transB": 1, "beta": 2.0}, True),
    ({"transA": 1, "transB": 1}, False)])
def test_gemm_becomes_matmul(attrs, with_c):
    rng = np.random.default_rng(4)
    a_shape = [5, 3] if attrs.get("transA") else [3, 5]
    b = rng.standard_normal((4, 5) if attrs.get("transB") else (5, 4)).astype(np.float32)
    inputs = [("a", F, a_shape), ("b", F, None)] + ([("c", F, [4])] if with_c else [])
    inits = [const("b", b)] + ([const("c", rng.standard_normal(4).astype(np.float32))]
                               if with_c else [])
    proto = one_node("Gemm", inputs, [("y", F, None)], 13, inits, **attrs)
    check(proto, atol=1e-5)
    graph, _ = import_onnx(proto)
    assert "Gemm" not in {type(n.op).__name__ for n in graph.nodes()}
    assert "MatMul" in {type(n.op).__name__ for n in graph.nodes()}


@pytest.mark.parametrize("op", ["Sum", "Mean", "Max", "Min"])
@pytest.mark.parametrize("count", [1, 3])
def test_variadic_ops_chain(op, count):
    shapes = [[2, 3], [3], [1, 3]][:count]
    check(one_node(op, [(f"x{i}", F, s) for i, s in enumerate(shapes)], [("y", F, None)], 13))


@pytest.mark.parametrize("op,attrs", [
    ("LeakyRelu", {"alpha": 0.2}), ("Elu", {"alpha": 0.7}), ("Selu", {}),
    ("Selu", {"alpha": 1.5, "gamma": 2.0}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("ThresholdedRelu", {"alpha": 0.5}), ("Celu", {"alpha": 2.0}), ("Shrink", {"lambd": 0.4}),
    ("Gelu", {"approximate": "tanh"}), ("HardSwish", {}), ("Mish", {}), ("Softsign", {}),
])
def test_activations_with_attributes(op, attrs):
    opset = 20 if op == "Gelu" else 18
    check(one_node(op, [("x", F, [3, 5])], [("y", F, None)], opset, **attrs), atol=1e-5)


def test_negative_axes_everywhere():
    nodes = [
        helper.make_node("Concat", ["x", "x"], ["c"], axis=-1),
        helper.make_node("Gather", ["c", "i"], ["g"], axis=-2),
        helper.make_node("Flatten", ["g"], ["f"], axis=-1),
        helper.make_node("ArgMax", ["f"], ["y"], axis=-1, keepdims=0),
    ]
    proto = model(nodes, [value("x", F, [2, 3, 4]), value("i", I64, [2])],
                  [value("y", I64, None)], 13)
    check(proto, i=np.array([-1, 0]))


def test_cast_like_pow_mixed_types_and_where():
    nodes = [helper.make_node("CastLike", ["n", "x"], ["nf"]),
             helper.make_node("Pow", ["x", "n"], ["p"]),
             helper.make_node("Greater", ["p", "nf"], ["c"]),
             helper.make_node("Where", ["c", "p", "nf"], ["y"])]
    proto = model(nodes, [value("x", F, [2, 3]), value("n", I64, [3])],
                  [value("y", F, None)], 15)
    check(proto, n=np.array([1, 2, 3]))


# -- shapes and names --------------------------------------------------------------------------
def test_symbolic_and_unknown_dims():
    x = helper.make_tensor_value_info("x", F, ["batch", None, 4])
    proto = model([helper.make_node("Relu", ["x"], ["y"])], [x], [value("y", F, None)], 13)
    graph, _ = import_onnx(proto)
    (inp,) = graph.inputs()
    assert inp.shape.dims[0] == "batch" and isinstance(inp.shape.dims[1], str)
    assert inp.shape.dims[1] not in ("batch", "?")
    feeds = {"x": np.random.default_rng(5).standard_normal((2, 7, 4)).astype(np.float32)}
    (y,) = Session().compile(graph).run(feeds)
    np.testing.assert_array_equal(y, np.maximum(feeds["x"], 0))


def test_input_shapes_fix_unknown_dims():
    x = helper.make_tensor_value_info("x", F, [None, 3])
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Reshape", ["x", "s"], ["y"])]
    proto = model(nodes, [x], [value("y", F, None)], 13)
    graph, _ = import_onnx(proto, input_shapes={"x": (2, 3)})
    assert graph.node(graph.outputs[0]).shape.dims == (2, 3)
    with pytest.raises(ModelImportError, match="does not fit"):
        import_onnx(proto, input_shapes={"x": (2, 4)})
    with pytest.raises(ModelImportError, match="no graph input"):
        import_onnx(proto, input_shapes={"z": (1,)})


def test_names_params_and_initializers_listed_as_inputs():
    rng = np.random.default_rng(6)
    w = rng.standard_normal((3, 2)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]),
             helper.make_node("Identity", ["x"], ["x_copy"]),
             helper.make_node("Constant", [], ["k"], value=const("", np.float32(2)))]
    nodes.append(helper.make_node("Mul", ["y", "k"], ["z"]))
    # IR 3 style: the initializer is listed as a graph input too; it stays a param
    proto = model(nodes, [value("x", F, [4, 3]), value("w", F, [3, 2])],
                  [value("z", F, None), value("x_copy", F, None), value("w", F, None)], 13,
                  [const("w", w)], ir_version=3)
    graph, bindings = import_onnx(proto)
    assert [n.op.name for n in graph.inputs()] == ["x"]
    assert [n.op.name for n in graph.params()] == ["w"] and set(bindings) == {"w"}
    assert bindings["w"].dtype == np.float32 and bindings["w"].shape == (3, 2)
    assert [graph.node(o).name for o in graph.outputs] == ["z", "x_copy", "w"]
    assert any(isinstance(n.op, Constant) for n in graph.nodes())
    names = [n.name for n in graph.nodes() if n.name]
    assert len(names) == len(set(names))
    feeds = {"x": rng.standard_normal((4, 3)).astype(np.float32)}
    z, copy, w_out = Session().compile(specialize(graph, bindings)[0]).run(feeds)
    np.testing.assert_allclose(z, feeds["x"] @ w * 2, rtol=1e-6)
    np.testing.assert_array_equal(copy, feeds["x"])
    np.testing.assert_array_equal(w_out, w)


def test_native_dtypes_are_kept():
    arrays = {"h": np.arange(4, dtype=np.float16), "i": np.arange(4, dtype=np.int8),
              "b": np.array([True, False, True, True])}
    nodes = [helper.make_node("Identity", [n], [f"{n}_out"]) for n in arrays]
    proto = model(nodes, [], [value(f"{n}_out", helper.np_dtype_to_tensor_dtype(a.dtype), [4])
                              for n, a in arrays.items()], 13,
                  [const(n, a) for n, a in arrays.items()])
    graph, bindings = import_onnx(proto)
    for name, array in arrays.items():
        assert bindings[name].dtype == array.dtype
        np.testing.assert_array_equal(bindings[name], array)


def test_sparse_initializers_are_made_dense():
    values = numpy_helper.from_array(np.array([1.5, -2.0], np.float32), "w")
    indices = numpy_helper.from_array(np.array([1, 4], np.int64), "w_indices")
    sparse = helper.make_sparse_tensor(values, indices, [2, 3])
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [value("x", F, [2, 3])], [value("y", F, None)],
                              sparse_initializer=[sparse])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    _, bindings = import_onnx(proto)
    np.testing.assert_array_equal(bindings["w"], [[0, 1.5, 0], [0, -2, 0]])
    check(proto)


def test_shape_arithmetic_is_known_at_import():
    """Shape -> Gather -> Concat -> Reshape on static dims gives a static Reshape."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "zero_axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [const("zero", np.array(0)), const("zero_axes", np.array([0])),
             const("minus_one", np.array([-1]))]
    proto = model(nodes, [value("x", F, [2, 3, 4])], [value("y", F, None)], 13, inits)
    graph, bindings = import_onnx(proto)
    assert graph.node(graph.outputs[0]).shape.dims == (2, 12)
    assert not bindings and {type(n.op).__name__ for n in graph.nodes()} == {"Input", "Reshape"}
    check(proto)


def test_shape_arithmetic_on_a_symbolic_batch_runs():
    """With a symbolic batch the Reshape target stays a run-time computation."""
    w = np.random.default_rng(8).standard_normal((32, 5)).astype(np.float32)
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "zero_axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "flat"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"]),
             helper.make_node("MatMul", ["r", "w"], ["y"])]
    inits = [const("zero", np.array(0)), const("zero_axes", np.array([0])),
             const("flat", np.array([32])), const("w", w)]
    x = helper.make_tensor_value_info("x", F, ["batch", 4, 8])
    proto = model(nodes, [x], [value("y", F, None)], 13, inits)
    graph, _ = import_onnx(proto)
    assert graph.node(graph.outputs[0]).shape.dims[1] == 5
    rng = np.random.default_rng(9)
    for batch in (1, 3):
        feeds = {"x": rng.standard_normal((batch, 4, 8)).astype(np.float32)}
        expected = ort.InferenceSession(proto.SerializeToString()).run(None, feeds)[0]
        np.testing.assert_allclose(run_rlx(proto, feeds)[0], expected, rtol=1e-5, atol=1e-5)


# -- subgraphs ---------------------------------------------------------------------------------
def _branch(name: str, op: str, out: str):
    return helper.make_graph([helper.make_node(op, ["outer", "w"], [out])], name, [],
                             [value(out, F, [2, 3])])


def test_if_captures_outer_values():
    w = const("w", np.full((2, 3), 0.5, np.float32))
    nodes = [helper.make_node("Relu", ["x"], ["outer"]),
             helper.make_node("If", ["c"], ["y"], then_branch=_branch("t", "Add", "ty"),
                              else_branch=_branch("e", "Mul", "ey"))]
    proto = model(nodes, [value("x", F, [2, 3]), value("c", BOOL, [])], [value("y", F, None)],
                  13, [w])
    for flag in (True, False):
        check(proto, c=np.array(flag))
    graph, _ = import_onnx(proto)
    node = next(n for n in graph.nodes() if type(n.op).__name__ == "If")
    assert len(node.inputs) == 2  # the condition and the captured Relu output
    assert [n.op.name for n in node.op.then_branch.inputs()] == ["outer"]


def test_if_on_a_known_condition_keeps_one_branch():
    nodes = [helper.make_node("Relu", ["x"], ["outer"]),
             helper.make_node("Constant", [], ["c"], value=const("", np.array(True))),
             helper.make_node("If", ["c"], ["y"], then_branch=_branch("t", "Add", "ty"),
                              else_branch=_branch("e", "Mul", "ey"))]
    proto = model(nodes, [value("x", F, [2, 3])], [value("y", F, None)], 13,
                  [const("w", np.ones((2, 3), np.float32))])
    graph, _ = import_onnx(proto)
    assert "If" not in {type(n.op).__name__ for n in graph.nodes()}
    check(proto)


def test_loop_with_captures_and_scan_outputs():
    body = helper.make_graph(
        [helper.make_node("Add", ["acc", "step"], ["acc_out"]),
         helper.make_node("Cast", ["i"], ["i_f"], to=F),
         helper.make_node("Mul", ["acc_out", "i_f"], ["scan"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body", [value("i", I64, []), value("cond", BOOL, []), value("acc", F, [3])],
        [value("cond_out", BOOL, []), value("acc_out", F, [3]), value("scan", F, [3])])
    nodes = [helper.make_node("Loop", ["n", "", "init"], ["final", "all"], body=body)]
    proto = model(nodes, [value("n", I64, []), value("init", F, [3]), value("step", F, [3])],
                  [value("final", F, None), value("all", F, None)], 13)
    check(proto, n=np.array(4))
    check(proto, n=np.array(0), seed=1)


def test_loop_carried_value_that_grows():
    body = helper.make_graph(
        [helper.make_node("Concat", ["acc", "one"], ["acc_out"], axis=0),
         helper.make_node("Less", ["i", "limit"], ["cond_out"])],
        "body", [value("i", I64, []), value("cond", BOOL, []), value("acc", F, [None])],
        [value("cond_out", BOOL, []), value("acc_out", F, [None])])
    nodes = [helper.make_node("Loop", ["", "go", "init"], ["final"], body=body)]
    proto = model(nodes, [value("go", BOOL, []), value("init", F, [2])],
                  [value("final", F, None)], 13,
                  [const("one", np.ones(1, np.float32)), const("limit", np.array(3))])
    check(proto, go=np.array(True))


def test_scan_with_captures_and_directions():
    body = helper.make_graph(
        [helper.make_node("Add", ["state", "x_t"], ["summed"]),
         helper.make_node("Mul", ["summed", "scale"], ["state_out"]),
         helper.make_node("Identity", ["state_out"], ["y_t"])],
        "body", [value("state", F, [2]), value("x_t", F, [2])],
        [value("state_out", F, [2]), value("y_t", F, [2])])
    nodes = [helper.make_node("Scan", ["s0", "xs"], ["final", "ys"], body=body,
                              num_scan_inputs=1, scan_input_directions=[1],
                              scan_output_axes=[1])]
    proto = model(nodes, [value("s0", F, [2]), value("xs", F, [4, 2]), value("scale", F, [2])],
                  [value("final", F, None), value("ys", F, None)], 16)
    check(proto)


def test_nested_subgraph_captures_from_two_scopes_up():
    """An If inside a Loop body reads a top-level value: both levels capture it."""
    inner = helper.make_graph([helper.make_node("Add", ["acc", "bias"], ["t"])], "inner", [],
                              [value("t", F, [2])])
    other = helper.make_graph([helper.make_node("Sub", ["acc", "bias"], ["e"])], "other", [],
                              [value("e", F, [2])])
    body = helper.make_graph(
        [helper.make_node("Greater", ["i", "half"], ["late"]),
         helper.make_node("If", ["late"], ["acc_out"], then_branch=inner, else_branch=other),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body", [value("i", I64, []), value("cond", BOOL, []), value("acc", F, [2])],
        [value("cond_out", BOOL, []), value("acc_out", F, [2])])
    nodes = [helper.make_node("Relu", ["x"], ["bias"]),
             helper.make_node("Loop", ["n", "", "init"], ["final"], body=body)]
    proto = model(nodes, [value("x", F, [2]), value("n", I64, []), value("init", F, [2])],
                  [value("final", F, None)], 13, [const("half", np.array(1))])
    check(proto, n=np.array(4))


@pytest.mark.parametrize("op,opset,inputs,attrs", [
    ("MeanVarianceNormalization", 13, [("x", F, [2, 3, 4, 2])], {"axes": [0, 2]}),
    ("RMSNormalization", 23, [("x", F, [2, 3, 4]), ("s", F, [4])], {"epsilon": 1e-3}),
    ("GroupNormalization", 21, [("x", F, [2, 4, 3]), ("s", F, [4]), ("b", F, [4])],
     {"num_groups": 2}),
])
def test_ops_expanded_through_their_onnx_function(op, opset, inputs, attrs):
    """No converter of its own: the op's ONNX function body is imported in its place."""
    check(one_node(op, inputs, [("y", F, None)], opset, **attrs), atol=1e-5)


@pytest.mark.parametrize("given", [{}, {"alpha": 3.0}])
def test_model_local_functions_are_inlined(given):
    """A model's own function, with an attribute reference (given, or its default)."""
    factor = helper.make_node("Constant", [], ["k"])
    factor.attribute.append(helper.make_attribute_ref("value_float", onnx.AttributeProto.FLOAT,
                                                      ref_attr_name="alpha"))
    scaled = helper.make_function(
        "local.fns", "ScaledRelu", ["x"], ["y"],
        [helper.make_node("Relu", ["x"], ["r"]), factor, helper.make_node("Mul", ["r", "k"],
                                                                           ["y"])],
        opset_imports=[helper.make_opsetid("", 13)],
        attribute_protos=[helper.make_attribute("alpha", 2.0)])
    node = helper.make_node("ScaledRelu", ["x"], ["y"], domain="local.fns", **given)
    graph = helper.make_graph([node], "g", [value("x", F, [3])], [value("y", F, None)])
    proto = helper.make_model(graph, functions=[scaled], opset_imports=[
        helper.make_opsetid("", 13), helper.make_opsetid("local.fns", 1)])
    got = check(proto)[0]
    feeds = feeds_for(proto)
    np.testing.assert_allclose(got, np.maximum(feeds["x"], 0) * given.get("alpha", 2.0))


# -- external data -----------------------------------------------------------------------------
def _external_model(folder: Path, location: str) -> Path:
    w = const("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    onnx.external_data_helper.set_external_data(w, location=location, offset=0, length=24)
    proto = model([helper.make_node("Add", ["x", "w"], ["y"])], [value("x", F, [2, 3])],
                  [value("y", F, None)], 13, [w])
    w.ClearField("raw_data")
    path = folder / "model.onnx"
    path.write_bytes(proto.SerializeToString())
    return path


def test_external_data_is_memory_mapped(tmp_path):
    (tmp_path / "weights.bin").write_bytes(np.arange(6, dtype=np.float32).tobytes())
    graph, bindings = import_onnx(_external_model(tmp_path, "weights.bin"))
    assert is_mapped(bindings["w"])  # a view of the (leased) map of weights.bin
    np.testing.assert_array_equal(bindings["w"], np.arange(6).reshape(2, 3))
    x = np.ones((2, 3), np.float32)
    (y,) = Session().compile(specialize(graph, bindings)[0]).run({"x": x})
    np.testing.assert_array_equal(y, x + np.arange(6).reshape(2, 3))


@pytest.mark.parametrize("location,message", [
    ("/etc/weights.bin", "absolute path"),
    ("../weights.bin", "'..'"),
    ("sub/../../weights.bin", "'..'"),
    ("link.bin", "symbolic link"),
    ("missing.bin", "No such file"),
])
def test_external_data_must_stay_in_the_model_folder(tmp_path, location, message):
    folder = tmp_path / "model"
    folder.mkdir()
    outside = tmp_path / "weights.bin"
    outside.write_bytes(np.zeros(6, np.float32).tobytes())
    os.symlink(outside, folder / "link.bin")
    with pytest.raises(ModelImportError, match=message):
        import_onnx(_external_model(folder, location))


def test_external_data_length_and_bounds_are_checked(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"\0" * 20)  # 6 floats need 24 bytes
    with pytest.raises(ModelImportError, match="runs past the end"):
        import_onnx(_external_model(tmp_path, "weights.bin"))


def test_external_data_of_an_in_memory_model_needs_a_folder(tmp_path):
    path = _external_model(tmp_path, "weights.bin")
    (tmp_path / "weights.bin").write_bytes(np.zeros(6, np.float32).tobytes())
    proto = onnx.load(str(path), load_external_data=False)
    with pytest.raises(ModelImportError, match="base_dir"):
        import_onnx(proto)
    graph, bindings = import_onnx(proto, base_dir=tmp_path)
    assert bindings["w"].shape == (2, 3)


# -- errors ------------------------------------------------------------------------------------
def test_unsupported_ops_are_listed_together():
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Bernoulli", ["a"], ["b"]),
             helper.make_node("Frobnicate", ["b"], ["c"], domain="com.example"),
             helper.make_node("StringNormalizer", ["c"], ["y"])]
    proto = model(nodes, [value("x", F, [2])], [value("y", F, None)], 13)
    with pytest.raises(UnsupportedOpError) as info:
        import_onnx(proto)
    assert info.value.op_types == ["ai.onnx.Bernoulli", "ai.onnx.StringNormalizer",
                                   "com.example.Frobnicate"]
    assert "com.example.Frobnicate: no converter for any opset of com.example" in str(info.value)


def test_unsupported_op_says_where_rlx_does_convert_it():
    """An op written under the wrong domain, or at an opset where no converter (or ONNX
    function body) exists, is named with the domain and where rlx converts it."""
    nodes = [helper.make_node("FusedConv", ["x", "w"], ["y"], domain="org.example")]
    proto = model(nodes, [value("x", F, [1, 1, 3, 3]), value("w", F, [1, 1, 1, 1])],
                  [value("y", F, None)], 13)
    proto.opset_import.append(helper.make_opsetid("org.example", 1))
    with pytest.raises(UnsupportedOpError, match=r"org\.example\.FusedConv: rlx converts "
                                                 r"com\.microsoft\.FusedConv"):
        import_onnx(proto)
    nodes = [helper.make_node("QuickGelu", ["x"], ["y"])]
    proto = model(nodes, [value("x", F, [2])], [value("y", F, None)], 13)
    with pytest.raises(UnsupportedOpError, match=r"ai\.onnx\.QuickGelu: rlx converts "
                                                 r"com\.microsoft\.QuickGelu"):
        import_onnx(proto)


def test_nchwc_layout_is_refused_naming_the_level_to_save_at():
    nodes = [helper.make_node("ReorderInput", ["x"], ["y"], domain="com.microsoft.nchwc")]
    proto = model(nodes, [value("x", F, [1, 8, 2, 2])], [value("y", F, None)], 13)
    with pytest.raises(UnsupportedOpError, match="ORT_ENABLE_EXTENDED"):
        import_onnx(proto)


def test_unsupported_ops_inside_subgraphs_are_listed_too():
    branch = helper.make_graph([helper.make_node("Multinomial", ["x"], ["t"])], "b", [],
                               [value("t", F, None)])
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)]
    proto = model(nodes, [value("x", F, [2]), value("c", BOOL, [])], [value("y", F, None)], 13)
    with pytest.raises(UnsupportedOpError, match="Multinomial"):
        import_onnx(proto)


def test_bad_protobuf(tmp_path):
    path = tmp_path / "broken.onnx"
    path.write_bytes(b"\xff\xff\xff garbage")
    with pytest.raises(ModelImportError, match="not an ONNX model"):
        import_onnx(path)
    with pytest.raises(ModelImportError, match="cannot read"):
        import_onnx(tmp_path / "absent.onnx")


def test_undefined_input_names_the_node():
    nodes = [helper.make_node("Relu", ["nowhere"], ["y"], name="act")]
    proto = model(nodes, [value("x", F, [2])], [value("y", F, None)], 13)
    with pytest.raises(ModelImportError, match="node 'act' \\(Relu\\): input 'nowhere'"):
        import_onnx(proto)


def test_cycle_names_a_node():
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"], name="second")]
    proto = model(nodes, [value("x", F, [2])], [value("a", F, None)], 13)
    with pytest.raises(ModelImportError, match="cycle"):
        import_onnx(proto)


def test_unsorted_nodes_are_ordered():
    nodes = [helper.make_node("Neg", ["a"], ["y"]), helper.make_node("Relu", ["x"], ["a"])]
    check(model(nodes, [value("x", F, [3])], [value("y", F, None)], 13))


def test_wrong_initializer_size_names_the_initializer():
    bad = const("w", np.zeros(6, np.float32))
    bad.dims[:] = [2, 4]
    proto = model([helper.make_node("Add", ["x", "w"], ["y"])], [value("x", F, [2, 4])],
                  [value("y", F, None)], 13, [bad])
    with pytest.raises(ModelImportError, match="initializer 'w': holds 24 bytes"):
        import_onnx(proto)


@pytest.mark.parametrize("node,message", [
    (helper.make_node("Concat", ["x", "x"], ["y"]), "attribute 'axis' is required"),
    (helper.make_node("Softmax", ["x"], ["y"], axis="last"), "'axis' must be int, got string"),
    (helper.make_node("If", ["c"], ["y"], then_branch=helper.make_graph([], "t", [], [])),
     "'else_branch' is required"),
    (helper.make_node("Split", ["x"], ["a", "b"], axis=5), "Split"),
    (helper.make_node("Transpose", ["x"], ["y"], perm=[0, 0]), "perm"),
])
def test_malformed_nodes_are_import_errors(node, message):
    proto = model([node], [value("x", F, [2, 4]), value("c", BOOL, [])],
                  [value(o, F, None) for o in node.output], 13)
    with pytest.raises(ModelImportError, match=message):
        import_onnx(proto)


def test_opset_range():
    proto = one_node("Relu", [("x", F, [2])], [("y", F, None)], 13)
    proto.opset_import[0].version = 999
    with pytest.raises(ModelImportError, match="newer"):
        import_onnx(proto)
    old = one_node("Relu", [("x", F, [2])], [("y", F, None)], 6)
    graph, _ = import_onnx(old)  # Relu is unchanged from opset 6 to 7
    assert isinstance(graph.node(0).op, Input) and not isinstance(graph.node(0).op, Param)


def _if_with_a_branch_for_other_shapes() -> onnx.ModelProto:
    """then: x reshaped to [4, -1], impossible for x of 6 values; else: x doubled."""
    shape = const("shape", np.array([4, -1], np.int64))
    then = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("ReduceSum", ["r"], ["y_then"], keepdims=0)],
        "then", [], [value("y_then", TensorProto.FLOAT, None)], [shape])
    other = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["y_else"])], "else", [],
        [value("y_else", TensorProto.FLOAT, [6])])
    return model([helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other)],
                 [value("cond", TensorProto.BOOL, []), value("x", TensorProto.FLOAT, [6])],
                 [value("y", TensorProto.FLOAT, None)], 17)


def test_a_branch_that_cannot_fit_fails_only_when_taken():
    from rlx.errors import KernelError

    proto = _if_with_a_branch_for_other_shapes()
    x = np.arange(6, dtype=np.float32)
    (y,) = run_rlx(proto, {"cond": np.array(False), "x": x})
    np.testing.assert_array_equal(y, 2 * x)
    with pytest.raises(KernelError, match="does not fit the graph's shapes"):
        run_rlx(proto, {"cond": np.array(True), "x": x})
