"""GGUF reader: files written by `gguf.GGUFWriter`, values checked against the `gguf` package.

Shapes: a tensor written from a numpy array of shape S is stored with `ne = reversed(S)`
and read back as S (numpy shape = reversed(ne)).
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import gguf
import ml_dtypes
import numpy as np
import pytest
from gguf.quants import dequantize, quantize

from rlx.codecs import Encoding
from rlx.errors import WeightError
from rlx.ir.ops.dequant import DequantMatMul
from rlx.weights import WeightPathKind, load_weights
from tests.support import run_op
from tests.weights.support import is_mapped

Q = gguf.GGMLQuantizationType
RNG = np.random.default_rng(21)
DENSE = {
    "f32": RNG.standard_normal((3, 2, 4)).astype(np.float32),
    "f16": RNG.standard_normal((5, 8)).astype(np.float16),
    "pos": np.arange(6, dtype=np.int32),
    "big_ids": np.arange(4, dtype=np.int64) * 2**40,
    "i8": np.array([-3, 0, 7], dtype=np.int8),
}
# logical (numpy) values of the block-quantized tensors, rows of K along the last axis
PACKS = {
    "q8": (Q.Q8_0, RNG.standard_normal((6, 64)).astype(np.float32)),
    "tq2": (Q.TQ2_0, RNG.integers(-1, 2, (3, 256)).astype(np.float32)),
}
BF16 = RNG.standard_normal((2, 16)).astype(np.float32)


def _write(path, dense=DENSE, packs=PACKS, bf16=True):
    w = gguf.GGUFWriter(str(path), "test")
    for name, value in dense.items():
        w.add_tensor(name, value)
    if bf16:
        w.add_tensor("bf16", quantize(BF16, Q.BF16), raw_dtype=Q.BF16)
    for name, (qtype, value) in packs.items():
        w.add_tensor(name, quantize(value, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("gguf") / "model.gguf")


def test_stored_dims_are_reversed_numpy_shapes(model):
    stored = {t.name: [int(d) for d in t.shape] for t in gguf.GGUFReader(model).tensors}
    assert stored["f32"] == [4, 2, 3] and stored["q8"] == [64, 6]
    bundle = load_weights(model)
    assert bundle.tensors["f32"].shape == (3, 2, 4) and bundle.tensors["q8"].shape == (6, 64)


def test_dense_tensors_native_and_mapped(model):
    bundle = load_weights(model)
    for name, value in DENSE.items():
        got = bundle.tensors[name]
        assert got.dtype == value.dtype and got.shape == value.shape, name
        np.testing.assert_array_equal(got, value)
        assert is_mapped(got) and not got.flags.owndata and not got.flags.writeable, name
    bf16 = bundle.tensors["bf16"]
    assert bf16.dtype == ml_dtypes.bfloat16 and bf16.shape == BF16.shape
    np.testing.assert_array_equal(bf16.astype(np.float32), dequantize(
        quantize(BF16, Q.BF16), Q.BF16))
    assert bundle.info.path_kind is WeightPathKind.GGUF
    assert bundle.info.has_packs and bundle.info.has_native_half


def test_go_decodes_packs_like_the_package(model):
    bundle = load_weights(model)
    assert bundle.verdict.go and bundle.packed == []
    for name, (qtype, value) in PACKS.items():
        want = dequantize(quantize(value, qtype), qtype)
        got = bundle.tensors[name]
        assert got.dtype == np.float32 and got.shape == value.shape
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(bundle.tensors["tq2"], PACKS["tq2"][1])  # ternary: lossless


@pytest.mark.parametrize("policy", ["packed", "auto"])
def test_no_go_keeps_packs_as_raw_blocks(model, policy):
    bundle = load_weights(model, policy)
    assert not bundle.verdict.go
    packed = {w.name: w for w in bundle.packed}
    assert sorted(packed) == sorted(PACKS)
    assert not set(packed) & set(bundle.tensors)  # fix 9.11: never both
    assert sorted(bundle.tensors) == sorted([*DENSE, "bf16"])
    for name, (qtype, value) in PACKS.items():
        w = packed[name]
        assert w.encoding == f"gguf_{qtype.name.lower()}" and w.shape == value.shape
        assert w.data.dtype == np.uint8 and w.data.ndim == 1 and is_mapped(w.data)
        assert w.data.tobytes() == quantize(value, qtype).tobytes()


@pytest.mark.parametrize("profile_opts", [SimpleNamespace(ternary=True, quant=False),
                                          SimpleNamespace(ternary=False, quant=True)])
def test_rewrites_decode_packs_under_auto_but_an_explicit_packed_keeps_them(model,
                                                                             profile_opts):
    bundle = load_weights(model, "auto", profile_opts)
    assert bundle.verdict.go and bundle.packed == []
    assert bundle.tensors["q8"].dtype == np.float32
    kept = load_weights(model, "packed", profile_opts)
    assert not kept.verdict.go and sorted(w.name for w in kept.packed) == sorted(PACKS)


@pytest.mark.parametrize("scheme, name", [(Encoding.GGUF_Q8_0, "q8"),
                                          (Encoding.GGUF_TQ2_0, "tq2")])
def test_kept_packs_run_in_dequant_matmul(model, scheme, name):
    """A GGUF [N, K] pack is the BT stream DequantMatMul takes: y = x @ W^T."""
    w = next(p for p in load_weights(model, "packed").packed if p.name == name)
    n, k = w.shape
    x = RNG.standard_normal((2, k)).astype(np.float32)
    (out,) = run_op(DequantMatMul(scheme, n=n), [x, w.data], constant=[False, True])
    qtype = PACKS[name][0]
    wt = dequantize(w.data.reshape(n, -1), qtype).astype(np.float64)  # [N, K]
    np.testing.assert_allclose(out, x.astype(np.float64) @ wt.T, rtol=1e-4, atol=1e-4)


def test_other_quant_types_decode_or_are_refused(tmp_path):
    value = RNG.standard_normal((2, 64)).astype(np.float32)
    path = _write(tmp_path / "q4.gguf", dense={},
                  packs={"a": (Q.Q4_0, value), "b": (Q.Q5_1, RNG.standard_normal((1, 32))),
                         "c": (Q.Q8_0, value)}, bf16=False)
    bundle = load_weights(path)
    np.testing.assert_array_equal(bundle.tensors["a"],
                                  dequantize(quantize(value, Q.Q4_0), Q.Q4_0))
    assert bundle.tensors["b"].shape == (1, 32) and bundle.tensors["b"].dtype == np.float32
    with pytest.raises(WeightError, match=f"{re.escape(str(path))}: tensors of type "
                                          "gguf_q4_0, gguf_q5_1 cannot be kept packed"):
        load_weights(path, "packed")


def test_plain_file_auto_is_go(tmp_path):
    path = _write(tmp_path / "plain.gguf", packs={}, bf16=False)
    bundle = load_weights(path, "auto")
    assert bundle.verdict.go and not bundle.info.has_packs and bundle.packed == []


@pytest.mark.parametrize("damage", ["magic", "empty", "truncated header", "truncated data",
                                    "bad version"])
def test_corrupt_files_are_refused(model, tmp_path, damage):
    raw = model.read_bytes()
    data = {
        "magic": b"GGUX" + raw[4:],
        "empty": b"",
        "truncated header": raw[:40],
        "truncated data": raw[:-100],
        "bad version": raw[:4] + (99).to_bytes(4, "little") + raw[8:],
    }[damage]
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(WeightError, match=f"corrupt GGUF file {re.escape(str(path))}: "):
        load_weights(path)


def test_type_the_package_cannot_decode_is_named(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "q81.gguf"), "test")
    w.add_tensor("z", np.zeros((1, 40), np.uint8), raw_dtype=Q.Q8_1)  # one 32-value block
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(WeightError, match="cannot decode GGUF Q8_1 tensor 'z' in .*q81.gguf"):
        load_weights(tmp_path / "q81.gguf")
