"""Which bytes a signature covers: an artifact cut into named parts, each hashed with SHA-256.

A single-file artifact is cut where its own structure says (`.rlx`: the header, then each
blob with the padding after it; encrypted: the RLXENC01 header, then each sealed chunk;
flat `.rlxp`: the header and TOC, then each region; zip `.rlxp`: each member from its local
header, then the central directory), so the parts tile the file from byte 0 to its end and
a mismatch can name what changed. A dir package's parts are its files, every regular file
under the folder by relative path. Only the signer looks at the structure, after the
artifact's own reader has validated it; a verifier just hashes the lengths the signed
message lists, so nothing of the artifact is parsed before its signature is checked.

Hashing streams through one 1 MiB buffer (SHA-256: ~1.3 GiB/s here with SHA-NI): memory
stays flat whatever the artifact's size. The XXH3 checksums the formats already store are
not reused: XXH3 is not collision resistant, so a signature over them could be moved to a
forged header or blob.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from rlx.artifact.header import FLAG_ZSTD_HEADER, unpack_region
from rlx.artifact.layout import MAGIC, PREAMBLE, align
from rlx.artifact.signing.layout import Part
from rlx.errors import ArtifactError, RlxError, SignatureError
from rlx.safeio import FileIdentity, map_fd, open_regular

__all__ = ["MAGICS", "Boundary", "HashedFile", "dir_members", "hash_file", "map_members",
           "signed_parts", "signing_kind", "tile"]

_BUFFER = 1 << 20
MAGICS = {MAGIC: "rlx", b"RLXENC01": "rlx-encrypted", b"RLXPFLAT": "rlxp-flat",
           b"PK\x03\x04": "rlxp-zip"}

Boundary = tuple[int, str]  # where a part starts, and its name


@dataclass(frozen=True)
class HashedFile:
    """One file as hashed: the digest of each part, and the file's identity throughout."""

    path: Path
    digests: tuple[bytes, ...]
    identity: FileIdentity


def signing_kind(path: Path) -> str:
    """The signing kind of an artifact by its first bytes only (a folder is a dir package).
    No structure is parsed: this runs before a signature is checked."""
    if path.is_dir():
        return "rlxp-dir"
    fd = open_regular(path, ArtifactError)
    try:
        head = os.pread(fd, 8, 0)
    finally:
        os.close(fd)
    kind = MAGICS.get(head[:8]) or MAGICS.get(head[:4])
    if kind is None:
        raise ArtifactError(f"{path} is not an rlx artifact (bad magic {head!r})")
    return kind


def hash_file(path: Path, lengths: Sequence[int], where: str,
              error: type[RlxError] = ArtifactError, *, member: bool = False) -> HashedFile:
    """SHA-256 of consecutive byte ranges of `lengths` from the start of `path`, read once,
    sequentially; the file must be exactly their sum long and not change meanwhile. A dir
    package's `member` is never read through a symlink."""
    fd = open_regular(path, error, nofollow=member)
    try:
        before = FileIdentity.of_fd(fd)
        if before.size != sum(lengths):
            raise error(f"{where}: {before.size} bytes, {sum(lengths)} expected (changed while "
                        "being checked?)")
        buffer = memoryview(bytearray(_BUFFER))
        digests = []
        with os.fdopen(os.dup(fd), "rb", buffering=0) as f:
            for length in lengths:
                digest = hashlib.sha256()
                for view in _read(f, length, buffer, where, error):
                    digest.update(view)
                digests.append(digest.digest())
        if FileIdentity.of_fd(fd) != before:
            raise error(f"{where}: changed while it was hashed")
    finally:
        os.close(fd)
    return HashedFile(path, tuple(digests), before)


def _read(f, length: int, buffer: memoryview, where: str,
          error: type[RlxError]) -> Iterator[memoryview]:
    while length:
        got = f.readinto(buffer[:min(length, len(buffer))])
        if not got:
            raise error(f"{where}: the file ended early (changed while it was hashed?)")
        length -= got
        yield buffer[:got]


def tile(boundaries: list[Boundary], size: int) -> list[tuple[str, int]]:
    """Parts `(name, length)` that run from each boundary to the next and cover [0, size)."""
    cuts: list[Boundary] = []
    for start, name in sorted(b for b in boundaries if 0 <= b[0] < size):
        if cuts and start == cuts[-1][0]:
            continue  # an empty part: the next region starts here too
        cuts.append((start, name))
    if not cuts or cuts[0][0]:
        cuts.insert(0, (0, "prefix"))
    ends = [start for start, _ in cuts[1:]] + [size]
    return [(name, end - start) for (start, name), end in zip(cuts, ends)]


