"""The warm load (rlx.engines.warm): once onnxruntime's prepacked copy is saved, a load reads
only the header, imports no graph IR, and behaves as the full load does."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import rlx
from rlx.engines import warm
from rlx.errors import InputError, IntegrityError
from tests.engines.conftest import feeds, require, write_mlp

PROBE = """
import json, sys, numpy as np, rlx
model = rlx.load(sys.argv[1], engine=sys.argv[2], cache_dir=sys.argv[3])
out = model.run({"x": np.ones((2, 64), np.float32)})
heavy = sorted(m for m in sys.modules if m.startswith(("rlx.ir.ops", "rlx.ir.graph",
        "rlx.artifact.reader", "rlx.codecs", "rlx.kernels", "onnx.")))
print(json.dumps({"engine": model.engine, "heavy": heavy,
                  "out": [o.tolist() for o in out]}))
"""


def _probe(path, engine, cache) -> dict:
    result = subprocess.run([sys.executable, "-c", PROBE, str(path), engine, str(cache)],
                            capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("engine", ["onnxruntime", "auto"])
def test_a_warm_load_reads_the_header_alone(tmp_path, engine, monkeypatch):
    require("onnxruntime")
    mlp = write_mlp(tmp_path / "mlp.rlx")
    cache = tmp_path / "cache"
    if engine == "auto":  # make onnxruntime auto's cached choice, whatever is fastest here
        from rlx.engines import auto

        monkeypatch.setattr(auto, "_measure", lambda runners, f, o, **_: {
            name: 0.001 if name == "onnxruntime" else 1.0 for name in runners})
        monkeypatch.setattr(auto, "COLD_BUDGET_S", 1e9)  # a busy machine's builds leave all in
        assert rlx.load(mlp.path, cache_dir=cache).engine == "onnxruntime"
    cold = _probe(mlp.path, engine, cache)  # saves the prepacked copy if not yet there
    hot = _probe(mlp.path, engine, cache)
    assert cold["engine"] == hot["engine"] == "onnxruntime"
    assert hot["heavy"] == []  # no op classes, reader, codecs, kernels or onnx
    want = mlp.oracle(np.ones((2, 64), np.float32))
    for got, ref in zip(hot["out"], want):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_the_warm_model_is_the_full_model(tmp_path):
    """Same inputs, outputs, feed errors and results; `file` opens the artifact on use."""
    require("onnxruntime")
    mlp = write_mlp(tmp_path / "mlp.rlx")
    cache = tmp_path / "cache"
    full = rlx.load(mlp.path, engine="onnxruntime", cache_dir=cache)
    hot = warm.load_warm(str(mlp.path), "onnxruntime", threads=None, precision="exact",
                         cache_dir=cache)
    assert hot is not None and full.runner.summary is not None
    assert hot.inputs == full.inputs and hot.outputs == full.outputs
    assert hot.name == full.name and hot._file is None
    x = feeds()
    for got, ref in zip(hot.run(x), full.run(x)):
        np.testing.assert_array_equal(got, ref)
    assert hot.run(x, outputs=[full.outputs[1].name])[0].shape == full.run(x)[1].shape
    bad = {"x": np.ones((2, 64), np.float64)}
    with pytest.raises(InputError) as hot_err:
        hot.run(bad)
    with pytest.raises(InputError) as full_err:
        full.run(bad)
    assert str(hot_err.value) == str(full_err.value)
    assert hot.file.meta.name == full.file.meta.name and hot._file is not None


def test_a_damaged_header_is_never_loaded_warm(tmp_path):
    """The warm load checks the header as the reader does; what it refuses, the full load
    reports."""
    require("onnxruntime")
    mlp = write_mlp(tmp_path / "mlp.rlx")
    cache = tmp_path / "cache"
    rlx.load(mlp.path, engine="onnxruntime", cache_dir=cache)
    data = bytearray(mlp.path.read_bytes())
    data[60] ^= 0xFF  # inside the header region, after the 40-byte preamble
    mlp.path.write_bytes(bytes(data))
    assert warm.load_warm(str(mlp.path), "onnxruntime", threads=None, precision="exact",
                          cache_dir=cache) is None
    with pytest.raises(IntegrityError, match="header checksum"):
        rlx.load(mlp.path, engine="onnxruntime", cache_dir=cache)


def test_no_warm_load_without_a_saved_copy_or_in_other_modes(tmp_path):
    require("onnxruntime")
    mlp = write_mlp(tmp_path / "mlp.rlx")
    args = {"threads": None, "precision": "exact", "cache_dir": tmp_path / "cache"}
    assert warm.load_warm(str(mlp.path), "onnxruntime", **args) is None  # nothing saved
    rlx.load(mlp.path, engine="onnxruntime", cache_dir=tmp_path / "cache")
    assert warm.load_warm(str(mlp.path), "onnxruntime", **args) is not None
    assert warm.load_warm(str(mlp.path), "numpy", **args) is None
    assert warm.load_warm(str(mlp.path), "auto", **args) is None  # auto has not chosen
    # another prepack mode never takes the warm path: it has no saved copy to use
    model = rlx.load(mlp.path, engine="onnxruntime", prepack="off", cache_dir=args["cache_dir"])
    assert model.runner.prepack == "off" and model.runner.summary is not None


def test_a_fifo_gives_no_warm_load_and_never_blocks(tmp_path):
    """What is not a regular file is left to the full load (which refuses it) unread."""
    import os

    fifo = tmp_path / "model.rlx"
    os.mkfifo(fifo)
    assert warm.load_warm(str(fifo), "onnxruntime", threads=None, precision="exact",
                          cache_dir=tmp_path / "cache") is None
