"""`rlx-bake demo`: train, bake and run a small MLP with every profile and memory mode
(the library's `rlx.demo.run_demo`), and its table."""

from __future__ import annotations

import argparse
import dataclasses

from rlx.artifact.crypto import DEFAULT_KDF
from rlx.cli.formatting import fmt_ms
from rlx.cli.ui import Outcome, Ui
from rlx.demo import DEMO_KDF, DEMO_PASSWORD, run_demo

__all__ = ["add_commands"]

_FORMATTER = argparse.RawDescriptionHelpFormatter


def add_commands(sub, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("demo", parents=[common], formatter_class=_FORMATTER,
                       help="train, bake and run a small MLP with every profile and memory mode",
                       description="Train a 64-256-10 MLP on the bundled 8x8 handwritten digits "
                                   "with numpy, ternarise its first layer, bake it with every "
                                   "profile and memory mode (and once encrypted), reload each "
                                   "file and score it on held-out digits.",
                       epilog="example:\n  rlx-bake demo --out /tmp/rlx-demo")
    p.add_argument("--out", default="demo-out", metavar="DIR",
                   help="where the .rlx files go (default ./demo-out)")
    p.add_argument("--seed", type=int, default=0, help="seed of the split and training (0)")
    p.set_defaults(run=_demo)


def _demo(args, ui: Ui) -> Outcome:
    with ui.step("demo") as update:
        result = run_demo(args.out, args.seed, progress=update)
    data = {"command": "demo", **dataclasses.asdict(result), "password": DEMO_PASSWORD,
            "kdf": dataclasses.asdict(DEMO_KDF), "default_kdf": dataclasses.asdict(DEFAULT_KDF)}
    return Outcome(data, _render_demo)


_DEMO_COLUMNS = ("profile", "memory", "encrypted", "file bytes", "f32 / file", "load",
                 "accuracy")


def _demo_row(r: dict) -> tuple:
    return (r["profile"], r["memory"], "yes" if r["encrypted"] else "", f"{r['file_bytes']:,}",
            f"{r['ratio']:.1f}x", fmt_ms(r["load_ms"]), f"{r['accuracy']:.1%}")


def _render_demo(d: dict, ui: Ui) -> None:
    ui.line(f"trained a 64-256-10 MLP on {d['train_size']} 8x8 digits, scored on "
            f"{d['test_size']} held-out ones")
    ui.line(f"accuracy before baking: float32 {d['float_accuracy']:.1%}; with w1 ternarised "
            f"and the rest fine-tuned {d['ternary_accuracy']:.1%}")
    ui.table("baked, written, reloaded and run", _DEMO_COLUMNS, map(_demo_row, d["rows"]),
             numeric=_DEMO_COLUMNS[3:])
    kdf, default = d["kdf"], d["default_kdf"]
    ui.line(f"raw float32 weights: {d['raw_f32_bytes']:,} bytes; load = rlx.load on the "
            f"numpy engine; files in {d['out_dir']}/")
    ui.line(f"the encrypted file uses the password {d['password']!r} and a deliberately cheap "
            f"KDF (Argon2id {kdf['m_cost']:,} KiB, {kdf['t_cost']} pass) to stay fast; "
            f"rlx-bake bake --password-* uses {default['m_cost']:,} KiB and "
            f"{default['t_cost']} passes")
    ui.line(f"done in {d['seconds']:.1f} s")
