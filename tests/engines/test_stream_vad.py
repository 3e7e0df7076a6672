"""A streaming VAD through `Model.stream()`: silero-vad (MODELS.md; `state` [2, ?, 128] in,
`stateN` out, `sr` a scalar) baked with the exact profile, 100 chunks of 36 ms.

Oracles: the feedback loop written by hand, on the same engine (bit for bit), and
onnxruntime's own session on the original .onnx file, held to a tolerance: the baked graph
is not the original node for node (its shape arithmetic is folded), and onnxruntime's own
optimisation levels already disagree in the last bits on this model (1.8e-7 on `stateN`
after one chunk; rlx's onnxruntime engine against the unoptimised original: 3e-8).
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import rlx
from rlx import BakeOptions, BakeProfile, bake, write_rlx
from rlx.onnx import import_onnx
from tests.engines.conftest import ENGINES, require
from tests.real_models import fetch, import_kwargs

pytestmark = pytest.mark.slow

SR = np.array(16000, np.int64)


def chunks(n: int = 100, size: int = 576) -> np.ndarray:
    """Quiet noise with a louder burst (a 140 Hz tone and its harmonics) in the middle."""
    rng = np.random.default_rng(7)
    t = np.arange(n * size) / 16000
    audio = rng.standard_normal(n * size) * 0.01
    burst = (t > 1.0) & (t < 2.5)
    audio[burst] += sum(np.sin(2 * np.pi * 140 * k * t[burst]) / k for k in range(1, 6)) * 0.3
    return audio.astype(np.float32).reshape(n, 1, size)


def hand_loop(run, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """What callers write: feed `stateN` back as `state`. (every output, the last state)"""
    state, outputs = np.zeros((2, 1, 128), np.float32), []
    for x in xs:
        out, state = run({"input": x, "state": state, "sr": SR})
        outputs.append(out)
    return np.array(outputs), state


def onnxruntime_loop(level: ort.GraphOptimizationLevel, xs: np.ndarray):
    options = ort.SessionOptions()
    options.graph_optimization_level = level
    session = ort.InferenceSession(str(fetch("silero-vad")), options,
                                   providers=["CPUExecutionProvider"])
    return hand_loop(lambda feeds: session.run(None, feeds), xs)


@pytest.fixture(scope="module")
def baked(tmp_path_factory):
    path = fetch("silero-vad")
    graph, bindings = import_onnx(path, **import_kwargs(path))
    file, _ = bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))
    out = tmp_path_factory.mktemp("vad") / "silero-vad.rlx"
    write_rlx(out, file)
    return out


def streamed(model: rlx.Model, xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    stream = model.stream()
    assert stream.pairs == {"stateN": "state"}
    return np.array([stream.run({"input": x, "sr": SR})[0] for x in xs]), stream.state["state"]


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    assert np.max(np.abs(got - want)) <= 1e-4 * max(1.0, float(np.max(np.abs(want))))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_stream_is_the_hand_loop_on_every_engine(baked, engine):
    require(engine)
    xs = chunks()
    model = rlx.load(baked, engine=engine)
    outputs, state = streamed(model, xs)
    same_engine = hand_loop(lambda feeds: model.run(feeds), xs)
    np.testing.assert_array_equal(outputs, same_engine[0])
    np.testing.assert_array_equal(state, same_engine[1])
    reference = onnxruntime_loop(ort.GraphOptimizationLevel.ORT_ENABLE_ALL, xs)
    _close(outputs, reference[0])
    _close(state, reference[1])


def test_the_state_carries_between_chunks(baked):
    """The state fed back changes the answers: a stream is not a run of fresh calls."""
    xs = chunks()
    model = rlx.load(baked, engine="onnxruntime")
    outputs = streamed(model, xs)[0].ravel()
    fresh = np.array([model.run({"input": x, "state": np.zeros((2, 1, 128), np.float32),
                                 "sr": SR})[0] for x in xs]).ravel()
    assert np.max(np.abs(outputs - fresh)) > 0.1


def test_a_whole_sequence_at_once(baked):
    """`run_sequence` steps `input` along its first axis, feeds `sr` at every step, and
    stacks the outputs: the stream's own loop, bit for bit."""
    xs = chunks()
    model = rlx.load(baked, engine="onnxruntime")
    (outputs,) = model.stream().run_sequence({"input": xs, "sr": SR})
    assert outputs.shape == (100, 1, 1)
    np.testing.assert_array_equal(outputs, streamed(model, xs)[0])
