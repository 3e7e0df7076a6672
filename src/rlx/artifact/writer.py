"""`write_rlx`: an `RlxFile` to schema-3 bytes on disk, atomically and deterministically.

The same file always gives the same bytes: the header is JSON with a fixed key order and no
timestamps (compressed by `rlx.artifact.header`: the same bytes with the same zstandard),
blobs follow in graph order then table order, padding is zeros. The blobs are streamed into
the file one at a time, checksummed as they go (`_write_streaming`), so a baked model whose
weights are deferred (`rlx.deferred`) is written without ever being in memory as a whole.
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

import xxhash

from rlx.artifact.atomic import atomic_write
from rlx.artifact.header import FLAG_ZSTD_HEADER, max_inflated, pack_region
from rlx.artifact.layout import (
    ALIGN,
    MAGIC,
    PREAMBLE,
    SCHEMA_VERSION,
    align,
    checksum,
    header_digest,
)
from rlx.artifact.model import RlxFile
from rlx.artifact.self_test import SelfTestSection, encode_self_test
from rlx.deferred import CHUNK_BYTES, Deferred, Payload
from rlx.ir.graph import Node
from rlx.ir.ops.sources import Constant
from rlx.ir.serialize import graph_to_dict
from rlx.version import __version__

progress = logging.getLogger("rlx.progress")  # shown on a terminal (cli_ui)


@dataclass(frozen=True)
class _Layout:
    """Everything about the file but the blob checksums: the header (whose blob table
    lacks them), the blobs in file order, and where the data section ends."""

    header: dict
    blobs: list[Payload]
    data_bytes: int  # from the data section's start to the end of the last blob

    @property
    def file_bytes(self) -> int:
        _, region = self.header_region([_NO_DIGEST] * len(self.blobs))  # as long as the real one
        return align(PREAMBLE.size + len(region)) + self.data_bytes

    def header_region(self, digests: list[str]) -> tuple[int, bytes]:
        """(flags, header region): compressed when the reader's bound allows it
        (`rlx.artifact.header`), else plain JSON with the checksums in the blob table."""
        table: list[dict[str, int | str]] = []
        offset = 0
        for data in self.blobs:
            table.append({"offset": offset, "length": int(data.nbytes)})
            offset = align(offset + data.nbytes)
        text = _json({**self.header, "blobs": table})
        if len(text) <= max_inflated(self.data_bytes):
            return FLAG_ZSTD_HEADER, pack_region(text, digests)
        for entry, digest in zip(table, digests):
            entry["xxh3"] = digest
        return 0, _json({**self.header, "blobs": table})


def _json(document: dict) -> bytes:
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def _layout(file: RlxFile) -> _Layout:
    file.check_integrity()  # a file read lazily: its bytes get new checksums here
    blobs: list[Payload] = []

    def blob_ref(data: Payload) -> dict:
        if data.nbytes == 0:
            return {"blob": None}
        blobs.append(data)
        return {"blob": len(blobs) - 1}

    def encode_constant(node: Node) -> dict:
        assert isinstance(node.op, Constant)  # the encoder of Constant nodes
        return blob_ref(node.op.data)

    graph = graph_to_dict(file.graph, encode_constant)
    weights = []
    for row in file.weights:
        weights.append({
            "name": row.name, "shape": list(row.shape), "dtype": row.dtype,
            "encoding": row.encoding, "layout": row.layout, "row_aligned": row.row_aligned,
            "node_id": row.node_id, "note": row.note, **blob_ref(row.data),
        })
    header = {"format": "rlx", "schema": SCHEMA_VERSION, "writer": f"rlx {__version__}",
              "meta": file.meta.to_json(), "graph": graph, "weights": weights}
    if file.self_test is not None:  # the last blob: a reader not asked never reaches it
        test = file.self_test
        description, payload = encode_self_test(
            test.load() if isinstance(test, SelfTestSection) else test)
        header["self_test"] = {**description, **blob_ref(payload)}
    end = 0
    for data in blobs:
        end = align(end) + int(data.nbytes)
    return _Layout(header, blobs, end)


def _checksum(data: Payload) -> str:
    if not isinstance(data, Deferred):
        return checksum(data)
    digest = xxhash.xxh3_128()  # streamed: the same digest as `checksum` of the bytes
    for piece in data.chunks():
        digest.update(piece)
    return digest.hexdigest()


def encode_rlx(file: RlxFile) -> tuple[int, bytes, list[Payload]]:
    """The flags, the header region and the blobs, in file order (blobs are views, not
    copies, or `Deferred` arrays: each is read once here, for its checksum)."""
    layout = _layout(file)
    return (*layout.header_region([_checksum(b) for b in layout.blobs]), layout.blobs)


def _pieces(data: Payload) -> Iterator[memoryview]:
    """A blob's bytes in pieces of at most `CHUNK_BYTES` (each valid until the next)."""
    if isinstance(data, Deferred):
        yield from data.chunks()
        return
    view = data.data.cast("B")  # the (contiguous) array's bytes, no copy
    for start in range(0, len(view), CHUNK_BYTES):
        yield view[start:start + CHUNK_BYTES]


