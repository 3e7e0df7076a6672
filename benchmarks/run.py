"""Runtime benchmark (issue 7): rlx against onnxruntime and onnx.reference, in one run, on the
real models of ../shared/MODELS.md and the demo MLP.

    make bench                     # or: .venv/bin/python -m benchmarks.run [--quick] [--models a,b]

Per model: bake time per profile and file size per profile and memory mode (against the ONNX
file); time to ready, time to first result and RSS at load in each memory mode (against
InferenceSession); latency p50 / p90 at 1 and 2 threads (against onnxruntime with the same
intra-op threads, and onnx.reference), and the baked exact artifact against the unbaked
(merge) graph. Then Q8_0 / TQ2_0 quantisation throughput against the gguf package, on each
model's weights and on a synthetic array. Every measurement runs in a fresh process, and rlx
alternates with what it is compared to, so that drift of the machine hits both alike.

Writes results/<date>.json (every raw number and the machine), results/<date>.png (ratios
per model) and RESULTS.md (ratios and targets first, then the details). Before it, unless
told otherwise: the engines benchmark (ENGINES.md) and the Ray ones (RAY.md: shared memory
of N workers, bench_ray.py; the serving load test, bench_serve.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import report
from benchmarks.common import ROOT, WORK, machine_info, run_probe, summarize_load, summarize_times
from benchmarks.models import MODEL_NAMES, QUANT_ROW, BenchModel, prepare

PROFILES = ("merge", "fold", "exact", "size")
MEMORIES = ("duplex", "runtime", "compact")
CODECS = ("q8_0", "tq2_0")
LATENCY_RUNS = ("rlx-exact", "onnxruntime", "rlx-merge", "onnx.reference")
PROFILE_TOP = 6  # op types listed per model in "where the time goes"
MAX_STORED_TIMES = 1000  # beyond this many calls, the JSON keeps percentiles 0..100


@dataclass(frozen=True)
class Plan:
    """How much to measure. The defaults aim at stable medians; `quick()` is for iterating."""

    threads: tuple[int, ...] = (1, 2)
    rounds: int = 2  # alternating latency / quantisation probes per runtime
    load_repeats: int = 3
    warmup: int = 3  # calls before timing, the first included
    min_calls: int = 20  # latency: at least this many calls ...
    min_seconds: float = 1.0  # ... and at least this long
    ref_calls: int = 3  # onnx.reference is slow: a few calls, one probe
    too_slow: float = 3.0  # seconds per onnx.reference call beyond which it is skipped
    bake_calls: int = 3
    bake_seconds: float = 0.5
    quant_calls: int = 3
    quant_seconds: float = 1.0
    synthetic: int = 1 << 24  # values of the synthetic quantisation array (0: none)
    profile_runs: int = 20  # runs of the per-op profile (medians per node)

    @classmethod
    def quick(cls) -> Plan:
        return cls(rounds=1, load_repeats=1, warmup=1, min_calls=5, min_seconds=0.2,
                   ref_calls=1, bake_calls=1, bake_seconds=0.0, quant_calls=1,
                   quant_seconds=0.0, synthetic=1 << 20, profile_runs=5)


    def calls(self, slow: bool) -> dict[str, Any]:
        """Latency probe settings: a slow runtime (onnx.reference) gets a few calls, and is
        skipped when one call takes longer than `too_slow`."""
        if slow:
            return {"warmup": 1, "min_calls": self.ref_calls, "min_seconds": 0.0,
                        "too_slow": self.too_slow}
        return {"warmup": self.warmup, "min_calls": self.min_calls,
                    "min_seconds": self.min_seconds, "too_slow": None}


Job = tuple[str, Callable[[], dict], int]  # label, measurement, how many rounds at most


def _failed(label: str, error: str) -> Job:
    """A job standing for a measurement that cannot run (e.g. the model did not import)."""
    return label, lambda: {"error": error}, 1


def alternate(rounds: int, jobs: Sequence[Job]) -> dict[str, list[dict]]:
    """Run the jobs round-robin for `rounds` rounds, so each rlx measurement sits next to
    the one it is compared with; a job that failed or was skipped is not run again."""
    runs: dict[str, list[dict]] = {label: [] for label, _, _ in jobs}
    for round_ in range(rounds):
        for label, measure, limit in jobs:
            done = runs[label]
            if round_ < limit and not (done and _stopped(done[-1])):
                done.append(measure())
    return runs


def _stopped(result: dict) -> bool:
    return "error" in result or "skipped" in result


def finish(runs: dict[str, list[dict]],
           summarize: Callable[[list[dict]], dict]) -> dict[str, dict]:
    """Each label's summary, or its error / skip record when a run stopped it."""
    return {label: next((r for r in done if _stopped(r)), None) or summarize(done)
            for label, done in runs.items()}


