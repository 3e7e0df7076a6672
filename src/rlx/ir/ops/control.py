"""Control flow and recurrences, with ONNX semantics: If, Loop, Scan, LSTM, GRU, RNN; and
`Composite`, a foreign op kept whole with a body saying what it computes.

Subgraphs are `Graph` attributes. Nothing is captured implicitly from the outer scope: a
subgraph's `Input` nodes are bound positionally (in node order) to values the op passes in,
and outer values a body needs are extra ("captured") inputs of the op. Symbolic dims a
subgraph declares on its inputs are bound to the outer dims they receive, so its output
shapes can be stated in the outer graph's terms; a dim that cannot be known is `UNKNOWN`.

The recurrent ops keep ONNX's inputs, attributes and output layouts. Our nodes cannot have
holes in their input list, so `present` names which ONNX optional inputs follow X, W, R.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from rlx.errors import ShapeError
from rlx.ir.dtype import DType
from rlx.ir.ops.base import Op, OpMixin, expect_dtype, op_axis
from rlx.ir.ops.sources import Input
from rlx.ir.shape import UNKNOWN, Dim, Shape
from rlx.record import dataclass  # dataclasses.dataclass, cheaper to create

if TYPE_CHECKING:
    from rlx.ir.graph import Graph

__all__ = ["Fail", "Composite", "If", "Loop", "Scan", "RnnDirection", "RNN_ACTIVATIONS", "LSTM",
           "QuantizedLSTM", "GRU", "RNN"]


@dataclass(frozen=True)
class Fail(Op):
    """A value that cannot be computed: running it raises `message`.

    It stands for the outputs of a branch that does not fit the graph's shapes (say an If
    branch for another input length): the graph is valid as long as that branch is not
    taken, and fails with a clear error when it is, as ONNX Runtime does.
    """

    message: str
    arity: ClassVar = (0, 0)


# -- subgraph binding ----------------------------------------------------------------------
def _bind(op: Op, graph: Graph, outer: Sequence[Shape], what: str) -> dict[str, Dim]:
    """Check `graph`'s inputs against the `outer` shapes bound to them; map their symbols."""
    inputs = graph.inputs()
    if len(inputs) != len(outer):
        raise ShapeError(f"{op.op_name}: {what} takes {len(inputs)} inputs, "
                         f"the op passes {len(outer)}")
    bindings: dict[str, Dim] = {}
    for node, given in zip(inputs, outer):
        declared = node.tensor_shape
        assert isinstance(node.op, Input)  # Graph.inputs() lists Input nodes
        fits = declared.dtype == given.dtype and declared.rank == given.rank and all(
            not (isinstance(d, int) and isinstance(g, int) and d != g)
            for d, g in zip(declared.dims, given.dims)
        )
        if not fits:
            raise ShapeError(f"{op.op_name}: {what} input {node.op.name!r} is {declared}, "
                             f"the op passes {given}")
        for d, g in zip(declared.dims, given.dims):
            if isinstance(d, str) and d != UNKNOWN:
                bindings.setdefault(d, g)
    return bindings


def _outputs(op: Op, graph: Graph, bindings: dict[str, Dim], what: str) -> list[Shape]:
    """`graph`'s output shapes in outer terms; a symbol not bound by an input is UNKNOWN."""
    shapes = []
    for o in graph.outputs:
        shape = graph.node(o).shape
        if isinstance(shape, tuple):
            raise ShapeError(f"{op.op_name}: {what} output %{o} is tuple-valued")
        shapes.append(shape.with_dims(
            d if isinstance(d, int) else bindings.get(d, UNKNOWN) for d in shape.dims
        ))
    return shapes


def _join(op: Op, a: Shape, b: Shape, what: str, hint: str = "") -> Shape:
    """The shape two values may both have: equal dims kept, differing dims UNKNOWN."""
    if a.dtype != b.dtype or a.rank != b.rank:
        raise ShapeError(f"{op.op_name}: {what} is {a} and {b} (dtype and rank must "
                         f"agree){hint}")
    return a.with_dims(x if x == y else UNKNOWN for x, y in zip(a.dims, b.dims))


