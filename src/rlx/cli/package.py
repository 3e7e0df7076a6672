"""`rlx-bake` and `.rlxp` packages: the output format of `bake`, and the `convert` and
`import-onnx` commands, plus the reference's bare form `rlx-bake GRAPH -o OUT [flags]`.

`bake` writes `.rlxp` when `--format rlxp` is given or the output ends in `.rlxp` (or
`.rlxp.zip`, or `--container` is given); the container comes from `--container` or the
path, the storage tier of tensors from `--tier` and `--tensor-tier NAME=TIER`. Encryption is
for `.rlx` only (the reference has none for packages either), so `--password` with `.rlxp`
is refused before any work.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from rlx.artifact import RlxFile, artifact_kind, open_artifact, write_rlx, write_rlxp
from rlx.artifact.rlxp import CONTAINERS, TIERS, RlxpOptions, container_for
from rlx.cli.ui import CliError, Outcome, Ui, check_output, fmt_bytes

__all__ = ["add_package_options", "add_commands", "output_format", "check_artifact_output",
           "write_artifact", "artifact_bytes", "with_default_command", "PACKAGE_FORMATS"]

PACKAGE_FORMATS = ("rlx", "rlxp")
_FORMATTER = argparse.RawDescriptionHelpFormatter


def add_package_options(p: argparse.ArgumentParser) -> None:
    """--format, --container, --tier, --tensor-tier (on bake, convert, import-onnx)."""
    group = p.add_argument_group(".rlxp packages")
    group.add_argument("--format", choices=PACKAGE_FORMATS, default=None,
                       help="rlx or rlxp; default: from the output's extension (.rlxp)")
    group.add_argument("--container", choices=CONTAINERS, default=None,
                       help="rlxp container: flat (one file, the default), zip (STORE-only "
                            "ZIP64; .zip outputs) or dir (a folder of members)")
    group.add_argument("--tier", choices=tuple(TIERS), default=None,
                       help="storage tier of the tensors: hot (raw, mapped; default), warm "
                            "(zstd blocks) or cold (one zstd frame)")
    group.add_argument("--tensor-tier", action="append", default=[], metavar="NAME=TIER",
                       type=_named_tier, help="the tier of one tensor (repeatable)")


def _named_tier(text: str) -> tuple[str, str]:
    name, sep, tier = text.rpartition("=")
    if not sep or not name or tier not in TIERS:
        raise argparse.ArgumentTypeError(f"expected NAME=TIER with TIER one of "
                                         f"{', '.join(TIERS)}, got {text!r}")
    return name, tier


def output_format(args: argparse.Namespace) -> str:
    """rlx or rlxp: --format, else the extension, else rlxp when a package option is set."""
    if args.format is not None:
        fmt = args.format
    else:
        lower = str(args.output).lower()
        packaged = lower.endswith((".rlxp", ".rlxp.zip")) or args.container is not None
        fmt = "rlxp" if packaged else "rlx"
    if fmt == "rlx" and (args.container or args.tier or args.tensor_tier):
        raise CliError("--container, --tier and --tensor-tier apply to .rlxp output only "
                       "(use --format rlxp or an .rlxp output)")
    if fmt == "rlxp" and any(getattr(args, k, None) for k in
                             ("password", "password_env", "password_file")):
        raise CliError("--password with .rlxp output is not supported (.rlxp packages are "
                       "not encrypted); bake to .rlx to encrypt, or omit the password")
    return fmt


def check_artifact_output(args: argparse.Namespace) -> str:
    """The output format, after checking the output can be written (a dir package is a
    folder: its parent must exist)."""
    fmt = output_format(args)
    if fmt == "rlxp" and container_for(str(args.output), args.container) == "dir":
        parent = Path(args.output).resolve().parent
        if not parent.is_dir():
            raise CliError(f"cannot write {args.output}: folder {parent} does not exist")
        if Path(args.output).exists() and not Path(args.output).is_dir():
            raise CliError(f"cannot write {args.output} as a dir package: it is a file")
    else:
        check_output(args.output)
    return fmt


def write_artifact(args: argparse.Namespace, file: RlxFile,
                   password: str | bytes | None = None, **package: Any) -> dict[str, Any]:
    """Write `file` in the format the arguments ask for; what was written, for the JSON."""
    fmt = output_format(args)
    if fmt == "rlx":
        write_rlx(args.output, file, password=password)
        return {"format": "rlx", "container": None}
    options = RlxpOptions(tier=args.tier or "hot", tiers=dict(args.tensor_tier), **package)
    container = write_rlxp(args.output, file, args.container, options=options)
    return {"format": "rlxp", "container": container, "tier": options.tier}


def artifact_bytes(path: str | Path) -> int:
    """A file's size, or the total of a dir package's files."""
    path = Path(path)
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


def with_default_command(argv: list[str], commands: set[str]) -> list[str]:
    """The reference's bare form `rlx-bake GRAPH -o OUT [flags]` means `rlx-bake bake ...`:
    a first argument that is neither an option nor a command is the bake input."""
    first = argv[0] if argv else ""
    # a path, not a misspelt command (`insepct` gets "did you mean" from the parser)
    looks_like_path = os.path.exists(first) or "/" in first or "." in first
    if first and not first.startswith("-") and first not in commands and looks_like_path:
        return ["bake", *argv]
    return argv


# --- commands -----------------------------------------------------------------------------
def add_commands(sub, common: argparse.ArgumentParser, add_bake_arguments) -> None:
    _add_convert(sub, common)
    _add_import_onnx(sub, common, add_bake_arguments)


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
    fmt = check_artifact_output(args)
    with ui.step(f"reading {args.input}"):
        file = open_artifact(args.input, verify="full")
        file.check_integrity()
    with ui.step(f"writing {args.output}"):
        written = write_artifact(args, file)
    data = {"command": "convert", "input": args.input, "input_format": kind,
            "output": args.output, **written, "format": fmt,
            "input_bytes": artifact_bytes(args.input), "file_bytes": artifact_bytes(args.output),
            "tensors": len(file.weights)}
    return Outcome(data, _render_convert)


def _render_convert(d: dict, ui: Ui) -> None:
    where = f" ({d['container']} container)" if d.get("container") else ""
    ui.line(f"converted {d['input']} ({d['input_format']}, {fmt_bytes(d['input_bytes'])} "
            f"bytes) -> {d['output']} ({d['format']}{where}, {fmt_bytes(d['file_bytes'])} "
            "bytes)")


def _add_import_onnx(sub, common, add_bake_arguments) -> None:
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
    p.set_defaults(import_onnx=True, format="rlxp", password=None, password_env=None,
                   password_file=None)


def package_features(args: argparse.Namespace) -> dict[str, Any]:
    """Extra RlxpOptions for import-onnx: its features and producer, and --no-graph."""
    if not getattr(args, "import_onnx", False):
        return {}
    if Path(args.input).suffix.lower() != ".onnx":
        raise CliError(f"import-onnx reads .onnx models; {args.input} is not one (use bake)")
    return {"features": ("onnx_import",), "producer": "rlx-bake/onnx_import",
            "include_graph": args.include_graph}


# --- inspect ------------------------------------------------------------------------------
def package_info(package) -> dict[str, Any]:
    """What `inspect` shows of a package beyond its RlxFile: manifest, tiers, sidecars."""
    tiers: dict[str, dict[str, int]] = {}
    for row in package.tensors:
        entry = tiers.setdefault(row["tier"], {"tensors": 0, "stored_bytes": 0, "raw_bytes": 0})
        entry["tensors"] += 1
        entry["stored_bytes"] += row["stored_len"]
        entry["raw_bytes"] += row["raw_len"]
    return {"container": package.container, "manifest": package.manifest,
            "tiers": tiers, "sidecars": sorted(package.sidecars),
            "io": package.sidecars.get("io")}


def render_package(pkg: dict[str, Any], ui: Ui) -> None:
    m = pkg["manifest"]
    ui.pairs("package", [
        ("format", f"{m['format']} {m['format_version']} (readers >= {m['compat_version']})"),
        ("producer", m["producer"]), ("created", m["created"]),
        ("graph encoding", m["graph_encoding"]), ("features", ", ".join(m["features"])),
        ("sidecars", ", ".join(pkg["sidecars"]) or "none"),
    ])
    ui.table("storage tiers", ("tier", "tensors", "stored bytes", "raw bytes"),
             [(tier, t["tensors"], fmt_bytes(t["stored_bytes"]), fmt_bytes(t["raw_bytes"]))
              for tier, t in sorted(pkg["tiers"].items())],
             numeric=("tensors", "stored bytes", "raw bytes"))
