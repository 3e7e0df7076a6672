"""Crash safety: writers killed with SIGKILL at random moments.

Two artifacts A and B of the same size are kept as sources; each trial starts a writer
process that replaces the destination with the other one, kills it after a random delay
drawn over one and a half times the length of a write (so the kill lands in the temp file,
data, fsync, rename and folder fsync steps, or after them; the length is measured first,
and shortened whenever a writer turns out to have finished before its kill), and checks
that the destination is exactly the previous artifact or exactly the new one, and opens
with `verify="full"`. A killed writer's temp file may stay behind; the next write
to the folder must remove it (`rlx.artifact.atomic.remove_stale_temps`).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xxhash

from rlx import RlxFile
from rlx.artifact import read_rlx, write_rlx
from rlx.ir import BinaryOp, Graph, Shape
from tests.hardening.harness import ROOT

WRITER = """
import sys
from rlx.artifact import read_rlx, write_rlx
file = read_rlx(sys.argv[1], verify="none")  # a memory map: no copy of the weights
print("ready", flush=True)
sys.stdin.readline()
write_rlx(sys.argv[2], file)
print("done", flush=True)
"""
TEMP_GLOB = ".*.rlx-tmp-*"


@dataclass
class CrashReport:
    trials: int = 0
    megabytes: int = 0
    kept_old: int = 0
    got_new: int = 0
    killed: int = 0  # writers that died of the signal (the others had exited)
    most_temps: int = 0  # stray temp files seen at once
    write_seconds: float = 0.0
    wrong: list[str] = field(default_factory=list)


def make_source(path: Path, megabytes: int, seed: int) -> None:
    """An artifact of about `megabytes` MiB: one large constant times an input."""
    n = (megabytes << 20) // 4
    g = Graph("crash")
    x = g.input("x", Shape((1,)))
    w = g.constant(np.random.default_rng(seed).standard_normal(n, dtype=np.float32))
    g.set_outputs([g.binary(BinaryOp.MUL, w, x)])
    write_rlx(path, RlxFile.from_baked(g, []))


def _digest(path: Path) -> str:
    with open(path, "rb") as f:
        return xxhash.xxh3_128_hexdigest(f.read())


def _writer(source: Path, dest: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(source), str(dest)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT)
    if proc.stdout.readline().strip() != b"ready":
        raise RuntimeError("writer did not start")
    return proc


def _timed_write(source: Path, dest: Path) -> float:
    """One uninterrupted write from the moment it is told to go: the window to kill in."""
    proc = _writer(source, dest)
    start = time.perf_counter()
    proc.stdin.write(b"go\n")
    proc.stdin.flush()
    if proc.stdout.readline().strip() != b"done":
        raise RuntimeError("writer failed")
    seconds = time.perf_counter() - start
    proc.wait()
    return seconds


def run_trials(folder: Path, trials: int, megabytes: int, seed: int = 0) -> CrashReport:
    folder.mkdir(parents=True, exist_ok=True)
    sources = [folder / "a.source", folder / "b.source"]  # not *.rlx: nothing else cleans them
    for i, path in enumerate(sources):
        make_source(path, megabytes, seed * 2 + i)
    digests = [_digest(p) for p in sources]
    dest = folder / "model.rlx"
    report = CrashReport(trials=trials, megabytes=megabytes)
    # the faster of two writes: the first one also reads its source from a cold cache
    report.write_seconds = min(_timed_write(sources[i], dest) for i in (1, 0))
    window, current, rng = report.write_seconds, 0, random.Random(seed)
    for trial in range(trials):
        new = 1 - current
        proc = _writer(sources[new], dest)
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        delay = rng.uniform(0, 1.5 * window)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.returncode == -signal.SIGKILL:
            report.killed += 1
        else:  # it had finished: writes are faster than the window, which shrinks
            window = min(window, delay)
        found = _digest(dest)
        if found not in digests:
            report.wrong.append(f"trial {trial}: the destination is neither file")
            break
        read_rlx(dest, verify="full")  # the intact file also opens and verifies
        current = digests.index(found)
        report.kept_old += current != new
        report.got_new += current == new
        report.most_temps = max(report.most_temps, len(list(folder.glob(TEMP_GLOB))))
    write_rlx(dest, read_rlx(sources[0], verify="none"))  # the next write cleans up
    left = sorted(p.name for p in folder.glob(TEMP_GLOB))
    if left:
        report.wrong.append(f"temp files left after the next write: {left}")
    return report
