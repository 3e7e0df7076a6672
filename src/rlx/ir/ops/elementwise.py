"""Elementwise ops: activations, binary arithmetic, cast, clamp (comparisons, logic and
select are `rlx.ir.ops.logic`).

All of them broadcast like NumPy (`broadcast_shape`, shared with the logic family).
`Activation` and `BinaryOp` are the closed sets of kinds; `Unary` and `Binary` are the ops
that carry them.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import ClassVar

from rlx.errors import ShapeError
from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op, expect_dtype
from rlx.ir.shape import Shape, broadcast_dims
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

__all__ = ["Activation", "BinaryOp", "Unary", "Binary", "Cast", "Clamp", "Identity"]


class Activation(enum.Enum):
    RELU = "relu"
    GELU = "gelu"
    GELU_APPROX = "gelu_approx"
    SILU = "silu"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    NEG = "neg"
    ABS = "abs"
    SIN = "sin"
    COS = "cos"
    TAN = "tan"
    ASIN = "asin"
    ACOS = "acos"
    ATAN = "atan"
    SINH = "sinh"
    COSH = "cosh"
    ASINH = "asinh"
    ACOSH = "acosh"
    ATANH = "atanh"
    RECIP = "recip"
    ROUND = "round"
    FLOOR = "floor"
    CEIL = "ceil"
    SIGN = "sign"
    SOFTPLUS = "softplus"
    SOFTSIGN = "softsign"
    ELU = "elu"
    SELU = "selu"
    CELU = "celu"
    LEAKY_RELU = "leaky_relu"
    THRESHOLDED_RELU = "thresholded_relu"
    ERF = "erf"
    HARD_SWISH = "hard_swish"
    HARD_SIGMOID = "hard_sigmoid"
    MISH = "mish"
    LOG_SIGMOID = "log_sigmoid"
    IS_NAN = "is_nan"
    IS_INF = "is_inf"
    IS_POS_INF = "is_pos_inf"
    IS_NEG_INF = "is_neg_inf"
    BIT_NOT = "bit_not"


_PREDICATES = {Activation.IS_NAN, Activation.IS_INF, Activation.IS_POS_INF, Activation.IS_NEG_INF}
_INT_OK = {Activation.RELU, Activation.NEG, Activation.ABS, Activation.SIGN}


def _unary_accepts(kind: Activation, dtype: DType) -> bool:
    if kind in _PREDICATES:
        return True
    if kind is Activation.BIT_NOT:
        return not dtype.is_float
    if kind in _INT_OK:
        return dtype is not DType.BOOL
    return dtype.is_float


class BinaryOp(enum.Enum):
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    MAX = "max"
    MIN = "min"
    POW = "pow"
    MOD = "mod"  # sign follows the divisor (Python / ONNX Mod fmod=0)
    FMOD = "fmod"  # sign follows the dividend (C fmod, ONNX Mod fmod=1)
    BIT_AND = "bit_and"
    BIT_OR = "bit_or"
    BIT_XOR = "bit_xor"
    SHL = "shl"
    SHR = "shr"
    ATAN2 = "atan2"


_INTEGER_ONLY = {BinaryOp.BIT_AND, BinaryOp.BIT_OR, BinaryOp.BIT_XOR, BinaryOp.SHL, BinaryOp.SHR}
_FLOAT_ONLY = {BinaryOp.ATAN2}


def broadcast_shape(op: Op, inputs: Sequence[Shape], dtype: DType) -> Shape:
    """The shape `inputs` broadcast to, of `dtype`; the error names `op`."""
    try:
        return Shape(broadcast_dims(*(s.dims for s in inputs)), dtype)
    except ShapeError as err:
        raise ShapeError(f"{op.op_name}: {err}") from None


@dataclass(frozen=True)
class Unary(Op):
    """An activation or other one-input elementwise function.

    `alpha`/`beta` parameterise the kinds that take them (Elu, Selu, Celu, LeakyRelu,
    ThresholdedRelu, HardSigmoid: `alpha * x + beta`), with ONNX's defaults when None.

    Kinds that `rlx.passes.fuse` makes out of op chains, as the ONNX ops they replace:
    - `gelu`: `Mul(Mul(x, 0.5), Add(Erf(Div(x, sqrt 2)), 1))` (ONNX 20: `Gelu`);
    - `gelu_approx`: `0.5 x (1 + Tanh(sqrt(2/pi) (x + 0.044715 x^3)))` (ONNX 20:
      `Gelu(approximate="tanh")`);
    - `silu`: `Mul(x, Sigmoid(x))`;
    - `mish`: `Mul(x, Tanh(Softplus(x)))` (ONNX 18: `Mish`);
    - `hard_swish`: `x * Clip(x + 3, 0, 6) / 6` (ONNX 14: `HardSwish`).
    """

    kind: Activation
    alpha: float | None = None
    beta: float | None = None

    def infer(self, inputs):
        (x,) = inputs
        if not _unary_accepts(self.kind, x.dtype):
            raise ShapeError(f"Unary {self.kind.value}: does not take {x.dtype} input")
        return x.with_dtype(DType.BOOL) if self.kind in _PREDICATES else x


@dataclass(frozen=True)
class Binary(Op):
    op: BinaryOp
    arity: ClassVar = (2, 2)

    def infer(self, inputs):
        expect_dtype(self, inputs)
        dtype = inputs[0].dtype
        if (
            dtype is DType.BOOL
            or (self.op in _INTEGER_ONLY and dtype.is_float)
            or (self.op in _FLOAT_ONLY and not dtype.is_float)
        ):
            raise ShapeError(f"Binary {self.op.value}: does not take {dtype} inputs")
        return broadcast_shape(self, inputs, dtype)


@dataclass(frozen=True)
class Cast(Op):
    """Convert values to `to`; with `bits`, reinterpret their bytes instead (ONNX BitCast:
    same item size, little-endian)."""

    to: DType
    bits: bool = False

    def infer(self, inputs):
        x = inputs[0]
        if self.bits and x.dtype.itemsize != self.to.itemsize:
            raise ShapeError(f"Cast bits: {x.dtype} and {self.to} differ in size")
        return x.with_dtype(self.to)


@dataclass(frozen=True)
class Clamp(Op):
    """Clip to [min, max]; a bound of None is open."""

    min: float | None = None
    max: float | None = None

    def infer(self, inputs):
        return inputs[0]


@dataclass(frozen=True)
class Identity(Op):
    """Pass the input through (kept where a subgraph returns an outer value)."""

    def infer(self, inputs):
        return inputs[0]
