"""auto_truth's bookkeeping: the pick's ratio to the fastest engine and to the plain
runtimes, and the background load it starts and stops itself."""

from __future__ import annotations

import pytest

from benchmarks import auto_truth as at

P50 = {"rlx:onnxruntime:exact": 30.0, "rlx:openvino:exact": 20.0, "ort": 40.0,
       "ort:nospin": 25.0, "ov:f32": 16.0, "rlx:auto:exact": None}


def test_the_pick_is_compared_with_the_fastest_rlx_engine_and_the_plain_runtimes():
    pick = {"engine": "onnxruntime", "cold_s": 3.0, "measured_ms": {"onnxruntime": 9.0}}
    r = at.row("m", "loaded", 2, P50, pick)
    assert r["pick_over_best"] == pytest.approx(1.5)  # 30 over OpenVINO's 20
    assert r["pick_over_plain"] == pytest.approx(30.0 / 16.0)
    assert "| m | loaded (" in at.show(r) and "| 1.50 / 1.88 |" in at.show(r)


def test_an_engine_that_did_not_measure_is_n_a():
    r = at.row("m", "quiet", 1, {**P50, "rlx:openvino:exact": None},
               {"engine": "openvino", "cold_s": 1.0, "measured_ms": {}})
    assert r["pick_over_best"] is None and at.show(r).endswith("| n/a |")


def test_the_background_load_is_running_inside_and_gone_after(monkeypatch):
    started = []
    real = at.subprocess.Popen
    monkeypatch.setattr(at.subprocess, "Popen", lambda *a, **k: started.append(real(*a, **k))
                        or started[-1])
    monkeypatch.setattr(at.time, "sleep", lambda s: None)
    with at.background_load(2):
        assert len(started) == 2 and all(p.poll() is None for p in started)
    assert all(p.returncode is not None for p in started)  # killed and reaped


def test_auto_timed_with_its_choice_cached_is_the_pick():
    """auto runs the threads its timing chose (`when_shared`), which neither rlx engine's
    own run at the threads asked shows: the pick's time is auto's own."""
    pick = {"engine": "onnxruntime", "cold_s": 3.0, "measured_ms": {},
            "when_shared": "threads that fit"}
    r = at.row("m", "loaded", 2, {**P50, "rlx:auto:exact": 12.0}, pick)
    assert r["pick_over_best"] == pytest.approx(12.0 / 20.0)
    assert r["pick_over_plain"] == pytest.approx(12.0 / 16.0)
    assert "onnxruntime (threads that fit)" in at.show(r)
