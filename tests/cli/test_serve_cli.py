"""`rlx-bake serve`, end to end: a subprocess serving a real model (ppocr-cls, baked
exact) on loopback; JSON and .npz requests against onnxruntime on the original .onnx, a
bad feed's 400 with rlx's own message, requests batched (the replica's model calls,
counted, fewer than its requests), and Ctrl-C stopping it cleanly. Plus the checks that
fail before any Ray starts."""

from __future__ import annotations

import io
import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnxruntime as ort
import pytest

import rlx
from rlx import BakeOptions, BakeProfile, bake, write_rlx
from rlx.onnx import import_onnx
from tests.cli.conftest import assert_error
from tests.real_models import fetch, ppocr_feeds

STARTUP = 300  # seconds a loaded 2-core machine may take to start Ray and the replica


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(url: str, body: bytes | None = None, content_type: str = "application/json"
             ) -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, body, {"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            return reply.status, reply.headers["Content-Type"], reply.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def _json_body(feeds: dict[str, np.ndarray]) -> bytes:
    return json.dumps({"inputs": {k: v.tolist() for k, v in feeds.items()}}).encode()


def _npz(feeds: dict[str, np.ndarray]) -> bytes:
    out = io.BytesIO()
    np.savez(out, **feeds)
    return out.getvalue()


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * float(np.abs(want).max()))


@pytest.fixture(scope="module")
def ppocr(tmp_path_factory):
    onnx_path = fetch("ppocr-cls")
    graph, bindings = import_onnx(onnx_path)
    path = tmp_path_factory.mktemp("serve") / "ppocr-cls.rlx"
    write_rlx(path, bake(graph, bindings, BakeOptions.from_profile(BakeProfile.EXACT))[0])
    return path, ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])


def _wait_healthy(proc: subprocess.Popen, url: str) -> dict:
    deadline = time.monotonic() + STARTUP
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        try:
            status, _, body = _request(url + "/health")
        except OSError:
            status = 0
        if status == 200:
            return json.loads(body)
        time.sleep(0.5)
    raise AssertionError(f"no healthy server at {url} within {STARTUP} s")


@pytest.mark.slow
def test_serve_answers_json_and_npz_like_onnxruntime_and_stops_on_ctrl_c(ppocr):
    path, oracle = ppocr
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    # a long batch window: the concurrent requests below land in few batches
    proc = subprocess.Popen([sys.executable, "-m", "rlx", "serve", str(path), "--port",
                             str(port), "--engine", "numpy", "--batch-wait-ms", "200"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        health = _wait_healthy(proc, url)
        assert health["engine"] == "numpy" and health["inputs"][0]["name"] == "x"
        (output,) = (o["name"] for o in health["outputs"])

        feeds = ppocr_feeds(0)
        status, kind, body = _request(url + "/predict", _json_body(feeds))
        assert (status, kind) == (200, "application/json")
        _close(np.array(json.loads(body)["outputs"][output], np.float32),
               oracle.run(None, feeds)[0])

        two = {"x": np.concatenate([ppocr_feeds(1)["x"], ppocr_feeds(2)["x"]])}
        status, kind, body = _request(url + "/predict", _npz(two), "application/octet-stream")
        assert (status, kind) == (200, "application/octet-stream")
        with np.load(io.BytesIO(body)) as answer:
            assert answer.files == [output] and answer[output].dtype == np.float32
            _close(answer[output], oracle.run(None, two)[0])

        bad = {"x": feeds["x"][0]}  # rank 3 for a rank-4 input
        with pytest.raises(rlx.RlxError) as expected:
            rlx.load(path, engine="numpy").run(bad)
        status, kind, body = _request(url + "/predict", _json_body(bad))
        assert (status, kind) == (400, "application/json")
        assert json.loads(body)["error"] == {"type": "InputError", "status": 400,
                                             "message": str(expected.value)}

        before = _wait_healthy(proc, url)["this_replica"]
        singles = [ppocr_feeds(seed) for seed in range(16)]
        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(lambda f: _request(url + "/predict", _json_body(f)),
                                    singles))
        for (status, _, body), f in zip(answers, singles):
            assert status == 200
            _close(np.array(json.loads(body)["outputs"][output], np.float32),
                   oracle.run(None, f)[0])
        after = _wait_healthy(proc, url)["this_replica"]
        assert after["requests"] - before["requests"] == 16
        assert after["model_runs"] - before["model_runs"] < 16  # batched
        assert after["largest_batch"] > 1
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    assert f"serving {path} at {url}" in out
    assert f"POST {url}/predict" in out and f"GET {url}/health" in out
    assert out.rstrip().endswith("stopped")


def test_serve_refuses_more_cpus_than_the_machine_has(cli, ppocr):
    path, _ = ppocr
    assert_error(cli("serve", path, "--replicas", "512"), r"reserve 512 CPUs; this machine")


def test_serve_refuses_a_taken_port_before_starting_ray(cli, ppocr):
    path, _ = ppocr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert_error(cli("serve", path, "--port", port), rf"cannot serve on 127.0.0.1:{port}")


def test_serve_refuses_a_bad_file_in_one_line(cli, tmp_path):
    (tmp_path / "bad.rlx").write_bytes(b"nothing")
    assert_error(cli("serve", tmp_path / "bad.rlx"), "bad.rlx")


def test_serve_with_a_trusted_key_refuses_an_unsigned_file_before_starting_ray(cli, ppocr,
                                                                                 tmp_path):
    from rlx.artifact.signing import generate_keypair, save_keypair

    save_keypair(generate_keypair(), tmp_path / "release.key")
    path, _ = ppocr
    assert_error(cli("serve", path, "--trusted-key", tmp_path / "release.key.pub"),
                 rf"^error: {path} is not signed \(no signature file {path}.sig\)$")
