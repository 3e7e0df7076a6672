"""QLinearAdd and QLinearMul on every pair of 8-bit codes (65,536 per case, one tensor), bit
for bit against onnxruntime, on the numpy, onnxruntime and OpenVINO engines.

QLinearAdd's kernel rounds fused multiply-adds (`rlx.onnx.ops.mlas_add`): a plain float32
body was a step off on 90 of the u8 pairs of the first set below; the operand order depends
on which input is broadcast, so the broadcast layouts are checked too."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import rlx
from rlx import BakeOptions, BakeProfile, bake
from rlx.artifact import write_rlx
from rlx.onnx import import_onnx
from rlx.onnx.ops.mlas_add import add_tables, mlas_add
from tests.engines.conftest import require
from tests.frontends.contrib.oracle import one_node
from tests.frontends.contrib.test_quant import scale, zero

ENGINES = ["numpy", "onnxruntime", "openvino"]

# (sa, za, sb, zb, sc, zc) with zero points around the type's middle (z0); the first set's
# two operand orders differ on 11 (u8) and 35 (i8) pairs
SETS = {
    "mixed": (0.0173, 0, 0.0291, -7, 0.031, 5),
    "equal_scales": (0.02, 3, 0.02, -3, 0.02, 0),  # ratios of 1: exact ties
    "wide": (0.1, 10, 0.003, -60, 0.05, -20),
}
MUL_SETS = {"mixed": (0.0173, 0, 0.0291, -7, 0.21, 5), "wide": (0.1, 10, 0.003, -60, 0.05, -20)}
# u8, B's ratio 1024: the high parts' grid drops a bit that A's ratio 0.003424657... (A's
# code 146 lands it a 2^-31 past a float32 midpoint) needs: the split cannot be exact
SPLIT_FAILS = (0.003424657741561532, 0, 1024.0, 128, 1.0, 0)

# how the 65,536 pairs are laid out: (A's shape, B's shape); "a_broadcast" makes A the
# scalar of each span of 256 (onnxruntime swaps the operands), "b_broadcast" B
LAYOUTS = {"pairs": ((65536,), (65536,)), "a_broadcast": ((256, 1), (1, 256)),
           "b_broadcast": ((1, 256), (256, 1))}


def _codes(dtype) -> np.ndarray:
    return np.arange(256).astype(np.uint8).view(dtype)


def _inputs(dtype, layout: str, params, centred: bool = True) -> list:
    """The node's eight inputs; zero points are offsets from the type's middle if `centred`."""
    shape_a, shape_b = LAYOUTS[layout]
    codes = _codes(dtype)
    a = np.repeat(codes, 256) if layout == "pairs" else codes
    b = np.tile(codes, 256) if layout == "pairs" else codes
    sa, za, sb, zb, sc, zc = params
    z0 = 128 if dtype == np.uint8 and centred else 0
    return [a.reshape(shape_a), scale(sa), zero(z0 + za, dtype), b.reshape(shape_b),
            scale(sb), zero(z0 + zb, dtype), scale(sc), zero(z0 + zc, dtype)]


def _onnxruntime(model, feeds) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _assert_engines_match(tmp_path, op_type: str, inputs: list) -> np.ndarray:
    """Every engine gives onnxruntime's bits; returns them."""
    model, feeds = one_node(op_type, inputs)
    want = _onnxruntime(model, feeds)
    graph, bindings = import_onnx(model)
    file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))
    write_rlx(tmp_path / "node.rlx", file)
    for engine in ENGINES:
        if engine == "openvino":
            require("openvino")
        got = rlx.load(tmp_path / "node.rlx", engine=engine, threads=1).run(feeds)[0]
        differ = int((got != want).sum())
        assert differ == 0, f"{engine}: {differ} of {want.size} differ"
    return want


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("name", sorted(SETS))
def test_qlinear_add_every_pair(tmp_path, name, dtype):
    _assert_engines_match(tmp_path, "QLinearAdd", _inputs(dtype, "pairs", SETS[name]))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("layout", ["a_broadcast", "b_broadcast"])
def test_qlinear_add_every_pair_broadcast(tmp_path, layout, dtype):
    """A broadcast swaps the kernel's operands: onnxruntime's own results differ from the
    pairs layout's (so the case tells the orders apart), and every engine follows."""
    got = _assert_engines_match(tmp_path, "QLinearAdd", _inputs(dtype, layout, SETS["mixed"]))
    table = got.reshape(256, 256) if layout == "a_broadcast" else got.reshape(256, 256).T
    pairs = _onnxruntime(*one_node("QLinearAdd", _inputs(dtype, "pairs", SETS["mixed"])))
    assert (table.reshape(-1) != pairs).any() == (layout == "a_broadcast")


def test_qlinear_add_reads_c_when_the_split_cannot_be_exact(tmp_path):
    params = [np.float32(v) if isinstance(v, float) else v for v in SPLIT_FAILS]
    sa, za, sb, zb, sc, zc = params
    codes = _codes(np.uint8)
    assert len(add_tables(codes, sa / sc, za, sb / sc, zb, zc)) == 1
    _assert_engines_match(tmp_path, "QLinearAdd",
                          _inputs(np.uint8, "pairs", SPLIT_FAILS, centred=False))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize(("name", "layout"), [("mixed", "pairs"), ("wide", "pairs"),
                                              ("mixed", "a_broadcast")])
def test_qlinear_mul_every_pair(tmp_path, name, layout, dtype):
    """QLinearMul's integer product, requantised once, was already exact: kept so."""
    _assert_engines_match(tmp_path, "QLinearMul", _inputs(dtype, layout, MUL_SETS[name]))


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_add_single_elements_take_a_as_the_scalar(tmp_path, dtype):
    """A and B of one element each: onnxruntime's input0-scalar path (operands swapped).
    Run on the pairs whose two operand orders round apart, where its results differ from
    the pairs layout's."""
    _, sa, za, _, sb, zb, sc, zc = _inputs(dtype, "pairs", SETS["mixed"])
    codes = _codes(dtype)
    ra, rb = sa.value / sc.value, sb.value / sc.value
    kernel = [mlas_add(codes[:, None], codes[None, :], ra, za.value, rb, zb.value, zc.value),
              mlas_add(codes[None, :], codes[:, None], rb, zb.value, ra, za.value, zc.value)]
    apart = np.argwhere(np.rint(kernel[0]) != np.rint(kernel[1]))
    assert len(apart) > 0
    inputs = [codes[:1], sa, za, codes[:1], sb, zb, sc, zc]
    model, _ = one_node("QLinearAdd", inputs)
    graph, bindings = import_onnx(model)
    file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))
    write_rlx(tmp_path / "node.rlx", file)
    pairs = _onnxruntime(*one_node("QLinearAdd", _inputs(dtype, "pairs", SETS["mixed"])))
    require("openvino")
    models = [rlx.load(tmp_path / "node.rlx", engine=e, threads=1) for e in ENGINES]
    swapped = 0
    for i, j in apart:
        feeds = {"in0": codes[i:i + 1], "in3": codes[j:j + 1]}
        want = _onnxruntime(model, feeds)
        swapped += int(want[0] != pairs[i * 256 + j])
        for engine, loaded in zip(ENGINES, models):
            np.testing.assert_array_equal(loaded.run(feeds)[0], want, err_msg=engine)
    assert swapped > 0
