"""`likely_params`: the param a tensor matching no param's name most likely stands for."""

from __future__ import annotations

import numpy as np

from rlx.deferred import Computed
from rlx.weights.matching import likely_params

RNG = np.random.default_rng(0)
A = RNG.standard_normal((8, 4)).astype(np.float32)
B = RNG.standard_normal((8, 4)).astype(np.float32)


def test_the_param_whose_own_values_agree_as_they_are_or_transposed():
    tensors = {"a": A, "b": B, "w1": np.ascontiguousarray(B.T), "w2": A.copy()}
    shapes = {"a": (8, 4), "b": (8, 4)}
    assert likely_params(["w1", "w2"], tensors, shapes) == {
        "w1": "param 'b' transposed", "w2": "param 'a'"}


def test_a_lossy_copy_still_agrees_but_other_values_do_not():
    q = np.round(A * 64) / 64  # an encoding's rounding: well inside the 5% bound
    far = A + RNG.standard_normal(A.shape).astype(np.float32)
    tensors = {"a": A, "q": q.astype(np.float32), "far": far}
    assert likely_params(["q", "far"], tensors, {"a": (8, 4)}) == {"q": "param 'a'"}


def test_without_own_values_only_a_single_fitting_shape_is_named():
    tensors = {"w": A}
    assert likely_params(["w"], tensors, {"only": (4, 8)}) == {"w": "param 'only' transposed"}
    assert likely_params(["w"], tensors, {"one": (8, 4), "two": (4, 8)}) == {}
    assert likely_params(["w"], tensors, {"bias": (32,)}) == {}


class _RowsOnly(Computed):
    """A large weight that may be read a row at a time but never whole."""

    def read(self) -> np.ndarray:
        raise AssertionError(f"{self} read whole")


def test_large_tensors_are_compared_on_a_grid_never_read_whole():
    """A 2 GiB model's unused 256 MiB tensor once peaked a streaming bake at 1.6 GB: a hint
    reads a grid of rows and columns. A transposed copy within the bound agrees, another
    tensor of the same shape does not; the grid's verdict is the whole comparison's."""
    big = RNG.standard_normal((2048, 2304)).astype(np.float32)  # 18 MiB: over 16 MiB
    noisy = big + 0.01 * RNG.standard_normal(big.shape).astype(np.float32)
    other = RNG.standard_normal(big.shape).astype(np.float32)

    def rows_only(value: np.ndarray) -> _RowsOnly:
        return _RowsOnly(np.copy, (value,), (), value.shape, np.float32, rowwise=True)

    tensors = {"p": rows_only(big), "t": rows_only(np.ascontiguousarray(noisy.T)),
               "far": rows_only(other)}
    shapes = {"p": big.shape}
    assert likely_params(["t", "far"], tensors, shapes) == {"t": "param 'p' transposed"}
    whole = np.linalg.norm(noisy.astype(np.float64) - big) / np.linalg.norm(big)
    assert whole <= 0.05 < np.linalg.norm(other.astype(np.float64) - big) / np.linalg.norm(big)
