"""rlx.load / Model on every engine: same results as a float64 oracle, same feed checks and
messages, output selection, threads, encrypted files, zero-copy weights, packed weights."""

from __future__ import annotations

import threading

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize, quantize

import rlx
from rlx.artifact import RlxFile, write_rlx
from rlx.codecs import Encoding
from rlx.engines import registry
from rlx.errors import EncryptedFileError, EngineError, InputError
from rlx.ir import DType, Graph, Shape
from rlx.ir.ops.dequant import DequantMatMul
from tests.engines.conftest import ENGINES, feeds, require, write_mlp

pytestmark = pytest.mark.parametrize("engine", ENGINES)


def _close(got, want, tol=2e-5):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=tol, atol=tol)


def test_runs_like_the_oracle(engine, mlp):
    require(engine)
    model = rlx.load(mlp.path, engine=engine)
    assert model.engine == engine and model.precision == "exact"
    for batch in (1, 5):  # a symbolic dim takes any size
        x = feeds(batch)
        _close(model.run(x), mlp.oracle(x["x"]))


def test_io_specs_and_output_selection(engine, mlp):
    require(engine)
    model = rlx.load(mlp.path, engine=engine)
    assert [(s.name, s.shape, s.dtype) for s in model.inputs] == [
        ("x", ("batch", 64), np.dtype(np.float32))]
    names = [s.name for s in model.outputs]
    assert names[1] == "probs" and model.outputs[1].shape == ("batch", 10)
    x = feeds()
    h, probs = mlp.oracle(x["x"])
    _close(model.run(x, ["probs", names[0]]), [probs, h])
    _close(model.run(x, outputs=["probs"]), [probs])
    with pytest.raises(InputError, match="unknown output.*'nope'"):
        model.run(x, ["nope"])


BAD_FEEDS = [
    ({}, "missing input(s) 'x'"),
    ({"x": np.zeros((1, 64), np.float32), "y": 1}, "unknown input(s) 'y'"),
    ({"x": np.zeros((1, 64), np.float64)}, "input 'x': expected f32[batch, 64], got f64[1, 64]"),
    ({"x": np.zeros((1, 63), np.float32)}, "(axis 1: expected 64, got 63)"),
    ({"x": np.zeros(64, np.float32)}, "got f32[64] (expected rank 2, got rank 1)"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_FEEDS)
def test_feed_checks_are_rlx_s_own(engine, mlp, bad, message):
    """Every engine refuses the same feeds with the numpy runtime's message."""
    require(engine)
    model = rlx.load(mlp.path, engine=engine)
    with pytest.raises(InputError) as got:
        model.run(bad)
    assert message in str(got.value)
    with pytest.raises(InputError) as reference:
        rlx.load(mlp.path, engine="numpy").run(bad)
    assert str(got.value) == str(reference.value)


@pytest.mark.parametrize(("bad", "message"), BAD_FEEDS)
def test_feed_checks_hold_after_feeds_passed(engine, mlp, bad, message):
    """A passed feed set lets like ones skip the full check (`FeedChecker`): unlike ones
    still get it, whatever passed before."""
    require(engine)
    model = rlx.load(mlp.path, engine=engine)
    model.run(feeds(1))
    with pytest.raises(InputError) as got:
        model.run(bad)
    assert message in str(got.value)


def test_eight_threads_share_one_model(engine, mlp):
    require(engine)
    model = rlx.load(mlp.path, engine=engine, threads=1)
    inputs = [feeds(batch=1 + k % 3, seed=k) for k in range(8)]
    want = [mlp.oracle(x["x"]) for x in inputs]
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for _ in range(20):
                _close(model.run(inputs[k]), want[k])
        except BaseException as err:  # noqa: BLE001 - reported by the main thread
            errors.append(err)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_encrypted_files(engine, tmp_path):
    require(engine)
    mlp = write_mlp(tmp_path / "secret.rlx", password="pw")
    with pytest.raises(EncryptedFileError):
        rlx.load(mlp.path, engine=engine)
    model = rlx.load(mlp.path, engine=engine, password="pw")
    _close(model.run(feeds()), mlp.oracle(feeds()["x"]))


def _packed_file(path, scheme: Encoding, n: int = 48, k: int = 512):
    """x[., K] @ W with W^T packed by the gguf package, and W as gguf decodes it (float64)."""
    kind = {Encoding.GGUF_Q8_0: gguf.GGMLQuantizationType.Q8_0,
            Encoding.GGUF_TQ2_0: gguf.GGMLQuantizationType.TQ2_0}[scheme]
    rng = np.random.default_rng(3)
    wt = rng.standard_normal((n, k)).astype(np.float32)
    if scheme is Encoding.GGUF_TQ2_0:
        wt = np.sign(wt) * (rng.random((n, k)) > 0.3)
    packed = np.asarray(quantize(wt.reshape(-1), kind)).reshape(-1).view(np.uint8)
    w = dequantize(packed, kind).astype(np.float64).reshape(n, k).T
    g = Graph("packed")
    x = g.input("x", Shape(("m", k), DType.F32))
    y = g.add_node(DequantMatMul(scheme, n), [x, g.constant(packed, Shape((packed.size,),
                                                                         DType.U8))], name="y")
    g.set_outputs([y])
    write_rlx(path, RlxFile.from_baked(g, []))
    return w


@pytest.mark.parametrize("scheme", [Encoding.GGUF_Q8_0, Encoding.GGUF_TQ2_0])
def test_packed_weights_against_gguf(engine, tmp_path, scheme):
    """Q8_0 / TQ2_0 weights (MatMulNBits on onnxruntime, int8 decompression on OpenVINO)
    match x @ W with W decoded by the gguf package."""
    require(engine)
    w = _packed_file(tmp_path / "packed.rlx", scheme)
    model = rlx.load(tmp_path / "packed.rlx", engine=engine)
    x = np.random.default_rng(4).standard_normal((3, w.shape[0])).astype(np.float32)
    (got,) = model.run({"x": x})
    np.testing.assert_allclose(got, x.astype(np.float64) @ w, rtol=1e-3, atol=1e-3)
    if engine == "onnxruntime":
        assert any("MatMulNBits" in how for how in model.runner.summary.packed)
    if engine == "openvino":
        assert any("int8" in how for how in model.runner.summary.packed)


def test_missing_engine_is_one_line_with_the_pip_command(engine, mlp, monkeypatch):
    if engine == "numpy":
        return
    monkeypatch.setattr(registry, "is_installed", lambda name: name != engine)
    with pytest.raises(EngineError) as err:
        rlx.load(mlp.path, engine=engine)
    text = str(err.value)
    assert "\n" not in text and "pip install" in text and engine in text


def test_bad_engine_and_precision_names(engine, mlp):
    with pytest.raises(EngineError, match="unknown engine 'tvm'"):
        rlx.load(mlp.path, engine="tvm")
    with pytest.raises(EngineError, match="unknown precision 'half'"):
        rlx.load(mlp.path, engine=engine, precision="half")
