"""The options `bake` and `import-onnx` share: the profile and its switches, input shapes,
the weights, the accuracy guard and the `.rlxp` package options, read into the library's
`BakeOptions` and `write_artifact` arguments."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from rlx import BakeOptions, BakeProfile, MemoryMode
from rlx.artifact.output import ARTIFACT_FORMATS, artifact_format, check_artifact_output
from rlx.artifact.rlxp import CONTAINERS, TIERS
from rlx.cli.inputs import load_npz, parsed
from rlx.cli.ui import CliError, add_password_options
from rlx.weights import WeightLoadPolicy

__all__ = ["SWITCHES", "add_bake_arguments", "add_package_options", "artifact_output",
           "bake_options", "package_options"]

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
    p.add_argument("--self-test", nargs="*", metavar="FEEDS.npz",
                   help="store a self-test in the .rlx: these inputs (default: the "
                        "--calibrate feeds, else one seeded sample), the exact graph's outputs "
                        "and their tolerances; rlx-bake verify FILE runs it")
    switches = p.add_argument_group("switches (change the profile's settings)")
    for s in SWITCHES:
        switches.add_argument(f"--{s.on}", f"--{s.off}", dest=s.option, action=_Toggle,
                              help=s.help)
    switches.add_argument("--no-cleanup", dest="cleanup", action="store_false", default=None,
                          help="no folding, DCE or simplification (a switch given too wins)")
    add_package_options(p)
    if not package:
        add_password_options(p.add_argument_group("encryption (optional, .rlx only)"))


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
    if getattr(args, "self_test", None) is not None:
        opts = opts.replace(self_test=[load_npz(path) for path in args.self_test] or True)
    if args.calibrate:
        opts = opts.replace(calibration=[load_npz(path) for path in args.calibrate],
                            min_cosine=args.min_cosine, max_abs_error=args.max_abs_error)
    return opts



def add_package_options(p: argparse.ArgumentParser) -> None:
    """--format, --container, --tier, --tensor-tier (on bake, convert, import-onnx)."""
    group = p.add_argument_group(".rlxp packages")
    group.add_argument("--format", choices=ARTIFACT_FORMATS, default=None,
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


def artifact_output(args: argparse.Namespace) -> str:
    """The output's format (rlx or rlxp), after checking it can be written there."""
    encrypted = any(getattr(args, k, None) for k in ("password", "password_env",
                                                     "password_file"))
    fmt = artifact_format(args.output, args.format, container=args.container,
                          packaged=bool(args.tier or args.tensor_tier), encrypted=encrypted)
    check_artifact_output(args.output, fmt, args.container)
    if fmt == "rlxp" and getattr(args, "self_test", None) is not None:
        raise CliError("--self-test is stored in .rlx files only (an .rlxp package has no "
                       "self-test section); bake to .rlx")
    return fmt


def package_options(args: argparse.Namespace) -> dict[str, Any]:
    """The package options as `write_artifact` (and `bake_file`) arguments."""
    return {"container": args.container, "tier": args.tier, "tiers": dict(args.tensor_tier)}
