"""`rlx-bake export`: a `.rlx` file written as a standard ONNX model (opset 20) by the
library's `export_onnx`."""

from __future__ import annotations

import argparse
from typing import Any

from rlx.artifact.output import check_writable
from rlx.cli.formatting import fmt_bytes
from rlx.cli.inputs import refuse_overwriting
from rlx.cli.sign import add_trusted_key_option, trusted_keys
from rlx.cli.ui import Outcome, Ui, add_password_options, password_from

__all__ = ["add_commands"]

_FORMATTER = argparse.RawDescriptionHelpFormatter


def add_commands(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("export", parents=[common], formatter_class=_FORMATTER,
                       help="write a .rlx file as a standard ONNX model",
                       description="Export a baked .rlx file as ONNX (opset 20): weights of "
                                   "1 KiB and more go to OUT.onnx.data next to it.",
                       epilog="examples:\n  rlx-bake export model.rlx -o model.onnx\n"
                              "  rlx-bake export model.rlx -o model.onnx --packed dequantize")
    p.add_argument("file", help="a .rlx file")
    p.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="the ONNX file")
    p.add_argument("--packed", choices=("auto", "nbits", "decompress", "dequantize"),
                   default="auto",
                   help="packed Q8_0/TQ2_0 weights as com.microsoft.MatMulNBits (auto: when "
                        "the installed onnxruntime runs it), as int8 codes x scales in "
                        "standard ops, or dequantised to f32")
    p.add_argument("--standard-ops", action="store_true",
                   help="write the ops kept as the model had them (onnxruntime's "
                        "com.microsoft int8 QLinear ops) in standard ONNX ops, for runtimes "
                        "without them (OpenVINO)")
    add_password_options(p.add_argument_group("encrypted files"))
    add_trusted_key_option(p)
    p.set_defaults(run=_export)


def _export(args, ui: Ui) -> Outcome:
    from rlx.artifact import open_artifact
    from rlx.onnx.export import ExportSummary, export_onnx

    refuse_overwriting(args, args.output, args.file)
    check_writable(args.output)
    password = password_from(args, ui)
    summary = ExportSummary()
    with ui.step(f"exporting {args.file}"):
        file = open_artifact(args.file, password, verify="full",
                             trusted_keys=trusted_keys(args))
        export_onnx(file, args.output, packed=None if args.packed == "auto" else args.packed,
                    summary=summary, domains=() if args.standard_ops else None)
    data: dict[str, Any] = {"command": "export", "file": args.file, "output": args.output,
                            "opset": summary.opset, "nodes": summary.nodes,
                            "weights": summary.weights, "weight_bytes": summary.weight_bytes,
                            "packed": summary.packed}
    return Outcome(data, _render_export)


def _render_export(d: dict, ui: Ui) -> None:
    rows = [("ONNX file", d["output"]), ("opset", d["opset"]), ("nodes", d["nodes"]),
            ("weights", f"{d['weights']} ({fmt_bytes(d['weight_bytes'])})")]
    rows += [(f"packed: {how}", count) for how, count in sorted(d["packed"].items())]
    ui.pairs(f"{d['file']} exported", rows)
