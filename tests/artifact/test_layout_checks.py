"""Check what you use (DESIGN.md 2b), per layout: a load hashes the bytes of the layout it
runs, the other layout of a duplex file is hashed when something uses it, each blob once,
and a damaged layout is refused when it is used, never run or written unchecked."""

from __future__ import annotations

import numpy as np
import pytest

import rlx
from rlx import BakeOptions, BakeProfile, MemoryMode, bake
from rlx.artifact import read_rlx, reader, write_rlx
from rlx.errors import IntegrityError
from tests.baking.models import matmul_graph
from tests.hardening.mutate import split_rlx

K, N = 48, 32
W = np.random.default_rng(3).standard_normal((K, N)).astype(np.float32)
X = np.random.default_rng(4).standard_normal((2, K)).astype(np.float32)
WEIGHT_BYTES = W.nbytes  # f32 in every layout (the exact profile)


@pytest.fixture
def hashed(monkeypatch) -> list[int]:
    """The byte count of every checksum the reader takes, in order."""
    counts: list[int] = []
    real = reader.checksum

    def counting(data) -> str:
        counts.append(memoryview(data).nbytes)
        return real(data)

    monkeypatch.setattr(reader, "checksum", counting)
    return counts


def write(tmp_path, memory: MemoryMode, damage: str | None = None):
    """The baked `x @ W` in `memory` mode; `damage` "graph" or "table" flips a byte of the
    blob of W's bytes in that layout."""
    file, _ = bake(matmul_graph(K, N), {"w": W},
                   BakeOptions.from_profile(BakeProfile.EXACT).replace(memory=memory))
    path = tmp_path / f"{memory.value}.rlx"
    write_rlx(path, file)
    if damage is not None:
        data = bytearray(path.read_bytes())
        header, section = split_rlx(bytes(data))
        blob = header["blobs"][_blob_of(header, damage)]
        data[len(data) - len(section) + blob["offset"] + 5] ^= 0x40
        path.write_bytes(bytes(data))
    return path


def _blob_of(header: dict, part: str) -> int:
    if part == "table":
        return next(row["blob"] for row in header["weights"] if row["blob"] is not None)
    return next(node["data"]["blob"] for node in header["graph"]["nodes"]
                if node.get("op") == "Constant" and node["data"]["blob"] is not None
                and header["blobs"][node["data"]["blob"]]["length"] == WEIGHT_BYTES)


def reference() -> np.ndarray:
    return X.astype(np.float64) @ W.astype(np.float64)


@pytest.mark.parametrize("memory", list(MemoryMode))
def test_a_load_hashes_the_weights_once_whatever_the_mode(tmp_path, hashed, memory):
    path = write(tmp_path, memory)
    model = rlx.load(path, engine="numpy")
    assert sum(hashed) == WEIGHT_BYTES  # duplex holds them twice: one layout runs
    np.testing.assert_allclose(model.run({"x": X})[0], reference(), rtol=1e-5, atol=1e-5)
    model.file.tensor("w")  # the table's bytes: hashed now, if the load did not
    table = WEIGHT_BYTES if memory is MemoryMode.DUPLEX else 0
    assert sum(hashed) == WEIGHT_BYTES + table
    model.file.tensor("w")
    assert sum(hashed) == WEIGHT_BYTES + table  # each blob once


@pytest.mark.parametrize("engine", ["numpy", "onnxruntime"])
def test_a_damaged_unused_layout_loads_and_is_refused_when_used(tmp_path, hashed, engine):
    path = write(tmp_path, MemoryMode.DUPLEX, damage="table")
    # runs on the graph's bytes, which are intact (onnxruntime: its prepacked copy is made
    # from them, and cached)
    model = rlx.load(path, engine=engine, cache_dir=tmp_path / "cache")
    assert sum(hashed) == WEIGHT_BYTES
    np.testing.assert_allclose(model.run({"x": X})[0], reference(), rtol=1e-5, atol=1e-5)
    with pytest.raises(IntegrityError, match="checksum mismatch in blob"):
        model.file.tensor("w")
    with pytest.raises(IntegrityError):  # still unchecked, still refused
        rlx.relayout(model.file, MemoryMode.COMPACT)
    with pytest.raises(IntegrityError):  # never given fresh checksums by a write
        write_rlx(tmp_path / "copy.rlx", model.file)
    assert not (tmp_path / "copy.rlx").exists()


@pytest.mark.parametrize("memory, damage", [
    (MemoryMode.DUPLEX, "graph"), (MemoryMode.RUNTIME, "graph"),
    (MemoryMode.COMPACT, "table")])
def test_a_damaged_layout_that_runs_is_refused_at_load(tmp_path, memory, damage):
    path = write(tmp_path, memory, damage=damage)
    with pytest.raises(IntegrityError, match="checksum mismatch in blob"):
        rlx.load(path, engine="numpy")


def test_a_lazily_read_file_is_checked_before_it_is_written(tmp_path, hashed):
    path = write(tmp_path, MemoryMode.COMPACT, damage="table")
    file = read_rlx(path)  # verify="lazy": nothing hashed yet
    assert hashed == []
    with pytest.raises(IntegrityError):
        write_rlx(tmp_path / "copy.rlx", file)
    assert not (tmp_path / "copy.rlx").exists()