def _expect_flag(op: Op, shape: Shape, dtype: DType, what: str) -> None:
    """A single-element value (rank 0, or all dims 1) of `dtype`, like ONNX's cond and M."""
    if shape.dtype != dtype or any(isinstance(d, int) and d != 1 for d in shape.dims):
        raise ShapeError(f"{op.op_name}: {what} must be a one-element {dtype}, got {shape}")


def _per_value(op: Op, values: tuple[int, ...], count: int, name: str) -> tuple[int, ...]:
    """An attribute with one entry per input/output; empty means all zero (ONNX default)."""
    if not values:
        return (0,) * count
    if len(values) != count:
        raise ShapeError(f"{op.op_name}: {name} has {len(values)} entries, expected {count}")
    return values


# -- If / Loop / Scan ----------------------------------------------------------------------
@dataclass(frozen=True)
class If(Op):
    """Inputs `[cond, *captured]`; runs one branch on the captured values.

    Both branches take the captured values as their inputs and produce the same number of
    outputs; the node is tuple-valued. A dim where the branches differ is UNKNOWN; a dtype
    or rank difference is an error (ONNX allows it, but no consumer could rely on it).
    """

    then_branch: Graph
    else_branch: Graph
    arity: ClassVar = (1, None)

    def subgraphs(self):
        return (self.then_branch, self.else_branch)

    def infer(self, inputs):
        cond, *captured = inputs
        _expect_flag(self, cond, DType.BOOL, "cond")
        then = _outputs(self, self.then_branch,
                        _bind(self, self.then_branch, captured, "then_branch"), "then_branch")
        other = _outputs(self, self.else_branch,
                         _bind(self, self.else_branch, captured, "else_branch"), "else_branch")
        if len(then) != len(other):
            raise ShapeError(f"If: then_branch has {len(then)} outputs, "
                             f"else_branch has {len(other)}")
        # ONNX lets branches differ in rank (a model squeezing a batch of 1); rlx's values
        # have one rank, which fixed input sizes give
        hint = "; if that depends on input sizes, fix them (input_shapes=, --input-shapes)"
        return tuple(_join(self, a, b, f"output {i}", hint) for i, (a, b) in
                     enumerate(zip(then, other)))


@dataclass(frozen=True)
class Loop(Op):
    """ONNX Loop. Inputs `[max_trip (i64), cond (bool), *carried, *captured]`.

    The body takes `[iter_num (i64), cond (bool), *carried, *captured]` and returns
    `[cond, *carried_out, *scan_outputs]`. Outputs: the final carried values, then each
    scan output stacked along a new axis 0 (its length, the trip count, is UNKNOWN).
    """

    body: Graph
    n_carried: int
    arity: ClassVar = (2, None)

    def subgraphs(self):
        return (self.body,)

    def infer(self, inputs):
        n = self.n_carried
        if not 0 <= n <= len(inputs) - 2:
            raise ShapeError(f"Loop: n_carried {n} does not fit {len(inputs)} inputs "
                             "[max_trip, cond, *carried, *captured]")
        _expect_flag(self, inputs[0], DType.I64, "max_trip")
        _expect_flag(self, inputs[1], DType.BOOL, "cond")
        body_inputs = self.body.inputs()
        if len(body_inputs) >= 2:
            # iter_num and cond are made by the loop: check them as flags, not against inputs
            _expect_flag(self, body_inputs[0].tensor_shape, DType.I64, "body iter_num")
            _expect_flag(self, body_inputs[1].tensor_shape, DType.BOOL, "body cond")
        given = [node.shape for node in body_inputs[:2]] + list(inputs[2:])
        outs = _outputs(self, self.body, _bind(self, self.body, given, "body"), "body")
        if len(outs) < 1 + n:
            raise ShapeError(f"Loop: body returns {len(outs)} outputs, expected at least "
                             f"{1 + n} [cond, *carried]")
        _expect_flag(self, outs[0], DType.BOOL, "body cond output")
        carried = inputs[2:2 + n]
        final = [_join(self, c, o, f"carried value {k}")
                 for k, (c, o) in enumerate(zip(carried, outs[1:1 + n]))]
        scans = [s.with_dims((UNKNOWN, *s.dims)) for s in outs[1 + n:]]
        return (*final, *scans)