# -- the signer's cut, per kind (the artifact was validated by its reader first) ----------------
def _rlx(f) -> list[Boundary]:
    _, _, flags, length, _ = PREAMBLE.unpack(f.read(PREAMBLE.size))
    text = f.read(length)
    if flags & FLAG_ZSTD_HEADER:
        text, _ = unpack_region(text, os.fstat(f.fileno()).st_size, _header_error(f.name))
    header = json.loads(text)
    data = align(PREAMBLE.size + length)
    return [(0, "header")] + [(data + b["offset"], f"blob {i}")
                              for i, b in enumerate(header["blobs"])]


def _header_error(where: str):
    def fail(message: str) -> NoReturn:
        raise ArtifactError(f"{where}: {message}")

    return fail


def _encrypted(f) -> list[Boundary]:
    from rlx.artifact import crypto

    info = crypto.read_encryption_info(f.name)
    stride = info.chunk_size + crypto.TAG_SIZE
    return [(0, "encryption header")] + [(crypto.HEADER_SIZE + i * stride, f"chunk {i}")
                                         for i in range(info.chunk_count)]


def _flat(f) -> list[Boundary]:
    from rlx.artifact.rlxp import layout

    _, _, _, length = layout.FLAT_HEADER.unpack(f.read(layout.FLAT_HEADER.size))
    toc = json.loads(f.read(length))
    data = align(layout.FLAT_HEADER.size + length + 16)
    regions = [(toc.get("graph"), "graph"), (toc.get("placement"), "placement")]
    regions += [(row, f"tensor {row['name']}") for row in toc["tensors"]]
    regions += [(row, f"sidecar {row['id']}") for row in toc["sidecars"]]
    return [(0, "header")] + [(data + row["offset"], name) for row, name in regions
                              if row is not None]


def _zip(f) -> list[Boundary]:
    with zipfile.ZipFile(f) as archive:
        cuts = [(info.header_offset, f"member {info.filename}") for info in archive.infolist()]
        return cuts + [(archive.start_dir, "central directory")]


_CUTS = {"rlx": _rlx, "rlx-encrypted": _encrypted, "rlxp-flat": _flat, "rlxp-zip": _zip}


def dir_members(folder: Path, error: type[RlxError]) -> dict[str, Path]:
    """Every file under a dir package by relative POSIX path; anything but regular files and
    folders (a symlink could bring in bytes from outside the signed set) is an error."""
    members = {}
    for root, dirs, files in os.walk(folder):
        for name in sorted(dirs) + sorted(files):
            path = Path(root) / name
            mode = os.lstat(path).st_mode
            relative = path.relative_to(folder).as_posix()
            if stat.S_ISLNK(mode) or not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise error(f"{folder}: {relative} is not a regular file or folder; a signed "
                            "package holds only those")
            if stat.S_ISREG(mode):
                try:
                    relative.encode("utf-8")
                except UnicodeEncodeError:
                    raise error(f"{folder}: a member's name is not UTF-8 ({relative!r})") \
                        from None
                members[relative] = path
    return dict(sorted(members.items()))


def map_members(folder: str | os.PathLike) -> dict[str, memoryview]:
    """Every regular file of a dir package by relative POSIX path, each opened (never
    through a symlink) and mapped once, for a signature to be checked over the bytes that
    are then read; a member gone or replaced by a symlink meanwhile is refused."""
    try:
        paths = dir_members(Path(folder), ArtifactError)
    except ArtifactError as err:
        raise SignatureError(str(err), "mismatch") from None
    members = {}
    for name, path in paths.items():
        try:
            fd = open_regular(path, ArtifactError, nofollow=True)
            members[name] = memoryview(map_fd(fd, str(path), ArtifactError).buffer)  # leased
        except ArtifactError as err:  # it changed between the listing and now
            raise SignatureError(f"{os.fspath(folder)}: {err}", "changed") from None
    return members


def signed_parts(path: Path, kind: str) -> tuple[list[Part], list[HashedFile]]:
    """The parts of a validated artifact, hashed, and the files they came from."""
    if kind == "rlxp-dir":
        parts, hashed = [], []
        for name, member in dir_members(path, ArtifactError).items():
            size = member.stat().st_size
            result = hash_file(member, [size], f"{path}: {name}", member=True)
            parts.append(Part(name, size, result.digests[0]))
            hashed.append(result)
        return parts, hashed
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        named = tile(_CUTS[kind](f), size)
    result = hash_file(path, [length for _, length in named], str(path))
    return ([Part(name, length, digest) for (name, length), digest
             in zip(named, result.digests)], [result])
