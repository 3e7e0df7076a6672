"""Safetensors reader: native dtypes, memory-mapped views, and the format's rules enforced.

Files are written by the `safetensors` package (or byte by byte for corrupt ones); values are
checked against the arrays written and against the package's own loader.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from safetensors import SafetensorError, safe_open
from safetensors.numpy import load_file, save_file

from rlx.errors import WeightError
from rlx.weights import WeightPathKind, load_weights
from tests.weights.support import is_mapped, raw_safetensors

RNG = np.random.default_rng(11)
ARRAYS = {
    "w": RNG.standard_normal((3, 4)).astype(np.float32),
    "half": RNG.standard_normal(5).astype(np.float16),
    "brain": RNG.standard_normal((2, 2)).astype(ml_dtypes.bfloat16),
    "pos": np.arange(7, dtype=np.int64),
    "codes": np.array([-128, 0, 127], dtype=np.int8),
    "ids": np.array([[1, 2], [3, 4]], dtype=np.int32),
    "mask": np.array([True, False, True]),
    "bytes": np.arange(6, dtype=np.uint8).reshape(2, 3),
    "wide": RNG.standard_normal(3),
    "scalar": np.array(2.5, dtype=np.float32),
    "empty": np.zeros((0, 3), dtype=np.float32),
}


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit-equal, dtype and shape included (bfloat16 compared through its bits)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    path = tmp_path_factory.mktemp("st") / "model.safetensors"
    save_file(ARRAYS, str(path))
    return path


def test_native_dtypes_shapes_and_values(written):
    bundle = load_weights(written)
    assert sorted(bundle.tensors) == sorted(ARRAYS)
    assert bundle.packed == []
    for name, want in ARRAYS.items():
        assert _same(bundle.tensors[name], want), name
    assert bundle.tensors["pos"].dtype == np.int64  # fix 9.9: integers stay integers
    assert bundle.info.path_kind is WeightPathKind.SAFETENSORS
    assert bundle.info.has_native_half and not bundle.info.has_packs
    assert bundle.source == str(written)


def test_agrees_with_the_package(written):
    theirs = load_file(str(written))
    ours = load_weights(written).tensors
    assert all(_same(ours[name], theirs[name]) for name in theirs)


def test_tensors_are_read_only_views_of_a_map(written):
    for name, array in load_weights(written).tensors.items():
        assert not array.flags.owndata and not array.flags.writeable, name
        assert is_mapped(array), name


def test_empty_file_gives_empty_bundle(tmp_path):
    save_file({}, str(tmp_path / "e.safetensors"))
    assert load_weights(tmp_path / "e.safetensors").tensors == {}


def test_metadata_is_accepted(tmp_path):
    path = tmp_path / "m.safetensors"
    save_file({"a": np.ones(2, np.float32)}, str(path), metadata={"format": "np"})
    assert list(load_weights(path).tensors) == ["a"]


def _f32(offsets, shape=(2,)):
    return {"dtype": "F32", "shape": list(shape), "data_offsets": list(offsets)}


R = raw_safetensors
DUPLICATE = ('{"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}, '
             '"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}')
CORRUPT = {  # case -> (file bytes, what the error says)
    "too short": (b"\x01\x02", "too short for the 8-byte header length"),
    "header past end": (R({}, header_len=1000), "header length 1000 exceeds the file"),
    "header over limit": (R({}, header_len=1 << 40), "exceeds the 100000000-byte limit"),
    "not json": (R("{not json"), "header is not valid JSON"),
    "not utf-8": (R(b"{\xff}"), "header is not valid JSON"),
    "not an object": (R("[1, 2]"), "header is not a JSON object"),
    "duplicate names": (R(DUPLICATE, b"\0"), "duplicate key"),
    "entry not object": (R({"a": 3}), "entry 'a' is not an object"),
    "negative dim": (R({"a": _f32((0, 8), (-2,))}, bytes(8)), "shape \\[-2\\]"),
    "reversed offsets": (R({"a": _f32((8, 0))}, bytes(8)), "bad data_offsets"),
    "size clash": (R({"a": _f32((0, 4))}, bytes(4)), "F32\\[2\\] needs 8 bytes"),
    "overlap": (R({"a": _f32((0, 8)), "b": _f32((4, 12))}, bytes(12)), "overlaps"),
    "gap": (R({"a": _f32((0, 8)), "b": _f32((12, 20))}, bytes(20)), "gap at data bytes"),
    "trailing bytes": (R({"a": _f32((0, 8))}, bytes(12)), "cover 8 data bytes, .* holds 12"),
    "truncated data": (R({"a": _f32((0, 8))}, bytes(4)), "cover 8 data bytes, .* holds 4"),
    "bad metadata": (R({"__metadata__": {"k": 1}}), "__metadata__ must map strings"),
}
# serde_json keeps the last of two equal keys; rlx refuses the ambiguity instead.
PACKAGE_ACCEPTS = {"duplicate names"}


@pytest.mark.parametrize("case", CORRUPT)
def test_corrupt_files_are_refused(tmp_path, case):
    data, match = CORRUPT[case]
    path = tmp_path / "bad.safetensors"
    path.write_bytes(data)
    with pytest.raises(WeightError, match=f"corrupt safetensors file {re.escape(str(path))}: "
                                          f".*{match}"):
        load_weights(path)
    if case in PACKAGE_ACCEPTS:
        return
    # the package itself refuses the file too
    with pytest.raises(SafetensorError), safe_open(str(path), framework="numpy") as f:
        [f.get_tensor(k) for k in f.keys()]  # noqa: SIM118  (a safe_open handle, not a dict)


@pytest.mark.parametrize("dtype", ["F8_E4M3", "C64", "Q4"])
def test_unsupported_dtype_is_named(tmp_path, dtype):
    header = {"x": {"dtype": dtype, "shape": [8], "data_offsets": [0, 8]}}
    path = tmp_path / "f8.safetensors"
    path.write_bytes(raw_safetensors(header, bytes(8)))
    with pytest.raises(WeightError, match=f"tensor 'x' in {path} has unsupported safetensors "
                                          f"dtype '{dtype}'"):
        load_weights(path)
