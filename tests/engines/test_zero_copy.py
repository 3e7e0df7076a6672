"""Weights go to onnxruntime and OpenVINO without copies: the ONNX model onnxruntime loads
points into the .rlx file at the offsets the artifact maps (and onnxruntime's anonymous
memory grows by far less than the weights), and OpenVINO's Constants sit inside the map."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import rlx
from rlx.engines.mapping import FileRegions, address_of
from rlx.ir.ops.sources import Constant
from tests.engines.conftest import require, write_mlp

BIG = {"k": 1024, "hidden": 4096, "n": 1024}  # 16 MiB + 16 MiB of f32 weights


def _weights(model) -> dict[int, np.ndarray]:
    graph = model.file.graph
    return {n.id: n.op.array(n.shape) for n in graph.nodes()
            if isinstance(n.op, Constant) and n.op.nbytes >= 1024}


def test_onnxruntime_reads_the_weights_from_the_rlx_file(tmp_path):
    require("onnxruntime")
    mlp = write_mlp(tmp_path / "big.rlx", **BIG)
    model = rlx.load(mlp.path, engine="onnxruntime")
    runner = model.runner
    assert not runner.in_memory  # nothing handed over as a copy
    weights = _weights(model)
    assert len(runner.mapped) == len(weights) == 3  # w1, b1, w2
    raw = mlp.path.read_bytes()
    mapped_bytes = {raw[off:off + length] for off, length in runner.mapped.values()}
    assert mapped_bytes == {w.tobytes() for w in weights.values()}
    # and the artifact's own arrays are views of the file's map at those offsets
    regions = FileRegions(str(mlp.path))
    assert {regions.offset(w) for w in weights.values()} == {
        off for off, _ in runner.mapped.values()}


_RSS_PROBE = """
import json, sys, numpy as np, rlx
from rlx.engines.mapping import anon_rss_bytes
small, big = sys.argv[1], sys.argv[2]
x = {"x": np.ones((1, 1024), np.float32)}
rlx.load(small, engine="onnxruntime").run(x)  # libraries and arenas warm
before = anon_rss_bytes()
model = rlx.load(big, engine="onnxruntime")
model.run(x)
print(json.dumps({"growth": anon_rss_bytes() - before,
                  "weights": model.file.meta.constant_bytes}))
"""


def _rss_growth(tmp_path, env_extra: dict[str, str]) -> tuple[int, int]:
    import os

    write_mlp(tmp_path / "small.rlx", k=1024, hidden=8, n=8)
    write_mlp(tmp_path / "big.rlx", **BIG)
    env = {**os.environ, **env_extra}
    out = subprocess.run([sys.executable, "-c", _RSS_PROBE, str(tmp_path / "small.rlx"),
                          str(tmp_path / "big.rlx")], capture_output=True, text=True,
                         check=True, env=env).stdout
    data = json.loads(out.strip().splitlines()[-1])
    return data["growth"], data["weights"]


@pytest.mark.slow
def test_onnxruntime_anonymous_memory_grows_by_far_less_than_the_weights(tmp_path):
    require("onnxruntime")
    growth, weights = _rss_growth(tmp_path, {})
    assert growth < 0.10 * weights, (growth, weights)
    # the test has teeth: with prepacking on, onnxruntime makes its own copy of the MatMuls
    packed_growth, _ = _rss_growth(tmp_path, {"RLX_ORT_PREPACK": "1"})
    assert packed_growth > 0.5 * weights, (packed_growth, weights)


def test_openvino_constants_are_the_mapped_bytes(tmp_path):
    require("openvino")
    mlp = write_mlp(tmp_path / "big.rlx", **BIG)
    model = rlx.load(mlp.path, engine="openvino")
    regions = FileRegions(str(mlp.path))
    consts = [op for op in model.runner.model.get_ops() if op.get_type_name() == "Constant"
              and op.get_friendly_name() in model.runner.arrays]
    assert len(consts) == len(_weights(model)) == 3
    for op in consts:
        data = op.get_data()
        assert regions.contains(address_of(data)), op.get_friendly_name()
        np.testing.assert_array_equal(data, model.runner.arrays[op.get_friendly_name()])


def test_openvino_precision_hint(tmp_path):
    require("openvino")
    mlp = write_mlp(tmp_path / "mlp.rlx")
    exact = rlx.load(mlp.path, engine="openvino")
    assert exact.precision == "exact"
    assert str(exact.runner.compiled.get_property("INFERENCE_PRECISION_HINT")) in (
        "f32", "<Type: 'float32'>")
    fast = rlx.load(mlp.path, engine="openvino", precision="fast")
    assert fast.precision == "fast"
    x = {"x": np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)}
    a, b = exact.run(x)[1].ravel(), fast.run(x)[1].ravel()
    assert float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) > 0.999
    # onnxruntime and numpy have no faster precision: fast runs exact and says so
    assert rlx.load(mlp.path, engine="onnxruntime", precision="fast").precision == "exact"