def pool_latency(runs: list[dict]) -> dict:
    """Percentiles over the calls of every round, with each round's own p50 kept. A fast
    model makes tens of thousands of calls in a second: then every percentile is stored
    rather than every call."""
    times = [t for r in runs for t in r["times"]]
    stored = {"times": times} if len(times) <= MAX_STORED_TIMES else {
        "time_percentiles": [min(times), *statistics.quantiles(times, n=100,
                                                               method="inclusive"),
                             max(times)]}
    return {**summarize_times(times), **stored, "round_p50": [r["p50"] for r in runs],
            "first_call_seconds": runs[0]["first_call_seconds"],
            "blas_limited": all(r["blas_limited"] for r in runs)}


class Bench:
    """One benchmark run: the plan, where files go, and a progress log."""

    def __init__(self, plan: Plan, work: Path):
        self.plan, self.work = plan, work
        self.start = time.perf_counter()

    def log(self, message: str) -> None:
        print(f"[{time.perf_counter() - self.start:7.1f} s] {message}", flush=True)

    def probe(self, what: str, name: str, **kwargs: Any) -> dict:
        self.log(what)
        result = run_probe(name, **kwargs)
        if "error" in result:
            self.log(f"  failed: {result['error']}")
        return result

    def model(self, model: BenchModel) -> dict:
        out: dict[str, Any] = {"onnx": str(model.onnx), "onnx_bytes": model.onnx.stat().st_size,
                               "weight_bytes": model.weight_bytes}
        out["import"] = self.probe(f"{model.name}: rlx import", "import_model",
                                   source=model.source)
        rlx_error = out["import"].get("error")
        folder = self.work / model.name
        folder.mkdir(parents=True, exist_ok=True)
        out["bake"] = {p: {"error": rlx_error} if rlx_error else self.bake(model, p, folder)
                       for p in PROFILES}
        out["load"] = self.load(model, folder, rlx_error)
        out["latency"] = {str(t): self.latency(model, folder, t, rlx_error)
                          for t in self.plan.threads}
        out["agreement"] = agreement(folder, out["latency"], self.plan.threads[0])
        out["profile"] = {"error": rlx_error} if rlx_error else self.probe(
            f"{model.name}: profile exact x1", "profile",
            path=str(folder / "exact-compact.rlx"), feeds=str(model.feeds), threads=1,
            repeat=self.plan.profile_runs, top=PROFILE_TOP)
        return out

    def bake(self, model: BenchModel, profile: str, folder: Path) -> dict:
        return self.probe(f"{model.name}: bake {profile}", "bake", source=model.source,
                          profile=profile, memories=list(MEMORIES), out_dir=str(folder),
                          min_calls=self.plan.bake_calls, min_seconds=self.plan.bake_seconds)

    def load(self, model: BenchModel, folder: Path, rlx_error: str | None) -> dict:
        def job(label: str, runtime: str, path: Path) -> Job:
            if runtime == "rlx" and rlx_error:
                return _failed(label, rlx_error)
            return label, lambda: self.probe(f"{model.name}: load {label}", "load",
                                             runtime=runtime, path=str(path),
                                             feeds=str(model.feeds)), self.plan.load_repeats

        jobs = [j for memory in MEMORIES for j in (
            job(f"rlx-{memory}", "rlx", folder / f"exact-{memory}.rlx"),
            job("onnxruntime", "onnxruntime", model.onnx))]
        return finish(alternate(self.plan.load_repeats, jobs),
                      lambda runs: {**summarize_load(runs), "raw": runs})

    def latency(self, model: BenchModel, folder: Path, threads: int,
                rlx_error: str | None) -> dict:
        """rlx-exact, onnxruntime, rlx-merge, onnx.reference in turn, `rounds` times (the
        slow onnx.reference once, with a few calls)."""
        paths = {"rlx-exact": folder / "exact-compact.rlx",
                 "rlx-merge": folder / "merge-compact.rlx"}

        def job(label: str) -> Job:
            runtime = "rlx" if label in paths else label
            if runtime == "rlx" and rlx_error:
                return _failed(label, rlx_error)
            slow = runtime == "onnx.reference"
            kwargs = dict(runtime=runtime, path=str(paths.get(label, model.onnx)),
                          feeds=str(model.feeds), threads=threads,
                          out=str(folder / f"out-{label}-{threads}.npz"),
                          **self.plan.calls(slow))
            return label, lambda: self.probe(
                f"{model.name}: latency {label} x{threads}", "latency", **kwargs), \
                1 if slow else self.plan.rounds

        return finish(alternate(self.plan.rounds, [job(label) for label in LATENCY_RUNS]),
                      pool_latency)

    def quant(self, models: Sequence[BenchModel]) -> dict:
        """Q8_0 on each model's weights and on random values; TQ2_0 on their ternarised
        forms (TQ2_0 is lossless only on ternary data), rlx and gguf alternating."""
        from rlx.models import ternarize

        folder = self.work / "quant"
        folder.mkdir(parents=True, exist_ok=True)
        arrays = {f"{m.name} weights": m.weight_rows for m in models if m.weight_rows.size}
        rng = np.random.default_rng(0)
        n = self.plan.synthetic // QUANT_ROW * QUANT_ROW
        if n:
            arrays[f"random {n:,} values"] = rng.standard_normal(n, np.float32).reshape(
                -1, QUANT_ROW)
        out: dict[str, dict] = {}
        for name, rows in arrays.items():
            ternary = rng.integers(-1, 2, rows.shape).astype(np.float32) \
                if name.startswith("random") else ternarize(rows)
            out[name] = {codec: self.quant_codec(name, codec, data, folder)
                         for codec, data in zip(CODECS, (rows, ternary))}
        return out

    def quant_codec(self, name: str, codec: str, data: np.ndarray, folder: Path) -> dict:
        path = folder / f"{name.replace(' ', '_').replace(',', '')}-{codec}.npy"
        np.save(path, data)

        def job(impl: str) -> Job:
            return impl, lambda: self.probe(
                f"quantise {name} {codec} with {impl}", "quantize", array=str(path),
                codec=codec, impl=impl, min_calls=self.plan.quant_calls,
                min_seconds=self.plan.quant_seconds), self.plan.rounds

        def pool(runs: list[dict]) -> dict:
            times = [t for r in runs for t in r["times"]]
            seconds = summarize_times(times)["p50"]
            return {"seconds": seconds, "values_per_second": data.size / seconds,
                    "times": times, "sha256": runs[0]["sha256"]}

        result = finish(alternate(self.plan.rounds, [job("rlx"), job("gguf")]), pool)
        out: dict[str, Any] = {"values": int(data.size), **result}
        if not any(_stopped(r) for r in result.values()):
            out["ratio"] = result["rlx"]["values_per_second"] / result["gguf"]["values_per_second"]
            out["identical"] = result["rlx"]["sha256"] == result["gguf"]["sha256"]
        return out


