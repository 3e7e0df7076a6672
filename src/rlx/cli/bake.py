"""`rlx-bake` commands that make or reshape artifacts: bake, inspect, relayout, encrypt,
decrypt. Each returns an `Outcome` (the JSON object and its renderer); see `cli_ui`."""

from __future__ import annotations

import argparse
import dataclasses
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlx import BakeOptions, BakeProfile, MemoryMode, RlxFile, RlxWeight, bake_bundle
from rlx import relayout as relayout_file
from rlx.artifact import parse_rlx, read_rlx, read_rlxp_package, write_rlx
from rlx.artifact.atomic import atomic_write
from rlx.artifact.crypto import (
    ENC_MAGIC,
    EncryptionInfo,
    decrypt_file,
    encrypt_file,
    is_encrypted,
    read_encryption_info,
)
from rlx.artifact.layout import SCHEMA_VERSION
from rlx.artifact.rlxp import is_rlxp
from rlx.artifact.sniff import ARTIFACT, ENCRYPTED_ARTIFACT, ONNX_MODEL, file_format
from rlx.cli.package import add_commands as add_package_commands
from rlx.cli.package import (
    add_package_options,
    artifact_bytes,
    check_artifact_output,
    package_features,
    package_info,
    render_package,
    write_artifact,
)
from rlx.cli.sign import add_trusted_key_option, signature_status, trusted_keys
from rlx.cli.ui import (
    CliError,
    Outcome,
    Ui,
    add_password_options,
    check_output,
    fmt_bytes,
    fmt_shape,
    load_npz,
    parsed,
    password_from,
)
from rlx.errors import IntegrityError
from rlx.ir import Constant, DType, Graph, format_graph
from rlx.ir.naming import COMPUTING_NODES, op_type_counts
from rlx.weights import WeightBundle, WeightLoadPolicy, load_weights
from rlx.weights.writers import write_npz, write_safetensors

__all__ = ["add_bake_arguments", "add_commands", "bake_options"]

_FORMATTER = argparse.RawDescriptionHelpFormatter


def add_commands(sub, common: argparse.ArgumentParser) -> None:
    for add in (_add_bake, _add_inspect, _add_tensors, _add_relayout, _add_crypto_commands):
        add(sub, common)
    add_package_commands(sub, common, add_bake_arguments)


# --- bake ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Switch:
    on: str
    off: str
    option: str  # the BakeOptions field
    help: str


SWITCHES = (
    _Switch("skip", "no-skip", "skip_zero", "replace matmuls by all-zero weights with zeros"),
    _Switch("ternary", "no-ternary", "ternary", "pack exactly-ternary matmul weights as TQ2_0"),
    _Switch("quant", "no-quant", "quant", "pack the other matmul weights as Q8_0 (lossy)"),
    _Switch("fold", "no-fold", "constant_folding", "fold weight-only arithmetic"),
    _Switch("dce", "no-dce", "dce", "remove nodes no output needs"),
    _Switch("simplify", "no-simplify", "algebraic_simplify", "algebraic simplification"),
    _Switch("unfold", "no-unfold", "unfold", "list matmul/conv weights in the weight table"),
    _Switch("dedupe-constants", "no-dedupe-constants", "dedupe_constants",
            "merge constants with identical bytes"),
    _Switch("keep-folded-bindings", "no-folded-bindings", "keep_folded_bindings",
            "keep weights folded away in the graph as table rows"),
)
_CLEANUP = ("constant_folding", "dce", "algebraic_simplify")

_BAKE_EXAMPLES = """examples:
  rlx-bake bake model.onnx -o model.rlx
  rlx-bake bake model.onnx -o small.rlx --profile size --memory compact
  rlx-bake bake graph.json --weights weights.safetensors -o model.rlx --no-quant
  RLX_PASSWORD=... rlx-bake bake bundle/ -o model.rlx --password-env RLX_PASSWORD

The profile sets every switch first; --memory, --no-cleanup and the switches then change it,
in that order, wherever they are on the command line.
"""


