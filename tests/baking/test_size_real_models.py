"""Targets of the size profile on the six MODELS.md models (see tests/baking/size_real.py).

- models whose float weights are >= 90% Conv/MatMul/Gemm/Gather weights: size file
  <= 0.30x the exact file;
- calibrated on one input set at min cosine 0.9995: cosine >= 0.999 on held-out inputs
  (fresh seeds) for every output, against onnxruntime.
"""

from __future__ import annotations

import pytest

from tests.baking.size_real import MIN_COSINE, measure
from tests.real_models import MODELS

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", sorted(MODELS))
def test_size_profile_targets(name):
    result = measure(name)
    assert result.held_out_cosine >= 0.999, result
    assert result.calibration_cosine >= MIN_COSINE, result
    assert result.size_bytes < result.exact_bytes, result
    if result.linear_share >= 0.9:
        assert result.ratio <= 0.30, result
