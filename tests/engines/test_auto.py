"""engine="auto": measures once, caches per artifact/machine/versions, numpy fallback,
never bf16 unless precision="fast", and a warm load of an onnxruntime choice skips onnx."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import rlx
from rlx.engines import auto, cores, registry
from rlx.engines.fingerprint import default_cache_dir
from tests.engines.conftest import feeds, write_mlp


def _cache(tmp_path) -> dict:
    return json.loads((tmp_path / "cache" / "engines.json").read_text())


@pytest.fixture(autouse=True)
def _cores(monkeypatch) -> list[float]:
    """Two cores, and the other runnable threads this list's last item (quiet unless a test
    says otherwise): which candidates auto times follows the load, not this machine's."""
    load = [0.0]
    monkeypatch.setattr(cores, "usable_cores", lambda: 2)
    monkeypatch.setattr(cores, "others_load", lambda spare=None: load[-1])
    return load


def test_measures_once_then_reads_the_cache(tmp_path, monkeypatch, caplog):
    mlp = write_mlp(tmp_path / "mlp.rlx")
    timed: list[str] = []
    real = auto._measure

    def counting(runners, feeds_, outputs, **options):
        timed.extend(runners)
        return real(runners, feeds_, outputs, **options)

    monkeypatch.setattr(auto, "_measure", counting)
    monkeypatch.setattr(auto, "COLD_BUDGET_S", 1e9)  # a busy machine's builds leave all in
    with caplog.at_level(logging.INFO, logger="rlx.engines"):
        first = rlx.load(mlp.path, cache_dir=tmp_path / "cache")
    entry = next(iter(_cache(tmp_path).values()))
    assert sorted(timed) == sorted(registry.available_engines())
    assert entry["engine"] == first.engine and entry["how"] == "fastest"
    assert first.engine == auto._fastest(entry["measured_ms"])
    assert "auto: chose" in caplog.text
    timed.clear()
    second = rlx.load(mlp.path, cache_dir=tmp_path / "cache")
    assert timed == [] and second.engine == first.engine
    np.testing.assert_allclose(second.run(feeds())[1], mlp.oracle(feeds()["x"])[1],
                               rtol=1e-5, atol=1e-6)


