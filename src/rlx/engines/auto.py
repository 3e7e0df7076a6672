"""`engine="auto"`: the fastest installed engine for this model on this machine.

At the first load of a file, the installed engines are built, run once (warm-up), and
timed on the same feeds (`example`, or zeros of the declared shapes: `seeded_feeds`
sizes symbolic dims), each as it will run afterwards (onnxruntime with its spinning rule,
docs/engines.md).
The candidates are timed in paired rounds of turns (`rlx.engines.turns`; a turn waits until
the threads of the candidate timed before it are parked, as they would be in a process of
its own: numpy's BLAS workers spin ~0.1 s after its calls): a burst of other work, or a load
that rises or falls during the timing, slows a candidate's turn and the reference's turn of
the same pair of rounds alike, and what is compared is their ratio; the timing goes on until
two halves of it agree on the pick, or `BUDGET_S`. Estimates within `turns.TIE` of the
lowest are a tie, won by the earliest in `PREFERENCE`. On a terminal (in logging otherwise)
auto says that it is measuring, for how long at most, and what it chose.

When the process shares its cores at the threads asked, onnxruntime is timed at the threads
that fit too (`FITTED`): beside other work a second thread pays only for calls long enough
that its share of the cores outweighs a wake-up per parallel section, which no count over
a graph with symbolic dims foretold (docs/engines.md). The entry records which won
(`when_shared`), and later loads run those threads while the cores stay shared
(`run_threads`).

The whole cold load is bounded, not the timing alone: beyond building the engine it
picks (what a load of that engine costs anyway), auto spends at most about
`COLD_BUDGET_S` on the other builds and the timing, whichever engine it picks. Until the
timing, the pick is unknown, so every build but the quickest counts. A build cannot be
cut short, so it is predicted to cost what the dearest after the first did (the first
also pays one-time imports), or the first's: the next candidate is built only when, with it,
all builds but the quickest leave `MIN_TIMING_S` of the budget; the timing then gets what
is left (at most `BUDGET_S`, at least one pair of rounds). A candidate left unbuilt is
named and cached as such; with one engine built there is nothing to time. Such a choice is
provisional: each later load builds the cached pick and measures the unbuilt candidates
beside it, within the same budget, so a busy machine, whose first builds leave no room,
still comes to measure every engine, a load at a time.

The choice is cached in
`<cache_dir>/engines.json` under a key made of the artifact's validated content
(`RlxFile.origin.key`: never read again from the path), the machine (CPU
model, core count, architecture), the engines' versions, rlx's version, threads and
precision (an engine's version: its package's install path and time); a later load builds
only the chosen engine (once none is left unbuilt, above). The cache file is read within
bounds (size, nesting) and an entry is used only when its fields have their types and name
an installed engine: anything else is a miss, measured again and overwritten (logged).
onnxruntime keeps its own prepacked copy of the model in the same folder
(`onnxruntime_engine`), so a warm load of it neither exports nor imports onnx.

`auto` never changes numerics beyond the requested precision: with "exact" every
candidate runs exact (OpenVINO with f32 inference precision); only precision="fast" lets
OpenVINO use bf16. When the numpy reference cannot run the measurement feeds (a model
whose branches need real inputs), the timings prove nothing and the first installed of
`PREFERENCE` is taken, unmeasured (logged, and cached as such). An engine that cannot take
the file is never dropped silently: why is logged as a warning, at the first load and at
every load that reads the choice from the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlx.engines import cores, turns
from rlx.engines.fingerprint import default_cache_dir, machine_id
from rlx.engines.registry import (
    available_engines,
    engine_fingerprints,
    engine_module,
    engine_versions,
)
from rlx.errors import RlxError
from rlx.logs import Logger
from rlx.safeio import JsonLimits, load_json, read_regular
from rlx.version import __version__

if TYPE_CHECKING:  # a warm load (rlx.engines.warm) imports no graph IR
    from rlx.artifact.model import RlxFile
    from rlx.ir.graph import Graph

__all__ = ["JsonCache", "choose", "cache_key", "cached_choice", "example_feeds", "BUDGET_S",
           "COLD_BUDGET_S", "MIN_TIMING_S", "PREFERENCE", "FITTED", "run_threads"]

log = Logger("rlx.engines")

BUDGET_S = 1.0  # seconds of timing for all candidates together, at most
COLD_BUDGET_S = 2.0  # seconds of builds but the chosen one's, and timing (issue 34)
MIN_TIMING_S = 0.5  # of COLD_BUDGET_S, kept for the timing when deciding to build another
PREFERENCE = ("onnxruntime", "openvino", "numpy")
FITTED = "onnxruntime at the threads that fit"
"""The candidate of onnxruntime at `cores.threads_that_fit`, timed beside onnxruntime at the
threads asked when the process shares its cores (docs/engines.md, "auto"); on a tie it
wins (fewer threads, less of the shared cores burned)."""
_TIES = (FITTED, *PREFERENCE)
_BUILT_IN = (PREFERENCE[0], FITTED, *PREFERENCE[1:])  # FITTED maps onnxruntime's saved model
_CACHE_FILE = "engines.json"


def cache_key(content: str, engines: list[str], threads: int | None, precision: str,
              memory: str = "private") -> str:
    """The engines.json key of a file's validated `content` (`RlxFile.origin.key`); the
    "shared" memory hint is a choice of its own (the private one's keys are as before)."""
    machine = machine_id()
    versions = ",".join(f"{k}={v}" for k, v in sorted(engine_fingerprints(engines).items()))
    parts = [content, machine, versions, f"rlx={__version__}", f"threads={threads}",
             precision, *(["memory=shared"] if memory == "shared" else [])]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


_MAX_CACHE_BYTES = 16 << 20  # thousands of entries; a larger file is not ours
_ENTRY_TYPES = {"engine": str, "how": str, "measured_ms": dict, "failed": dict,
                "when_shared": str}


class _Unreadable(RlxError):
    """engines.json cannot be read as rlx writes it (never seen by callers)."""


class JsonCache:
    """A JSON object of entries by key in the cache folder (`name`, engines.json for auto's
    choices), read within bounds and written atomically; `who` names its user in logs."""

    def __init__(self, folder: Path, name: str = _CACHE_FILE, who: str = "auto"):
        self.folder = folder
        self.file = folder / name
        self.who = who

    def read(self) -> dict[str, Any]:
        """The entries, or {} when the file is missing, unreadable or not rlx's (logged)."""
        if not os.path.lexists(self.file):
            return {}
        try:
            data = load_json(read_regular(self.file, _Unreadable, limit=_MAX_CACHE_BYTES),
                             _Unreadable, str(self.file), JsonLimits(max_depth=8))
        except RlxError as err:
            log.warning("%s: ignoring the cache: %s", self.who, err)
            return {}
        if not isinstance(data, dict):
            log.warning("%s: ignoring the cache %s: not an object", self.who, self.file)
            return {}
        return data

    def get(self, key: str, engines: list[str]) -> dict[str, Any] | None:
        """The entry under `key` when it is whole and names one of `engines`."""
        entry = self.read().get(key)
        if entry is None:
            return None
        if not isinstance(entry, dict) or entry.get("engine") not in engines or any(
                k in entry and not isinstance(entry[k], kind) for k, kind in _ENTRY_TYPES.items())\
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                           for v in entry.get("measured_ms", {}).values()):
            log.warning("auto: the engine cache's entry %s is damaged; measuring again", key)
            return None
        return entry

    def put(self, key: str, entry: dict[str, Any]) -> None:
        """Write atomically (temporary file + rename); a cache that cannot be written is
        only logged: the model still loads."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            data = self.read()
            data[key] = entry
            _atomic(self.file, json.dumps(data, indent=1, sort_keys=True).encode())
        except OSError as err:
            log.warning("%s: cannot write the cache %s: %s", self.who, self.file, err)


def _atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def example_feeds(graph: Graph) -> dict[str, np.ndarray]:
    """Zeros of each input's declared shape and dtype (`rlx.runtime.feeds.seeded_feeds`)."""
    from rlx.runtime.feeds import seeded_feeds

    return seeded_feeds(graph.inputs())[0]


