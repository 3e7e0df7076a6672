"""`rlx-bake keygen`, `sign` and `verify-signature`, and the `--trusted-key` option of run,
verify, inspect, tensors and export: signatures in a file beside the artifact, rlx's own
Ed25519 `.sig` or (`--format model-signing`) an OpenSSF model-signing bundle by an ECDSA key
(docs/format.md, "Signatures"; the library is `rlx.artifact.signing`).

`verify-signature` exits 0 for a valid signature by a trusted key and 1 (a failed check)
for an unsigned, untrusted, invalid or tampered artifact, with the reason on one line; a
key file that cannot be used or a missing artifact is an error (3), as everywhere.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rlx.artifact.output import check_writable
from rlx.artifact.signing import (
    FORMATS,
    generate_keypair,
    key_id,
    key_label,
    read_signature,
    save_keypair,
    sign_artifact,
    verify_signature,
)
from rlx.cli.formatting import fmt_bytes
from rlx.cli.ui import Outcome, Ui, add_password_options, password_from
from rlx.errors import SignatureError

__all__ = ["add_commands", "add_trusted_key_option", "signature_status", "trusted_keys"]

_FORMATTER = argparse.RawDescriptionHelpFormatter

_KEYGEN_EXAMPLES = """examples:
  rlx-bake keygen -o release.key                  writes release.key (0600) and release.key.pub
  RLX_KEY_PASSWORD=... rlx-bake keygen -o release.key --password-env RLX_KEY_PASSWORD
  rlx-bake keygen -o ms.key --format model-signing   an ECDSA P-256 pair, for model-signing
"""
_SIGN_EXAMPLES = """examples:
  rlx-bake sign model.rlx --key release.key       writes model.rlx.sig
  rlx-bake sign model.rlxp --key release.key --password-env RLX_KEY_PASSWORD
  rlx-bake sign pkg.rlxp/ --key release.key -o signatures/pkg.sig

  rlx-bake sign model.rlx --key ms.key --format model-signing
                                                  an OpenSSF model-signing bundle, checked by
                                                  model_signing verify key model.rlx
                                                  --signature model.rlx.sig --public_key ms.key.pub

The artifact itself is not changed: readers without a key read it as before. An encrypted
.rlx is signed as it is on disk (its ciphertext), without its password. Signing again
replaces the .sig file. The rlx format (the default) signs with an Ed25519 key;
model-signing (needs pip install 'rlx[signing]') with an ECDSA P-256/P-384/P-521 key.
"""
_VERIFY_EXAMPLES = """examples:
  rlx-bake verify-signature model.rlx --pubkey release.key.pub
  rlx-bake verify-signature model.rlx --pubkey old.pub --pubkey new.pub --json
  rlx-bake run model.rlx --input x=x.npy --trusted-key release.key.pub

