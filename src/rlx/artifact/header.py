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

import struct
from collections.abc import Callable
from typing import NoReturn

from rlx.artifact.layout import MAX_HEADER_BYTES

__all__ = ["FLAG_ZSTD_HEADER", "DIGEST_BYTES", "max_inflated", "pack_region", "unpack_region"]

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
        text = zstandard.ZstdDecompressor().decompress(frame, max_output_size=limit,
                                                        allow_extra_data=False)
    except zstandard.ZstdError as err:
        fail(f"corrupt compressed header ({err})")
    if len(text) != size:
        fail(f"compressed header inflated to {len(text)} bytes, {size} declared")
    return text, digests
