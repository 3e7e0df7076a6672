"""RLXENC01 v2: round trips, tamper detection, header validation before any key derivation.

Files are built with a cheap KDF (64 KiB, 1 pass) and the smallest chunk size so that
many-chunk files stay small and the whole module runs in about a second.
"""

from __future__ import annotations

import io
import re
import struct
import time

import numpy as np
import pytest
from argon2 import low_level as argon2_ll
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from rlx.artifact import crypto
from rlx.artifact.crypto import (
    DEFAULT_KDF,
    ENC_MAGIC,
    HEADER_SIZE,
    KdfLimits,
    KdfParams,
    decrypt_bytes,
    decrypt_file,
    encrypt_bytes,
    encrypt_file,
    encrypt_stream,
    is_encrypted,
    read_encryption_info,
)
from rlx.errors import ArtifactError, DecryptError

FAST = KdfParams(m_cost=64, t_cost=1, p_cost=1)
CHUNK = 1024
PASSWORD = "correct horse battery staple"
DECRYPT_FAILED = "decrypt failed (wrong password or corrupt file)"
TAG = 16

# header field offsets (module docstring)
OFF_VERSION, OFF_KDF_ID, OFF_M, OFF_T, OFF_P = 8, 12, 16, 20, 24
OFF_SALT, OFF_CHUNK, OFF_LENGTH, OFF_PREFIX = 28, 44, 48, 56


