"""Constants of the schema-3 layout shared by the writer and the reader (docs/format.md)."""

from __future__ import annotations

import os
import struct
from typing import TYPE_CHECKING

import xxhash

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "MAGIC", "ENCRYPTED_MAGIC", "SCHEMA_VERSION", "REFERENCE_SCHEMAS", "PREAMBLE", "ALIGN",
    "MAX_HEADER_BYTES", "MAX_JSON_DEPTH", "align", "checksum", "header_digest", "signature_path",
]

MAGIC = b"RLXBAKE1"
ENCRYPTED_MAGIC = b"RLXENC01"  # an RLXENC01 container (rlx.artifact.crypto)
SCHEMA_VERSION = 3
REFERENCE_SCHEMAS = (1, 2)  # the Rust reference's bincode files
PREAMBLE = struct.Struct("<8sIIQ16s")  # magic, schema, flags, header length, header xxh3-128
ALIGN = 64
MAX_HEADER_BYTES = 64 << 20
MAX_JSON_DEPTH = 64


def align(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def checksum(data) -> str:
    """XXH3-128 as hex: ~10 GiB/s here, 14x faster than BLAKE2b (measured on 64 MiB)."""
    return xxhash.xxh3_128_hexdigest(data)


def header_digest(header: bytes) -> bytes:
    return xxhash.xxh3_128_digest(header)


def signature_path(artifact: str | os.PathLike) -> Path:
    """Where the signature of `artifact` lives: beside it, its name + ".sig"."""
    from pathlib import Path  # here: the load path needs no pathlib (nor its urllib)

    path = Path(artifact)
    if not path.name:
        path = path.resolve()
    return path.with_name(path.name + ".sig")