def agreement(folder: Path, latency: dict[str, dict], threads: int) -> dict[str, Any]:
    """Largest absolute difference of each runtime's outputs from onnxruntime's, on the
    same inputs (a benchmark of wrong answers would be worthless)."""
    measured = latency[str(threads)]
    if _stopped(measured["onnxruntime"]):
        return {}

    def outputs(label: str) -> list[np.ndarray]:
        with np.load(folder / f"out-{label}-{threads}.npz") as data:
            return [data[k] for k in sorted(data.files, key=lambda k: int(k.split("_")[1]))]

    expected = outputs("onnxruntime")
    out: dict[str, Any] = {}
    for label in LATENCY_RUNS:
        if label == "onnxruntime" or _stopped(measured[label]):
            continue
        got = outputs(label)
        if [g.shape for g in got] != [e.shape for e in expected]:
            out[label] = "output shapes differ"
        else:
            out[label] = max((float(np.max(np.abs(g.astype(np.float64) - e), initial=0.0))
                              for g, e in zip(got, expected)), default=0.0)
    return out


def dump_json(results: dict) -> str:
    """Indented JSON with each list of numbers on one line (there are thousands of call
    durations)."""
    text = json.dumps(results, indent=1)
    return re.sub(r"\[\s+([-\d.e+,\s]+?)\s+\]",
                  lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text) + "\n"


