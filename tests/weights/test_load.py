"""`load_weights` dispatch: extensions, folders, policy spelling, and its path errors."""

from __future__ import annotations

import re

import numpy as np
import pytest
from safetensors.numpy import save_file

from rlx.errors import WeightError
from rlx.weights import (
    WeightBundle,
    WeightLoadPolicy,
    WeightPathKind,
    load_weights,
    load_weights_f32,
)

EXPECTED = re.escape("expected .safetensors, .npz, .npy, .gguf or .dduf")


def test_bundle_defaults_keep_plain_construction_working():
    bundle = WeightBundle(tensors={"w": np.ones(2)})
    assert bundle.packed == [] and bundle.source == "" and bundle.verdict is None
    assert bundle.info is None


def test_missing_file(tmp_path):
    path = tmp_path / "nope.safetensors"
    with pytest.raises(WeightError, match=f"weights file {re.escape(str(path))} does not exist"):
        load_weights(path)


def test_no_extension(tmp_path):
    path = tmp_path / "weights"
    path.write_bytes(b"x")
    with pytest.raises(WeightError,
                       match=f"weights path has no extension: {re.escape(str(path))}; {EXPECTED}"):
        load_weights(path)


@pytest.mark.parametrize("name", ["w.bin", "w.pt", "w.json"])
def test_unknown_extension(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(b"x")
    suffix = re.escape(path.suffix)
    with pytest.raises(WeightError, match=f"unsupported weights extension {suffix} on "
                                          f"{re.escape(str(path))}; {EXPECTED}"):
        load_weights(path)


def test_extension_case_is_ignored(tmp_path):
    np.save(tmp_path / "w.npy", np.ones(2, np.float32))
    (tmp_path / "w.npy").rename(tmp_path / "W.NPY")
    assert list(load_weights(tmp_path / "W.NPY").tensors) == ["W"]


def test_policy_given_as_text(tmp_path):
    save_file({"a": np.ones(2, np.float16)}, str(tmp_path / "h.safetensors"))
    bundle = load_weights(str(tmp_path / "h.safetensors"), "Keep-Packed")
    assert not bundle.verdict.go and bundle.info.has_native_half
    assert bundle.tensors["a"].dtype == np.float16  # dense tensors stay native either way
    with pytest.raises(WeightError, match="unknown --weights-policy x"):
        load_weights(tmp_path / "h.safetensors", "x")


def test_load_weights_f32_is_the_f32_first_tensors(tmp_path):
    save_file({"a": np.arange(3, dtype=np.int64)}, str(tmp_path / "i.safetensors"))
    tensors = load_weights_f32(tmp_path / "i.safetensors")
    assert list(tensors) == ["a"] and tensors["a"].dtype == np.int64
    assert load_weights(tmp_path / "i.safetensors").verdict.reason == \
        "weights-policy=f32 (explicit)"
    assert WeightLoadPolicy.F32_FIRST.value == "f32"


def test_directory_merges_weight_files(tmp_path):
    save_file({"a": np.ones(2, np.float32)}, str(tmp_path / "model-00001.safetensors"))
    save_file({"b": np.zeros(3, np.int8)}, str(tmp_path / "model-00002.safetensors"))
    np.savez(tmp_path / "extra.npz", c=np.ones(1, np.float64))
    (tmp_path / "model.json").write_text("{}")  # not a weights file: ignored
    (tmp_path / "sub").mkdir()
    bundle = load_weights(tmp_path)
    assert sorted(bundle.tensors) == ["a", "b", "c"]
    assert bundle.tensors["b"].dtype == np.int8
    assert bundle.info.path_kind is WeightPathKind.DIRECTORY


def test_directory_name_clash(tmp_path):
    save_file({"a": np.ones(2, np.float32)}, str(tmp_path / "x.safetensors"))
    np.savez(tmp_path / "y.npz", a=np.ones(2, np.float32))
    with pytest.raises(WeightError, match="tensor 'a' is in both .*x.safetensors and .*y.npz"):
        load_weights(tmp_path)


def test_directory_without_weight_files(tmp_path):
    (tmp_path / "readme.txt").write_text("hi")
    with pytest.raises(WeightError, match="no weights files \\(.*\\) in directory"):
        load_weights(tmp_path)