def _add_bake(sub, common) -> None:
    p = sub.add_parser("bake", parents=[common], formatter_class=_FORMATTER,
                       help="bake a model (.onnx, graph JSON or bundle folder) into a .rlx file",
                       description="Bind the weights into the graph, optimise it, pack the "
                                   "weights and write one .rlx artifact (or .rlxp package).",
                       epilog=_BAKE_EXAMPLES)
    add_bake_arguments(p)


def add_bake_arguments(p, package: bool = False) -> None:
    """The arguments of `bake` (and of `import-onnx`, which has no encryption: `package`)."""
    p.add_argument("input", help="an .onnx file, an rlx graph JSON file or a bundle folder")
    p.add_argument("-o", "--output", required=True, help="the .rlx file (or .rlxp) to write")
    p.add_argument("-w", "--weights", metavar="PATH",
                   help="weights (.safetensors, .npz, .npy, .gguf or a folder of them); "
                        "default: the bundle's weights.safetensors, or the ONNX initializers")
    shapes = p.add_argument_group("input shapes (ONNX models)")
    shapes.add_argument("--input-shapes", nargs="+", action="extend", default=[],
                        type=_input_shape, metavar="NAME:D,D,...",
                        help="fix a graph input's dims (ints, or names for symbolic dims), "
                             "e.g. input_ids:1,128 pixel_values:1,3,224,224")
    shapes.add_argument("--dim", action="append", default=[], type=_dim, metavar="NAME=N",
                        help="fix a symbolic dim by name wherever inputs declare it, "
                             "e.g. --dim batch=1 (repeat for several)")
    p.add_argument("--weights-policy", default=WeightLoadPolicy.F32_FIRST, metavar="POLICY",
                   type=parsed(WeightLoadPolicy.parse, "weights policy"),
                   help="f32 (decode packed tensors), packed (keep them) or auto; "
                        "default f32")
    names = ", ".join(BakeProfile.all_names())
    p.add_argument("--profile", "--opt", default=BakeProfile.EXACT, metavar="NAME",
                   type=parsed(BakeProfile.parse, "profile"),
                   help=f"one of {names}; default exact")
    p.add_argument("--memory", metavar="MODE", type=parsed(MemoryMode.parse, "memory mode"),
                   help="duplex, runtime or compact (or an alias); default: the profile's")
    guard = p.add_argument_group(
        "accuracy guard (lossy encodings of the size profile)",
        "Run the exact and the encoded graph on calibration inputs and keep the most sensitive "
        "weights at full precision until every output meets the targets.")
    guard.add_argument("--calibrate", action="append", metavar="FEEDS.npz",
                       help="inputs by name in an .npz (repeat for several sets)")
    guard.add_argument("--min-cosine", type=float, metavar="C",
                       help="least cosine of every output to the exact one (default 0.9995)")
    guard.add_argument("--max-abs-error", type=float, metavar="E",
                       help="largest abs error of any output element (default: none)")
    switches = p.add_argument_group("switches (change the profile's settings)")
    for s in SWITCHES:
        switches.add_argument(f"--{s.on}", f"--{s.off}", dest=s.option, action=_Toggle,
                              help=s.help)
    switches.add_argument("--no-cleanup", dest="cleanup", action="store_false", default=None,
                          help="no folding, DCE or simplification (a switch given too wins)")
    add_package_options(p)
    if not package:
        add_password_options(p.add_argument_group("encryption (optional, .rlx only)"))
    p.set_defaults(run=_bake)


def _input_shape(text: str) -> tuple[str, tuple[int | str, ...]]:
    """`NAME:1,3,224,224` (a dim may be a name: `ids:batch,128`) -> (name, dims)."""
    name, sep, dims = text.rpartition(":")
    parts = dims.split(",") if dims else []
    if not sep or not name or not parts or not all(parts):
        # the option takes several values: a model path after it reads as one of them
        after = " (put the model before --input-shapes, or use --input-shapes=NAME:D,D)" \
            if not sep and "." in text else ""
        raise argparse.ArgumentTypeError(f"expected NAME:D,D,..., got {text!r}{after}")
    values = tuple(int(d) if d.lstrip("-").isdigit() else d for d in parts)
    if any(isinstance(d, int) and d < 0 for d in values):
        raise argparse.ArgumentTypeError(f"dims must be >= 0 or names, got {text!r}")
    return name, values


