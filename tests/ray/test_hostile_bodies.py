"""Hostile request bodies, with no Ray: every body the server cannot decode is a
`RequestError` (a JSON 4xx with rlx's message), decided before anything large is built,
and every reply is strict JSON. Once, a JSON body nested 100k deep, an .npz member with an
unknown compression method or the encryption flag, and an .npz header claiming 4 TiB each
answered a plain-text 500; outputs holding NaN were sent as `NaN` tokens, which strict
JSON parsers refuse."""

from __future__ import annotations

import asyncio
import io
import json
import struct
import tracemalloc
import zipfile

import numpy as np
import pytest

from rlx.engines.model import IoSpec
from rlx.ray import codec
from rlx.ray.body_read import read_body
from rlx.ray.codec import JSON, NPZ, RequestError, decode_feeds, encode_outputs

INPUTS = [IoSpec("x", ("batch", 3), np.dtype(np.float32))]
LOCAL, CENTRAL = b"PK\x03\x04", b"PK\x01\x02"


def _npz(**arrays) -> bytes:
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def _patch_u16(body: bytes, field: int, value: int) -> bytes:
    """Set a u16 of every local header (`field` from its signature) and the matching one of
    every central directory entry (2 bytes further: it starts with `version made by`)."""
    out = bytearray(body)
    for signature, offset in ((LOCAL, field), (CENTRAL, field + 2)):
        at = out.find(signature)
        while at >= 0:
            struct.pack_into("<H", out, at + offset, value)
            at = out.find(signature, at + 4)
    return bytes(out)


def _refused(body: bytes, content_type: str, match: str, status: int = 400) -> None:
    with pytest.raises(RequestError, match=match) as err:
        decode_feeds(INPUTS, body, content_type)
    assert err.value.status == status
    reply = codec.error_reply(err.value)
    assert json.loads(reply.body)["error"]["status"] == status
    assert "\n" not in json.loads(reply.body)["error"]["message"]


def test_json_nested_100k_deep_is_a_400():
    body = b'{"inputs": {"x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    _refused(body, JSON, "nests deeper than 64 levels")


def test_json_over_its_cap_is_a_413(monkeypatch):
    monkeypatch.setattr(codec, "MAX_JSON_BYTES", 1000)
    body = json.dumps({"inputs": {"x": [[0.5, 0.5, 0.5]] * 100}}).encode()
    assert len(body) > 1000
    _refused(body, JSON, "more than the 1,000 this content type may hold", 413)


def test_json_rows_of_one_number_are_still_read():
    """The container-density rule allows `[[0], [1], ...]`, the densest real feed."""
    x = np.arange(20_000, dtype=np.float32).reshape(-1, 1)
    feeds = decode_feeds([IoSpec("x", ("batch", 1), np.dtype(np.float32))],
                         json.dumps({"inputs": {"x": x.tolist()}}).encode(), JSON)
    np.testing.assert_array_equal(feeds["x"], x)


def test_an_npz_member_with_an_unknown_compression_method_is_a_400():
    body = _patch_u16(_npz(x=np.ones((1, 3), np.float32)), 8, 99)
    _refused(body, NPZ, "uses compression method 99; only stored or deflated")


def test_an_npz_member_with_the_encryption_flag_is_a_400():
    body = _patch_u16(_npz(x=np.ones((1, 3), np.float32)), 6, 1)
    _refused(body, NPZ, "'x.npy' of the .npz archive is encrypted")


def test_an_npz_header_claiming_4_tib_is_a_400_without_allocating_it():
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (1 << 40,)})
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("x.npy", header.getvalue() + bytes(16))
    tracemalloc.start()
    try:
        _refused(out.getvalue(), NPZ, r"claims float32\[1099511627776\] \(4,398,046,511,104 "
                                      r"bytes\) but the member holds 16")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_an_npz_member_that_is_not_an_array_is_a_400():
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("x.txt", b"hello")
    _refused(out.getvalue(), NPZ, "'x.txt' of the .npz archive is not an .npy array")


def test_npz_feeds_match_numpys_reading():
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    f = np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3))
    body = _npz(x=x, f=f)
    with np.load(io.BytesIO(body)) as want:
        got = decode_feeds(INPUTS, body, NPZ)
        assert set(got) == set(want.files)
        for name in want.files:
            assert got[name].dtype == want[name].dtype and got[name].flags.writeable
            np.testing.assert_array_equal(got[name], want[name])


