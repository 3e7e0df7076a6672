"""The long fuzz run behind `make fuzz`.

1. >= 100,000 cases over every file rlx reads (artifacts plain and encrypted, ONNX models,
   GGUF, safetensors, npz, npy, .rlxp, DDUF, MLX folders), mutated from the seeds and the
   corpus, judged by the contract in tests/hardening/harness.py, in parallel worker
   processes. Case i is a pure function of (seed, i) and of the worker's pool, so a run
   stopped half way resumes from
   its checkpoints in .cache/fuzz/ (a finished run, a run of other settings, or `--fresh`
   starts over). A worker that dies (a crash the harness could not catch) is restarted past the
   case that killed it, which is recorded.
2. The full-size runs: crash safety (100 writers of a 200 MiB artifact killed at random),
   10,000 random bit flips of a 64 MiB artifact per verify mode, each real model run
   from 8 threads x 200 calls against a serial run, and the races of
   tests/hardening/race.py (a second process renaming, swapping, truncating and moving the
   file) at `--races` loads per surface.
3. The summary goes to docs/fuzz-summary.json and to the marked section of
   docs/reliability.md. Cases that broke the contract join tests/hardening/corpus/ for good
   (`bug-*.bin`); of the cases that reached a check no earlier case reached (a new outcome
   signature), the 30 deepest per target replace the previous run's.

Usage: python scripts/fuzz.py [--cases 100000] [--jobs 2] [--seed 0] [--fresh]
       [--skip-long | --long-only | --races-only] [--races 1000] [--no-corpus]
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlx.errors import RlxError  # noqa: E402
from tests.hardening import concurrency, crash, flips, harness, mutate, race  # noqa: E402

STATE = ROOT / ".cache" / "fuzz"
SUMMARY = ROOT / "docs" / "fuzz-summary.json"
RELIABILITY = ROOT / "docs" / "reliability.md"
MARKERS = ("<!-- fuzz-summary:start -->", "<!-- fuzz-summary:end -->")
# cases per 26: the artifact gets the most, ONNX and GGUF are the richest parsers after it
SCHEDULE = ("rlx",) * 7 + ("onnx",) * 4 + ("gguf",) * 3 + ("safetensors",) * 2 + \
    ("npz",) * 2 + ("npy",) * 2 + ("rlxp",) * 2 + ("dduf",) * 2 + ("mlx",) * 2
assert set(SCHEDULE) == set(harness.TARGETS), "every target is fuzzed"
FULL_RUN = 100_000  # cases; smaller runs leave docs/ alone
CHECKPOINT_EVERY = 250
MAX_KEPT_BYTES = 16 << 10  # corpus files stay small
MAX_KEPT_PER_TARGET = 30


def target_of(index: int) -> harness.Target:
    return harness.TARGETS[SCHEDULE[index % len(SCHEDULE)]]


# -- one worker ------------------------------------------------------------------------------
class Worker:
    """Cases w, w + jobs, w + 2 jobs, ... below `total`; state in STATE/worker-<w>/."""

    def __init__(self, w: int, jobs: int, total: int, seed: int):
        self.w, self.jobs, self.total, self.seed = w, jobs, total, seed
        self.home = STATE / f"worker-{w}"
        self.home.mkdir(parents=True, exist_ok=True)
        self.checkpoint = self.home / "checkpoint.json"
        self.state = json.loads(self.checkpoint.read_text()) if self.checkpoint.exists() \
            else {"next": w, "cases": 0, "seconds": 0.0, "by_target": {}, "signatures": {},
                  "findings": {}, "slowest": 0.0, "mutator_errors": 0}
        self.pools = {name: harness.pool_for(t) + self._kept(name)
                      for name, t in harness.TARGETS.items()}
        self.seen = {name: set(self.state["signatures"].get(name, []))
                     for name in harness.TARGETS}

    def _kept(self, target: str) -> list[bytes]:
        return [p.read_bytes() for p in sorted((self.home / "interesting" / target).glob("*.bin"))]

    def run(self) -> None:
        workdir = self.home / "work"  # the parent finds the case that killed a worker here
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir()
        for target in harness.TARGETS.values():
            target.prepare(workdir)
        skip = set(json.loads((self.home / "skip.json").read_text())) \
            if (self.home / "skip.json").exists() else set()
        last_save = time.monotonic()
        with harness.tracing():
            index = self.state["next"]
            while index < self.total:
                if index not in skip:
                    (self.home / "current").write_text(str(index))
                    self._one(index, workdir)
                index += self.jobs
                self.state["next"] = index
                if self.state["cases"] % CHECKPOINT_EVERY == 0 or \
                        time.monotonic() - last_save > 30:
                    self._save()
                    last_save = time.monotonic()
        self._save()

    def _one(self, index: int, workdir: Path) -> None:
        target = target_of(index)
        rng = random.Random(f"{self.seed}:{index}")
        try:
            case = target.mutate(rng, self.pools[target.name])
        except Exception:  # noqa: BLE001  (a mutator tripping on an odd corpus case)
            self.state["mutator_errors"] += 1
            case = mutate.havoc(rng, rng.choice(list(target.seeds().values())))
        outcome = harness.check_case(target, case, workdir)
        state = self.state
        state["cases"] += 1
        state["seconds"] += outcome.seconds
        state["slowest"] = max(state["slowest"], outcome.seconds)
        state["by_target"][target.name] = state["by_target"].get(target.name, 0) + 1
        if outcome.signature not in self.seen[target.name]:
            self.seen[target.name].add(outcome.signature)
            state["signatures"].setdefault(target.name, []).append(outcome.signature)
            if len(case) <= MAX_KEPT_BYTES:
                self._keep("interesting", target.name, case, outcome)
                self.pools[target.name].append(case)
        if outcome.violation:  # one record per distinct signature, with a count
            key = f"{target.name} {outcome.signature}"
            if key not in state["findings"]:
                state["findings"][key] = self._keep("findings", target.name, case, outcome)
            state["findings"][key]["count"] = state["findings"][key].get("count", 0) + 1

    def _keep(self, kind: str, target: str, case: bytes, outcome: harness.Outcome) -> dict:
        folder = self.home / kind / target
        folder.mkdir(parents=True, exist_ok=True)
        name = harness.case_name(case)
        (folder / name).write_bytes(case)
        record = {"target": target, "file": str((folder / name).relative_to(ROOT)),
                  "size": len(case), "signature": outcome.signature,
                  "violation": outcome.violation, "known": harness.known_reason(outcome)}
        (folder / f"{name}.json").write_text(json.dumps({**record, "detail": outcome.detail}))
        return record

    def _save(self) -> None:
        partial = self.checkpoint.with_suffix(".part")
        partial.write_text(json.dumps(self.state))
        partial.replace(self.checkpoint)


def _work(w: int, jobs: int, total: int, seed: int) -> None:
    logging.disable(logging.WARNING)  # the passes' notes about damaged graphs are expected
    Worker(w, jobs, total, seed).run()


# -- the parent ------------------------------------------------------------------------------
def fuzz(total: int, jobs: int, seed: int) -> dict:
    """Run the workers to the end, restarting any that die; returns their merged state."""
    run_file = STATE / "run.json"
    settings = {"cases": total, "jobs": jobs, "seed": seed}
    # resume an interrupted run of the same settings; otherwise start over
    if run_file.exists() and (json.loads(run_file.read_text()) != settings
                              or _finished(jobs, total)):
        shutil.rmtree(STATE)
    STATE.mkdir(parents=True, exist_ok=True)
    run_file.write_text(json.dumps(settings))
    started = time.monotonic()
    context = multiprocessing.get_context("fork")
    procs = {w: context.Process(target=_work, args=(w, jobs, total, seed)) for w in range(jobs)}
    for proc in procs.values():
        proc.start()
    crashes = []
    while procs:
        time.sleep(5)
        for w, proc in list(procs.items()):
            if proc.is_alive():
                continue
            if proc.exitcode == 0:
                del procs[w]
                continue
            crashes.append(_record_crash(w, proc.exitcode))
            procs[w] = context.Process(target=_work, args=(w, jobs, total, seed))
            procs[w].start()
        _progress(total, time.monotonic() - started)
    merged = _merge(jobs)
    merged["findings"].extend(crashes)
    merged["wall_seconds"] = round(time.monotonic() - started, 1)
    return merged


def _finished(jobs: int, total: int) -> bool:
    checkpoints = [STATE / f"worker-{w}" / "checkpoint.json" for w in range(jobs)]
    return all(p.exists() and json.loads(p.read_text())["next"] >= total for p in checkpoints)


def _record_crash(w: int, exitcode: int) -> dict:
    """A worker died inside a case: keep that case and skip it on restart."""
    home = STATE / f"worker-{w}"
    index = int((home / "current").read_text())
    target = target_of(index)
    case = home / "work" / f"case{target.suffix}"
    record = {"target": target.name, "file": None, "size": None, "count": 1,
              "signature": f"worker died (exit code {exitcode})",
              "violation": f"process died on case {index}", "known": None}
    if case.exists():
        kept = home / "findings" / target.name / harness.case_name(case.read_bytes())
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(case, kept)
        record.update(file=str(kept.relative_to(ROOT)), size=kept.stat().st_size)
    skip_file = home / "skip.json"
    skip = json.loads(skip_file.read_text()) if skip_file.exists() else []
    skip_file.write_text(json.dumps(sorted({*skip, index})))
    print(f"worker {w} died (exit {exitcode}) on case {index}; restarting", flush=True)
    return record


def _progress(total: int, seconds: float) -> None:
    done = sum(json.loads(p.read_text())["cases"] for p in STATE.glob("worker-*/checkpoint.json"))
    rate = done / seconds if seconds else 0
    print(f"{done}/{total} cases, {seconds:.0f} s, {rate:.0f}/s", flush=True)


def _merge(jobs: int) -> dict:
    states = [json.loads((STATE / f"worker-{w}" / "checkpoint.json").read_text())
              for w in range(jobs)]
    by_target: Counter = Counter()
    signatures: dict[str, set] = {}
    findings: dict[str, dict] = {}
    for state in states:
        for key, record in state["findings"].items():
            if key in findings:
                findings[key]["count"] += record["count"]
            else:
                findings[key] = dict(record)
        by_target.update(state["by_target"])
        for name, sigs in state["signatures"].items():
            signatures.setdefault(name, set()).update(sigs)
    return {
        "cases": sum(s["cases"] for s in states),
        "cases_by_target": dict(sorted(by_target.items())),
        "case_seconds": round(sum(s["seconds"] for s in states), 1),
        "slowest_case_seconds": round(max(s["slowest"] for s in states), 3),
        "signatures_by_target": {k: len(v) for k, v in sorted(signatures.items())},
        "mutator_errors": sum(s["mutator_errors"] for s in states),
        "findings": list(findings.values()),
    }


# stages a case can reach, by how much of the code behind the first checks they exercise
DEPTH = {"ran:ok": 4, "run": 3, "compile": 2, "feed": 2, "too-big": 2, "bake": 1, "use": 1,
         "=ok": 2}


def depth(signature: str) -> int:
    return sum(weight for token, weight in DEPTH.items() if token in signature)


def merge_corpus() -> dict[str, int]:
    """Findings join the corpus for good (`bug-*.bin`); the other cases are replaced by this
    run's best: one per signature, the deepest first, then the smallest."""
    added: Counter = Counter()
    for name in sorted(set(SCHEDULE)):  # a target this run did not fuzz keeps its cases
        folder = harness.CORPUS / name
        folder.mkdir(parents=True, exist_ok=True)
        for finding in STATE.glob(f"worker-*/findings/{name}/*.bin"):
            kept = folder / f"bug-{finding.name}"
            if not kept.exists() and finding.stat().st_size <= 4 * MAX_KEPT_BYTES:
                shutil.copy(finding, kept)
                added[name] += 1
        best: dict[str, Path] = {}
        for case in STATE.glob(f"worker-*/interesting/{name}/*.bin"):
            signature = json.loads(case.with_suffix(".bin.json").read_text())["signature"]
            if signature not in best or case.stat().st_size < best[signature].stat().st_size:
                best[signature] = case
        chosen = sorted(best.items(), key=lambda kv: (-depth(kv[0]), kv[1].stat().st_size))
        for old in folder.glob("[!b]*.bin"):
            old.unlink()
        for _, case in chosen[:MAX_KEPT_PER_TARGET]:
            shutil.copy(case, folder / case.name)
            added[name] += 1
    return dict(added)


