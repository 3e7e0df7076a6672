"""Every bit of a small flat `.rlxp` package flipped, one at a time (the `.rlx` rules of
flips.py applied to the package's regions): a flip in the header, TOC, digest, graph, a
compressed tensor or a sidecar fails at open; a flip in a hot tensor fails at open with
verify="full" and at first use with "lazy"; a flip in the zero padding changes nothing."""

from __future__ import annotations

import bisect
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from rlx import BakeOptions, BakeProfile, MemoryMode, bake
from rlx.artifact import read_rlxp, write_rlxp
from rlx.errors import ArtifactError, IntegrityError
from tests.hardening import flips, mutate, seeds

OPEN, HOT, PADDING = "checked at open", "hot tensor", "padding"


def small_package() -> bytes:
    graph, weights = seeds._mlp()
    file = bake(graph, weights, BakeOptions.from_profile(BakeProfile.SIZE).replace(
        memory=MemoryMode.DUPLEX))[0]
    names = [w.name for w in file.weights]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.rlxp"
        write_rlxp(path, file, tiers={names[0]: "warm", names[1]: "cold"}, block_size=300)
        return path.read_bytes()


def regions(data: bytes) -> list[tuple[int, int, str]]:
    toc, body = mutate.split_rlxp(data)
    start = len(data) - len(body)
    spans = [(0, 24 + len(_toc_text(data)) + 16, OPEN)]
    parts = [(toc["graph"]["offset"], toc["graph"]["length"], OPEN)]
    parts += [(t["offset"], t["stored_len"], HOT if t["tier"] == "hot" else OPEN)
              for t in toc["tensors"]]
    parts += [(s["offset"], s["length"], OPEN) for s in toc["sidecars"]]
    cursor = spans[0][1]
    for offset, length, kind in sorted(parts):
        if start + offset > cursor:
            spans.append((cursor, start + offset, PADDING))
        spans.append((start + offset, start + offset + length, kind))
        cursor = start + offset + length
    assert cursor == len(data)
    return [s for s in spans if s[1] > s[0]]


def _toc_text(data: bytes) -> bytes:
    return data[24:24 + int.from_bytes(data[16:24], "little")]


@contextmanager
def flipped(path: Path, bit: int) -> Iterator[None]:
    """`path` with `bit` flipped in place, then restored: one byte rewritten each way (a
    copy of the package per flip wrote ~0.5 GB for this test alone)."""
    with open(path, "r+b") as f:
        offset = bit // 8
        byte = os.pread(f.fileno(), 1, offset)[0]
        os.pwrite(f.fileno(), bytes([byte ^ 1 << bit % 8]), offset)
        try:
            yield
        finally:
            os.pwrite(f.fileno(), bytes([byte]), offset)


def check(path: Path, bit: int, kind: str, mode: str, expected) -> str | None:
    """The rule of `kind` applied to the package at `path` (already flipped) read with `mode`."""
    stage = "open"
    try:
        file = read_rlxp(path, verify=mode)
        stage = "use"
        if kind == PADDING:
            return None if flips._same(flips._run(file), expected) else "padding flip mattered"
        file.into_runtime_graph()
    except ArtifactError as err:
        if kind == OPEN and stage == "open":
            return None
        want = "open" if mode == "full" else "use"
        if kind == HOT and isinstance(err, IntegrityError) and stage == want:
            return None
        return f"{kind} flip: {type(err).__name__} at {stage} ({err})"
    return f"{kind} flip at bit {bit} went unnoticed"


@pytest.mark.slow
def test_every_single_bit_flip_of_a_small_package(tmp_path):
    data = small_package()
    spans = regions(data)
    kinds = {k for *_, k in spans}
    assert kinds == {OPEN, HOT, PADDING}
    assert all(not any(data[s:e]) for s, e, k in spans if k == PADDING)
    starts = [s for s, _, _ in spans]
    path, wrong = tmp_path / "flip.rlxp", []
    path.write_bytes(data)
    expected = flips._run(read_rlxp(path, verify="full"))
    for bit in range(len(data) * 8):
        kind = spans[bisect.bisect_right(starts, bit // 8) - 1][2]
        with flipped(path, bit):
            for mode in ("full", "lazy"):
                problem = check(path, bit, kind, mode, expected)
                if problem:
                    wrong.append(f"bit {bit} ({mode}): {problem}")
    assert wrong == []
    assert path.read_bytes() == data  # every flip was undone


def test_a_flip_is_made_in_place_and_undone(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(bytes(4))
    inode = path.stat().st_ino
    with flipped(path, 8 * 2 + 5):
        assert path.read_bytes() == bytes([0, 0, 1 << 5, 0]) and path.stat().st_ino == inode
    assert path.read_bytes() == bytes(4)