def _dim(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value.isdigit():
        raise argparse.ArgumentTypeError(f"expected NAME=N with N >= 0, got {text!r}")
    return name, int(value)


class _Toggle(argparse.Action):
    """`--x` sets True and its `--no-...` spelling False; None when neither is given."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=None, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, not option_string.startswith("--no-"))

    def format_usage(self) -> str:
        return " | ".join(self.option_strings)


def bake_options(args: argparse.Namespace) -> BakeOptions:
    """The profile first, then --memory, --no-cleanup and the switches, whatever their
    order on the command line (the reference's --opt discarded earlier switches: 9.13)."""
    opts = BakeOptions.from_profile(args.profile)
    if args.memory is not None:
        opts = opts.replace(memory=args.memory)
    if args.cleanup is False:
        opts = opts.replace(**dict.fromkeys(_CLEANUP, False))
    opts = opts.replace(**{s.option: getattr(args, s.option) for s in SWITCHES
                           if getattr(args, s.option) is not None})
    if (args.min_cosine is not None or args.max_abs_error is not None) and not args.calibrate:
        raise CliError("--min-cosine and --max-abs-error need --calibrate FEEDS.npz")
    if args.calibrate:
        opts = opts.replace(calibration=[load_npz(path) for path in args.calibrate],
                            min_cosine=args.min_cosine, max_abs_error=args.max_abs_error)
    return opts


@dataclass(frozen=True)
class _Model:
    graph: Graph
    bindings: dict[str, np.ndarray]  # weights that came with the model (ONNX initializers)
    default_weights: Path | None
    source: str
    onnx_op_types: dict[str, int] | None = None  # the ONNX file's nodes by op type


def _load_model(path: Path, args) -> _Model:
    # Frontends are imported here, not at the top: importing onnx takes a good part of a
    # second, which every other command would pay for nothing.
    shapes, dims = dict(args.input_shapes), dict(args.dim)
    kind = file_format(str(path)) if path.is_file() else None
    if kind in (ARTIFACT, ENCRYPTED_ARTIFACT):
        raise CliError(f"{path} is {kind} already: inspect, run or verify it (relayout "
                       "changes its memory mode); bake reads a model")
    if kind is not None and kind != ONNX_MODEL and path.suffix.lower() != ".json":
        raise CliError(f"{path} is {kind}, not a model: bake a model (an .onnx file, a "
                       f"graph JSON file or a bundle folder) with --weights {path}")
    if kind == ONNX_MODEL or path.suffix.lower() == ".onnx":  # the bytes say, or the name
        from rlx.frontends.onnx import import_onnx, onnx_op_types, read_model

        proto = read_model(path)
        graph, bindings = import_onnx(proto, base_dir=path.resolve().parent,
                                      input_shapes=shapes or None, dims=dims or None)
        return _Model(graph, dict(bindings), None, f"onnx:{path}", onnx_op_types(proto))
    if shapes or dims:
        raise CliError(f"{path}: --input-shapes and --dim apply to ONNX models; a graph "
                       "JSON file declares its own input shapes")
    from rlx.frontends.graph_loader import load_graph

    loaded = load_graph(path)
    return _Model(loaded.graph, {}, loaded.default_weights, loaded.source)


def _bundle(model: _Model, args, opts: BakeOptions) -> tuple[WeightBundle, dict | None]:
    """The model's own weights overlaid with the weights file (which wins on a name)."""
    path = Path(args.weights) if args.weights else model.default_weights
    if path is None:
        return WeightBundle(dict(model.bindings), source=model.source), None
    loaded = load_weights(path, args.weights_policy, opts)
    names = set(loaded.tensors) | {w.name for w in loaded.packed}
    params = {n.source_name for n in model.graph.params()}
    if not names & params:
        raise CliError(f"weights file {path} matches none of the graph's params (weights: "
                       f"{_some(names)}; params: {_some(params)})")
    packed = {w.name for w in loaded.packed}
    tensors = {k: v for k, v in {**model.bindings, **loaded.tensors}.items() if k not in packed}
    info = {"path": str(path), "dense": len(loaded.tensors), "packed": len(loaded.packed),
            "verdict": str(loaded.verdict) if loaded.verdict else None}
    return WeightBundle(tensors, list(loaded.packed), str(path), bt=loaded.bt), info


def _some(names: set[str], limit: int = 6) -> str:
    shown = sorted(names)[:limit]
    more = f", ... ({len(names)} in all)" if len(names) > limit else ""
    return (", ".join(shown) + more) if names else "none"


def _bake(args, ui: Ui) -> Outcome:
    check_artifact_output(args)
    package = package_features(args)
    opts = bake_options(args)
    password = password_from(args, ui)  # before the long work: a bad source fails at once
    with ui.step(f"loading {args.input}") as update:
        model = _load_model(Path(args.input), args)
        update("loading weights")
        bundle, weights = _bundle(model, args, opts)
    params = {n.source_name for n in model.graph.params()}
    # weights come as bindings of params, or inside the graph as constants (exporters that
    # write weights as Constant nodes, subgraph initializers)
    weights_in = sum(v.nbytes for k, v in bundle.tensors.items() if k in params) \
        + sum(w.data.nbytes for w in bundle.packed if w.name in params) \
        + _constant_bytes(model.graph)
    with ui.step("baking"):
        file, report = bake_bundle(model.graph, bundle, opts)
    with ui.step("encrypting and writing" if password else "writing"):
        written = write_artifact(args, file, password, **package)
    if report.params_remaining:
        ui.warn(f"no weights for param(s) {_some(set(report.params_remaining))}: "
                f"{args.output} cannot run until they are bound")
    rows = [_row_info(file, w) for w in file.weights]
    data = {
        "command": "bake", "input": args.input, "source": model.source, "output": args.output,
        "encrypted": password is not None, "file_bytes": artifact_bytes(args.output),
        **written,
        "options": _options_data(opts), "weights": weights,
        "report": dataclasses.asdict(report), "weights_in_bytes": weights_in,
        # what the file holds: the table's bytes and the constants no table row stands for
        "weights_out_bytes": sum(r["bytes"] for r in rows) + _constant_bytes(
            file.graph, frozenset(w.node_id for w in file.weights)),
        "by_encoding": _by_encoding(rows),
        "input_shapes": {k: list(v) for k, v in args.input_shapes}, "dims": dict(args.dim),
        "computing_nodes": {"counted": COMPUTING_NODES,
                            "onnx": _total(model.onnx_op_types),
                            "before": _total(report.op_types_before),
                            "after": _total(report.op_types_after)},
        "op_types": _op_table(model.onnx_op_types, report.op_types_before,
                              report.op_types_after),
    }
    return Outcome(data, _render_bake)


def _options_data(opts: BakeOptions) -> dict[str, Any]:
    """The options as JSON-ready data; the calibration feeds as their count."""
    data = dataclasses.asdict(dataclasses.replace(opts, calibration=None))
    data["calibration"] = len(opts.calibration) if opts.calibration else 0
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


def _constant_bytes(graph: Graph, skip: frozenset[int] = frozenset()) -> int:
    """Payload bytes of the graph's Constants, subgraphs included, but for the top-level
    nodes in `skip` (those a weight-table row already counts)."""
    own = sum(n.op.nbytes for n in graph.nodes()
              if isinstance(n.op, Constant) and n.id not in skip)
    return own + sum(_constant_bytes(sub) for n in graph.nodes() for sub in n.op.subgraphs())


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
    saved = d["weights_in_bytes"] - d["weights_out_bytes"]
    ratio = d["weights_in_bytes"] / d["weights_out_bytes"] if d["weights_out_bytes"] else None
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
        ("dead IR nodes removed (constants included)", stats["dead_removed"]),
        ("constants folded", stats["constants_folded"]),
        ("constants deduped", memory["constants_deduped"]),
        ("folded bindings dropped", memory["folded_bindings_dropped"]),
        ("weight bytes in -> out", f"{fmt_bytes(d['weights_in_bytes'])} -> "
                                   f"{fmt_bytes(d['weights_out_bytes'])}"),
        ("bytes saved", f"{fmt_bytes(saved)}" + (f" ({ratio:.1f}x smaller)" if ratio else "")),
    ]
    if report["unused_bindings"]:
        steps.append(("bindings matching no param", ", ".join(report["unused_bindings"])))
    ui.pairs("what each step did", steps)
    _render_op_table(d, ui)
    if d["by_encoding"]:
        ui.table("weight table by encoding", ("encoding", "tensors", "bytes"),
                 [(e["encoding"], e["tensors"], fmt_bytes(e["bytes"]))
                  for e in d["by_encoding"]], numeric=("tensors", "bytes"))
    _render_accuracy(report["accuracy"], ui)
    ui.pairs(None, [("file", d["output"] + (" (encrypted)" if d["encrypted"] else "")),
                    ("file size", f"{fmt_bytes(d['file_bytes'])} bytes (graph constants "
                                  f"{fmt_bytes(report['constant_bytes'])}, weight table "
                                  f"{fmt_bytes(report['weight_bytes'])})")])


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
               *((f"{r['cosine']:.6f}", f"{r['max_abs']:.3g}") if measured else ()),
               r["reason"]) for r in rows],
             numeric=("f32 bytes", "stored bytes", "own rel err", "cosine alone",
                      "max abs alone"))
    if not measured:
        return
    target = f"cosine >= {acc['min_cosine']:g}" + (
        f", max abs <= {acc['max_abs_error']:g}" if acc["max_abs_error"] is not None else "")
    ui.table(f"accuracy on the calibration inputs ({target})",
             ("output", "cosine, all encoded", "max abs, all encoded", "cosine", "max abs"),
             [(p["name"], f"{p['cosine']:.6f}", f"{p['max_abs']:.3g}", f"{f['cosine']:.6f}",
               f"{f['max_abs']:.3g}") for p, f in zip(acc["proposed"], acc["final"])],
             numeric=("cosine, all encoded", "max abs, all encoded", "cosine", "max abs"))
    kept = sum(r["kept"] for r in rows)
    ui.line(f"accuracy guard: {'targets met' if acc['met'] else 'TARGETS MISSED'}; {kept} "
            f"weight(s) kept at f32; {acc['runs']} graph runs")


