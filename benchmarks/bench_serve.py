"""Load test of serving on loopback (issue: Ray integration, item 4): `rlx-bake serve` with
1 and 2 replicas against a plain onnxruntime endpoint on Ray Serve written the usual way.

    .venv/bin/python -m benchmarks.bench_serve [--requests 2000] [--concurrency 16]
        [--models ppocr-cls,silero-vad] [--replicas 1,2] [--engines auto]

Each server runs in its own process with its own local Ray cluster. The plain endpoint
(`OrtEndpoint` in bench_serve.py) makes an `onnxruntime.InferenceSession` (1 intra-op
thread, as each rlx replica gets) from the .onnx file, reads `await request.json()` and
answers `{"outputs": {name: lists}}`: the same JSON both ways, so the comparison is like
for like.
The client is `--concurrency` threads, each with one keep-alive `http.client` connection,
sending the same JSON body (the model's seeded feeds) until `--requests` are done, after
2 x concurrency warm-up requests that are not counted. Latency is per request, send to
last byte; throughput is counted requests over the wall time they took; an error is any
answer but 200 (or a failed connection). The first answer of every server is compared
with onnxruntime run in this process on the same feeds.
"""

from __future__ import annotations

import argparse
import datetime
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import ROOT, WORK, machine_info, save_results  # noqa: E402

STARTUP = 600.0  # seconds a server may take to answer its first request
MODELS = ("ppocr-cls", "silero-vad")


class OrtEndpoint:
    """The plain endpoint: what a user writes for onnxruntime on Ray Serve."""

    def __init__(self, onnx_path: str):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(onnx_path, options,
                                            providers=["CPUExecutionProvider"])
        types = {"tensor(float)": np.float32, "tensor(int64)": np.int64,
                 "tensor(int32)": np.int32, "tensor(bool)": np.bool_}
        self.dtypes = {i.name: types[i.type] for i in self.session.get_inputs()}
        self.names = [o.name for o in self.session.get_outputs()]

    async def __call__(self, request) -> dict:
        inputs = (await request.json())["inputs"]
        feeds = {name: np.asarray(value, dtype=self.dtypes[name])
                 for name, value in inputs.items()}
        outputs = self.session.run(None, feeds)
        return {"outputs": {n: o.tolist() for n, o in zip(self.names, outputs)}}


def serve_ort(onnx_path: str, port: int, replicas: int) -> None:
    """Serve `OrtEndpoint` at 127.0.0.1:port until SIGINT (run as its own process)."""
    from ray import serve

    from rlx.ray.serve import serve_locally, stop_serving, wait_for_stop

    app = serve.deployment(OrtEndpoint, num_replicas=replicas,
                           ray_actor_options={"num_cpus": 1}).bind(onnx_path)
    serve_locally(app, port=port)
    try:
        wait_for_stop()
    finally:
        stop_serving()


# --- the client ---------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(conn: http.client.HTTPConnection, body: bytes) -> tuple[int, bytes]:
    conn.request("POST", "/predict", body, {"Content-Type": "application/json"})
    reply = conn.getresponse()
    return reply.status, reply.read()


def wait_ready(proc: subprocess.Popen, port: int, body: bytes) -> bytes:
    """The first 200 answer of the server `proc`, polling until it comes."""
    deadline = time.monotonic() + STARTUP
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {proc.communicate()[1][-2000:]}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            status, answer = _post(conn, body)
            conn.close()
            if status == 200:
                return answer
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"no answer on port {port} within {STARTUP:.0f} s")


def hammer(port: int, body: bytes, requests: int, concurrency: int) -> dict[str, Any]:
    """`requests` POSTs from `concurrency` threads: latencies, errors, wall seconds."""
    lock = threading.Lock()
    left = [requests]
    latencies: list[float] = []
    errors: list[str] = []

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            with lock:
                if left[0] == 0:
                    break
                left[0] -= 1
            start = time.perf_counter()
            try:
                status, _ = _post(conn, body)
                problem = None if status == 200 else f"HTTP {status}"
            except (OSError, http.client.HTTPException) as err:
                problem = f"{type(err).__name__}: {err}"
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            took = time.perf_counter() - start
            with lock:
                latencies.append(took)
                if problem:
                    errors.append(problem)
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - start
    cuts = statistics.quantiles(latencies, n=100, method="inclusive")
    return {"requests": requests, "concurrency": concurrency, "seconds": seconds,
            "p50_ms": statistics.median(latencies) * 1e3, "p99_ms": cuts[98] * 1e3,
            "requests_per_second": requests / seconds, "errors": len(errors),
            "error_kinds": sorted(set(errors))}


# --- one server, measured -----------------------------------------------------------------


