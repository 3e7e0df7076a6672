"""The signed message and the `.sig` file that carries it (docs/format.md, "Signatures").

The message is a list of parts (a name, a length and the SHA-256 of that many bytes) that
together are every byte of the artifact, after a context string and the artifact's kind, so
a signature made for one purpose or one kind of file can never pass for another. The `.sig`
file is a fixed 96-byte header (magic, version, key id, the Ed25519 signature, the message
length) followed by the message itself. All integers little-endian.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NoReturn

from rlx.artifact.signing.keys import KEY_ID_BYTES
from rlx.errors import SignatureError

__all__ = ["CONTEXT", "KINDS", "MAX_MESSAGE_BYTES", "MAX_PARTS", "SIG_HEADER", "SIG_MAGIC",
           "SIG_VERSION", "SIGNATURE_BYTES", "Part", "SignatureFile", "Statement"]

CONTEXT = b"rlx-signature-v1\x00"
SIG_MAGIC = b"RLXSIG01"
SIG_VERSION = 1
SIGNATURE_BYTES = 64
# magic, version, flags, key id, signature, message length: 96 bytes
SIG_HEADER = struct.Struct(f"<8sII{KEY_ID_BYTES}s{SIGNATURE_BYTES}sQ")
KINDS = ("rlx", "rlx-encrypted", "rlxp-flat", "rlxp-zip", "rlxp-dir")
MAX_MESSAGE_BYTES = 64 << 20  # the cap of an .rlx header: a message lists less than one
MAX_PARTS = 1 << 20
_PART = struct.Struct("<Q32sH")  # length, SHA-256, name length; then the UTF-8 name
_COUNT = struct.Struct("<I")
_DIGEST = 32


@dataclass(frozen=True)
class Part:
    """`length` bytes of the artifact, named (`header`, `blob 3`, a dir package's member
    path), with their SHA-256."""

    name: str
    length: int
    sha256: bytes


@dataclass(frozen=True)
class Statement:
    """What a signature vouches for: the artifact's kind and every part of it, in order."""

    kind: str
    key_id: bytes
    parts: tuple[Part, ...]

    @property
    def size(self) -> int:
        return sum(p.length for p in self.parts)

    def message(self) -> bytes:
        """The exact bytes that are signed."""
        kind = self.kind.encode("ascii")
        out = [CONTEXT, bytes([len(kind)]), kind, self.key_id, _COUNT.pack(len(self.parts))]
        for part in self.parts:
            name = part.name.encode("utf-8")
            out += [_PART.pack(part.length, part.sha256, len(name)), name]
        return b"".join(out)

    @classmethod
    def parse(cls, message: bytes, where: str) -> Statement:
        """The statement a message holds; anything but exactly that layout is malformed."""
        def fail(what: str) -> NoReturn:
            raise SignatureError(f"{where}: malformed signed message ({what})", "malformed")

        if not message.startswith(CONTEXT):
            fail("it does not start with the rlx-signature-v1 context")
        at = len(CONTEXT)
        if at >= len(message):
            fail("it ends before the kind")
        end = at + 1 + message[at]
        kind = message[at + 1:end].decode("ascii", "replace")
        if kind not in KINDS:
            fail(f"unknown artifact kind {kind[:40]!r}")
        key = message[end:end + KEY_ID_BYTES]
        at = end + KEY_ID_BYTES
        if at + _COUNT.size > len(message):
            fail("it ends before the part count")
        (count,) = _COUNT.unpack_from(message, at)
        at += _COUNT.size
        if count > MAX_PARTS:
            fail(f"{count} parts, more than the {MAX_PARTS} allowed")
        parts, names = [], set()
        for i in range(count):
            if at + _PART.size > len(message):
                fail(f"it ends inside part {i}")
            length, digest, name_len = _PART.unpack_from(message, at)
            at += _PART.size
            raw = message[at:at + name_len]
            at += name_len
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError:
                fail(f"part {i}'s name is not UTF-8")
            if len(raw) != name_len or not name or name in names:
                fail(f"part {i} needs a unique, non-empty name")
            names.add(name)
            parts.append(Part(name, length, digest))
        if at != len(message):
            fail(f"{len(message) - at} bytes after the last part")
        return cls(kind, key, tuple(parts))


@dataclass(frozen=True)
class SignatureFile:
    """A `.sig` file: which key signed, the signature, and the signed message."""

    key_id: bytes
    signature: bytes
    message: bytes

    def to_bytes(self) -> bytes:
        return SIG_HEADER.pack(SIG_MAGIC, SIG_VERSION, 0, self.key_id, self.signature,
                               len(self.message)) + self.message

    @classmethod
    def parse(cls, data: bytes, where: str) -> SignatureFile:
        """The fixed header checked; the message is parsed only once it is authenticated."""
        def fail(what: str) -> NoReturn:
            raise SignatureError(f"{where}: not a valid rlx signature file ({what})",
                                 "malformed")

        if len(data) < SIG_HEADER.size:
            fail(f"{len(data)} bytes, less than the {SIG_HEADER.size}-byte header")
        magic, version, flags, key, signature, length = SIG_HEADER.unpack_from(data)
        if magic != SIG_MAGIC:
            fail(f"bad magic {magic!r}, expected {SIG_MAGIC.decode()}")
        if version != SIG_VERSION:
            fail(f"version {version}; this rlx reads version {SIG_VERSION}")
        if flags:
            fail(f"unknown flags {flags:#x}")
        if length > MAX_MESSAGE_BYTES or SIG_HEADER.size + length != len(data):
            fail(f"the message length {length} does not fit the file's {len(data)} bytes")
        return cls(key, signature, data[SIG_HEADER.size:])
