"""q8_f32, rlx's exact int8 grids: weights a symmetric int8 quantiser made decode to the very
float32 values `onnx.reference`'s DequantizeLinear gives for their codes and scale."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from rlx.codecs import (
    decode,
    dequantize_q8_f32,
    encode,
    int8_grid,
    int8_grid_of_pieces,
    int8_grid_of_row_pieces,
    quantize_q8_f32,
    quantize_q8_f32_on_grid,
)
from rlx.errors import BakeError

BLOCK = 32
RNG = np.random.default_rng(80)


def _dequantize_linear(codes: np.ndarray, scale: np.ndarray, axis: int = 0) -> np.ndarray:
    """ONNX DequantizeLinear of int8 codes, by onnx.reference (the independent reference)."""
    node = helper.make_node("DequantizeLinear", ["q", "s"], ["w"], axis=axis)
    graph = helper.make_graph(
        [node], "dq", [], [helper.make_tensor_value_info("w", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(codes, "q"), numpy_helper.from_array(scale, "s")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    return ReferenceEvaluator(model).run(None, {})[0]


def _quantised(rows: int, length: int, per_channel: bool, seed: int):
    rng = np.random.default_rng(seed)
    codes = rng.integers(-127, 128, (rows, length)).astype(np.int8)
    codes[:, 0] = 127 if per_channel else 0  # a symmetric quantiser's largest code
    codes[0, 0] = -127
    scale = (rng.uniform(1e-4, 0.3, rows) if per_channel else
             np.array(rng.uniform(1e-4, 0.3))).astype(np.float32)
    return codes, scale


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 9), blocks=st.integers(1, 4), per_channel=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_a_dequantised_int8_weight_decodes_bit_for_bit(rows, blocks, per_channel, seed):
    codes, scale = _quantised(rows, blocks * BLOCK, per_channel, seed)
    values = _dequantize_linear(codes, scale)
    steps = int8_grid(values)
    assert steps is not None
    data = quantize_q8_f32_on_grid(values, np.repeat(steps, blocks))
    assert data.size == rows * blocks * 36
    decoded = dequantize_q8_f32(data).reshape(values.shape)
    assert decoded.view(np.uint32).tolist() == values.view(np.uint32).tolist()


def test_int8_grid_finds_the_steps_a_symmetric_quantiser_used():
    codes = RNG.integers(-100, 101, (4, 64)).astype(np.float32)
    codes[2, 5] = -127  # the tensor's largest code
    assert np.allclose(int8_grid(codes * np.float32(0.013)), 0.013)  # per tensor
    codes[:, 0] = 127  # every row's largest code
    steps = np.array([0.01, 0.02, 0.03, 0.04], np.float32)
    assert np.allclose(int8_grid(codes * steps[:, None]), steps)  # per channel
    small = np.clip(codes, -60, 60)
    assert np.array_equal(int8_grid(small), np.ones(4, np.float32))  # integers
    assert int8_grid(small * np.float32(0.013)) is None  # no code reaches 127
    assert int8_grid(RNG.standard_normal((4, 64)).astype(np.float32)) is None
    assert int8_grid(small * 3) is None  # integers past 127


def test_a_value_one_ulp_off_the_grid_is_not_on_it():
    codes, scale = _quantised(3, BLOCK, True, 1)
    values = _dequantize_linear(codes, scale)
    values[1, 9] = np.nextafter(values[1, 9], np.float32(np.inf))
    assert int8_grid(values) is None


def test_q8_f32_blocks_keep_a_float32_scale():
    """The generic quantiser: max|x| / 127 per block, kept in float32 (Q8_0 rounds it to
    f16), codes rounded half away from zero."""
    x = (RNG.standard_normal(3 * BLOCK) * 0.37).astype(np.float32)
    blocks = x.reshape(3, BLOCK)
    scale = np.abs(blocks).max(axis=1) / np.float32(127)
    codes = np.trunc(blocks / scale[:, None] + np.copysign(0.5, blocks))
    want = (codes * scale[:, None]).reshape(-1)
    np.testing.assert_allclose(dequantize_q8_f32(quantize_q8_f32(x)), want, rtol=1e-6)
    assert encode("q8_f32", x).tobytes() == quantize_q8_f32(x).tobytes()
    assert np.array_equal(decode("q8_f32", quantize_q8_f32(x), x.size), dequantize_q8_f32(
        quantize_q8_f32(x)))


def test_q8_f32_lengths_are_checked():
    with pytest.raises(BakeError, match="multiple of 32"):
        quantize_q8_f32(np.ones(40, np.float32))
    with pytest.raises(BakeError, match="32 values take 36 bytes, got 35"):
        dequantize_q8_f32(np.zeros(35, np.uint8), 32)


def test_int8_grid_of_pieces_finds_the_grid_a_piece_at_a_time():
    """A matrix checked a column range at a time (a weight too large to hold) gets steps
    that store it bit for bit, and none when one value of its last piece lies off them."""
    codes, scale = _quantised(4, 3 * BLOCK, True, 1)
    values = _dequantize_linear(codes, scale)
    pieces = [values[:, :BLOCK], values[:, BLOCK:]]
    steps = int8_grid_of_pieces(lambda: iter(pieces))
    assert steps is not None
    decoded = dequantize_q8_f32(quantize_q8_f32_on_grid(values, np.repeat(steps, 3)))
    assert decoded.view(np.uint32).tolist() == values.reshape(-1).view(np.uint32).tolist()
    pieces[1] = pieces[1].copy()
    pieces[1][2, -1] = np.nextafter(pieces[1][2, -1], np.float32(np.inf))
    assert int8_grid_of_pieces(lambda: iter(pieces)) is None


@pytest.mark.parametrize("per_channel", [True, False])
def test_int8_grid_of_row_pieces_finds_the_grid_a_block_of_rows_at_a_time(per_channel):
    """A table checked a block of rows at a time gets the steps of the whole (a per-tensor
    grid's step comes from the largest row), which store it bit for bit, and none when one
    value of its last block lies off them."""
    codes, scale = _quantised(12, 2 * BLOCK, per_channel, 2)
    values = _dequantize_linear(codes, scale)
    pieces = [values[:5], values[5:9], values[9:]]
    steps = int8_grid_of_row_pieces(lambda: iter(pieces))
    assert steps is not None and steps.tolist() == int8_grid(values).tolist()
    decoded = dequantize_q8_f32(quantize_q8_f32_on_grid(values, np.repeat(steps, 2)))
    assert decoded.view(np.uint32).tolist() == values.reshape(-1).view(np.uint32).tolist()
    pieces[2] = pieces[2].copy()
    pieces[2][1, -1] = np.nextafter(pieces[2][1, -1], np.float32(np.inf))
    assert int8_grid_of_row_pieces(lambda: iter(pieces)) is None
    assert int8_grid_of_row_pieces(lambda: iter(())) is None