def _health(port: int) -> dict[str, Any] | None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", "/health")
        reply = conn.getresponse()
        return json.loads(reply.read()) if reply.status == 200 else None
    except (OSError, ValueError):
        return None
    finally:
        conn.close()


def run_server(command: list[str], body: bytes, reference: list[np.ndarray],
               args: argparse.Namespace) -> dict[str, Any]:
    port = _free_port()
    proc = subprocess.Popen([*command, "--port", str(port)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first = json.loads(wait_ready(proc, port, body))["outputs"]
        got = [np.asarray(v, np.float64) for v in first.values()]
        diff = max(float(np.max(np.abs(g - r), initial=0.0)) for g, r in zip(got, reference))
        hammer(port, body, 2 * args.concurrency, args.concurrency)  # warm-up
        result = hammer(port, body, args.requests, args.concurrency)
        health = _health(port)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
    result["max_abs_diff_vs_onnxruntime"] = diff
    result["loadavg_after"] = os.getloadavg()  # the machine is shared: how busy it was
    if health is not None:
        result["engine"] = health["engine"]
        counts = health["this_replica"]
        result["mean_batch_one_replica"] = counts["requests"] / max(counts["model_runs"], 1)
    return result


def prepare(name: str) -> tuple[Path, Path, dict[str, np.ndarray]]:
    """(the .rlx baked exact, the .onnx, the seeded feeds) of a real model."""
    from rlx import bake_file
    from tests.real_models import FEEDS, fetch, import_kwargs

    onnx_path = fetch(name)
    folder = WORK / "serve"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.rlx"
    if not path.exists():
        bake_file(onnx_path, path, profile="exact", **import_kwargs(onnx_path))
    return path, onnx_path, FEEDS[name](0)


def table(results: dict[str, Any]) -> str:
    lines = ["| model | server | replicas | engine | requests x concurrency | p50 ms | "
             "p99 ms | requests/s | errors | mean batch (one replica) | max abs diff vs ORT | "
             "load avg after |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["runs"]:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['server']} | {r['replicas']} | | | "
                         f"{r['error']} | | | | | | |")
            continue
        batch = r.get("mean_batch_one_replica")
        load = f"{r['loadavg_after'][0]:.1f}" if "loadavg_after" in r else ""
        lines.append(f"| {r['model']} | {r['server']} | {r['replicas']} | "
                     f"{r.get('engine', 'onnxruntime')} | {r['requests']} x {r['concurrency']} "
                     f"| {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
                     f"{r['requests_per_second']:.0f} | {r['errors']} | "
                     f"{'' if batch is None else f'{batch:.2f}'} | "
                     f"{r['max_abs_diff_vs_onnxruntime']:.2g} | {load} |")
    return "\n".join(lines)


def _csv(kind):
    return lambda text: [kind(t.strip()) for t in text.split(",") if t.strip()]


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--models", type=_csv(str), default=list(MODELS))
    parser.add_argument("--replicas", type=_csv(int), default=[1, 2])
    parser.add_argument("--engines", type=_csv(str), default=["auto"],
                        help="rlx engines to serve with (default auto)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--serve-ort", metavar="MODEL.onnx", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_ort:  # the plain endpoint's own process
        serve_ort(args.serve_ort, args.port, args.replicas[0])
        return {}
    import onnxruntime as ort

    date = datetime.date.today().isoformat()
    command = ["python -m benchmarks.bench_serve", *(sys.argv[1:] if argv is None else argv)]
    results: dict[str, Any] = {"date": date, "command": " ".join(command),
                               "machine": machine_info(), "runs": []}
    for name in args.models:
        path, onnx_path, feeds = prepare(name)
        body = json.dumps({"inputs": {k: v.tolist() for k, v in feeds.items()}}).encode()
        reference = ort.InferenceSession(str(onnx_path), providers=[
            "CPUExecutionProvider"]).run(None, feeds)
        servers = [(f"rlx-bake serve ({engine})",
                    [sys.executable, "-m", "rlx", "serve", str(path), "--engine", engine])
                   for engine in args.engines]
        servers.append(("plain onnxruntime on Ray Serve",
                        [sys.executable, "-m", "benchmarks.bench_serve", "--serve-ort",
                         str(onnx_path)]))
        for replicas in args.replicas:
            for label, cmd in servers:
                print(f"{name}: {label}, {replicas} replica(s)", flush=True)
                flag = "--replicas"
                row: dict[str, Any] = {"model": name, "server": label, "replicas": replicas}
                try:
                    row.update(run_server([*cmd, flag, str(replicas)], body, reference, args))
                except RuntimeError as err:
                    row["error"] = str(err).splitlines()[-1]
                results["runs"].append(row)
    return save_results(results, table(results), args.out, f"serve-{date}")


if __name__ == "__main__":
    main()
