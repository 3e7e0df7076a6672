"""`rlx-bake tensors`: a `.rlx` file's weights, decoded back to their dtype and layout,
written to a `.safetensors` or `.npz` file."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from rlx.artifact import open_artifact
from rlx.artifact.atomic import atomic_write
from rlx.artifact.output import check_writable
from rlx.cli.formatting import fmt_bytes, fmt_shape
from rlx.cli.inputs import refuse_overwriting
from rlx.cli.sign import add_trusted_key_option, trusted_keys
from rlx.cli.ui import CliError, Outcome, Ui, add_password_options, password_from
from rlx.ir import DType
from rlx.weights.writers import write_npz, write_safetensors

__all__ = ["add_commands"]

_FORMATTER = argparse.RawDescriptionHelpFormatter

_TENSOR_FORMATS = (".safetensors", ".npz")


def add_commands(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("tensors", parents=[common], formatter_class=_FORMATTER,
                       help="write a .rlx file's weights, decoded, to .safetensors or .npz",
                       description="Decode the weight table (f16, Q8_0 and TQ2_0 back to "
                                   "their dtype; packed matmul weights back to their [K, N] "
                                   "layout) and write it to a .safetensors or .npz file. "
                                   "The values are the baked ones: lossy encodings show "
                                   "their rounding, folded weights their folded values.",
                       epilog="examples:\n  rlx-bake tensors model.rlx -o weights.safetensors\n"
                              "  rlx-bake tensors model.rlx -o some.npz --names fc1.weight "
                              "fc1.bias")
    p.add_argument("file", help="a .rlx file")
    p.add_argument("-o", "--output", required=True, metavar="OUT.safetensors|OUT.npz",
                   help="the file to write (its suffix picks the format)")
    p.add_argument("--names", nargs="+", metavar="NAME",
                   help="only these weights (default: all of them)")
    add_password_options(p.add_argument_group("encrypted files"))
    add_trusted_key_option(p)
    p.set_defaults(run=_tensors)


def _tensors(args, ui: Ui) -> Outcome:
    refuse_overwriting(args, args.output, args.file)
    suffix = Path(args.output).suffix.lower()
    if suffix not in _TENSOR_FORMATS:
        raise CliError(f"{args.output}: expected a {' or '.join(_TENSOR_FORMATS)} file name")
    check_writable(args.output)
    password = password_from(args, ui)
    with ui.step(f"reading {args.file}"):
        file = open_artifact(args.file, password, trusted_keys=trusted_keys(args))
    names = list(dict.fromkeys(args.names)) if args.names else [w.name for w in file.weights]
    arrays: dict[str, np.ndarray] = {}
    with ui.step("decoding") as update:
        for i, name in enumerate(names, 1):
            update(f"decoding {name} ({i} of {len(names)})")
            arrays[name] = file.tensor(name)
    with ui.step(f"writing {args.output}"), atomic_write(args.output) as out:
        if suffix == ".safetensors":
            write_safetensors(out, arrays, {"source": str(args.file)})
        else:
            write_npz(out, arrays)
    rows = [{"name": n, "dtype": DType.from_numpy(a.dtype).value, "shape": list(a.shape),
             "encoding": file.weight(n).encoding, "bytes": int(a.nbytes)}  # type: ignore
            for n, a in arrays.items()]
    data = {"command": "tensors", "file": args.file, "output": args.output,
            "format": suffix.lstrip("."), "tensors": rows,
            "file_bytes": Path(args.output).stat().st_size}
    return Outcome(data, _render_tensors)


def _render_tensors(d: dict, ui: Ui) -> None:
    ui.table(f"{d['file']} -> {d['output']}", ("name", "dtype", "shape", "stored as", "bytes"),
             [(r["name"], r["dtype"], fmt_shape(r["shape"]), r["encoding"], fmt_bytes(r["bytes"]))
              for r in d["tensors"]], numeric=("bytes",))
    ui.line(f"{len(d['tensors'])} tensor(s), {fmt_bytes(d['file_bytes'])} bytes written")

