"""Engines benchmark (issue 12): rlx with each engine and precision next to plain
onnxruntime and plain OpenVINO loading the .onnx file, on every MODELS.md model, in one run.

    .venv/bin/python -m benchmarks.bench_engines [--quick] [--models a,b]   # or make bench

Per model and runner, each measurement in a fresh process (benchmarks/engine_probe.py), the
runners interleaved round by round so machine drift hits all alike: latency p50 at 1 and 2
threads, time to first result (import, load, first run; auto with its cache warm, and once
cold), anonymous RSS growth at load, and accuracy against plain onnxruntime f32 (cosine,
max abs error, argmax agreement). Writes results/engines-<date>.json and ENGINES.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, WORK, in_fresh_process, machine_info

RUNNERS = ("rlx:numpy:exact", "rlx:onnxruntime:exact", "ort",
           "rlx:onnxruntime-off:exact", "rlx:openvino:exact", "ov:f32",
           "rlx:openvino:fast", "ov:default", "rlx:auto:exact")
PEERS = {"rlx:onnxruntime:exact": "ort", "rlx:openvino:exact": "ov:f32",
         "rlx:openvino:fast": "ov:default"}
MODELS = ("minilm-l3", "ppocr-cls", "silero-vad", "nudenet-320n", "captcha-crnn",
          "orientation-lcnet")
PROBE = "from benchmarks.engine_probe import main; main()"


def _probe(args: dict) -> dict:
    try:
        return in_fresh_process(PROBE, json.dumps(args), timeout=1800)
    except RuntimeError as err:
        lines = [ln for ln in str(err).splitlines() if ln.strip()]
        return {"error": lines[-1].strip() if lines else "failed"}


def prepare(name: str, work: Path) -> dict[str, Any]:
    """Bake (exact profile, compact), seeded feeds, and plain onnxruntime's outputs."""
    import numpy as np
    import onnxruntime as ort

    from rlx import bake_file
    from tests.real_models import FEEDS, fetch, import_kwargs

    folder = work / name
    folder.mkdir(parents=True, exist_ok=True)
    onnx_path = fetch(name)
    baked = bake_file(onnx_path, folder / f"{name}.rlx", profile="exact",
                      **import_kwargs(onnx_path)).file
    feeds = FEEDS[name](0)
    np.savez(folder / "feeds.npz", **feeds)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    np.savez(folder / "reference.npz",
             **{f"out{k}": v for k, v in enumerate(session.run(None, feeds))})
    return {"onnx": str(onnx_path), "rlx": str(folder / f"{name}.rlx"),
            "feeds": str(folder / "feeds.npz"), "reference": str(folder / "reference.npz"),
            "cache": str(folder / "auto-cache"), "weight_bytes": baked.meta.weight_bytes}


def bench_model(name: str, paths: dict, quick: bool, log) -> dict[str, Any]:
    rounds = 1 if quick else 2
    calls = {"warmup": 2 if quick else 5, "min_calls": 5 if quick else 20,
             "min_seconds": 0.2 if quick else 1.0}
    base = {k: paths[k] for k in ("onnx", "rlx", "feeds", "reference", "cache")}
    out: dict[str, Any] = {"weight_bytes": paths["weight_bytes"], "latency": {},
                           "first_result": {}, "anon_growth": {}, "anon_load": {},
                           "accuracy": {},
                           "details": {}}
    log(f"{name}: auto, cold cache")
    shutil.rmtree(paths["cache"], ignore_errors=True)  # cold also on a re-run
    cold = _probe({**base, "runner": "rlx:auto:exact", "threads": 2})
    out["auto_cold"] = cold
    for round_ in range(rounds):
        for threads in (1, 2):
            for runner in RUNNERS:
                log(f"{name}: {runner} x{threads} (round {round_ + 1})")
                r = _probe({**base, "runner": runner, "threads": threads, "latency": True,
                            **calls})
                out["latency"].setdefault(runner, {}).setdefault(str(threads), []).append(
                    r.get("p50") if "error" not in r else None)
                if "error" in r:
                    out["details"][runner] = r
                    continue
                out["accuracy"][runner] = r["accuracy"]
                out["details"][runner] = {k: r[k] for k in ("engine", "precision") if k in r}
        for runner in RUNNERS:
            log(f"{name}: {runner} first result (round {round_ + 1})")
            r = _probe({**base, "runner": runner, "threads": 2})
            if "error" not in r:
                out["first_result"].setdefault(runner, []).append(r["first_result_seconds"])
                out["anon_growth"].setdefault(runner, []).append(r["anon_growth"])
                out["anon_load"].setdefault(runner, []).append(r["anon_load"])
    return out


def compile_rlx() -> None:
    """Byte-compile rlx as installing its wheel does: an editable install under
    PYTHONDONTWRITEBYTECODE=1 would compile every module from source in every probe,
    ~250 ms of time to first result that no user pays."""
    import compileall

    compileall.compile_dir(str(ROOT / "src" / "rlx"), quiet=1)


def _median(values) -> float | None:
    values = [v for v in values or [] if v is not None]
    return statistics.median(values) if values else None


def _ratio(a, b):
    return None if a is None or b is None or b <= 0 else a / b


