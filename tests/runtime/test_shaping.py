"""Shape and indexing kernels against ONNX's reference evaluator, in static and dynamic forms.

Where `onnx.reference` strays from the ONNX spec (negative pads, which numpy cannot pad, and
Slice's start clamping for negative steps) ONNX Runtime is the oracle instead.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from rlx.errors import KernelError, ShapeError
from rlx.ir import UNKNOWN, DType, Graph, Shape, graph_from_json, graph_to_json, verify
from rlx.ir.ops.blocks import DepthToSpace, DepthToSpaceMode, Pad, PadMode, SpaceToDepth, Tile
from rlx.ir.ops.generators import Fill, Range, ShapeOf, Size
from rlx.ir.ops.indexing import (
    Compress,
    GatherElements,
    GatherND,
    NonZero,
    OneHot,
    ScatterElements,
    ScatterND,
    ScatterReduction,
    Trilu,
)
from rlx.ir.ops.shaping import Expand, Flatten, Gather, Reshape, Squeeze, Transpose, Unsqueeze
from rlx.ir.ops.slicing import Concat, Slice, Split
from tests.support import build_op_graph, onnx_reference, run_op

I64_MAX, I64_MIN = 2**63 - 1, -(2**63)


def rand(*shape: int, dtype=np.float32) -> np.ndarray:
    return np.random.default_rng(sum(shape) + len(shape)).standard_normal(shape).astype(dtype)


def i64(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


def check(op, inputs, expected, *, constant=()) -> None:
    """Run `op` and compare every output exactly with the oracle's."""
    outs = run_op(op, inputs, constant=constant)
    assert len(outs) == len(expected)
    for got, want in zip(outs, expected):
        np.testing.assert_array_equal(got, want)
        assert got.shape == want.shape and got.dtype == want.dtype


def inferred(op, inputs) -> Shape:
    """The shape inference gives the op's (first) output in a one-node graph."""
    g, _ = build_op_graph(op, inputs)
    return g.node(g.outputs[0]).shape


def ort_reference(op_type: str, inputs, **attrs) -> list[np.ndarray]:
    """ONNX Runtime's output for one node (opset 21)."""
    import onnxruntime as ort

    names = [f"in{i}" for i in range(len(inputs))]
    info = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
            for n, x in zip(names, inputs)]
    out = helper.make_tensor_value_info("out", info[0].type.tensor_type.elem_type, None)
    graph = helper.make_graph([helper.make_node(op_type, names, ["out"], **attrs)], "g",
                              info, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip(names, inputs)))


# -- Reshape -----------------------------------------------------------------------------------
RESHAPES = [
    ((2, 3, 4), (4, -1), False),
    ((2, 3, 4), (0, -1), False),
    ((2, 3, 4), (-1,), False),
    ((2, 3, 4), (2, 0, 2, -1), False),
    ((2, 0, 4), (0, 4, -1), False),
    ((0, 3), (3, 0), True),
    ((), (1, 1), False),
    ((1,), (), False),
]


@pytest.mark.parametrize("shape,target,allowzero", RESHAPES)
def test_reshape_static_and_dynamic(shape, target, allowzero):
    x = rand(*shape)
    want = onnx_reference("Reshape", [x, i64(*target)], allowzero=int(allowzero))
    check(Reshape(target, allowzero), [x], want)
    check(Reshape(None, allowzero), [x, i64(*target)], want)
    assert inferred(Reshape(None), [x, i64(*target)]).dims == (UNKNOWN,) * len(target)


@pytest.mark.parametrize("dims,target,want", [
    (("b", 3, 4), (0, -1), ("b", 12)),
    (("b", 3, 4), (0, 3, 2, 2), ("b", 3, 2, 2)),
    (("b", 3, 4), (-1, 4), (UNKNOWN, 4)),
    ((2, "s", 4), (8, -1), (8, "s")),
    ((2, "?", 4), (8, -1), (8, UNKNOWN)),
])
def test_reshape_infers_symbolic_dims(dims, target, want):
    assert Reshape(target).infer([Shape(dims)]).dims == want


