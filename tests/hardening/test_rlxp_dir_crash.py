"""Crash safety of dir packages: a writer replacing one is killed with SIGKILL before each of
its file-system steps (every `os.replace`, `os.unlink`, `os.fsync`), and the folder must
then hold exactly the previous package or exactly the new one, opening with
`verify="full"`. Once, members were replaced in place one by one, and a kill between them
left a package that was neither (14 of 40 kills: `IntegrityError`).

The writer is a forked child (no interpreter start per kill), so every kill point of a
write is tried, not a sample; then a complete write must leave no member of an earlier
package and no temp file behind.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import xxhash

from rlx import RlxFile
from rlx.artifact import read_rlxp, write_rlxp
from rlx.artifact.rlxp import layout as L
from rlx.ir import BinaryOp, Graph, Shape

STEPS = ("replace", "unlink", "fsync")  # the os calls a kill lands before


def _package(seed: int, extra: bool) -> RlxFile:
    """Two weights (and a third in `extra`): packages whose members differ in part."""
    rng = np.random.default_rng(seed)
    g = Graph("crash")
    x = g.input("x", Shape((64,)))
    y = g.binary(BinaryOp.MUL, g.constant(rng.standard_normal(64, dtype=np.float32)), x)
    y = g.binary(BinaryOp.ADD, y, g.constant(np.arange(64, dtype=np.float32)))
    if extra:
        y = g.binary(BinaryOp.SUB, y, g.constant(rng.standard_normal(64, dtype=np.float32)))
    g.set_outputs([y])
    return RlxFile.from_baked(g, [])


def _write_killed_at(dest: Path, file: RlxFile, kill_at: int | None) -> int:
    """Write `file` in a forked child killed before its `kill_at`-th step (None: never);
    the number of steps it took, or -1 when it was killed."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: count steps, die at the chosen one
        os.close(read)
        count = [0]

        def counted(real):
            def step(*args, **kwargs):
                count[0] += 1
                if count[0] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                return real(*args, **kwargs)
            return step

        for name in STEPS:
            setattr(os, name, counted(getattr(os, name)))
        try:
            write_rlxp(dest, file, "dir")
            os.write(write, str(count[0]).encode())
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as answer:
        steps = answer.read()
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return -1
    return int(steps)


def _toc_digest(folder: Path) -> str:
    return xxhash.xxh3_128_hexdigest((folder / L.MEMBERS["toc"]).read_bytes())


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def _named(folder: Path) -> set[str]:
    """The files the package's rlx.json (and its index) name, with rlx.json itself."""
    toc = json.loads((folder / L.MEMBERS["toc"]).read_text())
    index = json.loads((folder / toc["index"]["member"]).read_text())
    rows = [toc["graph"], toc["index"], *toc["sidecars"]]
    return {L.MEMBERS["toc"], index["shard"], *(row["member"] for row in rows if row)}


@pytest.mark.parametrize("extra", [False, True], ids=["same-members", "more-members"])
def test_a_killed_dir_writer_leaves_the_old_package_or_the_new_one(tmp_path, extra):
    files = [_package(0, False), _package(1, extra)]
    digests = []
    for i, file in enumerate(files):  # each package's rlx.json, written alone
        write_rlxp(tmp_path / f"alone{i}", file, "dir")
        digests.append(_toc_digest(tmp_path / f"alone{i}"))
    dest = tmp_path / "pkg"
    steps = _write_killed_at(dest, files[0], None)
    steps = max(steps, _write_killed_at(dest, files[1], None))
    current, kept, switched, killed = 1, 0, 0, 0
    for kill_at in range(1, steps + 1):
        new = 1 - current
        killed += _write_killed_at(dest, files[new], kill_at) == -1  # else it had ended
        found = _toc_digest(dest)
        assert found in digests, f"killed at step {kill_at}: rlx.json is neither package's"
        read_rlxp(dest, verify="full")  # every member it names is there, whole
        if digests.index(found) == new:
            switched += 1
        else:
            kept += 1
        current = digests.index(found)
    assert killed >= steps - 1 and kept and switched  # kills before and after the switch
    assert _write_killed_at(dest, files[0], None) > 0  # a complete write cleans up
    assert _files(dest) == _named(dest)
