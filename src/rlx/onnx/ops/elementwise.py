"""Elementwise ops: activations, arithmetic (variadic ones as chains), comparisons, logic,
Where, Cast, Clip, and the pass-throughs (Identity, Dropout in inference)."""

from __future__ import annotations

import functools

import numpy as np

from rlx.ir import Activation, BinaryOp, Cast, Clamp, CompareOp, DType, LogicalOp, PRelu
from rlx.onnx.node import NodeContext
from rlx.onnx.registry import converter
from rlx.onnx.tensors import dtype_of

__all__ = [
    "unary", "parametric", "gelu", "swish", "shrink", "is_inf", "binary", "pow_", "mod",
    "bit_shift", "compare", "logical", "not_", "where", "prelu", "sum_", "max_", "min_",
    "mean", "cast", "bit_cast", "cast_like", "clip", "identity", "dropout",
]

_UNARY = {
    "Abs": Activation.ABS, "Neg": Activation.NEG, "Exp": Activation.EXP,
    "Log": Activation.LOG, "Sqrt": Activation.SQRT, "Reciprocal": Activation.RECIP,
    "Sin": Activation.SIN, "Cos": Activation.COS, "Tan": Activation.TAN,
    "Asin": Activation.ASIN, "Acos": Activation.ACOS, "Atan": Activation.ATAN,
    "Sinh": Activation.SINH, "Cosh": Activation.COSH, "Asinh": Activation.ASINH,
    "Acosh": Activation.ACOSH, "Atanh": Activation.ATANH, "Floor": Activation.FLOOR,
    "Ceil": Activation.CEIL, "Round": Activation.ROUND, "Sign": Activation.SIGN,
    "Relu": Activation.RELU, "Sigmoid": Activation.SIGMOID, "Tanh": Activation.TANH,
    "Erf": Activation.ERF, "Softplus": Activation.SOFTPLUS, "Softsign": Activation.SOFTSIGN,
    "HardSwish": Activation.HARD_SWISH, "Mish": Activation.MISH, "IsNaN": Activation.IS_NAN,
    "BitwiseNot": Activation.BIT_NOT,
}

# op -> (kind, (alpha attribute, ONNX default), (beta attribute, ONNX default) or None)
_PARAMETRIC = {
    "Elu": (Activation.ELU, ("alpha", 1.0), None),
    "Celu": (Activation.CELU, ("alpha", 1.0), None),
    "LeakyRelu": (Activation.LEAKY_RELU, ("alpha", 0.01), None),
    "ThresholdedRelu": (Activation.THRESHOLDED_RELU, ("alpha", 1.0), None),
    "Selu": (Activation.SELU, ("alpha", 1.67326319217681884765625),
             ("gamma", 1.05070102214813232421875)),
    "HardSigmoid": (Activation.HARD_SIGMOID, ("alpha", 0.2), ("beta", 0.5)),
}

_BINARY = {
    "Add": BinaryOp.ADD, "Sub": BinaryOp.SUB, "Mul": BinaryOp.MUL, "Div": BinaryOp.DIV,
    "BitwiseAnd": BinaryOp.BIT_AND, "BitwiseOr": BinaryOp.BIT_OR,
    "BitwiseXor": BinaryOp.BIT_XOR,
}

_COMPARE = {
    "Equal": CompareOp.EQ, "Less": CompareOp.LT, "LessOrEqual": CompareOp.LE,
    "Greater": CompareOp.GT, "GreaterOrEqual": CompareOp.GE,
}

_LOGICAL = {"And": LogicalOp.AND, "Or": LogicalOp.OR, "Xor": LogicalOp.XOR}


@converter(*_UNARY)
def unary(n: NodeContext) -> int:
    return n.s.unary(_UNARY[n.op_type], n.input(0))


@converter(*_PARAMETRIC)
def parametric(n: NodeContext) -> int:
    kind, (alpha, alpha_default), beta = _PARAMETRIC[n.op_type]
    b = None if beta is None else float(n.attr(beta[0], beta[1]))
    return n.s.unary(kind, n.input(0), float(n.attr(alpha, alpha_default)), b)


@converter("Gelu")
def gelu(n: NodeContext) -> int:
    approximate = n.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise n.fail(f"approximate={approximate!r} (expected 'none' or 'tanh')")
    kind = Activation.GELU_APPROX if approximate == "tanh" else Activation.GELU
    return n.s.unary(kind, n.input(0))


@converter("Swish")
def swish(n: NodeContext) -> int:
    x, alpha = n.input(0), float(n.attr("alpha", 1.0))
    if alpha == 1.0:
        return n.s.unary(Activation.SILU, x)
    s = n.s
    return s.mul(x, s.unary(Activation.SIGMOID, s.mul(x, s.like(alpha, x))))


@converter("Shrink")
def shrink(n: NodeContext) -> int:
    """x + bias below -lambd, x - bias above lambd, 0 between."""
    s = n.s
    x = n.input(0)
    lambd, bias = float(n.attr("lambd", 0.5)), float(n.attr("bias", 0.0))
    low = s.compare(CompareOp.LT, x, s.like(-lambd, x))
    high = s.compare(CompareOp.GT, x, s.like(lambd, x))
    shrunk = s.where(high, s.sub(x, s.like(bias, x)), s.like(0, x))
    return s.where(low, s.add(x, s.like(bias, x)), shrunk)