@pytest.mark.parametrize("target", [(4, 2), (4, -1), (-1, -1), (0, 0, 0, -2)])
def test_reshape_rejects_bad_targets(target):
    with pytest.raises(ShapeError, match="Reshape: .*(cannot reshape|-1|copies)"):
        Reshape(target).infer([Shape((2, 3))])


# -- Transpose, Concat ------------------------------------------------------------------------
@pytest.mark.parametrize("shape,perm", [
    ((2, 3, 4), None), ((2, 3, 4), (1, 0, 2)), ((2, 3, 4), (-1, 0, 1)), ((0, 3), (1, 0)),
    ((), None), ((5,), (0,)),
])
def test_transpose(shape, perm):
    x = rand(*shape)
    attrs = {} if perm is None else {"perm": [p % len(shape) for p in perm]}
    check(Transpose(perm), [x], onnx_reference("Transpose", [x], **attrs))


@pytest.mark.parametrize("perm", [(0, 0, 1), (0, 1), (0, 1, 3)])
def test_transpose_rejects_bad_perm(perm):
    with pytest.raises(ShapeError, match="Transpose: perm .* is not a permutation"):
        Transpose(perm).infer([Shape((2, 3, 4))])


@pytest.mark.parametrize("shapes,axis", [
    ([(2, 3), (2, 1), (2, 0)], -1), ([(1, 4), (3, 4)], 0), ([(2, 3, 4)], 1),
    ([(0, 2), (0, 2)], 0),
])
def test_concat(shapes, axis):
    xs = [rand(*s) for s in shapes]
    check(Concat(axis), xs, onnx_reference("Concat", xs, axis=axis))


def test_concat_infers_symbolic_dims():
    got = Concat(1).infer([Shape(("b", 3)), Shape((2, "n")), Shape(("b", 0))])
    assert got.dims == (2, UNKNOWN)
    assert Concat(0).infer([Shape(("n", 2)), Shape((0, 2))]).dims == ("n", 2)


def test_concat_rejects_dim_mismatch():
    with pytest.raises(ShapeError, match="Concat: dim 0 differs off the concat axis 1"):
        Concat(1).infer([Shape((2, 3)), Shape((4, 3))])
    with pytest.raises(ShapeError, match="Concat: inputs must share a dtype"):
        Concat(0).infer([Shape((2,)), Shape((2,), DType.I64)])


# -- Slice -------------------------------------------------------------------------------------
SLICES = [  # shape, starts, ends, axes, steps
    ((5, 6), (1,), (4,), None, None),
    ((5, 6), (1, -4), (I64_MAX, -1), (0, 1), (2, 1)),
    ((5, 6), (-1,), (I64_MIN,), (-1,), (-1,)),
    ((5, 6), (10, 3), (-10, 0), (0, 1), (-2, -1)),
    ((5, 6), (-100,), (100,), (1,), (3,)),
    ((5, 6), (4,), (1,), (0,), (1,)),
    ((4, 0, 3), (0, 0), (2, 5), (0, 1), None),
    ((3, 4, 5), (1, 1), (3, I64_MAX), (-1, 0), (2, 1)),
]


@pytest.mark.parametrize("shape,starts,ends,axes,steps", SLICES)
def test_slice_static_and_dynamic(shape, starts, ends, axes, steps):
    x = rand(*shape)
    full_axes = tuple(range(len(starts))) if axes is None else axes
    bounds = [i64(*starts), i64(*ends), i64(*full_axes), i64(*(steps or (1,) * len(starts)))]
    want = onnx_reference("Slice", [x, *bounds])
    check(Slice(starts, ends, axes, steps), [x], want)
    check(Slice(), [x, *bounds], want)
    assert inferred(Slice(), [x, *bounds]).dims == (UNKNOWN,) * len(shape)


def test_slice_dynamic_with_default_axes_and_steps():
    x = rand(4, 5)
    want = onnx_reference("Slice", [x, i64(1, -3), i64(3, 5)])
    check(Slice(), [x, i64(1, -3), i64(3, 5)], want)
    check(Slice(), [x, i64(1), i64(3), np.array([-1], np.int32)], [x[:, 1:3]])