def race_runs(loads: int, seed: int) -> dict:
    """Every race surface `loads` times; the CPU seconds include the swapping process."""
    import resource

    out = {}
    for surface in race.SURFACES:
        before = _cpu(resource)
        report = race.race(surface, loads, seed=seed)
        out[surface] = {**report.as_dict(), "cpu_seconds": round(_cpu(resource) - before, 1)}
        print(f"race {surface}: {dict(report.outcomes)}, {len(report.violations)} "
              f"violations", flush=True)
    return out


def _cpu(resource) -> float:
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                          resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def long_runs(races: int, seed: int) -> dict:
    """The full-size crash-safety, bit-flip, concurrency and race runs."""
    out = {"races": race_runs(races, seed)}
    with tempfile.TemporaryDirectory(prefix="rlx-crash-") as tmp:
        start = time.monotonic()
        report = crash.run_trials(Path(tmp), trials=100, megabytes=200)
        out["crash_safety"] = {**vars(report), "seconds": round(time.monotonic() - start, 1)}
    start = time.monotonic()
    data = flips.large_artifact(64)
    report = flips.flip_bits(data, flips.random_bits(data, 10_000))
    out["bit_flips"] = {"artifact_bytes": len(data), "flips": report.flips,
                        "wrong": report.wrong[:20], "seconds": round(time.monotonic() - start, 1)}
    out["threads"] = {}
    with tempfile.TemporaryDirectory(prefix="rlx-threads-") as tmp:
        for name in ("minilm-l3", "ppocr-cls", "silero-vad"):
            start = time.monotonic()
            try:
                compiled = concurrency.compiled_model(name, Path(tmp))
            except RlxError as err:
                out["threads"][name] = {"error": str(err)[:300]}
                continue
            problems = concurrency.run_threads(compiled, name, threads=8, calls=200)
            out["threads"][name] = {"threads": 8, "calls": 200, "problems": problems[:20],
                                    "seconds": round(time.monotonic() - start, 1)}
    return out


