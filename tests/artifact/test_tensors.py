"""`RlxFile.tensor(name)`: every weight back in its logical layout, whatever the profile,
encoding and memory mode, against the weights the model was baked from."""

from __future__ import annotations

import numpy as np
import pytest

from rlx import BakeOptions, BakeProfile, MemoryMode, bake
from rlx.artifact import read_rlx, write_rlx
from rlx.errors import ArtifactError
from tests.baking.models import mlp_graph, mlp_weights


def _q8_bound(w: np.ndarray) -> np.ndarray:
    """Q8_0 keeps each value within half a step of its 32-value block (blocks run along
    K of W^T, i.e. down each column of W), plus the f16 rounding of the block scale."""
    k, n = w.shape
    blocks = np.abs(w.T.reshape(n, k // 32, 32)).max(axis=2, keepdims=True)
    step = np.broadcast_to(blocks / 127, (n, k // 32, 32)).reshape(n, k).T
    return step * 0.5 + np.abs(w) * 2.0 ** -10 + 1e-7


@pytest.mark.parametrize("memory", list(MemoryMode))
@pytest.mark.parametrize("profile", [BakeProfile.MERGE, BakeProfile.EXACT, BakeProfile.SIZE])
def test_every_weight_comes_back(tmp_path, profile, memory):
    weights = mlp_weights()
    opts = BakeOptions.from_profile(profile).replace(memory=memory)
    baked, _ = bake(mlp_graph(), weights, opts)
    write_rlx(tmp_path / "m.rlx", baked)
    file = read_rlx(tmp_path / "m.rlx")
    assert {w.name for w in file.weights} == set(weights)
    for row in file.weights:
        value, original = file.tensor(row.name), weights[row.name]
        assert value.shape == original.shape and value.dtype == original.dtype
        if row.encoding == "gguf_q8_0":
            assert row.layout == "bt_nk"
            assert (np.abs(value - original) <= _q8_bound(original)).all()
        elif row.encoding == "f16":  # a bias of 64 values
            np.testing.assert_array_equal(value, original.astype(np.float16).astype(np.float32))
        else:  # f32 rows, and TQ2_0 of an exactly ternary weight: lossless
            np.testing.assert_array_equal(value, original)
        assert value.flags.c_contiguous and value.flags.writeable


def test_packed_rows_are_transposed_back():
    weights = mlp_weights()
    baked, _ = bake(mlp_graph(), weights, BakeOptions.from_profile(BakeProfile.SIZE))
    row = baked.weight("w2")
    assert row.layout == "bt_nk" and row.shape == weights["w2"].shape != weights["w2"].T.shape
    assert baked.tensor("w2").shape == weights["w2"].shape


def test_unknown_name_suggests_the_close_ones():
    baked, _ = bake(mlp_graph(), mlp_weights())
    with pytest.raises(ArtifactError, match=r"no weight named 'w1x'; did you mean w1"):
        baked.tensor("w1x")
