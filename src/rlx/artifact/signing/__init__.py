"""Ed25519 signatures of artifacts (`.rlx`, encrypted `.rlx`, `.rlxp`), in a detached
`.sig` file beside them (docs/format.md, "Signatures"): keys, the signed message, signing
and verifying. `open_artifact(..., trusted_keys=[...])` and `rlx.load` verify before
reading."""

from rlx.artifact.signing.keys import (
    generate_keypair,
    key_id,
    load_private_key,
    load_public_key,
    public_key_path,
    save_keypair,
)
from rlx.artifact.signing.sign import (
    SignatureInfo,
    read_signature,
    sign_artifact,
    signature_path,
    verify_members_of,
    verify_signature,
    verify_signature_of,
)

__all__ = ["SignatureInfo", "generate_keypair", "key_id", "load_private_key",
           "load_public_key", "public_key_path", "read_signature", "save_keypair",
           "sign_artifact", "signature_path", "verify_members_of", "verify_signature",
           "verify_signature_of"]
