"""Mapped inputs that another process truncates or rewrites while rlx uses them.

A memory map shows the file as it is now: a page past a shrunk file's new end kills the
reader with SIGBUS on first touch, and a same-size rewrite changes a loaded model's
weights under it. What rlx guarantees (docs/reliability.md, "Files that change"): the bytes
it validated are the bytes it uses, until it lets go of them, and no change to the file
can kill the process. How:

- Files are mapped under a read lease (`fcntl(F_SETLEASE, F_RDLCK)`): the kernel
  holds any process that opens the file for writing, or truncates it, until rlx releases
  the lease, and signals rlx first. On that signal rlx copies the mapped bytes into
  anonymous memory, moves the copy over the map in one `mremap` (every numpy view keeps
  its address and its bytes), marks the file `changed` and releases the lease; then the
  writer proceeds. Untouched files cost nothing; a rewritten one costs one copy.
- Where a lease cannot be taken (the file is not ours and we lack CAP_LEASE, a writer
  already has it open, the filesystem has no leases, not Linux, or the signal handler
  cannot be installed because this is not the main thread), the file is read into
  private memory through one descriptor, at the price of its size in RAM; a change during
  that read is detected (size, inode and mtime before and after) and refused.

The one remaining gap: the kernel waits `/proc/sys/fs/lease-break-time` seconds (45 by
default) for the release. Python runs signal handlers in the main thread between
bytecodes, so a main thread stuck in one C call for longer than that lets the writer go
first. Readers then get the bytes as they are.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal's C half (signal.py: ~40 KiB of enums)
import _thread
import contextlib
import mmap
import os
import sys
import weakref
from collections.abc import Iterator
from typing import BinaryIO

from rlx.errors import RlxError
from rlx.logs import Logger
from rlx.record import dataclass
from rlx.safeio.files import FileIdentity, open_regular, read_fd

__all__ = ["COPY_BELOW", "MappedFile", "in_leased_map", "map_fd", "map_file", "map_with_file",
           "read_from_file"]

log = Logger(__name__)

COPY_BELOW = 0  # files smaller than this are read rather than mapped (0: map all)
_LEASE_SIGNAL = getattr(_signal, "SIGIO", None)  # what the kernel sends on a lease break
_leases: set[_Lease] = set()  # held until their map is garbage
# the signal handler may run while the main thread holds it; `_thread`, not `threading`
# (~150 KiB and 2 ms that a numpy load otherwise never imports)
_lock = _thread.RLock()
_handler_installed = False


@dataclass(eq=False)
class _Lease:
    """A read lease on one mapped file, held for as long as its map lives."""

    name: str
    fd: int
    address: int
    length: int
    changed: bool = False

    def privatize(self) -> None:
        """Swap the map's pages for a private copy, then let the writer go."""
        if self.fd < 0:
            return
        try:
            _replace_with_copy(self.address, self.length)
        except OSError as err:  # no memory for the copy: keep the map, still release
            log.warning("%s changed on disk and could not be copied (%s): the bytes rlx "
                        "reads are now the file's", self.name, err)
        else:
            log.warning("%s changed on disk; rlx keeps the bytes it opened", self.name)
        self.changed = True
        self.release()

    def release(self) -> None:
        with _lock:
            _leases.discard(self)
        if self.fd >= 0:
            _release(self.fd)
            self.fd = -1


@dataclass(eq=False)
class MappedFile:
    """A file's bytes as rlx uses them: `buffer` (an mmap or bytes) and how it was opened.

    `changed` turns true once another process started writing the file after rlx mapped
    it: rlx kept the bytes it had (results stay those of the file as it was opened)."""

    name: str
    identity: FileIdentity
    buffer: mmap.mmap | bytes
    lease: _Lease | None = None

    @property
    def leased(self) -> bool:
        return self.lease is not None and self.lease.fd >= 0

    @property
    def changed(self) -> bool:
        return self.lease is not None and self.lease.changed

    def __len__(self) -> int:
        return len(self.buffer)


def map_file(path: str | os.PathLike[str], error: type[RlxError], *,
             copy_below: int = COPY_BELOW) -> MappedFile:
    """The regular file at `path`, mapped under a lease or read into memory (see above)."""
    return map_fd(open_regular(path, error), os.fsdecode(path), error, copy_below=copy_below)


@contextlib.contextmanager
def map_with_file(path: str | os.PathLike[str], error: type[RlxError], *,
                  copy_below: int = COPY_BELOW) -> Iterator[tuple[MappedFile, BinaryIO]]:
    """`map_file`, plus a file object on the same open file for parsers that read through
    one (zipfile): both see the file that was opened, never one swapped in at the path."""
    fd = open_regular(path, error)
    try:
        f = os.fdopen(os.dup(fd), "rb")
    except OSError as err:
        os.close(fd)
        raise error(f"cannot read {os.fsdecode(path)}: {err.strerror or err}") from None
    with f:
        yield map_fd(fd, os.fsdecode(path), error, copy_below=copy_below), f


def map_fd(fd: int, name: str, error: type[RlxError], *,
           copy_below: int = COPY_BELOW) -> MappedFile:
    """`map_file` of a descriptor `open_regular` gave; it is closed (or kept by the lease)."""
    try:
        if os.fstat(fd).st_size >= max(copy_below, 1) and _take_lease(fd):  # mmap: not 0 B
            identity = FileIdentity.of_fd(fd)  # under the lease: writers wait for us now
            try:
                buffer = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as err:
                raise error(f"cannot map {name}: {err}") from None
            lease = _Lease(name, fd, _address_of(buffer), len(buffer))
            fd = -1  # the lease owns it now
            with _lock:
                _leases.add(lease)
            weakref.finalize(buffer, lease.release)
            return MappedFile(name, identity, buffer, lease)
        identity = FileIdentity.of_fd(fd)
        return MappedFile(name, identity, read_fd(fd, name, error))
    except OSError as err:
        raise error(f"cannot read {name}: {err.strerror or err}") from None
    finally:
        if fd >= 0:
            _release(fd)


