#!/usr/bin/env python
"""Make onnxruntime's variants of every MODELS.md model and write their table.

For each model (tests/real_models.py) onnxruntime writes: optimised variants
(ORT_ENABLE_EXTENDED, ORT_ENABLE_ALL), dynamically quantised ones (per tensor, per channel)
and statically quantised ones (QDQ and QOperator, calibrated on seeded feeds), cached in
.cache/variants/ (tests/variants.py). Each is imported, baked with every profile, written,
read and run, and compared with onnxruntime running the same file; the table goes to the
marked section of docs/variants.md. The size profile is baked as users are told to: with
its accuracy guard, calibrated on one feed that is not an evaluation feed
(tests/variants.py: bake_options).

    python scripts/make_variants.py                    # all models, all profiles
    python scripts/make_variants.py --models ppocr-cls --profiles exact
    python scripts/make_variants.py --variants static-qdq  # rerun these rows, keep the rest
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlx import BakeProfile  # noqa: E402
from rlx.errors import RlxError  # noqa: E402
from tests.real_models import MODELS  # noqa: E402
from tests.variants import INTEGER, VARIANTS, contrib_ops, run_variant, variant_path  # noqa: E402

DOC = ROOT / "docs" / "variants.md"
BEGIN, END = "<!-- variants:begin -->", "<!-- variants:end -->"


HEADER = ("| model | variant | com.microsoft ops | profile | rlx vs ORT | rlx vs ORT (no opt.) "
          "| rlx vs ORT on uint8 re-encoding | ORT variant vs original | "
          "kept f32 by the size guard | verdict |")


def _cell(comparison) -> str:
    agree = "" if comparison.argmax is None else f", {comparison.argmax:.1%}"
    return f"{comparison.max_abs:.1e} / {comparison.cosine:.6f}{agree}"


def _kept(result, profile) -> str:
    """How many of the proposed weights the size profile's accuracy guard kept at f32."""
    if profile is not BakeProfile.SIZE:
        return ""
    return f"{len(result.kept)} of {result.proposed}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--profiles", default=",".join(p.value for p in BakeProfile))
    parser.add_argument("--no-doc", action="store_true", help="print only")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    profiles = [BakeProfile(p) for p in args.profiles.split(",")]
    rows = []
    for model in args.models.split(","):
        for variant in args.variants.split(","):
            path = variant_path(model, variant)
            ops = contrib_ops(path)
            for profile in profiles:
                try:
                    r = run_variant(model, variant, profile)
                except RlxError as err:
                    line = f"| {model} | {variant} | {ops} | {profile.value} | " \
                           f"refused: {str(err)[:160]} | | | | | refused |"
                else:
                    # the size profile re-quantises weights (Q8_0): judged like a
                    # quantised model
                    lossy = variant in INTEGER or profile is BakeProfile.SIZE
                    verdict = "ok" if r.ok(lossy) else "differs"
                    line = f"| {model} | {variant} | {ops} | {profile.value} | " \
                           f"{_cell(r.ort)} | {_cell(r.ort_plain)} | " \
                           f"{_cell(r.ort_u8) if r.ort_u8 else '-'} | " \
                           f"{_cell(r.ort_vs_float)} | {_kept(r, profile)} | {verdict} |"
                print(line, flush=True)
                rows.append(line)
    if args.no_doc:
        return
    text = DOC.read_text()
    head, _, rest = text.partition(BEGIN)
    table, _, tail = rest.partition(END)
    DOC.write_text(f"{head}{BEGIN}\n" + "\n".join(_merged(table, rows)) + f"\n{END}{tail}")


def _key(row: str) -> tuple[str, ...]:
    cells = [c.strip() for c in row.strip("|").split("|")]
    return cells[0], cells[1], cells[3]  # model, variant, profile


def _merged(table: str, rows: list[str]) -> list[str]:
    """The doc's table with `rows` in place of the rows for the same model, variant and
    profile (in the table's order), rows it did not have at the end."""
    new = {_key(r): r for r in rows}
    old = [line for line in table.strip().splitlines()[2:] if line.startswith("|")]
    kept = [new.pop(_key(line), line) for line in old]
    return [HEADER, "|---|---|---|---|---|---|---|---|---|---|", *kept, *new.values()]


if __name__ == "__main__":
    main()
