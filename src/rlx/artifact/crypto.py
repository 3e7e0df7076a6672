"""Password encryption of `*.rlx` files: the `RLXENC01` container, version 2.

The key is derived from the password with Argon2id; the plaintext (a whole `RLXBAKE1` file)
is cut into chunks, each sealed with ChaCha20-Poly1305 under a nonce that encodes its index
and whether it is the last one (the STREAM construction of Hoang, Reyhanitabar, Rogaway and
Vizar), with the whole header as associated data. Reordering, dropping, truncating or
extending chunks, and any change to the header, are therefore all detected, and neither side
ever needs the whole ciphertext in memory.

Layout (all integers little-endian, no padding; offsets in bytes):

    offset size  field
    0      8     magic b"RLXENC01"
    8      4     u32 container version = 2 (1 is the reference rlx-bake's format: refused)
    12     4     u32 KDF id: 1 = Argon2id, version 0x13, 32-byte output, no secret/ad
    16     4     u32 Argon2 m_cost in KiB
    20     4     u32 Argon2 t_cost (iterations)
    24     4     u32 Argon2 p_cost (lanes)
    28     16    salt (random per file)
    44     4     u32 chunk_size C: plaintext bytes per chunk
    48     8     u64 plaintext length L
    56     7     nonce prefix (random per file)
    63     ...   N chunks, N = max(1, ceil(L / C)); chunk i (0-based) is the ChaCha20-Poly1305
                 encryption of plaintext[i*C : min((i+1)*C, L)] followed by its 16-byte tag,
                 with nonce = prefix || u32 i || u8 (1 if i == N-1 else 0) and associated data
                 = header bytes 0..62. An empty plaintext is one empty final chunk (16 bytes).

The file is exactly 63 + L + 16*N bytes; a reader checks this, the KDF parameters against
caller-set caps (`KdfLimits`) and Argon2's own rules before deriving any key, so a crafted
header cannot make it allocate or compute without bound.

Nonces never repeat under one key: the key is fresh per file (random 128-bit salt), and
within a file the (index, final) pair is unique. The random 56-bit prefix is defence in
depth should a salt ever repeat with the same password. The u32 index caps a file at 2**32
chunks (4 TiB at the smallest chunk size).

Key hygiene, and its limits in Python: the derived key is copied into a `bytearray` that is
overwritten with zeros once the chunks are done. That is all Python allows: argon2-cffi
returns the key first as an immutable `bytes` (and copies the password into a C buffer it
frees without wiping), `cryptography` keeps its own copy of the key inside the cipher object
until it is collected, and a `str` password cannot be wiped at all. The zeroing shortens the
life of one copy; it is no guarantee that no copy remains in memory.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import secrets
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from argon2 import low_level as argon2_ll
from argon2.exceptions import HashingError
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from rlx.errors import ArtifactError, DecryptError
from rlx.safeio import open_regular

__all__ = [
    "DEFAULT_CHUNK_SIZE", "DEFAULT_KDF", "ENC_MAGIC", "ENC_VERSION", "HEADER_SIZE", "PLAIN_MAGIC",
    "TAG_SIZE", "EncryptionInfo", "KdfLimits", "KdfParams", "decrypt_bytes", "decrypt_file",
    "encrypt_bytes", "encrypt_file", "encrypt_stream", "is_encrypted", "password_bytes",
    "read_encryption_info",
]

ENC_MAGIC = b"RLXENC01"
ENC_VERSION = 2
PLAIN_MAGIC = b"RLXBAKE1"
KDF_ARGON2ID = 1
DEFAULT_CHUNK_SIZE = 1 << 20

_HEADER = struct.Struct("<8sIIIII16sIQ7s")
HEADER_SIZE = _HEADER.size  # 63
_SALT_SIZE = 16
_PREFIX_SIZE = 7
_KEY_SIZE = 32
TAG_SIZE = 16  # the Poly1305 tag after each chunk
_NONCE_TAIL = struct.Struct("<IB")  # chunk index, final flag
_MAX_CHUNKS = 1 << 32
_ARGON2_VERSION = 0x13
_ARGON2_MAX_LANES = (1 << 24) - 1

_DECRYPT_FAILED = "decrypt failed (wrong password or corrupt file)"


@dataclass(frozen=True)
class KdfParams:
    """Argon2id cost: memory in KiB, iterations, lanes."""

    m_cost: int
    t_cost: int
    p_cost: int


DEFAULT_KDF = KdfParams(m_cost=19456, t_cost=2, p_cost=1)  # the reference's; OWASP minimum


@dataclass(frozen=True)
class KdfLimits:
    """The most a file may demand from its reader, checked before any key is derived.

    `min_chunk_size` bounds the number of AEAD calls per byte of file (a crafted file of
    1-byte chunks would cost one call per 17 bytes) and keeps the tag overhead under 1.6 %;
    1 KiB is still small enough for tests to build many-chunk files cheaply.
    """

    max_m_cost: int = 1 << 20  # KiB, = 1 GiB
    max_t_cost: int = 16
    max_p_cost: int = 16
    max_chunk_size: int = 64 << 20
    min_chunk_size: int = 1 << 10

    def check_kdf(self, kdf: KdfParams, where: str) -> None:
        """Refuse parameters over the caps or outside Argon2's own domain."""
        for name, value, cap in (("m_cost", kdf.m_cost, self.max_m_cost),
                                 ("t_cost", kdf.t_cost, self.max_t_cost),
                                 ("p_cost", kdf.p_cost, self.max_p_cost)):
            if value > cap:
                raise ArtifactError(f"{where}: argon2 {name} = {value} exceeds the limit {cap}")
        if kdf.t_cost < 1:
            raise ArtifactError(f"{where}: argon2 t_cost = {kdf.t_cost} must be at least 1")
        if not 1 <= kdf.p_cost <= _ARGON2_MAX_LANES:
            raise ArtifactError(f"{where}: argon2 p_cost = {kdf.p_cost} must be in "
                                f"[1, {_ARGON2_MAX_LANES}]")
        if kdf.m_cost < 8 * kdf.p_cost:
            raise ArtifactError(f"{where}: argon2 m_cost = {kdf.m_cost} KiB is below argon2's "
                                f"minimum 8 * p_cost = {8 * kdf.p_cost} KiB")

    def check_chunk_size(self, chunk_size: int, where: str) -> None:
        if not self.min_chunk_size <= chunk_size <= self.max_chunk_size:
            raise ArtifactError(f"{where}: chunk_size = {chunk_size} is outside the limits "
                                f"[{self.min_chunk_size}, {self.max_chunk_size}]")


