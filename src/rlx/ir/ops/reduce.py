"""Reductions and scans: Reduce, ArgMax/ArgMin, CumSum, TopK."""

from __future__ import annotations

__all__: list[str] = []
