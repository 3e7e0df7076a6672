"""`rlx-bake bake` (and `import-onnx`, the same bake into an `.rlxp` package): the
library's `bake_file`, and its report: what each step did, the op types before and after,
the weight table by encoding and the accuracy guard's verdict."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from rlx import BakeOptions, BakeProfile, MemoryMode, bake_file
from rlx.artifact.output import artifact_size
from rlx.baking import constant_bytes
from rlx.cli.bake_args import (
    SWITCHES,
    add_bake_arguments,
    artifact_output,
    bake_options,
    package_options,
)
from rlx.cli.contents import by_encoding, row_info
from rlx.cli.formatting import fmt_bytes
from rlx.cli.inputs import refuse_overwriting
from rlx.cli.precision import render_plan
from rlx.cli.self_test import render_self_test, self_test_data
from rlx.cli.ui import CliError, Outcome, Ui, password_from
from rlx.ir.naming import COMPUTING_NODES
from rlx.weights.overlay import some_names

__all__ = ["add_commands", "bake_command"]

_BAKE_EXAMPLES = """examples:
  rlx-bake bake model.onnx -o model.rlx
  rlx-bake bake model.onnx -o small.rlx --profile size --memory compact
  rlx-bake bake graph.json --weights weights.safetensors -o model.rlx --no-quant
  RLX_PASSWORD=... rlx-bake bake bundle/ -o model.rlx --password-env RLX_PASSWORD

