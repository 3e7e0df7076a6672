"""The `rlx-bake` command: thin functions over the public API.

User errors (`RlxError`) print as one line `error: ...` and exit 1; bad usage exits 2.
"""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from rlx.errors import RlxError

EXAMPLES = """examples:
  rlx-bake demo            bake a small MLP with every profile and memory mode, run each
"""


def _demo(args: argparse.Namespace, console: Console) -> int:
    from rlx.demo import run_demo

    table = Table(title="rlx demo: MLP 784-64-10, w1 ternary (every profile x memory mode)")
    for column in ("profile", "memory", "nodes", "table bytes", "graph bytes",
                   "x smaller than f32", "compile ms", "max |err|"):
        table.add_column(column, justify="left" if column in ("profile", "memory") else "right")
    for row in run_demo():
        table.add_row(row.profile, row.memory, str(row.nodes), f"{row.weight_bytes:,}",
                      f"{row.graph_bytes:,}", f"{row.ratio:.1f}", f"{row.compile_ms:.2f}",
                      f"{row.max_abs_err:.2e}")
    console.print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlx-bake", description="Bake ML models into one artifact and run them.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="bake and run a small MLP with every profile")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console()
    try:
        return args.func(args, console)
    except RlxError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
