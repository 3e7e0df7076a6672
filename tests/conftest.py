"""Suite-wide settings: every pass pipeline verifies the graph after each step
(rlx.passes.pipeline), so a pass that builds a malformed graph is named where it did it."""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlx.passes.pipeline import verifying_passes
from tests import footprint

WRITTEN = pytest.StashKey[dict[str, int]]()


@pytest.fixture(autouse=True)
def _verified_passes() -> Iterator[None]:
    """Every test's pipelines verify the graph after each pass (`verifying_passes`)."""
    with verifying_passes():
        yield


# engines keep caches (auto's choice, onnxruntime's prepacked models) in the user's cache
# folder: the suite (and the processes it starts) keeps its own, never the user's folder,
# emptied after each test file and deleted when the suite ends
SUITE_CACHE: Path | None = None
if "RLX_TEST_KEEP_CACHE" not in os.environ:
    import atexit
    import tempfile

    SUITE_CACHE = Path(tempfile.mkdtemp(prefix="rlx-test-cache-"))
    os.environ["XDG_CACHE_HOME"] = str(SUITE_CACHE)
    atexit.register(shutil.rmtree, SUITE_CACHE, ignore_errors=True)


@pytest.fixture(scope="module", autouse=True)
def _cache_per_test_file() -> Iterator[None]:
    """What one test file's loads cached (prepacked copies of its models, engine choices)
    is of no use to the next: kept to the end, it held over a gigabyte of disk and of page
    cache, which a memory cgroup counts."""
    yield
    if SUITE_CACHE is not None:
        for entry in SUITE_CACHE.iterdir():
            shutil.rmtree(entry, ignore_errors=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--disk-writes", type=int, default=0, metavar="N",
                     help="list the N test files that wrote most to disk (tests/footprint.py)")


def pytest_configure(config: pytest.Config) -> None:
    config.stash[WRITTEN] = {}


@pytest.fixture(scope="module", autouse=True)
def _write_budget(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test file writes at most its `WRITE_BUDGET` to disk (tests/footprint.py)."""
    budget = getattr(request.module, "WRITE_BUDGET", footprint.WRITE_BUDGET)
    if _runs_huge(request):
        budget = math.inf
    with footprint.write_budget(request.node.nodeid, budget, request.config.stash[WRITTEN]):
        yield


def _runs_huge(request: pytest.FixtureRequest) -> bool:
    """Whether this file's selected tests include a `huge` one (`make test-huge`): those
    write gigabytes by design, so the budget, which keeps `make test` lean, does not apply."""
    return any(item.module is request.module and item.get_closest_marker("huge")
               for item in request.session.items)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    count, written = config.getoption("--disk-writes"), config.stash[WRITTEN]
    if count and written:
        terminalreporter.write_sep("=", f"largest disk writers (top {count} test files)")
        for line in footprint.summary(written, count):
            terminalreporter.write_line(line)