The profile sets every switch first; --memory, --no-cleanup and the switches then change it,
in that order, wherever they are on the command line.
"""


def add_commands(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("bake", parents=[common],
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       help="bake a model (.onnx, graph JSON or bundle folder) into a .rlx file",
                       description="Bind the weights into the graph, optimise it, pack the "
                                   "weights and write one .rlx artifact (or .rlxp package).",
                       epilog=_BAKE_EXAMPLES)
    add_bake_arguments(p)
    p.set_defaults(run=bake_command)


def package_features(args: argparse.Namespace) -> dict[str, Any]:
    """Extra RlxpOptions for import-onnx: its features and producer, and --no-graph."""
    if not getattr(args, "import_onnx", False):
        return {}
    if Path(args.input).suffix.lower() != ".onnx":
        raise CliError(f"import-onnx reads .onnx models; {args.input} is not one (use bake)")
    return {"features": ("onnx_import",), "producer": "rlx-bake/onnx_import",
            "include_graph": args.include_graph}


def bake_command(args, ui: Ui) -> Outcome:
    refuse_overwriting(args, args.output, args.input, args.weights)
    fmt = artifact_output(args)
    package = package_features(args)
    opts = bake_options(args)
    password = password_from(args, ui)  # before the long work: a bad source fails at once
    with ui.step(f"loading {args.input}") as update:
        baked = bake_file(args.input, args.output, options=opts, weights=args.weights,
                          weights_policy=args.weights_policy,
                          input_shapes=dict(args.input_shapes), dims=dict(args.dim),
                          format=fmt, password=password, progress=update,
                          **package_options(args), **package)
    file, report, model = baked.file, baked.report, baked.model
    if report.params_remaining:
        ui.warn(f"no weights for param(s) {some_names(set(report.params_remaining))}: "
                f"{args.output} cannot run until they are bound")
    rows = [row_info(file, w) for w in file.weights]
    weights = None if baked.weights is None else dataclasses.asdict(baked.weights)
    data = {
        "command": "bake", "input": args.input, "source": model.source, "output": args.output,
        "encrypted": password is not None, "file_bytes": artifact_size(args.output),
        **baked.written.as_dict(),
        "options": _options_data(opts), "weights": weights,
        "report": dataclasses.asdict(report), "weights_in_bytes": baked.weights_in_bytes,
        # what the file holds: the table's bytes and the constants no table row stands for
        "weights_out_bytes": sum(r["bytes"] for r in rows) + constant_bytes(
            file.graph, frozenset(w.node_id for w in file.weights)),
        "by_encoding": by_encoding(rows),
        "input_shapes": {k: list(v) for k, v in args.input_shapes}, "dims": dict(args.dim),
        "computing_nodes": {"counted": COMPUTING_NODES,
                            "onnx": _total(model.onnx_op_types),
                            "before": _total(report.op_types_before),
                            "after": _total(report.op_types_after)},
        "op_types": _op_table(model.onnx_op_types, report.op_types_before,
                              report.op_types_after),
        "self_test": self_test_data(file.self_test),
    }
    return Outcome(data, _render_bake)


def _options_data(opts: BakeOptions) -> dict[str, Any]:
    """The options as JSON-ready data; the calibration feeds as their count."""
    data = dataclasses.asdict(dataclasses.replace(opts, calibration=None, self_test=False))
    data["calibration"] = len(opts.calibration) if opts.calibration else 0
    data["self_test"] = opts.self_test if isinstance(opts.self_test, bool) \
        else len(opts.self_test)
    return data


def _total(counts: dict[str, int] | None) -> int | None:
    return None if counts is None else sum(counts.values())


def _op_table(onnx: dict[str, int] | None, before: dict[str, int],
              after: dict[str, int]) -> list[dict[str, Any]]:
    """One row per op type: in the ONNX file (when the input is one), in the imported
    graph, in the baked one; the most frequent after baking first (as onnxslim lists)."""
    names = set(before) | set(after) | set(onnx or {})
    rows = [{"op": op, "onnx": None if onnx is None else onnx.get(op, 0),
             "before": before.get(op, 0), "after": after.get(op, 0)} for op in names]
    return sorted(rows, key=lambda r: (-r["after"], -r["before"], r["op"]))


def _node_counts(c: dict[str, Any]) -> str:
    onnx = f"ONNX file {c['onnx']}, " if c["onnx"] is not None else ""
    return f"{onnx}imported {c['before']} -> baked {c['after']}"


def _render_op_table(d: dict, ui: Ui) -> None:
    rows, nodes = d["op_types"], d["computing_nodes"]
    with_onnx = nodes["onnx"] is not None
    columns = ("op type", *(("ONNX file",) if with_onnx else ()), "imported", "baked", "change")
    total = {"op": "total", "onnx": nodes["onnx"], "before": nodes["before"],
             "after": nodes["after"]}
    ui.table("computing nodes by op type", columns,
             [(r["op"], *((r["onnx"],) if with_onnx else ()), r["before"], r["after"],
               _change(r["onnx"] if with_onnx else r["before"], r["after"]))
              for r in (*rows, total)],
             numeric=columns[1:])
    ui.line(f"({nodes['counted']}; change: baked against the "
            f"{'ONNX file' if with_onnx else 'input graph'})")


def _change(before: int, after: int) -> str:
    return "" if before == after else f"{after - before:+d}"


def _not_packed(key: str, count: int) -> tuple[str, int]:
    """A report key `<encoding>: <reason>` as a row label."""
    encoding, _, reason = key.partition(": ")
    return f"matmuls not packed as {encoding} ({reason})", count


def _render_bake(d: dict, ui: Ui) -> None:
    opts, report = d["options"], d["report"]
    stats, memory = report["optimize"], report["memory"]
    profile, mode = BakeProfile(opts["profile"]), MemoryMode(opts["memory"])
    switches = " ".join(s.on if opts[s.option] else s.off for s in SWITCHES)
    settings = [("profile", f"{profile} ({profile.description})"),
                ("memory", f"{mode} ({mode.description})"),
                ("switches", switches)]
    if d["weights"]:
        w = d["weights"]
        settings.append(("weights", f"{w['path']}: {w['dense']} dense + {w['packed']} packed"
                                    + (f" (f32-first {w['verdict']})" if w["verdict"] else "")))
    ui.pairs(f"baked {d['input']} -> {d['output']}", settings)
    steps = [
        ("computing nodes", _node_counts(d["computing_nodes"])),
        ("params baked", report["params_baked"]),
        ("params left unbound", ", ".join(report["params_remaining"]) or "none"),
        ("zero matmuls skipped", stats["skipped_zero_matmuls"]),
        ("matmuls packed as TQ2_0 (ternary)", stats["ternary_packed"]),
        ("matmuls packed as Q8_0", stats["quant_packed"]),
        *(_not_packed(key, n) for key, n in stats["not_packed"].items()),
        ("weights stored encoded (all readers)", ", ".join(
            f"{n} {e}" for e, n in sorted(stats["encoded"].items())) or "none"),
        *((f"large f32 weights left as they are ({reason})", n)
          for reason, n in stats["not_encoded"].items()),
        ("nodes simplified", stats["simplified"]),
        ("op chains fused (HardSwish, GELU, conv bias)", stats["fused"]),
        ("BatchNorms folded", stats["batchnorms_folded"]),
        ("subgraph weights moved to the table", stats["weights_hoisted"]),
        ("unused nodes removed (constants included)", stats["dead_removed"]),
        ("constants folded", stats["constants_folded"]),
        ("identical constants merged", memory["constants_deduped"]),
        *((("source weights folded into others (not stored)",
            memory["folded_bindings_dropped"]),) if memory["folded_bindings_dropped"] else ()),
        ("weight bytes", _size_change(d["weights_in_bytes"], d["weights_out_bytes"])),
    ]
    if report["unused_bindings"]:
        likely = report["unused_bindings_likely"]
        steps.append(("bindings matching no param", ", ".join(
            name + (f" (likely {likely[name]})" if name in likely else "")
            for name in report["unused_bindings"])))
    ui.pairs("what each step did", steps)
    _render_op_table(d, ui)
    if d["by_encoding"]:
        ui.table("weight table by encoding", ("encoding", "tensors", "bytes"),
                 [(e["encoding"], e["tensors"], fmt_bytes(e["bytes"]))
                  for e in d["by_encoding"]], numeric=("tensors", "bytes"))
    _render_accuracy(report["accuracy"], ui)
    if d["self_test"]:
        render_self_test(d["self_test"], ui)
    if report.get("precision"):
        render_plan(report["precision"], ui)
    ui.pairs(None, [("file", d["output"] + (" (encrypted)" if d["encrypted"] else "")),
                    ("file size", f"{fmt_bytes(d['file_bytes'])} bytes (graph constants "
                                  f"{fmt_bytes(report['constant_bytes'])}, weight table "
                                  f"{fmt_bytes(report['weight_bytes'])})")])


def _size_change(before: int, after: int) -> str:
    """`in -> out` and how much smaller in words: a ratio only when it says something."""
    change = f"{fmt_bytes(before)} in the source -> {fmt_bytes(after)} in the file"
    if after and before >= 1.1 * after:
        return f"{change} ({before / after:.1f}x smaller)"
    if before == after:
        return f"{change} (the same)"
    more, word = (before - after, "smaller") if before > after else (after - before, "larger")
    return f"{change} ({fmt_bytes(more)} bytes {word})"


def _render_accuracy(acc: dict, ui: Ui) -> None:
    """The encoded weights, each with its measured contribution, and the guard's verdict."""
    rows = acc["tensors"]
    if not rows:
        return
    measured = acc["checked"]
    columns = ("weight", "role", "stored as", "f32 bytes", "stored bytes", "own rel err",
               *(("cosine alone", "max abs alone") if measured else ()), "kept f32 because")
    ui.table("weights stored encoded" + (" (contribution measured one at a time on "
                                          f"{acc['samples']} calibration input set(s))"
                                          if measured else ""), columns,
             [(r["name"], r["role"], "f32" if r["kept"] else r["encoding"],
               f"{r['f32_bytes']:,}", f"{r['f32_bytes'] if r['kept'] else r['packed_bytes']:,}",
               f"{r['rel_error']:.2g}",
               *((_number(r["cosine"], ".6f"), _number(r["max_abs"], ".3g"))
                 if measured else ()),
               r["reason"]) for r in rows],
             numeric=("f32 bytes", "stored bytes", "own rel err", "cosine alone",
                      "max abs alone"))
    if not measured:
        return
    target = f"cosine >= {acc['min_cosine']:g}" + (
        f", max abs <= {acc['max_abs_error']:g}" if acc["max_abs_error"] is not None else "")
    kept = sum(r["kept"] for r in rows)
    _render_outputs(acc, target, ui, first_try=kept > 0)
    ui.line(f"accuracy guard: {'targets met' if acc['met'] else 'TARGETS MISSED'}; {kept} "
            f"weight(s) kept at f32; {acc['runs']} graph runs")


def _number(value: float | None, spec: str) -> str:
    """A measurement, blank when there is none (a lossless encoding is not measured)."""
    return "" if value is None else format(value, spec)


def _render_outputs(acc: dict, target: str, ui: Ui, first_try: bool) -> None:
    """Each output's cosine and max abs error as stored; beside those of the first try
    (every weight encoded) only when the guard kept some weights at f32 (else they are
    the same numbers)."""
    tries = [("all encoded", acc["proposed"])] if first_try else []
    tries.append(("as stored", acc["final"]))
    columns = [f"{m}, {label}" if first_try else m
               for label, _ in tries for m in ("cosine", "max abs")]
    rows = [(out["name"], *(cell for _, results in tries for cell in (
        f"{results[i]['cosine']:.6f}", f"{results[i]['max_abs']:.3g}")))
        for i, out in enumerate(acc["final"])]
    ui.table(f"accuracy on the calibration inputs ({target})", ("output", *columns), rows,
             numeric=columns)
