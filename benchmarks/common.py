"""What the benchmarks share: running one measurement in a fresh process, reading memory
counters from /proc, and formatting ratios."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "benchmarks" / ".work"


def proc_status() -> dict[str, int]:
    """Resident-set counters of this process in bytes (VmHWM = peak, RssAnon, RssFile)."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
    return out


def in_fresh_process(code: str, *args: str) -> dict:
    """Run `code` in a new interpreter (so caches and allocations do not leak between
    measurements); it must print one JSON object as its last line."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          cwd=ROOT, check=False)
    if done.returncode:
        raise RuntimeError(f"measurement failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def mib(n: float) -> str:
    return f"{n / (1 << 20):.1f}"
