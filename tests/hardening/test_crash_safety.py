"""Crash safety of `write_rlx`: writers killed with SIGKILL at random moments leave the
previous file or the complete new one, and their temp files are removed by the next write.

CI kills 20 writers of an 8 MiB artifact (the kills are spread over the measured length of a
write, whatever its size: 50 MiB wrote 1.3 GB to disk for the same steps); `make fuzz` kills
100 writers of 200 MiB.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlx.artifact import parse_rlx, read_rlx, write_rlx, writer
from rlx.artifact.atomic import remove_stale_temps
from tests.hardening import crash, seeds

SMALL = seeds.artifacts()["gather"]


@pytest.mark.slow
def test_killed_writers_leave_the_old_file_or_the_new_one(tmp_path):
    report = crash.run_trials(tmp_path, trials=20, megabytes=8)
    assert report.wrong == []
    assert report.kept_old + report.got_new == 20
    assert report.most_temps <= 1  # each write removes the temp of the writer killed before


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_temps_of_dead_writers_go_with_the_next_write(tmp_path):
    dead, alive = dead_pid(), subprocess.Popen([sys.executable, "-c", "input()"],
                                               stdin=subprocess.PIPE)
    stale = tmp_path / f".other.rlx.rlx-tmp-{dead}-0badc0de"
    running = tmp_path / f".model.rlx.rlx-tmp-{alive.pid}-0badc0de"
    unrelated = tmp_path / ".notes.txt"
    for path in (stale, running, unrelated):
        path.write_bytes(b"partial")
    try:
        write_rlx(tmp_path / "model.rlx", parse_rlx(SMALL))
    finally:
        alive.communicate(b"\n")
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {"model.rlx", running.name, unrelated.name}
    assert remove_stale_temps(tmp_path) == [running]  # its writer has exited now


def test_a_write_that_fails_half_way_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "model.rlx"
    write_rlx(path, parse_rlx(SMALL))
    before = path.read_bytes()

    def broken(data):  # a blob's first bytes, then the disk is full
        yield memoryview(b"RLXBAKE1")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer, "_pieces", broken)
    with pytest.raises(OSError, match="No space"):
        write_rlx(path, parse_rlx(SMALL))
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["model.rlx"]
    read_rlx(path, verify="full")