def test_auto_says_it_measures_how_long_and_what_it_chose_on_a_terminal(tmp_path,
                                                                       monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    mlp = write_mlp(tmp_path / "mlp.rlx")
    terminal = Terminal()
    monkeypatch.setattr(auto.sys, "stderr", terminal)
    monkeypatch.setattr(auto, "COLD_BUDGET_S", 1e9)  # a busy machine's builds leave all in
    model = rlx.load(mlp.path, cache_dir=tmp_path / "cache")
    lines = terminal.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("rlx: auto: measuring ") and \
        f"at most {auto.COLD_BUDGET_S:.1f} s beyond building the one it picks" in lines[0]
    assert lines[1].startswith(f"rlx: auto: chose {model.engine}, fastest (")
    terminal.truncate(0)
    rlx.load(mlp.path, cache_dir=tmp_path / "cache")  # cached: nothing to wait for
    assert terminal.getvalue().strip("\0") == ""


def test_key_follows_the_artifact_and_options(tmp_path):
    from rlx.artifact.open import open_artifact

    a = open_artifact(write_mlp(tmp_path / "a.rlx", seed=0).path).origin.key
    b = open_artifact(write_mlp(tmp_path / "b.rlx", seed=1).path).origin.key
    engines = registry.available_engines()
    key = auto.cache_key(a, engines, None, "exact")
    assert key != auto.cache_key(b, engines, None, "exact")
    assert key != auto.cache_key(a, engines, 2, "exact")
    assert key != auto.cache_key(a, engines, None, "fast")
    assert key == auto.cache_key(a, engines, None, "exact")


def test_exact_never_picks_bf16(tmp_path, monkeypatch):
    """Even when OpenVINO measures fastest, precision="exact" gets it in f32."""
    mlp = write_mlp(tmp_path / "mlp.rlx")
    monkeypatch.setattr(auto, "_measure", lambda runners, f, o, **_: {
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
    data[key]["unbuilt"] = []  # a busy machine's cold budget may have left some unbuilt
    if not list((tmp_path / "c" / "onnxruntime").glob("*/model.onnx")):
        pytest.fail("onnxruntime's prepacked model was not cached next to the choice")
    (tmp_path / "c" / "engines.json").write_text(json.dumps(data))
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True, env=env).stdout.split()
    assert out == ["onnxruntime", "False"]


def test_a_checked_signature_is_part_of_the_cache_key(tmp_path):
    """The artifact checksum is xxhash; a look-alike with the same checksum must not share
    cache entries (auto's choice, onnxruntime's saved model) with the signed file: a load
    that checked a signature keys them by the signed statement's SHA-256 too."""
    from rlx.artifact.open import open_artifact
    from rlx.artifact.signing import generate_keypair, sign_artifact

    mlp = write_mlp(tmp_path / "mlp.rlx")
    unsigned = open_artifact(mlp.path).origin.key
    key = generate_keypair()
    sign_artifact(mlp.path, key)
    signed = open_artifact(mlp.path, trusted_keys=[key.public_key()]).origin.key
    assert signed != unsigned and signed.startswith(unsigned + "+sig:")


def test_feeds_that_fail_everywhere_take_the_preferred_engine_that_builds(tmp_path, monkeypatch):
    """Zeros at symbolic dims of 1 fit no engine on some models (a detector's Concat, a
    VAD's branches): every engine that builds is still a candidate, taken by preference,
    never numpy because it was the fallback name."""
    mlp = write_mlp(tmp_path / "mlp.rlx")
    _fail_runs(monkeypatch, "these feeds do not fit the model")
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


class _Free:
    def run(self, feeds_, outputs):
        return []


class _Saved(_Free):
    cached = "the folder of onnxruntime's saved model"


def _warm_up(build_seconds: dict[str, float], always: tuple[str, ...] = (),
             saved: bool = False) -> tuple[auto._WarmUp, list[str]]:
    """`_warm_up` over builds that cost `build_seconds` on a fake clock (onnxruntime's
    mapping a model it `saved`); the build order."""
    clock, order = [0.0], []

    def build(name):
        order.append(name)
        clock[0] += build_seconds[name]
        return _Saved() if saved else _Free()

    done = auto._warm_up(list(build_seconds), build, {}, [], "m.rlx", clock=lambda: clock[0],
                         always=always)
    return done, order


def test_the_cold_budget_holds_whichever_engine_is_picked():
    """Every build but the quickest counts (the pick is not known until the timing): the
    next is built only when, costing what the dearest so far did, it leaves MIN_TIMING_S
    of COLD_BUDGET_S; the builds it made stay within that whatever is then chosen."""
    room = auto.COLD_BUDGET_S - auto.MIN_TIMING_S
    dear = room + 0.1  # a first build this dear leaves no room for a second
    done, order = _warm_up({"onnxruntime": dear, "openvino": 0.1, "numpy": 0.1})
    assert order == ["onnxruntime"] and done.skipped == ["openvino", "numpy"]
    assert done.extra == 0.0
    # two builds of just over room / 2 fit (all but the quickest: one); a third does not
    half = room / 2 + 0.01
    done, order = _warm_up({"onnxruntime": half, "openvino": half, "numpy": 0.1})
    assert order == ["onnxruntime", "openvino"] and done.skipped == ["numpy"]
    cheap = room / 4
    done, order = _warm_up({"onnxruntime": cheap, "openvino": cheap, "numpy": cheap})
    assert order == ["onnxruntime", "openvino", "numpy"]
    assert done.extra == pytest.approx(2 * cheap) and done.extra <= room
    # memory="shared" may leave out every engine but numpy: numpy is built whatever it costs
    done, order = _warm_up({"onnxruntime": dear, "openvino": 0.1, "numpy": 0.1},
                           always=("numpy",))
    assert order == ["onnxruntime", "numpy"] and done.skipped == ["openvino"]


def test_onnxruntime_at_the_threads_that_fit_is_part_of_onnxruntimes_build():
    """It maps the model onnxruntime saved: built right after it, its seconds are
    onnxruntime's (the pick's own whichever of the two wins), and no other engine's build
    is predicted from them."""
    room = auto.COLD_BUDGET_S - auto.MIN_TIMING_S
    done, order = _warm_up({"onnxruntime": room / 2 + 0.01, auto.FITTED: 0.01,
                            "openvino": room / 2, "numpy": 0.1})
    assert order == ["onnxruntime", auto.FITTED, "openvino"] and done.skipped == ["numpy"]
    assert set(done.builds) == {"onnxruntime", "openvino"}
    assert done.builds["onnxruntime"] == pytest.approx(room / 2 + 0.02)
    assert done.extra == pytest.approx(room / 2 + 0.02)


def test_onnxruntime_at_the_threads_that_fit_over_its_saved_model_is_always_timed(
        monkeypatch):
    """Beside other work onnxruntime's first build (export, optimisation) can leave no
    room for another engine; a second session over the model it saved is a map, built
    whatever the budget, so the threads are timed even then (an export is not)."""
    dear = auto.COLD_BUDGET_S  # leaves no room for any other build
    done, order = _warm_up({"onnxruntime": dear, auto.FITTED: 0.01, "openvino": 0.1},
                           saved=True)
    assert order == ["onnxruntime", auto.FITTED] and done.skipped == ["openvino"]
    assert list(done.runners) == ["onnxruntime", auto.FITTED]
    done, order = _warm_up({"onnxruntime": dear, auto.FITTED: 0.01, "openvino": 0.1})
    assert order == ["onnxruntime"] and done.skipped == [auto.FITTED, "openvino"]


@pytest.mark.parametrize("costs", [
    {"onnxruntime": 0.9, "openvino": 0.3, "numpy": 0.2},
    {"onnxruntime": 0.2, "openvino": 0.3, "numpy": 1.4},
    {"onnxruntime": 0.4, "openvino": 1.2, "numpy": 0.1},
    {"onnxruntime": 1.6, "openvino": 0.1, "numpy": 0.1},
])
def test_builds_and_timing_stay_in_the_budget_beyond_any_one_build(costs, monkeypatch):
    """Whatever engine the timing then picks, the other builds and the timing stay within
    COLD_BUDGET_S when each build costs what the first predicted it to, or less (a build
    dearer than predicted cannot be cut short: the bound holds for predictable ones)."""
    done, _ = _warm_up(costs)
    spent = []
    monkeypatch.setattr(auto, "_measure", lambda runners, f, o, **options: (
        spent.append(options["budget"]) or {n: 1.0 for n in runners}))
    for pick in done.builds:
        auto._pick(done, {}, [])
        others = sum(done.builds.values()) - done.builds[pick]
        assert others + (spent[-1] if len(done.runners) > 1 else 0.0) <= auto.COLD_BUDGET_S


def test_the_timing_gets_what_the_builds_left(monkeypatch):
    budgets = []
    monkeypatch.setattr(auto, "_measure", lambda runners, f, o, **options: (
        budgets.append(options["budget"]) or {n: 1.0 for n in runners}))
    for spent, budget in [(0.2, auto.BUDGET_S), (1.2, auto.COLD_BUDGET_S - 1.2), (2.3, 0.0)]:
        w = auto._WarmUp(runners={"onnxruntime": _Free(), "openvino": _Free()},
                         warmed={"onnxruntime": 3.0, "openvino": 1.0},
                         builds={"onnxruntime": 0.1, "openvino": spent})
        auto._pick(w, {}, [])
        assert budgets.pop() == pytest.approx(budget)
    one = auto._WarmUp(runners={"onnxruntime": _Free()}, skipped=["openvino"])
    assert auto._pick(one, {}, []) == (
        "onnxruntime", "the only candidate left within the time bound", {})


def test_candidates_the_cold_budget_left_unbuilt_are_measured_at_later_loads(tmp_path,
                                                                             monkeypatch):
    """A busy machine's first build can leave no room for another: the choice is then
    provisional, and each later load measures what is left beside the cached pick, within
    the same budget, until every engine has been measured; then loads build one engine."""
    mlp = write_mlp(tmp_path / "mlp.rlx")
    installed = registry.available_engines()
    if len(installed) < 2:
        pytest.skip("needs two engines")
    built: list[list[str]] = []
    real = auto._build

    def build(name, *args):
        built[-1].append(name)
        return real(name, *args)

    monkeypatch.setattr(auto, "_build", build)
    entries, picks = [], []
    # the first load's budget affords no second build; the later loads' affords all
    for budget in (auto.MIN_TIMING_S, 1e9, 1e9):
        monkeypatch.setattr(auto, "COLD_BUDGET_S", budget)
        built.append([])
        model = rlx.load(mlp.path, cache_dir=tmp_path / "cache")
        entries.append(next(iter(_cache(tmp_path).values())))
        picks.append(model.engine)
        np.testing.assert_allclose(model.run(feeds())[1], mlp.oracle(feeds()["x"])[1],
                                   rtol=1e-5, atol=1e-6)
    first_pick = next(n for n in auto.PREFERENCE if n in installed)
    assert built[0] == [first_pick]
    assert sorted(entries[0]["unbuilt"]) == sorted(set(installed) - {first_pick})
    assert entries[0]["how"] == "the only candidate left within the time bound"
    # the second load builds the cached pick and every engine left unbuilt, and times them
    assert sorted(built[1]) == sorted(installed) and entries[1]["unbuilt"] == []
    assert entries[1]["how"] == "fastest" and set(entries[1]["measured_ms"]) == set(installed)
    # all measured: the cache is read and only the pick is loaded (onnxruntime's warm load
    # builds nothing)
    assert entries[2] == entries[1] and picks[2] == entries[1]["engine"]
    assert built[2] in ([], [picks[2]])


def test_a_later_load_that_builds_nothing_new_keeps_what_was_measured(tmp_path, monkeypatch):
    """A provisional choice (numpy left unbuilt) whose next load again builds only the
    cached pick times nothing: the entry stays as measured, and the load after that, with
    room, measures numpy beside the pick."""
    mlp = write_mlp(tmp_path / "mlp.rlx")
    if "openvino" not in registry.available_engines():
        pytest.skip("needs two engines beside numpy")
    monkeypatch.setattr(auto, "_measure", lambda runners, f, o, **_: {
        name: 0.001 if name == "openvino" else 1.0 for name in runners})
    entries = []
    for builds in (2, 1, 9):  # engines the budget affords: onnxruntime and OpenVINO, ...
        monkeypatch.setattr(auto, "_affords", lambda done, n=builds: len(done.builds) < n)
        assert rlx.load(mlp.path, cache_dir=tmp_path / "cache").engine == "openvino"
        entries.append(next(iter(_cache(tmp_path).values())))
    assert entries[0]["unbuilt"] == ["numpy"] and entries[1] == entries[0]
    assert set(entries[0]["measured_ms"]) == {"onnxruntime", "openvino"}
    assert entries[2]["unbuilt"] == [] and set(entries[2]["measured_ms"]) == {"openvino",
                                                                              "numpy"}


def test_feeds_that_fail_on_every_engine_warn_of_none(tmp_path, monkeypatch, caplog):
    """An engine that builds but fails on feeds the numpy reference cannot run either is
    not said to be unable to take the file, at this load or at the cached ones after."""
    mlp = write_mlp(tmp_path / "mlp.rlx")
    _fail_runs(monkeypatch, "these feeds do not fit the model")
    monkeypatch.setattr(auto, "COLD_BUDGET_S", 1e9)
    with caplog.at_level("INFO", logger="rlx.engines"):
        rlx.load(mlp.path, cache_dir=tmp_path / "cache")
        rlx.load(mlp.path, cache_dir=tmp_path / "cache")
    assert not [r for r in caplog.records if "cannot take" in r.getMessage()]
    assert any("measurement feeds do not run on" in r.getMessage() for r in caplog.records)
    assert not next(iter(_cache(tmp_path).values()))["failed"]


def test_an_engine_failing_on_feeds_the_reference_runs_cannot_take_the_file(
        tmp_path, monkeypatch, caplog):
    mlp = write_mlp(tmp_path / "mlp.rlx")
    broken = next(n for n in registry.available_engines() if n != "numpy")
    _fail_runs(monkeypatch, "a kernel this engine lacks", only=broken)
    monkeypatch.setattr(auto, "COLD_BUDGET_S", 1e9)
    with caplog.at_level("WARNING", logger="rlx.engines"):
        model = rlx.load(mlp.path, cache_dir=tmp_path / "cache")
    assert model.engine != broken
    assert any(f"{broken} cannot take" in r.getMessage() for r in caplog.records)
    assert broken in next(iter(_cache(tmp_path).values()))["failed"]


def _fail_runs(monkeypatch, message: str, only: str | None = None) -> None:
    """Every engine auto builds (or the one named `only`) builds, then fails each run with
    `message`."""
    real = auto._build

    def build(name, *args):
        runner = real(name, *args)
        if only is not None and name != only:
            return runner

        class Failing:
            def __init__(self):
                self.name, self.precision, self.inner = runner.name, runner.precision, runner

            def run(self, feeds_, outputs):
                raise ValueError(message)

        return Failing()

    monkeypatch.setattr(auto, "_build", build)


def _intra_op_threads(model) -> int:
    return model.runner.session.get_session_options().intra_op_num_threads


@pytest.mark.parametrize("prepack", ["mapped", "off"])  # a warm load, and a full one, later
@pytest.mark.parametrize("fitted_ms, when_shared, shared_threads", [
    (0.09, "threads that fit", 1),  # a short call: a second thread only waits for wake-ups
    (30.0, "threads asked", 2),  # a long one: two threads get twice the share of the cores
])
def test_on_shared_cores_onnxruntime_is_timed_at_the_threads_that_fit_too(
        tmp_path, monkeypatch, _cores, prepack, fitted_ms, when_shared, shared_threads):
    """Beside other work (3 runnable threads on 2 cores) auto times onnxruntime at the
    threads asked (its spinning off) and at the threads that fit (1), and caches which
    won; a later load runs the winner's threads while the cores are shared, and the
    threads asked once they are free. The timings are given (which one is faster is the
    machine's to say: docs/engines.md has the real models' numbers), the sessions are
    real and compute the MLP's float64 oracle."""
    mlp = write_mlp(tmp_path / "mlp.rlx")
    _cores.append(3.0)
    timed: list[list[str]] = []

    def measure(runners, feeds_, outputs, **options):
        timed.append(list(runners))
        return {n: {"onnxruntime": 0.010, auto.FITTED: fitted_ms / 1e3}.get(n, 1.0)
                for n in runners}

    monkeypatch.setattr(auto, "_measure", measure)
    monkeypatch.setattr(auto, "COLD_BUDGET_S", 1e9)
    args = {"engine": "auto", "threads": 2, "cache_dir": tmp_path / "cache", "prepack": prepack}
    first = rlx.load(mlp.path, **args)
    entry = next(iter(_cache(tmp_path).values()))
    assert auto.FITTED in timed[0] and "onnxruntime" in timed[0]
    assert entry["engine"] == first.engine == "onnxruntime"
    assert entry["when_shared"] == when_shared and auto.FITTED in entry["measured_ms"]
    assert auto.FITTED not in entry["unbuilt"] + list(entry["failed"])
    assert _intra_op_threads(first) == shared_threads
    for load, threads in ((3.0, shared_threads), (0.0, 2)):
        _cores.append(load)
        model = rlx.load(mlp.path, **args)
        assert len(timed) == 1 and _intra_op_threads(model) == threads
        np.testing.assert_allclose(model.run(feeds())[1], mlp.oracle(feeds()["x"])[1],
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("load, threads", [(0.0, 2), (3.0, 1), (3.0, None)])
def test_onnxruntime_is_timed_at_fewer_threads_only_where_they_would_fit_better(
        tmp_path, monkeypatch, _cores, load, threads):
    """Free cores (nothing to fit), or a thread too few to split (1 thread asked; the
    default, None, is one per core), time onnxruntime once, and the entry says nothing of
    shared cores."""
    mlp = write_mlp(tmp_path / "mlp.rlx")
    _cores.append(load)
    timed: list[str] = []
    monkeypatch.setattr(auto, "_measure", lambda runners, f, o, **_: (
        timed.extend(runners) or {n: 1.0 for n in runners}))
    monkeypatch.setattr(auto, "COLD_BUDGET_S", 1e9)
    rlx.load(mlp.path, threads=threads, cache_dir=tmp_path / "cache")
    entry = next(iter(_cache(tmp_path).values()))
    fitted = threads is None and load > 0  # None: 2 threads on these 2 cores
    assert (auto.FITTED in timed) is fitted
    assert ("when_shared" in entry) is fitted
