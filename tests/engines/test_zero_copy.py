"""Weights go to onnxruntime and OpenVINO without copies: the ONNX model onnxruntime loads
points into rlx's validated mapping of the .rlx file (an in-memory file, at the weights'
offsets), or (prepacked, the default) into its saved prepacked copy, and either way
onnxruntime's anonymous memory grows by far less than the weights; OpenVINO's Constants
sit inside the map."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rlx
from rlx.engines.mapping import address_of
from rlx.errors import EngineError
from rlx.ir.ops.sources import Constant
from tests.engines.conftest import require, write_mlp

BIG = {"k": 1024, "hidden": 4096, "n": 1024}  # 16 MiB + 16 MiB of f32 weights


@pytest.fixture(scope="module")
def mlps(tmp_path_factory) -> Path:
    """A folder with `big.rlx` (BIG) and `small.rlx`, written once for the module's tests
    (each writing its own copies wrote 0.27 GB)."""
    folder = tmp_path_factory.mktemp("zero-copy")
    write_mlp(folder / "small.rlx", k=1024, hidden=8, n=8)
    write_mlp(folder / "big.rlx", **BIG)
    return folder


def _weights(model) -> dict[int, np.ndarray]:
    graph = model.file.graph
    return {n.id: n.op.array(n.shape) for n in graph.nodes()
            if isinstance(n.op, Constant) and n.op.nbytes >= 1024}


def _in_mapping(model, array: np.ndarray) -> int | None:
    """The offset of `array`'s bytes in the artifact's validated mapping, if there."""
    base = np.frombuffer(model.file.origin.buffer, np.uint8)
    offset = address_of(array) - address_of(base)
    return offset if offset >= 0 and offset + array.nbytes <= base.nbytes else None


def test_onnxruntime_reads_the_weights_from_the_rlx_mapping(mlps):
    require("onnxruntime")
    path = mlps / "big.rlx"
    model = rlx.load(path, engine="onnxruntime", prepack="off")
    runner = model.runner
    assert not runner.in_memory  # nothing handed over as a copy
    weights = _weights(model)
    assert len(runner.mapped) == len(weights) == 3  # w1, b1, w2
    raw = path.read_bytes()
    mapped_bytes = {raw[off:off + length] for off, length in runner.mapped.values()}
    assert mapped_bytes == {w.tobytes() for w in weights.values()}
    # and the artifact's own arrays are views of the file's map at those offsets
    assert {_in_mapping(model, w) for w in weights.values()} == {
        off for off, _ in runner.mapped.values()}
    # onnxruntime computes on those very bytes: its initializers are the artifact's arrays
    assert {v.data_ptr() for v in runner.bound} == {address_of(w) for w in weights.values()}
    x = {"x": np.ones((1, BIG["k"]), np.float32)}
    np.testing.assert_allclose(model.run(x)[0], rlx.load(path, engine="numpy").run(x)[0],
                               rtol=1e-4, atol=1e-4)


_RSS_PROBE = """
import json, sys, numpy as np, rlx
from rlx.engines.mapping import anon_rss_bytes
small, big, prepack = sys.argv[1:4]
x = {"x": np.ones((1, 1024), np.float32)}
rlx.load(small, engine="onnxruntime", prepack=prepack).run(x)  # libraries and arenas warm
before = anon_rss_bytes()
model = rlx.load(big, engine="onnxruntime", prepack=prepack)
model.run(x)
print(json.dumps({"growth": anon_rss_bytes() - before,
                  "weights": model.file.meta.constant_bytes}))
"""


def _rss_growth(mlps: Path, cache: Path, prepack: str) -> tuple[int, int]:
    """The anonymous memory a fresh process grows by loading and running big.rlx (its
    engine caches in `cache`), and the weights' bytes."""
    import os

    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    out = subprocess.run([sys.executable, "-c", _RSS_PROBE, str(mlps / "small.rlx"),
                          str(mlps / "big.rlx"), prepack], capture_output=True, text=True,
                         check=True, env=env).stdout
    data = json.loads(out.strip().splitlines()[-1])
    return data["growth"], data["weights"]