@converter("IsInf")
def is_inf(n: NodeContext) -> int:
    x = n.input(0)
    positive, negative = n.attr("detect_positive", 1), n.attr("detect_negative", 1)
    if positive and negative:
        return n.s.unary(Activation.IS_INF, x)
    if positive or negative:
        return n.s.unary(Activation.IS_POS_INF if positive else Activation.IS_NEG_INF, x)
    return n.s.full_like(x, 0, DType.BOOL)


@converter(*_BINARY)
def binary(n: NodeContext) -> int:
    return n.s.binary(_BINARY[n.op_type], n.input(0), n.input(1))


@converter("Pow")
def pow_(n: NodeContext) -> int:
    base = n.input(0)
    return n.s.binary(BinaryOp.POW, base, n.s.cast(n.input(1), n.s.dtype(base)))


@converter("Mod")
def mod(n: NodeContext) -> int:
    op = BinaryOp.FMOD if n.attr("fmod", 0) else BinaryOp.MOD
    return n.s.binary(op, n.input(0), n.input(1))


@converter("BitShift")
def bit_shift(n: NodeContext) -> int:
    direction = n.attr("direction", "")
    if direction not in ("LEFT", "RIGHT"):
        raise n.fail(f"direction={direction!r} (expected 'LEFT' or 'RIGHT')")
    op = BinaryOp.SHL if direction == "LEFT" else BinaryOp.SHR
    return n.s.binary(op, n.input(0), n.input(1))


@converter(*_COMPARE)
def compare(n: NodeContext) -> int:
    return n.s.compare(_COMPARE[n.op_type], n.input(0), n.input(1))


@converter(*_LOGICAL)
def logical(n: NodeContext) -> int:
    return n.s.logical(_LOGICAL[n.op_type], n.input(0), n.input(1))


@converter("Not")
def not_(n: NodeContext) -> int:
    return n.s.not_(n.input(0))


@converter("Where")
def where(n: NodeContext) -> int:
    return n.s.where(n.input(0), n.input(1), n.input(2))


@converter("PRelu")
def prelu(n: NodeContext) -> int:
    return n.s.emit(PRelu(), n.input(0), n.input(1))


# -- variadic ----------------------------------------------------------------------------------
def _chain(n: NodeContext, op: BinaryOp) -> int:
    values = n.all_inputs()
    if not values:
        raise n.fail("needs at least one input")
    return functools.reduce(lambda a, b: n.s.binary(op, a, b), values)


@converter("Sum")
def sum_(n: NodeContext) -> int:
    return _chain(n, BinaryOp.ADD)


@converter("Max")
def max_(n: NodeContext) -> int:
    return _chain(n, BinaryOp.MAX)


@converter("Min")
def min_(n: NodeContext) -> int:
    return _chain(n, BinaryOp.MIN)


@converter("Mean")
def mean(n: NodeContext) -> int:
    total = _chain(n, BinaryOp.ADD)
    return n.s.div(total, n.s.like(len(n.inputs), total))


# -- types and bounds --------------------------------------------------------------------------
@converter("Cast")
def cast(n: NodeContext) -> int:
    return n.s.cast(n.input(0), dtype_of(n.attr("to", 0), f"{n.label} 'to'"))


@converter("BitCast")
def bit_cast(n: NodeContext) -> int:
    x = n.input(0)
    to = dtype_of(n.attr("to", 0), f"{n.label} 'to'")
    return x if n.s.dtype(x) == to else n.s.emit(Cast(to, bits=True), x)


@converter("CastLike")
def cast_like(n: NodeContext) -> int:
    return n.s.cast(n.input(0), n.s.dtype(n.input(1)))


_EXACT_FLOAT = 2 ** 53  # integers beyond this do not survive a trip through a float attribute


@converter("Clip")
def clip(n: NodeContext) -> int:
    """Opset < 11: float attributes; later: optional inputs, folded into Clamp when known."""
    x = n.input(0)
    if n.opset < 11:
        lo, hi = n.attr("min", -np.inf), n.attr("max", np.inf)
        return n.s.emit(Clamp(_bound(lo), _bound(hi)), x)
    bounds = [b for b in (n.static(i) if n.has(i) else np.array(np.inf) for i in (1, 2))
              if b is not None and b.size == 1]
    if len(bounds) == 2:
        lo, hi = (b.reshape(()).item() for b in bounds)
        if all(not np.isfinite(v) or abs(v) < _EXACT_FLOAT for v in (lo, hi)):
            return n.s.emit(Clamp(_bound(lo), _bound(hi)), x)
    # bounds known at run time only: max then min, as ONNX defines Clip
    if n.has(1):
        x = n.s.binary(BinaryOp.MAX, x, n.input(1))
    if n.has(2):
        x = n.s.binary(BinaryOp.MIN, x, n.input(2))
    return x


def _bound(value) -> float | None:
    """A Clamp bound: None for an open (infinite or absent) one."""
    return None if value is None or not np.isfinite(value) else float(value)


# -- pass-throughs -----------------------------------------------------------------------------
@converter("Identity", "OptionalGetElement")
def identity(n: NodeContext) -> int:
    return n.input(0)


@converter("Dropout")
def dropout(n: NodeContext):
    """Inference only: y = x and an all-true mask; training mode would draw random numbers."""
    x = n.input(0)
    if n.opset >= 12 and n.static_scalar(2, False):
        raise n.fail("training_mode=true draws random numbers; rlx runs inference only")
    # the mask is bool from opset 10, before that of x's type
    mask_type = DType.BOOL if n.opset >= 10 else n.s.dtype(x)
    mask = n.s.full_like(x, 1, mask_type) if n.wants(1) else None
    return [x, mask]
