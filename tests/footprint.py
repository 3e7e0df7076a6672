"""The disk the suite writes, per test file: measured from the kernel's own count, so that a
test that starts writing gigabytes fails instead of growing `make test` unseen.

`/proc/self/io` counts the bytes this process (and every child process it has waited for:
CLI runs, killed writers, workers) sent towards the disk, `write_bytes`, including what
was written to a temp file deleted before it reached the disk. Each test file may write
`WRITE_BUDGET` bytes; a file that needs more says so with a module-level `WRITE_BUDGET`
and a comment on why. Without `/proc/self/io` (not Linux) nothing is measured.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MIB = 1 << 20
WRITE_BUDGET = 256 * MIB
PROC_IO = Path("/proc/self/io")


class WriteBudgetExceeded(AssertionError):
    """A test file wrote more to disk than its budget allows."""


def bytes_written() -> int | None:
    """This process's `write_bytes` so far (waited-for children included); None when the
    kernel does not say."""
    try:
        text = PROC_IO.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == "write_bytes":
            return int(value)
    return None


_cache_fills = [0]  # bytes written by unmetered() bodies so far, in this process


@contextmanager
def unmetered() -> Iterator[None]:
    """Run a body that fills the suite's shared cache (a real model downloaded, a variant
    built by onnxruntime's quantiser): once per checkout, for whichever test file comes
    first, so not that file's own writes. Building every variant writes ~0.3 GB, the variant
    files themselves (tests/variants.py works in memory)."""
    before = bytes_written()
    try:
        yield
    finally:
        after = bytes_written()
        if before is not None and after is not None:
            _cache_fills[0] += after - before


@contextmanager
def write_budget(name: str, budget: float, written: dict[str, int]) -> Iterator[None]:
    """Run the body; record in `written[name]` what it wrote (cache fills apart) and fail
    when over `budget`."""
    before, filled = bytes_written(), _cache_fills[0]
    yield
    after = bytes_written()
    if before is None or after is None:
        return
    own = after - before - (_cache_fills[0] - filled)
    written[name] = own
    if own > budget:
        raise WriteBudgetExceeded(
            f"{name} wrote {own / MIB:,.0f} MiB to disk, over its budget of "
            f"{budget / MIB:,.0f} MiB (tests/footprint.py): write less (a smaller size that "
            f"still proves the property, one shared artifact per module, a flip made in "
            f"place) or raise the module's WRITE_BUDGET saying why")


def summary(written: dict[str, int], count: int) -> list[str]:
    """The `count` test files that wrote most, largest first, and the total."""
    top = sorted(written.items(), key=lambda item: -item[1])[:count]
    lines = [f"{size / MIB:10,.1f} MiB  {name}" for name, size in top]
    return [*lines, f"{sum(written.values()) / MIB:10,.1f} MiB  in all ({len(written)} files)"]
