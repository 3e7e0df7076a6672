"""Elementwise kernels. Results keep the input dtype (NumPy would promote some of them)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from rlx.ir.dtype import DType
from rlx.ir.ops.elementwise import (
    Activation,
    Binary,
    BinaryOp,
    Cast,
    Clamp,
    Compare,
    CompareOp,
    Identity,
    Logical,
    LogicalOp,
    Not,
    Unary,
    Where,
)
from rlx.kernels.registry import kernel, staged

__all__ = [
    "widen_half", "erf", "build_unary", "build_binary", "compare", "logical", "logical_not",
    "where", "cast", "build_clamp", "identity",
]

_HALF = {DType.F16.numpy, DType.BF16.numpy}


def widen_half(x: np.ndarray) -> np.ndarray:
    """f16/bf16 as float32, other arrays unchanged: for kernels whose half-precision
    intermediates would lose digits or overflow (sums, GEMM, composite formulas) or that
    NumPy runs slowly (no BLAS) or not at all (bf16 einsum). Callers round back once."""
    return x.astype(np.float32) if x.dtype in _HALF else x


def erf(x: np.ndarray) -> np.ndarray:
    """Error function, vectorised, accurate to float32 rounding.

    |x| < 0.5: its Maclaurin series (next term < 1e-9). Elsewhere: 1 - erfc(|x|) with the
    Numerical Recipes Chebyshev fit of erfc (relative error < 1.2e-7).
    """
    z = np.abs(x.astype(np.float64))
    z2 = z * z
    series = z * (1 + z2 * (-1 / 3 + z2 * (1 / 10 + z2 * (-1 / 42 + z2 * (
        1 / 216 + z2 * (-1 / 1320 + z2 / 9360)))))) * (2 / np.sqrt(np.pi))
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -z2 - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277))))))))
    tail = 1.0 - t * np.exp(poly)
    return (np.sign(x) * np.where(z < 0.5, series, tail)).astype(x.dtype)


def _sigmoid(x):
    # exp of a negative magnitude only: no overflow warnings for large |x|
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


def _gelu_tanh(x):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in place on one fresh buffer."""
    c = math.sqrt(2 / math.pi)
    t = np.multiply(x, x)
    t *= 0.044715 * c
    t += c
    t *= x
    np.tanh(t, out=t)
    t += 1
    t *= 0.5  # before x: (1 + tanh) x would overflow for x near the float max
    t *= x
    return t


def _hard_swish(x):
    """x * clip(x / 6 + 1/2, 0, 1), in place on one fresh buffer."""
    t = np.multiply(x, 1 / 6)
    t += 0.5
    np.clip(t, 0, 1, out=t)
    t *= x
    return t


def _softplus(x):
    return (np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))).astype(x.dtype)


def _a(op, default):
    return default if op.alpha is None else op.alpha


def _b(op, default):
    return default if op.beta is None else op.beta


_SELU_ALPHA = 1.67326319217681884765625
_SELU_GAMMA = 1.05070102214813232421875

