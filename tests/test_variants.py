"""onnxruntime's variants of the real models (tests/variants.py): each imported, baked with
one profile (the script's table runs all of them), written, read, run, and compared with
onnxruntime running the same file, by the issue's tolerances."""

from __future__ import annotations

import pytest

from rlx import BakeProfile
from rlx.errors import UnsupportedOpError
from tests.real_models import MODELS
from tests.variants import INTEGER, VARIANTS, run_variant, variant_path

pytestmark = pytest.mark.slow

NCHWC = {"ppocr-cls", "nudenet-320n", "captcha-crnn", "orientation-lcnet"}
"""Models whose ORT_ENABLE_ALL file holds onnxruntime's CPU-specific NCHWc layout."""

CASES = [(m, v) for m in MODELS for v in VARIANTS]
PROFILES = list(BakeProfile)


@pytest.mark.parametrize("model,variant", CASES)
def test_variant_matches_onnxruntime(tmp_path, model, variant):
    # one profile per variant, rotating, so every profile runs on every kind of variant
    profile = PROFILES[CASES.index((model, variant)) % len(PROFILES)]
    if profile is BakeProfile.SIZE:
        profile = BakeProfile.EXACT  # Q8_0 re-quantises weights: judged in the table only
    if variant == "ort-all" and model in NCHWC:
        with pytest.raises(UnsupportedOpError, match="ORT_ENABLE_EXTENDED"):
            run_variant(model, variant, profile, tmp_path, seeds=(0,))
        return
    result = run_variant(model, variant, profile, tmp_path, seeds=(0,))
    # quantised variants pass against onnxruntime on the file, or on its uint8 re-encoding
    # (the same model, free of onnxruntime's AVX2 uint8 x int8 saturation)
    assert result.ok(variant in INTEGER), result


def test_variants_are_cached():
    path = variant_path("ppocr-cls", "ort-extended")
    assert path.exists() and path.stat().st_size > 0