def _csv(kind: Callable[[str], Any], choices: Sequence | None = None):
    """An argparse type for a non-empty comma-separated list (of `choices`, when given)."""
    def parse(text: str) -> tuple:
        items = tuple(kind(t.strip()) for t in text.split(",") if t.strip())
        if not items or (choices is not None and not set(items) <= set(choices)):
            among = f" from {', '.join(choices)}" if choices is not None else ""
            raise argparse.ArgumentTypeError(f"expected a comma-separated list{among}")
        return items
    return parse


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer repetitions and a smaller synthetic array, for iterating")
    parser.add_argument("--models", type=_csv(str, MODEL_NAMES), default=MODEL_NAMES,
                        help=f"comma-separated, from: {','.join(MODEL_NAMES)}")
    parser.add_argument("--threads", type=_csv(int), default=(1, 2),
                        help="thread counts for latency (default 1,2)")
    parser.add_argument("--synthetic", type=int, default=None,
                        help="values in the synthetic quantisation array (0: none)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results",
                        help="folder for <date>.json and <date>.png")
    parser.add_argument("--markdown", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")
    parser.add_argument("--work", type=Path, default=WORK, help="folder for artifacts")
    parser.add_argument("--date", default=datetime.date.today().isoformat())
    parser.add_argument("--engines", choices=("yes", "no", "only"), default="yes",
                        help="also run the engines benchmark (benchmarks/bench_engines.py, "
                             "ENGINES.md), or only it")
    parser.add_argument("--ray", choices=("yes", "no", "only"), default="yes",
                        help="also run the Ray benchmarks (bench_ray.py: shared memory; "
                             "bench_serve.py: the loopback load test; RAY.md), or only them")
    return parser.parse_args(argv)


def ray_benchmarks(quick: bool, markdown: Path) -> dict[str, Any]:
    """Shared memory of N Ray workers and the serving load test, both into `markdown`."""
    from benchmarks import bench_ray, bench_serve

    memory = bench_ray.main(["--workers", "2"] if quick else [])
    serving = bench_serve.main(["--requests", "200", "--models", "silero-vad"] if quick
                               else [])
    markdown.write_text(ray_markdown(memory, serving))
    return {"memory": memory, "serving": serving}


def ray_markdown(memory: dict[str, Any], serving: dict[str, Any]) -> str:
    """RAY.md from the two benchmarks' results (as their JSON files hold them)."""
    from benchmarks import bench_ray, bench_serve

    return (
        "# Ray: shared memory and serving\n\n"
        "Written by `make bench` (`python -m benchmarks.run`; `--ray only` runs just these, "
        "and each script runs alone too). Raw numbers and the machine: "
        f"`results/ray-memory-{memory['date']}.json`, `results/serve-{serving['date']}.json`."
        "\n\n## Anonymous memory per Ray worker at load\n\n"
        "`python -m benchmarks.bench_ray`: N actors load the same file at once, after a "
        "warm-up load of a tiny model on the same engine; target: <= "
        f"{bench_ray.TARGET:.0%} of the weight bytes with the numpy engine. The last column "
        "is the artifact's pages each worker has resident and its proportional share of them "
        "(Pss): shared pages count 1/N.\n\n"
        f"{bench_ray.table(memory)}\n\n## Load test on loopback\n\n`{serving['command']}`"
        "\n\n" + bench_serve.__doc__.split("\n\n", 2)[2].strip() + "\n\n"
        f"{bench_serve.table(serving)}\n")


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.ray != "no":
        ray_results = ray_benchmarks(args.quick, ROOT / "benchmarks" / "RAY.md")
        if args.ray == "only":
            return ray_results
    if args.engines != "no":
        from benchmarks import bench_engines

        engines = bench_engines.main(["--quick"] if args.quick else [])
        if args.engines == "only":
            return engines
    plan = Plan.quick() if args.quick else Plan()
    plan = dataclasses.replace(plan, threads=args.threads, synthetic=plan.synthetic
                               if args.synthetic is None else args.synthetic)
    bench = Bench(plan, args.work)
    results: dict[str, Any] = {
        "meta": {"date": args.date, "command": " ".join(
                     ["python -m benchmarks.run", *(sys.argv[1:] if argv is None else argv)]),
                 "quick": args.quick, "plan": dataclasses.asdict(plan),
                 "loadavg_start": os.getloadavg()},
        "machine": machine_info(), "models": {}}
    prepared = []
    for name in args.models:
        bench.log(f"{name}: prepare")
        try:
            prepared.append(prepare(name, args.work))
        except (RuntimeError, OSError) as err:
            results["models"][name] = {"error": f"{type(err).__name__}: {err}"}
    for model in prepared:
        results["models"][model.name] = bench.model(model)
    results["quant"] = bench.quant(prepared)
    results["meta"]["wall_seconds"] = time.perf_counter() - bench.start
    results["meta"]["loadavg_end"] = os.getloadavg()
    results["summary"] = report.summarize(results)
    args.out.mkdir(parents=True, exist_ok=True)
    json_path, png_path = args.out / f"{args.date}.json", args.out / f"{args.date}.png"
    json_path.write_text(dump_json(results))
    chart = report.chart(results, png_path)
    args.markdown.write_text(report.markdown(results, args.markdown.parent, json_path, chart))
    bench.log(f"wrote {json_path}, {args.markdown}" + (f", {chart}" if chart else ""))
    return results


if __name__ == "__main__":
    main()