# --- what a file holds (shared by inspect and bake) ---------------------------------------


def _linked_constant(graph: Graph, row: RlxWeight):
    if row.node_id is not None and 0 <= row.node_id < len(graph):
        node = graph.node(row.node_id)
        if isinstance(node.op, Constant):
            return node
    return None


def _row_info(file: RlxFile, row: RlxWeight) -> dict[str, Any]:
    """One table row; `bytes` is its encoded size wherever the bytes live (table or graph)."""
    node = _linked_constant(file.graph, row)
    graph_bytes = node.op.nbytes if node is not None else 0
    return {"name": row.name, "encoding": row.encoding, "shape": list(row.shape),
            "layout": row.layout, "bytes": row.nbytes or graph_bytes,
            "in_table": row.nbytes > 0, "in_graph": graph_bytes > 0, "note": row.note}


def _by_encoding(rows: list[dict]) -> list[dict]:
    tensors: Counter[str] = Counter()
    nbytes: Counter[str] = Counter()
    for r in rows:
        tensors[r["encoding"]] += 1
        nbytes[r["encoding"]] += r["bytes"]
    return [{"encoding": e, "tensors": tensors[e], "bytes": nbytes[e]} for e in sorted(tensors)]


# --- inspect ------------------------------------------------------------------------------


