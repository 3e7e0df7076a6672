"""The HTTP side of serving, with no Ray in it: request bodies to feeds, outputs to response
bodies, errors to status codes.

A request body is JSON, `{"inputs": {name: nested lists}}` (`Content-Type:
application/json`), or an `.npz` archive of arrays by name (`application/octet-stream`).
JSON has no dtypes, so each list takes its input's declared dtype where numpy's
`same_kind` casting allows it (ints into a float input, JSON's f64 into f32, ints that fit
into a narrower int; never floats into an int input); `.npz` arrays keep their own dtype
and must match, as `Model.run` requires. The answer comes in the request's format unless
`Accept` names the other.

Errors are JSON, `{"error": {"type", "message", "status"}}`: 400 for a body or feeds the
model refuses (rlx's own `InputError` message), 404/405 for a wrong route or method, 408
for a body that does not arrive in time, 413 for a body over its cap (`MAX_JSON_BYTES`, or
an .npz past `MAX_FEED_BYTES` sent or unpacked), 415 for another content type, 422 for
outputs JSON cannot carry, 500 for anything else.

Replies are strict JSON: NaN and infinities have no JSON token, so a JSON reply whose
outputs hold any is refused with a 422 naming them; the .npz reply carries them as they
are. (Requests may hold `NaN` / `Infinity` tokens, as Python's `json.dumps` writes them.)
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlx.engines.model import IoSpec
from rlx.errors import InputError, RlxError
from rlx.ray.errors import RequestError
from rlx.ray.npz_body import npz_arrays
from rlx.safeio import JsonLimits, load_json
from rlx.weights.writers import write_npz

__all__ = ["HEALTH", "JSON", "MAX_FEED_BYTES", "MAX_JSON_BYTES", "NPZ", "PREDICT", "ROUTES",
           "Reply", "RequestError", "body_limit", "decode_feeds", "describe", "encode_outputs",
           "error_reply", "json_reply", "reply_format", "route"]

JSON = "application/json"
NPZ = "application/octet-stream"
MAX_FEED_BYTES = 1 << 30
"""Largest total of an .npz body's arrays once unpacked: a deflated member can claim far
more than the body's own size (a zip bomb), so the claim is checked before reading. The
body itself is capped at the same size."""
MAX_JSON_BYTES = 16 << 20
"""Largest JSON body: parsed, each number costs ~5x its text in Python objects (a 31.5 MB
body cost a replica 163 MB); larger feeds travel as .npz, at their own size."""
JSON_LIMITS = JsonLimits(max_depth=64, bytes_per_container=2)
"""Nesting as deep as a rank-64 tensor; any number of rows (`[0],` is 4 bytes a list)."""


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: status, content type and body."""

    status: int
    content_type: str
    body: bytes


PREDICT = "/predict"
HEALTH = "/health"
ROUTES = {PREDICT: "POST", HEALTH: "GET"}
"""Path -> the one method it answers."""


def route(method: str, path: str) -> str | Reply:
    """The route a request is for, or the 404 / 405 reply when there is none."""
    path = "/" + path.strip("/")
    want = ROUTES.get(path)
    if want is None:
        return _status_reply(404, f"no route {path}; routes: " + ", ".join(
            f"{m} {p}" for p, m in ROUTES.items()))
    if method.upper() != want:
        return _status_reply(405, f"{path} answers {want}, not {method.upper()}")
    return path


def describe(path: str, engine: str, inputs: Sequence[IoSpec], outputs: Sequence[IoSpec]
             ) -> dict[str, Any]:
    """What the health route says about the model being served."""
    def specs(items: Sequence[IoSpec]) -> list[dict[str, Any]]:
        return [{"name": s.name, "shape": list(s.shape), "dtype": str(s.dtype)} for s in items]

    return {"file": path, "engine": engine, "inputs": specs(inputs), "outputs": specs(outputs)}


def _media_type(header: str | None) -> str:
    return (header or "").split(";")[0].strip().lower()


def body_limit(content_type: str | None) -> int:
    """The most bytes a body of this content type may hold (415 for another type)."""
    kind = _media_type(content_type)
    if kind == JSON:
        return MAX_JSON_BYTES
    if kind == NPZ:
        return MAX_FEED_BYTES
    raise RequestError(f"Content-Type {kind or '(none)'!r} is not accepted: send {JSON} "
                       f"({{\"inputs\": {{name: nested lists}}}}) or {NPZ} (an .npz archive)",
                       415)


