"""`Model.stream()`: state outputs fed back as the next call's inputs, on every engine.

A small recurrent cell (h' = tanh(x * a + h * b), y = 2 h') checks the pairing rules, the
initial state, `reset()` and thread confinement against a float64 loop written out by hand;
tests/engines/test_stream_vad.py runs the real silero-vad model against onnxruntime."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import rlx
from rlx.artifact import RlxFile, write_rlx
from rlx.errors import InputError, StreamThreadError
from rlx.ir import DType, Graph, Shape
from rlx.ir.ops.elementwise import Activation, Binary, BinaryOp, Unary
from tests.engines.conftest import ENGINES, require

A, B = np.float32(0.7), np.float32(0.9)
RNG = np.random.default_rng(11)
XS = RNG.standard_normal((12, 1, 4)).astype(np.float32)


def write_cell(path, state_in="h0", state_out="hn", state_dims=(1, 4), out_dims=None):
    """x [1, 4], state_in -> (y, state_out): the state's next value by name."""
    g = Graph("cell")
    x = g.input("x", Shape((1, 4), DType.F32))
    h = g.input(state_in, Shape(state_dims, DType.F32))
    mixed = g.binary(BinaryOp.ADD, g.binary(BinaryOp.MUL, x, g.constant(np.full(4, A))),
                     g.binary(BinaryOp.MUL, h, g.constant(np.full(4, B))))
    nxt = g.add_node(Unary(Activation.TANH), [mixed], Shape(out_dims or (1, 4), DType.F32),
                     name=state_out)
    y = g.add_node(Binary(BinaryOp.MUL), [nxt, g.constant(np.float32(2))],
                   Shape(out_dims or (1, 4), DType.F32), name="y")
    g.set_outputs([y, nxt])
    write_rlx(path, RlxFile.from_baked(g, []))
    return path


def by_hand(xs, h):
    """The float64 loop a caller writes: (every y, the last state)."""
    ys = []
    for x in xs:
        h = np.tanh(x.astype(np.float64) * A + h * B)
        ys.append(2 * h)
    return np.array(ys), h


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("state_in", "state_out"), [
    ("h0", "hn"), ("state", "stateN"), ("h_in", "h_out"), ("prev_c", "next_c"), ("c", "c_new")])
