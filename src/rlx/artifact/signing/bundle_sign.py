"""An OpenSSF model-signing bundle of an artifact, made by the `model_signing` package itself
(the optional extra `rlx[signing]`), so that what rlx writes is what that tool writes and
verifies. Private-key signing only (ECDSA P-256, P-384 or P-521), which needs no network.

The hashing covers every file of a dir package, git's included (model-signing leaves those
out by default): rlx's verifier (`bundle`) refuses a folder holding a file its signature does
not cover.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec

from rlx.artifact.signing.keys import PrivateKeySource, load_ecdsa_private_key
from rlx.errors import ArtifactError, SigningKeyError

__all__ = ["PIP", "bundle_of"]

PIP = "pip install 'rlx[signing]'"


def bundle_of(path: Path, key: PrivateKeySource, password: str | bytes | None
              ) -> tuple[bytes, ec.EllipticCurvePrivateKey]:
    """The bundle's bytes, signing `path` (a validated artifact) with the ECDSA private key
    in the PEM file `key`, and that key."""
    if not isinstance(key, (str, os.PathLike)):
        raise SigningKeyError("the model-signing format signs with a PEM key file; pass its "
                              "path")
    private = load_ecdsa_private_key(key, password)  # every key error typed, in one line
    try:
        from model_signing import hashing, signing
    except ImportError:
        raise SigningKeyError(f"signing in the model-signing format needs the model-signing "
                              f"package: {PIP}") from None
    secret = password.encode("utf-8") if isinstance(password, str) else password
    # typed str, but handed to cryptography as it is, which needs bytes (1.1.1's own
    # command line fails on a str password)
    config = signing.Config().use_elliptic_key_signer(
        private_key=key, password=secret)  # type: ignore[arg-type]
    config.set_hashing_config(hashing.Config().set_ignored_paths(paths=[],
                                                                 ignore_git_paths=False))
    with tempfile.TemporaryDirectory(prefix="rlx-bundle-") as folder:
        out = Path(folder) / "bundle.json"
        try:
            config.sign(path, out)
        except (ValueError, OSError) as err:  # a symlink, a file gone meanwhile
            raise ArtifactError(f"{path}: model-signing could not sign it ({err})") from None
        return out.read_bytes(), private
