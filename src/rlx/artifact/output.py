"""`write_artifact`: an `RlxFile` written as a plain `.rlx` file or an `.rlxp` package, the
format chosen from the arguments or the output's name, in one place for every writer.

`.rlxp` is chosen by `format="rlxp"`, an output ending in `.rlxp` (or `.rlxp.zip`) or a
container given; its container comes from `container` or the path (`container_for`).
Encryption is for `.rlx` only (packages are never encrypted), so a password with `.rlxp` is
refused, like package options with `.rlx`, before any work.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlx.errors import ArtifactError

if TYPE_CHECKING:
    from rlx.artifact.crypto import KdfParams
    from rlx.artifact.model import RlxFile
    from rlx.artifact.rlxp import RlxpOptions

__all__ = ["ARTIFACT_FORMATS", "WrittenArtifact", "artifact_format", "artifact_size",
           "check_artifact_output", "check_writable", "write_artifact"]

ARTIFACT_FORMATS = ("rlx", "rlxp")


@dataclass(frozen=True)
class WrittenArtifact:
    """What `write_artifact` wrote: the format, and for a package its container and the
    default storage tier of its tensors."""

    format: str
    container: str | None = None
    tier: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields a report shows (a plain file has no tier)."""
        if self.format == "rlx":
            return {"format": "rlx", "container": None}
        return {"format": "rlxp", "container": self.container, "tier": self.tier}


def artifact_format(path: str | os.PathLike, format: str | None = None, *,
                    container: str | None = None, packaged: bool = False,
                    encrypted: bool = False) -> str:
    """"rlx" or "rlxp": `format`, else the output's name (or a `container` given) says.
    `packaged`: package options (tiers) are set; `encrypted`: a password is given."""
    if format is None:
        lower = os.fspath(path).lower()
        as_package = lower.endswith((".rlxp", ".rlxp.zip")) or container is not None
        format = "rlxp" if as_package else "rlx"
    if format not in ARTIFACT_FORMATS:
        raise ArtifactError(f"unknown artifact format {format!r}; expected rlx or rlxp")
    if format == "rlx" and (container or packaged):
        raise ArtifactError("--container, --tier and --tensor-tier apply to .rlxp output only "
                            "(use --format rlxp or an .rlxp output)")
    if format == "rlxp" and encrypted:
        raise ArtifactError("--password with .rlxp output is not supported (.rlxp packages "
                            "are not encrypted); bake to .rlx to encrypt, or omit the password")
    return format


def check_writable(path: str | os.PathLike) -> None:
    """Fail before any work when a file cannot be created where `path` asks."""
    folder = Path(path).parent
    if not folder.is_dir():
        raise ArtifactError(f"cannot write {os.fspath(path)}: folder {folder} does not exist")
    if Path(path).is_dir():
        raise ArtifactError(f"cannot write {os.fspath(path)}: it is a folder")


def check_artifact_output(path: str | os.PathLike, format: str,
                          container: str | None = None) -> None:
    """Fail before any work when the artifact cannot be written at `path` (a dir package is
    a folder: its parent must exist, and it must not be a file)."""
    from rlx.artifact.rlxp import container_for

    if format == "rlxp" and container_for(os.fspath(path), container) == "dir":
        parent = Path(path).resolve().parent
        if not parent.is_dir():
            raise ArtifactError(f"cannot write {os.fspath(path)}: folder {parent} does not "
                                "exist")
        if Path(path).exists() and not Path(path).is_dir():
            raise ArtifactError(f"cannot write {os.fspath(path)} as a dir package: it is a "
                                "file")
    else:
        check_writable(path)


def write_artifact(path: str | os.PathLike, file: RlxFile, format: str | None = None, *,
                   container: str | None = None, password: str | bytes | None = None,
                   kdf: KdfParams | None = None, tier: str | None = None,
                   tiers: Mapping[str, str] | None = None, **package: Any) -> WrittenArtifact:
    """Write `file` at `path` as `format` (see `artifact_format`), atomically. For `.rlx`:
    `password` encrypts (with `kdf`). For `.rlxp`: `container` (flat, zip, dir), `tier` the
    tensors' default storage tier (hot), `tiers` one per tensor name, and `package` more
    `RlxpOptions` fields (features, producer, include_graph)."""
    fmt = artifact_format(path, format, container=container, packaged=bool(tier or tiers),
                          encrypted=password is not None)
    check_artifact_output(path, fmt, container)
    if fmt == "rlx":
        from rlx.artifact.writer import write_rlx

        write_rlx(path, file, password=password, kdf=kdf)
        return WrittenArtifact("rlx")
    from rlx.artifact.rlxp import RlxpOptions, write_rlxp

    options: RlxpOptions = RlxpOptions(tier=tier or "hot", tiers=dict(tiers or {}), **package)
    written = write_rlxp(path, file, container, options=options)
    return WrittenArtifact("rlxp", written, options.tier)


def artifact_size(path: str | os.PathLike) -> int:
    """An artifact's bytes on disk: a file's size, or the total of a dir package's files."""
    path = Path(path)
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size