def test_slice_negative_step_clamps_start_into_the_axis():
    # ONNX spec: with a negative step, start is clamped into [0, dim - 1], so start -10 on a
    # 5-long axis selects element 0 (ONNX Runtime agrees; onnx.reference slices as Python)
    x = np.arange(5, dtype=np.float32)
    bounds = [i64(-10), i64(I64_MIN), i64(0), i64(-1)]
    check(Slice((-10,), (I64_MIN,), None, (-1,)), [x], ort_reference("Slice", [x, *bounds]))


def test_slice_infers_symbolic_dims():
    x = Shape(("b", 4))
    assert Slice((0, 1), (I64_MAX, 3)).infer([x]).dims == ("b", 2)
    assert Slice((1,), (3,)).infer([x]).dims == (UNKNOWN, 4)


@pytest.mark.parametrize("op,match", [
    (Slice((0,), (1,), (2,)), "out of range"),
    (Slice((0, 0), (1, 1), (1, -1)), "repeated axis"),
    (Slice((0,), (1,), None, (0,)), "step is 0"),
    (Slice((0, 1), (1,)), "differ in length"),
    (Slice((0,)), "starts and ends"),
])
def test_slice_rejects_bad_bounds(op, match):
    with pytest.raises(ShapeError, match=f"Slice: .*{match}"):
        op.infer([Shape((2, 3))])


# -- Gather and Scatter ------------------------------------------------------------------------
@pytest.mark.parametrize("shape,indices,axis", [
    ((5, 4), np.array([0, -1, 3, -5], np.int64), 0),
    ((3, 4, 2), np.array([[1, -2], [0, 3]], np.int32), 1),
    ((3, 4), np.array(-1, np.int64), -1),
    ((3, 4), np.zeros((0, 2), np.int64), 0),
    ((6,), np.array(2, np.int64), 0),
])
def test_gather(shape, indices, axis):
    x = rand(*shape)
    check(Gather(axis), [x, indices], onnx_reference("Gather", [x, indices], axis=axis))


@pytest.mark.parametrize("index", [0, 3, -1, -4])
def test_gather_one_index_of_a_transposed_view(index):
    """One index picks a view (the fast path) that must equal onnx.reference's copy."""
    x = np.ascontiguousarray(rand(4, 2, 5)).transpose(2, 1, 0)[:4]  # non-contiguous
    idx = np.array(index, np.int64)
    (got,) = run_op(Gather(0), [x, idx])
    np.testing.assert_array_equal(got, onnx_reference("Gather", [np.ascontiguousarray(x),
                                                                 idx], axis=0)[0])


def test_gather_one_index_out_of_range_is_an_error():
    with pytest.raises(KernelError, match="out of bounds"):
        run_op(Gather(1), [rand(2, 3), np.array(3, np.int64)])


def test_gather_rejects_axis_out_of_range():
    with pytest.raises(ShapeError, match="Gather: axis 2 out of range for rank 2"):
        Gather(2).infer([Shape((2, 3)), Shape((4,), DType.I64)])
    with pytest.raises(ShapeError, match="Gather: indices must be i32 or i64"):
        Gather(0).infer([Shape((2, 3)), Shape((4,))])


@pytest.mark.parametrize("shape,ishape,axis", [((3, 4), (2, 4), 0), ((3, 4), (3, 6), -1),
                                               ((2, 3, 4), (2, 2, 3), 1), ((3,), (0,), 0)])
def test_gather_elements(shape, ishape, axis):
    x = rand(*shape)
    n = shape[axis]
    idx = np.random.default_rng(1).integers(-n, n, ishape).astype(np.int64)
    # onnx.reference mishandles a negative axis (so it gets the normalised one) and refuses
    # indices shorter than data off the axis, which ONNX allows (ORT judges those)
    positive = axis % len(shape)
    shorter = any(i != d for k, (i, d) in enumerate(zip(ishape, shape)) if k != positive)
    oracle = ort_reference if shorter else onnx_reference
    check(GatherElements(axis), [x, idx], oracle("GatherElements", [x, idx], axis=positive))