def _measure(runners: Mapping[str, Any], feeds: Mapping[str, np.ndarray], outputs: list[str],
             clock=time.perf_counter, budget: float = BUDGET_S) -> dict[str, float]:
    """Seconds per run of each (warmed-up) runner, from paired rounds of turns timed for
    about `budget` seconds (`rlx.engines.turns`)."""
    return turns.measure(runners, feeds, outputs, clock, budget, _TIES)


def _tell(msg: str, *args: Any) -> None:
    """On a terminal, say it (auto's measurement is a wait the user should not wonder
    about); otherwise log it."""
    if sys.stderr.isatty():
        print("rlx: " + msg % args, file=sys.stderr, flush=True)
    else:
        log.info(msg, *args)


def _build(name: str, file: RlxFile, graph: Graph, path: str, threads: int | None,
           precision: str, cache_dir: str | os.PathLike | None, prepack: str, memory: str):
    return engine_module(name).build(file, graph, path, threads=threads, precision=precision,
                                     cache_dir=cache_dir, prepack=prepack, memory=memory)


def cached_choice(content: str, *, threads: int | None, precision: str,
                  cache_dir: str | os.PathLike | None = None,
                  memory: str = "private") -> dict[str, Any] | None:
    """The cache entry of auto's choice for the validated `content` (`RlxFile.origin.key`),
    machine, threads and precision (its "engine" one that is installed), or None when it
    has not chosen or the entry is damaged."""
    engines = available_engines()
    cache = JsonCache(Path(cache_dir) if cache_dir is not None else default_cache_dir())
    return cache.get(cache_key(content, engines, threads, precision, memory), engines)


