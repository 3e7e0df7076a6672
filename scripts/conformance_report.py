#!/usr/bin/env python
"""Run the ONNX node conformance suite through rlx and report pass rates.

Prints, per op, passed/total for the three groups (float32 common ops, float32, all),
then the group totals, then where the results and `tests/conformance/xfail.py` disagree.

    python scripts/conformance_report.py                  # the table
    python scripts/conformance_report.py --failures       # ... and every failure's reason
    python scripts/conformance_report.py --update-ratchet # raise ratchet.json to the rates
    python scripts/conformance_report.py --jobs 2         # cases in 2 worker processes
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conformance.harness import GROUPS, load_cases, rates, run_case  # noqa: E402
from tests.conformance.xfail import XFAIL  # noqa: E402

RATCHET = ROOT / "tests" / "conformance" / "ratchet.json"
LABELS = {"float32_common": "f32 common", "float32": "float32", "all": "all"}


def _run_named(name: str) -> tuple[str, str | None]:
    case = next(c for c in load_cases() if c.name == name)
    return name, run_case(case)


def run_all(jobs: int) -> dict[str, str | None]:
    """Case name -> failure reason (None when it passed)."""
    names = [c.name for c in load_cases()]
    if jobs <= 1:
        return dict(_run_named(n) for n in names)
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        return dict(pool.imap_unordered(_run_named, names, chunksize=16))


def _cell(passed: int, total: int) -> str:
    return f"{passed}/{total}" if total else "-"


def print_table(results: dict[str, str | None]) -> None:
    per_op: dict[str, dict[str, list[int]]] = collections.defaultdict(
        lambda: {g: [0, 0] for g in GROUPS})
    for case in load_cases():
        for group in case.groups:
            counts = per_op[case.op][group]
            counts[0] += results[case.name] is None
            counts[1] += 1
    width = max(map(len, per_op)) + 2
    print(f"{'op':<{width}}" + "".join(f"{LABELS[g]:>14}" for g in GROUPS))
    for op in sorted(per_op):
        print(f"{op:<{width}}" + "".join(f"{_cell(*per_op[op][g]):>14}" for g in GROUPS))
    print()
    for group, (passed, total) in rates({n for n, r in results.items() if r}).items():
        print(f"{LABELS[group]:>12}: {passed}/{total} = {100 * passed / total:.1f}%")


def print_disagreements(results: dict[str, str | None], show_all: bool) -> int:
    """Failures the XFAIL table does not list, and listed cases that pass."""
    unexpected = {n: r for n, r in results.items() if r and n not in XFAIL}
    fixed = sorted(n for n in XFAIL if n in results and results[n] is None)
    if show_all:
        print("\nfailures:")
        for name, reason in sorted((n, r) for n, r in results.items() if r):
            print(f"  {name}: {XFAIL.get(name, 'NOT IN XFAIL')}\n      {reason}")
    if unexpected:
        print(f"\n{len(unexpected)} failure(s) not in XFAIL:")
        for name, reason in sorted(unexpected.items()):
            print(f"  {name}: {reason}")
    if fixed:
        print(f"\n{len(fixed)} XFAIL case(s) now pass (delete them): {', '.join(fixed)}")
    return len(unexpected) + len(fixed)


def update_ratchet(results: dict[str, str | None]) -> None:
    """Raise each recorded rate to the measured one (never lower it)."""
    recorded = json.loads(RATCHET.read_text()) if RATCHET.exists() else {}
    for group, (passed, total) in rates({n for n, r in results.items() if r}).items():
        old = recorded.get(group)
        if old is None or passed / total > old["passed"] / old["total"]:
            recorded[group] = {"passed": passed, "total": total,
                               "rate": int(passed / total * 10000) / 10000}
            print(f"ratchet: {group} -> {passed}/{total}")
    RATCHET.write_text(json.dumps(recorded, indent=2) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failures", action="store_true", help="list every failure")
    parser.add_argument("--update-ratchet", action="store_true",
                        help="raise tests/conformance/ratchet.json to the measured rates")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    args = parser.parse_args()
    start = time.perf_counter()
    results = run_all(args.jobs)
    print_table(results)
    problems = print_disagreements(results, args.failures)
    print(f"\n{len(results)} cases in {time.perf_counter() - start:.0f} s")
    if args.update_ratchet:
        update_ratchet(results)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