@pytest.mark.parametrize("shape,indices,batch_dims", [
    ((2, 3), [[0, 1], [1, -1]], 0),
    ((2, 3, 4), [[1], [0]], 0),
    ((2, 3, 4), [[[1, 2]], [[0, -1]]], 0),
    ((2, 3, 4), [[1], [2]], 1),
    ((2, 3, 4), [[[0, 1], [2, 3]], [[1, 1], [0, 0]]], 1),
    ((2, 3), np.zeros((0, 2), int), 0),
])
def test_gather_nd(shape, indices, batch_dims):
    x = rand(*shape)
    idx = np.asarray(indices, np.int64)
    check(GatherND(batch_dims), [x, idx],
          onnx_reference("GatherND", [x, idx], batch_dims=batch_dims))


@pytest.mark.parametrize("reduction", list(ScatterReduction))
def test_scatter_nd(reduction):
    data = rand(4, 3)
    unique = reduction is ScatterReduction.NONE  # repeated indices only with a reduction
    idx = i64(3, 0, -4)[:, None] if unique else i64(1, 3, 1)[:, None]
    updates = rand(3, 3)
    want = onnx_reference("ScatterND", [data, idx, updates], reduction=reduction.value)
    check(ScatterND(reduction), [data, idx, updates], want)


def test_scatter_nd_full_index_tuples():
    data, idx, updates = rand(2, 3), i64(0, 2, 1, 0).reshape(2, 2), rand(2)
    check(ScatterND(), [data, idx, updates], onnx_reference("ScatterND", [data, idx, updates]))


@pytest.mark.parametrize("reduction", list(ScatterReduction))
@pytest.mark.parametrize("axis", [0, -1])
def test_scatter_elements(reduction, axis):
    data = rand(3, 4)
    idx = np.array([[1, 0, 2, 1], [-1, 0, 1, 2]], np.int64)
    if axis == -1:
        idx = np.array([[0, 3, 2], [1, -1, 0]], np.int64)
    if reduction is ScatterReduction.NONE:
        idx = idx[:1]  # no repeated target within one update set
    updates = rand(*idx.shape)
    want = onnx_reference("ScatterElements", [data, idx, updates], axis=axis,
                          reduction=reduction.value)
    check(ScatterElements(axis, reduction), [data, idx, updates], want)


def test_scatter_rejects_mismatched_updates():
    with pytest.raises(ShapeError, match="ScatterND: updates f32\\[2, 4\\] must have dims"):
        ScatterND().infer([Shape((4, 3)), Shape((2, 1), DType.I64), Shape((2, 4))])
    with pytest.raises(ShapeError, match="ScatterElements: indices .* must have the rank"):
        ScatterElements().infer([Shape((4, 3)), Shape((2,), DType.I64), Shape((2,))])


# -- Expand, Tile, Pad -------------------------------------------------------------------------
@pytest.mark.parametrize("shape,target", [
    ((3, 1), (2, 1, 4)), ((2, 1), (1,)), ((1, 3), (0, 3)), ((), (2, 2)), ((4,), (3, 1)),
])
def test_expand_static_and_dynamic(shape, target):
    x = rand(*shape)
    want = onnx_reference("Expand", [x, i64(*target)])
    check(Expand(target), [x], want)
    check(Expand(None), [x, i64(*target)], want)


def test_expand_dynamic_keeps_static_non_unit_dims():
    got = inferred(Expand(None), [rand(3, 1), i64(2, 1, 4)])
    assert got.dims == (UNKNOWN, 3, UNKNOWN)


def test_expand_rejects_incompatible_shape():
    with pytest.raises(ShapeError, match="Expand: cannot broadcast"):
        Expand((2, 4)).infer([Shape((2, 3))])


@pytest.mark.parametrize("shape,repeats", [((2, 3), (2, 1)), ((2, 3), (0, 3)),
                                           ((1, 2, 2), (3, 1, 2)), ((0, 2), (4, 2))])
def test_tile_static_and_dynamic(shape, repeats):
    x = rand(*shape)
    want = onnx_reference("Tile", [x, i64(*repeats)])
    check(Tile(repeats), [x], want)
    check(Tile(None), [x, i64(*repeats)], want)
    assert inferred(Tile(None), [x, i64(*repeats)]).dims == (UNKNOWN,) * len(shape)