@dataclass(frozen=True)
class Scan(Op):
    """ONNX Scan (opset 9+). Inputs `[*state, *scan_inputs]`.

    The body takes `[*state, *scan_slices]` (one slice of each scan input along its axis)
    and returns `[*state_out, *scan_outputs]`. Outputs: the final state, then the scan
    outputs stacked along their axis. Directions are 0 (forward) or 1 (reverse); empty
    axes/directions mean all 0, as in ONNX.
    """

    body: Graph
    n_state: int
    scan_input_axes: tuple[int, ...] = ()
    scan_input_directions: tuple[int, ...] = ()
    scan_output_axes: tuple[int, ...] = ()
    scan_output_directions: tuple[int, ...] = ()
    arity: ClassVar = (1, None)

    def subgraphs(self):
        return (self.body,)

    def input_axes(self, count: int) -> tuple[int, ...]:
        return _per_value(self, self.scan_input_axes, count, "scan_input_axes")

    def input_directions(self, count: int) -> tuple[int, ...]:
        return self._directions(self.scan_input_directions, count, "scan_input_directions")

    def output_axes(self, count: int) -> tuple[int, ...]:
        return _per_value(self, self.scan_output_axes, count, "scan_output_axes")

    def output_directions(self, count: int) -> tuple[int, ...]:
        return self._directions(self.scan_output_directions, count, "scan_output_directions")

    def _directions(self, values: tuple[int, ...], count: int, name: str) -> tuple[int, ...]:
        values = _per_value(self, values, count, name)
        if any(v not in (0, 1) for v in values):
            raise ShapeError(f"Scan: {name} must be 0 or 1, got {list(values)}")
        return values

    def infer(self, inputs):
        n = self.n_state
        if not 0 <= n < len(inputs):
            raise ShapeError(f"Scan: n_state {n} leaves no scan input among {len(inputs)} inputs")
        state, scanned = inputs[:n], inputs[n:]
        self.input_directions(len(scanned))
        length: Dim | None = None
        slices = []
        for k, (x, axis) in enumerate(zip(scanned, self.input_axes(len(scanned)))):
            if x.rank == 0:
                raise ShapeError(f"Scan: scan input {k} is a scalar, it has no axis to scan")
            a = op_axis(self, axis, x.rank, f"scan input {k}")
            length = self._same_length(length, x.dims[a])
            slices.append(x.with_dims(x.dims[:a] + x.dims[a + 1:]))
        assert length is not None  # n_state < len(inputs): one scan input at least
        outs = _outputs(self, self.body, _bind(self, self.body, [*state, *slices], "body"),
                        "body")
        if len(outs) < n:
            raise ShapeError(f"Scan: body returns {len(outs)} outputs, expected at least {n}")
        final = [_join(self, s, o, f"state {k}") for k, (s, o) in enumerate(zip(state, outs))]
        scan_outs = outs[n:]
        self.output_directions(len(scan_outs))
        stacked = []
        for k, (s, axis) in enumerate(zip(scan_outs, self.output_axes(len(scan_outs)))):
            a = op_axis(self, axis, s.rank + 1, f"scan output {k}")
            stacked.append(s.with_dims((*s.dims[:a], length, *s.dims[a:])))
        return (*final, *stacked)

    @staticmethod
    def _same_length(length: Dim | None, dim: Dim) -> Dim:
        if length is None or length == dim or isinstance(dim, str):
            return dim if length is None else length
        if isinstance(length, str):
            return dim  # a static size is more useful than a symbol
        raise ShapeError(f"Scan: scan inputs have lengths {length} and {dim}")


