"""rlx.deferred: arrays read from their file (FileView) or computed (Computed) when used."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from rlx.deferred import (
    DEFER_MIN_BYTES,
    Computed,
    FileView,
    compute,
    defer,
    materialize,
    read_rows,
    row_blocks,
)
from rlx.errors import BakeError
from rlx.weights import load_weights

MIB = 1 << 20
RNG = np.random.default_rng(0)


def rss(field: str) -> int:
    """A field of /proc/self/status (RssFile, RssAnon), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/self/status")


def mapped(tmp_path: Path, **tensors: np.ndarray) -> dict:
    path = tmp_path / "w.safetensors"
    save_file(tensors, str(path))
    return load_weights(path).tensors


def test_a_file_view_reads_the_file_without_making_its_pages_resident(tmp_path):
    big = RNG.standard_normal((4096, 4096), dtype=np.float32)  # 64 MiB
    view = mapped(tmp_path, big=big)["big"]
    lazy = defer(view)
    assert isinstance(lazy, FileView) and lazy.shape == big.shape and lazy.dtype == big.dtype
    before = rss("RssFile")
    for _ in range(3):
        np.testing.assert_array_equal(lazy.read(), big)
    assert rss("RssFile") - before < 8 * MIB  # read with pread: no page of the map touched
    float(view.sum())  # the map itself, for comparison: every page becomes resident
    assert rss("RssFile") - before > 60 * MIB


def test_chunks_fingerprints_and_sameness_follow_the_bytes(tmp_path):
    a = RNG.standard_normal((1024, 512), dtype=np.float32)  # 2 MiB
    b = a.copy()
    b[-1, -1] += 1
    views = mapped(tmp_path, a=a, b=b, c=a.copy())
    fa, fb, fc = (defer(views[k]) for k in "abc")
    # a piece is valid until the next: each is copied as it comes
    assert b"".join(bytes(piece) for piece in fa.chunks(300_000)) == a.tobytes()
    assert fa.fingerprint() == fc.fingerprint() != fb.fingerprint()
    assert fa.same(fc) and not fa.same(fb)
    assert fa.reshape((512, 1024)).read().shape == (512, 1024)
    np.testing.assert_array_equal(np.asarray(fa), a)  # __array__ reads


