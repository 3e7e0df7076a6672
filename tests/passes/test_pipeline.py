"""run_pipeline: named steps in order, counts summed by name, failures name the pass."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from rlx.baking import BakeOptions, BakeProfile, bake
from rlx.errors import BindingError, ShapeError, UnsupportedOpError
from rlx.ir import Activation, BinaryOp, DType, Graph, Shape, Unary
from rlx.passes import (
    Step,
    eliminate_dead_code,
    fold_constants,
    run_pipeline,
    verifying_passes,
)


def _graph() -> Graph:
    """x + (2 * 3), with a dead relu of the constant beside it."""
    g = Graph("g")
    x = g.input("x", Shape([4]))
    two = g.constant(np.full(4, 2, np.float32))
    six = g.binary(BinaryOp.MUL, two, g.constant(np.full(4, 3, np.float32)))
    g.unary(Activation.RELU, six)  # dead
    g.set_outputs([g.binary(BinaryOp.ADD, x, six)])
    return g


def _evaluate(g: Graph, x: np.ndarray) -> np.ndarray:
    from rlx.runtime import Session

    return Session("cpu").compile(g).run({"x": x})[0]


def test_steps_run_in_order_and_counts_add_up_by_name():
    g = _graph()
    steps = [Step("eliminate_dead_code", eliminate_dead_code),
             Step("fold_constants", fold_constants),
             Step("eliminate_dead_code", eliminate_dead_code)]
    out, counts, _ = run_pipeline(steps, g, verify=True)
    separately = [eliminate_dead_code(g)]
    separately.append(fold_constants(separately[-1][0]))
    separately.append(eliminate_dead_code(separately[-1][0]))
    assert counts["fold_constants"] == separately[1][1] > 0
    assert counts["eliminate_dead_code"] == separately[0][1] + separately[2][1] > 0
    assert len(out) == len(separately[-1][0])
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(_evaluate(out, x), x + 6)


def test_an_unchanged_graph_is_the_same_object_and_counts_zero():
    g = _graph()
    out, counts, _ = run_pipeline([Step("noop", lambda graph: (graph, 0))], g)
    assert out is g and counts["noop"] == 0


def test_outcomes_are_kept_by_step_name_and_count_as_their_count():
    @dataclass(frozen=True)
    class Noted:
        count: int
        note: str

    steps = [Step("note", lambda graph: (graph, Noted(2, "first"))),
             Step("plain", lambda graph: (graph, 1)),
             Step("note", lambda graph: (graph, Noted(3, "second")))]
    run = run_pipeline(steps, _graph())
    assert run.counts == {"note": 5, "plain": 1}
    assert [o.note for o in run.outcomes["note"]] == ["first", "second"]  # type: ignore
    assert "plain" not in run.outcomes


def test_a_failing_pass_is_named_with_the_one_before_and_keeps_its_type():
    def refuse(graph: Graph) -> tuple[Graph, int]:
        raise BindingError("param 'w' has 5 values, expected 4")

    steps = [Step("fold_constants", fold_constants), Step("bind_weights", refuse)]
    with pytest.raises(BindingError, match=r"^pass bind_weights failed \(after fold_constants\): "
                                           r"param 'w' has 5 values, expected 4$") as err:
        run_pipeline(steps, _graph())
    assert isinstance(err.value.__cause__, BindingError)
    with pytest.raises(BindingError, match=r"^pass bind_weights failed \(the first pass\)"):
        run_pipeline(steps[1:], _graph())


def test_errors_with_their_own_constructor_keep_their_attributes():
    def unsupported(graph: Graph) -> tuple[Graph, int]:
        raise UnsupportedOpError(["Foo", "Bar"], "model.onnx")

    with pytest.raises(UnsupportedOpError, match="^pass p failed") as err:
        run_pipeline([Step("p", unsupported)], _graph())
    assert err.value.op_types == ["Bar", "Foo"]


def _break_shapes(graph: Graph) -> tuple[Graph, int]:
    bad = Graph("bad")
    x = bad.input("x", Shape([4]))
    # declared [3] where inference gives [4]: verify refuses it
    bad.set_outputs([bad.add_node(Unary(Activation.RELU), [x], Shape([3], DType.F32))])
    return bad, 1


def test_verify_names_the_pass_that_left_a_malformed_graph():
    steps = [Step("fold_constants", fold_constants), Step("break_shapes", _break_shapes)]
    with pytest.raises(ShapeError, match=r"^pass break_shapes failed \(after fold_constants\): "
                                         r"it left an invalid graph: "):
        run_pipeline(steps, _graph(), verify=True)
    out, _, _ = run_pipeline(steps, _graph(), verify=False)  # unchecked, it goes through
    assert out.name == "bad"


def test_verifying_passes_sets_the_default_for_its_block_only():
    steps = [Step("break_shapes", _break_shapes)]
    with verifying_passes(False):  # the suite's fixture has it on: off here
        assert run_pipeline(steps, _graph())[0].name == "bad"
        with verifying_passes(), pytest.raises(ShapeError, match="invalid graph"):
            run_pipeline(steps, _graph())
        assert run_pipeline(steps, _graph())[0].name == "bad"  # back off after the block
    with pytest.raises(ShapeError, match="invalid graph"):  # the fixture's: on
        run_pipeline(steps, _graph())


def test_the_bake_names_the_pass_a_bad_binding_fails_in():
    g = Graph("mul")
    x = g.input("x", Shape([4]))
    g.set_outputs([g.binary(BinaryOp.MUL, x, g.param("w", Shape([4])))])
    with pytest.raises(BindingError, match=r"^pass specialize failed \(the first pass\): .*'w'"):
        bake(g, {"w": np.ones(5, np.float32)})


@pytest.mark.parametrize("profile", list(BakeProfile))
def test_bake_steps_follow_the_options(profile):
    from rlx.baking.pipeline import bake_steps
    from rlx.weights import WeightBundle

    opts = BakeOptions.from_profile(profile)
    names = [s.name for s in bake_steps(opts, WeightBundle(tensors={}))]
    assert names[:2] == ["specialize", "bind_packed"]
    assert ("pack_ternary" in names) is opts.ternary
    # Q8_0 (and f16) are chosen by the weight-encoding stage, last, on the finished graph
    assert ("encode_weights" in names) is (opts.ternary or opts.quant)
    assert ("fold_constants" in names) is opts.constant_folding
    assert ("batch_step_products" in names) is opts.algebraic_simplify
    assert ("dedupe_identical_constants" in names) is opts.dedupe_constants
    if opts.ternary:
        assert names.index("pack_ternary") < names.index("encode_weights")
