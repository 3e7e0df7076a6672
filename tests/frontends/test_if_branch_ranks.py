"""If nodes whose branches differ in rank, imported with symbolic input dims.

PyTorch writes `x.squeeze(-1)` on a dim it cannot see as `If(dim == 1, Squeeze, Identity)`
(silero-vad does). Whether the branches' ranks can be told apart depends on the ops after
the If: rlx keeps the branch they accept and makes the other `Fail`, so sizes that take it
fail in rlx where they fail in onnxruntime. Every size is checked against onnxruntime on
the original model, on the numpy engine and on the graph exported back to ONNX.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from rlx.errors import KernelError, ModelImportError
from rlx.frontends import import_onnx
from rlx.ir import verify
from rlx.onnx import export_onnx
from rlx.passes import specialize
from rlx.runtime import Session

F = TensorProto.FLOAT
CHANNELS = 8
WEIGHT = np.random.default_rng(7).standard_normal((CHANNELS, 4)).astype(np.float32)


def _squeeze_if_one(x: str, out: str) -> list[onnx.NodeProto]:
    """`out = x.squeeze(-1)` as PyTorch exports it when the last dim is not known."""
    axes = numpy_helper.from_array(np.array([-1], np.int64), "axes")
    then = helper.make_graph([helper.make_node("Squeeze", [x, "axes"], ["squeezed"])],
                             "then", [], [helper.make_tensor_value_info("squeezed", F, None)],
                             [axes])
    other = helper.make_graph([helper.make_node("Identity", [x], ["same"])], "else", [],
                              [helper.make_tensor_value_info("same", F, None)])
    return [
        helper.make_node("Shape", [x], ["shape"]),
        helper.make_node("Constant", [], ["last"], value_int=-1),
        helper.make_node("Gather", ["shape", "last"], ["dim"], axis=0),
        helper.make_node("Constant", [], ["one"], value_int=1),
        helper.make_node("Equal", ["dim", "one"], ["is_one"]),
        helper.make_node("If", ["is_one"], [out], then_branch=then, else_branch=other),
    ]


def _model(after: list[onnx.NodeProto], weights: list[onnx.TensorProto],
           output_shape) -> onnx.ModelProto:
    """x [batch, CHANNELS, time] -> squeeze-if-one -> `after` (reads `s`, writes `y`)."""
    graph = helper.make_graph(
        _squeeze_if_one("x", "s") + after, "squeeze_if_one",
        [helper.make_tensor_value_info("x", F, ["batch", CHANNELS, "time"])],
        [helper.make_tensor_value_info("y", F, output_shape)], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def needs_rank_2() -> onnx.ModelProto:
    """Gemm after the If: only the squeezed rank fits (time must be 1)."""
    return _model([helper.make_node("Gemm", ["s", "w"], ["y"])],
                  [numpy_helper.from_array(WEIGHT, "w")], None)


def needs_rank_3() -> onnx.ModelProto:
    """A 1-d Conv after the If: only the unsqueezed rank fits (time must not be 1)."""
    kernel = WEIGHT.T.reshape(4, CHANNELS, 1)
    return _model([helper.make_node("Conv", ["s", "w"], ["y"])],
                  [numpy_helper.from_array(kernel, "w")], None)


def declared_rank_2() -> onnx.ModelProto:
    """The If's value is the graph output: its declared rank decides."""
    return _model([helper.make_node("Relu", ["s"], ["y"])], [], ["batch", CHANNELS])


def _runs(proto: onnx.ModelProto):
    """(onnxruntime on the original, rlx numpy engine, onnxruntime on rlx's export)."""
    graph, bindings = import_onnx(proto)
    verify(graph)
    bound, _ = specialize(graph, bindings)
    exported = export_onnx(bound)
    providers = ["CPUExecutionProvider"]
    return (ort.InferenceSession(proto.SerializeToString(), providers=providers),
            Session().compile(bound),
            ort.InferenceSession(exported.SerializeToString(), providers=providers))