@dataclass(frozen=True)
class EncryptionInfo:
    """What an `RLXENC01` header declares, readable without the password."""

    version: int
    kdf: KdfParams
    chunk_size: int
    plaintext_length: int
    chunk_count: int
    file_size: int


@dataclass(frozen=True)
class _Header:
    info: EncryptionInfo
    salt: bytes
    nonce_prefix: bytes
    raw: bytes  # the associated data of every chunk


def _chunk_count(length: int, chunk_size: int, where: str) -> int:
    """N = max(1, ceil(L / C)), refused beyond what the u32 chunk index can number."""
    count = max(1, -(-length // chunk_size))
    if count > _MAX_CHUNKS:
        raise ArtifactError(f"{where}: {length} bytes in chunks of {chunk_size} need "
                            f"{count} chunks, more than the {_MAX_CHUNKS} a file can hold")
    return count


def _file_size(length: int, count: int) -> int:
    return HEADER_SIZE + length + TAG_SIZE * count


def _nonce(prefix: bytes, index: int, count: int) -> bytes:
    return prefix + _NONCE_TAIL.pack(index, index == count - 1)


def password_bytes(password: object, purpose: str) -> bytes:
    """The key material of a `str` (as UTF-8) or `bytes` password; anything else, an empty
    one or a `str` that is not valid Unicode (a lone surrogate) is an ArtifactError. Other
    types are refused rather than converted: `bytes(1234)` is 1234 NUL bytes."""
    if isinstance(password, str):
        try:
            secret = password.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ArtifactError(f"{purpose} password is not valid Unicode text (a lone "
                                f"surrogate at index {err.start}); pass it as bytes") from None
    elif isinstance(password, (bytes, bytearray, memoryview)):
        secret = bytes(password)
    else:
        raise ArtifactError(f"{purpose} password must be str or bytes, not "
                            f"{type(password).__name__}")
    if not secret:
        raise ArtifactError(f"{purpose} password must not be empty")
    return secret


@contextlib.contextmanager
def _cipher(secret: bytes, salt: bytes, kdf: KdfParams) -> Iterator[ChaCha20Poly1305]:
    """The AEAD keyed from the password; the key buffer is zeroed on exit (see module doc)."""
    try:
        key = bytearray(argon2_ll.hash_secret_raw(
            secret, salt, kdf.t_cost, kdf.m_cost, kdf.p_cost, _KEY_SIZE,
            argon2_ll.Type.ID, _ARGON2_VERSION))
    except HashingError as exc:
        raise ArtifactError(f"argon2 key derivation failed: {exc}") from None
    try:
        yield ChaCha20Poly1305(key)
    finally:
        key[:] = bytes(len(key))


def _read_exact(src: BinaryIO, buf: memoryview, where: str) -> None:
    """Fill `buf` from `src`; a short read means the file shrank under us."""
    done = 0
    while done < len(buf):
        got = src.readinto(buf[done:])  # type: ignore[attr-defined]  # not in BinaryIO stub
        if not got:
            raise ArtifactError(f"{where}: file ended early (changed while being read?)")
        done += got


# --- the header ---------------------------------------------------------------------------


def _parse_header(head: bytes, file_size: int, limits: KdfLimits, where: str) -> _Header:
    """Validate everything a header says, cheapest and most telling checks first."""
    if head[:len(ENC_MAGIC)] != ENC_MAGIC:
        raise ArtifactError(f"{where}: not an encrypted *.rlx file "
                            f"(expected magic {ENC_MAGIC!r}, got {bytes(head[:8])!r})")
    if len(head) >= 12:
        version = struct.unpack_from("<I", head, 8)[0]
        if version == 1:
            raise ArtifactError(f"{where}: RLXENC01 version 1 is the reference rlx-bake's "
                                "single-shot format, not supported (re-encrypt with rlx)")
        if version != ENC_VERSION:
            raise ArtifactError(f"{where}: unsupported RLXENC01 container version {version} "
                                f"(expected {ENC_VERSION})")
    if len(head) < HEADER_SIZE:
        raise ArtifactError(f"{where}: encrypted header truncated "
                            f"({len(head)} of {HEADER_SIZE} bytes)")
    (_, version, kdf_id, m_cost, t_cost, p_cost, salt, chunk_size, length,
     prefix) = _HEADER.unpack(head)
    if kdf_id != KDF_ARGON2ID:
        raise ArtifactError(f"{where}: unknown KDF id {kdf_id} (expected {KDF_ARGON2ID} = "
                            "argon2id)")
    kdf = KdfParams(m_cost, t_cost, p_cost)
    limits.check_kdf(kdf, where)
    limits.check_chunk_size(chunk_size, where)
    count = _chunk_count(length, chunk_size, where)
    expected = _file_size(length, count)
    if expected != file_size:
        raise ArtifactError(f"{where}: file is {file_size} bytes but its header implies "
                            f"{expected} (truncated or extended)")
    info = EncryptionInfo(version, kdf, chunk_size, length, count, file_size)
    return _Header(info, salt, prefix, bytes(head))


def _open_input(path: str | os.PathLike) -> BinaryIO:
    """A regular file, opened once and checked on its descriptor (a FIFO would block); a
    missing one raises FileNotFoundError as `open` does."""
    if not os.path.lexists(path):
        return open(path, "rb")  # noqa: SIM115  (raises)
    return os.fdopen(open_regular(path, ArtifactError), "rb")


def is_encrypted(path_or_bytes: str | os.PathLike | bytes | bytearray | memoryview) -> bool:
    """True when the data (or the file's first 8 bytes) starts with `RLXENC01`."""
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return bytes(path_or_bytes[:len(ENC_MAGIC)]) == ENC_MAGIC
    with _open_input(path_or_bytes) as f:
        return f.read(len(ENC_MAGIC)) == ENC_MAGIC


def read_encryption_info(path: str | os.PathLike, *,
                         limits: KdfLimits = KdfLimits()) -> EncryptionInfo:
    """The validated header of an encrypted file; needs no password, decrypts nothing."""
    with _open_input(path) as f:
        size = os.fstat(f.fileno()).st_size
        return _parse_header(f.read(HEADER_SIZE), size, limits, os.fspath(path)).info


# --- encryption ---------------------------------------------------------------------------


def _check_magic(head: memoryview, expect_magic: bytes | None, where: str) -> None:
    if expect_magic is not None and head[:len(expect_magic)] != expect_magic:
        raise ArtifactError(f"{where}: plaintext is not a *.rlx file (expected it to start "
                            f"with {expect_magic!r}, got {bytes(head[:len(expect_magic)])!r})")


def _read_chunks(src: BinaryIO, length: int, chunk_size: int,
                 where: str) -> Iterator[memoryview]:
    """The plaintext as chunk views of ONE reused buffer: use each before taking the next."""
    buffer = memoryview(bytearray(min(chunk_size, length)))
    for start in range(0, max(length, 1), chunk_size):  # an empty plaintext is one chunk
        chunk = buffer[:min(chunk_size, length - start)]
        _read_exact(src, chunk, where)
        yield chunk
    if src.read(1):
        raise ArtifactError(f"{where}: more than the announced {length} bytes "
                            "(file grew while being encrypted?)")


def encrypt_stream(src: BinaryIO, dst: BinaryIO, password: str | bytes, *, length: int,
                   kdf: KdfParams = DEFAULT_KDF, chunk_size: int = DEFAULT_CHUNK_SIZE,
                   expect_magic: bytes | None = PLAIN_MAGIC,
                   name: str = "plaintext stream") -> EncryptionInfo:
    """Encrypt exactly `length` bytes read from `src` into `dst`, chunk by chunk.

    `length` must be known up front: it is part of the header, which every chunk
    authenticates. `src` may be any readable binary stream (no seeking); the caller owns
    `dst` (temp file, fsync, rename) and must discard it on error. `expect_magic` guards
    against encrypting something that is not a `*.rlx` file; `name` labels error messages.
    """
    secret = password_bytes(password, "encryption")
    limits = KdfLimits()  # never write a file that a default reader refuses
    limits.check_kdf(kdf, name)
    limits.check_chunk_size(chunk_size, name)
    count = _chunk_count(length, chunk_size, name)
    chunks = _read_chunks(src, length, chunk_size, name)
    first = next(chunks)
    _check_magic(first, expect_magic, name)  # before the costly key derivation
    salt, prefix = secrets.token_bytes(_SALT_SIZE), secrets.token_bytes(_PREFIX_SIZE)
    header = _HEADER.pack(ENC_MAGIC, ENC_VERSION, KDF_ARGON2ID, kdf.m_cost, kdf.t_cost,
                          kdf.p_cost, salt, chunk_size, length, prefix)
    sealed = memoryview(bytearray(len(first) + TAG_SIZE))
    with _cipher(secret, salt, kdf) as aead:
        dst.write(header)
        for i, chunk in enumerate(itertools.chain([first], chunks)):
            out = sealed[:len(chunk) + TAG_SIZE]
            aead.encrypt_into(_nonce(prefix, i, count), chunk, header, out)
            dst.write(out)
    return EncryptionInfo(ENC_VERSION, kdf, chunk_size, length, count,
                          _file_size(length, count))


def encrypt_file(src_path: str | os.PathLike, dst_fileobj: BinaryIO, password: str | bytes, *,
                 kdf: KdfParams = DEFAULT_KDF, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 expect_magic: bytes | None = PLAIN_MAGIC) -> EncryptionInfo:
    """Encrypt a plaintext file chunk by chunk into an open binary file (see encrypt_stream)."""
    with _open_input(src_path) as src:
        return encrypt_stream(src, dst_fileobj, password, length=os.fstat(src.fileno()).st_size,
                              kdf=kdf, chunk_size=chunk_size, expect_magic=expect_magic,
                              name=os.fspath(src_path))


def encrypt_bytes(plaintext: bytes | bytearray | memoryview, password: str | bytes, *,
                  kdf: KdfParams = DEFAULT_KDF, chunk_size: int = DEFAULT_CHUNK_SIZE,
                  expect_magic: bytes | None = PLAIN_MAGIC) -> bytes:
    """`encrypt_file` for data already in memory (small blobs, tests)."""
    out = io.BytesIO()
    encrypt_stream(io.BytesIO(plaintext), out, password, length=len(plaintext), kdf=kdf,
                   chunk_size=chunk_size, expect_magic=expect_magic, name="plaintext bytes")
    return out.getvalue()


# --- decryption ---------------------------------------------------------------------------


def _decrypt_stream(src: BinaryIO, header: _Header, password: str | bytes,
                    where: str) -> bytearray:
    """Decrypt the chunks following the header into one preallocated buffer.

    The header was validated against the real file size, so the allocation is bounded by
    the file's own size, and the chunk count is known before the first read.
    """
    secret = password_bytes(password, "decryption")
    info = header.info
    out = bytearray(info.plaintext_length)
    plain = memoryview(out)
    sealed = memoryview(bytearray(min(info.chunk_size, info.plaintext_length) + TAG_SIZE))
    with _cipher(secret, header.salt, info.kdf) as aead:
        for i in range(info.chunk_count):
            start = i * info.chunk_size
            size = min(info.chunk_size, info.plaintext_length - start)
            _read_exact(src, sealed[:size + TAG_SIZE], where)
            try:
                aead.decrypt_into(_nonce(header.nonce_prefix, i, info.chunk_count),
                                  sealed[:size + TAG_SIZE], header.raw,
                                  plain[start:start + size])
            except InvalidTag:
                raise DecryptError(_DECRYPT_FAILED) from None
    return out


def decrypt_file(path: str | os.PathLike, password: str | bytes, *,
                 limits: KdfLimits = KdfLimits()) -> bytearray:
    """The plaintext of an encrypted file, read and authenticated one chunk at a time."""
    where = os.fspath(path)
    with _open_input(path) as src:
        size = os.fstat(src.fileno()).st_size
        header = _parse_header(src.read(HEADER_SIZE), size, limits, where)
        return _decrypt_stream(src, header, password, where)


def decrypt_bytes(data: bytes | bytearray | memoryview, password: str | bytes, *,
                  limits: KdfLimits = KdfLimits(), where: str = "encrypted bytes") -> bytearray:
    """`decrypt_file` for data already in memory (a validated mapping: read in place, not
    copied first)."""
    src = _ViewReader(memoryview(data).cast("B"))
    header = _parse_header(src.read(HEADER_SIZE), len(src.view), limits, where)
    return _decrypt_stream(src, header, password, where)  # type: ignore[arg-type]


class _ViewReader:
    """`read` / `readinto` over a memoryview, for the chunk reader (io.BytesIO would copy
    the whole ciphertext first)."""

    def __init__(self, view: memoryview):
        self.view, self.at = view, 0

    def read(self, size: int) -> bytes:
        out = bytes(self.view[self.at:self.at + size])
        self.at += len(out)
        return out

    def readinto(self, buf: memoryview) -> int:
        size = min(len(buf), len(self.view) - self.at)
        buf[:size] = self.view[self.at:self.at + size]
        self.at += size
        return size
