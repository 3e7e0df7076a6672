"""The suite's disk-write budget (tests/footprint.py) sees what a test writes, its own and
its child processes', and fails a file over budget with a message saying what to do."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests import footprint

ROOT = Path(__file__).resolve().parents[1]
MIB = footprint.MIB


def write_file(folder: Path | str, name: str, size: int) -> None:
    with open(Path(folder) / name, "wb") as out:
        out.write(os.urandom(size))
        out.flush()
        os.fsync(out.fileno())


@pytest.fixture
def on_disk():
    """A folder in the repository, on a disk (tmp_path may be a tmpfs, where no byte is
    counted as written)."""
    with tempfile.TemporaryDirectory(dir=ROOT, prefix=".footprint-") as folder:
        yield Path(folder)


def test_bytes_written_counts_this_process_and_its_children(on_disk):
    assert sys.platform != "linux" or footprint.bytes_written() is not None
    before = footprint.bytes_written()
    write_file(on_disk, "own", 2 * MIB)
    middle = footprint.bytes_written()
    code = f"from tests.test_footprint import write_file; write_file({str(on_disk)!r}, " \
           f"'child', {3 * MIB})"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
    after = footprint.bytes_written()
    assert 2 * MIB <= middle - before < 3 * MIB
    assert 3 * MIB <= after - middle < 4 * MIB


def test_a_file_over_its_budget_fails_naming_it_and_its_size(on_disk):
    written: dict[str, int] = {}
    with footprint.write_budget("tests/small.py", 4 * MIB, written):
        write_file(on_disk, "a", 1 * MIB)
    assert MIB <= written["tests/small.py"] < 2 * MIB
    over = r"tests/big.py wrote 2 MiB to disk, over its budget of 1 MiB"
    with pytest.raises(footprint.WriteBudgetExceeded, match=over), \
            footprint.write_budget("tests/big.py", 1 * MIB, written):
        write_file(on_disk, "b", 2 * MIB)
    assert written["tests/big.py"] >= 2 * MIB


def test_the_summary_lists_the_largest_writers_first():
    lines = footprint.summary({"a": 1 * MIB, "b": 3 * MIB, "c": 2 * MIB}, 2)
    assert [line.split("MiB")[1].strip() for line in lines] == ["b", "c", "in all (3 files)"]
    assert [line.split()[0] for line in lines] == ["3.0", "2.0", "6.0"]


def test_a_shared_cache_fill_is_not_counted_against_the_file_that_happens_to_run_first(
        on_disk):
    written: dict[str, int] = {}
    with footprint.write_budget("tests/first.py", 2 * MIB, written):
        with footprint.unmetered():  # a model downloaded, a variant built: once a checkout
            write_file(on_disk, "cache", 3 * MIB)
        write_file(on_disk, "own", 1 * MIB)
    assert MIB <= written["tests/first.py"] < 2 * MIB
