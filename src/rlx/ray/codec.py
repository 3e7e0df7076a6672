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
model refuses (rlx's own `InputError` message), 404/405 for a wrong route or method, 415
for another content type, 413 for an .npz that unpacks too large, 500 for anything else.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlx.engines.model import IoSpec
from rlx.errors import InputError, RlxError
from rlx.weights.writers import write_npz

__all__ = ["HEALTH", "JSON", "MAX_FEED_BYTES", "NPZ", "PREDICT", "ROUTES", "Reply",
           "RequestError", "decode_feeds", "describe", "encode_outputs", "error_reply",
           "json_reply", "reply_format", "route"]

JSON = "application/json"
NPZ = "application/octet-stream"
MAX_FEED_BYTES = 1 << 30
"""Largest total of an .npz body's arrays once unpacked: a deflated member can claim far
more than the body's own size (a zip bomb), so the claim is checked before reading."""


class RequestError(InputError):
    """A request the server cannot turn into feeds; `status` is its HTTP status."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


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


def decode_feeds(inputs: Sequence[IoSpec], body: bytes, content_type: str | None
                 ) -> dict[str, np.ndarray]:
    """The feeds a request body holds, by input name (RequestError when it holds none)."""
    kind = _media_type(content_type)
    if kind == JSON:
        return _json_feeds(inputs, body)
    if kind == NPZ:
        return _npz_feeds(body)
    raise RequestError(f"Content-Type {kind or '(none)'!r} is not accepted: send {JSON} "
                       f"({{\"inputs\": {{name: nested lists}}}}) or {NPZ} (an .npz archive)",
                       415)


def _json_feeds(inputs: Sequence[IoSpec], body: bytes) -> dict[str, np.ndarray]:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise RequestError(f"the body is not JSON: {err}") from None
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


def _npz_feeds(body: bytes) -> dict[str, np.ndarray]:
    buffer = io.BytesIO(body)
    try:
        with zipfile.ZipFile(buffer) as archive:
            claimed = sum(member.file_size for member in archive.infolist())
    except zipfile.BadZipFile:
        raise RequestError("the body is not an .npz archive (np.savez writes one)") from None
    if claimed > MAX_FEED_BYTES:
        raise RequestError(f"the .npz archive unpacks to {claimed:,} bytes, more than the "
                           f"{MAX_FEED_BYTES:,} a request may hold", 413)
    buffer.seek(0)
    try:
        with np.load(buffer, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as err:
        raise RequestError(f"cannot read the .npz archive: {err}") from None


def reply_format(content_type: str | None, accept: str | None) -> str:
    """JSON or NPZ: what `Accept` names when it names exactly one of them, else the
    request's own format."""
    wanted = {_media_type(part) for part in (accept or "").split(",")} & {JSON, NPZ}
    if len(wanted) == 1:
        return wanted.pop()
    return NPZ if _media_type(content_type) == NPZ else JSON


def encode_outputs(names: Sequence[str], arrays: Sequence[np.ndarray], fmt: str) -> Reply:
    """`{"outputs": {name: nested lists}}`, or an .npz archive of the outputs by name."""
    if fmt == NPZ:
        out = io.BytesIO()
        write_npz(out, dict(zip(names, arrays)))
        return Reply(200, NPZ, out.getvalue())
    return json_reply(200, {"outputs": {n: a.tolist() for n, a in zip(names, arrays)}})


def json_reply(status: int, document: Mapping[str, Any]) -> Reply:
    return Reply(status, JSON, json.dumps(document).encode())


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
