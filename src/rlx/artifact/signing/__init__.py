"""Signatures of artifacts (`.rlx`, encrypted `.rlx`, `.rlxp`), in a detached file beside
them (docs/format.md, "Signatures"): rlx's own Ed25519 `.sig`, or an OpenSSF model-signing
bundle by an ECDSA key; keys, the signed message, signing and verifying.
`open_artifact(..., trusted_keys=[...])` and `rlx.load` verify before reading."""

from rlx.artifact.signing.keys import (
    generate_keypair,
    key_id,
    key_label,
    load_private_key,
    load_public_key,
    public_key_path,
    save_keypair,
)
from rlx.artifact.signing.sign import (
    FORMATS,
    SignatureInfo,
    read_signature,
    sign_artifact,
    signature_path,
    verify_members_of,
    verify_signature,
    verify_signature_of,
)

__all__ = ["FORMATS", "SignatureInfo", "generate_keypair", "key_id", "key_label",
           "load_private_key", "load_public_key", "public_key_path", "read_signature",
           "save_keypair", "sign_artifact", "signature_path", "verify_members_of",
           "verify_signature", "verify_signature_of"]