def random_bytes(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def rlx_plaintext(n: int) -> bytes:
    """n bytes that start like a plaintext *.rlx file (n >= 8)."""
    return b"RLXBAKE1" + random_bytes(n - 8)


def enc(plaintext: bytes, password: str | bytes = PASSWORD, **kw) -> bytes:
    kw = {"kdf": FAST, "chunk_size": CHUNK, "expect_magic": None, **kw}
    return encrypt_bytes(plaintext, password, **kw)


def with_u32(data: bytes, offset: int, value: int) -> bytes:
    return data[:offset] + struct.pack("<I", value) + data[offset + 4:]


def flip(data: bytes, index: int, mask: int = 0x01) -> bytes:
    out = bytearray(data)
    out[index] ^= mask
    return bytes(out)


def chunks_of(data: bytes) -> list[bytes]:
    body = data[HEADER_SIZE:]
    step = CHUNK + TAG
    return [body[i:i + step] for i in range(0, len(body), step)]


@pytest.fixture
def no_argon2(monkeypatch):
    """Fail the test if a key is ever derived."""
    def refuse(*args, **kwargs):
        raise AssertionError("argon2 must not run for this file")
    monkeypatch.setattr(argon2_ll, "hash_secret_raw", refuse)


# --- round trips --------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 5 * CHUNK + 17])
def test_round_trip_bytes(n):
    plaintext = random_bytes(n, seed=n)
    data = enc(plaintext)
    count = max(1, -(-n // CHUNK))
    assert len(data) == HEADER_SIZE + n + TAG * count
    out = decrypt_bytes(data, PASSWORD)
    assert isinstance(out, bytearray) and out == plaintext


def test_round_trip_file_and_info(tmp_path):
    plaintext = rlx_plaintext(3 * 4096 + 5)
    src, dst = tmp_path / "model.rlx", tmp_path / "model.rlx.enc"
    src.write_bytes(plaintext)
    with open(dst, "wb") as out:
        written = encrypt_file(src, out, PASSWORD, kdf=FAST, chunk_size=4096)
    info = read_encryption_info(dst)
    assert info == written
    assert (info.version, info.kdf, info.chunk_size) == (2, FAST, 4096)
    assert (info.plaintext_length, info.chunk_count) == (len(plaintext), 4)
    assert info.file_size == dst.stat().st_size == HEADER_SIZE + len(plaintext) + 4 * TAG
    assert decrypt_file(dst, PASSWORD) == plaintext


class Trickle(io.RawIOBase):
    """A non-seekable stream that hands out at most 100 bytes per read."""

    def __init__(self, data: bytes):
        self._data = memoryview(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), len(self._data), 100)
        buffer[:n] = self._data[:n]
        self._data = self._data[n:]
        return n


def test_encrypt_stream_from_a_non_seekable_source():
    plaintext = rlx_plaintext(2 * CHUNK + 3)
    out = io.BytesIO()
    info = encrypt_stream(Trickle(plaintext), out, PASSWORD, length=len(plaintext), kdf=FAST,
                          chunk_size=CHUNK)
    assert info.file_size == len(out.getvalue()) and info.chunk_count == 3
    assert decrypt_bytes(out.getvalue(), PASSWORD) == plaintext


@pytest.mark.parametrize("announced, message", [
    (CHUNK + 10, "file ended early"), (CHUNK - 10, "more than the announced 1014 bytes"),
])
def test_encrypt_stream_length_must_match_the_source(announced, message):
    with pytest.raises(ArtifactError, match=message):
        encrypt_stream(Trickle(rlx_plaintext(CHUNK)), io.BytesIO(), PASSWORD, length=announced,
                       kdf=FAST, chunk_size=CHUNK, name="stream")


def test_str_and_bytes_passwords_are_the_same_utf8_key():
    data = enc(b"abc", password="pässwörd")
    assert decrypt_bytes(data, "pässwörd".encode()) == b"abc"


def test_ciphertext_hides_the_plaintext_and_is_fresh_each_time():
    plaintext = rlx_plaintext(3 * CHUNK)
    data = enc(plaintext)
    assert data.startswith(ENC_MAGIC)
    assert b"RLXBAKE1" not in data and plaintext[100:132] not in data
    assert enc(plaintext)[HEADER_SIZE:] != data[HEADER_SIZE:]  # fresh salt and prefix


def test_derived_key_buffer_is_zeroed_after_use(monkeypatch):
    keys = []

    def recording_cipher(key):
        keys.append(key)
        return ChaCha20Poly1305(key)

    monkeypatch.setattr(crypto, "ChaCha20Poly1305", recording_cipher)
    decrypt_bytes(enc(b"secret"), PASSWORD)
    assert len(keys) == 2 and all(k == bytearray(32) for k in keys)


def test_default_kdf_is_the_references():
    assert KdfParams(m_cost=19456, t_cost=2, p_cost=1) == DEFAULT_KDF


# --- refusals on the encrypting side -------------------------------------------------------


@pytest.mark.parametrize("password", ["", b""])
def test_empty_password_refused(password):
    with pytest.raises(ArtifactError, match="^encryption password must not be empty$"):
        enc(b"x", password=password)
    with pytest.raises(ArtifactError, match="^decryption password must not be empty$"):
        decrypt_bytes(enc(b"x"), password)


def test_plaintext_must_be_an_rlx_file(tmp_path, no_argon2):
    src = tmp_path / "notes.txt"
    src.write_bytes(b"hello world")
    with open(tmp_path / "out", "wb") as out, pytest.raises(
            ArtifactError, match=r"notes\.txt: plaintext is not a \*\.rlx file"):
        encrypt_file(src, out, PASSWORD, kdf=FAST)
    with pytest.raises(ArtifactError, match="expected it to start with b'RLXBAKE1'"):
        encrypt_bytes(b"RLX", PASSWORD, kdf=FAST)


def test_the_magic_alone_is_a_valid_plaintext():
    assert decrypt_bytes(encrypt_bytes(b"RLXBAKE1", PASSWORD, kdf=FAST), PASSWORD) == b"RLXBAKE1"


@pytest.mark.parametrize("kdf, chunk_size, message", [
    (KdfParams(2 << 20, 1, 1), CHUNK, "m_cost = 2097152 exceeds the limit 1048576"),
    (KdfParams(64, 0, 1), CHUNK, "t_cost = 0 must be at least 1"),
    (KdfParams(8, 1, 2), CHUNK, "m_cost = 8 KiB is below argon2's minimum 8 \\* p_cost = 16"),
    (FAST, 512, r"chunk_size = 512 is outside the limits \[1024, 67108864\]"),
    (FAST, 128 << 20, "chunk_size = 134217728 is outside"),
])
def test_encrypt_refuses_parameters_a_default_reader_would_refuse(kdf, chunk_size, message,
                                                                   no_argon2):
    with pytest.raises(ArtifactError, match=message):
        enc(b"x", kdf=kdf, chunk_size=chunk_size)


# --- tampering ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample() -> tuple[bytes, bytes]:
    """(plaintext, file) with three full chunks and a short last one."""
    plaintext = random_bytes(3 * CHUNK + 100, seed=7)
    return plaintext, enc(plaintext)


def test_wrong_password(sample):
    with pytest.raises(DecryptError) as err:
        decrypt_bytes(sample[1], "wrong horse")
    assert str(err.value) == DECRYPT_FAILED


def test_every_header_byte_is_protected(sample):
    data = sample[1]
    for i in range(HEADER_SIZE):
        for mask in (0x01, 0x80):
            with pytest.raises(ArtifactError):
                decrypt_bytes(flip(data, i, mask), PASSWORD)


@pytest.mark.parametrize("offset", [OFF_SALT, OFF_SALT + 15, OFF_PREFIX, OFF_PREFIX + 6])
def test_salt_and_nonce_prefix_changes_fail_authentication(sample, offset):
    with pytest.raises(DecryptError, match=re.escape(DECRYPT_FAILED)):
        decrypt_bytes(flip(sample[1], offset), PASSWORD)


def test_header_is_associated_data(monkeypatch):
    """With a key that ignores m_cost, only the AAD notices an m_cost change."""
    monkeypatch.setattr(argon2_ll, "hash_secret_raw", lambda *args, **kwargs: bytes(32))
    data = enc(b"payload")
    with pytest.raises(DecryptError, match=re.escape(DECRYPT_FAILED)):
        decrypt_bytes(with_u32(data, OFF_M, 72), PASSWORD)


@pytest.mark.parametrize("where", [HEADER_SIZE, HEADER_SIZE + CHUNK + 500, -TAG, -1])
def test_flipped_ciphertext_or_tag_byte(sample, where):
    with pytest.raises(DecryptError, match=re.escape(DECRYPT_FAILED)):
        decrypt_bytes(flip(sample[1], where % len(sample[1])), PASSWORD)


def test_swapped_chunks(sample):
    header, chunks = sample[1][:HEADER_SIZE], chunks_of(sample[1])
    chunks[0], chunks[1] = chunks[1], chunks[0]
    with pytest.raises(DecryptError, match=re.escape(DECRYPT_FAILED)):
        decrypt_bytes(header + b"".join(chunks), PASSWORD)


def test_dropped_last_chunk(sample):
    header, chunks = sample[1][:HEADER_SIZE], chunks_of(sample[1])
    dropped = header + b"".join(chunks[:-1])
    with pytest.raises(ArtifactError, match="truncated or extended"):
        decrypt_bytes(dropped, PASSWORD)
    # with the length patched to match, the third chunk is not flagged final (and AAD differs)
    patched = dropped[:OFF_LENGTH] + struct.pack("<Q", 3 * CHUNK) + dropped[OFF_LENGTH + 8:]
    with pytest.raises(DecryptError, match=re.escape(DECRYPT_FAILED)):
        decrypt_bytes(patched, PASSWORD)


@pytest.mark.parametrize("cut, message", [
    (0, "not an encrypted"), (5, "not an encrypted"), (8, "header truncated"),
    (12, "header truncated"), (HEADER_SIZE - 1, "header truncated"),
    (HEADER_SIZE, "truncated or extended"), (HEADER_SIZE + CHUNK + TAG, "truncated or extended"),
    (-TAG, "truncated or extended"), (-1, "truncated or extended"),
])
def test_truncated(sample, cut, message, no_argon2):
    with pytest.raises(ArtifactError, match=message) as err:
        decrypt_bytes(sample[1][:cut], PASSWORD)
    assert not isinstance(err.value, DecryptError)


@pytest.mark.parametrize("extra", [b"\0", bytes(TAG), bytes(CHUNK + TAG)])
def test_appended_bytes(sample, extra, no_argon2):
    with pytest.raises(ArtifactError, match="truncated or extended"):
        decrypt_bytes(sample[1] + extra, PASSWORD)


# --- header validation before any key derivation ---------------------------------------------


@pytest.mark.parametrize("offset, value, message", [
    (OFF_M, 1 << 30, "argon2 m_cost = 1073741824 exceeds the limit 1048576"),  # 1 TiB
    (OFF_T, 1000, "argon2 t_cost = 1000 exceeds the limit 16"),
    (OFF_P, 1000, "argon2 p_cost = 1000 exceeds the limit 16"),
    (OFF_T, 0, "argon2 t_cost = 0 must be at least 1"),
    (OFF_P, 0, r"argon2 p_cost = 0 must be in \[1, "),
    (OFF_P, 16, "m_cost = 64 KiB is below argon2's minimum 8 \\* p_cost = 128 KiB"),
    (OFF_CHUNK, 1 << 30, "chunk_size = 1073741824 is outside the limits"),
    (OFF_CHUNK, 16, r"chunk_size = 16 is outside the limits \[1024, 67108864\]"),
    (OFF_KDF_ID, 2, "unknown KDF id 2"),
    (OFF_VERSION, 3, "unsupported RLXENC01 container version 3"),
])
def test_hostile_header_refused_before_argon2(tmp_path, sample, no_argon2, offset, value,
                                              message):
    path = tmp_path / "hostile.rlx"
    path.write_bytes(with_u32(sample[1], offset, value))
    start = time.process_time()  # CPU time: the machine's load must not count
    for call in (lambda: decrypt_file(path, PASSWORD), lambda: read_encryption_info(path)):
        with pytest.raises(ArtifactError, match=message) as err:
            call()
        assert str(path) in str(err.value) and "\n" not in str(err.value)
    assert time.process_time() - start < 0.5


def test_caller_limits_apply(sample, no_argon2):
    strict = KdfLimits(max_m_cost=32, max_chunk_size=8192)
    with pytest.raises(ArtifactError, match="argon2 m_cost = 64 exceeds the limit 32"):
        decrypt_bytes(sample[1], PASSWORD, limits=strict)


def test_reference_v1_container_refused(no_argon2):
    v1 = (ENC_MAGIC + struct.pack("<IIII", 1, 19456, 2, 1) + random_bytes(16 + 12)
          + random_bytes(40))
    with pytest.raises(ArtifactError, match="single-shot format, not supported "
                                            r"\(re-encrypt with rlx\)"):
        decrypt_bytes(v1, PASSWORD)


def test_plaintext_file_is_not_decryptable(no_argon2):
    with pytest.raises(ArtifactError, match="expected magic b'RLXENC01', got b'RLXBAKE1'"):
        decrypt_bytes(rlx_plaintext(100), PASSWORD)


# --- probing ----------------------------------------------------------------------------------


def test_is_encrypted(tmp_path, sample):
    enc_path, plain_path, tiny = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    enc_path.write_bytes(sample[1])
    plain_path.write_bytes(rlx_plaintext(64))
    tiny.write_bytes(b"RLX")
    assert is_encrypted(enc_path) and is_encrypted(str(enc_path))
    assert is_encrypted(sample[1]) and is_encrypted(memoryview(sample[1]))
    assert not is_encrypted(plain_path) and not is_encrypted(tiny)
    assert not is_encrypted(b"") and not is_encrypted(rlx_plaintext(8))


def test_read_encryption_info_needs_no_password(tmp_path, sample, no_argon2):
    path = tmp_path / "x.rlx"
    path.write_bytes(sample[1])
    info = read_encryption_info(path)
    assert (info.version, info.kdf, info.chunk_size) == (2, FAST, CHUNK)
    assert (info.plaintext_length, info.chunk_count, info.file_size) == (
        3 * CHUNK + 100, 4, len(sample[1]))
