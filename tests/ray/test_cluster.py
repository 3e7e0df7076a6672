"""rlx.ray on a real local Ray cluster (one per module: ray.init(num_cpus=2), shut down
after): Ray Data through Predictor, the anonymous memory each worker adds at load, and the
Serve deployment with two replicas over HTTP. Answers are checked against float64 oracles."""

from __future__ import annotations

import json
import socket
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import ray

import rlx
import rlx.ray
from benchmarks.bench_ray import TARGET, measure, start_cluster
from rlx.ray.serve import start_serve
from tests.engines.conftest import write_mlp
from tests.ray.conftest import write_one_row

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    start_cluster(num_cpus=2)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    return write_mlp(tmp_path_factory.mktemp("ray") / "mlp.rlx")


def _rows(n: int, k: int = 64) -> np.ndarray:
    return np.random.default_rng(5).standard_normal((n, k)).astype(np.float32)


def test_ray_data_maps_batches_through_the_predictor(cluster, mlp):
    x = _rows(40)
    ds = ray.data.from_items([{"id": i, "x": x[i]} for i in range(len(x))])
    rows = ds.map_batches(rlx.ray.Predictor, concurrency=2, batch_size=7,
                          fn_constructor_kwargs={"path": str(mlp.path),
                                                 "engine": "numpy"}).take_all()
    # blocks come back in the order the two workers finish them (on a busy machine, not
    # the input's), each row with its id: every row once, matched by id
    rows.sort(key=lambda r: r["id"])
    assert [r["id"] for r in rows] == list(range(40))
    got = {name: np.stack([r[name] for r in rows]) for name in rows[0] if name != "id"}
    outputs = [o.name for o in rlx.load(mlp.path, engine="numpy").outputs]
    assert set(got) == {"x", *outputs}
    assert {a.dtype for a in got.values()} == {np.dtype(np.float32)}
    np.testing.assert_array_equal(got["x"], x)
    for name, want in zip(outputs, mlp.oracle(x)):
        np.testing.assert_allclose(got[name], want, rtol=1e-4, atol=1e-5)


def test_ray_data_runs_a_one_row_model_row_by_row(cluster, tmp_path):
    one = write_one_row(tmp_path / "one.rlx")
    x = np.random.default_rng(2).standard_normal((9, 8)).astype(np.float32)
    scale = np.arange(9, dtype=np.float32)
    ds = ray.data.from_items([{"x": x[i], "scale": scale[i]} for i in range(9)])
    rows = ds.map_batches(rlx.ray.Predictor, concurrency=1, batch_size=4,
                          fn_constructor_kwargs={"path": str(one.path),
                                                 "engine": "numpy"}).take_all()
    for r in sorted(rows, key=lambda r: float(r["scale"])):
        i = int(r["scale"])
        assert r["y"].dtype == np.float32
        np.testing.assert_allclose(r["y"], one.oracle(x[i:i + 1], scale[i]), rtol=1e-5,
                                   atol=1e-5)


def test_a_missing_column_is_rlxs_error_naming_it(cluster, mlp):
    ds = ray.data.from_items([{"features": _rows(1)[0]}])
    # Ray Data raises a RayTaskError(UserCodeException) carrying the UDF's traceback
    with pytest.raises(ray.exceptions.RayTaskError) as raised:
        ds.map_batches(rlx.ray.Predictor, concurrency=1,
                       fn_constructor_kwargs={"path": str(mlp.path), "engine": "numpy"}
                       ).take_all()
    assert ("rlx.errors.InputError: " f"{mlp.path}: the batch has no column(s) 'x' for the "
            "model's input(s); its columns are ['features']") in str(raised.value)


