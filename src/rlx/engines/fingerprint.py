"""What identifies a model on a machine, for the caches engines keep in the user's cache
directory: the artifact's checksum, the CPU, and where the cache lives."""

from __future__ import annotations

import hashlib
import os
import platform
from pathlib import Path

from rlx.artifact.layout import ENCRYPTED_MAGIC, MAGIC, signature_path

__all__ = ["artifact_checksum", "default_cache_dir", "is_plain_artifact", "machine_id"]


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rlx"


def artifact_checksum(path: str) -> str:
    """The artifact's own checksum, and its signature's when one lies beside it."""
    own = _own_checksum(path)
    try:
        sig = signature_path(path).read_bytes()
    except OSError:
        return own
    # the checksums are xxhash (not collision resistant); the .sig holds SHA-256 of every
    # part, so a cache entry made from a look-alike never serves the signed file
    return own + hashlib.blake2b(sig, digest_size=8).hexdigest()


def _own_checksum(path: str) -> str:
    """The header digest of a plain `.rlx` (it covers every blob's checksum); for an
    `.rlxp` folder, a hash of its TOC (which holds every tensor's checksum); for any other
    file (encrypted, flat or zip package), a hash of its bytes."""
    if os.path.isdir(path):
        return hashlib.blake2b(Path(path, "rlx.json").read_bytes(), digest_size=16).hexdigest()
    with open(path, "rb") as f:
        head = f.read(40)
        if head[:8] == MAGIC:
            return head[24:40].hex()
        f.seek(0)
        digest = hashlib.blake2b(digest_size=16)
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
        return digest.hexdigest()


def is_plain_artifact(path: str | None) -> bool:
    """A file whose weights may be copied to disk: not encrypted (a cache must never hold
    an encrypted artifact's plaintext)."""
    if path is None:
        return False
    if os.path.isdir(path):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return False
    return head != ENCRYPTED_MAGIC


def _cpu_info() -> tuple[str, str]:
    """(model name, flags) from /proc/cpuinfo; kernels are chosen by the flags. Only
    without it `platform.processor()`, which on Linux runs `uname -p` in a subprocess."""
    model, flags = "", ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name":
                    model = value.strip()
                elif key == "flags":
                    flags = value.strip()
                if model and flags:
                    break
    except OSError:
        pass
    return model or platform.processor() or "?", flags


def machine_id() -> str:
    """Architecture, CPU model, core count and a hash of the CPU flags."""
    model, flags = _cpu_info()
    flags_hash = hashlib.blake2b(flags.encode(), digest_size=6).hexdigest()
    return f"{platform.machine()}|{model}|{os.cpu_count()}|{flags_hash}"