def test_pairs_by_name_and_runs_like_the_hand_loop(engine, tmp_path, state_in, state_out):
    require(engine)
    model = rlx.load(write_cell(tmp_path / "cell.rlx", state_in, state_out), engine=engine)
    stream = model.stream()
    assert stream.pairs == {state_out: state_in}
    got = np.array([stream.run({"x": x})[0] for x in XS])
    want, last = by_hand(XS, np.zeros((1, 4)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stream.state[state_in], last, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("engine", ENGINES)
def test_initial_state_reset_and_bare_arrays(engine, tmp_path):
    require(engine)
    model = rlx.load(write_cell(tmp_path / "cell.rlx"), engine=engine)
    start = RNG.standard_normal((1, 4)).astype(np.float32)
    stream = model.stream({"hn": "h0"}, initial={"h0": start})
    first = [stream(x)[0] for x in XS]  # one input is left: a bare array feeds it
    np.testing.assert_allclose(np.array(first), by_hand(XS, start)[0], rtol=1e-5, atol=1e-6)
    stream.reset()
    assert stream.state["h0"] is start
    again = [stream(None, {"x": x})[0] for x in XS]  # onnxruntime's order
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    stream.reset({"h0": np.zeros((1, 4), np.float32)})
    np.testing.assert_allclose(stream(XS[0], ["hn", "y"])[1], by_hand(XS[:1], 0)[0][0],
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("engine", ENGINES)
def test_the_state_is_the_engine_s_own_array(engine, tmp_path):
    """No copy between calls: the next call feeds the very array the last one returned."""
    require(engine)
    stream = rlx.load(write_cell(tmp_path / "cell.rlx"), engine=engine).stream()
    for x in XS[:3]:
        y, hn = stream.run({"x": x}, ["y", "hn"])
        assert stream.state["h0"] is hn


@pytest.mark.parametrize("engine", ENGINES)
def test_one_stream_per_thread_on_a_shared_model(engine, tmp_path):
    require(engine)
    model = rlx.load(write_cell(tmp_path / "cell.rlx"), engine=engine)
    mine = model.stream()
    caught: list[BaseException] = []
    results: dict[int, np.ndarray] = {}

    def own(k: int) -> None:
        try:
            mine.run({"x": XS[0]})
        except StreamThreadError as error:
            caught.append(error)
        stream = model.stream(initial={"h0": np.full((1, 4), k / 10, np.float32)})
        results[k] = np.array([stream.run({"x": x})[0] for x in XS])

    threads = [threading.Thread(target=own, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(caught) == 4 and "open one per thread: stream = model.stream()" in str(caught[0])
    for k, got in results.items():
        np.testing.assert_allclose(got, by_hand(XS, np.full((1, 4), k / 10))[0],
                                   rtol=1e-5, atol=1e-6)
    mine.reset()  # its own thread may


MISUSES = [
    # (cell names, stream arguments, one-line message)
    (("h", "y2"), {}, "no output of 'cell' is named as the next value of an input (like "
                      "'stateN' for 'state' or 'hn' for 'h0'): name the pairs, "
                      "model.stream({'output': 'input'})"),
    (("h0", "hn"), {"state_map": {"nope": "h0"}}, "state pair 'nope' -> 'h0': no output 'nope'"),
    (("h0", "hn"), {"state_map": {"hn": "nope"}}, "state pair 'hn' -> 'nope': no input 'nope'"),
    (("h0", "hn"), {"initial": {"x": 1}}, "initial names 'x', not a state input"),
    (("h0", "hn"), {"initial": {"h0": np.zeros((1, 4))}},
     "input 'h0': expected f32[1, 4], got f64[1, 4] (the dtype must match)"),
]


@pytest.mark.parametrize(("names", "arguments", "message"), MISUSES)
def test_misuse_is_one_line_and_shows_the_right_call(tmp_path, names, arguments, message):
    model = rlx.load(write_cell(tmp_path / "cell.rlx", *names), engine="numpy")
    with pytest.raises(InputError) as error:
        model.stream(**arguments)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_a_state_pair_agrees_in_shape_and_feeds_one_input(tmp_path):
    flat = rlx.load(write_cell(tmp_path / "flat.rlx", state_dims=(4,)), engine="numpy")
    with pytest.raises(InputError, match="no output of 'cell' is named"):
        flat.stream()  # h0 / hn by name, but [4] is not [1, 4]
    with pytest.raises(InputError) as error:
        flat.stream({"hn": "h0"})
    assert str(error.value) == "state pair 'hn' -> 'h0': output is float32[1, 4], input is " \
                               "float32[4]"
    model = rlx.load(write_cell(tmp_path / "cell.rlx"), engine="numpy")
    with pytest.raises(InputError, match=r"state input\(s\) \['h0'\] fed from more than one"):
        model.stream({"y": "h0", "hn": "h0"})
    stream = model.stream()
    with pytest.raises(InputError) as error:
        stream.run({"x": XS[0], "h0": XS[0]})
    assert str(error.value) == ("'h0': the stream feeds its state itself; leave it out "
                                "(stream.run({'x': ...})) or start from it: stream.reset({...})")


def test_a_symbolic_state_takes_its_size_from_the_paired_output_or_asks(tmp_path):
    sized = rlx.load(write_cell(tmp_path / "a.rlx", state_dims=(1, "n")), engine="numpy")
    assert sized.stream().state["h0"].shape == (1, 4)
    open_ = rlx.load(write_cell(tmp_path / "b.rlx", state_dims=("b", 4), out_dims=("b", 4)),
                     engine="numpy")
    with pytest.raises(InputError, match=r"start it, model.stream\(initial=\{'h0': array\}\)"):
        open_.stream()


def test_run_sequence_steps_the_inputs_given_with_a_step_axis(tmp_path):
    model = rlx.load(write_cell(tmp_path / "cell.rlx"), engine="numpy")
    ys, hns = model.stream().run_sequence({"x": XS}, ["y", "hn"])
    want, last = by_hand(XS, np.zeros((1, 4)))
    np.testing.assert_allclose(ys, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hns[-1], last, rtol=1e-5, atol=1e-6)
    with pytest.raises(InputError, match=r"nothing to step over: .*\{'x': 2, 'h0': 2\}"):
        model.stream().run_sequence({"x": XS[0]})
    with pytest.raises(InputError, match="disagree on the number of steps"):
        model.stream().run_sequence({"x": XS[:0]})
