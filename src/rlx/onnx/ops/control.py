"""Control flow (If, Loop, Scan) and the recurrences (LSTM, GRU, RNN).

Subgraphs become child graphs whose outer reads are explicit captured inputs (see
`rlx.onnx.scope.Subgraph`). Loop-carried and Scan state values may change shape
from one iteration to the next; a body is converted with the initial shapes first and
again with the dims that changed made unknown.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from rlx.errors import ModelImportError
from rlx.ir import (
    GRU,
    LSTM,
    RNN,
    DType,
    Fail,
    Graph,
    If,
    Loop,
    Reshape,
    RnnDirection,
    Scan,
    Shape,
)
from rlx.ir.shape import UNKNOWN
from rlx.onnx.branch_ranks import BRANCHES, BranchRankError
from rlx.onnx.node import NodeContext
from rlx.onnx.registry import converter
from rlx.onnx.scope import Subgraph

__all__ = ["if_", "loop", "scan", "lstm", "gru", "rnn", "optional_has_element"]

_INT64_MAX = np.iinfo(np.int64).max


@converter("If")
def if_(n: NodeContext):
    branches = n.attr("then_branch"), n.attr("else_branch")
    known = n.static(0)
    if known is not None and known.size == 1:
        taken = branches[0] if bool(known.reshape(())) else branches[1]
        if not _defines(taken) & n.s.visible():
            # a condition known at import: the taken branch, inline
            n.s.importer.convert_graph_body(n.s, taken)
            return [n.s.get(o.name) for o in taken.output]
    free = list(dict.fromkeys(v for b in branches for v in n.s.importer.free_variables(b)))
    then, other = _keep_one_rank(n, *_branches(n, branches, free))
    node = n.s.emit(If(then.graph, other.graph), n.input(0), *then.captured)
    return n.s.parts(node)


def _branches(n: NodeContext, branches, free: list[str]) -> tuple[Subgraph, Subgraph]:
    """Both branches converted; a branch that does not fit the known shapes (it is for other
    inputs, e.g. another sample rate) becomes a branch of `Fail` nodes, so the model runs
    as long as it is not taken, as in ONNX Runtime. Both failing is an import error."""
    converted: list[Subgraph | None] = []
    errors: list[ModelImportError] = []
    for branch, which in zip(branches, BRANCHES):
        try:
            converted.append(Subgraph.convert(n.s, branch, [], f"{n.label} {which}", free=free))
        except BranchRankError:
            raise  # not this branch's failure: settled around the If (see branch_ranks)
        except ModelImportError as err:
            converted.append(None)
            errors.append(err)
    if len(errors) == 2:
        raise errors[0]
    if errors:
        good = next(c for c in converted if c is not None)
        failing = _failing_like(n, good, f"this branch of {n.label} does not fit the "
                                         f"graph's shapes: {errors[0]}")
        converted = [c if c is not None else failing for c in converted]
    then, other = converted
    assert then is not None and other is not None  # a failed branch was replaced above
    return then, other


def _keep_one_rank(n: NodeContext, then: Subgraph, other: Subgraph
                   ) -> tuple[Subgraph, Subgraph]:
    """The branches, with one rank per output: where they differ beyond a one-element value
    (see `_align_scalars`), the branch `branch_ranks` keeps, the other made `Fail`."""
    _align_scalars(then.graph, other.graph)
    pairs = zip(then.output_shapes(), other.output_shapes())
    differ = next(((k, a, b) for k, (a, b) in enumerate(pairs) if a.rank != b.rank), None)
    if differ is None:
        return then, other
    k, a, b = differ
    what = f"{n.label}: output {k} is {a} in the then branch and {b} in the else branch"
    kept = n.s.importer.branch_ranks.kept.get(n.label)
    if kept is None:
        raise BranchRankError(n.label, f"{what} (ranks differ; if that depends on input "
                                       "sizes, fix them: input_shapes=, --input-shapes)")
    dropped = BRANCHES[1 - kept]
    failing = _failing_like(n, (then, other)[kept], (
        f"{what}; the {dropped} branch was taken, but the graph after the If was built for "
        f"the {BRANCHES[kept]} branch's ranks, the only ones the rest of the model accepts"))
    return (then, failing) if kept == 0 else (failing, other)


def _failing_like(n: NodeContext, template: Subgraph, message: str) -> Subgraph:
    """A subgraph with `template`'s inputs whose every output is a `Fail` (a misfit of the
    import, see `branch_ranks`)."""
    n.s.importer.branch_ranks.misfits += 1
    graph = Graph(f"{template.graph.name}.unreachable")
    for node in template.graph.inputs():
        graph.input(node.source_name, node.tensor_shape)
    graph.set_outputs([graph.add_node(Fail(message), (), template.graph.node(o).shape)
                       for o in template.graph.outputs])
    return Subgraph(graph, template.captured, template.capture_inputs)


def _align_scalars(a: Graph, b: Graph) -> None:
    """Give one-element outputs the branches return with different ranks (ONNX allows
    [] in one branch and [1] in the other) the larger rank in both."""
    for k, (x, y) in enumerate(zip(a.outputs, b.outputs)):
        sx, sy = a.node(x).tensor_shape, b.node(y).tensor_shape
        if sx.rank == sy.rank or any(d != 1 for d in (*sx.dims, *sy.dims)):
            continue
        low, out = (a, x) if sx.rank < sy.rank else (b, y)
        ones = (1,) * max(sx.rank, sy.rank)
        outputs = list(low.outputs)
        outputs[k] = low.add_node(Reshape(ones), (out,))
        low.set_outputs(outputs)


def _defines(graph) -> set[str]:
    """Names a graph defines (its initializers and node outputs)."""
    names = {t.name for t in graph.initializer}
    return names | {o for node in graph.node for o in node.output if o}


def _declared_flag(value, dtype: DType) -> Shape:
    """iter_num / cond of a Loop body: the rank it declares (0 when it declares none)."""
    tensor = value.type.tensor_type
    rank = len(tensor.shape.dim) if tensor.HasField("shape") else 0
    return Shape((1,) * rank, dtype)


def _until_stable(convert: Callable[[list[Shape]], Subgraph], shapes: list[Shape],
                  carried: slice, produced: Callable[[Subgraph], list[Shape]]) -> Subgraph:
    """Convert a body; while a carried value comes out with other dims than it went in
    with, make those dims unknown and convert again. Dims only ever widen to UNKNOWN, so
    this ends (a value that changes rank or dtype is refused by the op itself)."""
    while True:
        body = convert(shapes)
        wider = list(shapes)
        for k, out in zip(range(carried.start, carried.stop), produced(body)):
            if out.dtype == shapes[k].dtype and out.rank == shapes[k].rank:
                wider[k] = out.with_dims(a if a == b else UNKNOWN
                                         for a, b in zip(shapes[k].dims, out.dims))
        if wider == shapes:
            return body
        shapes = wider


@converter("Loop")
def loop(n: NodeContext):
    s = n.s
    body_proto = n.attr("body")
    max_trip = n.input(0) if n.has(0) else s.scalar(_INT64_MAX, DType.I64)
    cond = n.input(1) if n.has(1) else s.scalar(True, DType.BOOL)
    carried = [n.input(i) for i in range(2, len(n.inputs))]
    count = len(carried)
    if len(body_proto.input) != 2 + count:
        raise n.fail(f"body takes {len(body_proto.input)} inputs, expected {2 + count}")
    shapes = [_declared_flag(body_proto.input[0], DType.I64),
              _declared_flag(body_proto.input[1], DType.BOOL), *(s.shape(c) for c in carried)]
    body = _until_stable(
        lambda sh: Subgraph.convert(s, body_proto, sh, f"{n.label} body"), shapes,
        slice(2, 2 + count), lambda b: b.output_shapes()[1:1 + count])
    node = s.emit(Loop(body.graph, count), max_trip, cond, *carried, *body.captured)
    return s.parts(node)


@converter("Scan")
def scan(n: NodeContext):
    if n.opset < 9:
        raise n.fail("Scan before opset 9 (with a batch axis) is not supported")
    s = n.s
    body_proto = n.attr("body")
    m = n.attr("num_scan_inputs")
    values = n.all_inputs()
    state, scanned = values[:len(values) - m], values[len(values) - m:]
    count = len(state)
    in_axes = tuple(n.attr("scan_input_axes") or (0,) * m)
    shapes = [s.shape(v) for v in state]
    for x, axis in zip(scanned, in_axes):
        dims = list(s.shape(x).dims)
        del dims[axis % len(dims)]
        shapes.append(s.shape(x).with_dims(dims))

    def convert(sh: list[Shape]) -> Subgraph:
        # captured values ride along as extra state the body hands back unchanged
        body = Subgraph.convert(s, body_proto, sh, f"{n.label} body", capture_at=count)
        outs = list(body.graph.outputs)
        body.graph.set_outputs(outs[:count] + body.capture_inputs + outs[count:])
        return body

    body = _until_stable(convert, shapes, slice(0, count),
                         lambda b: b.output_shapes()[:count])
    extra = len(body.captured)
    op = Scan(body.graph, count + extra, in_axes,
              tuple(n.attr("scan_input_directions") or ()),
              tuple(n.attr("scan_output_axes") or ()),
              tuple(n.attr("scan_output_directions") or ()))
    node = s.emit(op, *state, *body.captured, *scanned)
    parts = s.parts(node)
    return parts[:count] + parts[count + extra:]


# -- recurrences -------------------------------------------------------------------------------
def recurrent(n: NodeContext, cls, optional: Sequence[str], extra: dict,
               given: dict[int, int] | None = None) -> list[int]:
    """The recurrence of node `n`; `given` replaces inputs by position (a quantised
    LSTM's dequantised weights)."""
    s = n.s
    given = given or {}

    def get(i: int) -> int:
        return given[i] if i in given else n.input(i)

    present = tuple(name for i, name in enumerate(optional, start=3) if n.has(i))
    inputs = [get(i) for i in range(3)] + \
        [get(i) for i, _ in enumerate(optional, start=3) if n.has(i)]
    hidden = n.attr("hidden_size")
    if hidden is None:
        hidden = s.shape(inputs[2]).dims[-1]
        if not isinstance(hidden, int):
            raise n.fail("hidden_size is not given and R's last dim is not static")
    direction = n.enum_attr(RnnDirection, "direction", "forward")
    clip = n.attr("clip")
    op = cls(hidden_size=hidden, direction=direction,
             activations=tuple(n.attr("activations") or ()),
             activation_alpha=tuple(float(a) for a in n.attr("activation_alpha") or ()),
             activation_beta=tuple(float(b) for b in n.attr("activation_beta") or ()),
             clip=None if clip is None else float(clip), layout=n.attr("layout", 0),
             present=present, **extra)
    return s.parts(s.emit(op, *inputs))


@converter("LSTM")
def lstm(n: NodeContext):
    return recurrent_lstm(n)


def recurrent_lstm(n: NodeContext, given: dict[int, int] | None = None) -> list[int]:
    """An LSTM node's IR; `given` replaces inputs by position (quantised weights)."""
    return recurrent(n, LSTM, LSTM.optional_inputs,
                      {"input_forget": bool(n.attr("input_forget", 0))}, given)


@converter("GRU")
def gru(n: NodeContext):
    return recurrent(n, GRU, GRU.optional_inputs,
                      {"linear_before_reset": bool(n.attr("linear_before_reset", 0))})


@converter("RNN")
def rnn(n: NodeContext):
    return recurrent(n, RNN, RNN.optional_inputs, {})


@converter("OptionalHasElement")
def optional_has_element(n: NodeContext) -> int:
    """On plain tensors: true when the input is given."""
    return n.s.scalar(n.has(0), DType.BOOL)