@pytest.mark.parametrize("mode", list(PadMode))
@pytest.mark.parametrize("shape,pads", [((3, 4), (1, 2, 2, 1)), ((5,), (3, 0)),
                                        ((2, 3, 4), (0, 1, 2, 1, 0, 2))])
def test_pad_static_and_dynamic(mode, shape, pads):
    x = rand(*shape)
    value = np.array(1.5, np.float32)
    want = onnx_reference("Pad", [x, i64(*pads), value], mode=mode.value)
    check(Pad(mode, pads, 1.5), [x], want)
    check(Pad(mode), [x, i64(*pads), value], want)
    if mode is PadMode.CONSTANT:
        check(Pad(mode), [x, i64(*pads)], onnx_reference("Pad", [x, i64(*pads)]))
    assert inferred(Pad(mode), [x, i64(*pads)]).dims == (UNKNOWN,) * len(shape)


# cropping everything away leaves nothing to reflect or repeat: only constant mode then
NEGATIVE_PADS = [(mode, pads) for mode in PadMode for pads in [(-2, 3), (3, -2), (-1, -2)]]
NEGATIVE_PADS.append((PadMode.CONSTANT, (0, -6)))


@pytest.mark.parametrize("mode,pads", NEGATIVE_PADS)
def test_pad_negative_pads_crop(mode, pads):
    x = np.arange(6, dtype=np.float32)
    want = ort_reference("Pad", [x, i64(*pads)], mode=mode.value)
    check(Pad(mode, pads), [x], want)


def test_pad_rejects_bad_pads():
    with pytest.raises(ShapeError, match="Pad: pads .* must have 2 \\* rank = 4 entries"):
        Pad(PadMode.CONSTANT, (1, 1)).infer([Shape((2, 3))])
    with pytest.raises(ShapeError, match="Pad: pads .* crop more than"):
        Pad(PadMode.CONSTANT, (-2, -1)).infer([Shape((2,))])


# -- Split, Squeeze, Unsqueeze, Flatten --------------------------------------------------------
@pytest.mark.parametrize("shape,axis,sizes", [((6, 2), 0, (1, 2, 3)), ((2, 5), -1, (2, 0, 3)),
                                              ((4,), 0, (4,)), ((0, 3), 0, (0, 0))])
def test_split(shape, axis, sizes):
    x = rand(*shape)
    want = onnx_reference("Split", [x, i64(*sizes)], n_outputs=len(sizes), axis=axis)
    check(Split(axis, sizes), [x], want)


def test_split_rejects_sizes_not_summing_to_the_dim():
    with pytest.raises(ShapeError, match="Split: sizes \\(2, 2\\) sum to 4, but axis 1"):
        Split(1, (2, 2)).infer([Shape((3, 5))])


@pytest.mark.parametrize("shape,axes", [((1, 3, 1), None), ((1, 3, 1), (0, -1)),
                                        ((1, 3, 1), (2,)), ((1,), None), ((0, 1), (1,))])
def test_squeeze(shape, axes):
    x = rand(*shape)
    operands = [x] if axes is None else [x, i64(*axes)]
    check(Squeeze(axes), [x], onnx_reference("Squeeze", operands))


def test_squeeze_errors():
    with pytest.raises(ShapeError, match="Squeeze: axis 1 of f32\\[1, 3\\] has size 3"):
        Squeeze((1,)).infer([Shape((1, 3))])
    with pytest.raises(ShapeError, match="Squeeze: axes=None needs static dims"):
        Squeeze().infer([Shape(("b", 1))])
    assert Squeeze((1,)).infer([Shape(("b", 1))]).dims == ("b",)


@pytest.mark.parametrize("shape,axes", [((3, 4), (0,)), ((3, 4), (-1, 1)), ((), (0,)),
                                        ((3,), (0, 3, 2)), ((0, 2), (1,))])
def test_unsqueeze(shape, axes):
    x = rand(*shape)
    check(Unsqueeze(axes), [x], onnx_reference("Unsqueeze", [x, i64(*axes)]))


