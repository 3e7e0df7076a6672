"""Smoke run of the benchmark harness (benchmarks/run.py) on the demo MLP with the fewest
repetitions: every code path (fresh-process probes, interleaving, summary, JSON, markdown,
chart) runs once. Timings are noise on a busy machine, so only structure is asserted, plus
what is deterministic: outputs agree with onnxruntime and quantised bytes with gguf.
"""

from __future__ import annotations

import json

import pytest

from benchmarks import report
from benchmarks.common import run_probe
from benchmarks.run import (
    LATENCY_RUNS,
    MAX_STORED_TIMES,
    MEMORIES,
    PROFILES,
    alternate,
    finish,
    main,
)

DATE = "2000-01-01"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(results, output folder) of one quick run on the MLP at one thread."""
    out = tmp_path_factory.mktemp("bench")
    results = main(["--quick", "--models", "mlp", "--threads", "1", "--synthetic", "0",
                    "--out", str(out), "--markdown", str(out / "RESULTS.md"),
                    "--work", str(out / "work"), "--date", DATE, "--engines", "no",
                    "--ray", "no"])
    return results, out


def test_json_holds_the_raw_numbers_and_the_machine(run):
    results, out = run
    assert json.loads((out / f"{DATE}.json").read_text()) == json.loads(json.dumps(results))
    assert {"cpu", "cores", "versions", "numpy_config", "threadpools"} <= set(results["machine"])
    assert results["meta"]["quick"] and results["meta"]["wall_seconds"] > 0
    mlp = results["models"]["mlp"]
    assert "error" not in mlp["import"]
    for profile in PROFILES:
        modes = mlp["bake"][profile]["modes"]
        assert set(modes) == set(MEMORIES)
        assert all(m["file_bytes"] > 0 and m["seconds"] > 0 for m in modes.values())
    assert set(mlp["load"]) == {f"rlx-{m}" for m in MEMORIES} | {"onnxruntime"}
    for label, entry in mlp["load"].items():
        # onnxruntime is measured next to each memory mode, so once per mode.
        assert entry["runs"] == len(entry["raw"]) == (3 if label == "onnxruntime" else 1)
        assert entry["peak"] > 0 and entry["first_result_seconds"] > 0
        assert all(r["first_result_seconds"] >= r["seconds"] > 0 for r in entry["raw"])
    latency = mlp["latency"]["1"]
    assert set(latency) == set(LATENCY_RUNS)
    for entry in latency.values():
        assert entry["p90"] >= entry["p50"] > 0
        if entry["calls"] <= MAX_STORED_TIMES:
            assert len(entry["times"]) == entry["calls"]
        else:
            assert len(entry["time_percentiles"]) == 101


def test_the_profile_says_where_the_time_goes(run):
    results, out = run
    prof = results["models"]["mlp"]["profile"]
    assert prof["threads"] == 1 and prof["total_seconds"] > 0
    # the baked MLP: its TQ2_0 first layer (K = 784) decoded by DecodeWeight, two MatMuls,
    # two adds and a relu (ONNX op types)
    ops = {t["op"]: t["nodes"] for t in prof["op_types"]}
    assert ops == {"DecodeWeight": 1, "MatMul": 2, "Add": 2, "Relu": 1}
    assert abs(sum(t["share"] for t in prof["op_types"]) - 1) < 1e-9
    assert "### Where rlx's time goes" in (out / "RESULTS.md").read_text()


def test_outputs_and_quantised_bytes_agree(run):
    results, _ = run
    assert all(diff <= 1e-4 for diff in results["models"]["mlp"]["agreement"].values())
    assert set(results["quant"]) == {"mlp weights"}
    for codecs in results["quant"].values():
        for entry in codecs.values():
            assert entry["identical"] and entry["rlx"]["values_per_second"] > 0


def test_summary_has_every_ratio_and_target(run):
    results, _ = run
    summary = results["summary"]["mlp"]
    assert set(summary["ratios"]) == set(report.RATIOS)
    assert summary["ratios"]["p50_2"] is None  # one thread only in this run
    assert set(summary["targets"]) == set(report.TARGETS)
    assert summary["targets"]["p50_2"]["status"] == "no target"  # the MLP has none
    assert {t["status"] for t in summary["targets"].values()} <= {
        "met", "missed", "no target", "n/a"}


def test_markdown_puts_ratios_and_targets_first(run):
    _, out = run
    text = (out / "RESULTS.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert headings[:4] == ["# Benchmark results", "## rlx / onnxruntime", "## Targets",
                            "## Details"]
    assert f"]({DATE}.json)" in text
    mlp_rows = [line for line in text.splitlines() if line.startswith("| mlp |")]
    assert len(mlp_rows[0].split("|")) == len(report.RATIOS) + 3  # model + ratios + edges
    assert "met" in mlp_rows[1] or "missed" in mlp_rows[1]
    chart = out / f"{DATE}.png"
    if chart.exists():
        assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({DATE}.png)" in text
    else:
        assert "no chart: matplotlib is not installed" in text


def test_a_failing_measurement_is_recorded_and_stops_its_repeats():
    calls = []

    def failing():
        calls.append("rlx")
        return {"error": "ModelImportError: no"}

    runs = alternate(3, [("rlx-compact", failing, 3),
                         ("onnxruntime", lambda: {"seconds": 1.0}, 3)])
    assert len(calls) == 1 and len(runs["onnxruntime"]) == 3
    summary = finish(runs, lambda done: {"seconds": 1.0, "runs": len(done)})
    assert summary == {"rlx-compact": {"error": "ModelImportError: no"},
                       "onnxruntime": {"seconds": 1.0, "runs": 3}}
    missing = report.targets("minilm-l3", {"load": summary, "latency": {}})
    assert missing["ready"] == {"value": None, "limit": 0.25, "status": "n/a",
                                "note": "ModelImportError: no"}


def test_a_crashing_probe_comes_back_as_its_error_line(tmp_path):
    result = run_probe("import_model", source=str(tmp_path / "missing.onnx"))
    assert set(result) == {"error"} and "missing.onnx" in result["error"]