# -- foreign ops kept whole ----------------------------------------------------------------
def _frozen(value: Any) -> Any:
    """An attribute value as a hashable one: lists (as JSON gives them back) become tuples."""
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


@dataclass(frozen=True)
class Composite(Op):
    """A node of another op set (`domain`, `op_type`, `attributes`) kept whole: `body`
    computes it from the op's inputs in rlx ops (bound positionally, as a Loop body's).

    Why: an engine that has the op (onnxruntime and its `com.microsoft` int8 kernels) gets
    the node back as the model had it, one fused kernel, while the others (numpy, OpenVINO)
    run or inline the body. `slots` gives each input's position among the foreign node's
    inputs (an omitted optional input has none). The body may hold copies of one-element
    constant inputs (scales, zero points), so that its arithmetic is specialised to them as
    the importer's expansion always was; no pass rewrites those values. One output per
    body output; several make the node tuple-valued.
    """

    domain: str
    op_type: str
    attributes: tuple[tuple[str, Any], ...]
    slots: tuple[int, ...]
    body: Graph
    arity: ClassVar = (0, None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes",
                           tuple((str(k), _frozen(v)) for k, v in self.attributes))

    def subgraphs(self):
        return (self.body,)

    def infer(self, inputs):
        if len(self.slots) != len(inputs) or list(self.slots) != sorted(set(self.slots)):
            raise ShapeError(f"Composite {self.domain}.{self.op_type}: slots "
                             f"{list(self.slots)} must rise, one per input ({len(inputs)})")
        what = f"{self.domain}.{self.op_type} body"
        outs = _outputs(self, self.body, _bind(self, self.body, inputs, what), what)
        return outs[0] if len(outs) == 1 else tuple(outs)


# -- recurrences ---------------------------------------------------------------------------
class RnnDirection(enum.Enum):
    FORWARD = "forward"
    REVERSE = "reverse"
    BIDIRECTIONAL = "bidirectional"

    @property
    def count(self) -> int:
        """ONNX's num_directions."""
        return 2 if self is RnnDirection.BIDIRECTIONAL else 1


RNN_ACTIVATIONS = (
    "Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh",
    "HardSigmoid", "Elu", "Softsign", "Softplus",
)
"""The activation names ONNX recurrences accept (matched case-insensitively)."""

_ACTIVATION_KEYS = {name.lower() for name in RNN_ACTIVATIONS}


