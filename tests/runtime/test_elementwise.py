"""Elementwise kernels against ONNX's reference evaluator and float64 numpy."""

from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest
from onnx import helper

from rlx.errors import ShapeError
from rlx.ir import DType
from rlx.ir.ops.elementwise import Activation, Binary, BinaryOp, Cast, Clamp, Identity, Unary
from rlx.ir.ops.logic import Compare, CompareOp, Logical, LogicalOp, Not, Where
from tests.support import build_op_graph, onnx_reference, run_op

A = Activation
RNG = np.random.default_rng(1234)
BF16 = ml_dtypes.bfloat16

# -- Unary -----------------------------------------------------------------------------------


def _domain(name: str, shape=(4, 25)) -> np.ndarray:
    """Float64 inputs inside a function's domain."""
    uniform = {"any": (-6, 6), "pos": (0.01, 50), "unit": (-0.99, 0.99), "ge1": (1, 50),
               "tan": (-1.4, 1.4)}
    if name in uniform:
        return RNG.uniform(*uniform[name], shape)
    if name == "nonzero":
        return RNG.uniform(0.1, 10, shape) * RNG.choice([-1, 1], shape)
    if name == "halves":  # ties of Round go to even
        return RNG.integers(-10, 11, shape) / 2
    if name == "ints":  # zeros for Sign
        return RNG.integers(-2, 3, shape).astype(np.float64)
    assert name == "special"
    return RNG.choice([np.nan, np.inf, -np.inf, 0.0, 1.5, -2.0], shape)


def _case(kind, onnx_op, domain="any", *, rlx=(None, None), onnx=None):
    """`rlx` is Unary's (alpha, beta); `onnx` the matching ONNX attributes."""
    suffix = "" if rlx == (None, None) else f"-{rlx[0]}-{rlx[1]}"
    return pytest.param(Unary(kind, *rlx), onnx_op, onnx or {}, domain,
                        id=f"{kind.value}{suffix}")


UNARY_VS_ONNX = [
    _case(A.RELU, "Relu"),
    _case(A.GELU, "Gelu"),
    _case(A.GELU_APPROX, "Gelu", onnx={"approximate": "tanh"}),
    _case(A.SIGMOID, "Sigmoid"),
    _case(A.TANH, "Tanh"),
    _case(A.EXP, "Exp"),
    _case(A.LOG, "Log", "pos"),
    _case(A.SQRT, "Sqrt", "pos"),
    _case(A.NEG, "Neg"),
    _case(A.ABS, "Abs"),
    _case(A.SIN, "Sin"),
    _case(A.COS, "Cos"),
    _case(A.TAN, "Tan", "tan"),
    _case(A.ASIN, "Asin", "unit"),
    _case(A.ACOS, "Acos", "unit"),
    _case(A.ATAN, "Atan"),
    _case(A.SINH, "Sinh"),
    _case(A.COSH, "Cosh"),
    _case(A.ASINH, "Asinh"),
    _case(A.ACOSH, "Acosh", "ge1"),
    _case(A.ATANH, "Atanh", "unit"),
    _case(A.RECIP, "Reciprocal", "nonzero"),
    _case(A.ROUND, "Round", "halves"),
    _case(A.FLOOR, "Floor"),
    _case(A.CEIL, "Ceil"),
    _case(A.SIGN, "Sign", "ints"),
    _case(A.SOFTPLUS, "Softplus"),
    _case(A.SOFTSIGN, "Softsign"),
    _case(A.ELU, "Elu"),
    _case(A.ELU, "Elu", rlx=(0.5, None), onnx={"alpha": 0.5}),
    _case(A.SELU, "Selu"),
    _case(A.SELU, "Selu", rlx=(1.5, 1.2), onnx={"alpha": 1.5, "gamma": 1.2}),
    _case(A.CELU, "Celu"),
    _case(A.CELU, "Celu", rlx=(2.0, None), onnx={"alpha": 2.0}),
    _case(A.LEAKY_RELU, "LeakyRelu"),
    _case(A.LEAKY_RELU, "LeakyRelu", rlx=(0.2, None), onnx={"alpha": 0.2}),
    _case(A.THRESHOLDED_RELU, "ThresholdedRelu"),
    _case(A.THRESHOLDED_RELU, "ThresholdedRelu", rlx=(0.5, None), onnx={"alpha": 0.5}),
    _case(A.ERF, "Erf"),
    _case(A.HARD_SWISH, "HardSwish"),
    _case(A.HARD_SIGMOID, "HardSigmoid"),
    _case(A.HARD_SIGMOID, "HardSigmoid", rlx=(0.3, 0.4), onnx={"alpha": 0.3, "beta": 0.4}),
    _case(A.MISH, "Mish"),
    _case(A.IS_NAN, "IsNaN", "special"),
    _case(A.IS_INF, "IsInf", "special"),
    _case(A.IS_POS_INF, "IsInf", "special", onnx={"detect_negative": 0}),
    _case(A.IS_NEG_INF, "IsInf", "special", onnx={"detect_positive": 0}),
]