def write_summary(summary: dict) -> None:
    """A full run's summary goes to docs/ (JSON, and the section of reliability.md); a
    smaller one (a smoke test) only to .cache/fuzz/summary.json."""
    if summary["cases"] < FULL_RUN:
        (STATE / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return
    SUMMARY.write_text(json.dumps(summary, indent=2) + "\n")
    text = RELIABILITY.read_text()
    start, end = (text.find(m) for m in MARKERS)
    if start >= 0 and end >= 0:
        RELIABILITY.write_text(text[:start + len(MARKERS[0])] + "\n" + render(summary)
                               + text[end:])


def race_lines(s: dict) -> list[str]:
    """One line per race surface of a summary."""
    return [f"- race, {name}: {r['iterations']:,} loads while a second process swapped the "
            f"file {sum(r['swaps'].values()):,} times: "
            + ", ".join(f"{k} {v:,}" for k, v in sorted(r["outcomes"].items()))
            + f"; {len(r['violations'])} violations ({r['cpu_seconds']:.0f} s CPU)"
            for name, r in s.get("races", {}).items()]


def render(s: dict) -> str:
    """The figures of the last run, as the Markdown section of docs/reliability.md."""
    violations = sum(f["count"] for f in s["findings"])
    known = sum(1 for f in s["findings"] if f["known"])
    lines = [
        f"Last `make fuzz` run ({s['date']}, seed {s['seed']}, {s['jobs']} processes):",
        "",
        (f"- cases: **{s['cases']:,}** in {s['wall_seconds']:.0f} s wall "
         f"({s['case_seconds']:.0f} s of CPU inside cases; slowest case "
         f"{s['slowest_case_seconds']:.2f} s)"),
        "- by target: " + ", ".join(f"{k} {v:,}" for k, v in s["cases_by_target"].items()),
        "- distinct outcome signatures: "
        + ", ".join(f"{k} {v}" for k, v in s["signatures_by_target"].items()),
        (f"- contract violations: **{violations}** cases, {len(s['findings'])} distinct "
         f"({known} of them known-open)"),
    ]
    for f in s["findings"][:25]:
        lines.append(f"  - {f['target']} x{f['count']}: {f['violation'][:160]} "
                     f"[`{f['signature'][:120]}`]")
    if "crash_safety" in s:
        c = s["crash_safety"]
        lines.append(f"- crash safety: {c['trials']} writers of a {c['megabytes']} MiB "
                     f"artifact killed at random ({c['killed']} while still running): "
                     f"{c['kept_old']} left the previous file, {c['got_new']} the new one, "
                     f"{len(c['wrong'])} anything else; at most {c['most_temps']} stray "
                     f"temp file at a time, none after the next write ({c['seconds']:.0f} s)")
    lines += race_lines(s)
    for name, t in s.get("threads", {}).items():
        lines.append(f"- threads, {name}: " + (f"not run ({t['error'][:100]})" if "error" in t
                     else f"8 threads x {t['calls']} calls, {len(t['problems'])} results "
                          f"differing from the serial run ({t['seconds']:.0f} s)"))
    if "bit_flips" in s:
        b = s["bit_flips"]
        where = ", ".join(f"{n:,} {k.replace('/', ' with ')}" for k, n in b["flips"].items())
        lines.append(f"- bit flips: {sum(b['flips'].values()):,} checks of random flips in a "
                     f"{b['artifact_bytes'] >> 20} MiB artifact ({where}): "
                     f"{len(b['wrong'])} not as promised ({b['seconds']:.0f} s)")
    if s.get("corpus_added"):
        lines.append("- copied to the corpus: " + ", ".join(
            f"{k} {v}" for k, v in sorted(s["corpus_added"].items())))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=FULL_RUN)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fresh", action="store_true", help="discard saved progress")
    parser.add_argument("--skip-long", action="store_true",
                        help="no crash-safety or bit-flip runs")
    parser.add_argument("--no-corpus", action="store_true", help="leave the corpus alone")
    parser.add_argument("--long-only", action="store_true",
                        help="only the long runs, added to the last summary")
    parser.add_argument("--races", type=int, default=1000, help="loads per race surface")
    parser.add_argument("--races-only", action="store_true",
                        help="only the races; their report goes to .cache/fuzz/races.json")
    args = parser.parse_args()
    if args.fresh:
        shutil.rmtree(STATE, ignore_errors=True)
    if args.races_only:
        STATE.mkdir(parents=True, exist_ok=True)
        races = {"races": race_runs(args.races, args.seed)}
        (STATE / "races.json").write_text(json.dumps(races, indent=2) + "\n")
        print("\n".join(race_lines(races)))
        return
    if args.long_only:
        summary = json.loads(SUMMARY.read_text())  # the last full run's
    else:
        summary = {"date": time.strftime("%Y-%m-%d"), "seed": args.seed, "jobs": args.jobs,
                   **fuzz(args.cases, args.jobs, args.seed)}
        if not args.no_corpus:
            summary["corpus_added"] = merge_corpus()
    if not args.skip_long:
        summary.update(long_runs(args.races, args.seed))
    write_summary(summary)
    print(render(summary))


if __name__ == "__main__":
    main()
