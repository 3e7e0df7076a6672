"""The precision plan of a fast bake as the bake report and `inspect` show it: counts per
precision, the nodes kept f32 and why, and the accuracy measured on calibration feeds."""

from __future__ import annotations

from typing import Any

from rlx.cli.ui import Ui

__all__ = ["render_plan"]


def render_plan(plan: dict[str, Any], ui: Ui) -> None:
    """`plan` as `PrecisionPlan.to_json` writes it (the artifact's `meta.precision_plan`)."""
    counts = ", ".join(f"{n} {k}" for k, n in plan["counts"].items() if n) or "none"
    calibration = plan.get("calibration", {})
    source = "seeded inputs (no --calibrate: unchecked on real data)" \
        if calibration.get("seeded") else f"{calibration.get('samples', 0)} calibration feed(s)"
    ui.pairs("precision plan (fast profile)", [
        ("nodes by precision", counts),
        ("checked on", source),
        ("target", f"cosine >= {calibration.get('min_cosine', 0):g} on every output, "
                   "the same argmax on class-score outputs"),
        ("numpy runs of the guard", calibration.get("runs", 0))])
    outputs = calibration.get("outputs", [])
    if outputs:
        ui.table("accuracy of the plan on the calibration inputs (against the exact graph)",
                 ("output", "cosine", "max abs", "argmax agreement"),
                 [(o["name"], f"{o['cosine']:.6f}", f"{o['max_abs']:.3g}",
                   "-" if o.get("argmax") is None else f"{o['argmax']:.3f}")
                  for o in outputs], numeric=("cosine", "max abs", "argmax agreement"))
    if plan["kept"]:
        ui.table("kept f32 by the guard", ("node", "op", "why"),
                 [(k["node"], k["op"], k["reason"]) for k in plan["kept"]])
