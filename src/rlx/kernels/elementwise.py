"""Elementwise kernels. Results keep the input dtype (NumPy would promote some of them)."""

from __future__ import annotations

import functools
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
    Identity,
    Unary,
)
from rlx.kernels.blockwise import BLOCK, blockwise
from rlx.kernels.registry import kernel, staged, writes_into

__all__ = [
    "widen_half", "erf", "build_unary", "build_binary", "build_cast", "build_clamp", "identity",
    "quiet", "typed",
]

# type codes of float16 and ml_dtypes' bfloat16, which name it without importing it (a
# dtype's `.name` is computed in Python: ~2 us per step)
_HALF = frozenset("eE")


def widen_half(x: np.ndarray) -> np.ndarray:
    """f16/bf16 as float32, other arrays unchanged: for kernels whose half-precision
    intermediates would lose digits or overflow (sums, GEMM, composite formulas) or that
    NumPy runs slowly (no BLAS) or not at all (bf16 einsum). Callers round back once."""
    return x.astype(np.float32) if x.dtype.char in _HALF else x


def erf(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """Error function, vectorised (into `out` if given). float32 (half widened to it): a
    rational fit in cache-sized blocks, relative error below 1e-6 at about the cost of one
    `np.tanh`; float64: `erf_f64`."""
    if x.dtype == np.float64:
        return _copied(erf_f64(x), out)
    return blockwise(_erf_formula, widen_half(x), out, 2)


def erf_f64(x: np.ndarray) -> np.ndarray:
    """Error function accurate to ~1.2e-7 relative, evaluated in float64.

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


# erf(x) ~ x P(x^2) / Q(x^2) on [-3.8, 3.8], where the fit is already >= 1 (and erf(3.8) is
# within 1.1e-7 of 1), then clipped to [-1, 1], so erf(+-inf) is exactly +-1:
# a rational fit of degrees 5 / 4 in x^2 made for rlx by iteratively reweighted least squares
# against math.erf, relative error < 9.6e-7 when evaluated in float32 (tests/kernels).
_ERF_P = (1.1283799329480513, 0.36013791495089226, 0.07215926893381375,
          0.00996568323909953, 0.00024645046177170643, -1.383851370773126e-06)
_ERF_CUT = 3.8
_ERF_Q = (1.0, 0.6525052800558346, 0.1814440117252002, 0.027847712494656084,
          0.002312906707035019)


def _horner(out: np.ndarray, t: np.ndarray, coefficients: tuple[float, ...]) -> None:
    """out = sum(c_i t^i), in place, from the highest coefficient down."""
    np.multiply(t, coefficients[-1], out=out)
    out += coefficients[-2]
    for c in coefficients[-3::-1]:
        out *= t
        out += c


def _erf_into(out: np.ndarray, u: np.ndarray, t: np.ndarray, q: np.ndarray) -> None:
    """erf(u) into `out` (which may be `u`): 19 passes over the block, each in cache."""
    np.clip(u, -_ERF_CUT, _ERF_CUT, out=out)
    np.multiply(out, out, out=t)
    _horner(q, t, _ERF_Q)
    np.divide(out, q, out=q)  # x / Q(x^2): x is no longer needed after this
    _horner(out, t, _ERF_P)
    out *= q
    np.clip(out, -1.0, 1.0, out=out)  # the fit overshoots 1 by < 1e-6 near the cut


def _erf_formula(out, x, t, q):
    _erf_into(out, x, t, q)


_INV_SQRT2 = 1 / math.sqrt(2)

# erfc(z) exp(z^2) ~ P(z) / Q(z) for z in [0, 9] (erfc(9) exp(81) is where float32's exp
# underflows): a rational fit of degrees 3 / 4 made for rlx the same way, relative error
# < 3.4e-7 in exact arithmetic.
_ERFCX_P = (0.9999996728509124, 1.016553951952291, 0.4722538827953666, 0.09447477479480276)
_ERFCX_Q = (1.0, 2.1449097988052945, 1.892790504756682, 0.8364085117357022,
            0.16747561363508687)
_ERFCX_CUT = 11.0  # exp(-121) is 0 in float32: e and so the result vanish beyond


def _gelu_formula(out, x, a, p, q):
    """x Phi(x) with Phi(x) = e + max(copysign(1 - 2e, x), 0), e = erfc(|x| / sqrt 2) / 2
    (so Phi = e below 0, 1 - e above). e is computed directly (exp times a rational), so
    the negative side, where `1 + erf` would cancel to nothing in float32, keeps its
    relative accuracy; x stays readable until the last pass (out may be x). Every pass is
    a SIMD ufunc (np.heaviside is not: it alone cost 6x the rest)."""
    np.abs(x, out=a)
    a *= _INV_SQRT2
    np.minimum(a, _ERFCX_CUT, out=a)
    _horner(q, a, _ERFCX_Q)
    _horner(p, a, _ERFCX_P)
    p /= q
    np.multiply(a, a, out=q)
    np.negative(q, out=q)
    np.exp(q, out=q)
    p *= q
    p *= 0.5  # e
    np.multiply(p, -2.0, out=q)
    q += 1  # 1 - 2e, in [0, 1]
    np.copysign(q, x, out=q)
    np.maximum(q, 0, out=q)
    q += p  # Phi(x)
    np.multiply(x, q, out=out)


def _gelu(x, out=None):
    if x.dtype == np.float64:  # float64 keeps the float64-accurate erf
        return _copied(0.5 * x * (1 + erf_f64(x * _INV_SQRT2)), out)
    return blockwise(_gelu_formula, x, out, 3)


def _sigmoid_formula(out, x):
    """1 / (1 + exp(-x)) in four in-place passes; exp overflows to inf for x < -88 and
    1 / inf is the right 0, so no branch on the sign is needed."""
    np.negative(x, out=out)
    np.exp(out, out=out)
    out += 1
    np.reciprocal(out, out=out)


def _silu_formula(out, x, s):
    """x / (1 + exp(-x)) (= x * sigmoid(x)); x / inf = -0 for very negative x."""
    np.negative(x, out=s)
    np.exp(s, out=s)
    s += 1
    np.divide(x, s, out=out)


_MISH_CUT = 20.0  # tanh(softplus(x)) rounds to 1 in float32 and float64 beyond e^20 ... 2e-18


def _mish_formula(out, x, e, n):
    """x tanh(softplus(x)) = x n / (n + 2) with n = e^x (e^x + 2): one exp, no log or
    tanh. e^x is capped at e^20, where the factor is 1 to float precision."""
    np.minimum(x, _MISH_CUT, out=e)
    np.exp(e, out=e)
    np.add(e, 2, out=n)
    n *= e
    np.add(n, 2, out=e)
    n /= e
    np.multiply(x, n, out=out)


def _gelu_tanh_formula(out, x, t):
    """0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as the identical
    x / (1 + exp(-2u)): one exp instead of tanh (NumPy's float32 tanh costs ~2x its exp),
    no cancellation for negative x, and exp overflowing to inf gives the right -0."""
    c = -2 * math.sqrt(2 / math.pi)
    np.multiply(x, x, out=t)
    t *= 0.044715 * c
    t += c
    t *= x  # -2u
    np.exp(t, out=t)
    t += 1
    np.divide(x, t, out=out)


def _hard_swish(x, op, out=None):
    """x * clip(x / 6 + 1/2, 0, 1) over the whole array (four cheap passes: blocks would
    only add calls), with one buffer at most: `out` itself unless `out` is `x`."""
    t = np.multiply(x, 1 / 6, out=None if out is x else out)
    t += 0.5
    t.clip(0, 1, out=t)  # the method: np.clip's two Python layers cost ~2 us a call
    return np.multiply(t, x, out=t if out is None else out)


def _hard_sigmoid(x, op, out=None):
    out = np.multiply(x, _a(op, 0.2), out=out)
    out += _b(op, 0.5)
    return out.clip(0, 1, out=out)


def _relu(x, op, out=None):
    """max(x, 0) against zeros, not the scalar 0: NumPy's vectorised maximum (2.4,
    AVX-512) takes two arrays; with a scalar it ran 2-3x slower (8000 float32: 4.6 -> 2.1
    us; 400k in blocks: 149 -> 84 us; thread CPU time, interleaved). An array of one block
    or less skips `blockwise`'s layers (800 float32: 2.0 -> 0.8 us)."""
    if x.size <= BLOCK:
        return _relu_formula(out, x)
    return blockwise(_relu_formula, x, out)


def _relu_formula(out, x):
    if x.size <= BLOCK:
        return np.maximum(x, _zeros(x.shape, x.dtype), out=out)
    return np.maximum(x, x.dtype.type(0), out=out)  # past a block, non-contiguous: whole


@functools.lru_cache(maxsize=256)
def _zeros(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Read-only zeros of `shape` (at most `BLOCK` elements): a view of one block of zeros
    per dtype, made once per shape."""
    return _zero_block(dtype)[:math.prod(shape)].reshape(shape)


@functools.cache
def _zero_block(dtype: np.dtype) -> np.ndarray:
    """`BLOCK` zeros of `dtype`, read-only, made once."""
    zeros = np.zeros(BLOCK, dtype)
    zeros.flags.writeable = False
    return zeros


_FORMULAS = {
    Activation.SIGMOID: (_sigmoid_formula, 0),
    Activation.SILU: (_silu_formula, 1),
    Activation.MISH: (_mish_formula, 2),
    Activation.GELU_APPROX: (_gelu_tanh_formula, 1),
}
"""Kinds computed by a multi-pass formula over cache-sized blocks (`blockwise`), with the
number of scratch buffers each needs."""


def _blocked(formula, scratch: int):
    return lambda x, op, out=None: blockwise(formula, x, out, scratch)


def _ufunc_kernel(ufunc):
    return lambda x, op, out=None: ufunc(x, out=out)


def _copied(y: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    if out is None:
        return y
    np.copyto(out, y)
    return out


def _softplus(x):
    return (np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))).astype(x.dtype)


def _a(op, default):
    return default if op.alpha is None else op.alpha


def _b(op, default):
    return default if op.beta is None else op.beta


_SELU_ALPHA = 1.67326319217681884765625
_SELU_GAMMA = 1.05070102214813232421875

_UFUNCS = {
    Activation.TANH: np.tanh, Activation.EXP: np.exp, Activation.LOG: np.log,
    Activation.SQRT: np.sqrt, Activation.NEG: np.negative, Activation.ABS: np.abs,
    Activation.SIN: np.sin, Activation.COS: np.cos, Activation.TAN: np.tan,
    Activation.ASIN: np.arcsin, Activation.ACOS: np.arccos, Activation.ATAN: np.arctan,
    Activation.SINH: np.sinh, Activation.COSH: np.cosh, Activation.ASINH: np.arcsinh,
    Activation.ACOSH: np.arccosh, Activation.ATANH: np.arctanh,
    Activation.RECIP: np.reciprocal, Activation.ROUND: np.rint,  # half to even, as ONNX
    Activation.FLOOR: np.floor, Activation.CEIL: np.ceil, Activation.SIGN: np.sign,
}
"""Kinds that are one NumPy ufunc (one pass, any `out`)."""

_OUT = {
    **{kind: _blocked(formula, scratch) for kind, (formula, scratch) in _FORMULAS.items()},
    **{kind: _ufunc_kernel(f) for kind, f in _UFUNCS.items()},
    Activation.RELU: _relu,
    Activation.HARD_SIGMOID: _hard_sigmoid,
    Activation.HARD_SWISH: _hard_swish,
    Activation.GELU: lambda x, op, out=None: _gelu(x, out),
    Activation.ERF: lambda x, op, out=None: erf(x, out),
}
"""Kinds whose kernel can write into a given buffer (`out`, which may be the input)."""

_UNARY = {
    **_OUT,
    Activation.RSQRT: lambda x, op: 1 / np.sqrt(x),
    Activation.SOFTPLUS: lambda x, op: _softplus(x),
    Activation.SOFTSIGN: lambda x, op: x / (1 + np.abs(x)),
    Activation.ELU: lambda x, op: np.where(x > 0, x, _a(op, 1.0) * np.expm1(np.minimum(x, 0))),
    Activation.SELU: lambda x, op: _b(op, _SELU_GAMMA) * np.where(
        x > 0, x, _a(op, _SELU_ALPHA) * np.expm1(np.minimum(x, 0))),
    Activation.CELU: lambda x, op: np.maximum(x, 0) + np.minimum(
        0, _a(op, 1.0) * np.expm1(np.minimum(x, 0) / _a(op, 1.0))),
    Activation.LEAKY_RELU: lambda x, op: np.where(x >= 0, x, _a(op, 0.01) * x),
    Activation.THRESHOLDED_RELU: lambda x, op: np.where(x > _a(op, 1.0), x, 0),
    Activation.LOG_SIGMOID: lambda x, op: -_softplus(-x),
    Activation.IS_NAN: lambda x, op: np.isnan(x),
    Activation.IS_INF: lambda x, op: np.isinf(x),
    Activation.IS_POS_INF: lambda x, op: np.isposinf(x),
    Activation.IS_NEG_INF: lambda x, op: np.isneginf(x),
    Activation.BIT_NOT: lambda x, op: np.invert(x),
}


def typed(out, dtype: np.dtype) -> np.ndarray:
    """`out` as an ndarray of `dtype`, without a call when it already is one (the usual
    case; ufuncs give NumPy scalars at rank 0 and some formulas promote)."""
    if type(out) is np.ndarray and out.dtype == dtype:
        return out
    return np.asarray(out, dtype=dtype)


@staged(Unary, shared=True)
def build_unary(node, compile):
    """`step(x, out=None)`; `out` (the runtime passes x's own buffer when x dies here) is
    honoured by the kinds in `_OUT` for float32/float64, ignored otherwise."""
    kind, op, dtype = node.op.kind, node.op, node.shape.dtype.numpy
    fn, into = _UNARY[kind], _OUT.get(kind)

    def step(x, out=None):
        # half precision is evaluated in float32 and rounded once: composite formulas
        # (mish, gelu, softplus) would otherwise round at every step and overflow early
        if out is not None and into is not None and x.dtype.char not in _HALF:
            return into(x, op, out)
        return typed(fn(widen_half(x), op), dtype)

    if kind is Activation.RELU and dtype.char not in _HALF:
        return quiet(_relu_into_step(step), compile)
    return quiet(step, compile)


_RELU_SHAPES = 64


def _relu_into_step(step):
    """`step` of a Relu, with the everyday call, into a buffer of one block or less, made
    one `maximum` against zeros cached per shape (up to `_RELU_SHAPES`): without the layers
    of `_relu` and the zeros' shared cache, ~0.3 us of the ~1.4 us a Relu of 800 float32
    took (thread CPU time)."""
    zeros: dict[tuple[int, ...], np.ndarray] = {}

    def relu_step(x, out=None):
        if out is None or x.size > BLOCK:
            return step(x, out)
        z = zeros.get(x.shape)
        if z is None:
            z = _zeros(x.shape, x.dtype)
            if len(zeros) < _RELU_SHAPES:
                zeros[x.shape] = z
        return np.maximum(x, z, out=out)

    return relu_step


def quiet(step, compile):
    """`step` with NumPy's floating-point warnings off: overflow to inf and NaN outside the
    domain are results, not errors. A session (`compile` given) runs every step inside one
    `np.errstate` per run (`rlx.runtime`), which saves ~1.5 us per step; one-shot callers
    (constant folding) get the context per call."""
    if compile is not None:
        return step

    def one_shot(*args, **kwargs):
        with np.errstate(all="ignore"):
            return step(*args, **kwargs)

    return one_shot


@writes_into(Unary)
def _unary_into(node) -> bool:
    return node.op.kind in _OUT and node.shape.dtype not in (DType.F16, DType.BF16)


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


_BINARY_UFUNCS = {BinaryOp.ADD: np.add, BinaryOp.SUB: np.subtract, BinaryOp.MUL: np.multiply,
                  BinaryOp.MAX: np.maximum, BinaryOp.MIN: np.minimum}
"""Binary ops that are one ufunc of any numeric dtype (float Div too), so take `out`."""


@staged(Binary, shared=True)
def build_binary(node, compile):
    """`step(a, b, out=None)`: `out` is honoured where `_binary_into` says so."""
    fn, dtype = _BINARY[node.op.op], node.shape.dtype.numpy
    ufunc = _BINARY_UFUNCS.get(node.op.op)
    if ufunc is None and node.op.op is BinaryOp.DIV and dtype.kind == "f":
        ufunc = np.divide

    def step(a, b, out=None):
        if out is not None and ufunc is not None:
            return ufunc(a, b, out=out)
        return typed(fn(a, b), dtype)

    return quiet(step, compile)


@writes_into(Binary)
def _binary_into(node) -> bool:
    dtype = node.shape.dtype.numpy
    return node.op.op in _BINARY_UFUNCS or (node.op.op is BinaryOp.DIV and dtype.kind == "f")


@staged(Cast, shared=True)
def build_cast(node, compile):
    to = node.op.to.numpy
    if node.op.bits:  # same item size: a view of the same bytes (a rank-0 x stays rank 0)
        return lambda x: (x if x.flags.c_contiguous else x.copy()).view(to)
    # float -> int truncates toward zero (a C cast, as ONNX); NaN / out of range is
    # undefined, and no warning
    return quiet(lambda x: x.astype(to), compile)


def _bound(value: float, dtype: np.dtype, to_int: Callable[[float], int]) -> np.ndarray:
    """A clamp bound as a `dtype` scalar. Integer bounds are rounded inward (`to_int` is ceil
    for a lower bound, floor for an upper one) and limited to the dtype's range: a plain
    cast would truncate an upper bound of -1.5 to -1 and wrap -300 to an int8 of -44."""
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        value = to_int(min(max(value, info.min), info.max))
    return np.asarray(value).astype(dtype)


@staged(Clamp, shared=True)
def build_clamp(node, compile):
    """Bounds converted once; one `clip` pass (half the time of maximum then minimum)."""
    dtype = node.shape.dtype.numpy
    lo, hi = node.op.min, node.op.max
    lo = None if lo is None else _bound(lo, dtype, math.ceil)
    hi = None if hi is None else _bound(hi, dtype, math.floor)

    def step(x, out=None):
        if lo is None and hi is None:
            return x
        if out is not None:
            return np.clip(x, lo, hi, out=out)
        return np.asarray(np.clip(x, lo, hi), dtype=dtype)  # clip gives a scalar at rank 0

    return step


@writes_into(Clamp)
def _clamp_into(node) -> bool:
    return node.op.min is not None or node.op.max is not None


@kernel(Identity)
def identity(node, x):
    return x