def _add_inspect(sub, common) -> None:
    p = sub.add_parser("inspect", parents=[common], formatter_class=_FORMATTER,
                       help="show what a .rlx file holds and check its checksums",
                       description="Show meta, inputs/outputs, the weight table, the memory "
                                   "layout and the ops of a .rlx file, and verify every "
                                   "checksum (exit 1 when one fails). An encrypted file "
                                   "without a password shows its encryption parameters. "
                                   "A signed file shows the key id its .sig names; with "
                                   "--trusted-key the signature is checked too (exit 1 when "
                                   "it fails).",
                       epilog="examples:\n  rlx-bake inspect model.rlx\n"
                              "  rlx-bake inspect secret.rlx --password-env RLX_PASSWORD --json\n"
                              "  rlx-bake inspect model.rlx --trusted-key release.key.pub")
    p.add_argument("file", help="a .rlx file")
    p.add_argument("--graph", action="store_true",
                   help="also print the baked graph as text, one line per node (with --json: "
                        "as the `graph_text` lines)")
    add_password_options(p.add_argument_group("encrypted files"))
    add_trusted_key_option(p)
    p.set_defaults(run=_inspect)


def _encryption(info: EncryptionInfo) -> dict[str, Any]:
    return {"container": ENC_MAGIC.decode(), "version": info.version,
            "kdf": {"algorithm": "argon2id", "m_cost_kib": info.kdf.m_cost,
                    "t_cost": info.kdf.t_cost, "p_cost": info.kdf.p_cost},
            "aead": "chacha20-poly1305, chunked (STREAM)", "chunk_size": info.chunk_size,
            "chunks": info.chunk_count, "plaintext_bytes": info.plaintext_length,
            "file_bytes": info.file_size}