@pytest.mark.parametrize("op, onnx_op, onnx_attrs, domain", UNARY_VS_ONNX)
def test_unary_matches_onnx(op, onnx_op, onnx_attrs, domain):
    x = _domain(domain).astype(np.float32)
    (got,) = run_op(op, [x])
    (want,) = onnx_reference(onnx_op, [x], **onnx_attrs)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("size", [0, 1, 8000, "block", "block+1", "3 blocks+5"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_relu_in_blocks_of_zeros_matches_onnx(size, dtype):
    """Relu compares with a block of zeros (`kernels.blockwise.BLOCK` elements): at, past and
    well past a block, on specials (NaN, infinities, signed zeros), and on a strided view."""
    from rlx.kernels.blockwise import BLOCK

    n = {"block": BLOCK, "block+1": BLOCK + 1, "3 blocks+5": 3 * BLOCK + 5}.get(size, size)
    x = (RNG.standard_normal(2 * n) * 50).astype(dtype)
    if np.issubdtype(dtype, np.floating) and n >= 8:
        x[:8] = [np.nan, -np.inf, np.inf, -0.0, 0.0, -1, 1, np.nan]
    for value in (x[:n], x[::2]):  # contiguous, then strided
        (got,) = run_op(Unary(A.RELU), [value])
        (want,) = onnx_reference("Relu", [np.ascontiguousarray(value)])
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", [(), (1, 8, 10, 10), (40, 20), (8, 100)])
def test_relu_of_any_shape_up_to_a_block_matches_onnx(shape):
    """Below a block Relu compares with zeros of x's own shape (one view per shape)."""
    x = (RNG.standard_normal(shape) * 5).astype(np.float32)
    (got,) = run_op(Unary(A.RELU), [x])
    (want,) = onnx_reference("Relu", [x])
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint8, np.int64])
def test_bitwise_not_matches_onnx(dtype):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, (3, 7), endpoint=True).astype(dtype)
    (got,) = run_op(Unary(A.BIT_NOT), [x])
    np.testing.assert_array_equal(got, onnx_reference("BitwiseNot", [x])[0])


@pytest.mark.parametrize("kind, onnx_op", [
    (A.RELU, "Relu"), (A.NEG, "Neg"), (A.ABS, "Abs"), (A.SIGN, "Sign"),
])
def test_integer_unary_matches_onnx(kind, onnx_op):
    x = RNG.integers(-9, 10, (5, 6)).astype(np.int32)
    (got,) = run_op(Unary(kind), [x])
    np.testing.assert_array_equal(got, onnx_reference(onnx_op, [x])[0])


_erf64 = np.vectorize(math.erf)


def _sigmoid64(x):
    return 1 / (1 + np.exp(-x))


