"""Control flow and recurrences: If, Loop, Scan (subgraphs as attributes), LSTM, GRU."""

from __future__ import annotations

__all__: list[str] = []