@pytest.mark.parametrize("make,fits,refused", [
    (needs_rank_2, [(1, 1), (3, 1)], (2, 5)),
    (needs_rank_3, [(1, 5), (3, 2)], (2, 1)),
    (declared_rank_2, [(1, 1), (4, 1)], (2, 3)),
])
def test_the_rank_the_rest_of_the_graph_takes_is_kept(make, fits, refused):
    oracle, ours, exported = _runs(make())
    rng = np.random.default_rng(0)
    for batch, time in fits:
        feeds = {"x": rng.standard_normal((batch, CHANNELS, time)).astype(np.float32)}
        (want,) = oracle.run(None, feeds)
        for got in (ours.run(feeds)[0], exported.run(None, feeds)[0]):
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    feeds = {"x": np.ones((refused[0], CHANNELS, refused[1]), np.float32)}
    if make is not declared_rank_2:  # there onnxruntime only warns that the rank is off
        with pytest.raises(Exception):  # noqa: B017  (onnxruntime's own error kinds)
            oracle.run(None, feeds)
    with pytest.raises(KernelError, match="the graph after the If was built for"):
        ours.run(feeds)
    with pytest.raises(Exception, match="out of data bounds"):  # the exported Fail
        exported.run(None, feeds)


def test_ranks_nothing_tells_apart_are_an_import_error():
    """The If's value is the output, declared without a shape: both ranks fit, so the rank
    is the input's to decide and must be fixed by it."""
    proto = _model([helper.make_node("Relu", ["s"], ["y"])], [], None)
    with pytest.raises(ModelImportError, match="ranks differ; if that depends on input"):
        import_onnx(proto)
    graph, _ = import_onnx(proto, input_shapes={"x": (2, CHANNELS, 1)})
    assert graph.node(graph.outputs[0]).tensor_shape.dims == (2, CHANNELS)


def test_ranks_that_both_fail_after_the_if_are_an_import_error():
    """A Gemm whose weight fits neither rank's K (nor rank 3 at all)."""
    wrong = numpy_helper.from_array(np.ones((CHANNELS + 1, 4), np.float32), "w")
    proto = _model([helper.make_node("Gemm", ["s", "w"], ["y"])], [wrong], None)
    with pytest.raises(ModelImportError, match="with either branch's ranks the graph fails"):
        import_onnx(proto)


def test_settling_many_ifs_has_a_budget():
    """Ifs that only the declared outputs tell apart are settled together (2 tries each,
    multiplied): past `MAX_TRIES` the import stops with a typed error, not after 2**n."""
    from rlx.onnx import branch_ranks

    count = 9  # 2**9 tries > MAX_TRIES
    assert 2 ** count > branch_ranks.MAX_TRIES
    nodes, outputs = [], []
    for k in range(count):
        renamed = [_rename(node, f"_{k}") for node in _squeeze_if_one("x", f"y{k}")]
        nodes += renamed
        outputs.append(helper.make_tensor_value_info(f"y{k}", F, ["batch", CHANNELS]))
    graph = helper.make_graph(nodes, "many", [helper.make_tensor_value_info(
        "x", F, ["batch", CHANNELS, "time"])], outputs)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelImportError, match=f"over {branch_ranks.MAX_TRIES} conversions"):
        import_onnx(proto)
    few = helper.make_graph(nodes[:12], "two", graph.input, outputs[:2])
    graph, _ = import_onnx(helper.make_model(few, opset_imports=proto.opset_import))
    assert [graph.node(o).tensor_shape.rank for o in graph.outputs] == [2, 2]


def _rename(node: onnx.NodeProto, suffix: str) -> onnx.NodeProto:
    """`node` with its intermediate values (not x, not the outputs y*) made unique."""
    copy = onnx.NodeProto()
    copy.CopyFrom(node)

    def renamed(name: str) -> str:
        return name if name == "x" or name.startswith("y") else name + suffix

    copy.input[:] = [renamed(n) for n in copy.input]
    copy.output[:] = [renamed(n) for n in copy.output]
    copy.name = (copy.name or copy.op_type) + suffix
    return copy