@dataclass(frozen=True)
class _Recurrent(OpMixin):
    """Attributes and shape rules shared by LSTM, GRU and RNN (ONNX names and meaning).

    `activations` lists `len(default_activations)` names per direction (empty = defaults);
    `activation_alpha`/`_beta` are consumed in order by the activations that take them, as
    onnxruntime does. `clip` bounds every gate's pre-activation. `layout` 1 puts batch
    first in X, Y and the states. Inputs: `[X, W, R, *optional]`, where `present` names
    the optional inputs given, in ONNX order.
    """

    hidden_size: int
    direction: RnnDirection = RnnDirection.FORWARD
    activations: tuple[str, ...] = ()
    activation_alpha: tuple[float, ...] = ()
    activation_beta: tuple[float, ...] = ()
    clip: float | None = None
    layout: int = 0
    present: tuple[str, ...] = ()

    gates: ClassVar[int]
    optional_inputs: ClassVar[tuple[str, ...]]
    default_activations: ClassVar[tuple[str, ...]]
    n_outputs: ClassVar[int]

    def activation_names(self) -> tuple[str, ...]:
        """Lower-case activation names, `len(default_activations)` per direction."""
        per = len(self.default_activations)
        count = per * self.direction.count
        names = tuple(a.lower() for a in self.activations) or \
            tuple(a.lower() for a in self.default_activations) * self.direction.count
        if len(names) == 2 * per and count == per:
            names = names[:per]  # ONNX's RNN default lists two even for one direction
        if len(names) != count:
            raise ShapeError(f"{self.op_name}: expected {count} activations for "
                             f"{self.direction.value}, got {len(names)}")
        unknown = [a for a in names if a not in _ACTIVATION_KEYS]
        if unknown:
            raise ShapeError(f"{self.op_name}: unknown activation(s) {unknown}; "
                             f"expected one of {', '.join(RNN_ACTIVATIONS)}")
        return names

    def _optional(self, values: Sequence[Shape]) -> dict[str, Shape]:
        """The optional inputs among `values` (all inputs) by ONNX name, checking `present`."""
        order = [self.optional_inputs.index(p) if p in self.optional_inputs else -1
                 for p in self.present]
        if -1 in order or order != sorted(set(order)):
            raise ShapeError(f"{self.op_name}: present must list inputs of "
                             f"{list(self.optional_inputs)} once each in that order, "
                             f"got {list(self.present)}")
        if len(values) != 3 + len(self.present):
            raise ShapeError(f"{self.op_name}: {len(values)} inputs, expected "
                             f"{3 + len(self.present)} (X, W, R, {', '.join(self.present)})")
        return dict(zip(self.present, values[3:]))

    def infer(self, inputs):
        self._check_attributes()
        opt = self._optional(inputs)
        x, w, r = inputs[:3]
        lens = opt.pop("sequence_lens", None)
        expect_dtype(self, [x, w, r, *opt.values()], floating=True)
        if x.rank != 3:
            raise ShapeError(f"{self.op_name}: X must have rank 3, got {x}")
        seq, batch = (x.dims[1], x.dims[0]) if self.layout else (x.dims[0], x.dims[1])
        d, h = self.direction.count, self.hidden_size
        gh = self.gates * h
        state = (batch, d, h) if self.layout else (d, batch, h)
        wanted = {"W": (d, gh, x.dims[2]), "R": (d, gh, h), "B": (d, 2 * gh),
                  "initial_h": state, "initial_c": state, "P": (d, 3 * h)}
        for name, shape in [("W", w), ("R", r), *opt.items()]:
            self._expect(name, shape, wanted[name])
        if lens is not None:
            self._expect("sequence_lens", lens, (batch,))
            if not lens.dtype.is_int:
                raise ShapeError(f"{self.op_name}: sequence_lens must be integer, got {lens}")
        y = (batch, seq, d, h) if self.layout else (seq, d, batch, h)
        return (Shape(y, x.dtype), *[Shape(state, x.dtype)] * (self.n_outputs - 1))

    def _check_attributes(self) -> None:
        if self.hidden_size <= 0:
            raise ShapeError(f"{self.op_name}: hidden_size must be positive, "
                             f"got {self.hidden_size}")
        if self.layout not in (0, 1):
            raise ShapeError(f"{self.op_name}: layout must be 0 or 1, got {self.layout}")
        if self.clip is not None and not self.clip > 0:
            raise ShapeError(f"{self.op_name}: clip must be positive, got {self.clip}")
        self.activation_names()

    def _expect(self, name: str, shape: Shape, dims: tuple[Dim, ...]) -> None:
        fits = shape.rank == len(dims) and all(
            a == b or isinstance(a, str) or isinstance(b, str) for a, b in zip(shape.dims, dims)
        )
        if not fits:
            want = ", ".join(map(str, dims))
            raise ShapeError(f"{self.op_name}: {name} must be [{want}], got {shape}")


