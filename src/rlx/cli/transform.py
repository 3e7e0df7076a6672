"""`rlx-bake` commands that turn one artifact into another: relayout (memory mode),
encrypt, decrypt, convert (`.rlx` <-> `.rlxp`), and import-onnx (a bake straight into an
`.rlxp` package)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlx import MemoryMode
from rlx import relayout as relayout_file
from rlx.artifact import artifact_kind, open_artifact, parse_rlx, read_rlx, write_rlx
from rlx.artifact.atomic import atomic_write
from rlx.artifact.crypto import decrypt_file, encrypt_file, is_encrypted
from rlx.artifact.output import artifact_size, check_writable, write_artifact
from rlx.cli.bake import bake_command
from rlx.cli.bake_args import (
    add_bake_arguments,
    add_package_options,
    artifact_output,
    package_options,
)
from rlx.cli.contents import encryption_info
from rlx.cli.formatting import fmt_bytes
from rlx.cli.inputs import parsed, refuse_overwriting
from rlx.cli.ui import CliError, Outcome, Ui, add_password_options, password_from

__all__ = ["add_commands"]

_FORMATTER = argparse.RawDescriptionHelpFormatter


def add_commands(sub, common: argparse.ArgumentParser) -> None:
    for add in (_add_relayout, _add_crypto_commands, _add_convert, _add_import_onnx):
        add(sub, common)


def _add_relayout(sub, common) -> None:
    p = sub.add_parser("relayout", parents=[common], formatter_class=_FORMATTER,
                       help="change a .rlx file's memory mode without re-baking",
                       description="Rewrite a .rlx file in another memory mode. An encrypted "
                                   "input gives an output encrypted with the same password.",
                       epilog="example:\n  rlx-bake relayout model.rlx -o fast.rlx "
                              "--memory runtime")
    p.add_argument("input", help="a .rlx file")
    p.add_argument("-o", "--output", required=True, help="the .rlx file to write")
    p.add_argument("--memory", required=True, metavar="MODE",
                   type=parsed(MemoryMode.parse, "memory mode"),
                   help="duplex, runtime or compact (or an alias)")
    add_password_options(p.add_argument_group("encrypted files"))
    p.set_defaults(run=_relayout)


def _relayout(args, ui: Ui) -> Outcome:
    refuse_overwriting(args, args.output, args.input)
    check_writable(args.output)
    password = password_from(args, ui)
    with ui.step(f"reading {args.input}"):
        file = read_rlx(args.input, password=password)
    encrypted, size_before = is_encrypted(args.input), Path(args.input).stat().st_size
    with ui.step("writing"):
        write_rlx(args.output, relayout_file(file, args.memory),
                  password=password if encrypted else None)
    data = {"command": "relayout", "input": args.input, "output": args.output,
            "memory_before": file.meta.memory_mode, "memory_after": args.memory.value,
            "encrypted": encrypted, "bytes_before": size_before,
            "bytes_after": Path(args.output).stat().st_size}
    return Outcome(data, _render_relayout)


def _render_relayout(d: dict, ui: Ui) -> None:
    ui.line(f"{d['input']} ({d['memory_before']}, {fmt_bytes(d['bytes_before'])} bytes) -> "
            f"{d['output']} ({d['memory_after']}, {fmt_bytes(d['bytes_after'])} bytes"
            f"{', encrypted' if d['encrypted'] else ''})")


def _add_crypto_commands(sub, common) -> None:
    _add_crypto(sub, common, "encrypt", _encrypt,
                "encrypt a .rlx file with a password (Argon2id + ChaCha20-Poly1305)")
    _add_crypto(sub, common, "decrypt", _decrypt,
                "decrypt an encrypted .rlx file (the output is checked before it is written)")


def _add_crypto(sub, common, name: str, run, text: str) -> None:
    p = sub.add_parser(name, parents=[common], formatter_class=_FORMATTER, help=text,
                       description=text[0].upper() + text[1:] + ". Writes are atomic.",
                       epilog=f"example:\n  RLX_PASSWORD=... rlx-bake {name} in.rlx -o out.rlx "
                              "--password-env RLX_PASSWORD")
    p.add_argument("input", help="the .rlx file to read")
    p.add_argument("-o", "--output", required=True, help="the file to write")
    add_password_options(p.add_argument_group("password (one is required)"), required=True)
    p.set_defaults(run=run)


def _encrypt(args, ui: Ui) -> Outcome:
    refuse_overwriting(args, args.output, args.input)
    check_writable(args.output)
    password = password_from(args, ui)
    if is_encrypted(args.input):
        raise CliError(f"{args.input} is already encrypted")
    read_rlx(args.input, verify="full")  # never seal a corrupt file
    assert password is not None  # the password options are required (argparse)
    with ui.step("encrypting"), atomic_write(args.output) as out:
        info = encrypt_file(args.input, out, password)
    data = {"command": "encrypt", "input": args.input, "output": args.output,
            "encryption": encryption_info(info)}
    return Outcome(data, _render_crypto)


def _decrypt(args, ui: Ui) -> Outcome:
    refuse_overwriting(args, args.output, args.input)
    check_writable(args.output)
    password = password_from(args, ui)
    assert password is not None  # the password options are required (argparse)
    with ui.step("decrypting"):
        plain = decrypt_file(args.input, password)
        parse_rlx(plain, verify="full", source=args.input)  # never write out a corrupt file
    with atomic_write(args.output) as out:
        out.write(plain)
    data = {"command": "decrypt", "input": args.input, "output": args.output,
            "file_bytes": len(plain)}
    return Outcome(data, _render_crypto)


def _render_crypto(d: dict, ui: Ui) -> None:
    size = d["encryption"]["file_bytes"] if d["command"] == "encrypt" else d["file_bytes"]
    ui.line(f"{d['command']}ed {d['input']} -> {d['output']} ({fmt_bytes(size)} bytes)")


def _add_convert(sub, common) -> None:
    p = sub.add_parser("convert", parents=[common], formatter_class=_FORMATTER,
                       help="convert a plain .rlx file to an .rlxp package (or back)",
                       description="Read a plain .rlx file (or .rlxp package), check every "
                                   "checksum, and write it in the output's format.",
                       epilog="examples:\n  rlx-bake convert model.rlx -o model.rlxp\n"
                              "  rlx-bake convert model.rlx -o model.rlxp.zip --tier warm\n"
                              "  rlx-bake convert model.rlxp -o model.rlx")
    p.add_argument("input", help="a plain .rlx file or an .rlxp package")
    p.add_argument("-o", "--output", required=True, help="the .rlxp (or .rlx) to write")
    add_package_options(p)
    p.set_defaults(run=_convert, password=None, password_env=None, password_file=None)


def _convert(args, ui: Ui) -> Outcome:
    kind = artifact_kind(args.input)
    if kind == "rlx-encrypted":
        raise CliError(f"{args.input} is encrypted; convert reads plain files: decrypt it "
                       f"first (rlx-bake decrypt {args.input} -o plain.rlx ...)")
    refuse_overwriting(args, args.output, args.input)
    fmt = artifact_output(args)
    with ui.step(f"reading {args.input}"):
        file = open_artifact(args.input, verify="full")
        file.check_integrity()
    with ui.step(f"writing {args.output}"):
        written = write_artifact(args.output, file, fmt, **package_options(args))
    data = {"command": "convert", "input": args.input, "input_format": kind,
            "output": args.output, **written.as_dict(), "format": fmt,
            "input_bytes": artifact_size(args.input), "file_bytes": artifact_size(args.output),
            "tensors": len(file.weights)}
    return Outcome(data, _render_convert)


def _render_convert(d: dict, ui: Ui) -> None:
    where = f" ({d['container']} container)" if d.get("container") else ""
    ui.line(f"converted {d['input']} ({d['input_format']}, {fmt_bytes(d['input_bytes'])} "
            f"bytes) -> {d['output']} ({d['format']}{where}, {fmt_bytes(d['file_bytes'])} "
            "bytes)")


def _add_import_onnx(sub, common) -> None:
    p = sub.add_parser("import-onnx", parents=[common], formatter_class=_FORMATTER,
                       help="bake an ONNX model straight into an .rlxp package",
                       description="Import an ONNX model and run the full bake (the profile "
                                   "and switches apply, dtypes stay what the model has), then "
                                   "write an .rlxp package with an io sidecar.",
                       epilog="examples:\n  rlx-bake import-onnx model.onnx -o model.rlxp\n"
                              "  rlx-bake import-onnx model.onnx -o w.rlxp --no-graph\n"
                              "  rlx-bake import-onnx model.onnx -o m.rlxp --container zip "
                              "--profile size")
    add_bake_arguments(p, package=True)
    p.add_argument("--no-graph", dest="include_graph", action="store_false",
                   help="write the weights only (manifest feature weight_only)")
    p.set_defaults(run=bake_command, import_onnx=True, format="rlxp", password=None,
                   password_env=None, password_file=None)
