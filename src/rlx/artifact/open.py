"""`open_artifact`: one entry point for every artifact rlx writes, chosen by its magic.

`RLXBAKE1` (plain `.rlx`) and `RLXENC01` (encrypted `.rlx`) go to `read_rlx`; `RLXPFLAT`,
a zip holding `rlx.json` and a folder holding `rlx.json` (the three `.rlxp` containers) go to
`read_rlxp`. The extension is never trusted: a renamed file opens as what it is.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from rlx.artifact.layout import ENCRYPTED_MAGIC, MAGIC
from rlx.artifact.model import RlxFile
from rlx.artifact.reader import read_rlx
from rlx.artifact.sniff import foreign_hint
from rlx.errors import ArtifactError
from rlx.safeio.files import open_regular

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
    raise ArtifactError(f"{path} is not an rlx artifact: bad magic {head[:8]!r} (expected "
                        f"RLXBAKE1, RLXENC01, RLXPFLAT or an .rlxp zip/folder)"
                        f"{foreign_hint(head, str(path))}")


def open_artifact(path: str | os.PathLike, password: str | bytes | None = None, *,
                  verify: str = "lazy", kdf_limits=None, trusted_keys: Iterable | None = None,
                  signature: str | os.PathLike | None = None) -> RlxFile:
    """Open any `.rlx` or `.rlxp` artifact; `password` only for encrypted `.rlx` files.

    With `trusted_keys` (Ed25519 public keys: key objects, PEM bytes or PEM files) the
    artifact must carry a valid signature by one of them (`signature`, default beside it:
    `rlx.artifact.signing.signature_path`), checked before the artifact is parsed or
    decrypted; otherwise `SignatureError`. Without, nothing about signatures is looked at."""
    signed = None
    if trusted_keys is not None:
        from rlx.artifact.signing import verify_signature

        signed = verify_signature(path, trusted_keys, signature=signature)
    kind = artifact_kind(path)
    if kind == "rlxp":
        if password is not None:
            raise ArtifactError(f"{path} is an .rlxp package, which is never encrypted; "
                                "open it without a password")
        from rlx.artifact.rlxp.read import read_rlxp

        file = read_rlxp(path, verify=verify)
    else:
        file = read_rlx(path, password=password, verify=verify, kdf_limits=kdf_limits)
    if signed is not None:
        signed.check_unchanged()  # the bytes read are the bytes verified
    return file
