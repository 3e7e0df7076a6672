"""The CPU runtime: `Session`, `CompiledGraph` and the numpy kernel registry."""

from rlx.runtime.session import CompiledGraph, Session, conform_feed

__all__ = ["CompiledGraph", "Session", "conform_feed"]
