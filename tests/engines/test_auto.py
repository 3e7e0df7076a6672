"""engine="auto": measures once, caches per artifact/machine/versions, numpy fallback,
never bf16 unless precision="fast", and a warm load of an onnxruntime choice skips onnx."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import rlx
from rlx.engines import auto, registry
from rlx.engines.fingerprint import default_cache_dir
from tests.engines.conftest import feeds, write_mlp


def _cache(tmp_path) -> dict:
    return json.loads((tmp_path / "cache" / "engines.json").read_text())


def test_measures_once_then_reads_the_cache(tmp_path, monkeypatch, caplog):
    mlp = write_mlp(tmp_path / "mlp.rlx")
    timed: list[str] = []
    real = auto._measure

    def counting(runners, feeds_, outputs):
        timed.extend(runners)
        return real(runners, feeds_, outputs)

    monkeypatch.setattr(auto, "_measure", counting)
    with caplog.at_level(logging.INFO, logger="rlx.engines"):
        first = rlx.load(mlp.path, cache_dir=tmp_path / "cache")
    assert sorted(timed) == sorted(registry.available_engines())
    entry = next(iter(_cache(tmp_path).values()))
    assert entry["engine"] == first.engine and entry["how"] == "fastest"
    fastest = min(entry["measured_ms"], key=entry["measured_ms"].get)
    assert first.engine == fastest
    assert "auto: chose" in caplog.text
    timed.clear()
    second = rlx.load(mlp.path, cache_dir=tmp_path / "cache")
    assert timed == [] and second.engine == first.engine
    np.testing.assert_allclose(second.run(feeds())[1], mlp.oracle(feeds()["x"])[1],
                               rtol=1e-5, atol=1e-6)


class _Clocked:
    """A runner that costs `seconds` on a shared fake clock and records its turns."""

    def __init__(self, name: str, seconds: float, clock: list[float], turns: list[str]):
        self.name, self.seconds, self.clock, self.turns = name, seconds, clock, turns

    def run(self, feeds_, outputs):
        self.turns.append(self.name)
        self.clock[0] += self.seconds


def test_candidates_are_timed_in_turns_and_slow_ones_dropped():
    """A burst of other work hits every candidate alike: rounds alternate the engines, and
    one more than twice the fastest after two rounds is not timed further."""
    clock, turns = [0.0], []
    runners = {name: _Clocked(name, cost, clock, turns)
               for name, cost in (("onnxruntime", 0.004), ("openvino", 0.006),
                                  ("numpy", 0.030))}
    measured = auto._measure(runners, {}, [], clock=lambda: clock[0])
    assert turns[:6] == ["onnxruntime", "openvino", "numpy"] * 2
    assert turns.count("numpy") == 2 and "numpy" not in turns[6:]
    assert turns[6:8] == ["onnxruntime", "openvino"]
    assert turns.count("onnxruntime") == turns.count("openvino") == auto.RUNS
    assert measured == pytest.approx({"onnxruntime": 0.004, "openvino": 0.006,
                                      "numpy": 0.030})
    assert min(measured, key=measured.get) == "onnxruntime"


def test_timing_stops_at_the_budget():
    clock, turns = [0.0], []
    slow = auto.BUDGET_S  # one run per candidate uses its whole share of the budget
    runners = {n: _Clocked(n, slow, clock, turns) for n in ("onnxruntime", "openvino")}
    auto._measure(runners, {}, [], clock=lambda: clock[0])
    assert turns.count("onnxruntime") == turns.count("openvino") == 2  # two rounds at least


def test_key_follows_the_artifact_and_options(tmp_path):
    a = write_mlp(tmp_path / "a.rlx", seed=0).path
    b = write_mlp(tmp_path / "b.rlx", seed=1).path
    engines = registry.available_engines()
    key = auto.cache_key(str(a), engines, None, "exact")
    assert key != auto.cache_key(str(b), engines, None, "exact")
    assert key != auto.cache_key(str(a), engines, 2, "exact")
    assert key != auto.cache_key(str(a), engines, None, "fast")
    assert key == auto.cache_key(str(a), engines, None, "exact")


def test_exact_never_picks_bf16(tmp_path, monkeypatch):
    """Even when OpenVINO measures fastest, precision="exact" gets it in f32."""
    mlp = write_mlp(tmp_path / "mlp.rlx")
    monkeypatch.setattr(auto, "_measure", lambda runners, f, o: {
        name: 0.001 if name == "openvino" else 1.0 for name in runners})
    model = rlx.load(mlp.path, cache_dir=tmp_path / "cache")
    assert (model.engine, model.precision) == ("openvino", "exact")
    hint = str(model.runner.compiled.get_property("INFERENCE_PRECISION_HINT"))
    assert "f32" in hint or "float32" in hint
    fast = rlx.load(mlp.path, cache_dir=tmp_path / "cache", precision="fast")
    assert (fast.engine, fast.precision) == ("openvino", "fast")


def test_numpy_is_the_fallback(tmp_path, monkeypatch):
    mlp = write_mlp(tmp_path / "mlp.rlx")
    monkeypatch.setattr(auto, "available_engines", lambda: ["numpy"])
    assert rlx.load(mlp.path, cache_dir=tmp_path / "cache").engine == "numpy"


def test_feeds_that_fail_on_numpy_mean_unmeasured(tmp_path, monkeypatch):
    """The measurement proves nothing when the reference cannot run the feeds."""
    mlp = write_mlp(tmp_path / "mlp.rlx")
    real = auto._build

    class Failing:
        name = "numpy"

        def run(self, feeds_, outputs):
            raise ValueError("branch needs a real input")

    def build(name, *args):
        return Failing() if name == "numpy" else real(name, *args)

    monkeypatch.setattr(auto, "_build", build)
    model = rlx.load(mlp.path, cache_dir=tmp_path / "cache")
    assert model.engine == auto.PREFERENCE[0]
    assert next(iter(_cache(tmp_path).values()))["how"].startswith("unmeasured")


def test_default_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "rlx"


def test_warm_onnxruntime_load_does_not_import_onnx(tmp_path):
    mlp = write_mlp(tmp_path / "mlp.rlx")
    code = ("import sys, rlx, numpy as np\n"
            f"m = rlx.load({str(mlp.path)!r}, cache_dir={str(tmp_path / 'c')!r})\n"
            "m.run({'x': np.ones((1, 64), np.float32)})\n"
            "print(m.engine, 'onnx' in sys.modules)")
    env = {**os.environ}
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, env=env)
    key = next(iter(json.loads((tmp_path / "c" / "engines.json").read_text())))
    data = json.loads((tmp_path / "c" / "engines.json").read_text())
    data[key]["engine"] = "onnxruntime"  # whatever was fastest here, warm onnxruntime
    if not list((tmp_path / "c" / "onnxruntime").glob("*/model.onnx")):
        pytest.fail("onnxruntime's prepacked model was not cached next to the choice")
    (tmp_path / "c" / "engines.json").write_text(json.dumps(data))
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env=env).stdout.split()
    assert out == ["onnxruntime", "False"]


def test_a_signature_beside_the_file_is_part_of_the_cache_key(tmp_path):
    """The artifact checksum is xxhash; a look-alike with the same checksum must not share
    cache entries (auto's choice, onnxruntime's saved model) with the signed file."""
    from rlx.artifact.signing import generate_keypair, sign_artifact
    from rlx.engines.fingerprint import artifact_checksum

    mlp = write_mlp(tmp_path / "mlp.rlx")
    unsigned = artifact_checksum(str(mlp.path))
    sign_artifact(mlp.path, generate_keypair())
    signed = artifact_checksum(str(mlp.path))
    assert signed != unsigned and signed.startswith(unsigned)


def test_feeds_that_fail_everywhere_take_the_preferred_engine_that_builds(tmp_path, monkeypatch):
    """Zeros at symbolic dims of 1 fit no engine on some models (a detector's Concat, a
    VAD's branches): every engine that builds is still a candidate, taken by preference,
    never numpy because it was the fallback name."""
    mlp = write_mlp(tmp_path / "mlp.rlx")
    real = auto._build

    def build(name, *args):
        runner = real(name, *args)

        class Failing:
            def __init__(self):
                self.name, self.precision, self.inner = runner.name, runner.precision, runner

            def run(self, feeds_, outputs):
                raise ValueError("these feeds do not fit the model")

        return Failing()

    monkeypatch.setattr(auto, "_build", build)
    model = rlx.load(mlp.path, cache_dir=tmp_path / "cache")
    installed = registry.available_engines()
    assert model.engine == next(n for n in auto.PREFERENCE if n in installed)
    assert next(iter(_cache(tmp_path).values()))["how"].startswith("unmeasured")


def _calls_per_run(model, feeds_) -> int:
    """Python and C function calls one `run` makes (a count, not a clock)."""
    count = [0]

    def profile(frame, event, arg):
        if event in ("call", "c_call"):
            count[0] += 1

    model.run(feeds_)  # warm: first-run allocations and plans
    sys.setprofile(profile)
    try:
        model.run(feeds_)
    finally:
        sys.setprofile(None)
    return count[0]


def test_auto_runs_add_nothing_to_the_chosen_engines(tmp_path):
    """A model auto picked runs the very runner the engine's own `rlx.load` builds: no
    per-call work of its own, from the measuring load or from the cache."""
    mlp = write_mlp(tmp_path / "mlp.rlx")
    for _ in range(2):
        chosen = rlx.load(mlp.path, cache_dir=tmp_path / "cache")
        direct = rlx.load(mlp.path, engine=chosen.engine, cache_dir=tmp_path / "cache")
        assert type(chosen.runner) is type(direct.runner)
        assert _calls_per_run(chosen, feeds()) == _calls_per_run(direct, feeds())