def _strict(body: bytes):
    def refuse(token):
        raise AssertionError(f"{token} is not JSON")
    return json.loads(body, parse_constant=refuse)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_outputs_are_a_422_naming_them_in_json_and_kept_in_npz(value):
    outs = [np.array([[1.0, value]], np.float32), np.array([3], np.int64)]
    reply = encode_outputs(["probs", "label"], outs, JSON)
    assert (reply.status, reply.content_type) == (422, JSON)
    message = _strict(reply.body)["error"]["message"]
    assert message.startswith("output(s) 'probs' (1 of 2) hold NaN or infinite values")
    reply = encode_outputs(["probs", "label"], outs, NPZ)
    with np.load(io.BytesIO(reply.body)) as back:
        np.testing.assert_array_equal(back["probs"], outs[0])


def test_input_1e400_reaches_the_model_as_infinity():
    feeds = decode_feeds(INPUTS, b'{"inputs": {"x": [[1e400, 0, NaN]]}}', JSON)
    assert np.isposinf(feeds["x"][0, 0]) and np.isnan(feeds["x"][0, 2])


# --- reading the body: cap and deadline --------------------------------------------------


async def _chunks(parts, stall: bool = False):
    for part in parts:
        yield part
    if stall:
        await asyncio.Event().wait()  # a client that sent a little, then nothing


def _read(chunks, declared, limit=100, timeout_s=60.0) -> bytes:
    return asyncio.run(read_body(chunks, declared, limit, timeout_s))


def test_a_declared_length_over_the_cap_is_a_413_before_reading():
    async def never():
        raise AssertionError("the body must not be read")
        yield b""
    with pytest.raises(RequestError, match="declares 101 bytes, more than the 100") as err:
        _read(never(), "101")
    assert err.value.status == 413


def test_a_body_longer_than_the_cap_is_a_413_once_it_passes_it():
    with pytest.raises(RequestError, match="holds more than the 100 bytes") as err:
        _read(_chunks([b"x" * 60, b"x" * 60, b"never read"]), None)
    assert err.value.status == 413


@pytest.mark.parametrize("declared", ["-1", "12abc", "1e3"])
def test_a_content_length_that_is_no_count_is_a_400(declared):
    with pytest.raises(RequestError, match="is not a byte count") as err:
        _read(_chunks([b"{}"]), declared)
    assert err.value.status == 400


def test_a_stalled_body_is_a_408_after_the_deadline():
    with pytest.raises(RequestError, match=r"did not arrive within 0.05 s \(5 bytes came\)"
                       ) as err:
        _read(_chunks([b"12345"], stall=True), "1000", limit=10_000, timeout_s=0.05)
    assert err.value.status == 408


def test_a_body_within_cap_and_deadline_is_read_whole():
    assert _read(_chunks([b"ab", b"", b"cd"]), "4") == b"abcd"


# -- mutated bodies -----------------------------------------------------------------------
BODY_CASES = 400


def test_mutated_bodies_are_feeds_or_request_errors():
    """Havocked and spliced .npz and JSON bodies (tests/hardening/mutate.py): each decodes
    or is a RequestError; nothing else escapes, and no case allocates more than 64x its
    size."""
    import random

    from tests.hardening.mutate import havoc, splice

    x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    pool = {NPZ: [_npz(x=x), _npz(x=x, ids=np.arange(2)), codec.encode_outputs(
        ["x"], [x], NPZ).body], JSON: [json.dumps({"inputs": {"x": x.tolist()}}).encode()]}
    outcomes = {"decoded": 0, "refused": 0}
    tracemalloc.start()
    try:
        for i in range(BODY_CASES):
            rng = random.Random(f"body:{i}")
            kind = NPZ if i % 4 else JSON
            seed = rng.choice(pool[kind])
            case = havoc(rng, seed) if rng.random() < 0.8 else splice(
                rng, seed, rng.choice(pool[kind]))
            tracemalloc.reset_peak()
            try:
                decode_feeds(INPUTS, case, kind)
                outcomes["decoded"] += 1
            except RequestError:
                outcomes["refused"] += 1
            assert tracemalloc.get_traced_memory()[1] < (1 << 20) + 64 * len(case)
    finally:
        tracemalloc.stop()
    assert outcomes["decoded"] and outcomes["refused"] > BODY_CASES // 2
