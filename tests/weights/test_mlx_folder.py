"""MLX model folders (config.json `quantization`, safetensors triples written by `mlx`
itself) through load_weights and the bake: NO-GO keeps them packed as DequantMatMul, GO
decodes them; outputs checked against `mlx.core.quantized_matmul` / `dequantize`, and the
.rlx and every .rlxp container/tier run identically."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import numpy as np
import pytest

from rlx import BakeOptions, BakeProfile, bake_bundle
from rlx.artifact import read_rlx, read_rlxp, write_rlx, write_rlxp
from rlx.errors import BindingError, WeightError
from rlx.ir import Activation, BinaryOp, Graph, Shape
from rlx.ir.ops.dequant import DequantMatMul
from rlx.ir.ops.shaping import Transpose
from rlx.runtime import Session
from rlx.weights import load_weights

mx = pytest.importorskip("mlx.core")

K, H, N = 256, 128, 32
SCHEMES = [("affine", 4, 64), ("affine", 3, 32), ("affine", 8, 128), ("affine", 2, 64),
           ("affine", 6, 32), ("mxfp4", None, None), ("mxfp8", None, None)]


def mlx_folder(tmp: Path, mode: str, bits, group, dtype=mx.float32) -> tuple[Path, dict]:
    """Two quantized Linear layers and a dense bias, saved by mlx with the config MLX-LM
    writes; returns the folder and the quantized parts for the oracle."""
    rng = np.random.default_rng(zlib.crc32(f"{mode}{bits}{group}".encode()))
    layers = {"l1": (rng.standard_normal((H, K)) * 0.1), "l2": (rng.standard_normal((N, H)) *
                                                               0.1)}
    arrays, parts = {}, {}
    kwargs = {"mode": mode} | ({"bits": bits, "group_size": group} if bits else {})
    for base, w in layers.items():
        q = mx.quantize(mx.array(w.astype(np.float32)).astype(dtype), **kwargs)
        parts[base] = q
        arrays[f"{base}.weight"] = q[0]
        arrays[f"{base}.scales"] = q[1]
        if mode == "affine":
            arrays[f"{base}.biases"] = q[2]
    arrays["l1.bias"] = mx.array(rng.standard_normal(H).astype(np.float32)).astype(dtype)
    folder = tmp / f"mlx-{mode}-{bits}-{group}"
    folder.mkdir()
    mx.save_safetensors(str(folder / "model.safetensors"), arrays)
    quant = {"group_size": group or (16 if mode == "nvfp4" else 32), "bits": bits or
             (8 if mode == "mxfp8" else 4)} | ({"mode": mode} if mode != "affine" else {})
    (folder / "config.json").write_text(json.dumps({"model_type": "toy", "quantization": quant}))
    return folder, {"parts": parts, "kwargs": kwargs,
                    "bias": np.array(arrays["l1.bias"].astype(mx.float32))}


def mlp(transposed: bool) -> Graph:
    """x -> relu(x @ W1^T + b1) -> @ W2^T, with MLX's [out, in] weights (through Transpose)
    or the [in, out] matrices MatMul reads directly."""
    g = Graph("mlx-mlp")
    x = g.input("x", Shape(("batch", K)))

    def linear(h, base, k, n):
        if transposed:
            w = g.param(f"{base}.weight", Shape((n, k)))
            return g.matmul(h, g.add_node(Transpose((1, 0)), [w]))
        return g.matmul(h, g.param(f"{base}.weight", Shape((k, n))))

    h = linear(x, "l1", K, H)
    h = g.unary(Activation.RELU, g.binary(BinaryOp.ADD, h, g.param("l1.bias", Shape((H,)))))
    g.set_outputs([linear(h, "l2", H, N)])
    return g


def oracle(info: dict, x: np.ndarray) -> np.ndarray:
    kwargs, parts = info["kwargs"], info["parts"]
    h = mx.quantized_matmul(mx.array(x), *parts["l1"], transpose=True, **kwargs)
    h = mx.maximum(h.astype(mx.float32) + mx.array(info["bias"]), 0)
    return np.array(mx.quantized_matmul(h, *parts["l2"], transpose=True, **kwargs)
                    .astype(mx.float32))


def run(file, x):
    return Session().compile(file.into_runtime_graph()).run({"x": x})[0]


@pytest.mark.parametrize(("mode", "bits", "group"), SCHEMES)
@pytest.mark.parametrize("transposed", [True, False])
def test_no_go_keeps_packs_and_matches_quantized_matmul(tmp_path, mode, bits, group,
                                                        transposed):
    folder, info = mlx_folder(tmp_path, mode, bits, group)
    bundle = load_weights(folder, "auto")
    assert not bundle.verdict.go and bundle.info.has_packs
    label = f"mlx_affine/{bits}/{group}" if mode == "affine" else f"mlx_{mode}/32"
    assert {w.name: w.encoding for w in bundle.packed}["l1.weight"] == label
    assert {w.name: w.shape for w in bundle.packed}["l1.weight"] == (H, K)
    file, report = bake_bundle(mlp(transposed), bundle)
    ops = [n.op for n in file.graph.nodes()]
    dq = [op for op in ops if isinstance(op, DequantMatMul)]
    assert len(dq) == 2 and all(str(op.scheme) == label for op in dq)
    assert not any(isinstance(op, Transpose) for op in ops)
    assert {w.name: w.encoding for w in file.weights}["l1.weight"] == label
    x = np.random.default_rng(1).standard_normal((3, K)).astype(np.float32)
    ours = run(file, x)
    np.testing.assert_allclose(ours, oracle(info, x), rtol=1e-4, atol=1e-4)
    write_rlx(tmp_path / "m.rlx", file)
    np.testing.assert_array_equal(run(read_rlx(tmp_path / "m.rlx"), x), ours)
    for container, name in (("flat", "m.rlxp"), ("zip", "m.rlxp.zip"), ("dir", "mdir")):
        for tier in ("hot", "warm", "cold"):
            write_rlxp(tmp_path / name, file, container, tier=tier)
            np.testing.assert_array_equal(run(read_rlxp(tmp_path / name, verify="full"), x),
                                          ours)


@pytest.mark.parametrize("profile", [BakeProfile.EXACT, BakeProfile.SIZE])
def test_an_explicit_packed_policy_keeps_mlx_packs_under_any_profile(tmp_path, profile):
    folder, info = mlx_folder(tmp_path, "affine", 4, 64)
    opts = BakeOptions.from_profile(profile)
    file, _ = bake_bundle(mlp(True), load_weights(folder, "packed", opts), opts)
    assert {w.name: w.encoding for w in file.weights}["l1.weight"] == "mlx_affine/4/64"
    x = np.random.default_rng(3).standard_normal((2, K)).astype(np.float32)
    # size stores the dense f32 bias as f16 (its rounding: ~1e-3 relative)
    tol = 1e-4 if profile is BakeProfile.EXACT else 2e-2
    np.testing.assert_allclose(run(file, x), oracle(info, x), rtol=tol, atol=tol)


@pytest.mark.parametrize(("mode", "bits", "group"), SCHEMES[:1] + SCHEMES[-2:])
def test_go_dequantizes_like_mlx(tmp_path, mode, bits, group):
    folder, info = mlx_folder(tmp_path, mode, bits, group)
    bundle = load_weights(folder, "f32")
    assert bundle.verdict.go and not bundle.packed
    parts = info["parts"]["l1"]
    expected = np.array(mx.dequantize(*parts, **info["kwargs"]).astype(mx.float32))
    np.testing.assert_array_equal(bundle.tensors["l1.weight"], expected)
    file, _ = bake_bundle(mlp(True), bundle)
    assert not any(isinstance(n.op, DequantMatMul) for n in file.graph.nodes())
    x = np.random.default_rng(2).standard_normal((2, K)).astype(np.float32)
    np.testing.assert_allclose(run(file, x), oracle(info, x), rtol=1e-4, atol=1e-4)


def test_policy_rules_and_the_safetensors_path(tmp_path):
    folder, _ = mlx_folder(tmp_path, "affine", 4, 64, mx.bfloat16)
    assert not load_weights(folder, "packed").verdict.go
    # the quant passes need f32 weights: auto decodes for them (reference rule 1); an
    # explicit packed keeps the packs (the passes take the dense weights only)
    size = BakeOptions.from_profile(BakeProfile.SIZE)
    assert load_weights(folder, "auto", size).verdict.go
    assert not load_weights(folder, "packed", size).verdict.go
    via_file = load_weights(folder / "model.safetensors", "auto")
    assert {w.name for w in via_file.packed} >= {"l1.weight", "l1.scales", "l1.biases"}
    assert via_file.tensors["l1.bias"].dtype.name == "bfloat16"  # dense keeps its dtype
    scales = {w.name: w for w in via_file.packed}["l1.scales"]
    assert scales.encoding == "bf16" and scales.shape == (H, K // 64)


def test_bad_folders_are_refused(tmp_path):
    folder, _ = mlx_folder(tmp_path, "affine", 4, 64)
    config = folder / "config.json"
    config.write_text(json.dumps({"quantization": {"group_size": 64, "bits": 5}}))
    with pytest.raises(WeightError, match="5 bits"):
        load_weights(folder, "auto")
    config.write_text(json.dumps({"quantization": {"group_size": 32, "bits": 4}}))
    with pytest.raises(WeightError, match="do not fit"):
        load_weights(folder, "auto")
    config.write_text(json.dumps({"quantization": {"group_size": 64, "bits": 4,
                                                   "mode": "mxfp4"}}))
    with pytest.raises(WeightError, match="mxfp4"):
        load_weights(folder, "auto")


def test_a_packed_weight_read_by_another_op_is_refused(tmp_path):
    folder, _ = mlx_folder(tmp_path, "affine", 4, 64)
    g = Graph("bad")
    x = g.input("x", Shape((2, H)))
    w = g.param("l1.weight", Shape((H, K)))
    g.set_outputs([g.matmul(x, w), g.unary(Activation.RELU, w)])
    bundle = load_weights(folder, "auto")
    with pytest.raises(BindingError, match="l1.weight"):
        bake_bundle(g, bundle)
