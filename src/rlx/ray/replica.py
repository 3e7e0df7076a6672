"""The Ray Serve replica: one `rlx.load` of the artifact (each replica maps the same file),
the HTTP routes of `rlx.ray.codec`, and `@serve.batch` gathering requests for
`rlx.ray.batching`. Imported only once Ray is known to be installed (`rlx.ray.serve`).

Serve hands the replica a request once its headers are in and streams the body to it, so
a request waiting for its body holds one of the replica's slots: bodies are read with a
cap and a deadline (`rlx.ray.body_read`), and the deployment allows `MAX_ONGOING_REQUESTS`
at once (Serve's default of 5 let five stalled uploads starve `/health`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping
from typing import Any

from ray import serve
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from rlx.engines.model import load
from rlx.errors import RlxError
from rlx.ray.batching import Outcome, run_batch
from rlx.ray.body_read import read_body
from rlx.ray.codec import (
    HEALTH,
    Reply,
    RequestError,
    body_limit,
    decode_feeds,
    describe,
    encode_outputs,
    error_reply,
    json_reply,
    reply_format,
    route,
)

__all__ = ["MAX_ONGOING_REQUESTS", "RlxReplica"]

MAX_ONGOING_REQUESTS = 256
"""Requests one replica holds at once (Serve's default is 5). Each waits in an async task
(the model calls are batched), and one whose body stalls is dropped after the body
deadline, so stalled uploads cannot take every slot for long."""

log = logging.getLogger("rlx.ray")


@serve.deployment
class RlxReplica:
    """Answers `POST /predict` (JSON or .npz feeds) and `GET /health` for one model."""

    def __init__(self, path: str, engine: str, threads: int, max_batch_size: int,
                 batch_wait_timeout_s: float, body_timeout_s: float,
                 trusted_keys: list[bytes] | None):
        # replicas are workers mapping one file: auto weighs the copies each would hold
        self._model = load(path, engine=engine, threads=threads, trusted_keys=trusted_keys,
                           memory="shared")
        self._body_timeout_s = body_timeout_s
        self._about = describe(path, self._model.engine, self._model.inputs,
                               self._model.outputs)
        self._names = [spec.name for spec in self._model.outputs]
        self._lock = threading.Lock()  # model calls count from worker threads
        self._counts = {"requests": 0, "model_runs": 0, "largest_batch": 0}
        batch: Any = self._batch  # serve.batch's wrapper, which mypy sees as the method
        batch.set_max_batch_size(max_batch_size)
        batch.set_batch_wait_timeout_s(batch_wait_timeout_s)

    async def __call__(self, request: Request) -> Response:
        try:
            reply = await self._answer(request)
        except Exception as err:  # a bug: still a JSON 500 naming only its type
            log.error("request failed", exc_info=err)
            reply = error_reply(err)
        return Response(reply.body, status_code=reply.status, media_type=reply.content_type)

    async def _answer(self, request: Request) -> Reply:
        found = route(request.method, request.url.path)
        if isinstance(found, Reply):
            return found
        if found == HEALTH:
            with self._lock:
                counts = dict(self._counts)
            return json_reply(200, {"status": "ok", **self._about, "this_replica": counts})
        content_type = request.headers.get("content-type")
        try:
            body = await read_body(request.stream(), request.headers.get("content-length"),
                                   body_limit(content_type), self._body_timeout_s)
            feeds = decode_feeds(self._model.inputs, body, content_type)
        except RequestError as err:
            return error_reply(err)
        except ClientDisconnect:
            return error_reply(RequestError("the client went away before its body came"))
        outcome = await self._batch(feeds)
        if isinstance(outcome, Exception):
            if not isinstance(outcome, RlxError):  # a bug: the client sees only its type
                log.error("request failed", exc_info=outcome)
            return error_reply(outcome)
        return encode_outputs(self._names, outcome,
                              reply_format(content_type, request.headers.get("accept")))

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.005)
    async def _batch(self, requests: list[dict[str, Any]]) -> list[Outcome]:
        with self._lock:
            self._counts["requests"] += len(requests)
            self._counts["largest_batch"] = max(self._counts["largest_batch"], len(requests))
        # in a worker thread: the event loop keeps gathering the next batch meanwhile
        return await asyncio.to_thread(run_batch, self._model.inputs, self._run, requests)

    def _run(self, feeds: Mapping[str, Any]) -> list:
        with self._lock:
            self._counts["model_runs"] += 1
        return self._model.run(feeds)
