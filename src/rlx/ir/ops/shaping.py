"""Shape and indexing ops: Reshape, Transpose, Concat, Slice, Gather, Pad, Split, ..."""

from __future__ import annotations

__all__: list[str] = []
