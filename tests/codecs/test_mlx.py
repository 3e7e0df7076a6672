"""MLX quantized weights decoded by rlx.codecs against the oracle `mlx` (mlx.core.quantize /
dequantize), every scheme rlx reads, on random and real-shaped weights and in the model's
float types."""

from __future__ import annotations

import numpy as np
import pytest

from rlx.codecs import Encoding, decode, encoded_nbytes, mlx_scheme
from rlx.codecs.mlx import AFFINE_BITS, AFFINE_GROUPS, MLX_LABELS

mx = pytest.importorskip("mlx.core")

FP_MODES = ("mxfp4", "mxfp8", "nvfp4")


def quantized(w: np.ndarray, mode: str, bits: int | None = None, group: int | None = None,
              dtype=None):
    kwargs = {"mode": mode}
    if bits:
        kwargs.update(bits=bits, group_size=group)
    array = mx.array(w)
    if dtype is not None:
        array = array.astype(dtype)
    parts = mx.quantize(array, **kwargs)
    reference = mx.dequantize(*parts, **kwargs).astype(mx.float32)
    return [np.array(p.astype(mx.float32) if p.dtype == mx.bfloat16 else p) for p in parts], \
        np.array(reference)


@pytest.mark.parametrize("bits", AFFINE_BITS)
@pytest.mark.parametrize("group", AFFINE_GROUPS)
def test_affine_matches_mlx_dequantize(bits, group):
    w = np.random.default_rng(bits * group).standard_normal((24, 256)).astype(np.float32)
    (codes, scales, biases), reference = quantized(w, "affine", bits, group)
    label = f"mlx_affine/{bits}/{group}"
    assert codes.nbytes == encoded_nbytes(label, w.size)
    ours = decode(label, codes, w.size, scales=scales, biases=biases).reshape(w.shape)
    np.testing.assert_array_equal(ours, reference)


@pytest.mark.parametrize("mode", FP_MODES)
def test_fp_modes_match_mlx_dequantize(mode):
    w = (np.random.default_rng(5).standard_normal((16, 512)) * 3).astype(np.float32)
    (codes, scales), reference = quantized(w, mode)
    scheme = mlx_scheme(f"mlx_{mode}")
    assert scheme is not None and codes.nbytes == encoded_nbytes(scheme.label, w.size)
    ours = decode(Encoding.parse(f"mlx_{mode}"), codes, w.size, scales=scales)
    np.testing.assert_array_equal(ours.reshape(w.shape), reference)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_scales_and_biases(dtype):
    """MLX models keep scales and biases in the model's type (f16 or bf16)."""
    w = np.random.default_rng(9).standard_normal((32, 128)).astype(np.float32)
    (codes, scales, biases), reference = quantized(w, "affine", 4, 64, getattr(mx, dtype))
    ours = decode("mlx_affine/4/64", codes, w.size, scales=scales, biases=biases)
    # mlx computes scale * q + bias in the half type, rlx in float32: within a half ulp
    np.testing.assert_allclose(ours.reshape(w.shape), reference, rtol=1e-2, atol=1e-2)


@pytest.mark.slow
def test_real_shaped_weights_and_quantized_matmul():
    """A 1024x4096 MLP projection as MLX models quantize it; the matmul against
    mx.quantized_matmul (x @ W.T with W quantized)."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((1024, 4096)) * 0.02).astype(np.float32)
    x = rng.standard_normal((3, 4096)).astype(np.float32)
    for mode, bits, group in (("affine", 4, 64), ("affine", 8, 32), ("affine", 3, 128),
                              ("mxfp4", None, None), ("mxfp8", None, None)):
        parts, reference = quantized(w, mode, bits, group)
        label = f"mlx_affine/{bits}/{group}" if mode == "affine" else f"mlx_{mode}"
        extra = {"scales": parts[1]} | ({"biases": parts[2]} if mode == "affine" else {})
        dense = decode(label, parts[0], w.size, **extra).reshape(w.shape)
        np.testing.assert_array_equal(dense, reference)
        kwargs = {"mode": mode} | ({"bits": bits, "group_size": group} if bits else {})
        expected = np.array(mx.quantized_matmul(
            mx.array(x), *(mx.array(p) for p in parts), transpose=True, **kwargs))
        np.testing.assert_allclose(x @ dense.T, expected, rtol=1e-4, atol=1e-3)


def test_labels_and_refusals():
    assert len(MLX_LABELS) == 18 and all(Encoding.parse(label).is_mlx for label in MLX_LABELS)
    assert mlx_scheme("mlx_affine/5/64") is None and mlx_scheme("mlx_mxfp4/64") is None
    with pytest.raises(Exception, match="scales"):
        decode("mlx_affine/4/64", np.zeros(32, np.uint8), 64)
    with pytest.raises(Exception, match="does not quantize"):
        from rlx.codecs import encode
        encode("mlx_mxfp4/32", np.zeros(32, np.float32))