@dataclass
class _WarmUp:
    """Every runner that builds (the unmeasured pick is one), those that also ran the
    feeds (the timed candidates), why the others failed (to build, or to run feeds the
    numpy reference runs), why built ones did not run feeds that may not fit the model
    (`unrun`), the seconds each took to build and run once (failed or not), and the
    candidates left unbuilt (the cold budget)."""

    built: dict[str, Any] = field(default_factory=dict)
    runners: dict[str, Any] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    unrun: dict[str, str] = field(default_factory=dict)
    warmed: dict[str, float] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    builds: dict[str, float] = field(default_factory=dict)

    @property
    def extra(self) -> float:
        """The builds' seconds beyond the chosen engine's, whichever it is: all but the
        quickest."""
        return _beyond_one(list(self.builds.values()))


def _beyond_one(seconds: list[float]) -> float:
    return sum(seconds) - min(seconds, default=0.0)


def _affords(done: _WarmUp) -> bool:
    """Whether one more build fits the cold budget whichever engine is then chosen, with
    MIN_TIMING_S left for the timing. It is taken to cost what the dearest build after the
    first did (another engine exporting and compiling the same graph; the first also
    paid one-time imports, onnx for the export), or the first's when it is the only one."""
    costs = list(done.builds.values())
    guess = max(costs[1:] or costs or [0.0])
    return _beyond_one([*costs, guess]) <= COLD_BUDGET_S - MIN_TIMING_S


def _warm_up(engines, build, feeds: dict, outputs: list[str], path: str,
             clock=time.perf_counter, always: tuple[str, ...] = ()) -> _WarmUp:
    """Build the engines in `PREFERENCE` order (`FITTED` after onnxruntime, when that
    built) and run each once (first-run allocations, lazy compiles), another only while
    the cold budget affords it (`_affords`), but for those named in `always` and `FITTED`
    over the model onnxruntime saved (`_maps_saved`)."""
    done = _WarmUp()
    order = sorted(engines, key=lambda n: _BUILT_IN.index(n) if n in _BUILT_IN else 99)
    for name in order:
        if name == FITTED and "onnxruntime" not in done.runners:
            continue  # onnxruntime's failure is told once
        if not (name in always or _maps_saved(name, done) or _affords(done)):
            done.skipped.append(name)
            continue
        start = clock()
        try:
            runner = done.built[name] = build(name)
            runner.run(dict(feeds), outputs)
            done.runners[name] = runner
            done.warmed[name] = clock() - start
            log.info("auto: %s built and run once in %.0f ms", name, done.warmed[name] * 1e3)
        except Exception as err:  # noqa: BLE001 - an engine that fails is not a candidate
            (done.unrun if name in done.built else done.failed)[name] = \
                " ".join(str(err).split())[:200]
        engine = _engine(name)  # FITTED maps onnxruntime's saved model: a part of its build
        done.builds[engine] = done.builds.get(engine, 0.0) + clock() - start
    _tell_failures(done, path)
    if done.skipped:
        _tell("auto: not building %s: over the %.1f s bound (builds took %s)",
              ", ".join(done.skipped), COLD_BUDGET_S,
              ", ".join(f"{n} {s:.1f} s" for n, s in done.builds.items()))
    return done