@pytest.mark.slow
def test_onnxruntime_anonymous_memory_grows_by_far_less_than_the_weights(mlps, tmp_path):
    require("onnxruntime")
    growth, weights = _rss_growth(mlps, tmp_path / "cache", "off")
    assert growth < 0.10 * weights, (growth, weights)


@pytest.mark.slow
def test_mapped_prepacking_keeps_most_of_the_copy_off_the_heap(mlps, tmp_path):
    """onnxruntime's own prepacking copies every MatMul weight to the heap; the saved
    prepacked model maps them. (onnxruntime 1.32 still reads one of this MLP's two 16 MiB
    originals to the heap; on the real models the growth is 2-5% of the weights:
    docs/engines.md.)"""
    require("onnxruntime")
    cache = tmp_path / "cache"
    heap, weights = _rss_growth(mlps, cache, "heap")
    assert heap > 0.9 * weights, (heap, weights)  # the probe has teeth
    _rss_growth(mlps, cache, "mapped")  # the first load saves the prepacked model
    assert list((cache / "rlx" / "onnxruntime").glob("*/model.data"))
    mapped, _ = _rss_growth(mlps, cache, "mapped")
    assert mapped < 0.6 * heap, (mapped, heap)


def test_prepacked_model_is_cached_and_runs_as_the_unpacked(tmp_path):
    """The saved prepacked model gives the same outputs as the artifact's own weights,
    is made once, and a damaged copy is rebuilt rather than trusted."""
    require("onnxruntime")
    mlp = write_mlp(tmp_path / "mlp.rlx")
    x = {"x": np.random.default_rng(1).standard_normal((3, 64)).astype(np.float32)}
    want = rlx.load(mlp.path, engine="onnxruntime", prepack="off").run(x)
    first = rlx.load(mlp.path, engine="onnxruntime", cache_dir=tmp_path / "c")
    assert first.runner.cached is not None and first.runner.summary is not None
    folder = first.runner.cached
    warm = rlx.load(mlp.path, engine="onnxruntime", cache_dir=tmp_path / "c")
    assert warm.runner.cached == folder and warm.runner.summary is None  # no export
    for got, ref in zip(warm.run(x), want):
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    (folder / "model.onnx").write_bytes(b"not a model")
    again = rlx.load(mlp.path, engine="onnxruntime", cache_dir=tmp_path / "c")
    assert again.runner.summary is not None  # rebuilt
    np.testing.assert_allclose(again.run(x)[0], want[0], rtol=1e-6, atol=1e-6)


def test_encrypted_files_are_never_cached_on_disk(tmp_path):
    require("onnxruntime")
    from rlx.artifact.crypto import encrypt_file

    mlp = write_mlp(tmp_path / "mlp.rlx")
    with open(tmp_path / "enc.rlx", "wb") as out:
        encrypt_file(mlp.path, out, "pw")
    model = rlx.load(tmp_path / "enc.rlx", engine="onnxruntime", password="pw",
                     cache_dir=tmp_path / "c", prepack="mapped")
    assert model.runner.cached is None and model.runner.prepack == "off"
    assert not (tmp_path / "c").exists()


def test_unknown_prepack_mode_is_refused(tmp_path):
    require("onnxruntime")
    mlp = write_mlp(tmp_path / "mlp.rlx")
    with pytest.raises(EngineError, match="unknown prepack mode 'sometimes'"):
        rlx.load(mlp.path, engine="onnxruntime", prepack="sometimes")


def test_openvino_constants_are_the_mapped_bytes(mlps):
    require("openvino")
    model = rlx.load(mlps / "big.rlx", engine="openvino")
    consts = [op for op in model.runner.model.get_ops() if op.get_type_name() == "Constant"
              and op.get_friendly_name() in model.runner.arrays]
    # MatMul weights are inputs set to the mapped bytes (test_openvino_sharing.py)
    assert len(consts) + len(model.runner.served) == len(_weights(model)) == 3
    for op in consts:
        data = op.get_data()
        assert _in_mapping(model, data) is not None, op.get_friendly_name()
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
