"""The compressed header region (flag bit 0, docs/format.md), read back from the spec with
`zstandard` and `xxhash` directly: what the writer puts there, that files with a plain
header still read, and when the writer keeps a header plain."""

from __future__ import annotations

import json
import struct

import numpy as np
import xxhash
import zstandard

from rlx import BakeOptions, BakeProfile, bake
from rlx.artifact import parse_rlx, write_rlx
from rlx.ir import BinaryOp, Graph, Shape
from rlx.runtime import Session
from tests.baking.models import mlp_forward, mlp_graph, mlp_weights
from tests.hardening import mutate

WEIGHTS = mlp_weights(seed=3)


def _written(tmp_path, graph: Graph, weights: dict) -> bytes:
    file, _ = bake(graph, weights, BakeOptions.from_profile(BakeProfile.EXACT))
    write_rlx(tmp_path / "m.rlx", file)
    return (tmp_path / "m.rlx").read_bytes()


def test_the_header_is_blob_checksums_then_one_zstd_frame(tmp_path):
    data = _written(tmp_path, mlp_graph(), WEIGHTS)
    magic, schema, flags, length, digest = struct.unpack_from("<8sIIQ16s", data)
    region = data[40:40 + length]
    assert (magic, schema, flags) == (b"RLXBAKE1", 3, 1)
    assert xxhash.xxh3_128_digest(region) == digest
    (count,) = struct.unpack_from("<I", region)
    frame = region[4 + 16 * count:]
    assert zstandard.get_frame_parameters(frame).content_size > len(frame)
    header = json.loads(zstandard.ZstdDecompressor().decompress(frame))
    assert len(header["blobs"]) == count and header["format"] == "rlx"
    start = -(-(40 + length) // 64) * 64
    for i, blob in enumerate(header["blobs"]):
        assert set(blob) == {"offset", "length"}  # the checksums are outside the frame
        body = data[start + blob["offset"]:start + blob["offset"] + blob["length"]]
        assert region[4 + 16 * i:20 + 16 * i] == xxhash.xxh3_128_digest(body)


def test_a_file_with_a_plain_header_reads_the_same(tmp_path):
    """Files written before headers were compressed: flags 0, checksums in the JSON."""
    data = _written(tmp_path, mlp_graph(), WEIGHTS)
    plain = mutate.build_rlx(*mutate.split_rlx(data))
    assert struct.unpack_from("<I", plain, 12) == (0,) and len(plain) > len(data)
    x = np.random.default_rng(0).standard_normal((32, 784)).astype(np.float32)
    for buffer in (data, plain):
        (out,) = Session().compile(parse_rlx(buffer, verify="full").into_runtime_graph()).run(
            {"x": x})
        np.testing.assert_allclose(out, mlp_forward(x, WEIGHTS), rtol=1e-4, atol=1e-4)


def _long_graph(nodes: int) -> Graph:
    """A graph of `nodes` additions and no weights: a header far larger than its data."""
    g = Graph("long")
    x = g.input("x", Shape([2]))
    y = x
    for _ in range(nodes):
        y = g.binary(BinaryOp.ADD, y, x)
    g.set_outputs([y])
    return g


def test_a_header_that_would_inflate_past_the_readers_bound_stays_plain(tmp_path):
    """The reader lets a compressed header inflate to 128 KiB more than the file: the
    writer keeps a longer one plain, so what it writes always reads."""
    data = _written(tmp_path, _long_graph(1500), {})
    (flags, length) = struct.unpack_from("<IQ", data, 12)
    assert flags == 0 and length > 128 << 10
    assert json.loads(data[40:40 + length])["format"] == "rlx"
    (out,) = Session().compile(parse_rlx(data).into_runtime_graph()).run(
        {"x": np.ones(2, np.float32)})
    np.testing.assert_array_equal(out, np.full(2, 1501, np.float32))
