"""write_rlx -> read_rlx: every profile x memory mode, zero-copy reads, determinism, relayout."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from rlx import BakeOptions, BakeProfile, MemoryMode, bake, relayout
from rlx.artifact import parse_rlx, read_rlx, write_rlx
from rlx.artifact.layout import ALIGN, PREAMBLE, align
from rlx.artifact.writer import encode_rlx
from rlx.errors import ArtifactError, IntegrityError
from rlx.ir import Constant
from rlx.runtime import Session
from tests.baking.models import mlp_graph, mlp_weights

X = np.random.default_rng(0).standard_normal((32, 784)).astype(np.float32)


def baked(profile=BakeProfile.EXACT, memory=MemoryMode.COMPACT):
    return bake(mlp_graph(), mlp_weights(), BakeOptions.from_profile(profile).replace(
        memory=memory))[0]


def outputs(file):
    return Session().compile(file.into_runtime_graph()).run({"x": X})


@pytest.mark.parametrize("profile", list(BakeProfile))
@pytest.mark.parametrize("memory", list(MemoryMode))
def test_round_trip_keeps_outputs_and_table(tmp_path, profile, memory):
    original = baked(profile, memory)
    path = tmp_path / "m.rlx"
    write_rlx(path, original)
    loaded = read_rlx(path, verify="full")
    assert loaded.meta == original.meta
    assert [(w.name, w.shape, w.encoding, w.layout, w.nbytes, w.node_id) for w in loaded.weights] \
        == [(w.name, w.shape, w.encoding, w.layout, w.nbytes, w.node_id)
            for w in original.weights]
    for a, b in zip(loaded.weights, original.weights):
        assert bytes(a.data) == bytes(b.data)
    assert len(loaded.graph) == len(original.graph)
    expected = outputs(original)
    np.testing.assert_array_equal(outputs(loaded)[0], expected[0])


def test_memory_modes_are_real_on_disk(tmp_path):
    sizes = {}
    for memory in MemoryMode:
        path = tmp_path / f"{memory.value}.rlx"
        write_rlx(path, baked(memory=memory))
        sizes[memory] = path.stat().st_size
    weight_bytes = baked(memory=MemoryMode.DUPLEX).meta.weight_bytes
    assert sizes[MemoryMode.DUPLEX] - sizes[MemoryMode.COMPACT] >= weight_bytes * 0.95
    assert abs(sizes[MemoryMode.RUNTIME] - sizes[MemoryMode.COMPACT]) < 2048


def test_reads_are_views_into_the_map(tmp_path):
    path = tmp_path / "m.rlx"
    write_rlx(path, baked(memory=MemoryMode.COMPACT))
    file = read_rlx(path)
    for w in file.weights:  # views of the read-only map, not copies
        assert not w.data.flags.owndata and not w.data.flags.writeable
    graph = file.into_runtime_graph()
    node = graph.node(file.weight("w1").node_id)
    assert np.shares_memory(node.op.data, file.weight("w1").data)


def test_blobs_are_aligned_and_compact_is_tight(tmp_path):
    file = baked(memory=MemoryMode.COMPACT)
    _, header, blobs = encode_rlx(file)
    path = tmp_path / "m.rlx"
    write_rlx(path, file)
    unique = sum(b.nbytes for b in blobs)
    data_start = align(PREAMBLE.size + len(header))
    assert data_start % ALIGN == 0
    assert path.stat().st_size <= data_start + unique + ALIGN * len(blobs)


def test_writes_are_deterministic(tmp_path):
    digests = set()
    for i in range(2):
        path = tmp_path / f"{i}.rlx"
        write_rlx(path, baked(BakeProfile.SIZE))
        digests.add(hashlib.sha256(path.read_bytes()).hexdigest())
    assert len(digests) == 1


@pytest.mark.parametrize("source", list(MemoryMode))
@pytest.mark.parametrize("target", list(MemoryMode))
def test_relayout_between_every_pair_of_modes(tmp_path, source, target):
    moved = relayout(baked(memory=source), target)
    assert moved.meta.memory_mode == target.value
    path = tmp_path / "m.rlx"
    write_rlx(path, moved)
    again = read_rlx(path, verify="full")
    stripped = [n for n in again.graph.nodes() if isinstance(n.op, Constant) and n.op.is_stripped]
    assert bool(stripped) == (target is MemoryMode.COMPACT)
    assert all(w.nbytes == 0 for w in again.weights) == (target is MemoryMode.RUNTIME)
    np.testing.assert_array_equal(outputs(again)[0], outputs(baked())[0])


def test_lazy_verification_catches_a_flip_at_first_use(tmp_path):
    path = tmp_path / "m.rlx"
    write_rlx(path, baked(memory=MemoryMode.COMPACT))
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x10  # inside the last blob
    file = parse_rlx(bytes(data), verify="lazy")  # opening is fine ...
    with pytest.raises(IntegrityError, match="checksum mismatch in blob"):
        file.into_runtime_graph()  # ... using the weights is not
    with pytest.raises(IntegrityError):
        parse_rlx(bytes(data), verify="full")
    parse_rlx(bytes(data), verify="none").into_runtime_graph()  # the caller opted out


def test_a_failed_write_leaves_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "m.rlx"
    write_rlx(path, baked())
    before = path.read_bytes()

    def half_then_fail(data):  # the first blob's bytes, then the disk fills up
        yield memoryview(b"half a blob")
        raise OSError("no space left on device")

    import rlx.artifact.writer as writer
    monkeypatch.setattr(writer, "_pieces", half_then_fail)
    with pytest.raises(OSError, match="no space"):
        write_rlx(path, baked(BakeProfile.SIZE))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.rlx"]  # no temp file left behind


def test_unknown_verify_mode_is_refused():
    with pytest.raises(ArtifactError, match="verify must be one of"):
        parse_rlx(b"", verify="sometimes")