def test_unsqueeze_rejects_repeated_axes():
    with pytest.raises(ShapeError, match="Unsqueeze: repeated axis"):
        Unsqueeze((0, -3)).infer([Shape((2,))])


@pytest.mark.parametrize("shape,axis", [((2, 3, 4), 1), ((2, 3, 4), 0), ((2, 3, 4), 3),
                                        ((2, 3, 4), -1), ((2, 3, 0), 2), ((), 0)])
def test_flatten(shape, axis):
    x = rand(*shape)
    check(Flatten(axis), [x], onnx_reference("Flatten", [x], axis=axis))


def test_flatten_infers_symbolic_dims():
    assert Flatten(1).infer([Shape(("b", 3, 4))]).dims == ("b", 12)
    assert Flatten(2).infer([Shape(("b", 3, 4))]).dims == (UNKNOWN, 4)


# -- shape queries and generators --------------------------------------------------------------
@pytest.mark.parametrize("start,end", [(0, None), (1, None), (-2, None), (0, -1), (-10, 10),
                                       (2, 1)])
def test_shape_of(start, end):
    x = rand(2, 3, 4)
    attrs = {"start": start} | ({} if end is None else {"end": end})
    check(ShapeOf(start, end), [x], onnx_reference("Shape", [x], **attrs))


@pytest.mark.parametrize("shape", [(2, 3), (), (0, 4)])
def test_size(shape):
    x = rand(*shape)
    check(Size(), [x], onnx_reference("Size", [x]))


@pytest.mark.parametrize("start,limit,delta,dtype", [
    (0, 10, 3, np.int64), (10, -3, -4, np.int32), (5, 5, 1, np.int64), (3, 0, 1, np.int64),
    (0.5, 2.0, 0.25, np.float32), (1.0, -1.0, -0.3, np.float64),
])
def test_range(start, limit, delta, dtype):
    args = [np.array(v, dtype) for v in (start, limit, delta)]
    (got,), (want,) = run_op(Range(), args), onnx_reference("Range", args)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("shape,value,dtype", [((2, 3), 2.5, DType.F32), ((0, 4), 1.0, DType.F32),
                                               ((3,), 7.0, DType.I64), ((), 1.0, DType.BOOL)])
def test_fill_static_and_dynamic(shape, value, dtype):
    tensor_type = helper.np_dtype_to_tensor_dtype(dtype.numpy)
    attr = helper.make_tensor("value", tensor_type, [1], np.array([value], dtype.numpy))
    want = onnx_reference("ConstantOfShape", [i64(*shape)], value=attr)
    check(Fill(value, dtype, shape), [], want)
    check(Fill(value, dtype), [i64(*shape)], want)
    assert inferred(Fill(value, dtype), [i64(*shape)]) == Shape([UNKNOWN] * len(shape), dtype)


@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("values", [np.array([0.0, 1.0], np.float32), np.array([-2, 5], np.int64)])
def test_one_hot(axis, values):
    indices = np.array([[0, 3, -1], [-4, 5, 2]], np.int64)  # 5 is out of range: all "off"
    depth = np.array(4, np.int64)
    want = onnx_reference("OneHot", [indices, depth, values], axis=axis)
    check(OneHot(axis), [indices, depth, values], want)
    dims = inferred(OneHot(axis), [indices, depth, values]).dims
    assert dims[axis] == UNKNOWN and len(dims) == 3


# -- layout ops on images and matrices ---------------------------------------------------------
@pytest.mark.parametrize("mode", list(DepthToSpaceMode))
@pytest.mark.parametrize("shape,b", [((1, 8, 2, 3), 2), ((2, 9, 1, 2), 3), ((1, 4, 0, 2), 2)])
def test_depth_to_space(mode, shape, b):
    x = rand(*shape)
    want = onnx_reference("DepthToSpace", [x], blocksize=b, mode=mode.name)
    check(DepthToSpace(b, mode), [x], want)


@pytest.mark.parametrize("shape,b", [((1, 2, 4, 6), 2), ((2, 1, 3, 3), 3)])
def test_space_to_depth(shape, b):
    x = rand(*shape)
    check(SpaceToDepth(b), [x], onnx_reference("SpaceToDepth", [x], blocksize=b))


