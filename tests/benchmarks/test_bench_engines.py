"""The engines benchmark's bookkeeping: targets from raw numbers, and the markdown."""

from __future__ import annotations

from benchmarks import bench_engines as be


def _model(**p50_2):
    latency = {r: {"1": [v * 2], "2": [v]} for r, v in p50_2.items()}
    return {"weight_bytes": 4 << 20, "latency": latency,
            "first_result": {"rlx:auto:exact": [0.5], "ort": [0.6], "ov:f32": [0.4]},
            "anon_growth": {"rlx:onnxruntime:exact": [200 << 10]},
            "anon_load": {"rlx:onnxruntime:exact": [100 << 10]},
            "accuracy": {"ort": [{"max_abs": 0.0, "cosine": 1.0, "argmax_same": True}]},
            "details": {"rlx:auto:exact": {"engine": "onnxruntime"}}}


def test_targets_compare_each_engine_with_its_plain_peer():
    model = _model(**{"rlx:onnxruntime:exact": 1.0, "ort": 1.0, "rlx:openvino:exact": 0.6,
                      "ov:f32": 0.5, "rlx:openvino:fast": 0.4, "ov:default": 0.4,
                      "rlx:auto:exact": 1.0})
    t = be.summarize(model)["targets"]
    assert t["rlx:onnxruntime:exact / ort"]["status"] == "met"
    assert t["rlx:openvino:exact / ov:f32"]["status"] == "missed"  # 1.2 > 1.05
    assert t["auto / best peer (f32)"]["value"] == 2.0  # best f32 peer is OpenVINO, 0.5
    assert t["auto first result (warm) / chosen plain"]["value"] == 0.5 / 0.6
    assert t["onnxruntime anon growth at load / weights"]["status"] == "met"
    assert t["fast / onnxruntime"]["value"] == 0.4


def test_missing_numbers_are_n_a_and_render():
    model = _model(ort=1.0)
    model["summary"] = be.summarize(model)
    assert model["summary"]["targets"]["rlx:onnxruntime:exact / ort"]["status"] == "n/a"
    text = be.markdown({"meta": {"date": "d", "quick": True, "wall_seconds": 1.0,
                                 "loadavg_start": (0.1, 0.1, 0.1),
                                 "machine": {"cpu": "x", "cores": 2}},
                        "models": {"m": model, "bad": {"error": "boom"}}})
    assert "## m (4.0 MiB of weights; auto chose onnxruntime)" in text
    assert "failed: boom" in text and "| ort | 2000.00 | 1000.00 |" in text
