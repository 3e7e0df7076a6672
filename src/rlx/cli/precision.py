"""The precision plan of a fast bake as the bake report and `inspect` show it: counts per
precision, the nodes kept f32 and why (int8 part and bf16 part), and the accuracy measured
on calibration feeds."""

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
        ("numpy runs of the guard", calibration.get("runs", 0)),
        *_bf16_rows(plan), *_int8_products_rows(calibration)])
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
    kept = calibration.get("bf16", {}).get("kept", [])
    if kept:
        ui.table("kept f32 by the guard, bf16 part", ("node", "op", "why"),
                 [(k["node"], k["op"], k["reason"]) for k in kept])


def _bf16_rows(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """The bf16 part's line: the products that may run bf16 (OpenVINO on a CPU with bf16)
    out of the candidates, and its worst calibration cosine."""
    bf16 = plan.get("calibration", {}).get("bf16")
    if not bf16:
        return []
    worst = min((o["cosine"] for o in bf16.get("outputs", [])), default=None)
    cosine = "" if worst is None else f", worst calibration cosine {worst:.6f}"
    return [("bf16 part (OpenVINO, bf16 CPUs)",
             f"{plan['counts'].get('bf16', 0)} of {bf16.get('candidates', 0)} MatMul / Conv "
             f"nodes bf16, the rest f32{cosine}")]


def _int8_products_rows(calibration: dict[str, Any]) -> list[tuple[str, str]]:
    """OpenVINO's own int8 set (`rlx.artifact.openvino_form`) and its measured accuracy; in
    a file baked before it, how onnxruntime's set as OpenVINO runs it met the guard
    (OpenVINO runs it only where it passed: `rlx.engines.openvino_int8`)."""
    own = calibration.get("openvino")
    if own:
        worst = min((o["cosine"] for o in own.get("outputs", [])), default=float("nan"))
        return [("OpenVINO's int8 set", f"{len(own.get('int8', {}))} MatMul / Conv nodes "
                                        f"int8, {len(own.get('bf16', []))} nodes bf16 beside "
                                        f"them, worst calibration cosine {worst:.6f}")]
    checked = calibration.get("int8_products")
    if not checked:
        return []
    worst = min((o["cosine"] for o in checked.get("outputs", [])), default=float("nan"))
    verdict = "passed" if checked.get("passed") else "missed: OpenVINO runs the bf16 part"
    return [("int8 part as OpenVINO runs it", f"{verdict}, worst calibration cosine "
                                              f"{worst:.6f}")]
