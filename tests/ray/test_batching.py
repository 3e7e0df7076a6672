"""rlx.ray.batching and rlx.ray.Predictor with no Ray: many requests as few model calls
(counted), every answer against the float64 oracle of its own feeds."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import numpy as np
import pytest

import rlx
import rlx.ray
from rlx.engines.model import IoSpec
from rlx.errors import InputError, ServeError
from rlx.ray import serve
from rlx.ray.batching import batch_dim, run_batch
from tests.engines.conftest import write_mlp
from tests.ray.conftest import write_one_row


class Counting:
    """`Model.run`, counting its calls and the rows of each."""

    def __init__(self, model):
        self.model, self.calls = model, []

    def __call__(self, feeds):
        self.calls.append({name: np.shape(v) for name, v in feeds.items()})
        return self.model.run(feeds)


def _x(rows: int, seed: int, k: int = 64) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, k)).astype(np.float32)


def _close(got, want):
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


@pytest.fixture
def mlp(tmp_path):
    return write_mlp(tmp_path / "mlp.rlx")


def test_batch_dim():
    f32 = np.dtype(np.float32)
    assert batch_dim([IoSpec("a", ("n", 3), f32), IoSpec("b", ("n",), f32)]) == "n"
    assert batch_dim([IoSpec("a", (1, 3), f32)]) is None
    assert batch_dim([IoSpec("a", ("?", 3), f32)]) is None
    assert batch_dim([IoSpec("a", ("n", 3), f32), IoSpec("b", ("m", 3), f32)]) is None
    assert batch_dim([IoSpec("a", ("n", "n"), f32)]) is None  # the dim is not only axis 0
    assert batch_dim([IoSpec("a", (), f32)]) is None


def test_requests_with_the_same_trailing_shapes_run_as_one_call(mlp):
    model = rlx.load(mlp.path, engine="numpy")
    run = Counting(model)
    requests = [{"x": _x(rows, seed)} for seed, rows in enumerate([1, 3, 1, 2, 1])]
    results = run_batch(model.inputs, run, requests)
    assert run.calls == [{"x": (8, 64)}]
    for feeds, got in zip(requests, results):
        _close(got, mlp.oracle(feeds["x"]))


def test_a_bad_request_gets_its_own_error_and_the_others_their_answers(mlp):
    model = rlx.load(mlp.path, engine="numpy")
    run = Counting(model)
    good = [{"x": _x(2, seed)} for seed in range(3)]
    wrong_dtype = {"x": _x(2, 9).astype(np.float64)}  # the same shapes, so it groups apart
    missing = {}
    narrow = {"x": _x(1, 7, k=10)}  # another trailing shape: its own group
    results = run_batch(model.inputs, run, [good[0], wrong_dtype, good[1], missing, narrow,
                                            good[2]])
    for i, feeds in zip((0, 2, 5), good):
        _close(results[i], mlp.oracle(feeds["x"]))
    for i, message in ((1, "the dtype must match"), (3, "missing input"), (4, "axis 1")):
        assert isinstance(results[i], InputError) and message in str(results[i])
    assert run.calls[0] == {"x": (6, 64)}  # the three good ones, joined
    assert len(run.calls) == 4


def test_a_failed_joined_call_falls_back_to_one_call_per_request(mlp):
    model = rlx.load(mlp.path, engine="numpy")
    counting = Counting(model)

    def one_row_at_most(feeds):  # an engine refusing big batches, say
        if len(feeds["x"]) > 1:
            raise InputError("too many rows")
        return counting(feeds)

    requests = [{"x": _x(1, seed)} for seed in range(3)]
    results = run_batch(model.inputs, one_row_at_most, requests)
    assert counting.calls == [{"x": (1, 64)}] * 3
    for feeds, got in zip(requests, results):
        _close(got, mlp.oracle(feeds["x"]))


def test_an_engine_bug_in_the_joined_call_still_answers_each_request_alone(mlp):
    model = rlx.load(mlp.path, engine="numpy")

    def fails_joined(feeds):  # a runtime raising its own exception type, not an RlxError
        if len(feeds["x"]) > 1:
            raise RuntimeError("engine bug")
        return model.run(feeds)

    requests = [{"x": _x(1, seed)} for seed in range(2)]
    for feeds, got in zip(requests, run_batch(model.inputs, fails_joined, requests)):
        _close(got, mlp.oracle(feeds["x"]))


def test_a_model_without_a_batch_dim_runs_each_request_alone(tmp_path):
    one = write_one_row(tmp_path / "one.rlx")
    model = rlx.load(one.path, engine="numpy")
    run = Counting(model)
    rng = np.random.default_rng(0)
    requests = [{"x": rng.standard_normal((1, 8)).astype(np.float32),
                 "scale": np.float32(s)} for s in (0.5, 2.0, -1.0)]
    results = run_batch(model.inputs, run, requests)
    assert len(run.calls) == 3
    for feeds, got in zip(requests, results):
        _close(got, [one.oracle(feeds["x"], feeds["scale"])])


# --- Predictor without Ray ----------------------------------------------------------------


def test_predictor_maps_a_whole_batch_in_one_call_and_passes_other_columns(mlp):
    predictor = rlx.ray.Predictor(mlp.path, engine="numpy")
    x = _x(5, 0)
    ids = np.arange(5, dtype=np.int32)
    out = predictor({"x": x, "id": ids})
    hidden, probs = (o.name for o in predictor.model.outputs)
    assert list(out) == ["x", "id", hidden, probs]
    assert out["id"] is ids and out[probs].dtype == np.float32
    _close([out[hidden], out[probs]], mlp.oracle(x))


def test_predictor_runs_a_one_row_model_row_by_row(tmp_path):
    one = write_one_row(tmp_path / "one.rlx")
    predictor = rlx.ray.Predictor(one.path, engine="numpy")
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 8)).astype(np.float32)  # rows of [8]: [1, 8] fed each
    scale = np.array([1, 2, 3, 4], np.float32)
    out = predictor({"x": x, "scale": scale})
    assert out["y"].shape == (4, 1, 4) and out["y"].dtype == np.float32
    for i in range(4):
        _close([out["y"][i]], [one.oracle(x[i:i + 1], scale[i])])
    empty = predictor({"x": x[:0], "scale": scale[:0]})
    assert empty["y"].shape == (0, 1, 4) and empty["y"].dtype == np.float32


def test_predictor_names_a_missing_column_and_a_clash(mlp):
    predictor = rlx.ray.Predictor(mlp.path, engine="numpy")
    with pytest.raises(InputError, match=r"no column\(s\) 'x' .* columns are \['id', 'y'\]"):
        predictor({"y": _x(2, 0), "id": np.arange(2)})
    with pytest.raises(InputError, match=r"output\(s\) 'probs' would overwrite"):
        predictor({"x": _x(2, 0), "probs": np.zeros(2)})


def test_deployment_without_ray_is_one_line_naming_the_extra(monkeypatch, mlp):
    found = serve.importlib.util.find_spec
    monkeypatch.setattr(serve.importlib.util, "find_spec",
                        lambda name: None if name == "ray" else found(name))
    with pytest.raises(ServeError, match=r"needs Ray Serve .*pip install 'rlx\[ray\]'"):
        rlx.ray.deployment(mlp.path)


@pytest.mark.parametrize("kwargs, message", [
    ({"engine": "tpu"}, "unknown engine 'tpu'"),
    ({"threads": 0}, "threads must be a positive integer"),
    ({"num_replicas": True}, "num_replicas must be a positive integer"),
    ({"batch_wait_timeout_s": -1}, "batch_wait_timeout_s must be a number of seconds >= 0"),
    ({"body_timeout_s": 0}, "body_timeout_s must be a number of seconds >= 0.001, got 0"),
    ({"body_timeout_s": float("inf")}, "body_timeout_s must be a number of seconds"),
    ({"body_timeout_s": True}, "body_timeout_s must be a number of seconds"),
])
def test_deployment_checks_its_arguments_before_ray_sees_them(mlp, kwargs, message):
    with pytest.raises(rlx.RlxError, match=message):
        rlx.ray.deployment(mlp.path, **kwargs)


def test_deployment_with_trusted_keys_refuses_an_unsigned_file_before_ray_sees_it(mlp,
                                                                                 tmp_path):
    from rlx.artifact.signing import generate_keypair, save_keypair

    save_keypair(generate_keypair(), tmp_path / "release.key")
    with pytest.raises(rlx.errors.SignatureError, match="is not signed"):
        rlx.ray.deployment(mlp.path, trusted_keys=[tmp_path / "release.key.pub"])


def test_deployment_checks_the_file_before_ray_sees_it(tmp_path):
    (tmp_path / "bad.rlx").write_bytes(b"not an artifact")
    with pytest.raises(rlx.RlxError, match="bad.rlx"):
        rlx.ray.deployment(tmp_path / "bad.rlx")


def test_importing_rlx_ray_and_the_predictor_imports_no_ray():
    code = ("import sys, rlx.ray\nrlx.ray.Predictor\n"
            "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"


class _SlowProxy:
    """`ray.serve.start` whose HTTP proxy misses Ray's 60 s: the first call times out, the
    proxy listens on the port `delay_s` later (or never)."""

    def __init__(self, port: int, delay_s: float | None):
        self.port, self.delay_s, self.calls = port, delay_s, 0
        self.listener: socket.socket | None = None

    def start(self, http_options, **options):
        self.calls += 1
        if self.calls > 1:
            return
        if self.delay_s is not None:
            threading.Timer(self.delay_s, self._listen).start()
        raise TimeoutError("HTTP proxies not available after 60s.")

    def _listen(self):
        self.listener = socket.create_server(("127.0.0.1", self.port))


@pytest.mark.parametrize("comes_up", [True, False], ids=["late", "never"])
def test_serve_waits_for_a_proxy_that_comes_up_after_rays_timeout(monkeypatch, comes_up):
    ray_serve = pytest.importorskip("ray.serve")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proxy = _SlowProxy(port, 0.5 if comes_up else None)
    monkeypatch.setattr(ray_serve, "start", proxy.start)
    try:
        if comes_up:
            serve.start_serve("127.0.0.1", port, patience_s=30)
            assert proxy.listener is not None  # returned once the port listened
        else:
            with pytest.raises(TimeoutError, match="did not come up within 1 s more"):
                serve.start_serve("127.0.0.1", port, patience_s=1)
        assert proxy.calls == 2  # the second call connects to the controller left running
    finally:
        if proxy.listener is not None:
            proxy.listener.close()