def _maps_saved(name: str, done: _WarmUp) -> bool:
    """Whether `name` is `FITTED` over the prepacked model onnxruntime saved: a map of it,
    not an export, a few ms where onnxruntime's first build took seconds beside other
    work (and left no room for another engine), so timed whatever the cold budget."""
    return name == FITTED and getattr(done.runners["onnxruntime"], "cached", None) is not None


def _tell_failures(done: _WarmUp, path: str) -> None:
    """Warn of the engines that cannot take the file. One that builds but fails on the
    feeds is one only when the numpy reference runs them: otherwise the feeds (zeros at
    symbolic dims of 1) may not fit the model, and that is no engine's fault (logged)."""
    if "numpy" in done.runners:
        done.failed.update(done.unrun)
    elif done.unrun:
        log.info("auto: the measurement feeds do not run on %s (%s)", ", ".join(done.unrun),
                 "; ".join(f"{n}: {why}" for n, why in done.unrun.items()))
    for name in done.failed:
        log.warning("auto: %s cannot take %s: %s", name, path, done.failed[name])


def choose(file: RlxFile, graph: Graph, path: str, *, threads: int | None, precision: str,
           cache_dir: str | os.PathLike | None = None,
           example: Mapping[str, np.ndarray] | None = None, prepack: str = "mapped",
           memory: str = "private"):
    """The runner of the engine auto picks (measuring and caching on a cold cache; a file
    with no validated content key, made in memory, is measured and not cached); with
    `memory="shared"`, among the engines that copy no more than `SHARED_LIMIT` of the
    weights into each worker (`rlx.engines.sharing`)."""
    engines = available_engines()
    cache = JsonCache(Path(cache_dir) if cache_dir is not None else default_cache_dir())
    key = cache_key(file.origin.key, engines, threads, precision, memory) \
        if file.origin is not None else None
    entry = cache.get(key, engines) if key is not None else None

    def build(name: str, at: int | None = threads):
        if name == FITTED:
            name, at = "onnxruntime", fitted
        return _build(name, file, graph, path, at, precision, cache_dir, prepack, memory)

    candidates, always = engines, ("numpy",) if memory == "shared" else ()
    if entry is not None:
        log.info("auto: %s from the cache (%s)", entry["engine"],
                 _fmt(entry.get("measured_ms", {})))
        for name, why in (entry.get("failed") or {}).items():
            log.warning("auto: %s cannot take %s (cached): %s", name, path, why)
        unbuilt = [n for n in entry.get("unbuilt") or () if n in engines]
        if not unbuilt:
            return build(entry["engine"], run_threads(entry, threads))
        # an earlier load's cold budget left candidates unbuilt: this load measures them
        # beside the cached pick, within the same budget, until none is left
        candidates, always = [entry["engine"], *unbuilt], (*always, entry["engine"])
    fitted = _fitted(threads) if "onnxruntime" in candidates else None
    if fitted is not None:
        candidates = [*candidates, FITTED]
    feeds = dict(example) if example is not None else example_feeds(graph)
    from rlx.runtime.feeds import check_feeds

    check_feeds(graph.inputs(), feeds)
    outputs = [graph.node(o).name or f"out{o}" for o in graph.outputs]
    began = time.perf_counter()
    _tell("auto: measuring %s on %s: at most %.1f s beyond building the one it picks (the "
          "choice is cached)", ", ".join(candidates), os.path.basename(path), COLD_BUDGET_S)
    # memory="shared" may leave out every engine but numpy: numpy is then always built
    w = _warm_up(candidates, build, feeds, outputs, path, always=always)
    if memory == "shared":
        _leave_out_copies(w.built, w.runners, graph)
    pick, how, measured = _pick(w, feeds, outputs)
    _tell("auto: chose %s, %s (%s), in %.1f s", pick, how, _fmt(measured),
          time.perf_counter() - began)
    runner = w.built.get(pick) or build(pick)
    if key is not None and not _kept(entry, pick, measured):
        cache.put(key, {"engine": _engine(pick), "how": how,
                        "measured_ms": measured, **_when_shared(pick, measured),
                        "failed": {**(entry or {}).get("failed", {}), **w.failed},
                        "unbuilt": [n for n in w.skipped if n != FITTED],
                        "versions": engine_versions(engines),
                        "path": os.path.abspath(path), "precision": precision,
                        "threads": threads, "memory": memory})
    return runner


