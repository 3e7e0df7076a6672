"""The thread rule's reads of the runnable count, taken as a load goes (`cores.reads_ahead`):
the load's own work spans the gaps between reads, so it sleeps through none of them; a gap
it does not span is still slept, reads of another moment are dropped, and no read outlives
its load. Counted on a fake clock and a fake kernel load line: reads, sleeps, decisions."""

from __future__ import annotations

import io

import pytest

import rlx
from rlx.engines import cores
from tests.engines.conftest import write_mlp


class _Machine:
    """A fake kernel load line whose every read gives the next runnable count (the last
    repeated), and a fake clock that `step`s at each look and moves by each sleep."""

    def __init__(self, monkeypatch, tmp_path, *running: int, step: float) -> None:
        self.running, self.step = running, step
        self.read: list[int] = []  # the runnable count of each read, in order
        self.naps: list[float] = []
        self.now = 0.0
        real_open = open

        def fake_open(path, *args, **kwargs):
            if path != cores.PROC_LOADAVG:
                return real_open(path, *args, **kwargs)
            self.read.append(running[min(len(self.read), len(running) - 1)])
            return io.StringIO(f"0.00 0.00 0.00 {self.read[-1]}/300 4242\n")

        quiet = tmp_path / "no-other-threads"  # this process's own threads: none running
        quiet.mkdir(exist_ok=True)
        monkeypatch.setattr(cores, "PROC_TASKS", str(quiet))
        monkeypatch.setattr(cores, "open", fake_open, raising=False)
        monkeypatch.setattr(cores, "monotonic", self.look)
        monkeypatch.setattr(cores, "sleep", self.nap)
        monkeypatch.setattr(cores, "usable_cores", lambda: 2)

    def look(self) -> float:
        self.now += self.step
        return self.now

    def nap(self, seconds: float) -> None:
        self.naps.append(seconds)
        self.now += seconds


@pytest.mark.parametrize(("running", "threads"), [(1, 2), (3, 1)])
def test_a_load_sleeps_through_no_gap_its_work_spans(tmp_path, monkeypatch, running, threads):
    """Every step of the load takes a gap: it reads as it starts and once the file is
    open, before its engine's rule asks, which reads once more; the 3 reads agree (quiet:
    2 threads; two CPU-bound neighbours: 1), none slept for."""
    mlp = write_mlp(tmp_path / "mlp.rlx")
    machine = _Machine(monkeypatch, tmp_path, running, step=cores.SAMPLE_GAP_S)
    rule = cores.others_load
    asked: list[int] = []  # the reads taken when the rule was asked
    monkeypatch.setattr(cores, "others_load", lambda spare=None: asked.append(
        len(machine.read)) or rule(spare))
    model = rlx.load(mlp.path, engine="numpy", threads=2)
    assert model.runner.threads == threads
    assert asked == [cores.AGREE - 1] and len(machine.read) == cores.AGREE
    assert machine.naps == []


def test_a_load_that_takes_no_time_sleeps_every_gap(tmp_path, monkeypatch):
    """On a clock that never moves, the read once the file is open would come within a gap
    of the first: it is not taken, and the rule sleeps both gaps as it did alone."""
    mlp = write_mlp(tmp_path / "mlp.rlx")
    machine = _Machine(monkeypatch, tmp_path, 1, step=0.0)
    rlx.load(mlp.path, engine="numpy", threads=2)
    assert len(machine.read) == cores.AGREE
    assert machine.naps == pytest.approx([cores.SAMPLE_GAP_S] * 2)


def test_reads_taken_ahead_count_with_the_rules_own(tmp_path, monkeypatch):
    """A neighbour seen in the rule's reads but not in the two taken ahead: the reads
    disagree, so all `SAMPLES` are taken, the two ahead among them, and their median is
    the neighbour's two threads (in six reads of eight)."""
    machine = _Machine(monkeypatch, tmp_path, 1, 1, 3, step=cores.SAMPLE_GAP_S)

    @cores.reads_ahead
    def load() -> float:
        cores.read_ahead()
        return cores.others_load(spare=0.0)

    others = load()
    assert machine.read == [1, 1] + [3] * (cores.SAMPLES - 2) and machine.naps == []
    assert others == 2.0


def test_reads_of_another_moment_are_dropped(tmp_path, monkeypatch):
    """A load longer than `READ_AGE_S` before its rule asks (a large file): the read it
    took as it started is dropped, and the rule reads anew (2 gaps slept)."""
    machine = _Machine(monkeypatch, tmp_path, 3, 1, step=0.0)

    @cores.reads_ahead
    def load() -> float:
        machine.now += 2 * cores.READ_AGE_S
        return cores.others_load(spare=0.0)

    assert load() == 0.0  # the busy first read is not in the average
    assert machine.read == [3] + [1] * cores.AGREE and len(machine.naps) == 2


def test_reads_end_with_their_load(tmp_path, monkeypatch):
    """A load whose engine never asked (one thread: nothing to decide) leaves its reads to
    no one: a later rule, and a read outside any load, see none of them."""
    mlp = write_mlp(tmp_path / "mlp.rlx")
    machine = _Machine(monkeypatch, tmp_path, 3, 3, 1, step=cores.SAMPLE_GAP_S)
    rlx.load(mlp.path, engine="numpy", threads=1)
    assert machine.read == [3, 3]
    cores.read_ahead()  # outside a load: no read
    assert cores.others_load(spare=0.0) == 0.0
    assert machine.read == [3, 3] + [1] * cores.AGREE
