"""The fast profile from the command line: bake with --calibrate, the plan in the report and
in inspect, and verify running the plan (the file's own precision) against onnxruntime f32
on held-out inputs."""

from __future__ import annotations

import re

import numpy as np

from tests.baking.fast_models import image_feeds, small_cnn


def _baked(cli, tmp_path):
    onnx_path = small_cnn(tmp_path)
    calibration = []
    for k, feed in enumerate(image_feeds(1, 8)):
        calibration += ["--calibrate", tmp_path / f"cal{k}.npz"]
        np.savez(calibration[-1], **feed)
    out = tmp_path / "cnn.rlx"
    result = cli("bake", onnx_path, "-o", out, "--profile", "fast", *calibration,
                 "--min-cosine", "0.999")
    assert result.code == 0, result.err
    return onnx_path, out, result


def test_bake_reports_the_plan_and_inspect_shows_it(cli, tmp_path):
    _, out, result = _baked(cli, tmp_path)
    assert "precision plan (fast profile)" in result.out
    assert "int8" in result.out and "8 calibration feed(s)" in result.out
    assert "bf16 part (OpenVINO, bf16 CPUs)" in result.out
    assert re.search(r"OpenVINO's int8 set +\d+ MatMul / Conv nodes int8, \d+ nodes bf16 "
                     r"beside them, worst calibration cosine", result.out)
    plan = cli("inspect", out, "--json").json()["meta"]["precision_plan"]
    assert plan["counts"]["int8"] >= 2 and plan["calibration"]["samples"] == 8
    assert plan["calibration"]["outputs"][0]["cosine"] >= 0.999


# OpenVINO runs a fast file's int8 part or its bf16 part (rlx.engines.openvino_int8)
RUNS = {"numpy": "fast: int8, f32", "onnxruntime": "fast: int8, f32", "openvino": "fast: "}


def test_verify_runs_the_plan_against_onnxruntime_f32_on_held_out_inputs(cli, tmp_path):
    onnx_path, out, _ = _baked(cli, tmp_path)
    held_out = tmp_path / "held.npz"
    np.savez(held_out, **image_feeds(77)[0])
    for engine in ("numpy", "onnxruntime", "openvino"):
        d = cli("verify", out, "--onnx", onnx_path, "--inputs", held_out, "--engine", engine,
                "--min-cosine", "0.999", "--json").json()
        assert d["ok"] and d["engine"] == engine
        assert d["precision"].startswith(RUNS[engine]) and d["plan"].startswith("int8")
        (row,) = d["outputs"]
        assert row["cosine"] >= 0.999 and row["argmax_agree"] == 1.0
    exact = cli("verify", out, "--onnx", onnx_path, "--inputs", held_out, "--precision",
                "exact", "--min-cosine", "0.999", "--json").json()
    assert exact["precision"] == "exact"