def test_what_stays_an_array(tmp_path):
    memory = np.ones(DEFER_MIN_BYTES, np.uint8)
    assert defer(memory) is memory  # in memory already: nothing to save
    small = mapped(tmp_path, s=np.ones(16, np.float32))["s"]
    assert defer(small) is small  # under DEFER_MIN_BYTES
    half = memory[:DEFER_MIN_BYTES // 2]
    assert isinstance(compute(np.negative, (half,), (), half.shape, np.uint8), np.ndarray)
    assert isinstance(compute(np.negative, (np.ones(MIB, np.float32),), (), (MIB,), np.float32),
                      Computed)


def _scaled(factor: float, values: np.ndarray) -> np.ndarray:
    return values * np.float32(factor)


def test_a_computed_array_is_its_recipe():
    values = RNG.standard_normal((512, 512), dtype=np.float32)
    made = Computed(_scaled, (values,), (2.0,), values.shape, np.float32)
    out = made.read()
    np.testing.assert_array_equal(out, values * 2)
    assert not out.flags.writeable
    again = Computed(_scaled, (values.copy(),), (2.0,), values.shape, np.float32)
    other = Computed(_scaled, (values,), (3.0,), values.shape, np.float32)
    assert made.same(again) and made.fingerprint() == again.fingerprint()
    assert not made.same(other) and made.fingerprint() != other.fingerprint()
    chained = Computed(np.negative, (made,), (), values.shape, np.float32)
    np.testing.assert_array_equal(materialize(chained), -values * 2)
    assert chained.reshape((256, 1024)).read().shape == (256, 1024)


def test_a_result_that_is_not_what_was_declared_is_refused():
    wrong = Computed(np.ones, (), ((3, 3),), (9,), np.float32)  # np.ones gives float64
    with pytest.raises(BakeError, match="gave float64"):
        wrong.read()


def test_a_file_rewritten_under_a_file_view_still_reads_as_opened(tmp_path):
    original = RNG.standard_normal((1024, 1024), dtype=np.float32)
    view = mapped(tmp_path, w=original)["w"]
    lazy = defer(view)
    assert isinstance(lazy, FileView)
    other = tmp_path / "other.safetensors"
    save_file({"w": -original}, str(other))
    subprocess.run(["cp", str(other), str(tmp_path / "w.safetensors")], check=True)
    np.testing.assert_array_equal(lazy.read(), original)  # the lease kept the bytes
    assert b"".join(bytes(piece) for piece in lazy.chunks()) == original.tobytes()


def test_row_blocks_read_only_their_rows_and_join_to_the_whole(tmp_path):
    values = RNG.standard_normal((1000, 700), dtype=np.float32)  # 2.7 MiB: deferred
    lazy = defer(mapped(tmp_path, w=values)["w"])
    assert isinstance(lazy, FileView)
    blocks = list(row_blocks(lazy, multiple=32, max_bytes=MIB))
    assert all(len(b) % 32 == 0 for b in blocks[:-1]) and len(blocks) > 2
    assert all(b.nbytes <= MIB for b in blocks)
    np.testing.assert_array_equal(np.concatenate(blocks), values)
    np.testing.assert_array_equal(read_rows(lazy, 37, 41), values[37:41])
    np.testing.assert_array_equal(read_rows(values, 37, 41), values[37:41])
    # a block smaller than `multiple` rows' bytes still makes progress, `multiple` at a time
    assert [len(b) for b in row_blocks(values[:70], multiple=32, max_bytes=1)] == [32, 32, 6]


def test_a_rowwise_computation_computes_only_the_rows_asked_for(tmp_path):
    values = RNG.standard_normal((1024, 512), dtype=np.float32)
    lazy = defer(mapped(tmp_path, w=values)["w"])
    seen: list[int] = []

    def halved(x: np.ndarray) -> np.ndarray:
        seen.append(len(x))
        return x.astype(np.float16)

    made = Computed(halved, (lazy,), (), values.shape, np.float16, rowwise=True)
    np.testing.assert_array_equal(made.read_rows(10, 20), values[10:20].astype(np.float16))
    assert seen == [10]
    joined = b"".join(bytes(piece) for piece in made.chunks(size=64 * 1024))
    assert joined == values.astype(np.float16).tobytes()
    assert max(seen[1:]) * 512 * 2 <= 64 * 1024  # each chunk computed from its own rows
    assert made.reshape((1024, 16, 32)).rowwise
    # reshaped flat (an encoded stream's declared shape), it is still written by rows
    flat = made.reshape((values.size,))
    seen.clear()
    assert b"".join(bytes(piece) for piece in flat.chunks(size=64 * 1024)) == joined
    assert len(seen) == 16 and max(seen) * 512 * 2 <= 64 * 1024
    seen.clear()
    np.testing.assert_array_equal(flat.read_rows(0, 3), values.astype(np.float16).reshape(-1)[:3])
    assert seen == [1024]  # its first axis no longer its rows: read whole
    whole = Computed(halved, (lazy,), (), values.shape, np.float16)  # not rowwise: reads all
    seen.clear()
    whole.read_rows(0, 1)
    assert seen == [1024]


def test_a_streamed_computation_reads_its_inputs_itself(tmp_path):
    """`streamed`: the function gets its deferred input unread and reads the blocks it needs,
    so its result is computed without a whole read of the input beside it."""
    values = RNG.standard_normal((1024, 512), dtype=np.float32)
    lazy = defer(mapped(tmp_path, w=values)["w"])
    given: list[object] = []

    def column_sums(x) -> np.ndarray:
        given.append(x)
        return sum(block.sum(axis=0, dtype=np.float64) for block in row_blocks(x, max_bytes=MIB))

    made = Computed(column_sums, (lazy,), (), (512,), np.float64, streamed=True)
    np.testing.assert_allclose(made.read(), values.sum(axis=0, dtype=np.float64))
    assert given == [lazy]
    assert made.reshape((16, 32)).streamed
