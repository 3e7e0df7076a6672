"""`rlx.ray.deployment(path) -> serve.Application`, and serving one on this machine
(`serve_locally`, `wait_for_stop`, `stop_serving`: what `rlx-bake serve` runs).

The arguments and the file are checked here, in the caller's process, so that a typo or a
bad file is one line now rather than a replica failing over and over in the cluster.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import socket
import threading
from collections.abc import Iterable
from typing import Any

from rlx.artifact.open import open_artifact
from rlx.engines.registry import check_engine
from rlx.errors import InputError, ServeError
from rlx.ray.body_read import BODY_TIMEOUT_S

__all__ = ["PROXY_PATIENCE_S", "WORKER_NICENESS", "cluster_environment", "deployment",
           "require_ray", "serve_locally", "start_serve", "stop_serving", "wait_for_stop"]

_PIP = "pip install 'rlx[ray]'"


def require_ray(what: str) -> None:
    """ServeError naming the pip command when Ray Serve (ray[serve]) is not installed."""
    for package in ("ray", "starlette"):
        if importlib.util.find_spec(package) is None:
            raise ServeError(f"{what} needs Ray Serve ({package} is not installed): {_PIP}")


def deployment(path: str | os.PathLike, *, engine: str = "auto", threads: int = 1,
               max_batch_size: int = 16, batch_wait_timeout_s: float = 0.005,
               num_replicas: int = 1, trusted_keys: Iterable | None = None,
               body_timeout_s: float = BODY_TIMEOUT_S) -> Any:
    """A Ray Serve application answering `POST /predict` and `GET /health` for `path`.

    Each of `num_replicas` replicas loads the file with `rlx.load(path, engine=engine,
    threads=threads, memory="shared")` (the weights stay in the file's shared page cache,
    and auto leaves out engines that would copy them into each replica) and reserves
    `threads` CPUs. Up to `max_batch_size` requests arriving within `batch_wait_timeout_s`
    of each other run as one model call when the model has a symbolic batch dim.
    `trusted_keys` (public keys, as `rlx.load` takes them): the file must carry a
    valid signature by one of them, checked here and by every replica as it loads.
    A request body must arrive within `body_timeout_s` (408 after).
    Run it with `serve.run(app)`.
    """
    require_ray("rlx.ray.deployment")
    check_engine(engine)
    for name, value in (("threads", threads), ("max_batch_size", max_batch_size),
                        ("num_replicas", num_replicas)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{name} must be a positive integer, got {value!r}")
    for name, seconds, least in (("batch_wait_timeout_s", batch_wait_timeout_s, 0.0),
                                 ("body_timeout_s", body_timeout_s, 1e-3)):
        if (not isinstance(seconds, (int, float)) or isinstance(seconds, bool)
                or not least <= seconds < float("inf")):
            raise InputError(f"{name} must be a number of seconds >= {least:g}, got "
                             f"{seconds!r}")
    source = os.path.abspath(os.fspath(path))  # replicas need not share the caller's cwd
    keys = None if trusted_keys is None else _public_pems(trusted_keys)
    # a missing, bad, encrypted or unsigned file fails here, in one line
    open_artifact(source, trusted_keys=keys)
    from rlx.ray.replica import MAX_ONGOING_REQUESTS, RlxReplica

    stem = os.path.splitext(os.path.basename(source))[0]
    return RlxReplica.options(  # type: ignore[attr-defined]  # serve.deployment's class
        name=f"rlx-{stem}", num_replicas=num_replicas,
        ray_actor_options={"num_cpus": threads}, max_ongoing_requests=MAX_ONGOING_REQUESTS,
    ).bind(source, engine, threads, max_batch_size, float(batch_wait_timeout_s),
           float(body_timeout_s), keys)


def _public_pems(sources: Iterable) -> list[bytes]:
    """The trusted keys as PEM bytes, read once here: replicas need neither the key files
    nor key objects (which do not pickle)."""
    from cryptography.hazmat.primitives import serialization

    from rlx.artifact.signing.keys import load_public_keys

    return [key.public_bytes(serialization.Encoding.PEM,
                             serialization.PublicFormat.SubjectPublicKeyInfo)
            for key in load_public_keys(sources)]


PROXY_PATIENCE_S = "60"
"""Seconds Serve's controller gives an HTTP proxy to start and to answer a health check
(Ray's defaults: 5 and 10). A proxy that misses them is killed and restarted: on a busy
2-core machine (load 5-8) starting one took longer than 5 s, and `serve.run` failed with
"The actor died ... killed by `ray.kill`" before a single request."""


WORKER_NICENESS = "0"
"""The niceness of the workers of a cluster this process starts: the caller's own. Ray
starts its workers at 15, so beside two CPU-bound processes at 0 on 2 cores the worker
that hosts Serve's HTTP proxy got ~3% of a core and took 3 minutes to start (it timed
out); a replica would be starved the same way by any busy neighbour."""


def cluster_environment() -> None:
    """Set what a cluster this process starts inherits (Ray's processes read these from
    the environment): proxy timeouts (`PROXY_PATIENCE_S`) and worker niceness
    (`WORKER_NICENESS`). Values the user set are kept."""
    for name in ("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S",
                 "RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S"):
        os.environ.setdefault(name, PROXY_PATIENCE_S)
    os.environ.setdefault("RAY_worker_niceness", WORKER_NICENESS)


def start_serve(host: str, port: int, patience_s: float = float(PROXY_PATIENCE_S),
                **options: Any) -> None:
    """`serve.start` on host:port, patient with a slow HTTP proxy. `serve.start` waits 60 s
    for the proxies (Ray's `HTTP_PROXY_TIMEOUT`, a constant) and raises TimeoutError; at
    load 6-8 on 2 cores one took longer, though it came up later. On that timeout this
    connects to the controller `serve.start` left running and waits up to `patience_s`
    more for the proxy to listen on the port (TimeoutError after that)."""
    import time

    from ray import serve

    http = {"host": host, "port": port}
    try:
        serve.start(http_options=http, **options)
        return
    except TimeoutError as err:
        if "proxies not available" not in str(err):
            raise
    serve.start(http_options=http, **options)  # the controller is up: this only connects
    deadline = time.monotonic() + patience_s
    while True:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"Serve's HTTP proxy on {host}:{port} did not come up "
                                   f"within {patience_s:g} s more") from None
            time.sleep(0.5)


def serve_locally(app: Any, *, host: str = "127.0.0.1", port: int = 8000,
                  verbose: bool = False) -> str:
    """Start a Ray cluster on this machine, serve `app` at http://host:port/ and return
    that URL once every replica is ready (ServeError if the port is taken or a replica
    fails to start). `stop_serving` ends both."""
    require_ray("serving")
    _check_port_free(host, port)
    import ray
    from ray import serve

    cluster_environment()
    level = logging.INFO if verbose else logging.WARNING
    logging.getLogger("ray.serve").setLevel(level)  # Serve's driver-side progress lines
    ray.init(address="local", include_dashboard=False, logging_level=level,
             log_to_driver=verbose)
    try:
        start_serve(host, port, logging_config={"log_level": logging.getLevelName(level)})
        serve.run(app, name="rlx", route_prefix="/")
    except (RuntimeError, TimeoutError) as err:
        stop_serving()
        raise ServeError(f"the deployment did not start: {_first_line(err)}") from None
    except BaseException:
        stop_serving()
        raise
    return f"http://{host}:{port}"


def stop_serving() -> None:
    """End what `serve_locally` started: the cluster is its own, so shutting it down ends
    Serve's actors with it (and spares the controller's noisy graceful stop)."""
    import ray

    ray.shutdown()


def wait_for_stop() -> None:
    """Until SIGINT (Ctrl-C) or SIGTERM. Both handlers are set here: a shell starts a
    background job with SIGINT ignored, and `kill -INT` should stop it all the same."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    stops = (signal.SIGINT, signal.SIGTERM)
    previous = [signal.signal(s, interrupt) for s in stops]
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        for s, handler in zip(stops, previous):
            signal.signal(s, handler)


def _check_port_free(host: str, port: int) -> None:
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as err:
        raise ServeError(f"cannot serve on {host}:{port}: {err.strerror or err}") from None


def _first_line(err: BaseException) -> str:
    """The line of a replica's error that says what went wrong (Ray wraps it in its
    traceback): the last `...Error: message` line, else the first line."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    causes = [line for line in lines if "Error: " in line and not line.startswith("File ")]
    return causes[-1] if causes else (lines[0] if lines else type(err).__name__)
