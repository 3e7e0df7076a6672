"""Validated, memory-mappable ZIP archives of STORE-only members (`.rlxp` zip, `.dduf`).

Both formats keep their members uncompressed so a reader can view each one in place. This
module checks everything an archive claims before a member's bytes are used: `zipfile` parses
the central directory; then every member must be stored (no compression, no encryption),
carry a safe relative name (no `..`, no absolute path, no backslash, no duplicates), have
its local header inside the file and naming the same member, and its data must end before
the central directory and overlap no other member's header or data. The result is the
absolute byte range of each member's data, which the caller views in its own memory map.

`write_stored_zip` writes such an archive with every member's data 64-byte aligned (padding
in an extra field of the local header, like Android's zipalign) and a ZIP64 extra field on
every member, so `unzip -l` and `zipfile` list it and any size works.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import IO, NoReturn

from rlx.errors import RlxError

__all__ = ["StoredMember", "read_stored_zip", "write_stored_zip", "check_crc", "ALIGN"]

ALIGN = 64
_LOCAL = struct.Struct("<4s5H3I2H")  # signature .. name length, extra length: 30 bytes
_LOCAL_MAGIC = b"PK\x03\x04"
_PAD_ID = 0xD935  # the extra-field id zipalign uses for padding
_ZIP64_EXTRA = 20  # what zipfile adds to a local header written with force_zip64
_MAX_MEMBERS = 1 << 16


@dataclass(frozen=True)
class StoredMember:
    name: str
    offset: int  # absolute offset of the member's data in the archive
    length: int
    crc: int


def read_stored_zip(file: IO[bytes], size: int, source: str, error: type[RlxError],
                    name_ok: Callable[[str], str | None] = lambda name: None,
                    ) -> dict[str, StoredMember]:
    """Every file member of the archive `file` (`size` bytes), validated; folders skipped.

    `name_ok(name)` returns None for an acceptable name, else why it is not; a failure raises
    `error` with one line naming `source`."""
    def fail(message: str) -> NoReturn:
        raise error(f"{source}: {message}")

    try:
        archive = zipfile.ZipFile(file)
        infos = archive.infolist()
        start_dir = archive.start_dir
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError, OverflowError,
            struct.error, NotImplementedError, UnicodeDecodeError, KeyError) as err:
        fail(f"not a valid zip archive ({' '.join(str(err).split())[:200]})")
    if len(infos) > _MAX_MEMBERS:
        fail(f"{len(infos)} members, more than the {_MAX_MEMBERS} allowed")
    members: dict[str, StoredMember] = {}
    spans: list[tuple[int, int, str]] = []
    for info in infos:
        name = info.filename
        if name in members or name.rstrip("/") in members:
            fail(f"member {name!r} appears twice")
        problem = _name_problem(name) or (None if info.is_dir() else name_ok(name))
        if problem:
            fail(f"member {name!r}: {problem}")
        if info.flag_bits & 1:
            fail(f"member {name!r} is encrypted")
        if info.compress_type != zipfile.ZIP_STORED:
            fail(f"member {name!r} is compressed (method {info.compress_type}); only STORE "
                 "members can be mapped in place")
        if info.file_size != info.compress_size:
            fail(f"member {name!r}: stored size {info.compress_size} differs from its size "
                 f"{info.file_size}")
        begin = info.header_offset
        file.seek(begin)
        head = file.read(_LOCAL.size)
        if len(head) < _LOCAL.size or begin + _LOCAL.size > start_dir:
            fail(f"member {name!r}: local header at {begin} is past the central directory")
        magic, *_, name_len, extra_len = _LOCAL.unpack(head)
        if magic != _LOCAL_MAGIC:
            fail(f"member {name!r}: no local header at offset {begin}")
        local_name = file.read(name_len)
        if local_name not in (name.encode("utf-8"), name.encode("cp437", "replace")):
            fail(f"member {name!r}: its local header names {local_name[:80]!r}")
        data = begin + _LOCAL.size + name_len + extra_len
        end = data + info.file_size
        if end > start_dir or end > size:
            fail(f"member {name!r}: data ends at {end}, past the central directory "
                 f"({start_dir})")
        spans.append((begin, end, name))
        if not info.is_dir():
            members[name] = StoredMember(name, data, info.file_size, info.CRC)
    spans.sort()
    for (_, end, first), (begin, _, second) in zip(spans, spans[1:]):
        if begin < end:
            fail(f"members {first!r} and {second!r} overlap")
    return members


def _name_problem(name: str) -> str | None:
    parts = name.rstrip("/").split("/")
    if not name or name.startswith("/") or "\\" in name or "\x00" in name \
            or any(p in ("", ".", "..") for p in parts):
        return "not a safe relative path"
    return None


def check_crc(view, member: StoredMember, source: str, error: type[RlxError]) -> None:
    """The member's CRC-32 against its bytes (`view` covers the whole archive)."""
    got = zlib.crc32(view[member.offset:member.offset + member.length])
    if got != member.crc:
        raise error(f"{source}: CRC-32 mismatch in member {member.name!r}: the file is corrupt")


def write_stored_zip(out: IO[bytes], members: Iterable[tuple[str, Iterable]]) -> None:
    """Write `(name, pieces)` members, each STORE-d with its data 64-byte aligned.

    `out` must be seekable (zipfile rewrites each local header once the size is known);
    `pieces` are buffers (bytes, memoryviews, arrays) written one after the other."""
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, pieces in members:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            fixed = _LOCAL.size + len(name.encode("utf-8")) + _ZIP64_EXTRA + 4
            pad = -(out.tell() + fixed) % ALIGN
            info.extra = struct.pack("<HH", _PAD_ID, pad) + bytes(pad)
            with archive.open(info, "w", force_zip64=True) as dest:
                for piece in pieces:
                    dest.write(piece)