@dataclass(frozen=True)
class LSTM(_Recurrent, Op):
    """ONNX LSTM (gates i, o, f, c). Outputs `(Y, Y_h, Y_c)`.

    Optional inputs: B, sequence_lens, initial_h, initial_c, P (peepholes i, o, f).
    `input_forget` couples the forget gate to the input gate (f = 1 - i).
    """

    input_forget: bool = False
    arity: ClassVar = (3, 8)
    gates: ClassVar[int] = 4
    optional_inputs: ClassVar[tuple[str, ...]] = ("B", "sequence_lens", "initial_h",
                                                  "initial_c", "P")
    default_activations: ClassVar = ("Sigmoid", "Tanh", "Tanh")
    n_outputs: ClassVar[int] = 3


_QUANTISATION = ("W_scale", "W_zero_point", "R_scale", "R_zero_point")


@dataclass(frozen=True)
class QuantizedLSTM(LSTM):
    """onnxruntime's DynamicQuantizeLSTM: an LSTM whose W and R (ONNX's layout) are 8-bit,
    with per-direction `[D]` or per-column `[D, 4H]` scales and zero points (the last four
    inputs, after LSTM's optional ones). As onnxruntime's kernel does, X (all its steps at
    once) and H (every step) are quantised to uint8 on the fly and multiplied in integers.
    Without peepholes or input_forget (the plain LSTM step)."""

    arity: ClassVar = (7, 12)
    optional_inputs: ClassVar[tuple[str, ...]] = LSTM.optional_inputs + _QUANTISATION

    def infer(self, inputs):
        opt = self._optional(inputs)
        if any(name not in opt for name in _QUANTISATION):
            raise ShapeError(f"{self.op_name}: needs {', '.join(_QUANTISATION)}")
        if "P" in opt or self.input_forget:
            raise ShapeError(f"{self.op_name}: peepholes and input_forget are not supported")
        x, w, r = inputs[:3]
        for name, weight in (("W", w), ("R", r)):
            scale, zero = opt[f"{name}_scale"], opt[f"{name}_zero_point"]
            if weight.dtype not in (DType.U8, DType.I8) or zero.dtype is not weight.dtype:
                raise ShapeError(f"{self.op_name}: {name} and its zero point must be u8 or "
                                 f"i8 alike, got {weight} and {zero}")
            if scale.dtype is not DType.F32 or scale.dims != zero.dims or scale.rank not in (1, 2):
                raise ShapeError(f"{self.op_name}: {name}_scale must be f32 [D] or [D, 4H] "
                                 f"like its zero point, got {scale} and {zero}")
        plain = [p for p in self.present if p not in _QUANTISATION]
        lstm = LSTM(hidden_size=self.hidden_size, direction=self.direction,
                    activations=self.activations, activation_alpha=self.activation_alpha,
                    activation_beta=self.activation_beta, clip=self.clip, layout=self.layout,
                    present=tuple(plain), input_forget=self.input_forget)
        floats = [Shape(w.dims, x.dtype), Shape(r.dims, x.dtype)]
        return lstm.infer([x, *floats, *inputs[3:3 + len(plain)]])


@dataclass(frozen=True)
class GRU(_Recurrent, Op):
    """ONNX GRU (gates z, r, h). Outputs `(Y, Y_h)`.

    `linear_before_reset` applies the reset gate after the recurrent matmul of the h gate.
    """

    linear_before_reset: bool = False
    arity: ClassVar = (3, 6)
    gates: ClassVar[int] = 3
    optional_inputs: ClassVar = ("B", "sequence_lens", "initial_h")
    default_activations: ClassVar = ("Sigmoid", "Tanh")
    n_outputs: ClassVar[int] = 2


@dataclass(frozen=True)
class RNN(_Recurrent, Op):
    """ONNX RNN: `H = f(X W^T + H R^T + Wb + Rb)`. Outputs `(Y, Y_h)`."""

    arity: ClassVar = (3, 6)
    gates: ClassVar[int] = 1
    optional_inputs: ClassVar = ("B", "sequence_lens", "initial_h")
    default_activations: ClassVar = ("Tanh",)
    n_outputs: ClassVar[int] = 2