def decode_feeds(inputs: Sequence[IoSpec], body: bytes, content_type: str | None
                 ) -> dict[str, np.ndarray]:
    """The feeds a request body holds, by input name (RequestError when it holds none)."""
    limit = body_limit(content_type)
    if len(body) > limit:
        raise RequestError(f"the request body holds {len(body):,} bytes, more than the "
                           f"{limit:,} this content type may hold", 413)
    if _media_type(content_type) == JSON:
        return _json_feeds(inputs, body)
    return npz_arrays(body, MAX_FEED_BYTES)


def _json_feeds(inputs: Sequence[IoSpec], body: bytes) -> dict[str, np.ndarray]:
    document = load_json(body, RequestError, "the body", JSON_LIMITS)
    feeds = document.get("inputs") if isinstance(document, dict) else None
    if not isinstance(feeds, dict):
        raise RequestError('expected a JSON object {"inputs": {name: nested lists}}')
    declared = {spec.name: spec.dtype for spec in inputs}
    return {name: _json_array(name, value, declared.get(name)) for name, value in feeds.items()}


def _json_array(name: str, value: Any, dtype: np.dtype | None) -> np.ndarray:
    """A JSON value as an array of `dtype` (an unknown input keeps numpy's own dtype: the
    model's feed check names it as unknown)."""
    try:
        array = np.asarray(value)
    except ValueError:
        raise RequestError(f"input {name!r}: the nested lists are ragged (every row of an "
                           "axis must have the same length)") from None
    if array.dtype.kind not in "biuf":
        raise RequestError(f"input {name!r}: expected numbers or booleans, got "
                           f"{type(value).__name__} holding {array.dtype.kind!r} values")
    if dtype is None or array.dtype == dtype:
        return array
    if not np.can_cast(array.dtype, dtype, "same_kind") or (
            dtype.kind in "iu" and array.size and not _in_range(array, np.iinfo(dtype))):
        raise RequestError(f"input {name!r}: expected {dtype} values, got {array.dtype} "
                           f"ones that do not fit")
    return array.astype(dtype)


def _in_range(array: np.ndarray, limits: np.iinfo) -> bool:
    return bool(limits.min <= array.min() and array.max() <= limits.max)


def reply_format(content_type: str | None, accept: str | None) -> str:
    """JSON or NPZ: what `Accept` names when it names exactly one of them, else the
    request's own format."""
    wanted = {_media_type(part) for part in (accept or "").split(",")} & {JSON, NPZ}
    if len(wanted) == 1:
        return wanted.pop()
    return NPZ if _media_type(content_type) == NPZ else JSON


def encode_outputs(names: Sequence[str], arrays: Sequence[np.ndarray], fmt: str) -> Reply:
    """`{"outputs": {name: nested lists}}`, or an .npz archive of the outputs by name; a 422
    when JSON is asked for and an output holds NaN or an infinity (JSON has no token)."""
    if fmt == NPZ:
        out = io.BytesIO()
        write_npz(out, dict(zip(names, arrays)))
        return Reply(200, NPZ, out.getvalue())
    bad = [f"{name!r} ({int(np.size(a) - np.count_nonzero(np.isfinite(a)))} of {np.size(a)})"
           for name, a in zip(names, arrays) if np.asarray(a).dtype.kind in "fc"
           and not np.isfinite(a).all()]
    if bad:
        return error_reply(RequestError(
            f"output(s) {', '.join(bad)} hold NaN or infinite values, which JSON cannot carry; "
            f"ask for {NPZ} (Accept: {NPZ}) to get them as they are", 422))
    return json_reply(200, {"outputs": {n: a.tolist() for n, a in zip(names, arrays)}})


def json_reply(status: int, document: Mapping[str, Any]) -> Reply:
    """Strict JSON: a NaN or infinity here is a bug (outputs are checked first)."""
    return Reply(status, JSON, json.dumps(document, allow_nan=False).encode())


def error_reply(error: BaseException) -> Reply:
    """The JSON error for `error`: its own status for a RequestError, 400 for feeds the
    model refused, 500 for the rest (rlx's message, or only the type for a bug's)."""
    if isinstance(error, RequestError):
        status = error.status
    elif isinstance(error, InputError):
        status = 400
    else:
        status = 500
    message = str(error) if isinstance(error, RlxError) else "internal error"
    return _status_reply(status, message, type(error).__name__)


def _status_reply(status: int, message: str, kind: str | None = None) -> Reply:
    return json_reply(status, {"error": {"type": kind, "message": " ".join(message.split()),
                                         "status": status}})
