"""rlx.ray.codec, with no Ray: request bodies to feeds, outputs to bodies, errors to
statuses. The reference for a decoded feed is numpy's own reading of the same data."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest

from rlx.engines.model import IoSpec
from rlx.errors import InputError, KernelError
from rlx.ray import codec
from rlx.ray.codec import JSON, NPZ, RequestError, decode_feeds

INPUTS = [IoSpec("x", ("batch", 3), np.dtype(np.float32)),
          IoSpec("ids", ("batch",), np.dtype(np.int32))]


def _json(inputs) -> bytes:
    return json.dumps({"inputs": inputs}).encode()


def _npz(**arrays) -> bytes:
    out = io.BytesIO()
    np.savez_compressed(out, **arrays)
    return out.getvalue()


def test_json_lists_take_the_declared_dtypes():
    feeds = decode_feeds(INPUTS, _json({"x": [[1, 2.5, -3]], "ids": [7]}),
                         "application/json; charset=utf-8")
    assert feeds["x"].dtype == np.float32 and feeds["ids"].dtype == np.int32
    np.testing.assert_array_equal(feeds["x"], np.array([[1, 2.5, -3]], np.float32))
    np.testing.assert_array_equal(feeds["ids"], [7])


@pytest.mark.parametrize("inputs, message", [
    ({"x": [[1.0]], "ids": [1.5]}, "input 'ids': expected int32 values, got float64"),
    ({"x": [[1.0]], "ids": [2 ** 40]}, "input 'ids': expected int32 values, got int64"),
    ({"x": [[1.0, 2.0], [3.0]]}, "input 'x': the nested lists are ragged"),
    ({"x": "abc"}, "input 'x': expected numbers or booleans"),
])
def test_json_values_that_do_not_fit_are_400s(inputs, message):
    with pytest.raises(RequestError, match=message) as err:
        decode_feeds(INPUTS, _json(inputs), JSON)
    assert err.value.status == 400 and isinstance(err.value, InputError)


@pytest.mark.parametrize("body", [b"{not json", b"[1, 2]", b'{"feeds": {}}', b"\xff\xfe"])
def test_a_body_that_is_not_the_json_shape_is_a_400(body):
    with pytest.raises(RequestError, match="JSON") as err:
        decode_feeds(INPUTS, body, JSON)
    assert err.value.status == 400


def test_an_unknown_json_input_keeps_numpys_dtype_for_the_models_check():
    feeds = decode_feeds(INPUTS, _json({"y": [1, 2]}), JSON)
    assert feeds["y"].dtype == np.asarray([1, 2]).dtype


def test_npz_arrays_keep_their_dtypes():
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    ids = np.array([1, 2], np.int64)
    feeds = decode_feeds(INPUTS, _npz(x=x, ids=ids), NPZ)
    assert feeds["x"].dtype == np.float64 and feeds["ids"].dtype == np.int64  # Model.run decides
    np.testing.assert_array_equal(feeds["x"], x)


def test_an_npz_that_claims_more_than_the_limit_is_refused_before_reading(monkeypatch):
    monkeypatch.setattr(codec, "MAX_FEED_BYTES", 1000)
    body = _npz(x=np.zeros(1000, np.float32))  # 4 KB unpacked, a few bytes deflated
    assert len(body) < 1000
    with pytest.raises(RequestError, match="unpacks to") as err:
        decode_feeds(INPUTS, body, NPZ)
    assert err.value.status == 413


def test_a_body_that_is_not_an_npz_is_a_400():
    one = io.BytesIO()
    np.save(one, np.zeros(3))
    for body in (b"hello", one.getvalue()):
        with pytest.raises(RequestError, match="not an .npz") as err:
            decode_feeds(INPUTS, body, NPZ)
        assert err.value.status == 400


def test_a_pickled_npz_member_is_refused():
    out = io.BytesIO()
    np.savez(out, x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(RequestError, match=r"Python objects \(pickles\)"):
        decode_feeds(INPUTS, out.getvalue(), NPZ)


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded"])
def test_other_content_types_are_415s(content_type):
    with pytest.raises(RequestError, match="is not accepted") as err:
        decode_feeds(INPUTS, b"{}", content_type)
    assert err.value.status == 415


def test_replies_come_in_the_requests_format_unless_accept_names_the_other():
    assert codec.reply_format(JSON, None) == JSON
    assert codec.reply_format(NPZ, "*/*") == NPZ
    assert codec.reply_format(NPZ, "application/json") == JSON
    assert codec.reply_format(JSON, "application/octet-stream, */*") == NPZ
    assert codec.reply_format(JSON, f"{JSON}, {NPZ}") == JSON


def test_outputs_encode_as_json_and_as_npz():
    outs = [np.array([[0.25, 1.5]], np.float32), np.array([3], np.int64)]
    reply = codec.encode_outputs(["probs", "label"], outs, JSON)
    assert (reply.status, reply.content_type) == (200, JSON)
    assert json.loads(reply.body) == {"outputs": {"probs": [[0.25, 1.5]], "label": [3]}}
    reply = codec.encode_outputs(["probs", "weird/name"], outs, NPZ)
    assert reply.content_type == NPZ
    with np.load(io.BytesIO(reply.body)) as back:
        assert back.files == ["probs", "weird/name"]
        assert back["probs"].dtype == np.float32
        np.testing.assert_array_equal(back["weird/name"], outs[1])
    assert zipfile.is_zipfile(io.BytesIO(reply.body))


@pytest.mark.parametrize("error, status, kind, message", [
    (RequestError("bad body", 415), 415, "RequestError", "bad body"),
    (InputError("input 'x': expected f32[2], got f32[3]"), 400, "InputError",
     "input 'x': expected f32[2], got f32[3]"),
    (KernelError("while running n3 (MatMul):\n shapes"), 500, "KernelError",
     "while running n3 (MatMul): shapes"),
    (ZeroDivisionError("secret detail"), 500, "ZeroDivisionError", "internal error"),
])
def test_errors_map_to_statuses_with_one_line_messages(error, status, kind, message):
    reply = codec.error_reply(error)
    assert (reply.status, reply.content_type) == (status, JSON)
    assert json.loads(reply.body) == {"error": {"type": kind, "message": message,
                                                "status": status}}


def test_routes():
    assert codec.route("POST", "/predict/") == codec.PREDICT
    assert codec.route("get", "/health") == codec.HEALTH
    missing, wrong = codec.route("GET", "/"), codec.route("GET", "/predict")
    assert isinstance(missing, codec.Reply) and missing.status == 404
    assert b"POST /predict, GET /health" in missing.body
    assert isinstance(wrong, codec.Reply) and wrong.status == 405
