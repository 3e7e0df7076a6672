"""The op base class and the registry of op types by name.

Every op is a small frozen dataclass. Its class name is its serialised name, so files stay
readable when ops are added (never an enum position). An op knows its arity and how to infer
its output shape; kernels live in `rlx.kernels`.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from rlx.errors import ShapeError
from rlx.ir.shape import Dim, Shape, normalize_axis
from rlx.record import dataclass, fields, replace  # dataclasses', cheaper to create

if TYPE_CHECKING:
    from rlx.ir.graph import Graph

OutShape = Shape | tuple[Shape, ...]

OPS: dict[str, type[Op]] = {}
"""Registry of the op types imported so far by their serialised names (every op type once
`rlx.ir.ops.OPS` is asked for: that imports every family)."""

FAMILY_OPS = {
    "blocks": ("DepthToSpace", "Pad", "SpaceToDepth", "Tile"),
    "channelwise": ("BatchNormInference", "InstanceNorm", "PRelu"),
    "dequant": ("DequantMatMul",),
    "control": ("Composite", "Fail", "GRU", "If", "LSTM", "Loop", "QuantizedLSTM", "RNN",
                "Scan"),
    "einsum": ("Einsum",),
    "elementwise": ("Binary", "Cast", "Clamp", "Identity", "Unary"),
    "generators": ("Fill", "Range", "ShapeOf", "Size"),
    "indexing": ("Compress", "GatherElements", "GatherND", "NonZero", "OneHot",
                 "ScatterElements", "ScatterND", "Trilu"),
    "linalg": ("MatMul",),
    "logic": ("Compare", "Logical", "Not", "Where"),
    "multi": ("TupleGet",),
    "nn": ("LayerNorm", "LogSoftmax", "Softmax"),
    "packed": ("DecodeWeight", "DequantGather"),
    "quant": ("ConvInteger", "DequantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
              "QLinearConv", "QLinearMatMul", "QuantizeLinear"),
    "reduce": ("ArgMax", "ArgMin", "CumSum", "Reduce", "TopK"),
    "resize": ("Resize",),
    "shaping": ("Expand", "Flatten", "Gather", "Reshape", "Squeeze", "Transpose", "Unsqueeze"),
    "slicing": ("Concat", "Slice", "Split"),
    "spectral": ("DFT",),
    "sources": ("Constant", "Input", "Param"),
    "windows": ("Conv", "ConvTranspose", "GlobalPool", "Pool"),
}
"""The serialised op names each family module (`rlx.ir.ops.<family>`) defines: reading a
graph imports only the families of its ops (`op_type`). tests/test_exports.py checks it
against the families themselves."""

_FAMILY_OF = {name: family for family, names in FAMILY_OPS.items() for name in names}

__all__ = ["Op", "OpMixin", "OPS", "FAMILY_OPS", "OutShape", "op_axis", "expect_dtype",
           "check_image", "check_vector",
           "op_type"]


@dataclass(frozen=True, slots=True)
class Op:
    """Base of all ops. Subclasses set `arity` (min, max inputs; max None = unbounded)."""

    arity: ClassVar[tuple[int, int | None]] = (1, 1)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        OPS[cls.__name__] = cls

    @property
    def op_name(self) -> str:
        return type(self).__name__

    def infer(self, inputs: Sequence[OutShape]) -> OutShape:
        """The output shape(s) for `inputs` (tuple-valued ones reach only TupleGet)."""
        raise NotImplementedError(type(self).__name__)

    def subgraphs(self) -> tuple[Graph, ...]:
        """Graphs held as attributes (control flow); empty for ordinary ops."""
        return ()

    def with_subgraphs(self, graphs: Sequence[Graph]) -> Op:
        """This op with its subgraphs replaced, given in `subgraphs()` order; the op itself
        when every one is the same object."""
        old = self.subgraphs()
        if all(new is was for new, was in zip(graphs, old)):
            return self
        names = [f.name for f in fields(self) if any(getattr(self, f.name) is g for g in old)]
        changes = {name: new for name, new, was in zip(names, graphs, old) if new is not was}
        return replace(self, **changes) if changes else self

    def attrs(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


if TYPE_CHECKING:
    OpMixin = Op  # a mixin of ops is typed as one: it may use op_name and pass itself as an op
else:
    OpMixin = object  # at run time a plain base, so the mixin is not registered as an op type


def op_type(name: str) -> type[Op] | None:
    """The op type serialised as `name`, its family imported on first use (None: no such
    op)."""
    if name not in OPS and name in _FAMILY_OF:
        importlib.import_module(f"rlx.ir.ops.{_FAMILY_OF[name]}")
    return OPS.get(name)


def op_axis(op: Op, axis: int, rank: int, what: str = "") -> int:
    """`normalize_axis` whose error names the op (and `what` the axis belongs to)."""
    try:
        return normalize_axis(axis, rank)
    except ShapeError as err:
        where = f"{what}: " if what else ""
        raise ShapeError(f"{op.op_name}: {where}{err}") from None


def expect_dtype(op: Op, shapes: Sequence[Shape], *, same: bool = True, floating: bool = False):
    """Shared dtype checks: inputs agree with each other and/or are floating point."""
    if same and len({s.dtype for s in shapes}) > 1:
        got = ", ".join(str(s.dtype) for s in shapes)
        raise ShapeError(f"{op.op_name}: inputs must share a dtype, got {got}")
    if floating and any(not s.dtype.is_float for s in shapes):
        raise ShapeError(f"{op.op_name}: needs floating-point inputs, got {shapes[0].dtype}")


def check_image(op: Op, x: Shape, min_rank: int = 3) -> None:
    """An image-like input: [N, C, *spatial], of rank `min_rank` or more."""
    if x.rank < min_rank:
        raise ShapeError(f"{op.op_name}: input must be [N, C, *spatial] with rank >= "
                         f"{min_rank}, got {x}")


def check_vector(op: Op, what: str, v: Shape, size: Dim) -> None:
    """A per-channel parameter: 1-D of `size` elements."""
    if v.rank != 1 or (isinstance(v.dims[0], int) and isinstance(size, int)
                       and v.dims[0] != size):
        raise ShapeError(f"{op.op_name}: {what} must be [{size}], got {v}")
