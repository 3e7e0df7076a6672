"""onnxruntime's variants of the real models (tests/variants.py): each imported, baked with
one profile (the script's table runs all of them), written, read, run, and compared with
onnxruntime running the same file, by the issue's tolerances."""

from __future__ import annotations

import pytest

import rlx
from rlx import BakeOptions, BakeProfile, bake, write_rlx
from rlx.errors import UnsupportedOpError
from rlx.onnx import import_onnx
from tests.engines.conftest import require
from tests.real_models import MODELS, fetch, import_kwargs
from tests.variants import INTEGER, VARIANTS, compare, feeds_for, oracle, run_variant, variant_path

pytestmark = pytest.mark.slow

NCHWC = {"ppocr-cls", "nudenet-320n", "captcha-crnn", "orientation-lcnet"}
"""Models whose ORT_ENABLE_ALL file holds onnxruntime's CPU-specific NCHWc layout."""

CASES = [(m, v) for m in MODELS for v in VARIANTS]
PROFILES = list(BakeProfile)


@pytest.mark.parametrize("model,variant", CASES)
def test_variant_matches_onnxruntime(model, variant):
    # one profile per variant, rotating, so every profile runs on every kind of variant
    profile = PROFILES[CASES.index((model, variant)) % len(PROFILES)]
    if profile in (BakeProfile.SIZE, BakeProfile.FAST):
        profile = BakeProfile.EXACT  # lossy (Q8_0, int8): judged in their own tests
    if variant == "ort-all" and model in NCHWC:
        with pytest.raises(UnsupportedOpError, match="ORT_ENABLE_EXTENDED"):
            run_variant(model, variant, profile, seeds=(0,))
        return
    result = run_variant(model, variant, profile, seeds=(0,))
    # quantised variants pass against onnxruntime on the file, or on its uint8 re-encoding
    # (the same model, free of onnxruntime's AVX2 uint8 x int8 saturation)
    assert result.ok(variant in INTEGER), result


def test_variants_are_cached():
    path = variant_path("ppocr-cls", "ort-extended")
    assert path.exists() and path.stat().st_size > 0


@pytest.mark.parametrize("variant", ["dynamic-tensor", "dynamic-channel"])
@pytest.mark.parametrize("engine", ["onnxruntime", "openvino"])
def test_conv_integer_variant_runs_on_engine(tmp_path, engine, variant):
    """silero-vad's ConvInteger nodes (exported as ConvInteger) run through the engine,
    matching onnxruntime on the variant and the numpy engine by the quantised tolerance."""
    require(engine)
    path = variant_path("silero-vad", variant)
    graph, bindings = import_onnx(path, **import_kwargs(fetch("silero-vad")))
    out = tmp_path / "model.rlx"
    write_rlx(out, bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))[0])
    model, numpy_model = rlx.load(out, engine=engine, threads=2), rlx.load(out, engine="numpy")
    want = oracle(path)
    for feeds in feeds_for("silero-vad", (0,)):
        got = model.run(feeds)
        assert compare("silero-vad", got, want.run(None, feeds)).ok(True)
        assert compare("silero-vad", got, numpy_model.run(feeds)).ok(True)


def test_a_qdq_transformer_rounds_its_products_like_onnxruntime():
    """minilm-l3 static-qdq on the feeds where one BLAS product over K moved a quantisation
    step (cosine 0.991-0.992 with onnxruntime as written): its products read
    DequantizeLinear, so they sum K in onnxruntime's blocks (`MatMul.mlas_blocks`)."""
    result = run_variant("minilm-l3", "static-qdq", BakeProfile.EXACT, seeds=(2, 4, 8))
    assert result.ort_plain.cosine >= 0.9999, result


@pytest.mark.parametrize("prepack", ["mapped", "heap"])
def test_qoperator_variant_runs_on_onnxruntime(tmp_path, prepack):
    """captcha-crnn's QOperator variant, its QLinearConvs exported as such. onnxruntime 1.32
    cannot read back the prepacked model it saves of them (rlx then prepacks in memory),
    and its layout optimiser reads an initializer it transposes from the stub's file, not
    from the value bound in place (rlx then gives the weights as in-memory files): the
    engine runs it, matching onnxruntime on the variant."""
    path = variant_path("captcha-crnn", "static-qop")
    graph, bindings = import_onnx(path, **import_kwargs(fetch("captcha-crnn")))
    out = tmp_path / "model.rlx"
    write_rlx(out, bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))[0])
    model = rlx.load(out, engine="onnxruntime", threads=1, prepack=prepack,
                     cache_dir=tmp_path / "cache")
    want = oracle(path)
    for feeds in feeds_for("captcha-crnn", (0,)):
        assert compare("captcha-crnn", model.run(feeds), want.run(None, feeds)).ok(True)


@pytest.mark.parametrize("model", ["ppocr-cls", "orientation-lcnet"])
def test_qoperator_variant_runs_on_openvino(tmp_path, model):
    """OpenVINO has no com.microsoft ops: it runs the bodies of the kept QLinear ops
    (rlx.ir.Composite), whose dequantisation centres in int32 (OpenVINO's rewrite of the
    float one failed to compile ppocr-cls and gave orientation-lcnet an empty output)."""
    require("openvino")
    path = variant_path(model, "static-qop")
    graph, bindings = import_onnx(path, **import_kwargs(fetch(model)))
    out = tmp_path / "model.rlx"
    write_rlx(out, bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))[0])
    engine = rlx.load(out, engine="openvino", threads=1)
    want = oracle(path)
    for feeds in feeds_for(model, (0, 1)):
        assert compare(model, engine.run(feeds), want.run(None, feeds)).ok(True)