def _inspect(args, ui: Ui) -> Outcome:
    password = password_from(args, ui)
    path = Path(args.file)
    package = is_rlxp(path)
    encrypted = not package and is_encrypted(path)
    data: dict[str, Any] = {"command": "inspect", "file": args.file,
                            "file_bytes": artifact_bytes(path), "encrypted": encrypted,
                            "encryption": _encryption(read_encryption_info(path))
                            if encrypted else None}
    keys = trusted_keys(args)
    with ui.step("checking the signature" if keys else "looking for a signature"):
        data["signature"] = signature_status(path, keys)  # before reading: no password needed
    signature_ok = data["signature"]["valid"] is not False
    if encrypted and password is None:
        return Outcome({**data, "locked": True}, _render_locked, 0 if signature_ok else 1)
    with ui.step(f"reading {args.file}"):
        if package:
            if password is not None:
                raise CliError(f"{path} is an .rlxp package, which is never encrypted")
            opened = read_rlxp_package(path)
            file = opened.file
            data["package"] = package_info(opened)
        else:
            file = read_rlx(path, password=password)
    with ui.step("verifying checksums"):
        try:
            file.check_integrity()
            checksums: dict[str, Any] = {"ok": True, "error": None}
        except IntegrityError as err:
            checksums = {"ok": False, "error": str(err)}
    rows = [_row_info(file, w) for w in file.weights]
    data.update({
        "locked": False, "schema": SCHEMA_VERSION, "meta": dataclasses.asdict(file.meta),
        "weights": rows, "by_encoding": _by_encoding(rows),
        "memory": {"mode": file.meta.memory_mode,
                   "table_bytes": sum(w.nbytes for w in file.weights),
                   "graph_constant_bytes": file.meta.constant_bytes,
                   "needs_materialize": file.needs_materialize()},
        "computing_nodes": {"counted": COMPUTING_NODES,
                            "count": sum(op_type_counts(file.graph).values())},
        "ops": dict(sorted(op_type_counts(file.graph).items(), key=lambda kv: (-kv[1], kv[0]))),
        "checksums": checksums,
        "graph_text": format_graph(file.graph).splitlines() if args.graph else None,
    })
    return Outcome(data, _render_inspect, 0 if checksums["ok"] and signature_ok else 1)


def _render_locked(d: dict, ui: Ui) -> None:
    e = d["encryption"]
    kdf = e["kdf"]
    ui.pairs(f"{d['file']}: encrypted (pass a password to see inside)", [
        ("container", f"{e['container']} version {e['version']}"),
        ("key derivation", f"{kdf['algorithm']}, memory {fmt_bytes(kdf['m_cost_kib'])} KiB, "
                           f"{kdf['t_cost']} pass(es), {kdf['p_cost']} lane(s)"),
        ("cipher", e["aead"]),
        ("chunks", f"{e['chunks']} of up to {fmt_bytes(e['chunk_size'])} bytes"),
        ("plaintext", f"{fmt_bytes(e['plaintext_bytes'])} bytes"),
        ("file", f"{fmt_bytes(e['file_bytes'])} bytes"),
        ("signature", _signature_text(d["signature"])),
    ])