def summarize(model: dict) -> dict[str, Any]:
    p50 = {r: {t: _median(v) for t, v in by.items()} for r, by in model["latency"].items()}
    first = {r: _median(v) for r, v in model["first_result"].items()}
    anon = {r: _median(v) for r, v in model["anon_growth"].items()}
    anon_load = {r: _median(v) for r, v in model.get("anon_load", {}).items()}

    def lat(runner: str, t: str = "2"):
        return p50.get(runner, {}).get(t)

    auto_engine = model["details"].get("rlx:auto:exact", {}).get("engine")
    plain_of = {"onnxruntime": "ort", "openvino": "ov:f32", "numpy": "rlx:numpy:exact"}
    best_peer = min((v for v in (lat("ort"), lat("ov:f32")) if v is not None), default=None)
    targets = {f"{r} / {peer}": (_ratio(lat(r), lat(peer)), 1.05) for r, peer in PEERS.items()}
    targets["auto / best peer (f32)"] = (_ratio(lat("rlx:auto:exact"), best_peer), 1.05)
    targets["auto first result (warm) / chosen plain"] = (
        _ratio(first.get("rlx:auto:exact"), first.get(plain_of.get(auto_engine, "ort"))), 1.0)
    targets["onnxruntime anon growth at load / weights"] = (
        _ratio(anon_load.get("rlx:onnxruntime:exact"), model["weight_bytes"]), 0.10)
    if model["weight_bytes"] >= 1 << 20:
        targets["fast / onnxruntime"] = (_ratio(lat("rlx:openvino:fast"), lat("ort")), 0.5)
    return {"p50": p50, "first_result": first, "anon_growth": anon, "anon_load": anon_load,
            "auto": auto_engine,
            "targets": {k: {"value": v, "limit": lim,
                            "status": "n/a" if v is None else "met" if v <= lim else "missed"}
                        for k, (v, lim) in targets.items()}}


def _f(v, digits: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{digits}g}"


def _ms(v) -> str:
    return "n/a" if v is None else f"{v * 1e3:.2f}"


def markdown(results: dict) -> str:
    meta = results["meta"]
    lines = ["# Engines benchmark", "",
             f"{meta['date']}: `python -m benchmarks.bench_engines"
             f"{' --quick' if meta['quick'] else ''}`, {meta['wall_seconds']:.0f} s wall, "
             f"CPU {meta['machine']['cpu']} ({meta['machine']['cores']} cores), load "
             f"{', '.join(f'{x:.2f}' for x in meta['loadavg_start'])} at the start. "
             "Every number comes from a fresh process; runners interleaved round by round.",
             ""]
    for name, model in results["models"].items():
        if "error" in model:
            lines += [f"## {name}", "", f"failed: {model['error']}", ""]
            continue
        s = model["summary"]
        lines += [f"## {name} ({model['weight_bytes'] / (1 << 20):.1f} MiB of weights; "
                  f"auto chose {s['auto']})", "",
                  "| runner | p50 ms, 1 thread | p50 ms, 2 threads | first result ms | "
                  "anon growth at load MiB | % of weights | + first run MiB | "
                  "cosine vs ORT f32 | max abs err | argmax same |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for runner in RUNNERS:
            acc = model["accuracy"].get(runner) or [{}]
            anon = s["anon_load"].get(runner)
            after_run = s["anon_growth"].get(runner)
            lines.append(
                f"| {runner} | {_ms(s['p50'].get(runner, {}).get('1'))} | "
                f"{_ms(s['p50'].get(runner, {}).get('2'))} | "
                f"{_ms(s['first_result'].get(runner))} | "
                f"{_f(None if anon is None else anon / (1 << 20))} | "
                f"{_f(_ratio(anon, model['weight_bytes']) and 100 * anon / model['weight_bytes'])}"
                f" | {_f(None if after_run is None else after_run / (1 << 20))}"
                f" | {_f(min((a.get('cosine', 1.0) for a in acc), default=None), 7)} | "
                f"{_f(max((a.get('max_abs', 0.0) for a in acc), default=None))} | "
                f"{all(a.get('argmax_same', True) for a in acc)} |")
        cold = model.get("auto_cold", {})
        lines += ["", f"auto with a cold cache (measures every engine): first result "
                      f"{_ms(cold.get('first_result_seconds'))} ms.", "",
                  "| target | value | limit | status |", "|---|---|---|---|"]
        for key, t in s["targets"].items():
            lines.append(f"| {key} | {_f(t['value'])} | <= {t['limit']:g} | {t['status']} |")
        lines.append("")
    return "\n".join(lines) + "\n"


def run(models, quick: bool, work: Path, out_dir: Path, md_path: Path) -> dict:
    start = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - start:7.1f} s] {message}", flush=True)

    results: dict[str, Any] = {"meta": {"date": datetime.date.today().isoformat(),
                                        "quick": quick, "loadavg_start": os.getloadavg(),
                                        "machine": machine_info()}, "models": {}}
    for name in models:
        try:
            paths = prepare(name, work)
            model = bench_model(name, paths, quick, log)
            model["summary"] = summarize(model)
        except Exception as err:  # noqa: BLE001 - one broken model must not stop the run
            model = {"error": f"{type(err).__name__}: {err}"}
        results["models"][name] = model
    results["meta"]["wall_seconds"] = time.perf_counter() - start
    results["meta"]["loadavg_end"] = os.getloadavg()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"engines-{results['meta']['date']}.json").write_text(
        json.dumps(results, indent=1, default=str))
    md_path.write_text(markdown(results))
    return results


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_engines")
    parser.add_argument("--quick", action="store_true", help="one round, fewer calls")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--work", type=Path, default=WORK / "engines")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--markdown", type=Path, default=ROOT / "benchmarks" / "ENGINES.md")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    compile_rlx()
    return run(args.models.split(","), args.quick, args.work, args.out, args.markdown)


if __name__ == "__main__":
    main()