def test_space_to_depth_rejects_indivisible_dims():
    with pytest.raises(ShapeError, match="SpaceToDepth: width 5 is not divisible by 2"):
        SpaceToDepth(2).infer([Shape((1, 1, 4, 5))])
    with pytest.raises(ShapeError, match="DepthToSpace: channels 6 is not divisible by 4"):
        DepthToSpace(2).infer([Shape((1, 6, 4, 5))])


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("k", [0, -1, 2])
@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 3), (0, 2)])
def test_trilu(upper, k, shape):
    x = rand(*shape)
    want = onnx_reference("Trilu", [x, np.array(k, np.int64)], upper=int(upper))
    check(Trilu(upper, k), [x], want)


@pytest.mark.parametrize("x", [
    np.array([[1, 0, 2], [0, 0, 3]], np.int32), np.array([0.0, 1.5, 0.0], np.float32),
    np.array([[True, False]]), np.zeros((0, 3), np.float32),
])
def test_non_zero(x):
    check(NonZero(), [x], onnx_reference("NonZero", [x]))
    assert inferred(NonZero(), [x]) == Shape((x.ndim, UNKNOWN), DType.I64)


@pytest.mark.parametrize("value", [0.0, 2.0])
def test_non_zero_of_a_scalar(value):
    # the reference evaluator cannot take a scalar; by the spec it has rank-0 coordinates
    (got,) = run_op(NonZero(), [np.array(value, np.float32)])
    assert got.shape == (0, int(value != 0)) and got.dtype == np.int64


@pytest.mark.parametrize("axis,cond", [(None, [True, False, True]), (0, [False, True]),
                                       (-1, [True, False, True, True]), (1, [False, True])])
def test_compress(axis, cond):
    x = rand(3, 4)
    cond = np.array(cond)
    attrs = {} if axis is None else {"axis": axis}
    check(Compress(axis), [x, cond], onnx_reference("Compress", [x, cond], **attrs))


# -- the IR side: forms, errors in a graph, JSON -----------------------------------------------
def test_form_mismatch_is_a_shape_error():
    with pytest.raises(ShapeError, match="Reshape: with shape as an attribute takes 1 inputs"):
        Reshape((2,)).infer([Shape((2,)), Shape((1,), DType.I64)])
    with pytest.raises(ShapeError, match="Reshape: shape sets the output rank"):
        Reshape(None).infer([Shape((2,)), Shape(("n",), DType.I64)])
    with pytest.raises(ShapeError, match="Fill: with shape as an input takes 1 inputs, got 0"):
        Fill(0.0, DType.F32).infer([])


def test_graph_names_the_node_at_fault():
    g = Graph("g")
    x = g.input("x", Shape((2, 3)))
    with pytest.raises(ShapeError, match="graph 'g' node %1: Reshape: cannot reshape"):
        g.add_node(Reshape((5,)), [x])


def test_ops_round_trip_through_json():
    g = Graph("g")
    x = g.input("x", Shape(("b", 3, 4)))
    shape = g.input("s", Shape((2,), DType.I64))
    nodes = [
        g.add_node(Pad(PadMode.REFLECT, (0, 1, 1, 0, 1, 1)), [x]),
        g.add_node(Reshape(None), [x, shape]),
        g.add_node(Slice((0,), (I64_MAX,), (-1,), (2,)), [x]),
        g.add_node(ScatterElements(1, ScatterReduction.MAX),
                   [x, g.add_node(Fill(1.0, DType.I64, (1, 3, 4)), []), x]),
        g.add_node(DepthToSpace(1, DepthToSpaceMode.CRD), [g.add_node(Unsqueeze((0,)), [x])]),
        g.add_node(Fill(0.5, DType.F16), [shape]),
        *g.unpack(g.add_node(Split(-1, (1, 3)), [x])),
    ]
    g.set_outputs(nodes)
    back = graph_from_json(graph_to_json(g))
    verify(back)
    assert [n.op for n in back.nodes()] == [n.op for n in g.nodes()]
    assert [n.shape for n in back.nodes()] == [n.shape for n in g.nodes()]