def _render_inspect(d: dict, ui: Ui) -> None:
    meta, mem = d["meta"], d["memory"]
    pkg = d.get("package")
    title = f"rlxp package ({pkg['container']} container)" if pkg else f"rlx schema {d['schema']}"
    ui.pairs(f"{d['file']}: {title}", [
        ("graph", meta["name"]),
        ("file size", f"{fmt_bytes(d['file_bytes'])} bytes"
                      + (" (encrypted)" if d["encrypted"] else "")),
        ("profile", meta["profile"] or "?"),
        ("computing nodes", d["computing_nodes"]["count"]),
        ("params baked", meta["params_baked"]),
        ("params left unbound", ", ".join(meta["params_remaining"]) or "none"),
        ("zero matmuls skipped", meta["skipped_zero_matmuls"]),
        ("packed TQ2_0 / Q8_0", f"{meta['ternary_packed']} / {meta['quant_packed']}"),
        ("memory mode", f"{mem['mode']} ({MemoryMode(mem['mode']).description})"),
        ("bytes in weight table", fmt_bytes(mem["table_bytes"])),
        ("bytes in graph constants", fmt_bytes(mem["graph_constant_bytes"])),
        ("needs materialize", "yes" if mem["needs_materialize"] else "no"),
        ("checksums", "OK" if d["checksums"]["ok"] else f"FAILED: {d['checksums']['error']}"),
        ("signature", _signature_text(d["signature"])),
    ])
    ui.table("inputs and outputs", ("", "name", "shape", "dtype"),
             [(kind, io["name"], fmt_shape(io["shape"]), io["dtype"])
              for kind in ("inputs", "outputs") for io in meta[kind]])
    ui.table("weight table", ("name", "encoding", "shape", "layout", "stored in", "bytes", "note"),
             [(w["name"], w["encoding"], fmt_shape(w["shape"]), w["layout"], _where(w),
               fmt_bytes(w["bytes"]), w["note"]) for w in d["weights"]], numeric=("bytes",))
    ui.table("computing nodes by op type", ("op type", "count"), d["ops"].items(),
             numeric=("count",))
    ui.line(f"({d['computing_nodes']['counted']})")
    if pkg:
        render_package(pkg, ui)
    if d["graph_text"]:
        ui.line("")
        for line in d["graph_text"]:
            ui.line(line)


def _signature_text(s: dict) -> str:
    if s["valid"] is False:
        return f"FAILED: {s['error']}"
    if not s["signed"]:
        return "none"
    if s["checked"]:
        return f"OK: valid, by trusted key {s['key_id']}"
    return f"{s['signature']} names key {s['key_id']} (not checked: pass --trusted-key PUB)"


def _where(row: dict) -> str:
    places = [p for p, here in (("table", row["in_table"]), ("graph", row["in_graph"])) if here]
    return "+".join(places) or "nowhere"


# --- tensors ------------------------------------------------------------------------------

_TENSOR_FORMATS = (".safetensors", ".npz")


def _add_tensors(sub, common) -> None:
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
    p.set_defaults(run=_tensors)


def _tensors(args, ui: Ui) -> Outcome:
    suffix = Path(args.output).suffix.lower()
    if suffix not in _TENSOR_FORMATS:
        raise CliError(f"{args.output}: expected a {' or '.join(_TENSOR_FORMATS)} file name")
    check_output(args.output)
    password = password_from(args, ui)
    with ui.step(f"reading {args.file}"):
        file = read_rlx(args.file, password=password)
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


# --- relayout, encrypt, decrypt -----------------------------------------------------------


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
    check_output(args.output)
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
    check_output(args.output)
    password = password_from(args, ui)
    if is_encrypted(args.input):
        raise CliError(f"{args.input} is already encrypted")
    read_rlx(args.input, verify="full")  # never seal a corrupt file
    assert password is not None  # the password options are required (argparse)
    with ui.step("encrypting"), atomic_write(args.output) as out:
        info = encrypt_file(args.input, out, password)
    data = {"command": "encrypt", "input": args.input, "output": args.output,
            "encryption": _encryption(info)}
    return Outcome(data, _render_crypto)


def _decrypt(args, ui: Ui) -> Outcome:
    check_output(args.output)
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
