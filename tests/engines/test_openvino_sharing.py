"""OpenVINO workers loaded with `memory="shared"` share the MatMul weights' pages: those
weights stay graph inputs set to tensors over the artifact's map (the CPU plugin copies
constant MatMul weights into a private re-laid-out buffer at compile, one copy per process),
so a worker's anonymous memory grows by its fixed cost, not by the weights. Without the hint
they are Constants, which the plugin runs as FullyConnected on its own layout (faster)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import rlx
from rlx.artifact import RlxFile, write_rlx
from rlx.engines.mapping import address_of
from rlx.ir import DType, Graph, Shape
from tests.engines.conftest import feeds, require, write_mlp

BIG = {"k": 1024, "hidden": 4096, "n": 1024}  # 16 MiB + 16 MiB of f32 MatMul weights


def test_matmul_weights_are_the_mapped_bytes_and_the_rest_constants(tmp_path):
    require("openvino")
    mlp = write_mlp(tmp_path / "mlp.rlx", hidden=512)  # every weight >= 1 KiB: bound
    model = rlx.load(mlp.path, engine="openvino", memory="shared")
    runner = model.runner
    base = np.frombuffer(model.file.origin.buffer, np.uint8)  # the validated mapping

    def in_map(data) -> bool:
        return address_of(base) <= address_of(data) <= address_of(base) + base.nbytes

    x = feeds(k=64)
    for got, want in zip(model.run(x), mlp.oracle(x["x"]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    request = runner._request(x)
    served = {name: request.get_tensor(name).data for name in runner.served}
    assert sorted(a.shape for a in served.values()) == sorted([mlp.w1.shape, mlp.w2.shape])
    for name, data in served.items():  # the very bytes of the map, not a copy of them
        assert in_map(data), name
        assert address_of(data) == address_of(runner.arrays[name])
    consts = [op for op in runner.model.get_ops() if op.get_type_name() == "Constant"
              and op.get_friendly_name() in runner.arrays]
    assert [op.get_data().shape for op in consts] == [mlp.b1.shape]  # an Add's operand
    assert in_map(consts[0].get_data())


_WORKER = """
import json, sys, numpy as np, rlx
from rlx.engines.mapping import anon_rss_bytes
small, big = sys.argv[1], sys.argv[2]
x = {"x": np.ones((4, 1024), np.float32)}
rlx.load(small, engine="openvino").run(x)  # the plugin's own first-compile cost paid
before = anon_rss_bytes()
model = rlx.load(big, engine="openvino", memory="shared")
model.run(x)
print(json.dumps({"growth": anon_rss_bytes() - before,
                  "weights": model.file.meta.constant_bytes}))
"""


def _workers(small: str, big: str, n: int) -> list[dict[str, int]]:
    """`n` worker processes loading `big` at once, each after a warm-up on `small`."""
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, small, big],
                              stdout=subprocess.PIPE, text=True, env=dict(os.environ))
             for _ in range(n)]
    results = []
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.mark.slow
def test_two_workers_each_grow_by_a_fixed_cost_not_by_the_weights(tmp_path):
    """Before, each worker grew by 58% of the weights at compile and 108% after a run. Now
    the plugin's fixed cost per compiled model (~5 MiB) remains, and growth from 32 to 128
    MiB of weights is ~1% of the difference (limits: 10% and 5%)."""
    require("openvino")
    small = str(write_mlp(tmp_path / "small.rlx", k=1024, hidden=8, n=8).path)
    sizes = {}
    for hidden in (4096, 16384):  # 32 and 128 MiB of f32 MatMul weights
        big = str(write_mlp(tmp_path / f"big{hidden}.rlx", k=1024, hidden=hidden, n=1024).path)
        sizes[hidden] = _workers(small, big, 2)
    for worker in sizes[16384]:
        assert worker["weights"] > 128 * 2**20
        assert worker["growth"] < 0.10 * worker["weights"], worker
    for low, high in zip(sizes[4096], sizes[16384], strict=True):
        slope = (high["growth"] - low["growth"]) / (high["weights"] - low["weights"])
        assert slope < 0.05, (low, high)


def test_a_weight_on_either_side_or_shared_by_two_products_is_served(tmp_path):
    """The rule is "every consumer is a MatMul", whichever operand the weight is."""
    require("openvino")
    rng = np.random.default_rng(3)
    left = rng.standard_normal((256, 64)).astype(np.float32)  # left @ x
    tied = rng.standard_normal((32, 32)).astype(np.float32)  # y @ tied, twice
    g = Graph("sides")
    x = g.input("x", Shape((64, 32), DType.F32))
    t = g.constant(tied)
    y = g.matmul(g.matmul(g.constant(left), x), t)
    g.set_outputs([g.matmul(y, t)])
    path = tmp_path / "sides.rlx"
    write_rlx(path, RlxFile.from_baked(g, []))
    model = rlx.load(path, engine="openvino", memory="shared")
    assert sorted(a.shape for a in model.runner.served.values()) == [(32, 32), (256, 64)]
    xv = rng.standard_normal((64, 32)).astype(np.float32)
    want = left.astype(np.float64) @ xv @ tied @ tied
    np.testing.assert_allclose(model.run({"x": xv})[0], want, rtol=1e-4, atol=1e-3)


def _layer_types(runner) -> list[str]:
    """The layer types of the plugin's executed graph."""
    return [op.get_rt_info()["layerType"].astype(str)
            for op in runner.compiled.get_runtime_model().get_ordered_ops()]


def test_a_private_load_makes_matmul_weights_constants_the_plugin_lays_out(tmp_path):
    """Without `memory="shared"` nothing is served: every weight is a Constant and both
    products run as FullyConnected (constant weights in the plugin's own layout), counted as
    copied into the process."""
    require("openvino")
    mlp = write_mlp(tmp_path / "mlp.rlx", hidden=512)
    private = rlx.load(mlp.path, engine="openvino")
    shared = rlx.load(mlp.path, engine="openvino", memory="shared")
    assert private.runner.served == {}
    assert _layer_types(private.runner).count("FullyConnected") == 2
    assert "FullyConnected" not in _layer_types(shared.runner)  # MatMul on the served inputs
    assert private.runner.private_weight_bytes == sum(
        w.nbytes for w in (mlp.w1, mlp.b1, mlp.w2))
    x = feeds(k=64)
    for got, want in zip(private.run(x), mlp.oracle(x["x"]), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
