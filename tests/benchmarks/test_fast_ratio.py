"""fast_ratio's table: each runner's p50 over the faster plain f32 runtime, a runner that
failed shown as nan, anonymous RSS in MiB, onnxruntime f32 as the accuracy reference."""

from __future__ import annotations

import math

from benchmarks import fast_ratio as fr

P50 = {"ort-f32": {"p50_ms": 10.0, "anon_load": 8 << 20},
       "ov-f32": {"p50_ms": 8.0, "anon_load": 4 << 20},
       "ov-default": {"p50_ms": 5.0, "anon_load": 4 << 20},
       "rlx-fast[onnxruntime]": {"p50_ms": 3.0, "anon_load": 2 << 20},
       "rlx-fast[openvino]": {"p50_ms": math.nan, "anon_load": math.nan}}
ACC = {"ov-f32": {"cosine": 0.99999, "argmax": 1.0, "precision": "f32"},
       "ov-default": {"cosine": 0.966, "argmax": 0.95, "precision": "bf16"},
       "rlx-fast[onnxruntime]": {"cosine": 0.9995, "argmax": None, "precision": "fast: int8"},
       "rlx-fast[openvino]": {"cosine": 0.99999, "argmax": 1.0, "precision": "fast: f32"}}


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip("|").split("|")]


def test_each_runner_is_over_the_faster_plain_runtime():
    rows = {(_cells(r)[2]): _cells(r) for r in fr._rows("m", 2, P50, ACC)}
    assert list(rows) == list(fr.RUNNERS)
    assert rows["ov-f32"][3:5] == ["8.00", "1.00"]
    assert rows["ort-f32"][4] == "1.25"
    assert rows["rlx-fast[onnxruntime]"][4:] == ["0.38", "2.0", "0.99950", "-", "fast: int8"]
    assert rows["ov-default"][6:] == ["0.96600", "0.950", "bf16"]
    assert rows["rlx-fast[openvino]"][3:6] == ["nan", "nan", "nan"]
    assert rows["ort-f32"][6:] == ["(the reference)", "", "f32"]
    width = len(fr.HEADER.splitlines()[0].split("|"))
    assert all(len(r.split("|")) == width for r in fr._rows("m", 1, P50, ACC))


def test_a_synthetic_model_is_built_with_its_arguments_and_fed_its_input_shape(tmp_path):
    import numpy as np
    import onnxruntime as ort

    path = fr._synthetic("crnn:width=64:hidden=16:classes=10", tmp_path)
    assert path == tmp_path / "crnn-width64-hidden16-classes10.onnx"
    feeds = fr._feeds("crnn:width=64:hidden=16:classes=10", path)(7)
    assert feeds["x"].shape == (1, 3, 32, 64)
    assert np.array_equal(feeds["x"], fr._feeds("crnn:width=64", path)(7)["x"])
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (probabilities,) = session.run(None, feeds)
    assert probabilities.shape == (16, 1, 10)  # width 64 pooled by 4: 16 steps of 10 classes
    np.testing.assert_allclose(probabilities.sum(-1), 1, rtol=1e-5)