def test_two_workers_share_the_weights_with_the_numpy_engine(cluster, tmp_path):
    """Each worker's anonymous memory grows by <= 2% of the weight bytes at load (and the
    first run); the weights' file pages are shared: each worker's share is about half."""
    big = write_mlp(tmp_path / "big.rlx", k=2048, hidden=4096, n=2048)  # 64 MiB of f32
    warm = write_mlp(tmp_path / "warm.rlx", k=64, hidden=8, n=8)
    result = measure(str(big.path), str(warm.path), "numpy", workers=2)
    weights = result["weights"]
    assert weights >= 64 << 20
    assert len({w["pid"] for w in result["workers"]}) == 2
    for worker in result["workers"]:
        assert worker["engine"] == "numpy"
        assert worker["anon_load"] <= TARGET * weights, worker
        assert worker["anon_first_run"] <= TARGET * weights, worker
        assert worker["artifact_rss"] >= 0.9 * weights  # every weight page was touched ...
        assert worker["artifact_pss"] <= 0.6 * worker["artifact_rss"]  # ... and is shared


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, x: np.ndarray) -> tuple[int, dict]:
    body = json.dumps({"inputs": {"x": x.tolist()}}).encode()
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_deployment_serves_with_two_replicas(cluster, mlp):
    from ray import serve

    port = _free_port()
    start_serve("127.0.0.1", port)
    try:
        serve.run(rlx.ray.deployment(mlp.path, engine="numpy", num_replicas=2),
                  route_prefix="/")
        url = f"http://127.0.0.1:{port}/predict"
        x = _rows(24)
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda i: _post(url, x[i:i + 1]), range(24)))
        hidden, probs = mlp.oracle(x)
        for i, (status, answer) in enumerate(answers):
            assert status == 200
            np.testing.assert_allclose(answer["outputs"]["probs"], probs[i:i + 1], rtol=1e-4,
                                       atol=1e-6)
        status, answer = _post(url, x[:, :10])
        assert status == 400 and answer["error"]["type"] == "InputError"
        assert "input 'x'" in answer["error"]["message"]
    finally:
        serve.shutdown()


def test_workers_run_at_the_callers_priority(cluster):
    """Ray starts workers at niceness 15: beside busy processes a Serve proxy then took
    minutes to start. A cluster rlx starts runs them at the caller's niceness."""
    import os

    @ray.remote
    def niceness() -> int:
        return os.nice(0)

    assert ray.get(niceness.remote()) == os.nice(0)


STALLED = 50  # clients that send a POST's headers and 5 body bytes, then nothing


def _stall(port: int) -> socket.socket:
    client = socket.create_connection(("127.0.0.1", port))
    client.sendall(b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                   b"application/json\r\nContent-Length: 1000\r\n\r\n{\"inp")
    return client


def _reply_of(client: socket.socket) -> tuple[int, dict]:
    """The status and JSON body of the one HTTP reply `client` gets."""
    client.settimeout(120)
    data = b""
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
        more = client.recv(65536)
        assert more, data
        data += more
    head, body = data.split(b"\r\n\r\n", 1)
    return int(head.split()[1]), json.loads(body)


def _length(data: bytes) -> int:
    head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
    return int(head.split("content-length:")[1].split("\r\n")[0])


def test_stalled_uploads_leave_health_and_requests_answered(cluster, mlp, tmp_path):
    """Five clients stalling mid-body once made /health time out for as long as they
    stalled. With 50 stalled: /health and a good request are answered while every stalled
    client still waits, and each stalled client gets a JSON 408 after the body deadline.
    The file is signed and served with trusted_keys (each replica checks it)."""
    import select

    from ray import serve

    from rlx.artifact.signing import generate_keypair, save_keypair, sign_artifact

    key = generate_keypair()
    save_keypair(key, tmp_path / "release.key")
    sign_artifact(mlp.path, key)
    port = _free_port()
    start_serve("127.0.0.1", port)
    clients: list[socket.socket] = []
    try:
        serve.run(rlx.ray.deployment(mlp.path, engine="numpy", body_timeout_s=15,
                                     trusted_keys=[tmp_path / "release.key.pub"]),
                  route_prefix="/")
        clients = [_stall(port) for _ in range(STALLED)]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=60) as reply:
            assert reply.status == 200 and json.loads(reply.read())["status"] == "ok"
        x = _rows(1)
        status, answer = _post(f"http://127.0.0.1:{port}/predict", x)
        assert status == 200
        np.testing.assert_allclose(answer["outputs"]["probs"], mlp.oracle(x)[1], rtol=1e-4,
                                   atol=1e-6)
        waiting, _, _ = select.select(clients, [], [], 0)
        assert waiting == []  # none was answered yet: all 50 stalled while those ran
        for client in clients:
            status, error = _reply_of(client)
            assert status == 408 and error["error"]["status"] == 408
            assert "did not arrive within 15 s" in error["error"]["message"]
    finally:
        for client in clients:
            client.close()
        serve.shutdown()
