"""`rlx.load(memory="shared")` (issue 35): each runner counts the weight bytes it copies into
its process (`private_weight_bytes`), that count is the anonymous memory a worker really
grows by, and auto with the hint leaves out an engine that copies the weights (OpenVINO's
CPU plugin re-lays Conv weights out in every worker)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rlx
from rlx.artifact import RlxFile, write_rlx
from rlx.errors import EngineError
from rlx.ir import DType, Graph, Shape
from rlx.ir.ops.windows import Conv
from tests.engines.conftest import require, write_mlp

RNG = np.random.default_rng(35)


def write_convs(path: Path, channels: int) -> list[np.ndarray]:
    """Two 3x3 convolutions of `channels` channels over a 4x4 image (2 x 9 x channels^2
    f32 weights: 18 MiB at 512); returns the weights."""
    scale = np.float32(1 / np.sqrt(9 * channels))
    weights = [RNG.standard_normal((channels, channels, 3, 3), np.float32) * scale
               for _ in range(2)]
    g = Graph("convs")
    y = g.input("x", Shape((1, channels, 4, 4), DType.F32))
    for w in weights:
        y = g.add_node(Conv(pads=(1, 1, 1, 1)), [y, g.constant(w)])
    g.set_outputs([y])
    write_rlx(path, RlxFile.from_baked(g, []))
    return weights


def test_each_engine_counts_the_weight_bytes_it_copies(tmp_path):
    require("openvino")
    require("onnxruntime")
    weights = write_convs(tmp_path / "convs.rlx", 64)
    mlp = write_mlp(tmp_path / "mlp.rlx", hidden=512)
    x = {"x": RNG.standard_normal((1, 64, 4, 4), np.float32)}
    conv = rlx.load(tmp_path / "convs.rlx", engine="openvino")
    assert conv.runner.private_weight_bytes == sum(w.nbytes for w in weights)
    np.testing.assert_allclose(conv.run(x)[0],
                               rlx.load(tmp_path / "convs.rlx", engine="numpy").run(x)[0],
                               rtol=1e-4, atol=1e-4)
    # with the hint the MatMul weights are served from the map; the bias, an Add operand,
    # is copied; without it every weight is a Constant the plugin copies
    assert rlx.load(mlp.path, engine="openvino", memory="shared"
                    ).runner.private_weight_bytes == mlp.b1.nbytes
    assert rlx.load(mlp.path, engine="openvino").runner.private_weight_bytes == sum(
        mlp_w.nbytes for mlp_w in (mlp.w1, mlp.b1, mlp.w2))
    assert rlx.load(mlp.path, engine="numpy").runner.private_weight_bytes == 0
    assert rlx.load(mlp.path, engine="onnxruntime", cache_dir=tmp_path / "c"
                    ).runner.private_weight_bytes == 0  # the prepacked copy is a mapped file
    heap = rlx.load(mlp.path, engine="onnxruntime", prepack="heap").runner
    assert heap.private_weight_bytes == sum(mlp_w.nbytes for mlp_w in (mlp.w1, mlp.b1, mlp.w2))


_WORKER = """
import json, sys, numpy as np, rlx
from rlx.engines.mapping import anon_rss_bytes
small, big, engine = sys.argv[1:4]
rlx.load(small, engine=engine).run({"x": np.ones((1, 8, 4, 4), np.float32)})
before = anon_rss_bytes()
model = rlx.load(big, engine=engine)
print(json.dumps({"growth": anon_rss_bytes() - before,
                  "counted": model.runner.private_weight_bytes}))
"""


@pytest.mark.slow
def test_the_counted_copy_is_the_anonymous_memory_a_worker_grows_by(tmp_path):
    """OpenVINO grows by at least the Conv weights it counts (one copy per worker: 18 MiB
    here); numpy, which counts none, grows by <= 2% of them."""
    require("openvino")
    write_convs(tmp_path / "small.rlx", 8)
    weights = sum(w.nbytes for w in write_convs(tmp_path / "big.rlx", 512))
    grown = {}
    for engine in ("openvino", "numpy"):
        out = subprocess.run([sys.executable, "-c", _WORKER, str(tmp_path / "small.rlx"),
                              str(tmp_path / "big.rlx"), engine],
                             capture_output=True, text=True, check=True).stdout
        grown[engine] = json.loads(out.strip().splitlines()[-1])
    assert grown["openvino"]["counted"] == weights
    assert grown["openvino"]["growth"] >= 0.9 * weights, grown
    assert grown["numpy"]["counted"] == 0
    assert grown["numpy"]["growth"] <= 0.02 * weights, grown


def test_auto_with_shared_memory_leaves_out_an_engine_that_copies(tmp_path, caplog):
    require("openvino")
    write_convs(tmp_path / "convs.rlx", 64)
    caplog.set_level(logging.INFO, logger="rlx.engines")
    shared = rlx.load(tmp_path / "convs.rlx", cache_dir=tmp_path / "c", memory="shared")
    assert shared.engine != "openvino"
    assert "memory='shared' leaves out openvino" in caplog.text
    rlx.load(tmp_path / "convs.rlx", cache_dir=tmp_path / "c")  # the private choice: apart
    entries = json.loads((tmp_path / "c" / "engines.json").read_text()).values()
    by_hint = {entry["memory"]: entry for entry in entries}
    assert "openvino" not in by_hint["shared"]["measured_ms"]
    assert "openvino" in by_hint["private"]["measured_ms"]
    caplog.clear()  # a second shared load reads its own entry: nothing is built to be left out
    again = rlx.load(tmp_path / "convs.rlx", cache_dir=tmp_path / "c", memory="shared")
    assert again.engine == shared.engine and "leaves out" not in caplog.text


def test_a_named_engine_that_copies_is_loaded_and_warned_about(tmp_path, caplog):
    require("openvino")
    write_convs(tmp_path / "convs.rlx", 64)
    model = rlx.load(tmp_path / "convs.rlx", engine="openvino", memory="shared")
    assert model.engine == "openvino"
    assert "holds 0.3 MiB of the 0.3 MiB of weights in each worker process" in caplog.text


def test_an_unknown_memory_hint_is_refused(tmp_path):
    mlp = write_mlp(tmp_path / "mlp.rlx")
    with pytest.raises(EngineError, match="unknown memory hint 'pooled'; expected one of "
                                          "private, shared"):
        rlx.load(mlp.path, engine="numpy", memory="pooled")
