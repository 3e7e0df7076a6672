"""The `rlx-bake` command (also `python -m rlx`): one module per command family, each thin
over the library. `app` owns the parser and the exit codes, `ui` the output and passwords."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run `rlx-bake` with `argv` (default: the process's arguments); the exit code."""
    from rlx.cli.app import main as run

    return run(argv)
