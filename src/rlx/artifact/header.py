"""The header region of a schema-3 file (docs/format.md): plain JSON, or (flag bit 0) the
blob checksums in binary followed by the JSON in one zstd frame.

Why compressed: the JSON graph is a quarter of a small model's size-profile file (PP-OCR's
classifier: 59.5 KB of 239 KB) and inflates 8-12x (zstd level 9). Why the checksums stay
outside the frame: they are the only part that is known after the blobs are written, and
at a fixed width the streaming writer can fill them in afterwards without changing the
region's length.

The frame may inflate to at most `max_inflated(file bytes)`: a small file must not make a
reader allocate much more than its own size (docs/reliability.md, contract 2). The writer
compresses only headers within that bound, so everything it writes reads back.
"""

from __future__ import annotations

import _thread
import struct
from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn

from rlx.artifact.layout import (
    ENCRYPTED_MAGIC,
    MAGIC,
    MAX_HEADER_BYTES,
    MAX_JSON_DEPTH,
    PREAMBLE,
    REFERENCE_SCHEMAS,
    SCHEMA_VERSION,
    header_digest,
)
from rlx.artifact.sniff import foreign_hint
from rlx.errors import ArtifactError, EncryptedFileError, IntegrityError
from rlx.safeio.json_scan import JsonLimits, load_json

__all__ = ["FLAG_ZSTD_HEADER", "DIGEST_BYTES", "Header", "io_fields", "max_inflated",
           "pack_region", "read_header", "unpack_region"]

FLAG_ZSTD_HEADER = 1
DIGEST_BYTES = 16  # an XXH3-128 digest
INFLATE_SLACK = 128 << 10
"""What a compressed header may inflate to beyond the file's own size: the densest JSON the
scan lets through (small lists of floats) parses to 16x its text, 2 MiB of the contract's
4 MiB (tests/hardening/test_attacks.py)."""

_LEVEL = 9  # 55 KB of JSON: 4.9 KB in 2 ms (level 19: 4.7 KB in 59 ms)
_COUNT = struct.Struct("<I")


def max_inflated(file_bytes: int) -> int:
    """The largest JSON a compressed header may hold in a file of `file_bytes` bytes."""
    return min(MAX_HEADER_BYTES, INFLATE_SLACK + file_bytes)


def pack_region(text: bytes, digests: list[str]) -> bytes:
    """The compressed region: blob count, each blob's digest (hex in, binary out), the frame
    of `text` (the JSON header whose blob entries carry no checksum)."""
    import zstandard

    frame = zstandard.ZstdCompressor(level=_LEVEL, write_content_size=True).compress(text)
    return b"".join([_COUNT.pack(len(digests)), *map(bytes.fromhex, digests), frame])


def unpack_region(region: bytes, file_bytes: int, fail: Callable[[str], NoReturn]
                  ) -> tuple[bytes, list[str]]:
    """The JSON text and the blob digests (hex) of a compressed region, every length
    checked before anything is inflated; what is wrong goes to `fail`."""
    import zstandard

    if len(region) < _COUNT.size:
        fail(f"compressed header of {len(region)} bytes has no blob count")
    (count,) = _COUNT.unpack_from(region)
    start = _COUNT.size + count * DIGEST_BYTES
    if start > len(region):
        fail(f"compressed header: {count} blob checksums do not fit in {len(region)} bytes")
    digests = [region[i:i + DIGEST_BYTES].hex()
               for i in range(_COUNT.size, start, DIGEST_BYTES)]
    frame = region[start:]
    limit = max_inflated(file_bytes)
    try:
        size = zstandard.get_frame_parameters(frame).content_size
        if not 0 <= size <= limit:  # unknown sizes read as 2**64 - 1
            fail(f"compressed header would inflate to {size} bytes; at most {limit} are "
                 f"allowed in a file of {file_bytes} bytes")
        text = _inflate(frame, limit)
    except zstandard.ZstdError as err:
        fail(f"corrupt compressed header ({err})")
    if len(text) != size:
        fail(f"compressed header inflated to {len(text)} bytes, {size} declared")
    return text, digests


_INFLATING = _thread.allocate_lock()
_inflaters: list = []