_UNARY = {
    Activation.RELU: lambda x, op: np.maximum(x, x.dtype.type(0)),
    Activation.GELU: lambda x, op: 0.5 * x * (1 + erf(x / np.sqrt(2).astype(x.dtype))),
    Activation.GELU_APPROX: lambda x, op: _gelu_tanh(x),
    Activation.SILU: lambda x, op: x * _sigmoid(x),
    Activation.SIGMOID: lambda x, op: _sigmoid(x),
    Activation.TANH: lambda x, op: np.tanh(x),
    Activation.EXP: lambda x, op: np.exp(x),
    Activation.LOG: lambda x, op: np.log(x),
    Activation.SQRT: lambda x, op: np.sqrt(x),
    Activation.RSQRT: lambda x, op: 1 / np.sqrt(x),
    Activation.NEG: lambda x, op: np.negative(x),
    Activation.ABS: lambda x, op: np.abs(x),
    Activation.SIN: lambda x, op: np.sin(x),
    Activation.COS: lambda x, op: np.cos(x),
    Activation.TAN: lambda x, op: np.tan(x),
    Activation.ASIN: lambda x, op: np.arcsin(x),
    Activation.ACOS: lambda x, op: np.arccos(x),
    Activation.ATAN: lambda x, op: np.arctan(x),
    Activation.SINH: lambda x, op: np.sinh(x),
    Activation.COSH: lambda x, op: np.cosh(x),
    Activation.ASINH: lambda x, op: np.arcsinh(x),
    Activation.ACOSH: lambda x, op: np.arccosh(x),
    Activation.ATANH: lambda x, op: np.arctanh(x),
    Activation.RECIP: lambda x, op: np.reciprocal(x),
    Activation.ROUND: lambda x, op: np.round(x),  # half to even, as ONNX Round
    Activation.FLOOR: lambda x, op: np.floor(x),
    Activation.CEIL: lambda x, op: np.ceil(x),
    Activation.SIGN: lambda x, op: np.sign(x),
    Activation.SOFTPLUS: lambda x, op: _softplus(x),
    Activation.SOFTSIGN: lambda x, op: x / (1 + np.abs(x)),
    Activation.ELU: lambda x, op: np.where(x > 0, x, _a(op, 1.0) * np.expm1(np.minimum(x, 0))),
    Activation.SELU: lambda x, op: _b(op, _SELU_GAMMA) * np.where(
        x > 0, x, _a(op, _SELU_ALPHA) * np.expm1(np.minimum(x, 0))),
    Activation.CELU: lambda x, op: np.maximum(x, 0) + np.minimum(
        0, _a(op, 1.0) * np.expm1(np.minimum(x, 0) / _a(op, 1.0))),
    Activation.LEAKY_RELU: lambda x, op: np.where(x >= 0, x, _a(op, 0.01) * x),
    Activation.THRESHOLDED_RELU: lambda x, op: np.where(x > _a(op, 1.0), x, 0),
    Activation.ERF: lambda x, op: erf(x),
    Activation.HARD_SWISH: lambda x, op: _hard_swish(x),
    Activation.HARD_SIGMOID: lambda x, op: np.clip(_a(op, 0.2) * x + _b(op, 0.5), 0, 1),
    Activation.MISH: lambda x, op: x * np.tanh(_softplus(x)),
    Activation.LOG_SIGMOID: lambda x, op: -_softplus(-x),
    Activation.IS_NAN: lambda x, op: np.isnan(x),
    Activation.IS_INF: lambda x, op: np.isinf(x),
    Activation.IS_POS_INF: lambda x, op: np.isposinf(x),
    Activation.IS_NEG_INF: lambda x, op: np.isneginf(x),
    Activation.BIT_NOT: lambda x, op: np.invert(x),
}


def _typed(out, dtype: np.dtype) -> np.ndarray:
    """`out` as an ndarray of `dtype`, without a call when it already is one (the usual
    case; ufuncs give NumPy scalars at rank 0 and some formulas promote)."""
    if type(out) is np.ndarray and out.dtype == dtype:
        return out
    return np.asarray(out, dtype=dtype)


@staged(Unary)
def build_unary(node, compile):
    fn, op, dtype = _UNARY[node.op.kind], node.op, node.shape.dtype.numpy

    def step(x):
        # half precision is evaluated in float32 and rounded once: composite formulas
        # (mish, gelu, softplus) would otherwise round at every step and overflow early
        with np.errstate(all="ignore"):  # overflow to inf, NaN outside the domain: results
            return _typed(fn(widen_half(x), op), dtype)

    return step


def _pow(a, b):
    if np.issubdtype(a.dtype, np.integer):
        return np.power(a.astype(np.float64), b).astype(a.dtype)
    if b.size == 1 and b.ndim <= a.ndim:
        # a scalar exponent of 2 or 3 (GELU's x**3, variances): libm's pow is ~30x slower
        # than multiplying, and x*x*x is exact to the same rounding for these powers
        e = float(b.reshape(-1)[0])
        if e == 2.0:
            return np.multiply(a, a)
        if e == 3.0:
            return np.multiply(np.multiply(a, a), a)
    return np.power(a, b)


