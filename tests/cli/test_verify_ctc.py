"""`rlx-bake verify` on CTC-like outputs: which outputs are per-step class scores (a rule over
the ONNX graph), and the share of samples whose greedy decodings agree, checked against a
float64 decoder written here and onnxruntime's outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from rlx.cli.ctc import decoded_agreement, greedy_decode
from rlx.cli.ui import CliError
from rlx.onnx.step_scores import StepScores, step_scores
from tests.cli.conftest import assert_error

STEPS, CLASSES, FEATURES = 12, 6, 8


def reference_decode(path_scores: np.ndarray, blank: int) -> list[int]:
    """Greedy CTC decoding of one sample's [T, C] scores, step by step in float64."""
    labels, previous = [], None
    for step in np.asarray(path_scores, dtype=np.float64):
        best = int(np.argmax(step))
        if best != previous and best != blank:
            labels.append(best)
        previous = best
    return labels


def reference_agreement(ours: np.ndarray, ref: np.ndarray, blank: int) -> int:
    """Samples of [T, N, C] scores whose decodings are identical."""
    return sum(reference_decode(ours[:, i], blank) == reference_decode(ref[:, i], blank)
               for i in range(ref.shape[1]))


def test_greedy_decode_matches_the_reference_decoder():
    rng = np.random.default_rng(1)
    scores = rng.standard_normal((9, 30, 5))  # few classes: repeats and blanks are common
    for blank in (0, 3):
        got = greedy_decode(scores, blank)
        assert [list(g) for g in got] == [reference_decode(s, blank) for s in scores]


def test_agreement_counts_the_samples_whose_decodings_differ():
    """Samples 1 and 4 get a new label at one step; sample 2 only moves where a repeat
    ends (the same decoding); the rest are perturbed below every step's margin."""
    rng = np.random.default_rng(2)
    ref = rng.standard_normal((STEPS, 6, CLASSES))
    ours = ref + 1e-9 * rng.standard_normal(ref.shape)
    best = ref.argmax(-1)
    for sample in (1, 4):
        step = 5
        label = (best[step, sample] + 1) % CLASSES
        label = label if label not in (best[step - 1, sample], best[step + 1, sample]) \
            else (label + 1) % CLASSES
        ours[step, sample, label] = ref[step, sample].max() + 1
    ref[3:5, 2] = ref[3:5, 2] - 10  # steps 3, 4: class 1, a repeat ...
    ref[3:5, 2, 1] = 10
    ours[3:5, 2] = ref[3:5, 2]
    ours[4, 2, 1], ours[4, 2, 0] = -10, 10  # ... where ours has the blank at step 4
    want = reference_agreement(ours, ref, blank=0)
    feeds = {"x": np.zeros((6, 1))}
    got = decoded_agreement("y", ours, ref, StepScores(2, 0, "Softmax"), feeds, blank=0)
    assert want == 4 and got == {"layout": "T,N,C", "time_axis_from": "declared dims",
                                 "blank": 0, "samples": 6, "identical": want, "agree": 4 / 6}


def test_the_time_axis_from_the_run_or_assumed_batch_first():
    rng = np.random.default_rng(3)
    ref = rng.standard_normal((2, STEPS, CLASSES))
    ours = ref.copy()
    ours[1, 3] = -ours[1, 3]
    unnamed = StepScores(2, None, "MatMul")
    by_run = decoded_agreement("y", ours, ref, unnamed, {"x": np.zeros((2, 3))}, 0)
    want = reference_agreement(ours.transpose(1, 0, 2), ref.transpose(1, 0, 2), 0)
    assert by_run["layout"] == "N,T,C" and by_run["time_axis_from"] == "input batch size"
    assert by_run["identical"] == want < 2
    for feeds in ({"x": np.zeros(5)}, {"x": np.zeros(2), "z": np.zeros(STEPS)}):
        assumed = decoded_agreement("y", ours, ref, unnamed, feeds, 0)
        assert assumed["layout"] == "N,T,C"
        assert assumed["time_axis_from"] == "assumed batch first"
    steps_first = decoded_agreement("y", ours, ref, unnamed, {"x": np.zeros((STEPS, 1))}, 0)
    assert steps_first["layout"] == "T,N,C" and steps_first["samples"] == STEPS


def test_a_blank_outside_the_classes_is_refused():
    ref = np.zeros((3, 1, CLASSES))
    with pytest.raises(CliError, match=r"--ctc-blank 6 is not a class of output 'y' \(6 "):
        decoded_agreement("y", ref, ref, StepScores(2, 0, "Softmax"), {}, blank=CLASSES)