def _inflate(frame: bytes, limit: int) -> bytes:
    """The frame inflated by the process's one decompressor, made on first use: making one
    allocates ~1 MiB for a moment, which from the second load on would stay in the heap
    the numpy engine keeps (`rlx.runtime.heap`). One thread at a time uses it."""
    import zstandard

    with _INFLATING:
        if not _inflaters:
            _inflaters.append(zstandard.ZstdDecompressor())
        return _inflaters[0].decompress(frame, max_output_size=limit, allow_extra_data=False)


_HEADER_LIMITS = JsonLimits(max_depth=MAX_JSON_DEPTH)
_LISTS = (("graph", "nodes"), ("weights",))  # the header's node list and weight table


class Header(NamedTuple):
    """A checked header: its JSON, the blob checksums stored beside a compressed one (None
    for a plain header) and the region's length in bytes."""

    body: dict
    digests: list[str] | None
    length: int


Fail = Callable[..., NoReturn]  # fail(message, error type=ArtifactError)


def read_header(buf: memoryview, source: str, fail: Fail, size: int | None = None, *,
                lazy_lists: bool = False) -> Header:
    """The header of the plain `.rlx` held in `buf`: magic, schema, flags, length and
    checksum checked, inflated and parsed within limits, a JSON object of schema 3; what is
    wrong goes to `fail` (with `EncryptedFileError` or `IntegrityError` where it is that).
    Reading the header needs no graph IR: a warm engine load (`rlx.engines.warm`) stops
    here, with `buf` holding only the file's first bytes and `size` the file's size.
    `lazy_lists`: the graph's node list and the weight table are iterators that parse
    each entry's JSON as it is reached (`load_json(lazy=...)`), for a reader that builds
    the graph and the weight rows from them: the table's rows are not held parsed while
    the graph is built (~80 KiB at the peak of a CNN's read)."""
    size = len(buf) if size is None else size
    if bytes(buf[:8]) == ENCRYPTED_MAGIC:
        fail("is encrypted; read it with a password", EncryptedFileError)
    if len(buf) < PREAMBLE.size:
        fail(f"too short to be an .rlx file ({size} bytes)")
    magic, schema, flags, length, digest = PREAMBLE.unpack_from(buf)
    if magic != MAGIC:
        hint = foreign_hint(bytes(buf[:16]), source)
        fail(f"bad magic (expected {MAGIC.decode()}, got {magic!r}){hint}")
    if schema in REFERENCE_SCHEMAS:
        fail(f"schema {schema} is the Rust reference's bincode format, which rlx does "
             f"not read; re-bake the model with rlx (schema {SCHEMA_VERSION})")
    if schema != SCHEMA_VERSION:
        fail(f"schema version {schema} is not supported (this rlx reads {SCHEMA_VERSION})")
    if flags & ~FLAG_ZSTD_HEADER:
        fail(f"unknown flags {flags:#x}")
    if length > MAX_HEADER_BYTES or PREAMBLE.size + length > min(size, len(buf)):
        fail(f"header length {length} exceeds the file ({size} bytes) or the "
             f"{MAX_HEADER_BYTES >> 20} MiB cap")
    text = bytes(buf[PREAMBLE.size:PREAMBLE.size + length])
    if header_digest(text) != digest:
        fail("header checksum mismatch: the file is corrupt", IntegrityError)
    digests = None
    if flags & FLAG_ZSTD_HEADER:
        text, digests = unpack_region(text, size, fail)
    body = load_json(text, ArtifactError, f"{source}: header", _HEADER_LIMITS,
                     lazy=_LISTS if lazy_lists else ())
    if not isinstance(body, dict):
        fail("header is not a JSON object")
    if body.get("format") != "rlx" or body.get("schema") != SCHEMA_VERSION:
        fail("header does not describe an rlx schema-3 file")
    return Header(body, digests, length)


def io_fields(value: Any, fail: Fail) -> tuple[str, tuple, str]:
    """(name, dims, dtype name) of a meta `inputs`/`outputs` entry, checked for shape."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) \
            or not isinstance(value.get("dtype"), str) \
            or not isinstance(value.get("shape"), list):
        fail("meta inputs/outputs entries need name, shape and dtype")
    return value["name"], tuple(value["shape"]), value["dtype"]