def iter_rlx_bytes(file: RlxFile) -> Iterator[memoryview | bytes]:
    """The whole file as a sequence of pieces, so it can be streamed (e.g. into encryption);
    a piece is valid until the next is asked for. Deferred blobs are read twice: once for
    the header's checksums, once for their bytes."""
    flags, header, blobs = encode_rlx(file)
    yield from _frame(flags, header)
    cursor = 0
    for index, data in enumerate(blobs):
        if index:  # the file ends where the last blob ends: pad only between blobs
            yield bytes(align(cursor) - cursor)
            cursor = align(cursor)
        yield from _pieces(data)
        cursor += data.nbytes


def _frame(flags: int, header: bytes) -> Iterator[bytes]:
    """The preamble, the header region and the padding up to the data section."""
    yield PREAMBLE.pack(MAGIC, SCHEMA_VERSION, flags, len(header), header_digest(header))
    yield header
    position = PREAMBLE.size + len(header)
    yield bytes(align(position) - position)


class _PieceReader(io.RawIOBase):
    """A read-only stream over pieces, so a file can be encrypted without joining them."""

    def __init__(self, pieces: Iterator):
        self._pieces = pieces
        self._current = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not len(self._current):
            piece = next(self._pieces, None)
            if piece is None:
                return 0
            self._current = memoryview(piece).cast("B")
        n = min(len(buffer), len(self._current))
        buffer[:n] = self._current[:n]
        self._current = self._current[n:]
        return n


_NO_DIGEST = "0" * 32  # an xxh3-128 hex digest's width: the header keeps its length


def _write_streaming(out, file: RlxFile) -> None:
    """Write the file in one pass over its blobs: the header goes first with placeholder
    checksums, each blob is read once (a deferred one: from its file, or computed) and
    hashed as it is written, then the header is written again with the real ones (the
    same length: digests are fixed-width). The bytes are those of `iter_rlx_bytes`."""
    layout = _layout(file)
    flags, placeholder = layout.header_region([_NO_DIGEST] * len(layout.blobs))
    for part in _frame(flags, placeholder):
        out.write(part)
    total, done, cursor, digests = layout.data_bytes, 0, 0, []
    for index, data in enumerate(layout.blobs):
        if index:
            out.write(bytes(align(cursor) - cursor))
            cursor = align(cursor)
        digest = xxhash.xxh3_128()
        for piece in _pieces(data):
            digest.update(piece)
            out.write(piece)
            done += len(piece)
            progress.debug("%s of %s bytes written", f"{done:,}", f"{total:,}",
                           extra={"progress": (done, total)})
        digests.append(digest.hexdigest())
        cursor += data.nbytes
    flags, header = layout.header_region(digests)
    assert len(header) == len(placeholder)  # fixed-width digests
    out.seek(0)
    for part in _frame(flags, header):
        out.write(part)


def write_rlx(path: str | os.PathLike, file: RlxFile, *, password: str | bytes | None = None,
              kdf=None, chunk_size: int | None = None) -> None:
    """Write `file` to `path` atomically; encrypt it (RLXENC01) when a password is given.

    Weights are written one at a time: a deferred one (`rlx.deferred`) is read or computed
    as it is written and dropped before the next, so writing a model larger than memory
    holds one weight at a time."""
    with atomic_write(path) as out:
        if password is None:
            _write_streaming(out, file)
        else:
            from rlx.artifact import crypto

            reader = io.BufferedReader(_PieceReader(iter_rlx_bytes(file)), 1 << 20)
            crypto.encrypt_stream(reader, out, password, length=_layout(file).file_bytes,
                                  name=os.fspath(path), kdf=kdf or crypto.DEFAULT_KDF,
                                  chunk_size=chunk_size or crypto.DEFAULT_CHUNK_SIZE)


__all__ = ["ALIGN", "encode_rlx", "iter_rlx_bytes", "write_rlx"]
