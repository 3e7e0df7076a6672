"""The bundled self-test on the command line: what `bake` stored and `inspect` shows, and
`rlx-bake verify FILE` without `--onnx`, which runs it on one engine or every installed one."""

from __future__ import annotations

from typing import Any

from rlx.artifact.self_test import SelfTest, SelfTestSection
from rlx.cli.formatting import fmt_bytes
from rlx.cli.ui import CliError, Outcome, Ui
from rlx.engines import available_engines, load
from rlx.engines.self_test import run_self_test, stored_test

__all__ = ["render_self_test", "self_test_data", "verify_bundled"]


def self_test_data(test: SelfTest | SelfTestSection | None) -> dict[str, Any] | None:
    """What a report shows of a self-test (from the header alone for one read from a
    file: its blob is not read)."""
    if test is None:
        return None
    if isinstance(test, SelfTest):
        return {"bytes": test.nbytes, "samples": test.samples, "note": test.note,
                "outputs": [{"name": t.name, "atol": t.atol, "deviation": t.deviation,
                             "allowance": t.allowance} for t in test.tolerances]}
    rows = test.description.get("outputs")
    outputs = [{k: row.get(k) for k in ("name", "atol", "deviation", "allowance")}
               for row in (rows if isinstance(rows, list) else []) if isinstance(row, dict)]
    return {"bytes": test.nbytes, "samples": test.samples, "note": test.note,
            "outputs": outputs}


def render_self_test(d: dict[str, Any], ui: Ui) -> None:
    ui.table(f"bundled self-test: {d['samples']} sample(s), {fmt_bytes(d['bytes'])} bytes "
             f"({d['note']})", ("output", "tolerance", "baked deviation", "engine allowance"),
             [(o["name"], _num(o["atol"]), _num(o["deviation"]), _num(o["allowance"]))
              for o in d["outputs"]],
             numeric=("tolerance", "baked deviation", "engine allowance"))


def _num(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else "?"


def verify_bundled(args, password, trusted) -> Outcome:
    """`verify FILE` without `--onnx`: the file's self-test on `--engine` (`all`: every
    installed engine); exit 1 when an output misses its tolerance on any of them."""
    engines = available_engines() if args.engine == "all" else [args.engine]
    runs = []
    for engine in engines:
        model = load(args.file, engine=engine, precision=args.precision, password=password,
                     trusted_keys=trusted)
        if model.file.self_test is None:
            raise CliError(f"{args.file} has no bundled self-test: bake it with --self-test, "
                           "or compare it with its model: verify FILE --onnx MODEL.onnx")
        test = stored_test(model.file, args.file)
        checks = run_self_test(model, test)
        runs.append({"engine": model.engine, "ok": all(c.ok for c in checks),
                     "outputs": [{"name": c.name, "max_abs": c.max_abs, "tolerance": c.atol,
                                  "cosine": c.cosine, "worst_sample": c.sample, "ok": c.ok}
                                 for c in checks]})
    ok = all(r["ok"] for r in runs)
    data = {"command": "verify", "file": args.file, "reference": "bundled self-test",
            "samples": test.samples, "note": test.note, "ok": ok, "engines": runs}
    return Outcome(data, _render, 0 if ok else 1)


def _render(d: dict, ui: Ui) -> None:
    ui.table(f"{d['file']}: bundled self-test ({d['samples']} sample(s): {d['note']})",
             ("engine", "output", "max abs err", "tolerance", "cosine", "passes"),
             [(r["engine"], o["name"], _num(o["max_abs"]), _num(o["tolerance"]),
               "" if o["cosine"] is None else f"{o['cosine']:.6f}", "yes" if o["ok"] else "NO")
              for r in d["engines"] for o in r["outputs"]],
             numeric=("max abs err", "tolerance", "cosine"))
    failed = [r["engine"] for r in d["engines"] if not r["ok"]]
    ui.line("OK: every output within its stored tolerance on "
            + ", ".join(r["engine"] for r in d["engines"]) if d["ok"]
            else f"FAILED on {', '.join(failed)}: an output is beyond its stored tolerance")
