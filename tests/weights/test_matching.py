"""`likely_params`: the param a tensor matching no param's name most likely stands for."""

from __future__ import annotations

import numpy as np

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