def _kept(entry: Mapping[str, Any] | None, pick: str, measured: Mapping[str, float]) -> bool:
    """Whether the cached `entry` stays as it is: a later load whose budget again built no
    candidate beside the cached pick timed nothing, and keeps what earlier loads measured
    rather than overwriting it with nothing."""
    return entry is not None and not measured and _engine(pick) == entry["engine"]


def _engine(candidate: str) -> str:
    """The engine a timed candidate runs on."""
    return "onnxruntime" if candidate == FITTED else candidate


def _fitted(threads: int | None) -> int | None:
    """The fewer threads onnxruntime is timed at too (`FITTED`) when, at `threads`, the
    process shares its cores now (`cores.threads_that_fit`); None when they fit."""
    fit = cores.threads_that_fit(threads)  # `threads` itself when they fit
    return None if fit == threads else fit


def _when_shared(pick: str, measured: Mapping[str, float]) -> dict[str, str]:
    """The cache entry's record of the shared-cores timing: onnxruntime picked at the
    threads that fit, or at the threads asked with those timed beside it (`run_threads`)."""
    if FITTED not in measured or pick not in (FITTED, "onnxruntime"):
        return {}
    return {"when_shared": "threads that fit" if pick == FITTED else "threads asked"}


def run_threads(entry: Mapping[str, Any], threads: int | None) -> int | None:
    """The threads a load of auto's cached `entry` runs its engine at: when the timing found
    onnxruntime faster at the threads that fit beside other work, those that fit beside
    this load's (`cores.threads_that_fit`: the threads asked once the cores are free
    again), else `threads`."""
    if entry.get("when_shared") != "threads that fit":
        return threads
    return cores.threads_that_fit(threads)


def _leave_out_copies(built: dict[str, Any], runners: dict[str, Any], graph: Graph) -> None:
    """memory="shared": drop the engines that would copy the weights into every worker
    (never numpy, which reads them from the map, so one candidate is always left)."""
    from rlx.engines.sharing import copies_weights

    for name in [n for n, runner in built.items() if copies_weights(runner, graph)]:
        log.info("auto: memory='shared' leaves out %s (it holds %.1f MiB of the weights in "
                 "each worker)", name, built[name].private_weight_bytes / 2**20)
        built.pop(name)
        runners.pop(name, None)


def _pick(w: _WarmUp, feeds: dict, outputs: list[str]) -> tuple[str, str, dict[str, float]]:
    """(the engine, how it was chosen, the medians in ms) from what warmed up."""
    if "numpy" in w.failed or "numpy" in w.unrun or not w.runners:
        # the feeds (not the engines) fail: take the preferred engine that builds
        pick = next((n for n in PREFERENCE if n in w.built), "numpy")
        where = "the numpy reference" if "numpy" in w.failed or "numpy" in w.unrun \
            else "any engine built"
        return pick, f"unmeasured (the measurement feeds do not run on {where})", {}
    if len(w.runners) == 1:
        only = "the only candidate left" + (" within the time bound" if w.skipped else "")
        return next(iter(w.runners)), only, {}
    quickest_first = {n: w.runners[n] for n in sorted(w.runners, key=w.warmed.__getitem__)}
    budget = min(BUDGET_S, max(COLD_BUDGET_S - w.extra, 0.0))
    measured = {name: s * 1e3
                for name, s in _measure(quickest_first, feeds, outputs, budget=budget).items()}
    return _fastest(measured), "fastest", measured


def _fastest(measured: Mapping[str, float]) -> str:
    """The lowest, unless an engine earlier in `PREFERENCE` (`FITTED` before them all) is
    within `turns.TIE` of it: estimates that close are within the noise of fresh-process
    ones, and onnxruntime, first, loads warm from the header alone (`rlx.engines.warm`)."""
    return turns.pick(measured, _TIES)


def _fmt(measured: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:.3f} ms" for k, v in measured.items()) or "nothing measured"
