"""Atomic file replacement: a reader sees the old file or the new one, never a partial one.

The new bytes go to a temp file in the destination folder (same filesystem, so `os.replace`
is atomic), which is fsynced before the rename; the folder is fsynced after it. A temp file
left by a writer that was killed is recognised by the dead pid in its name and removed the
next time anything is written to that folder.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

__all__ = ["remove_stale_temps", "atomic_write"]

_TAG = ".rlx-tmp-"


def _temp_name(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}{_TAG}{os.getpid()}-{secrets.token_hex(4)}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(folder: Path) -> list[Path]:
    """Delete temp files of writers that no longer run; returns what was removed."""
    removed = []
    for path in folder.glob(f".*{_TAG}*"):
        pid_text = path.name.rsplit(_TAG, 1)[-1].split("-", 1)[0]
        if pid_text.isdigit() and not _pid_alive(int(pid_text)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed


@contextlib.contextmanager
def atomic_write(dest: str | os.PathLike, *, mode: int = 0o666) -> Iterator[BinaryIO]:
    """Yield a binary file; on normal exit it replaces `dest`, on error it vanishes.

    `mode` (less the umask) is set when the temp file is created, before a byte is written:
    a private key is never readable by others, not even for a moment."""
    dest = Path(dest)
    folder = dest.parent if str(dest.parent) else Path(".")
    remove_stale_temps(folder)
    temp = _temp_name(dest)
    try:
        with open(temp, "xb", opener=lambda name, flags: os.open(name, flags, mode)) as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, dest)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    _fsync_folder(folder)


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every platform can open a directory
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