# Float64 formulas written here, independent of the kernels.
UNARY_F64 = {
    A.SILU: lambda x: x * _sigmoid64(x),
    A.RSQRT: lambda x: 1 / np.sqrt(x),
    A.LOG_SIGMOID: lambda x: -np.logaddexp(0, -x),
    A.GELU_APPROX: lambda x: 0.5 * x * (
        1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    A.GELU: lambda x: 0.5 * x * (1 + _erf64(x / math.sqrt(2))),
    A.ERF: _erf64,
    A.SIGMOID: _sigmoid64,
    A.SOFTPLUS: lambda x: np.logaddexp(0, x),
    A.MISH: lambda x: x * np.tanh(np.logaddexp(0, x)),
    A.TANH: np.tanh,
    A.SOFTSIGN: lambda x: x / (1 + np.abs(x)),
    A.ELU: lambda x: np.where(x > 0, x, np.expm1(x)),
    # ONNX's Selu defaults are these constants rounded to float32 (attributes are float32)
    A.SELU: lambda x: float(np.float32(1.0507009873554805)) * np.where(
        x > 0, x, float(np.float32(1.6732632423543772)) * np.expm1(x)),
    A.CELU: lambda x: np.maximum(x, 0) + np.minimum(0, np.expm1(x)),
    A.HARD_SWISH: lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
    A.HARD_SIGMOID: lambda x: np.clip(0.2 * x + 0.5, 0, 1),
    A.EXP: np.exp,
    A.SQRT: np.sqrt,
}
_ERF_BASED = {A.ERF, A.GELU}  # the kernels' erf is accurate to ~1.2e-7 (float32 grade)


def _f64_reference(kind, x):
    with np.errstate(over="ignore", invalid="ignore"):
        return UNARY_F64[kind](x.astype(np.float64))


@pytest.mark.parametrize("kind", [A.SILU, A.RSQRT, A.LOG_SIGMOID, A.GELU_APPROX])
def test_unary_without_onnx_op_matches_float64(kind):
    x = _domain("pos" if kind is A.RSQRT else "any").astype(np.float32)
    (got,) = run_op(Unary(kind), [x])
    np.testing.assert_allclose(got, _f64_reference(kind, x), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("dtype, rtol", [
    (np.float64, 1e-12), (np.float16, 1e-3), (BF16, 8e-3),
])
@pytest.mark.parametrize("kind", sorted(UNARY_F64, key=lambda k: k.value))
def test_unary_other_dtypes_match_float64(kind, dtype, rtol):
    x = _domain("pos" if kind in (A.RSQRT, A.SQRT) else "any").astype(dtype)
    (got,) = run_op(Unary(kind), [x])
    assert got.dtype == x.dtype
    if dtype is np.float64 and kind in _ERF_BASED:
        rtol = 2e-7
    np.testing.assert_allclose(got.astype(np.float64), _f64_reference(kind, x),
                               rtol=rtol, atol=rtol)


_EXTREMES = {
    np.float32: [-3e38, -1e30, -1e4, -100, -88.5, -20, -1, 0, 1, 20, 88.5, 100, 1e4, 1e30, 3e38],
    np.float16: [-65000, -1e4, -100, -20, -11, -1, 0, 1, 11, 20, 100, 1e4, 65000],
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("kind", [
    A.SIGMOID, A.SOFTPLUS, A.SILU, A.MISH, A.LOG_SIGMOID, A.GELU, A.GELU_APPROX, A.TANH,
    A.SOFTSIGN, A.ELU, A.SELU, A.CELU, A.ERF, A.HARD_SWISH, A.HARD_SIGMOID,
])
def test_unary_extreme_inputs_do_not_overflow(kind, dtype):
    x = np.array(_EXTREMES[dtype], dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow / invalid warnings either
        (got,) = run_op(Unary(kind), [x])
    assert not np.isnan(got).any(), got
    with np.errstate(over="ignore"):  # rounded, so tiny results become 0 and huge ones inf
        want = _f64_reference(kind, x).astype(dtype)
    tol = 1e-3 if dtype is np.float16 else 2e-6
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                               atol=tol)


def test_round_is_half_to_even():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5], np.float32)
    (got,) = run_op(Unary(A.ROUND), [x])
    np.testing.assert_array_equal(got, [-2, -2, -0, 0, 2, 2, 4])


@pytest.mark.parametrize("kind, x, match", [
    (A.EXP, np.zeros(3, np.int32), "exp: does not take i32"),
    (A.BIT_NOT, np.zeros(3, np.float32), "bit_not: does not take f32"),
    (A.NEG, np.zeros(3, bool), "neg: does not take bool"),
])
def test_unary_dtype_errors(kind, x, match):
    with pytest.raises(ShapeError, match=match):
        build_op_graph(Unary(kind), [x])


# -- Binary ----------------------------------------------------------------------------------
ONNX_BINARY = {
    BinaryOp.ADD: ("Add", {}),
    BinaryOp.SUB: ("Sub", {}),
    BinaryOp.MUL: ("Mul", {}),
    BinaryOp.DIV: ("Div", {}),
    BinaryOp.MAX: ("Max", {}),
    BinaryOp.MIN: ("Min", {}),
    BinaryOp.POW: ("Pow", {}),
    BinaryOp.MOD: ("Mod", {"fmod": 0}),
    BinaryOp.FMOD: ("Mod", {"fmod": 1}),
    BinaryOp.BIT_AND: ("BitwiseAnd", {}),
    BinaryOp.BIT_OR: ("BitwiseOr", {}),
    BinaryOp.BIT_XOR: ("BitwiseXor", {}),
    BinaryOp.SHL: ("BitShift", {"direction": "LEFT"}),
    BinaryOp.SHR: ("BitShift", {"direction": "RIGHT"}),
}
SHAPE_PAIRS = [
    ((2, 3), (2, 3)),
    ((2, 1, 3), (4, 1)),
    ((), (3, 4)),
    ((3, 4), ()),
    ((0, 3), (1, 3)),
]
_ARITH = [BinaryOp.ADD, BinaryOp.SUB, BinaryOp.MUL, BinaryOp.DIV, BinaryOp.MAX, BinaryOp.MIN,
          BinaryOp.POW]
_BITS = [BinaryOp.BIT_AND, BinaryOp.BIT_OR, BinaryOp.BIT_XOR]
BINARY_CASES = (
    [(op, np.float32) for op in (*_ARITH, BinaryOp.FMOD)]
    + [(op, np.int32) for op in (*_ARITH, BinaryOp.MOD, BinaryOp.FMOD, *_BITS)]
    + [(op, np.int64) for op in (BinaryOp.DIV, BinaryOp.MOD, BinaryOp.FMOD)]
    + [(op, np.uint8) for op in (*_BITS, BinaryOp.SHL, BinaryOp.SHR)]
    + [(op, np.uint32) for op in (BinaryOp.SHL, BinaryOp.SHR)]
)


def _operand(op: BinaryOp, dtype, shape, second: bool) -> np.ndarray:
    """Random data valid for `op`: positive float bases for Pow, no zero divisors."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        if op is BinaryOp.POW and not second:
            return RNG.uniform(0.2, 3, shape).astype(dtype)
        if second and op in (BinaryOp.DIV, BinaryOp.MOD, BinaryOp.FMOD):
            return (RNG.uniform(0.5, 3, shape) * RNG.choice([-1, 1], shape)).astype(dtype)
        return RNG.uniform(-3, 3, shape).astype(dtype)
    if op in (BinaryOp.SHL, BinaryOp.SHR) and second:
        return RNG.integers(0, dtype.itemsize * 8, shape).astype(dtype)
    if op is BinaryOp.POW:  # negative bases, non-negative exponents
        return RNG.integers(0 if second else -4, 5, shape).astype(dtype)
    if second and op in (BinaryOp.DIV, BinaryOp.MOD, BinaryOp.FMOD):
        return (RNG.integers(1, 7, shape) * RNG.choice([-1, 1], shape)).astype(dtype)
    if dtype.kind == "u" or op in _BITS:
        info = np.iinfo(dtype)
        return RNG.integers(info.min, info.max, shape, endpoint=True).astype(dtype)
    return RNG.integers(-20, 21, shape).astype(dtype)


@pytest.mark.parametrize("a_shape, b_shape", SHAPE_PAIRS)
@pytest.mark.parametrize("op, dtype", BINARY_CASES,
                         ids=[f"{op.value}-{np.dtype(t)}" for op, t in BINARY_CASES])
def test_binary_matches_onnx(op, dtype, a_shape, b_shape):
    a, b = _operand(op, dtype, a_shape, False), _operand(op, dtype, b_shape, True)
    (got,) = run_op(Binary(op), [a, b])
    name, attrs = ONNX_BINARY[op]
    (want,) = onnx_reference(name, [a, b], **attrs)
    assert got.dtype == a.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op, reference", [
    (BinaryOp.ATAN2, np.arctan2),
    (BinaryOp.MOD, np.mod),  # float Mod with the divisor's sign (ONNX only has fmod=1)
])
@pytest.mark.parametrize("a_shape, b_shape", SHAPE_PAIRS)
def test_float_binary_without_onnx_op_matches_float64(op, reference, a_shape, b_shape):
    a, b = _operand(op, np.float32, a_shape, False), _operand(op, np.float32, b_shape, True)
    (got,) = run_op(Binary(op), [a, b])
    want = reference(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


_DIVIDENDS = np.array([-7, 7, -7, 7, 0, -1, 6, -6], np.int32)
_DIVISORS = np.array([2, 2, -2, -2, 3, 5, -3, -3], np.int32)


@pytest.mark.parametrize("op, onnx_attrs, want", [
    (BinaryOp.DIV, {}, [-3, 3, 3, -3, 0, 0, -2, 2]),              # truncates toward zero
    (BinaryOp.MOD, {"fmod": 0}, [1, 1, -1, -1, 0, 4, 0, 0]),      # sign of the divisor
    (BinaryOp.FMOD, {"fmod": 1}, [-1, 1, -1, 1, 0, -1, 0, -0]),   # sign of the dividend
])
def test_integer_division_sign_rules(op, onnx_attrs, want):
    (got,) = run_op(Binary(op), [_DIVIDENDS, _DIVISORS])
    np.testing.assert_array_equal(got, want)
    name = "Div" if op is BinaryOp.DIV else "Mod"
    np.testing.assert_array_equal(got, onnx_reference(name, [_DIVIDENDS, _DIVISORS],
                                                      **onnx_attrs)[0])


def test_pow_with_integer_base():
    base = np.array([[-3], [-2], [0], [2], [5]], np.int64)
    exponent = np.array([0, 1, 2, 3], np.int64)
    (got,) = run_op(Binary(BinaryOp.POW), [base, exponent])
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, onnx_reference("Pow", [base, exponent])[0])
    np.testing.assert_array_equal(got, [[int(b) ** int(e) for e in exponent] for b in base[:, 0]])


@pytest.mark.parametrize("op, a, b, match", [
    (BinaryOp.ADD, np.zeros((2, 3), np.float32), np.zeros(3, np.int32), "share a dtype"),
    (BinaryOp.MUL, np.zeros((2, 3), np.float32), np.zeros(4, np.float32), "cannot broadcast"),
    (BinaryOp.SUB, np.zeros((0, 3), np.float32), np.zeros((2, 3), np.float32),
     "cannot broadcast"),
    (BinaryOp.BIT_AND, np.zeros(3, np.float32), np.zeros(3, np.float32), "does not take f32"),
    (BinaryOp.SHL, np.zeros(3, np.float64), np.zeros(3, np.float64), "does not take f64"),
    (BinaryOp.ATAN2, np.zeros(3, np.int32), np.zeros(3, np.int32), "does not take i32"),
    (BinaryOp.ADD, np.zeros(3, bool), np.zeros(3, bool), "does not take bool"),
])
def test_binary_errors(op, a, b, match):
    with pytest.raises(ShapeError, match=match):
        build_op_graph(Binary(op), [a, b])


# -- Compare, Logical, Not, Where ------------------------------------------------------------
ONNX_COMPARE = {CompareOp.EQ: "Equal", CompareOp.LT: "Less", CompareOp.LE: "LessOrEqual",
                CompareOp.GT: "Greater", CompareOp.GE: "GreaterOrEqual"}


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
@pytest.mark.parametrize("a_shape, b_shape", SHAPE_PAIRS)
@pytest.mark.parametrize("op", list(CompareOp))
def test_compare(op, a_shape, b_shape, dtype):
    a = RNG.integers(-2, 3, a_shape).astype(dtype)  # small integers: many equal pairs
    b = RNG.integers(-2, 3, b_shape).astype(dtype)
    (got,) = run_op(Compare(op), [a, b])
    if op is CompareOp.NE:  # no ONNX op
        want = np.not_equal(a.astype(np.float64), b.astype(np.float64))
    else:
        (want,) = onnx_reference(ONNX_COMPARE[op], [a, b])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("a_shape, b_shape", SHAPE_PAIRS)
@pytest.mark.parametrize("op, onnx_op", [
    (LogicalOp.AND, "And"), (LogicalOp.OR, "Or"), (LogicalOp.XOR, "Xor"),
])
def test_logical(op, onnx_op, a_shape, b_shape):
    a, b = RNG.random(a_shape) > 0.5, RNG.random(b_shape) > 0.5
    (got,) = run_op(Logical(op), [a, b])
    np.testing.assert_array_equal(got, onnx_reference(onnx_op, [a, b])[0])


@pytest.mark.parametrize("shape", [(2, 3), (), (0, 4)])
def test_not(shape):
    x = RNG.random(shape) > 0.5
    (got,) = run_op(Not(), [x])
    np.testing.assert_array_equal(got, onnx_reference("Not", [x])[0])


@pytest.mark.parametrize("dtype", [np.float32, np.int64, BF16])
@pytest.mark.parametrize("shapes", [
    ((2, 1, 3), (4, 1), ()),
    ((), (2, 3), (2, 3)),
    ((3,), (0, 3), (1, 3)),
])
def test_where(shapes, dtype):
    cond = RNG.random(shapes[0]) > 0.5
    a, b = (RNG.integers(-9, 10, s).astype(dtype) for s in shapes[1:])
    (got,) = run_op(Where(), [cond, a, b])
    assert got.dtype == np.dtype(dtype)
    want = np.where(cond, a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_array_equal(got.astype(np.float64), want)
    if dtype is not BF16:
        np.testing.assert_array_equal(got, onnx_reference("Where", [cond, a, b])[0])


@pytest.mark.parametrize("op, inputs, match", [
    (Compare(CompareOp.LT), [np.zeros(2, np.float32), np.zeros(2, np.int32)], "share a dtype"),
    (Logical(LogicalOp.AND), [np.zeros(2, np.float32), np.zeros(2, bool)], "needs bool"),
    (Not(), [np.zeros(2, np.int32)], "needs a bool"),
    (Where(), [np.zeros(2, np.int32)] + [np.zeros(2, np.float32)] * 2, "condition must be bool"),
    (Where(), [np.zeros(2, bool), np.zeros(2, np.float32), np.zeros(2, np.float64)],
     "share a dtype"),
    (Where(), [np.zeros(3, bool), np.zeros(2, np.float32), np.zeros(2, np.float32)],
     "cannot broadcast"),
])
def test_select_and_logic_errors(op, inputs, match):
    with pytest.raises(ShapeError, match=match):
        build_op_graph(op, inputs)


# -- Cast, Clamp, Identity -------------------------------------------------------------------
_FRACTIONS = np.array([[-2.75, -1.5, -0.5, -0.0], [0.0, 0.49, 1.5, 126.9]])


@pytest.mark.parametrize("src, to", [
    (np.float32, DType.I32), (np.float32, DType.I8), (np.float64, DType.I64),
    (np.float16, DType.I32), (BF16, DType.I32), (np.float32, DType.U8),
    (np.float32, DType.F16), (np.float16, DType.F32), (np.float32, DType.BF16),
    (BF16, DType.F32), (np.float64, DType.F32), (np.float32, DType.BOOL), (BF16, DType.BOOL),
    (np.int32, DType.F32), (np.int64, DType.I32), (np.int32, DType.I64), (np.int32, DType.BOOL),
])
def test_cast(src, to):
    x = _FRACTIONS.astype(src)
    if to is DType.U8:
        x = np.abs(x)  # a negative float -> unsigned is undefined
    (got,) = run_op(Cast(to), [x])
    (want,) = onnx_reference("Cast", [x], to=helper.np_dtype_to_tensor_dtype(to.numpy))
    assert got.dtype == to.numpy
    np.testing.assert_array_equal(got, want)
    if to.is_int and np.dtype(src).kind != "i":  # float -> int truncates toward zero
        np.testing.assert_array_equal(got, np.trunc(x.astype(np.float64)))


def test_cast_bool_to_float_and_back():
    x = np.array([[True, False], [False, True]])
    (f,) = run_op(Cast(DType.F16), [x])
    np.testing.assert_array_equal(f, x.astype(np.float64))
    (b,) = run_op(Cast(DType.BOOL), [f])
    np.testing.assert_array_equal(b, x)


@pytest.mark.parametrize("lo, hi", [(None, None), (-0.5, None), (None, 0.5), (-0.5, 0.5),
                                    (1.0, -1.0)])
@pytest.mark.parametrize("shape", [(3, 5), (), (0, 2)])
def test_clamp_matches_onnx_clip(lo, hi, shape):
    x = RNG.uniform(-2, 2, shape).astype(np.float32)
    (got,) = run_op(Clamp(lo, hi), [x])
    bound = [None if v is None else np.array(v, np.float32) for v in (lo, hi)]
    np.testing.assert_array_equal(got, onnx_reference("Clip", [x, *bound])[0])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64])
def test_clamp_integer_bounds(dtype):
    info = np.iinfo(dtype)
    x = RNG.integers(info.min, info.max, (4, 8), endpoint=True).astype(dtype)
    (same,) = run_op(Clamp(-1e30, 1e30), [x])  # bounds beyond the dtype's range
    np.testing.assert_array_equal(same, x)
    lo, hi = (0.5, 9.5) if info.min == 0 else (-10.5, -1.5)
    (got,) = run_op(Clamp(lo, hi), [x])
    # float64 numpy: the integers of [lo, hi] nearest to each value
    want = np.clip(x.astype(np.float64), math.ceil(lo), math.floor(hi))
    np.testing.assert_array_equal(got, want)
    assert got.dtype == x.dtype


@pytest.mark.parametrize("x", [np.arange(6, dtype=np.float32).reshape(2, 3),
                               np.array(True), np.zeros((0, 2), np.int8)])
def test_identity(x):
    (got,) = run_op(Identity(), [x])
    np.testing.assert_array_equal(got, onnx_reference("Identity", [x])[0])
