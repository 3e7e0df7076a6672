"""What the benchmarks share: running one measurement in a fresh process, timing repeated
calls, reading memory counters from /proc, describing the machine, and formatting numbers.

This module imports nothing but the standard library at the top, so a measurement process
that imports it holds only the libraries it measures.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Artifacts, feeds and outputs of a run: bulky and rebuilt every time, so under the
# git-ignored cache rather than next to the committed results.
WORK = ROOT / ".cache" / "benchmarks"
PROBE_CODE = "from benchmarks.probes import main; main()"
PROBE_TIMEOUT = 1800.0  # seconds; a hung measurement must not hang the whole run


def proc_status() -> dict[str, int]:
    """Resident-set counters of this process in bytes (VmHWM = peak, RssAnon, RssFile)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
    return out


def in_fresh_process(code: str, *args: str, timeout: float | None = None) -> dict:
    """Run `code` in a new interpreter (so caches and allocations do not leak between
    measurements); it must print one JSON object as its last line."""
    try:
        done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                              text=True, cwd=ROOT, check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"measurement failed:\ntimed out after {timeout:.0f} s") from None
    if done.returncode:
        raise RuntimeError(f"measurement failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_probe(name: str, **kwargs: Any) -> dict:
    """Run the probe `name` of benchmarks/probes.py in a fresh process. A failure comes back
    as {"error": its last line} so that one broken model or runtime does not stop a run."""
    try:
        return in_fresh_process(PROBE_CODE, name, json.dumps(kwargs), timeout=PROBE_TIMEOUT)
    except RuntimeError as err:
        lines = [line for line in str(err).splitlines() if line.strip()]
        return {"error": lines[-1].strip()}


def time_calls(call: Callable[[], object], min_calls: int, min_seconds: float) -> list[float]:
    """Durations of back-to-back calls, until both `min_calls` calls and `min_seconds` of
    calls are done: enough samples for a stable median whether a call is fast or slow."""
    times: list[float] = []
    while len(times) < min_calls or sum(times) < min_seconds:
        start = time.perf_counter()
        call()
        # 0.1 us is far below the noise of a call and keeps the raw numbers short.
        times.append(round(time.perf_counter() - start, 7))
    return times


def summarize_times(times: Sequence[float]) -> dict[str, float | int]:
    """p50, p90 (linear interpolation), mean and min of call durations in seconds."""
    p90 = statistics.quantiles(times, n=10, method="inclusive")[8] if len(times) > 1 \
        else times[0]
    return {"p50": statistics.median(times), "p90": p90, "mean": statistics.fmean(times),
            "min": min(times), "calls": len(times)}


def summarize_load(runs: Sequence[dict]) -> dict[str, float | int]:
    """Medians over repeated load measurements: seconds to ready (and to the first result
    when measured), peak RSS at ready, growth of anonymous and file-backed RSS, and of
    anonymous RSS for a second load of the same model."""
    def median(get: Callable[[dict], float]) -> float:
        return statistics.median(get(r) for r in runs)

    out = {"seconds": median(lambda r: r["seconds"]),
           "peak": median(lambda r: r["after"]["VmHWM"]),
           "RssAnon": median(lambda r: r["after"]["RssAnon"] - r["before"]["RssAnon"]),
           "RssFile": median(lambda r: r["after"]["RssFile"] - r["before"]["RssFile"]),
           "runs": len(runs)}
    if all("second" in r for r in runs):  # the same model made ready again: per-model cost
        out["second_RssAnon"] = median(lambda r: r["second"]["RssAnon"] - r["after"]["RssAnon"])
    if all("first_result_seconds" in r for r in runs):
        out["first_result_seconds"] = median(lambda r: r["first_result_seconds"])
    return out


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    """CPU, cores, library versions and the BLAS numpy uses (the numbers depend on all)."""
    import numpy as np

    info: dict[str, Any] = {
        "cpu": _cpu_model(), "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)), "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": {p: _version(p) for p in ("rlx", "numpy", "onnxruntime", "onnx", "gguf",
                                              "threadpoolctl", "matplotlib")},
        "numpy_config": np.show_config(mode="dicts")["Build Dependencies"],
    }
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        info["threadpools"] = None
    else:
        info["threadpools"] = threadpool_info()
    return info


def mib(n: float) -> str:
    return f"{n / (1 << 20):.1f}"


def save_results(results: dict[str, Any], text: str, folder: Path, name: str) -> dict[str, Any]:
    """Print a benchmark's markdown, write its results as `folder/name.json`, and return
    them with the markdown added (what benchmarks/run.py collects)."""
    print(text)
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{name}.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    results["markdown"] = text
    print(f"wrote {out}")
    return results
