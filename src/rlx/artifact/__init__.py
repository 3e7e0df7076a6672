"""The `.rlx` file on disk: schema-3 writer and validating, memory-mapped reader, relayout,
and RLXENC01 encryption (docs/format.md)."""

from rlx.artifact.reader import parse_rlx, read_rlx
from rlx.artifact.writer import write_rlx

__all__ = ["parse_rlx", "read_rlx", "write_rlx"]
