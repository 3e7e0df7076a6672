"""The accuracy guard: measured on calibration feeds with the numpy runtime.

A two-layer model whose first weight has a few huge outliers per block (Q8_0's one scale
per 32 values then crushes the small values of those blocks) and whose second weight is
benign. Cosines are recomputed here in float64 from a plain numpy forward pass."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from rlx import BakeOptions, bake
from rlx.baking.encoding import UNCHECKED
from rlx.baking.guard import HELD_OUT_MARGIN, REFUND_ROUNDS
from rlx.ir import Graph, Shape
from rlx.passes.weight_encoding import FINER_BLOCK_ENCODINGS
from rlx.runtime import Session

K, H, N = 64, 64, 16


def _model(rng):
    g = Graph("two_layers")
    x = g.input("x", Shape([8, K]))
    w1 = g.param("w1", Shape([K, H]))
    w2 = g.param("w2", Shape([H, N]))
    g.set_outputs([g.matmul(g.matmul(x, w1), w2)])
    w1v = rng.standard_normal((K, H)).astype(np.float32) * 0.01
    w1v[::32] = 2.0  # one outlier per block of 32 along K: the rest get ~1 bit in Q8_0
    w2v = rng.standard_normal((H, N)).astype(np.float32)
    return g, {"w1": w1v, "w2": w2v}


def _feeds(seed):
    x = np.random.default_rng(seed).standard_normal((8, K)).astype(np.float32)
    x[:, ::32] = 0  # the outliers' inputs are silent: only the crushed values matter
    return {"x": x}


def _cosine(a, b):
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def _run(file, feeds):
    return Session().compile(file.into_runtime_graph()).run(feeds)[0]


def test_guard_keeps_the_sensitive_weight_and_reports_why():
    g, weights = _model(np.random.default_rng(0))
    exact = lambda f: f["x"].astype(np.float64) @ weights["w1"] @ weights["w2"]  # noqa: E731
    unguarded, _ = bake(g, weights, BakeOptions.from_profile("size"))
    assert _cosine(_run(unguarded, _feeds(1)), exact(_feeds(1))) < 0.99  # Q8_0 hurts here
    opts = BakeOptions.from_profile("size").replace(calibration=[_feeds(0)], min_cosine=0.9995)
    file, report = bake(g, weights, opts)
    acc = report.accuracy
    assert acc.checked and acc.met and acc.samples == 1
    rows = {t.name: t for t in acc.tensors}
    # w1 steps down its ladder (12-bit codes with searched scales, or f16, hold its outliers
    # and its small values alike), never to full precision
    rungs = {e.label for e in FINER_BLOCK_ENCODINGS} | {"f16"}
    assert not rows["w1"].kept and rows["w1"].encoding in rungs
    assert rows["w1"].encoding == file.weight("w1").encoding
    assert rows["w1"].proposed == "gguf_q8_0"
    assert f"stepped to {rows['w1'].encoding}" in rows["w1"].reason
    assert rows["w1"].packed_bytes <= K * H * 2
    assert rows["w2"].encoding == "gguf_q8_0" and rows["w2"].cosine > 0.9995  # measured alone
    assert rows["w1"].cosine < 0.99
    assert file.weight("w2").encoding == "gguf_q8_0"
    for seed in (0, 5, 6):  # calibration and held-out inputs
        assert _cosine(_run(file, _feeds(seed)), exact(_feeds(seed))) >= 0.9995
    assert acc.final[0].cosine >= 0.9995 > acc.proposed[0].cosine


def test_max_abs_error_target_is_held_too():
    g, weights = _model(np.random.default_rng(0))
    weights["w1"] = np.random.default_rng(3).standard_normal((K, H)).astype(np.float32)
    opts = BakeOptions.from_profile("size").replace(calibration=[_feeds(0)],
                                                    max_abs_error=1e-6, min_cosine=0.5)
    file, report = bake(g, weights, opts)
    assert report.accuracy.met and all(t.kept for t in report.accuracy.tensors)
    want = _feeds(0)["x"].astype(np.float64) @ weights["w1"] @ weights["w2"]
    assert np.max(np.abs(_run(file, _feeds(0)) - want)) < 1e-3  # f32 rounding only


def test_without_calibration_the_size_profile_warns_once(caplog):
    g, weights = _model(np.random.default_rng(0))
    with caplog.at_level(logging.WARNING, logger="rlx"):
        _, report = bake(g, weights, BakeOptions.from_profile("size"))
    assert [r.getMessage() for r in caplog.records].count(UNCHECKED) == 1
    assert not report.accuracy.checked and len(report.accuracy.tensors) == 2
    with caplog.at_level(logging.WARNING, logger="rlx"):
        caplog.clear()
        bake(g, weights, BakeOptions.from_profile("exact"))
    assert UNCHECKED not in [r.getMessage() for r in caplog.records]


@pytest.mark.parametrize("argv_extra, code", [((), 0), (("--max-abs-error", "1e-9"), 0)])
def test_cli_calibrate(tmp_path, argv_extra, code):
    from rlx.cli import main
    from rlx.ir import graph_to_json

    g, weights = _model(np.random.default_rng(0))
    (tmp_path / "g.json").write_text(graph_to_json(g))
    np.savez(tmp_path / "w.npz", **weights)
    np.savez(tmp_path / "calib.npz", **_feeds(0))
    out = tmp_path / "m.rlx"
    argv = ["bake", str(tmp_path / "g.json"), "-w", str(tmp_path / "w.npz"), "-o", str(out),
            "--profile", "size", "--calibrate", str(tmp_path / "calib.npz"), "--json",
            *argv_extra]
    assert main(argv) == code
    assert main([*argv[:-len(argv_extra) or None], "--min-cosine", "0.9995"]) == 0


def test_cli_min_cosine_needs_calibrate(tmp_path, capsys):
    from rlx.cli import main

    assert main(["bake", "x.onnx", "-o", str(tmp_path / "m.rlx"), "--min-cosine", "0.9"]) != 0
    assert "--calibrate" in capsys.readouterr().err


def _progress_records(run) -> list[logging.LogRecord]:
    """The counted records `run()` sends to the progress logger (what a terminal draws)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            if hasattr(record, "progress"):
                records.append(record)

    logger, handler = logging.getLogger("rlx.progress"), Keep(logging.DEBUG)
    old = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        run()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    return records


