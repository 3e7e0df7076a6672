"""Opening a path that may not be a regular file, or may change while it is read.

`open(path)` on a FIFO blocks until a writer comes; `/dev/zero` and `/dev/urandom` never
end; `/proc` files claim a size of 0 and then hold bytes. `open_regular` opens with
`O_NONBLOCK` (a FIFO opens at once instead of waiting for a writer), checks the opened
descriptor with `fstat` (a path checked first could be swapped before the open), and
refuses anything but a regular file before a byte is read.
"""

from __future__ import annotations

import os
import stat

from rlx.errors import RlxError
from rlx.record import dataclass

__all__ = ["SMALL_FILE_BYTES", "FileIdentity", "open_regular", "read_fd", "read_regular",
           "read_small_text"]

SMALL_FILE_BYTES = 1 << 16
"""Largest password (or other one-line secret) file rlx reads: 64 KiB. Its size is checked
on the opened descriptor before a byte is read, so `/dev/zero` or a huge file costs nothing."""


@dataclass(frozen=True)
class FileIdentity:
    """What tells one version of a file from another without reading it: the inode (a
    `cp` over a file keeps it, a rename-over replaces it), the size, the modification
    time (any write sets it)."""

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileIdentity:
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    @classmethod
    def of_fd(cls, fd: int) -> FileIdentity:
        return cls.of(os.fstat(fd))


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str | os.PathLike[str], error: type[RlxError], *,
                 nofollow: bool = False, dir_fd: int | None = None) -> int:
    """A read-only descriptor of the regular file at `path`, or `error`.

    `nofollow` refuses a symlink as the last component (`O_NOFOLLOW`); `dir_fd` resolves a
    relative `path` against an open directory. A file in `/proc` or `/sys` is refused too:
    its size says nothing of what it holds."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    if nofollow:
        flags |= os.O_NOFOLLOW
    name = os.fsdecode(path)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as err:
        if nofollow and err.errno in (getattr(os, "ELOOP", 40), getattr(os, "EMLINK", 31)):
            raise error(f"{name} is a symbolic link, which rlx does not follow here") from None
        raise error(f"cannot read {name}: {err.strerror or err}") from None
    try:
        st = os.fstat(fd)
        problem = None
        if not stat.S_ISREG(st.st_mode):
            problem = f"is {_kind(st.st_mode)}, not a regular file"
        elif _pseudo(fd):
            problem = "is a kernel pseudo-file (/proc, /sys), not a model file"
        if problem is None:
            os.set_blocking(fd, True)
            return fd
    except OSError as err:
        problem = f"cannot be read: {err.strerror or err}"
    os.close(fd)
    raise error(f"{name} {problem}")


def _pseudo(fd: int) -> bool:
    """Whether `fd` is a procfs or sysfs file (sizes of 0 or 4096 whatever they hold)."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return False
    return target.startswith(("/proc/", "/sys/"))


def read_regular(path: str | os.PathLike[str], error: type[RlxError], *,
                 limit: int | None = None, nofollow: bool = False) -> bytes:
    """The whole of the regular file at `path` (at most `limit` bytes), read through one
    descriptor; a file that changes size while it is read is an `error`."""
    fd = open_regular(path, error, nofollow=nofollow)
    name = os.fsdecode(path)
    try:
        return read_fd(fd, name, error, limit=limit)
    finally:
        os.close(fd)


def read_fd(fd: int, name: str, error: type[RlxError], *, limit: int | None = None,
            offset: int = 0, length: int | None = None) -> bytes:
    """`length` bytes (default: to the end) from `offset` of the open regular file `fd`."""
    try:
        before = FileIdentity.of_fd(fd)
        if length is None:
            length = max(before.size - offset, 0)
        if limit is not None and length > limit:
            raise error(f"{name} is {length} bytes, more than the {limit}-byte limit")
        if offset + length > before.size:
            raise error(f"{name}: bytes {offset}..{offset + length} run past the end of the "
                        f"file ({before.size} bytes)")
        data = os.pread(fd, length, offset) if length else b""
        while len(data) < length:
            more = os.pread(fd, length - len(data), offset + len(data))
            if not more:
                break
            data += more
        after = FileIdentity.of_fd(fd)
    except OSError as err:
        raise error(f"cannot read {name}: {err.strerror or err}") from None
    if len(data) != length or after != before:
        raise error(f"{name} changed while it was read (another process is writing it)")
    return data


def read_small_text(path: str | os.PathLike[str], error: type[RlxError], what: str, *,
                    limit: int = SMALL_FILE_BYTES) -> str:
    """The UTF-8 text of a small regular file (a password file): devices, FIFOs and files
    over `limit` bytes are refused before reading; `what` names the file in the error."""
    try:
        data = read_regular(path, error, limit=limit)
    except RlxError as err:
        raise error(f"{what}: {err}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{what}: {os.fsdecode(path)} is not UTF-8 text (byte {err.start})"
                    ) from None