exit 0: signed by one of the keys and unchanged since; exit 1: unsigned, signed by another
key, or changed (the line says which part). The signature file may be an rlx .sig (checked
with an Ed25519 key) or a model-signing bundle (an ECDSA key), told apart by its content.
"""


def add_commands(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("keygen", parents=[common], formatter_class=_FORMATTER,
                       help="create a key pair for signing artifacts",
                       description="Write a new private key (PKCS#8 PEM, mode 0600, "
                                   "encrypted when a password is given) and its public key "
                                   "(KEY.pub, SubjectPublicKeyInfo PEM): Ed25519 for the rlx "
                                   "format, ECDSA P-256 for model-signing.",
                       epilog=_KEYGEN_EXAMPLES)
    p.add_argument("-o", "--out", "--output", dest="output", required=True, metavar="KEY",
                   help="the private key file to write (the public key goes to KEY.pub)")
    _add_format_option(p, "the signature format the key is for")
    p.add_argument("--force", action="store_true", help="replace KEY and KEY.pub if they exist")
    add_password_options(p.add_argument_group("encrypt the private key (optional)"))
    p.set_defaults(run=_keygen)

    p = sub.add_parser("sign", parents=[common], formatter_class=_FORMATTER,
                       help="sign a .rlx or .rlxp artifact (writes ARTIFACT.sig)",
                       description="Check the artifact, then sign the SHA-256 of each of its "
                                   "parts with an Ed25519 private key into a detached "
                                   "signature file, written atomically.",
                       epilog=_SIGN_EXAMPLES)
    p.add_argument("input", help="a .rlx file (plain or encrypted) or an .rlxp package")
    p.add_argument("--key", required=True, metavar="KEY", help="the private key (PEM)")
    p.add_argument("-o", "--out", "--output", dest="output", metavar="SIG",
                   help="the signature file to write (default: INPUT.sig)")
    _add_format_option(p, "the signature file's format")
    add_password_options(p.add_argument_group("the private key's password (if encrypted)"))
    p.set_defaults(run=_sign)

    p = sub.add_parser("verify-signature", parents=[common], formatter_class=_FORMATTER,
                       help="check an artifact's signature against trusted public keys",
                       description="Check that the artifact's .sig file is signed by one of "
                                   "the public keys and that every byte of the artifact is "
                                   "what was signed. Needs no password.",
                       epilog=_VERIFY_EXAMPLES)
    p.add_argument("input", help="a .rlx file (plain or encrypted) or an .rlxp package")
    p.add_argument("--pubkey", action="append", required=True, metavar="PUB",
                   help="a trusted public key (PEM); repeat for several")
    p.add_argument("--signature", metavar="SIG", help="the signature file (default: INPUT.sig)")
    p.set_defaults(run=_verify_signature)


def _add_format_option(parser, what: str) -> None:
    parser.add_argument("--format", choices=FORMATS, default="rlx",
                        help=f"{what}: rlx (Ed25519, the default) or model-signing (an "
                             "OpenSSF model-signing bundle, ECDSA)")


def add_trusted_key_option(parser) -> None:
    parser.add_argument_group("signatures").add_argument(
        "--trusted-key", action="append", metavar="PUB",
        help="refuse the file unless its .sig is a valid signature by this public key "
             "(PEM: Ed25519 for an rlx .sig, ECDSA for a model-signing bundle; repeat for "
             "several trusted keys)")


def trusted_keys(args) -> list[str] | None:
    """The --trusted-key files, or None when none was given (no signature is checked)."""
    return getattr(args, "trusted_key", None) or None


def signature_status(path: str | Path, keys: list[str] | None) -> dict[str, Any]:
    """What `inspect` says about a signature: verified against `keys` when given, else only
    which key the .sig file names (unauthenticated)."""
    try:
        if keys:
            info = verify_signature(path, keys)
        else:
            found = read_signature(path)
            if found is None:
                return {"signed": False, "checked": False, "valid": None, "key_id": None}
            info = found
    except SignatureError as err:
        return {"signed": err.reason != "unsigned", "checked": True, "valid": False,
                "key_id": None, "reason": err.reason, "error": str(err)}
    return {"signed": True, "checked": info.verified, "valid": True if info.verified else None,
            "key_id": info.key_id, "signature": str(info.signature), "kind": info.kind,
            "format": info.format}


def _keygen(args, ui: Ui) -> Outcome:
    check_writable(args.output)
    password = password_from(args, ui)
    key = generate_keypair("ed25519" if args.format == "rlx" else "ecdsa-p256")
    private, public = save_keypair(key, args.output, password=password, overwrite=args.force)
    data = {"command": "keygen", "private_key": str(private), "public_key": str(public),
            "key_id": key_id(key).hex(), "encrypted": password is not None,
            "format": args.format, "key_type": key_label(key)}
    return Outcome(data, _render_keygen)


def _render_keygen(d: dict, ui: Ui) -> None:
    ui.pairs(f"{d['key_type']} key {d['key_id']} (for {d['format']} signatures)", [
        ("private key", d["private_key"] + (" (encrypted)" if d["encrypted"] else "")
         + ": keep it secret"),
        ("public key", f"{d['public_key']}: give it to whoever verifies"),
    ])


def _sign(args, ui: Ui) -> Outcome:
    if args.output:
        check_writable(args.output)
    password = password_from(args, ui)
    with ui.step(f"checking and signing {args.input}"):
        info = sign_artifact(args.input, args.key, password=password, signature=args.output,
                             format=args.format)
    data = {"command": "sign", "input": args.input, "signature": str(info.signature),
            "format": info.format, "kind": info.kind, "key_id": info.key_id,
            "parts": info.parts, "bytes": info.size}
    return Outcome(data, _render_sign)


def _render_sign(d: dict, ui: Ui) -> None:
    ui.line(f"signed {d['input']} ({d['kind']}, {d['parts']} parts, {fmt_bytes(d['bytes'])} "
            f"bytes) with key {d['key_id']} -> {d['signature']} ({d['format']} format)")


def _verify_signature(args, ui: Ui) -> Outcome:
    data: dict[str, Any] = {"command": "verify-signature", "input": args.input}
    with ui.step(f"verifying {args.input}"):
        try:
            info = verify_signature(args.input, args.pubkey, signature=args.signature)
        except SignatureError as err:
            data.update(valid=False, reason=err.reason, error=str(err))
            return Outcome(data, _render_verify_signature, 1)
    data.update(valid=True, reason=None, error=None, key_id=info.key_id, kind=info.kind,
                signature=str(info.signature), parts=info.parts, bytes=info.size,
                format=info.format)
    return Outcome(data, _render_verify_signature)


def _render_verify_signature(d: dict, ui: Ui) -> None:
    if d["valid"]:
        ui.line(f"OK: {d['input']} is signed by key {d['key_id']} ({d['format']} format, "
                f"{d['kind']}, {d['parts']} parts, {fmt_bytes(d['bytes'])} bytes checked)")
    else:
        ui.line(f"FAILED: {d['error']}")
