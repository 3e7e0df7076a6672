"""The compressed storage tiers of `.rlxp`: warm (`zstd_blocks`) and cold (one zstd frame).

Warm stream: `ZBLK`, u32 block size, u64 raw length, u32 block count, then per block a u32
compressed length and one zstd frame holding `block size` raw bytes (the last block the
rest). Blocks let a reader decode part of a tensor, and bound what one frame may inflate to.
Cold: a single zstd frame, for sidecars read whole.

Every frame is written with its content size and a content checksum; decoding checks the
header fields against the row's raw length before anything is inflated, and every frame's
output size against what it must hold, so a hostile stream cannot make a reader allocate
more than the row declares.
"""

from __future__ import annotations

import struct

import numpy as np
import zstandard

from rlx.errors import ArtifactError

__all__ = ["TIERS", "CODECS", "DEFAULT_BLOCK", "encode_tier", "decode_tier"]

TIERS = {"hot": "raw", "warm": "zstd_blocks", "cold": "zstd"}  # tier -> codec
CODECS = frozenset(TIERS.values())
DEFAULT_BLOCK = 1 << 20
_HEAD = struct.Struct("<4sIQI")
_MAGIC = b"ZBLK"
_LEN = struct.Struct("<I")
_LEVEL = 3


def _compressor() -> zstandard.ZstdCompressor:
    return zstandard.ZstdCompressor(level=_LEVEL, write_checksum=True, write_content_size=True)


def encode_tier(tier: str, raw, block_size: int = DEFAULT_BLOCK) -> bytes | memoryview:
    """The stored bytes of `raw` in `tier` (hot: `raw` itself, no copy)."""
    view = memoryview(raw).cast("B")
    if tier == "hot":
        return view
    if tier == "cold":
        return _compressor().compress(view)
    if tier != "warm":
        raise ArtifactError(f"unknown storage tier {tier!r}; expected hot, warm or cold")
    if not 1 <= block_size <= 1 << 30:
        raise ArtifactError(f"zstd block size must be 1 byte .. 1 GiB, got {block_size}")
    compressor = _compressor()
    count = -(-len(view) // block_size)
    parts = [_HEAD.pack(_MAGIC, block_size, len(view), count)]
    for start in range(0, len(view), block_size):
        frame = compressor.compress(view[start:start + block_size])
        parts += [_LEN.pack(len(frame)), frame]
    return b"".join(parts)


def decode_tier(codec: str, stored: memoryview, raw_len: int, where: str) -> np.ndarray:
    """The raw bytes of a stored region, as flat uint8 (hot: a view of `stored`)."""
    if codec == "raw":
        if len(stored) != raw_len:
            raise ArtifactError(f"{where}: raw length {raw_len} differs from the stored "
                                f"{len(stored)}")
        return np.frombuffer(stored, np.uint8)
    out = np.empty(raw_len, np.uint8)
    if codec == "zstd":
        _inflate(stored, out, where)
    elif codec == "zstd_blocks":
        _inflate_blocks(stored, out, where)
    else:
        raise ArtifactError(f"{where}: unknown codec {codec!r}")
    out.flags.writeable = False
    return out


def _inflate(frame: memoryview, out: np.ndarray, where: str) -> None:
    """One zstd frame into `out`, which it must fill exactly."""
    try:
        params = zstandard.get_frame_parameters(frame)
        if params.content_size != out.size:
            raise ArtifactError(f"{where}: zstd frame holds {params.content_size} bytes, "
                                f"{out.size} expected")
        data = zstandard.ZstdDecompressor().decompress(frame, max_output_size=out.size)
    except zstandard.ZstdError as err:
        raise ArtifactError(f"{where}: corrupt zstd frame ({err})") from None
    if len(data) != out.size:
        raise ArtifactError(f"{where}: zstd frame inflated to {len(data)} bytes, "
                            f"{out.size} expected")
    out[:] = np.frombuffer(data, np.uint8)


def _inflate_blocks(stored: memoryview, out: np.ndarray, where: str) -> None:
    if len(stored) < _HEAD.size:
        raise ArtifactError(f"{where}: {len(stored)} bytes, too short for a ZBLK header")
    magic, block, raw_len, count = _HEAD.unpack_from(stored)
    if magic != _MAGIC:
        raise ArtifactError(f"{where}: bad ZBLK magic {magic!r}")
    if raw_len != out.size:
        raise ArtifactError(f"{where}: ZBLK raw length {raw_len} differs from the row's "
                            f"{out.size}")
    if block == 0 or count != -(-raw_len // block):
        raise ArtifactError(f"{where}: {count} blocks of {block} bytes cannot hold "
                            f"{raw_len} bytes")
    at = _HEAD.size
    for index in range(count):
        if at + _LEN.size > len(stored):
            raise ArtifactError(f"{where}: block {index} starts past the stream's end")
        (length,) = _LEN.unpack_from(stored, at)
        at += _LEN.size
        if at + length > len(stored):
            raise ArtifactError(f"{where}: block {index} of {length} bytes runs past the "
                                "stream's end")
        begin = index * block
        _inflate(stored[at:at + length], out[begin:begin + block], f"{where} block {index}")
        at += length
    if at != len(stored):
        raise ArtifactError(f"{where}: {len(stored) - at} bytes after the last block")