def in_leased_map(address: int, nbytes: int) -> bool:
    """Whether the `nbytes` at `address` lie in a map still held under its lease."""
    return _lease_at(address, nbytes) is not None


def read_from_file(address: int, out: memoryview) -> bool:
    """Fill `out` (bytes) with what a leased map shows at `address`, read from its file with
    `pread` rather than through the map, so the pages never join the process's resident
    set: how a bake reads weights larger than memory. False when `address` is in no
    leased map, or the lease broke during the read (the map then holds the private copy
    of the bytes rlx opened: read them there)."""
    lease = _lease_at(address, out.nbytes)
    if lease is None:
        return False
    fd, offset, done = lease.fd, address - lease.address, 0
    try:
        while done < out.nbytes:
            got = os.preadv(fd, [out[done:]], offset + done)
            if not got:
                return False
            done += got
    except OSError:
        return False
    # a lease that broke meanwhile closed its descriptor (whose number may name another
    # file by now) and privatized the map: only a lease still held vouches for the read
    return lease.fd >= 0 and not lease.changed


def _lease_at(address: int, nbytes: int) -> _Lease | None:
    # a snapshot: the collector may run a map's finalizer (`_Lease.release`, the lock is
    # reentrant) in this very thread while the leases are looked through
    with _lock:
        leases = tuple(_leases)
    return next((lease for lease in leases if lease.fd >= 0 and lease.address <= address
                 and address + nbytes <= lease.address + lease.length), None)


def _take_lease(fd: int) -> bool:
    if _LEASE_SIGNAL is None or not sys.platform.startswith("linux") or _libc() is None:
        return False
    if not _install_handler():
        return False
    import fcntl

    try:
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
    except OSError:
        return False
    return True


def _release(fd: int) -> None:
    import fcntl

    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    with contextlib.suppress(OSError):
        os.close(fd)


def _install_handler() -> bool:
    global _handler_installed
    if _handler_installed:
        return True
    if _LEASE_SIGNAL is None:
        return False
    current = _signal.getsignal(_LEASE_SIGNAL)
    if current not in (_signal.SIG_DFL, _signal.SIG_IGN, None):
        return False  # the application uses the signal: rlx copies instead of leasing
    try:
        _signal.signal(_LEASE_SIGNAL, _on_lease_break)
    except ValueError:  # not the main thread: only it may install a handler
        return False
    _handler_installed = True
    return True


def _on_lease_break(signum, frame) -> None:
    """A writer waits for one of our leases: privatize every file whose lease is breaking
    (F_GETLEASE no longer reports the read lease)."""
    import fcntl

    with _lock:
        leases = list(_leases)
    for lease in leases:
        try:
            breaking = fcntl.fcntl(lease.fd, fcntl.F_GETLEASE) != fcntl.F_RDLCK
        except OSError:
            breaking = lease.fd >= 0
        if breaking:
            lease.privatize()


# -- the copy, moved over the map ----------------------------------------------------------
_PROT_READ, _PROT_WRITE = 1, 2
_MAP_PRIVATE, _MAP_ANONYMOUS = 0x02, 0x20
_MREMAP_MAYMOVE, _MREMAP_FIXED = 1, 2


def _libc():
    """libc through ctypes, loaded on first use (ctypes costs the load path ~4 ms)."""
    global _LIBC
    if _LIBC is False:
        import ctypes

        try:
            # the process's own symbols, libc's among them: ctypes.util.find_library would
            # run ldconfig in a subprocess (and importing it costs shutil, tempfile, lzma...)
            libc = ctypes.CDLL(None, use_errno=True)
            libc.mmap.restype = ctypes.c_void_p
            libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                  ctypes.c_int, ctypes.c_int, ctypes.c_long]
            libc.mremap.restype = ctypes.c_void_p
            libc.mremap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t,
                                    ctypes.c_int, ctypes.c_void_p]
            libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            _LIBC = libc
        except (OSError, AttributeError):
            _LIBC = None
    return _LIBC


_LIBC: object = False


def _address_of(buffer: mmap.mmap) -> int:
    import numpy as np

    return int(np.frombuffer(buffer, np.uint8).ctypes.data) if len(buffer) else 0


def _replace_with_copy(address: int, length: int) -> None:
    """Map anonymous pages, copy `length` bytes at `address` into them, and move them over
    `address` (the file's pages go in the same call: no moment without a mapping there)."""
    if not length:
        return
    import ctypes

    libc = _libc()
    size = -(-length // mmap.PAGESIZE) * mmap.PAGESIZE
    copy = libc.mmap(None, size, _PROT_READ | _PROT_WRITE, _MAP_PRIVATE | _MAP_ANONYMOUS,
                     -1, 0)
    if copy in (None, ctypes.c_void_p(-1).value):  # MAP_FAILED
        raise OSError(ctypes.get_errno(), "mmap of the private copy failed")
    ctypes.memmove(copy, address, length)
    libc.mprotect(copy, size, _PROT_READ)
    moved = libc.mremap(copy, size, size, _MREMAP_MAYMOVE | _MREMAP_FIXED, address)
    if moved != address:
        errno = ctypes.get_errno()
        libc.munmap(copy, size)
        raise OSError(errno, "mremap over the file's map failed")
