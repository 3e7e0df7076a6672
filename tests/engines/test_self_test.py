"""`rlx.load(path, self_test=True)`: the bundled self-test run on every engine, a broken
engine hand-off caught with a typed error, the pass cached by content (never by path), and
every MODELS.md model passing on every engine in the exact and size profiles, its stored
references checked against onnxruntime on the original ONNX file."""

from __future__ import annotations

import shutil

import numpy as np
import onnxruntime as ort
import pytest

import rlx
from rlx import BakeOptions, bake, write_rlx
from rlx.engines import numpy_engine, onnxruntime_engine, openvino_engine
from rlx.engines.self_test import CACHE_FILE
from rlx.errors import SelfTestError
from tests.baking.models import mlp_graph, mlp_weights
from tests.engines.conftest import ENGINES, require

RUNNERS = {"numpy": numpy_engine.NumpyRunner, "onnxruntime": onnxruntime_engine.OrtRunner,
           "openvino": openvino_engine.OpenVinoRunner}


def _feeds(seed: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((32, 784)).astype(np.float32)}


@pytest.fixture(scope="module")
def tested(tmp_path_factory):
    path = tmp_path_factory.mktemp("self-test") / "mlp.rlx"
    file, _ = bake(mlp_graph(), mlp_weights(), BakeOptions(self_test=[_feeds(1), _feeds(2)]))
    write_rlx(path, file)
    return path


def _perturbing(monkeypatch, engine: str, seen: list[str]) -> None:
    """The engine's runner hands back its first output with one element moved by 1% of the
    output's largest magnitude (100x the allowance for engines' float order)."""
    runner = RUNNERS[engine]
    run = runner.run

    def broken(self, feeds, outputs):
        seen.append(engine)
        outs = [np.array(o) for o in run(self, feeds, outputs)]
        outs[0].flat[7] += 0.01 * np.abs(outs[0]).max()
        return outs

    monkeypatch.setattr(runner, "run", broken)


@pytest.mark.parametrize("engine", ENGINES)
def test_passes_and_catches_a_broken_hand_off(tested, tmp_path, monkeypatch, engine):
    require(engine)
    model = rlx.load(tested, engine=engine, self_test=True, cache_dir=tmp_path / "a")
    assert model.engine == engine
    seen: list[str] = []
    _perturbing(monkeypatch, engine, seen)
    miss = (rf"self-test failed on {engine}: output 'logits' is [0-9.]+ from its reference "
            r"at sample \d, tolerance [0-9.e-]+$")
    with pytest.raises(SelfTestError, match=miss):
        rlx.load(tested, engine=engine, self_test=True, cache_dir=tmp_path / "b")
    assert seen == [engine, engine]  # each of the two samples ran once
    rlx.load(tested, engine=engine, cache_dir=tmp_path / "c")  # not asked: not run


def test_a_pass_is_cached_by_content_not_by_path(tested, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    rlx.load(tested, engine="numpy", self_test=True, cache_dir=cache)
    assert (cache / CACHE_FILE).is_file()
    seen: list[str] = []
    _perturbing(monkeypatch, "numpy", seen)
    copy = tmp_path / "copy.rlx"
    shutil.copyfile(tested, copy)
    rlx.load(copy, engine="numpy", self_test=True, cache_dir=cache)  # same bytes: cached
    assert seen == []
    other, _ = bake(mlp_graph(), mlp_weights(), BakeOptions(self_test=[_feeds(3)]))
    write_rlx(copy, other)  # the same path, other content: the cache does not apply
    with pytest.raises(SelfTestError):
        rlx.load(copy, engine="numpy", self_test=True, cache_dir=cache)
    assert seen == ["numpy"]


def test_a_miss_is_never_cached(tested, tmp_path, monkeypatch):
    seen: list[str] = []
    _perturbing(monkeypatch, "numpy", seen)
    for _ in range(2):
        with pytest.raises(SelfTestError):
            rlx.load(tested, engine="numpy", self_test=True, cache_dir=tmp_path)
    assert len(seen) == 4  # both samples, at both loads


def test_a_file_without_one_is_a_typed_error(tmp_path):
    path = tmp_path / "plain.rlx"
    write_rlx(path, bake(mlp_graph(), mlp_weights())[0])
    with pytest.raises(SelfTestError, match="has no bundled self-test"):
        rlx.load(path, engine="numpy", self_test=True, cache_dir=tmp_path)


def test_encrypted_and_signed_files(tested, tmp_path):
    from rlx import generate_keypair, sign_artifact

    key = generate_keypair()
    secret = tmp_path / "secret.rlx"
    write_rlx(secret, rlx.read_rlx(tested), password="pw")
    sign_artifact(secret, key)
    model = rlx.load(secret, engine="onnxruntime", password="pw", self_test=True,
                     trusted_keys=[key.public_key()], cache_dir=tmp_path)
    assert model.engine == "onnxruntime"


def _reference_outputs(path, inputs):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["exact", "size"])
@pytest.mark.parametrize("name", ["ppocr-cls", "silero-vad", "minilm-l3", "nudenet-320n",
                                  "captcha-crnn", "orientation-lcnet"])
def test_real_models_pass_on_every_engine(tmp_path, name, profile):
    from rlx.onnx import import_onnx
    from tests.real_models import FEEDS, fetch, import_kwargs

    source = fetch(name)
    graph, bindings = import_onnx(source, **import_kwargs(source))
    opts = BakeOptions.from_profile(profile).replace(self_test=[FEEDS[name](0),
                                                                FEEDS[name](1)])
    path = tmp_path / f"{name}.rlx"
    write_rlx(path, bake(graph, bindings, opts)[0])
    test = rlx.read_rlx(path).self_test.load()
    for inputs, outputs in zip(test.inputs, test.outputs, strict=True):  # the model's own
        for ours, theirs in zip(outputs, _reference_outputs(source, inputs), strict=True):
            scale = max(float(np.max(np.abs(theirs))), 1.0)
            np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4 * scale)
    for engine in ENGINES:  # no prepacked copy saved: the self-test is what is tested here
        require(engine)
        assert rlx.load(path, engine=engine, self_test=True, cache_dir=tmp_path / engine,
                        prepack="off").engine == engine


def test_the_warm_load_stands_once_the_content_passed_on_onnxruntime(tested, tmp_path,
                                                                      monkeypatch):
    """The header-only load (no file opened) is taken with self_test=True only after this
    content passed on onnxruntime: before that the full load runs the test."""
    cache = tmp_path / "cache"
    rlx.load(tested, engine="onnxruntime", cache_dir=cache)  # saves the prepacked copy
    seen: list[str] = []
    _perturbing(monkeypatch, "onnxruntime", seen)
    with pytest.raises(SelfTestError):  # saved copy, but no pass yet: tested in full
        rlx.load(tested, engine="onnxruntime", self_test=True, cache_dir=cache)
    monkeypatch.undo()
    full = rlx.load(tested, engine="onnxruntime", self_test=True, cache_dir=cache)
    assert full._file is not None
    warm = rlx.load(tested, engine="onnxruntime", self_test=True, cache_dir=cache)
    assert warm._file is None  # the header alone, the pass from the cache