def test_calibration_is_one_counted_phase_and_encodes_each_weight_once_in_progress():
    """The guard's runs are one kind of record, counted 0..n-1 of n (the exact graph, each
    weight alone, everything encoded, one more per round of weights stepped down, at least
    one rung a round, and one per refund measured); the per-weight encoding records are the
    final encoding's only, one per weight stored encoded."""
    g, weights = _model(np.random.default_rng(0))
    opts = BakeOptions.from_profile("size").replace(calibration=[_feeds(0)], min_cosine=0.9995)
    result = {}
    records = _progress_records(lambda: result.update(report=bake(g, weights, opts)[1]))
    report = result["report"]
    by_kind: dict[str, list[tuple[int, int]]] = {}
    for r in records:
        by_kind.setdefault(r.msg, []).append(r.progress)
    [calibration] = [k for k in by_kind if k.startswith("measuring accuracy")]
    stepped = sum(t.encoding != t.proposed for t in report.accuracy.tensors)
    lossy = len(report.accuracy.tensors)  # the toy's weights are all lossy candidates
    rungs = len(FINER_BLOCK_ENCODINGS) + 2  # then f16, then f32
    assert stepped >= 1 and 1 + lossy + 1 < report.accuracy.runs <= \
        1 + lossy + 1 + stepped * rungs + REFUND_ROUNDS
    assert [done for done, _ in by_kind[calibration]] == list(range(report.accuracy.runs))
    assert all(done < total for done, total in by_kind[calibration])
    encoded = sum(report.optimize.encoded.values())
    assert by_kind["encoding %s as %s"] == [(i, encoded) for i in range(encoded)]
    passes = by_kind["pass %d of %d: %s"]
    assert passes == [(i, len(passes)) for i in range(len(passes))]


def test_the_guard_steps_the_weight_that_buys_most_per_byte():
    """x @ ws @ wb: ws (4 KiB as Q8_0) alone costs less accuracy than wb (68 KiB) alone,
    but per byte far more; with both encoded the target is missed, and stepping either one
    meets it. The guard steps ws down (a wider code or f16) and leaves the large wb at
    Q8_0 (stepping the largest contributor, wb, would have cost 16x the bytes)."""
    rng = np.random.default_rng(0)
    n = 1024
    g = Graph("chain")
    x = g.input("x", Shape([8, K]))
    ws, wb = g.param("ws", Shape([K, H])), g.param("wb", Shape([H, n]))
    g.set_outputs([g.matmul(g.matmul(x, ws), wb)])
    weights = {"ws": (rng.standard_normal((K, H)) * 0.1).astype(np.float32),
               "wb": (rng.standard_normal((H, n)) * 0.1).astype(np.float32)}
    weights["ws"][::32] = 2.1  # outliers crush their blocks (their inputs are silent)
    weights["ws"][:, ::32] = 0  # so are wb's outlier rows' inputs
    weights["wb"][::32] = 2.5
    aim = 0.998  # what the guard aims at: HELD_OUT_MARGIN of the allowance
    opts = BakeOptions.from_profile("size").replace(
        calibration=[_feeds(0)], min_cosine=1 - (1 - aim) / HELD_OUT_MARGIN)
    file, report = bake(g, weights, opts)
    rows = {t.name: t for t in report.accuracy.tensors}
    assert 1 - rows["ws"].cosine < 1 - rows["wb"].cosine < 0.002  # either alone meets it
    assert report.accuracy.proposed[0].cosine < aim <= report.accuracy.final[0].cosine
    rungs = {e.label for e in FINER_BLOCK_ENCODINGS} | {"f16"}
    assert rows["ws"].encoding in rungs and rows["wb"].encoding == "gguf_q8_0"
    assert (file.weight("ws").encoding, file.weight("wb").encoding) == \
        (rows["ws"].encoding, "gguf_q8_0")
    w64 = {k: v.astype(np.float64) for k, v in weights.items()}
    for seed in (5, 6):  # held-out inputs, against float64 numpy
        feeds = _feeds(seed)
        want = feeds["x"].astype(np.float64) @ w64["ws"] @ w64["wb"]
        assert _cosine(_run(file, feeds), want) >= 0.998
