"""`.npy` / `.npz` readers: native dtypes, `.npy` memory-mapped, pickles and junk refused."""

from __future__ import annotations

import pickle
import re

import ml_dtypes
import numpy as np
import pytest

from rlx.errors import WeightError
from rlx.weights import WeightPathKind, load_weights
from tests.weights.support import is_mapped

RNG = np.random.default_rng(3)
ARRAYS = {
    "w": RNG.standard_normal((2, 3)).astype(np.float32),
    "half": RNG.standard_normal(4).astype(np.float16),
    "pos": np.arange(5, dtype=np.int64),
    "mask": np.array([True, False]),
    "u8": np.arange(3, dtype=np.uint8),
    "scalar": np.array(7, dtype=np.int32),
}


def _check_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        np.testing.assert_array_equal(got[name], value)


@pytest.mark.parametrize("compressed", [False, True])
def test_npz_members_by_name_native_dtypes(tmp_path, compressed):
    path = tmp_path / "w.npz"
    (np.savez_compressed if compressed else np.savez)(path, **ARRAYS)
    bundle = load_weights(path)
    _check_same(bundle.tensors, ARRAYS)
    assert bundle.info.path_kind is WeightPathKind.NPZ and bundle.info.has_native_half


def test_npz_positional_names(tmp_path):
    np.savez(tmp_path / "p.npz", np.ones(2, np.float32), np.zeros(1, np.int8))
    assert sorted(load_weights(tmp_path / "p.npz").tensors) == ["arr_0", "arr_1"]


def test_npy_is_one_mapped_tensor_named_after_the_stem(tmp_path):
    value = RNG.standard_normal((4, 2)).astype(np.float32)
    np.save(tmp_path / "embed.npy", value)
    bundle = load_weights(tmp_path / "embed.npy")
    _check_same(bundle.tensors, {"embed": value})
    array = bundle.tensors["embed"]
    assert is_mapped(array) and not array.flags.owndata and not array.flags.writeable
    assert bundle.info.path_kind is WeightPathKind.NPY


def _npy_bytes(value: np.ndarray, tmp_path) -> bytes:
    np.save(tmp_path / "scratch.npy", value, allow_pickle=True)
    return (tmp_path / "scratch.npy").read_bytes()


BAD = {
    "object array": lambda t: _npy_bytes(np.array([1, "a"], dtype=object), t),
    "pickle": lambda t: pickle.dumps({"w": [1.0, 2.0]}),
    "empty file": lambda t: b"",
    "truncated": lambda t: _npy_bytes(np.arange(100.0), t)[:300],
    "junk": lambda t: b"not numpy at all",
}


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
@pytest.mark.parametrize("case", BAD)
def test_bad_files_are_refused(tmp_path, case, suffix):
    path = tmp_path / f"bad{suffix}"
    path.write_bytes(BAD[case](tmp_path))
    with pytest.raises(WeightError, match=re.escape(str(path))):
        load_weights(path)


def test_npz_with_an_object_member_is_refused(tmp_path):
    np.savez(tmp_path / "o.npz", ok=np.ones(2), bad=np.array([None, 1], dtype=object))
    with pytest.raises(WeightError, match="corrupt .npz file .*allow_pickle"):
        load_weights(tmp_path / "o.npz")


def test_npz_and_npy_mixed_up(tmp_path):
    np.save(tmp_path / "a.npy", np.ones(2))
    (tmp_path / "a.npy").rename(tmp_path / "a.npz")
    with pytest.raises(WeightError, match="is an .npy file, not an .npz archive"):
        load_weights(tmp_path / "a.npz")
    np.savez(tmp_path / "b.npz", x=np.ones(2))
    (tmp_path / "b.npz").rename(tmp_path / "b.npy")
    with pytest.raises(WeightError, match="is an .npz archive, not an .npy file"):
        load_weights(tmp_path / "b.npy")


@pytest.mark.parametrize("value, match", [
    (np.ones(2, ml_dtypes.bfloat16), "unsupported dtype \\|V2 \\(numpy saves bfloat16"),
    (np.zeros(2, [("a", "<i4"), ("b", "<f4")]), "unsupported dtype \\[\\('a', '<i4'\\), .*\\]$"),
    (np.ones(2, np.complex64), "unsupported dtype complex64"),
])
def test_dtypes_rlx_cannot_hold_are_refused(tmp_path, value, match):
    np.save(tmp_path / "v.npy", value)
    with pytest.raises(WeightError, match=f"tensor 'v' in .*v.npy has {match}"):
        load_weights(tmp_path / "v.npy")
