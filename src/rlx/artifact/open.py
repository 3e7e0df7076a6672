"""`open_artifact`: one entry point for every artifact rlx writes, chosen by its magic.

`RLXBAKE1` (plain `.rlx`) and `RLXENC01` (encrypted `.rlx`) go to `read_mapped_rlx`; `RLXPFLAT`,
a zip holding `rlx.json` and a folder holding `rlx.json` (the three `.rlxp` containers) go to
`read_rlxp`. The extension is never trusted: a renamed file opens as what it is.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from rlx.artifact.layout import ENCRYPTED_MAGIC, MAGIC
from rlx.artifact.model import RlxFile
from rlx.artifact.reader import read_mapped_rlx
from rlx.artifact.sniff import foreign_hint
from rlx.errors import ArtifactError
from rlx.record import replace
from rlx.safeio.files import open_regular
from rlx.safeio.mapping import map_with_file

FLAT_MAGIC = b"RLXPFLAT"  # rlx.artifact.rlxp.layout's, without importing the package reader

__all__ = ["open_artifact", "artifact_kind"]


def artifact_kind(path: str | os.PathLike) -> str:
    """"rlx", "rlx-encrypted" or "rlxp", by content; ArtifactError for anything else.
    (os.path, not pathlib: importing pathlib costs a small model's load ~8 ms.)"""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ArtifactError(f"{path} does not exist")
    head = b""
    if not os.path.isdir(path):
        # a regular file, checked on its descriptor: a FIFO or device is refused unread
        fd = open_regular(path, ArtifactError)
        try:
            head = os.pread(fd, 16, 0)
        except OSError as err:
            raise ArtifactError(f"cannot read {path}: {err.strerror or err}") from None
        finally:
            os.close(fd)
    if head[:8] == ENCRYPTED_MAGIC:
        return "rlx-encrypted"
    if head[:8] == MAGIC:
        return "rlx"
    # only now the package reader (and zstandard): a plain .rlx never needs them
    from rlx.artifact.rlxp.read import is_rlxp

    if is_rlxp(path):
        return "rlxp"
    if os.path.isdir(path):
        raise ArtifactError(f"{path} is a folder without rlx.json, not an .rlxp package")
    raise _not_an_artifact(head, path)


def open_artifact(path: str | os.PathLike, password: str | bytes | None = None, *,
                  verify: str = "lazy", kdf_limits=None, trusted_keys: Iterable | None = None,
                  signature: str | os.PathLike | None = None) -> RlxFile:
    """Open any `.rlx` or `.rlxp` artifact; `password` only for encrypted `.rlx` files.

    With `trusted_keys` (public keys: key objects, PEM bytes or PEM files) the artifact must
    carry a valid signature by one of them (`signature`, default beside it:
    `rlx.artifact.signing.signature_path`): an rlx `.sig` by an Ed25519 key or a
    model-signing bundle by an ECDSA key, told apart by the signature file's content. It is
    checked before the artifact is parsed or decrypted; otherwise `SignatureError`.
    Without, nothing about signatures is looked at.

    A file is opened once and mapped once (`rlx.safeio.map_with_file`); the signature is
    checked over, and the reader validates, those mapped bytes, which are the ones the
    returned file's weights view (`RlxFile.origin`): a rename, swap or move of the path
    at any moment changes nothing of what was checked or what runs. A signed dir package
    likewise: each member mapped once, the signature checked over, and the package read
    from, those mappings."""
    source = os.fspath(path)
    if os.path.isdir(source):
        return _open_folder(source, password, verify, trusted_keys, signature)
    try:
        with map_with_file(source, ArtifactError) as (mapped, f):
            view = memoryview(mapped.buffer)
            signed = None
            if trusted_keys is not None:
                from rlx.artifact.signing import verify_signature_of

                signed = verify_signature_of(source, view, trusted_keys, signature=signature)
            head = bytes(view[:16])
            if head[:8] in (MAGIC, ENCRYPTED_MAGIC):
                file = read_mapped_rlx(view, source, password=password, verify=verify,
                                       kdf_limits=kdf_limits)
            elif head[:8] == FLAT_MAGIC or head[:4] == b"PK\x03\x04":
                file = _mapped_package(view, f, source, password, verify)
            else:
                raise _not_an_artifact(head, source)
    except OSError as err:
        raise ArtifactError(f"cannot read {source}: {err.strerror or err}") from None
    return _with_signature(file, signed)


def _mapped_package(view: memoryview, f, source: str, password, verify: str) -> RlxFile:
    if view[:4] == b"PK\x03\x04" and not _zip_with_toc(f):
        raise _not_an_artifact(bytes(view[:16]), source)  # an .npz, a DDUF bundle...
    _no_password(source, password)
    from rlx.artifact.rlxp.read import read_mapped_rlxp

    return read_mapped_rlxp(view, f, source, verify=verify).file


def _zip_with_toc(f) -> bool:
    """Whether the zip on `f` (the open file that was mapped) holds an .rlxp's rlx.json."""
    import zipfile

    try:
        with zipfile.ZipFile(f) as archive:
            return "rlx.json" in archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return True  # damaged: the package reader says what is wrong with it


def _open_folder(source: str, password, verify: str, trusted_keys, signature) -> RlxFile:
    """A dir package: its members are files of their own, each checked as it is read."""
    if trusted_keys is not None:
        return _open_signed_folder(source, password, verify, trusted_keys, signature)
    kind = artifact_kind(source)
    if kind != "rlxp":
        raise ArtifactError(f"{source} is a folder without rlx.json, not an .rlxp package")
    _no_password(source, password)
    from rlx.artifact.rlxp.read import read_rlxp

    return read_rlxp(source, verify=verify)


def _open_signed_folder(source: str, password, verify: str, trusted_keys,
                        signature) -> RlxFile:
    """A signed dir package by the rule of a single file: every member mapped once, the
    signature checked over those mappings, the package read from them and never again
    from a path (a member renamed over, then back, changes nothing)."""
    from rlx.artifact.rlxp.read import read_mapped_dir_rlxp
    from rlx.artifact.signing import verify_members_of
    from rlx.artifact.signing.parts import map_members

    members = map_members(source)
    signed = verify_members_of(source, members, trusted_keys, signature=signature)
    if "rlx.json" not in members:
        raise ArtifactError(f"{source} is a folder without rlx.json, not an .rlxp package")
    _no_password(source, password)
    return _with_signature(read_mapped_dir_rlxp(members, source, verify=verify).file, signed)


def _no_password(source: str, password) -> None:
    if password is not None:
        raise ArtifactError(f"{source} is an .rlxp package, which is never encrypted; "
                            "open it without a password")


def _with_signature(file: RlxFile, signed) -> RlxFile:
    """Key the file's content by its signature too (engine caches: `RlxFile.origin`)."""
    if signed is not None and file.origin is not None:
        file.origin = replace(file.origin,
                                          key=f"{file.origin.key}+sig:{signed.digest}")
    return file


def _not_an_artifact(head: bytes, source: str) -> ArtifactError:
    return ArtifactError(f"{source} is not an rlx artifact: bad magic {head[:8]!r} (expected "
                         f"RLXBAKE1, RLXENC01, RLXPFLAT or an .rlxp zip/folder)"
                         f"{foreign_hint(head, source)}")
