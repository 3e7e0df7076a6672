"""`write_rlx`: an `RlxFile` to schema-3 bytes on disk, atomically and deterministically.

The same file always gives the same bytes: the header is JSON with a fixed key order and no
timestamps, blobs follow in graph order then table order, padding is zeros.
"""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import asdict

import numpy as np

from rlx.artifact.atomic import atomic_write
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
from rlx.ir.graph import Node
from rlx.ir.ops.sources import Constant
from rlx.ir.serialize import graph_to_dict
from rlx.version import __version__

progress = logging.getLogger("rlx.progress")  # shown on a terminal (cli_ui)


def encode_rlx(file: RlxFile) -> tuple[bytes, list[np.ndarray]]:
    """The header bytes and the blobs, in file order (blobs are views, not copies)."""
    blobs: list[np.ndarray] = []

    def blob_ref(data: np.ndarray) -> dict:
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
    table, offset = [], 0
    for data in blobs:
        table.append({"offset": offset, "length": int(data.nbytes), "xxh3": checksum(data)})
        offset = align(offset + data.nbytes)
    meta = asdict(file.meta)
    for io_list in ("inputs", "outputs"):
        meta[io_list] = [{**io, "shape": list(io["shape"])} for io in meta[io_list]]
    header = {"format": "rlx", "schema": SCHEMA_VERSION, "writer": f"rlx {__version__}",
              "meta": meta, "graph": graph, "weights": weights, "blobs": table}
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.encode("utf-8"), blobs


def iter_rlx_bytes(file: RlxFile) -> Iterator[memoryview | bytes]:
    """The whole file as a sequence of pieces, so it can be streamed (e.g. into encryption)."""
    header, blobs = encode_rlx(file)
    yield PREAMBLE.pack(MAGIC, SCHEMA_VERSION, 0, len(header), header_digest(header))
    yield header
    position = PREAMBLE.size + len(header)
    data_start = align(position)
    yield bytes(data_start - position)
    cursor = 0
    for index, data in enumerate(blobs):
        if index:  # the file ends where the last blob ends: pad only between blobs
            yield bytes(align(cursor) - cursor)
            cursor = align(cursor)
        yield data.data  # a memoryview of the (contiguous) array, no copy
        cursor += data.nbytes


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


_PROGRESS_STEP = 16 << 20  # report bytes written every 16 MiB


def _write_pieces(out, pieces: list) -> None:
    """Write the pieces, in slices of `_PROGRESS_STEP`, saying how far it got."""
    total = sum(memoryview(p).nbytes for p in pieces)
    done = 0
    for piece in pieces:
        view = memoryview(piece).cast("B")
        for start in range(0, len(view), _PROGRESS_STEP):
            chunk = view[start:start + _PROGRESS_STEP]
            out.write(chunk)
            done += len(chunk)
            progress.debug("%s of %s bytes written", f"{done:,}", f"{total:,}")


def write_rlx(path: str | os.PathLike, file: RlxFile, *, password: str | bytes | None = None,
              kdf=None, chunk_size: int | None = None) -> None:
    """Write `file` to `path` atomically; encrypt it (RLXENC01) when a password is given."""
    with atomic_write(path) as out:
        if password is None:
            _write_pieces(out, list(iter_rlx_bytes(file)))
        else:
            from rlx.artifact import crypto

            pieces = list(iter_rlx_bytes(file))  # views of the weights, not copies
            length = sum(memoryview(p).nbytes for p in pieces)
            reader = io.BufferedReader(_PieceReader(iter(pieces)), 1 << 20)
            crypto.encrypt_stream(reader, out, password, length=length, name=os.fspath(path),
                                  kdf=kdf or crypto.DEFAULT_KDF,
                                  chunk_size=chunk_size or crypto.DEFAULT_CHUNK_SIZE)


__all__ = ["ALIGN", "encode_rlx", "iter_rlx_bytes", "write_rlx"]