def _int_div(a, b):
    # integer division truncates toward zero (C / ONNX), not toward -inf as NumPy's //
    q = np.abs(a) // np.where(b == 0, 1, np.abs(b))
    return (np.sign(a) * np.sign(b) * q).astype(a.dtype)


_BINARY: dict[BinaryOp, Callable[..., np.ndarray]] = {
    BinaryOp.ADD: np.add,
    BinaryOp.SUB: np.subtract,
    BinaryOp.MUL: np.multiply,
    BinaryOp.DIV: lambda a, b: _int_div(a, b) if a.dtype.kind in "iu" else np.divide(a, b),
    BinaryOp.MAX: np.maximum,
    BinaryOp.MIN: np.minimum,
    BinaryOp.POW: _pow,
    BinaryOp.MOD: np.mod,
    BinaryOp.FMOD: np.fmod,
    BinaryOp.BIT_AND: np.bitwise_and,
    BinaryOp.BIT_OR: np.bitwise_or,
    BinaryOp.BIT_XOR: np.bitwise_xor,
    BinaryOp.SHL: np.left_shift,
    BinaryOp.SHR: np.right_shift,
    BinaryOp.ATAN2: np.arctan2,
}


@staged(Binary)
def build_binary(node, compile):
    fn, dtype = _BINARY[node.op.op], node.shape.dtype.numpy

    def step(a, b):
        with np.errstate(all="ignore"):
            return _typed(fn(a, b), dtype)

    return step


_COMPARE = {
    CompareOp.EQ: np.equal,
    CompareOp.NE: np.not_equal,
    CompareOp.LT: np.less,
    CompareOp.LE: np.less_equal,
    CompareOp.GT: np.greater,
    CompareOp.GE: np.greater_equal,
}


@kernel(Compare)
def compare(node, a, b):
    return np.asarray(_COMPARE[node.op.op](a, b))


_LOGICAL = {LogicalOp.AND: np.logical_and, LogicalOp.OR: np.logical_or,
            LogicalOp.XOR: np.logical_xor}


@kernel(Logical)
def logical(node, a, b):
    return np.asarray(_LOGICAL[node.op.op](a, b))


@kernel(Not)
def logical_not(node, x):
    return np.asarray(np.logical_not(x))  # a ufunc returns a NumPy scalar for rank 0


@kernel(Where)
def where(node, cond, a, b):
    return np.where(cond, a, b)


@kernel(Cast)
def cast(node, x):
    if node.op.bits:  # same item size: a view of the same bytes (a rank-0 x stays rank 0)
        return (x if x.flags.c_contiguous else x.copy()).view(node.op.to.numpy)
    # float -> int truncates toward zero (a C cast, as ONNX); NaN / out of range is undefined
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(node.op.to.numpy)


def _bound(value: float, dtype: np.dtype, to_int: Callable[[float], int]) -> np.ndarray:
    """A clamp bound as a `dtype` scalar. Integer bounds are rounded inward (`to_int` is ceil
    for a lower bound, floor for an upper one) and limited to the dtype's range: a plain
    cast would truncate an upper bound of -1.5 to -1 and wrap -300 to an int8 of -44."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        value = to_int(min(max(value, info.min), info.max))
    return np.asarray(value).astype(dtype)


@staged(Clamp)
def build_clamp(node, compile):
    """Bounds converted once; one `clip` pass (half the time of maximum then minimum)."""
    dtype = node.shape.dtype.numpy
    lo, hi = node.op.min, node.op.max
    lo = None if lo is None else _bound(lo, dtype, math.ceil)
    hi = None if hi is None else _bound(hi, dtype, math.floor)

    def step(x):
        if lo is None and hi is None:
            return x
        return np.asarray(np.clip(x, lo, hi), dtype=dtype)  # clip gives a scalar at rank 0

    return step


@kernel(Identity)
def identity(node, x):
    return x