def crnn(head: str = "LogSoftmax", weight_noise: float = 0.0, batch: str = "batch",
         perm: tuple[int, ...] = (2, 0, 1), axis: int = 2) -> onnx.ModelProto:
    """A CRNN-like recogniser: a Conv over the image's height gives one feature vector per
    column (time step), a linear layer scores the classes, LogSoftmax normalises them;
    `head` "Add" stops at the linear layer's bias. Output [T, batch, C] (perm (2, 0, 1))."""
    rng = np.random.default_rng(7)
    conv = rng.standard_normal((FEATURES, 1, 4, 3)).astype(np.float32)
    w = rng.standard_normal((FEATURES, CLASSES)).astype(np.float32)
    w += weight_noise * rng.standard_normal(w.shape).astype(np.float32)
    b = rng.standard_normal(CLASSES).astype(np.float32)
    nodes = [helper.make_node("Conv", ["image", "conv"], ["c"], pads=[0, 1, 0, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Squeeze", ["r", "axis2"], ["f"]),
             helper.make_node("Transpose", ["f"], ["t"], perm=list(perm)),
             helper.make_node("MatMul", ["t", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["scores" if head == "Add" else "a"])]
    if head != "Add":
        attributes = {"axis": axis} if head.endswith("Softmax") else {}
        nodes.append(helper.make_node(head, ["a"], ["scores"], **attributes))
    out_dims = [STEPS, batch, CLASSES] if perm == (2, 0, 1) else [batch, STEPS, CLASSES]
    graph = helper.make_graph(
        nodes, "crnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 1, 4, STEPS])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, out_dims)],
        [numpy_helper.from_array(conv, "conv"), numpy_helper.from_array(w, "w"),
         numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.array([2]), "axis2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, StepScores(2, 0, "LogSoftmax")),
    ({"head": "Softmax"}, StepScores(2, 0, "Softmax")),
    ({"head": "Add"}, StepScores(2, 0, "Add")),
    ({"perm": (0, 2, 1)}, StepScores(2, 1, "LogSoftmax")),  # [N, T, C]
    ({"batch": "n_images"}, StepScores(2, 0, "LogSoftmax")),  # any name the input's too
    ({"head": "Relu"}, None),  # not a class-scoring op
    ({"axis": 0}, None),  # normalised over time, not over the classes
])
def test_the_rule_finds_per_step_class_scores(kwargs, expected):
    assert step_scores(crnn(**kwargs)).get("scores") == expected


def test_a_transpose_after_the_scores_moves_the_class_axis():
    model = crnn()
    model.graph.node[-1].output[0] = "s"
    model.graph.node.append(helper.make_node("Transpose", ["s"], ["scores"], perm=[2, 1, 0]))
    del model.graph.output[0].type.tensor_type.shape.dim[:]
    for d in (CLASSES, "batch", STEPS):
        dim = model.graph.output[0].type.tensor_type.shape.dim.add()
        dim.dim_value, dim.dim_param = (d, "") if isinstance(d, int) else (0, d)
    assert step_scores(model)["scores"] == StepScores(0, 2, "LogSoftmax")


def _python_m_rlx(*args: object) -> subprocess.CompletedProcess:
    """The installed entry point, `python -m rlx`, on this tree's package."""
    src = Path(__file__).resolve().parents[2] / "src"
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run([sys.executable, "-m", "rlx", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=300)


def test_verify_reports_decoded_agreement_through_the_entry_point(cli, tmp_path):
    """The baked recogniser against a copy with noisy class weights: some samples read
    differently; verify's count is the reference decoder's on onnxruntime's outputs of both
    models, in text and JSON, with the blank it used."""
    import onnxruntime as ort

    exact, noisy = tmp_path / "crnn.onnx", tmp_path / "noisy.onnx"
    onnx.save(crnn(), exact)
    onnx.save(crnn(weight_noise=0.15), noisy)
    baked, feeds = tmp_path / "crnn.rlx", tmp_path / "images.npz"
    assert cli("bake", exact, "-o", baked).code == 0
    images = np.random.default_rng(5).standard_normal((16, 1, 4, STEPS)).astype(np.float32)
    np.savez(feeds, image=images)
    runs = [ort.InferenceSession(str(p)).run(None, {"image": images})[0] for p in (exact, noisy)]
    for blank in (0, 3):
        want = reference_agreement(*runs, blank=blank)
        assert 0 < want < 16  # the noise changes some readings, not all
        result = _python_m_rlx("verify", baked, "--onnx", noisy, "--inputs", feeds,
                               "--ctc-blank", blank, "--json")
        assert result.returncode == 1, result.stderr  # elementwise: far apart
        (row,) = json.loads(result.stdout)["outputs"]
        assert row["ctc"] == {"layout": "T,N,C", "time_axis_from": "declared dims",
                              "blank": blank, "samples": 16, "identical": want,
                              "agree": want / 16}
    text = _python_m_rlx("verify", baked, "--onnx", noisy, "--inputs", feeds).stdout
    want = reference_agreement(*runs, blank=0)
    assert (f"scores: per-step class scores read as CTC, layout [T,N,C] (time axis by "
            f"declared dims), blank 0: greedy decodings identical in {want} of 16 sample(s) "
            f"({want / 16:.2%})") in text.splitlines()


def test_verify_refuses_a_blank_beyond_the_classes(cli, tmp_path):
    path, baked = tmp_path / "crnn.onnx", tmp_path / "crnn.rlx"
    onnx.save(crnn(), path)
    assert cli("bake", path, "-o", baked).code == 0
    assert_error(cli("verify", baked, "--onnx", path, "--ctc-blank", CLASSES),
                 f"--ctc-blank {CLASSES} is not a class of output 'scores'")
    assert_error(cli("verify", baked, "--onnx", path, "--ctc-blank", "-1"),
                 "expected an integer >= 0", code=2)
    plain = cli("verify", baked, "--onnx", path, "--json").json()
    assert plain["ok"] and plain["outputs"][0]["ctc"]["identical"] == 1
