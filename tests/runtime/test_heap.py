"""The runtime keeps the memory a run frees for the next run (`rlx.runtime.heap`): counted
as the page faults of repeated runs, in a fresh process each (the setting is process-wide),
and checked against the same runs with `Session(keep_heap=False)`."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlx.runtime.heap import _is_glibc

_FAULTS_PER_RUN = """
import resource
import sys
import numpy as np
from rlx.ir import DType, Graph, Shape
from rlx.ir.ops.elementwise import BinaryOp
from rlx.ir.ops.linalg import MatMul
from rlx.runtime import Session

g = Graph("megabytes")
x = g.input("x", Shape((256, 1024), DType.F32))  # 1 MiB values: above glibc's mmap threshold
h = g.add_node(MatMul(), [x, g.constant(np.eye(1024, dtype=np.float32))])
h = g.add_node(MatMul(), [g.binary(BinaryOp.MUL, h, h), g.constant(np.eye(1024, dtype=np.float32))])
g.set_outputs([g.binary(BinaryOp.ADD, h, x)])
compiled = Session(keep_heap=sys.argv[1] == 'keep').compile(g)
feeds = {"x": np.ones((256, 1024), np.float32)}
for _ in range(3):
    result = compiled.run(feeds)[0]
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    result = compiled.run(feeds)[0]
    del result
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""


def _faults_per_run(keep: bool) -> float:
    out = subprocess.run([sys.executable, "-c", _FAULTS_PER_RUN, "keep" if keep else "leave"],
                         check=True, capture_output=True, text=True).stdout
    return float(out)


@pytest.mark.skipif(not _is_glibc(), reason="the settings are glibc's")
def test_repeated_runs_fault_no_pages_in_unless_told_not_to_keep_them():
    kept, left = _faults_per_run(True), _faults_per_run(False)
    # each run frees and reallocates three 1 MiB values (256 pages each)
    assert left >= 256, left
    assert kept <= 4, kept


_RELEASED = """
from rlx.engines.mapping import anon_rss_bytes
from rlx.runtime.heap import keep_freed_memory, release_free_heap
keep_freed_memory()
before = anon_rss_bytes()
held = [bytes(8 << 10) for _ in range(4096)]  # 32 MiB, from the heap (under the threshold)
held = [b"x" * 100]  # freed: the settings keep it
kept = anon_rss_bytes() - before
release_free_heap()
print(kept, anon_rss_bytes() - before)
"""


@pytest.mark.skipif(not _is_glibc(), reason="the settings are glibc's")
def test_what_a_compile_freed_goes_back_to_the_os_once_it_ends():
    """The kept heap keeps what a load frees (its parsed header, its plan) until a run;
    `release_free_heap`, which a compile ends with, hands it back."""
    out = subprocess.run([sys.executable, "-c", _RELEASED], check=True, capture_output=True,
                         text=True).stdout
    kept, after = map(int, out.split())
    assert kept > 24 << 20 and after < 4 << 20, (kept, after)
